//! DMA-BUF export of device memory, for registering GPU buffers with an RDMA NIC
//! (`ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access)`) without `nvidia-peermem`.
//!
//! The driver exports page-aligned ranges only, so [`export_dmabuf`] exports the
//! host-page-aligned range covering the buffer and returns the buffer's offset inside
//! it: pass that offset and the buffer's length to `ibv_reg_dmabuf_mr`. The aligned range
//! may reach past the buffer into the rest of its host page (the driver maps device
//! memory in pages of at least 4 KiB), which the NIC is then allowed to touch too; the
//! runtime registers whole allocations or 2 MiB-aligned windows inside them.
//!
//! Standard: CUDA driver API `cuMemGetHandleForAddressRange`
//! (`CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`), `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.

use std::os::fd::{FromRawFd, OwnedFd};

use crate::error::{GpuError, Unsupported};
use crate::pointer::{self, PtrKind};
use crate::result::{self, DeviceAttr};

/// Export the device buffer `[ptr, ptr + len)` as a DMA-BUF file descriptor.
///
/// Returns the descriptor (closed on drop) and the buffer's offset in bytes from the
/// start of the exported, page-aligned range.
///
/// # Errors
/// - [`GpuError::Unsupported`]: [`Unsupported::ZeroLength`], [`Unsupported::HostMemory`],
///   [`Unsupported::ManagedMemory`], or [`Unsupported::NoDmaBuf`] when the device says
///   `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` = 0 (old kernel or proprietary modules
///   without DMA-BUF): register through `nvidia-peermem` or stage instead.
/// - [`GpuError::OutsideAllocation`]: `len` runs past the allocation.
/// - [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`]
///   (`cuMemGetHandleForAddressRange`).
pub fn export_dmabuf(ptr: u64, len: usize) -> Result<(OwnedFd, u64), GpuError> {
    if len == 0 {
        return Err(Unsupported::ZeroLength.into());
    }
    let info = pointer::classify_addr(ptr, len)?;
    let ordinal = match info.kind {
        PtrKind::Device { ordinal } => ordinal,
        PtrKind::Managed { .. } => return Err(Unsupported::ManagedMemory.into()),
        PtrKind::Host | PtrKind::HostRegistered => return Err(Unsupported::HostMemory.into()),
    };
    if !dmabuf_supported(ordinal)? {
        return Err(Unsupported::NoDmaBuf { ordinal }.into());
    }
    let (start, aligned_len, offset) = page_span(ptr, len, result::page_size());
    result::bind_device(ordinal)?;
    // SAFETY: [start, start + aligned_len) is the page-aligned cover of a buffer that
    // classify found inside a live device allocation.
    let fd = unsafe { result::mem_get_dmabuf_fd(start, aligned_len) }?;
    if fd < 0 {
        return Err(GpuError::Driver {
            call: "cuMemGetHandleForAddressRange",
            code: format!("CUDA_SUCCESS with invalid fd {fd}"),
        });
    }
    // SAFETY: the driver returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok((fd, offset))
}

/// Make RDMA writes into device `ordinal`'s memory that completed at the NIC visible to
/// work launched afterwards (`cuFlushGPUDirectRDMAWrites`, target the current context,
/// scope its owner). NCCL issues the same ordering step after GPUDirect RDMA receives
/// (or a loopback RDMA READ); devices of compute capability 9.0 and newer order such
/// writes without it.
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
pub fn flush_gpudirect_rdma_writes(ordinal: i32) -> Result<(), GpuError> {
    result::flush_gpudirect_rdma_writes(ordinal)
}

/// Compute capability (major, minor) of device `ordinal`.
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
pub fn compute_capability(ordinal: i32) -> Result<(i32, i32), GpuError> {
    Ok((
        result::device_attribute(ordinal, DeviceAttr::ComputeCapabilityMajor)?,
        result::device_attribute(ordinal, DeviceAttr::ComputeCapabilityMinor)?,
    ))
}

/// Whether device `ordinal` can export DMA-BUF (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`).
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
pub fn dmabuf_supported(ordinal: i32) -> Result<bool, GpuError> {
    Ok(result::device_attribute(ordinal, DeviceAttr::DmaBufSupported)? != 0)
}

// The page-aligned span covering [ptr, ptr + len): (start, length, offset of ptr).
// `page` is a power of two.
fn page_span(ptr: u64, len: usize, page: usize) -> (u64, usize, u64) {
    let page = page as u64;
    let start = ptr & !(page - 1);
    let end = (ptr + len as u64).div_ceil(page) * page;
    (start, (end - start) as usize, ptr - start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_span_math() {
        assert_eq!(
            page_span(0x20_0000, 64 << 20, 4096),
            (0x20_0000, 64 << 20, 0)
        );
        assert_eq!(
            page_span(0x20_0000 + 12388, 1 << 20, 4096),
            (0x20_3000, (1 << 20) + 4096, 100)
        );
        assert_eq!(page_span(0x1000, 1, 4096), (0x1000, 4096, 0));
        assert_eq!(page_span(0x1fff, 2, 4096), (0x1000, 8192, 0xfff));
        assert_eq!(page_span(0x10_0001, 3, 65536), (0x10_0000, 65536, 1));
    }

    #[test]
    fn refuses_zero_length_and_reports_missing_gpu() {
        assert_eq!(
            export_dmabuf(0x1000, 0).unwrap_err(),
            GpuError::Unsupported(Unsupported::ZeroLength)
        );
        let host = [0u8; 64];
        match export_dmabuf(host.as_ptr() as u64, host.len()) {
            Err(e) if e.is_no_gpu() => println!("skipped: DMA-BUF export: {e}"),
            Err(GpuError::Unsupported(Unsupported::HostMemory)) => {}
            other => panic!("host memory must not export: {other:?}"),
        }
    }
}
