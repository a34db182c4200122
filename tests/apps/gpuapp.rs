//! rw-gpuapp: GPU point-to-point scenarios and benchmark, run under rwrun on a machine
//! with a GPU (scripts/gpu-run.sh). Without a usable GPU it prints `skipped: ...` and
//! exits 0.
//!
//! `rw-gpuapp check [MAX_BYTES]`: every combination of host / device (cuMemAlloc) /
//! device (pool) / managed memory at both ends, sizes 0 B .. MAX_BYTES, outputs poisoned
//! before each receive and compared byte for byte; a buffer freed and re-allocated at
//! the same address between sends (B008, growing and shrinking); an offset view.
//! `rw-gpuapp bench`: OSU-style device-to-device latency and bandwidth between ranks 0
//! and 1, with the single-process device-to-device copy as the physical reference.
//! `rw-gpuapp proxyring`: the stream proxy's ring (`send_device_on_stream` /
//! `recv_device_on_stream` between user kernels, buffers made and freed every round).

use std::time::Instant;

use rankwire::gpu::{DeviceBuffer, Stream};
use rankwire::{Communicator, Result};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mem {
    Host,
    Device,
    Pool,
    Managed,
}

/// A buffer of one of the kinds, with host-side fill and read-back.
enum Buf {
    Host(Vec<u8>),
    Dev(DeviceBuffer),
}

impl Buf {
    fn new(kind: Mem, len: usize) -> Buf {
        let r = match kind {
            Mem::Host => return Buf::Host(vec![0u8; len]),
            Mem::Device => DeviceBuffer::alloc(0, len),
            Mem::Pool => DeviceBuffer::alloc_pool(0, len),
            Mem::Managed => DeviceBuffer::alloc_managed(0, len),
        };
        Buf::Dev(r.unwrap_or_else(|e| fail(&format!("alloc {kind:?} {len}: {e}"))))
    }
    fn fill(&mut self, seed: u8) {
        let len = self.len();
        let v = pattern(len, seed);
        match self {
            Buf::Host(h) => h.copy_from_slice(&v),
            Buf::Dev(d) => {
                if len > 0 {
                    d.copy_from_host(0, &v)
                        .unwrap_or_else(|e| fail(&format!("fill: {e}")))
                }
            }
        }
    }
    fn poison(&mut self) {
        match self {
            Buf::Host(h) => h.fill(0xA5),
            Buf::Dev(d) => {
                if !d.is_empty() {
                    d.fill(0xA5)
                        .unwrap_or_else(|e| fail(&format!("poison: {e}")))
                }
            }
        }
    }
    fn read(&self) -> Vec<u8> {
        match self {
            Buf::Host(h) => h.clone(),
            Buf::Dev(d) => d
                .to_vec()
                .unwrap_or_else(|e| fail(&format!("read back: {e}"))),
        }
    }
    fn len(&self) -> usize {
        match self {
            Buf::Host(h) => h.len(),
            Buf::Dev(d) => d.len(),
        }
    }
    fn send(&self, w: &Communicator, dest: usize, tag: i32) -> Result<()> {
        match self {
            Buf::Host(h) => w.send(h, dest, tag),
            Buf::Dev(d) => w.send_device(d, dest, tag),
        }
    }
    fn recv(&mut self, w: &Communicator, src: usize, tag: i32) -> Result<rankwire::Status> {
        match self {
            Buf::Host(h) => w.recv(h, src, tag),
            Buf::Dev(d) => w.recv_device(d, src, tag),
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(7) as u8 ^ seed)
        .collect()
}

fn fail(msg: &str) -> ! {
    eprintln!("rw-gpuapp: FAILED: {msg}");
    std::process::exit(1)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).cloned().unwrap_or_default();
    if mode == "stream_nogpu" {
        return stream_nogpu();
    }
    if !rankwire::gpu::available() {
        println!("skipped: no usable GPU (CUDA support not built or libcuda not found)");
        return;
    }
    let u = rankwire::init().unwrap_or_else(|e| fail(&format!("init: {e}")));
    let w = u.world();
    if w.size() < 2 {
        fail("run with 2 ranks: rwrun -n 2 rw-gpuapp ...");
    }
    let r = match mode.as_str() {
        "check" => check(
            &w,
            args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64 << 20),
        ),
        "reuse" => reuse(&w, &u),
        "cudarc" => cudarc_check(&w, &u),
        "gdrside" => gdr_side(),
        "streamp2p" => stream_p2p(&w, &u),
        "channels" => channels(&w, &u),
        "collphases" => coll_phases(&w),
        "proxyring" => proxy_ring(&w, &u),
        "bench" => bench(
            &w,
            args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1 << 30),
        ),
        other => fail(&format!("unknown mode {other:?}")),
    };
    if let Err(e) = r {
        fail(&format!("rank {}: {mode}: {e}", w.rank()));
    }
    if let Some(s) = u.cuda_ipc_stats() {
        println!("rank {}: cuda ipc cache {s:?}", w.rank());
    }
    u.finalize()
        .unwrap_or_else(|e| fail(&format!("finalize: {e}")));
    println!("rank {}: {mode} OK", w.rank());
}

/// The GPU side of GPUDirect RDMA's device regions, on a machine without a NIC: the
/// allocation a buffer is registered as (start, length, buffer id) for a buffer, an
/// offset view into it and pool memory, each exported as a DMA-BUF; a buffer freed and
/// allocated again gets a new buffer id (the cache's invalidation key).
fn gdr_side() -> Result<()> {
    use rankwire::explain::gdr_region;
    let len = 8 << 20;
    let buf = DeviceBuffer::alloc(0, len).map_err(|e| rankwire::Error::Gpu(e.to_string()))?;
    let (a, off) = gdr_region(buf.ptr(), len).unwrap_or_else(|e| fail(&e));
    println!(
        "gdrside: buffer {:#x}: region {a:?}, dma-buf offset {off}",
        buf.ptr()
    );
    if a.base != buf.ptr() || a.len_bytes < len as u64 || a.buffer_id == 0 || a.device != 0 {
        fail(&format!("buffer: wrong region {a:?}"));
    }
    let (v, voff) = gdr_region(buf.ptr() + 12388, 1 << 20).unwrap_or_else(|e| fail(&e));
    println!("gdrside: view at +12388: region {v:?}, dma-buf offset {voff}");
    if v != a {
        fail(&format!(
            "an offset view must map to its allocation: {v:?} vs {a:?}"
        ));
    }
    if gdr_region(buf.ptr() + len as u64 - 16, 4096).is_ok() {
        fail("a range past the allocation was accepted");
    }
    let pool =
        DeviceBuffer::alloc_pool(0, 4 << 20).map_err(|e| rankwire::Error::Gpu(e.to_string()))?;
    match gdr_region(pool.ptr(), 4 << 20) {
        Ok((p, poff)) => println!("gdrside: pool buffer: region {p:?}, dma-buf offset {poff}"),
        Err(e) => fail(&format!("pool memory: {e}")),
    }
    let (addr, id) = (buf.ptr(), a.buffer_id);
    drop(buf);
    let again = DeviceBuffer::alloc(0, len).map_err(|e| rankwire::Error::Gpu(e.to_string()))?;
    let (b, _) = gdr_region(again.ptr(), len).unwrap_or_else(|e| fail(&e));
    println!(
        "gdrside: freed and allocated again: same address {}, buffer id {id} -> {}",
        again.ptr() == addr,
        b.buffer_id
    );
    if b.buffer_id == id {
        fail("a new allocation kept the old buffer id");
    }
    let host = vec![0u8; 4096];
    if gdr_region(host.as_ptr() as u64, 4096).is_ok() {
        fail("host memory was accepted as a device region");
    }
    Ok(())
}

fn check(w: &Communicator, max: usize) -> Result<()> {
    let kinds = [Mem::Host, Mem::Device, Mem::Pool, Mem::Managed];
    let mut sizes = vec![0usize, 1, 3, 4096, (1 << 20) + 7, 64 << 20];
    sizes.retain(|&s| s <= max);
    if max > 64 << 20 {
        sizes.push(max);
    }
    let me = w.rank();
    let mut n = 0;
    let mut seed = 1u8;
    for &len in &sizes {
        for &sk in &kinds {
            for &rk in &kinds {
                if sk == Mem::Host && rk == Mem::Host {
                    continue;
                }
                seed = seed.wrapping_add(1);
                let t = Instant::now();
                if me == 0 {
                    let mut b = Buf::new(sk, len);
                    b.fill(seed);
                    b.send(w, 1, 1)?;
                } else if me == 1 {
                    let mut b = Buf::new(rk, len);
                    b.poison();
                    let st = b.recv(w, 0, 1)?;
                    let got = b.read();
                    if st.len_bytes != len || got != pattern(len, seed) {
                        let first = got
                            .iter()
                            .zip(pattern(len, seed))
                            .position(|(a, b)| *a != b);
                        fail(&format!(
                            "{sk:?} -> {rk:?} {len} B: status {} bytes, first difference at {first:?}",
                            st.len_bytes
                        ));
                    }
                    println!(
                        "PASS {sk:?} -> {rk:?} {len} B ({:.1} ms)",
                        t.elapsed().as_secs_f64() * 1e3
                    );
                }
                n += 1;
                w.barrier()?;
            }
        }
    }
    // Offset view inside a larger allocation.
    let len = 1 << 20;
    if me == 0 {
        let mut b = DeviceBuffer::alloc(0, 3 * len).unwrap_or_else(|e| fail(&e.to_string()));
        b.copy_from_host(len + 12, &pattern(len, 77))
            .unwrap_or_else(|e| fail(&e.to_string()));
        // SAFETY: the range lies inside `b`, which outlives the blocking send.
        unsafe { w.isend_raw((b.ptr() + len as u64 + 12) as *const u8, len, 1, 2)? }.wait()?;
    } else if me == 1 {
        let mut b = Buf::new(Mem::Device, len);
        b.poison();
        b.recv(w, 0, 2)?;
        if b.read() != pattern(len, 77) {
            fail("offset view: wrong data");
        }
        println!("PASS offset view of a device allocation");
    }
    // B009: device buffers to self (the self transport is host-only: the data must be
    // staged, never memcpy'd from a device pointer) and into an ANY_SOURCE receive.
    for len in [1usize, 8, 288, 4096, 65536, 8 << 20] {
        let mut a = Buf::new(Mem::Device, len);
        a.fill(len as u8);
        let mut b = Buf::new(Mem::Device, len);
        b.poison();
        let Buf::Dev(ad) = &a else { unreachable!() };
        let Buf::Dev(bd) = &mut b else { unreachable!() };
        let s = w.isend_device(ad, me, 8)?;
        let st = w.recv_device(bd, rankwire::ANY_SOURCE, 8)?;
        s.wait()?;
        if st.source != me || b.read() != pattern(len, len as u8) {
            fail(&format!("self-send of {len} device bytes: {st:?}"));
        }
        n += 1;
    }
    println!("PASS rank {me}: device self-sends and ANY_SOURCE device receives");
    if me == 1 {
        println!("check: {n} combinations passed");
    }
    Ok(())
}

/// B008: device buffers freed and re-allocated (often at the same address) between
/// sends; growing, shrinking, and with the pool allocator.
fn reuse(w: &Communicator, u: &rankwire::Universe) -> Result<()> {
    let me = w.rank();
    for (name, kind, grow) in [
        ("growing", Mem::Device, true),
        ("shrinking", Mem::Device, false),
        ("pool", Mem::Pool, true),
    ] {
        let mut addrs = std::collections::HashSet::new();
        for i in 1..=64usize {
            let step = if grow { i } else { 65 - i };
            let len = 4096 * step + (i * 37) % 1000 + 65536;
            if me == 0 {
                let mut b = Buf::new(kind, len);
                if let Buf::Dev(d) = &b {
                    addrs.insert(d.ptr());
                }
                b.fill(i as u8);
                b.send(w, 1, 3)?;
                drop(b);
            } else if me == 1 {
                let mut b = Buf::new(Mem::Device, len);
                b.poison();
                b.recv(w, 0, 3)?;
                if b.read() != pattern(len, i as u8) {
                    fail(&format!("{name} iteration {i}: stale or wrong data"));
                }
            }
        }
        w.barrier()?;
        if me == 0 {
            println!(
                "reuse {name}: 64 iterations, {} distinct sender addresses",
                addrs.len()
            );
        } else if me == 1 {
            let s = u.cuda_ipc_stats();
            println!("PASS reuse {name}: 64 iterations correct; ipc cache {s:?}");
            if let Some(s) = s
                && s.open_now > 64
            {
                fail("IPC mappings not bounded");
            }
        }
    }
    Ok(())
}

fn bench(w: &Communicator, max: usize) -> Result<()> {
    let me = w.rank();
    if me == 0 {
        println!("# rankwire-gpu bench: device buffers (cuMemAlloc) on one GPU, ranks 0<->1");
        println!("# Size  Latency (us)");
    }
    let mut size = 1usize;
    let mut sizes = vec![0usize];
    while size <= 4 << 20 {
        sizes.push(size);
        size *= 4;
    }
    for &len in &sizes {
        let mut a = Buf::new(Mem::Device, len);
        a.fill(1);
        let iters = if len <= 65536 { 2000 } else { 200 };
        w.barrier()?;
        let mut t = Instant::now();
        for i in 0..iters + 20 {
            if i == 20 {
                t = Instant::now();
            }
            if me == 0 {
                a.send(w, 1, 5)?;
                a.recv(w, 1, 5)?;
            } else if me == 1 {
                a.recv(w, 0, 5)?;
                a.send(w, 0, 5)?;
            }
        }
        if me == 0 {
            println!(
                "{len:<10}{:>12.2}",
                t.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64)
            );
        }
    }
    // RW_GPU_BENCH_MEM=pool: the bandwidth loop on stream-ordered pool memory (what
    // cudarc allocates), which legacy CUDA IPC cannot export.
    let mem = if std::env::var("RW_GPU_BENCH_MEM").as_deref() == Ok("pool") {
        Mem::Pool
    } else {
        Mem::Device
    };
    if me == 0 {
        println!(
            "# bandwidth on {mem:?} memory, OSU-style windows of nonblocking sends (up to 16 \
             in flight, one receive buffer each)"
        );
        println!("# Size  Bandwidth (GB/s)  DtoD copy in one process (GB/s)  ratio");
    }
    let mut len = 1 << 20;
    while len <= max {
        let window = ((2usize << 30) / len).clamp(1, 16);
        let mut a = Buf::new(mem, len);
        a.fill(2);
        let mut slots: Vec<DeviceBuffer> = if me == 1 {
            (0..window)
                .map(|_| match Buf::new(mem, len) {
                    Buf::Dev(d) => d,
                    Buf::Host(_) => fail("bandwidth bench needs device memory"),
                })
                .collect()
        } else {
            Vec::new()
        };
        let rounds = (4usize << 30).div_ceil(len * window).clamp(3, 100);
        let mut ack = [0u8; 1];
        w.barrier()?;
        let mut t = Instant::now();
        for i in 0..rounds + 1 {
            if i == 1 {
                t = Instant::now();
            }
            if me == 0 {
                let Buf::Dev(d) = &a else {
                    fail("bandwidth bench needs device memory")
                };
                let reqs = (0..window)
                    .map(|_| w.isend_device(d, 1, 6))
                    .collect::<Result<Vec<_>>>()?;
                rankwire::wait_all(reqs)?;
                w.recv(&mut ack, 1, 8)?;
            } else if me == 1 {
                let reqs = slots
                    .iter_mut()
                    .map(|s| w.irecv_device(s, 0, 6))
                    .collect::<Result<Vec<_>>>()?;
                rankwire::wait_all(reqs)?;
                w.send(&ack, 0, 8)?;
            }
        }
        if me == 1 {
            w.send(&ack, 0, 7)?;
        } else if me == 0 {
            w.recv(&mut ack, 1, 7)?;
            let secs = t.elapsed().as_secs_f64();
            let gbs = (len * window * rounds) as f64 / secs / 1e9;
            let reference = dtod_reference(len);
            println!(
                "{len:<12}{gbs:>10.1}{reference:>16.1}{:>10.2}",
                gbs / reference
            );
        }
        len *= 4;
    }
    Ok(())
}

/// Single-process device-to-device copy bandwidth (GB/s) for `len` bytes.
fn dtod_reference(len: usize) -> f64 {
    let src = DeviceBuffer::alloc(0, len).unwrap_or_else(|e| fail(&e.to_string()));
    let dst = DeviceBuffer::alloc(0, len).unwrap_or_else(|e| fail(&e.to_string()));
    let stream = Stream::runtime(0).unwrap_or_else(|e| fail(&e.to_string()));
    let iters = (4usize << 30).div_ceil(len).clamp(5, 200);
    let run = |n: usize| {
        for _ in 0..n {
            // SAFETY: both buffers live, len bytes each, distinct.
            unsafe { rankwire::gpu::memcpy_dtod_async(dst.ptr(), src.ptr(), len, stream) }
                .unwrap_or_else(|e| fail(&e.to_string()));
        }
        stream
            .synchronize()
            .unwrap_or_else(|e| fail(&e.to_string()));
    };
    run(2);
    let t = Instant::now();
    run(iters);
    (len * iters) as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// Buffers from cudarc's safe API (`CudaSlice`, its views; stream-ordered pool memory)
/// sent and received directly, and a device allreduce on them.
#[cfg(feature = "cuda")]
fn cudarc_check(w: &Communicator, u: &rankwire::Universe) -> Result<()> {
    use rankwire::cudarc::driver::CudaContext;
    let gpu = u.gpu_device()?;
    let ctx =
        CudaContext::new(gpu as usize).unwrap_or_else(|e| fail(&format!("cudarc context: {e}")));
    let stream = ctx.default_stream();
    let dev = |e: rankwire::cudarc::driver::DriverError| -> ! { fail(&format!("cudarc: {e}")) };
    let me = w.rank();
    for (i, n) in [1usize, 3, 1000, (1 << 20) + 7, 16 << 20]
        .into_iter()
        .enumerate()
    {
        let tag = i as i32;
        let v: Vec<u32> = (0..n as u32)
            .map(|x| x.wrapping_mul(2_654_435_761))
            .collect();
        if me == 0 {
            let d = stream.clone_htod(&v).unwrap_or_else(|e| dev(e));
            w.send_device(&d, 1, tag)?;
            // A view at an offset.
            w.send_device(&d.slice(n / 3..), 1, tag + 100)?;
        } else if me == 1 {
            let mut r = stream.alloc_zeros::<u32>(n).unwrap_or_else(|e| dev(e));
            let st = w.recv_device(&mut r, 0, tag)?;
            let got = stream.clone_dtoh(&r).unwrap_or_else(|e| dev(e));
            if st.len_bytes != 4 * n || got != v {
                fail(&format!("cudarc slice of {n} u32: wrong data"));
            }
            let mut r2 = stream
                .alloc_zeros::<u32>(n - n / 3)
                .unwrap_or_else(|e| dev(e));
            let mut view = r2.slice_mut(..);
            w.recv_device(&mut view, 0, tag + 100)?;
            let got = stream.clone_dtoh(&r2).unwrap_or_else(|e| dev(e));
            if got[..] != v[n / 3..] {
                fail(&format!("cudarc view of {} u32: wrong data", n - n / 3));
            }
        }
    }
    // Allreduce on cudarc slices.
    let n = 100_001;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 + me as f32).collect();
    let send = stream.clone_htod(&x).unwrap_or_else(|e| dev(e));
    let mut recv = stream.alloc_zeros::<f32>(n).unwrap_or_else(|e| dev(e));
    w.allreduce_device(&send, &mut recv, rankwire::Datatype::F32, rankwire::Op::Sum)?;
    let got = stream.clone_dtoh(&recv).unwrap_or_else(|e| dev(e));
    let p = w.size() as f32;
    for (i, g) in got.iter().enumerate() {
        let want = p * (i % 97) as f32 + (0..w.size()).map(|r| r as f32).sum::<f32>();
        if *g != want {
            fail(&format!(
                "cudarc allreduce element {i}: got {g}, want {want}"
            ));
        }
    }
    println!("rank {me}: cudarc OK (GPU {gpu})");
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn cudarc_check(_w: &Communicator, _u: &rankwire::Universe) -> Result<()> {
    println!("skipped: cudarc buffers need the `cuda` feature");
    Ok(())
}

/// Without a GPU: the stream-ordered point-to-point calls give a clear error (a rank
/// out of range: `Usage`; otherwise `Gpu`), no panic and no hang. On a machine with a
/// GPU it only says it skipped (the `streamp2p` mode runs the real check there).
fn stream_nogpu() {
    if rankwire::gpu::available() {
        println!("skipped: this machine has a GPU (streamp2p checks it)");
        return;
    }
    let u = rankwire::init().unwrap_or_else(|e| fail(&format!("init: {e}")));
    let w = u.world();
    // SAFETY: the legacy stream handle of device 0; never used, since every call below
    // fails before it touches the stream (no GPU support here).
    let stream = unsafe { Stream::from_raw(std::ptr::null_mut(), 0) };
    let n = w.size();
    // SAFETY: nothing is enqueued (every call fails), so no memory is touched.
    let bad_rank = unsafe { w.send_device_on_stream(0x1000, 8, n, 0, &stream) };
    if !matches!(bad_rank, Err(rankwire::Error::Usage(_))) {
        fail(&format!("rank out of range: {bad_rank:?}"));
    }
    // SAFETY: as above.
    let bad_tag = unsafe { w.recv_device_on_stream(0x1000, 8, 0, -5, &stream) };
    if !matches!(bad_tag, Err(rankwire::Error::Usage(_))) {
        fail(&format!("bad tag: {bad_tag:?}"));
    }
    // SAFETY: as above.
    let no_gpu = unsafe { w.send_device_on_stream(0x1000, 8, 0, 0, &stream) };
    match no_gpu {
        Err(rankwire::Error::Gpu(m)) if m.contains("stream-ordered") => {
            println!("rank {}: stream_nogpu: {m}", w.rank())
        }
        other => fail(&format!("without a GPU: {other:?}")),
    }
    w.wait_stream_ops()
        .unwrap_or_else(|e| fail(&format!("wait_stream_ops with nothing enqueued: {e}")));
    match w.device_channels(0) {
        Err(rankwire::Error::Gpu(m)) if m.contains("device_channels") => {
            println!("rank {}: device_channels: {m}", w.rank())
        }
        other => fail(&format!("device_channels without a GPU: {other:?}")),
    }
    u.finalize()
        .unwrap_or_else(|e| fail(&format!("finalize: {e}")));
    println!("rank {}: stream_nogpu OK", w.rank());
}

/// `DeviceChannels` (NCCL-style stream-ordered point-to-point) at 2 or more ranks: a
/// ring exchange between user kernels (sizes from RW_CH_SIZES, default 8 B – 4 MiB, the
/// kernel route; above one scratch slot the host route, which needs RW_CH_SERIAL=1's
/// blocking order), checked on the host; then, between
/// ranks 0 and 1, an 8-byte ping-pong timed like `streamp2p`'s; then a size mismatch
/// that both ranks must report as an error (not wrong data, not a hang).
fn channels(w: &Communicator, u: &rankwire::Universe) -> Result<()> {
    let (me, n) = (w.rank(), w.size());
    let dev = u.gpu_device()?;
    let gpu = |e: rankwire::gpu::GpuError| rankwire::Error::Gpu(e.to_string());
    let t0 = Instant::now();
    let ch = w.device_channels(dev)?;
    println!(
        "rank {me}: channels set up in {:.1} ms; peer memory to {:?}",
        t0.elapsed().as_secs_f64() * 1e3,
        ch.peer_memory_ranks()
    );
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let ss = Stream::new(dev).map_err(gpu)?;
    let rs = Stream::new(dev).map_err(gpu)?;
    // SAFETY: nothing is enqueued: the peer is this rank.
    let selfsend = unsafe { ch.send_on_stream(0x1000, 8, me, &ss) };
    if !matches!(selfsend, Err(rankwire::Error::Usage(_))) {
        return Err(rankwire::Error::Gpu(format!(
            "a send to this rank must be a usage error: {selfsend:?}"
        )));
    }
    // RW_CH_SIZES: the ring's sizes (default: the kernel route's, up to one scratch
    // slot); RW_CH_SERIAL=1: one stream, even ranks send first, odd ranks receive
    // first (the order blocking calls need) instead of two streams.
    let sizes: Vec<usize> = std::env::var("RW_CH_SIZES")
        .unwrap_or_else(|_| "8,4096,65536,4194304".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let serial = std::env::var_os("RW_CH_SERIAL").is_some();
    let rsr = if serial { &ss } else { &rs };
    for &len in &sizes {
        for round in 0..3u8 {
            let mine = bytes_of(me as u8 * 16 + round, len);
            let want = bytes_of(from as u8 * 16 + round, len);
            let junk = vec![0xEEu8; len];
            let (src, sbuf) = (dev_with(dev, &mine)?, dev_with(dev, &junk)?);
            let (rbuf, out) = (dev_with(dev, &junk)?, dev_with(dev, &junk)?);
            let jb = dev_with(dev, &junk)?;
            // SAFETY: every buffer lives until both streams are synchronized below.
            unsafe {
                copy_kernel(sbuf.ptr(), src.ptr(), len, &ss)?;
                let recv = || -> Result<()> {
                    ch.recv_on_stream(rbuf.ptr(), len, from, rsr)?;
                    copy_kernel(out.ptr(), rbuf.ptr(), len, rsr)
                };
                if serial && me % 2 == 1 {
                    recv()?;
                }
                ch.send_on_stream(sbuf.ptr(), len, to, &ss)?;
                // Overwrite the send buffer right after: the send must have read it.
                copy_kernel(sbuf.ptr(), jb.ptr(), len, &ss)?;
                if !(serial && me % 2 == 1) {
                    recv()?;
                }
            }
            ss.synchronize().map_err(gpu)?;
            rsr.synchronize().map_err(gpu)?;
            ch.check_errors()?;
            let got = out.to_vec().map_err(gpu)?;
            if got != want {
                let bad = got.iter().zip(&want).position(|(a, b)| a != b);
                return Err(rankwire::Error::Gpu(format!(
                    "{len} B round {round}: wrong data from rank {from} (first difference at {bad:?})"
                )));
            }
        }
        println!(
            "rank {me}: channels ring {len} B ok ({})",
            if serial { "one stream" } else { "two streams" }
        );
    }
    w.barrier()?;
    let counts: Vec<usize> = std::env::var("RW_STREAM_ITERS")
        .unwrap_or_else(|_| "20,200,2000,20000".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    if me <= 1 {
        let peer = 1 - me;
        let x = dev_with(dev, &[0u8; 8])?;
        let y = dev_with(dev, &[0u8; 8])?;
        for iters in counts {
            let t0 = Instant::now();
            for _ in 0..iters {
                // SAFETY: x and y live until the synchronize below.
                unsafe {
                    if me == 0 {
                        ch.send_on_stream(x.ptr(), 8, peer, &ss)?;
                        ch.recv_on_stream(y.ptr(), 8, peer, &ss)?;
                    } else {
                        ch.recv_on_stream(y.ptr(), 8, peer, &ss)?;
                        ch.send_on_stream(x.ptr(), 8, peer, &ss)?;
                    }
                }
            }
            let enq = t0.elapsed();
            ss.synchronize().map_err(gpu)?;
            ch.check_errors()?;
            let total = t0.elapsed();
            println!(
                "rank {me}: channels 8 B ping-pong: one way {:.2} us ({iters} round trips; enqueueing took {:.2} us per call)",
                total.as_secs_f64() * 1e6 / (2.0 * iters as f64),
                enq.as_secs_f64() * 1e6 / (2.0 * iters as f64)
            );
        }
    }
    w.barrier()?;
    // A size mismatch between ranks 0 and 1 on the kernel route: an error on both.
    if me <= 1 && ch.peer_memory_ranks().contains(&(1 - me)) {
        let len = if me == 0 { 64 } else { 128 };
        let b = dev_with(dev, &[0u8; 128])?;
        let t0 = Instant::now();
        // SAFETY: b lives until the synchronize below.
        unsafe {
            if me == 0 {
                ch.send_on_stream(b.ptr(), len, 1, &ss)?;
            } else {
                ch.recv_on_stream(b.ptr(), len, 0, &ss)?;
            }
        }
        ss.synchronize().map_err(gpu)?;
        match ch.check_errors() {
            Err(e) if e.to_string().contains("other arguments") => println!(
                "rank {me}: size mismatch reported in {:.1} ms: {e}",
                t0.elapsed().as_secs_f64() * 1e3
            ),
            other => {
                return Err(rankwire::Error::Gpu(format!(
                    "a size mismatch must be an error: {other:?}"
                )));
            }
        }
    }
    w.barrier()
}

/// The stream proxy (`send_device_on_stream` / `recv_device_on_stream`) in the ring
/// that hung on an H100 (benches/results/gpu-2026-12-06k, when device channels used
/// it): each rank sends to the next and receives from the previous between user
/// kernels, on two streams (sends on one, receives on the other, posted at once), or
/// with RW_CH_SERIAL=1 on one stream in blocking order (even ranks send first). Sizes
/// from RW_CH_SIZES (default 8 B, 64 KiB, 8 MiB), three rounds each, the buffers made
/// and freed every round (frees then run while the next round's waits are enqueued);
/// the data checked on the host.
fn proxy_ring(w: &Communicator, u: &rankwire::Universe) -> Result<()> {
    let (me, n) = (w.rank(), w.size());
    let dev = u.gpu_device()?;
    let gpu = |e: rankwire::gpu::GpuError| rankwire::Error::Gpu(e.to_string());
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let ss = Stream::new(dev).map_err(gpu)?;
    let rs = Stream::new(dev).map_err(gpu)?;
    let sizes: Vec<usize> = std::env::var("RW_CH_SIZES")
        .unwrap_or_else(|_| "8,65536,8388608".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let serial = std::env::var_os("RW_CH_SERIAL").is_some();
    let rsr = if serial { &ss } else { &rs };
    let how = if serial { "one stream" } else { "two streams" };
    for &len in &sizes {
        let t0 = Instant::now();
        for round in 0..3u8 {
            let mine = bytes_of(me as u8 * 16 + round, len);
            let want = bytes_of(from as u8 * 16 + round, len);
            let junk = vec![0xEEu8; len];
            let (src, sbuf) = (dev_with(dev, &mine)?, dev_with(dev, &junk)?);
            let (rbuf, out) = (dev_with(dev, &junk)?, dev_with(dev, &junk)?);
            let jb = dev_with(dev, &junk)?;
            let tag = i32::from(round);
            // SAFETY: every buffer lives until both streams are synchronized below.
            unsafe {
                copy_kernel(sbuf.ptr(), src.ptr(), len, &ss)?;
                let recv = || -> Result<()> {
                    w.recv_device_on_stream(rbuf.ptr(), len, from, tag, rsr)?;
                    copy_kernel(out.ptr(), rbuf.ptr(), len, rsr)
                };
                if serial && me % 2 == 1 {
                    recv()?;
                }
                w.send_device_on_stream(sbuf.ptr(), len, to, tag, &ss)?;
                // Overwrite the send buffer right after: the send must have read it.
                copy_kernel(sbuf.ptr(), jb.ptr(), len, &ss)?;
                if !(serial && me % 2 == 1) {
                    recv()?;
                }
            }
            ss.synchronize().map_err(gpu)?;
            rsr.synchronize().map_err(gpu)?;
            w.wait_stream_ops()?;
            let got = out.to_vec().map_err(gpu)?;
            if got != want {
                let bad = got.iter().zip(&want).position(|(a, b)| a != b);
                return Err(rankwire::Error::Gpu(format!(
                    "{len} B round {round}: wrong data from rank {from} (first difference at {bad:?})"
                )));
            }
        }
        println!(
            "rank {me}: proxy ring {len} B ok ({how}; 3 rounds in {:.1} ms)",
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
    w.barrier()
}

/// A copy kernel on `stream`: `dst = src` for `bytes` (a multiple of 4) bytes.
fn copy_kernel(dst: u64, src: u64, bytes: usize, stream: &Stream) -> Result<()> {
    use rankwire::gpu::{DType, RedOp};
    // SAFETY: the callers pass live device buffers of at least `bytes` bytes, kept
    // until the stream is synchronized.
    unsafe { rankwire::gpu::reduce_async(DType::U32, RedOp::Bor, dst, src, src, bytes / 4, stream) }
        .map_err(|e| rankwire::Error::Gpu(format!("copy kernel: {e}")))
}

fn dev_with(dev: i32, data: &[u8]) -> Result<DeviceBuffer> {
    let mut b =
        DeviceBuffer::alloc(dev, data.len()).map_err(|e| rankwire::Error::Gpu(e.to_string()))?;
    b.copy_from_host(0, data)
        .map_err(|e| rankwire::Error::Gpu(e.to_string()))?;
    Ok(b)
}

fn bytes_of(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Stream-ordered point-to-point between user kernels on one stream, ranks 0 and 1
/// (issue 18): rank 0 writes A into `buf` with a kernel, sends it on the stream, then
/// a kernel overwrites `buf` with B (so the send must have read it before), sends it
/// again, and receives C back; rank 1 poisons its buffers with a kernel, receives A and
/// B on the stream with kernels copying them out after each receive, then sends C from
/// a buffer a kernel fills. No host synchronization in between; one
/// `stream.synchronize()` at the end. Sizes 8 B – 4 MiB; a third message from rank 0 is
/// received by a blocking `recv_device` (stream-ordered sends match any receive). Then
/// 8-byte ping-pongs of 20, 200 and 2000 round trips enqueued back to back
/// (`RW_STREAM_ITERS`) give the one-way time of a stream-ordered message.
fn stream_p2p(w: &Communicator, u: &rankwire::Universe) -> Result<()> {
    let me = w.rank();
    if me > 1 {
        return w.barrier();
    }
    let dev = u.gpu_device()?;
    let stream = Stream::new(dev).map_err(|e| rankwire::Error::Gpu(e.to_string()))?;
    let gpu = |e: rankwire::gpu::GpuError| rankwire::Error::Gpu(e.to_string());
    // RW_STREAM_PP_ONLY=1 skips the data phase (diagnosis: the ping-pong alone).
    let sizes: &[usize] = if std::env::var_os("RW_STREAM_PP_ONLY").is_some() {
        &[]
    } else {
        &[8, 4096, 65536, 4 << 20]
    };
    for (k, &len) in sizes.iter().enumerate() {
        let tag = 10 * k as i32;
        let (a, b, c) = (bytes_of(1, len), bytes_of(2, len), bytes_of(3, len));
        let junk = vec![0xEEu8; len];
        if me == 0 {
            let (da, db, dc) = (
                dev_with(dev, &a)?,
                dev_with(dev, &b)?,
                dev_with(dev, &junk)?,
            );
            let buf = dev_with(dev, &junk)?;
            let back = dev_with(dev, &junk)?;
            let third = dev_with(dev, &c)?;
            // SAFETY: every buffer lives until the synchronize below.
            unsafe {
                copy_kernel(buf.ptr(), da.ptr(), len, &stream)?;
                w.send_device_on_stream(buf.ptr(), len, 1, tag, &stream)?;
                copy_kernel(buf.ptr(), db.ptr(), len, &stream)?;
                w.send_device_on_stream(buf.ptr(), len, 1, tag + 1, &stream)?;
                w.recv_device_on_stream(back.ptr(), len, 1, tag + 2, &stream)?;
                copy_kernel(dc.ptr(), back.ptr(), len, &stream)?;
                w.send_device_on_stream(third.ptr(), len, 1, tag + 3, &stream)?;
            }
            stream.synchronize().map_err(gpu)?;
            w.wait_stream_ops()?;
            let got = dc.to_vec().map_err(gpu)?;
            if got != c {
                return Err(rankwire::Error::Gpu(format!(
                    "{len} B: rank 0 received wrong data"
                )));
            }
        } else {
            let (dj, dc) = (dev_with(dev, &junk)?, dev_with(dev, &c)?);
            let (r1, r2) = (dev_with(dev, &junk)?, dev_with(dev, &junk)?);
            let (o1, o2) = (dev_with(dev, &junk)?, dev_with(dev, &junk)?);
            let sb = dev_with(dev, &junk)?;
            // SAFETY: every buffer lives until the synchronize below.
            unsafe {
                copy_kernel(r1.ptr(), dj.ptr(), len, &stream)?;
                w.recv_device_on_stream(r1.ptr(), len, 0, tag, &stream)?;
                copy_kernel(o1.ptr(), r1.ptr(), len, &stream)?;
                w.recv_device_on_stream(r2.ptr(), len, 0, tag + 1, &stream)?;
                copy_kernel(o2.ptr(), r2.ptr(), len, &stream)?;
                copy_kernel(sb.ptr(), dc.ptr(), len, &stream)?;
                w.send_device_on_stream(sb.ptr(), len, 0, tag + 2, &stream)?;
            }
            // The third message: a blocking device receive on the host.
            let mut third = dev_with(dev, &junk)?;
            w.recv_device(&mut third, 0, tag + 3)?;
            stream.synchronize().map_err(gpu)?;
            w.wait_stream_ops()?;
            let (g1, g2, g3) = (
                o1.to_vec().map_err(gpu)?,
                o2.to_vec().map_err(gpu)?,
                third.to_vec().map_err(gpu)?,
            );
            if g1 != a || g2 != b || g3 != c {
                return Err(rankwire::Error::Gpu(format!(
                    "{len} B: rank 1 received wrong data (first {}, second {}, third {})",
                    g1 == a,
                    g2 == b,
                    g3 == c
                )));
            }
        }
        println!("rank {me}: stream-ordered {len} B ok");
    }
    // One-way time: round trips of 8 B enqueued back to back, 20, then 200, then 2000
    // (RW_STREAM_ITERS, comma-separated), each count timed on its own, so that a count
    // that stalls shows how far the smaller ones got and how long they took.
    let counts: Vec<usize> = std::env::var("RW_STREAM_ITERS")
        .unwrap_or_else(|_| "20,200,2000".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let x = dev_with(dev, &[0u8; 8])?;
    let y = dev_with(dev, &[0u8; 8])?;
    for iters in counts {
        w.barrier()?;
        let t0 = Instant::now();
        // A watcher prints how far the loop got every 5 s, so that a stall shows
        // whether the enqueueing (bounded by the operations in flight) or the final
        // synchronize stopped, and after how many round trips.
        let done = std::sync::atomic::AtomicUsize::new(0);
        let finished = std::sync::atomic::AtomicBool::new(false);
        let r = std::thread::scope(|sc| -> Result<()> {
            sc.spawn(|| {
                use std::sync::atomic::Ordering::Relaxed;
                let mut next = 5.0;
                while !finished.load(Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    let t = t0.elapsed().as_secs_f64();
                    if t >= next {
                        next += 5.0;
                        eprintln!(
                            "rank {me}: after {t:.0} s: {} of {iters} round trips enqueued",
                            done.load(Relaxed)
                        );
                    }
                }
            });
            let body = || -> Result<()> {
                for _ in 0..iters {
                    // SAFETY: x and y live until the synchronize below.
                    unsafe {
                        if me == 0 {
                            w.send_device_on_stream(x.ptr(), 8, 1, 7, &stream)?;
                            w.recv_device_on_stream(y.ptr(), 8, 1, 7, &stream)?;
                        } else {
                            w.recv_device_on_stream(y.ptr(), 8, 0, 7, &stream)?;
                            w.send_device_on_stream(x.ptr(), 8, 0, 7, &stream)?;
                        }
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let enqueued = t0.elapsed();
                eprintln!(
                    "rank {me}: {iters} round trips enqueued in {:.1} ms",
                    enqueued.as_secs_f64() * 1e3
                );
                stream.synchronize().map_err(gpu)?;
                w.wait_stream_ops()?;
                let total = t0.elapsed();
                println!(
                    "rank {me}: stream-ordered 8 B ping-pong: one way {:.2} us ({iters} round trips; enqueueing took {:.2} us per call)",
                    total.as_secs_f64() * 1e6 / (2.0 * iters as f64),
                    enqueued.as_secs_f64() * 1e6 / (2.0 * iters as f64)
                );
                Ok(())
            };
            // The watcher ends also when the body panics.
            struct Finish<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Finish<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let _finish = Finish(&finished);
            body()
        });
        r?;
    }
    w.barrier()
}

/// Where the time of a small device allreduce goes (issue 18: allreduce 8 B ≤ 15 µs):
/// per call, the blocking `allreduce_device` (host work, launch, kernel, completion
/// seen by the host), and the stream-ordered form enqueued back to back on one stream
/// (the host's share: what a call costs before the launch returns) and its throughput
/// once synchronized. 8 bytes (2 f32, sum), `RW_PHASE_ITERS` calls (default 2000)
/// after 200 untimed; every rank prints its own figures.
fn coll_phases(w: &Communicator) -> Result<()> {
    let me = w.rank();
    let iters: usize = std::env::var("RW_PHASE_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let gpu = |e: rankwire::gpu::GpuError| rankwire::Error::Gpu(e.to_string());
    let send = dev_with(0, &[1u8; 8])?;
    let mut recv = dev_with(0, &[0u8; 8])?;
    for _ in 0..200 {
        w.allreduce_device(&send, &mut recv, rankwire::Datatype::F32, rankwire::Op::Sum)?;
    }
    w.barrier()?;
    let t0 = Instant::now();
    for _ in 0..iters {
        w.allreduce_device(&send, &mut recv, rankwire::Datatype::F32, rankwire::Op::Sum)?;
    }
    let blocking = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
    let s = Stream::new(0).map_err(gpu)?;
    let (sp, rp) = (send.ptr(), recv.ptr());
    for _ in 0..200 {
        // SAFETY: both buffers live until the synchronize below.
        unsafe {
            w.allreduce_device_on_stream(sp, rp, 8, rankwire::Datatype::F32, rankwire::Op::Sum, &s)?
        };
    }
    s.synchronize().map_err(gpu)?;
    w.barrier()?;
    let t0 = Instant::now();
    for _ in 0..iters {
        // SAFETY: both buffers live until the synchronize below.
        unsafe {
            w.allreduce_device_on_stream(sp, rp, 8, rankwire::Datatype::F32, rankwire::Op::Sum, &s)?
        };
    }
    let enq = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
    s.synchronize().map_err(gpu)?;
    let streamed = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
    let got = recv.to_vec().map_err(gpu)?;
    let want = f32::from_ne_bytes([1, 1, 1, 1]) * w.size() as f32;
    let v = f32::from_ne_bytes([got[0], got[1], got[2], got[3]]);
    if v != want {
        return Err(rankwire::Error::Gpu(format!(
            "allreduce gave {v}, want {want}"
        )));
    }
    println!(
        "rank {me}: allreduce 8 B ({} ranks, {iters} calls): blocking {blocking:.2} us/call; stream-ordered: enqueue {enq:.2} us/call, {streamed:.2} us/call until synchronized",
        w.size()
    );
    w.barrier()
}
