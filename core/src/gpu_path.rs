//! Device-memory paths: the CUDA IPC pulls the engine performs (CUDA driver API through
//! `rankwire-gpu`). Staging and offers of device buffers are in `crate::device_path`.
//!
//! # Semantics
//! - A device send buffer must hold its data when `send`/`isend` is called (work that
//!   produces it on another stream must be synchronized first).
//! - Copies run on the runtime's own non-blocking stream of the buffer's device
//!   ([`rankwire_gpu::Stream::runtime`]) and are synchronized before a request
//!   completes, so a completed receive's data is visible to work on any stream of that
//!   device.
//! - Same-node device-to-device (and device-to-host) rendezvous: the sender's `Rts`
//!   carries a CUDA IPC handle of the allocation plus offset and buffer id; the receiver
//!   maps it through a per-peer [`IpcCache`] (a changed buffer id at the same base means
//!   the sender freed and re-allocated: the stale mapping is closed, B008), copies with
//!   `cuMemcpyDtoDAsync`/`cuMemcpyDtoHAsync`, synchronizes and answers `Fin`. Memory that
//!   legacy IPC cannot export (stream-ordered pool memory from `cuMemAllocAsync`, which
//!   cudarc's allocator returns; VMM memory) is copied on the device into a
//!   runtime-owned `cuMemAlloc` staging buffer (from the same cache as the collectives'
//!   temporaries, so peers keep it mapped) and that buffer is offered instead; the
//!   staging buffer returns to the cache when the send ends. Managed memory is never
//!   offered: it is staged through host memory by the eager or `Cts`/`Data` path.

use std::num::NonZeroUsize;

use std::collections::VecDeque;

use crate::protocol::ReqId;
use rankwire_gpu::{Event, IpcCache, IpcExport, IpcHandle, IpcMapping, Stream};
use rankwire_transports::MemoryKind;

use crate::protocol::PullReq;
use crate::wire::RemoteMem;

/// The wire descriptor of a CUDA IPC export (the receiver rebuilds the export in
/// [`IpcPuller`]).
pub(crate) fn ipc_remote(e: &IpcExport) -> RemoteMem {
    RemoteMem::CudaIpc {
        handle: e.handle.0,
        offset: e.offset,
        buffer_id: e.buffer_id,
        device: e.device,
        base: e.base,
        alloc_len: e.alloc_len as u64,
    }
}

/// A pull whose copy is queued on the runtime stream.
struct InFlight {
    rreq: ReqId,
    mapping: IpcMapping,
    done: Event,
}

/// The engine's side of CUDA IPC pulls: opened mappings per peer, and the pulls whose
/// copies are still running.
pub(crate) struct IpcPuller {
    cache: Option<IpcCache>,
    /// In stream order (one stream per device; all pulls of a process go to one
    /// device in practice, and completion is checked per entry anyway).
    in_flight: VecDeque<InFlight>,
    /// Completion events to reuse.
    spare: Vec<Event>,
}

impl IpcPuller {
    pub(crate) fn new() -> Self {
        IpcPuller {
            cache: None,
            in_flight: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// Whether copies are still running.
    pub(crate) fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Queue the copy of the accepted bytes of the peer's device buffer into `p.dst`
    /// on the runtime stream of the receiving device, without waiting for it: later
    /// pulls queue behind it, so several messages' copies run back to back. Returns
    /// `Err` if the copy could not be queued (the caller completes the pull with it).
    /// [`IpcPuller::poll`] reports completions.
    pub(crate) fn start(&mut self, p: &PullReq) -> Result<(), String> {
        let (mapping, device) = self.map(p)?;
        let Some(cache) = self.cache.as_mut() else {
            return Err("IPC cache missing".into());
        };
        let queued = Stream::runtime(device)
            .map_err(|e| e.to_string())
            .and_then(|stream| {
                // SAFETY: the mapping stays open until released after the copy completed;
                // `dst` is the accepted prefix of a pending receive, len bytes long.
                unsafe {
                    if p.dst.is_host() {
                        rankwire_gpu::memcpy_dtoh_async(
                            p.dst.as_mut_ptr(),
                            mapping.addr(),
                            p.dst.len(),
                            stream,
                        )
                    } else {
                        rankwire_gpu::memcpy_dtod_async(
                            p.dst.as_mut_ptr() as u64,
                            mapping.addr(),
                            p.dst.len(),
                            stream,
                        )
                    }
                }
                .map_err(|e| e.to_string())?;
                let ev = match self.spare.pop() {
                    Some(e) if e.device() == device => e,
                    _ => Event::new(device).map_err(|e| e.to_string())?,
                };
                ev.record(stream).map_err(|e| e.to_string())?;
                Ok(ev)
            });
        match queued {
            Ok(done) => {
                self.in_flight.push_back(InFlight {
                    rreq: p.rreq,
                    mapping,
                    done,
                });
                Ok(())
            }
            Err(e) => {
                // The copy may have been queued before the event failed: wait for it.
                if let Ok(s) = Stream::runtime(device) {
                    let _ = s.synchronize();
                }
                let _ = cache.release(mapping);
                Err(e)
            }
        }
    }

    /// Completed pulls (receive request and outcome), in queue order.
    pub(crate) fn poll(&mut self, out: &mut Vec<(ReqId, Result<(), String>)>) {
        while let Some(f) = self.in_flight.front() {
            let r = match f.done.query() {
                Ok(false) => return,
                Ok(true) => Ok(()),
                Err(e) => Err(e.to_string()),
            };
            let Some(f) = self.in_flight.pop_front() else {
                return;
            };
            let rel = match self.cache.as_mut() {
                Some(c) => c.release(f.mapping).map_err(|e| e.to_string()),
                None => Ok(()),
            };
            if r.is_ok() {
                self.spare.push(f.done);
            }
            out.push((f.rreq, r.and(rel)));
        }
    }

    /// Map the peer's buffer through the cache: the mapping and the local device.
    fn map(&mut self, p: &PullReq) -> Result<(IpcMapping, i32), String> {
        let RemoteMem::CudaIpc {
            handle,
            offset,
            buffer_id,
            device,
            base,
            alloc_len,
        } = p.mem
        else {
            return Err("not a CUDA IPC descriptor".into());
        };
        let local_device = match p.dst.kind() {
            MemoryKind::Cuda { device } => device,
            _ => device,
        };
        let max = NonZeroUsize::new(64).unwrap_or(NonZeroUsize::MIN);
        let cache = self
            .cache
            .get_or_insert_with(|| IpcCache::new(local_device, max));
        let export = IpcExport {
            handle: IpcHandle(handle),
            device,
            base,
            alloc_len: alloc_len as usize,
            buffer_id,
            offset,
            len: p.dst.len(),
        };
        let mapping = cache.acquire(p.peer, &export).map_err(|e| e.to_string())?;
        Ok((mapping, local_device))
    }

    /// Counters of the IPC cache (opened, hits, stale evictions, open now).
    pub(crate) fn stats(&self) -> Option<rankwire_gpu::IpcCacheStats> {
        self.cache.as_ref().map(|c| c.stats())
    }

    /// Close every mapping (finalize), after the copies still running.
    pub(crate) fn close_all(&mut self) {
        let mut done = Vec::new();
        while self.busy() {
            self.poll(&mut done);
            std::thread::yield_now();
        }
        if let Some(c) = self.cache.as_mut()
            && let Err(e) = c.close_all()
        {
            tracing::warn!("closing CUDA IPC mappings: {e}");
        }
    }
}
