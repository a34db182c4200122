//! User buffers of a call, made ready for rankwire: `(pointer, count, datatype)` becomes
//! a contiguous byte range, in place when the type's data is contiguous, otherwise a
//! packed temporary (packed at the call for sends, unpacked at completion for receives).
//! Device buffers are detected per call (unified addressing); a non-contiguous type
//! over device memory is staged through host memory (copy of its true extent, pack or
//! unpack on the host, copy back).

use crate::consts::*;
use crate::datatype::{TypeInfo, count, for_comm};
use crate::error::{R, err};
use std::sync::Arc;

/// Whether `[ptr, ptr + len)` is CUDA device memory (pinned and managed memory count as
/// host: the CPU may touch them).
///
/// For device memory it first waits for the legacy default stream of that device
/// ([`rankwire::gpu::synchronize_legacy_stream`]): data a C program produced with
/// `cudaMemcpy`/`cudaMemset` or kernels on the default stream is complete before MPI
/// reads it, and MPI's writes are not overtaken by such work queued earlier. Work on the
/// program's own streams must be synchronized by the program before the call (the rule
/// of every CUDA-aware MPI).
#[inline]
pub fn is_device(ptr: *const u8, len: usize) -> bool {
    if len == 0 || ptr.is_null() || !rankwire::gpu::available() {
        return false;
    }
    classify_device(ptr, len)
}

/// [`is_device`] where a CUDA driver is present: the pointer cache's answer (out of
/// line: the host-only hot path stays small).
#[inline(never)]
fn classify_device(ptr: *const u8, len: usize) -> bool {
    match rankwire::gpu::classify(ptr, len).map(|m| m.kind) {
        Ok(rankwire::gpu::PtrKind::Device { ordinal }) => {
            // Once per MPI call (several buffers of one call share it). A failure here
            // shows again, with its message, in the copy that follows.
            if crate::error::first_time_in_call() {
                let _ = rankwire::gpu::synchronize_legacy_stream(ordinal);
            }
            true
        }
        _ => false,
    }
}

/// The byte length of `n` elements of `dt` at `ptr` when they are one run of host
/// memory of a contiguous predefined type that needs no check beyond this (`n ≥ 0`,
/// not `MPI_IN_PLACE`, not null with data): the common point-to-point case, taken
/// without building a [`SendBuf`] or [`RecvBuf`]. `None`: anything else, which the
/// general path checks and reports.
#[inline]
pub fn host_run(ptr: *const u8, n: i64, dt: MPI_Datatype) -> Option<usize> {
    let size = crate::datatype::contiguous_predefined(dt)?;
    let len = bytes_of(usize::try_from(n).ok()?, size)?;
    if ptr as usize == MPI_IN_PLACE || (ptr.is_null() && len > 0) || is_device(ptr, len) {
        return None;
    }
    Some(len)
}

/// Bytes `[off, off + len)` relative to `ptr` as a pointer (MPI_BOTTOM-relative
/// addresses included: `ptr` may be null with absolute displacements).
fn at(ptr: *const u8, off: isize) -> *const u8 {
    (ptr as isize).wrapping_add(off) as *const u8
}

/// `MPI_IN_PLACE` (the address 1) reaching a buffer argument: the calls that allow it
/// handle it before they get here, so here it is misuse (a send, a receive, the
/// output of a reduction, ...).
///
/// # Errors
/// `MPI_ERR_BUFFER`.
fn not_in_place(ptr: *const u8) -> R {
    if ptr as usize == MPI_IN_PLACE {
        return Err(err(
            MPI_ERR_BUFFER,
            "MPI_IN_PLACE passed as a buffer where this call does not allow it; fix: pass the buffer's address (MPI_IN_PLACE is only for the send buffer of collectives, or as the standard lists per collective)",
        ));
    }
    Ok(())
}

/// A send buffer as contiguous bytes.
pub struct SendBuf {
    /// First byte.
    pub ptr: *const u8,
    /// Length in bytes.
    pub len: usize,
    /// The packed copy, when the type is not contiguous (owned here).
    pub packed: Option<Vec<u8>>,
}

// SAFETY: the pointer is the C caller's buffer, valid until the operation completes
// (MPI's contract); the packed Vec is owned.
unsafe impl Send for SendBuf {}

/// `count` elements of `dt` at `ptr`, ready to send.
///
/// # Safety
/// The type map of the `count` elements at `ptr` must be readable (host or device).
///
/// # Errors
/// `MPI_ERR_COUNT` (negative), `MPI_ERR_TYPE` (bad or uncommitted type), `MPI_ERR_BUFFER`
/// (null buffer with data), `MPI_ERR_OTHER` (device staging copy failed).
pub unsafe fn send_buf(ptr: *const u8, n: i64, dt: MPI_Datatype) -> R<SendBuf> {
    not_in_place(ptr)?;
    let n = count(n)?;
    if let Some(size) = crate::datatype::contiguous_predefined(dt) {
        let len = contiguous_len(n, size)?;
        if len > 0 && ptr.is_null() {
            return Err(err(
                MPI_ERR_BUFFER,
                format!("buffer is NULL with {len} bytes to send; fix: pass the data's address"),
            ));
        }
        return Ok(SendBuf {
            ptr,
            len,
            packed: None,
        });
    }
    let t = for_comm(dt)?;
    let bytes = bytes_of(n, t.size).ok_or_else(|| err(MPI_ERR_COUNT, COUNT_OVERFLOW))?;
    if let Some((off, len)) = t.contiguous_span(n) {
        if len > 0 && ptr.is_null() && off == 0 {
            return Err(err(
                MPI_ERR_BUFFER,
                format!("buffer is NULL with {len} bytes to send; fix: pass the data's address"),
            ));
        }
        return Ok(SendBuf {
            ptr: at(ptr, off),
            len,
            packed: None,
        });
    }
    if null_with_data(ptr, &t, n) {
        return Err(err(
            MPI_ERR_BUFFER,
            format!("buffer is NULL with {bytes} bytes to send; fix: pass the data's address"),
        ));
    }
    let mut v = vec![0u8; bytes];
    // SAFETY: caller's contract.
    unsafe { with_host_view(&t, n, ptr as *mut u8, false, |host| t.pack(n, host, &mut v))? };
    Ok(SendBuf {
        ptr: v.as_ptr(),
        len: bytes,
        packed: Some(v),
    })
}

/// Whether `n` elements of the non-contiguous type `t` at `ptr` would be packed from
/// or unpacked to the zero page: a NULL buffer with data, which would crash the
/// process. A NULL `ptr` with absolute displacements (`MPI_BOTTOM`) touches real
/// addresses and is allowed.
fn null_with_data(ptr: *const u8, t: &TypeInfo, n: usize) -> bool {
    if !ptr.is_null() || n == 0 || t.size == 0 {
        return false;
    }
    let last = (n as isize - 1).saturating_mul(t.extent);
    let lo = t.true_lb.min(t.true_lb.saturating_add(last));
    (0..4096).contains(&lo)
}

/// `n` elements of `size` bytes, in bytes.
///
/// # Errors
/// `MPI_ERR_COUNT` when the product overflows.
fn contiguous_len(n: usize, size: usize) -> R<usize> {
    bytes_of(n, size).ok_or_else(|| err(MPI_ERR_COUNT, COUNT_OVERFLOW))
}

/// `n` elements of `size` bytes, in bytes, where that is a possible buffer length (at
/// most `isize::MAX`, Rust's and `MPI_Count`'s limit); `None` beyond it.
#[inline]
pub fn bytes_of(n: usize, size: usize) -> Option<usize> {
    n.checked_mul(size).filter(|&b| b <= isize::MAX as usize)
}

/// The error text of a count whose bytes exceed [`bytes_of`]'s limit.
pub const COUNT_OVERFLOW: &str = "count × type size exceeds the largest buffer (2^63 - 1 bytes); fix: pass the element count of the buffer, not a byte count of another type";

/// A receive buffer as contiguous bytes.
pub struct RecvBuf {
    /// First byte to receive into.
    pub ptr: *mut u8,
    /// Capacity in bytes.
    pub len: usize,
    /// Temporary for a non-contiguous type, unpacked by [`RecvBuf::finish`].
    packed: Option<Vec<u8>>,
    user: *mut u8,
    n: usize,
    /// The layout, for unpacking (`None` for a predefined contiguous type).
    ty: Option<Arc<TypeInfo>>,
}

// SAFETY: as SendBuf.
unsafe impl Send for RecvBuf {}

/// `count` elements of `dt` at `ptr`, ready to receive into.
///
/// # Safety
/// The type map of the `count` elements at `ptr` must be writable (host or device)
/// until [`RecvBuf::finish`].
///
/// # Errors
/// As [`send_buf`].
pub unsafe fn recv_buf(ptr: *mut u8, n: i64, dt: MPI_Datatype) -> R<RecvBuf> {
    not_in_place(ptr)?;
    let n = count(n)?;
    if let Some(size) = crate::datatype::contiguous_predefined(dt) {
        let len = contiguous_len(n, size)?;
        if len > 0 && ptr.is_null() {
            return Err(err(
                MPI_ERR_BUFFER,
                format!(
                    "buffer is NULL with room for {len} bytes; fix: pass the receive buffer's address"
                ),
            ));
        }
        return Ok(RecvBuf {
            ptr,
            len,
            packed: None,
            user: ptr,
            n,
            ty: None,
        });
    }
    let t = for_comm(dt)?;
    let bytes = bytes_of(n, t.size).ok_or_else(|| err(MPI_ERR_COUNT, COUNT_OVERFLOW))?;
    if let Some((off, len)) = t.contiguous_span(n) {
        if len > 0 && ptr.is_null() && off == 0 {
            return Err(err(
                MPI_ERR_BUFFER,
                format!(
                    "buffer is NULL with room for {len} bytes; fix: pass the receive buffer's address"
                ),
            ));
        }
        return Ok(RecvBuf {
            ptr: at(ptr, off) as *mut u8,
            len,
            packed: None,
            user: ptr,
            n,
            ty: Some(t),
        });
    }
    if null_with_data(ptr, &t, n) {
        return Err(err(
            MPI_ERR_BUFFER,
            format!(
                "buffer is NULL with room for {bytes} bytes; fix: pass the receive buffer's address"
            ),
        ));
    }
    let mut v = vec![0u8; bytes];
    Ok(RecvBuf {
        ptr: v.as_mut_ptr(),
        len: bytes,
        packed: Some(v),
        user: ptr,
        n,
        ty: Some(t),
    })
}

impl RecvBuf {
    /// Whether [`RecvBuf::finish`] has work to do (unpacking a temporary).
    pub fn needs_finish(&self) -> bool {
        self.packed.is_some()
    }

    /// Unpacks the first `received` bytes into the user's buffer (no-op when the data
    /// was received in place).
    ///
    /// # Errors
    /// `MPI_ERR_OTHER` when staging through host memory for a device buffer fails.
    pub fn finish(self, received: usize) -> R {
        let (Some(v), Some(t)) = (self.packed, self.ty) else {
            return Ok(());
        };
        let n = self.n;
        let src = &v[..received.min(v.len())];
        // SAFETY: recv_buf's contract.
        unsafe { with_host_view(&t, n, self.user, true, |host| t.unpack(n, src, host)) }
    }
}

/// Runs `f` on a host view of the `n` elements at `ptr`: `ptr` itself for host memory;
/// for device memory a host copy of their true extent (copied back when `write`).
///
/// # Safety
/// As the callers'.
pub(crate) unsafe fn with_host_view(
    t: &TypeInfo,
    n: usize,
    ptr: *mut u8,
    write: bool,
    f: impl FnOnce(*mut u8),
) -> R {
    if n == 0 {
        return Ok(());
    }
    // The bytes the n elements touch: [lo, hi) relative to ptr.
    let last = (n as isize - 1) * t.extent;
    let lo = t.true_lb.min(t.true_lb + last);
    let hi = (t.true_lb + t.true_extent).max(t.true_lb + t.true_extent + last);
    let span = (hi - lo) as usize;
    let first = at(ptr, lo);
    let device = match rankwire::gpu::classify(first, span).map(|m| m.kind) {
        Ok(rankwire::gpu::PtrKind::Device { ordinal }) if rankwire::gpu::available() => ordinal,
        _ => {
            f(ptr);
            return Ok(());
        }
    };
    // Work the program queued on the default stream comes first (see `is_device`).
    rankwire::gpu::synchronize_legacy_stream(device).map_err(|e| {
        err(
            MPI_ERR_OTHER,
            format!("gpu: waiting for the default stream: {e}"),
        )
    })?;
    let mut host = vec![0u8; span];
    let s = rankwire::gpu::Stream::new(device).map_err(|e| {
        err(
            MPI_ERR_OTHER,
            format!("gpu: staging a non-contiguous datatype: {e}"),
        )
    })?;
    // SAFETY: the span lies in the device allocation (classified above).
    unsafe {
        rankwire::gpu::memcpy_dtoh_async(host.as_mut_ptr(), first as u64, span, &s)
            .and_then(|()| s.synchronize())
            .map_err(|e| {
                err(
                    MPI_ERR_OTHER,
                    format!("gpu: device-to-host copy for a datatype: {e}"),
                )
            })?;
    }
    let base = (host.as_mut_ptr() as isize - lo) as *mut u8;
    f(base);
    if write {
        // SAFETY: as above.
        unsafe {
            rankwire::gpu::memcpy_htod_async(first as u64, host.as_ptr(), span, &s)
                .and_then(|()| s.synchronize())
                .map_err(|e| {
                    err(
                        MPI_ERR_OTHER,
                        format!("gpu: host-to-device copy for a datatype: {e}"),
                    )
                })?;
        }
    }
    Ok(())
}

/// Copies `dst.len()` bytes of device memory at `src` into `dst`.
///
/// # Errors
/// `MPI_ERR_OTHER` when the copy fails.
pub fn copy_device_to_host(src: *const u8, dst: &mut [u8]) -> R {
    let device = match rankwire::gpu::classify(src, dst.len()).map(|m| m.kind) {
        Ok(rankwire::gpu::PtrKind::Device { ordinal }) => ordinal,
        _ => return Err(err(MPI_ERR_OTHER, "gpu: buffer is not device memory")),
    };
    let s =
        rankwire::gpu::Stream::new(device).map_err(|e| err(MPI_ERR_OTHER, format!("gpu: {e}")))?;
    // SAFETY: src is a device buffer of dst.len() bytes (classified above).
    unsafe {
        rankwire::gpu::memcpy_dtoh_async(dst.as_mut_ptr(), src as u64, dst.len(), &s)
            .and_then(|()| s.synchronize())
            .map_err(|e| err(MPI_ERR_OTHER, format!("gpu: device-to-host copy: {e}")))
    }
}

/// `n` bytes at `p` as a slice; empty (and `p` unused) when `n == 0`, so that a
/// zero-count call may pass a null buffer, as MPI allows.
///
/// # Safety
/// For `n > 0`, `p` must be valid for reads of `n` bytes for `'a`.
pub unsafe fn bytes<'a>(p: *const u8, n: usize) -> &'a [u8] {
    if n == 0 {
        return &[];
    }
    // SAFETY: caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }
}

/// As [`bytes`], writable.
///
/// # Safety
/// For `n > 0`, `p` must be valid for writes of `n` bytes for `'a` and not accessed
/// otherwise meanwhile.
pub unsafe fn bytes_mut<'a>(p: *mut u8, n: usize) -> &'a mut [u8] {
    if n == 0 {
        return &mut [];
    }
    // SAFETY: caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p, n) }
}
