//! Errors of the GPU leaf crate.
//!
//! One enum, [`GpuError`], for every entry point. Driver failures carry the name of the
//! CUDA driver function that failed and the `CUresult` name (for example
//! `CUDA_ERROR_INVALID_VALUE`), so a log line says which call failed and why without a
//! debugger. Conditions the caller is expected to handle by taking another path (host
//! staging instead of CUDA IPC, for instance) are [`GpuError::Unsupported`] with a
//! machine-readable [`Unsupported`] reason, never a `Driver` error.

/// Everything that can go wrong in `rankwire-gpu`.
///
/// Who is at fault:
/// - [`NotBuilt`](GpuError::NotBuilt), [`NoDriver`](GpuError::NoDriver): the build or the
///   machine; not an error of any one operation.
/// - [`Unsupported`](GpuError::Unsupported): the memory or device cannot take this path;
///   the caller should fall back (stage through host memory).
/// - [`OutsideAllocation`](GpuError::OutsideAllocation): local misuse, or a peer that sent
///   a malformed descriptor.
/// - [`Driver`](GpuError::Driver), [`Nvrtc`](GpuError::Nvrtc): the CUDA stack itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// This build of rankwire has no GPU support.
    ///
    /// Likely cause: the crate was built without the `cuda` cargo feature, yet a device
    /// buffer or a GPU operation reached it. Fix: rebuild rankwire and rwrun with their
    /// default features (`cuda` is on by default; `--no-default-features` turns it off), or
    /// keep device memory away from this build.
    #[error(
        "GPU support not built: rebuild rankwire with its default features (the `cuda` feature; this build used --no-default-features)"
    )]
    NotBuilt,

    /// The CUDA driver library (`libcuda.so.1`) could not be loaded.
    ///
    /// Likely cause: no NVIDIA driver on this machine, or it is not on the loader path (a
    /// container started without the GPU runtime hook). Fix: install the driver, or
    /// expose `libcuda.so.1` through `ldconfig` or `LD_LIBRARY_PATH`.
    #[error(
        "no CUDA driver: libcuda.so could not be loaded (install the NVIDIA driver or fix LD_LIBRARY_PATH)"
    )]
    NoDriver,

    /// The driver library is loaded but lacks an entry point rankwire calls.
    ///
    /// Likely cause: a driver older than the CUDA 13.0 API rankwire is built against
    /// (cudarc feature `cuda-13000`). Fix: update the NVIDIA driver to 580 or newer.
    #[error(
        "CUDA driver too old: symbol {symbol} missing (rankwire needs a CUDA 13.0 driver, 580+)"
    )]
    DriverTooOld {
        /// The missing driver function, such as `cuMemGetHandleForAddressRange`.
        symbol: &'static str,
    },

    /// A CUDA driver call returned an error.
    ///
    /// Likely cause depends on `code`: `CUDA_ERROR_INVALID_VALUE` usually means a pointer
    /// that is not (or no longer) a live allocation; `CUDA_ERROR_OUT_OF_MEMORY` means the
    /// device is full (free buffers or cached IPC mappings); `CUDA_ERROR_NO_DEVICE` means
    /// `CUDA_VISIBLE_DEVICES` hides every GPU. Fix: see the CUDA driver API documentation
    /// of `call` for `code`.
    #[error("CUDA driver call {call} failed: {code}")]
    Driver {
        /// The driver function that failed, such as `cuIpcGetMemHandle`.
        call: &'static str,
        /// The `CUresult` name, such as `CUDA_ERROR_INVALID_VALUE`.
        code: String,
    },

    /// An NVRTC (run-time compilation) call failed.
    ///
    /// Likely cause: `libnvrtc.so` missing or a kernel source error. Fix: install the CUDA
    /// toolkit's NVRTC library matching the driver, and read `log`.
    #[error("NVRTC call {call} failed: {code}: {log}")]
    Nvrtc {
        /// The NVRTC function that failed.
        call: &'static str,
        /// The `nvrtcResult` name.
        code: String,
        /// The compiler log, possibly empty.
        log: String,
    },

    /// The memory or device cannot take this path; the caller should use another.
    ///
    /// Likely cause: see the [`Unsupported`] reason. Fix: stage through pinned host
    /// memory (or another transport) instead; this is not a failure of the job.
    #[error("not supported: {0}")]
    Unsupported(Unsupported),

    /// A buffer `[addr, addr + len)` does not lie inside the allocation it starts in.
    ///
    /// Likely cause: a length larger than the buffer (local misuse), or a peer that sent
    /// an IPC descriptor whose offset plus length exceeds the allocation. Fix: pass the
    /// buffer's real length.
    #[error("buffer {addr:#x}+{len} bytes runs past its allocation {base:#x}+{alloc_len} bytes")]
    OutsideAllocation {
        /// Start of the buffer.
        addr: u64,
        /// Length of the buffer in bytes.
        len: usize,
        /// Start of the allocation containing `addr`.
        base: u64,
        /// Length of that allocation in bytes.
        alloc_len: usize,
    },
}

/// Why an operation does not apply to a buffer or device (see [`GpuError::Unsupported`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// Managed (unified) memory cannot be exported through CUDA IPC or DMA-BUF (B010).
    #[error("managed (cudaMallocManaged) memory cannot be exported; stage through host memory")]
    ManagedMemory,
    /// Stream-ordered pool (`cuMemAllocAsync`) or VMM memory: legacy CUDA IPC refuses it
    /// (`cuIpcGetMemHandle` returns `CUDA_ERROR_INVALID_VALUE`).
    #[error(
        "pool (cuMemAllocAsync) or VMM memory is not legacy-CUDA-IPC capable; allocate with cuMemAlloc or stage"
    )]
    NotIpcCapable,
    /// The pointer is host memory, which has no device-side export.
    #[error("host memory has no CUDA IPC or DMA-BUF export")]
    HostMemory,
    /// A zero-length buffer is never exported, registered or dereferenced (B002).
    #[error("zero-length buffers are never exported")]
    ZeroLength,
    /// A CUDA array (texture memory) is not linear memory.
    #[error("CUDA arrays are not linear memory")]
    CudaArray,
    /// The device does not support DMA-BUF export (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` = 0).
    #[error(
        "device {ordinal} does not support DMA-BUF export (needs Linux 5.12+, open kernel modules)"
    )]
    NoDmaBuf {
        /// The device ordinal.
        ordinal: i32,
    },
    /// A bitwise reduction (`band`, `bor`, `bxor`) was asked of a floating-point type
    /// (MPI 4.1 §6.9.2 defines them for integers only).
    #[error("bitwise reductions are defined for integer types only")]
    ReductionType,
    /// A stream of a context other than its device's primary context (cudarc's
    /// `CudaContext::new_non_primary`, CiG): rankwire's device work runs in the primary
    /// context, so it cannot be ordered with such a stream.
    #[error(
        "the stream belongs to a non-primary CUDA context; fix: make it from cudarc's CudaContext::new (the device's primary context)"
    )]
    NonPrimaryContext,
}

impl GpuError {
    /// The `CUresult` name of a [`GpuError::Driver`] error, such as
    /// `CUDA_ERROR_INVALID_VALUE`; `None` for every other variant.
    pub fn driver_code(&self) -> Option<&str> {
        match self {
            GpuError::Driver { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether this error means "no usable GPU here" (feature off, no driver, no device)
    /// rather than a failure of an operation. Tests use it to skip.
    pub fn is_no_gpu(&self) -> bool {
        matches!(self, GpuError::NotBuilt | GpuError::NoDriver)
            || self.driver_code() == Some("CUDA_ERROR_NO_DEVICE")
    }
}

impl From<Unsupported> for GpuError {
    fn from(reason: Unsupported) -> Self {
        GpuError::Unsupported(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_call_and_code() {
        let e = GpuError::Driver {
            call: "cuIpcGetMemHandle",
            code: "CUDA_ERROR_INVALID_VALUE".into(),
        };
        assert_eq!(
            e.to_string(),
            "CUDA driver call cuIpcGetMemHandle failed: CUDA_ERROR_INVALID_VALUE"
        );
        assert_eq!(e.driver_code(), Some("CUDA_ERROR_INVALID_VALUE"));
        assert!(!e.is_no_gpu());
    }

    #[test]
    fn no_gpu_classification() {
        assert!(GpuError::NotBuilt.is_no_gpu());
        assert!(GpuError::NoDriver.is_no_gpu());
        let no_dev = GpuError::Driver {
            call: "cuInit",
            code: "CUDA_ERROR_NO_DEVICE".into(),
        };
        assert!(no_dev.is_no_gpu());
        assert!(!GpuError::Unsupported(Unsupported::ManagedMemory).is_no_gpu());
    }

    #[test]
    fn outside_allocation_message_has_numbers() {
        let e = GpuError::OutsideAllocation {
            addr: 0x1000,
            len: 10,
            base: 0x1000,
            alloc_len: 8,
        };
        let s = e.to_string();
        assert!(s.contains("0x1000+10") && s.contains("+8 bytes"), "{s}");
    }
}
