//! rankwire transports: one narrow trait, capabilities as data.
//!
//! A transport moves opaque frames (a small header plus a payload, both bytes) between
//! ranks. It knows nothing about tags, communicators or matching: those live in the
//! `rankwire` core crate, which encodes its protocol frames into the `header` bytes and
//! calls [`Transport::send`] / [`Transport::poll`] from its progress engine. Upward
//! signals are values returned from `poll` ([`Event`]), never callbacks.
//!
//! # Lifecycle
//! 1. The core builds each transport with the job's [`Exchange`] (the bootstrap
//!    key-value store) so the transport can publish its address and learn its peers'.
//! 2. For each peer, selection walks the ordered table self → shm → cuda_ipc → rdma → tcp and
//!    picks the first transport whose [`Transport::can_reach`] says yes and whose
//!    [`Caps`] fit the memory kind and message size.
//! 3. The progress engine calls [`Transport::send`] (which may answer
//!    [`SendOutcome::Busy`]: back-pressure is a value, never an error),
//!    [`Transport::next_frame`] / [`Transport::consume_frame`] (frames lent in place, by
//!    transports that can) and [`Transport::poll`] in a loop: spin a bounded number of
//!    times, then yield.
//! 4. Progress until [`Transport::is_flushed`] before finalize, then drop.
//!
//! # Dispatch
//! The core holds its transports in a [`Transports`] set and calls them through
//! [`AnyTransport`], an enum over the closed set with `match`-based dispatch
//! ([`any`]); one-sided operations are routed by the kind of the remote descriptor
//! ([`Transports::get_remote`]). `tests/conformance.rs` runs one body over every
//! transport and memory kind against the declared [`Caps`].
//!
//! # Frames on the wire
//! Every transport delivers each `(header, payload)` pair whole and in order per peer.
//! Header bytes are at most [`MAX_HEADER_BYTES`]; payload bytes at most the transport's
//! `max_frame_payload` (see [`KindCaps`]). Larger messages are split by the core's
//! rendezvous protocol into `Data` frames.

use std::fmt;

pub mod any;
#[cfg(feature = "cuda")]
pub mod cuda_ipc;
pub mod rdma;
pub mod regcache;
pub mod self_tp;
pub mod settings;
pub mod shm;
pub mod tcp;

pub use any::{AnyTransport, TransportKind, Transports};
#[cfg(feature = "cuda")]
pub use cuda_ipc::{CudaIpcConfig, CudaIpcTransport};
pub use rdma::{RdmaConfig, RdmaDevice, RdmaTransport};
pub use regcache::{RegCache, RegCacheConfig, RegCacheStats, Registrar};
pub use self_tp::SelfTransport;
pub use shm::{ShmConfig, ShmTransport};
pub use tcp::{TcpConfig, TcpTransport};

/// Largest header a transport must carry, in bytes.
pub const MAX_HEADER_BYTES: usize = 4096;

/// Where a buffer lives. Decides which transports may touch it.
///
/// Source: CUDA driver API, `CUmemorytype` and `CU_POINTER_ATTRIBUTE_IS_MANAGED`
/// (`cuPointerGetAttributes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Ordinary (pageable or pinned) host memory.
    Host,
    /// CUDA device memory on the given device ordinal.
    Cuda {
        /// CUDA device ordinal.
        device: i32,
    },
    /// CUDA managed (unified) memory. Never exported through legacy CUDA IPC.
    CudaManaged,
}

/// How far a transport reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reach {
    /// Only the calling process (the self transport).
    Process,
    /// Processes on the same node (same boot id, hostname and network namespace).
    Node,
    /// Any process reachable over the network.
    Network,
}

/// What a transport can do with buffers of one [`MemoryKind`]. Plain data; a contract
/// that the conformance suite exercises.
///
/// The one-sided flags speak of two different buffers and are kept apart:
/// - `register`: memory of this kind can be made reachable by peers
///   ([`Transport::register`]), so that they `get` from it or `put` into it;
/// - `get` / `put`: a *local* buffer of this kind can be the destination of a
///   [`Transport::get`] / the source of a [`Transport::put`] (the remote side is
///   whatever the descriptor names: memory a peer registered).
///
/// So CUDA IPC declares host `get: true, register: false` (a host buffer can receive a
/// device-to-host copy out of a peer's device export, but host memory is never
/// exported) and device `get: true, register: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindCaps {
    /// Two-sided `send` of a payload in this memory works.
    pub send: bool,
    /// One-sided `put` (RDMA write / IPC write) works with a local source buffer of this
    /// kind.
    pub put: bool,
    /// One-sided `get` (RDMA read / IPC read) works with a local destination buffer of
    /// this kind.
    pub get: bool,
    /// Memory of this kind can be registered (exposed) with [`Transport::register`] so
    /// that peers `get` from it / `put` into it.
    pub register: bool,
    /// Messages up to this many bytes go eagerly (inline in an `Eager` frame).
    pub eager_limit_bytes: usize,
    /// Largest payload of one frame, in bytes; rendezvous data is chunked to this. One
    /// byte more is refused by `send`.
    pub max_frame_payload_bytes: usize,
    /// Largest message, in bytes, the transport can move in total (`u64::MAX` if
    /// unlimited): frames of a larger message are never all accepted.
    pub max_message_bytes: u64,
    /// Peers' one-sided operations need memory registered with [`Transport::register`]
    /// first: a `get`/`put` naming memory that was never registered fails (RDMA memory
    /// regions: a wrong rkey; CUDA IPC: no export handle). Where false, `register` only
    /// describes the memory (cross-memory attach: process id and address) and any
    /// descriptor of live memory works.
    pub needs_registration: bool,
}

/// Capabilities of a transport, per memory kind. `None` means "cannot touch this kind".
///
/// Modelled on UCX's `uct_iface_attr` / `uct_md_attr` (`reg_mem_types`,
/// `access_mem_types`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// Short name used in logs and errors ("self", "shm", "tcp", ...).
    pub name: &'static str,
    /// How far it reaches.
    pub reach: Reach,
    /// Host memory capabilities.
    pub host: Option<KindCaps>,
    /// CUDA device memory capabilities.
    pub cuda: Option<KindCaps>,
    /// CUDA managed memory capabilities.
    pub cuda_managed: Option<KindCaps>,
}

impl Caps {
    /// Capabilities for one memory kind, if the transport handles it at all.
    pub fn for_kind(&self, kind: MemoryKind) -> Option<&KindCaps> {
        match kind {
            MemoryKind::Host => self.host.as_ref(),
            MemoryKind::Cuda { .. } => self.cuda.as_ref(),
            MemoryKind::CudaManaged => self.cuda_managed.as_ref(),
        }
    }
}

/// Where the sender's or receiver's buffer lives, for one-sided data movement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteMem {
    /// Nothing: data moves in `Data` frames.
    None,
    /// A CUDA IPC memory handle (`cuIpcGetMemHandle`), the offset of the buffer inside
    /// the allocation, the allocation's buffer id and the device ordinal.
    CudaIpc {
        /// `CUipcMemHandle` bytes.
        handle: [u8; 64],
        /// Offset of the buffer from the allocation base, in bytes.
        offset: u64,
        /// `CU_POINTER_ATTRIBUTE_BUFFER_ID` of the allocation.
        buffer_id: u64,
        /// Device ordinal.
        device: i32,
        /// Allocation base in the owner's address space (the importer's cache key).
        base: u64,
        /// Allocation length in bytes.
        alloc_len: u64,
    },
    /// Host memory of a process on the same node, readable with cross-memory attach
    /// (`process_vm_readv(2)`): the process id and the buffer's virtual address.
    HostCma {
        /// Process id of the buffer's owner.
        pid: u32,
        /// Virtual address of the buffer in that process.
        addr: u64,
    },
    /// An RDMA-registered region (verbs memory region): remote address, length and rkey.
    Rdma {
        /// Remote virtual address.
        addr: u64,
        /// Length in bytes.
        len: u64,
        /// Remote key of the memory region.
        rkey: u32,
    },
}

/// Id of a one-sided operation ([`Transport::get`] / [`Transport::put`]), chosen by the
/// caller and reported back in [`Event::OpDone`].
pub type OpId = u64;

/// A local buffer named to a one-sided operation or to [`Transport::register`]: its
/// address, its length in bytes and where it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalBuf {
    /// Address of the first byte (a host virtual address or a CUDA device pointer).
    pub addr: u64,
    /// Length in bytes.
    pub len_bytes: usize,
    /// Where the memory lives.
    pub kind: MemoryKind,
}

/// How a one-sided operation started ([`Transport::get`] / [`Transport::put`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpStart {
    /// The bytes moved already; the local buffer may be used again. No
    /// [`Event::OpDone`] follows.
    Done,
    /// In flight: [`Event::OpDone`] with the same [`OpId`] reports its end, and the
    /// local buffer must stay untouched until then.
    Pending,
}

/// Local memory made reachable to peers by [`Transport::register`]: the descriptor a
/// peer names in its [`Transport::get`] / [`Transport::put`] (sent to it in an `Rts` or
/// `Cts` frame) and the handle that releases it ([`Transport::deregister`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// What a peer needs to reach the memory.
    pub remote: RemoteMem,
    /// The transport's handle for [`Transport::deregister`] (opaque to the caller).
    pub handle: u64,
}

/// What the core knows about a peer when selecting a transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's rank in the world.
    pub rank: u32,
    /// Node identity (boot id + hostname + network namespace); equal strings mean the
    /// same node.
    pub node_id: String,
    /// The peer's process id (meaningful only on the same node).
    pub pid: u32,
}

/// A frame that arrived, lent by the transport that holds it ([`Transport::next_frame`]):
/// the sending peer, the header bytes (a private copy) and the payload where it lies.
/// Take what is needed and drop it, then call [`Transport::consume_frame`].
#[derive(Debug)]
pub struct InFrame<'a> {
    /// World rank of the sender.
    pub peer: u32,
    /// Header bytes (at most [`MAX_HEADER_BYTES`]).
    pub header: &'a [u8],
    /// Payload bytes.
    pub payload: InPayload<'a>,
}

/// The payload of an arrived frame, wherever the transport holds it: an owned vector
/// (TCP, self, RDMA) or up to two pieces of a shared-memory ring (the second one is
/// empty unless the record wraps). Copy it out with [`InPayload::copy_to`] or take it
/// with [`InPayload::into_vec`]; nothing is copied before that.
#[derive(Debug)]
pub struct InPayload<'a> {
    repr: PayloadRepr<'a>,
}

#[derive(Debug)]
enum PayloadRepr<'a> {
    Owned(Vec<u8>),
    // Raw pointers, not slices: the bytes live in memory another process can write
    // (a ring record it published and must leave alone until we consume it).
    Shared {
        pieces: [(*const u8, usize); 2],
        _lent: std::marker::PhantomData<&'a [u8]>,
    },
}

impl<'a> InPayload<'a> {
    /// A payload held in `v`.
    pub fn owned(v: Vec<u8>) -> InPayload<'static> {
        InPayload {
            repr: PayloadRepr::Owned(v),
        }
    }

    /// A payload lent from shared memory in up to two pieces `(pointer, bytes)`.
    ///
    /// # Safety
    /// Both pieces are valid for reads for `'a` (null pointers only with length 0) and
    /// do not overlap memory the caller may write during `'a`.
    pub(crate) unsafe fn shared(pieces: [(*const u8, usize); 2]) -> InPayload<'a> {
        InPayload {
            repr: PayloadRepr::Shared {
                pieces,
                _lent: std::marker::PhantomData,
            },
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match &self.repr {
            PayloadRepr::Owned(v) => v.len(),
            PayloadRepr::Shared { pieces, .. } => pieces[0].1 + pieces[1].1,
        }
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copy the first `dst.len()` bytes into `dst`.
    ///
    /// # Panics
    /// If `dst` is longer than the payload (a caller bug: callers size `dst` from
    /// [`InPayload::len`]).
    #[inline(always)]
    pub fn copy_to(&self, dst: &mut [u8]) {
        assert!(
            dst.len() <= self.len(),
            "copy_to: destination longer than the payload"
        );
        match &self.repr {
            PayloadRepr::Owned(v) => dst.copy_from_slice(&v[..dst.len()]),
            // One piece (a record that does not wrap round the ring): one copy.
            PayloadRepr::Shared { pieces, .. } if pieces[1].1 == 0 => {
                // SAFETY: as below; `dst.len() <= self.len() == pieces[0].1`.
                unsafe { copy_bytes(pieces[0].0, dst.as_mut_ptr(), dst.len()) };
            }
            PayloadRepr::Shared { pieces, .. } => {
                let mut done = 0;
                for &(p, n) in pieces {
                    let k = n.min(dst.len() - done);
                    if k == 0 {
                        break;
                    }
                    // SAFETY: `shared`'s contract makes the piece readable; `dst` is a
                    // distinct, writable buffer of at least `done + k` bytes.
                    unsafe { copy_bytes(p, dst.as_mut_ptr().add(done), k) };
                    done += k;
                }
            }
        }
    }

    /// Call `f(offset, bytes)` for each contiguous piece, in order (for copies that
    /// need slices, such as host-to-device copies).
    pub fn for_each_piece(&self, mut f: impl FnMut(usize, &[u8])) {
        match &self.repr {
            PayloadRepr::Owned(v) => {
                if !v.is_empty() {
                    f(0, v)
                }
            }
            PayloadRepr::Shared { pieces, .. } => {
                let mut off = 0;
                for &(p, n) in pieces {
                    if n > 0 {
                        // SAFETY: `shared`'s contract makes the piece readable for 'a.
                        f(off, unsafe { std::slice::from_raw_parts(p, n) });
                    }
                    off += n;
                }
            }
        }
    }

    /// The payload as an owned vector (moved, or copied out of shared memory).
    pub fn into_vec(self) -> Vec<u8> {
        match self.repr {
            PayloadRepr::Owned(v) => v,
            PayloadRepr::Shared { .. } => {
                let mut v = vec![0u8; self.len()];
                self.copy_to(&mut v);
                v
            }
        }
    }
}

/// `ptr::copy_nonoverlapping` with the few bytes of a small message copied inline
/// (a call to `memcpy` costs more than the copy at these sizes).
///
/// # Safety
/// As for `ptr::copy_nonoverlapping(src, dst, n)`.
#[inline]
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: every access stays within the `n` bytes at `src` and at `dst`, which the
    // caller guarantees valid and distinct; the 16-, 8- and 4-byte moves may overlap
    // each other within those bounds, and are unaligned reads/writes.
    unsafe {
        if n > 64 {
            std::ptr::copy_nonoverlapping(src, dst, n);
        } else if n > 32 {
            let a = src.cast::<[u8; 32]>().read_unaligned();
            let b = src.add(n - 32).cast::<[u8; 32]>().read_unaligned();
            dst.cast::<[u8; 32]>().write_unaligned(a);
            dst.add(n - 32).cast::<[u8; 32]>().write_unaligned(b);
        } else if n > 16 {
            let a = src.cast::<u128>().read_unaligned();
            let b = src.add(n - 16).cast::<u128>().read_unaligned();
            dst.cast::<u128>().write_unaligned(a);
            dst.add(n - 16).cast::<u128>().write_unaligned(b);
        } else if n >= 8 {
            let a = src.cast::<u64>().read_unaligned();
            let b = src.add(n - 8).cast::<u64>().read_unaligned();
            dst.cast::<u64>().write_unaligned(a);
            dst.add(n - 8).cast::<u64>().write_unaligned(b);
        } else if n >= 4 {
            let a = src.cast::<u32>().read_unaligned();
            let b = src.add(n - 4).cast::<u32>().read_unaligned();
            dst.cast::<u32>().write_unaligned(a);
            dst.add(n - 4).cast::<u32>().write_unaligned(b);
        } else {
            for i in 0..n {
                *dst.add(i) = *src.add(i);
            }
        }
    }
}

impl From<Vec<u8>> for InPayload<'static> {
    fn from(v: Vec<u8>) -> Self {
        InPayload::owned(v)
    }
}

/// Result of a [`Transport::send`] that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOutcome {
    /// The frame was written or copied; the caller's payload memory may be reused.
    Sent,
    /// Back-pressure: nothing was taken; try again after the next `poll`.
    Busy,
}

/// Something the transport observed, returned from [`Transport::poll`].
#[derive(Debug)]
pub enum Event {
    /// A whole frame arrived from `peer`, in order with all earlier frames from it.
    Recv {
        /// World rank of the sender.
        peer: u32,
        /// Header bytes (at most [`MAX_HEADER_BYTES`]).
        header: Vec<u8>,
        /// Payload bytes.
        payload: Vec<u8>,
    },
    /// A whole frame arrived from `peer` whose payload the transport wrote straight into
    /// the memory the caller named for it ([`Transport::place_payload`]): `len` bytes
    /// there, in order with all earlier frames from that peer.
    RecvPlaced {
        /// World rank of the sender.
        peer: u32,
        /// Header bytes (at most [`MAX_HEADER_BYTES`]).
        header: Vec<u8>,
        /// Payload bytes written to the named place.
        len: usize,
    },
    /// A one-sided operation ([`Transport::get`] / [`Transport::put`] that returned
    /// [`OpStart::Pending`]) with
    /// `peer` finished; its local buffer may be used again.
    OpDone {
        /// World rank of the peer.
        peer: u32,
        /// The caller's operation id.
        op: u64,
        /// Whether the data moved.
        result: Result<(), TransportError>,
    },
    /// The connection to `peer` is gone or broken; every operation with it must fail.
    PeerFailed {
        /// World rank of the peer.
        peer: u32,
        /// Why.
        error: TransportError,
    },
}

/// Errors of the transport layer. Each names the transport and the peer.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TransportError {
    /// The connection to a peer could not be set up. Likely causes: the peer is not
    /// running, a firewall, or the wrong interface (set `RANKWIRE_TCP_IF`).
    #[error("{transport}: cannot connect to rank {peer}: {reason}")]
    Connect {
        /// Transport name.
        transport: &'static str,
        /// Peer rank.
        peer: u32,
        /// What was tried and what failed.
        reason: String,
    },
    /// The peer closed the connection or it broke while the job was running: the peer
    /// process probably died. Check that rank's output.
    #[error("{transport}: connection to rank {peer} lost: {reason}")]
    PeerLost {
        /// Transport name.
        transport: &'static str,
        /// Peer rank.
        peer: u32,
        /// OS error or "closed by peer".
        reason: String,
    },
    /// The peer sent bytes that are not a valid frame (garbled, truncated, oversized).
    /// A bug or memory corruption in the peer, or a foreign process on our port.
    #[error("{transport}: malformed frame from rank {peer}: {reason}")]
    Malformed {
        /// Transport name.
        transport: &'static str,
        /// Peer rank.
        peer: u32,
        /// What was wrong.
        reason: String,
    },
    /// The operation is not supported by this transport for this memory kind.
    #[error("{transport}: {what} is not supported")]
    Unsupported {
        /// Transport name.
        transport: &'static str,
        /// The operation.
        what: &'static str,
    },
    /// A local OS call failed.
    #[error("{transport}: {call} failed: {reason}")]
    Os {
        /// Transport name.
        transport: &'static str,
        /// The failing call, e.g. `bind`, `epoll_wait`.
        call: &'static str,
        /// The OS error text.
        reason: String,
    },
    /// `peer` is not a rank this transport knows.
    #[error("{transport}: no connection to rank {peer}")]
    NoSuchPeer {
        /// Transport name.
        transport: &'static str,
        /// Peer rank.
        peer: u32,
    },
}

/// The job's key-value store, as seen by a transport during setup (implemented by the
/// core's bootstrap client). Keys are job-wide; a `get` waits until the key is put.
///
/// Every read names the rank that put the key (`owner`): a PMIx server fetches a
/// peer's data from that peer's node on demand, and needs to know whose it is. rwrun's
/// server and PMI-2 ignore it.
pub trait Exchange {
    /// Publish `value` under `key` for every rank of the job.
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String>;
    /// Read the value rank `owner` put under `key`, waiting until it has (bounded by the
    /// bootstrap timeout).
    fn get(&mut self, owner: u32, key: &str) -> Result<Vec<u8>, String>;
    /// Read every `(owner, key)` of `keys`, in their order, as [`Exchange::get`] does
    /// each. The default gets them one by one; rwrun's bootstrap answers them in one
    /// round trip per 1024 keys, so learning about `n` peers costs no `n` round trips.
    ///
    /// # Errors
    /// The first failing key's error.
    fn get_many(&mut self, keys: &[(u32, String)]) -> Result<Vec<Vec<u8>>, String> {
        keys.iter().map(|(o, k)| self.get(*o, k)).collect()
    }
    /// Wait until every rank has called `fence` (makes earlier puts visible).
    fn fence(&mut self) -> Result<(), String>;
}

/// Reads of the job's key-value store after setup, by a transport that makes
/// connections on demand (TCP reads a peer's `tcp-addr-<rank>` at the first frame to
/// it). Implemented by the core over its bootstrap client; `get` waits until the key is
/// put, bounded by the bootstrap timeout. Called from [`Transport::send`], so with the
/// caller's progress lock held: the implementation must not take that lock.
pub trait Lookup: Send {
    /// The value rank `owner` put under `key`.
    ///
    /// # Errors
    /// The bootstrap's error, as text.
    fn get(&mut self, owner: u32, key: &str) -> Result<Vec<u8>, String>;
}

/// An environment variable with a value a transport cannot use (`RANKWIRE_TCP_*`,
/// `RANKWIRE_SHM_*`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is not valid: expected {expected}")]
pub struct ConfigError {
    /// The variable.
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What would have been valid.
    pub expected: &'static str,
}

/// The narrow transport interface (compare NCCL's net plugin `ncclNet_v11`).
pub trait Transport {
    /// Capabilities, as plain data.
    fn caps(&self) -> &Caps;
    /// Whether this transport can reach `peer`; `Err` carries the human-readable reason
    /// shown when selection explains why it was not chosen.
    fn can_reach(&self, peer: &PeerInfo) -> Result<(), String>;
    /// Queue or write one frame to `peer`. Returns [`SendOutcome::Busy`] without taking
    /// anything when the transport is backed up.
    ///
    /// # Errors
    /// [`TransportError::PeerLost`] / [`TransportError::NoSuchPeer`] if the peer cannot
    /// be written to.
    fn send(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendOutcome, TransportError>;
    /// Make progress: write queued bytes, read arrived frames, and append what happened
    /// to `events`. Never blocks. Returns whether anything happened (bytes moved or an
    /// event was produced), so the caller can decide between spinning and yielding.
    fn poll(&mut self, events: &mut Vec<Event>) -> bool;
    /// The next arrived frame, lent in place (no copy, no allocation), for transports
    /// that can ([`InFrame`]); `None` when there is none now (default: never; such
    /// transports deliver frames as [`Event::Recv`] from `poll`). Frames from one peer
    /// come in order. The same frame is returned again until
    /// [`Transport::consume_frame`] is called, so take frames with this before calling
    /// `poll`, which delivers the rest as events.
    fn next_frame(&mut self) -> Option<InFrame<'_>> {
        None
    }
    /// Release the frame [`Transport::next_frame`] last returned (its memory may be
    /// reused). Does nothing if there is none.
    fn consume_frame(&mut self) {}
    /// Whether every queued byte has been handed to the OS / peer.
    fn is_flushed(&self) -> bool;
    /// Block up to `timeout` for activity (readable data), where the transport can.
    /// Used by the progress engine's blocking phase. Default: return at once.
    fn wait_activity(&mut self, _timeout: std::time::Duration) {}
    /// A frame that arrived up to its header and waits for the caller to name where its
    /// payload goes ([`Transport::place_payload`]): peer, header bytes, payload length
    /// in bytes. Transports that read payloads from a byte stream offer this (TCP, when
    /// its placement is turned on), so that rendezvous data lands in the receive buffer
    /// without an intermediate copy. Default: `None` (no placement; payloads come in
    /// [`Event::Recv`] or lent by [`Transport::next_frame`]).
    fn awaiting_place(&self) -> Option<(u32, &[u8], usize)> {
        None
    }
    /// Name the place of the payload of `peer`'s frame that [`Transport::awaiting_place`]
    /// returned: `Some(dst)`, which then receives the payload directly and the frame
    /// comes as [`Event::RecvPlaced`], or `None` for an [`Event::Recv`] with a `Vec` of
    /// its own. Default: nothing (no frame ever waits).
    ///
    /// # Safety
    /// `dst` (if given) is valid for writes of the payload's length, and nothing else
    /// reads or writes it until that frame is delivered or the peer has failed.
    unsafe fn place_payload(&mut self, _peer: u32, _dst: Option<*mut u8>) {}
    /// Make `buf` reachable by peers for one-sided operations (a verbs memory region
    /// through the registration cache; a CUDA IPC export; the process id and address
    /// for cross-memory attach). Held until [`Transport::deregister`].
    ///
    /// # Errors
    /// [`TransportError::Unsupported`] where the caps of `buf.kind` say `register: false`
    /// (the default); the failing call otherwise (`ibv_reg_mr`, `cuIpcGetMemHandle`).
    fn register(&mut self, _buf: LocalBuf) -> Result<Registration, TransportError> {
        Err(TransportError::Unsupported {
            transport: self.caps().name,
            what: "register",
        })
    }
    /// Release a registration [`Transport::register`] returned (it may stay cached).
    fn deregister(&mut self, _reg: Registration) {}
    /// Read `dst.len_bytes` bytes from `peer`'s memory `src` (a descriptor the peer
    /// registered), starting `offset_bytes` into it, into the local `dst`: RDMA READ,
    /// `process_vm_readv(2)`, a CUDA IPC copy. The caps of `dst.kind` say whether a
    /// local destination of that kind works (`get`); the kind of the remote memory is
    /// the peer's (`register` of its caps).
    ///
    /// # Safety
    /// `dst` is valid for writes of `dst.len_bytes` bytes and nobody else touches it
    /// until the operation ends ([`OpStart::Done`] on return, or [`Event::OpDone`]).
    ///
    /// # Errors
    /// [`TransportError::Unsupported`] where the caps of `dst.kind` say `get: false`
    /// (the default); the failing call otherwise.
    unsafe fn get(
        &mut self,
        _peer: u32,
        _op: OpId,
        _dst: LocalBuf,
        _src: &RemoteMem,
        _offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        Err(TransportError::Unsupported {
            transport: self.caps().name,
            what: "get",
        })
    }
    /// Write the local `src` into `peer`'s memory `dst`, starting `offset_bytes` into
    /// it: RDMA WRITE, `process_vm_writev(2)`, a CUDA IPC copy. The caps of `src.kind`
    /// say whether a local source of that kind works (`put`).
    ///
    /// # Safety
    /// `src` is valid for reads of `src.len_bytes` bytes and is not written until the
    /// operation ends ([`OpStart::Done`] on return, or [`Event::OpDone`]).
    ///
    /// # Errors
    /// As [`Transport::get`], for `put`.
    unsafe fn put(
        &mut self,
        _peer: u32,
        _op: OpId,
        _src: LocalBuf,
        _dst: &RemoteMem,
        _offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        Err(TransportError::Unsupported {
            transport: self.caps().name,
            what: "put",
        })
    }
}

impl fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryKind::Host => write!(f, "host"),
            MemoryKind::Cuda { device } => write!(f, "cuda:{device}"),
            MemoryKind::CudaManaged => write!(f, "cuda-managed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_copies_are_exact() {
        let src: Vec<u8> = (0..100u8).collect();
        for n in 0..=80 {
            let mut dst = vec![0xeeu8; 88];
            // SAFETY: both buffers hold at least n bytes and do not overlap.
            unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr(), n) };
            assert_eq!(&dst[..n], &src[..n], "n = {n}");
            assert!(
                dst[n..].iter().all(|&b| b == 0xee),
                "n = {n}: wrote past the end"
            );
        }
    }

    #[test]
    fn a_shared_payload_in_two_pieces_copies_and_converts() {
        let a = [1u8, 2, 3];
        let b = [4u8, 5, 6, 7, 8, 9, 10, 11, 12, 13];
        // SAFETY: both arrays outlive the payload and are not written.
        let p = unsafe { InPayload::shared([(a.as_ptr(), 3), (b.as_ptr(), 10)]) };
        assert_eq!(p.len(), 13);
        let mut dst = [0u8; 5];
        p.copy_to(&mut dst);
        assert_eq!(dst, [1, 2, 3, 4, 5]);
        let mut pieces = Vec::new();
        p.for_each_piece(|off, s| pieces.push((off, s.to_vec())));
        assert_eq!(pieces, vec![(0, a.to_vec()), (3, b.to_vec())]);
        assert_eq!(p.into_vec(), (1..=13).collect::<Vec<u8>>());
    }
}
