//! rankwire's CUDA leaf crate.
//!
//! With the `cuda` feature it will hold pointer detection (`cuPointerGetAttributes`),
//! CUDA IPC handles, peer copies, DMA-BUF export and NVRTC reduction kernels. Without
//! it, every entry point reports that GPU support was not built.
//!
//! Status: only [`available`] exists so far; GPU point-to-point is a later issue.

/// Whether a CUDA driver can be used by this build in this process.
///
/// Without the `cuda` feature this is always `false`. With it, it checks that the
/// driver library (`libcuda.so`) can be loaded, without panicking when it cannot
/// (cudarc's `is_culib_present`).
pub fn available() -> bool {
    #[cfg(feature = "cuda")]
    {
        // SAFETY: is_culib_present only tries to dlopen the library.
        unsafe { cudarc::driver::sys::is_culib_present() }
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_gpu_here_is_reported_not_panicked() {
        // Must not panic whatever the machine; on CI (no libcuda) it is false.
        let present = super::available();
        if !present {
            eprintln!("skipped GPU check: no CUDA driver in this process (feature or libcuda absent)");
        }
    }
}
