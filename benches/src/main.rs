//! rankwire-bench: OSU-style point-to-point benchmarks between ranks 0 and 1.
//!
//! Modes (as in the OSU micro-benchmarks, `osu_latency`, `osu_bw`, `osu_bibw`):
//! - `latency`: ping-pong; one-way latency = round trip / 2, in microseconds.
//! - `bw`: rank 0 posts a window of `--window` nonblocking sends, rank 1 a window of
//!   receives, then rank 1 answers with a 4-byte ack; MB/s = bytes × window × iters /
//!   time / 1e6. Each receive slot has its own buffer (MPI-correct; posting all slots
//!   into one buffer inflates figures through caches).
//! - `bibw`: both ranks do the `bw` window towards each other at once; MB/s counts both
//!   directions.
//!
//! Output: `# Size  Latency (us)` or `# Size  Bandwidth (MB/s)`, one row per size from
//! `--min-size` to `--max-size` bytes (powers of two, plus 0 for latency).
//!
//! Usage: `rwrun -n 2 target/release/rankwire-bench latency|bw|bibw [options]`

use std::time::Instant;

use anyhow::{Result, bail};
use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    Latency,
    Bw,
    Bibw,
}

/// OSU-style point-to-point benchmarks for rankwire (run under rwrun with ≥ 2 ranks).
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// What to measure.
    mode: Mode,
    /// Smallest message size in bytes (0 is included for latency).
    #[arg(long, default_value_t = 0)]
    min_size: usize,
    /// Largest message size in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_size: usize,
    /// Timed iterations per size for messages up to 8 KiB (fewer for larger ones).
    #[arg(long, short = 'i', default_value_t = 10_000)]
    iters: usize,
    /// Untimed warm-up iterations per size.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Window of outstanding messages for bw/bibw.
    #[arg(long, default_value_t = 64)]
    window: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let universe = rankwire::init()?;
    let world = universe.world();
    if world.size() < 2 {
        bail!("rankwire-bench needs at least 2 ranks: rwrun -n 2 rankwire-bench ...");
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
            _ => println!("# Size  Bandwidth (MB/s)"),
        }
    }
    for size in sizes(&args) {
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
        let value = match args.mode {
            Mode::Latency => latency(&world, size, iters, warmup)?,
            Mode::Bw => bandwidth(
                &world,
                size,
                iters / 10 + 1,
                warmup / 10 + 1,
                args.window,
                false,
            )?,
            Mode::Bibw => bandwidth(
                &world,
                size,
                iters / 10 + 1,
                warmup / 10 + 1,
                args.window,
                true,
            )?,
        };
        if rank == 0 {
            match args.mode {
                Mode::Latency => println!("{size:<8}{value:>14.2}"),
                _ => println!("{size:<8}{value:>14.2}"),
            }
        }
    }
    universe.finalize()?;
    Ok(())
}

fn sizes(args: &Args) -> Vec<usize> {
    let mut v = Vec::new();
    if args.min_size == 0 && matches!(args.mode, Mode::Latency) {
        v.push(0);
    }
    let mut s = args.min_size.max(1);
    while s <= args.max_size {
        v.push(s);
        s *= 2;
    }
    v
}

fn latency(
    world: &rankwire::Communicator,
    size: usize,
    iters: usize,
    warmup: usize,
) -> Result<f64> {
    let sbuf = vec![1u8; size];
    let mut rbuf = vec![0u8; size];
    let rank = world.rank();
    world.barrier()?;
    let mut t = Instant::now();
    for i in 0..warmup + iters {
        if i == warmup {
            t = Instant::now();
        }
        if rank == 0 {
            world.send(&sbuf, 1, 1)?;
            world.recv(&mut rbuf, 1, 1)?;
        } else if rank == 1 {
            world.recv(&mut rbuf, 0, 1)?;
            world.send(&sbuf, 0, 1)?;
        }
    }
    Ok(t.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64))
}

fn bandwidth(
    world: &rankwire::Communicator,
    size: usize,
    iters: usize,
    warmup: usize,
    window: usize,
    bidirectional: bool,
) -> Result<f64> {
    let rank = world.rank();
    let sbuf = vec![1u8; size];
    let mut slots: Vec<Vec<u8>> = (0..window).map(|_| vec![0u8; size]).collect();
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
            let mut reqs = Vec::with_capacity(2 * window);
            if receiving {
                for s in slots.iter_mut() {
                    reqs.push(world.irecv(s.as_mut_slice(), peer, 2)?);
                }
            }
            if sending {
                for _ in 0..window {
                    reqs.push(world.isend(&sbuf, peer, 2)?);
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
    Ok(dirs * (size * window * iters) as f64 / secs / 1e6)
}
