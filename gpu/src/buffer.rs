//! Owned GPU and pinned host buffers, for staging, tests and examples.
//!
//! [`DeviceBuffer`] allocates in one of three ways, because they behave differently on
//! every path the runtime cares about:
//! - [`DeviceBuffer::alloc`]: `cuMemAlloc_v2`. Exportable through legacy CUDA IPC.
//! - [`DeviceBuffer::alloc_pool`]: `cuMemAllocAsync` from the device's default pool, what
//!   cudarc's safe API and `cudaMallocAsync` return. Not legacy-IPC capable.
//! - [`DeviceBuffer::alloc_managed`]: `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)`. Never
//!   IPC-exported (B010).
//!
//! [`PinnedBuffer`] is page-locked host memory (`cuMemHostAlloc`, portable to every
//! context), the staging area for host-staged copies.
//!
//! A zero-length buffer allocates nothing and has address 0.

use crate::copy::{self, Stream};
use crate::error::GpuError;
use crate::release::{Release, release};
use crate::result;

/// How a [`DeviceBuffer`] was allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocKind {
    /// `cuMemAlloc_v2`.
    Device,
    /// `cuMemAllocAsync` (stream-ordered pool).
    Pool,
    /// `cuMemAllocManaged` with `CU_MEM_ATTACH_GLOBAL`.
    Managed,
}

/// An owned allocation on one device, freed on drop.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: u64,
    len: usize,
    device: i32,
    kind: AllocKind,
}

impl DeviceBuffer {
    /// `len` bytes of device memory on `device` (`cuMemAlloc_v2`), uninitialized.
    ///
    /// # Errors
    /// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`]
    /// (`CUDA_ERROR_OUT_OF_MEMORY` when the device is full).
    pub fn alloc(device: i32, len: usize) -> Result<DeviceBuffer, GpuError> {
        Self::allocate(device, len, AllocKind::Device)
    }

    /// `len` bytes from `device`'s default memory pool (`cuMemAllocAsync` on the
    /// runtime stream, then synchronized), uninitialized.
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc`].
    pub fn alloc_pool(device: i32, len: usize) -> Result<DeviceBuffer, GpuError> {
        Self::allocate(device, len, AllocKind::Pool)
    }

    /// `len` bytes of managed memory associated with `device` (`cuMemAllocManaged`,
    /// `CU_MEM_ATTACH_GLOBAL`), uninitialized.
    ///
    /// # Errors
    /// As [`DeviceBuffer::alloc`].
    pub fn alloc_managed(device: i32, len: usize) -> Result<DeviceBuffer, GpuError> {
        Self::allocate(device, len, AllocKind::Managed)
    }

    fn allocate(device: i32, len: usize, kind: AllocKind) -> Result<DeviceBuffer, GpuError> {
        result::ensure_init()?;
        if len == 0 {
            return Ok(DeviceBuffer {
                ptr: 0,
                len: 0,
                device,
                kind,
            });
        }
        result::bind_device(device)?;
        let ptr = match kind {
            AllocKind::Device => result::mem_alloc(len)?,
            AllocKind::Managed => result::mem_alloc_managed(len)?,
            AllocKind::Pool => {
                let s = Stream::runtime(device)?;
                // SAFETY: s is the live runtime stream of `device`.
                let p = unsafe { result::mem_alloc_async(len, s.raw()) }?;
                // Make the allocation usable from any stream right away.
                if let Err(e) = s.synchronize() {
                    // SAFETY: p was just allocated on s and is unused.
                    let _freed = unsafe { result::mem_free_async(p, s.raw()) };
                    return Err(e);
                }
                p
            }
        };
        Ok(DeviceBuffer {
            ptr,
            len,
            device,
            kind,
        })
    }

    /// The device address of the first byte (0 for a zero-length buffer).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device ordinal.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// How it was allocated.
    pub fn kind(&self) -> AllocKind {
        self.kind
    }

    /// Copy `src` into the buffer at byte `offset`, and wait for the copy.
    ///
    /// # Errors
    /// [`GpuError::OutsideAllocation`] if it does not fit; driver errors.
    pub fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<(), GpuError> {
        self.check_range(offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let s = Stream::runtime(self.device)?;
        // SAFETY: the range lies in this live allocation (checked); `src` is borrowed
        // until the stream is synchronized below.
        unsafe { copy::memcpy_htod_async(self.ptr + offset as u64, src.as_ptr(), src.len(), s) }?;
        s.synchronize()
    }

    /// Copy bytes from `offset` into `dst` (as many as `dst` holds), and wait for the copy.
    ///
    /// # Errors
    /// [`GpuError::OutsideAllocation`] if it does not fit; driver errors.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), GpuError> {
        self.check_range(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let s = Stream::runtime(self.device)?;
        // SAFETY: the range lies in this live allocation (checked); `dst` is borrowed
        // mutably until the stream is synchronized below.
        unsafe {
            copy::memcpy_dtoh_async(dst.as_mut_ptr(), self.ptr + offset as u64, dst.len(), s)
        }?;
        s.synchronize()
    }

    /// The whole buffer copied to a new `Vec`.
    ///
    /// # Errors
    /// Driver errors.
    pub fn to_vec(&self) -> Result<Vec<u8>, GpuError> {
        let mut v = vec![0u8; self.len];
        self.copy_to_host(0, &mut v)?;
        Ok(v)
    }

    /// Set every byte to `value` (`cuMemsetD8Async` on the runtime stream), and wait.
    ///
    /// # Errors
    /// Driver errors.
    pub fn fill(&mut self, value: u8) -> Result<(), GpuError> {
        if self.len == 0 {
            return Ok(());
        }
        let s = Stream::runtime(self.device)?;
        s.bind()?;
        // SAFETY: the whole live allocation; synchronized before returning.
        unsafe { result::memset_d8_async(self.ptr, value, self.len, s.raw()) }?;
        s.synchronize()
    }

    /// Free the buffer now, reporting a failure (dropping it frees silently). Once the
    /// process has used stream-ordered operations, `cuMemFree` runs on a release thread
    /// instead, once no stream waits on a host flag (it waits for every stream of the
    /// device, see `host_wait_begin`): this returns `Ok` at once and a failure is
    /// logged.
    ///
    /// # Errors
    /// Driver errors of `cuMemFree_v2` / `cuMemFreeAsync`.
    pub fn free(mut self) -> Result<(), GpuError> {
        let r = self.release();
        self.len = 0; // Drop must not free again.
        r
    }

    fn release(&mut self) -> Result<(), GpuError> {
        if self.len == 0 {
            return Ok(());
        }
        // Work queued by this crate on the runtime stream may still use the buffer.
        let s = Stream::runtime(self.device)?;
        s.synchronize()?;
        match self.kind {
            AllocKind::Device | AllocKind::Managed => {
                result::bind_device(self.device)?;
                // SAFETY: allocated by cuMemAlloc/cuMemAllocManaged, freed once (len is
                // set to 0 by every caller afterwards), no queued work on the runtime
                // stream; other users were bound by the borrow on self. On the release thread
                // once stream-ordered operations are in use (crate::release).
                unsafe { release(Release::DeviceMemory(self.ptr)) }
            }
            AllocKind::Pool => {
                // SAFETY: allocated by cuMemAllocAsync, freed once, on a live stream.
                unsafe { result::mem_free_async(self.ptr, s.raw()) }?;
                s.synchronize()
            }
        }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), GpuError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(GpuError::OutsideAllocation {
                addr: self.ptr.wrapping_add(offset as u64),
                len,
                base: self.ptr,
                alloc_len: self.len,
            }),
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // Drop cannot report a failure; call free() to see it. The driver releases all
        // device memory at process exit.
        let _freed = self.release();
        self.len = 0;
    }
}

/// Page-locked host memory (`cuMemHostAlloc`, `CU_MEMHOSTALLOC_PORTABLE`), zeroed,
/// freed on drop.
#[derive(Debug)]
pub struct PinnedBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer owns its memory exclusively (like a Box<[u8]>); the raw pointer is
// only dereferenced through &self / &mut self.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// `len` bytes of pinned host memory, zeroed. Makes device 0's primary context
    /// current if the thread has none.
    ///
    /// # Errors
    /// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
    pub fn new(len: usize) -> Result<PinnedBuffer, GpuError> {
        result::ensure_init()?;
        if len == 0 {
            return Ok(PinnedBuffer {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len: 0,
            });
        }
        result::ensure_some_context()?;
        let ptr = result::mem_host_alloc(len)?;
        // SAFETY: ptr is a fresh allocation of len writable bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(PinnedBuffer { ptr, len })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialized bytes (zeroed at allocation), or
        // dangling with len 0.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as as_slice, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The address of the first byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The address of the first byte, for writing (e.g. as a copy destination).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated by cuMemHostAlloc and freed once, here. Copies using it
            // were synchronized by their owners (the staging code waits for its streams).
            // Drop cannot report a failure. On the release thread once
            // stream-ordered operations are in use (crate::release).
            let _freed = unsafe { release(Release::PinnedHost(self.ptr as usize)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_or_skip() {
        let mut b = match DeviceBuffer::alloc(0, 4099) {
            Ok(b) => b,
            Err(e) if e.is_no_gpu() => {
                println!("skipped: device buffer roundtrip: {e}");
                return;
            }
            Err(e) => panic!("alloc: {e}"),
        };
        let src: Vec<u8> = (0..4099u32).map(|i| (i * 7 + 3) as u8).collect();
        b.copy_from_host(0, &src).unwrap();
        assert_eq!(b.to_vec().unwrap(), src);
        b.fill(0xab).unwrap();
        let mut tail = [0u8; 3];
        b.copy_to_host(4096, &mut tail).unwrap();
        assert_eq!(tail, [0xab; 3]);
        assert!(matches!(
            b.copy_to_host(4097, &mut tail),
            Err(GpuError::OutsideAllocation { .. })
        ));
        b.free().unwrap();
    }

    #[test]
    fn zero_length_buffers_allocate_nothing() {
        match DeviceBuffer::alloc(0, 0) {
            Ok(b) => {
                assert_eq!((b.ptr(), b.len()), (0, 0));
                assert!(b.to_vec().unwrap().is_empty());
                b.free().unwrap();
            }
            Err(e) if e.is_no_gpu() => println!("skipped: zero-length device buffer: {e}"),
            Err(e) => panic!("alloc: {e}"),
        }
    }
}
