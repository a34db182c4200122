//! Device-memory paths: the [`DeviceMem`] the protocol uses to stage device buffers
//! (CUDA driver API through `rankwire-gpu`). The CUDA IPC pulls the engine performs are
//! gets of the `cuda_ipc` transport (`rankwire_transports::cuda_ipc`).
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
//!   maps it through a per-peer `IpcCache` (a changed buffer id at the same base means
//!   the sender freed and re-allocated: the stale mapping is closed, B008), copies with
//!   `cuMemcpyDtoDAsync`/`cuMemcpyDtoHAsync`, synchronizes and answers `Fin`. Memory that
//!   legacy IPC cannot export (stream-ordered pool memory from `cuMemAllocAsync`, which
//!   cudarc's allocator returns; VMM memory) is copied on the device into a
//!   runtime-owned `cuMemAlloc` staging buffer (from the same cache as the collectives'
//!   temporaries, [`rankwire_gpu::TmpPool`], so peers keep it mapped) and that buffer is offered instead; the
//!   staging buffer returns to the cache when the send ends. Managed memory is never
//!   offered: it is staged through host memory by the eager or `Cts`/`Data` path.

use std::sync::Arc;

use crate::protocol::ReqId;
use rankwire_gpu::{Stream, TmpPool};
use rankwire_transports::MemoryKind;
#[cfg(feature = "cuda")]
use rankwire_transports::cuda_ipc::register_device;

use crate::protocol::{DeviceMem, RawBuf};
use crate::wire::RemoteMem;

/// Stages device buffers with synchronous copies on the runtime stream.
///
/// Its `offer` is the `cuda_ipc` transport's registration (export, or a pooled staging
/// buffer for memory legacy IPC cannot export), called here until the protocol asks the
/// engine to register through the transport instead.
pub(crate) struct GpuStaging {
    /// (send request, staging buffer address) of sends whose pool memory was copied
    /// into an IPC-capable staging buffer.
    staged: Vec<(ReqId, u64)>,
    /// Offer memory legacy IPC cannot export through a staging buffer
    /// (`RANKWIRE_GPU_IPC_STAGING`, default on).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    ipc_staging: bool,
    /// Where staging buffers come from (the engine's pool).
    pool: Arc<TmpPool>,
}

impl GpuStaging {
    pub(crate) fn new(pool: Arc<TmpPool>) -> Self {
        GpuStaging {
            staged: Vec::new(),
            pool,
            ipc_staging: crate::bootstrap::node::env_switch("RANKWIRE_GPU_IPC_STAGING")
                != Some(false),
        }
    }

    /// [`DeviceMem::offer`]: export `buf` through CUDA IPC, or through a staging
    /// buffer from the pool where legacy IPC cannot export it (the `cuda_ipc`
    /// transport's registration, `rankwire_transports::cuda_ipc::register_device`); the
    /// staging buffer is kept until [`DeviceMem::done_with`].
    #[cfg(feature = "cuda")]
    fn offer_ipc(&mut self, sreq: ReqId, buf: RawBuf) -> Option<RemoteMem> {
        let local = rankwire_transports::LocalBuf {
            addr: buf.as_mut_ptr() as u64,
            len_bytes: buf.len(),
            kind: buf.kind(),
        };
        match register_device(&self.pool, local, self.ipc_staging) {
            Ok(reg) => {
                if reg.handle != 0 {
                    self.staged.push((sreq, reg.handle));
                }
                Some(reg.remote)
            }
            Err(e) => {
                tracing::debug!("device buffer not offered by CUDA IPC ({e}); staging it");
                None
            }
        }
    }

    /// Without GPU support nothing is exported (device memory never gets here).
    #[cfg(not(feature = "cuda"))]
    fn offer_ipc(&mut self, _sreq: ReqId, _buf: RawBuf) -> Option<RemoteMem> {
        None
    }
}

fn device_of(buf: &RawBuf) -> Result<i32, String> {
    match buf.kind() {
        MemoryKind::Cuda { device } => Ok(device),
        other => Err(format!("not device memory: {other}")),
    }
}

impl DeviceMem for GpuStaging {
    fn copy_to_device(&mut self, dst: RawBuf, offset: usize, src: &[u8]) -> Result<(), String> {
        let stream = Stream::runtime(device_of(&dst)?).map_err(|e| e.to_string())?;
        // SAFETY: the receive is pending, so `dst` is live device memory with
        // offset + src.len() <= dst.len() (checked by the protocol); `src` outlives the
        // synchronize below.
        unsafe {
            rankwire_gpu::memcpy_htod_async(
                dst.as_mut_ptr() as u64 + offset as u64,
                src.as_ptr(),
                src.len(),
                stream,
            )
        }
        .map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())
    }

    fn copy_from_device(&mut self, src: RawBuf) -> Result<Vec<u8>, String> {
        let stream = Stream::runtime(device_of(&src)?).map_err(|e| e.to_string())?;
        let mut v = vec![0u8; src.len()];
        // SAFETY: the send is pending, so `src` is live device memory; `v` outlives the
        // synchronize below.
        unsafe {
            rankwire_gpu::memcpy_dtoh_async(
                v.as_mut_ptr(),
                src.as_mut_ptr() as u64,
                v.len(),
                stream,
            )
        }
        .map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())?;
        Ok(v)
    }

    fn offer(&mut self, sreq: ReqId, buf: RawBuf) -> Option<RemoteMem> {
        self.offer_ipc(sreq, buf)
    }

    fn done_with(&mut self, sreq: ReqId) {
        if let Some(i) = self.staged.iter().position(|&(id, _)| id == sreq) {
            let (_, stage) = self.staged.swap_remove(i);
            self.pool.give_device(stage);
        }
    }
}
