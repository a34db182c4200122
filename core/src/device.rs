//! Point-to-point on device (GPU) memory and on raw memory from FFI.
//!
//! Pass any [`DeviceMemory`] to [`Communicator::send_device`] /
//! [`Communicator::recv_device`]: a [`rankwire_gpu::DeviceBuffer`] (re-exported as
//! [`crate::gpu::DeviceBuffer`]) or, with the `cuda` feature, cudarc's `CudaSlice<T>`,
//! `CudaView<T>` and `CudaViewMut<T>` (re-exported as [`crate::cudarc`]); or any
//! pointer and byte length to the `unsafe` `*_raw` calls. The memory kind is detected through unified
//! virtual addressing (`cuPointerGetAttributes`): device memory goes through the GPU
//! paths (CUDA IPC inside a node, staging through host memory otherwise), host,
//! pinned and managed memory through the host paths. Zero-length buffers are never
//! inspected or dereferenced.
//!
//! Semantics: the send buffer must hold its data when the send is started (synchronize
//! the stream that produced it first); copies run on the runtime's own stream of the
//! buffer's device and are complete when the request completes, so a received buffer is
//! visible to work on any stream of that device.

use rankwire_gpu::{DeviceBuffer, PtrKind};

/// Device memory the runtime can send from: a device address and a length in bytes.
///
/// Implemented for [`DeviceBuffer`] and, with the `cuda` feature, for cudarc's
/// `CudaSlice<T>`, `CudaView<'_, T>` and `CudaViewMut<'_, T>` (any `T`; lengths in
/// bytes are `len × size_of::<T>()`). For cudarc slices the slice's own stream is
/// synchronized first, so work queued on it that writes the buffer has finished
/// (cudarc users need no explicit synchronize before a send).
///
/// # Safety
/// The safe send and collective calls trust the region: an implementation must return
/// an address and length of memory (device, or host memory CUDA knows) that stays valid
/// for reads, and is not written by anyone else, for as long as `&self` is borrowed.
pub unsafe trait DeviceMemory {
    /// Device address and length in bytes, with pending writes finished.
    ///
    /// # Errors
    /// [`Error::Gpu`] if synchronizing the buffer's stream fails.
    fn device_region(&self) -> Result<(u64, usize)>;
}

/// Device memory the runtime can receive into (see [`DeviceMemory`]).
///
/// # Safety
/// As [`DeviceMemory`], and the region must be valid for writes and not accessed by
/// anyone else while `&mut self` is borrowed.
pub unsafe trait DeviceMemoryMut: DeviceMemory {
    /// Device address and length in bytes, with pending work on it finished.
    ///
    /// # Errors
    /// [`Error::Gpu`] if synchronizing the buffer's stream fails.
    fn device_region_mut(&mut self) -> Result<(u64, usize)>;
}

// SAFETY: a DeviceBuffer owns its `len` bytes of device memory until dropped.
unsafe impl DeviceMemory for DeviceBuffer {
    fn device_region(&self) -> Result<(u64, usize)> {
        Ok((self.ptr(), self.len()))
    }
}

// SAFETY: as above; `&mut self` gives exclusive access.
unsafe impl DeviceMemoryMut for DeviceBuffer {
    fn device_region_mut(&mut self) -> Result<(u64, usize)> {
        Ok((self.ptr(), self.len()))
    }
}

// SAFETY: a stand-in buffer owns its heap memory (host memory the runtime treats as
// device memory, crate::gdr_standin) until dropped.
unsafe impl DeviceMemory for crate::gdr_standin::StandInDeviceBuffer {
    fn device_region(&self) -> Result<(u64, usize)> {
        Ok((self.addr(), self.len()))
    }
}

// SAFETY: as above; `&mut self` gives exclusive access.
unsafe impl DeviceMemoryMut for crate::gdr_standin::StandInDeviceBuffer {
    fn device_region_mut(&mut self) -> Result<(u64, usize)> {
        Ok((self.as_mut_slice().as_mut_ptr() as u64, self.len()))
    }
}

#[cfg(feature = "cuda")]
mod cudarc_impls {
    use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice};

    use super::{DeviceMemory, DeviceMemoryMut};
    use crate::error::{Error, Result};

    fn sync<T>(s: &impl DeviceSlice<T>) -> Result<()> {
        s.stream()
            .synchronize()
            .map_err(|e| Error::Gpu(format!("synchronizing the buffer's cudarc stream: {e}")))
    }

    macro_rules! readable {
        ($($t:ty),*) => {$(
            // SAFETY: cudarc slices and views own or borrow `num_bytes()` of device
            // memory at `device_ptr` for as long as they live.
            unsafe impl<T> DeviceMemory for $t {
                fn device_region(&self) -> Result<(u64, usize)> {
                    sync(self)?;
                    // The guard records a read on the slice's stream when dropped here;
                    // the runtime's own copies finish before the request completes,
                    // while the borrow of the slice is still held.
                    let (ptr, _read) = self.device_ptr(self.stream());
                    Ok((ptr, self.num_bytes()))
                }
            }
        )*};
    }
    readable!(CudaSlice<T>, CudaView<'_, T>, CudaViewMut<'_, T>);

    macro_rules! writable {
        ($($t:ty),*) => {$(
            // SAFETY: as above, exclusively borrowed through `&mut self`.
            unsafe impl<T> DeviceMemoryMut for $t {
                fn device_region_mut(&mut self) -> Result<(u64, usize)> {
                    sync(self)?;
                    let stream = self.stream().clone();
                    let len = self.num_bytes();
                    let (ptr, _write) = self.device_ptr_mut(&stream);
                    Ok((ptr, len))
                }
            }
        )*};
    }
    writable!(CudaSlice<T>, CudaViewMut<'_, T>);
}
use rankwire_transports::MemoryKind;

use crate::comm::{Communicator, Source, Tag};
use crate::error::{Error, Result};
use crate::protocol::{RawBuf, Status};
use crate::request::Request;

/// Memory kind of `len` bytes at `addr`, as the protocol needs it.
fn kind_of(addr: u64, len: usize) -> Result<MemoryKind> {
    if len > 0
        && let Some(k) = crate::gdr_standin::kind_of(addr, len)
    {
        return Ok(k);
    }
    if len == 0 || !rankwire_gpu::available() {
        return Ok(MemoryKind::Host);
    }
    let info = rankwire_gpu::classify_addr(addr, len).map_err(|e| {
        Error::Gpu(format!(
            "cannot classify buffer at {addr:#x} ({len} bytes): {e}"
        ))
    })?;
    Ok(match info.kind {
        PtrKind::Device { ordinal } => MemoryKind::Cuda { device: ordinal },
        // The host may touch these directly.
        PtrKind::Host | PtrKind::HostRegistered | PtrKind::Managed { .. } => MemoryKind::Host,
    })
}

impl Communicator {
    /// Nonblocking send of `len_bytes` bytes at `ptr`, which may be host, pinned,
    /// managed or device memory (detected per call).
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len_bytes` bytes (host or device) until the
    /// request completes, and must not be written meanwhile.
    ///
    /// # Errors
    /// As [`Communicator::isend`]; [`Error::Gpu`] if the pointer cannot be classified.
    pub unsafe fn isend_raw<'a>(
        &self,
        ptr: *const u8,
        len_bytes: usize,
        dest: usize,
        tag: i32,
    ) -> Result<Request<'a>> {
        let kind = kind_of(ptr as u64, len_bytes)?;
        self.start_send_raw(
            RawBuf::with_kind(ptr as *mut u8, len_bytes, kind),
            dest,
            tag,
            false,
        )
    }

    /// Nonblocking receive into `len_bytes` bytes at `ptr` (host, pinned, managed or
    /// device memory).
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len_bytes` bytes until the request completes,
    /// and must not be accessed meanwhile.
    ///
    /// # Errors
    /// As [`Communicator::irecv`]; [`Error::Gpu`] if the pointer cannot be classified.
    pub unsafe fn irecv_raw<'a>(
        &self,
        ptr: *mut u8,
        len_bytes: usize,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Request<'a>> {
        let kind = kind_of(ptr as u64, len_bytes)?;
        self.start_recv_raw(
            RawBuf::with_kind(ptr, len_bytes, kind),
            source.into(),
            tag.into(),
        )
    }

    /// Blocking send of a device buffer (MPI_Send on GPU memory).
    ///
    /// # Errors
    /// As [`Communicator::send`]; [`Error::Gpu`] when a device copy fails.
    pub fn send_device<B: DeviceMemory + ?Sized>(
        &self,
        buf: &B,
        dest: usize,
        tag: i32,
    ) -> Result<()> {
        self.isend_device(buf, dest, tag)?.wait().map(|_| ())
    }

    /// Blocking receive into a device buffer; [`Status::len_bytes`] gives what arrived.
    ///
    /// # Errors
    /// As [`Communicator::recv`] (truncation included); [`Error::Gpu`] when a device
    /// copy fails.
    pub fn recv_device<B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &mut B,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Status> {
        self.irecv_device(buf, source, tag)?.wait()
    }

    /// Nonblocking send of a device buffer, borrowed until the request completes.
    ///
    /// # Errors
    /// As [`Communicator::isend`].
    pub fn isend_device<'a, B: DeviceMemory + ?Sized>(
        &self,
        buf: &'a B,
        dest: usize,
        tag: i32,
    ) -> Result<Request<'a>> {
        let (ptr, len) = buf.device_region()?;
        // SAFETY: the buffer owns `len` bytes at `ptr` and stays borrowed for 'a.
        unsafe { self.isend_raw(ptr as *const u8, len, dest, tag) }
    }

    /// Nonblocking receive into a device buffer, borrowed until the request completes.
    ///
    /// # Errors
    /// As [`Communicator::irecv`].
    pub fn irecv_device<'a, B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &'a mut B,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Request<'a>> {
        let (ptr, len) = buf.device_region_mut()?;
        // SAFETY: the buffer owns `len` bytes at `ptr` and stays mutably borrowed for 'a.
        unsafe { self.irecv_raw(ptr as *mut u8, len, source, tag) }
    }
}

impl crate::comm::Message {
    /// Receive this message into `len_bytes` bytes at `ptr`, host or device memory
    /// (detected per call), without blocking (MPI_Imrecv).
    ///
    /// # Safety
    /// `ptr` must be valid for writes of `len_bytes` bytes until the request completes.
    ///
    /// # Errors
    /// [`Error::Gpu`] if the pointer cannot be classified; the request reports
    /// truncation as [`crate::comm::Message::recv`] does.
    pub unsafe fn irecv_raw<'a>(mut self, ptr: *mut u8, len_bytes: usize) -> Result<Request<'a>> {
        let Some(m) = self.msg.take() else {
            return Err(Error::usage("message already received"));
        };
        let kind = kind_of(ptr as u64, len_bytes)?;
        let id = self.inner.mrecv(m, RawBuf::with_kind(ptr, len_bytes, kind));
        Ok(Request::new(self.inner.clone(), id, true, std::marker::PhantomData).for_comm(&self.st))
    }
}
