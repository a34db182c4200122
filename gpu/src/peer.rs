//! Peer-memory collective kernels: each rank's kernel reads (and for some modes
//! writes) the other ranks' device buffers directly, through CUDA IPC mappings (ranks
//! on one GPU) or peer access (ranks on GPUs with NVLink/PCIe P2P), and synchronizes
//! with them through flags in device memory: no host round trip per step.
//!
//! # Protocol (one launch = one collective call)
//! Every rank owns a [`PeerWorkspace`]: a flag area, two control words and two
//! scratch slots, in one `cuMemAlloc` allocation that the other ranks map once per
//! communicator. A launch of `nblk` blocks on rank `me`:
//! 1. reads the epoch `e = ctrl[0] + 1` (device-resident, so a launch captured in a
//!    CUDA graph stays correct on replay);
//! 2. optionally copies the local input into its scratch slot `e mod 2`
//!    (`src`/`src_bytes`, the small-message form);
//! 3. entry barrier: every thread fences its writes (`__threadfence`; `__threadfence_system` when peers are on other GPUs), then
//!    block `b` stores `e` into `flags[0][me][b]` of every rank's workspace (its own
//!    included: blocks of one rank may read what another block copied into the slot)
//!    and waits until its own `flags[0][j][b']` ≥ `e` for every rank `j` and every
//!    block `b'`. After it, every rank has entered this call (so its stream's earlier
//!    work, which produced its input, has finished) and has finished the previous call;
//! 4. the work ([`PeerMode`]), reading peers' memory with L2-only loads (`ld.global.cg`);
//! 5. optionally (when peers read or write the user's own buffers) an exit barrier on
//!    `flags[1]`, so the call ends only when no peer touches this rank's buffers;
//! 6. the last block to finish stores `ctrl[0] = e`.
//!
//! Why two scratch slots suffice without an exit barrier: a rank writes slot `e mod
//! 2` again only in call `e + 2`, after it saw every peer enter call `e + 1`, hence
//! finish call `e`, the last one that read that slot.
//!
//! This is the structure of NCCL's and the inference stacks' custom all-reduces
//! (flags in peer memory, epoch counters, one-shot and two-shot); the code is ours.
//!
//! # Waiting
//! Spinning blocks must be resident together with the peers' blocks they wait for:
//! [`peer_blocks`] keeps the grid small enough for every rank on a GPU to be
//! resident at once. A barrier that waits longer than `timeout_ns` stores an error
//! code into the host-mapped status word ([`PeerWorkspace::status`]) and the kernel
//! ends; the host reports it ([`decode_status`]).
//!
//! # Completion seen by the host
//! The last block of a launch to finish stores the launch's epoch into a second
//! host-mapped word ([`PeerWorkspace::done_word`]) after a system-scope fence, so a
//! host that waits for a launch reads its own memory instead of calling
//! `cuStreamQuery` (1.3 µs per call on an H100; a host-mapped flag written by the
//! kernel was seen ~1.4 µs earlier than a stream query in
//! `benches/results/gpu-2026-12-06-h100/floors/`).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crate::buffer::{DeviceBuffer, PinnedBuffer};
use crate::copy::Stream;
use crate::error::GpuError;
use crate::reduce::{DType, RedOp};
use crate::result::{self, DeviceAttr, RawFunction};

/// Most ranks one peer-memory collective spans (the kernel's argument arrays).
pub const MAX_PEERS: usize = 32;
/// Most blocks of one launch (the flag area has one flag per block).
pub const MAX_BLOCKS: u32 = 128;
/// Threads per block.
pub const PEER_THREADS: u32 = 512;
/// Bytes of the flag area at the start of a workspace: 2 phases × [`MAX_PEERS`] ×
/// [`MAX_BLOCKS`] flags of 4 bytes.
pub const FLAG_BYTES: usize = 2 * MAX_PEERS * MAX_BLOCKS as usize * 4;
/// Bytes of the control words after the flag area (epoch, finished-block counter,
/// padded to keep the slots 256-byte aligned).
pub const CTRL_BYTES: usize = 256;

/// Index (in `u32` words) of the done word in the host-mapped status buffer: the
/// epoch of the last launch that finished (word 0 is the status word).
const DONE_WORD: usize = 2;

/// What a launch does between its barriers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerMode {
    /// For elements `lo..hi` (of the kernel's type): `acc = in[0][i] ∘ in[1][i] ∘ … ∘
    /// in[p−1][i]` (rank order, the wider type for `f16`/`bf16`, one rounding), stored
    /// to `out[k][i − out_sub]` for every `k < nout`. One-shot allreduce (own range =
    /// all, `out` = own), two-shot allreduce (own range = shard, `out` = every rank's
    /// output), reduce-scatter (own block, `out_sub = lo`), reduce (`out` = root's).
    Reduce,
    /// Bytes: for every rank `j` with `in[j] != 0`, `seg` bytes from `in[j]` to
    /// `out[0] + j·stride`. Allgather (`stride = seg`), bcast (only the root's input,
    /// `stride = 0`).
    Gather,
}

/// The kernel's argument, passed by value (`#[repr(C)]`, laid out as the CUDA
/// `struct PeerArgs` of [`peer_kernel_source`]). Addresses are device addresses in
/// the launching process (peers' buffers as mapped there); sizes in bytes unless
/// said otherwise.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PeerArgs {
    /// Rank `j`'s input (0: none). With `slot_bytes > 0`, the base of rank `j`'s
    /// scratch slots; the kernel adds `(epoch mod 2) · slot_bytes`.
    pub input: [u64; MAX_PEERS],
    /// Outputs, `nout` of them, compact ([`PeerMode`] says how they are used).
    pub out: [u64; MAX_PEERS],
    /// Rank `j`'s flag area (its workspace base) as mapped here.
    pub flags: [u64; MAX_PEERS],
    /// Local input copied to `input[me]` (slot of this epoch) before the entry
    /// barrier; 0: none.
    pub src: u64,
    /// Bytes copied from `src`.
    pub src_bytes: u64,
    /// This rank's control words (device memory, in its workspace).
    pub ctrl: u64,
    /// Host-mapped `u32` status word of this rank (0 = no error).
    pub status: u64,
    /// Barrier wait bound in nanoseconds (`%globaltimer`); 0: wait forever.
    pub timeout_ns: u64,
    /// [`PeerMode::Reduce`]: first element this rank combines.
    pub lo: u64,
    /// [`PeerMode::Reduce`]: one past the last element this rank combines.
    pub hi: u64,
    /// [`PeerMode::Reduce`]: subtracted from an element index for the output offset.
    pub out_sub: u64,
    /// [`PeerMode::Gather`]: bytes per rank.
    pub seg: u64,
    /// [`PeerMode::Gather`]: output offset step per rank, bytes.
    pub stride: u64,
    /// Bytes of one scratch slot, when inputs are scratch slots; else 0.
    pub slot_bytes: u64,
    /// Ranks.
    pub p: u32,
    /// This rank.
    pub me: u32,
    /// Entries of `out` in use.
    pub nout: u32,
    /// 1: run the exit barrier (peers touch this rank's own buffers).
    pub exit_barrier: u32,
    /// 1: fence at system scope (`__threadfence_system`: peers on other GPUs); 0:
    /// device scope (`__threadfence`: every rank on this GPU).
    pub sys_fence: u32,
    /// The call's fingerprint (collective, sizes, root; never 0), or 0: no check.
    /// Block 0 publishes it in this rank's control words (word `2 + e mod 2`) before
    /// the entry barrier; after the barrier every rank compares every peer's with its
    /// own, and on a difference stores status `0x200 | rank` and skips the work on
    /// every rank alike (ranks whose calls disagree, e.g. in count or root, would
    /// otherwise read bytes a peer never wrote). Also keeps the struct a multiple of 8
    /// bytes in both languages.
    pub check: u32,
}

impl PeerArgs {
    /// All zero: no inputs, no outputs.
    pub fn zeroed() -> PeerArgs {
        PeerArgs {
            input: [0; MAX_PEERS],
            out: [0; MAX_PEERS],
            flags: [0; MAX_PEERS],
            src: 0,
            src_bytes: 0,
            ctrl: 0,
            status: 0,
            timeout_ns: 0,
            lo: 0,
            hi: 0,
            out_sub: 0,
            seg: 0,
            stride: 0,
            slot_bytes: 0,
            p: 0,
            me: 0,
            nout: 0,
            exit_barrier: 0,
            sys_fence: 1,
            check: 0,
        }
    }
}

/// Blocks of a launch moving `bytes` per rank when `sharing` ranks (≥ 1) use one GPU
/// of `sms` multiprocessors: one block per 64 KiB, at most [`MAX_BLOCKS`], and at most
/// `2·sms / sharing` so that every sharing rank's blocks (512 threads: up to 4 per
/// multiprocessor) are resident at once — spinning blocks that waited for a block
/// that cannot be scheduled would wait until the timeout. At least 1. Every rank must
/// pass the same values (the barriers wait for every peer block).
pub fn peer_blocks(bytes: usize, sharing: usize, sms: u32) -> u32 {
    let want = bytes.div_ceil(64 << 10).max(1);
    let cap = ((2 * sms.max(1) as usize) / sharing.max(1)).max(1);
    want.min(cap).min(MAX_BLOCKS as usize) as u32
}

/// Status codes the kernel stores: `0x100 | phase << 6 | rank` for a barrier
/// timeout waiting for `rank` (phase 0 entry, 1 exit); `0x200 | rank` when `rank`'s
/// call has another fingerprint ([`PeerArgs::check`]).
pub fn decode_status(code: u32) -> Option<String> {
    if code == 0 {
        return None;
    }
    if code & !0x1ff == 0 && code & 0x100 != 0 {
        let phase = if code & 0x40 != 0 { "exit" } else { "entry" };
        let rank = code & 0x3f;
        return Some(format!(
            "timed out at the {phase} barrier waiting for rank {rank} (it did not reach \
             the same collective: mismatched calls, or it stopped)"
        ));
    }
    if code & !0x3f == 0x200 {
        return Some(format!(
            "rank {} called this collective with other arguments than this rank \
             (another collective, element count, type size or root; every rank of a \
             collective, and both ranks of a device channel's send and receive, must \
             pass the same)",
            code & 0x3f
        ));
    }
    Some(format!("unknown device status {code:#x}"))
}

/// The CUDA C++ source of the peer-memory kernels: with `Some(dt)`, one
/// `rw_peer_<op>(PeerArgs)` reduction kernel per valid op of `dt`; with `None`, the
/// byte-moving `rw_peer_copy(PeerArgs)`. Pure text, tested without a GPU.
pub fn peer_kernel_source(dt: Option<DType>) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "// rankwire peer-memory collective kernels (generated)\n\
         typedef unsigned long long u64;\ntypedef unsigned int u32;\n\
         #define MAXP {MAX_PEERS}\n#define MAXB {MAX_BLOCKS}\n#define FLAGB {FLAG_BYTES}\n\
         #define DONEW {DONE_WORD}\n"
    ));
    s.push_str(PRELUDE);
    match dt {
        None => s.push_str(&kernel_wrapper(
            "rw_peer_copy",
            "work_gather(a, e, tid, nth);",
        )),
        Some(dt) => {
            s.push_str(&crate::reduce::type_prelude(dt));
            for op in RedOp::all_for(dt) {
                s.push_str(&format!(
                    "__device__ __forceinline__ A comb_{op}(A x, A y) {{ return {}; }}\n",
                    op.c_expr_for(dt)
                ));
                s.push_str(&REDUCE_WORK.replace("OPNAME", op.name()));
                s.push_str(&kernel_wrapper(
                    &format!("rw_peer_{op}"),
                    &format!("work_reduce_{op}(a, e, tid, nth);"),
                ));
            }
        }
    }
    s
}

fn kernel_wrapper(name: &str, work: &str) -> String {
    format!(
        "extern \"C\" __global__ void __launch_bounds__({PEER_THREADS}) {name}(PeerArgs a) {{\n\
         \x20 volatile u32* ctrl = (volatile u32*)a.ctrl;\n\
         \x20 u32 e = ctrl[0] + 1u;\n\
         \x20 u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20 u64 nth = (u64)gridDim.x * blockDim.x;\n\
         \x20 if (a.src) {{ copy_bytes(slot(a, a.me, e), a.src, a.src_bytes, tid, nth); }}\n\
         \x20 if (a.check && blockIdx.x == 0 && threadIdx.x == 0) ctrl[2u + (e & 1u)] = a.check;\n\
         \x20 bool ok = barrier(a, 0u, e);\n\
         \x20 if (ok && a.check) ok = agree(a, e);\n\
         \x20 if (ok) {{ {work} }}\n\
         \x20 if (ok && a.exit_barrier) ok = barrier(a, 1u, e);\n\
         \x20 finish(a, e);\n\
         }}\n"
    )
}

/// Shared device code: argument struct, barrier, copies, epoch bookkeeping.
const PRELUDE: &str = r#"
struct PeerArgs {
  u64 in[MAXP]; u64 out[MAXP]; u64 flags[MAXP];
  u64 src, src_bytes, ctrl, status, timeout_ns, lo, hi, out_sub, seg, stride, slot_bytes;
  u32 p, me, nout, exit_barrier, sys_fence, check;
};
__device__ __forceinline__ u64 gtime() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ u64 slot(const PeerArgs& a, u32 j, u32 e) {
  if (a.in[j] == 0) return 0;
  return a.in[j] + (a.slot_bytes ? (u64)(e & 1u) * a.slot_bytes : 0ull);
}
__device__ __forceinline__ volatile u32* flag_at(u64 base, u32 phase, u32 rank, u32 blk) {
  return (volatile u32*)base + ((u64)phase * MAXP + rank) * MAXB + blk;
}
// Publish this block's arrival at `phase` of epoch `e` to every peer, then wait for
// every peer block. Returns false (after storing the status) on a timeout.
__device__ __forceinline__ void fence(const PeerArgs& a) {
  if (a.sys_fence) __threadfence_system(); else __threadfence();
}
__device__ bool barrier(const PeerArgs& a, u32 phase, u32 e) {
  fence(a);
  __syncthreads();
  u32 t = threadIdx.x;
  // Every rank's flags, this rank's own included: a block may read what another
  // block of this rank copied into its slot.
  if (t < a.p) { *flag_at(a.flags[t], phase, a.me, blockIdx.x) = e; }
  bool ok = true;
  u32 nblk = gridDim.x;
  volatile u32* status = (volatile u32*)a.status;
  for (u32 k = t; k < a.p * nblk && ok; k += blockDim.x) {
    u32 j = k / nblk, b = k % nblk;
    volatile u32* w = flag_at(a.flags[a.me], phase, j, b);
    u32 spins = 0; u64 start = 0;
    while ((int)(*w - e) < 0) {
      ++spins;
      // The clock every 1024 polls, the status word (host memory: another block's
      // timeout) every 16384. Reading host memory from every waiting thread every 256
      // polls (as before) slowed the peer still working: a 1 GiB allreduce of 2 ranks
      // took 14.7 ms instead of 1.6 ms on an H100 (benches/results/gpu-2026-12-06c-h100).
      // Waits longer than 4096 polls sleep 256 ns between polls.
      if ((spins & 1023u) == 0) {
        if ((spins & 16383u) == 0 && *status != 0) { ok = false; break; }
        u64 now = gtime();
        if (start == 0) start = now;
        else if (a.timeout_ns && now - start > a.timeout_ns) {
          *status = 0x100u | (phase << 6) | j; ok = false; break;
        }
      }
#if __CUDA_ARCH__ >= 700
      if (spins > 4096u) __nanosleep(256u);
#endif
    }
  }
  fence(a);
  return __syncthreads_and(ok) != 0;
}
// After the entry barrier of epoch `e`: whether every rank published this rank's
// fingerprint `a.check` (control word 2 + e mod 2 of its workspace). A rank rewrites
// that word only in epoch e + 2, after it saw every peer finish epoch e.
__device__ bool agree(const PeerArgs& a, u32 e) {
  bool good = true;
  u32 t = threadIdx.x;
  if (t < a.p) {
    volatile u32* c = (volatile u32*)(a.flags[t] + FLAGB);
    if (c[2u + (e & 1u)] != a.check) {
      good = false;
      if (blockIdx.x == 0) *(volatile u32*)a.status = 0x200u | t;
    }
  }
  return __syncthreads_and(good) != 0;
}
__device__ __forceinline__ void finish(const PeerArgs& a, u32 e) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile u32* ctrl = (volatile u32*)a.ctrl;
    __threadfence();
    u32 done = atomicAdd((u32*)&ctrl[1], 1u);
    if (done == gridDim.x - 1) {
      ctrl[1] = 0; __threadfence(); ctrl[0] = e;
      __threadfence_system(); *((volatile u32*)a.status + DONEW) = e;
    }
  }
}
__device__ void copy_bytes(u64 dst, u64 src, u64 n, u64 tid, u64 nth) {
  if (n == 0 || dst == 0 || src == 0) return;
  if (((dst | src) & 15) == 0) {
    u64 nv = n / 16;
    const uint4* s = (const uint4*)src; uint4* d = (uint4*)dst;
    for (u64 i = tid; i < nv; i += nth) d[i] = __ldcg(s + i);
    for (u64 i = nv * 16 + tid; i < n; i += nth) ((unsigned char*)dst)[i] = __ldcg((const unsigned char*)src + i);
  } else if (((dst | src) & 3) == 0) {
    u64 nw = n / 4;
    const u32* s = (const u32*)src; u32* d = (u32*)dst;
    for (u64 i = tid; i < nw; i += nth) d[i] = __ldcg(s + i);
    for (u64 i = nw * 4 + tid; i < n; i += nth) ((unsigned char*)dst)[i] = __ldcg((const unsigned char*)src + i);
  } else {
    for (u64 i = tid; i < n; i += nth) ((unsigned char*)dst)[i] = __ldcg((const unsigned char*)src + i);
  }
}
__device__ void work_gather(const PeerArgs& a, u32 e, u64 tid, u64 nth) {
  for (u32 j = 0; j < a.p; ++j) {
    u64 s = slot(a, j, e);
    if (s) copy_bytes(a.out[0] + (u64)j * a.stride, s, a.seg, tid, nth);
  }
}
"#;

/// Typed reduction work; `OPNAME` is replaced by the op's name.
const REDUCE_WORK: &str = r#"
__device__ void work_reduce_OPNAME(const PeerArgs& a, u32 e, u64 tid, u64 nth) {
  u64 lo = a.lo, hi = a.hi;
  if (hi <= lo) return;
  u64 n = hi - lo;
  const T* in[MAXP];
  u64 mis = 0;
  for (u32 j = 0; j < a.p; ++j) { in[j] = (const T*)slot(a, j, e) + lo; mis |= (u64)in[j]; }
  for (u32 k = 0; k < a.nout; ++k) mis |= (u64)((T*)a.out[k] + (lo - a.out_sub));
  u64 nv = ((mis & 15) == 0) ? n / VEC : 0;
  for (u64 v = tid; v < nv; v += nth) {
    A acc[VEC];
    uint4 x = __ldcg((const uint4*)in[0] + v);
    const T* xs = (const T*)&x;
#pragma unroll
    for (int k = 0; k < (int)VEC; ++k) acc[k] = ld(xs[k]);
    for (u32 j = 1; j < a.p; ++j) {
      uint4 y = __ldcg((const uint4*)in[j] + v);
      const T* ys = (const T*)&y;
#pragma unroll
      for (int k = 0; k < (int)VEC; ++k) acc[k] = comb_OPNAME(acc[k], ld(ys[k]));
    }
    uint4 z; T* zs = (T*)&z;
#pragma unroll
    for (int k = 0; k < (int)VEC; ++k) zs[k] = st(acc[k]);
    for (u32 k = 0; k < a.nout; ++k) ((uint4*)((T*)a.out[k] + (lo - a.out_sub)))[v] = z;
  }
  for (u64 i = nv * VEC + tid; i < n; i += nth) {
    A acc = ld(__ldcg(in[0] + i));
    for (u32 j = 1; j < a.p; ++j) acc = comb_OPNAME(acc, ld(__ldcg(in[j] + i)));
    T r = st(acc);
    for (u32 k = 0; k < a.nout; ++k) ((T*)a.out[k] + (lo - a.out_sub))[i] = r;
  }
}
"#;

struct Loaded {
    /// `None`: the copy kernel; else per op.
    funcs: Vec<(Option<RedOp>, RawFunction)>,
}

// SAFETY: a CUfunction is a process-wide handle into a module that is never unloaded.
unsafe impl Send for Loaded {}

// Loaded programs per (device, element type or None); process-wide like the modules.
type Programs = HashMap<(i32, Option<DType>), Loaded>;
static CACHE: Mutex<Option<Programs>> = Mutex::new(None);

fn lookup(device: i32, red: Option<(DType, RedOp)>) -> Result<RawFunction, GpuError> {
    let dt = red.map(|(d, _)| d);
    let op = red.map(|(_, o)| o);
    let mut guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let table = guard.get_or_insert_with(HashMap::new);
    #[allow(clippy::map_entry)]
    if !table.contains_key(&(device, dt)) {
        let major = result::device_attribute(device, DeviceAttr::ComputeCapabilityMajor)?;
        let minor = result::device_attribute(device, DeviceAttr::ComputeCapabilityMinor)?;
        let ptx = result::nvrtc_compile(
            &peer_kernel_source(dt),
            &crate::reduce::compile_options(major, minor),
        )?;
        let ops: Vec<Option<RedOp>> = match dt {
            None => vec![None],
            Some(d) => RedOp::all_for(d).map(Some).collect(),
        };
        let names: Vec<String> = ops
            .iter()
            .map(|o| match o {
                None => "rw_peer_copy".to_string(),
                Some(o) => format!("rw_peer_{o}"),
            })
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let funcs = result::module_load_functions(device, &ptx, &refs)?;
        table.insert(
            (device, dt),
            Loaded {
                funcs: ops.into_iter().zip(funcs).collect(),
            },
        );
    }
    table[&(device, dt)]
        .funcs
        .iter()
        .find(|(o, _)| *o == op)
        .map(|&(_, f)| f)
        .ok_or(GpuError::Unsupported(
            crate::error::Unsupported::ReductionType,
        ))
}

/// Compile (if needed) and load the peer kernels for `red` (`None`: the copy kernel)
/// on `device`, so the first collective does not pay for NVRTC.
///
/// # Errors
/// As [`peer_launch`].
pub fn peer_prepare(device: i32, red: Option<(DType, RedOp)>) -> Result<(), GpuError> {
    result::ensure_init()?;
    lookup(device, red).map(|_| ())
}

/// Launch one peer-memory collective of `blocks` blocks on `stream`: the reduction
/// kernel of `red` ([`PeerMode::Reduce`]) or the copy kernel (`None`,
/// [`PeerMode::Gather`]).
///
/// # Safety
/// Every address in `args` must be valid for the accesses its mode makes until the
/// launch has completed (peers' memory mapped in this process, scratch slots of
/// `slot_bytes`, the control words and the host-mapped status word of a live
/// [`PeerWorkspace`]); every rank of the collective must launch with the same `p`,
/// `blocks` and kind of launch, in the same order.
///
/// # Errors
/// [`GpuError::Unsupported`] for a bitwise op on a float type or `blocks` outside
/// `1..=MAX_BLOCKS` / `p` outside `1..=MAX_PEERS`; [`GpuError::Nvrtc`] when the
/// compile fails; [`GpuError::Driver`] from the module load or `cuLaunchKernel`.
pub unsafe fn peer_launch(
    red: Option<(DType, RedOp)>,
    args: &PeerArgs,
    blocks: u32,
    stream: &Stream,
) -> Result<(), GpuError> {
    if let Some((dt, op)) = red
        && !op.valid_for(dt)
    {
        return Err(GpuError::Unsupported(
            crate::error::Unsupported::ReductionType,
        ));
    }
    if !(1..=MAX_BLOCKS).contains(&blocks) || !(1..=MAX_PEERS as u32).contains(&args.p) {
        return Err(GpuError::Unsupported(
            crate::error::Unsupported::ReductionType,
        ));
    }
    result::ensure_init()?;
    let f = lookup(stream.device(), red)?;
    stream.bind()?;
    let mut a = *args;
    let mut params: [*mut c_void; 1] = [(&mut a as *mut PeerArgs).cast()];
    // SAFETY: one parameter, the struct by value (copied at launch); the caller
    // guarantees the addresses.
    unsafe { result::launch_kernel(f, blocks, PEER_THREADS, stream.raw(), &mut params) }
}

/// The address of a workspace's done word ([`PeerWorkspace::done_word`]), readable
/// without the workspace's lock.
#[derive(Debug, Clone, Copy)]
pub struct DoneWord(*const u32);

// SAFETY: an address of pinned host memory, only read (volatile).
unsafe impl Send for DoneWord {}

impl DoneWord {
    /// Whether the launch of epoch `epoch` (or a later one) has finished: the word is
    /// at least `epoch` in wrapping `u32` order.
    ///
    /// # Safety
    /// The workspace it came from must still be alive.
    /// Once it returns `true`, later reads of memory the kernel wrote before the word
    /// (the status word, host-visible output) see those writes: the load is an acquire
    /// (weakly ordered hosts, aarch64, could otherwise serve them earlier).
    pub unsafe fn reached(self, epoch: u32) -> bool {
        // SAFETY: the caller keeps the workspace (and its pinned buffer) alive; the
        // word is 4-byte aligned and only the kernel writes it.
        let w = unsafe { &*self.0.cast::<std::sync::atomic::AtomicU32>() };
        let v = w.load(std::sync::atomic::Ordering::Acquire);
        (v.wrapping_sub(epoch) as i32) >= 0
    }
}

/// One rank's workspace: flags, control words and two scratch slots in one
/// `cuMemAlloc` allocation (IPC-exportable), plus a host-mapped status word.
///
/// Layout (bytes from [`PeerWorkspace::base`]): `0..FLAG_BYTES` flags,
/// `FLAG_BYTES..FLAG_BYTES + CTRL_BYTES` control words, then slot 0 and slot 1 of
/// `slot_bytes` each.
#[derive(Debug)]
pub struct PeerWorkspace {
    mem: DeviceBuffer,
    status: PinnedBuffer,
    slot_bytes: usize,
}

impl PeerWorkspace {
    /// Allocate and zero a workspace with slots of `slot_bytes` (rounded up to 256)
    /// on `device`.
    ///
    /// # Errors
    /// [`GpuError::Driver`] from `cuMemAlloc`, `cuMemHostAlloc` or the zeroing.
    pub fn new(device: i32, slot_bytes: usize) -> Result<PeerWorkspace, GpuError> {
        let slot_bytes = slot_bytes.div_ceil(256) * 256;
        let mut mem = DeviceBuffer::alloc(device, FLAG_BYTES + CTRL_BYTES + 2 * slot_bytes)?;
        mem.fill(0)?;
        let mut status = PinnedBuffer::new(64)?;
        status.as_mut_slice().fill(0);
        Ok(PeerWorkspace {
            mem,
            status,
            slot_bytes,
        })
    }

    /// Device address of the allocation (the flag area).
    pub fn base(&self) -> u64 {
        self.mem.ptr()
    }

    /// Device address of the control words.
    pub fn ctrl(&self) -> u64 {
        self.mem.ptr() + FLAG_BYTES as u64
    }

    /// Offset of slot 0 from the base.
    pub fn slots_offset() -> u64 {
        (FLAG_BYTES + CTRL_BYTES) as u64
    }

    /// Bytes of one scratch slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Address of the host-mapped status word (readable from kernels under unified
    /// addressing).
    pub fn status(&self) -> u64 {
        self.status.as_ptr() as u64
    }

    /// The status word's current value (0: no error).
    pub fn status_value(&self) -> u32 {
        // SAFETY: the word lies in the pinned buffer; a volatile read sees the
        // kernel's store once the launch has completed.
        unsafe { std::ptr::read_volatile(self.status.as_ptr().cast::<u32>()) }
    }

    /// The host-mapped done word: the epoch (the launch count of this workspace, from 1)
    /// of the last launch whose blocks have all finished, stored by the kernel after
    /// a system-scope fence (see the module doc). Valid while `self` lives.
    pub fn done_word(&self) -> DoneWord {
        // SAFETY: the status buffer has 64 bytes; the word is in bounds.
        DoneWord(unsafe { self.status.as_ptr().cast::<u32>().add(DONE_WORD) })
    }

    /// The allocation's device buffer (to export for CUDA IPC).
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.mem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_layout_matches_the_cuda_struct() {
        // 3 arrays of MAX_PEERS u64, 11 u64, 6 u32: no padding in either language.
        assert_eq!(
            std::mem::size_of::<PeerArgs>(),
            3 * MAX_PEERS * 8 + 11 * 8 + 6 * 4
        );
        assert_eq!(std::mem::offset_of!(PeerArgs, src), 3 * MAX_PEERS * 8);
        assert_eq!(
            std::mem::offset_of!(PeerArgs, p),
            3 * MAX_PEERS * 8 + 11 * 8
        );
        let src = peer_kernel_source(None);
        assert!(src.contains(
            "u64 src, src_bytes, ctrl, status, timeout_ns, lo, hi, out_sub, seg, stride, \
             slot_bytes;"
        ));
        assert!(src.contains("u32 p, me, nout, exit_barrier, sys_fence, check;"));
    }

    #[test]
    fn sources_have_one_kernel_per_valid_op() {
        let s = peer_kernel_source(Some(DType::F32));
        assert!(s.contains("rw_peer_sum(PeerArgs a)") && s.contains("rw_peer_max(PeerArgs a)"));
        assert!(!s.contains("rw_peer_band"), "bitwise op on floats");
        let s = peer_kernel_source(Some(DType::U32));
        assert!(s.contains("rw_peer_bxor(PeerArgs a)"));
        assert!(peer_kernel_source(None).contains("rw_peer_copy(PeerArgs a)"));
        assert_eq!(FLAG_BYTES % 256, 0);
    }

    /// Compiles every program for sm_90 where libnvrtc loads (the GPU machine; here
    /// with the PyPI `nvidia-cuda-nvrtc` wheel on `LD_LIBRARY_PATH`).
    #[cfg(feature = "cuda")]
    #[test]
    fn kernels_compile_where_nvrtc_is_present() {
        if !crate::reduce::nvrtc_available() {
            println!(
                "skipped: libnvrtc not loadable here; the peer kernels compile on the GPU machine"
            );
            return;
        }
        for dt in std::iter::once(None).chain(DType::ALL.into_iter().map(Some)) {
            let ptx = result::nvrtc_compile(
                &peer_kernel_source(dt),
                &crate::reduce::compile_options(9, 0),
            );
            match ptx {
                Ok(p) => assert!(p.len() > 1000, "{dt:?}"),
                Err(e) => panic!("{dt:?}: {e}"),
            }
        }
    }

    #[test]
    fn blocks_fit_every_sharing_rank() {
        assert_eq!(peer_blocks(8, 2, 132), 1);
        assert_eq!(peer_blocks(1 << 20, 2, 132), 16);
        assert_eq!(peer_blocks(256 << 20, 2, 132), 128);
        assert_eq!(peer_blocks(256 << 20, 4, 132), 66);
        assert_eq!(peer_blocks(256 << 20, 64, 132), 4);
        assert_eq!(peer_blocks(256 << 20, 1000, 132), 1);
        // 4 blocks of 512 threads per multiprocessor: all sharing ranks fit.
        for sharing in 1..=32 {
            let b = peer_blocks(usize::MAX / 2, sharing, 132) as usize;
            assert!(b * sharing <= 4 * 132, "{sharing}: {b}");
        }
    }

    #[test]
    fn done_word_compares_epochs_in_wrapping_order() {
        let mut w = 0u32;
        let d = DoneWord(&w as *const u32);
        // SAFETY: `w` outlives every read below.
        unsafe {
            assert!(!d.reached(1), "nothing finished yet");
            w = 5;
            let d = DoneWord(&w as *const u32);
            assert!(d.reached(4) && d.reached(5) && !d.reached(6));
            w = 2; // wrapped past u32::MAX
            let d = DoneWord(&w as *const u32);
            assert!(d.reached(u32::MAX) && d.reached(2) && !d.reached(3));
        }
        let src = peer_kernel_source(None);
        assert!(
            src.contains("*((volatile u32*)a.status + DONEW) = e;")
                && src.contains(&format!("#define DONEW {DONE_WORD}")),
            "the last block stores the epoch into the done word"
        );
    }

    #[test]
    fn status_codes_name_the_rank_and_barrier() {
        assert_eq!(decode_status(0), None);
        let m = decode_status(0x100 | 3).unwrap();
        assert!(m.contains("entry") && m.contains("rank 3"), "{m}");
        let m = decode_status(0x100 | 0x40 | 1).unwrap();
        assert!(m.contains("exit") && m.contains("rank 1"), "{m}");
        assert!(decode_status(7).unwrap().contains("unknown"));
        let m = decode_status(0x200 | 5).unwrap();
        assert!(m.contains("rank 5") && m.contains("other arguments"), "{m}");
    }
}
