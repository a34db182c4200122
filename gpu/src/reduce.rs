//! Element-wise reduction kernels on device memory, compiled at run time with NVRTC.
//!
//! Two kernel forms. The two-operand form, `dst[i] = a[i] op b[i]` for `i < count`, where
//! `dst` may be the same address as `a` or `b` (the in-place form `dst op= src` is
//! `reduce(dst, dst, src)`), described below; and the rows form ([`reduce_rows_async`]),
//! `dst[i] = src[0][i] op … op src[rows−1][i]` with a wider accumulator for halves.
//! Every kernel is a grid-stride loop; when `dst`, `a` and `b` have the same offset
//! modulo 16 bytes (always, for allocations and element-aligned slices of them at equal
//! offsets) it peels the few leading elements, then moves 16 bytes per load and store
//! (`uint4`), then finishes the tail one element at a time; otherwise it runs the
//! scalar loop throughout. Any length and alignment works.
//!
//! # Semantics (shared with [`reduce_host`], the CPU reference)
//! - `sum`/`prod` of integers wrap (two's complement, computed in the unsigned type);
//!   `min`/`max` compare with `<`/`>` and return `b` when the comparison is false (so a
//!   NaN in `a` yields `b`); `band`/`bor`/`bxor` exist only for integer types.
//! - `f16` and `bf16` are loaded into `f32`, combined in `f32` and rounded once per
//!   combine back to the storage type (round to nearest even; NaN stays NaN). The
//!   conversions are the PTX `cvt` instructions for `f16` and bit operations for `bf16`,
//!   so the source needs no CUDA headers.
//! - `f32` and `f64` combine in their own type, with FMA contraction off (`--fmad=false`),
//!   so a kernel result equals the CPU reference bit for bit.
//!
//! # Cache
//! The first call for a (device, element type) compiles one NVRTC program holding the
//! kernels of every operation valid for that type (`--gpu-architecture=compute_XY` of the
//! device, PTX loaded with `cuModuleLoadData`) and keeps the functions for the process
//! lifetime; later calls for any op of that type are table lookups
//! ([`kernel_cache_stats`]).

use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::copy::Stream;
use crate::error::GpuError;
use crate::result::{self, DeviceAttr, RawFunction};

/// Element types the kernels reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE 754 binary16 (2 bytes).
    F16,
    /// bfloat16 (2 bytes: the upper half of an f32).
    BF16,
    /// IEEE 754 binary32 (4 bytes).
    F32,
    /// IEEE 754 binary64 (8 bytes).
    F64,
    /// Signed 8-bit integer (`MPI_INT8_T`, `MPI_SIGNED_CHAR`; `MPI_CHAR` in reductions).
    I8,
    /// Unsigned 8-bit integer (`MPI_UINT8_T`, `MPI_UNSIGNED_CHAR`, `MPI_BYTE`-sized).
    U8,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
}

impl DType {
    /// Every type, for tests and benchmarks.
    pub const ALL: [DType; 12] = [
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::I64,
        DType::U32,
        DType::U64,
    ];

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Lower-case name (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }

    /// C storage type, C accumulation type, C unsigned type of the same width.
    fn c_types(self) -> (&'static str, &'static str, &'static str) {
        match self {
            DType::F16 | DType::BF16 => ("unsigned short", "float", "unsigned short"),
            DType::F32 => ("float", "float", "unsigned int"),
            DType::F64 => ("double", "double", "unsigned long long"),
            // Narrow integers combine in 32 bits and are truncated when stored, which
            // wraps like the type itself (two's complement, modulo 2^8 or 2^16).
            DType::I8 => ("signed char", "int", "unsigned int"),
            DType::U8 => ("unsigned char", "unsigned int", "unsigned int"),
            DType::I16 => ("short", "int", "unsigned int"),
            DType::U16 => ("unsigned short", "unsigned int", "unsigned int"),
            DType::I32 => ("int", "int", "unsigned int"),
            DType::I64 => ("long long", "long long", "unsigned long long"),
            DType::U32 => ("unsigned int", "unsigned int", "unsigned int"),
            DType::U64 => (
                "unsigned long long",
                "unsigned long long",
                "unsigned long long",
            ),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reduction operations (the built-in MPI operations that apply to these types, MPI 4.1
/// §6.9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedOp {
    /// `a + b`.
    Sum,
    /// `a * b`.
    Prod,
    /// `a < b ? a : b`.
    Min,
    /// `a > b ? a : b`.
    Max,
    /// `a & b` (integers only).
    Band,
    /// `a | b` (integers only).
    Bor,
    /// `a ^ b` (integers only).
    Bxor,
}

impl RedOp {
    /// Every operation, for tests and benchmarks.
    pub const ALL: [RedOp; 7] = [
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Min,
        RedOp::Max,
        RedOp::Band,
        RedOp::Bor,
        RedOp::Bxor,
    ];

    /// Lower-case name, also the kernel's name suffix (`rw_reduce_sum`).
    pub fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Min => "min",
            RedOp::Max => "max",
            RedOp::Band => "band",
            RedOp::Bor => "bor",
            RedOp::Bxor => "bxor",
        }
    }

    /// Whether the op is defined for `dt` (bitwise ops: integer types only).
    pub fn valid_for(self, dt: DType) -> bool {
        !matches!(self, RedOp::Band | RedOp::Bor | RedOp::Bxor) || !dt.is_float()
    }

    /// The operations defined for `dt`.
    pub fn all_for(dt: DType) -> impl Iterator<Item = RedOp> {
        RedOp::ALL.into_iter().filter(move |op| op.valid_for(dt))
    }

    fn kernel_name(self) -> String {
        format!("rw_reduce_{}", self.name())
    }

    fn rows_kernel_name(self) -> String {
        format!("rw_reduce_rows_{}", self.name())
    }

    /// C expression of the op on accumulators `x` and `y` of type `A` (unsigned `U`).
    pub(crate) fn c_expr_for(self, dt: DType) -> &'static str {
        match (self, dt.is_float()) {
            (RedOp::Sum, true) => "x + y",
            (RedOp::Prod, true) => "x * y",
            (RedOp::Sum, false) => "(A)((U)x + (U)y)",
            (RedOp::Prod, false) => "(A)((U)x * (U)y)",
            (RedOp::Min, _) => "(x < y) ? x : y",
            (RedOp::Max, _) => "(x > y) ? x : y",
            (RedOp::Band, _) => "x & y",
            (RedOp::Bor, _) => "x | y",
            (RedOp::Bxor, _) => "x ^ y",
        }
    }
}

impl fmt::Display for RedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Type definitions shared by the kernels of `dt`: `T` (storage), `A` (accumulator),
/// `U` (unsigned of `T`'s width), `VEC` (elements per 16 bytes), and `ld`/`st`
/// converting between `T` and `A` (round to nearest even for `f16`/`bf16`).
pub(crate) fn type_prelude(dt: DType) -> String {
    let (t, a, u) = dt.c_types();
    let mut s = String::new();
    s.push_str(&format!(
        "// rankwire reduction kernels for {dt} (generated)\n\
         typedef {t} T;\ntypedef {a} A;\ntypedef {u} U;\n\
         #define VEC (16 / sizeof(T))\n"
    ));
    s.push_str(match dt {
        DType::F16 => {
            "__device__ __forceinline__ A ld(T v) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(v)); return f; }\n\
             __device__ __forceinline__ T st(A f) { unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
        }
        DType::BF16 => {
            "union rw_fu { float f; unsigned int u; };\n\
             __device__ __forceinline__ A ld(T v) { rw_fu c; c.u = ((unsigned int)v) << 16; return c.f; }\n\
             __device__ __forceinline__ T st(A f) {\n\
               rw_fu c; c.f = f; unsigned int u = c.u;\n\
               if ((u & 0x7fffffffu) > 0x7f800000u) return (T)((u >> 16) | 0x40u);\n\
               u += 0x7fffu + ((u >> 16) & 1u);\n\
               return (T)(u >> 16);\n\
             }\n"
        }
        _ => {
            "__device__ __forceinline__ A ld(T v) { return v; }\n\
             __device__ __forceinline__ T st(A v) { return v; }\n"
        }
    });
    s
}

/// The CUDA C++ source of the program for `dt`: one `extern "C"` kernel
/// `rw_reduce_<op>(T* dst, const T* a, const T* b, unsigned long long n)` per valid op.
/// Pure text, tested on machines without a GPU.
pub fn kernel_source(dt: DType) -> String {
    let mut s = type_prelude(dt);
    for op in RedOp::all_for(dt) {
        let name = op.kernel_name();
        let expr = op.c_expr_for(dt);
        let rows = op.rows_kernel_name();
        s.push_str(&format!(
            "__device__ __forceinline__ A comb_{op}(A x, A y) {{ return {expr}; }}\n\
             __device__ __forceinline__ T op_{op}(T p, T q) {{ return st(comb_{op}(ld(p), ld(q))); }}\n\
             extern \"C\" __global__ void {rows}(T* dst, const T* src, unsigned long long n, unsigned int nrows) {{\n\
             \x20 unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;\n\
             \x20 for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {{\n\
             \x20   A acc = ld(src[i]);\n\
             \x20   for (unsigned int r = 1; r < nrows; ++r) acc = comb_{op}(acc, ld(src[(unsigned long long)r * n + i]));\n\
             \x20   dst[i] = st(acc);\n\
             \x20 }}\n\
             }}\n\
             extern \"C\" __global__ void {name}(T* dst, const T* a, const T* b, unsigned long long n) {{\n\
             \x20 unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n\
             \x20 unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;\n\
             \x20 unsigned long long od = (unsigned long long)dst & 15, oa = (unsigned long long)a & 15, ob = (unsigned long long)b & 15;\n\
             \x20 unsigned long long head = n, nv = 0;\n\
             \x20 if (od == oa && od == ob && od % sizeof(T) == 0) {{\n\
             \x20   head = ((16 - od) & 15) / sizeof(T);\n\
             \x20   if (head > n) head = n;\n\
             \x20   nv = (n - head) / VEC;\n\
             \x20 }}\n\
             \x20 for (unsigned long long i = tid; i < head; i += stride) dst[i] = op_{op}(a[i], b[i]);\n\
             \x20 const uint4* va = (const uint4*)(a + head);\n\
             \x20 const uint4* vb = (const uint4*)(b + head);\n\
             \x20 uint4* vd = (uint4*)(dst + head);\n\
             \x20 for (unsigned long long i = tid; i < nv; i += stride) {{\n\
             \x20   uint4 x = va[i]; uint4 y = vb[i]; uint4 z;\n\
             \x20   const T* xs = (const T*)&x; const T* ys = (const T*)&y; T* zs = (T*)&z;\n\
             #pragma unroll\n\
             \x20   for (int k = 0; k < (int)VEC; ++k) zs[k] = op_{op}(xs[k], ys[k]);\n\
             \x20   vd[i] = z;\n\
             \x20 }}\n\
             \x20 for (unsigned long long i = head + nv * VEC + tid; i < n; i += stride) dst[i] = op_{op}(a[i], b[i]);\n\
             }}\n"
        ));
    }
    s
}

/// NVRTC options for a device of compute capability `major.minor`.
pub fn compile_options(major: i32, minor: i32) -> Vec<String> {
    vec![
        format!("--gpu-architecture=compute_{major}{minor}"),
        "--fmad=false".into(),
        "--std=c++17".into(),
    ]
}

/// Whether libnvrtc (needed to build the kernels) can be loaded in this process.
pub fn nvrtc_available() -> bool {
    result::nvrtc_present()
}

/// Threads per block of every launch.
pub const BLOCK: u32 = 256;

/// Number of blocks for `count` elements of `dt` on a device with `sms` multiprocessors:
/// enough for one thread per 16-byte vector, capped at 16 blocks per multiprocessor (the
/// grid-stride loop covers the rest); at least 1.
pub fn grid_size(dt: DType, count: usize, sms: u32) -> u32 {
    let per_vec = (16 / dt.size()).max(1);
    let work = count.div_ceil(per_vec).max(1);
    let blocks = work.div_ceil(BLOCK as usize);
    let cap = (sms.max(1) as usize).saturating_mul(16);
    blocks.min(cap).max(1) as u32
}

struct Loaded {
    /// Per op: the two-operand kernel and the rows kernel.
    funcs: Vec<(RedOp, RawFunction, RawFunction)>,
    sms: u32,
}

// SAFETY: a CUfunction is a process-wide handle into a loaded module that is never
// unloaded; the driver allows launching it from any thread.
unsafe impl Send for Loaded {}

static CACHE: Mutex<Option<HashMap<(i32, DType), Loaded>>> = Mutex::new(None);
static COMPILES: AtomicU64 = AtomicU64::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);

/// Kernel cache counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelCacheStats {
    /// NVRTC programs compiled and loaded (one per device and element type).
    pub compiles: u64,
    /// Launches that found their kernel already loaded.
    pub hits: u64,
}

/// The kernel cache's counters for this process.
pub fn kernel_cache_stats() -> KernelCacheStats {
    KernelCacheStats {
        compiles: COMPILES.load(Ordering::Relaxed),
        hits: HITS.load(Ordering::Relaxed),
    }
}

/// (two-operand kernel, rows kernel, multiprocessor count) of `op` on `dt`.
fn lookup(device: i32, dt: DType, op: RedOp) -> Result<(RawFunction, RawFunction, u32), GpuError> {
    let mut guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let table = guard.get_or_insert_with(HashMap::new);
    if let Some(l) = table.get(&(device, dt)) {
        HITS.fetch_add(1, Ordering::Relaxed);
        return l
            .funcs
            .iter()
            .find(|(o, _, _)| *o == op)
            .map(|&(_, f, r)| (f, r, l.sms))
            .ok_or(GpuError::Unsupported(
                crate::error::Unsupported::ReductionType,
            ));
    }
    let major = result::device_attribute(device, DeviceAttr::ComputeCapabilityMajor)?;
    let minor = result::device_attribute(device, DeviceAttr::ComputeCapabilityMinor)?;
    let sms = result::device_attribute(device, DeviceAttr::MultiprocessorCount)?.max(1) as u32;
    let ptx = result::nvrtc_compile(&kernel_source(dt), &compile_options(major, minor))?;
    let ops: Vec<RedOp> = RedOp::all_for(dt).collect();
    let names: Vec<String> = ops
        .iter()
        .flat_map(|o| [o.kernel_name(), o.rows_kernel_name()])
        .collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let funcs = result::module_load_functions(device, &ptx, &name_refs)?;
    COMPILES.fetch_add(1, Ordering::Relaxed);
    let loaded = Loaded {
        funcs: ops
            .into_iter()
            .zip(funcs.chunks_exact(2))
            .map(|(o, f)| (o, f[0], f[1]))
            .collect(),
        sms,
    };
    let found = loaded
        .funcs
        .iter()
        .find(|(o, _, _)| *o == op)
        .map(|&(_, f, r)| (f, r, sms));
    table.insert((device, dt), loaded);
    found.ok_or(GpuError::Unsupported(
        crate::error::Unsupported::ReductionType,
    ))
}

/// Compile (if needed) and load the kernels of `dt` on `device`, so the first
/// reduction does not pay for NVRTC.
///
/// # Errors
/// As [`reduce_async`].
pub fn prepare(device: i32, dt: DType) -> Result<(), GpuError> {
    result::ensure_init()?;
    lookup(device, dt, RedOp::Sum).map(|_| ())
}

/// Enqueue `dst[i] = a[i] op b[i]` for `i < count` (elements of `dt`) on `stream`,
/// whose device must hold all three ranges. `dst` may equal `a` or `b`; other overlaps
/// are not allowed. `count == 0` enqueues nothing.
///
/// # Safety
/// `dst`, `a` and `b` must be device (or managed) memory valid for `count` elements
/// until the enqueued work has completed, and nothing else may write them meanwhile.
///
/// # Errors
/// - [`GpuError::Unsupported`] (`ReductionType`): a bitwise op on a float type.
/// - [`GpuError::Nvrtc`]: libnvrtc missing or the compile failed (the log is included).
/// - [`GpuError::Driver`] from `cuModuleLoadData`, `cuModuleGetFunction` or
///   `cuLaunchKernel`; errors of the kernel itself appear at the stream's next
///   synchronize.
/// - As [`crate::init`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce_async(
    dt: DType,
    op: RedOp,
    dst: u64,
    a: u64,
    b: u64,
    count: usize,
    stream: &Stream,
) -> Result<(), GpuError> {
    if !op.valid_for(dt) {
        return Err(GpuError::Unsupported(
            crate::error::Unsupported::ReductionType,
        ));
    }
    if count == 0 {
        return Ok(());
    }
    result::ensure_init()?;
    let (f, _, sms) = lookup(stream.device(), dt, op)?;
    stream.bind()?;
    let (mut d, mut x, mut y, mut n) = (dst, a, b, count as u64);
    let mut params: [*mut c_void; 4] = [
        (&mut d as *mut u64).cast(),
        (&mut x as *mut u64).cast(),
        (&mut y as *mut u64).cast(),
        (&mut n as *mut u64).cast(),
    ];
    // SAFETY: four parameters of the kernel's types (three pointers, one u64 count);
    // the caller guarantees the ranges; the values are copied at launch.
    unsafe {
        result::launch_kernel(
            f,
            grid_size(dt, count, sms),
            BLOCK,
            stream.raw(),
            &mut params,
        )
    }
}

/// Enqueue `dst[i] = src[i] op src[count + i] op … op src[(rows − 1)·count + i]` for
/// `i < count` on `stream`: `rows` rows of `count` elements of `dt`, stored one after
/// the other at `src`, reduced in row order. The accumulator is the wider type for
/// `f16`/`bf16` (`f32`, one rounding at the end) and the element type otherwise.
/// `src` may be device memory or pinned host memory (`cuMemHostAlloc`, mapped into
/// the device's address space under unified addressing: the kernel reads it over the
/// bus, saving a copy for small inputs). `rows == 0` or `count == 0` enqueues nothing.
///
/// # Safety
/// `dst` (`count` elements, device memory) and `src` (`rows·count` elements) must be
/// valid until the enqueued work has completed and must not overlap; nothing else may
/// write them meanwhile.
///
/// # Errors
/// As [`reduce_async`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce_rows_async(
    dt: DType,
    op: RedOp,
    dst: u64,
    src: u64,
    count: usize,
    rows: u32,
    stream: &Stream,
) -> Result<(), GpuError> {
    if !op.valid_for(dt) {
        return Err(GpuError::Unsupported(
            crate::error::Unsupported::ReductionType,
        ));
    }
    if count == 0 || rows == 0 {
        return Ok(());
    }
    result::ensure_init()?;
    let (_, f, sms) = lookup(stream.device(), dt, op)?;
    stream.bind()?;
    let (mut d, mut s, mut n, mut r) = (dst, src, count as u64, rows);
    let mut params: [*mut c_void; 4] = [
        (&mut d as *mut u64).cast(),
        (&mut s as *mut u64).cast(),
        (&mut n as *mut u64).cast(),
        (&mut r as *mut u32).cast(),
    ];
    let grid = (count.div_ceil(BLOCK as usize).min(sms.max(1) as usize * 16)).max(1) as u32;
    // SAFETY: four parameters of the kernel's types (two pointers, u64, u32); the
    // caller guarantees the ranges; the values are copied at launch.
    unsafe { result::launch_kernel(f, grid, BLOCK, stream.raw(), &mut params) }
}

/// CPU reference of [`reduce_rows_async`]: `src` holds `rows` equal rows.
///
/// # Panics
/// As [`reduce_host`], or if `src.len()` is not a multiple of `rows`.
pub fn reduce_rows_host(dt: DType, op: RedOp, src: &[u8], rows: usize) -> Vec<u8> {
    assert!(
        rows > 0 && src.len().is_multiple_of(rows),
        "reduce_rows_host: bad rows"
    );
    let row = src.len() / rows;
    if matches!(dt, DType::F16 | DType::BF16) {
        // Accumulate in f32, round once.
        type Conv = (fn(u16) -> f32, fn(f32) -> u16);
        let (ld, st): Conv = if dt == DType::F16 {
            (f16_to_f32, f32_to_f16)
        } else {
            (bf16_to_f32, f32_to_bf16)
        };
        let at = |r: usize, i: usize| {
            ld(u16::from_le_bytes([
                src[r * row + 2 * i],
                src[r * row + 2 * i + 1],
            ]))
        };
        let mut out = Vec::with_capacity(row);
        for i in 0..row / 2 {
            let mut acc = at(0, i);
            for r in 1..rows {
                let y = at(r, i);
                acc = float_op(op, acc, y);
            }
            out.extend_from_slice(&st(acc).to_le_bytes());
        }
        return out;
    }
    let mut acc = src[..row].to_vec();
    for r in 1..rows {
        acc = reduce_host(dt, op, &acc, &src[r * row..(r + 1) * row]);
    }
    acc
}

/// The CPU reference of the kernels: `a[i] op b[i]` for byte slices holding elements of
/// `dt` (little-endian), with exactly the kernels' semantics (see the module doc).
///
/// # Panics
/// If the lengths differ or are not a multiple of the element size, or the op is not
/// valid for the type (test and reference code only).
pub fn reduce_host(dt: DType, op: RedOp, a: &[u8], b: &[u8]) -> Vec<u8> {
    assert_eq!(a.len(), b.len(), "reduce_host: lengths differ");
    assert_eq!(a.len() % dt.size(), 0, "reduce_host: partial element");
    assert!(op.valid_for(dt), "reduce_host: {op} undefined for {dt}");
    let mut out = Vec::with_capacity(a.len());
    macro_rules! int {
        ($t:ty) => {{
            for (x, y) in a
                .chunks_exact(size_of::<$t>())
                .zip(b.chunks_exact(size_of::<$t>()))
            {
                let x = <$t>::from_le_bytes(x.try_into().expect("chunk size"));
                let y = <$t>::from_le_bytes(y.try_into().expect("chunk size"));
                let z = match op {
                    RedOp::Sum => x.wrapping_add(y),
                    RedOp::Prod => x.wrapping_mul(y),
                    RedOp::Min => {
                        if x < y {
                            x
                        } else {
                            y
                        }
                    }
                    RedOp::Max => {
                        if x > y {
                            x
                        } else {
                            y
                        }
                    }
                    RedOp::Band => x & y,
                    RedOp::Bor => x | y,
                    RedOp::Bxor => x ^ y,
                };
                out.extend_from_slice(&z.to_le_bytes());
            }
        }};
    }
    macro_rules! float {
        ($t:ty, $ld:expr, $st:expr) => {{
            for (x, y) in a
                .chunks_exact(size_of::<$t>())
                .zip(b.chunks_exact(size_of::<$t>()))
            {
                let x = $ld(<$t>::from_le_bytes(x.try_into().expect("chunk size")));
                let y = $ld(<$t>::from_le_bytes(y.try_into().expect("chunk size")));
                out.extend_from_slice(&$st(float_op(op, x, y)).to_le_bytes());
            }
        }};
    }
    match dt {
        DType::I8 => int!(i8),
        DType::U8 => int!(u8),
        DType::I16 => int!(i16),
        DType::U16 => int!(u16),
        DType::I32 => int!(i32),
        DType::I64 => int!(i64),
        DType::U32 => int!(u32),
        DType::U64 => int!(u64),
        DType::F32 => float!(f32, |v: f32| v, |v: f32| v),
        DType::F64 => float!(f64, |v: f64| v, |v: f64| v),
        DType::F16 => float!(u16, f16_to_f32, f32_to_f16),
        DType::BF16 => float!(u16, bf16_to_f32, f32_to_bf16),
    }
    out
}

/// `x op y` for a floating-point op, as the kernels compute it (min/max return `y`
/// when the comparison is false).
fn float_op<T>(op: RedOp, x: T, y: T) -> T
where
    T: Copy + PartialOrd + std::ops::Add<Output = T> + std::ops::Mul<Output = T>,
{
    match op {
        RedOp::Sum => x + y,
        RedOp::Prod => x * y,
        RedOp::Min => {
            if x < y {
                x
            } else {
                y
            }
        }
        RedOp::Max => {
            if x > y {
                x
            } else {
                y
            }
        }
        _ => unreachable!("bitwise ops on floats are rejected by valid_for"),
    }
}

/// bfloat16 bits to f32 (exact).
pub fn bf16_to_f32(v: u16) -> f32 {
    f32::from_bits(u32::from(v) << 16)
}

/// f32 to bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN.
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// binary16 bits to f32 (exact; IEEE 754-2008 §3.6 encoding).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: value = m * 2^-24.
            let v = m as f32 * f32::from_bits(0x3380_0000); // 2^-24
            return if sign != 0 { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// f32 to binary16 bits, round to nearest even (what PTX `cvt.rn.f16.f32` does);
/// overflow gives infinity, NaN a quiet NaN.
pub fn f32_to_f16(f: f32) -> u16 {
    let u = f.to_bits();
    let sign = ((u >> 16) & 0x8000) as u16;
    let abs = u & 0x7fff_ffff;
    if abs > 0x7f80_0000 {
        return sign | 0x7e00 | ((abs >> 13) & 0x3ff) as u16;
    }
    if abs >= 0x477f_f000 {
        // >= 65520 rounds to infinity.
        return sign | 0x7c00;
    }
    if abs < 0x3880_0000 {
        // Below the smallest normal (2^-14): subnormal or zero, in units of 2^-24.
        let v = f32::from_bits(abs) * f32::from_bits(0x4b80_0000); // * 2^24
        // Round half to even, exact since v < 2^10.
        let r = v.round_ties_even() as u16;
        return sign | r;
    }
    let exp = (abs >> 23) as i32 - 127 + 15;
    let man = abs & 0x7f_ffff;
    let mut h = ((exp as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1) {
        h += 1;
    }
    sign | h as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_has_one_kernel_per_valid_op() {
        for dt in DType::ALL {
            let src = kernel_source(dt);
            for op in RedOp::ALL {
                let decl = format!("void rw_reduce_{}(T* dst", op.name());
                assert_eq!(src.contains(&decl), op.valid_for(dt), "{dt} {op}");
            }
            let (t, a, _) = dt.c_types();
            assert!(src.contains(&format!("typedef {t} T;")));
            assert!(src.contains(&format!("typedef {a} A;")));
            assert!(src.contains("uint4"), "vectorized path present");
            assert_eq!(src.matches('{').count(), src.matches('}').count(), "{dt}");
            assert_eq!(src.matches('(').count(), src.matches(')').count(), "{dt}");
        }
        assert!(kernel_source(DType::F16).contains("cvt.rn.f16.f32"));
        assert!(kernel_source(DType::BF16).contains("0x7fffu"));
        assert!(kernel_source(DType::I32).contains("(A)((U)x + (U)y)"));
    }

    #[test]
    fn options_and_grid() {
        assert_eq!(compile_options(9, 0)[0], "--gpu-architecture=compute_90");
        assert!(compile_options(9, 0).contains(&"--fmad=false".to_string()));
        assert_eq!(grid_size(DType::F32, 0, 132), 1);
        assert_eq!(grid_size(DType::F32, 4, 132), 1);
        assert_eq!(grid_size(DType::F32, 1024 * 4, 132), 4);
        assert_eq!(grid_size(DType::F32, 1 << 30, 132), 132 * 16);
        assert_eq!(grid_size(DType::F64, 2 * 256 + 1, 132), 2);
    }

    #[test]
    fn half_conversions_match_the_half_crate() {
        // Every f16 and bf16 bit pattern round-trips through f32.
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            let want = half::f16::from_bits(h).to_f32();
            assert!(
                f.to_bits() == want.to_bits() || (f.is_nan() && want.is_nan()),
                "{h:#x}"
            );
            if !f.is_nan() {
                assert_eq!(f32_to_f16(f), h, "{h:#x}");
            }
            let b = bf16_to_f32(h);
            let want = half::bf16::from_bits(h).to_f32();
            assert!(
                b.to_bits() == want.to_bits() || (b.is_nan() && want.is_nan()),
                "{h:#x}"
            );
            if !b.is_nan() {
                assert_eq!(f32_to_bf16(b), h);
            }
        }
        // Rounding of values between representable ones, against the half crate.
        let mut x: u32 = 0x1234_5678;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let f = f32::from_bits(x);
            if f.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16(f), half::f16::from_f32(f).to_bits(), "{f:e}");
            assert_eq!(f32_to_bf16(f), half::bf16::from_f32(f).to_bits(), "{f:e}");
        }
    }

    #[test]
    fn host_reference_semantics() {
        let le = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let a = le(&[i32::MAX, -3, 5, 0b1100]);
        let b = le(&[1, 7, -9, 0b1010]);
        assert_eq!(
            reduce_host(DType::I32, RedOp::Sum, &a, &b),
            le(&[i32::MIN, 4, -4, 0b10110])
        );
        assert_eq!(
            reduce_host(DType::I32, RedOp::Min, &a, &b),
            le(&[1, -3, -9, 0b1010])
        );
        assert_eq!(
            reduce_host(DType::I32, RedOp::Bxor, &a, &b)[12..],
            le(&[0b0110])[..]
        );
        let h = |v: &[f32]| {
            v.iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes())
                .collect::<Vec<u8>>()
        };
        assert_eq!(
            reduce_host(DType::BF16, RedOp::Sum, &h(&[1.0, 2.5]), &h(&[0.5, -2.5])),
            h(&[1.5, 0.0])
        );
        assert!(!RedOp::Band.valid_for(DType::F32));
        assert_eq!(RedOp::all_for(DType::F64).count(), 4);
        assert_eq!(RedOp::all_for(DType::U64).count(), 7);
    }

    #[test]
    fn without_gpu_reduce_is_an_error_not_a_panic() {
        if crate::init().is_ok() {
            println!("skipped: no-GPU reduce check: a GPU is present");
            return;
        }
        println!("skipped: GPU reduction kernels: no GPU here; checking the error path");
        let s = Stream::runtime(0);
        assert!(s.is_err());
        assert!(prepare(0, DType::F32).is_err());
    }
}
