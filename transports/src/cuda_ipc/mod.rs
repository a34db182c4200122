//! CUDA IPC as a one-sided transport (feature `cuda`): a peer on the same node exports
//! a device allocation (`cuIpcGetMemHandle`), and this process maps it
//! (`cuIpcOpenMemHandle`) and copies out of it on its runtime stream
//! (`cuMemcpyDtoDAsync` / `cuMemcpyDtoHAsync`).
//!
//! Like UCX's `cuda_ipc` transport it moves no frames: [`Transport::send`] is
//! unsupported, and the control frames that carry descriptors (`Rts`, `Fin`) travel over
//! another transport (shm). What it does:
//! - [`Transport::register`] of device memory exports it and returns the descriptor
//!   ([`RemoteMem::CudaIpc`]: handle, allocation base and length, buffer id, offset,
//!   device). Memory legacy IPC cannot export (stream-ordered pool memory from
//!   `cuMemAllocAsync`, which cudarc's allocator returns; VMM memory) is copied on the
//!   device into a `cuMemAlloc` staging buffer from the shared [`TmpPool`] and that
//!   buffer is exported instead (the copy is a snapshot taken at registration);
//!   [`Transport::deregister`] gives the staging buffer back to the pool. Managed memory
//!   is never exported.
//! - [`Transport::get`] maps the peer's allocation through a per-peer [`IpcCache`] (a
//!   changed buffer id at the same base means the peer freed and re-allocated: the stale
//!   mapping is closed once no copy uses it, B008), queues the copy on the runtime
//!   stream of the receiving device with an event behind it and answers
//!   [`OpStart::Pending`]; copies of later gets queue behind it.
//! - [`Transport::poll`] reports finished copies as [`Event::OpDone`] in queue order and
//!   releases their mappings (a mapping is unmapped only when nothing is in flight on
//!   it).
//! - [`CudaIpcTransport::close_all`] waits for the copies still running and unmaps
//!   everything (finalize).
//!
//! A completed get's data is visible to work on any stream of the receiving device
//! (the event has completed, so the copy has).
//!
//! Source: CUDA Driver API, "Inter-Process Communication"
//! (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle_v2`, `cuIpcCloseMemHandle`).

mod desc;

use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::sync::Arc;

use rankwire_gpu::{Event as CuEvent, GpuError, IpcCache, IpcMapping, Stream, TmpPool};

use crate::{
    Caps, Event, KindCaps, LocalBuf, MemoryKind, OpId, OpStart, PeerInfo, Reach, Registration,
    RemoteMem, SendOutcome, Transport, TransportError,
};
pub use desc::remote_of;
use desc::{DescError, export_of};

const NAME: &str = "cuda_ipc";

/// Settings of a [`CudaIpcTransport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaIpcConfig {
    /// Register memory legacy IPC cannot export through a pooled staging buffer
    /// (rankwire: `RANKWIRE_GPU_IPC_STAGING`, default on). Off: such a registration
    /// fails and the caller stages through host memory.
    pub staging: bool,
    /// Idle peer mappings kept open by the IPC cache (default 64).
    pub max_mappings: NonZeroUsize,
    /// Node identity of this process (as in [`PeerInfo::node_id`]); `None`: unknown, so
    /// [`Transport::can_reach`] reaches nobody.
    pub node_id: Option<String>,
}

impl Default for CudaIpcConfig {
    fn default() -> Self {
        CudaIpcConfig {
            staging: true,
            max_mappings: NonZeroUsize::new(64).unwrap_or(NonZeroUsize::MIN),
            node_id: None,
        }
    }
}

/// A get whose copy is queued on the runtime stream.
struct InFlight {
    peer: u32,
    op: OpId,
    mapping: IpcMapping,
    done: CuEvent,
}

/// CUDA IPC between processes of one node: one-sided `get` out of peers' exported
/// device memory, `register` to export (see the [module documentation](self)).
pub struct CudaIpcTransport {
    caps: Caps,
    cfg: CudaIpcConfig,
    /// Staging buffers of registrations come from here (shared with the collectives).
    pool: Arc<TmpPool>,
    /// Opened peer mappings; built on the first get, mapping into that get's device.
    cache: Option<IpcCache>,
    /// In stream order (one stream per device; all gets of a process go to one device
    /// in practice, and completion is checked per entry anyway).
    in_flight: VecDeque<InFlight>,
    /// Completion events to reuse.
    spare: Vec<CuEvent>,
}

/// The capabilities of [`CudaIpcTransport`]:
/// - `cuda` (device memory): `get` (out of a peer's device export into local device
///   memory), no `send`, no `put`; `register` (export) works and is required for a
///   peer to read it (`needs_registration`); messages are bounded only by the exported allocation (checked per
///   get), hence `max_message_bytes: u64::MAX`; no frames (`eager_limit_bytes` and
///   `max_frame_payload_bytes` 0).
/// - `host`: `get` only, as the destination of a device-to-host copy out of a peer's
///   device export; host memory is never exported (`register: false`: `register` of
///   host memory is refused, and a host destination needs no registration).
/// - `cuda_managed`: `None` (legacy IPC never exports managed memory, B010).
pub fn caps() -> Caps {
    let get_only = KindCaps {
        send: false,
        put: false,
        get: true,
        register: true,
        eager_limit_bytes: 0,
        max_frame_payload_bytes: 0,
        max_message_bytes: u64::MAX,
        needs_registration: true,
    };
    Caps {
        name: NAME,
        reach: Reach::Node,
        host: Some(KindCaps {
            register: false,
            needs_registration: false,
            ..get_only
        }),
        cuda: Some(get_only),
        cuda_managed: None,
    }
}

fn gpu_err(call: &'static str, e: GpuError) -> TransportError {
    TransportError::Os {
        transport: NAME,
        call,
        reason: e.to_string(),
    }
}

impl CudaIpcTransport {
    /// A transport taking staging buffers from `pool`. Touches no driver: the IPC
    /// cache is built on the first [`Transport::get`].
    pub fn new(pool: Arc<TmpPool>, cfg: CudaIpcConfig) -> Self {
        CudaIpcTransport {
            caps: caps(),
            cfg,
            pool,
            cache: None,
            in_flight: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// The pool this transport stages from.
    pub fn pool(&self) -> &Arc<TmpPool> {
        &self.pool
    }

    /// Whether copies are still running.
    pub fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Counters of the IPC cache (opened, hits, stale evictions, open now); `None`
    /// before the first get.
    pub fn stats(&self) -> Option<rankwire_gpu::IpcCacheStats> {
        self.cache.as_ref().map(|c| c.stats())
    }

    /// Wait for the copies still running (their completions are dropped: call it when
    /// no request waits for them), then unmap every peer mapping (finalize).
    pub fn close_all(&mut self) {
        let mut events = Vec::new();
        while self.busy() {
            events.clear();
            self.poll(&mut events);
            std::thread::yield_now();
        }
        if let Some(c) = self.cache.as_mut()
            && let Err(e) = c.close_all()
        {
            tracing::warn!("closing CUDA IPC mappings: {e}");
        }
    }

    /// Queue the copy of `dst.len_bytes` bytes from the peer's mapped buffer into `dst`.
    fn queue_copy(
        &mut self,
        device: i32,
        dst: LocalBuf,
        mapping: &IpcMapping,
    ) -> Result<CuEvent, TransportError> {
        let stream = Stream::runtime(device).map_err(|e| gpu_err("runtime stream", e))?;
        // SAFETY: the mapping stays open until released after the copy completed; the
        // caller of get keeps `dst` valid for len_bytes of writes until OpDone.
        unsafe {
            if dst.kind == MemoryKind::Host {
                rankwire_gpu::memcpy_dtoh_async(
                    dst.addr as *mut u8,
                    mapping.addr(),
                    dst.len_bytes,
                    stream,
                )
                .map_err(|e| gpu_err("cuMemcpyDtoHAsync", e))?
            } else {
                rankwire_gpu::memcpy_dtod_async(dst.addr, mapping.addr(), dst.len_bytes, stream)
                    .map_err(|e| gpu_err("cuMemcpyDtoDAsync", e))?
            }
        };
        let ev = match self.spare.pop() {
            Some(e) if e.device() == device => e,
            _ => CuEvent::new(device).map_err(|e| gpu_err("cuEventCreate", e))?,
        };
        ev.record(stream).map_err(|e| gpu_err("cuEventRecord", e))?;
        Ok(ev)
    }
}

impl std::fmt::Debug for CudaIpcTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaIpcTransport")
            .field("cfg", &self.cfg)
            .field("in_flight", &self.in_flight.len())
            .field("cache_open", &self.cache.is_some())
            .finish_non_exhaustive()
    }
}

impl Transport for CudaIpcTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn can_reach(&self, peer: &PeerInfo) -> Result<(), String> {
        match &self.cfg.node_id {
            None => Err("this process's node is not known to cuda_ipc".into()),
            Some(n) if *n != peer.node_id => Err("on another node".into()),
            Some(_) if !rankwire_gpu::available() => Err("no CUDA driver in this process".into()),
            Some(_) => Ok(()),
        }
    }

    /// Unsupported: a one-sided transport; frames go over shm.
    fn send(
        &mut self,
        _peer: u32,
        _header: &[u8],
        _payload: &[u8],
    ) -> Result<SendOutcome, TransportError> {
        Err(TransportError::Unsupported {
            transport: NAME,
            what: "send (one-sided transport: frames travel over shm)",
        })
    }

    fn poll(&mut self, events: &mut Vec<Event>) -> bool {
        let mut any = false;
        while let Some(f) = self.in_flight.front() {
            let r = match f.done.query() {
                Ok(false) => break,
                Ok(true) => Ok(()),
                Err(e) => Err(gpu_err("cuEventQuery", e)),
            };
            let Some(f) = self.in_flight.pop_front() else {
                break;
            };
            let rel = match self.cache.as_mut() {
                Some(c) => c
                    .release(f.mapping)
                    .map_err(|e| gpu_err("cuIpcCloseMemHandle", e)),
                None => Ok(()),
            };
            if r.is_ok() {
                self.spare.push(f.done);
            }
            any = true;
            events.push(Event::OpDone {
                peer: f.peer,
                op: f.op,
                result: r.and(rel),
            });
        }
        any
    }

    fn is_flushed(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// Export device memory: [`RemoteMem::CudaIpc`], handle 0; or, for memory legacy
    /// IPC cannot export (with [`CudaIpcConfig::staging`]), a staging buffer's export,
    /// handle = that buffer (a snapshot of `buf` taken now).
    ///
    /// # Errors
    /// [`TransportError::Unsupported`] for host and managed memory; `Os` with the
    /// failing call (`cuIpcGetMemHandle`, a zero-length buffer, staging allocation).
    fn register(&mut self, buf: LocalBuf) -> Result<Registration, TransportError> {
        register_device(&self.pool, buf, self.cfg.staging)
    }

    fn deregister(&mut self, reg: Registration) {
        if reg.handle != 0 {
            self.pool.give_device(reg.handle);
        }
    }

    /// Queue the copy of `dst.len_bytes` bytes from `offset_bytes` into the peer's
    /// export `src` into `dst` (device or host memory) on the runtime stream of the
    /// receiving device (the descriptor's device for a host destination).
    /// [`OpStart::Pending`]; [`OpStart::Done`] at once for zero bytes.
    ///
    /// # Safety
    /// As [`Transport::get`].
    ///
    /// # Errors
    /// `Unsupported` for a managed destination; `Malformed` for a descriptor that is not
    /// CUDA IPC or a read past the exported allocation; `Os` with the failing driver
    /// call (map, copy, event).
    unsafe fn get(
        &mut self,
        peer: u32,
        op: OpId,
        dst: LocalBuf,
        src: &RemoteMem,
        offset_bytes: u64,
    ) -> Result<OpStart, TransportError> {
        if dst.kind == MemoryKind::CudaManaged {
            return Err(TransportError::Unsupported {
                transport: NAME,
                what: "get into managed memory",
            });
        }
        let export =
            export_of(src, offset_bytes, dst.len_bytes).map_err(|e| TransportError::Malformed {
                transport: NAME,
                peer,
                reason: match e {
                    DescError::NotCudaIpc => format!("not a CUDA IPC descriptor: {src:?}"),
                    DescError::OutOfBounds => format!(
                        "read of {} bytes at {offset_bytes} runs past the exported allocation",
                        dst.len_bytes
                    ),
                },
            })?;
        if dst.len_bytes == 0 {
            return Ok(OpStart::Done);
        }
        let device = match dst.kind {
            MemoryKind::Cuda { device } => device,
            _ => export.device,
        };
        let max = self.cfg.max_mappings;
        let mapping = self
            .cache
            .get_or_insert_with(|| IpcCache::new(device, max))
            .acquire(peer, &export)
            .map_err(|e| gpu_err("cuIpcOpenMemHandle", e))?;
        match self.queue_copy(device, dst, &mapping) {
            Ok(done) => {
                self.in_flight.push_back(InFlight {
                    peer,
                    op,
                    mapping,
                    done,
                });
                Ok(OpStart::Pending)
            }
            Err(e) => {
                // The copy may have been queued before the event failed: wait for it.
                if let Ok(s) = Stream::runtime(device) {
                    let _ = s.synchronize();
                }
                if let Some(c) = self.cache.as_mut() {
                    let _ = c.release(mapping);
                }
                Err(e)
            }
        }
    }
}

/// [`Transport::register`] of [`CudaIpcTransport`], for callers that hold the pool but
/// not the transport: export device memory ([`RemoteMem::CudaIpc`], handle 0), or,
/// with `staging`, copy memory legacy IPC cannot export into a staging buffer from
/// `pool` and export that (handle = the staging buffer's address; a snapshot of `buf`
/// taken now). Give a nonzero handle back with [`TmpPool::give_device`] (what
/// [`Transport::deregister`] does) once no peer reads it.
///
/// # Errors
/// [`TransportError::Unsupported`] for host and managed memory; `Os` with the failing
/// call (`cuIpcGetMemHandle`, a zero-length buffer, the staging allocation or copy).
pub fn register_device(
    pool: &TmpPool,
    buf: LocalBuf,
    staging: bool,
) -> Result<Registration, TransportError> {
    let MemoryKind::Cuda { device } = buf.kind else {
        return Err(TransportError::Unsupported {
            transport: NAME,
            what: "register of host or managed memory",
        });
    };
    match rankwire_gpu::ipc_export(buf.addr, buf.len_bytes) {
        Ok(e) => Ok(Registration {
            remote: remote_of(&e),
            handle: 0,
        }),
        Err(GpuError::Unsupported(rankwire_gpu::Unsupported::NotIpcCapable)) if staging => {
            register_staged(pool, device, buf)
                .map_err(|e| gpu_err("staging for cuIpcGetMemHandle", e))
        }
        Err(e) => Err(gpu_err("cuIpcGetMemHandle", e)),
    }
}

/// Copy `buf` (device memory legacy IPC cannot export) into a pooled `cuMemAlloc`
/// buffer and export that: the registration's handle is the staging buffer.
fn register_staged(pool: &TmpPool, device: i32, buf: LocalBuf) -> Result<Registration, GpuError> {
    let stage = pool.take_device(device, buf.len_bytes)?;
    let exported = Stream::runtime(device).and_then(|stream| {
        // SAFETY: the caller of register keeps `buf` live device memory of
        // len_bytes; `stage` is a pooled allocation of at least that many bytes,
        // lent to this registration.
        unsafe { rankwire_gpu::memcpy_dtod_async(stage, buf.addr, buf.len_bytes, stream) }?;
        stream.synchronize()?;
        rankwire_gpu::ipc_export(stage, buf.len_bytes)
    });
    match exported {
        Ok(e) => {
            tracing::debug!(
                "device buffer of {} bytes is not IPC-capable; registered through a \
                 staging buffer",
                buf.len_bytes
            );
            Ok(Registration {
                remote: remote_of(&e),
                handle: stage,
            })
        }
        Err(e) => {
            pool.give_device(stage);
            Err(e)
        }
    }
}

/// Two transports of one process over one pool, for the transport conformance suite
/// (caps, `send` refused, `register`/`deregister` of device memory, `get` argument
/// checks). `None` without a CUDA device. A `get` between them cannot succeed:
/// `cuIpcOpenMemHandle` refuses handles exported by the calling process, so the data
/// path is exercised across two processes (`transports/tests/cuda_ipc.rs`).
pub fn conformance_pair() -> Option<(CudaIpcTransport, CudaIpcTransport)> {
    if !rankwire_gpu::available() || rankwire_gpu::device_count().ok()? == 0 {
        return None;
    }
    let pool = Arc::new(TmpPool::new(1 << 30));
    let cfg = CudaIpcConfig {
        node_id: Some("conformance".into()),
        ..CudaIpcConfig::default()
    };
    Some((
        CudaIpcTransport::new(pool.clone(), cfg.clone()),
        CudaIpcTransport::new(pool, cfg),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> CudaIpcTransport {
        CudaIpcTransport::new(Arc::new(TmpPool::new(1 << 20)), CudaIpcConfig::default())
    }

    fn remote() -> RemoteMem {
        RemoteMem::CudaIpc {
            handle: [1; 64],
            offset: 0,
            buffer_id: 9,
            device: 0,
            base: 0x7000_0000,
            alloc_len: 4096,
        }
    }

    #[test]
    fn caps_declare_get_into_device_and_host_and_nothing_else() {
        let t = t();
        let c = t.caps();
        assert_eq!((c.name, c.reach), ("cuda_ipc", Reach::Node));
        let d = c.for_kind(MemoryKind::Cuda { device: 0 }).unwrap();
        assert!(d.get && !d.put && !d.send && d.needs_registration);
        assert_eq!((d.eager_limit_bytes, d.max_frame_payload_bytes), (0, 0));
        let h = c.for_kind(MemoryKind::Host).unwrap();
        assert!(h.get && !h.put && !h.send && !h.needs_registration);
        assert!(c.for_kind(MemoryKind::CudaManaged).is_none());
    }

    #[test]
    fn send_is_refused_and_an_idle_transport_is_flushed() {
        let mut t = t();
        assert!(matches!(
            t.send(1, b"h", b"p"),
            Err(TransportError::Unsupported {
                transport: "cuda_ipc",
                ..
            })
        ));
        let mut ev = Vec::new();
        assert!(!t.poll(&mut ev));
        assert!(ev.is_empty() && t.is_flushed() && !t.busy());
        assert!(t.stats().is_none());
        t.close_all();
    }

    #[test]
    fn host_and_managed_memory_are_never_registered() {
        let mut t = t();
        for kind in [MemoryKind::Host, MemoryKind::CudaManaged] {
            let buf = LocalBuf {
                addr: 0x1000,
                len_bytes: 64,
                kind,
            };
            assert!(matches!(
                t.register(buf),
                Err(TransportError::Unsupported { .. })
            ));
        }
        // Handle 0 (a direct export) gives nothing back to the pool.
        t.deregister(Registration {
            remote: remote(),
            handle: 0,
        });
        assert_eq!(t.pool().stats().0.lent, 0);
    }

    #[test]
    fn get_checks_its_arguments_before_touching_the_driver() {
        let mut t = t();
        let dst = LocalBuf {
            addr: 0x1000,
            len_bytes: 100,
            kind: MemoryKind::Cuda { device: 0 },
        };
        // SAFETY: every call below is refused before any memory is touched.
        unsafe {
            assert!(matches!(
                t.get(1, 7, dst, &RemoteMem::HostCma { pid: 1, addr: 2 }, 0),
                Err(TransportError::Malformed { peer: 1, .. })
            ));
            assert!(matches!(
                t.get(1, 7, dst, &remote(), 4000),
                Err(TransportError::Malformed { peer: 1, .. })
            ));
            let managed = LocalBuf {
                kind: MemoryKind::CudaManaged,
                ..dst
            };
            assert!(matches!(
                t.get(1, 7, managed, &remote(), 0),
                Err(TransportError::Unsupported { .. })
            ));
            let empty = LocalBuf {
                len_bytes: 0,
                ..dst
            };
            assert_eq!(t.get(1, 7, empty, &remote(), 0), Ok(OpStart::Done));
        }
        assert!(t.is_flushed());
    }

    #[test]
    fn can_reach_needs_the_same_node() {
        let mut cfg = CudaIpcConfig::default();
        let peer = PeerInfo {
            rank: 1,
            node_id: "n1".into(),
            pid: 1,
        };
        let pool = Arc::new(TmpPool::new(0));
        assert!(
            CudaIpcTransport::new(pool.clone(), cfg.clone())
                .can_reach(&peer)
                .is_err()
        );
        cfg.node_id = Some("n2".into());
        assert_eq!(
            CudaIpcTransport::new(pool.clone(), cfg.clone()).can_reach(&peer),
            Err("on another node".into())
        );
        cfg.node_id = Some("n1".into());
        let same = CudaIpcTransport::new(pool, cfg).can_reach(&peer);
        assert_eq!(same.is_ok(), rankwire_gpu::available());
    }
}
