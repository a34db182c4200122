//! Dispatch over the closed set of transports: an enum and `match`, no `dyn`
//! (compare timely-dataflow's `communication/src/allocator/generic.rs`).
//!
//! [`AnyTransport`] is one transport of any kind and implements [`Transport`] by
//! matching on the kind; [`Transports`] is the set one rank holds (at most one of each
//! kind, the self transport always), with typed accessors for the fast paths that need
//! a concrete transport (shared memory's in-place frames) and the one-sided operations
//! routed by the kind of the remote descriptor ([`Transports::get_remote`],
//! [`Transports::put_remote`]).
//!
//! # Adding a transport
//! One variant in [`AnyTransport`] and [`TransportKind`], one arm in the `each!` macro
//! below and in [`AnyTransport::kind`] / [`AnyTransport::set_quiesced`]. The CUDA IPC
//! transport (`crate::cuda_ipc::CudaIpcTransport`, feature `cuda`) is one of the set
//! (its places are marked `CUDA IPC:`); [`RemoteMem::CudaIpc`] descriptors route to it.

use std::time::Duration;

use crate::shm::cma::Cma;
use crate::{
    Caps, Event, InFrame, LocalBuf, OpId, OpStart, PeerInfo, RdmaTransport, Registration,
    RemoteMem, SelfTransport, SendOutcome, ShmTransport, TcpTransport, Transport, TransportError,
};

/// The kinds of transport, in the order of the selection table (self → shm → cuda_ipc
/// → rdma → tcp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransportKind {
    /// The calling rank itself ([`SelfTransport`]).
    SelfTp,
    /// Shared-memory rings, same node ([`ShmTransport`]).
    Shm,
    // CUDA IPC: between shm and rdma, as in the selection table.
    /// CUDA IPC, one-sided gets of same-node device memory
    /// ([`crate::cuda_ipc::CudaIpcTransport`]).
    #[cfg(feature = "cuda")]
    CudaIpc,
    /// RDMA, verbs RC queue pairs ([`RdmaTransport`]).
    Rdma,
    /// TCP sockets ([`TcpTransport`]).
    Tcp,
}

impl TransportKind {
    /// Every kind, in the order of the selection table.
    pub const ALL: &'static [TransportKind] = &[
        TransportKind::SelfTp,
        TransportKind::Shm,
        // CUDA IPC:
        #[cfg(feature = "cuda")]
        TransportKind::CudaIpc,
        TransportKind::Rdma,
        TransportKind::Tcp,
    ];

    /// The short name of the transport ("self", "shm", "cuda_ipc", "rdma", "tcp"), as in
    /// its caps.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::SelfTp => "self",
            TransportKind::Shm => "shm",
            #[cfg(feature = "cuda")]
            TransportKind::CudaIpc => "cuda_ipc",
            TransportKind::Rdma => "rdma",
            TransportKind::Tcp => "tcp",
        }
    }

    #[inline]
    fn slot(self) -> usize {
        self as usize
    }
}

/// Number of kinds (slots of [`Transports`]).
const KINDS: usize = if cfg!(feature = "cuda") { 5 } else { 4 }; // CUDA IPC: one slot.

/// One transport of any kind. Implements [`Transport`] by `match`.
// A process holds one of each kind at most, so the size of the largest variant costs a
// few hundred bytes once; boxing it would put a pointer chase on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum AnyTransport {
    /// The self transport.
    SelfTp(SelfTransport),
    /// The shared-memory transport.
    Shm(ShmTransport),
    // CUDA IPC:
    /// The CUDA IPC transport.
    #[cfg(feature = "cuda")]
    CudaIpc(crate::cuda_ipc::CudaIpcTransport),
    /// The RDMA transport.
    Rdma(RdmaTransport),
    /// The TCP transport.
    Tcp(TcpTransport),
}

/// `each!(self, t => expr)`: `expr` with `t` bound to the transport of every variant.
macro_rules! each {
    ($s:expr, $t:ident => $e:expr) => {
        match $s {
            AnyTransport::SelfTp($t) => $e,
            AnyTransport::Shm($t) => $e,
            // CUDA IPC:
            #[cfg(feature = "cuda")]
            AnyTransport::CudaIpc($t) => $e,
            AnyTransport::Rdma($t) => $e,
            AnyTransport::Tcp($t) => $e,
        }
    };
}

impl AnyTransport {
    /// Which kind this is.
    #[inline]
    pub fn kind(&self) -> TransportKind {
        match self {
            AnyTransport::SelfTp(_) => TransportKind::SelfTp,
            AnyTransport::Shm(_) => TransportKind::Shm,
            #[cfg(feature = "cuda")]
            AnyTransport::CudaIpc(_) => TransportKind::CudaIpc,
            AnyTransport::Rdma(_) => TransportKind::Rdma,
            AnyTransport::Tcp(_) => TransportKind::Tcp,
        }
    }

    /// Mark the end of communication (after the core's finalize fence): peers closing
    /// connections or exiting are no longer failures. Nothing for the self transport
    /// and CUDA IPC (whose owner unmaps peers' memory with `CudaIpcTransport::close_all`
    /// before it releases its pool).
    pub fn set_quiesced(&mut self) {
        match self {
            AnyTransport::SelfTp(_) => {}
            #[cfg(feature = "cuda")]
            AnyTransport::CudaIpc(_) => {}
            AnyTransport::Shm(t) => t.set_quiesced(),
            AnyTransport::Rdma(t) => t.set_quiesced(),
            AnyTransport::Tcp(t) => t.set_quiesced(),
        }
    }
}

impl From<SelfTransport> for AnyTransport {
    fn from(t: SelfTransport) -> Self {
        AnyTransport::SelfTp(t)
    }
}
impl From<ShmTransport> for AnyTransport {
    fn from(t: ShmTransport) -> Self {
        AnyTransport::Shm(t)
    }
}
#[cfg(feature = "cuda")]
impl From<crate::cuda_ipc::CudaIpcTransport> for AnyTransport {
    fn from(t: crate::cuda_ipc::CudaIpcTransport) -> Self {
        AnyTransport::CudaIpc(t)
    }
}
impl From<RdmaTransport> for AnyTransport {
    fn from(t: RdmaTransport) -> Self {
        AnyTransport::Rdma(t)
    }
}
impl From<TcpTransport> for AnyTransport {
    fn from(t: TcpTransport) -> Self {
        AnyTransport::Tcp(t)
    }
}

impl Transport for AnyTransport {
    #[inline]
    fn caps(&self) -> &Caps {
        each!(self, t => t.caps())
    }
    fn can_reach(&self, peer: &PeerInfo) -> Result<(), String> {
        each!(self, t => t.can_reach(peer))
    }
    #[inline]
    fn send(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendOutcome, TransportError> {
        each!(self, t => t.send(peer, header, payload))
    }
    #[inline]
    fn poll(&mut self, events: &mut Vec<Event>) -> bool {
        each!(self, t => t.poll(events))
    }
    #[inline]
    fn next_frame(&mut self) -> Option<InFrame<'_>> {
        each!(self, t => t.next_frame())
    }
    #[inline]
    fn consume_frame(&mut self) {
        each!(self, t => t.consume_frame())
    }
    fn is_flushed(&self) -> bool {
        each!(self, t => t.is_flushed())
    }
    fn wait_activity(&mut self, timeout: Duration) {
        each!(self, t => t.wait_activity(timeout))
    }
    #[inline]
    fn awaiting_place(&self) -> Option<(u32, &[u8], usize)> {
        each!(self, t => t.awaiting_place())
    }
    unsafe fn place_payload(&mut self, peer: u32, dst: Option<*mut u8>) {
        // SAFETY: forwarded to the caller.
        each!(self, t => unsafe { t.place_payload(peer, dst) })
    }
    fn register(&mut self, buf: LocalBuf) -> Result<Registration, TransportError> {
        each!(self, t => t.register(buf))
    }
    fn deregister(&mut self, reg: Registration) {
        each!(self, t => t.deregister(reg))
    }
    unsafe fn get(
        &mut self,
        peer: u32,
        op: OpId,
        dst: LocalBuf,
        src: &RemoteMem,
        offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        // SAFETY: forwarded to the caller. (Called as `Transport::get`: the RDMA
        // transport also has an inherent `get` over raw addresses.)
        each!(self, t => unsafe { Transport::get(t, peer, op, dst, src, offset_bytes) })
    }
    unsafe fn put(
        &mut self,
        peer: u32,
        op: OpId,
        src: LocalBuf,
        dst: &RemoteMem,
        offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        // SAFETY: forwarded to the caller.
        each!(self, t => unsafe { Transport::put(t, peer, op, src, dst, offset_bytes) })
    }
}

/// The transports of one rank: the self transport always, at most one of every other
/// kind (a slot per [`TransportKind`]), and cross-memory attach for host descriptors
/// when no shared-memory transport is held (ranks of one node that talk TCP still pull
/// large messages in one copy).
#[derive(Debug)]
pub struct Transports {
    slots: [Option<AnyTransport>; KINDS],
    cma: Cma,
}

impl Transports {
    /// A set holding `self_tp` only.
    pub fn new(self_tp: SelfTransport) -> Transports {
        let mut slots: [Option<AnyTransport>; KINDS] = Default::default();
        slots[TransportKind::SelfTp.slot()] = Some(AnyTransport::SelfTp(self_tp));
        Transports {
            slots,
            cma: Cma::new(),
        }
    }

    /// Add `t`, replacing a transport of the same kind (returned).
    pub fn insert(&mut self, t: impl Into<AnyTransport>) -> Option<AnyTransport> {
        let t = t.into();
        let k = t.kind().slot();
        self.slots[k].replace(t)
    }

    /// Whether a transport of `kind` is held.
    #[inline]
    pub fn contains(&self, kind: TransportKind) -> bool {
        self.slots[kind.slot()].is_some()
    }

    /// The transport of `kind`, if held.
    #[inline]
    pub fn by_kind(&self, kind: TransportKind) -> Option<&AnyTransport> {
        self.slots[kind.slot()].as_ref()
    }

    /// The transport of `kind`, if held, for sending and polling.
    #[inline]
    pub fn by_kind_mut(&mut self, kind: TransportKind) -> Option<&mut AnyTransport> {
        self.slots[kind.slot()].as_mut()
    }

    /// Two transports of different kinds at once, mutably (`None` where absent).
    ///
    /// # Panics
    /// If `a == b` (a caller bug: one transport cannot be lent twice).
    pub fn two_mut(
        &mut self,
        a: TransportKind,
        b: TransportKind,
    ) -> (Option<&mut AnyTransport>, Option<&mut AnyTransport>) {
        assert_ne!(a, b, "two_mut: the same kind twice");
        let (i, j) = (a.slot(), b.slot());
        let (lo, hi) = self.slots.split_at_mut(i.max(j));
        let (first, second) = (lo[i.min(j)].as_mut(), hi[0].as_mut());
        if i < j {
            (first, second)
        } else {
            (second, first)
        }
    }

    /// Every transport held, in the order of [`TransportKind::ALL`].
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut AnyTransport> {
        self.slots.iter_mut().flatten()
    }

    /// The shared-memory transport, for its fast paths (a ring of one peer, the
    /// one-load arrival check).
    #[inline]
    pub fn shm(&self) -> Option<&ShmTransport> {
        match &self.slots[TransportKind::Shm.slot()] {
            Some(AnyTransport::Shm(t)) => Some(t),
            _ => None,
        }
    }

    /// The shared-memory transport, mutably (see [`Transports::shm`]).
    #[inline]
    pub fn shm_mut(&mut self) -> Option<&mut ShmTransport> {
        match &mut self.slots[TransportKind::Shm.slot()] {
            Some(AnyTransport::Shm(t)) => Some(t),
            _ => None,
        }
    }

    /// The RDMA transport (its registration cache and device, for the GPU path choice).
    pub fn rdma(&self) -> Option<&RdmaTransport> {
        match &self.slots[TransportKind::Rdma.slot()] {
            Some(AnyTransport::Rdma(t)) => Some(t),
            _ => None,
        }
    }

    /// The RDMA transport, mutably (its on-demand wireup messages).
    pub fn rdma_mut(&mut self) -> Option<&mut RdmaTransport> {
        match &mut self.slots[TransportKind::Rdma.slot()] {
            Some(AnyTransport::Rdma(t)) => Some(t),
            _ => None,
        }
    }

    /// The CUDA IPC transport (its cache counters, whether copies run).
    #[cfg(feature = "cuda")]
    pub fn cuda_ipc(&self) -> Option<&crate::cuda_ipc::CudaIpcTransport> {
        match &self.slots[TransportKind::CudaIpc.slot()] {
            Some(AnyTransport::CudaIpc(t)) => Some(t),
            _ => None,
        }
    }

    /// The CUDA IPC transport, mutably (for the core's buffer offers).
    #[cfg(feature = "cuda")]
    pub fn cuda_ipc_mut(&mut self) -> Option<&mut crate::cuda_ipc::CudaIpcTransport> {
        match &mut self.slots[TransportKind::CudaIpc.slot()] {
            Some(AnyTransport::CudaIpc(t)) => Some(t),
            _ => None,
        }
    }

    /// The TCP transport, mutably (its settings, such as payload placement).
    pub fn tcp_mut(&mut self) -> Option<&mut TcpTransport> {
        match &mut self.slots[TransportKind::Tcp.slot()] {
            Some(AnyTransport::Tcp(t)) => Some(t),
            _ => None,
        }
    }

    /// Allow or forbid single copy by cross-memory attach (`RANKWIRE_CMA=0` forbids
    /// it): the shared-memory transport's caps follow
    /// ([`ShmTransport::set_cma_allowed`]).
    pub fn set_cma_allowed(&mut self, on: bool) {
        self.cma.set_allowed(on);
        if let Some(t) = self.shm_mut() {
            t.set_cma_allowed(on);
        }
    }

    /// Whether every transport has handed every queued byte on.
    pub fn is_flushed(&self) -> bool {
        self.slots.iter().flatten().all(|t| t.is_flushed())
    }

    /// [`AnyTransport::set_quiesced`] on every transport.
    pub fn set_quiesced(&mut self) {
        for t in self.iter_mut() {
            t.set_quiesced();
        }
    }

    /// [`Transport::get`] on the transport that reaches memory described by `src`:
    /// [`RemoteMem::HostCma`] by shared memory (or by cross-memory attach alone when no
    /// shared-memory transport is held), [`RemoteMem::Rdma`] by RDMA,
    /// [`RemoteMem::CudaIpc`] by CUDA IPC (feature `cuda`).
    ///
    /// # Safety
    /// As [`Transport::get`].
    ///
    /// # Errors
    /// [`TransportError::Unsupported`] for a descriptor no held transport reaches
    /// (`RemoteMem::None`, CUDA IPC without the CUDA IPC transport or feature `cuda`,
    /// RDMA without the RDMA transport); the transport's
    /// error otherwise.
    pub unsafe fn get_remote(
        &mut self,
        peer: u32,
        op: OpId,
        dst: LocalBuf,
        src: &RemoteMem,
        offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        match (src, self.remote_slot(src)) {
            // SAFETY: forwarded to the caller.
            (_, Some(t)) => unsafe { t.get(peer, op, dst, src, offset_bytes) },
            // SAFETY: forwarded to the caller.
            (RemoteMem::HostCma { .. }, None) => unsafe { self.cma.get(dst, src, offset_bytes) },
            _ => Err(TransportError::Unsupported {
                transport: "none",
                what: "get from this kind of remote memory",
            }),
        }
    }

    /// [`Transport::put`] on the transport that reaches memory described by `dst` (as
    /// [`Transports::get_remote`]).
    ///
    /// # Safety
    /// As [`Transport::put`].
    ///
    /// # Errors
    /// As [`Transports::get_remote`].
    pub unsafe fn put_remote(
        &mut self,
        peer: u32,
        op: OpId,
        src: LocalBuf,
        dst: &RemoteMem,
        offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        match (dst, self.remote_slot(dst)) {
            // SAFETY: forwarded to the caller.
            (_, Some(t)) => unsafe { t.put(peer, op, src, dst, offset_bytes) },
            // SAFETY: forwarded to the caller.
            (RemoteMem::HostCma { .. }, None) => unsafe { self.cma.put(src, dst, offset_bytes) },
            _ => Err(TransportError::Unsupported {
                transport: "none",
                what: "put into this kind of remote memory",
            }),
        }
    }

    /// The held transport that reaches memory described by `mem`.
    fn remote_slot(&mut self, mem: &RemoteMem) -> Option<&mut AnyTransport> {
        let kind = match mem {
            RemoteMem::HostCma { .. } => TransportKind::Shm,
            RemoteMem::Rdma { .. } => TransportKind::Rdma,
            // CUDA IPC:
            #[cfg(feature = "cuda")]
            RemoteMem::CudaIpc { .. } => TransportKind::CudaIpc,
            #[cfg(not(feature = "cuda"))]
            RemoteMem::CudaIpc { .. } => return None,
            RemoteMem::None => return None,
        };
        self.by_kind_mut(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryKind;

    #[test]
    fn the_set_dispatches_by_kind_and_descriptor() {
        let mut ts = Transports::new(SelfTransport::new(0));
        assert!(ts.contains(TransportKind::SelfTp) && !ts.contains(TransportKind::Shm));
        assert_eq!(ts.iter_mut().count(), 1);
        let t = ts.by_kind_mut(TransportKind::SelfTp).unwrap();
        assert_eq!(t.kind(), TransportKind::SelfTp);
        assert_eq!(t.caps().name, TransportKind::SelfTp.name());
        assert_eq!(t.send(0, b"h", b"p"), Ok(SendOutcome::Sent));
        let mut ev = Vec::new();
        assert!(t.poll(&mut ev));
        assert!(matches!(&ev[..], [Event::Recv { peer: 0, .. }]));
        assert!(ts.is_flushed());
        // Without shm, host descriptors are still read by cross-memory attach.
        let src: Vec<u8> = (0..64u8).collect();
        let mut dst = vec![0u8; 16];
        let local = LocalBuf {
            addr: dst.as_mut_ptr() as u64,
            len_bytes: 16,
            kind: MemoryKind::Host,
        };
        let mem = RemoteMem::HostCma {
            pid: std::process::id(),
            addr: src.as_ptr() as u64,
        };
        // SAFETY: dst is live and exclusive.
        assert_eq!(
            unsafe { ts.get_remote(0, 1, local, &mem, 8) },
            Ok(OpStart::Done)
        );
        assert_eq!(dst, (8..24u8).collect::<Vec<_>>());
        ts.set_cma_allowed(false);
        // SAFETY: as above.
        let e = unsafe { ts.get_remote(0, 1, local, &mem, 8) }.unwrap_err();
        assert!(matches!(e, TransportError::Unsupported { .. }), "{e}");
        let rdma = RemoteMem::Rdma {
            addr: 0,
            len: 16,
            rkey: 1,
        };
        // SAFETY: as above.
        let e = unsafe { ts.get_remote(0, 1, local, &rdma, 0) }.unwrap_err();
        assert!(matches!(e, TransportError::Unsupported { .. }), "{e}");
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_ipc_descriptors_route_to_the_cuda_ipc_transport() {
        use crate::cuda_ipc::{CudaIpcConfig, CudaIpcTransport};
        let mut ts = Transports::new(SelfTransport::new(0));
        let mem = RemoteMem::CudaIpc {
            handle: [1; 64],
            offset: 0,
            buffer_id: 9,
            device: 0,
            base: 0x7000_0000,
            alloc_len: 4096,
        };
        // A managed destination: refused by the transport before any driver call.
        let dst = LocalBuf {
            addr: 0x1000,
            len_bytes: 16,
            kind: MemoryKind::CudaManaged,
        };
        // SAFETY: refused without touching `dst`.
        let e = unsafe { ts.get_remote(0, 1, dst, &mem, 0) }.unwrap_err();
        assert!(
            matches!(
                e,
                TransportError::Unsupported {
                    transport: "none",
                    ..
                }
            ),
            "{e}"
        );
        let pool = std::sync::Arc::new(rankwire_gpu::TmpPool::new(0));
        ts.insert(CudaIpcTransport::new(pool, CudaIpcConfig::default()));
        assert!(ts.contains(TransportKind::CudaIpc) && ts.cuda_ipc().is_some());
        assert_eq!(
            ts.by_kind(TransportKind::CudaIpc).unwrap().caps().name,
            "cuda_ipc"
        );
        // SAFETY: as above.
        let e = unsafe { ts.get_remote(0, 1, dst, &mem, 0) }.unwrap_err();
        assert!(
            matches!(
                e,
                TransportError::Unsupported {
                    transport: "cuda_ipc",
                    ..
                }
            ),
            "{e}"
        );
        assert!(ts.is_flushed() && !ts.cuda_ipc().unwrap().busy());
    }

    #[test]
    fn kinds_are_in_table_order_and_fill_the_slots() {
        assert_eq!(TransportKind::ALL.len(), KINDS);
        for (i, k) in TransportKind::ALL.iter().enumerate() {
            assert_eq!(k.slot(), i);
        }
    }
}
