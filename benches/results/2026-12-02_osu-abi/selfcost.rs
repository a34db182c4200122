//! selfcost.rs: ns per irecv + isend + wait_all (and + wait, wait; and blocking send + recv)
//! of 8 bytes to self on one rank, the Rust-API counterpart of abicost.c. Build: copy to
//! benches/examples/ and `cargo build --release -p rankwire-bench --example selfcost`;
//! run under `rwrun -n 1`.
use rankwire::{Source, Tag};
fn main() -> rankwire::Result<()> {
    let u = rankwire::init()?;
    let w = u.world();
    let n = 200_000;
    let buf = [1i32, 2];
    let mut rb = [0i32; 2];
    let mut best = f64::MAX;
    for _ in 0..7 {
        let t = std::time::Instant::now();
        for _ in 0..n {
            let r = w.irecv(&mut rb, Source::Rank(0), Tag::Value(0))?;
            let s = w.isend(&buf, 0, 0)?;
            rankwire::wait_all(vec![r, s])?;
        }
        best = best.min(t.elapsed().as_secs_f64() / n as f64 * 1e9);
    }
    println!("irecv+isend+wait_all to self  {best:8.1} ns");
    let mut best = f64::MAX;
    for _ in 0..7 {
        let t = std::time::Instant::now();
        for _ in 0..n {
            let r = w.irecv(&mut rb, Source::Rank(0), Tag::Value(0))?;
            let s = w.isend(&buf, 0, 0)?;
            r.wait()?;
            s.wait()?;
        }
        best = best.min(t.elapsed().as_secs_f64() / n as f64 * 1e9);
    }
    println!("irecv+isend+wait,wait to self {best:8.1} ns");
    let mut best = f64::MAX;
    for _ in 0..7 {
        let t = std::time::Instant::now();
        for _ in 0..n {
            w.send(&buf, 0, 0)?;
            w.recv(&mut rb, 0, 0)?;
        }
        best = best.min(t.elapsed().as_secs_f64() / n as f64 * 1e9);
    }
    println!("send+recv to self             {best:8.1} ns");
    u.finalize()
}
