//! Reduction operations (MPI 4.1 §6.9): the predefined `MPI_Op`s, user operations
//! (`MPI_Op_create`, `MPI_Op_create_c`, `MPI_Op_free`, `MPI_Op_commutative`), the local
//! combine of every predefined operation on every basic type it is defined for
//! (`MPI_Reduce_local`), and the *plan* the reduction collectives follow for an
//! (operation, datatype) pair.
//!
//! # Which operation on which type (MPI 4.1 §6.9.2)
//! | operation | types |
//! |---|---|
//! | `MPI_MAX`, `MPI_MIN` | C and Fortran integers, floating point (incl. `long double`) |
//! | `MPI_SUM`, `MPI_PROD` | integers, floating point, complex (incl. `long double _Complex`) |
//! | `MPI_LAND`, `MPI_LOR`, `MPI_LXOR` | integers, logical (`MPI_C_BOOL`, `MPI_LOGICAL*`) |
//! | `MPI_BAND`, `MPI_BOR`, `MPI_BXOR` | integers, `MPI_BYTE` |
//! | `MPI_MINLOC`, `MPI_MAXLOC` | the pair types `MPI_FLOAT_INT`, `MPI_DOUBLE_INT`, `MPI_LONG_INT`, `MPI_2INT`, `MPI_SHORT_INT`, `MPI_LONG_DOUBLE_INT` |
//!
//! Any other pair is `MPI_ERR_OP`. `MPI_REPLACE` and `MPI_NO_OP` are only meaningful in
//! one-sided accumulates (MPI 4.1 §12.3.4), which this library does not have: a
//! reduction with them is `MPI_ERR_OP`. As an extension beyond MPI 4.1 §6.9.2 (which
//! defines predefined operations on predefined types only; MPICH rejects the rest), a
//! predefined operation also applies to a derived datatype whose type map holds one
//! basic type only (e.g. a vector of `MPI_DOUBLE`, combined element by element on the
//! type map's data); a mixed one is `MPI_ERR_OP`.
//!
//! # Plans
//! - [`Plan::Core`]: the basic type has a rankwire element type with the same C layout
//!   (`Basic::core()`: integers, `float`, `double`, `MPI_FLOAT_INT`, `MPI_2INT`; also
//!   `MPI_C_BOOL` and `MPI_BYTE` as `u8` for the operations allowed on them). The
//!   collectives run rankwire's typed reduction (and its GPU kernels for device
//!   buffers).
//! - [`Plan::Packed`]: a predefined operation on a basic type rankwire has no element
//!   type for (complex, `long double`, `MPI_DOUBLE_INT`, `MPI_LONG_INT`,
//!   `MPI_SHORT_INT`, `MPI_LONG_DOUBLE_INT`). The combine of this module runs on the
//!   *packed* records (the type map's data without padding: `MPI_DOUBLE_INT` is 12
//!   bytes, `double` then `int`) and is handed to rankwire as a commutative user
//!   operation on a record type of that size, so every rankwire algorithm applies.
//! - [`Plan::User`]: a user function; the collectives gather the contributions and
//!   combine them in rank order (see `coll_red.rs`).
//!
//! `long double` is the x86-64 80-bit extended format in 16 bytes: sums, products,
//! minima and maxima are computed by the x87 unit (inline assembly), so results are
//! those of C's `long double` arithmetic. On other architectures a reduction on
//! `long double` types is `MPI_ERR_OP`.

use crate::consts::*;
use crate::datatype::{Basic, TypeInfo};
use crate::error::{R, err, guard, put};
use crate::handles::{Kind, Table};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// `MPI_User_function`: `inoutvec[i] = invec[i] ∘ inoutvec[i]` for `*len` elements of
/// `*datatype`.
pub type MPI_User_function =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype);
/// `MPI_User_function_c`: as [`MPI_User_function`] with an `MPI_Count` length.
pub type MPI_User_function_c =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut MPI_Count, *mut MPI_Datatype);

/// A predefined operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// `MPI_SUM`.
    Sum,
    /// `MPI_MIN`.
    Min,
    /// `MPI_MAX`.
    Max,
    /// `MPI_PROD`.
    Prod,
    /// `MPI_BAND`.
    Band,
    /// `MPI_BOR`.
    Bor,
    /// `MPI_BXOR`.
    Bxor,
    /// `MPI_LAND`.
    Land,
    /// `MPI_LOR`.
    Lor,
    /// `MPI_LXOR`.
    Lxor,
    /// `MPI_MINLOC`.
    MinLoc,
    /// `MPI_MAXLOC`.
    MaxLoc,
    /// `MPI_REPLACE` (one-sided only).
    Replace,
    /// `MPI_NO_OP` (one-sided only).
    NoOp,
}

impl Builtin {
    /// The predefined operation of handle `op`, if it is one.
    pub fn of(op: MPI_Op) -> Option<Builtin> {
        use Builtin::*;
        Some(match op {
            MPI_SUM => Sum,
            MPI_MIN => Min,
            MPI_MAX => Max,
            MPI_PROD => Prod,
            MPI_BAND => Band,
            MPI_BOR => Bor,
            MPI_BXOR => Bxor,
            MPI_LAND => Land,
            MPI_LOR => Lor,
            MPI_LXOR => Lxor,
            MPI_MINLOC => MinLoc,
            MPI_MAXLOC => MaxLoc,
            MPI_REPLACE => Replace,
            MPI_NO_OP => NoOp,
            _ => return None,
        })
    }

    /// MPI's name (`MPI_SUM`, ...).
    pub fn name(self) -> &'static str {
        use Builtin::*;
        match self {
            Sum => "MPI_SUM",
            Min => "MPI_MIN",
            Max => "MPI_MAX",
            Prod => "MPI_PROD",
            Band => "MPI_BAND",
            Bor => "MPI_BOR",
            Bxor => "MPI_BXOR",
            Land => "MPI_LAND",
            Lor => "MPI_LOR",
            Lxor => "MPI_LXOR",
            MinLoc => "MPI_MINLOC",
            MaxLoc => "MPI_MAXLOC",
            Replace => "MPI_REPLACE",
            NoOp => "MPI_NO_OP",
        }
    }

    /// rankwire's operation of the same meaning.
    pub fn core(self) -> Option<rankwire::Op> {
        use Builtin::*;
        use rankwire::Op as O;
        Some(match self {
            Sum => O::Sum,
            Min => O::Min,
            Max => O::Max,
            Prod => O::Prod,
            Band => O::BitAnd,
            Bor => O::BitOr,
            Bxor => O::BitXor,
            Land => O::LogicalAnd,
            Lor => O::LogicalOr,
            Lxor => O::LogicalXor,
            MinLoc => O::MinLoc,
            MaxLoc => O::MaxLoc,
            Replace | NoOp => return None,
        })
    }

    /// Whether MPI 4.1 §6.9.2 defines this operation on basic type `b` (the table in
    /// the module doc).
    pub fn defined_on(self, b: Basic) -> bool {
        use Basic::*;
        let int = matches!(b, I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64);
        let float = matches!(b, F32 | F64 | LongDouble);
        let complex = matches!(b, C32 | C64 | CLongDouble);
        let pair = matches!(
            b,
            FloatInt | DoubleInt | LongInt | TwoInt | ShortInt | LongDoubleInt
        );
        let ld_ok =
            cfg!(target_arch = "x86_64") || !matches!(b, LongDouble | CLongDouble | LongDoubleInt);
        ld_ok
            && match self {
                Builtin::Sum | Builtin::Prod => int || float || complex,
                Builtin::Min | Builtin::Max => int || float,
                Builtin::Land | Builtin::Lor | Builtin::Lxor => int || b == Bool,
                Builtin::Band | Builtin::Bor | Builtin::Bxor => int || b == Byte,
                Builtin::MinLoc | Builtin::MaxLoc => pair,
                Builtin::Replace | Builtin::NoOp => false,
            }
    }
}

/// The function of a user operation.
#[derive(Clone, Copy, Debug)]
pub enum UserFn {
    /// From `MPI_Op_create`.
    Int(MPI_User_function),
    /// From `MPI_Op_create_c`.
    Big(MPI_User_function_c),
}

/// A user operation (`MPI_Op_create`, MPI 4.1 §6.9.5).
#[derive(Debug)]
pub struct UserOp {
    /// The C function.
    pub f: UserFn,
    /// Declared commutative (`commute != 0`).
    pub commute: bool,
}

impl UserOp {
    /// `inout[i] = in[i] ∘ inout[i]` for `n` elements of `dt`, the buffers in the
    /// datatype's memory layout (element `i` at `i × extent` bytes). A count above
    /// `INT_MAX` is passed to an `MPI_User_function` in chunks of at most `INT_MAX`
    /// elements.
    ///
    /// # Safety
    /// Both buffers hold `n` elements of `dt` (the type map's bytes readable, and
    /// writable for `inout`).
    pub unsafe fn call(
        &self,
        inv: *const u8,
        inout: *mut u8,
        n: usize,
        dt: MPI_Datatype,
        extent: isize,
    ) {
        let mut d = dt;
        match self.f {
            UserFn::Big(f) => {
                let mut len = n as MPI_Count;
                // SAFETY: caller's contract; the function follows MPI_User_function_c.
                unsafe { f(inv as *mut c_void, inout as *mut c_void, &mut len, &mut d) };
            }
            UserFn::Int(f) => {
                let mut done = 0usize;
                while done < n {
                    let k = (n - done).min(i32::MAX as usize);
                    let off = done as isize * extent;
                    let mut len = k as c_int;
                    // SAFETY: as above; the chunk lies inside the caller's elements.
                    unsafe {
                        f(
                            (inv as isize).wrapping_add(off) as *mut c_void,
                            (inout as isize).wrapping_add(off) as *mut c_void,
                            &mut len,
                            &mut d,
                        )
                    };
                    done += k;
                }
            }
        }
    }
}

/// Created (user) operations.
pub static OPS: Table<UserOp> = Table::new(Kind::Op);

/// What an `MPI_Op` handle names.
#[derive(Clone, Debug)]
pub enum Resolved {
    /// A predefined operation.
    Builtin(Builtin),
    /// A user operation.
    User(Arc<UserOp>),
}

/// The operation of handle `op`.
///
/// # Errors
/// `MPI_ERR_OP` for `MPI_OP_NULL`, a freed or unknown handle.
pub fn lookup(op: MPI_Op) -> R<Resolved> {
    if let Some(b) = Builtin::of(op) {
        return Ok(Resolved::Builtin(b));
    }
    OPS.get(op).map(Resolved::User).ok_or_else(|| {
        err(
            MPI_ERR_OP,
            format!(
                "op: {op:#x} is not an operation (MPI_OP_NULL, freed, or not a handle of this library); fix: pass a predefined MPI_SUM ... MPI_MAXLOC or one from MPI_Op_create"
            ),
        )
    })
}

/// How the reduction collectives apply operation `op` to datatype `dt` (see the
/// module doc).
#[derive(Clone, Debug)]
pub enum Plan {
    /// rankwire's typed reduction on `dt` elements.
    Core {
        /// rankwire's element type.
        dt: rankwire::Datatype,
        /// rankwire's operation.
        op: rankwire::Op,
        /// The basic type of every element.
        basic: Basic,
        /// The operation.
        builtin: Builtin,
    },
    /// This module's combine on packed records of `basic`.
    Packed {
        /// The basic type of every element.
        basic: Basic,
        /// The operation.
        op: Builtin,
    },
    /// A user function, applied in rank order.
    User {
        /// The operation.
        op: Arc<UserOp>,
    },
}

/// A plan with the datatype's layout.
#[derive(Clone, Debug)]
pub struct Reduction {
    /// How to combine.
    pub plan: Plan,
    /// The datatype handle (passed to user functions).
    pub dt: MPI_Datatype,
    /// Its layout.
    pub ty: Arc<TypeInfo>,
}

impl Reduction {
    /// Whether the operation is commutative (predefined ones are).
    pub fn commutative(&self) -> bool {
        match &self.plan {
            Plan::User { op } => op.commute,
            _ => true,
        }
    }

    /// Basic elements in `n` elements of the datatype (packed records for the
    /// predefined plans).
    pub fn basic_elems(&self, n: usize) -> usize {
        n * self.ty.nbasic.max(1)
    }
}

/// The plan of `op` on committed datatype `dt`.
///
/// # Errors
/// `MPI_ERR_OP` for a bad handle, a predefined operation not defined on the type (MPI
/// 4.1 §6.9.2), `MPI_REPLACE`/`MPI_NO_OP`, or a predefined operation on a derived type
/// of mixed basic types; `MPI_ERR_TYPE` for a bad or uncommitted type.
pub fn plan(op: MPI_Op, dt: MPI_Datatype) -> R<Reduction> {
    let ty = crate::datatype::for_comm(dt)?;
    let plan = match lookup(op)? {
        Resolved::User(u) => Plan::User { op: u },
        Resolved::Builtin(b) => {
            let Some(basic) = ty.basic else {
                return Err(err(
                    MPI_ERR_OP,
                    format!(
                        "op: {} on datatype {} whose elements mix basic types; fix: a predefined operation needs a type built from one basic type (or use MPI_Op_create)",
                        b.name(),
                        ty.name
                    ),
                ));
            };
            if !b.defined_on(basic) {
                return Err(err(
                    MPI_ERR_OP,
                    format!(
                        "op: {} is not defined on {} (basic type {basic:?}); fix: see MPI 4.1 §6.9.2 for the operations of each type (e.g. MPI_MAX is not defined on complex, MPI_MINLOC needs a pair type such as MPI_DOUBLE_INT)",
                        b.name(),
                        ty.name
                    ),
                ));
            }
            match (core_type(basic), b.core()) {
                (Some(d), Some(o)) => Plan::Core {
                    dt: d,
                    op: o,
                    basic,
                    builtin: b,
                },
                _ => Plan::Packed { basic, op: b },
            }
        }
    };
    Ok(Reduction { plan, dt, ty })
}

/// rankwire's element type for a basic type, where the layouts agree (`MPI_C_BOOL` and
/// `MPI_BYTE` as `u8`: only the logical and bitwise operations reach them).
pub fn core_type(b: Basic) -> Option<rankwire::Datatype> {
    match b {
        Basic::Byte => Some(rankwire::Datatype::U8),
        b => b.core(),
    }
}

/// Bytes of one packed record of `b` (its data without padding).
pub fn record_bytes(b: Basic) -> usize {
    b.data_size()
}

/// `dst = src ∘ dst` (or `dst ∘ src` when `!src_left`) on packed records of `b`, for a
/// predefined `op` defined on `b` (callers check with [`Builtin::defined_on`]); an
/// undefined pair leaves `dst` unchanged. Lengths in bytes, equal, whole records.
pub fn combine_builtin(b: Basic, op: Builtin, src: &[u8], dst: &mut [u8], src_left: bool) {
    if let (Some(d), Some(o)) = (core_type(b), op.core()) {
        return combine_core(d, o, src, dst, src_left);
    }
    let rs = record_bytes(b);
    if rs == 0 || src.len() != dst.len() {
        return;
    }
    for (s, d) in src.chunks_exact(rs).zip(dst.chunks_exact_mut(rs)) {
        let (l, r): (&[u8], &[u8]) = if src_left { (s, &*d) } else { (&*d, s) };
        let mut out = [0u8; 32];
        combine_record(b, op, l, r, &mut out[..rs]);
        d.copy_from_slice(&out[..rs]);
    }
}

// Runs `$body` with `$T` the Rust type of rankwire element type `$dt`; `$other` for
// an element type added to rankwire later.
macro_rules! with_core_type {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {{
        use rankwire::Datatype as __D;
        match $dt {
            __D::I8 => {
                type $T = i8;
                $body
            }
            __D::I16 => {
                type $T = i16;
                $body
            }
            __D::I32 => {
                type $T = i32;
                $body
            }
            __D::I64 => {
                type $T = i64;
                $body
            }
            __D::U8 => {
                type $T = u8;
                $body
            }
            __D::U16 => {
                type $T = u16;
                $body
            }
            __D::U32 => {
                type $T = u32;
                $body
            }
            __D::U64 => {
                type $T = u64;
                $body
            }
            __D::F16 => {
                type $T = rankwire::f16;
                $body
            }
            __D::BF16 => {
                type $T = rankwire::bf16;
                $body
            }
            __D::F32 => {
                type $T = f32;
                $body
            }
            __D::F64 => {
                type $T = f64;
                $body
            }
            __D::LocF32 => {
                type $T = rankwire::Loc<f32, i32>;
                $body
            }
            __D::LocI32 => {
                type $T = rankwire::Loc<i32, i32>;
                $body
            }
            __D::LocU32 => {
                type $T = rankwire::Loc<u32, u32>;
                $body
            }
            __D::LocF64 => {
                type $T = rankwire::Loc<f64, i64>;
                $body
            }
            __D::LocI64 => {
                type $T = rankwire::Loc<i64, i64>;
                $body
            }
            __D::LocU64 => {
                type $T = rankwire::Loc<u64, u64>;
                $body
            }
            _ => $other,
        }
    }};
}
pub(crate) use with_core_type;

fn combine_core(d: rankwire::Datatype, o: rankwire::Op, src: &[u8], dst: &mut [u8], left: bool) {
    use rankwire::Reducible;
    with_core_type!(d, T => {
        let sz = std::mem::size_of::<T>();
        if src.len() != dst.len() || !src.len().is_multiple_of(sz) {
            return;
        }
        let s: Vec<T> = rankwire::bytemuck::pod_collect_to_vec(src);
        let mut t: Vec<T> = rankwire::bytemuck::pod_collect_to_vec(dst);
        <T as Reducible>::reduce(o, &s, &mut t, left);
        dst.copy_from_slice(rankwire::bytemuck::cast_slice(&t));
    }, _ => {})
}

fn rd<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// `out = l ∘ r` for one packed record of a type without a rankwire element type.
fn combine_record(b: Basic, op: Builtin, l: &[u8], r: &[u8], out: &mut [u8]) {
    use Basic::*;
    match b {
        C32 => {
            let (a, bb) = (f32::from_ne_bytes(rd(l, 0)), f32::from_ne_bytes(rd(l, 4)));
            let (c, d) = (f32::from_ne_bytes(rd(r, 0)), f32::from_ne_bytes(rd(r, 4)));
            let (x, y) = match op {
                Builtin::Prod => (a * c - bb * d, a * d + bb * c),
                _ => (a + c, bb + d),
            };
            out[0..4].copy_from_slice(&x.to_ne_bytes());
            out[4..8].copy_from_slice(&y.to_ne_bytes());
        }
        C64 => {
            let (a, bb) = (f64::from_ne_bytes(rd(l, 0)), f64::from_ne_bytes(rd(l, 8)));
            let (c, d) = (f64::from_ne_bytes(rd(r, 0)), f64::from_ne_bytes(rd(r, 8)));
            let (x, y) = match op {
                Builtin::Prod => (a * c - bb * d, a * d + bb * c),
                _ => (a + c, bb + d),
            };
            out[0..8].copy_from_slice(&x.to_ne_bytes());
            out[8..16].copy_from_slice(&y.to_ne_bytes());
        }
        LongDouble => {
            let v = ld::binop(op, &rd(l, 0), &rd(r, 0));
            out[0..16].copy_from_slice(&v);
        }
        CLongDouble => {
            let (a, bb) = (rd::<16>(l, 0), rd::<16>(l, 16));
            let (c, d) = (rd::<16>(r, 0), rd::<16>(r, 16));
            let (x, y) = match op {
                Builtin::Prod => (
                    ld::sub(&ld::mul(&a, &c), &ld::mul(&bb, &d)),
                    ld::add(&ld::mul(&a, &d), &ld::mul(&bb, &c)),
                ),
                _ => (ld::add(&a, &c), ld::add(&bb, &d)),
            };
            out[0..16].copy_from_slice(&x);
            out[16..32].copy_from_slice(&y);
        }
        DoubleInt => {
            let lv = f64::from_ne_bytes(rd(l, 0));
            let rv = f64::from_ne_bytes(rd(r, 0));
            let (li, ri) = (i32::from_ne_bytes(rd(l, 8)), i32::from_ne_bytes(rd(r, 8)));
            pick(op, lv.partial_cmp(&rv), li, ri, l, r, 8, out);
        }
        LongInt => {
            let lv = i64::from_ne_bytes(rd(l, 0));
            let rv = i64::from_ne_bytes(rd(r, 0));
            let (li, ri) = (i32::from_ne_bytes(rd(l, 8)), i32::from_ne_bytes(rd(r, 8)));
            pick(op, lv.partial_cmp(&rv), li, ri, l, r, 8, out);
        }
        ShortInt => {
            let lv = i16::from_ne_bytes(rd(l, 0));
            let rv = i16::from_ne_bytes(rd(r, 0));
            let (li, ri) = (i32::from_ne_bytes(rd(l, 2)), i32::from_ne_bytes(rd(r, 2)));
            pick(op, lv.partial_cmp(&rv), li, ri, l, r, 2, out);
        }
        LongDoubleInt => {
            let ord = ld::cmp(&rd(l, 0), &rd(r, 0));
            let (li, ri) = (i32::from_ne_bytes(rd(l, 16)), i32::from_ne_bytes(rd(r, 16)));
            pick(op, ord, li, ri, l, r, 16, out);
        }
        // Types with a rankwire element type never get here (combine_core).
        _ => out.copy_from_slice(&r[..out.len()]),
    }
}

/// MINLOC/MAXLOC of one pair (MPI 4.1 §6.9.4): the winning value with its index; on a
/// tie the smaller index. `ord` compares the values (`None`: unordered, treated as a
/// tie). The index is the `int` at byte `at`.
#[allow(clippy::too_many_arguments)]
fn pick(
    op: Builtin,
    ord: Option<std::cmp::Ordering>,
    li: i32,
    ri: i32,
    l: &[u8],
    r: &[u8],
    at: usize,
    out: &mut [u8],
) {
    use std::cmp::Ordering::*;
    let want = if op == Builtin::MaxLoc { Greater } else { Less };
    match ord {
        Some(o) if o == want => out.copy_from_slice(&l[..out.len()]),
        Some(Equal) | None => {
            out.copy_from_slice(&l[..out.len()]);
            out[at..at + 4].copy_from_slice(&li.min(ri).to_ne_bytes());
        }
        Some(_) => out.copy_from_slice(&r[..out.len()]),
    }
}

/// x86-64 `long double` arithmetic on the x87 unit.
#[path = "op_ld.rs"]
pub mod ld;

/// `MPI_Op_create` (MPI 4.1 §6.9.5): a user operation; `commute != 0` declares it
/// commutative (the collectives then may combine in any order; otherwise in rank
/// order).
///
/// # Errors
/// `MPI_ERR_ARG` for a null function or `op` pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Op_create(
    user_fn: Option<MPI_User_function>,
    commute: c_int,
    op: *mut MPI_Op,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let f = user_fn.ok_or_else(|| {
            err(MPI_ERR_ARG, "op: MPI_Op_create with a null function; fix: pass the address of an MPI_User_function")
        })?;
        create(UserFn::Int(f), commute, op)
    })
}

/// `MPI_Op_create_c` (MPI 4.1 §6.9.5): as `MPI_Op_create` with an
/// `MPI_User_function_c` (its `len` is an `MPI_Count`).
///
/// # Errors
/// As `MPI_Op_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Op_create_c(
    user_fn: Option<MPI_User_function_c>,
    commute: c_int,
    op: *mut MPI_Op,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let f = user_fn.ok_or_else(|| {
            err(MPI_ERR_ARG, "op: MPI_Op_create_c with a null function; fix: pass the address of an MPI_User_function_c")
        })?;
        create(UserFn::Big(f), commute, op)
    })
}

fn create(f: UserFn, commute: c_int, op: *mut MPI_Op) -> R {
    if op.is_null() {
        return Err(err(
            MPI_ERR_ARG,
            "op: the MPI_Op pointer is null; fix: pass the address of an MPI_Op variable",
        ));
    }
    let h = OPS.insert(UserOp {
        f,
        commute: commute != 0,
    });
    // SAFETY: checked non-null; the caller's variable.
    unsafe { put(op, h, "op") }
}

/// `MPI_Op_free` (MPI 4.1 §6.9.5): frees a user operation and sets `*op` to
/// `MPI_OP_NULL`; reductions already started with it complete normally (they hold
/// their own reference).
///
/// # Errors
/// `MPI_ERR_OP` for a predefined operation, `MPI_OP_NULL` or an unknown handle;
/// `MPI_ERR_ARG` for a null pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Op_free(op: *mut MPI_Op) -> c_int {
    guard(MPI_COMM_SELF, || {
        if op.is_null() {
            return Err(err(MPI_ERR_ARG, "op: MPI_Op_free with a null pointer"));
        }
        // SAFETY: checked non-null.
        let h = unsafe { *op };
        if let Some(b) = Builtin::of(h) {
            return Err(err(
                MPI_ERR_OP,
                format!(
                    "op: {} is predefined and cannot be freed; fix: free only operations from MPI_Op_create",
                    b.name()
                ),
            ));
        }
        OPS.remove(h).ok_or_else(|| {
            err(
                MPI_ERR_OP,
                format!("op: {h:#x} is not a live user operation (MPI_OP_NULL, already freed, or not a handle of this library)"),
            )
        })?;
        // SAFETY: checked non-null.
        unsafe { *op = MPI_OP_NULL };
        Ok(())
    })
}

/// `MPI_Op_commutative` (MPI 4.1 §6.9.6): `*commute` = 1 for predefined operations and
/// user operations created commutative, else 0.
///
/// # Errors
/// `MPI_ERR_OP` for a bad handle; `MPI_ERR_ARG` for a null pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Op_commutative(op: MPI_Op, commute: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        let c = match lookup(op)? {
            Resolved::Builtin(_) => true,
            Resolved::User(u) => u.commute,
        };
        // SAFETY: the caller's pointer.
        unsafe { put(commute, c as c_int, "commute") }
    })
}

/// `MPI_Op_toint` (MPI 5.0 ABI, handle conversion for Fortran): the handle as an
/// `int` (predefined handles keep their ABI value; created ones fit in 31 bits). No
/// error is possible, so the body needs no error guard.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Op_toint(op: MPI_Op) -> c_int {
    op as c_int
}

/// `MPI_Op_fromint`: the handle of an `int` from `MPI_Op_toint` (a value that is not
/// one gives a handle that later calls reject with `MPI_ERR_OP`).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Op_fromint(op: c_int) -> MPI_Op {
    op as u32 as MPI_Op
}

/// `MPI_Reduce_local` (MPI 4.1 §6.9.7): `inoutbuf[i] = inbuf[i] ∘ inoutbuf[i]` for
/// `count` elements of `datatype`. Predefined operations run this module's combine on
/// the packed elements (any layout; device buffers staged through host memory); a
/// user function is called on the two buffers as they are (host memory), or on host
/// copies of device buffers.
///
/// # Errors
/// `MPI_ERR_OP` (bad operation, or not defined on the type), `MPI_ERR_TYPE`,
/// `MPI_ERR_COUNT`, `MPI_ERR_BUFFER` (null buffer with data).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        // SAFETY: the caller's buffers of `count` elements.
        unsafe { reduce_local(inbuf, inoutbuf, count as i64, datatype, op) }
    })
}

/// `MPI_Reduce_local_c`: as `MPI_Reduce_local` with an `MPI_Count` count.
///
/// # Errors
/// As `MPI_Reduce_local`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Reduce_local_c(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        // SAFETY: the caller's buffers of `count` elements.
        unsafe { reduce_local(inbuf, inoutbuf, count, datatype, op) }
    })
}

unsafe fn reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> R {
    let red = plan(op, dt)?;
    let n = crate::datatype::count(count)?;
    if n == 0 {
        return Ok(());
    }
    let bytes = n * red.ty.size;
    let host = !crate::buf::is_device(inbuf as *const u8, bytes)
        && !crate::buf::is_device(inoutbuf as *const u8, bytes);
    if let (Plan::User { op: u }, true) = (&red.plan, host) {
        // SAFETY: the caller's buffers hold `n` elements of `dt`.
        unsafe {
            u.call(
                inbuf as *const u8,
                inoutbuf as *mut u8,
                n,
                dt,
                red.ty.extent,
            )
        };
        return Ok(());
    }
    // SAFETY: the caller's buffers.
    let s = unsafe { crate::coll_buf::src(inbuf as *const u8, n, dt, false)? };
    // SAFETY: as above.
    let mut d = unsafe { crate::coll_buf::dst(inoutbuf as *mut u8, n, dt, true)? };
    // SAFETY: both are host byte ranges of `bytes` owned by s and d.
    let (sb, db) = unsafe { (s.bytes(), d.bytes_mut()) };
    crate::coll_red::combine_packed(&red, sb, db, n, true);
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_double_arithmetic_is_exact_extended() {
        let a = ld::from_f64(1.5);
        let b = ld::from_f64(2.25);
        assert_eq!(ld::to_f64(&ld::add(&a, &b)), 3.75);
        assert_eq!(ld::to_f64(&ld::mul(&a, &b)), 3.375);
        assert_eq!(ld::to_f64(&ld::sub(&a, &b)), -0.75);
        assert_eq!(ld::cmp(&a, &b), Some(std::cmp::Ordering::Less));
        assert_eq!(ld::cmp(&b, &a), Some(std::cmp::Ordering::Greater));
        assert_eq!(ld::cmp(&a, &a), Some(std::cmp::Ordering::Equal));
        // 1 + 2^-60 is exact in 80-bit (64-bit significand), not in f64.
        let one = ld::from_f64(1.0);
        let tiny = ld::from_f64(2f64.powi(-60));
        let s = ld::add(&one, &tiny);
        assert_ne!(s, one);
        assert_eq!(ld::to_f64(&ld::sub(&s, &one)), 2f64.powi(-60));
        assert_eq!(ld::to_f64(&ld::binop(Builtin::Max, &a, &b)), 2.25);
        assert_eq!(ld::to_f64(&ld::binop(Builtin::Min, &a, &b)), 1.5);
        let nan = ld::from_f64(f64::NAN);
        assert_eq!(ld::cmp(&nan, &a), None);
        assert_eq!(ld::to_f64(&ld::binop(Builtin::Max, &nan, &b)), 2.25);
    }

    #[test]
    fn pair_records_pick_value_then_smallest_index() {
        let rec = |v: f64, i: i32| {
            let mut r = [0u8; 12];
            r[..8].copy_from_slice(&v.to_ne_bytes());
            r[8..].copy_from_slice(&i.to_ne_bytes());
            r
        };
        let idx = |r: &[u8]| i32::from_ne_bytes(r[8..12].try_into().unwrap());
        let mut d = [rec(2.0, 5), rec(1.0, 7), rec(3.0, 9)].concat();
        let s = [rec(1.0, 3), rec(1.0, 2), rec(4.0, 1)].concat();
        combine_builtin(Basic::DoubleInt, Builtin::MinLoc, &s, &mut d, true);
        assert_eq!((idx(&d[0..]), idx(&d[12..]), idx(&d[24..])), (3, 2, 9));
        let mut d = [rec(2.0, 5), rec(1.0, 7), rec(3.0, 9)].concat();
        combine_builtin(Basic::DoubleInt, Builtin::MaxLoc, &s, &mut d, false);
        assert_eq!((idx(&d[0..]), idx(&d[12..]), idx(&d[24..])), (5, 2, 1));
        // MPI_SHORT_INT packed: short at 0, int at 2.
        let mut d = [3i16.to_ne_bytes().as_slice(), &40i32.to_ne_bytes()].concat();
        let s = [3i16.to_ne_bytes().as_slice(), &7i32.to_ne_bytes()].concat();
        combine_builtin(Basic::ShortInt, Builtin::MaxLoc, &s, &mut d, true);
        assert_eq!(i32::from_ne_bytes(d[2..6].try_into().unwrap()), 7);
    }

    #[test]
    fn the_table_of_valid_pairs() {
        assert!(Builtin::Sum.defined_on(Basic::C64));
        assert!(!Builtin::Max.defined_on(Basic::C64));
        assert!(!Builtin::Sum.defined_on(Basic::Bool));
        assert!(Builtin::Lxor.defined_on(Basic::Bool));
        assert!(Builtin::Band.defined_on(Basic::Byte));
        assert!(!Builtin::Sum.defined_on(Basic::Byte));
        assert!(!Builtin::Band.defined_on(Basic::F64));
        assert!(Builtin::MinLoc.defined_on(Basic::DoubleInt));
        assert!(!Builtin::MinLoc.defined_on(Basic::F64));
        assert!(!Builtin::Replace.defined_on(Basic::I32));
        let c = [1.0f64, 2.0, 3.0, -1.0]; // (1+2i), (3-i)
        let mut d: Vec<u8> = c[2..].iter().flat_map(|x| x.to_ne_bytes()).collect();
        let s: Vec<u8> = c[..2].iter().flat_map(|x| x.to_ne_bytes()).collect();
        combine_builtin(Basic::C64, Builtin::Prod, &s, &mut d, true);
        let re = f64::from_ne_bytes(d[..8].try_into().unwrap());
        let im = f64::from_ne_bytes(d[8..].try_into().unwrap());
        assert_eq!((re, im), (5.0, 5.0));
    }

    #[test]
    fn plans_and_mismatches() {
        let class = |op, dt| plan(op, dt).unwrap_err().class;
        assert_eq!(class(MPI_MAX, 0x216), MPI_ERR_OP, "no MAX on complex");
        assert_eq!(class(MPI_REPLACE, 0x209), MPI_ERR_OP);
        assert_eq!(class(MPI_NO_OP, 0x209), MPI_ERR_OP);
        assert_eq!(class(MPI_OP_NULL, 0x209), MPI_ERR_OP);
        assert_eq!(class(MPI_SUM, 0x238), MPI_ERR_OP, "no SUM on C bool");
        assert_eq!(class(MPI_MINLOC, 0x214), MPI_ERR_OP, "MINLOC needs a pair");
        assert_eq!(class(MPI_SUM, 0x200), MPI_ERR_TYPE);
        let p = |op, dt| plan(op, dt).unwrap().plan;
        assert!(matches!(p(MPI_SUM, 0x209), Plan::Core { .. }));
        assert!(matches!(p(MPI_LOR, 0x238), Plan::Core { .. }));
        assert!(matches!(p(MPI_BXOR, 0x247), Plan::Core { .. }));
        assert!(matches!(p(MPI_MINLOC, 0x228), Plan::Core { .. }));
        assert!(matches!(p(MPI_MINLOC, 0x229), Plan::Packed { .. }));
        assert!(matches!(p(MPI_PROD, 0x216), Plan::Packed { .. }));
        assert!(matches!(p(MPI_SUM, 0x220), Plan::Packed { .. }));
    }
}
