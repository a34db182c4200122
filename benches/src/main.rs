//! rankwire-bench: OSU-style benchmarks: point-to-point between ranks 0 and 1, and
//! collectives over the world communicator.
//!
//! Point-to-point modes (as in the OSU micro-benchmarks, `osu_latency`, `osu_bw`,
//! `osu_bibw`):
//! - `latency`: ping-pong; one-way latency = round trip / 2, in microseconds.
//! - `bw`: rank 0 posts a window of `--window` nonblocking sends, rank 1 a window of
//!   receives, then rank 1 answers with a 4-byte ack; MB/s = bytes × window × iters /
//!   time / 1e6. Each receive slot has its own buffer (MPI-correct; posting all slots
//!   into one buffer inflates figures through caches).
//! - `bibw`: both ranks do the `bw` window towards each other at once; MB/s counts both
//!   directions.
//! - `drain` (host buffers): what a window of small messages costs each side, apart
//!   from the other side's speed. Per iteration rank 1 sends a token, sleeps
//!   `--drain-sleep-us` (no rankwire call, so no progress), then times posting a window
//!   of receives and the `wait_all` that completes them: the messages are already in
//!   shared memory, so the wait is the receiver's own work of taking them (poll, match,
//!   copy, complete). Rank 0 waits for the token, then times posting the window of
//!   sends and their `wait_all`. Row: size, then nanoseconds per message: send post,
//!   send wait, receive post, receive wait, then `ok`, or `waited` when posting and
//!   waiting for the sends took more than half the sleep per window: the messages did not all fit
//!   without the receiver (a window over the shared-memory ring or the peer's buffers,
//!   or a rendezvous size), so the receiver's figures include other work and the
//!   sender's the sleep. Windows: `iters / 10` (at least 1), warm-up `warmup / 10`
//!   (at least 1), as `peerbench drain` (benches/peers), the same loop in C, for sizes
//!   up to 8 KiB. Made for small messages (`--max-size 64` or so) and exactly 2 ranks
//!   (more ranks idle meanwhile and take CPU time from the two); one buffer per slot.
//!
//! Collective modes (as `osu_allreduce`, `osu_bcast`, `osu_allgather`, `osu_alltoall`,
//! `osu_barrier`): every rank times `iters` back-to-back calls after a barrier (with
//! `--barrier-each`: each call timed alone with an untimed barrier after it, OSU's
//! loop; `barrier` itself is then timed call by call with nothing in between, as
//! `osu_barrier` does); the row gives the average over ranks of each rank's per-call time, and the
//! minimum and maximum over ranks, in microseconds.
//! - `allreduce`: `Size` bytes of f32 summed (count = Size/4). Also `algbw` = Size /
//!   time and `busbw` = algbw × 2(n−1)/n in GB/s (1e9 bytes), as in nccl-tests
//!   (`doc/PERFORMANCE.md`): busbw is the per-rank link traffic of an optimal ring.
//!   With `-d cuda` also `bound_us`, the memory bound of the call on the GPU: HBM bytes /
//!   device copy bandwidth (see [`allreduce_hbm_bytes`], [`bound_us`]). The bandwidth is
//!   `--copy-bw` B/s, else measured once at start by rank 0 (a 256 MiB
//!   `cuMemcpyDtoDAsync` on GPU 0, best of 5, counted as read + write) and printed.
//! - `bcast`: `Size` bytes from rank 0.
//! - `allgather`: `Size` bytes contributed per rank (n × Size received).
//! - `alltoall`: `Size` bytes per destination (n × Size sent and received).
//! - `barrier`: one row, no size.
//!
//! The algorithm is the library's choice unless `RANKWIRE_<COLL>_ALGO` forces one.
//!
//! `-d cuda` (latency, bw, bibw, allreduce, bcast, allgather): the buffers are device
//! memory on GPU 0 (`cuMemAlloc`, one receive buffer per window slot); point-to-point
//! uses `send_device`/`isend_device`, collectives the device collectives
//! (`allreduce_device`, ...): reductions as GPU kernels, transfers over CUDA IPC. Needs the
//! `cuda` feature (on by default).
//!
//! Output: `# Size  Latency (us)`, `# Size  Bandwidth (MB/s)`, the `drain` columns, or
//! `# Size  Avg Latency (us) …`, one row per size from `--min-size` (default 0 for
//! latency, 1 for bw, 4 for collectives) to `--max-size` bytes (powers of two).
//!
//! Usage: `rwrun -n 2 target/release/rankwire-bench latency|bw|bibw|drain|allreduce|bcast|allgather|alltoall|barrier [options]`

use std::time::Instant;

use anyhow::{Result, bail};
use clap::{Parser, ValueEnum};

/// Where the collective buffers live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Device {
    /// Host memory.
    Host,
    /// CUDA device memory on GPU 0.
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    Latency,
    Bw,
    Bibw,
    Drain,
    Allreduce,
    Bcast,
    Allgather,
    Alltoall,
    Barrier,
}

impl Mode {
    fn is_collective(self) -> bool {
        !matches!(self, Mode::Latency | Mode::Bw | Mode::Bibw | Mode::Drain)
    }
}

/// OSU-style benchmarks for rankwire (run under rwrun; point-to-point modes need ≥ 2
/// ranks).
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// What to measure.
    mode: Mode,
    /// Smallest message size in bytes (default: 0 for latency, 1 for bw/bibw, 4 for
    /// collectives).
    #[arg(long)]
    min_size: Option<usize>,
    /// Largest message size in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_size: usize,
    /// Timed iterations per size for messages up to 8 KiB (fewer for larger ones:
    /// a tenth for point-to-point, proportionally fewer for collectives).
    #[arg(long, short = 'i', default_value_t = 10_000)]
    iters: usize,
    /// Untimed warm-up iterations per size.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Window of outstanding messages for bw/bibw/drain (at least 1).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    window: u32,
    /// bw/bibw/drain receive buffers: `window` = one per window slot (default; what the peers'
    /// program does), `single` = every receive of the window into the same buffer (what
    /// the OSU micro-benchmarks 7.2 `osu_bw` does by default; compare with OSU in this
    /// form).
    #[arg(long, value_enum, default_value_t = RecvBuffers::Window)]
    recv_buffers: RecvBuffers,
    /// bw/bibw/drain requests: `vec` = one `Request` per operation, completed by
    /// `rankwire::wait_all` (default), `set` = the window's operations in one
    /// `rankwire::RequestSet` set (its `isend`/`irecv`/`wait_all`).
    #[arg(long, value_enum, default_value_t = ReqForm::Vec)]
    requests: ReqForm,
    /// drain: microseconds rank 1 sleeps before posting its window (long enough for
    /// every message to be there).
    #[arg(long, default_value_t = 100)]
    drain_sleep_us: u64,
    /// Host buffers start this many bytes past a page boundary (default 0: page-aligned,
    /// as the OSU micro-benchmarks and the peers' program allocate them; 16 is where
    /// `malloc` puts large blocks).
    #[arg(long, default_value_t = 0)]
    offset: usize,
    /// Memory of the collective buffers (`cuda`: device memory, device collectives).
    #[arg(long, short = 'd', value_enum, default_value_t = Device::Host)]
    device: Device,
    /// Device copy bandwidth in bytes per second, reads plus writes, for the `bound_us`
    /// column of `allreduce -d cuda` (default: measured at start; 4.3e12 was measured on
    /// one H200).
    #[arg(long, value_name = "BYTES_PER_S")]
    copy_bw: Option<f64>,
    /// Collectives: a barrier after every call, and only the call timed (the loop of the
    /// OSU micro-benchmarks 7.2 `osu_allreduce`, `osu_bcast`, ...: `t_start`, the call,
    /// `t_stop`, `MPI_Barrier`). Default: calls back to back, one timer around the loop.
    /// `barrier` itself: each call timed alone, nothing in between (`osu_barrier` 7.2's
    /// loop: `t_start`, `MPI_Barrier`, `t_stop`).
    #[arg(long)]
    barrier_each: bool,
}

/// Device copy bandwidth (bytes per second, read + write) used when the measurement
/// fails: a device-to-device copy on one H200 moved ~2.1 TB/s each way
/// (`../shared/notes/device.md`, 2026-11-29 and 2026-12-01).
const DEFAULT_COPY_BW: f64 = 4.3e12;

/// HBM bytes one allreduce of `size_bytes` moves on one GPU that `ranks_on_gpu` ranks
/// share, at the least: each rank's input read once and each rank's output written once,
/// `2 × p × size_bytes`. A two-shot schedule (each rank reduces 1/p of the inputs, then
/// gathers the other (p − 1)/p of the result) reads and writes more; this is the floor
/// any schedule pays. Example (issue 18): 2 ranks, 256 MiB: 2 × 2 × 256 MiB = 1 GiB.
fn allreduce_hbm_bytes(ranks_on_gpu: usize, size_bytes: usize) -> f64 {
    2.0 * ranks_on_gpu as f64 * size_bytes as f64
}

/// Memory-bound time of that allreduce in microseconds: [`allreduce_hbm_bytes`] /
/// `copy_bw` (bytes per second, reads plus writes, as a device copy counts them). With
/// ranks on different GPUs each GPU is bounded alone: pass the largest number of ranks
/// on one GPU. 1 GiB at 4.3e12 B/s ≈ 250 µs.
fn bound_us(ranks_on_gpu: usize, size_bytes: usize, copy_bw: f64) -> f64 {
    allreduce_hbm_bytes(ranks_on_gpu, size_bytes) / copy_bw * 1e6
}

fn main() -> Result<()> {
    let args = Args::parse();
    OFFSET.store(args.offset, std::sync::atomic::Ordering::Relaxed);
    BARRIER_EACH.store(
        args.barrier_each && args.mode != Mode::Barrier,
        std::sync::atomic::Ordering::Relaxed,
    );
    if args.mode == Mode::Drain && args.device != Device::Host {
        bail!("drain measures host buffers only: leave out -d");
    }
    if args.mode == Mode::Drain && args.recv_buffers == RecvBuffers::Single {
        bail!("drain posts one buffer per window slot only: leave out --recv-buffers");
    }
    let universe = rankwire::init()?;
    // An error after init is printed and ends the job through the launcher (returned
    // from main, the Universe's drop would end it first, without the message).
    match run(&universe, &args) {
        Ok(()) => Ok(universe.finalize()?),
        Err(e) => universe.abort(1, &format!("rankwire-bench: {e:#}")),
    }
}

/// Everything after init (see [`main`]).
fn run(universe: &rankwire::Universe, args: &Args) -> Result<()> {
    let world = universe.world();
    if args.mode.is_collective() {
        return collectives(&world, args);
    }
    if world.size() < 2 {
        bail!("point-to-point modes need at least 2 ranks: rwrun -n 2 rankwire-bench ...");
    }
    let rank = world.rank();
    if rank == 0 {
        println!(
            "# rankwire-bench {:?}, ranks 0<->1 via {}",
            args.mode,
            universe.transport_to(1)?
        );
        match args.mode {
            Mode::Latency => println!("# Size  Latency (us)"),
            Mode::Drain => println!(
                "# Size   send post  send wait  recv post  recv wait  check  (ns per message)"
            ),
            _ => println!("# Size  Bandwidth (MB/s)"),
        }
    }
    let window = args.window as usize;
    for size in sizes(args) {
        let big = size > 8192;
        let iters = if big {
            (args.iters / 10).max(20)
        } else {
            args.iters
        };
        let warmup = if big {
            (args.warmup / 10).max(2)
        } else {
            args.warmup
        };
        if args.mode == Mode::Drain {
            let w = Window {
                len: window,
                recv: args.recv_buffers,
                set: args.requests == ReqForm::Set,
            };
            let c = drain(
                &world,
                size,
                (iters / 10).max(1),
                (warmup / 10).max(1),
                w,
                args.drain_sleep_us,
            )?;
            if rank == 0 {
                // The sends took half the sleep: they waited for the receiver.
                let waited = (c[0] + c[1]) * window as f64 > args.drain_sleep_us as f64 * 500.0;
                println!(
                    "{size:<8} {:9.1} {:10.1} {:10.1} {:10.1}  {}",
                    c[0],
                    c[1],
                    c[2],
                    c[3],
                    if waited { "waited" } else { "ok" }
                );
            }
            continue;
        }
        let value = match args.mode {
            Mode::Latency => latency(&world, size, iters, warmup, args.device)?,
            Mode::Bw => bandwidth(
                &world,
                size,
                iters / 10 + 1,
                warmup / 10 + 1,
                Window {
                    len: window,
                    recv: args.recv_buffers,
                    set: args.requests == ReqForm::Set,
                },
                false,
                args.device,
            )?,
            _ => bandwidth(
                &world,
                size,
                iters / 10 + 1,
                warmup / 10 + 1,
                Window {
                    len: window,
                    recv: args.recv_buffers,
                    set: args.requests == ReqForm::Set,
                },
                true,
                args.device,
            )?,
        };
        if rank == 0 {
            println!("{size:<8}{value:>14.2}");
        }
    }
    Ok(())
}

fn sizes(args: &Args) -> Vec<usize> {
    let min = args.min_size.unwrap_or(match args.mode {
        Mode::Latency => 0,
        Mode::Bw | Mode::Bibw | Mode::Drain => 1,
        _ => 4,
    });
    let mut v = Vec::new();
    if min == 0 && args.mode == Mode::Latency {
        v.push(0);
    }
    let mut s = min.max(1);
    while s <= args.max_size {
        v.push(s);
        s *= 2;
    }
    v
}

/// Iterations for a collective of `size` bytes: `iters` up to 8 KiB, then fewer so
/// that each size moves about the same number of bytes (at least 10).
fn coll_iters(args: &Args, size: usize) -> (usize, usize) {
    let scale = |n: usize| (n * 8192 / size.max(8192)).max(10);
    (
        scale(args.iters),
        scale(args.warmup).min(args.warmup).max(2),
    )
}

/// Run the collective modes and print one row per size on rank 0.
fn collectives(world: &rankwire::Communicator, args: &Args) -> Result<()> {
    let n = world.size();
    if world.rank() == 0 {
        println!(
            "# rankwire-bench {:?}, {n} ranks, {:?} buffers",
            args.mode, args.device
        );
        match args.mode {
            Mode::Barrier => println!("# Avg Latency (us)  Min Latency (us)  Max Latency (us)"),
            Mode::Allreduce if args.device == Device::Cuda => println!(
                "# Size       Avg Latency (us)  Min Latency (us)  Max Latency (us)  algbw (GB/s)  busbw (GB/s)      bound_us"
            ),
            Mode::Allreduce => println!(
                "# Size       Avg Latency (us)  Min Latency (us)  Max Latency (us)  algbw (GB/s)  busbw (GB/s)"
            ),
            _ => println!("# Size       Avg Latency (us)  Min Latency (us)  Max Latency (us)"),
        }
    }
    if args.mode == Mode::Barrier {
        let (iters, warmup) = coll_iters(args, 0);
        let us = if args.barrier_each {
            time_each(world, iters, warmup, || world.barrier(), false)?
        } else {
            time_calls(world, iters, warmup, || world.barrier())?
        };
        let (avg, min, max) = over_ranks(world, us)?;
        if world.rank() == 0 {
            println!("{avg:>18.2}{min:>18.2}{max:>18.2}");
        }
        return Ok(());
    }
    if args.device == Device::Cuda
        && !matches!(args.mode, Mode::Allreduce | Mode::Bcast | Mode::Allgather)
    {
        bail!(
            "-d cuda collectives: allreduce, bcast and allgather (alltoall and barrier run on host buffers)"
        );
    }
    // The memory bound of device allreduce: the copy bandwidth and the ranks per GPU.
    let bound = if args.device == Device::Cuda && args.mode == Mode::Allreduce {
        Some(memory_bound_inputs(world, args.copy_bw)?)
    } else {
        None
    };
    for size in sizes(args) {
        let (iters, warmup) = coll_iters(args, size);
        let us = match args.mode {
            _ if args.device == Device::Cuda => {
                device_collective(world, args.mode, size, iters, warmup)?
            }
            Mode::Allreduce => {
                let count = size / 4;
                let off = OFFSET.load(std::sync::atomic::Ordering::Relaxed) & !3;
                let mut sbuf = HostBuf::new(count * 4, off, 0);
                let mut rbuf = HostBuf::new(count * 4, off, 0);
                let send: &mut [f32] = rankwire::bytemuck::cast_slice_mut(sbuf.as_mut_slice());
                send.fill(1.0);
                let send: &[f32] = send;
                let recv: &mut [f32] = rankwire::bytemuck::cast_slice_mut(rbuf.as_mut_slice());
                time_calls(world, iters, warmup, || {
                    world.allreduce(send, recv, rankwire::Op::Sum)
                })?
            }
            Mode::Bcast => {
                let mut buf = vec![1u8; size];
                time_calls(world, iters, warmup, || world.bcast(&mut buf, 0))?
            }
            Mode::Allgather => {
                let send = vec![1u8; size];
                let mut recv = vec![0u8; size * n];
                time_calls(world, iters, warmup, || world.allgather(&send, &mut recv))?
            }
            _ => {
                let send = vec![1u8; size * n];
                let mut recv = vec![0u8; size * n];
                time_calls(world, iters, warmup, || world.alltoall(&send, &mut recv))?
            }
        };
        let (avg, min, max) = over_ranks(world, us)?;
        if world.rank() == 0 {
            if args.mode == Mode::Allreduce {
                let algbw = (size / 4 * 4) as f64 / (avg * 1e-6) / 1e9;
                let busbw = algbw * 2.0 * (n as f64 - 1.0) / n as f64;
                match bound {
                    Some((bw, p)) => {
                        let b = bound_us(p, size / 4 * 4, bw);
                        println!(
                            "{size:<11}{avg:>18.2}{min:>18.2}{max:>18.2}{algbw:>14.3}{busbw:>14.3}{b:>14.2}"
                        );
                    }
                    None => println!(
                        "{size:<11}{avg:>18.2}{min:>18.2}{max:>18.2}{algbw:>14.3}{busbw:>14.3}"
                    ),
                }
            } else {
                println!("{size:<11}{avg:>18.2}{min:>18.2}{max:>18.2}");
            }
        }
    }
    Ok(())
}

/// The inputs of `bound_us`: (copy bandwidth in B/s, read + write; the most ranks on one
/// GPU). The bandwidth is `given`, else measured by rank 0 alone (the others wait in a
/// barrier, so the copy has the GPU to itself) and broadcast; rank 0 prints both once.
/// Ranks tell GPUs apart by host name and the PCI id of their GPU 0 (the bench's device).
fn memory_bound_inputs(world: &rankwire::Communicator, given: Option<f64>) -> Result<(f64, usize)> {
    let mut bw = [given.unwrap_or(0.0)];
    let mut how = String::from("--copy-bw");
    if given.is_none() {
        if world.rank() == 0 {
            match measure_copy_bw(256 << 20) {
                Ok(b) => {
                    bw[0] = b;
                    how = "measured: cuMemcpyDtoDAsync of 256 MiB on GPU 0, best of 5".into();
                }
                Err(e) => {
                    bw[0] = DEFAULT_COPY_BW;
                    how = format!("default, the H200 figure; measuring failed: {e}");
                }
            }
        }
        world.barrier()?;
        world.bcast(&mut bw, 0)?;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let pci = rankwire::gpu::pci_bus_id(0).unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&(host.trim(), pci.as_str()), &mut h);
    let mine = [std::hash::Hasher::finish(&h)];
    let mut all = vec![0u64; world.size()];
    world.allgather(&mine, &mut all)?;
    let per_gpu = all
        .iter()
        .map(|g| all.iter().filter(|x| *x == g).count())
        .max()
        .unwrap_or(1);
    if world.rank() == 0 {
        println!(
            "# device copy bandwidth {:.1} GB/s (read + write; {how}); up to {per_gpu} rank(s) per GPU; bound_us = 2 x ranks per GPU x Size / bandwidth",
            bw[0] / 1e9
        );
    }
    Ok((bw[0], per_gpu))
}

/// Device copy bandwidth of GPU 0 in bytes per second, reads plus writes (2 × `len` /
/// time of one `len`-byte device-to-device copy), the best of 5 copies after one
/// warm-up, timed with CUDA events.
fn measure_copy_bw(len: usize) -> Result<f64> {
    use rankwire::gpu::{DeviceBuffer, Event, Stream, memcpy_dtod_async};
    let src = DeviceBuffer::alloc(0, len)?;
    let dst = DeviceBuffer::alloc(0, len)?;
    let stream = Stream::new(0)?;
    let (start, end) = (Event::new_timing(0)?, Event::new_timing(0)?);
    let mut best_ms = f32::INFINITY;
    for i in 0..6 {
        start.record(&stream)?;
        // SAFETY: both buffers are live device allocations of `len` bytes that do not
        // overlap, and outlive the copy: `end.synchronize()` waits for it below.
        unsafe { memcpy_dtod_async(dst.ptr(), src.ptr(), len, &stream)? };
        end.record(&stream)?;
        end.synchronize()?;
        let ms = end.elapsed_ms(&start)?;
        if i > 0 {
            best_ms = best_ms.min(ms);
        }
    }
    if !best_ms.is_finite() || best_ms <= 0.0 {
        bail!("the timed copy took {best_ms} ms");
    }
    Ok(2.0 * len as f64 / (f64::from(best_ms) * 1e-3))
}

/// Time one device collective of `size` bytes (f32 sum for allreduce), µs per call.
fn device_collective(
    world: &rankwire::Communicator,
    mode: Mode,
    size: usize,
    iters: usize,
    warmup: usize,
) -> Result<f64> {
    use rankwire::gpu::DeviceBuffer;
    let n = world.size();
    let alloc = |len: usize| -> Result<DeviceBuffer> {
        let mut b = DeviceBuffer::alloc(0, len)?;
        if len > 0 {
            b.fill(0)?;
        }
        Ok(b)
    };
    Ok(match mode {
        Mode::Allreduce => {
            let len = size / 4 * 4;
            let send = alloc(len)?;
            let mut recv = alloc(len)?;
            time_calls(world, iters, warmup, || {
                world.allreduce_device(&send, &mut recv, rankwire::Datatype::F32, rankwire::Op::Sum)
            })?
        }
        Mode::Bcast => {
            let mut buf = alloc(size)?;
            time_calls(world, iters, warmup, || world.bcast_device(&mut buf, 0))?
        }
        _ => {
            let send = alloc(size)?;
            let mut recv = alloc(size * n)?;
            time_calls(world, iters, warmup, || {
                world.allgather_device(&send, &mut recv)
            })?
        }
    })
}

/// Microseconds per call of `f` on this rank: `warmup` untimed calls, then `iters`
/// timed ones, back to back (one timer around the loop), or with `--barrier-each` as
/// OSU times its collectives: each call timed alone, a barrier after it (untimed).
fn time_calls(
    world: &rankwire::Communicator,
    iters: usize,
    warmup: usize,
    mut f: impl FnMut() -> rankwire::Result<()>,
) -> Result<f64> {
    if BARRIER_EACH.load(std::sync::atomic::Ordering::Relaxed) {
        return time_each(world, iters, warmup, f, true);
    }
    for _ in 0..warmup {
        f()?;
    }
    world.barrier()?;
    let t = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
    world.barrier()?;
    Ok(us)
}

/// Microseconds per call of `f` on this rank, each of the `iters` calls timed alone,
/// after `warmup` untimed calls. `barrier_after`: an untimed barrier after every call
/// (OSU's collective loop); `false`: nothing between the calls (`osu_barrier`'s loop).
fn time_each(
    world: &rankwire::Communicator,
    iters: usize,
    warmup: usize,
    mut f: impl FnMut() -> rankwire::Result<()>,
    barrier_after: bool,
) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
        if barrier_after {
            world.barrier()?;
        }
    }
    world.barrier()?;
    let mut total = std::time::Duration::ZERO;
    for _ in 0..iters {
        let t = Instant::now();
        f()?;
        total += t.elapsed();
        if barrier_after {
            world.barrier()?;
        }
    }
    if !barrier_after {
        world.barrier()?;
    }
    Ok(total.as_secs_f64() * 1e6 / iters as f64)
}

/// (average, minimum, maximum) of `us` over all ranks, valid on rank 0.
fn over_ranks(world: &rankwire::Communicator, us: f64) -> Result<(f64, f64, f64)> {
    let n = world.size() as f64;
    let mut sum = [0.0f64];
    let mut min = [0.0f64];
    let mut max = [0.0f64];
    world.reduce(&[us], &mut sum, rankwire::Op::Sum, 0)?;
    world.reduce(&[us], &mut min, rankwire::Op::Min, 0)?;
    world.reduce(&[us], &mut max, rankwire::Op::Max, 0)?;
    Ok((sum[0] / n, min[0], max[0]))
}

/// Host memory starting `offset` bytes past a page boundary (page-aligned for 0).
struct HostBuf {
    base: *mut u8,
    layout: std::alloc::Layout,
    offset: usize,
    len: usize,
}

impl HostBuf {
    fn new(len: usize, offset: usize, fill: u8) -> HostBuf {
        let layout = std::alloc::Layout::from_size_align(len + offset + 1, 4096)
            .expect("benchmark sizes are far below isize::MAX");
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { std::alloc::alloc(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `base` holds `len + offset + 1` bytes.
        unsafe { std::ptr::write_bytes(base, fill, len + offset + 1) };
        HostBuf {
            base,
            layout,
            offset,
            len,
        }
    }
    fn as_slice(&self) -> &[u8] {
        // SAFETY: initialized, in bounds, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base.add(self.offset), self.len) }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes it exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(self.offset), self.len) }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.base, self.layout) }
    }
}

/// Host buffer offset for every `Buf::new` of this run (`--offset`).
static OFFSET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `--barrier-each` (set once in `main`).
static BARRIER_EACH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How a bw/bibw/drain window keeps its requests (`--requests`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ReqForm {
    /// A `Vec<Request>` and `rankwire::wait_all`.
    Vec,
    /// A `rankwire::RequestSet` set.
    Set,
}

/// Receive buffers of a bw/bibw window (`--recv-buffers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum RecvBuffers {
    /// One buffer per window slot.
    Window,
    /// One buffer for the whole window (`osu_bw`'s default).
    Single,
}

/// A benchmark buffer in host or device memory.
enum Buf {
    Host(HostBuf),
    Dev(rankwire::gpu::DeviceBuffer),
}

impl Buf {
    fn new(device: Device, size: usize, fill: u8) -> Result<Buf> {
        Ok(match device {
            Device::Host => Buf::Host(HostBuf::new(
                size,
                OFFSET.load(std::sync::atomic::Ordering::Relaxed),
                fill,
            )),
            Device::Cuda => {
                let mut d = rankwire::gpu::DeviceBuffer::alloc(0, size)?;
                if size > 0 {
                    d.fill(fill)?;
                }
                Buf::Dev(d)
            }
        })
    }
    fn isend<'a>(
        &'a self,
        w: &rankwire::Communicator,
        dest: usize,
        tag: i32,
    ) -> rankwire::Result<rankwire::Request<'a>> {
        match self {
            Buf::Host(h) => w.isend(h.as_slice(), dest, tag),
            Buf::Dev(d) => w.isend_device(d, dest, tag),
        }
    }
    fn irecv<'a>(
        &'a mut self,
        w: &rankwire::Communicator,
        src: usize,
        tag: i32,
    ) -> rankwire::Result<rankwire::Request<'a>> {
        match self {
            Buf::Host(h) => w.irecv(h.as_mut_slice(), src, tag),
            Buf::Dev(d) => w.irecv_device(d, src, tag),
        }
    }
    /// [`Buf::isend`] added to the request set `set`.
    fn isend_in<'a>(
        &'a self,
        set: &mut rankwire::RequestSet<'a>,
        w: &rankwire::Communicator,
        dest: usize,
        tag: i32,
    ) -> rankwire::Result<()> {
        match self {
            Buf::Host(h) => set.isend(w, h.as_slice(), dest, tag),
            Buf::Dev(d) => set.push(w.isend_device(d, dest, tag)?),
        }
    }
    /// [`Buf::irecv`] added to the request set `set`.
    fn irecv_in<'a>(
        &'a mut self,
        set: &mut rankwire::RequestSet<'a>,
        w: &rankwire::Communicator,
        src: usize,
        tag: i32,
    ) -> rankwire::Result<()> {
        match self {
            Buf::Host(h) => set.irecv(w, h.as_mut_slice(), src, tag),
            Buf::Dev(d) => set.push(w.irecv_device(d, src, tag)?),
        }
    }
    /// Nonblocking receive into this buffer while other receives into it may be
    /// pending (`--recv-buffers single`, as `osu_bw` does: the window's receives
    /// overwrite each other; the benchmark never reads the bytes).
    ///
    /// # Safety
    /// The buffer must outlive the request. Several pending receives write it at once
    /// (another process's copies into it; nothing here reads it), which
    /// `irecv_raw`'s "not accessed meanwhile" does not allow in Rust's terms: the
    /// bytes are garbage afterwards, as in `osu_bw`, and never read.
    unsafe fn irecv_shared<'a>(
        &mut self,
        w: &rankwire::Communicator,
        src: usize,
        tag: i32,
    ) -> rankwire::Result<rankwire::Request<'a>> {
        let (ptr, len) = match self {
            Buf::Host(h) => {
                let b = h.as_mut_slice();
                (b.as_mut_ptr(), b.len())
            }
            Buf::Dev(d) => (d.ptr() as *mut u8, d.len()),
        };
        // SAFETY: the caller keeps the buffer alive until the request completes.
        unsafe { w.irecv_raw(ptr, len, src, tag) }
    }
    /// Blocking send (MPI_Send, as the peers' ping-pong uses).
    fn send(&self, w: &rankwire::Communicator, dest: usize, tag: i32) -> rankwire::Result<()> {
        match self {
            Buf::Host(h) => w.send(h.as_slice(), dest, tag),
            Buf::Dev(d) => w.send_device(d, dest, tag),
        }
    }
    /// Blocking receive (MPI_Recv).
    fn recv(&mut self, w: &rankwire::Communicator, src: usize, tag: i32) -> rankwire::Result<()> {
        match self {
            Buf::Host(h) => w.recv(h.as_mut_slice(), src, tag).map(|_| ()),
            Buf::Dev(d) => w.recv_device(d, src, tag).map(|_| ()),
        }
    }
}

fn latency(
    world: &rankwire::Communicator,
    size: usize,
    iters: usize,
    warmup: usize,
    device: Device,
) -> Result<f64> {
    let sbuf = Buf::new(device, size, 1)?;
    let mut rbuf = Buf::new(device, size, 0)?;
    let rank = world.rank();
    world.barrier()?;
    let mut t = Instant::now();
    for i in 0..warmup + iters {
        if i == warmup {
            t = Instant::now();
        }
        if rank == 0 {
            sbuf.send(world, 1, 1)?;
            rbuf.recv(world, 1, 1)?;
        } else if rank == 1 {
            rbuf.recv(world, 0, 1)?;
            sbuf.send(world, 0, 1)?;
        }
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64))
}

/// The window of a bw/bibw run: messages in flight and their receive buffers.
#[derive(Clone, Copy)]
struct Window {
    len: usize,
    recv: RecvBuffers,
    set: bool,
}

fn bandwidth(
    world: &rankwire::Communicator,
    size: usize,
    iters: usize,
    warmup: usize,
    window: Window,
    bidirectional: bool,
    device: Device,
) -> Result<f64> {
    let rank = world.rank();
    let sbuf = Buf::new(device, size, 1)?;
    let slots_n = match window.recv {
        RecvBuffers::Window => window.len,
        RecvBuffers::Single => 1,
    };
    let mut slots: Vec<Buf> = (0..slots_n)
        .map(|_| Buf::new(device, size, 0))
        .collect::<Result<_>>()?;
    let mut ack = [0u8; 4];
    world.barrier()?;
    let mut t = Instant::now();
    for i in 0..warmup + iters {
        if i == warmup {
            t = Instant::now();
        }
        if rank <= 1 {
            let peer = 1 - rank;
            let sending = rank == 0 || bidirectional;
            let receiving = rank == 1 || bidirectional;
            if window.set {
                let mut set = rankwire::RequestSet::with_capacity(2 * window.len);
                if receiving {
                    match window.recv {
                        RecvBuffers::Window => {
                            for s in slots.iter_mut() {
                                s.irecv_in(&mut set, world, peer, 2)?;
                            }
                        }
                        RecvBuffers::Single => {
                            for _ in 0..window.len {
                                // SAFETY: `slots` outlives `set` (waited for below).
                                set.push(unsafe { slots[0].irecv_shared(world, peer, 2)? })?;
                            }
                        }
                    }
                }
                if sending {
                    for _ in 0..window.len {
                        sbuf.isend_in(&mut set, world, peer, 2)?;
                    }
                }
                set.wait_all()?;
                if rank == 0 {
                    world.recv(&mut ack, 1, 3)?;
                } else {
                    world.send(&ack, 0, 3)?;
                }
                continue;
            }
            let mut reqs = Vec::with_capacity(2 * window.len);
            if receiving {
                match window.recv {
                    RecvBuffers::Window => {
                        for s in slots.iter_mut() {
                            reqs.push(s.irecv(world, peer, 2)?);
                        }
                    }
                    RecvBuffers::Single => {
                        for _ in 0..window.len {
                            // SAFETY: `slots` outlives `reqs` (waited for below).
                            reqs.push(unsafe { slots[0].irecv_shared(world, peer, 2)? });
                        }
                    }
                }
            }
            if sending {
                for _ in 0..window.len {
                    reqs.push(sbuf.isend(world, peer, 2)?);
                }
            }
            rankwire::wait_all(reqs)?;
            if rank == 0 {
                world.recv(&mut ack, 1, 3)?;
            } else {
                world.send(&ack, 0, 3)?;
            }
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let dirs = if bidirectional { 2.0 } else { 1.0 };
    Ok(dirs * (size * window.len * iters) as f64 / secs / 1e6)
}

/// The `drain` mode for one size (see the module doc) over `iters` timed windows after
/// `warmup` untimed ones: on rank 0 the nanoseconds per message of [send post, send
/// wait, receive post, receive wait] (rank 1's two figures sent over); zeros on the
/// other ranks, which take no part (the mode is for exactly 2 ranks).
fn drain(
    world: &rankwire::Communicator,
    size: usize,
    iters: usize,
    warmup: usize,
    window: Window,
    sleep_us: u64,
) -> Result<[f64; 4]> {
    let rank = world.rank();
    let sbuf = HostBuf::new(size, OFFSET.load(std::sync::atomic::Ordering::Relaxed), 1);
    // One buffer per slot (`main` refuses `--recv-buffers single` here).
    let mut slots: Vec<HostBuf> = (0..window.len)
        .map(|_| HostBuf::new(size, OFFSET.load(std::sync::atomic::Ordering::Relaxed), 0))
        .collect();
    let mut tok = [0u8; 1];
    let (mut post, mut wait) = (0u128, 0u128);
    world.barrier()?;
    for i in 0..warmup + iters {
        if rank > 1 {
            break;
        }
        let (t0, t1, t2);
        if rank == 0 {
            world.recv(&mut tok, 1, 3)?;
            t0 = Instant::now();
            if window.set {
                let mut set = rankwire::RequestSet::with_capacity(window.len);
                for _ in 0..window.len {
                    set.isend(world, sbuf.as_slice(), 1, 2)?;
                }
                t1 = Instant::now();
                set.wait_all()?;
            } else {
                let mut reqs = Vec::with_capacity(window.len);
                for _ in 0..window.len {
                    reqs.push(world.isend(sbuf.as_slice(), 1, 2)?);
                }
                t1 = Instant::now();
                rankwire::wait_all(reqs)?;
            }
            t2 = Instant::now();
        } else {
            world.send(&tok, 0, 3)?;
            std::thread::sleep(std::time::Duration::from_micros(sleep_us));
            t0 = Instant::now();
            if window.set {
                let mut set = rankwire::RequestSet::with_capacity(window.len);
                for s in slots.iter_mut() {
                    set.irecv(world, s.as_mut_slice(), 0, 2)?;
                }
                t1 = Instant::now();
                set.wait_all()?;
            } else {
                let mut reqs = Vec::with_capacity(window.len);
                for s in slots.iter_mut() {
                    reqs.push(world.irecv(s.as_mut_slice(), 0, 2)?);
                }
                t1 = Instant::now();
                rankwire::wait_all(reqs)?;
            }
            t2 = Instant::now();
        }
        if i >= warmup {
            post += (t1 - t0).as_nanos();
            wait += (t2 - t1).as_nanos();
        }
    }
    let per = (iters * window.len) as f64;
    let mine = [post as f64 / per, wait as f64 / per];
    let mut out = [0.0; 4];
    if rank == 1 {
        world.send(&mine, 0, 4)?;
    } else if rank == 0 {
        let mut theirs = [0.0f64; 2];
        world.recv(&mut theirs, 1, 4)?;
        out = [mine[0], mine[1], theirs[0], theirs[1]];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_bound_of_two_ranks_256_mib_is_one_gib_and_about_250_us() {
        assert_eq!(allreduce_hbm_bytes(2, 256 << 20), (1u64 << 30) as f64);
        let us = bound_us(2, 256 << 20, DEFAULT_COPY_BW);
        assert!((us - 249.7).abs() < 0.1, "{us}");
        // Linear in ranks per GPU and size; 1 rank per GPU: input read + output written.
        assert_eq!(allreduce_hbm_bytes(1, 1000), 2000.0);
        assert_eq!(allreduce_hbm_bytes(4, 1 << 20), (8u64 << 20) as f64);
        assert_eq!(
            bound_us(4, 64 << 20, 4.0e12),
            2.0 * 4.0 * (64u64 << 20) as f64 / 4.0e6
        );
        assert_eq!(bound_us(2, 0, DEFAULT_COPY_BW), 0.0);
    }
}
