//! `rw-pmixprobe`: rankwire's PMIx client on its own, under `srun --mpi=pmix` (tests/slurm.rs).
//!
//! Rank 0 alone puts a key, then every rank fences: ranks that put nothing fence with
//! the same data-collection flag as rank 0 (a server refuses differing flags, or one node
//! waits forever). Every rank then reads rank 0's key, and a key nobody put, three times:
//! "not found" each time, at once (no wait for the bootstrap timeout, no late answer to
//! an earlier read completing a later one). A second fence with no puts at all follows.
//! Prints `rank R: pmixprobe OK <ms>` or exits 1 with the failure.

use std::time::{Duration, Instant};

use rankwire::bootstrap::pmix::{PmixClient, PmixError};

fn fail(msg: &str) -> ! {
    eprintln!("rw-pmixprobe: FAILED: {msg}");
    std::process::exit(1);
}

fn main() {
    let t0 = Instant::now();
    let timeout = Duration::from_secs(20);
    let mut c = PmixClient::from_env(timeout).unwrap_or_else(|e| fail(&format!("init: {e}")));
    let (rank, size) = (c.rank(), c.size());
    if rank == 0 {
        c.put("probe-0", b"from rank 0")
            .unwrap_or_else(|e| fail(&format!("put: {e}")));
    }
    c.fence()
        .unwrap_or_else(|e| fail(&format!("rank {rank}: fence after rank 0's put: {e}")));
    let v = c
        .get_from(0, "probe-0")
        .unwrap_or_else(|e| fail(&format!("rank {rank}: get of rank 0's key: {e}")));
    if v != b"from rank 0" {
        fail(&format!("rank {rank}: rank 0's key holds {v:?}"));
    }
    let peer = (rank + 1) % size;
    for attempt in 0..3 {
        let t = Instant::now();
        match c.get_from(peer, "nobody-put-this") {
            Err(PmixError::NotFound { .. }) => {}
            other => fail(&format!(
                "rank {rank}: get of a missing key, attempt {attempt}: {other:?} after {:?}",
                t.elapsed()
            )),
        }
        if t.elapsed() > Duration::from_secs(2) {
            fail(&format!(
                "rank {rank}: a missing key took {:?} to be reported",
                t.elapsed()
            ));
        }
    }
    c.fence()
        .unwrap_or_else(|e| fail(&format!("rank {rank}: fence without puts: {e}")));
    c.finalize()
        .unwrap_or_else(|e| fail(&format!("rank {rank}: finalize: {e}")));
    println!("rank {rank}: pmixprobe OK {} ms", t0.elapsed().as_millis());
}
