//! Datatype queries (size, extents, envelope and contents, names; MPI 4.1 §5.1.5,
//! §5.1.13, §7.8), element counts of a status (§3.2.5, §5.1.11) and addresses
//! (§5.1.4). `MPI_Pack` & co are in `dtype_pack.rs`.
//!
//! Sizes are bytes of data, extents bytes of stride; counts are elements of the given
//! datatype; `MPI_Get_elements` counts basic elements. The int forms report a value
//! that does not fit in an `int` as `MPI_UNDEFINED` (sizes and counts, as the standard
//! says) or fail with `MPI_ERR_COUNT` naming the `_c` form to use (pack sizes and
//! positions).

use crate::consts::*;
use crate::datatype::{TYPES, TypeInfo, info, predefined, set_predefined_name};
use crate::error::{R, err, guard, put};
use crate::request::{set_status_bytes, status_bytes};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Arc;

// ---------------------------------------------------------------------------------
// Size and extents.

/// `MPI_Type_size` (MPI 4.1 §5.1.5): bytes of data in one element; `MPI_UNDEFINED` when
/// that does not fit in an `int`. Errors: `MPI_ERR_TYPE`, `MPI_ERR_ARG` (null `size`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_size(datatype: MPI_Datatype, size: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = info(datatype)?;
        let v = c_int::try_from(t.size).unwrap_or(MPI_UNDEFINED);
        unsafe { put(size, v, "size") }
    })
}

/// `MPI_Type_size_c` (MPI 4.1 §5.1.5): bytes of data in one element.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_size_c(datatype: MPI_Datatype, size: *mut MPI_Count) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = info(datatype)?;
        unsafe { put(size, t.size as MPI_Count, "size") }
    })
}

/// `MPI_Type_size_x` (deprecated in MPI 4.1 for `MPI_Type_size_c`; same result).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_size_x(datatype: MPI_Datatype, size: *mut MPI_Count) -> c_int {
    unsafe { MPI_Type_size_c(datatype, size) }
}

/// `MPI_Type_get_extent` (MPI 4.1 §5.1.5): lower bound and extent in bytes.
/// Errors: `MPI_ERR_TYPE`, `MPI_ERR_ARG` (null pointer).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_extent(
    datatype: MPI_Datatype,
    lb: *mut MPI_Aint,
    extent: *mut MPI_Aint,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = info(datatype)?;
        both(lb, t.lb, extent, t.extent, "lb", "extent")
    })
}

/// `MPI_Type_get_extent_c` (MPI 4.1 §5.1.5).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_extent_c(
    datatype: MPI_Datatype,
    lb: *mut MPI_Count,
    extent: *mut MPI_Count,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = info(datatype)?;
        both(lb, t.lb as i64, extent, t.extent as i64, "lb", "extent")
    })
}

/// `MPI_Type_get_extent_x` (deprecated in MPI 4.1 for `_c`; same result).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_extent_x(
    datatype: MPI_Datatype,
    lb: *mut MPI_Count,
    extent: *mut MPI_Count,
) -> c_int {
    unsafe { MPI_Type_get_extent_c(datatype, lb, extent) }
}

/// `MPI_Type_get_true_extent` (MPI 4.1 §5.1.8): first byte of data and the bytes from
/// it to the last byte of data + 1 (ignoring `MPI_Type_create_resized`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_true_extent(
    datatype: MPI_Datatype,
    true_lb: *mut MPI_Aint,
    true_extent: *mut MPI_Aint,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = info(datatype)?;
        both(
            true_lb,
            t.true_lb,
            true_extent,
            t.true_extent,
            "true_lb",
            "true_extent",
        )
    })
}

/// `MPI_Type_get_true_extent_c` (MPI 4.1 §5.1.8).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_true_extent_c(
    datatype: MPI_Datatype,
    true_lb: *mut MPI_Count,
    true_extent: *mut MPI_Count,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = info(datatype)?;
        both(
            true_lb,
            t.true_lb as i64,
            true_extent,
            t.true_extent as i64,
            "true_lb",
            "true_extent",
        )
    })
}

/// `MPI_Type_get_true_extent_x` (deprecated in MPI 4.1 for `_c`; same result).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_true_extent_x(
    datatype: MPI_Datatype,
    true_lb: *mut MPI_Count,
    true_extent: *mut MPI_Count,
) -> c_int {
    unsafe { MPI_Type_get_true_extent_c(datatype, true_lb, true_extent) }
}

fn both<T>(a: *mut T, av: T, b: *mut T, bv: T, an: &str, bn: &str) -> R {
    if a.is_null() || b.is_null() {
        return Err(err(
            MPI_ERR_ARG,
            format!(
                "datatype: {an} or {bn} is a null pointer; fix: pass the addresses of two variables"
            ),
        ));
    }
    // SAFETY: both checked non-null; valid by the caller's contract.
    unsafe {
        a.write(av);
        b.write(bv);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Envelope and contents (MPI 4.1 §5.1.13).

/// `MPI_Type_get_envelope` (MPI 4.1 §5.1.13): how many integers, addresses and
/// datatypes `MPI_Type_get_contents` returns, and the combiner (`MPI_COMBINER_NAMED`
/// with zero counts for a predefined type).
/// Errors: `MPI_ERR_TYPE` (bad handle, or a type made by a `_c` constructor, whose
/// arguments are large counts: use `MPI_Type_get_envelope_c`), `MPI_ERR_ARG` (null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_envelope(
    datatype: MPI_Datatype,
    num_integers: *mut c_int,
    num_addresses: *mut c_int,
    num_datatypes: *mut c_int,
    combiner: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = info(datatype)?;
        let e = &t.envelope;
        if !e.counts.is_empty() {
            return Err(large_made(datatype));
        }
        nonnull4(num_integers, num_addresses, num_datatypes, combiner)?;
        // SAFETY: all four checked non-null.
        unsafe {
            num_integers.write(e.ints.len() as c_int);
            num_addresses.write(e.aints.len() as c_int);
            num_datatypes.write(e.types.len() as c_int);
            combiner.write(e.combiner);
        }
        Ok(())
    })
}

/// `MPI_Type_get_envelope_c` (MPI 4.1 §5.1.13): as `MPI_Type_get_envelope`, plus the
/// number of large counts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_envelope_c(
    datatype: MPI_Datatype,
    num_integers: *mut MPI_Count,
    num_addresses: *mut MPI_Count,
    num_large_counts: *mut MPI_Count,
    num_datatypes: *mut MPI_Count,
    combiner: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = info(datatype)?;
        let e = &t.envelope;
        nonnull4(num_integers, num_addresses, num_datatypes, combiner)?;
        if num_large_counts.is_null() {
            return Err(null_arg("num_large_counts"));
        }
        // SAFETY: all five checked non-null.
        unsafe {
            num_integers.write(e.ints.len() as MPI_Count);
            num_addresses.write(e.aints.len() as MPI_Count);
            num_large_counts.write(e.counts.len() as MPI_Count);
            num_datatypes.write(e.types.len() as MPI_Count);
            combiner.write(e.combiner);
        }
        Ok(())
    })
}

/// `MPI_Type_get_contents` (MPI 4.1 §5.1.13): the arguments of the constructor call.
/// Predefined argument types are returned as they were passed; derived ones as new
/// handles (equivalent types, committed as they were) that the caller frees.
/// Errors: `MPI_ERR_TYPE` for a predefined type (it has no contents) or one made by a
/// `_c` constructor (use `MPI_Type_get_contents_c`); `MPI_ERR_ARG` when a `max_*` is
/// smaller than the envelope's number or an array needed is null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_contents(
    datatype: MPI_Datatype,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    array_of_integers: *mut c_int,
    array_of_addresses: *mut MPI_Aint,
    array_of_datatypes: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = contents_of(datatype)?;
        if !t.envelope.counts.is_empty() {
            return Err(large_made(datatype));
        }
        unsafe {
            contents(
                &t,
                [
                    max_integers as i64,
                    max_addresses as i64,
                    0,
                    max_datatypes as i64,
                ],
                array_of_integers,
                array_of_addresses,
                std::ptr::null_mut(),
                array_of_datatypes,
            )
        }
    })
}

/// `MPI_Type_get_contents_c` (MPI 4.1 §5.1.13): as `MPI_Type_get_contents`, with the
/// large-count arguments of `_c` constructors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_contents_c(
    datatype: MPI_Datatype,
    max_integers: MPI_Count,
    max_addresses: MPI_Count,
    max_large_counts: MPI_Count,
    max_datatypes: MPI_Count,
    array_of_integers: *mut c_int,
    array_of_addresses: *mut MPI_Aint,
    array_of_large_counts: *mut MPI_Count,
    array_of_datatypes: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = contents_of(datatype)?;
        unsafe {
            contents(
                &t,
                [max_integers, max_addresses, max_large_counts, max_datatypes],
                array_of_integers,
                array_of_addresses,
                array_of_large_counts,
                array_of_datatypes,
            )
        }
    })
}

fn contents_of(dt: MPI_Datatype) -> R<Arc<TypeInfo>> {
    if let Some((_, name)) = predefined(dt) {
        return Err(err(
            MPI_ERR_TYPE,
            format!(
                "MPI_Type_get_contents: {name} is predefined (combiner MPI_COMBINER_NAMED) and has no contents (MPI 4.1 §5.1.13); fix: call it only for derived types"
            ),
        ));
    }
    info(dt)
}

/// Writes the envelope's arrays after checking every `max` and pointer (so nothing is
/// written, and no handle created, on error).
///
/// # Safety
/// Each array must be null or hold its `max` entries.
unsafe fn contents(
    t: &TypeInfo,
    max: [i64; 4],
    ints: *mut c_int,
    aints: *mut MPI_Aint,
    counts: *mut MPI_Count,
    types: *mut MPI_Datatype,
) -> R {
    let e = &t.envelope;
    let need = [e.ints.len(), e.aints.len(), e.counts.len(), e.types.len()];
    let names = [
        "max_integers",
        "max_addresses",
        "max_large_counts",
        "max_datatypes",
    ];
    let null = [
        ints.is_null(),
        aints.is_null(),
        counts.is_null(),
        types.is_null(),
    ];
    for i in 0..4 {
        if need[i] == 0 {
            continue;
        }
        if max[i] < need[i] as i64 {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "MPI_Type_get_contents: {} is {} but the type has {} such arguments; fix: pass the numbers MPI_Type_get_envelope returns",
                    names[i], max[i], need[i]
                ),
            ));
        }
        if null[i] {
            return Err(null_arg(names[i].trim_start_matches("max_")));
        }
    }
    // SAFETY: each array non-null with room for its entries (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(e.ints.as_ptr(), ints, e.ints.len());
        std::ptr::copy_nonoverlapping(e.aints.as_ptr(), aints, e.aints.len());
        std::ptr::copy_nonoverlapping(e.counts.as_ptr(), counts, e.counts.len());
        for (i, (&h, inner)) in e.types.iter().zip(&e.inner).enumerate() {
            let out = if inner.predefined {
                h
            } else {
                TYPES.insert((**inner).clone())
            };
            types.add(i).write(out);
        }
    }
    Ok(())
}

fn large_made(dt: MPI_Datatype) -> crate::error::MpiErr {
    err(
        MPI_ERR_TYPE,
        format!(
            "datatype {dt:#x} was made by a large-count (_c) constructor; its arguments are large counts; fix: use MPI_Type_get_envelope_c / MPI_Type_get_contents_c"
        ),
    )
}

fn null_arg(what: &str) -> crate::error::MpiErr {
    err(
        MPI_ERR_ARG,
        format!("datatype: {what} is a null pointer; fix: pass the address of a variable or array"),
    )
}

fn nonnull4<A, B, C, D>(a: *mut A, b: *mut B, c: *mut C, d: *mut D) -> R {
    if a.is_null() || b.is_null() || c.is_null() || d.is_null() {
        return Err(null_arg("an output argument"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Names (MPI 4.1 §7.8).

/// `MPI_Type_set_name` (MPI 4.1 §7.8): names longer than `MPI_MAX_OBJECT_NAME - 1`
/// (127) bytes are truncated. Predefined types may be renamed too.
/// Errors: `MPI_ERR_TYPE`, `MPI_ERR_ARG` (null name).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_set_name(
    datatype: MPI_Datatype,
    type_name: *const c_char,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let t = info(datatype)?;
        if type_name.is_null() {
            return Err(null_arg("type_name"));
        }
        // SAFETY: non-null NUL-terminated string (caller's contract).
        let bytes = unsafe { CStr::from_ptr(type_name) }.to_bytes();
        let max = MPI_MAX_OBJECT_NAME as usize - 1;
        let mut end = bytes.len().min(max);
        let mut name = String::from_utf8_lossy(&bytes[..end]).into_owned();
        while name.len() > max {
            end -= 1;
            name = String::from_utf8_lossy(&bytes[..end]).into_owned();
        }
        if t.predefined {
            set_predefined_name(datatype, name);
        } else {
            let mut n = (*t).clone();
            n.name = name;
            TYPES.replace(datatype, n);
        }
        Ok(())
    })
}

/// `MPI_Type_get_name` (MPI 4.1 §7.8): writes the name, NUL-terminated, into
/// `type_name` (room for `MPI_MAX_OBJECT_NAME` bytes) and its length without the NUL
/// into `resultlen`. Predefined types report their `MPI_*` name, derived types the
/// empty string until named.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_name(
    datatype: MPI_Datatype,
    type_name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        // The null handle has a name too (as in MPICH and Open MPI).
        let t = if datatype == MPI_DATATYPE_NULL {
            None
        } else {
            Some(info(datatype)?)
        };
        if type_name.is_null() || resultlen.is_null() {
            return Err(null_arg("type_name or resultlen"));
        }
        let b = t
            .as_ref()
            .map_or("MPI_DATATYPE_NULL", |t| t.name.as_str())
            .as_bytes();
        let n = b.len().min(MPI_MAX_OBJECT_NAME as usize - 1);
        // SAFETY: the caller provides MPI_MAX_OBJECT_NAME bytes; n + 1 <= that.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr() as *const c_char, type_name, n);
            type_name.add(n).write(0);
            resultlen.write(n as c_int);
        }
        Ok(())
    })
}

/// `MPI_Type_match_size` (MPI 4.1 §19.2.7): the Fortran-sized predefined type of
/// `typeclass` (`MPI_TYPECLASS_INTEGER`, `_REAL`, `_COMPLEX`) with `size` bytes:
/// `MPI_INTEGER1/2/4/8`, `MPI_REAL4/8/16`, `MPI_COMPLEX8/16/32`.
/// Errors: `MPI_ERR_ARG` for another class or a size with no such type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_match_size(
    typeclass: c_int,
    size: c_int,
    datatype: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let dt = match (typeclass, size) {
            (MPI_TYPECLASS_INTEGER, 1) => MPI_INTEGER1,
            (MPI_TYPECLASS_INTEGER, 2) => MPI_INTEGER2,
            (MPI_TYPECLASS_INTEGER, 4) => MPI_INTEGER4,
            (MPI_TYPECLASS_INTEGER, 8) => MPI_INTEGER8,
            (MPI_TYPECLASS_REAL, 4) => MPI_REAL4,
            (MPI_TYPECLASS_REAL, 8) => MPI_REAL8,
            (MPI_TYPECLASS_REAL, 16) => MPI_REAL16,
            (MPI_TYPECLASS_COMPLEX, 8) => MPI_COMPLEX8,
            (MPI_TYPECLASS_COMPLEX, 16) => MPI_COMPLEX16,
            (MPI_TYPECLASS_COMPLEX, 32) => MPI_COMPLEX32,
            _ => {
                return Err(err(
                    MPI_ERR_ARG,
                    format!(
                        "MPI_Type_match_size: no predefined type of class {typeclass} with {size} bytes; fix: integer sizes 1, 2, 4, 8; real 4, 8, 16; complex 8, 16, 32"
                    ),
                ));
            }
        };
        unsafe { put(datatype, dt, "datatype") }
    })
}

/// `MPI_Type_get_value_index` (MPI 4.1 §6.9.4): the predefined value-index pair type
/// for `MPI_MINLOC` / `MPI_MAXLOC` of (`value_type`, `index_type`): `MPI_FLOAT_INT`,
/// `MPI_DOUBLE_INT`, `MPI_LONG_INT`, `MPI_2INT`, `MPI_SHORT_INT`,
/// `MPI_LONG_DOUBLE_INT`; `MPI_DATATYPE_NULL` for any other pair (as MPICH 5.0 does).
/// Errors: `MPI_ERR_TYPE` (bad handle), `MPI_ERR_ARG` (null `pair_type`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_value_index(
    value_type: MPI_Datatype,
    index_type: MPI_Datatype,
    pair_type: *mut MPI_Datatype,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        info(value_type)?;
        info(index_type)?;
        const INT: MPI_Datatype = 0x209;
        let pair = match (value_type, index_type) {
            (0x210, INT) => 0x228, // MPI_FLOAT, MPI_INT -> MPI_FLOAT_INT
            (0x214, INT) => 0x229, // MPI_DOUBLE -> MPI_DOUBLE_INT
            (0x20a, INT) => 0x22a, // MPI_LONG -> MPI_LONG_INT
            (INT, INT) => 0x22b,   // MPI_2INT
            (0x208, INT) => 0x22c, // MPI_SHORT -> MPI_SHORT_INT
            (0x220, INT) => 0x22d, // MPI_LONG_DOUBLE -> MPI_LONG_DOUBLE_INT
            _ => MPI_DATATYPE_NULL,
        };
        unsafe { put(pair_type, pair, "pair_type") }
    })
}

// ---------------------------------------------------------------------------------
// Counts of a status (MPI 4.1 §3.2.5, §5.1.11, §13.3).

/// The received bytes of a status argument.
///
/// # Safety
/// `status` must be null or valid for a read.
unsafe fn status_in(status: *const MPI_Status) -> R<u64> {
    if status.is_null() {
        return Err(null_arg("status (MPI_STATUS_IGNORE has no count)"));
    }
    // SAFETY: non-null, caller's contract.
    Ok(status_bytes(unsafe { &*status }))
}

/// Elements of `t` in `bytes`: `None` = not a whole number (`MPI_UNDEFINED`).
fn count_in(t: &TypeInfo, bytes: u64) -> Option<u64> {
    if t.size == 0 {
        return Some(0);
    }
    bytes
        .is_multiple_of(t.size as u64)
        .then(|| bytes / t.size as u64)
}

fn as_int(v: Option<u64>) -> c_int {
    v.and_then(|x| c_int::try_from(x).ok())
        .unwrap_or(MPI_UNDEFINED)
}

fn as_count(v: Option<u64>) -> MPI_Count {
    v.and_then(|x| MPI_Count::try_from(x).ok())
        .unwrap_or(MPI_UNDEFINED as MPI_Count)
}

/// `MPI_Get_count` (MPI 4.1 §3.2.5): received bytes / type size, `MPI_UNDEFINED` when
/// not a whole number of elements (or more than an `int` holds); 0 for a type of
/// size 0. Errors: `MPI_ERR_TYPE`, `MPI_ERR_ARG` (null status or count).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_count(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let bytes = unsafe { status_in(status) }?;
        let t = info(datatype)?;
        unsafe { put(count, as_int(count_in(&t, bytes)), "count") }
    })
}

/// `MPI_Get_count_c` (MPI 4.1 §3.2.5), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_count_c(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut MPI_Count,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let bytes = unsafe { status_in(status) }?;
        let t = info(datatype)?;
        unsafe { put(count, as_count(count_in(&t, bytes)), "count") }
    })
}

/// `MPI_Get_elements` (MPI 4.1 §5.1.11): basic elements received (a partial last
/// element counts the basic entries it holds; a pair type such as `MPI_DOUBLE_INT`
/// counts two per element); `MPI_UNDEFINED` when the data ends inside a basic entry.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_elements(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let bytes = unsafe { status_in(status) }?;
        let t = info(datatype)?;
        unsafe { put(count, as_int(t.elements_in(bytes)), "count") }
    })
}

/// `MPI_Get_elements_c` (MPI 4.1 §5.1.11), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_elements_c(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut MPI_Count,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let bytes = unsafe { status_in(status) }?;
        let t = info(datatype)?;
        unsafe { put(count, as_count(t.elements_in(bytes)), "count") }
    })
}

/// `MPI_Get_elements_x` (deprecated in MPI 4.1 for `_c`; same result).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_elements_x(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut MPI_Count,
) -> c_int {
    unsafe { MPI_Get_elements_c(status, datatype, count) }
}

/// `MPI_Status_set_elements` (MPI 4.1 §13.3): sets the status so that
/// `MPI_Get_elements(status, datatype)` gives `count` (the bytes of `count` basic
/// elements of `datatype`). Errors: `MPI_ERR_COUNT` (negative), `MPI_ERR_TYPE`,
/// `MPI_ERR_ARG` (null status; `count > 0` for a type without data; overflow).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Status_set_elements(
    status: *mut MPI_Status,
    datatype: MPI_Datatype,
    count: c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        set_elements(status, datatype, count as i64)
    })
}

/// `MPI_Status_set_elements_c` (MPI 4.1 §13.3), large count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Status_set_elements_c(
    status: *mut MPI_Status,
    datatype: MPI_Datatype,
    count: MPI_Count,
) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        set_elements(status, datatype, count)
    })
}

/// `MPI_Status_set_elements_x` (deprecated in MPI 4.1 for `_c`; same effect).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Status_set_elements_x(
    status: *mut MPI_Status,
    datatype: MPI_Datatype,
    count: MPI_Count,
) -> c_int {
    unsafe { MPI_Status_set_elements_c(status, datatype, count) }
}

/// # Safety
/// `status` must be null or valid for a write.
unsafe fn set_elements(status: *mut MPI_Status, dt: MPI_Datatype, count: i64) -> R {
    let n = crate::datatype::count(count)? as u64;
    let t = info(dt)?;
    if status.is_null() {
        return Err(null_arg("status"));
    }
    let bytes = t.bytes_of_elements(n).ok_or_else(|| {
        err(
            MPI_ERR_ARG,
            format!(
                "MPI_Status_set_elements: {n} basic elements of {} ({} per element, {} bytes) cannot be represented; fix: pass a count the type can hold",
                if t.name.is_empty() { "this type" } else { &t.name },
                t.nbasic,
                t.size
            ),
        )
    })?;
    // SAFETY: non-null, caller's contract.
    set_status_bytes(unsafe { &mut *status }, bytes);
    Ok(())
}

/// `MPI_Status_set_cancelled` (MPI 4.1 §13.3): what `MPI_Test_cancelled` then reports.
/// Errors: `MPI_ERR_ARG` (null status).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Status_set_cancelled(status: *mut MPI_Status, flag: c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        if status.is_null() {
            return Err(null_arg("status"));
        }
        // SAFETY: non-null, caller's contract. Slot 2 = cancelled (request.rs).
        unsafe { (*status).MPI_internal[2] = (flag != 0) as c_int };
        Ok(())
    })
}

/// `MPI_Status_set_source` (MPI 5.0 §3.2.5): sets the status's `MPI_SOURCE` field.
///
/// Errors: `MPI_ERR_ARG` (null status).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Status_set_source(status: *mut MPI_Status, source: c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        if status.is_null() {
            return Err(null_arg("status"));
        }
        // SAFETY: non-null, caller's contract.
        unsafe { (*status).MPI_SOURCE = source };
        Ok(())
    })
}

/// `MPI_Status_get_source` (MPI 5.0 §3.2.5): the status's `MPI_SOURCE` field.
///
/// Errors: `MPI_ERR_ARG` (null pointer).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Status_get_source(
    status: *const MPI_Status,
    source: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        if status.is_null() || source.is_null() {
            return Err(null_arg("status or source"));
        }
        // SAFETY: non-null, caller's contract.
        unsafe { *source = (*status).MPI_SOURCE };
        Ok(())
    })
}

/// `MPI_Status_set_tag` (MPI 5.0 §3.2.5): sets the status's `MPI_TAG` field.
///
/// Errors: `MPI_ERR_ARG` (null status).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Status_set_tag(status: *mut MPI_Status, tag: c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        if status.is_null() {
            return Err(null_arg("status"));
        }
        // SAFETY: non-null, caller's contract.
        unsafe { (*status).MPI_TAG = tag };
        Ok(())
    })
}

/// `MPI_Status_get_tag` (MPI 5.0 §3.2.5): the status's `MPI_TAG` field.
///
/// Errors: `MPI_ERR_ARG` (null pointer).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Status_get_tag(status: *const MPI_Status, tag: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        if status.is_null() || tag.is_null() {
            return Err(null_arg("status or tag"));
        }
        // SAFETY: non-null, caller's contract.
        unsafe { *tag = (*status).MPI_TAG };
        Ok(())
    })
}

/// `MPI_Status_set_error` (MPI 5.0 §3.2.5): sets the status's `MPI_ERROR` field.
///
/// Errors: `MPI_ERR_ARG` (null status).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Status_set_error(status: *mut MPI_Status, err: c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        if status.is_null() {
            return Err(null_arg("status"));
        }
        // SAFETY: non-null, caller's contract.
        unsafe { (*status).MPI_ERROR = err };
        Ok(())
    })
}

/// `MPI_Status_get_error` (MPI 5.0 §3.2.5): the status's `MPI_ERROR` field.
///
/// Errors: `MPI_ERR_ARG` (null pointer).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Status_get_error(status: *const MPI_Status, err: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        if status.is_null() || err.is_null() {
            return Err(null_arg("status or err"));
        }
        // SAFETY: non-null, caller's contract.
        unsafe { *err = (*status).MPI_ERROR };
        Ok(())
    })
}

// ---------------------------------------------------------------------------------
// Addresses (MPI 4.1 §5.1.4).

/// `MPI_Get_address` (MPI 4.1 §5.1.4): the address of `location` as an `MPI_Aint`
/// (absolute, usable with `MPI_BOTTOM`). Errors: `MPI_ERR_ARG` (null `address`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_address(location: *const c_void, address: *mut MPI_Aint) -> c_int {
    guard(MPI_COMM_SELF, || unsafe {
        put(address, location as MPI_Aint, "address")
    })
}

/// `MPI_Aint_add` (MPI 4.1 §5.1.4): `base + disp` as address arithmetic (wrapping, as
/// on the machine's addresses; it cannot fail or panic, so it needs no guard).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    base.wrapping_add(disp)
}

/// `MPI_Aint_diff` (MPI 4.1 §5.1.4): `addr1 - addr2` (wrapping; cannot fail).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Aint_diff(addr1: MPI_Aint, addr2: MPI_Aint) -> MPI_Aint {
    addr1.wrapping_sub(addr2)
}
