//! Device memory regions for GPUDirect RDMA: what the GPU side must provide
//! ([`GpuMemory`]), the registrar that turns an allocation into a verbs memory region
//! ([`GdrRegistrar`]), and the settings of the device registration cache.
//!
//! This crate has no CUDA types: the core implements [`GpuMemory`] over the CUDA driver
//! (DMA-BUF export with `cuMemGetHandleForAddressRange`, or the raw device pointer
//! where `nvidia_peermem` is loaded), and tests implement it over host memory (the
//! stand-in: the same registration, cache and flush path, with `ibv_reg_mr` on host
//! pages in place of the GPU driver).
//!
//! # Registration
//! A device buffer is registered as the whole allocation that holds it (as NCCL and UCX
//! do), keyed in the cache by the allocation's CUDA buffer id
//! (`CU_POINTER_ATTRIBUTE_BUFFER_ID`, unique per allocation for the process's life): a
//! free and a new allocation at the same address has another id, so the stale region
//! is dropped instead of reused (lazy unpin without memory hooks). Idle regions stay
//! registered up to `RANKWIRE_REGCACHE_MAX_ENTRIES` and `RANKWIRE_RDMA_GDR_MAX_BYTES`
//! (BAR space is limited); a registration that fails evicts the least recently used
//! idle region and retries once.
//!
//! # Ordering (flush)
//! An RDMA READ that lands in GPU memory completes at the NIC before the GPU is
//! guaranteed to see the bytes in every case: after the last read of a receive the
//! transport calls [`GpuMemory::flush`] where [`GpuMemory::needs_flush`] says so
//! (`cuFlushGPUDirectRDMAWrites`, as NCCL flushes GDR receives; NCCL skips it on
//! compute capability 9.0 and newer unless forced, and so does the core's
//! implementation).

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use super::reg::{MemoryRegion, reg_dmabuf};
use super::verbs::{self, IbvPd, Verbs};
use crate::regcache::Registrar;

/// The allocation that holds a device buffer ([`GpuMemory::locate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAlloc {
    /// Start address of the allocation (device virtual address).
    pub base: u64,
    /// Length of the allocation in bytes.
    pub len_bytes: u64,
    /// The allocation's buffer id (never 0; differs between a freed allocation and a
    /// new one at the same address).
    pub buffer_id: u64,
    /// CUDA device ordinal of the allocation.
    pub device: i32,
}

/// How the NIC reaches an allocation ([`GpuMemory::export`]).
#[derive(Debug)]
pub enum DeviceExport {
    /// A DMA-BUF file descriptor of the page-aligned range holding the allocation,
    /// with the allocation's offset in bytes inside it: `ibv_reg_dmabuf_mr`.
    DmaBuf {
        /// The descriptor (closed after registration; the region keeps its own
        /// reference).
        fd: OwnedFd,
        /// Offset in bytes of the allocation's start inside the DMA-BUF.
        offset: u64,
    },
    /// The address itself: `ibv_reg_mr` on the device pointer (`nvidia_peermem`), or on
    /// host memory for the stand-in.
    Pointer,
}

/// The GPU side of device memory regions, implemented by the core (CUDA driver) and by
/// tests (host-memory stand-in). Called from the thread that drives progress.
pub trait GpuMemory: Send {
    /// The allocation holding `[addr, addr + len_bytes)`.
    ///
    /// # Errors
    /// Not device memory, or the range runs past the allocation: the text says which.
    fn locate(&mut self, addr: u64, len_bytes: u64) -> Result<DeviceAlloc, String>;

    /// Make `[base, base + len_bytes)`, an allocation found by [`GpuMemory::locate`],
    /// registrable.
    ///
    /// # Errors
    /// The export failed (driver error, no DMA-BUF support): the caller stages instead.
    fn export(&mut self, base: u64, len_bytes: u64) -> Result<DeviceExport, String>;

    /// Whether RDMA writes into memory of `device` need [`GpuMemory::flush`] before a
    /// kernel launched afterwards may read them.
    fn needs_flush(&self, device: i32) -> bool;

    /// Make RDMA writes into memory of `device` that completed at the NIC visible to
    /// work launched afterwards on any stream.
    ///
    /// # Errors
    /// The driver's error text; the read then counts as failed and the message is
    /// received again as staged `Data` frames.
    fn flush(&mut self, device: i32) -> Result<(), String>;

    /// How regions are made, for messages and `--explain`: "DMA-BUF",
    /// "nvidia_peermem", "stand-in (host memory)".
    fn describe(&self) -> String;
}

/// The GPU side shared by the registrar and the data path.
pub(crate) type SharedGpu = Arc<Mutex<Box<dyn GpuMemory>>>;

/// Lock `g` (a poisoned lock still holds consistent data: every call is one driver
/// call).
pub(crate) fn lock(g: &SharedGpu) -> std::sync::MutexGuard<'_, Box<dyn GpuMemory>> {
    g.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers device allocations in one protection domain through a [`GpuMemory`].
pub(crate) struct GdrRegistrar {
    verbs: Arc<Verbs>,
    pd: *mut IbvPd,
    gpu: SharedGpu,
}

// SAFETY: the PD handle is used under the cache's lock.
unsafe impl Send for GdrRegistrar {}

impl GdrRegistrar {
    pub(crate) fn new(verbs: Arc<Verbs>, pd: *mut IbvPd, gpu: SharedGpu) -> Self {
        GdrRegistrar { verbs, pd, gpu }
    }
}

impl Registrar for GdrRegistrar {
    type Handle = MemoryRegion;
    type Error = String;
    fn register(&mut self, addr: u64, len_bytes: u64) -> Result<MemoryRegion, String> {
        let how = lock(&self.gpu).export(addr, len_bytes)?;
        match how {
            DeviceExport::DmaBuf { fd, offset } => reg_dmabuf(
                &self.verbs,
                self.pd,
                fd.as_raw_fd(),
                offset,
                len_bytes as usize,
                addr,
                super::reg::DEVICE_ACCESS,
            ),
            DeviceExport::Pointer => {
                // SAFETY: [addr, addr + len) is a live allocation the GPU side located;
                // a range the NIC cannot pin fails with an errno, not a fault.
                let mr = unsafe {
                    (self.verbs.reg_mr)(
                        self.pd,
                        addr as *mut c_void,
                        len_bytes as usize,
                        super::reg::DEVICE_ACCESS,
                    )
                };
                if mr.is_null() {
                    return Err(format!(
                        "ibv_reg_mr on device memory: {}",
                        verbs::errno_text()
                    ));
                }
                // SAFETY: non-null MR returned by ibv_reg_mr.
                Ok(unsafe { MemoryRegion::from_raw(mr) })
            }
        }
    }
    fn deregister(&mut self, h: MemoryRegion) {
        super::reg::MrRegistrar::for_pd(self.verbs.clone(), self.pd).deregister(h);
    }
}

/// `RANKWIRE_RDMA_GDR`: whether device buffers go NIC-direct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GdrMode {
    /// Where a direct path (DMA-BUF or peermem) exists; staged otherwise (`auto`, the
    /// default).
    Auto,
    /// Fail init where device buffers to a peer over RDMA would be staged (`1`).
    Require,
    /// Always stage device buffers through host memory (`0`).
    Off,
}

impl GdrMode {
    /// Parse `RANKWIRE_RDMA_GDR`.
    ///
    /// # Errors
    /// A value other than `auto`, `1` or `0` (also `on`/`off`, `true`/`false`,
    /// `yes`/`no`).
    pub fn parse(v: Option<&str>) -> Result<GdrMode, crate::ConfigError> {
        match v.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("auto") => Ok(GdrMode::Auto),
            Some("1" | "on" | "true" | "yes") => Ok(GdrMode::Require),
            Some("0" | "off" | "false" | "no") => Ok(GdrMode::Off),
            Some(_) => Err(crate::ConfigError {
                var: "RANKWIRE_RDMA_GDR",
                value: v.unwrap_or_default().to_string(),
                expected: "auto, 1 (require GPUDirect RDMA) or 0 (stage through host memory); \
                           also on/off, true/false, yes/no",
            }),
        }
    }
}

/// Default of `RANKWIRE_RDMA_GDR_MAX_BYTES`: bytes of device registrations kept.
pub const DEFAULT_GDR_MAX_BYTES: u64 = 4 << 30;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdr_mode_parses_auto_require_off() {
        assert_eq!(GdrMode::parse(None).unwrap(), GdrMode::Auto);
        assert_eq!(GdrMode::parse(Some(" auto")).unwrap(), GdrMode::Auto);
        assert_eq!(GdrMode::parse(Some("1")).unwrap(), GdrMode::Require);
        assert_eq!(GdrMode::parse(Some("OFF")).unwrap(), GdrMode::Off);
        let e = GdrMode::parse(Some("maybe")).unwrap_err().to_string();
        assert!(e.contains("RANKWIRE_RDMA_GDR"), "{e}");
    }
}
