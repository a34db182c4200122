//! GPUDirect RDMA: the GPU side of device memory regions ([`GpuMemory`]) over the CUDA
//! driver, the choice of path at init, and the host-memory stand-in used where no GPU
//! and NIC sit together ([`crate::gdr_standin`]).
//!
//! # Path
//! For a device buffer whose peer is reached over RDMA, the sender registers the
//! allocation holding it and its `Rts` carries address, length and rkey
//! ([`crate::protocol::RemoteMem::Rdma`]); the receiver registers its own device buffer
//! the same way, RDMA-READs into it, flushes where the GPU needs it, and answers `Fin`.
//! Registration (see `rankwire_transports::rdma::gdr`): DMA-BUF first
//! (`cuMemGetHandleForAddressRange` → `ibv_reg_dmabuf_mr`; covers `cuMemAlloc`,
//! stream-ordered pool and VMM memory alike, since the export works on address ranges),
//! then `ibv_reg_mr` on the device pointer where `nvidia_peermem` is loaded (pool and
//! VMM memory may be refused there: the send then stages); otherwise, or with
//! `RANKWIRE_RDMA_GDR=0`, device buffers are staged through pinned host memory in
//! pipelined chunks. A registration the driver refuses at run time makes that one
//! message stage (sender) or fall back to `Cts` and `Data` frames (receiver).
//!
//! # Rule for send buffers
//! As for CUDA IPC: the send buffer must hold its data when the send starts (the stream
//! that produced it synchronized); the NIC reads it directly, possibly after `isend`
//! returned, so it must not be written until the request completes.

use rankwire_transports::rdma::{
    DeviceAlloc, DeviceExport, GdrFacts, GdrPath, GpuMemory, RdmaConfig, RdmaTransport, gdr_path,
};

use crate::error::{Error, Result};

/// The GPU side of device memory regions through the CUDA driver.
pub(crate) struct CudaGdr {
    /// DMA-BUF or peermem (never staged: then no `CudaGdr` is made).
    path: GdrPath,
    /// `RANKWIRE_RDMA_GDR_FLUSH=1`.
    force_flush: bool,
    /// Compute capability major per device ordinal, as looked up.
    cc_major: Vec<Option<i32>>,
}

impl CudaGdr {
    pub(crate) fn new(path: GdrPath, force_flush: bool) -> CudaGdr {
        CudaGdr {
            path,
            force_flush,
            cc_major: Vec::new(),
        }
    }
}

impl GpuMemory for CudaGdr {
    fn locate(&mut self, addr: u64, len_bytes: u64) -> std::result::Result<DeviceAlloc, String> {
        let info = rankwire_gpu::classify_addr(addr, len_bytes as usize)
            .map_err(|e| format!("cannot locate device buffer at {addr:#x}: {e}"))?;
        match info.kind {
            rankwire_gpu::PtrKind::Device { ordinal } => Ok(DeviceAlloc {
                base: info.base,
                len_bytes: info.len as u64,
                // Device allocations always have one; keep 0 out of the cache's way.
                buffer_id: info.buffer_id.max(1),
                device: ordinal,
            }),
            other => Err(format!(
                "buffer at {addr:#x} is {other:?} memory, not device memory"
            )),
        }
    }

    fn export(&mut self, base: u64, len_bytes: u64) -> std::result::Result<DeviceExport, String> {
        match self.path {
            GdrPath::DmaBuf => {
                let (fd, offset) = rankwire_gpu::export_dmabuf(base, len_bytes as usize)
                    .map_err(|e| format!("DMA-BUF export: {e}"))?;
                Ok(DeviceExport::DmaBuf { fd, offset })
            }
            GdrPath::PeerMem => Ok(DeviceExport::Pointer),
            GdrPath::HostStaged | GdrPath::StandIn => {
                Err("GPUDirect RDMA is not available".to_string())
            }
        }
    }

    fn needs_flush(&self, device: i32) -> bool {
        if self.force_flush {
            return true;
        }
        // As NCCL: devices of compute capability 9.0 and newer order GPUDirect RDMA
        // writes before later kernels without a flush; unknown: flush.
        match self.cc_major.get(device as usize).copied().flatten() {
            Some(major) => major < 9,
            None => true,
        }
    }

    fn flush(&mut self, device: i32) -> std::result::Result<(), String> {
        rankwire_gpu::flush_gpudirect_rdma_writes(device).map_err(|e| e.to_string())
    }

    fn describe(&self) -> String {
        match self.path {
            GdrPath::DmaBuf => "DMA-BUF".into(),
            GdrPath::PeerMem => "nvidia_peermem".into(),
            _ => "none".into(),
        }
    }
}

impl CudaGdr {
    /// Look up the compute capability of every device now (one driver call each), so
    /// [`GpuMemory::needs_flush`] stays a table lookup.
    pub(crate) fn with_devices(mut self) -> CudaGdr {
        let n = rankwire_gpu::device_count().unwrap_or(0);
        self.cc_major = (0..n as i32)
            .map(|d| rankwire_gpu::compute_capability(d).ok().map(|c| c.0))
            .collect();
        self
    }
}

/// How device buffers reach the NIC on this rank, and why: decided at init from the
/// facts (`RANKWIRE_RDMA_GDR`, DMA-BUF support of the CUDA driver and of the NIC's
/// driver, `nvidia_peermem`), or the stand-in where `RANKWIRE_GDR_STANDIN` is set.
///
/// # Errors
/// [`Error::Usage`] when `RANKWIRE_RDMA_GDR=1` and neither direct path is available.
pub(crate) fn gdr_choice(
    rank: u32,
    t: &RdmaTransport,
    cfg: &RdmaConfig,
    ordinal: i32,
) -> Result<(GdrPath, String)> {
    // RANKWIRE_RDMA_GDR=0 stages the stand-in too (gdr_path says so below).
    if crate::gdr_standin::mode().is_some() && cfg.gdr != rankwire_transports::rdma::GdrMode::Off {
        return Ok((
            GdrPath::StandIn,
            "stand-in (RANKWIRE_GDR_STANDIN): host memory registered through the \
             device-region path; not a GPU"
                .into(),
        ));
    }
    let facts = GdrFacts {
        cuda_dmabuf: rankwire_gpu::dmabuf_supported(ordinal).unwrap_or(false),
        verbs_dmabuf: t.has_dmabuf_mr(),
        peermem_loaded: GdrFacts::peermem_loaded_here(),
    };
    let (path, why) =
        gdr_path(facts, cfg.gdr).map_err(|e| Error::usage(format!("rank {rank}: {e}")))?;
    tracing::debug!(
        "rdma: rank {rank}: device buffers on {}: {path:?} ({why})",
        t.device_name()
    );
    Ok((path, why))
}

/// Whether `path` moves device buffers NIC-direct.
pub(crate) fn is_direct(path: GdrPath) -> bool {
    matches!(path, GdrPath::DmaBuf | GdrPath::PeerMem | GdrPath::StandIn)
}
