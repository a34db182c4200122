//! The `result` layer when the crate is built without the `cuda` feature.
//!
//! Same signatures as `cuda.rs`; every function returns [`GpuError::NotBuilt`], so the
//! safe layer above compiles unchanged and never constructs a CUDA handle.

use std::ffi::c_void;

use super::{DeviceAttr, PtrAttrs};
use crate::error::GpuError;

/// Placeholder for `CUstream`; never constructed in this build.
pub(crate) type RawStream = *mut c_void;
/// Placeholder for `CUevent`; never constructed in this build.
pub(crate) type RawEvent = *mut c_void;
pub(crate) type RawGraph = (*mut c_void, *mut c_void);

#[inline]
pub(crate) fn driver_present() -> bool {
    false
}

pub(crate) fn ensure_init() -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn driver_version() -> Result<i32, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn device_count() -> Result<i32, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn device_name(_ordinal: i32) -> Result<String, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn device_attribute(_ordinal: i32, _attr: DeviceAttr) -> Result<i32, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn device_can_access_peer(_device: i32, _peer: i32) -> Result<bool, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn bind_device(_ordinal: i32) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn current_context_raw() -> Result<usize, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn set_context_raw(_ctx: usize) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn ensure_some_context() -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn enable_peer_access(_device: i32, _peer: i32) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn pointer_attributes(_addr: u64) -> Result<PtrAttrs, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn pointer_buffer_id(_addr: u64) -> Result<u64, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn ipc_get_mem_handle(_base: u64) -> Result<[u8; 64], GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn ipc_open_mem_handle(_handle: &[u8; 64]) -> Result<u64, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn ipc_close_mem_handle(_mapped_base: u64) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn mem_alloc(_len: usize) -> Result<u64, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn mem_alloc_async(_len: usize, _stream: RawStream) -> Result<u64, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn mem_alloc_managed(_len: usize) -> Result<u64, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn mem_free(_dptr: u64) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn mem_free_async(_dptr: u64, _stream: RawStream) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn mem_host_alloc(_len: usize) -> Result<*mut u8, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn mem_free_host(_p: *mut u8) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn memset_d8_async(
    _dst: u64,
    _value: u8,
    _len: usize,
    _stream: RawStream,
) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn memcpy_dtod_async(
    _dst: u64,
    _src: u64,
    _len: usize,
    _stream: RawStream,
) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn memcpy_htod_async(
    _dst: u64,
    _src: *const u8,
    _len: usize,
    _stream: RawStream,
) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn memcpy_dtoh_async(
    _dst: *mut u8,
    _src: u64,
    _len: usize,
    _stream: RawStream,
) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn memcpy_peer_async(
    _dst: u64,
    _dst_device: i32,
    _src: u64,
    _src_device: i32,
    _len: usize,
    _stream: RawStream,
) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn stream_create() -> Result<RawStream, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn stream_destroy(_s: RawStream) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn stream_synchronize(_s: RawStream) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn stream_query(_s: RawStream) -> Result<bool, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn stream_id(_s: RawStream) -> Result<u64, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn stream_wait_value32_geq(
    _s: RawStream,
    _addr: u64,
    _value: u32,
) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn stream_is_capturing(_s: RawStream) -> Result<bool, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn mem_host_device_pointer(_p: *mut u8) -> Result<u64, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) unsafe fn stream_wait_event(_s: RawStream, _e: RawEvent) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) unsafe fn stream_begin_capture(_s: RawStream) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) unsafe fn stream_end_capture(_s: RawStream) -> Result<RawGraph, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) unsafe fn graph_launch(_g: RawGraph, _s: RawStream) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) unsafe fn graph_destroy(_g: RawGraph) {}

pub(crate) fn event_create(_timing: bool) -> Result<RawEvent, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn event_record(_e: RawEvent, _s: RawStream) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn event_query(_e: RawEvent) -> Result<bool, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn event_synchronize(_e: RawEvent) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn event_elapsed_ms(_start: RawEvent, _end: RawEvent) -> Result<f32, GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn event_destroy(_e: RawEvent) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

/// # Safety
/// None needed in this build; kept `unsafe` to match the CUDA build.
pub(crate) unsafe fn mem_get_dmabuf_fd(_start: u64, _len: usize) -> Result<i32, GpuError> {
    Err(GpuError::NotBuilt)
}

/// Placeholder for `CUfunction`; never constructed in this build.
pub(crate) type RawFunction = *mut c_void;

pub(crate) fn nvrtc_present() -> bool {
    false
}

pub(crate) fn nvrtc_compile(_src: &str, _options: &[String]) -> Result<Vec<u8>, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn module_load_functions(
    _ordinal: i32,
    _ptx: &[u8],
    _names: &[&str],
) -> Result<Vec<RawFunction>, GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) unsafe fn launch_kernel(
    _f: RawFunction,
    _grid: u32,
    _block: u32,
    _s: RawStream,
    _params: &mut [*mut c_void],
) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}

pub(crate) fn flush_gpudirect_rdma_writes(_ordinal: i32) -> Result<(), GpuError> {
    Err(GpuError::NotBuilt)
}
