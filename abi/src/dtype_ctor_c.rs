//! The exported C functions of the datatype constructors (MPI 4.1 §5.1.2–§5.1.10):
//! each checks its pointers, converts its arguments to the Rust form in
//! `dtype_ctor.rs` and stores the new type; `MPI_Type_commit`, `MPI_Type_free`.
//! Every body runs in `guard(MPI_COMM_SELF, ..)` (errors not tied to a communicator
//! go to `MPI_COMM_SELF`'s handler, MPI 4.1 §9.3).

use crate::consts::*;
use crate::datatype::{TYPES, TypeInfo, info};
use crate::dtype_ctor::*;
use crate::dtype_layout::overflow;
use crate::error::{R, err, guard};
use std::ffi::c_int;

/// `n` values at `p` (a C array argument) widened to i64.
///
/// # Safety
/// `p` must be null or point to `n` readable values.
unsafe fn arr<T: Copy + Into<i64>>(p: *const T, n: u64, what: &str) -> R<Vec<i64>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(err(
            MPI_ERR_ARG,
            format!("datatype: {what} is a null pointer with {n} entries; fix: pass the array"),
        ));
    }
    let n = usize::try_from(n).map_err(|_| overflow("array length"))?;
    // SAFETY: caller's contract.
    let s = unsafe { std::slice::from_raw_parts(p, n) };
    Ok(s.iter().map(|&x| x.into()).collect())
}

/// `isize` is not `Into<i64>`; MPI_Aint arrays go through this.
///
/// # Safety
/// As [`arr`].
unsafe fn aint_arr(p: *const MPI_Aint, n: u64, what: &str) -> R<Vec<i64>> {
    // SAFETY: MPI_Aint is i64 on every target the ABI supports (64-bit).
    unsafe { arr(p as *const i64, n, what) }
}

/// Checks `newtype` before building (so no handle leaks), then stores `t`.
///
/// # Safety
/// `newtype` must be null or valid for a write.
unsafe fn store(newtype: *mut MPI_Datatype, t: impl FnOnce() -> R<TypeInfo>) -> R {
    if newtype.is_null() {
        return Err(err(
            MPI_ERR_ARG,
            "datatype: newtype is a null pointer; fix: pass the address of an MPI_Datatype",
        ));
    }
    let t = t()?;
    let h = TYPES.insert(t);
    // SAFETY: non-null, caller's contract.
    unsafe { newtype.write(h) };
    Ok(())
}

// ---------------------------------------------------------------------------------
// Exported C functions.

/// `MPI_Type_contiguous` (MPI 4.1 §5.1.2). Errors: `MPI_ERR_COUNT`, `MPI_ERR_TYPE`,
/// `MPI_ERR_ARG` (null `newtype`, overflow).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_contiguous(
    count: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        store(newtype, || contiguous(count as i64, oldtype, Form::Int))
    })
}

/// `MPI_Type_contiguous_c` (MPI 4.1 §5.1.2), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_contiguous_c(
    count: MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        store(newtype, || contiguous(count, oldtype, Form::Large))
    })
}

/// `MPI_Type_vector` (MPI 4.1 §5.1.2): stride in elements of `oldtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        store(newtype, || {
            vector(
                count as i64,
                blocklength as i64,
                stride as i64,
                false,
                oldtype,
                Form::Int,
            )
        })
    })
}

/// `MPI_Type_vector_c` (MPI 4.1 §5.1.2), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_vector_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    stride: MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        store(newtype, || {
            vector(count, blocklength, stride, false, oldtype, Form::Large)
        })
    })
}

/// `MPI_Type_create_hvector` (MPI 4.1 §5.1.2): stride in bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        store(newtype, || {
            vector(
                count as i64,
                blocklength as i64,
                stride as i64,
                true,
                oldtype,
                Form::Int,
            )
        })
    })
}

/// `MPI_Type_create_hvector_c` (MPI 4.1 §5.1.2), large count; stride in bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_hvector_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    stride: MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        store(newtype, || {
            vector(count, blocklength, stride, true, oldtype, Form::Large)
        })
    })
}

/// `MPI_Type_indexed` (MPI 4.1 §5.1.2): displacements in elements of `oldtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_indexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = count_arg(count as i64, "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let d = arr(array_of_displacements, n, "array_of_displacements")?;
        store(newtype, || indexed(&bl, &d, false, oldtype, Form::Int))
    })
}

/// `MPI_Type_indexed_c` (MPI 4.1 §5.1.2), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_indexed_c(
    count: MPI_Count,
    array_of_blocklengths: *const MPI_Count,
    array_of_displacements: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = count_arg(count, "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let d = arr(array_of_displacements, n, "array_of_displacements")?;
        store(newtype, || indexed(&bl, &d, false, oldtype, Form::Large))
    })
}

/// `MPI_Type_create_hindexed` (MPI 4.1 §5.1.2): displacements in bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_hindexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = count_arg(count as i64, "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let d = aint_arr(array_of_displacements, n, "array_of_displacements")?;
        store(newtype, || indexed(&bl, &d, true, oldtype, Form::Int))
    })
}

/// `MPI_Type_create_hindexed_c` (MPI 4.1 §5.1.2), large count; displacements in bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_hindexed_c(
    count: MPI_Count,
    array_of_blocklengths: *const MPI_Count,
    array_of_displacements: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = count_arg(count, "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let d = arr(array_of_displacements, n, "array_of_displacements")?;
        store(newtype, || indexed(&bl, &d, true, oldtype, Form::Large))
    })
}

/// `MPI_Type_create_indexed_block` (MPI 4.1 §5.1.2): displacements in elements.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = count_arg(count as i64, "count")?;
        let d = arr(array_of_displacements, n, "array_of_displacements")?;
        store(newtype, || {
            indexed_block(blocklength as i64, &d, false, oldtype, Form::Int)
        })
    })
}

/// `MPI_Type_create_indexed_block_c` (MPI 4.1 §5.1.2), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_indexed_block_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    array_of_displacements: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = count_arg(count, "count")?;
        let d = arr(array_of_displacements, n, "array_of_displacements")?;
        store(newtype, || {
            indexed_block(blocklength, &d, false, oldtype, Form::Large)
        })
    })
}

/// `MPI_Type_create_hindexed_block` (MPI 4.1 §5.1.2): displacements in bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_hindexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const MPI_Aint,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = count_arg(count as i64, "count")?;
        let d = aint_arr(array_of_displacements, n, "array_of_displacements")?;
        store(newtype, || {
            indexed_block(blocklength as i64, &d, true, oldtype, Form::Int)
        })
    })
}

/// `MPI_Type_create_hindexed_block_c` (MPI 4.1 §5.1.2), large count; bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_hindexed_block_c(
    count: MPI_Count,
    blocklength: MPI_Count,
    array_of_displacements: *const MPI_Count,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = count_arg(count, "count")?;
        let d = arr(array_of_displacements, n, "array_of_displacements")?;
        store(newtype, || {
            indexed_block(blocklength, &d, true, oldtype, Form::Large)
        })
    })
}

/// `MPI_Type_create_struct` (MPI 4.1 §5.1.2): displacements in bytes, one type per
/// block.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_struct(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const MPI_Aint,
    array_of_types: *const MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = count_arg(count as i64, "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let d = aint_arr(array_of_displacements, n, "array_of_displacements")?;
        let ty = types_arr(array_of_types, n)?;
        store(newtype, || structure(&bl, &d, &ty, Form::Int))
    })
}

/// `MPI_Type_create_struct_c` (MPI 4.1 §5.1.2), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_struct_c(
    count: MPI_Count,
    array_of_blocklengths: *const MPI_Count,
    array_of_displacements: *const MPI_Count,
    array_of_types: *const MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = count_arg(count, "count")?;
        let bl = arr(array_of_blocklengths, n, "array_of_blocklengths")?;
        let d = arr(array_of_displacements, n, "array_of_displacements")?;
        let ty = types_arr(array_of_types, n)?;
        store(newtype, || structure(&bl, &d, &ty, Form::Large))
    })
}

/// `MPI_Type_create_resized` (MPI 4.1 §5.1.7): new lower bound and extent in bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_resized(
    oldtype: MPI_Datatype,
    lb: MPI_Aint,
    extent: MPI_Aint,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        store(newtype, || {
            resized(oldtype, lb as i64, extent as i64, Form::Int)
        })
    })
}

/// `MPI_Type_create_resized_c` (MPI 4.1 §5.1.7), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_resized_c(
    oldtype: MPI_Datatype,
    lb: MPI_Count,
    extent: MPI_Count,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        store(newtype, || resized(oldtype, lb, extent, Form::Large))
    })
}

/// `MPI_Type_create_subarray` (MPI 4.1 §5.1.3), C or Fortran order.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_subarray(
    ndims: c_int,
    array_of_sizes: *const c_int,
    array_of_subsizes: *const c_int,
    array_of_starts: *const c_int,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = ndims_arg(ndims)?;
        let s = arr(array_of_sizes, n, "array_of_sizes")?;
        let b = arr(array_of_subsizes, n, "array_of_subsizes")?;
        let o = arr(array_of_starts, n, "array_of_starts")?;
        store(newtype, || subarray(&s, &b, &o, order, oldtype, Form::Int))
    })
}

/// `MPI_Type_create_subarray_c` (MPI 4.1 §5.1.3), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_subarray_c(
    ndims: c_int,
    array_of_sizes: *const MPI_Count,
    array_of_subsizes: *const MPI_Count,
    array_of_starts: *const MPI_Count,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = ndims_arg(ndims)?;
        let s = arr(array_of_sizes, n, "array_of_sizes")?;
        let b = arr(array_of_subsizes, n, "array_of_subsizes")?;
        let o = arr(array_of_starts, n, "array_of_starts")?;
        store(newtype, || {
            subarray(&s, &b, &o, order, oldtype, Form::Large)
        })
    })
}

/// `MPI_Type_dup` (MPI 4.1 §5.1.10).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    guard(MPI_COMM_SELF, || unsafe { store(newtype, || dup(oldtype)) })
}

/// `MPI_Type_commit` (MPI 4.1 §5.1.9): a type must be committed before communication
/// uses it; committing a predefined or already committed type does nothing.
/// Errors: `MPI_ERR_ARG` (null pointer), `MPI_ERR_TYPE` (bad handle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut MPI_Datatype) -> c_int {
    guard(MPI_COMM_SELF, || {
        let dt = unsafe { read_handle(datatype) }?;
        let t = info(dt)?;
        if !t.committed {
            let mut n = (*t).clone();
            n.committed = true;
            TYPES.replace(dt, n);
        }
        Ok(())
    })
}

/// `MPI_Type_free` (MPI 4.1 §5.1.9): frees a created type and sets `*datatype` to
/// `MPI_DATATYPE_NULL`. Types built from it, and operations in progress with it, are
/// not affected (they hold their own copy of the layout).
/// Errors: `MPI_ERR_TYPE` for a predefined type (it cannot be freed), null or freed
/// handle; `MPI_ERR_ARG` for a null pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut MPI_Datatype) -> c_int {
    guard(MPI_COMM_SELF, || {
        let dt = unsafe { read_handle(datatype) }?;
        if let Some((_, name)) = crate::datatype::predefined(dt) {
            return Err(err(
                MPI_ERR_TYPE,
                format!(
                    "MPI_Type_free: {name} is a predefined datatype and cannot be freed; fix: free only types made by MPI_Type_* constructors"
                ),
            ));
        }
        if TYPES.remove(dt).is_none() {
            info(dt)?; // the not-a-datatype error
        }
        // SAFETY: read_handle checked the pointer.
        unsafe { datatype.write(MPI_DATATYPE_NULL) };
        Ok(())
    })
}

/// `*p` for a handle argument.
///
/// # Safety
/// `p` must be null or valid for a read.
unsafe fn read_handle(p: *const MPI_Datatype) -> R<MPI_Datatype> {
    if p.is_null() {
        return Err(err(
            MPI_ERR_ARG,
            "datatype: the MPI_Datatype pointer is null; fix: pass the address of the handle",
        ));
    }
    // SAFETY: non-null, caller's contract.
    Ok(unsafe { p.read() })
}

/// # Safety
/// `p` must be null or point to `n` handles.
unsafe fn types_arr(p: *const MPI_Datatype, n: u64) -> R<Vec<MPI_Datatype>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(err(
            MPI_ERR_ARG,
            format!(
                "datatype: array_of_types is a null pointer with {n} entries; fix: pass the array"
            ),
        ));
    }
    let n = usize::try_from(n).map_err(|_| overflow("array length"))?;
    // SAFETY: caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
}

fn ndims_arg(ndims: c_int) -> R<u64> {
    if ndims < 1 {
        return Err(err(
            MPI_ERR_ARG,
            format!("datatype: ndims {ndims} < 1; fix: pass ndims >= 1"),
        ));
    }
    Ok(ndims as u64)
}

/// `MPI_Type_create_darray` (MPI 4.1 §5.1.4).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_darray(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    array_of_gsizes: *const c_int,
    array_of_distribs: *const c_int,
    array_of_dargs: *const c_int,
    array_of_psizes: *const c_int,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = ndims_arg(ndims)?;
        let g = arr(array_of_gsizes, n, "array_of_gsizes")?;
        let d = arr(array_of_distribs, n, "array_of_distribs")?;
        let a = arr(array_of_dargs, n, "array_of_dargs")?;
        let p = arr(array_of_psizes, n, "array_of_psizes")?;
        store(newtype, || {
            darray(
                size as i64,
                rank as i64,
                &g,
                &d,
                &a,
                &p,
                order,
                oldtype,
                Form::Int,
            )
        })
    })
}

/// `MPI_Type_create_darray_c` (MPI 4.1 §5.1.4), large global sizes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_darray_c(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    array_of_gsizes: *const MPI_Count,
    array_of_distribs: *const c_int,
    array_of_dargs: *const c_int,
    array_of_psizes: *const c_int,
    order: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        let n = ndims_arg(ndims)?;
        let g = arr(array_of_gsizes, n, "array_of_gsizes")?;
        let d = arr(array_of_distribs, n, "array_of_distribs")?;
        let a = arr(array_of_dargs, n, "array_of_dargs")?;
        let p = arr(array_of_psizes, n, "array_of_psizes")?;
        store(newtype, || {
            darray(
                size as i64,
                rank as i64,
                &g,
                &d,
                &a,
                &p,
                order,
                oldtype,
                Form::Large,
            )
        })
    })
}
