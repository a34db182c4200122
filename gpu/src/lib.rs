//! rankwire's CUDA leaf crate: pointer detection, CUDA IPC, device copies and DMA-BUF
//! export, over the CUDA driver API (cudarc, loaded at run time).
//!
//! Nothing here knows about ranks or messages; the transports call it.
//!
//! # Quick start (the real order of setup)
//!
//! ```no_run
//! use std::num::NonZeroUsize;
//! use rankwire_gpu::{DeviceBuffer, IpcCache, PointerCache, PtrKind, Stream};
//!
//! # fn main() -> Result<(), rankwire_gpu::GpuError> {
//! // 1. Once per process: load libcuda and cuInit. Without a GPU this is an error
//! //    (NotBuilt / NoDriver) and the runtime keeps to host paths.
//! rankwire_gpu::init()?;
//! println!("{} device(s)", rankwire_gpu::device_count()?);
//!
//! // 2. Classify every user buffer before choosing a path (B009).
//! let mut pointers = PointerCache::new(NonZeroUsize::new(1024).unwrap());
//! let buf = DeviceBuffer::alloc(0, 1 << 20)?;
//! let info = pointers.classify(buf.ptr(), buf.len())?;
//! assert_eq!(info.kind, PtrKind::Device { ordinal: 0 });
//!
//! // 3. Sender: export for CUDA IPC (pool and managed memory: Unsupported -> stage).
//! let export = rankwire_gpu::ipc_export(buf.ptr(), buf.len())?;
//! let wire: [u8; rankwire_gpu::IpcExport::ENCODED_LEN] = export.to_bytes();
//!
//! // 4. Receiver (another process): map through the cache, copy, release.
//! let mut ipc = IpcCache::new(0, NonZeroUsize::new(64).unwrap());
//! let export = rankwire_gpu::IpcExport::from_bytes(&wire).expect("well-formed");
//! let peer_pid = 4242;
//! let mapping = ipc.acquire(peer_pid, &export)?;
//! let dst = DeviceBuffer::alloc(0, mapping.len())?;
//! let stream = Stream::runtime(0)?;
//! // SAFETY: both ranges are live until the synchronize below.
//! unsafe { rankwire_gpu::memcpy_dtod_async(dst.ptr(), mapping.addr(), mapping.len(), stream)? };
//! stream.synchronize()?;
//! ipc.release(mapping)?;
//!
//! // 5. Finalize.
//! ipc.close_all()?;
//! # Ok(()) }
//! ```
//!
//! # Layers (STYLE §4)
//! cudarc `sys` (raw bindings) → `result` (private; each driver call wrapped once,
//! returning [`GpuError`] with the call and `CUresult` names) → the safe modules:
//! [`pointer`](mod@pointer), [`ipc`], [`copy`], [`buffer`], [`dmabuf`].
//!
//! # Without a GPU
//! Built without the `cuda` feature, every function returns [`GpuError::NotBuilt`];
//! with it but without `libcuda.so`, [`GpuError::NoDriver`] (cudarc would panic; this
//! crate checks `is_culib_present` before any driver call). The only exception is a
//! zero-length buffer, which is classified as host memory without any query (B002).
//! The public API is the same in both builds.

pub mod buffer;
pub mod copy;
pub mod dmabuf;
pub mod error;
pub mod ipc;
pub mod peer;
pub mod pointer;
pub mod pool;
pub mod reduce;
mod release;
mod result;

pub use buffer::{AllocKind, DeviceBuffer, PinnedBuffer};
pub use copy::{
    CopyPath, Event, Graph, MappedFlags, Stream, can_access_peer, memcpy_dtod_async,
    memcpy_dtoh_async, memcpy_htod_async, memcpy_peer_async, memcpy_staged,
    synchronize_legacy_stream,
};
pub use dmabuf::{
    compute_capability, dmabuf_supported, export_dmabuf, flush_gpudirect_rdma_writes,
};
pub use error::{GpuError, Unsupported};
pub use ipc::{
    CudaIpcOpener, IpcCache, IpcCacheStats, IpcExport, IpcHandle, IpcMapping, IpcOpener,
    ipc_export, ipc_export_classified,
};
pub use peer::{
    DoneWord, PeerArgs, PeerMode, PeerWorkspace, peer_blocks, peer_launch, peer_prepare,
};
pub use pointer::{
    CudaPointerQuery, MemoryInfo, PointerCache, PointerCacheStats, PointerQuery, PtrKind,
    buffer_id, classify, classify_addr, pointer_queries,
};
pub use pool::{TmpCache, TmpCacheStats, TmpPool};
pub use reduce::{
    DType, KernelCacheStats, RedOp, kernel_cache_stats, reduce_async, reduce_rows_async,
};
pub use release::{HostWait, host_wait_begin, pending_releases};

/// Whether a CUDA driver can be used by this build in this process.
///
/// Without the `cuda` feature this is always `false`. With it, it checks (once) that
/// the driver library (`libcuda.so`) can be loaded, without panicking when it cannot
/// (cudarc's `is_culib_present`). It does not initialize the driver; see [`init`].
#[inline]
pub fn available() -> bool {
    result::driver_present()
}

/// Load the driver, check it has every entry point this crate calls, and call
/// `cuInit(0)`. Runs once per process; later calls return the first outcome. Every
/// other function calls it implicitly.
///
/// # Errors
/// - [`GpuError::NotBuilt`]: built without the `cuda` feature.
/// - [`GpuError::NoDriver`]: `libcuda.so` cannot be loaded.
/// - [`GpuError::DriverTooOld`]: a needed entry point is missing.
/// - [`GpuError::Driver`] from `cuInit` (`CUDA_ERROR_NO_DEVICE` when no GPU is visible).
pub fn init() -> Result<(), GpuError> {
    result::ensure_init()
}

/// Number of CUDA devices visible to this process (`cuDeviceGetCount`).
///
/// # Errors
/// As [`init`], and [`GpuError::Driver`] from `cuDeviceGetCount`.
pub fn device_count() -> Result<usize, GpuError> {
    Ok(usize::try_from(result::device_count()?).unwrap_or(0))
}

/// The driver's CUDA version, e.g. 13000 for 13.0 (`cuDriverGetVersion`).
///
/// # Errors
/// As [`init`].
pub fn driver_version() -> Result<i32, GpuError> {
    result::driver_version()
}

/// Make the primary context of device `ordinal` current on the calling thread
/// (`cuDevicePrimaryCtxRetain` once, then `cuCtxSetCurrent`): the context the CUDA
/// runtime and cudarc's `CudaContext` also use.
///
/// # Errors
/// As [`init`], and [`GpuError::Driver`] (`CUDA_ERROR_INVALID_DEVICE` for a bad ordinal).
pub fn set_current_device(ordinal: i32) -> Result<(), GpuError> {
    result::bind_device(ordinal)
}

/// Whether contexts on device `ordinal` are shared through the MPS server
/// (`CU_DEVICE_ATTRIBUTE_MPS_ENABLED`, CUDA 12.9+). Without MPS, processes on one GPU
/// time-slice: each device operation after one of another process waits for a
/// context switch (about 150 µs on an H200, `../shared/notes/device.md`).
///
/// # Errors
/// As [`init`]; [`GpuError::Driver`] (`CUDA_ERROR_INVALID_VALUE` from drivers older
/// than CUDA 12.9, which lack the attribute).
pub fn mps_enabled(ordinal: i32) -> Result<bool, GpuError> {
    Ok(result::device_attribute(ordinal, result::DeviceAttr::MpsEnabled)? != 0)
}

/// PCI address of device `ordinal` as `dddd:bb:dd` (hex domain, bus, device), the
/// name `nvidia-smi` and sysfs use; equal across processes for one physical GPU,
/// whatever `CUDA_VISIBLE_DEVICES` says.
///
/// # Errors
/// As [`init`]; [`GpuError::Driver`] for a bad ordinal.
pub fn pci_bus_id(ordinal: i32) -> Result<String, GpuError> {
    use result::DeviceAttr;
    let dom = result::device_attribute(ordinal, DeviceAttr::PciDomainId)?;
    let bus = result::device_attribute(ordinal, DeviceAttr::PciBusId)?;
    let dev = result::device_attribute(ordinal, DeviceAttr::PciDeviceId)?;
    Ok(format!("{dom:04x}:{bus:02x}:{dev:02x}"))
}

/// Multiprocessor count of device `ordinal`.
///
/// # Errors
/// As [`init`]; [`GpuError::Driver`] for a bad ordinal.
pub fn multiprocessor_count(ordinal: i32) -> Result<u32, GpuError> {
    let n = result::device_attribute(ordinal, result::DeviceAttr::MultiprocessorCount)?;
    Ok(n.max(1) as u32)
}

/// What rankwire needs to know about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device ordinal.
    pub ordinal: i32,
    /// Marketing name (`cuDeviceGetName`), e.g. "NVIDIA H200".
    pub name: String,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub dma_buf: bool,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`.
    pub gpu_direct_rdma: bool,
    /// `CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING` (always true on 64-bit Linux).
    pub unified_addressing: bool,
}

/// Name and capabilities of device `ordinal`.
///
/// # Errors
/// As [`init`], and [`GpuError::Driver`] (`CUDA_ERROR_INVALID_DEVICE` for a bad ordinal).
pub fn device_info(ordinal: i32) -> Result<DeviceInfo, GpuError> {
    use result::DeviceAttr;
    Ok(DeviceInfo {
        ordinal,
        name: result::device_name(ordinal)?,
        dma_buf: result::device_attribute(ordinal, DeviceAttr::DmaBufSupported)? != 0,
        gpu_direct_rdma: result::device_attribute(ordinal, DeviceAttr::GpuDirectRdmaSupported)?
            != 0,
        unified_addressing: result::device_attribute(ordinal, DeviceAttr::UnifiedAddressing)? != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_gpu_here_is_reported_not_panicked() {
        // Must not panic whatever the machine; on CI (no libcuda) it is false.
        match init() {
            Ok(()) => {
                assert!(available());
                let n = device_count().unwrap();
                let info = device_info(0).unwrap();
                println!("GPU: {n} device(s); device 0: {info:?}");
            }
            Err(e) => {
                assert!(e.is_no_gpu(), "unexpected init error: {e}");
                println!("skipped: GPU init: {e}");
            }
        }
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn feature_off_every_entry_point_says_not_built() {
        println!("skipped: GPU paths: built without feature `cuda`; checking NotBuilt");
        let nb = Err::<(), _>(GpuError::NotBuilt);
        assert!(!available());
        assert_eq!(init(), nb);
        assert_eq!(device_count().map(|_| ()), nb);
        assert_eq!(driver_version().map(|_| ()), nb);
        assert_eq!(device_info(0).map(|_| ()), nb);
        assert_eq!(classify_addr(0x1000, 8).map(|_| ()), nb);
        assert_eq!(buffer_id(0x1000).map(|_| ()), nb);
        assert_eq!(ipc_export(0x1000, 8).map(|_| ()), nb);
        assert_eq!(export_dmabuf(0x1000, 8).map(|_| ()), nb);
        assert_eq!(dmabuf_supported(0).map(|_| ()), nb);
        assert_eq!(can_access_peer(0, 1).map(|_| ()), nb);
        assert_eq!(mps_enabled(0).map(|_| ()), nb);
        assert_eq!(pci_bus_id(0).map(|_| ()), nb);
        assert_eq!(DeviceBuffer::alloc(0, 8).map(|_| ()), nb);
        assert_eq!(DeviceBuffer::alloc_pool(0, 0).map(|_| ()), nb);
        assert_eq!(DeviceBuffer::alloc_managed(0, 8).map(|_| ()), nb);
        assert_eq!(PinnedBuffer::new(8).map(|_| ()), nb);
        assert_eq!(Stream::new(0).map(|_| ()), nb);
        assert_eq!(Stream::runtime(0).map(|_| ()), nb);
        assert_eq!(Event::new(0).map(|_| ()), nb);
        let mut ipc = IpcCache::new(0, std::num::NonZeroUsize::new(4).unwrap());
        let e = IpcExport {
            handle: IpcHandle([0; 64]),
            device: 0,
            base: 0x1000,
            alloc_len: 64,
            buffer_id: 1,
            offset: 0,
            len: 8,
        };
        assert_eq!(ipc.acquire(1, &e).map(|_| ()), nb);
        assert_eq!(ipc.stats(), IpcCacheStats::default());
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn no_driver_every_entry_point_says_no_driver() {
        if available() {
            println!("skipped: NoDriver checks: a CUDA driver is present here");
            return;
        }
        println!("skipped: GPU paths: no CUDA driver (libcuda not loadable); checking NoDriver");
        let nd = Err::<(), _>(GpuError::NoDriver);
        assert_eq!(init(), nd);
        assert_eq!(device_count().map(|_| ()), nd);
        assert_eq!(classify_addr(0x1000, 8).map(|_| ()), nd);
        assert_eq!(ipc_export(0x1000, 8).map(|_| ()), nd);
        assert_eq!(export_dmabuf(0x1000, 8).map(|_| ()), nd);
        assert_eq!(DeviceBuffer::alloc(0, 8).map(|_| ()), nd);
        assert_eq!(PinnedBuffer::new(8).map(|_| ()), nd);
        assert_eq!(Stream::runtime(0).map(|_| ()), nd);
        assert_eq!(Event::new(0).map(|_| ()), nd);
        assert_eq!(can_access_peer(0, 1).map(|_| ()), nd);
    }
}
