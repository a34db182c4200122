//! The layout engine of derived datatypes: a [`Builder`] folds blocks ("`len`
//! consecutive copies of a type at a byte displacement") into a [`TypeInfo`] — the
//! flattened byte segments (adjacent runs merged), the basic-entry runs, size, bounds
//! and true bounds, all computed in `i128` and checked, so a layout whose sizes or
//! displacements do not fit in `MPI_Aint`/`MPI_Count` is an error (`MPI_ERR_ARG`),
//! never a wrapped value.
//!
//! Bounds follow MPI 4.1 §5.1.6: a block of `len` copies of a type with bounds
//! `[lb, lb+ext)` at `disp` spans `disp + min(0, (len-1)·ext) + lb` to
//! `disp + max(0, (len-1)·ext) + lb + ext` (negative extents included); blocks of
//! length 0 do not count; with no block at all `lb = ub = 0`.

use crate::consts::*;
use crate::datatype::{Basic, Envelope, TypeInfo};
use crate::error::{R, err};

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

pub(crate) fn overflow(what: &str) -> crate::error::MpiErr {
    err(
        MPI_ERR_ARG,
        format!(
            "datatype: {what} overflows the 64-bit range of MPI_Aint/MPI_Count; fix: use smaller counts, strides or displacements"
        ),
    )
}

pub(crate) fn ck(x: Option<i128>, what: &str) -> R<i128> {
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

pub(crate) fn too_fragmented(n: u128) -> crate::error::MpiErr {
    err(
        MPI_ERR_NO_MEM,
        format!(
            "datatype: the type map would have {n} separate byte segments per element, more than rankwire's limit of {MAX_SEGMENTS}; fix: describe the data with fewer, larger blocks"
        ),
    )
}
