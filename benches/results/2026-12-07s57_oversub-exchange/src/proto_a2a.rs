// Prototype (session 57, not built by the workspace): the exchange allreduce through the public API (RequestSet), against the built-in allreduce. Was examples/proto_a2a.rs for the measurements in raw/explore-prototype*.txt.
use rankwire::RequestSet;
fn main() {
    let mode: String = std::env::args().nth(1).unwrap_or("a2a".into());
    let iters: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(20000);
    let n: usize = std::env::args().nth(3).map(|s| s.parse().unwrap()).unwrap_or(1);
    let u = rankwire::init().unwrap();
    let w = u.world();
    let (me, p) = (w.rank(), w.size());
    let x = vec![me as u64 + 1; n];
    let mut out = vec![0u64; n];
    let mut bufs = vec![vec![0u64; n]; p];
    let mut t0 = std::time::Instant::now();
    for it in 0..iters + 500 {
        if it == 500 { w.barrier().unwrap(); t0 = std::time::Instant::now(); }
        if mode == "a2a" {
            let tag = (it % 1000) as i32;
            let mut s = RequestSet::new();
            for (r, b) in bufs.iter_mut().enumerate() {
                if r != me { s.irecv(&w, b.as_mut_slice(), r, tag).unwrap(); }
            }
            for r in 0..p { if r != me { s.isend(&w, &x, r, tag).unwrap(); } }
            s.wait_all().unwrap();
            bufs[me].copy_from_slice(&x);
            out.copy_from_slice(&bufs[0]);
            for b in &bufs[1..] { for (o, v) in out.iter_mut().zip(b) { *o += *v; } }
        } else {
            w.allreduce(&x, &mut out, rankwire::Op::Sum).unwrap();
        }
        assert_eq!(out[0], (p * (p + 1) / 2) as u64);
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
    if me == 0 { println!("{mode} {} {us:.2}", n * 8); }
    u.finalize().unwrap();
}
