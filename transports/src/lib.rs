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
//!    [`SendOutcome::Busy`]: back-pressure is a value, never an error) and
//!    [`Transport::poll`] in a loop: spin a bounded number of times, then yield.
//! 4. Progress until [`Transport::is_flushed`] before finalize, then drop.
//!
//! # Frames on the wire
//! Every transport delivers each `(header, payload)` pair whole and in order per peer.
//! Header bytes are at most [`MAX_HEADER_BYTES`]; payload bytes at most the transport's
//! `max_frame_payload` (see [`KindCaps`]). Larger messages are split by the core's
//! rendezvous protocol into `Data` frames.

use std::fmt;

pub mod rdma;
pub mod regcache;
pub mod self_tp;
pub mod shm;
pub mod tcp;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindCaps {
    /// Two-sided `send` of a payload in this memory works.
    pub send: bool,
    /// One-sided `put` (RDMA write / IPC write) into remote memory of this kind works.
    pub put: bool,
    /// One-sided `get` (RDMA read / IPC read) from remote memory of this kind works.
    pub get: bool,
    /// Messages up to this many bytes go eagerly (inline in an `Eager` frame).
    pub eager_limit_bytes: usize,
    /// Largest payload of one frame, in bytes; rendezvous data is chunked to this.
    pub max_frame_payload_bytes: usize,
    /// Largest message, in bytes, the transport can move in total (`u64::MAX` if unlimited).
    pub max_message_bytes: u64,
    /// Memory must be registered before `put`/`get` (RDMA memory regions).
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
    /// A one-sided operation ([`RdmaTransport::get`] / [`RdmaTransport::put`]) with
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
pub trait Exchange {
    /// Publish `value` under `key` for every rank of the job.
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String>;
    /// Read the value of `key`, waiting until some rank has put it (bounded by the
    /// bootstrap timeout).
    fn get(&mut self, key: &str) -> Result<Vec<u8>, String>;
    /// Wait until every rank has called `fence` (makes earlier puts visible).
    fn fence(&mut self) -> Result<(), String>;
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
    /// Whether every queued byte has been handed to the OS / peer.
    fn is_flushed(&self) -> bool;
    /// Block up to `timeout` for activity (readable data), where the transport can.
    /// Used by the progress engine's blocking phase. Default: return at once.
    fn wait_activity(&mut self, _timeout: std::time::Duration) {}
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
