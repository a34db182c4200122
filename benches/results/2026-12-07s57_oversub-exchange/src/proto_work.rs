// Session 57 test program (not built by the workspace; was examples/proto_work.rs): an allreduce loop with uneven local work between the calls (rank r spins W·(1 + r/4) µs). Usage: rwrun -n N proto_work ITERS W COUNT; raw/work-between-calls.txt.
fn main() {
    let iters: usize = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(20000);
    let work_us: f64 = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(0.0);
    let n: usize = std::env::args().nth(3).map(|s| s.parse().unwrap()).unwrap_or(2);
    let u = rankwire::init().unwrap();
    let w = u.world();
    let me = w.rank();
    let x = vec![me as f32 + 1.0; n];
    let mut out = vec![0f32; n];
    let spin = |us: f64| { let t = std::time::Instant::now(); while t.elapsed().as_secs_f64() * 1e6 < us { std::hint::spin_loop(); } };
    let mut t0 = std::time::Instant::now();
    for it in 0..iters + 500 {
        if it == 500 { w.barrier().unwrap(); t0 = std::time::Instant::now(); }
        // uneven work: rank r does work*(1 + r/4)
        spin(work_us * (1.0 + me as f64 / 4.0));
        w.allreduce(&x, &mut out, rankwire::Op::Sum).unwrap();
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
    if me == 0 { println!("{us:.2}"); }
    u.finalize().unwrap();
}
