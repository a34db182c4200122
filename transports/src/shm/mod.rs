//! The shared-memory transport: one single-producer/single-consumer byte ring per
//! (sender → receiver) pair of ranks on the same node, in POSIX shared memory, driven
//! from the caller's thread (no threads, no locks).
//!
//! # Lifecycle
//! 1. [`ShmTransport::new`] (every rank of the job calls it, because it fences):
//!    - creates this rank's segment `/rankwire-<job>-<rank>-shm` (`shm_open` with
//!      `O_CREAT|O_EXCL`, mode 0600; it shows up as `/dev/shm/rankwire-<job>-<rank>-shm`),
//!      sized for one inbound ring per local peer and allocated up front with
//!      `posix_fallocate`, so a full `/dev/shm` is a clear error here instead of a
//!      `SIGBUS` on first touch;
//!    - publishes the name under `shm-<rank>` and its pid under `shm-pid-<rank>`, and
//!      calls [`Exchange::fence`];
//!    - maps every local peer's segment and checks its header, then fences again;
//!    - **unlinks its own segment** at once: every peer has mapped it, so nothing stays
//!      in `/dev/shm` even if ranks are SIGKILLed later. (The launcher also removes
//!      `/dev/shm/rankwire-<job>-*` at job end, for a rank killed between the two
//!      fences.)
//!
//!    A failure anywhere still takes part in both fences before returning the error,
//!    so the other ranks get a clear error too instead of a bootstrap timeout.
//! 2. The progress engine calls [`Transport::send`] and [`Transport::poll`];
//!    [`Transport::wait_activity`] sleeps on the futex doorbell when it decides to sleep.
//! 3. After the core's finalize fence: [`ShmTransport::set_quiesced`], then drop (which
//!    unmaps everything; the names are long gone).
//!
//! # Segments and rings
//! Layout in `segment.rs` (header, doorbell, slot table) and `ring.rs` (ring control
//! block, records, wrap-around by two-piece copies, index checks). The ring from sender
//! `s` to receiver `r` lives in `r`'s segment at slot `i`, where `i` is the position of
//! `s` in `r`'s local peers sorted ascending (`r` excluded); `r` writes that list into
//! its segment header and `s` looks itself up there, so both agree by construction.
//! Ring size: [`ShmConfig::ring_bytes_for`]: by default derived from the number of
//! local ranks so that a segment stays near 4 MiB (1 MiB rings up to 4 local ranks,
//! 32 KiB at 128, 16 KiB from 129 on), or `RANKWIRE_SHM_RING_BYTES` rounded up to a
//! power of two. The largest frame payload is a quarter of the smallest
//! ring of this rank and its local peers ([`KindCaps::max_frame_payload_bytes`]); the
//! core splits rendezvous data to that size.
//!
//! # Sending and back-pressure
//! `send` copies the envelope, header and payload straight into the peer's ring (the
//! only copy on the send side) when the record fits, and answers
//! [`SendOutcome::Busy`], taking nothing, when it does not. A payload over the frame
//! limit is [`TransportError::Unsupported`] (exactly the limit is accepted). Frames to
//! one peer stay in order; the data is in shared memory once `send` returned `Sent`, so
//! [`Transport::is_flushed`] is always true.
//!
//! # Receiving
//! [`Transport::next_frame`] looks at the rings in turn (one load of the stamp word at
//! our consumer index, ring.rs) and lends the first published frame in place: the
//! header copied into a private buffer, the payload as pieces of the ring, so the core
//! copies it once, straight into the receive buffer. [`Transport::consume_frame`] frees
//! the record. `poll` copies whatever is still published into [`Event::Recv`]s (at most
//! one ring's worth of bytes per ring and call, so a fast sender cannot keep it there)
//! and frees each record at once. Every length and index read from shared memory is
//! checked before use: a bad one is reported once as [`Event::PeerFailed`] with
//! [`TransportError::Malformed`] naming the numbers, and that ring is not read again.
//! Nothing on this path panics or allocates more than one bounded frame.
//!
//! # Single copy
//! [`Transport::get`] / [`Transport::put`] / [`Transport::register`] move host memory
//! between processes of the node in one copy by cross-memory attach
//! (`process_vm_readv(2)` / `process_vm_writev(2)`, [`cma`]): the descriptor is
//! [`RemoteMem::HostCma`] (pid and address, nothing pinned) and every operation is
//! done on return. The host caps say `get`/`put` while single copy is allowed
//! ([`ShmTransport::set_cma_allowed`]; the core turns it off with `RANKWIRE_CMA=0`).
//!
//! # Sleeping: the futex doorbell
//! Each segment header holds a `bell` word and a `sleeping` flag, both written by
//! several processes, so the futex is not `FUTEX_PRIVATE`. The owner, in
//! `wait_activity`:
//! 1. reads `seq = bell`;
//! 2. sets `sleeping = 1`, then a SeqCst fence;
//! 3. re-checks every ring (data to read, or room freed in a ring it is blocked on);
//!    if there is work, clears `sleeping` and returns;
//! 4. `futex(FUTEX_WAIT, bell, seq, timeout)`, then clears `sleeping`.
//!
//! A sender, after publishing a frame (Release store of the ring's tail): a SeqCst
//! fence, then if `sleeping != 0`, `bell += 1` and `futex(FUTEX_WAKE)`.
//!
//! No wake-up is lost: both sides store, fence, then load, so either the owner's
//! re-check (3) sees the new tail, or the sender sees `sleeping == 1`. In the latter case
//! the sender's `bell += 1` either happens before the owner's `FUTEX_WAIT`, which then
//! returns at once because `bell != seq`, or after it started, and the wake finds it.
//! A sender pays a fence and a load per frame, and a syscall only while the receiver
//! sleeps.
//!
//! The same doorbell wakes a sender blocked on a full ring (as epoll's `EPOLLOUT` does
//! for TCP): after `send` answered `Busy`, the ring's `waiting` flag is set (ring.rs,
//! "Waking a blocked sender"); a receiver that frees space in such a ring rings the
//! sender's doorbell, and the sender's re-check (3) also looks for freed space.
//! Measured: without this, a streaming sender slept out the engine's 1 ms block every
//! time the ring filled (1.7 GB/s instead of 7-9 GB/s for 1 MiB messages on the VM).
//!
//! Sleeps are capped at [`ShmConfig::liveness_interval`] so that a peer's death is
//! noticed even without traffic. A transport without local peers returns from
//! `wait_activity` at once (nothing can arrive; let another transport sleep).
//!
//! # Peer death
//! Shared memory has no end-of-stream. `poll` checks, at most once per
//! [`ShmConfig::liveness_interval`] (default 100 ms; the clock is read every
//! 256 polls and after every sleep, so the spinning poll loop stays free of clock
//! reads), whether each peer's process (pid from `shm-pid-<rank>`) is
//! still alive: one `poll(2)` over pidfds (`kill(pid, 0)` where `pidfd_open` is
//! missing). A peer that exited is reported once as [`Event::PeerFailed`] with
//! [`TransportError::PeerLost`] (`"process exited"`), after every frame it had
//! published; `send` to it then fails with `PeerLost`. After
//! [`ShmTransport::set_quiesced`] an exit is expected and not reported.
//!
//! # Threads
//! None are started. A `ShmTransport` is `Send` and is driven by one thread at a time.

pub mod cma;
mod config;
mod ring;
mod segment;
mod sys;

use std::fmt;
use std::time::{Duration, Instant};

use tracing::debug;

pub use config::{
    ConfigError, DEFAULT_RING_BYTES, ENV_RING_BYTES, MAX_RING_BYTES, MIN_RING_BYTES,
    SEGMENT_BUDGET_BYTES, ShmConfig,
};

use crate::{
    Caps, Event, Exchange, InFrame, InPayload, KindCaps, LocalBuf, MAX_HEADER_BYTES, OpId, OpStart,
    PeerInfo, Reach, Registration, RemoteMem, SendOutcome, Transport, TransportError,
};
use cma::Cma;
use ring::{Consumer, HeaderCopy, Producer, Record};
use segment::{Mapping, OwnSegment};
use sys::Watch;

/// Messages up to this many bytes go eagerly over shm (capped at the frame limit).
///
/// How it was chosen (`eager_limit_measurement` in `tests/shm.rs`, release build, two
/// threads, min of 7 runs): over shm the payload is copied into the ring and out again
/// whether it goes eagerly or by rendezvous (no single-copy path yet), so rendezvous only
/// saves the receiver's extra copy out of the unexpected-message buffer, and costs a
/// round trip of two small frames (Rts, Cts) on every message. Eager is the better bet
/// while `memcpy(size)` stays at or below that round trip:
///
/// | machine                         | Rts+Cts round trip | memcpy 16 KiB | 32 KiB  | 64 KiB  |
/// |---------------------------------|--------------------|---------------|---------|---------|
/// | 2-core CI VM (load ~1-2)        | 0.6-1.0 us         | 0.37 us       | 0.66 us | 1.24 us |
/// | 16-core host, quiet             | 0.72 us            | 0.17 us       | 0.97 us | 1.90 us |
///
/// The break-even lies between 32 and 64 KiB on the VM and between 16 and 32 KiB on the
/// quiet host; the core's own Rts/Cts bookkeeping (not in these figures) makes
/// rendezvous dearer still. 32 KiB also lets a 1 MiB ring hold 31 eager messages.
pub const SHM_EAGER_LIMIT_BYTES: usize = 32 * 1024;

const NAME: &str = "shm";
/// Polls between clock reads for the liveness check (a poll is tens of nanoseconds, so
/// this reads the clock every few microseconds at most; a sleep forces the next read).
const POLLS_PER_CLOCK_READ: u32 = 256;

/// The shared-memory transport of one rank (module doc: lifecycle, rings, doorbell,
/// failures).
pub struct ShmTransport {
    rank: u32,
    caps: Caps,
    max_payload: usize,
    ring_bytes: usize,
    /// Local peers, ascending by rank.
    peers: Vec<Peer>,
    /// This rank's segment (inbound rings, doorbell); `None` without local peers.
    own: Option<OwnSegment>,
    /// Events produced outside `poll` (failures seen by `send`), delivered by `poll`.
    pending: Vec<Event>,
    quiesced: bool,
    liveness_interval: Duration,
    last_liveness: Instant,
    polls_since_clock: u32,
    /// Header of the frame lent by `next_frame` (a private copy).
    scratch: HeaderCopy,
    /// The frame `next_frame` lent: peer index and record.
    lent: Option<(usize, Record)>,
    /// Peer index where `next_frame` starts looking (round robin).
    cursor: usize,
    /// Frames are taken with `next_frame` only; `poll` leaves them in the rings.
    lend_frames: bool,
    /// Single copy of host memory (`get`/`put`/`register`).
    cma: Cma,
    /// This process's node identity, where known ([`ShmTransport::set_node_id`]).
    node_id: Option<String>,
}

// One local peer: the ring we write (in its segment), the ring we read (in ours), and
// how we watch its process. `exited` is set by the liveness check and acted on after
// the ring has been drained.
struct Peer {
    rank: u32,
    tx: Producer,
    rx: Consumer,
    watch: Watch,
    state: PeerState,
    exited: bool,
    /// Records were consumed in this poll round / in the one before, and the producer
    /// has not been checked for being blocked since (see `wake_blocked_producer`).
    freed: bool,
    freed_prev: bool,
    /// The peer's segment (`tx` points into it; declared after it so it is unmapped last,
    /// though nothing dereferences the ring pointers on drop).
    map: Mapping,
}

// `Failed` keeps the error for later `send`s; `Closed` is a peer that exited after
// `set_quiesced` (not a failure).
enum PeerState {
    Open,
    Failed(TransportError),
    Closed,
}

impl ShmTransport {
    /// Set up the shared-memory rings of rank `my_rank` with the ranks in `local_peers`
    /// (world ranks on the same node; `my_rank` and duplicates are ignored). `job_id`
    /// names the segments (letters, digits, `.`, `_`, `-`; at most 200 bytes). Every
    /// rank of the job must call this, with or without local peers: it calls
    /// [`Exchange::fence`] twice. With no local peers the transport reaches nobody.
    ///
    /// # Errors
    /// - [`TransportError::Os`]: a bad `job_id`, or creating this rank's segment
    ///   (`shm_open`, `ftruncate`, `posix_fallocate`, `mmap`) or the bootstrap exchange
    ///   failed.
    /// - [`TransportError::Connect`]: a local peer's segment is missing, malformed or
    ///   has no ring for us (the peer does not list us as local), or its pid is invalid.
    pub fn new(
        my_rank: u32,
        job_id: &str,
        config: ShmConfig,
        ex: &mut dyn Exchange,
        local_peers: &[u32],
    ) -> Result<Self, TransportError> {
        let mut peer_ranks: Vec<u32> = local_peers
            .iter()
            .copied()
            .filter(|&p| p != my_rank)
            .collect();
        peer_ranks.sort_unstable();
        peer_ranks.dedup();
        let ring_bytes = config.ring_bytes_for(peer_ranks.len() + 1);
        let name = segment_name(job_id, my_rank);

        // 1. Create and publish. An error is kept until both fences are done.
        let mut first_err: Option<TransportError> = check_job_id(job_id).err();
        let mut own = None;
        if first_err.is_none() && !peer_ranks.is_empty() {
            match OwnSegment::create(&name, my_rank, &peer_ranks, ring_bytes) {
                Ok(seg) => own = Some(seg),
                Err((call, reason)) => first_err = Some(os(call, reason)),
            }
        }
        let published = match (&own, &first_err) {
            (Some(_), _) => name.clone(),
            (None, Some(e)) => format!("!{e}"),
            (None, None) => String::new(),
        };
        let pid = std::process::id();
        let puts = ex
            .put(&format!("shm-pid-{my_rank}"), pid.to_string().as_bytes())
            .and_then(|()| ex.put(&format!("shm-{my_rank}"), published.as_bytes()));
        if let Err(e) = puts {
            first_err.get_or_insert(os("bootstrap put", e));
        }
        if let Err(e) = ex.fence() {
            // The others may be stuck already; no point in the second fence. A peer that
            // died before mapping its partners leaves its segment name behind, and no
            // launcher may clean up (direct srun): remove the names of all of them.
            unlink_peer_names(job_id, &peer_ranks);
            return Err(first_err.unwrap_or(os("bootstrap fence", e)));
        }

        // 2. Map every local peer's segment. Their names and pids in one bootstrap
        // round trip (per 512 peers), not two per peer.
        let mut attached = Vec::with_capacity(peer_ranks.len());
        let published = if first_err.is_none() {
            let keys: Vec<(u32, String)> = peer_ranks
                .iter()
                .flat_map(|&p| [(p, format!("shm-{p}")), (p, format!("shm-pid-{p}"))])
                .collect();
            match ex.get_many(&keys) {
                Ok(v) if v.len() == keys.len() => v,
                Ok(v) => {
                    let e = format!("{} values for {} keys", v.len(), keys.len());
                    first_err = Some(os("bootstrap get", e));
                    Vec::new()
                }
                Err(e) => {
                    first_err = Some(os("bootstrap get", e));
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        if first_err.is_none() {
            for (&p, kv) in peer_ranks.iter().zip(published.chunks(2)) {
                match attach(job_id, my_rank, p, &kv[0], &kv[1]) {
                    Ok(a) => attached.push(a),
                    Err(e) => {
                        first_err = Some(e);
                        break;
                    }
                }
            }
        }
        let fence2 = ex.fence();
        // 3. Everyone has mapped our segment (or given up): remove the name.
        if let Some(seg) = own.as_mut()
            && let Err(e) = seg.unlink()
        {
            debug!("shm: rank {my_rank}: shm_unlink {name}: {e}");
        }
        if let Some(e) = first_err {
            unlink_peer_names(job_id, &peer_ranks);
            return Err(e);
        }
        if let Err(e) = fence2 {
            unlink_peer_names(job_id, &peer_ranks);
            return Err(os("bootstrap fence", e));
        }

        let mut max_payload = ring::max_payload(ring_bytes);
        let mut peers = Vec::with_capacity(attached.len());
        for (i, (rank, map, slot, watch)) in attached.into_iter().enumerate() {
            let Some(seg) = own.as_ref() else {
                break; // unreachable: `attached` is empty without our own segment
            };
            max_payload = max_payload.min(ring::max_payload(map.layout().ring_bytes));
            peers.push(Peer {
                rank,
                tx: Producer::new(map.ring(slot)),
                rx: Consumer::new(seg.map.ring(i)),
                watch,
                state: PeerState::Open,
                exited: false,
                freed: false,
                freed_prev: false,
                map,
            });
        }
        debug!(
            "shm: rank {my_rank} mapped local peers {peer_ranks:?} ({config}; frame payload limit {max_payload} bytes)"
        );
        Ok(ShmTransport {
            rank: my_rank,
            caps: shm_caps(max_payload, true),
            max_payload,
            ring_bytes,
            peers,
            own,
            pending: Vec::new(),
            quiesced: false,
            liveness_interval: config.liveness_interval,
            last_liveness: Instant::now(),
            polls_since_clock: 0,
            scratch: HeaderCopy::new(),
            lent: None,
            cursor: 0,
            lend_frames: false,
            cma: Cma::new(),
            node_id: None,
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Local peers that can still be sent to, ascending.
    pub fn local_peers(&self) -> Vec<u32> {
        self.peers
            .iter()
            .filter(|p| matches!(p.state, PeerState::Open))
            .map(|p| p.rank)
            .collect()
    }

    /// Bytes of each inbound ring of this rank (the configured size, rounded up to a
    /// power of two).
    pub fn ring_bytes(&self) -> usize {
        self.ring_bytes
    }

    /// Take frames only through [`Transport::next_frame`] (`on`), or also deliver them
    /// as [`Event::Recv`] from `poll` (the default). With `on`, `poll` reports only
    /// failures, and a peer that exited is reported once its ring has been emptied by
    /// `next_frame`, so its last frames still come first.
    pub fn set_lend_frames(&mut self, on: bool) {
        self.lend_frames = on;
    }

    /// Index of local peer `rank` for [`ShmTransport::frame_from`], if it is one.
    #[inline]
    pub fn peer_index(&self, rank: u32) -> Option<usize> {
        self.find(rank)
    }

    /// Like [`Transport::next_frame`], but only a frame of local peer `idx` (from
    /// [`ShmTransport::peer_index`]): one load when there is none. Release it with
    /// [`Transport::consume_frame`]; a frame not consumed stays lent, and
    /// `next_frame` returns it first.
    #[inline]
    pub fn frame_from(&mut self, idx: usize) -> Option<InFrame<'_>> {
        let p = self.peers.get_mut(idx)?;
        if self.lent.is_some() || !matches!(p.state, PeerState::Open) || !p.rx.has_data() {
            return None;
        }
        match p.rx.peek(&mut self.scratch) {
            Ok(Some(rec)) => {
                self.lent = Some((idx, rec));
                // SAFETY: published and in place until consume_frame.
                let payload = unsafe { InPayload::shared(p.rx.payload(&rec)) };
                Some(InFrame {
                    peer: p.rank,
                    header: self.scratch.as_slice(),
                    payload,
                })
            }
            // A bad record: leave it to `next_frame`, which reports it.
            _ => None,
        }
    }

    /// Cheap check for the progress engine's spin: whether a frame (or something that
    /// looks like one: `next_frame` tells), a pending event, or room in a ring a send
    /// waits for may be there. One load per ring.
    #[inline]
    pub fn has_work(&self) -> bool {
        self.lent.is_some()
            || !self.pending.is_empty()
            || self.peers.iter().any(|p| {
                matches!(p.state, PeerState::Open) && (p.rx.has_data() || p.tx.room_freed())
            })
    }

    /// Allow single copy by cross-memory attach (`on`, the default) or forbid it
    /// (`RANKWIRE_CMA=0`): the host caps' `get`/`put` follow, and forbidden, `get`,
    /// `put` and `register` return [`TransportError::Unsupported`].
    pub fn set_cma_allowed(&mut self, on: bool) {
        self.cma.set_allowed(on);
        self.caps = shm_caps(self.max_payload, on);
    }

    /// Name this process's node (as in [`crate::PeerInfo::node_id`]): from then on
    /// [`Transport::can_reach`] also refuses a peer whose node differs (reach `Node`).
    /// Unset, only the set of local peers given to [`ShmTransport::new`] decides.
    pub fn set_node_id(&mut self, node_id: impl Into<String>) {
        self.node_id = Some(node_id.into());
    }

    /// Mark the job as finalized (call after the core's finalize fence): from now on a
    /// peer process exiting is expected and produces no [`Event::PeerFailed`]. A
    /// malformed frame is still reported. Sends remain possible to peers still running.
    pub fn set_quiesced(&mut self) {
        self.quiesced = true;
    }

    /// The fast path of [`Transport::send`] for the engine's eager sends: write the
    /// frame (`header`, at most [`MAX_HEADER_BYTES`] bytes, and `payload`, at most
    /// `max_frame_payload_bytes` bytes) into the ring to world rank `peer` and return
    /// `true` when that can be done now (the peer is open and its ring has room).
    /// Otherwise nothing is written and the answer is `false`; the caller queues the
    /// frame, and [`Transport::send`] later reports why it could not go (busy, or the
    /// error). A ring found corrupted fails the peer at once, as `send` does. Nothing
    /// is returned through memory: the general path's `Result`, with an error in it,
    /// is large.
    #[inline(always)]
    pub fn send_now(&mut self, peer: u32, header: &[u8], payload: &[u8]) -> bool {
        if header.len() > MAX_HEADER_BYTES || payload.len() > self.max_payload {
            return false;
        }
        let Some(idx) = self.find(peer) else {
            return false;
        };
        let p = &mut self.peers[idx];
        if !matches!(p.state, PeerState::Open) {
            return false;
        }
        match p.tx.try_write(header, payload) {
            Ok(true) => {
                p.map.doorbell().ring();
                true
            }
            Ok(false) => false,
            Err(reason) => {
                self.ring_corrupted(idx, reason);
                false
            }
        }
    }

    /// The ring to the peer at `idx` is corrupted (`reason`, from the ring's checks):
    /// fail that peer ([`Event::PeerFailed`] with [`TransportError::Malformed`]) and
    /// return the error for the frame that found it.
    #[cold]
    fn ring_corrupted(&mut self, idx: usize, reason: String) -> TransportError {
        let quiesced = self.quiesced;
        let p = &mut self.peers[idx];
        let peer = p.rank;
        let err = lost(peer, format!("ring corrupted: {reason}"));
        p.fail(
            TransportError::Malformed {
                transport: NAME,
                peer,
                reason,
            },
            quiesced,
            &mut self.pending,
        );
        err
    }

    fn find(&self, rank: u32) -> Option<usize> {
        self.peers.binary_search_by_key(&rank, |p| p.rank).ok()
    }

    /// Read the clock now and then; every `liveness_interval`, mark exited peers.
    fn check_liveness(&mut self) {
        self.polls_since_clock += 1;
        if self.polls_since_clock < POLLS_PER_CLOCK_READ {
            return;
        }
        self.polls_since_clock = 0;
        let now = Instant::now();
        if now.duration_since(self.last_liveness) < self.liveness_interval {
            return;
        }
        self.last_liveness = now;
        let open: Vec<&Peer> = self
            .peers
            .iter()
            .filter(|p| matches!(p.state, PeerState::Open))
            .collect();
        if open.is_empty() {
            return;
        }
        let watches: Vec<&Watch> = open.iter().map(|p| &p.watch).collect();
        let exited = sys::exited(&watches);
        let gone: Vec<u32> = open
            .iter()
            .zip(exited)
            .filter(|(_, e)| *e)
            .map(|(p, _)| p.rank)
            .collect();
        for p in self.peers.iter_mut() {
            if gone.contains(&p.rank) {
                p.exited = true;
            }
        }
    }
}

impl Peer {
    /// Move the frames published in our ring to `events` (at most a ring's worth of
    /// bytes). Returns whether any moved.
    fn drain(&mut self, ring_bytes: u64, quiesced: bool, events: &mut Vec<Event>) -> bool {
        let rank = self.rank;
        let mut header = HeaderCopy::new();
        let mut taken = 0u64;
        let res = loop {
            if taken >= ring_bytes {
                break Ok(());
            }
            match self.rx.peek(&mut header) {
                Ok(Some(rec)) => {
                    // SAFETY: the record is published and stays in place until consume.
                    let payload = unsafe { InPayload::shared(self.rx.payload(&rec)) }.into_vec();
                    events.push(Event::Recv {
                        peer: rank,
                        header: header.as_slice().to_vec(),
                        payload,
                    });
                    self.rx.consume(&rec);
                    taken += rec.rec_bytes;
                    self.freed = true;
                }
                Ok(None) => break Ok(()),
                Err(reason) => break Err(reason),
            }
        };
        match res {
            Ok(()) => taken > 0,
            Err(reason) => {
                self.fail(
                    TransportError::Malformed {
                        transport: NAME,
                        peer: rank,
                        reason,
                    },
                    quiesced,
                    events,
                );
                true
            }
        }
    }

    /// After records were consumed: ring the peer's doorbell if it is blocked on this
    /// ring, which has room now. The check costs a fence, so a poll round does it for
    /// the records consumed in the round before (`now`: also for this round's), which
    /// keeps it off the path from a message's arrival to the reply; a sender blocked
    /// meanwhile sees the room itself when its sleep (at most 1 ms) ends.
    fn wake_blocked_producer(&mut self, now: bool) {
        let check = self.freed_prev || (now && self.freed);
        self.freed_prev = self.freed && !now;
        self.freed = false;
        if check && self.rx.producer_waiting() {
            self.map.doorbell().ring();
        }
    }

    /// Take the peer out of service and report why (unless it merely exited after
    /// quiesce).
    fn fail(&mut self, error: TransportError, quiesced: bool, sink: &mut Vec<Event>) {
        if quiesced && matches!(error, TransportError::PeerLost { .. }) {
            debug!("shm: rank {} exited after quiesce", self.rank);
            self.state = PeerState::Closed;
            return;
        }
        debug!("shm: lost rank {}: {error}", self.rank);
        self.state = PeerState::Failed(error.clone());
        sink.push(Event::PeerFailed {
            peer: self.rank,
            error,
        });
    }
}

impl Transport for ShmTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn can_reach(&self, peer: &PeerInfo) -> Result<(), String> {
        if let Some(me) = &self.node_id
            && *me != peer.node_id
        {
            return Err(format!("shm: rank {} is on another node", peer.rank));
        }
        match self.find(peer.rank).map(|i| &self.peers[i].state) {
            Some(PeerState::Open) => Ok(()),
            Some(PeerState::Failed(e)) => Err(format!("shm: {e}")),
            Some(PeerState::Closed) => Err(format!("shm: rank {} has exited", peer.rank)),
            None => Err(format!("shm: rank {} is on another node", peer.rank)),
        }
    }

    #[inline]
    fn send(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendOutcome, TransportError> {
        if header.len() > MAX_HEADER_BYTES {
            return Err(TransportError::Unsupported {
                transport: NAME,
                what: "a frame header longer than MAX_HEADER_BYTES",
            });
        }
        if payload.len() > self.max_payload {
            return Err(TransportError::Unsupported {
                transport: NAME,
                what: "a frame payload longer than max_frame_payload_bytes (ring_bytes / 4)",
            });
        }
        let Some(idx) = self.find(peer) else {
            return Err(TransportError::NoSuchPeer {
                transport: NAME,
                peer,
            });
        };
        let p = &mut self.peers[idx];
        match &p.state {
            PeerState::Open => {}
            PeerState::Failed(TransportError::PeerLost { reason, .. }) => {
                return Err(lost(peer, reason.clone()));
            }
            PeerState::Failed(e) => {
                return Err(lost(peer, format!("ring closed after: {e}")));
            }
            PeerState::Closed => {
                return Err(lost(peer, "process exited after set_quiesced".into()));
            }
        }
        match p.tx.try_write(header, payload) {
            Ok(true) => {
                p.map.doorbell().ring();
                Ok(SendOutcome::Sent)
            }
            Ok(false) => Ok(SendOutcome::Busy),
            Err(reason) => Err(self.ring_corrupted(idx, reason)),
        }
    }

    fn poll(&mut self, events: &mut Vec<Event>) -> bool {
        let mut progress = false;
        if !self.pending.is_empty() {
            events.append(&mut self.pending);
            progress = true;
        }
        let quiesced = self.quiesced;
        let ring_bytes = self.ring_bytes as u64;
        // A frame lent by `next_frame` and not consumed stays where it is.
        let lent = self.lent.map(|(i, _)| i);
        let lend = self.lend_frames;
        for (i, p) in self.peers.iter_mut().enumerate() {
            if matches!(p.state, PeerState::Open) {
                if !lend && lent != Some(i) {
                    progress |= p.drain(ring_bytes, quiesced, events);
                }
                p.wake_blocked_producer(!lend);
            }
        }
        self.check_liveness();
        for (i, p) in self.peers.iter_mut().enumerate() {
            if p.exited && matches!(p.state, PeerState::Open) && lent != Some(i) {
                // Deliver what it published before it went away, then report.
                if lend {
                    if p.rx.has_data() {
                        continue; // next_frame takes them first
                    }
                } else {
                    p.drain(ring_bytes, quiesced, events);
                }
                if matches!(p.state, PeerState::Open) {
                    p.fail(lost(p.rank, "process exited".into()), quiesced, events);
                }
                progress = true;
            }
        }
        progress
    }

    #[inline]
    fn next_frame(&mut self) -> Option<InFrame<'_>> {
        let n = self.peers.len();
        if let Some((i, rec)) = self.lent {
            // Lent again until consumed (the header is still in `scratch`).
            // SAFETY: the record stays published and in place until consume_frame.
            let payload = unsafe { InPayload::shared(self.peers[i].rx.payload(&rec)) };
            return Some(InFrame {
                peer: self.peers[i].rank,
                header: self.scratch.as_slice(),
                payload,
            });
        }
        // Round robin from the cursor, without a division per look (`%` by a run-time
        // length is a `div`: tens of cycles on the receive path of every message).
        let mut i = if self.cursor < n { self.cursor } else { 0 };
        for _ in 0..n {
            let at = i;
            i = if i + 1 == n { 0 } else { i + 1 };
            let i = at;
            let p = &mut self.peers[i];
            if !matches!(p.state, PeerState::Open) {
                continue;
            }
            match p.rx.peek(&mut self.scratch) {
                Ok(Some(rec)) => {
                    self.lent = Some((i, rec));
                    // SAFETY: the record is published and stays in place until
                    // consume_frame (only the consumer, this transport, frees it).
                    let payload = unsafe { InPayload::shared(p.rx.payload(&rec)) };
                    return Some(InFrame {
                        peer: p.rank,
                        header: self.scratch.as_slice(),
                        payload,
                    });
                }
                Ok(None) => {}
                Err(reason) => {
                    let rank = p.rank;
                    p.fail(
                        TransportError::Malformed {
                            transport: NAME,
                            peer: rank,
                            reason,
                        },
                        self.quiesced,
                        &mut self.pending,
                    );
                }
            }
        }
        None
    }

    #[inline]
    fn consume_frame(&mut self) {
        if let Some((i, rec)) = self.lent.take() {
            let p = &mut self.peers[i];
            p.rx.consume(&rec);
            p.freed = true;
            self.cursor = if i + 1 == self.peers.len() { 0 } else { i + 1 };
        }
    }

    fn is_flushed(&self) -> bool {
        true
    }

    /// Host memory only, by cross-memory attach: [`RemoteMem::HostCma`] with this
    /// process's pid and the buffer's address (nothing is pinned or mapped).
    fn register(&mut self, buf: LocalBuf) -> Result<Registration, TransportError> {
        self.cma.register(buf)
    }

    /// `process_vm_readv(2)` from a [`RemoteMem::HostCma`]; done on return. `peer` is
    /// not checked: the descriptor names the process.
    unsafe fn get(
        &mut self,
        _peer: u32,
        _op: OpId,
        dst: LocalBuf,
        src: &RemoteMem,
        offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        // SAFETY: the trait's contract on `dst` is the one of Cma::get.
        unsafe { self.cma.get(dst, src, offset_bytes) }
    }

    /// `process_vm_writev(2)` into a [`RemoteMem::HostCma`]; done on return.
    unsafe fn put(
        &mut self,
        _peer: u32,
        _op: OpId,
        src: LocalBuf,
        dst: &RemoteMem,
        offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        // SAFETY: the trait's contract on `src` is the one of Cma::put.
        unsafe { self.cma.put(src, dst, offset_bytes) }
    }

    fn wait_activity(&mut self, timeout: Duration) {
        if !self.pending.is_empty() || timeout.is_zero() {
            return;
        }
        // Without local peers nothing can arrive here: let another transport sleep.
        let Some(own) = self.own.as_ref() else {
            return;
        };
        // About to sleep: wake producers blocked on rings we freed, first.
        for p in self.peers.iter_mut() {
            if matches!(p.state, PeerState::Open) {
                p.wake_blocked_producer(true);
            }
        }
        let peers = &self.peers;
        let has_work = || {
            peers.iter().any(|p| {
                matches!(p.state, PeerState::Open)
                    && (p.rx.has_data() || p.tx.room_freed() || p.exited)
            })
        };
        if has_work() {
            return;
        }
        own.map
            .doorbell()
            .sleep(timeout.min(self.liveness_interval), has_work);
        // Check liveness at the next poll: sleeps are few, and may be long.
        self.polls_since_clock = POLLS_PER_CLOCK_READ;
    }
}

impl fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmTransport")
            .field("rank", &self.rank)
            .field("local_peers", &self.local_peers())
            .field("ring_bytes", &self.ring_bytes)
            .field("max_frame_payload_bytes", &self.max_payload)
            .field("quiesced", &self.quiesced)
            .finish_non_exhaustive()
    }
}

/// `/rankwire-<job>-<rank>-shm` (the name `shm_open` takes; the file is
/// `/dev/shm/rankwire-<job>-<rank>-shm`).
/// Remove the segment names of `peers` (a setup that failed: a peer may have died
/// before everyone mapped its segment). Names already removed are ignored.
fn unlink_peer_names(job_id: &str, peers: &[u32]) {
    for &p in peers {
        if let Ok(c) = std::ffi::CString::new(segment_name(job_id, p)) {
            // SAFETY: shm_unlink only reads the NUL-terminated name.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        }
    }
}

fn segment_name(job_id: &str, rank: u32) -> String {
    format!("/rankwire-{job_id}-{rank}-shm")
}

fn check_job_id(job_id: &str) -> Result<(), TransportError> {
    let ok = !job_id.is_empty()
        && job_id.len() <= 200
        && job_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(os(
            "shm_open",
            format!(
                "job id {job_id:?} cannot name a segment: use 1 to 200 letters, digits, '.', '_' or '-'"
            ),
        ))
    }
}

/// Learn peer `p`'s segment and pid from the exchange and map the segment.
fn attach(
    job_id: &str,
    my_rank: u32,
    p: u32,
    raw: &[u8],
    raw_pid: &[u8],
) -> Result<(u32, Mapping, usize, Watch), TransportError> {
    let connect = |reason: String| TransportError::Connect {
        transport: NAME,
        peer: p,
        reason,
    };
    let published = String::from_utf8_lossy(raw);
    let expected = segment_name(job_id, p);
    if let Some(err) = published.strip_prefix('!') {
        return Err(connect(format!("rank {p} could not set up shm: {err}")));
    }
    if published.is_empty() {
        return Err(connect(format!(
            "rank {p} offers no shm segment (it has no local peers); both ranks must list each other as local"
        )));
    }
    if published != expected {
        return Err(connect(format!(
            "rank {p} published segment {published:?}, expected {expected:?}"
        )));
    }
    let pid = std::str::from_utf8(raw_pid)
        .ok()
        .and_then(|s| s.trim().parse::<libc::pid_t>().ok())
        .filter(|&pid| pid > 0)
        .ok_or_else(|| connect(format!("rank {p} published an invalid pid {raw_pid:?}")))?;
    let (map, slot) = segment::open_peer(&expected, p, my_rank).map_err(connect)?;
    Ok((p, map, slot, Watch::new(pid)))
}

fn os(call: &'static str, reason: impl fmt::Display) -> TransportError {
    TransportError::Os {
        transport: NAME,
        call,
        reason: reason.to_string(),
    }
}

fn lost(peer: u32, reason: String) -> TransportError {
    TransportError::PeerLost {
        transport: NAME,
        peer,
        reason,
    }
}

/// The shm transport's capabilities: host memory only; one-sided `get`/`put` by
/// cross-memory attach when `cma` (no registration needed).
fn shm_caps(max_payload: usize, cma: bool) -> Caps {
    Caps {
        name: NAME,
        reach: Reach::Node,
        host: Some(KindCaps {
            send: true,
            put: cma,
            get: cma,
            register: cma,
            eager_limit_bytes: SHM_EAGER_LIMIT_BYTES.min(max_payload),
            max_frame_payload_bytes: max_payload,
            max_message_bytes: u64::MAX,
            needs_registration: false,
        }),
        cuda: None,
        cuda_managed: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_and_job_ids() {
        assert_eq!(segment_name("rw123abc", 7), "/rankwire-rw123abc-7-shm");
        assert!(check_job_id("rw123abc").is_ok());
        assert!(check_job_id("job_1.2-x").is_ok());
        for bad in ["", "a/b", "a b", "ü", &"x".repeat(201)] {
            assert!(
                matches!(
                    check_job_id(bad),
                    Err(TransportError::Os {
                        call: "shm_open",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn caps_follow_the_frame_limit() {
        let c = shm_caps(256 << 10, true);
        let h = c.host.unwrap();
        assert!(h.get && h.put && !h.needs_registration);
        assert!(!shm_caps(4096, false).host.unwrap().get);
        assert_eq!(h.eager_limit_bytes, SHM_EAGER_LIMIT_BYTES);
        assert_eq!(h.max_frame_payload_bytes, 256 << 10);
        // A small ring caps the eager limit at its frame limit.
        assert_eq!(shm_caps(4096, true).host.unwrap().eager_limit_bytes, 4096);
    }
}
