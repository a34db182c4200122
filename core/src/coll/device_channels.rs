//! Device channels: NCCL-style stream-ordered point-to-point between the ranks of a
//! communicator ([`Communicator::device_channels`], [`DeviceChannels`]).
//!
//! NCCL's `ncclSend`/`ncclRecv` have no tags: the k-th send from rank a to rank b on a
//! communicator matches the k-th receive of b from a, and the two must have the same
//! size. That rule lets a pair of ranks on one node move a small message with no host
//! in the path at all: one kernel on each rank's stream, synchronizing through flags in
//! device memory, as NCCL does. [`Communicator::send_device_on_stream`] cannot: a
//! message with a tag may be received by any receive (blocking, on the host), so
//! every one goes through the host's matching (a proxy thread and a GPU → host → GPU
//! round of notifications: ~46–50 µs one way on an H100 under MPS, against 11–14 µs
//! for the blocking device calls).
//!
//! How: [`Communicator::device_channels`] (collective) makes, for every pair of ranks
//! on one node and each direction, a communicator of those two ranks (`create_group`,
//! pairs in the same order on every rank, so the creations cannot wait on each other
//! in a cycle) and sets up its peer-memory path (`coll/device_peer.rs`: a workspace of flags and two
//! scratch slots per rank, mapped by the other through CUDA IPC or peer access). The
//! k-th send from a to b is then the k-th broadcast from a on the a → b communicator,
//! in its scratch form: a's kernel copies the buffer into its slot and enters the barrier;
//! b's kernel enters it, checks that both calls have the same fingerprint (size and
//! direction: a mismatch is an error on both ranks, not wrong data), and copies from
//! a's slot (`ld.global.cg` through the mapping) into its buffer. Each call is one
//! kernel launch on the caller's stream; the host does not wait.
//!
//! Messages larger than one scratch slot (`RANKWIRE_GPU_PEER_SCRATCH`, 4 MiB by
//! default) and pairs without a peer-memory path (ranks on different nodes, or sharing
//! a GPU without MPS: the verdict of `coll/device_peer.rs`) take the host route, as the
//! stream-ordered collectives do off their peer path: the call synchronizes the stream
//! and runs a blocking device send or receive on a private duplicate of the
//! communicator (tag 0: non-overtaking keeps the NCCL order), so ordering is kept but
//! the host waits, and a pair that both send first waits forever, as with blocking
//! calls. (Not the stream proxy of [`Communicator::send_device_on_stream`]: on an H100
//! its operations hung when both ranks had a send and a receive to each other posted
//! at once, and without MPS even in blocking order,
//! `benches/results/gpu-2026-12-06k/`.) A send and its receive take the same route
//! because the route depends only on the pair and the size.
//!
//! Sizes must match (NCCL's rule). Checked where both sizes fit one scratch slot: the
//! kernels' fingerprints differ and both ranks fail ([`DeviceChannels::check_errors`]).
//! Where one size fits and the other does not, the two ranks take different routes:
//! one blocks on the host, the other's kernel waits until `RANKWIRE_GPU_PEER_TIMEOUT`
//! (600 s by default) and fails. On the host route a receive larger than the send fails
//! on the receiver only, and a zero-byte call is nothing on its side, so a zero-byte
//! send against a non-empty receive shifts the matching to the next message.

use std::sync::{Arc, Mutex};

use rankwire_gpu::Stream;

use crate::coll::device::DevRaw;
use crate::coll::device_peer::{self, PeerColl, PeerGroup};
use crate::comm::Communicator;
use crate::error::{Error, Result};

/// Tag of the pair communicators' `create_group` calls.
const PAIR_TAG: i32 = 0x5043; // "PC"

/// One direction between this rank and a peer on this node with a peer-memory path:
/// a 2-rank communicator (ranks in the order of the parent communicator) whose every
/// kernel is a broadcast from the sender, and its peer group.
struct Pair {
    comm: Communicator,
    group: Arc<Mutex<PeerGroup>>,
    /// The sender's rank in `comm` (0 or 1).
    root: usize,
}

/// Stream-ordered, NCCL-style point-to-point of device memory between the ranks of a
/// communicator (see `core/src/coll/device_channels.rs` for the protocol). Made by
/// [`Communicator::device_channels`]; used through [`DeviceChannels::send_on_stream`]
/// and [`DeviceChannels::recv_on_stream`].
///
/// Matching is NCCL's, not MPI's: no tags; the k-th send from rank a to rank b matches
/// the k-th receive of b from a, and both must give the same number of bytes.
pub struct DeviceChannels {
    /// Rank in the parent communicator.
    me: usize,
    /// Ranks of the parent communicator.
    size: usize,
    /// The CUDA device the channels were set up for.
    device: i32,
    /// Per parent rank: the direction to it, with a peer-memory path, if any.
    to: Vec<Option<Pair>>,
    /// Per parent rank: the direction from it, with a peer-memory path, if any.
    from: Vec<Option<Pair>>,
    /// The host route: a duplicate of the parent, tag 0.
    other: Communicator,
}

impl std::fmt::Debug for DeviceChannels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceChannels")
            .field("rank", &self.me)
            .field("size", &self.size)
            .field("device", &self.device)
            .field("peer_memory", &self.peer_memory_ranks())
            .finish()
    }
}

impl Communicator {
    /// NCCL-style stream-ordered point-to-point channels to every rank of this
    /// communicator, for device memory on CUDA device `device` (this process's
    /// ordinal, as [`rankwire_gpu::Stream::device`] reports it). Collective over this
    /// communicator: every rank calls it, each with its own device.
    ///
    /// Ranks on this node whose GPUs the peer-memory verdict accepts (one GPU with
    /// MPS, or GPUs with peer access; `RANKWIRE_GPU_PEER`) get the kernel route: two
    /// 2-rank communicators each (one per direction: two context ids), each with a
    /// device workspace of two scratch slots (`RANKWIRE_GPU_PEER_SCRATCH` bytes each,
    /// 4 MiB by default, so about 16 MiB of device memory per such peer) mapped by
    /// the peer. [`DeviceChannels::peer_memory_ranks`] says which.
    ///
    /// # Errors
    /// [`Error::Usage`] after finalize began or if context ids ran out;
    /// [`Error::Connection`] if a peer died; [`Error::Gpu`] where this build has no
    /// CUDA support or no driver is loaded.
    pub fn device_channels(&self, device: i32) -> Result<DeviceChannels> {
        self.check_live()?;
        if !rankwire_gpu::available() {
            return Err(Error::Gpu(
                "device_channels: no usable GPU (this build has no CUDA support or the \
                 driver is not loaded); fix: run on a GPU machine, or use \
                 send_device/recv_device"
                    .into(),
            ));
        }
        let (me, size) = (self.rank(), self.size());
        let other = self.dup()?;
        let node = self.split_shared()?;
        let mut mine = vec![0u64; node.size()];
        node.allgather(&[me as u64], &mut mine)?;
        let local: Vec<usize> = mine.iter().map(|&r| r as usize).collect();
        let group = self.group();
        let mut to: Vec<Option<Pair>> = (0..size).map(|_| None).collect();
        let mut from: Vec<Option<Pair>> = (0..size).map(|_| None).collect();
        // Pairs in ascending order of (lower rank, higher rank) on every rank, each
        // with its two directions (lower → higher first): the lowest pair not yet made
        // always has both members ready for it.
        let mut sorted = local.clone();
        sorted.sort_unstable();
        for (i, &a) in sorted.iter().enumerate() {
            for &b in &sorted[i + 1..] {
                if a != me && b != me {
                    continue;
                }
                let peer = if a == me { b } else { a };
                for root in [0, 1] {
                    let comm = self
                        .create_group(&group.incl(&[a, b])?, PAIR_TAG)?
                        .ok_or_else(|| Error::usage("device_channels: not a pair member"))?;
                    let Some(g) = comm.peer_group(device)? else {
                        tracing::info!(
                            "device channel with rank {peer} takes the host route: {}",
                            comm.peer_memory_status().unwrap_or_default()
                        );
                        continue;
                    };
                    // Every pair kernel of this node may be resident at once (a send
                    // and a receive per pair on separate streams): size the grids so
                    // that all of them fit, or blocks would spin on partners that are
                    // never scheduled. The same value on both ranks of the pair.
                    device_peer::widen_sharing(&g, 2 * sorted.len());
                    let pair = Pair {
                        comm,
                        group: g,
                        root,
                    };
                    // Rank `root` of the pair (a = 0, b = 1) sends.
                    if (root == 0) == (a == me) {
                        to[peer] = Some(pair);
                    } else {
                        from[peer] = Some(pair);
                    }
                }
            }
        }
        Ok(DeviceChannels {
            me,
            size,
            device,
            to,
            from,
            other,
        })
    }
}

impl DeviceChannels {
    /// The parent communicator's ranks reached through peer memory (kernels only, no
    /// host in the path for messages up to one scratch slot), in rank order.
    pub fn peer_memory_ranks(&self) -> Vec<usize> {
        (0..self.size)
            .filter(|&r| self.to[r].is_some() && self.from[r].is_some())
            .collect()
    }

    fn check(&self, what: &str, peer: usize, stream: &Stream) -> Result<()> {
        if peer >= self.size || peer == self.me {
            return Err(Error::usage(format!(
                "{what}: peer {peer} is {} (this rank is {} of {}); fix: pass another \
                 rank of the communicator",
                if peer == self.me {
                    "this rank"
                } else {
                    "out of range"
                },
                self.me,
                self.size
            )));
        }
        if stream.device() != self.device {
            return Err(Error::usage(format!(
                "{what}: the stream belongs to device {}, the channels to device {}; fix: \
                 make the channels with the stream's device",
                stream.device(),
                self.device
            )));
        }
        Ok(())
    }

    /// Enqueue one broadcast from the sender of `pair` if it fits the scratch form;
    /// `false` if the message takes the host route.
    ///
    /// # Safety
    /// `ptr` valid for `bytes` until the stream's work has completed.
    unsafe fn pair_bcast(
        what: &str,
        pair: &Pair,
        ptr: u64,
        bytes: usize,
        stream: &Stream,
    ) -> Result<bool> {
        let c = PeerColl::Bcast {
            n: bytes,
            root: pair.root,
        };
        rankwire_gpu::peer_prepare(stream.device(), None)
            .map_err(|e| Error::Gpu(format!("{what}: compiling the peer-memory kernels: {e}")))?;
        // SAFETY: the caller's contract. `None`: the message does not fit one scratch
        // slot (the group is never busy otherwise: only these calls use it, one launch
        // after the other), the same answer on both ranks.
        if unsafe { device_peer::launch_on_stream(&pair.group, what, c, None, ptr, ptr, stream)? }
            .is_none()
        {
            return Ok(false);
        }
        pair.comm.st.next_seq();
        Ok(true)
    }

    /// The common start of a send or receive: checks the arguments, then either
    /// enqueues the message on the kernel route (`true`: done) or, for the host route,
    /// synchronizes `stream` (`false`: the caller makes the blocking call). Zero bytes
    /// is done at once.
    ///
    /// # Safety
    /// `ptr` valid for `bytes` until the stream's work has completed.
    unsafe fn kernel_route(
        &self,
        what: &str,
        pairs: &[Option<Pair>],
        ptr: u64,
        bytes: usize,
        peer: usize,
        stream: &Stream,
    ) -> Result<bool> {
        self.check(what, peer, stream)?;
        if bytes == 0 {
            return Ok(true);
        }
        if let Some(p) = &pairs[peer] {
            // SAFETY: the caller's contract.
            if unsafe { Self::pair_bcast(what, p, ptr, bytes, stream)? } {
                return Ok(true);
            }
        }
        stream
            .synchronize()
            .map_err(|e| Error::Gpu(format!("{what}: synchronizing the stream: {e}")))?;
        Ok(false)
    }

    /// Send `bytes` bytes of device memory at `ptr` to `peer`, enqueued on `stream`:
    /// the send reads the buffer after the work enqueued on `stream` before the call,
    /// and work enqueued after it waits until the buffer may be overwritten. Matches
    /// the receive of `peer` from this rank in the same position (NCCL's rule), which
    /// must give the same `bytes`. Zero bytes is nothing (the receive of zero bytes
    /// too).
    ///
    /// On the kernel route (a peer in [`DeviceChannels::peer_memory_ranks`], `bytes`
    /// up to one scratch slot) the call returns without waiting, and the send
    /// completes on the stream when the peer's receive has started (the two kernels
    /// meet at a barrier): ranks that send to each other on one stream each (a pair,
    /// or a ring of any length) must order sends and receives as blocking calls
    /// need, or use a stream for sends and another for receives. On the host route the call
    /// synchronizes `stream` and returns when the send has completed, as a blocking
    /// send (see the module).
    ///
    /// # Safety
    /// `ptr` must be device memory of the channels' device, valid for reads of `bytes`
    /// bytes until the send has completed on `stream`; `stream` must belong to that
    /// device's primary context (see [`rankwire_gpu::Stream::from_raw`]).
    ///
    /// # Errors
    /// [`Error::Usage`] for a peer out of range or this rank, or a stream of another
    /// device; [`Error::Collective`] when an earlier kernel of this pair failed (a
    /// barrier timeout: the peer did not make the matching call; or a size mismatch:
    /// "called ... with other arguments"); the host route's errors as
    /// [`Communicator::send_device`].
    pub unsafe fn send_on_stream(
        &self,
        ptr: u64,
        bytes: usize,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        const W: &str = "DeviceChannels::send_on_stream";
        // SAFETY: the caller's contract.
        if unsafe { self.kernel_route(W, &self.to, ptr, bytes, peer, stream)? } {
            return Ok(());
        }
        self.other.send_device(&DevRaw(ptr, bytes), peer, 0)
    }

    /// Receive `bytes` bytes from `peer` into device memory at `ptr`, enqueued on
    /// `stream`: the receive writes the buffer after the work enqueued before the
    /// call, and work enqueued after it sees the data. Returns without waiting on the
    /// kernel route; on the host route it synchronizes `stream` and returns when the
    /// data has arrived (see [`DeviceChannels::send_on_stream`]). Matches the send of
    /// `peer` to this rank in the same position, which must give the same `bytes`
    /// (what a different size does: see the module; where both fit one scratch slot,
    /// an error on both ranks from [`DeviceChannels::check_errors`] or the pair's next
    /// call).
    ///
    /// # Safety
    /// `ptr` must be device memory of the channels' device, valid for writes of
    /// `bytes` bytes and not accessed otherwise until the receive has completed on
    /// `stream`; `stream` as for [`DeviceChannels::send_on_stream`].
    ///
    /// # Errors
    /// As [`DeviceChannels::send_on_stream`].
    pub unsafe fn recv_on_stream(
        &self,
        ptr: u64,
        bytes: usize,
        peer: usize,
        stream: &Stream,
    ) -> Result<()> {
        const W: &str = "DeviceChannels::recv_on_stream";
        // SAFETY: the caller's contract.
        if unsafe { self.kernel_route(W, &self.from, ptr, bytes, peer, stream)? } {
            return Ok(());
        }
        let st = self.other.recv_device(&mut DevRaw(ptr, bytes), peer, 0)?;
        if st.len_bytes != bytes {
            return Err(Error::usage(format!(
                "{W}: rank {peer} sent {} bytes, this receive expected {bytes}; fix: pass \
                 the same size to a send and its receive (NCCL's rule)",
                st.len_bytes
            )));
        }
        Ok(())
    }

    /// The first error of the kernel route's operations enqueued so far (the host
    /// route returns its errors from the call itself): reads the kernels' status
    /// words. Call it after synchronizing the streams to learn whether the kernels'
    /// operations succeeded (a kernel that failed left its receive buffer unwritten).
    ///
    /// # Errors
    /// [`Error::Collective`] naming the pair's failure (barrier timeout: the peer did
    /// not make the matching call within `RANKWIRE_GPU_PEER_TIMEOUT`; or its call had
    /// another size).
    pub fn check_errors(&self) -> Result<()> {
        for (r, p) in self.to.iter().enumerate() {
            if let Some(p) = p {
                device_peer::check_group(&p.group, &format!("device channel to rank {r}"))?;
            }
        }
        for (r, p) in self.from.iter().enumerate() {
            if let Some(p) = p {
                device_peer::check_group(&p.group, &format!("device channel from rank {r}"))?;
            }
        }
        Ok(())
    }
}
