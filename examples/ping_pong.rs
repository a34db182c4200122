//! ping_pong: ranks 0 and 1 bounce messages of growing size (1 B to 4 MiB), checking
//! every byte, and rank 0 prints the round-trip time per size. Needs ≥ 2 ranks; ranks
//! above 1 just finalize.
//!
//! Usage: `rwrun -n 2 target/release/examples/ping_pong [REPS]`

use std::time::Instant;

use rankwire::Result;

fn main() {
    if let Err(e) = run() {
        // Display, not Debug: the message names the layer and the fix.
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let reps: usize = rankwire_examples::arg(1, 20, "usage: ping_pong [REPS]");
    let universe = rankwire::init()?;
    let world = universe.world();
    if world.size() < 2 {
        rankwire_examples::usage_exit("ping_pong needs at least 2 ranks: rwrun -n 2 ...");
    }
    let rank = world.rank();
    if rank == 0 {
        println!("# Size (bytes)  Round trip (us)");
    }
    let mut size = 1usize;
    while size <= 4 << 20 {
        let msg: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
        let mut buf = vec![0u8; size];
        let t = Instant::now();
        for _ in 0..reps {
            if rank == 0 {
                world.send(&msg, 1, 0)?;
                world.recv(&mut buf, 1, 0)?;
                if buf != msg {
                    eprintln!("ping_pong: corrupted echo at size {size}");
                    std::process::exit(1);
                }
            } else if rank == 1 {
                world.recv(&mut buf, 0, 0)?;
                world.send(&buf, 0, 0)?;
            }
        }
        if rank == 0 {
            let us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
            println!("{size:>14}  {us:>15.2}");
        }
        size *= 4;
    }
    if rank == 0 {
        println!("ping_pong: OK");
    }
    universe.finalize()
}
