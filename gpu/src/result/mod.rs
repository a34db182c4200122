//! The `result` layer: every CUDA driver entry point rankwire uses, wrapped once.
//!
//! Layering (STYLE §4): cudarc's `sys` (raw `unsafe fn` returning `CUresult`) → this
//! module (one thin function per driver call, returning `Result<_, GpuError>` with the
//! call's name and the `CUresult` name) → the safe modules (`pointer`, `ipc`, `copy`,
//! `buffer`, `dmabuf`), which hold the policy: which error means "plain host memory",
//! which means "stage instead", what to cache.
//!
//! Two implementations share one set of signatures:
//! - `cuda.rs` (feature `cuda`): calls cudarc. No cudarc function runs before
//!   `is_culib_present()` has returned true (cudarc panics when libcuda is missing), and
//!   every entry point this crate calls is looked up once at init, so a driver older
//!   than the CUDA 13.0 API gives `GpuError::DriverTooOld` instead of a panic.
//! - `stub.rs` (feature off): every function returns `GpuError::NotBuilt`.
//!
//! The safe layer is written once against these signatures, so both builds have the
//! same public API.

use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
pub(crate) use cuda::*;

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub(crate) use stub::*;

/// `CUmemorytype` values (`CU_MEMORYTYPE_*`); 0 means "not CUDA memory".
pub(crate) const MEMTYPE_HOST: u32 = 1;
pub(crate) const MEMTYPE_DEVICE: u32 = 2;
pub(crate) const MEMTYPE_ARRAY: u32 = 3;
pub(crate) const MEMTYPE_UNIFIED: u32 = 4;

/// The pointer attributes read by one `cuPointerGetAttributes` call, decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PtrAttrs {
    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`; 0 when CUDA does not know the pointer.
    pub(crate) memory_type: u32,
    /// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`; negative when not set.
    pub(crate) device_ordinal: i32,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`; unique per allocation for the process lifetime.
    pub(crate) buffer_id: u64,
    /// `CU_POINTER_ATTRIBUTE_IS_MANAGED`.
    pub(crate) is_managed: bool,
    /// `CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`: the allocation base.
    pub(crate) range_start: u64,
    /// `CU_POINTER_ATTRIBUTE_RANGE_SIZE`: the allocation length in bytes.
    pub(crate) range_size: usize,
}

/// Device attributes rankwire reads (`CU_DEVICE_ATTRIBUTE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceAttr {
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    DmaBufSupported,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`.
    GpuDirectRdmaSupported,
    /// `CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING`.
    UnifiedAddressing,
    /// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
    MultiprocessorCount,
    /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
    ComputeCapabilityMajor,
    /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
    ComputeCapabilityMinor,
    /// `CU_DEVICE_ATTRIBUTE_MPS_ENABLED` (CUDA 12.9+): contexts on this device are
    /// shared through the MPS server.
    MpsEnabled,
    /// `CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID`.
    PciDomainId,
    /// `CU_DEVICE_ATTRIBUTE_PCI_BUS_ID`.
    PciBusId,
    /// `CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID`.
    PciDeviceId,
}

// Number of pointer-attribute driver calls made by this process (both the six-attribute
// classification and the one-attribute buffer-id revalidation). Tests and the selftest
// read it to prove that zero-length buffers and cache hits do not query the full set.
static POINTER_QUERIES: AtomicU64 = AtomicU64::new(0);

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn count_pointer_query() {
    POINTER_QUERIES.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn pointer_queries() -> u64 {
    POINTER_QUERIES.load(Ordering::Relaxed)
}

/// The host page size in bytes (`sysconf(_SC_PAGESIZE)`), 4096 if the call fails.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it only reads a configuration value.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 { v as usize } else { 4096 }
}
