//! Derived datatype constructors in Rust form (MPI 4.1 §5.1.2–§5.1.7, §5.1.4 darray):
//! counts as `i64`, displacements as `i64` bytes or elements. The exported C functions
//! (`dtype_ctor_c.rs`) convert their arguments and call these.
//!
//! Every constructor describes its type map as blocks for a
//! [`Builder`](crate::dtype_layout::Builder) (bounds per §5.1.6, see `dtype_layout.rs`).
//! `MPI_Type_create_struct` rounds its extent up to the
//! largest alignment of its basic members (the "epsilon" of §5.1.6) when its non-empty
//! blocks use at least two different types; a struct of one type is laid out as the
//! equivalent hindexed type, unpadded. Both rules are what MPICH 5.0 does on x86-64
//! (checked against its `libmpi_abi.so.1`).
//!
//! The `_c` (large-count) forms share the code: their envelopes carry the counts and
//! displacements as large counts (MPI 4.1 §5.1.13, table 5.1).

use crate::consts::*;
use crate::datatype::{Envelope, TypeInfo, info};
use crate::dtype_layout::{Builder, MAX_SEGMENTS, ck, overflow, too_fragmented};
use crate::error::{R, err};
use std::ffi::c_int;
use std::sync::Arc;

// ---------------------------------------------------------------------------------
// Argument checking shared by the int and large-count forms.

/// Which form of a constructor was called: its envelope lists counts as integers
/// (`Int`, `MPI_Type_vector`) or as large counts (`Large`, `MPI_Type_vector_c`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Form {
    /// The int form.
    Int,
    /// The `_c` form.
    Large,
}

pub(crate) fn count_arg(c: i64, what: &str) -> R<u64> {
    u64::try_from(c).map_err(|_| {
        err(
            MPI_ERR_COUNT,
            format!("datatype: {what} {c} is negative; fix: pass a count >= 0"),
        )
    })
}

fn blocklen_arg(c: i64, what: &str) -> R<u64> {
    u64::try_from(c).map_err(|_| {
        err(
            MPI_ERR_ARG,
            format!("datatype: {what} {c} is negative; fix: pass a block length >= 0"),
        )
    })
}

fn env(
    combiner: c_int,
    form: Form,
    ints: Vec<i64>,
    counts: Vec<i64>,
    aints: Vec<isize>,
    types: &[(MPI_Datatype, Arc<TypeInfo>)],
) -> Envelope {
    // In the int form the "counts" are ints (they came from C ints, so they fit).
    let (ints, counts) = match form {
        Form::Int => {
            let mut v: Vec<i32> = ints.iter().map(|&x| x as i32).collect();
            v.extend(counts.iter().map(|&x| x as i32));
            (v, Vec::new())
        }
        Form::Large => (ints.iter().map(|&x| x as i32).collect(), counts),
    };
    Envelope {
        combiner,
        ints,
        aints,
        counts,
        types: types.iter().map(|(h, _)| *h).collect(),
        inner: types.iter().map(|(_, t)| t.clone()).collect(),
    }
}

// ---------------------------------------------------------------------------------
// The constructors in Rust form (counts as i64, displacements as i64 bytes or
// elements). The exported functions below only convert their arguments.

/// `MPI_Type_contiguous` (MPI 4.1 §5.1.2): `count` copies of `old`.
///
/// # Errors
/// `MPI_ERR_COUNT` (negative count), `MPI_ERR_TYPE` (bad `old`), overflow as [`Builder`].
pub fn contiguous(count: i64, old: MPI_Datatype, form: Form) -> R<TypeInfo> {
    let n = count_arg(count, "count")?;
    let t = info(old)?;
    let mut b = Builder::new();
    b.add(&t, 0, n)?;
    let e = env(
        MPI_COMBINER_CONTIGUOUS,
        form,
        vec![],
        vec![count],
        vec![],
        &[(old, t)],
    );
    b.finish(false, e)
}

/// `MPI_Type_vector` / `MPI_Type_create_hvector` (MPI 4.1 §5.1.2): `count` blocks of
/// `blocklen` copies of `old`, block `i` at `i * stride` — in elements of `old`'s
/// extent (`stride_bytes == false`) or in bytes (hvector).
///
/// # Errors
/// `MPI_ERR_COUNT` (negative count), `MPI_ERR_ARG` (negative block length, overflow),
/// `MPI_ERR_TYPE` (bad `old`).
pub fn vector(
    count: i64,
    blocklen: i64,
    stride: i64,
    stride_bytes: bool,
    old: MPI_Datatype,
    form: Form,
) -> R<TypeInfo> {
    let n = count_arg(count, "count")?;
    let bl = blocklen_arg(blocklen, "blocklength")?;
    let t = info(old)?;
    let ext = t.extent as i128;
    let step = if stride_bytes {
        stride as i128
    } else {
        ck((stride as i128).checked_mul(ext), "stride")?
    };
    let mut b = Builder::new();
    if step == bl as i128 * ext {
        // The same type map as `count * blocklen` consecutive copies.
        let total = n
            .checked_mul(bl)
            .ok_or_else(|| overflow("count × blocklength"))?;
        b.add(&t, 0, total)?;
    } else {
        b.add_strided(&t, 0, step, n, bl)?;
    }
    let (combiner, aints, counts, ints) = match (stride_bytes, form) {
        (false, _) => (
            MPI_COMBINER_VECTOR,
            vec![],
            vec![count, blocklen, stride],
            vec![],
        ),
        (true, Form::Int) => (
            MPI_COMBINER_HVECTOR,
            vec![stride as isize],
            vec![count, blocklen],
            vec![],
        ),
        (true, Form::Large) => (
            MPI_COMBINER_HVECTOR,
            vec![],
            vec![count, blocklen, stride],
            vec![],
        ),
    };
    b.finish(false, env(combiner, form, ints, counts, aints, &[(old, t)]))
}

/// `MPI_Type_indexed` / `MPI_Type_create_hindexed` (MPI 4.1 §5.1.2): block `i` has
/// `blocklens[i]` copies of `old` at `displs[i]` — in units of `old`'s extent, or in
/// bytes (`displs_bytes`, hindexed).
///
/// # Errors
/// As [`vector`].
pub fn indexed(
    blocklens: &[i64],
    displs: &[i64],
    displs_bytes: bool,
    old: MPI_Datatype,
    form: Form,
) -> R<TypeInfo> {
    let t = info(old)?;
    let ext = t.extent as i128;
    let mut b = Builder::new();
    for (&bl, &d) in blocklens.iter().zip(displs) {
        let bl = blocklen_arg(bl, "blocklength")?;
        let d = if displs_bytes {
            d as i128
        } else {
            ck((d as i128).checked_mul(ext), "displacement")?
        };
        b.add(&t, d, bl)?;
    }
    let count = blocklens.len() as i64;
    let combiner = if displs_bytes {
        MPI_COMBINER_HINDEXED
    } else {
        MPI_COMBINER_INDEXED
    };
    let mut list = vec![count];
    list.extend_from_slice(blocklens);
    let e = match (displs_bytes, form) {
        (false, Form::Int) => {
            list.extend_from_slice(displs);
            env(combiner, form, list, vec![], vec![], &[(old, t)])
        }
        (true, Form::Int) => {
            let aints = displs.iter().map(|&d| d as isize).collect();
            env(combiner, form, list, vec![], aints, &[(old, t)])
        }
        (_, Form::Large) => {
            list.extend_from_slice(displs);
            env(combiner, form, vec![], list, vec![], &[(old, t)])
        }
    };
    b.finish(false, e)
}

/// `MPI_Type_create_indexed_block` / `MPI_Type_create_hindexed_block` (MPI 4.1
/// §5.1.2): `displs.len()` blocks of `blocklen` copies of `old`.
///
/// # Errors
/// As [`vector`].
pub fn indexed_block(
    blocklen: i64,
    displs: &[i64],
    displs_bytes: bool,
    old: MPI_Datatype,
    form: Form,
) -> R<TypeInfo> {
    let bl = blocklen_arg(blocklen, "blocklength")?;
    let t = info(old)?;
    let ext = t.extent as i128;
    let mut b = Builder::new();
    for &d in displs {
        let d = if displs_bytes {
            d as i128
        } else {
            ck((d as i128).checked_mul(ext), "displacement")?
        };
        b.add(&t, d, bl)?;
    }
    let count = displs.len() as i64;
    let combiner = if displs_bytes {
        MPI_COMBINER_HINDEXED_BLOCK
    } else {
        MPI_COMBINER_INDEXED_BLOCK
    };
    let e = match (displs_bytes, form) {
        (false, _) => {
            let mut list = vec![count, blocklen];
            list.extend_from_slice(displs);
            if form == Form::Int {
                env(combiner, form, list, vec![], vec![], &[(old, t)])
            } else {
                env(combiner, form, vec![], list, vec![], &[(old, t)])
            }
        }
        (true, Form::Int) => {
            let aints = displs.iter().map(|&d| d as isize).collect();
            env(
                combiner,
                form,
                vec![count, blocklen],
                vec![],
                aints,
                &[(old, t)],
            )
        }
        (true, Form::Large) => {
            let mut list = vec![count, blocklen];
            list.extend_from_slice(displs);
            env(combiner, form, vec![], list, vec![], &[(old, t)])
        }
    };
    b.finish(false, e)
}

/// `MPI_Type_create_struct` (MPI 4.1 §5.1.2): block `i` has `blocklens[i]` copies of
/// `types[i]` at byte displacement `displs[i]`. The extent is padded to the largest
/// member alignment when the non-empty blocks use two or more types (module doc).
///
/// # Errors
/// As [`vector`]; `MPI_ERR_TYPE` for a bad member type.
pub fn structure(
    blocklens: &[i64],
    displs: &[i64],
    types: &[MPI_Datatype],
    form: Form,
) -> R<TypeInfo> {
    let mut b = Builder::new();
    let mut inner = Vec::with_capacity(types.len());
    let mut first: Option<MPI_Datatype> = None;
    let mut mixed = false;
    for ((&bl, &d), &ty) in blocklens.iter().zip(displs).zip(types) {
        let bl = blocklen_arg(bl, "blocklength")?;
        let t = info(ty)?;
        if bl > 0 {
            match first {
                None => first = Some(ty),
                Some(f) if f != ty => mixed = true,
                _ => {}
            }
        }
        b.add(&t, d as i128, bl)?;
        inner.push((ty, t));
    }
    let count = blocklens.len() as i64;
    let mut list = vec![count];
    list.extend_from_slice(blocklens);
    let e = match form {
        Form::Int => {
            let aints = displs.iter().map(|&d| d as isize).collect();
            env(MPI_COMBINER_STRUCT, form, list, vec![], aints, &inner)
        }
        Form::Large => {
            list.extend_from_slice(displs);
            env(MPI_COMBINER_STRUCT, form, vec![], list, vec![], &inner)
        }
    };
    b.finish(mixed, e)
}

/// `MPI_Type_create_resized` (MPI 4.1 §5.1.7): `old`'s type map with lower bound `lb`
/// and extent `extent` (bytes; a negative extent is allowed).
///
/// # Errors
/// `MPI_ERR_TYPE` (bad `old`), `MPI_ERR_ARG` (`lb + extent` overflows).
pub fn resized(old: MPI_Datatype, lb: i64, extent: i64, form: Form) -> R<TypeInfo> {
    let t = info(old)?;
    if lb.checked_add(extent).is_none() {
        return Err(overflow("lb + extent"));
    }
    let mut n = (*t).clone();
    n.lb = lb as isize;
    n.extent = extent as isize;
    n.predefined = false;
    n.committed = false;
    n.name = String::new();
    n.envelope = match form {
        Form::Int => env(
            MPI_COMBINER_RESIZED,
            form,
            vec![],
            vec![],
            vec![lb as isize, extent as isize],
            &[(old, t)],
        ),
        Form::Large => env(
            MPI_COMBINER_RESIZED,
            form,
            vec![],
            vec![lb, extent],
            vec![],
            &[(old, t)],
        ),
    };
    Ok(n)
}

/// `MPI_Type_create_subarray` (MPI 4.1 §5.1.3): the `subsizes` block starting at
/// `starts` of an array of `sizes` elements of `old`, in C (row-major) or Fortran
/// (column-major) `order`. Lower bound 0, extent `prod(sizes) * extent(old)`.
///
/// # Errors
/// `MPI_ERR_ARG` for `ndims < 1`, a size < 1, a subsize < 1 or larger than its size, a
/// start outside `0..=size-subsize`, an `order` other than `MPI_ORDER_C` /
/// `MPI_ORDER_FORTRAN`, or overflow; `MPI_ERR_TYPE` for a bad `old`.
pub fn subarray(
    sizes: &[i64],
    subsizes: &[i64],
    starts: &[i64],
    order: c_int,
    old: MPI_Datatype,
    form: Form,
) -> R<TypeInfo> {
    let nd = sizes.len();
    if nd == 0 {
        return Err(err(
            MPI_ERR_ARG,
            "datatype: MPI_Type_create_subarray with ndims < 1; fix: pass ndims >= 1",
        ));
    }
    if order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN {
        return Err(err(
            MPI_ERR_ARG,
            format!(
                "datatype: subarray order {order} is neither MPI_ORDER_C ({MPI_ORDER_C}) nor MPI_ORDER_FORTRAN ({MPI_ORDER_FORTRAN}); fix: pass one of them"
            ),
        ));
    }
    for i in 0..nd {
        let (s, b, o) = (sizes[i], subsizes[i], starts[i]);
        if s < 1 || b < 1 || b > s || o < 0 || o > s - b {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "datatype: subarray dimension {i}: size {s}, subsize {b}, start {o}; fix: need size >= 1, 1 <= subsize <= size and 0 <= start <= size - subsize (MPI 4.1 §5.1.3)"
                ),
            ));
        }
    }
    let t = info(old)?;
    // Dimension 0 of these is the fastest-varying one.
    let order_f = |v: &[i64]| -> Vec<i64> {
        if order == MPI_ORDER_C {
            v.iter().rev().copied().collect()
        } else {
            v.to_vec()
        }
    };
    let (sz, sub, st) = (order_f(sizes), order_f(subsizes), order_f(starts));
    let ext = t.extent as i128;
    let mut stride = vec![ext; nd]; // bytes between consecutive indices of dimension i
    for i in 1..nd {
        stride[i] = ck(stride[i - 1].checked_mul(sz[i - 1] as i128), "array size")?;
    }
    let total = ck(stride[nd - 1].checked_mul(sz[nd - 1] as i128), "array size")?;
    let mut b = Builder::new();
    let mut idx = vec![0i64; nd];
    loop {
        let mut d: i128 = 0;
        for i in 0..nd {
            d += (st[i] + idx[i]) as i128 * stride[i];
        }
        b.add(&t, d, sub[0] as u64)?;
        // Next block: odometer over dimensions 1.., dimension 1 fastest.
        let mut i = 1;
        while i < nd {
            idx[i] += 1;
            if idx[i] < sub[i] {
                break;
            }
            idx[i] = 0;
            i += 1;
        }
        if i >= nd {
            break;
        }
    }
    let mut list = sizes.to_vec();
    list.extend_from_slice(subsizes);
    list.extend_from_slice(starts);
    let e = match form {
        Form::Int => {
            let mut ints = vec![nd as i64];
            ints.extend(list);
            ints.push(order as i64);
            env(
                MPI_COMBINER_SUBARRAY,
                form,
                ints,
                vec![],
                vec![],
                &[(old, t)],
            )
        }
        Form::Large => env(
            MPI_COMBINER_SUBARRAY,
            form,
            vec![nd as i64, order as i64],
            list,
            vec![],
            &[(old, t)],
        ),
    };
    let mut n = b.finish(false, e)?;
    n.lb = 0;
    n.extent = isize::try_from(total).map_err(|_| overflow("array extent"))?;
    Ok(n)
}

/// `MPI_Type_dup` (MPI 4.1 §5.1.10 / §7.8): the same layout and committed state as
/// `old`, a new handle without name, combiner `MPI_COMBINER_DUP`.
///
/// # Errors
/// `MPI_ERR_TYPE` for a bad `old`.
pub fn dup(old: MPI_Datatype) -> R<TypeInfo> {
    let t = info(old)?;
    let mut n = (*t).clone();
    n.predefined = false;
    n.name = String::new();
    n.envelope = env(
        MPI_COMBINER_DUP,
        Form::Int,
        vec![],
        vec![],
        vec![],
        &[(old, t)],
    );
    Ok(n)
}

/// `MPI_Type_create_darray` (MPI 4.1 §5.1.4): the part of a `gsizes` array of `old`
/// that process `rank` of a `psizes` process grid (row-major, `size` processes) owns
/// under `distribs` (`MPI_DISTRIBUTE_NONE`, `_BLOCK`, `_CYCLIC`) with `dargs` (block
/// sizes, or `MPI_DISTRIBUTE_DFLT_DARG`). The type map lists the owned elements in
/// the array's storage order (`MPI_ORDER_C` or `MPI_ORDER_FORTRAN`); lower bound 0,
/// extent `prod(gsizes) * extent(old)`.
///
/// # Errors
/// `MPI_ERR_ARG` for `ndims < 1`, a grid whose product is not `size`, a rank outside
/// it, a size or grid dimension < 1, an unknown distribution or order,
/// `MPI_DISTRIBUTE_NONE` over more than one process, a block size that does not cover
/// the dimension, or overflow; `MPI_ERR_TYPE` for a bad `old`.
#[allow(clippy::too_many_arguments)]
pub fn darray(
    size: i64,
    rank: i64,
    gsizes: &[i64],
    distribs: &[i64],
    dargs: &[i64],
    psizes: &[i64],
    order: c_int,
    old: MPI_Datatype,
    form: Form,
) -> R<TypeInfo> {
    let nd = gsizes.len();
    let bad = |m: String| {
        err(
            MPI_ERR_ARG,
            format!("datatype: MPI_Type_create_darray: {m} (MPI 4.1 §5.1.4)"),
        )
    };
    if nd == 0 {
        return Err(bad("ndims < 1; fix: pass ndims >= 1".into()));
    }
    if order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN {
        return Err(bad(format!(
            "order {order} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"
        )));
    }
    let mut procs: i128 = 1;
    for &p in psizes {
        if p < 1 {
            return Err(bad(format!("process grid dimension {p} < 1")));
        }
        procs = procs.saturating_mul(p as i128);
    }
    if procs != size as i128 || rank < 0 || rank >= size {
        return Err(bad(format!(
            "process grid {psizes:?} holds {procs} processes, size is {size}, rank {rank}; fix: the grid's product must equal size and 0 <= rank < size"
        )));
    }
    // Row-major coordinates of `rank` in the grid, whatever `order` is.
    let mut coords = vec![0i64; nd];
    let mut r = rank;
    for i in (0..nd).rev() {
        coords[i] = r % psizes[i];
        r /= psizes[i];
    }
    // Owned index runs (start, len) of each dimension, increasing.
    let mut runs: Vec<Vec<(i64, i64)>> = Vec::with_capacity(nd);
    for i in 0..nd {
        let (g, p, c, d) = (gsizes[i], psizes[i], coords[i], dargs[i]);
        if g < 1 {
            return Err(bad(format!("dimension {i}: global size {g} < 1")));
        }
        let dim = match distribs[i] as c_int {
            MPI_DISTRIBUTE_NONE => {
                if p != 1 {
                    return Err(bad(format!(
                        "dimension {i}: MPI_DISTRIBUTE_NONE over {p} processes; fix: use a grid dimension of 1"
                    )));
                }
                vec![(0, g)]
            }
            MPI_DISTRIBUTE_BLOCK => {
                let b = if d == MPI_DISTRIBUTE_DFLT_DARG as i64 {
                    (g + p - 1) / p
                } else {
                    d
                };
                if b < 1 || (b as i128) * (p as i128) < g as i128 {
                    return Err(bad(format!(
                        "dimension {i}: block size {b} × {p} processes does not cover {g} elements"
                    )));
                }
                let start = (c as i128 * b as i128).min(g as i128) as i64;
                let len = b.min(g - start);
                if len > 0 { vec![(start, len)] } else { vec![] }
            }
            MPI_DISTRIBUTE_CYCLIC => {
                let b = if d == MPI_DISTRIBUTE_DFLT_DARG as i64 {
                    1
                } else {
                    d
                };
                if b < 1 {
                    return Err(bad(format!("dimension {i}: cyclic block size {b} < 1")));
                }
                let mut v = Vec::new();
                let step = b as i128 * p as i128;
                let mut s = c as i128 * b as i128;
                while s < g as i128 {
                    v.push((s as i64, b.min(g - s as i64)));
                    if v.len() > MAX_SEGMENTS {
                        return Err(too_fragmented(v.len() as u128));
                    }
                    s += step;
                }
                v
            }
            x => {
                return Err(bad(format!(
                    "dimension {i}: distribution {x} is not MPI_DISTRIBUTE_NONE/BLOCK/CYCLIC"
                )));
            }
        };
        runs.push(dim);
    }
    let t = info(old)?;
    // Dimension 0 of these is the fastest-varying one.
    let fast_first = |v: Vec<Vec<(i64, i64)>>| -> Vec<Vec<(i64, i64)>> {
        if order == MPI_ORDER_C {
            v.into_iter().rev().collect()
        } else {
            v
        }
    };
    let g: Vec<i64> = if order == MPI_ORDER_C {
        gsizes.iter().rev().copied().collect()
    } else {
        gsizes.to_vec()
    };
    let runs = fast_first(runs);
    let ext = t.extent as i128;
    let mut stride = vec![ext; nd];
    for i in 1..nd {
        stride[i] = ck(stride[i - 1].checked_mul(g[i - 1] as i128), "array size")?;
    }
    let total = ck(stride[nd - 1].checked_mul(g[nd - 1] as i128), "array size")?;
    let mut b = Builder::new();
    if runs.iter().all(|r| !r.is_empty()) {
        // Odometer over the owned indices of dimensions 1.. (dimension 1 fastest);
        // each combination adds dimension 0's runs.
        let mut pos = vec![(0usize, 0i64); nd]; // (run, offset in run) per dimension
        loop {
            let mut d: i128 = 0;
            for i in 1..nd {
                let (ri, k) = pos[i];
                d += (runs[i][ri].0 + k) as i128 * stride[i];
            }
            for &(s, l) in &runs[0] {
                b.add(&t, d + s as i128 * ext, l as u64)?;
            }
            let mut i = 1;
            while i < nd {
                let (ri, k) = &mut pos[i];
                *k += 1;
                if *k >= runs[i][*ri].1 {
                    *k = 0;
                    *ri += 1;
                }
                if *ri < runs[i].len() {
                    break;
                }
                *ri = 0;
                i += 1;
            }
            if i >= nd {
                break;
            }
        }
    }
    let e = match form {
        Form::Int => {
            let mut ints = vec![size, rank, nd as i64];
            for v in [gsizes, distribs, dargs, psizes] {
                ints.extend_from_slice(v);
            }
            ints.push(order as i64);
            env(MPI_COMBINER_DARRAY, form, ints, vec![], vec![], &[(old, t)])
        }
        Form::Large => {
            let mut ints = vec![size, rank, nd as i64];
            for v in [distribs, dargs, psizes] {
                ints.extend_from_slice(v);
            }
            ints.push(order as i64);
            env(
                MPI_COMBINER_DARRAY,
                form,
                ints,
                gsizes.to_vec(),
                vec![],
                &[(old, t)],
            )
        }
    };
    let mut n = b.finish(false, e)?;
    n.lb = 0;
    n.extent = isize::try_from(total).map_err(|_| overflow("array extent"))?;
    Ok(n)
}
