//! GPU self-test of `rankwire-gpu`, for the GPU machine.
//!
//! Build (on the dev machine; the binary runs on the H200 box as is):
//! `CARGO_TARGET_DIR=/work/target-gpu cargo build --release -p rankwire-gpu --features cuda --examples`
//! Run: `/work/target-gpu/release/examples/gpu_selftest`
//!
//! Prints one `PASS name: detail` / `FAIL name: detail` line per check (and `NOTE` lines
//! that count neither way), then `N passed, M failed`; exits 1 if anything failed.
//! Without a GPU it prints `skipped: no CUDA driver ...` (or `skipped: built without the
//! cuda feature`) and exits 0.
//!
//! Covers: init and device name; pointer classification of stack, heap, pinned,
//! cuMemAlloc, pool, managed memory, an offset view, a buffer past its allocation, and
//! a freed-then-reallocated buffer at the same address (through the PointerCache);
//! zero-length buffers never queried; IPC export of cuMemAlloc / pool / managed / host
//! memory; IPC open in a child process (a copy of this binary) with the IpcCache hit,
//! stale-entry (B008) and deferred-close scenarios and close_all; DtoD/HtoD/DtoH copies
//! of 0 B to 64 MiB with byte checks, staged copies, events; DMA-BUF export; a DtoD
//! bandwidth table and pointer-classification latency; the temporary pool (`TmpPool`:
//! reuse, IPC-exportable device buffers, pinned buffers, release).

use std::fmt::Display;
use std::io::{BufRead, BufReader, Write};
use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use rankwire_gpu::{
    CopyPath, DeviceBuffer, Event, GpuError, IpcCache, IpcExport, IpcHandle, PinnedBuffer,
    PointerCache, PtrKind, Stream, Unsupported, classify, classify_addr, export_dmabuf, ipc_export,
    memcpy_dtod_async, memcpy_dtoh_async, memcpy_htod_async, memcpy_peer_async, memcpy_staged,
    pointer_queries,
};

const MIB: usize = 1 << 20;
const CHILD_TIMEOUT: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--ipc-child") {
        return ipc_child(&args[2..]);
    }
    match rankwire_gpu::init() {
        Ok(()) => {}
        Err(GpuError::NotBuilt) => {
            println!("skipped: built without the `cuda` feature (rebuild with --features cuda)");
            return ExitCode::SUCCESS;
        }
        Err(GpuError::NoDriver) => {
            println!("skipped: no CUDA driver (libcuda.so could not be loaded)");
            return ExitCode::SUCCESS;
        }
        Err(e) if e.is_no_gpu() => {
            println!("skipped: no CUDA device visible ({e})");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            println!("FAIL init: {e}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    }

    let mut r = Report::default();
    r.section("init", section_init);
    r.section("classify", section_classify);
    r.section("pointer cache", section_pointer_cache);
    r.section("zero-length", section_zero_length);
    r.section("ipc export", section_ipc_export);
    r.section("ipc child", section_ipc_child);
    r.section("tmp pool", section_tmp_pool);
    r.section("copies", section_copies);
    r.section("dma-buf", section_dmabuf);
    r.section("bandwidth", section_bandwidth);
    r.section("classify latency", section_latency);

    println!("{} passed, {} failed", r.passed, r.failed);
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[derive(Default)]
struct Report {
    passed: u32,
    failed: u32,
}

impl Report {
    fn check(&mut self, name: &str, ok: bool, detail: impl Display) {
        if ok {
            self.passed += 1;
            println!("PASS {name}: {detail}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {detail}");
        }
    }

    fn note(&mut self, name: &str, detail: impl Display) {
        println!("NOTE {name}: {detail}");
    }

    // Run one section; an unexpected error or a panic is one FAIL and the next section
    // still runs.
    fn section(&mut self, name: &str, f: fn(&mut Report) -> Result<(), GpuError>) {
        match std::panic::catch_unwind(AssertUnwindSafe(|| f(self))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.check(name, false, format!("unexpected error: {e}")),
            Err(_) => self.check(name, false, "panicked (message above)"),
        }
    }
}

fn section_init(r: &mut Report) -> Result<(), GpuError> {
    let n = rankwire_gpu::device_count()?;
    let v = rankwire_gpu::driver_version()?;
    let info = rankwire_gpu::device_info(0)?;
    r.check(
        "init",
        n >= 1 && !info.name.is_empty(),
        format!(
            "{n} device(s), driver CUDA {}.{}, device 0 = {:?}, dma_buf={} gpu_direct_rdma={} unified_addressing={}",
            v / 1000,
            (v % 1000) / 10,
            info.name,
            info.dma_buf,
            info.gpu_direct_rdma,
            info.unified_addressing
        ),
    );
    Ok(())
}

fn section_classify(r: &mut Report) -> Result<(), GpuError> {
    let stack = [7u8; 256];
    let i = classify(stack.as_ptr(), stack.len())?;
    r.check(
        "classify host stack",
        i.kind == PtrKind::Host
            && i.base == stack.as_ptr() as u64
            && i.len == 256
            && i.buffer_id == 0,
        format!("{i:?}"),
    );

    let heap = vec![1u8; MIB];
    let i = classify(heap.as_ptr(), heap.len())?;
    r.check(
        "classify host heap",
        i.kind == PtrKind::Host && i.base == heap.as_ptr() as u64 && i.len == MIB,
        format!("{i:?}"),
    );

    let pinned = PinnedBuffer::new(MIB)?;
    let i = classify(pinned.as_ptr(), pinned.len())?;
    r.check(
        "classify pinned host (cuMemHostAlloc)",
        i.kind == PtrKind::HostRegistered && i.contains(pinned.as_ptr() as u64, MIB),
        format!("{i:?}"),
    );

    let dev = DeviceBuffer::alloc(0, MIB)?;
    let i = classify_addr(dev.ptr(), dev.len())?;
    r.check(
        "classify cuMemAlloc",
        i.kind == PtrKind::Device { ordinal: 0 }
            && i.base == dev.ptr()
            && i.len >= MIB
            && i.buffer_id != 0,
        format!("{i:?} (ptr {:#x})", dev.ptr()),
    );
    if i.len != MIB {
        r.note(
            "classify cuMemAlloc",
            format!("RANGE_SIZE {} for a {MIB}-byte request", i.len),
        );
    }

    let view = classify_addr(dev.ptr() + 4099, 100)?;
    r.check(
        "classify offset view",
        view == i && view.offset_of(dev.ptr() + 4099) == 4099,
        format!("{view:?}, offset {}", view.offset_of(dev.ptr() + 4099)),
    );

    let past = classify_addr(i.base + i.len as u64 - 10, 100);
    r.check(
        "classify buffer past allocation end",
        matches!(past, Err(GpuError::OutsideAllocation { .. })),
        format!("{past:?}"),
    );

    let pool = DeviceBuffer::alloc_pool(0, MIB)?;
    let p = classify_addr(pool.ptr(), pool.len())?;
    r.check(
        "classify pool (cuMemAllocAsync)",
        p.kind == PtrKind::Device { ordinal: 0 } && p.buffer_id != 0 && p.contains(pool.ptr(), MIB),
        format!("{p:?} (ptr {:#x})", pool.ptr()),
    );

    let managed = DeviceBuffer::alloc_managed(0, MIB)?;
    let m = classify_addr(managed.ptr(), managed.len())?;
    r.check(
        "classify managed (cuMemAllocManaged)",
        matches!(m.kind, PtrKind::Managed { .. }) && m.contains(managed.ptr(), MIB),
        format!("{m:?}"),
    );
    Ok(())
}

fn section_pointer_cache(r: &mut Report) -> Result<(), GpuError> {
    let mut cache = PointerCache::new(NonZeroUsize::new(64).expect("64 > 0"));
    let len = 2 * MIB;
    let a = DeviceBuffer::alloc(0, len)?;
    let a_ptr = a.ptr();
    let first = cache.classify(a_ptr, 64)?;
    let q0 = pointer_queries();
    let hit = cache.classify(a_ptr + 100, 64)?;
    let q1 = pointer_queries();
    r.check(
        "pointer cache hit costs one attribute read",
        hit == first && cache.stats().hits == 1 && q1 - q0 == 1,
        format!("{:?}, {} driver call(s)", cache.stats(), q1 - q0),
    );

    // Free, then allocate the same size: the driver usually hands back the same address.
    a.free()?;
    let mut held = Vec::new();
    let mut b = DeviceBuffer::alloc(0, len)?;
    for _ in 0..8 {
        if b.ptr() == a_ptr {
            break;
        }
        held.push(b);
        b = DeviceBuffer::alloc(0, len)?;
    }
    if b.ptr() != a_ptr {
        r.note(
            "pointer cache free+realloc",
            format!("no re-allocation landed on {a_ptr:#x}; stale path not exercised"),
        );
        return Ok(());
    }
    let direct = classify_addr(b.ptr(), 64)?;
    let again = cache.classify(b.ptr(), 64)?;
    r.check(
        "pointer cache free+realloc at same address",
        direct.buffer_id != first.buffer_id
            && again.buffer_id == direct.buffer_id
            && cache.stats().stale == 1,
        format!(
            "address {a_ptr:#x}: buffer id {} -> {}, cache answered {}, {:?}",
            first.buffer_id,
            direct.buffer_id,
            again.buffer_id,
            cache.stats()
        ),
    );
    Ok(())
}

fn section_tmp_pool(r: &mut Report) -> Result<(), GpuError> {
    let pool = rankwire_gpu::TmpPool::new(4 * MIB);
    let a = pool.take_device(0, 100_000)?;
    let exported = ipc_export(a, 100_000);
    r.check(
        "pool device buffer is IPC-exportable",
        exported.is_ok(),
        format!("{exported:?}"),
    );
    pool.give_device(a);
    let b = pool.take_device(0, 70_000)?;
    r.check(
        "pool reuses a given buffer",
        a == b,
        format!("{a:#x} then {b:#x}"),
    );
    pool.give_device(b);
    let big = pool.take_device(0, 8 * MIB)?;
    pool.give_device(big);
    let (d, _) = pool.stats();
    r.check(
        "pool frees idle buffers over its bound",
        d.idle == 1 && d.evictions == 1 && d.lent == 0,
        format!("{d:?}"),
    );
    let p = pool.take_pinned(MIB)?;
    let kind = classify(p as *const u8, MIB)?;
    r.check(
        "pool pinned buffer is registered host memory",
        kind.kind == PtrKind::HostRegistered,
        format!("{:?}", kind.kind),
    );
    pool.give_pinned(p);
    pool.release_idle();
    let (d, h) = pool.stats();
    r.check(
        "pool release_idle frees every idle buffer",
        d.idle == 0 && h.idle == 0,
        format!("device {d:?}, pinned {h:?}"),
    );
    Ok(())
}

fn section_zero_length(r: &mut Report) -> Result<(), GpuError> {
    let dev = DeviceBuffer::alloc(0, MIB)?;
    let mut cache = PointerCache::new(NonZeroUsize::new(8).expect("8 > 0"));
    let empty: &[u8] = &[];
    let q0 = pointer_queries();
    let a = classify(empty.as_ptr(), 0)?;
    let b = classify(std::ptr::null(), 0)?;
    let c = cache.classify(0xdead_0000, 0)?;
    let d = cache.classify_or(dev.ptr(), 0, PtrKind::Device { ordinal: 0 })?;
    let e = ipc_export(dev.ptr(), 0);
    let f = export_dmabuf(dev.ptr(), 0);
    let mut ipc = IpcCache::new(0, NonZeroUsize::new(4).expect("4 > 0"));
    let desc = IpcExport {
        handle: IpcHandle([0; 64]),
        device: 0,
        base: 0,
        alloc_len: 0,
        buffer_id: 0,
        offset: 0,
        len: 0,
    };
    let m = ipc.acquire(1, &desc)?;
    let mapped_nothing = m.is_empty() && ipc.stats().open_now == 0;
    ipc.release(m)?;
    let q1 = pointer_queries();
    r.check(
        "zero-length buffers never queried (B002)",
        q1 == q0
            && a.kind == PtrKind::Host
            && b.kind == PtrKind::Host
            && c.kind == PtrKind::Host
            && d.kind == PtrKind::Device { ordinal: 0 }
            && e == Err(GpuError::Unsupported(Unsupported::ZeroLength))
            && matches!(f, Err(GpuError::Unsupported(Unsupported::ZeroLength)))
            && mapped_nothing,
        format!("{} pointer queries made; ipc_export: {e:?}", q1 - q0),
    );
    Ok(())
}

fn section_ipc_export(r: &mut Report) -> Result<(), GpuError> {
    let dev = DeviceBuffer::alloc(0, 4 * MIB)?;
    let id = classify_addr(dev.ptr(), 1)?.buffer_id;
    let e = ipc_export(dev.ptr() + 4096, 1000)?;
    r.check(
        "ipc export cuMemAlloc",
        e.base == dev.ptr()
            && e.offset == 4096
            && e.len == 1000
            && e.buffer_id == id
            && e.alloc_len >= 4 * MIB
            && e.handle != IpcHandle([0; 64]),
        format!(
            "base {:#x} offset {} len {} alloc_len {} buffer_id {} handle {:?}",
            e.base, e.offset, e.len, e.alloc_len, e.buffer_id, e.handle
        ),
    );

    let pool = DeviceBuffer::alloc_pool(0, MIB)?;
    let p = ipc_export(pool.ptr(), MIB);
    r.check(
        "ipc export pool memory -> Unsupported",
        p == Err(GpuError::Unsupported(Unsupported::NotIpcCapable)),
        format!("{p:?}"),
    );

    let managed = DeviceBuffer::alloc_managed(0, MIB)?;
    let m = ipc_export(managed.ptr(), MIB);
    r.check(
        "ipc export managed memory -> refused (B010)",
        m == Err(GpuError::Unsupported(Unsupported::ManagedMemory)),
        format!("{m:?}"),
    );

    let host = vec![0u8; 4096];
    let h = ipc_export(host.as_ptr() as u64, host.len());
    r.check(
        "ipc export host memory -> refused",
        h == Err(GpuError::Unsupported(Unsupported::HostMemory)),
        format!("{h:?}"),
    );
    Ok(())
}

// ---- IPC through a child process --------------------------------------------------

// One reply line of the child: `RESULT ok|fail key=value ... msg=...`.
struct Reply {
    ok: bool,
    line: String,
}

impl Reply {
    fn get(&self, key: &str) -> Option<u64> {
        self.line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
    }
    fn is(&self, key: &str, v: u64) -> bool {
        self.get(key) == Some(v)
    }
}

struct ChildIpc {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl ChildIpc {
    fn spawn(first: &IpcExport, pattern: u8) -> Result<ChildIpc, String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut args = vec!["--ipc-child".to_string(), std::process::id().to_string()];
        args.extend(job_words(first, pattern));
        let mut child = Command::new(exe)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let stdin = child.stdin.take().ok_or("no child stdin")?;
        let stdout = child.stdout.take().ok_or("no child stdout")?;
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(ChildIpc {
            child,
            stdin,
            lines: rx,
        })
    }

    fn send(&mut self, cmd: &str) -> Result<(), String> {
        writeln!(self.stdin, "{cmd}").map_err(|e| format!("write to child: {e}"))?;
        self.stdin
            .flush()
            .map_err(|e| format!("flush to child: {e}"))
    }

    fn reply(&mut self) -> Result<Reply, String> {
        loop {
            match self.lines.recv_timeout(CHILD_TIMEOUT) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("RESULT ") {
                        return Ok(Reply {
                            ok: rest.starts_with("ok"),
                            line,
                        });
                    }
                    println!("  child: {line}");
                }
                Err(RecvTimeoutError::Timeout) => return Err("child timed out".into()),
                Err(RecvTimeoutError::Disconnected) => return Err("child exited".into()),
            }
        }
    }

    fn request(&mut self, cmd: &str) -> Result<Reply, String> {
        self.send(cmd)?;
        self.reply()
    }
}

impl Drop for ChildIpc {
    fn drop(&mut self) {
        // Only reached with the child still running after a failure: end it.
        if let Ok(None) = self.child.try_wait() {
            let _killed = self.child.kill();
            let _reaped = self.child.wait();
        }
    }
}

fn job_words(e: &IpcExport, pattern: u8) -> Vec<String> {
    vec![
        e.handle.to_hex(),
        e.device.to_string(),
        e.base.to_string(),
        e.alloc_len.to_string(),
        e.buffer_id.to_string(),
        e.offset.to_string(),
        e.len.to_string(),
        pattern.to_string(),
    ]
}

fn job_cmd(verb: &str, e: &IpcExport, pattern: u8) -> String {
    format!("{verb} {}", job_words(e, pattern).join(" "))
}

fn section_ipc_child(r: &mut Report) -> Result<(), GpuError> {
    if let Err(msg) = ipc_child_scenario(r) {
        r.check("ipc child", false, msg);
    }
    Ok(())
}

fn ipc_child_scenario(r: &mut Report) -> Result<(), String> {
    let g = |e: GpuError| e.to_string();
    let alloc_len = 8 * MIB;
    let (offset, len) = (4096u64, MIB);

    let mut a = DeviceBuffer::alloc(0, alloc_len).map_err(g)?;
    a.fill(0x11).map_err(g)?;
    let a_base = a.ptr();
    let ex1 = ipc_export(a_base + offset, len).map_err(g)?;
    let mut child = ChildIpc::spawn(&ex1, 0x11)?;

    let rep = child.reply()?;
    r.check(
        "ipc open in child process (handle on command line)",
        rep.ok && rep.is("opened", 1),
        &rep.line,
    );

    let rep = child.request(&job_cmd("open", &ex1, 0x11))?;
    r.check(
        "ipc cache hit in child",
        rep.ok && rep.is("opened", 1) && rep.is("hits", 1) && rep.is("open_now", 1),
        &rep.line,
    );

    // B008: free, re-allocate at the same base, new pattern; the child must see the
    // new buffer id in the second descriptor and reopen.
    a.free().map_err(g)?;
    let mut b = DeviceBuffer::alloc(0, alloc_len).map_err(g)?;
    b.fill(0x22).map_err(g)?;
    let ex2 = ipc_export(b.ptr() + offset, len).map_err(g)?;
    let same_base = b.ptr() == a_base;
    let rep = child.request(&job_cmd("open", &ex2, 0x22))?;
    if same_base {
        r.check(
            "ipc cache stale entry after free+realloc at same base (B008)",
            rep.ok
                && ex2.buffer_id != ex1.buffer_id
                && rep.is("opened", 2)
                && rep.is("stale", 1)
                && rep.is("open_now", 1),
            format!(
                "buffer id {} -> {}; {}",
                ex1.buffer_id, ex2.buffer_id, rep.line
            ),
        );
    } else {
        r.note(
            "ipc cache stale entry",
            format!(
                "re-allocation at {:#x}, not {a_base:#x}; miss path only",
                b.ptr()
            ),
        );
        r.check("ipc open of re-allocated buffer", rep.ok, &rep.line);
    }

    // Deferred close: the child holds a mapping of b while b is freed and its address
    // reused; the stale entry must stay mapped until the child releases it.
    let rep = child.request(&job_cmd("hold", &ex2, 0x22))?;
    r.check(
        "ipc hold mapping in child",
        rep.ok && rep.is("in_flight", 1),
        &rep.line,
    );
    let b_base = b.ptr();
    b.free().map_err(g)?;
    let mut c = DeviceBuffer::alloc(0, alloc_len).map_err(g)?;
    c.fill(0x33).map_err(g)?;
    let ex3 = ipc_export(c.ptr() + offset, len).map_err(g)?;
    let rep = child.request(&job_cmd("open", &ex3, 0x33))?;
    if c.ptr() == b_base {
        r.check(
            "ipc stale entry in flight is deferred, not closed",
            rep.ok && rep.is("deferred", 1) && rep.is("open_now", 2),
            &rep.line,
        );
        let rep = child.request("release")?;
        r.check(
            "ipc deferred entry closed at its last release",
            rep.ok && rep.is("deferred", 0) && rep.is("open_now", 1),
            &rep.line,
        );
    } else {
        r.note(
            "ipc deferred close",
            "re-allocation moved; deferral not exercised",
        );
        r.check("ipc open of third buffer", rep.ok, &rep.line);
        let rep = child.request("release")?;
        r.check("ipc release held mapping", rep.ok, &rep.line);
    }

    let rep = child.request("quit")?;
    r.check(
        "ipc close_all at finalize",
        rep.ok && rep.is("open_now", 0),
        &rep.line,
    );
    let status = child.child.wait().map_err(|e| format!("wait: {e}"))?;
    r.check("ipc child exit status", status.success(), status);
    drop(c);
    Ok(())
}

// The child: `--ipc-child <parent pid> <job words>`, then commands on stdin:
// `open <job>`, `hold <job>`, `release`, `quit`. Each gets one `RESULT` line.
fn ipc_child(args: &[String]) -> ExitCode {
    if let Err(e) = rankwire_gpu::init() {
        println!("RESULT fail msg=init:{e}");
        return ExitCode::FAILURE;
    }
    let Some(peer) = args.first().and_then(|p| p.parse::<u32>().ok()) else {
        println!("RESULT fail msg=bad-parent-pid");
        return ExitCode::FAILURE;
    };
    let mut cache = IpcCache::new(0, NonZeroUsize::new(16).expect("16 > 0"));
    let mut held = Vec::new();

    let first = child_job(&mut cache, &mut held, peer, &args[1..], false);
    println!("{}", child_result(&cache, first));

    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        let outcome = match words.first().map(String::as_str) {
            Some("open") => child_job(&mut cache, &mut held, peer, &words[1..], false),
            Some("hold") => child_job(&mut cache, &mut held, peer, &words[1..], true),
            Some("release") => held
                .drain(..)
                .try_for_each(|m| cache.release(m))
                .map(|()| "released".to_string())
                .map_err(|e| e.to_string()),
            Some("quit") => {
                let res = cache.close_all().map(|()| "closed".to_string());
                println!("{}", child_result(&cache, res.map_err(|e| e.to_string())));
                return ExitCode::SUCCESS;
            }
            _ => Err(format!("unknown command {line:?}")),
        };
        println!("{}", child_result(&cache, outcome));
    }
    ExitCode::SUCCESS
}

fn child_result(cache: &IpcCache, outcome: Result<String, String>) -> String {
    let s = cache.stats();
    let (status, msg) = match outcome {
        Ok(m) => ("ok", m),
        Err(m) => ("fail", m),
    };
    format!(
        "RESULT {status} opened={} hits={} stale={} open_now={} deferred={} in_flight={} closed={} msg={}",
        s.opened,
        s.hits,
        s.stale_evictions,
        s.open_now,
        s.deferred,
        s.in_flight,
        s.closed,
        msg.replace(' ', "_")
    )
}

fn child_job(
    cache: &mut IpcCache,
    held: &mut Vec<rankwire_gpu::IpcMapping>,
    peer: u32,
    w: &[String],
    hold: bool,
) -> Result<String, String> {
    if w.len() != 8 {
        return Err(format!("expected 8 job words, got {}", w.len()));
    }
    let num = |i: usize| w[i].parse::<u64>().map_err(|e| format!("word {i}: {e}"));
    let export = IpcExport {
        handle: IpcHandle::from_hex(&w[0]).ok_or("bad handle hex")?,
        device: w[1].parse().map_err(|e| format!("device: {e}"))?,
        base: num(2)?,
        alloc_len: num(3)? as usize,
        buffer_id: num(4)?,
        offset: num(5)?,
        len: num(6)? as usize,
    };
    let pattern: u8 = w[7].parse().map_err(|e| format!("pattern: {e}"))?;
    let g = |e: GpuError| e.to_string();

    let m = cache.acquire(peer, &export).map_err(g)?;
    // Pull the data the way a receiver does: device-to-device from the mapping, then
    // check it on the host.
    let check = (|| -> Result<Option<usize>, GpuError> {
        let dst = DeviceBuffer::alloc(0, m.len())?;
        let s = Stream::runtime(0)?;
        // SAFETY: the mapping stays open (acquired) and dst alive until the
        // synchronize below.
        unsafe { memcpy_dtod_async(dst.ptr(), m.addr(), m.len(), s)? };
        s.synchronize()?;
        let host = dst.to_vec()?;
        Ok(host.iter().position(|&b| b != pattern))
    })();
    if hold {
        held.push(m);
    } else {
        cache.release(m).map_err(g)?;
    }
    match check.map_err(g)? {
        None => Ok(format!("{} bytes of {pattern:#04x} ok", export.len)),
        Some(i) => Err(format!("byte {i} differs from {pattern:#04x}")),
    }
}

// ---- copies -------------------------------------------------------------------------

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn section_copies(r: &mut Report) -> Result<(), GpuError> {
    let s = Stream::runtime(0)?;
    let sizes = [0usize, 1, 3, 4096, MIB + 7, 64 * MIB];
    for (k, &n) in sizes.iter().enumerate() {
        let a = DeviceBuffer::alloc(0, n)?;
        let b = DeviceBuffer::alloc(0, n)?;
        let src = pattern(n, k as u32 + 1);
        let mut out = vec![0u8; n];
        let ev = Event::new(0)?;
        // SAFETY: a, b, src and out outlive the event synchronize below; sizes match.
        unsafe {
            memcpy_htod_async(a.ptr(), src.as_ptr(), n, s)?;
            memcpy_dtod_async(b.ptr(), a.ptr(), n, s)?;
            memcpy_dtoh_async(out.as_mut_ptr(), b.ptr(), n, s)?;
        }
        ev.record(s)?;
        ev.synchronize()?;
        let done = ev.query()?;
        r.check(
            &format!("copy HtoD+DtoD+DtoH {n} B"),
            done && out == src,
            format!(
                "event complete={done}, first difference {:?}",
                first_diff(&out, &src)
            ),
        );

        if n > 8 {
            // Unaligned: dst + 3 <- src + 1, n - 4 bytes.
            let m = n - 4;
            let mut out2 = vec![0u8; m];
            // SAFETY: ranges inside a and b; out2 outlives the synchronize.
            unsafe {
                memcpy_dtod_async(b.ptr() + 3, a.ptr() + 1, m, s)?;
                memcpy_dtoh_async(out2.as_mut_ptr(), b.ptr() + 3, m, s)?;
            }
            s.synchronize()?;
            r.check(
                &format!("copy unaligned DtoD {m} B"),
                out2 == src[1..1 + m],
                format!("first difference {:?}", first_diff(&out2, &src[1..1 + m])),
            );
        }

        if n >= MIB {
            let mut c = DeviceBuffer::alloc(0, n)?;
            // SAFETY: a and c are live device buffers of n bytes on device 0.
            unsafe { memcpy_staged(c.ptr(), 0, a.ptr(), 0, n, s)? };
            let got = c.to_vec()?;
            r.check(
                &format!("copy staged through pinned host {n} B"),
                got == src,
                format!("first difference {:?}", first_diff(&got, &src)),
            );
            c.fill(0)?;
            // SAFETY: as above; same device, so a queued DtoD.
            let path = unsafe { memcpy_peer_async(c.ptr(), 0, a.ptr(), 0, n, s)? };
            s.synchronize()?;
            r.check(
                &format!("memcpy_peer_async same device {n} B"),
                path == CopyPath::SameDevice && c.to_vec()? == src,
                format!("{path:?}"),
            );
        }
    }

    let n_dev = rankwire_gpu::device_count()?;
    if n_dev >= 2 {
        let n = 8 * MIB + 5;
        let src = pattern(n, 99);
        let mut a = DeviceBuffer::alloc(0, n)?;
        a.copy_from_host(0, &src)?;
        let b = DeviceBuffer::alloc(1, n)?;
        // SAFETY: a on device 0, b on device 1, both n bytes, synchronized below.
        let path = unsafe { memcpy_peer_async(b.ptr(), 1, a.ptr(), 0, n, s)? };
        s.synchronize()?;
        let got = b.to_vec()?;
        r.check(
            "copy device 0 -> device 1",
            got == src,
            format!(
                "path {path:?}, can_access_peer={:?}",
                rankwire_gpu::can_access_peer(0, 1)
            ),
        );
    } else {
        r.note(
            "copy between devices",
            "one device only; peer path not exercised",
        );
    }
    Ok(())
}

fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}

// ---- DMA-BUF --------------------------------------------------------------------------

fn section_dmabuf(r: &mut Report) -> Result<(), GpuError> {
    use std::os::fd::AsRawFd;
    let len = 64 * MIB;
    let big = DeviceBuffer::alloc(0, len)?;
    let (fd, off) = export_dmabuf(big.ptr(), len)?;
    let meta = std::fs::File::from(fd.try_clone().map_err(|e| GpuError::Driver {
        call: "dup",
        code: e.to_string(),
    })?)
    .metadata();
    r.check(
        "dma-buf export 64 MiB cuMemAlloc",
        off == 0 && fd.as_raw_fd() >= 0 && meta.is_ok(),
        format!(
            "fd {} offset {off} fstat size {:?}",
            fd.as_raw_fd(),
            meta.as_ref().map(|m| m.len())
        ),
    );
    drop(fd);

    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let view = big.ptr() + 12388;
    let (fd2, off2) = export_dmabuf(view, MIB)?;
    r.check(
        "dma-buf export offset view",
        off2 == view % page && fd2.as_raw_fd() >= 0,
        format!("view at base+12388: offset {off2} (page {page})"),
    );

    let pool = DeviceBuffer::alloc_pool(0, 4 * MIB)?;
    let p = export_dmabuf(pool.ptr(), 4 * MIB);
    r.check(
        "dma-buf export pool memory",
        matches!(p, Ok((_, o)) if o == pool.ptr() % page),
        format!("{:?}", p.as_ref().map(|(_, o)| o)),
    );

    let managed = DeviceBuffer::alloc_managed(0, MIB)?;
    let m = export_dmabuf(managed.ptr(), MIB);
    r.check(
        "dma-buf export managed -> refused",
        matches!(m, Err(GpuError::Unsupported(Unsupported::ManagedMemory))),
        format!("{:?}", m.map(|(_, o)| o)),
    );

    // The GPUDirect RDMA ordering step (no NIC here: the call itself, and the compute
    // capability that decides whether the runtime makes it).
    let cc = rankwire_gpu::compute_capability(0);
    r.check(
        "compute capability (flush needed below 9.0)",
        matches!(cc, Ok((major, _)) if major >= 1),
        format!("{cc:?}"),
    );
    let t0 = std::time::Instant::now();
    let f = rankwire_gpu::flush_gpudirect_rdma_writes(0);
    r.check(
        "cuFlushGPUDirectRDMAWrites",
        f.is_ok(),
        format!("{f:?} in {:?}", t0.elapsed()),
    );
    Ok(())
}

// ---- bandwidth and latency ------------------------------------------------------------

fn section_bandwidth(r: &mut Report) -> Result<(), GpuError> {
    let s = Stream::runtime(0)?;
    println!("# DtoD copy on one device (size / time per copy)");
    println!(
        "{:>12} {:>8} {:>16} {:>16}",
        "# Size", "iters", "Time/copy (us)", "Bandwidth (GB/s)"
    );
    let mut all_ok = true;
    for (size, iters) in [(MIB, 200u32), (64 * MIB, 50), (1024 * MIB, 10)] {
        let mut a = DeviceBuffer::alloc(0, size)?;
        let b = DeviceBuffer::alloc(0, size)?;
        a.fill(0x5a)?;
        let start = Event::new_timing(0)?;
        let end = Event::new_timing(0)?;
        for _ in 0..3 {
            // SAFETY: a and b are live, size bytes each, synchronized below.
            unsafe { memcpy_dtod_async(b.ptr(), a.ptr(), size, s)? };
        }
        start.record(s)?;
        for _ in 0..iters {
            // SAFETY: as above.
            unsafe { memcpy_dtod_async(b.ptr(), a.ptr(), size, s)? };
        }
        end.record(s)?;
        end.synchronize()?;
        let ms = end.elapsed_ms(&start)? as f64;
        let per_us = ms * 1e3 / f64::from(iters);
        let gbs = size as f64 / (per_us * 1e-6) / 1e9;
        all_ok &= gbs.is_finite() && gbs > 0.0;
        println!("{:>12} {:>8} {:>16.2} {:>16.1}", size, iters, per_us, gbs);
    }

    // Pinned host <-> device, 64 MiB.
    let size = 64 * MIB;
    let mut pinned = PinnedBuffer::new(size)?;
    let dev = DeviceBuffer::alloc(0, size)?;
    for (name, htod) in [("HtoD pinned", true), ("DtoH pinned", false)] {
        let start = Event::new_timing(0)?;
        let end = Event::new_timing(0)?;
        let iters = 10u32;
        start.record(s)?;
        for _ in 0..iters {
            // SAFETY: pinned and dev are live, size bytes, synchronized below.
            unsafe {
                if htod {
                    memcpy_htod_async(dev.ptr(), pinned.as_ptr(), size, s)?;
                } else {
                    memcpy_dtoh_async(pinned.as_mut_ptr(), dev.ptr(), size, s)?;
                }
            }
        }
        end.record(s)?;
        end.synchronize()?;
        let ms = end.elapsed_ms(&start)? as f64;
        let gbs = size as f64 * f64::from(iters) / (ms * 1e-3) / 1e9;
        all_ok &= gbs.is_finite() && gbs > 0.0;
        println!("# {name} {size} B: {gbs:.1} GB/s");
    }
    r.check("bandwidth measured", all_ok, "table above");
    Ok(())
}

fn section_latency(r: &mut Report) -> Result<(), GpuError> {
    let dev = DeviceBuffer::alloc(0, MIB)?;
    let host = vec![0u8; 4096];
    let n = 100_000u32;
    let mut cache = PointerCache::new(NonZeroUsize::new(64).expect("64 > 0"));
    let mut ok = true;

    let t = Instant::now();
    for _ in 0..n {
        ok &= classify_addr(dev.ptr(), 64)?.kind.is_device();
    }
    let direct = t.elapsed().as_secs_f64() * 1e9 / f64::from(n);

    let t = Instant::now();
    for _ in 0..n {
        ok &= cache.classify(dev.ptr(), 64)?.kind.is_device();
    }
    let cached = t.elapsed().as_secs_f64() * 1e9 / f64::from(n);

    let t = Instant::now();
    for _ in 0..n {
        ok &= classify(host.as_ptr(), host.len())?.kind == PtrKind::Host;
    }
    let hostq = t.elapsed().as_secs_f64() * 1e9 / f64::from(n);

    r.check(
        "classify latency",
        ok,
        format!(
            "device direct {direct:.0} ns/call, device via cache {cached:.0} ns/call, host {hostq:.0} ns/call"
        ),
    );
    Ok(())
}
