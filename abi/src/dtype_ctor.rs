//! Derived datatype constructors (MPI 4.1 §5.1.2–§5.1.7), `MPI_Type_commit`,
//! `MPI_Type_free` and `MPI_Type_dup`.
//!
//! Every constructor describes its type map as *blocks*: `len` consecutive copies of
//! an old type at a byte displacement. A [`Builder`] folds the blocks into a
//! [`TypeInfo`]: the flattened byte segments (adjacent runs merged), the basic-entry
//! runs, size, bounds and true bounds, all computed in `i128` and checked, so a layout
//! whose sizes or displacements do not fit in `MPI_Aint`/`MPI_Count` is an error
//! (`MPI_ERR_ARG`, `MPI_ERR_COUNT`), never a wrapped value.
//!
//! Bounds follow §5.1.6: a block of `len` copies of a type with bounds `[lb, lb+ext)`
//! at `disp` spans `disp + min(0, (len-1)·ext) + lb` to `disp + max(0, (len-1)·ext) +
//! lb + ext` (negative extents included); blocks of length 0 do not count; with no
//! block at all `lb = ub = 0`. `MPI_Type_create_struct` rounds its extent up to the
//! largest alignment of its basic members (the "epsilon" of §5.1.6) when its non-empty
//! blocks use at least two different types; a struct of one type is laid out as the
//! equivalent hindexed type, unpadded. Both rules are what MPICH 5.0 does on x86-64
//! (checked against its `libmpi_abi.so.1`).
//!
//! The `_c` (large-count) forms share the code: their envelopes carry the counts and
//! displacements as large counts (MPI 4.1 §5.1.13, table 5.1).

use crate::consts::*;
use crate::datatype::{Basic, Envelope, TYPES, TypeInfo, info};
use crate::error::{R, err, guard};
use std::ffi::c_int;
use std::sync::Arc;

/// Most byte segments (or basic-entry runs) one element of a derived type may have:
/// 2^24 (256 MiB of layout). A type map more fragmented than that is refused with
/// `MPI_ERR_NO_MEM` instead of exhausting memory.
pub const MAX_SEGMENTS: usize = 1 << 24;

/// Folds blocks of old types into the layout of a new type (see the module doc).
pub struct Builder {
    segs: Vec<(isize, usize)>,
    runs: Vec<(Basic, usize)>,
    size: u128,
    nbasic: u128,
    bounds: Option<(i128, i128)>,
    true_bounds: Option<(i128, i128)>,
    align: usize,
    basic: BasicState,
}

#[derive(Clone, Copy)]
enum BasicState {
    Unset,
    One(Basic),
    Mixed,
}

fn overflow(what: &str) -> crate::error::MpiErr {
    err(
        MPI_ERR_ARG,
        format!(
            "datatype: {what} overflows the 64-bit range of MPI_Aint/MPI_Count; fix: use smaller counts, strides or displacements"
        ),
    )
}

fn ck(x: Option<i128>, what: &str) -> R<i128> {
    x.ok_or_else(|| overflow(what))
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    /// An empty layout (no blocks yet).
    pub fn new() -> Builder {
        Builder {
            segs: Vec::new(),
            runs: Vec::new(),
            size: 0,
            nbasic: 0,
            bounds: None,
            true_bounds: None,
            align: 1,
            basic: BasicState::Unset,
        }
    }

    /// Appends `len` consecutive elements of `t` starting at byte displacement `disp`.
    ///
    /// # Errors
    /// `MPI_ERR_ARG` when a displacement, bound or size overflows 64 bits;
    /// `MPI_ERR_NO_MEM` beyond [`MAX_SEGMENTS`] segments.
    pub fn add(&mut self, t: &TypeInfo, disp: i128, len: u64) -> R {
        self.add_strided(t, disp, 0, 1, len)
    }

    /// Appends `count` blocks of `len` consecutive elements of `t`, block `i` at byte
    /// displacement `disp + i * step` (a vector; one pass, bounds from the first and
    /// the last block, which bound all others since a block's bounds are affine in i).
    ///
    /// # Errors
    /// As [`Builder::add`].
    pub fn add_strided(&mut self, t: &TypeInfo, disp: i128, step: i128, count: u64, len: u64) -> R {
        if len == 0 || count == 0 {
            return Ok(());
        }
        let last = ck((count as i128 - 1).checked_mul(step), "displacement")?;
        let last = ck(disp.checked_add(last), "displacement")?;
        let (b0, t0) = block_bounds(t, disp, len)?;
        let (b1, t1) = block_bounds(t, last, len)?;
        self.bounds = Some(hull(self.bounds, hull(Some(b0), b1)));
        let copies = count as u128 * len as u128;
        self.size = self
            .size
            .checked_add(copies * t.size as u128)
            .ok_or_else(|| overflow("size"))?;
        self.nbasic = self
            .nbasic
            .checked_add(copies * t.nbasic as u128)
            .ok_or_else(|| overflow("element count"))?;
        let (Some(t0), Some(t1)) = (t0, t1) else {
            return Ok(()); // no data
        };
        let (tlo, thi) = hull(Some(t0), t1);
        if tlo < isize::MIN as i128 || thi > isize::MAX as i128 {
            return Err(overflow("a data displacement"));
        }
        self.true_bounds = Some(hull(self.true_bounds, (tlo, thi)));
        self.align = self.align.max(t.align);
        self.basic = match (self.basic, t.basic) {
            (BasicState::Unset, Some(b)) => BasicState::One(b),
            (BasicState::One(a), Some(b)) if a == b => BasicState::One(a),
            _ => BasicState::Mixed,
        };
        // Segments: every offset lies in [tlo, thi), checked to fit in isize above, so
        // the isize arithmetic below cannot overflow.
        let span = t.contiguous_span(len as usize);
        let per_block = if span.is_some() {
            1
        } else {
            len as u128 * t.segments.len() as u128
        };
        let need = count as u128 * per_block + self.segs.len() as u128;
        if need > MAX_SEGMENTS as u128 {
            return Err(too_fragmented(need));
        }
        for i in 0..count as i128 {
            let base = (disp + i * step) as isize;
            if let Some((off, n)) = span {
                self.push_seg(base + off, n);
            } else {
                for k in 0..len as isize {
                    let at = base + k * t.extent;
                    for &(off, n) in &t.segments {
                        self.push_seg(at + off, n);
                    }
                }
            }
        }
        // Runs: block boundaries do not matter, only the order of the copies.
        if let [(b, n)] = t.runs.as_slice() {
            let total =
                usize::try_from(*n as u128 * copies).map_err(|_| overflow("element count"))?;
            self.push_run(*b, total);
        } else {
            let need = copies * t.runs.len() as u128 + self.runs.len() as u128;
            if need > MAX_SEGMENTS as u128 {
                return Err(too_fragmented(need));
            }
            for _ in 0..copies {
                for &(b, n) in &t.runs {
                    self.push_run(b, n);
                }
            }
        }
        Ok(())
    }

    fn push_seg(&mut self, off: isize, n: usize) {
        if n == 0 {
            return;
        }
        match self.segs.last_mut() {
            Some((o, l)) if *o + *l as isize == off => *l += n,
            _ => self.segs.push((off, n)),
        }
    }

    fn push_run(&mut self, b: Basic, n: usize) {
        if n == 0 {
            return;
        }
        match self.runs.last_mut() {
            Some((k, m)) if *k == b => *m += n,
            _ => self.runs.push((b, n)),
        }
    }

    /// The layout, uncommitted and unnamed, with `envelope`. With `pad`, the extent is
    /// rounded up to the alignment (struct "epsilon", MPI 4.1 §5.1.6).
    ///
    /// # Errors
    /// `MPI_ERR_ARG` when a bound, the extent or the size does not fit in 64 bits.
    pub fn finish(self, pad: bool, envelope: Envelope) -> R<TypeInfo> {
        let (lb, ub) = self.bounds.unwrap_or((0, 0));
        let mut extent = ub - lb;
        if pad && self.align > 1 {
            let rem = extent.rem_euclid(self.align as i128);
            if rem != 0 {
                extent += self.align as i128 - rem;
            }
        }
        let (tlb, tub) = self.true_bounds.unwrap_or((0, 0));
        let fit = |x: i128, what: &str| isize::try_from(x).map_err(|_| overflow(what));
        let size = usize::try_from(self.size)
            .ok()
            .filter(|&s| s <= isize::MAX as usize)
            .ok_or_else(|| overflow("size"))?;
        Ok(TypeInfo {
            size,
            lb: fit(lb, "lower bound")?,
            extent: fit(extent, "extent")?,
            true_lb: fit(tlb, "true lower bound")?,
            true_extent: fit(tub - tlb, "true extent")?,
            segments: self.segs,
            basic: match self.basic {
                BasicState::One(b) => Some(b),
                _ => None,
            },
            nbasic: usize::try_from(self.nbasic).map_err(|_| overflow("element count"))?,
            runs: self.runs,
            align: self.align,
            predefined: false,
            committed: false,
            name: String::new(),
            envelope,
        })
    }
}

type Bounds = (i128, i128);

/// (bounds, true bounds if `t` has data) of `len` copies of `t` at `disp` (§5.1.6).
fn block_bounds(t: &TypeInfo, disp: i128, len: u64) -> R<(Bounds, Option<Bounds>)> {
    let ext = t.extent as i128;
    let span = ck((len as i128 - 1).checked_mul(ext), "block span")?;
    let (back, fwd) = (span.min(0), span.max(0));
    let at = |x: i128, y: i128, what| ck(disp.checked_add(x).and_then(|v| v.checked_add(y)), what);
    let b = (
        at(back, t.lb as i128, "lower bound")?,
        at(fwd, t.lb as i128 + ext, "upper bound")?,
    );
    if t.size == 0 {
        return Ok((b, None));
    }
    let tb = (
        at(back, t.true_lb as i128, "true lower bound")?,
        at(
            fwd,
            t.true_lb as i128 + t.true_extent as i128,
            "true upper bound",
        )?,
    );
    Ok((b, Some(tb)))
}

fn hull(a: Option<Bounds>, b: Bounds) -> Bounds {
    match a {
        None => b,
        Some((x, y)) => (x.min(b.0), y.max(b.1)),
    }
}

fn too_fragmented(n: u128) -> crate::error::MpiErr {
    err(
        MPI_ERR_NO_MEM,
        format!(
            "datatype: the type map would have {n} separate byte segments per element, more than rankwire's limit of {MAX_SEGMENTS}; fix: describe the data with fewer, larger blocks"
        ),
    )
}

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

fn count_arg(c: i64, what: &str) -> R<u64> {
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
