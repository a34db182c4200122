//! `MPI_Pack` / `MPI_Unpack` / `MPI_Pack_size` and their `_c` forms (MPI 4.1 §5.2).
//!
//! The packed form is the type map's bytes in order, in rankwire's native
//! representation (the same on every rank of a job). The typed buffer may be host or
//! CUDA device memory (a non-contiguous type over device memory is staged through
//! host memory, as for sends); the packed buffer must be host memory. The int forms
//! fail with `MPI_ERR_COUNT` when a size or position does not fit in an `int`, naming
//! the `_c` form. `MPI_Pack_external` (external32) is not implemented (absent).

use crate::consts::*;
use crate::datatype::{TypeInfo, for_comm, info};
use crate::error::{R, err, guard, put};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

fn null_arg(what: &str) -> crate::error::MpiErr {
    err(
        MPI_ERR_ARG,
        format!("pack: {what} is a null pointer; fix: pass the address of a variable or buffer"),
    )
}

fn comm_ok(comm: MPI_Comm) -> bool {
    comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF || crate::comm::COMMS.get(comm).is_some()
}

/// The communicator whose error handler an error of a call on `comm` goes to: `comm`
/// itself, or `MPI_COMM_SELF` when `comm` is not valid (MPI 4.1 §9.3).
fn handler_comm(comm: MPI_Comm) -> MPI_Comm {
    if comm_ok(comm) { comm } else { MPI_COMM_SELF }
}

fn comm_arg(comm: MPI_Comm) -> R {
    if comm_ok(comm) {
        return Ok(());
    }
    Err(err(
        MPI_ERR_COMM,
        format!(
            "pack: communicator {comm:#x} is not a communicator (MPI_COMM_NULL, freed, or not a handle of this library); fix: pass the communicator the packed data is sent on"
        ),
    ))
}

/// `incount` elements of `dt` as packed bytes: (layout, count, bytes).
/// Pack and unpack need a committed type, `MPI_Pack_size` does not.
fn packed_len(incount: i64, dt: MPI_Datatype, committed: bool) -> R<(Arc<TypeInfo>, usize, usize)> {
    let n = crate::datatype::count(incount)?;
    let t = if committed { for_comm(dt)? } else { info(dt)? };
    let bytes = n
        .checked_mul(t.size)
        .filter(|&b| b <= i64::MAX as usize)
        .ok_or_else(|| {
            err(
                MPI_ERR_COUNT,
                format!(
                    "pack: {n} elements of {} bytes overflow 64 bits; fix: pack fewer elements",
                    t.size
                ),
            )
        })?;
    Ok((t, n, bytes))
}

/// The packed region `[pos, pos + len)` of a buffer of `size` bytes.
fn region(pos: i64, len: usize, size: i64, what: &str) -> R<usize> {
    if pos < 0 || size < 0 {
        return Err(err(
            MPI_ERR_ARG,
            format!(
                "{what}: position {pos} or buffer size {size} is negative; fix: start at position 0"
            ),
        ));
    }
    let end = (pos as u128) + len as u128;
    if end > size as u128 {
        return Err(err(
            MPI_ERR_TRUNCATE,
            format!(
                "{what}: {len} bytes at position {pos} do not fit a buffer of {size} bytes; fix: size the buffer with MPI_Pack_size"
            ),
        ));
    }
    Ok(pos as usize)
}

fn host_only(ptr: *const u8, len: usize, what: &str) -> R {
    if crate::buf::is_device(ptr, len) {
        return Err(err(
            MPI_ERR_BUFFER,
            format!(
                "{what}: the packed buffer is CUDA device memory; rankwire packs into and unpacks from host memory only; fix: use a host buffer for the packed data (the typed buffer may be on the device)"
            ),
        ));
    }
    Ok(())
}

/// Packs: the shared body of `MPI_Pack` / `MPI_Pack_c`. Returns the new position.
///
/// # Safety
/// The C contract of `MPI_Pack`.
unsafe fn pack(
    inbuf: *const c_void,
    incount: i64,
    dt: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: i64,
    pos: i64,
    comm: MPI_Comm,
) -> R<i64> {
    comm_arg(comm)?;
    let (t, n, len) = packed_len(incount, dt, true)?;
    let at = region(pos, len, outsize, "MPI_Pack")?;
    if len == 0 {
        return Ok(pos);
    }
    if inbuf.is_null() && t.contiguous_span(n).is_some_and(|(off, _)| off == 0) {
        return Err(null_arg("inbuf"));
    }
    if outbuf.is_null() {
        return Err(null_arg("outbuf"));
    }
    let dst = (outbuf as *mut u8).wrapping_add(at);
    host_only(dst, len, "MPI_Pack")?;
    // SAFETY: dst has len bytes (region checked against outsize, caller's contract).
    let out = unsafe { std::slice::from_raw_parts_mut(dst, len) };
    // SAFETY: the caller's type map of n elements at inbuf is readable.
    unsafe {
        crate::buf::with_host_view(&t, n, inbuf as *mut u8, false, |host| t.pack(n, host, out))
    }?;
    Ok(pos + len as i64)
}

/// Unpacks: the shared body of `MPI_Unpack` / `MPI_Unpack_c`. Returns the new position.
///
/// # Safety
/// The C contract of `MPI_Unpack`.
unsafe fn unpack(
    inbuf: *const c_void,
    insize: i64,
    pos: i64,
    outbuf: *mut c_void,
    outcount: i64,
    dt: MPI_Datatype,
    comm: MPI_Comm,
) -> R<i64> {
    comm_arg(comm)?;
    let (t, n, len) = packed_len(outcount, dt, true)?;
    let at = region(pos, len, insize, "MPI_Unpack")?;
    if len == 0 {
        return Ok(pos);
    }
    if inbuf.is_null() {
        return Err(null_arg("inbuf"));
    }
    if outbuf.is_null() && t.contiguous_span(n).is_some_and(|(off, _)| off == 0) {
        return Err(null_arg("outbuf"));
    }
    let src = (inbuf as *const u8).wrapping_add(at);
    host_only(src, len, "MPI_Unpack")?;
    // SAFETY: src has len bytes (region checked against insize).
    let data = unsafe { std::slice::from_raw_parts(src, len) };
    // SAFETY: the caller's type map of n elements at outbuf is writable.
    unsafe {
        crate::buf::with_host_view(&t, n, outbuf as *mut u8, true, |host| {
            t.unpack(n, data, host)
        })
    }?;
    Ok(pos + len as i64)
}

/// # Safety
/// `p` null or valid for read and write.
unsafe fn position_in<T: Copy + Into<i64>>(p: *mut T) -> R<i64> {
    if p.is_null() {
        return Err(null_arg("position"));
    }
    // SAFETY: non-null.
    Ok(unsafe { p.read() }.into())
}

fn int_position(p: i64, what: &str) -> R<c_int> {
    c_int::try_from(p).map_err(|_| {
        err(
            MPI_ERR_COUNT,
            format!("{what}: position {p} does not fit in an int; fix: use the _c form"),
        )
    })
}

/// `MPI_Pack` (MPI 4.1 §5.2.1): appends `incount` elements of `datatype` at `inbuf`
/// (host or device memory) to `outbuf` (host, `outsize` bytes) at byte `*position`,
/// and advances `*position`. The packed form is the type map's bytes in order
/// (rankwire's native representation; same on every rank).
/// Errors: `MPI_ERR_COUNT`, `MPI_ERR_TYPE` (bad or uncommitted type), `MPI_ERR_COMM`,
/// `MPI_ERR_TRUNCATE` (does not fit in `outsize`), `MPI_ERR_ARG` (null or negative
/// arguments), `MPI_ERR_BUFFER` (packed buffer on the device).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: c_int,
    position: *mut c_int,
    comm: MPI_Comm,
) -> c_int {
    guard(handler_comm(comm), || unsafe {
        let p = position_in(position)?;
        let q = pack(
            inbuf,
            incount as i64,
            datatype,
            outbuf,
            outsize as i64,
            p,
            comm,
        )?;
        position.write(int_position(q, "MPI_Pack")?);
        Ok(())
    })
}

/// `MPI_Pack_c` (MPI 4.1 §5.2.1), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Pack_c(
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position: *mut MPI_Count,
    comm: MPI_Comm,
) -> c_int {
    guard(handler_comm(comm), || unsafe {
        let p = position_in(position)?;
        let q = pack(inbuf, incount, datatype, outbuf, outsize, p, comm)?;
        position.write(q);
        Ok(())
    })
}

/// `MPI_Unpack` (MPI 4.1 §5.2.1): reads `outcount` elements of `datatype` from
/// `inbuf` (host, `insize` bytes) at byte `*position` into `outbuf` (host or device),
/// and advances `*position`.
/// Errors: as `MPI_Pack`; `MPI_ERR_TRUNCATE` when `insize` holds less than that.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard(handler_comm(comm), || unsafe {
        let p = position_in(position)?;
        let q = unpack(
            inbuf,
            insize as i64,
            p,
            outbuf,
            outcount as i64,
            datatype,
            comm,
        )?;
        position.write(int_position(q, "MPI_Unpack")?);
        Ok(())
    })
}

/// `MPI_Unpack_c` (MPI 4.1 §5.2.1), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Unpack_c(
    inbuf: *const c_void,
    insize: MPI_Count,
    position: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    guard(handler_comm(comm), || unsafe {
        let p = position_in(position)?;
        let q = unpack(inbuf, insize, p, outbuf, outcount, datatype, comm)?;
        position.write(q);
        Ok(())
    })
}

/// `MPI_Pack_size` (MPI 4.1 §5.2.1): an upper bound (here: exactly) of the bytes
/// `MPI_Pack` needs for `incount` elements: `incount * size`.
/// Errors: `MPI_ERR_COUNT` (negative, or more than an `int` holds: use
/// `MPI_Pack_size_c`), `MPI_ERR_TYPE`, `MPI_ERR_COMM`, `MPI_ERR_ARG` (null `size`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Pack_size(
    incount: c_int,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
    size: *mut c_int,
) -> c_int {
    guard(handler_comm(comm), || {
        comm_arg(comm)?;
        let (_, _, len) = packed_len(incount as i64, datatype, false)?;
        let v = c_int::try_from(len).map_err(|_| {
            err(
                MPI_ERR_COUNT,
                format!(
                    "MPI_Pack_size: {len} bytes do not fit in an int; fix: use MPI_Pack_size_c"
                ),
            )
        })?;
        unsafe { put(size, v, "size") }
    })
}

/// `MPI_Pack_size_c` (MPI 4.1 §5.2.1), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Pack_size_c(
    incount: MPI_Count,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
    size: *mut MPI_Count,
) -> c_int {
    guard(handler_comm(comm), || {
        comm_arg(comm)?;
        let (_, _, len) = packed_len(incount, datatype, false)?;
        unsafe { put(size, len as MPI_Count, "size") }
    })
}
