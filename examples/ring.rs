//! ring: a token travels around all ranks LAPS times; each rank adds its rank + 1.
//! Rank 0 checks the total. Runs at any rank count ≥ 1 (a ring of one sends to itself).
//!
//! Usage: `rwrun -n 4 target/release/examples/ring [LAPS]`

use rankwire::Result;

fn main() {
    if let Err(e) = run() {
        // Display, not Debug: the message names the layer and the fix.
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let laps: u64 = rankwire_examples::arg(1, 10, "usage: ring [LAPS]");
    let universe = rankwire::init()?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    let mut token = [0u64; 1];
    for lap in 0..laps {
        if rank == 0 {
            let out = [token[0] + 1];
            let r = world.irecv(&mut token, prev, 1)?;
            world.send(&out, next, 1)?;
            r.wait()?;
        } else {
            world.recv(&mut token, prev, 1)?;
            token[0] += rank as u64 + 1;
            world.send(&token, next, 1)?;
        }
        let per_lap: u64 = (1..=size as u64).sum();
        if rank == 0 && token[0] != per_lap * (lap + 1) {
            eprintln!(
                "ring: wrong token {} after lap {}, expected {}",
                token[0],
                lap + 1,
                per_lap * (lap + 1)
            );
            std::process::exit(1);
        }
    }
    if rank == 0 {
        println!("ring: {size} ranks, {laps} laps, token {} OK", token[0]);
    }
    universe.finalize()
}
