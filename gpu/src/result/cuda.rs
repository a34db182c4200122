//! The `result` layer over cudarc's `sys` bindings (feature `cuda`).
//!
//! Rules for every function here:
//! - it calls [`ensure_init`] first (directly or through [`primary_context`]), so no cudarc
//!   function runs unless libcuda loaded and every symbol below resolved;
//! - it makes one driver call (context helpers aside) and turns a non-success
//!   `CUresult` into `GpuError::Driver { call, code }`;
//! - it holds no policy: which error code means what is decided by the safe modules.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys;

use super::{DeviceAttr, PtrAttrs, count_pointer_query};
use crate::error::GpuError;

/// A CUDA stream handle (`CUstream`).
pub(crate) type RawStream = sys::CUstream;
/// A CUDA event handle (`CUevent`).
pub(crate) type RawEvent = sys::CUevent;
/// An instantiated CUDA graph and the graph it came from.
pub(crate) type RawGraph = (sys::CUgraph, sys::CUgraphExec);

// Every driver entry point this crate calls. cudarc resolves a symbol on its first call
// and panics if it is missing; resolving them all at init turns that into an error.
const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuCtxEnablePeerAccess",
    "cuPointerGetAttributes",
    "cuPointerGetAttribute",
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
    "cuMemAlloc_v2",
    "cuMemAllocAsync",
    "cuMemAllocManaged",
    "cuMemFree_v2",
    "cuMemFreeAsync",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemsetD8Async",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyPeerAsync",
    "cuMemGetHandleForAddressRange",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitValue32_v2",
    "cuStreamIsCapturing",
    "cuMemHostGetDevicePointer_v2",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuEventElapsedTime_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuLaunchKernel",
];

fn check(call: &'static str, r: sys::CUresult) -> Result<(), GpuError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        // The Debug form of the bindgen enum is the C enumerator name,
        // e.g. CUDA_ERROR_INVALID_VALUE; no driver call needed to name it.
        Err(GpuError::Driver {
            call,
            code: format!("{r:?}"),
        })
    }
}

/// Whether libcuda can be loaded; computed once (cudarc's check dlopens every time).
#[inline]
pub(crate) fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: is_culib_present only tries to dlopen candidate library names and drops
    // them; it has no preconditions and does not panic.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// Load libcuda, resolve every symbol and call `cuInit(0)`, once per process.
pub(crate) fn ensure_init() -> Result<(), GpuError> {
    static INIT: OnceLock<Result<(), GpuError>> = OnceLock::new();
    INIT.get_or_init(init_once).clone()
}

fn init_once() -> Result<(), GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDriver);
    }
    // culib() panics only if the library cannot be loaded, which driver_present() has
    // just ruled out; catch_unwind covers the library disappearing in between.
    // SAFETY: culib has no preconditions; it loads the library once into a static.
    let lib =
        std::panic::catch_unwind(|| unsafe { sys::culib() }).map_err(|_| GpuError::NoDriver)?;
    for &symbol in REQUIRED_SYMBOLS {
        // SAFETY: looking a symbol up does not call it; the pointer type is never used.
        let found = unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_ok();
        if !found {
            return Err(GpuError::DriverTooOld { symbol });
        }
    }
    // cuInit(0); its symbol was resolved above.
    cudarc::driver::result::init().map_err(|e| GpuError::Driver {
        call: "cuInit",
        code: format!("{:?}", e.0),
    })
}

/// `cuDriverGetVersion`: e.g. 13000 for CUDA 13.0.
pub(crate) fn driver_version() -> Result<i32, GpuError> {
    ensure_init()?;
    let mut v: c_int = 0;
    // SAFETY: v is a valid out-pointer for the duration of the call.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut v)
    })?;
    Ok(v)
}

/// `cuDeviceGetCount`.
pub(crate) fn device_count() -> Result<i32, GpuError> {
    ensure_init()?;
    let mut n: c_int = 0;
    // SAFETY: n is a valid out-pointer for the duration of the call.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(n)
}

fn device_handle(ordinal: i32) -> Result<sys::CUdevice, GpuError> {
    ensure_init()?;
    let mut dev: sys::CUdevice = 0;
    // SAFETY: dev is a valid out-pointer; an invalid ordinal is reported as an error.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    Ok(dev)
}

/// `cuDeviceGetName`.
pub(crate) fn device_name(ordinal: i32) -> Result<String, GpuError> {
    let dev = device_handle(ordinal)?;
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for buf.len() bytes, the length passed to the driver.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr().cast(), buf.len() as c_int, dev)
    })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// `cuDeviceGetAttribute`.
pub(crate) fn device_attribute(ordinal: i32, attr: DeviceAttr) -> Result<i32, GpuError> {
    use sys::CUdevice_attribute as A;
    let dev = device_handle(ordinal)?;
    let attrib = match attr {
        DeviceAttr::DmaBufSupported => A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
        DeviceAttr::GpuDirectRdmaSupported => A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
        DeviceAttr::UnifiedAddressing => A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING,
        DeviceAttr::MultiprocessorCount => A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        DeviceAttr::ComputeCapabilityMajor => A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        DeviceAttr::ComputeCapabilityMinor => A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        DeviceAttr::MpsEnabled => A::CU_DEVICE_ATTRIBUTE_MPS_ENABLED,
        DeviceAttr::PciDomainId => A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
        DeviceAttr::PciBusId => A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
        DeviceAttr::PciDeviceId => A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
    };
    let mut v: c_int = 0;
    // SAFETY: v is a valid out-pointer; dev came from cuDeviceGet.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut v, attrib, dev)
    })?;
    Ok(v)
}

/// `cuDeviceCanAccessPeer(device → peer)`.
pub(crate) fn device_can_access_peer(device: i32, peer: i32) -> Result<bool, GpuError> {
    let dev = device_handle(device)?;
    let peer_dev = device_handle(peer)?;
    let mut can: c_int = 0;
    // SAFETY: can is a valid out-pointer; both devices came from cuDeviceGet.
    check("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, dev, peer_dev)
    })?;
    Ok(can != 0)
}

// Primary contexts, retained once per device and never released: the same contexts the
// CUDA runtime and cudarc's CudaContext use, so memory from either works here. The
// table mirrors process-global driver state, hence a module-level static.
struct Ctx(sys::CUcontext);
// SAFETY: a CUcontext is a process-wide handle; the driver allows using it from any
// thread, and this table only stores and copies it.
unsafe impl Send for Ctx {}

static CONTEXTS: Mutex<Vec<(i32, Ctx)>> = Mutex::new(Vec::new());

/// The retained primary context of `ordinal` (retained on first use).
pub(crate) fn primary_context(ordinal: i32) -> Result<sys::CUcontext, GpuError> {
    ensure_init()?;
    // A poisoned lock only means another thread panicked while holding it; the table is
    // always consistent (one push per retained context), so keep using it.
    let mut table = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, ctx)) = table.iter().find(|(o, _)| *o == ordinal) {
        return Ok(ctx.0);
    }
    let dev = device_handle(ordinal)?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: ctx is a valid out-pointer; dev came from cuDeviceGet.
    check("cuDevicePrimaryCtxRetain", unsafe {
        sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
    })?;
    table.push((ordinal, Ctx(ctx)));
    Ok(ctx)
}

/// Make the primary context of `ordinal` current on this thread (`cuCtxSetCurrent`).
pub(crate) fn bind_device(ordinal: i32) -> Result<(), GpuError> {
    let ctx = primary_context(ordinal)?;
    // SAFETY: ctx is a retained primary context, valid for the process lifetime.
    check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })
}

/// The current context of this thread as an integer (0: none), for
/// [`set_context_raw`] on another thread.
pub(crate) fn current_context_raw() -> Result<usize, GpuError> {
    ensure_init()?;
    let mut cur: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: cur is a valid out-pointer.
    check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut cur) })?;
    Ok(cur as usize)
}

/// Make a context from [`current_context_raw`] current (`cuCtxSetCurrent`). Every
/// context rankwire makes current is a primary context, retained for the process.
pub(crate) fn set_context_raw(ctx: usize) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: a retained primary context (see above), valid for the process lifetime.
    check("cuCtxSetCurrent", unsafe {
        sys::cuCtxSetCurrent(ctx as sys::CUcontext)
    })
}

/// Make sure some context is current on this thread; binds device 0 if none is.
pub(crate) fn ensure_some_context() -> Result<(), GpuError> {
    ensure_init()?;
    let mut cur: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: cur is a valid out-pointer.
    check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut cur) })?;
    if cur.is_null() {
        bind_device(0)
    } else {
        Ok(())
    }
}

/// `cuCtxEnablePeerAccess`: let the context of `device` access memory of `peer`.
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED` counts as success.
pub(crate) fn enable_peer_access(device: i32, peer: i32) -> Result<(), GpuError> {
    let peer_ctx = primary_context(peer)?;
    bind_device(device)?;
    // SAFETY: peer_ctx is a retained primary context; flags must be 0.
    let r = unsafe { sys::cuCtxEnablePeerAccess(peer_ctx, 0) };
    if r == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    check("cuCtxEnablePeerAccess", r)
}

/// One `cuPointerGetAttributes` call reading MEMORY_TYPE, DEVICE_ORDINAL, BUFFER_ID,
/// IS_MANAGED, RANGE_START_ADDR and RANGE_SIZE.
pub(crate) fn pointer_attributes(addr: u64) -> Result<PtrAttrs, GpuError> {
    use sys::CUpointer_attribute as A;
    ensure_init()?;
    let mut attrs = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        A::CU_POINTER_ATTRIBUTE_BUFFER_ID,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    // Each attribute gets a zeroed 8-byte slot. The driver writes 4 bytes for
    // MEMORY_TYPE (enum), DEVICE_ORDINAL (int) and IS_MANAGED (bool as unsigned int),
    // 8 for BUFFER_ID (unsigned long long), RANGE_START_ADDR (CUdeviceptr) and
    // RANGE_SIZE (size_t); on little-endian x86_64/aarch64 the low bytes of a zeroed u64
    // read back correctly whichever width was written.
    let mut vals = [0u64; 6];
    let mut data = [std::ptr::null_mut::<c_void>(); 6];
    let base = vals.as_mut_ptr();
    for (i, d) in data.iter_mut().enumerate() {
        // SAFETY: i < 6 = vals.len(), so the pointer stays inside vals.
        *d = unsafe { base.add(i) }.cast();
    }
    count_pointer_query();
    // SAFETY: attrs and data both hold 6 entries, each data pointer points to a live,
    // writable 8-byte slot of vals; the driver does not keep them after returning.
    check("cuPointerGetAttributes", unsafe {
        sys::cuPointerGetAttributes(
            attrs.len() as c_uint,
            attrs.as_mut_ptr(),
            data.as_mut_ptr(),
            addr,
        )
    })?;
    Ok(PtrAttrs {
        memory_type: vals[0] as u32,
        device_ordinal: vals[1] as u32 as i32,
        buffer_id: vals[2],
        is_managed: (vals[3] as u32) != 0,
        range_start: vals[4],
        range_size: vals[5] as usize,
    })
}

/// `cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID)`.
pub(crate) fn pointer_buffer_id(addr: u64) -> Result<u64, GpuError> {
    ensure_init()?;
    let mut id: u64 = 0;
    count_pointer_query();
    // SAFETY: id is a valid 8-byte out-slot; BUFFER_ID is an unsigned long long.
    check("cuPointerGetAttribute", unsafe {
        sys::cuPointerGetAttribute(
            (&mut id as *mut u64).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID,
            addr,
        )
    })?;
    Ok(id)
}

/// `cuIpcGetMemHandle` for the allocation starting at `base` (context must be current).
pub(crate) fn ipc_get_mem_handle(base: u64) -> Result<[u8; 64], GpuError> {
    ensure_init()?;
    let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: h is a valid out-pointer to a 64-byte handle.
    check("cuIpcGetMemHandle", unsafe {
        sys::cuIpcGetMemHandle(&mut h, base)
    })?;
    Ok(h.reserved.map(|c| c as u8))
}

/// `cuIpcOpenMemHandle_v2` with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`, mapped into the
/// current context. Returns the local address of the allocation base.
pub(crate) fn ipc_open_mem_handle(handle: &[u8; 64]) -> Result<u64, GpuError> {
    ensure_init()?;
    let h = sys::CUipcMemHandle {
        reserved: handle.map(|b| b as std::ffi::c_char),
    };
    let mut dptr: sys::CUdeviceptr = 0;
    let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as c_uint;
    // SAFETY: dptr is a valid out-pointer; the handle is passed by value.
    check("cuIpcOpenMemHandle_v2", unsafe {
        sys::cuIpcOpenMemHandle_v2(&mut dptr, h, flags)
    })?;
    Ok(dptr)
}

/// `cuIpcCloseMemHandle`.
///
/// # Safety
/// `mapped_base` must come from [`ipc_open_mem_handle`], not be closed yet, and no
/// operation may still use the mapping.
pub(crate) unsafe fn ipc_close_mem_handle(mapped_base: u64) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: the caller guarantees mapped_base is an open, idle IPC mapping.
    check("cuIpcCloseMemHandle", unsafe {
        sys::cuIpcCloseMemHandle(mapped_base)
    })
}

/// `cuMemAlloc_v2` in the current context (IPC-capable memory).
pub(crate) fn mem_alloc(len: usize) -> Result<u64, GpuError> {
    ensure_init()?;
    let mut dptr: sys::CUdeviceptr = 0;
    // SAFETY: dptr is a valid out-pointer.
    check("cuMemAlloc_v2", unsafe {
        sys::cuMemAlloc_v2(&mut dptr, len)
    })?;
    Ok(dptr)
}

/// `cuMemAllocAsync` from the default pool of the stream's device.
///
/// # Safety
/// `stream` must be a live stream.
pub(crate) unsafe fn mem_alloc_async(len: usize, stream: RawStream) -> Result<u64, GpuError> {
    ensure_init()?;
    let mut dptr: sys::CUdeviceptr = 0;
    // SAFETY: dptr is a valid out-pointer; the caller guarantees the stream is live.
    check("cuMemAllocAsync", unsafe {
        sys::cuMemAllocAsync(&mut dptr, len, stream)
    })?;
    Ok(dptr)
}

/// `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)` in the current context.
pub(crate) fn mem_alloc_managed(len: usize) -> Result<u64, GpuError> {
    ensure_init()?;
    let mut dptr: sys::CUdeviceptr = 0;
    let flags = sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as c_uint;
    // SAFETY: dptr is a valid out-pointer.
    check("cuMemAllocManaged", unsafe {
        sys::cuMemAllocManaged(&mut dptr, len, flags)
    })?;
    Ok(dptr)
}

/// `cuMemFree_v2`.
///
/// # Safety
/// `dptr` must come from `cuMemAlloc`/`cuMemAllocManaged`, be freed once, and no
/// pending operation may use it.
pub(crate) unsafe fn mem_free(dptr: u64) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemFree_v2", unsafe { sys::cuMemFree_v2(dptr) })
}

/// `cuMemFreeAsync`.
///
/// # Safety
/// `dptr` must come from `cuMemAllocAsync`, be freed once; `stream` must be live.
pub(crate) unsafe fn mem_free_async(dptr: u64, stream: RawStream) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemFreeAsync", unsafe {
        sys::cuMemFreeAsync(dptr, stream)
    })
}

/// `cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE)`: pinned host memory usable from every
/// context. A context must be current.
pub(crate) fn mem_host_alloc(len: usize) -> Result<*mut u8, GpuError> {
    ensure_init()?;
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: p is a valid out-pointer.
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(
            &mut p,
            len,
            sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP,
        )
    })?;
    Ok(p.cast())
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `p` must come from [`mem_host_alloc`] and be freed once, with no pending copy using it.
pub(crate) unsafe fn mem_free_host(p: *mut u8) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(p.cast()) })
}

/// `cuMemsetD8Async`.
///
/// # Safety
/// `[dst, dst + len)` must be live device-accessible memory; `stream` must be live.
pub(crate) unsafe fn memset_d8_async(
    dst: u64,
    value: u8,
    len: usize,
    stream: RawStream,
) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(dst, value, len, stream)
    })
}

/// `cuMemcpyDtoDAsync_v2`.
///
/// # Safety
/// Both ranges must be live device-accessible memory until the copy completes.
pub(crate) unsafe fn memcpy_dtod_async(
    dst: u64,
    src: u64,
    len: usize,
    stream: RawStream,
) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyDtoDAsync_v2", unsafe {
        sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream)
    })
}

/// `cuMemcpyHtoDAsync_v2`.
///
/// # Safety
/// `src` must be readable for `len` bytes and `dst` live device memory until the copy
/// completes.
pub(crate) unsafe fn memcpy_htod_async(
    dst: u64,
    src: *const u8,
    len: usize,
    stream: RawStream,
) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyHtoDAsync_v2", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, stream)
    })
}

/// `cuMemcpyDtoHAsync_v2`.
///
/// # Safety
/// `dst` must be writable for `len` bytes and `src` live device memory until the copy
/// completes.
pub(crate) unsafe fn memcpy_dtoh_async(
    dst: *mut u8,
    src: u64,
    len: usize,
    stream: RawStream,
) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuMemcpyDtoHAsync_v2", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, stream)
    })
}

/// `cuMemcpyPeerAsync` between the primary contexts of two devices.
///
/// # Safety
/// Both ranges must be live device memory of their devices until the copy completes.
pub(crate) unsafe fn memcpy_peer_async(
    dst: u64,
    dst_device: i32,
    src: u64,
    src_device: i32,
    len: usize,
    stream: RawStream,
) -> Result<(), GpuError> {
    let dst_ctx = primary_context(dst_device)?;
    let src_ctx = primary_context(src_device)?;
    // SAFETY: contexts are retained primary contexts; ranges guaranteed by the caller.
    check("cuMemcpyPeerAsync", unsafe {
        sys::cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, len, stream)
    })
}

/// `cuStreamCreate(CU_STREAM_NON_BLOCKING)` in the current context.
pub(crate) fn stream_create() -> Result<RawStream, GpuError> {
    ensure_init()?;
    let mut s: sys::CUstream = std::ptr::null_mut();
    let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
    // SAFETY: s is a valid out-pointer.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut s, flags)
    })?;
    Ok(s)
}

/// `cuStreamDestroy_v2`.
///
/// # Safety
/// `s` must be a live stream, destroyed once.
pub(crate) unsafe fn stream_destroy(s: RawStream) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuStreamDestroy_v2", unsafe { sys::cuStreamDestroy_v2(s) })
}

/// `cuStreamSynchronize`.
///
/// # Safety
/// `s` must be a live stream.
pub(crate) unsafe fn stream_synchronize(s: RawStream) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(s)
    })
}

/// `cuStreamQuery`: `Ok(true)` when idle, `Ok(false)` on `CUDA_ERROR_NOT_READY`.
///
/// # Safety
/// `s` must be a live stream.
pub(crate) unsafe fn stream_query(s: RawStream) -> Result<bool, GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    let r = unsafe { sys::cuStreamQuery(s) };
    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check("cuStreamQuery", r).map(|()| true)
}

/// `cuStreamGetId`: the stream's id, unique within its context for the process's
/// lifetime.
///
/// # Safety
/// `s` must be a live stream (or NULL, the default stream of the current context).
pub(crate) unsafe fn stream_id(s: RawStream) -> Result<u64, GpuError> {
    ensure_init()?;
    let mut id: std::ffi::c_ulonglong = 0;
    // SAFETY: guaranteed by the caller; `id` is a valid out-pointer.
    check("cuStreamGetId", unsafe { sys::cuStreamGetId(s, &mut id) })?;
    Ok(id)
}

/// `cuStreamWaitValue32(s, addr, value, CU_STREAM_WAIT_VALUE_GEQ)`: work enqueued on
/// `s` later waits until the 32-bit word at `addr` is at least `value` (compared as
/// `(int32)(*addr - value) >= 0`).
///
/// # Safety
/// `s` must be a live stream; `addr` a device address of 4 live bytes (device memory,
/// or host memory mapped with `CU_MEMHOSTALLOC_DEVICEMAP`) until the wait has passed.
pub(crate) unsafe fn stream_wait_value32_geq(
    s: RawStream,
    addr: u64,
    value: u32,
) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: the caller's contract.
    check("cuStreamWaitValue32", unsafe {
        sys::cuStreamWaitValue32_v2(
            s,
            addr,
            value,
            sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as c_uint,
        )
    })
}

/// `cuStreamIsCapturing`: whether work enqueued on `s` now is captured into a graph.
///
/// # Safety
/// `s` must be a live stream.
pub(crate) unsafe fn stream_is_capturing(s: RawStream) -> Result<bool, GpuError> {
    ensure_init()?;
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the caller's contract; `status` is a valid out-pointer.
    check("cuStreamIsCapturing", unsafe {
        sys::cuStreamIsCapturing(s, &mut status)
    })?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// `cuMemHostGetDevicePointer`: the device address of mapped pinned host memory.
///
/// # Safety
/// `p` must come from [`mem_host_alloc`] (which maps it) and be live.
pub(crate) unsafe fn mem_host_device_pointer(p: *mut u8) -> Result<u64, GpuError> {
    ensure_init()?;
    let mut d: sys::CUdeviceptr = 0;
    // SAFETY: the caller's contract; `d` is a valid out-pointer.
    check("cuMemHostGetDevicePointer", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut d, p.cast(), 0)
    })?;
    Ok(d)
}

/// `cuStreamWaitEvent(s, e, 0)`: work enqueued on `s` later waits for `e`.
///
/// # Safety
/// `s` and `e` must be live handles of the current context's device.
pub(crate) unsafe fn stream_wait_event(s: RawStream, e: RawEvent) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuStreamWaitEvent", unsafe {
        sys::cuStreamWaitEvent(s, e, 0)
    })
}

/// `cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED)`.
///
/// # Safety
/// `s` must be a live stream of the current context.
pub(crate) unsafe fn stream_begin_capture(s: RawStream) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
    })
}

/// `cuStreamEndCapture` then `cuGraphInstantiateWithFlags(…, 0)`.
///
/// # Safety
/// `s` must be a live stream that is capturing.
pub(crate) unsafe fn stream_end_capture(s: RawStream) -> Result<RawGraph, GpuError> {
    let mut g: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: g is a valid out-pointer; the caller's contract.
    check("cuStreamEndCapture", unsafe {
        sys::cuStreamEndCapture(s, &mut g)
    })?;
    let mut e: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: e is a valid out-pointer; g is the captured graph.
    if let Err(err) = check("cuGraphInstantiateWithFlags", unsafe {
        sys::cuGraphInstantiateWithFlags(&mut e, g, 0)
    }) {
        // SAFETY: g is live and destroyed once.
        let _ = unsafe { sys::cuGraphDestroy(g) };
        return Err(err);
    }
    Ok((g, e))
}

/// `cuGraphLaunch`.
///
/// # Safety
/// `g` from [`stream_end_capture`], not destroyed; `s` a live stream.
pub(crate) unsafe fn graph_launch(g: RawGraph, s: RawStream) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(g.1, s) })
}

/// `cuGraphExecDestroy` and `cuGraphDestroy`.
///
/// # Safety
/// `g` from [`stream_end_capture`], destroyed once, with no launch pending.
pub(crate) unsafe fn graph_destroy(g: RawGraph) {
    // SAFETY: the caller's contract.
    unsafe {
        let _ = sys::cuGraphExecDestroy(g.1);
        let _ = sys::cuGraphDestroy(g.0);
    }
}

/// `cuEventCreate`; `timing` false adds `CU_EVENT_DISABLE_TIMING` (cheaper).
pub(crate) fn event_create(timing: bool) -> Result<RawEvent, GpuError> {
    ensure_init()?;
    let flags = if timing {
        sys::CUevent_flags::CU_EVENT_DEFAULT
    } else {
        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
    };
    let mut e: sys::CUevent = std::ptr::null_mut();
    // SAFETY: e is a valid out-pointer.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut e, flags as c_uint)
    })?;
    Ok(e)
}

/// `cuEventRecord`.
///
/// # Safety
/// `e` and `s` must be live and belong to the same context.
pub(crate) unsafe fn event_record(e: RawEvent, s: RawStream) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuEventRecord", unsafe { sys::cuEventRecord(e, s) })
}

/// `cuEventQuery`: `Ok(true)` when complete, `Ok(false)` on `CUDA_ERROR_NOT_READY`.
///
/// # Safety
/// `e` must be a live event.
pub(crate) unsafe fn event_query(e: RawEvent) -> Result<bool, GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    let r = unsafe { sys::cuEventQuery(e) };
    if r == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check("cuEventQuery", r).map(|()| true)
}

/// `cuEventSynchronize`.
///
/// # Safety
/// `e` must be a live event.
pub(crate) unsafe fn event_synchronize(e: RawEvent) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(e) })
}

/// `cuEventElapsedTime_v2` in milliseconds.
///
/// # Safety
/// Both events must be live timing events that have completed.
pub(crate) unsafe fn event_elapsed_ms(start: RawEvent, end: RawEvent) -> Result<f32, GpuError> {
    ensure_init()?;
    let mut ms: f32 = 0.0;
    // SAFETY: ms is a valid out-pointer; events guaranteed by the caller.
    check("cuEventElapsedTime_v2", unsafe {
        sys::cuEventElapsedTime_v2(&mut ms, start, end)
    })?;
    Ok(ms)
}

/// `cuEventDestroy_v2`.
///
/// # Safety
/// `e` must be a live event, destroyed once.
pub(crate) unsafe fn event_destroy(e: RawEvent) -> Result<(), GpuError> {
    ensure_init()?;
    // SAFETY: guaranteed by the caller.
    check("cuEventDestroy_v2", unsafe { sys::cuEventDestroy_v2(e) })
}

/// `cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)` for a
/// page-aligned range; returns the new file descriptor, owned by the caller.
///
/// # Safety
/// `[start, start + len)` must be live device memory (page-aligned start and length).
pub(crate) unsafe fn mem_get_dmabuf_fd(start: u64, len: usize) -> Result<i32, GpuError> {
    ensure_init()?;
    let mut fd: c_int = -1;
    // SAFETY: the handle out-pointer is a valid int, the type the driver writes for
    // DMA_BUF_FD; the range is guaranteed by the caller.
    check("cuMemGetHandleForAddressRange", unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&mut fd as *mut c_int).cast(),
            start,
            len,
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    })?;
    Ok(fd)
}

/// A loaded module (`CUmodule`); modules are kept loaded for the process lifetime.
pub(crate) type RawFunction = sys::CUfunction;

/// Whether libnvrtc can be loaded; computed once.
pub(crate) fn nvrtc_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: is_culib_present only tries to dlopen candidate library names.
    *PRESENT.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() })
}

fn nvrtc_err(call: &'static str, e: cudarc::nvrtc::result::NvrtcError, log: String) -> GpuError {
    GpuError::Nvrtc {
        call,
        code: format!("{:?}", e.0),
        log,
    }
}

/// Compile CUDA C++ `src` to PTX with NVRTC (`nvrtcCreateProgram`,
/// `nvrtcCompileProgram`, `nvrtcGetPTX`), passing `options`. The PTX is returned with
/// its terminating NUL, ready for `cuModuleLoadData`.
pub(crate) fn nvrtc_compile(src: &str, options: &[String]) -> Result<Vec<u8>, GpuError> {
    use cudarc::nvrtc::result as nv;
    if !nvrtc_present() {
        return Err(GpuError::Nvrtc {
            call: "dlopen(libnvrtc)",
            code: "NOT_FOUND".into(),
            log: "libnvrtc.so could not be loaded (install the CUDA toolkit's NVRTC or fix \
                  LD_LIBRARY_PATH)"
                .into(),
        });
    }
    let csrc = std::ffi::CString::new(src).map_err(|_| GpuError::Nvrtc {
        call: "nvrtcCreateProgram",
        code: "NUL_IN_SOURCE".into(),
        log: String::new(),
    })?;
    let prog = nv::create_program(&csrc, None)
        .map_err(|e| nvrtc_err("nvrtcCreateProgram", e, String::new()))?;
    // SAFETY: prog is a live program until destroy_program below; options outlive the call.
    let out = unsafe { nv::compile_program(prog, options) }
        .map_err(|e| {
            // SAFETY: prog is live.
            let log = unsafe { nv::get_program_log(prog) }
                .ok()
                .map(|v| {
                    let bytes: Vec<u8> =
                        v.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                })
                .unwrap_or_default();
            nvrtc_err("nvrtcCompileProgram", e, log)
        })
        // SAFETY: prog is live and compiled.
        .and_then(|()| {
            unsafe { nv::get_ptx(prog) }.map_err(|e| nvrtc_err("nvrtcGetPTX", e, String::new()))
        })
        .map(|v| v.iter().map(|&c| c as u8).collect::<Vec<u8>>());
    // SAFETY: prog is live; destroyed exactly once. A failure here leaks one program.
    let _destroyed = unsafe { nv::destroy_program(prog) };
    out
}

/// `cuModuleLoadData` of NUL-terminated PTX then `cuModuleGetFunction` for each name,
/// in the primary context of `ordinal`. The module is never unloaded.
pub(crate) fn module_load_functions(
    ordinal: i32,
    ptx: &[u8],
    names: &[&str],
) -> Result<Vec<RawFunction>, GpuError> {
    if ptx.last() != Some(&0) {
        return Err(GpuError::Driver {
            call: "cuModuleLoadData",
            code: "PTX_NOT_NUL_TERMINATED".into(),
        });
    }
    bind_device(ordinal)?;
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: module is a valid out-pointer; ptx is a NUL-terminated PTX image.
    check("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(&mut module, ptx.as_ptr().cast())
    })?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let cname = std::ffi::CString::new(*name).map_err(|_| GpuError::Driver {
            call: "cuModuleGetFunction",
            code: "NUL_IN_NAME".into(),
        })?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: f is a valid out-pointer; module is loaded; cname is NUL-terminated.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, module, cname.as_ptr())
        })?;
        out.push(f);
    }
    Ok(out)
}

/// `cuLaunchKernel` of `f` with a 1-D grid of `grid` blocks of `block` threads on `s`.
///
/// # Safety
/// `params` must point to one value per kernel parameter, of the kernel's types, and
/// every device pointer among them must be valid for the accesses the kernel makes
/// until the launched work has completed.
pub(crate) unsafe fn launch_kernel(
    f: RawFunction,
    grid: u32,
    block: u32,
    s: RawStream,
    params: &mut [*mut c_void],
) -> Result<(), GpuError> {
    // SAFETY: the caller's contract; no shared memory, no extra options.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            f,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            s,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

/// `cuFlushGPUDirectRDMAWrites(TARGET_CURRENT_CTX, TO_OWNER)` on device `ordinal`'s
/// primary context: RDMA writes that completed at the NIC become visible to work the
/// context launches afterwards.
pub(crate) fn flush_gpudirect_rdma_writes(ordinal: i32) -> Result<(), GpuError> {
    bind_device(ordinal)?;
    // SAFETY: plain enum arguments; a context is current (bound above).
    check("cuFlushGPUDirectRDMAWrites", unsafe {
        sys::cuFlushGPUDirectRDMAWrites(
            sys::CUflushGPUDirectRDMAWritesTarget::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
            sys::CUflushGPUDirectRDMAWritesScope::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER,
        )
    })
}
