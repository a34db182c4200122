//! The peer-memory kernels' own CUDA C++ source ([`rankwire_gpu::peer::peer_kernel_source`])
//! compiled for the host with `g++` and run on host threads: one thread per CUDA
//! thread, a `std::barrier` per block for `__syncthreads`, `seq_cst` fences for
//! `__threadfence`, the host clock for `%globaltimer`. Every rank's "launch" runs
//! concurrently with the others', on workspaces and buffers in this process, with the
//! arguments the builders ([`scratch_args`], [`mapped_args`]) produce. So the flag
//! logic runs as written, without a GPU: the entry and exit barriers, the epoch
//! counter and the two scratch slots across back-to-back launches with no host
//! synchronization between ranks, the fingerprint agreement, the timeout and its
//! status code, and the done word.
//!
//! Needs `g++` with C++20 (`std::barrier`); CI installs it (`.ci/run`). Without it the
//! test fails and says so.

use std::path::PathBuf;
use std::sync::OnceLock;

use rankwire_gpu::peer::{self, FLAG_BYTES, PeerArgs, PeerWorkspace};
use rankwire_gpu::{DType, RedOp};

use super::{PeerColl, Regions, mapped_args, scratch_args};

/// CUDA names mapped onto the host, before the kernel source.
const SHIM: &str = r#"
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>
#include <sched.h>
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __CUDA_ARCH__ 700
struct uint4 { unsigned x, y, z, w; };
struct rw_dim { unsigned x; };
struct rw_block {
  std::barrier<> bar; std::atomic<int> fails{0};
  explicit rw_block(int n) : bar(n) {}
};
static thread_local rw_dim threadIdx, blockIdx, blockDim, gridDim;
static thread_local rw_block* rw_cur;
static inline void __syncthreads() { rw_cur->bar.arrive_and_wait(); }
static inline int __syncthreads_and(int p) {
  if (!p) rw_cur->fails.fetch_add(1);
  rw_cur->bar.arrive_and_wait();
  int r = rw_cur->fails.load() == 0;
  rw_cur->bar.arrive_and_wait();
  if (threadIdx.x == 0) rw_cur->fails.store(0);
  rw_cur->bar.arrive_and_wait();
  return r;
}
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline void __nanosleep(unsigned) { sched_yield(); }
template <class T> static inline T __ldcg(const T* p) { return *(const volatile T*)p; }
static inline uint4 __ldcg(const uint4* p) { uint4 v; std::memcpy(&v, (const void*)p, 16); return v; }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned long long rw_host_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count();
}
"#;

/// The launcher appended after the kernels; `TABLE` becomes one `if` per kernel.
const LAUNCHER: &str = r#"
typedef void (*rw_kernel)(PeerArgs);
static rw_kernel rw_find(const char* name) {
TABLE
  return nullptr;
}
// Runs kernel `name` on `blocks` × `threads` host threads; returns when all are done
// (as cuStreamSynchronize would), -1 for an unknown name.
extern "C" int rw_host_launch(const char* name, const PeerArgs* a, unsigned blocks, unsigned threads) {
  rw_kernel k = rw_find(name);
  if (!k) return -1;
  std::vector<rw_block*> bl;
  for (unsigned b = 0; b < blocks; ++b) bl.push_back(new rw_block((int)threads));
  std::vector<std::thread> ts;
  PeerArgs args = *a;
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < threads; ++t) {
      rw_block* blk = bl[b];
      ts.emplace_back([=] {
        threadIdx.x = t; blockIdx.x = b; blockDim.x = threads; gridDim.x = blocks;
        rw_cur = blk;
        k(args);
      });
    }
  for (auto& t : ts) t.join();
  for (auto* b : bl) delete b;
  return 0;
}
"#;

type LaunchFn = unsafe extern "C" fn(*const std::ffi::c_char, *const PeerArgs, u32, u32) -> i32;

/// One compiled kernel library (the copy kernel, or the `i64` reductions).
struct HostKernels {
    _lib: libloading::Library,
    launch: LaunchFn,
}

/// The source for `dt` made host C++: the `%globaltimer` read replaced by the host
/// clock, and the kernels listed for the launcher.
fn host_source(dt: Option<DType>) -> String {
    let src = peer::peer_kernel_source(dt);
    let asm = r#"asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));"#;
    assert!(
        src.contains(asm),
        "the kernel source no longer reads %globaltimer this way"
    );
    let src = src.replace(asm, "t = rw_host_ns();");
    let names: Vec<String> = match dt {
        None => vec!["rw_peer_copy".into()],
        Some(dt) => RedOp::all_for(dt)
            .map(|op| format!("rw_peer_{op}"))
            .collect(),
    };
    for n in &names {
        assert!(
            src.contains(&format!("{n}(PeerArgs a)")),
            "kernel {n} missing"
        );
    }
    let table: String = names
        .iter()
        .map(|n| format!("  if (!std::strcmp(name, \"{n}\")) return {n};\n"))
        .collect();
    format!("{SHIM}{src}{}", LAUNCHER.replace("TABLE", &table))
}

fn build(dt: Option<DType>) -> HostKernels {
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "rankwire-peer-host-{}-{}",
        std::process::id(),
        dt.map_or("copy".to_string(), |d| d.to_string())
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let cpp = dir.join("kernels.cpp");
    let so = dir.join("kernels.so");
    std::fs::write(&cpp, host_source(dt)).unwrap();
    let out = std::process::Command::new("g++")
        .args([
            "-std=c++20",
            "-O1",
            "-fPIC",
            "-shared",
            "-pthread",
            "-w",
            "-o",
        ])
        .arg(&so)
        .arg(&cpp)
        .output()
        .unwrap_or_else(|e| {
            panic!("this test compiles the peer kernels for the host with g++: {e}; install g++")
        });
    assert!(
        out.status.success(),
        "g++ failed on the host build of the peer kernels:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SAFETY: our own library, with the symbol's declared signature.
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    let launch = unsafe { *lib.get::<LaunchFn>(b"rw_host_launch\0").unwrap() };
    let _ = std::fs::remove_dir_all(&dir);
    HostKernels { _lib: lib, launch }
}

fn kernels(dt: Option<DType>) -> &'static HostKernels {
    static COPY: OnceLock<HostKernels> = OnceLock::new();
    static I64: OnceLock<HostKernels> = OnceLock::new();
    match dt {
        None => COPY.get_or_init(|| build(None)),
        Some(DType::I64) => I64.get_or_init(|| build(Some(DType::I64))),
        Some(other) => panic!("no host build for {other}"),
    }
}

/// One rank's workspace (flags, control words, two slots) and host status words, in
/// 16-byte-aligned host memory.
struct Ws {
    _mem: Vec<u128>,
    _status: Vec<u32>,
    /// `mem`'s and `status`'s addresses, taken once through `as_mut_ptr` (the kernels
    /// write both).
    base: u64,
    status_at: u64,
}

impl Ws {
    fn new(slot_bytes: usize) -> Ws {
        let bytes = PeerWorkspace::slots_offset() as usize + 2 * slot_bytes;
        let mut mem = vec![0u128; bytes.div_ceil(16)];
        let mut status = vec![0u32; 8];
        let (base, status_at) = (mem.as_mut_ptr() as u64, status.as_mut_ptr() as u64);
        Ws {
            _mem: mem,
            _status: status,
            base,
            status_at,
        }
    }
    fn base(&self) -> u64 {
        self.base
    }
    fn epoch(&self) -> u32 {
        // SAFETY: the control words lie in `mem`; read after the launch joined.
        unsafe { std::ptr::read_volatile((self.base() + FLAG_BYTES as u64) as *const u32) }
    }
    fn status(&self) -> u32 {
        // SAFETY: in bounds; read after the launch joined.
        unsafe { std::ptr::read_volatile(self.status_at as *const u32) }
    }
    fn done(&self) -> u32 {
        // SAFETY: in bounds (the done word is word 2).
        unsafe { std::ptr::read_volatile((self.status_at as *const u32).add(2)) }
    }
}

/// Launches `kernel` with `a` (completed as the group would: flags, control words,
/// status, timeout) on `blocks` blocks of 32 threads; returns when it has finished.
fn launch(
    kernel: &str,
    dt: Option<DType>,
    mut a: PeerArgs,
    ws: &[Ws],
    me: usize,
    blocks: u32,
    timeout_ns: u64,
) {
    for (j, w) in ws.iter().enumerate() {
        a.flags[j] = w.base();
    }
    a.ctrl = ws[me].base() + FLAG_BYTES as u64;
    a.status = ws[me].status_at;
    a.timeout_ns = timeout_ns;
    a.sys_fence = 0;
    let name = std::ffi::CString::new(kernel).unwrap();
    // SAFETY: every address in `a` is of live memory of this test (the caller keeps the
    // workspaces and buffers until all ranks' launches have joined).
    let rc = unsafe { (kernels(dt).launch)(name.as_ptr(), &a, blocks, 32) };
    assert_eq!(rc, 0, "no host kernel {kernel}");
}

fn value(epoch: u32, rank: usize, i: usize) -> i64 {
    (epoch as i64) * 1_000_000_007 + (rank as i64 + 1) * 1_000_003 + i as i64 * 7
}

/// Runs `epochs` back-to-back launches of `c` on every rank at once (each rank's
/// thread goes on to its next launch as soon as its own has finished, as a stream
/// would), checking each rank's output after each of its launches. Inputs change
/// every epoch, so a slot or flag reused too early shows as a wrong result.
fn run_epochs(c: PeerColl, p: usize, mapped: bool, blocks: u32, epochs: u32) {
    let slot_bytes = 64 << 10;
    let ws: Vec<Ws> = (0..p).map(|_| Ws::new(slot_bytes)).collect();
    let bases: Vec<u64> = ws.iter().map(Ws::base).collect();
    let (red, n_in, n_out) = match c {
        PeerColl::Allreduce { n, .. } => (true, n, n),
        PeerColl::Reduce { n, .. } => (true, n, n),
        PeerColl::ReduceScatterBlock { k, .. } => (true, k * p, k),
        PeerColl::Allgather { k } => (false, k / 8, k / 8 * p),
        PeerColl::Bcast { n, .. } => (false, n / 8, n / 8),
    };
    let dt = red.then_some(DType::I64);
    let kernel = if red { "rw_peer_sum" } else { "rw_peer_copy" };
    // Per rank and epoch parity: input and output buffers (mapped: peers read the
    // input and write outputs directly, so the previous epoch's must stay intact
    // until every peer is past it: the exit barrier's job).
    // Addresses taken once through `as_mut_ptr`: the ranks' threads and the kernels
    // write these buffers through them only, never through the vectors.
    let mut ins: Vec<Vec<Vec<i64>>> = (0..p).map(|_| vec![vec![0; n_in]; 2]).collect();
    let mut outs: Vec<Vec<Vec<i64>>> = (0..p).map(|_| vec![vec![-1; n_out]; 2]).collect();
    let addrs = |v: &mut Vec<Vec<Vec<i64>>>| -> Vec<[u64; 2]> {
        v.iter_mut()
            .map(|b| [b[0].as_mut_ptr() as u64, b[1].as_mut_ptr() as u64])
            .collect()
    };
    let (in_at, out_at) = (addrs(&mut ins), addrs(&mut outs));
    let in_addr = |r: usize, e: u32| in_at[r][(e & 1) as usize];
    let out_addr = |r: usize, e: u32| out_at[r][(e & 1) as usize];
    let (in_addr, out_addr) = (&in_addr, &out_addr);
    std::thread::scope(|s| {
        for me in 0..p {
            let (ws, bases) = (&ws, &bases);
            s.spawn(move || {
                for e in 1..=epochs {
                    // SAFETY: this rank's own buffers for parity e; peers read them
                    // only during this epoch's launch, which has not started.
                    let input =
                        unsafe { std::slice::from_raw_parts_mut(in_addr(me, e) as *mut i64, n_in) };
                    for (i, v) in input.iter_mut().enumerate() {
                        *v = value(e, me, i);
                    }
                    // SAFETY: as above (peers write it only after this rank's entry
                    // barrier of this epoch).
                    unsafe { std::slice::from_raw_parts_mut(out_addr(me, e) as *mut i64, n_out) }
                        .fill(-1);
                    let a = if mapped {
                        let is: Vec<u64> = (0..p).map(|j| in_addr(j, e)).collect();
                        let os: Vec<u64> = (0..p).map(|j| out_addr(j, e)).collect();
                        mapped_args(c, me, bases, &is, &os)
                    } else {
                        let r = Regions {
                            input: in_addr(me, e),
                            output: out_addr(me, e),
                        };
                        scratch_args(c, me, bases, slot_bytes, r)
                    };
                    launch(kernel, dt, a, ws, me, blocks, 20_000_000_000);
                    assert_eq!(ws[me].status(), 0, "status after epoch {e} on rank {me}");
                    assert_eq!(ws[me].epoch(), e, "epoch counter on rank {me}");
                    assert_eq!(ws[me].done(), e, "done word on rank {me}");
                    // SAFETY: this launch has finished, and with it every write of this
                    // epoch into this rank's output (the exit barrier in mapped form).
                    let output =
                        unsafe { std::slice::from_raw_parts(out_addr(me, e) as *const i64, n_out) };
                    let want = |i: usize| -> Option<i64> {
                        let sum = |i: usize| (0..p).map(|j| value(e, j, i)).sum::<i64>();
                        match c {
                            PeerColl::Allreduce { .. } => Some(sum(i)),
                            PeerColl::Reduce { root, .. } => (me == root).then(|| sum(i)),
                            PeerColl::ReduceScatterBlock { k, .. } => Some(sum(me * k + i)),
                            PeerColl::Allgather { k } => {
                                let per = k / 8;
                                Some(value(e, i / per, i % per))
                            }
                            PeerColl::Bcast { root, .. } => Some(value(e, root, i)),
                        }
                    };
                    // Bcast: the root's output region is its input in the real
                    // call; here only the non-roots' outputs are checked.
                    let check_out = !matches!(c, PeerColl::Bcast { root, .. } if root == me);
                    if check_out {
                        for (i, &got) in output.iter().enumerate() {
                            assert_eq!(
                                Some(got),
                                want(i).or(Some(-1)),
                                "{c:?} p={p} mapped={mapped} epoch {e} rank {me} element {i}"
                            );
                        }
                    }
                }
            });
        }
    });
}

#[test]
fn peer_kernels_run_their_flag_protocol_on_host_threads() {
    for p in [2usize, 3, 4] {
        for blocks in [1u32, 2] {
            for mapped in [false, true] {
                let n = 1001;
                run_epochs(PeerColl::Allreduce { n, es: 8 }, p, mapped, blocks, 6);
                run_epochs(
                    PeerColl::Reduce {
                        n,
                        es: 8,
                        root: p - 1,
                    },
                    p,
                    mapped,
                    blocks,
                    4,
                );
                run_epochs(
                    PeerColl::ReduceScatterBlock { k: 257, es: 8 },
                    p,
                    mapped,
                    blocks,
                    4,
                );
                run_epochs(PeerColl::Allgather { k: 8 * 333 }, p, mapped, blocks, 4);
                run_epochs(
                    PeerColl::Bcast {
                        n: 8 * 500,
                        root: p / 2,
                    },
                    p,
                    mapped,
                    blocks,
                    4,
                );
            }
        }
    }
}

#[test]
fn a_missing_rank_times_out_with_its_rank_and_another_call_is_named() {
    // Ranks 0 and 1 of 3 launch; rank 2 never does: both time out at the entry
    // barrier waiting for rank 2, and the status decodes to that.
    let (p, slot_bytes) = (3usize, 64 << 10);
    let ws: Vec<Ws> = (0..p).map(|_| Ws::new(slot_bytes)).collect();
    let bases: Vec<u64> = ws.iter().map(Ws::base).collect();
    let c = PeerColl::Allreduce { n: 64, es: 8 };
    let mut bufs: Vec<Vec<i64>> = (0..p).map(|r| vec![r as i64; 64]).collect();
    let mut outs: Vec<Vec<i64>> = (0..p).map(|_| vec![-1; 64]).collect();
    let ins: Vec<u64> = bufs.iter_mut().map(|b| b.as_mut_ptr() as u64).collect();
    let out_at: Vec<u64> = outs.iter_mut().map(|b| b.as_mut_ptr() as u64).collect();
    // Compiled first, and both ranks start together: the wait that times out is the
    // one for rank 2, however loaded the machine (one block; 2 s).
    kernels(Some(DType::I64));
    let start = std::sync::Barrier::new(2);
    let t0 = std::time::Instant::now();
    std::thread::scope(|s| {
        for me in 0..2 {
            let (ws, bases, ins, out_at, start) = (&ws, &bases, &ins, &out_at, &start);
            s.spawn(move || {
                let r = Regions {
                    input: ins[me],
                    output: out_at[me],
                };
                let a = scratch_args(c, me, bases, slot_bytes, r);
                start.wait();
                launch("rw_peer_sum", Some(DType::I64), a, ws, me, 1, 2_000_000_000);
            });
        }
    });
    assert!(
        t0.elapsed().as_secs() < 30,
        "the timeout did not end the wait"
    );
    for w in &ws[..2] {
        let m = peer::decode_status(w.status()).expect("a status after a timeout");
        assert!(m.contains("entry barrier waiting for rank 2"), "{m}");
        assert_eq!(w.done(), 1, "a failed launch still finishes its epoch");
    }
    assert!(
        outs[0].iter().all(|&x| x == -1),
        "no result written after a timeout"
    );

    // All three launch, but rank 1 calls another collective (another count): the
    // fingerprints differ and every rank names a rank whose call differs.
    let ws: Vec<Ws> = (0..p).map(|_| Ws::new(slot_bytes)).collect();
    let bases: Vec<u64> = ws.iter().map(Ws::base).collect();
    std::thread::scope(|s| {
        for me in 0..p {
            let (ws, bases, ins, out_at) = (&ws, &bases, &ins, &out_at);
            s.spawn(move || {
                let n = if me == 1 { 32 } else { 64 };
                let c = PeerColl::Allreduce { n, es: 8 };
                let r = Regions {
                    input: ins[me],
                    output: out_at[me],
                };
                let a = scratch_args(c, me, bases, slot_bytes, r);
                launch("rw_peer_sum", Some(DType::I64), a, ws, me, 1, 5_000_000_000);
            });
        }
    });
    for (me, w) in ws.iter().enumerate() {
        let m = peer::decode_status(w.status()).expect("a status after a mismatch");
        assert!(m.contains("with other arguments"), "rank {me}: {m}");
    }
    assert!(
        outs[0].iter().all(|&x| x == -1),
        "no result written after a mismatch"
    );
}
