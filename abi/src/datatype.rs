//! Datatypes (MPI 4.1 chapter 5): the predefined types of the standard ABI and derived
//! types, described by a *type map* flattened to byte segments.
//!
//! The message path sends bytes: a datatype whose `count` elements occupy one
//! contiguous run ([`TypeInfo::contiguous_span`]) is sent from (received into) the
//! user's buffer directly, any other is packed into a temporary buffer first (received
//! into one and unpacked at completion). Reductions need every element to be one
//! basic type ([`TypeInfo::basic`]).
//!
//! Derived types are laid out by `dtype_layout.rs`, built by `dtype_ctor.rs` (exported
//! as C functions, with commit and free, in `dtype_ctor_c.rs`), queried in
//! `dtype_query.rs` (extents, envelopes, names, counts) and packed in `dtype_pack.rs`. Predefined types
//! without a layout here (`MPI_2REAL`, `MPI_2DOUBLE_PRECISION`, `MPI_2INTEGER`,
//! `MPI_REAL2`, `MPI_COMPLEX4`, `MPI_INTEGER16`, `MPI_LOGICAL16`: no matching
//! [`Basic`] kind) are rejected with `MPI_ERR_TYPE` like an unknown handle.

use crate::consts::*;
use crate::error::{R, err};
use crate::handles::{Kind, Table};
use std::sync::{Arc, RwLock};

/// A basic (predefined, non-derived) element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basic {
    /// `MPI_CHAR`, `MPI_SIGNED_CHAR`, `MPI_INT8_T`, `MPI_INTEGER1`.
    I8,
    /// `MPI_SHORT`, `MPI_INT16_T`, `MPI_INTEGER2`.
    I16,
    /// `MPI_INT`, `MPI_INT32_T`, `MPI_INTEGER`, `MPI_INTEGER4`, `MPI_WCHAR`.
    I32,
    /// `MPI_LONG`, `MPI_LONG_LONG`, `MPI_INT64_T`, `MPI_AINT`, `MPI_COUNT`, `MPI_OFFSET`.
    I64,
    /// `MPI_UNSIGNED_CHAR`, `MPI_UINT8_T`.
    U8,
    /// `MPI_UNSIGNED_SHORT`, `MPI_UINT16_T`.
    U16,
    /// `MPI_UNSIGNED`, `MPI_UINT32_T`.
    U32,
    /// `MPI_UNSIGNED_LONG`, `MPI_UNSIGNED_LONG_LONG`, `MPI_UINT64_T`.
    U64,
    /// `MPI_FLOAT`, `MPI_REAL`, `MPI_REAL4`.
    F32,
    /// `MPI_DOUBLE`, `MPI_DOUBLE_PRECISION`, `MPI_REAL8`.
    F64,
    /// `MPI_LONG_DOUBLE`, `MPI_REAL16` (x86-64: 80-bit extended in 16 bytes).
    LongDouble,
    /// `MPI_C_BOOL`, `MPI_CXX_BOOL` (1 byte), `MPI_LOGICAL1`.
    Bool,
    /// `MPI_BYTE`, `MPI_PACKED`, `MPI_CHARACTER` (no arithmetic).
    Byte,
    /// `MPI_C_FLOAT_COMPLEX` & co (2 × f32).
    C32,
    /// `MPI_C_DOUBLE_COMPLEX` & co (2 × f64).
    C64,
    /// `MPI_C_LONG_DOUBLE_COMPLEX` (2 × long double).
    CLongDouble,
    /// `MPI_FLOAT_INT`: `struct { float; int; }` (8 bytes).
    FloatInt,
    /// `MPI_DOUBLE_INT`: `struct { double; int; }` (16 bytes with padding).
    DoubleInt,
    /// `MPI_LONG_INT`: `struct { long; int; }` (16 bytes).
    LongInt,
    /// `MPI_2INT`: `struct { int; int; }`.
    TwoInt,
    /// `MPI_SHORT_INT`: `struct { short; int; }` (8 bytes).
    ShortInt,
    /// `MPI_LONG_DOUBLE_INT`: `struct { long double; int; }` (32 bytes).
    LongDoubleInt,
}

impl Basic {
    /// Size in bytes (= extent for the predefined types; x86-64 Linux C ABI).
    pub fn size(self) -> usize {
        use Basic::*;
        match self {
            I8 | U8 | Bool | Byte => 1,
            I16 | U16 => 2,
            I32 | U32 | F32 => 4,
            I64 | U64 | F64 | C32 | FloatInt | TwoInt | ShortInt => 8,
            LongDouble | C64 | DoubleInt | LongInt => 16,
            CLongDouble | LongDoubleInt => 32,
        }
    }

    /// Bytes of data of a pair type (value + int, without the trailing padding
    /// that its extent has), else `size()`.
    pub fn data_size(self) -> usize {
        use Basic::*;
        match self {
            DoubleInt | LongInt => 12,
            ShortInt => 6,
            LongDoubleInt => 20,
            b => b.size(),
        }
    }

    /// Alignment in bytes (x86-64 Linux C ABI): the "epsilon" padding of
    /// `MPI_Type_create_struct` rounds the extent up to the largest of its members
    /// (MPI 4.1 §5.1.6).
    pub fn align(self) -> usize {
        use Basic::*;
        match self {
            I8 | U8 | Bool | Byte => 1,
            I16 | U16 => 2,
            I32 | U32 | F32 | C32 | FloatInt | TwoInt | ShortInt => 4,
            I64 | U64 | F64 | C64 | DoubleInt | LongInt => 8,
            LongDouble | CLongDouble | LongDoubleInt => 16,
        }
    }

    /// The basic elements one value of this kind counts as in `MPI_Get_elements`
    /// (MPI 4.1 §5.1.11): a pair type (`MPI_DOUBLE_INT`, ...) is two, its value and its
    /// index; every other kind is itself. Each component's data size is its `size()`.
    pub fn components(self) -> &'static [Basic] {
        use Basic::*;
        match self {
            FloatInt => &[F32, I32],
            DoubleInt => &[F64, I32],
            LongInt => &[I64, I32],
            TwoInt => &[I32, I32],
            ShortInt => &[I16, I32],
            LongDoubleInt => &[LongDouble, I32],
            I8 => &[I8],
            I16 => &[I16],
            I32 => &[I32],
            I64 => &[I64],
            U8 => &[U8],
            U16 => &[U16],
            U32 => &[U32],
            U64 => &[U64],
            F32 => &[F32],
            F64 => &[F64],
            LongDouble => &[LongDouble],
            Bool => &[Bool],
            Byte => &[Byte],
            C32 => &[C32],
            C64 => &[C64],
            CLongDouble => &[CLongDouble],
        }
    }

    /// The rankwire element type the built-in reductions run on, where one matches
    /// the C layout.
    pub fn core(self) -> Option<rankwire::Datatype> {
        use Basic::*;
        use rankwire::Datatype as D;
        Some(match self {
            I8 => D::I8,
            I16 => D::I16,
            I32 => D::I32,
            I64 => D::I64,
            U8 | Bool => D::U8,
            U16 => D::U16,
            U32 => D::U32,
            U64 => D::U64,
            F32 => D::F32,
            F64 => D::F64,
            FloatInt => D::LocF32,
            TwoInt => D::LocI32,
            _ => return None,
        })
    }
}

/// What `MPI_Type_get_envelope` / `MPI_Type_get_contents` report.
#[derive(Clone, Debug, Default)]
pub struct Envelope {
    /// `MPI_COMBINER_*`.
    pub combiner: i32,
    /// Integer arguments of the constructor.
    pub ints: Vec<i32>,
    /// Address arguments.
    pub aints: Vec<isize>,
    /// Large-count arguments (the `_c` constructors).
    pub counts: Vec<i64>,
    /// Datatype arguments, as the caller passed them.
    pub types: Vec<MPI_Datatype>,
    /// The layouts of `types` at construction (kept alive: the caller may free its
    /// handles; `MPI_Type_get_contents` returns new handles of the derived ones).
    pub inner: Vec<Arc<TypeInfo>>,
}

/// The layout of a datatype.
#[derive(Clone, Debug)]
pub struct TypeInfo {
    /// `MPI_Type_size`: bytes of data in one element.
    pub size: usize,
    /// Lower bound in bytes (`MPI_Type_get_extent`).
    pub lb: isize,
    /// Extent in bytes: the stride between consecutive elements.
    pub extent: isize,
    /// True lower bound (first byte of data), bytes.
    pub true_lb: isize,
    /// True extent (last byte of data + 1 - first), bytes.
    pub true_extent: isize,
    /// The data of one element: (displacement from the element's address in bytes,
    /// length in bytes), in type-map order, adjacent runs merged.
    pub segments: Vec<(isize, usize)>,
    /// The basic type every element consists of, if there is just one (reductions,
    /// `MPI_Get_elements`); `None` for mixed types.
    pub basic: Option<Basic>,
    /// Basic elements per element, as `MPI_Get_elements` counts them: the basic
    /// entries of the type map, a pair type (`MPI_DOUBLE_INT`, ...) counting two
    /// (its value and its index, as MPICH does), so `MPI_DOUBLE_INT` has 2.
    pub nbasic: usize,
    /// The basic entries of one element in type-map order as (kind, how many),
    /// consecutive entries of one kind merged; pair types appear as their
    /// [`Basic::components`]. `MPI_Get_elements` / `MPI_Status_set_elements` walk it for
    /// a partial element.
    pub runs: Vec<(Basic, usize)>,
    /// Alignment in bytes: the largest [`Basic::align`] of the entries (1 if none).
    pub align: usize,
    /// Predefined types cannot be freed and need no commit.
    pub predefined: bool,
    /// `MPI_Type_commit` was called (always true for predefined types).
    pub committed: bool,
    /// Name (`MPI_Type_get_name`).
    pub name: String,
    /// Constructor and arguments.
    pub envelope: Envelope,
}

impl TypeInfo {
    /// A predefined type of basic kind `b`.
    pub fn basic(b: Basic, name: &str) -> TypeInfo {
        let n = b.data_size();
        // MPI_SHORT_INT is {(short, 0), (int, 4)}: two runs around the padding.
        let (segments, true_extent) = if b == Basic::ShortInt {
            (vec![(0, 2), (4, 4)], 8)
        } else {
            (vec![(0, n)], n as isize)
        };
        TypeInfo {
            size: n,
            lb: 0,
            extent: b.size() as isize,
            true_lb: 0,
            true_extent,
            segments,
            basic: Some(b),
            nbasic: b.components().len(),
            runs: runs_of(b),
            align: b.align(),
            predefined: true,
            committed: true,
            name: name.to_string(),
            envelope: Envelope {
                combiner: MPI_COMBINER_NAMED,
                ..Default::default()
            },
        }
    }

    /// Basic elements (`MPI_Get_elements`, MPI 4.1 §5.1.11) in `bytes` bytes of data of
    /// this type: whole elements count `nbasic` each, a partial element the basic
    /// entries it holds completely. `None` (the caller reports `MPI_UNDEFINED`) when
    /// the data ends inside a basic entry. A type of size 0 gives 0.
    pub fn elements_in(&self, bytes: u64) -> Option<u64> {
        if self.size == 0 {
            return Some(0);
        }
        let size = self.size as u64;
        let mut n = (bytes / size).checked_mul(self.nbasic as u64)?;
        let mut rem = bytes % size;
        for &(b, k) in &self.runs {
            if rem == 0 {
                break;
            }
            let bs = b.size() as u64;
            let all = bs * k as u64;
            if rem >= all {
                n += k as u64;
                rem -= all;
            } else {
                n += rem / bs;
                rem %= bs;
                break;
            }
        }
        (rem == 0).then_some(n)
    }

    /// Bytes of data of `n` basic elements of this type (the inverse of
    /// [`TypeInfo::elements_in`], `MPI_Status_set_elements`); `None` on overflow or for
    /// `n > 0` with a type without basic entries.
    pub fn bytes_of_elements(&self, n: u64) -> Option<u64> {
        if n == 0 {
            return Some(0);
        }
        if self.nbasic == 0 {
            return None;
        }
        let per = self.nbasic as u64;
        let mut bytes = (n / per).checked_mul(self.size as u64)?;
        let mut rem = n % per;
        for &(b, k) in &self.runs {
            if rem == 0 {
                break;
            }
            let take = rem.min(k as u64);
            bytes = bytes.checked_add(take * b.size() as u64)?;
            rem -= take;
        }
        Some(bytes)
    }

    /// If `count` elements occupy one contiguous run of bytes: (its offset from the
    /// buffer address, its length in bytes). Then the buffer is sent or received in
    /// place, without packing.
    pub fn contiguous_span(&self, count: usize) -> Option<(isize, usize)> {
        if count == 0 || self.size == 0 {
            return Some((0, 0));
        }
        match self.segments.as_slice() {
            [(off, len)] if count == 1 || *len as isize == self.extent => Some((*off, count * len)),
            _ => None,
        }
    }

    /// Packs `count` elements starting at `src` into `dst` (`count * size` bytes).
    ///
    /// # Safety
    /// Every byte of the type map of the `count` elements at `src` must be readable
    /// host memory.
    pub unsafe fn pack(&self, count: usize, src: *const u8, dst: &mut [u8]) {
        let mut o = 0;
        for i in 0..count {
            let base = i as isize * self.extent;
            for &(d, l) in &self.segments {
                // SAFETY: caller's contract; dst has count*size bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.offset(base + d),
                        dst[o..o + l].as_mut_ptr(),
                        l,
                    )
                };
                o += l;
            }
        }
    }

    /// Unpacks `src` (packed data of up to `count` elements; may be shorter after a
    /// short receive: only the bytes present are written) into the elements at `dst`.
    ///
    /// # Safety
    /// Every byte of the type map of the `count` elements at `dst` must be writable
    /// host memory.
    pub unsafe fn unpack(&self, count: usize, src: &[u8], dst: *mut u8) {
        let mut o = 0;
        'outer: for i in 0..count {
            let base = i as isize * self.extent;
            for &(d, l) in &self.segments {
                if o >= src.len() {
                    break 'outer;
                }
                let n = l.min(src.len() - o);
                // SAFETY: caller's contract.
                unsafe {
                    std::ptr::copy_nonoverlapping(src[o..o + n].as_ptr(), dst.offset(base + d), n)
                };
                o += n;
            }
        }
    }
}

/// The [`TypeInfo::runs`] of one value of basic kind `b`.
pub fn runs_of(b: Basic) -> Vec<(Basic, usize)> {
    let mut v: Vec<(Basic, usize)> = Vec::new();
    for &c in b.components() {
        match v.last_mut() {
            Some((k, n)) if *k == c => *n += 1,
            _ => v.push((c, 1)),
        }
    }
    v
}

/// Created (derived) datatypes.
pub static TYPES: Table<TypeInfo> = Table::new(Kind::Datatype);

/// The predefined type of handle `dt`, if it is one.
pub fn predefined(dt: MPI_Datatype) -> Option<(Basic, &'static str)> {
    use Basic::*;
    Some(match dt {
        0x201 => (I64, "MPI_AINT"),
        0x202 => (I64, "MPI_COUNT"),
        0x203 => (I64, "MPI_OFFSET"),
        0x207 => (Byte, "MPI_PACKED"),
        0x208 => (I16, "MPI_SHORT"),
        0x209 => (I32, "MPI_INT"),
        0x20a => (I64, "MPI_LONG"),
        0x20b => (I64, "MPI_LONG_LONG"),
        0x20c => (U16, "MPI_UNSIGNED_SHORT"),
        0x20d => (U32, "MPI_UNSIGNED"),
        0x20e => (U64, "MPI_UNSIGNED_LONG"),
        0x20f => (U64, "MPI_UNSIGNED_LONG_LONG"),
        0x210 => (F32, "MPI_FLOAT"),
        0x212 => (C32, "MPI_C_FLOAT_COMPLEX"),
        0x213 => (C32, "MPI_CXX_FLOAT_COMPLEX"),
        0x214 => (F64, "MPI_DOUBLE"),
        0x216 => (C64, "MPI_C_DOUBLE_COMPLEX"),
        0x217 => (C64, "MPI_CXX_DOUBLE_COMPLEX"),
        0x218 => (I32, "MPI_LOGICAL"),
        0x219 => (I32, "MPI_INTEGER"),
        0x21a => (F32, "MPI_REAL"),
        0x21b => (C32, "MPI_COMPLEX"),
        0x21c => (F64, "MPI_DOUBLE_PRECISION"),
        0x21d => (C64, "MPI_DOUBLE_COMPLEX"),
        0x21e => (Byte, "MPI_CHARACTER"),
        0x220 => (LongDouble, "MPI_LONG_DOUBLE"),
        0x224 => (CLongDouble, "MPI_C_LONG_DOUBLE_COMPLEX"),
        0x225 => (CLongDouble, "MPI_CXX_LONG_DOUBLE_COMPLEX"),
        0x228 => (FloatInt, "MPI_FLOAT_INT"),
        0x229 => (DoubleInt, "MPI_DOUBLE_INT"),
        0x22a => (LongInt, "MPI_LONG_INT"),
        0x22b => (TwoInt, "MPI_2INT"),
        0x22c => (ShortInt, "MPI_SHORT_INT"),
        0x22d => (LongDoubleInt, "MPI_LONG_DOUBLE_INT"),
        0x238 => (Bool, "MPI_C_BOOL"),
        0x239 => (Bool, "MPI_CXX_BOOL"),
        0x23c => (I32, "MPI_WCHAR"),
        0x240 => (I8, "MPI_INT8_T"),
        0x241 => (U8, "MPI_UINT8_T"),
        0x243 => (I8, "MPI_CHAR"),
        0x244 => (I8, "MPI_SIGNED_CHAR"),
        0x245 => (U8, "MPI_UNSIGNED_CHAR"),
        0x247 => (Byte, "MPI_BYTE"),
        0x248 => (I16, "MPI_INT16_T"),
        0x249 => (U16, "MPI_UINT16_T"),
        0x250 => (I32, "MPI_INT32_T"),
        0x251 => (U32, "MPI_UINT32_T"),
        0x258 => (I64, "MPI_INT64_T"),
        0x259 => (U64, "MPI_UINT64_T"),
        0x2c0 => (Bool, "MPI_LOGICAL1"),
        0x2c1 => (I8, "MPI_INTEGER1"),
        0x2c9 => (I16, "MPI_INTEGER2"),
        0x2d0 => (I32, "MPI_LOGICAL4"),
        0x2d1 => (I32, "MPI_INTEGER4"),
        0x2d2 => (F32, "MPI_REAL4"),
        0x2d8 => (I64, "MPI_LOGICAL8"),
        0x2d9 => (I64, "MPI_INTEGER8"),
        0x2da => (F64, "MPI_REAL8"),
        0x2db => (C32, "MPI_COMPLEX8"),
        0x2e2 => (LongDouble, "MPI_REAL16"),
        0x2e3 => (C64, "MPI_COMPLEX16"),
        0x2eb => (CLongDouble, "MPI_COMPLEX32"),
        0x2c8 => (I16, "MPI_LOGICAL2"),
        _ => return None,
    })
}

/// The layout of datatype `dt`, predefined or created.
///
/// # Errors
/// `MPI_ERR_TYPE` for `MPI_DATATYPE_NULL`, a freed or unknown handle.
pub fn info(dt: MPI_Datatype) -> R<Arc<TypeInfo>> {
    if let Some((b, name)) = predefined(dt) {
        return Ok(predefined_info(dt, b, name));
    }
    TYPES.get(dt).ok_or_else(|| {
        err(
            MPI_ERR_TYPE,
            format!(
                "datatype {dt:#x} is not a datatype (MPI_DATATYPE_NULL, freed, or not a handle of this library); fix: pass a predefined MPI_* type or one from MPI_Type_* constructors"
            ),
        )
    })
}

/// The layout of `dt` for a communication call: as [`info`], and it must be committed.
///
/// # Errors
/// As [`info`]; `MPI_ERR_TYPE` for a type that was not committed.
pub fn for_comm(dt: MPI_Datatype) -> R<Arc<TypeInfo>> {
    let t = info(dt)?;
    if !t.committed {
        return Err(err(
            MPI_ERR_TYPE,
            format!(
                "datatype {dt:#x} ({}) is not committed; fix: call MPI_Type_commit before using it in communication",
                t.name
            ),
        ));
    }
    Ok(t)
}

/// The layouts of the predefined types (handles `0x200..0x300`), built on first use
/// and shared, so that the lookup on every communication call is a read lock and a
/// reference count. `MPI_Type_set_name` on a predefined type replaces its entry
/// (MPI 4.1 §7.8 allows renaming predefined types).
static PREDEFINED: RwLock<[Option<Arc<TypeInfo>>; 256]> = RwLock::new([const { None }; 256]);

fn predefined_info(dt: MPI_Datatype, b: Basic, name: &str) -> Arc<TypeInfo> {
    let i = dt - 0x200;
    {
        let g = PREDEFINED.read().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = &g[i] {
            return t.clone();
        }
    }
    let mut g = PREDEFINED.write().unwrap_or_else(|e| e.into_inner());
    g[i].get_or_insert_with(|| Arc::new(TypeInfo::basic(b, name)))
        .clone()
}

/// Element size in bytes of predefined type `dt` when `n` elements of it are always
/// `n * size` contiguous bytes at the buffer's address (every predefined type but the
/// pair types of `MPI_MINLOC`/`MPI_MAXLOC` and the like); `None` otherwise, and for
/// created types. The hot path of every communication call: one relaxed load once the
/// type has been seen, no lock or reference count (the layout of a predefined type
/// never changes; renaming it does not touch the layout).
#[inline]
pub fn contiguous_predefined(dt: MPI_Datatype) -> Option<usize> {
    let i = dt.wrapping_sub(0x200);
    if i >= 256 {
        return None;
    }
    match CONTIGUOUS_SIZES[i].load(std::sync::atomic::Ordering::Relaxed) {
        0 => contiguous_predefined_first(dt, i),
        usize::MAX => None,
        size => Some(size),
    }
}

/// Per predefined handle (`dt - 0x200`): 0 = not looked at yet, `usize::MAX` = not
/// contiguous, otherwise the element size.
static CONTIGUOUS_SIZES: [std::sync::atomic::AtomicUsize; 256] =
    [const { std::sync::atomic::AtomicUsize::new(0) }; 256];

/// [`contiguous_predefined`] the first time a handle is seen: its layout built and the
/// answer kept.
#[cold]
fn contiguous_predefined_first(dt: MPI_Datatype, i: usize) -> Option<usize> {
    let (b, name) = predefined(dt)?;
    let t = predefined_info(dt, b, name);
    let contiguous =
        t.size > 0 && t.extent == t.size as isize && t.contiguous_span(2) == Some((0, 2 * t.size));
    let v = if contiguous { t.size } else { usize::MAX };
    CONTIGUOUS_SIZES[i].store(v, std::sync::atomic::Ordering::Relaxed);
    contiguous.then_some(v)
}

/// Renames predefined type `dt` (`MPI_Type_set_name`); other handles are ignored.
pub fn set_predefined_name(dt: MPI_Datatype, name: String) {
    let Some((b, n)) = predefined(dt) else {
        return;
    };
    let mut t = (*predefined_info(dt, b, n)).clone();
    t.name = name;
    let mut g = PREDEFINED.write().unwrap_or_else(|e| e.into_inner());
    g[dt - 0x200] = Some(Arc::new(t));
}

/// A count argument as `usize`.
///
/// # Errors
/// `MPI_ERR_COUNT` for a negative count.
pub fn count(c: i64) -> R<usize> {
    usize::try_from(c).map_err(|_| {
        err(
            MPI_ERR_COUNT,
            format!("count {c} is negative; fix: pass a count >= 0"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predefined_sizes_follow_the_c_abi() {
        assert_eq!(info(0x209).unwrap().size, 4);
        assert_eq!(info(0x229).unwrap().extent, 16);
        assert_eq!(info(0x229).unwrap().size, 12);
        assert!(info(0x200).is_err());
        assert_eq!(info(0x214).unwrap().contiguous_span(10), Some((0, 80)));
        assert_eq!(info(0x229).unwrap().contiguous_span(2), None);
    }

    #[test]
    fn pair_types_count_two_basic_elements() {
        let di = info(0x229).unwrap(); // MPI_DOUBLE_INT: 12 bytes of data, extent 16
        assert_eq!(di.nbasic, 2);
        assert_eq!(di.runs, vec![(Basic::F64, 1), (Basic::I32, 1)]);
        assert_eq!(di.elements_in(12), Some(2));
        assert_eq!(di.elements_in(20), Some(3));
        assert_eq!(di.elements_in(22), None, "ends inside the int");
        assert_eq!(di.bytes_of_elements(3), Some(20));
        let ti = info(0x22b).unwrap(); // MPI_2INT
        assert_eq!(ti.runs, vec![(Basic::I32, 2)]);
        assert_eq!(ti.elements_in(12), Some(3));
        assert_eq!(info(0x209).unwrap().bytes_of_elements(u64::MAX), None);
    }

    #[test]
    fn predefined_layouts_are_shared_and_renamable() {
        let a = info(0x2e3).unwrap(); // MPI_COMPLEX16
        assert_eq!((a.size, a.basic), (16, Some(Basic::C64)));
        assert!(Arc::ptr_eq(&a, &info(0x2e3).unwrap()));
        set_predefined_name(0x2eb, "quad complex".into());
        assert_eq!(info(0x2eb).unwrap().name, "quad complex");
        assert_eq!(info(0x2eb).unwrap().size, 32);
    }
}
