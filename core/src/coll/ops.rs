//! Reduction operations and the element types they apply to (MPI 4.1 §6.9).
//!
//! A reduction combines the contributions `a_0, a_1, …, a_{n-1}` of the ranks, element
//! by element, with an associative operation `∘`. Built-in operations are [`Op`]; a
//! user-defined one is a closure wrapped in [`UserOp`]. Both become a [`ReduceOp`],
//! which is what the collectives take:
//!
//! ```no_run
//! # let universe = rankwire::init()?;
//! # let world = universe.world();
//! use rankwire::{Op, UserOp};
//! let mut max = [0i64; 3];
//! world.allreduce(&[1i64, 2, 3], &mut max, Op::Max)?;
//! // A non-commutative user operation: 2x2 matrix product, row-major.
//! let matmul = UserOp::new(
//!     |a: &[[f64; 4]], b: &mut [[f64; 4]]| {
//!         for (x, y) in a.iter().zip(b.iter_mut()) {
//!             *y = [
//!                 x[0] * y[0] + x[1] * y[2],
//!                 x[0] * y[1] + x[1] * y[3],
//!                 x[2] * y[0] + x[3] * y[2],
//!                 x[2] * y[1] + x[3] * y[3],
//!             ];
//!         }
//!     },
//!     false,
//! );
//! let mut prod = [[0.0; 4]];
//! world.allreduce(&[[1.0, 1.0, 0.0, 1.0]], &mut prod, matmul)?;
//! # Ok::<(), rankwire::Error>(())
//! ```
//!
//! # Which operation applies to which type
//! | operation | integers (i8–i64, u8–u64) | f16, bf16, f32, f64 | [`Loc`] pairs |
//! |---|---|---|---|
//! | `Sum`, `Prod` | yes (wrapping) | yes | no |
//! | `Min`, `Max` | yes | yes (IEEE minNum/maxNum) | no |
//! | `LogicalAnd/Or/Xor` | yes (non-zero is true; result 0 or 1) | no | no |
//! | `BitAnd/Or/Xor` | yes | no | no |
//! | `MinLoc`, `MaxLoc` | no | no | yes |
//!
//! An unsupported pair is an [`crate::Error::Usage`] when the collective is called, as
//! in MPI (§6.9.2 lists the same combinations).
//!
//! # Floating point
//! Sums and products of f32/f64 are IEEE operations in the order the algorithm fixes
//! (see the collective's documentation). f16 and bf16 are widened to f32, combined,
//! and rounded to nearest-even after every single operation, so their results do not
//! depend on the machine. `Min`/`Max` return the non-NaN operand when one is NaN.

use std::fmt;
use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};

/// A built-in reduction operation (MPI 4.1 §6.9.2, `MPI_SUM` … `MPI_MAXLOC`).
///
/// All built-in operations are commutative, so every algorithm may use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Sum (`MPI_SUM`); wrapping for integers.
    Sum,
    /// Product (`MPI_PROD`); wrapping for integers.
    Prod,
    /// Minimum (`MPI_MIN`).
    Min,
    /// Maximum (`MPI_MAX`).
    Max,
    /// Logical and (`MPI_LAND`): 1 if both are non-zero, else 0.
    LogicalAnd,
    /// Logical or (`MPI_LOR`).
    LogicalOr,
    /// Logical exclusive or (`MPI_LXOR`).
    LogicalXor,
    /// Bitwise and (`MPI_BAND`).
    BitAnd,
    /// Bitwise or (`MPI_BOR`).
    BitOr,
    /// Bitwise exclusive or (`MPI_BXOR`).
    BitXor,
    /// Minimum value and the smallest index holding it (`MPI_MINLOC`, §6.9.4), on
    /// [`Loc`] pairs.
    MinLoc,
    /// Maximum value and the smallest index holding it (`MPI_MAXLOC`), on [`Loc`] pairs.
    MaxLoc,
}

impl Op {
    /// Every built-in operation, in declaration order.
    pub const ALL: [Op; 12] = [
        Op::Sum,
        Op::Prod,
        Op::Min,
        Op::Max,
        Op::LogicalAnd,
        Op::LogicalOr,
        Op::LogicalXor,
        Op::BitAnd,
        Op::BitOr,
        Op::BitXor,
        Op::MinLoc,
        Op::MaxLoc,
    ];

    /// MPI's name of the operation (`MPI_SUM`, …).
    pub fn mpi_name(self) -> &'static str {
        match self {
            Op::Sum => "MPI_SUM",
            Op::Prod => "MPI_PROD",
            Op::Min => "MPI_MIN",
            Op::Max => "MPI_MAX",
            Op::LogicalAnd => "MPI_LAND",
            Op::LogicalOr => "MPI_LOR",
            Op::LogicalXor => "MPI_LXOR",
            Op::BitAnd => "MPI_BAND",
            Op::BitOr => "MPI_BOR",
            Op::BitXor => "MPI_BXOR",
            Op::MinLoc => "MPI_MINLOC",
            Op::MaxLoc => "MPI_MAXLOC",
        }
    }

    /// Small code identifying the operation in collective descriptors (1-based; 0 is
    /// "no operation", [`USER_OP_CODE`] a user operation).
    pub(crate) fn code(self) -> u32 {
        Op::ALL
            .iter()
            .position(|&o| o == self)
            .map_or(0, |i| i as u32 + 1)
    }
}

/// Descriptor code of a user-defined operation.
pub(crate) const USER_OP_CODE: u32 = 0xFF;

/// Name of the operation with descriptor code `code`, for error messages.
pub(crate) fn op_name(code: u32) -> &'static str {
    match code {
        0 => "none",
        USER_OP_CODE => "user-defined",
        c => Op::ALL
            .get(c as usize - 1)
            .map_or("unknown", |o| o.mpi_name()),
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mpi_name())
    }
}

/// Element types of the built-in reductions, as carried in collective descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)] // the variant names are the Rust types
pub enum Datatype {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    BF16,
    F32,
    F64,
    /// `Loc<f32, i32>` (`MPI_FLOAT_INT`).
    LocF32,
    /// `Loc<i32, i32>` (`MPI_2INT`).
    LocI32,
    /// `Loc<u32, u32>`.
    LocU32,
    /// `Loc<f64, i64>`.
    LocF64,
    /// `Loc<i64, i64>`.
    LocI64,
    /// `Loc<u64, u64>`.
    LocU64,
}

impl Datatype {
    /// Descriptor code (1-based; 0 means "no built-in type").
    pub(crate) fn code(self) -> u32 {
        self as u32 + 1
    }
}

/// Name of the datatype with descriptor code `code`, for error messages.
pub(crate) fn dtype_name(code: u32) -> String {
    const NAMES: [&str; 18] = [
        "i8",
        "i16",
        "i32",
        "i64",
        "u8",
        "u16",
        "u32",
        "u64",
        "f16",
        "bf16",
        "f32",
        "f64",
        "Loc<f32, i32>",
        "Loc<i32, i32>",
        "Loc<u32, u32>",
        "Loc<f64, i64>",
        "Loc<i64, i64>",
        "Loc<u64, u64>",
    ];
    match code {
        0 => "untyped".into(),
        c => NAMES
            .get(c as usize - 1)
            .map_or_else(|| format!("type #{c}"), |s| (*s).to_string()),
    }
}

/// An element type the built-in operations apply to.
///
/// Implemented for i8–i64, u8–u64, [`struct@f16`], [`bf16`], f32, f64 and the [`Loc`]
/// pairs.
/// Other `Pod` types can still be reduced with a [`UserOp`].
pub trait Reducible: Pod + Send + Sync {
    /// The type's code in collective descriptors.
    const DATATYPE: Datatype;

    /// Whether `op` is defined on this type (see the table in the module doc).
    fn supports(op: Op) -> bool;

    /// Combine element-wise: `dst[i] = src[i] ∘ dst[i]` when `src_left`, else
    /// `dst[i] = dst[i] ∘ src[i]`. Operand order matters only for the bits of NaN
    /// payloads and signed zeros in `Min`/`Max`; honouring it keeps every rank's result
    /// bitwise identical. An unsupported `op` leaves `dst` unchanged.
    ///
    /// # Panics
    /// If `src` and `dst` differ in length.
    fn reduce(op: Op, src: &[Self], dst: &mut [Self], src_left: bool);
}

/// A value and its index, the element type of `MinLoc`/`MaxLoc` (MPI 4.1 §6.9.4,
/// `MPI_FLOAT_INT`, `MPI_2INT`, …).
///
/// Implemented (as `Pod`, without padding) for `Loc<f32, i32>`, `Loc<i32, i32>`,
/// `Loc<u32, u32>`, `Loc<f64, i64>`, `Loc<i64, i64>` and `Loc<u64, u64>`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Loc<V, I> {
    /// The value compared.
    pub value: V,
    /// Its index (typically the rank or position it came from).
    pub index: I,
}

impl<V, I> Loc<V, I> {
    /// A pair.
    pub fn new(value: V, index: I) -> Self {
        Loc { value, index }
    }
}

/// A user-defined reduction (`MPI_Op_create`, MPI 4.1 §6.9.5).
///
/// The function receives `(invec, inoutvec)` of equal length and must set
/// `inoutvec[i] = invec[i] ∘ inoutvec[i]`, as MPI's `MPI_User_function` does. It must be
/// associative. A non-commutative operation (`commutative = false`) is applied in rank
/// order, `a_0 ∘ a_1 ∘ … ∘ a_{n-1}`; collectives then use only order-preserving
/// algorithms.
pub struct UserOp<T> {
    f: UserFn<T>,
    commutative: bool,
}

/// A user reduction function, `f(invec, inoutvec)`.
type UserFn<T> = Arc<dyn Fn(&[T], &mut [T]) + Send + Sync>;

/// A type-erased reduction, `f(src, dst, src_left)` on bytes.
type ByteFn = Arc<dyn Fn(&[u8], &mut [u8], bool) + Send + Sync>;

impl<T> Clone for UserOp<T> {
    fn clone(&self) -> Self {
        UserOp {
            f: self.f.clone(),
            commutative: self.commutative,
        }
    }
}

impl<T: Pod> UserOp<T> {
    /// Wrap `f(invec, inoutvec)` (see the type doc).
    pub fn new(f: impl Fn(&[T], &mut [T]) + Send + Sync + 'static, commutative: bool) -> Self {
        UserOp {
            f: Arc::new(f),
            commutative,
        }
    }

    /// Whether the operation was declared commutative.
    pub fn is_commutative(&self) -> bool {
        self.commutative
    }
}

/// A reduction operation for elements of type `T`: a built-in [`Op`] (with
/// `T: Reducible`) or a [`UserOp`]. Built with `.into()`, which the collectives do for
/// you (`world.allreduce(&a, &mut b, Op::Sum)`).
pub struct ReduceOp<T> {
    kind: Kind<T>,
}

enum Kind<T> {
    Builtin {
        op: Op,
        supported: bool,
        dtype: Datatype,
        f: fn(Op, &[T], &mut [T], bool),
    },
    User(UserOp<T>),
}

impl<T> Clone for ReduceOp<T> {
    fn clone(&self) -> Self {
        ReduceOp {
            kind: match &self.kind {
                Kind::Builtin {
                    op,
                    supported,
                    dtype,
                    f,
                } => Kind::Builtin {
                    op: *op,
                    supported: *supported,
                    dtype: *dtype,
                    f: *f,
                },
                Kind::User(u) => Kind::User(u.clone()),
            },
        }
    }
}

impl<T: Reducible> From<Op> for ReduceOp<T> {
    fn from(op: Op) -> Self {
        ReduceOp {
            kind: Kind::Builtin {
                op,
                supported: T::supports(op),
                dtype: T::DATATYPE,
                f: T::reduce,
            },
        }
    }
}

impl<T: Pod> From<UserOp<T>> for ReduceOp<T> {
    fn from(u: UserOp<T>) -> Self {
        ReduceOp {
            kind: Kind::User(u),
        }
    }
}

impl<T: Pod> ReduceOp<T> {
    /// Whether the operation is commutative (built-in operations always are).
    pub fn is_commutative(&self) -> bool {
        match &self.kind {
            Kind::Builtin { .. } => true,
            Kind::User(u) => u.commutative,
        }
    }

    /// The built-in operation, if this is one.
    pub fn builtin(&self) -> Option<Op> {
        match &self.kind {
            Kind::Builtin { op, .. } => Some(*op),
            Kind::User(_) => None,
        }
    }

    /// Apply to typed slices: `dst = src ∘ dst` if `src_left`, else `dst = dst ∘ src`.
    pub(crate) fn apply(&self, src: &[T], dst: &mut [T], src_left: bool) {
        match &self.kind {
            Kind::Builtin { op, f, .. } => f(*op, src, dst, src_left),
            Kind::User(u) => {
                if src_left {
                    (u.f)(src, dst);
                } else {
                    // inout = inout ∘ in: compute into a copy of `src`.
                    let mut t = src.to_vec();
                    (u.f)(dst, &mut t);
                    dst.copy_from_slice(&t);
                }
            }
        }
    }

    /// [`ReduceOp::apply`] on byte slices holding whole elements (no allocation: the
    /// small collectives of `direct.rs` call it directly).
    #[inline]
    pub(crate) fn apply_bytes(&self, src: &[u8], dst: &mut [u8], src_left: bool) {
        apply_bytes::<T>(src, dst, |s, d| self.apply(s, d, src_left))
    }

    /// Whether the operation is defined on `T` (false for a built-in one that is not).
    #[inline]
    pub(crate) fn is_defined(&self) -> bool {
        !matches!(
            self.kind,
            Kind::Builtin {
                supported: false,
                ..
            }
        )
    }

    /// Type-erased form used by collective schedules.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] if a built-in operation is not defined on `T`.
    pub(crate) fn reducer(&self) -> crate::Result<Reducer> {
        if let Kind::Builtin {
            op,
            supported: false,
            dtype,
            ..
        } = &self.kind
        {
            return Err(crate::Error::usage(format!(
                "{op} is not defined on {}; see the table in rankwire::coll::ops",
                dtype_name(dtype.code())
            )));
        }
        let me = self.clone();
        let (op_code, dtype_code) = match &self.kind {
            Kind::Builtin { op, dtype, .. } => (op.code(), dtype.code()),
            Kind::User(_) => (USER_OP_CODE, 0),
        };
        Ok(Reducer {
            f: Arc::new(move |src: &[u8], dst: &mut [u8], left: bool| {
                apply_bytes::<T>(src, dst, |s, d| me.apply(s, d, left))
            }),
            elem_bytes: std::mem::size_of::<T>(),
            op_code,
            dtype_code,
        })
    }
}

/// A reduction on raw bytes, as schedules use it. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Reducer {
    f: ByteFn,
    /// Size of one element in bytes.
    pub(crate) elem_bytes: usize,
    /// Operation code for descriptors.
    pub(crate) op_code: u32,
    /// Datatype code for descriptors (0 for user operations).
    pub(crate) dtype_code: u32,
}

impl Reducer {
    /// `dst = src ∘ dst` (`src_left`) or `dst = dst ∘ src`, on whole elements.
    pub(crate) fn apply(&self, src: &[u8], dst: &mut [u8], src_left: bool) {
        (self.f)(src, dst, src_left)
    }
}

/// Run `f` on `src` and `dst` viewed as `[T]`; copies through aligned vectors when a
/// slice is not aligned for `T` (never the case for buffers the schedules hand out).
fn apply_bytes<T: Pod>(src: &[u8], dst: &mut [u8], f: impl FnOnce(&[T], &mut [T])) {
    let sz = std::mem::size_of::<T>();
    let al = std::mem::align_of::<T>();
    debug_assert_eq!(src.len(), dst.len());
    if sz == 0 || src.len() != dst.len() || !src.len().is_multiple_of(sz) {
        return;
    }
    let aligned =
        (src.as_ptr() as usize).is_multiple_of(al) && (dst.as_ptr() as usize).is_multiple_of(al);
    if aligned {
        f(bytemuck::cast_slice(src), bytemuck::cast_slice_mut(dst));
    } else {
        let s: Vec<T> = bytemuck::pod_collect_to_vec(src);
        let mut d: Vec<T> = bytemuck::pod_collect_to_vec(dst);
        f(&s, &mut d);
        dst.copy_from_slice(bytemuck::cast_slice(&d));
    }
}

// Element-wise loops, hoisting the operand-order branch out of the loop so that the
// bodies vectorise.
#[inline(always)]
fn zip_apply<T: Copy>(src: &[T], dst: &mut [T], src_left: bool, g: impl Fn(T, T) -> T) {
    assert_eq!(src.len(), dst.len(), "reduction operands differ in length");
    if src_left {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = g(s, *d);
        }
    } else {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = g(*d, s);
        }
    }
}

macro_rules! int_reducible {
    ($($t:ty => $dt:ident),* $(,)?) => {$(
        impl Reducible for $t {
            const DATATYPE: Datatype = Datatype::$dt;
            fn supports(op: Op) -> bool {
                !matches!(op, Op::MinLoc | Op::MaxLoc)
            }
            fn reduce(op: Op, src: &[Self], dst: &mut [Self], src_left: bool) {
                let b = |x: $t| x != 0;
                match op {
                    Op::Sum => zip_apply(src, dst, src_left, |l, r| l.wrapping_add(r)),
                    Op::Prod => zip_apply(src, dst, src_left, |l, r| l.wrapping_mul(r)),
                    Op::Min => zip_apply(src, dst, src_left, |l, r| l.min(r)),
                    Op::Max => zip_apply(src, dst, src_left, |l, r| l.max(r)),
                    Op::LogicalAnd => zip_apply(src, dst, src_left, |l, r| (b(l) && b(r)) as $t),
                    Op::LogicalOr => zip_apply(src, dst, src_left, |l, r| (b(l) || b(r)) as $t),
                    Op::LogicalXor => zip_apply(src, dst, src_left, |l, r| (b(l) != b(r)) as $t),
                    Op::BitAnd => zip_apply(src, dst, src_left, |l, r| l & r),
                    Op::BitOr => zip_apply(src, dst, src_left, |l, r| l | r),
                    Op::BitXor => zip_apply(src, dst, src_left, |l, r| l ^ r),
                    Op::MinLoc | Op::MaxLoc => {}
                }
            }
        }
    )*};
}

int_reducible!(
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
);

fn float_supports(op: Op) -> bool {
    matches!(op, Op::Sum | Op::Prod | Op::Min | Op::Max)
}

macro_rules! float_reducible {
    ($($t:ty => $dt:ident),* $(,)?) => {$(
        impl Reducible for $t {
            const DATATYPE: Datatype = Datatype::$dt;
            fn supports(op: Op) -> bool {
                float_supports(op)
            }
            fn reduce(op: Op, src: &[Self], dst: &mut [Self], src_left: bool) {
                match op {
                    Op::Sum => zip_apply(src, dst, src_left, |l, r| l + r),
                    Op::Prod => zip_apply(src, dst, src_left, |l, r| l * r),
                    Op::Min => zip_apply(src, dst, src_left, |l, r| l.min(r)),
                    Op::Max => zip_apply(src, dst, src_left, |l, r| l.max(r)),
                    _ => {}
                }
            }
        }
    )*};
}

float_reducible!(f32 => F32, f64 => F64);

macro_rules! half_reducible {
    ($($t:ty => $dt:ident),* $(,)?) => {$(
        impl Reducible for $t {
            const DATATYPE: Datatype = Datatype::$dt;
            fn supports(op: Op) -> bool {
                float_supports(op)
            }
            fn reduce(op: Op, src: &[Self], dst: &mut [Self], src_left: bool) {
                let w = |x: $t| x.to_f32();
                let n = <$t>::from_f32;
                match op {
                    Op::Sum => zip_apply(src, dst, src_left, |l, r| n(w(l) + w(r))),
                    Op::Prod => zip_apply(src, dst, src_left, |l, r| n(w(l) * w(r))),
                    Op::Min => zip_apply(src, dst, src_left, |l, r| n(w(l).min(w(r)))),
                    Op::Max => zip_apply(src, dst, src_left, |l, r| n(w(l).max(w(r)))),
                    _ => {}
                }
            }
        }
    )*};
}

half_reducible!(f16 => F16, bf16 => BF16);

macro_rules! loc_reducible {
    ($($v:ty, $i:ty => $dt:ident),* $(,)?) => {$(
        // SAFETY: repr(C) with two fields of equal size and alignment: no padding, and
        // every bit pattern of the fields is valid.
        unsafe impl Zeroable for Loc<$v, $i> {}
        // SAFETY: as above; both fields are Pod.
        unsafe impl Pod for Loc<$v, $i> {}

        impl Reducible for Loc<$v, $i> {
            const DATATYPE: Datatype = Datatype::$dt;
            fn supports(op: Op) -> bool {
                matches!(op, Op::MinLoc | Op::MaxLoc)
            }
            fn reduce(op: Op, src: &[Self], dst: &mut [Self], src_left: bool) {
                // MPI 4.1 §6.9.4: the winning value; on a tie, the smaller index.
                let pick = |l: Self, r: Self, l_wins: bool, r_wins: bool| {
                    if l_wins {
                        l
                    } else if r_wins {
                        r
                    } else {
                        Loc { value: l.value, index: l.index.min(r.index) }
                    }
                };
                match op {
                    Op::MinLoc => zip_apply(src, dst, src_left, |l, r| {
                        pick(l, r, l.value < r.value, r.value < l.value)
                    }),
                    Op::MaxLoc => zip_apply(src, dst, src_left, |l, r| {
                        pick(l, r, l.value > r.value, r.value > l.value)
                    }),
                    _ => {}
                }
            }
        }
    )*};
}

loc_reducible!(
    f32, i32 => LocF32,
    i32, i32 => LocI32,
    u32, u32 => LocU32,
    f64, i64 => LocF64,
    i64, i64 => LocI64,
    u64, u64 => LocU64,
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random bytes.
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    fn vals<T: Pod>(seed: u64, n: usize) -> Vec<T> {
        bytemuck::pod_collect_to_vec(&bytes(seed, n * std::mem::size_of::<T>()))
    }

    /// Every op on every integer type against a direct scalar computation, both
    /// operand orders; unsupported ops leave the destination alone.
    macro_rules! check_int {
        ($($t:ty),*) => {$({
            let a: Vec<$t> = vals(1, 257);
            let mut b: Vec<$t> = vals(2, 257);
            b[3] = 0;
            b[4] = 0;
            for op in Op::ALL {
                for left in [true, false] {
                    let mut d = b.clone();
                    <$t>::reduce(op, &a, &mut d, left);
                    for i in 0..a.len() {
                        let (l, r) = if left { (a[i], b[i]) } else { (b[i], a[i]) };
                        let t = |x: bool| x as $t;
                        let want = match op {
                            Op::Sum => l.wrapping_add(r),
                            Op::Prod => l.wrapping_mul(r),
                            Op::Min => if l < r { l } else { r },
                            Op::Max => if l > r { l } else { r },
                            Op::LogicalAnd => t(l != 0 && r != 0),
                            Op::LogicalOr => t(l != 0 || r != 0),
                            Op::LogicalXor => t((l != 0) ^ (r != 0)),
                            Op::BitAnd => l & r,
                            Op::BitOr => l | r,
                            Op::BitXor => l ^ r,
                            Op::MinLoc | Op::MaxLoc => b[i],
                        };
                        assert_eq!(d[i], want, "{} {op} left={left} at {i}", stringify!($t));
                    }
                    assert_eq!(<$t>::supports(op), !matches!(op, Op::MinLoc | Op::MaxLoc));
                }
            }
        })*};
    }

    #[test]
    fn integer_ops_match_direct_computation() {
        check_int!(i8, i16, i32, i64, u8, u16, u32, u64);
    }

    macro_rules! check_float {
        ($($t:ty),*) => {$({
            let mut a: Vec<$t> = (0..200).map(|i| (i as $t - 77.0) * 0.37).collect();
            let b: Vec<$t> = (0..200).map(|i| (i as $t * 1.3 - 50.0).sin()).collect();
            a[5] = <$t>::NAN;
            a[6] = -0.0;
            for op in Op::ALL {
                for left in [true, false] {
                    let mut d = b.clone();
                    <$t>::reduce(op, &a, &mut d, left);
                    for i in 0..a.len() {
                        let (l, r) = if left { (a[i], b[i]) } else { (b[i], a[i]) };
                        let want = match op {
                            Op::Sum => l + r,
                            Op::Prod => l * r,
                            Op::Min => if l.is_nan() { r } else if r.is_nan() || l < r { l } else if r < l { r } else { l.min(r) },
                            Op::Max => if l.is_nan() { r } else if r.is_nan() || l > r { l } else if r > l { r } else { l.max(r) },
                            _ => b[i],
                        };
                        assert_eq!(d[i].to_bits(), want.to_bits(), "{} {op} at {i}", stringify!($t));
                    }
                    assert_eq!(<$t>::supports(op), matches!(op, Op::Sum | Op::Prod | Op::Min | Op::Max));
                }
            }
        })*};
    }

    #[test]
    fn float_ops_match_direct_computation() {
        check_float!(f32, f64);
    }

    macro_rules! check_half {
        ($($t:ty),*) => {$({
            let a: Vec<$t> = (0..300).map(|i| <$t>::from_f32((i as f32 - 100.0) * 0.013)).collect();
            let b: Vec<$t> = (0..300).map(|i| <$t>::from_f32((i as f32 * 0.7).cos() * 3.0)).collect();
            for op in Op::ALL {
                for left in [true, false] {
                    let mut d = b.clone();
                    <$t>::reduce(op, &a, &mut d, left);
                    for i in 0..a.len() {
                        let (l, r) = if left { (a[i], b[i]) } else { (b[i], a[i]) };
                        let (x, y) = (f64::from(l.to_f32()), f64::from(r.to_f32()));
                        // f16/bf16 products and sums of two values are exact in f64;
                        // rounding once to the narrow type must agree with our
                        // f32-then-round result.
                        let want = match op {
                            Op::Sum => <$t>::from_f64(x + y),
                            Op::Prod => <$t>::from_f64(x * y),
                            Op::Min => if x <= y { l } else { r },
                            Op::Max => if x >= y { l } else { r },
                            _ => b[i],
                        };
                        assert_eq!(d[i].to_bits(), want.to_bits(), "{} {op} at {i}: {l} {r}", stringify!($t));
                    }
                }
            }
        })*};
    }

    #[test]
    fn half_ops_match_direct_computation() {
        check_half!(f16, bf16);
    }

    #[test]
    fn minloc_maxloc_pick_value_then_smallest_index() {
        let a = [
            Loc::new(1.0f32, 4),
            Loc::new(2.0, 1),
            Loc::new(3.0, 9),
            Loc::new(f32::NAN, 2),
        ];
        let b = [
            Loc::new(1.0f32, 2),
            Loc::new(1.5, 7),
            Loc::new(5.0, 3),
            Loc::new(0.0, 8),
        ];
        let mut d = b;
        Loc::<f32, i32>::reduce(Op::MinLoc, &a, &mut d, true);
        assert_eq!(d[0], Loc::new(1.0, 2));
        assert_eq!(d[1], Loc::new(1.5, 7));
        assert_eq!(d[2], Loc::new(3.0, 9));
        let mut d = b;
        Loc::<f32, i32>::reduce(Op::MaxLoc, &a, &mut d, false);
        assert_eq!(d[0], Loc::new(1.0, 2));
        assert_eq!(d[1], Loc::new(2.0, 1));
        assert_eq!(d[2], Loc::new(5.0, 3));
        macro_rules! loc_types {
            ($($v:ty, $i:ty);*) => {$({
                let a: Vec<Loc<$v, $i>> = (0..64).map(|k| Loc::new((k % 5) as $v, (k % 7) as $i)).collect();
                let b: Vec<Loc<$v, $i>> = (0..64).map(|k| Loc::new((k % 3) as $v, (k % 4) as $i)).collect();
                for op in [Op::MinLoc, Op::MaxLoc] {
                    let mut d = b.clone();
                    <Loc<$v, $i>>::reduce(op, &a, &mut d, true);
                    for k in 0..64 {
                        let (x, y) = (a[k], b[k]);
                        let want = if x.value == y.value {
                            Loc::new(x.value, x.index.min(y.index))
                        } else if (op == Op::MinLoc) == (x.value < y.value) {
                            x
                        } else {
                            y
                        };
                        assert_eq!(d[k], want);
                    }
                }
                assert!(!<Loc<$v, $i>>::supports(Op::Sum));
            })*};
        }
        loc_types!(f32, i32; i32, i32; u32, u32; f64, i64; i64, i64; u64, u64);
    }

    #[test]
    fn user_op_respects_operand_order() {
        // String-concatenation-like: (a, b) -> 10a + b on small digits is not commutative.
        let op: ReduceOp<u64> = UserOp::new(
            |inv: &[u64], io: &mut [u64]| {
                for (a, b) in inv.iter().zip(io.iter_mut()) {
                    *b += *a * 10;
                }
            },
            false,
        )
        .into();
        assert!(!op.is_commutative());
        let mut d = [2u64];
        op.apply(&[1], &mut d, true);
        assert_eq!(d, [12]);
        let mut d = [2u64];
        op.apply(&[1], &mut d, false);
        assert_eq!(d, [21]);
        let r = op.reducer().unwrap();
        let mut d = 2u64.to_ne_bytes();
        r.apply(&1u64.to_ne_bytes(), &mut d, false);
        assert_eq!(u64::from_ne_bytes(d), 21);
    }

    #[test]
    fn unsupported_builtin_is_a_usage_error() {
        let op: ReduceOp<f32> = Op::BitAnd.into();
        let e = op.reducer().err().unwrap();
        assert!(matches!(e, crate::Error::Usage(_)));
        assert!(e.to_string().contains("MPI_BAND") && e.to_string().contains("f32"));
        let ok: ReduceOp<i16> = Op::BitAnd.into();
        assert!(ok.reducer().is_ok());
    }

    #[test]
    fn unaligned_bytes_take_the_copying_path() {
        let op: ReduceOp<f64> = Op::Sum.into();
        let r = op.reducer().unwrap();
        let mut src = [0u8; 17];
        let mut dst = [0u8; 17];
        src[1..].copy_from_slice(bytemuck::cast_slice(&[1.5f64, 2.0]));
        dst[1..].copy_from_slice(bytemuck::cast_slice(&[0.25f64, 4.0]));
        r.apply(&src[1..], &mut dst[1..], true);
        let got: Vec<f64> = bytemuck::pod_collect_to_vec(&dst[1..]);
        assert_eq!(got, vec![1.75, 6.0]);
    }
}
