//! rw-gpucoll: collectives on device buffers, checked against a CPU reference, and the
//! reduction kernels' throughput. Run on a machine with a GPU (scripts/gpu-run.sh);
//! without a usable GPU it prints `skipped: ...` and exits 0.
//!
//! `rwrun -n P rw-gpucoll check [MAX_COUNT]`: allreduce for every element type and
//! operation, and reduce / reduce_scatter_block / allgather / bcast for a subset, at
//! counts 0, 1, 7, 4099, 1 Mi + 1 (and 64 Mi for f32 and bf16 sums when MAX_COUNT
//! allows), on fresh random inputs (the seed is printed), outputs poisoned first.
//! Floats are compared with a float64 reference within a tolerance per type, integers
//! exactly (wrapping); every rank's result must be bitwise identical. Also: nonblocking
//! calls in flight together, and argument errors; scan and exscan in and out of place;
//! the four nonblocking in-place forms in flight together. Exits 1 on any failure.
//!
//! `rwrun -n P rw-gpucoll peer [MAX_COUNT]`: the in-place and stream-ordered forms
//! (peer-memory path where it applies, else the host schedules; the path is printed):
//! in-place allreduce / reduce / allgather / reduce_scatter_block; stream-ordered
//! allreduce / allgather / bcast / reduce_scatter_block between user kernels on one
//! stream (a kernel writes the input, the collective runs, a kernel reads the output,
//! no synchronization in between); buffers freed and reallocated between calls; pool
//! (`cuMemAllocAsync`) buffers. Exits 1 on any failure.
//!
//! `rw-gpucoll kernel [MAX_BYTES]` (one process): throughput of `dst = a + b` (f32,
//! bf16) for 1 MiB .. MAX_BYTES against the device-to-device copy measured in the same
//! run; bandwidth counts bytes moved (3 per element-byte for the kernel, 2 for a copy).

use std::hash::{DefaultHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

use rankwire::gpu::reduce::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use rankwire::gpu::{DType, DeviceBuffer, Event, RedOp, Stream};
use rankwire::{Communicator, Datatype, Op};

fn fail(msg: &str) -> ! {
    eprintln!("rw-gpucoll: {msg}");
    std::process::exit(1);
}

/// xorshift64* generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn datatype(dt: DType) -> Datatype {
    match dt {
        DType::F16 => Datatype::F16,
        DType::BF16 => Datatype::BF16,
        DType::F32 => Datatype::F32,
        DType::F64 => Datatype::F64,
        DType::I8 => Datatype::I8,
        DType::U8 => Datatype::U8,
        DType::I16 => Datatype::I16,
        DType::U16 => Datatype::U16,
        DType::I32 => Datatype::I32,
        DType::I64 => Datatype::I64,
        DType::U32 => Datatype::U32,
        DType::U64 => Datatype::U64,
    }
}

fn mpi_op(op: RedOp) -> Op {
    match op {
        RedOp::Sum => Op::Sum,
        RedOp::Prod => Op::Prod,
        RedOp::Min => Op::Min,
        RedOp::Max => Op::Max,
        RedOp::Band => Op::BitAnd,
        RedOp::Bor => Op::BitOr,
        RedOp::Bxor => Op::BitXor,
    }
}

/// Random input of `n` elements for `op` (floats: [-1, 1) for sums, ±[0.5, 1.5) for
/// products so they stay finite; integers: any bits).
fn make_input(rng: &mut Rng, dt: DType, op: RedOp, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * dt.size());
    for _ in 0..n {
        let f = if op == RedOp::Prod {
            let m = 0.5 + rng.unit();
            if rng.next() & 1 == 0 { m } else { -m }
        } else {
            rng.unit() * 2.0 - 1.0
        };
        match dt {
            DType::F16 => out.extend_from_slice(&f32_to_f16(f as f32).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&f32_to_bf16(f as f32).to_le_bytes()),
            DType::F32 => out.extend_from_slice(&(f as f32).to_le_bytes()),
            DType::F64 => out.extend_from_slice(&f.to_le_bytes()),
            DType::I8 | DType::U8 => out.push(rng.next() as u8),
            DType::I16 | DType::U16 => out.extend_from_slice(&(rng.next() as u16).to_le_bytes()),
            DType::I32 | DType::U32 => out.extend_from_slice(&(rng.next() as u32).to_le_bytes()),
            DType::I64 | DType::U64 => out.extend_from_slice(&rng.next().to_le_bytes()),
        }
    }
    out
}

/// Element `i` of `b` as f64 (floats) or as raw bits (integers, zero-extended).
fn float_at(dt: DType, b: &[u8], i: usize) -> f64 {
    match dt {
        DType::F16 => f64::from(f16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))),
        DType::BF16 => f64::from(bf16_to_f32(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))),
        DType::F32 => f64::from(f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap())),
        DType::F64 => f64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap()),
        _ => unreachable!(),
    }
}

fn int_at(dt: DType, b: &[u8], i: usize) -> u64 {
    match dt.size() {
        1 => u64::from(b[i]),
        2 => u64::from(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])),
        4 => u64::from(u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap())),
        _ => u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap()),
    }
}

/// Unit roundoff of the storage type.
fn eps(dt: DType) -> f64 {
    match dt {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::F32 => 2f64.powi(-24),
        _ => 2f64.powi(-53),
    }
}

/// Check `got` (elements `[first, first + n)` of the reduction of `inputs`) against
/// the reference; the first mismatch as text.
fn check_reduction(
    dt: DType,
    op: RedOp,
    inputs: &[Vec<u8>],
    first: usize,
    got: &[u8],
) -> Option<String> {
    let p = inputs.len() as f64;
    let n = got.len() / dt.size();
    for j in 0..n {
        let i = first + j;
        if dt.is_float() {
            let xs: Vec<f64> = inputs.iter().map(|b| float_at(dt, b, i)).collect();
            let g = float_at(dt, got, j);
            let (want, tol) = match op {
                RedOp::Sum => {
                    let abs: f64 = xs.iter().map(|x| x.abs()).sum();
                    let rel = match dt {
                        DType::F32 => 1e-5 * p.log2().max(1.0),
                        DType::F64 => 2.0 * p * eps(dt),
                        _ => p * eps(dt) * 1.01,
                    };
                    (xs.iter().sum::<f64>(), rel * abs)
                }
                RedOp::Prod => {
                    let v: f64 = xs.iter().product();
                    // f64: the float64 reference rounds as often as the result.
                    let rel = match dt {
                        DType::F32 => 1e-5 * p.log2().max(1.0),
                        DType::F64 => 2.0 * p * eps(dt),
                        _ => p * eps(dt) * 1.01,
                    };
                    (v, rel * v.abs())
                }
                RedOp::Min => (xs.iter().copied().fold(f64::INFINITY, f64::min), 0.0),
                RedOp::Max => (xs.iter().copied().fold(f64::NEG_INFINITY, f64::max), 0.0),
                _ => unreachable!(),
            };
            let within = (g - want).abs() <= tol;
            if !within {
                return Some(format!(
                    "element {i}: got {g:e}, want {want:e} (tolerance {tol:e}, inputs {xs:?})"
                ));
            }
        } else {
            let bits = dt.size() * 8;
            let mask = if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            let signed = matches!(dt, DType::I8 | DType::I16 | DType::I32 | DType::I64);
            let sx = |v: u64| -> i64 {
                match bits {
                    8 => v as u8 as i8 as i64,
                    16 => v as u16 as i16 as i64,
                    32 => v as u32 as i32 as i64,
                    _ => v as i64,
                }
            };
            let xs: Vec<u64> = inputs.iter().map(|b| int_at(dt, b, i)).collect();
            let want = xs
                .iter()
                .copied()
                .reduce(|a, b| match op {
                    RedOp::Sum => a.wrapping_add(b) & mask,
                    RedOp::Prod => a.wrapping_mul(b) & mask,
                    RedOp::Band => a & b,
                    RedOp::Bor => a | b,
                    RedOp::Bxor => a ^ b,
                    RedOp::Min if signed => {
                        if sx(a) <= sx(b) {
                            a
                        } else {
                            b
                        }
                    }
                    RedOp::Max if signed => {
                        if sx(a) >= sx(b) {
                            a
                        } else {
                            b
                        }
                    }
                    RedOp::Min => a.min(b),
                    RedOp::Max => a.max(b),
                })
                .unwrap_or(0);
            let g = int_at(dt, got, j);
            if g != want {
                return Some(format!("element {i}: got {g:#x}, want {want:#x}"));
            }
        }
    }
    None
}

fn hash(b: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(b);
    h.finish()
}

fn upload(data: &[u8]) -> DeviceBuffer {
    let mut d = DeviceBuffer::alloc(0, data.len()).unwrap_or_else(|e| fail(&format!("alloc: {e}")));
    if !data.is_empty() {
        d.copy_from_host(0, data)
            .unwrap_or_else(|e| fail(&format!("upload: {e}")));
    }
    d
}

fn poisoned(len: usize) -> DeviceBuffer {
    let mut d = DeviceBuffer::alloc(0, len).unwrap_or_else(|e| fail(&format!("alloc: {e}")));
    if len > 0 {
        d.fill(0xA5)
            .unwrap_or_else(|e| fail(&format!("poison: {e}")));
    }
    d
}

fn download(d: &DeviceBuffer) -> Vec<u8> {
    d.to_vec()
        .unwrap_or_else(|e| fail(&format!("download: {e}")))
}

struct Checker<'w> {
    w: &'w Communicator,
    checks: usize,
    failures: usize,
}

impl Checker<'_> {
    /// Every rank's copy of `mine` (equal lengths).
    fn all(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        let p = self.w.size();
        let mut all = vec![0u8; mine.len() * p];
        self.w
            .allgather(mine, &mut all)
            .unwrap_or_else(|e| fail(&format!("host allgather: {e}")));
        if mine.is_empty() {
            return vec![Vec::new(); p];
        }
        all.chunks(mine.len()).map(<[u8]>::to_vec).collect()
    }

    /// Record one check; `err` is this rank's failure, if any. All ranks agree on the
    /// outcome (and on bitwise equality of `result` when `same` is set).
    fn record(&mut self, what: &str, err: Option<String>, result: Option<&[u8]>) {
        self.checks += 1;
        let mut err = err;
        if let Some(r) = result {
            let hashes = self.all(&hash(r).to_le_bytes());
            if hashes.iter().any(|h| h != &hashes[0]) && err.is_none() {
                err = Some("results differ between ranks".into());
            }
        }
        let bad = self.all(&[u8::from(err.is_some())]);
        if bad.iter().any(|b| b[0] != 0) {
            self.failures += 1;
            if let Some(e) = err {
                eprintln!("FAIL rank {} {what}: {e}", self.w.rank());
            }
        }
    }
}

fn check(w: &Communicator, max_count: usize) -> rankwire::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let mut seed = [SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1];
    w.bcast(&mut seed, 0)?;
    if me == 0 {
        println!("# rw-gpucoll check: {p} ranks, seed {:#x}", seed[0]);
    }
    let mut rng = Rng(seed[0] ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(me as u64 + 1)));
    let mut c = Checker {
        w,
        checks: 0,
        failures: 0,
    };
    let counts: Vec<usize> = [0usize, 1, 7, 4096 + 3, (1 << 20) + 1]
        .into_iter()
        .filter(|&n| n <= max_count)
        .collect();
    let t0 = std::time::Instant::now();
    // Allreduce: every type and op.
    for &n in &counts {
        for dt in DType::ALL {
            for op in RedOp::all_for(dt) {
                allreduce_one(&mut c, &mut rng, dt, op, n)?;
            }
        }
    }
    if max_count >= 64 << 20 {
        for dt in [DType::F32, DType::BF16] {
            allreduce_one(&mut c, &mut rng, dt, RedOp::Sum, 64 << 20)?;
        }
    }
    if me == 0 {
        println!("# allreduce done in {:.1} s", t0.elapsed().as_secs_f64());
    }
    // Reduce, reduce_scatter_block: every type, sum and max (and bxor for integers).
    for &n in &counts {
        for dt in DType::ALL {
            let ops = [RedOp::Sum, RedOp::Max, RedOp::Bxor];
            for op in ops.into_iter().filter(|o| o.valid_for(dt)) {
                let es = dt.size();
                // Reduce to root n % p.
                let root = n % p;
                let input = make_input(&mut rng, dt, op, n);
                let all = c.all(&input);
                let send = upload(&input);
                let mut recv = poisoned(if me == root { n * es } else { 0 });
                w.reduce_device(&send, &mut recv, datatype(dt), mpi_op(op), root)?;
                let err = (me == root)
                    .then(|| check_reduction(dt, op, &all, 0, &download(&recv)))
                    .flatten();
                c.record(&format!("reduce {dt} {op} n={n} root={root}"), err, None);
                // Reduce-scatter with blocks of n elements.
                let input = make_input(&mut rng, dt, op, n * p);
                let all = c.all(&input);
                let send = upload(&input);
                let mut recv = poisoned(n * es);
                w.reduce_scatter_block_device(&send, &mut recv, datatype(dt), mpi_op(op))?;
                let err = check_reduction(dt, op, &all, me * n, &download(&recv));
                c.record(&format!("reduce_scatter_block {dt} {op} n={n}"), err, None);
            }
        }
    }
    // Scan and exscan, out of place and in place: every type, sum, max and bxor.
    // Rank i's result is the reduction of ranks 0..=i (0..i for exscan); rank 0's
    // exscan output is left as it was (the poison, or its input in place).
    for &n in &counts {
        for dt in DType::ALL {
            let ops = [RedOp::Sum, RedOp::Max, RedOp::Bxor];
            for op in ops.into_iter().filter(|o| o.valid_for(dt)) {
                for exclusive in [false, true] {
                    for in_place in [false, true] {
                        let input = make_input(&mut rng, dt, op, n);
                        let all = c.all(&input);
                        let (d, o) = (datatype(dt), mpi_op(op));
                        let got = if in_place {
                            let mut buf = upload(&input);
                            match exclusive {
                                false => w.scan_device_in_place(&mut buf, d, o)?,
                                true => w.exscan_device_in_place(&mut buf, d, o)?,
                            }
                            download(&buf)
                        } else {
                            let send = upload(&input);
                            let mut recv = poisoned(n * dt.size());
                            match exclusive {
                                false => w.scan_device(&send, &mut recv, d, o)?,
                                true => w.exscan_device(&send, &mut recv, d, o)?,
                            }
                            download(&recv)
                        };
                        let upto = if exclusive { me } else { me + 1 };
                        let err = if upto == 0 {
                            let kept = if in_place {
                                input.clone()
                            } else {
                                vec![0xA5; input.len()]
                            };
                            (got != kept).then(|| "rank 0's exscan output was written".to_string())
                        } else {
                            check_reduction(dt, op, &all[..upto], 0, &got)
                        };
                        let name = if exclusive { "exscan" } else { "scan" };
                        c.record(
                            &format!("{name} {dt} {op} n={n} in_place={in_place}"),
                            err,
                            None,
                        );
                    }
                }
            }
        }
    }
    // Allgather and bcast (bytes).
    for &n in &counts {
        let bytes = n * 4 + n % 3;
        let mine = make_input(&mut rng, DType::U32, RedOp::Band, bytes.div_ceil(4));
        let mine = &mine[..bytes];
        let all = c.all(mine);
        let send = upload(mine);
        let mut recv = poisoned(bytes * p);
        w.allgather_device(&send, &mut recv)?;
        let got = download(&recv);
        let err = (got != all.concat()).then(|| "allgather result differs".to_string());
        c.record(&format!("allgather {bytes} bytes"), err, Some(&got));
        let root = (n + 1) % p;
        let data = c.all(mine).swap_remove(root);
        let mut buf = if me == root {
            upload(&data)
        } else {
            poisoned(bytes)
        };
        w.bcast_device(&mut buf, root)?;
        let got = download(&buf);
        let err = (got != data).then(|| "bcast result differs from the root's".to_string());
        c.record(&format!("bcast {bytes} bytes root={root}"), err, Some(&got));
    }
    // Nonblocking: an allreduce and an allgather in flight together.
    {
        let n = 100_003;
        let a = make_input(&mut rng, DType::F64, RedOp::Sum, n);
        let all_a = c.all(&a);
        let g = make_input(&mut rng, DType::U32, RedOp::Band, 1000);
        let all_g = c.all(&g);
        let (sa, sg) = (upload(&a), upload(&g));
        let (mut ra, mut rg) = (poisoned(a.len()), poisoned(g.len() * p));
        let r1 = w.iallreduce_device(&sa, &mut ra, Datatype::F64, Op::Sum)?;
        let r2 = w.iallgather_device(&sg, &mut rg)?;
        // A nonblocking in-place scan and an exscan in flight with them.
        let x = make_input(&mut rng, DType::I64, RedOp::Sum, 4099);
        let all_x = c.all(&x);
        let mut bx = upload(&x);
        let mut ex = poisoned(x.len());
        let sx = upload(&x);
        let r3 = w.iscan_device_in_place(&mut bx, Datatype::I64, Op::Sum)?;
        let r4 = w.iexscan_device(&sx, &mut ex, Datatype::I64, Op::Sum)?;
        rankwire::wait_all_coll(vec![r2, r4, r1, r3])?;
        let err = check_reduction(DType::F64, RedOp::Sum, &all_a, 0, &download(&ra))
            .or_else(|| (download(&rg) != all_g.concat()).then(|| "iallgather differs".into()))
            .or_else(|| check_reduction(DType::I64, RedOp::Sum, &all_x[..=me], 0, &download(&bx)))
            .or_else(|| match me {
                0 => (download(&ex) != vec![0xA5; x.len()]).then(|| "iexscan wrote rank 0".into()),
                _ => check_reduction(DType::I64, RedOp::Sum, &all_x[..me], 0, &download(&ex)),
            });
        c.record(
            "iallreduce + iallgather + iscan in place + iexscan in flight together",
            err,
            None,
        );
    }
    // Nonblocking in-place forms, all four in flight together, at sizes on both sides
    // of the peer-memory scratch slot; every rank's buffers are checked.
    for n in [7usize, 4099, (1 << 20) + 5]
        .into_iter()
        .filter(|&n| n <= max_count.max(7))
    {
        let root = n % p;
        let a = make_input(&mut rng, DType::F32, RedOp::Sum, n);
        let all_a = c.all(&a);
        let r = make_input(&mut rng, DType::I32, RedOp::Max, n);
        let all_r = c.all(&r);
        let g = make_input(&mut rng, DType::U32, RedOp::Band, n);
        let all_g = c.all(&g);
        let s = make_input(&mut rng, DType::I64, RedOp::Sum, n * p);
        let all_s = c.all(&s);
        let mut ba = upload(&a);
        let mut br = upload(&r);
        let mut bg = poisoned(g.len() * p);
        bg.copy_from_host(me * g.len(), &g)
            .unwrap_or_else(|e| fail(&format!("upload: {e}")));
        let mut bs = upload(&s);
        let q1 = w.iallreduce_device_in_place(&mut ba, Datatype::F32, Op::Sum)?;
        let q2 = w.ireduce_device_in_place(&mut br, Datatype::I32, Op::Max, root)?;
        let q3 = w.iallgather_device_in_place(&mut bg)?;
        let q4 = w.ireduce_scatter_block_device_in_place(&mut bs, Datatype::I64, Op::Sum)?;
        rankwire::wait_all_coll(vec![q3, q1, q4, q2])?;
        let got_r = download(&br);
        let err = check_reduction(DType::F32, RedOp::Sum, &all_a, 0, &download(&ba))
            .or_else(|| match me == root {
                true => check_reduction(DType::I32, RedOp::Max, &all_r, 0, &got_r),
                false => (got_r != r).then(|| "ireduce in place changed a non-root".into()),
            })
            .or_else(|| {
                (download(&bg) != all_g.concat()).then(|| "iallgather in place differs".into())
            })
            .or_else(|| {
                check_reduction(
                    DType::I64,
                    RedOp::Sum,
                    &all_s,
                    me * n,
                    &download(&bs)[..n * 8],
                )
            });
        c.record(
            &format!("nonblocking in-place forms in flight together n={n}"),
            err,
            None,
        );
    }
    // Argument errors are reported, not run.
    {
        let s = upload(&[0u8; 16]);
        let mut r = poisoned(16);
        let e = w.allreduce_device(&s, &mut r, Datatype::F32, Op::BitAnd);
        let err = match e {
            Err(rankwire::Error::Usage(m)) if m.contains("integer") => None,
            other => Some(format!("band on f32: {other:?}")),
        };
        c.record("band on f32 is a usage error", err, None);
        let mut short = poisoned(8);
        let e = w.allreduce_device(&s, &mut short, Datatype::F32, Op::Sum);
        let err = match e {
            Err(rankwire::Error::Usage(_)) => None,
            other => Some(format!("short receive buffer: {other:?}")),
        };
        c.record("short receive buffer is a usage error", err, None);
    }
    if me == 0 {
        println!(
            "# rw-gpucoll check: {} checks, {} failures, {:.1} s, kernel cache {:?}; peer memory: {}",
            c.checks,
            c.failures,
            t0.elapsed().as_secs_f64(),
            rankwire::gpu::kernel_cache_stats(),
            w.peer_memory_status().unwrap_or_else(|| "used".into())
        );
    }
    if c.failures > 0 {
        fail(&format!("{} of {} checks failed", c.failures, c.checks));
    }
    Ok(())
}

/// The in-place and stream-ordered forms (mode `peer`).
fn peer(w: &Communicator, max_count: usize) -> rankwire::Result<()> {
    let (me, p) = (w.rank(), w.size());
    let mut rng = Rng(0x5eed ^ (me as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut c = Checker {
        w,
        checks: 0,
        failures: 0,
    };
    let counts: Vec<usize> = [1usize, 7, 4096 + 3, (1 << 20) + 1, 4 << 20]
        .into_iter()
        .filter(|&n| n <= max_count)
        .collect();
    let stream = Stream::new(0).unwrap_or_else(|e| fail(&format!("stream: {e}")));
    // The broadcasts below run on a cudarc stream (Stream::from_cudarc) where the build
    // has cudarc, the other stream-ordered calls on a rankwire one.
    #[cfg(feature = "cuda")]
    let cs = {
        let cu = rankwire::cudarc::driver::CudaContext::new(0)
            .and_then(|ctx| ctx.new_stream())
            .unwrap_or_else(|e| fail(&format!("cudarc stream: {e}")));
        Stream::from_cudarc(&cu).unwrap_or_else(|e| fail(&format!("from_cudarc: {e}")))
    };
    #[cfg(not(feature = "cuda"))]
    let cs = Stream::new(0).unwrap_or_else(|e| fail(&format!("stream: {e}")));
    let t0 = std::time::Instant::now();
    for &n in &counts {
        for (dt, op) in [
            (DType::F32, RedOp::Sum),
            (DType::BF16, RedOp::Sum),
            (DType::I64, RedOp::Max),
        ] {
            let es = dt.size();
            // In-place allreduce, on a fresh buffer each time (freed and reallocated).
            let input = make_input(&mut rng, dt, op, n);
            let all = c.all(&input);
            let mut buf = upload(&input);
            w.allreduce_device_in_place(&mut buf, datatype(dt), mpi_op(op))?;
            let got = download(&buf);
            drop(buf);
            let err = check_reduction(dt, op, &all, 0, &got);
            c.record(
                &format!("allreduce_in_place {dt} {op} n={n}"),
                err,
                Some(&got),
            );
            // In-place reduce at root n % p.
            let root = n % p;
            let input = make_input(&mut rng, dt, op, n);
            let all = c.all(&input);
            let mut buf = upload(&input);
            w.reduce_device_in_place(&mut buf, datatype(dt), mpi_op(op), root)?;
            let got = download(&buf);
            let err = if me == root {
                check_reduction(dt, op, &all, 0, &got)
            } else {
                (got != input).then(|| "non-root buffer changed".to_string())
            };
            c.record(
                &format!("reduce_in_place {dt} {op} n={n} root={root}"),
                err,
                None,
            );
            // In-place reduce_scatter_block (p blocks of n).
            let input = make_input(&mut rng, dt, op, n * p);
            let all = c.all(&input);
            let mut buf = upload(&input);
            w.reduce_scatter_block_device_in_place(&mut buf, datatype(dt), mpi_op(op))?;
            let got = download(&buf);
            let err = check_reduction(dt, op, &all, me * n, &got[..n * es]);
            c.record(
                &format!("reduce_scatter_block_in_place {dt} {op} n={n}"),
                err,
                None,
            );
            // Stream-ordered allreduce between user kernels on one stream:
            // x = a + b (kernel), allreduce(x -> y), z = y + y (kernel), then sync.
            let a = make_input(&mut rng, dt, op, n);
            let zero = vec![0u8; n * es];
            let all_a = c.all(&a);
            let (da, dz) = (upload(&a), upload(&zero));
            let (x, y, z) = (poisoned(n * es), poisoned(n * es), poisoned(n * es));
            let run = || -> Result<(), String> {
                // SAFETY: all ranges are live device buffers of n elements until the
                // synchronize below.
                unsafe {
                    rankwire::gpu::reduce_async(
                        dt,
                        if RedOp::Bor.valid_for(dt) {
                            RedOp::Bor
                        } else {
                            RedOp::Max
                        },
                        x.ptr(),
                        da.ptr(),
                        da.ptr(),
                        n,
                        &stream,
                    )
                    .map_err(|e| e.to_string())?;
                    w.allreduce_device_on_stream(
                        x.ptr(),
                        y.ptr(),
                        n * es,
                        datatype(dt),
                        mpi_op(op),
                        &stream,
                    )
                    .map_err(|e| e.to_string())?;
                    rankwire::gpu::reduce_async(
                        dt,
                        RedOp::Max,
                        z.ptr(),
                        y.ptr(),
                        dz.ptr(),
                        n,
                        &stream,
                    )
                    .map_err(|e| e.to_string())?;
                }
                stream.synchronize().map_err(|e| e.to_string())
            };
            let err = run()
                .err()
                .or_else(|| check_reduction(dt, op, &all_a, 0, &download(&y)));
            let got_z = download(&z);
            c.record(
                &format!("allreduce_on_stream between kernels {dt} {op} n={n}"),
                err,
                Some(&got_z),
            );
        }
        // Allgather in place and on a stream; bcast on a stream.
        let bytes = n * 4;
        let mine = make_input(&mut rng, DType::U32, RedOp::Band, n);
        let all = c.all(&mine);
        let mut recv = poisoned(bytes * p);
        recv.copy_from_host(me * bytes, &mine)
            .unwrap_or_else(|e| fail(&format!("upload: {e}")));
        w.allgather_device_in_place(&mut recv)?;
        let got = download(&recv);
        let err = (got != all.concat()).then(|| "allgather_in_place differs".to_string());
        c.record(
            &format!("allgather_in_place {bytes} bytes"),
            err,
            Some(&got),
        );
        let send = upload(&mine);
        let recv = poisoned(bytes * p);
        // SAFETY: live buffers until the synchronize.
        let r = unsafe { w.allgather_device_on_stream(send.ptr(), bytes, recv.ptr(), &stream) };
        let err = r
            .err()
            .map(|e| e.to_string())
            .or_else(|| stream.synchronize().err().map(|e| e.to_string()))
            .or_else(|| {
                (download(&recv) != all.concat()).then(|| "allgather_on_stream differs".into())
            });
        c.record(&format!("allgather_on_stream {bytes} bytes"), err, None);
        let root = (n + 1) % p;
        let buf = if me == root {
            upload(&all[root])
        } else {
            poisoned(bytes)
        };
        // SAFETY: live buffer until the synchronize.
        let r = unsafe { w.bcast_device_on_stream(buf.ptr(), bytes, root, &cs) };
        let err = r
            .err()
            .map(|e| e.to_string())
            .or_else(|| cs.synchronize().err().map(|e| e.to_string()))
            .or_else(|| (download(&buf) != all[root]).then(|| "bcast_on_stream differs".into()));
        c.record(
            &format!("bcast_on_stream {bytes} bytes root={root}"),
            err,
            None,
        );
        // Reduce-scatter on a stream.
        let input = make_input(&mut rng, DType::F32, RedOp::Sum, n * p);
        let all = c.all(&input);
        let send = upload(&input);
        let recv = poisoned(n * 4);
        // SAFETY: live buffers until the synchronize.
        let r = unsafe {
            w.reduce_scatter_block_device_on_stream(
                send.ptr(),
                recv.ptr(),
                n * 4,
                Datatype::F32,
                Op::Sum,
                &stream,
            )
        };
        let err = r
            .err()
            .map(|e| e.to_string())
            .or_else(|| stream.synchronize().err().map(|e| e.to_string()))
            .or_else(|| check_reduction(DType::F32, RedOp::Sum, &all, me * n, &download(&recv)));
        c.record(&format!("reduce_scatter_block_on_stream n={n}"), err, None);
        // Reduce on a stream, to root n % p.
        let root = n % p;
        let input = make_input(&mut rng, DType::F32, RedOp::Sum, n);
        let all = c.all(&input);
        let send = upload(&input);
        let recv = poisoned(n * 4);
        // SAFETY: live buffers until the synchronize.
        let r = unsafe {
            w.reduce_device_on_stream(
                send.ptr(),
                recv.ptr(),
                n * 4,
                Datatype::F32,
                Op::Sum,
                root,
                &stream,
            )
        };
        let err = r
            .err()
            .map(|e| e.to_string())
            .or_else(|| stream.synchronize().err().map(|e| e.to_string()))
            .or_else(|| {
                if me == root {
                    check_reduction(DType::F32, RedOp::Sum, &all, 0, &download(&recv))
                } else {
                    download(&recv)
                        .iter()
                        .any(|&b| b != 0xA5)
                        .then(|| "non-root buffer written".into())
                }
            });
        c.record(&format!("reduce_on_stream n={n} root={root}"), err, None);
        // Pool memory (not IPC-exportable): through runtime temporaries.
        let input = make_input(&mut rng, DType::F32, RedOp::Sum, n);
        let all = c.all(&input);
        let mut s = DeviceBuffer::alloc_pool(0, n * 4)
            .unwrap_or_else(|e| fail(&format!("pool alloc: {e}")));
        s.copy_from_host(0, &input)
            .unwrap_or_else(|e| fail(&format!("upload: {e}")));
        let mut r = DeviceBuffer::alloc_pool(0, n * 4)
            .unwrap_or_else(|e| fail(&format!("pool alloc: {e}")));
        w.allreduce_device(&s, &mut r, Datatype::F32, Op::Sum)?;
        let got = download(&r);
        let err = check_reduction(DType::F32, RedOp::Sum, &all, 0, &got);
        c.record(&format!("allreduce on pool memory n={n}"), err, Some(&got));
    }
    // Nonblocking calls of both forms in flight (a mapped one still exchanging
    // handles while a scratch one and a blocking one are called): kernels must
    // launch in call order on every rank.
    if max_count >= 4 << 20 {
        let big = (8 << 20) / 4 + 1;
        let a = make_input(&mut rng, DType::F32, RedOp::Sum, big);
        let all_a = c.all(&a);
        let b = make_input(&mut rng, DType::F32, RedOp::Sum, 3);
        let all_b = c.all(&b);
        let d = make_input(&mut rng, DType::F32, RedOp::Sum, 5);
        let all_d = c.all(&d);
        let (sa, sb, sd) = (upload(&a), upload(&b), upload(&d));
        let (mut ra, mut rb, mut rd) = (poisoned(a.len()), poisoned(b.len()), poisoned(d.len()));
        let r1 = w.iallreduce_device(&sa, &mut ra, Datatype::F32, Op::Sum)?;
        let r2 = w.iallreduce_device(&sb, &mut rb, Datatype::F32, Op::Sum)?;
        w.allreduce_device(&sd, &mut rd, Datatype::F32, Op::Sum)?;
        rankwire::wait_all_coll(vec![r2, r1])?;
        let err = check_reduction(DType::F32, RedOp::Sum, &all_a, 0, &download(&ra))
            .or_else(|| check_reduction(DType::F32, RedOp::Sum, &all_b, 0, &download(&rb)))
            .or_else(|| check_reduction(DType::F32, RedOp::Sum, &all_d, 0, &download(&rd)));
        c.record(
            "mapped + scratch nonblocking + blocking in flight together",
            err,
            None,
        );
    }
    // Captured in a CUDA graph and replayed with new inputs (peer path only: the
    // fallback synchronizes the stream, which a capture forbids).
    if w.peer_memory_status().is_none() {
        let n = 1000;
        let x = poisoned(n * 4);
        let y = poisoned(n * 4);
        let ar = |s: &Stream| -> rankwire::Result<()> {
            // SAFETY: x and y are live until the synchronizes below.
            unsafe {
                w.allreduce_device_on_stream(x.ptr(), y.ptr(), n * 4, Datatype::F32, Op::Sum, s)
            }
        };
        ar(&stream)?;
        stream
            .synchronize()
            .unwrap_or_else(|e| fail(&format!("sync: {e}")));
        stream
            .begin_capture()
            .unwrap_or_else(|e| fail(&format!("begin capture: {e}")));
        let captured = ar(&stream);
        let graph = stream.end_capture();
        let mut x = x;
        match (captured, graph) {
            (Ok(()), Ok(graph)) => {
                for rep in 0..3 {
                    let input = make_input(&mut rng, DType::F32, RedOp::Sum, n);
                    let all = c.all(&input);
                    x.copy_from_host(0, &input)
                        .unwrap_or_else(|e| fail(&format!("upload: {e}")));
                    let err = graph
                        .launch(&stream)
                        .and_then(|()| stream.synchronize())
                        .err()
                        .map(|e| e.to_string())
                        .or_else(|| {
                            check_reduction(DType::F32, RedOp::Sum, &all, 0, &download(&y))
                        });
                    c.record(
                        &format!("allreduce_on_stream in a CUDA graph, replay {rep}"),
                        err,
                        None,
                    );
                }
            }
            (a, b) => c.record(
                "allreduce_on_stream in a CUDA graph",
                Some(format!("capture failed: {:?} / {:?}", a.err(), b.err())),
                None,
            ),
        }
    }
    if me == 0 {
        println!(
            "# rw-gpucoll peer: {} checks, {} failures, {:.1} s; peer memory: {}",
            c.checks,
            c.failures,
            t0.elapsed().as_secs_f64(),
            w.peer_memory_status().unwrap_or_else(|| "used".into())
        );
    }
    if c.failures > 0 {
        fail(&format!("{} of {} checks failed", c.failures, c.checks));
    }
    Ok(())
}

/// Small-message allreduce latency by form (mode `latency`): µs per call of the
/// blocking form, of the stream-ordered form followed by a stream synchronize, and of
/// back-to-back stream-ordered calls (one synchronize per 1000: the device-side cost),
/// and the floor of one empty-ish kernel plus synchronize on the same stream.
fn latency(w: &Communicator, bytes: usize) -> rankwire::Result<()> {
    // Large sizes (a breakdown of large allreduce: device side vs host side) take fewer.
    let (iters, warm) = if bytes > 1 << 20 { (50, 5) } else { (2000, 50) };
    let n = (bytes / 4).max(1);
    let send = upload(&vec![1u8; n * 4]);
    let mut recv = poisoned(n * 4);
    let stream = Stream::new(0).unwrap_or_else(|e| fail(&format!("stream: {e}")));
    let time = |name: &str, f: &mut dyn FnMut() -> rankwire::Result<()>| -> rankwire::Result<()> {
        let drain = || {
            stream
                .synchronize()
                .map_err(|e| rankwire::Error::Gpu(e.to_string()))
        };
        for _ in 0..warm {
            f()?;
        }
        drain()?;
        w.barrier()?;
        let t = std::time::Instant::now();
        for _ in 0..iters {
            f()?;
        }
        // Stream-ordered calls still queued count too.
        drain()?;
        let us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
        if w.rank() == 0 {
            println!("{name:<48} {:>10} B {us:>10.2} us", n * 4);
        }
        Ok(())
    };
    time("allreduce_device (blocking)", &mut || {
        w.allreduce_device(&send, &mut recv, Datatype::F32, Op::Sum)
    })?;
    let (sp, rp) = (send.ptr(), recv.ptr());
    let sync = |s: &Stream| {
        s.synchronize()
            .map_err(|e| rankwire::Error::Gpu(e.to_string()))
    };
    time("allreduce_device_on_stream + synchronize", &mut || {
        // SAFETY: live buffers until the synchronize.
        unsafe { w.allreduce_device_on_stream(sp, rp, n * 4, Datatype::F32, Op::Sum, &stream)? };
        sync(&stream)
    })?;
    let mut k = 0;
    let every = iters.min(1000);
    time(
        &format!("allreduce_device_on_stream, sync every {every}"),
        &mut || {
            // SAFETY: live buffers until the synchronize.
            unsafe {
                w.allreduce_device_on_stream(sp, rp, n * 4, Datatype::F32, Op::Sum, &stream)?
            };
            k += 1;
            if k % every == 0 {
                sync(&stream)
            } else {
                Ok(())
            }
        },
    )?;
    sync(&stream)?;
    time("one kernel + synchronize (floor)", &mut || {
        // SAFETY: live buffers.
        unsafe { rankwire::gpu::reduce_async(DType::F32, RedOp::Sum, rp, rp, sp, n, &stream) }
            .map_err(|e| rankwire::Error::Gpu(e.to_string()))?;
        sync(&stream)
    })?;
    if w.rank() == 0 {
        println!(
            "# peer memory: {}",
            w.peer_memory_status().unwrap_or_else(|| "used".into())
        );
    }
    Ok(())
}

fn allreduce_one(
    c: &mut Checker<'_>,
    rng: &mut Rng,
    dt: DType,
    op: RedOp,
    n: usize,
) -> rankwire::Result<()> {
    let input = make_input(rng, dt, op, n);
    let all = c.all(&input);
    let send = upload(&input);
    let mut recv = poisoned(input.len());
    c.w.allreduce_device(&send, &mut recv, datatype(dt), mpi_op(op))?;
    let got = download(&recv);
    let err = check_reduction(dt, op, &all, 0, &got);
    c.record(&format!("allreduce {dt} {op} n={n}"), err, Some(&got));
    Ok(())
}

fn kernel(max: usize) -> Result<(), rankwire::gpu::GpuError> {
    let stream = Stream::new(0)?;
    let (start, end) = (Event::new_timing(0)?, Event::new_timing(0)?);
    println!("# rw-gpucoll kernel: dst = a + b against a device-to-device copy, GPU 0");
    println!("# bandwidth counts bytes moved: kernel 3 x Size, copy 2 x Size (GB/s = 1e9 B/s)");
    println!("# Size (B)    type  kernel GB/s  copy GB/s  ratio");
    let mut size = 1usize << 20;
    while size <= max {
        let a = DeviceBuffer::alloc(0, size)?;
        let b = DeviceBuffer::alloc(0, size)?;
        let mut d = DeviceBuffer::alloc(0, size)?;
        d.fill(0)?;
        let iters = if size >= 256 << 20 { 10 } else { 50 };
        let time = |f: &dyn Fn() -> Result<(), rankwire::gpu::GpuError>| {
            f()?;
            start.record(&stream)?;
            for _ in 0..iters {
                f()?;
            }
            end.record(&stream)?;
            end.synchronize()?;
            Ok::<f64, rankwire::gpu::GpuError>(
                f64::from(end.elapsed_ms(&start)?) / 1e3 / iters as f64,
            )
        };
        // SAFETY: d, a and b are live allocations of `size` bytes until the synchronize
        // inside `time`.
        let copy_s =
            time(&|| unsafe { rankwire::gpu::memcpy_dtod_async(d.ptr(), a.ptr(), size, &stream) })?;
        let copy_bw = 2.0 * size as f64 / copy_s / 1e9;
        for dt in [DType::F32, DType::BF16] {
            // SAFETY: as above; count elements of dt fit in `size` bytes.
            let k_s = time(&|| unsafe {
                rankwire::gpu::reduce_async(
                    dt,
                    RedOp::Sum,
                    d.ptr(),
                    a.ptr(),
                    b.ptr(),
                    size / dt.size(),
                    &stream,
                )
            })?;
            let k_bw = 3.0 * size as f64 / k_s / 1e9;
            println!(
                "{size:<13}{:>5}{k_bw:>13.1}{copy_bw:>11.1}{:>7.2}",
                dt.name(),
                k_bw / copy_bw
            );
        }
        size *= 4;
    }
    Ok(())
}

/// The modes, in the order the usage error lists them.
const MODES: [&str; 4] = ["check", "peer", "latency", "kernel"];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).cloned().unwrap_or_else(|| "check".into());
    let max: Option<usize> = args.get(2).and_then(|s| s.parse().ok());
    // A mode that does not exist is an error with or without a GPU.
    if !MODES.contains(&mode.as_str()) {
        fail(&format!("unknown mode {mode} ({})", MODES.join(" | ")));
    }
    if let Err(e) = rankwire::gpu::init() {
        println!("skipped: no usable GPU ({e})");
        return;
    }
    if mode == "kernel" {
        if let Err(e) = kernel(max.unwrap_or(1 << 30)) {
            fail(&format!("kernel bench: {e}"));
        }
        return;
    }
    let u = rankwire::init().unwrap_or_else(|e| fail(&format!("init: {e}")));
    let w = u.world();
    let r = match mode.as_str() {
        "check" => check(&w, max.unwrap_or(64 << 20)),
        "peer" => peer(&w, max.unwrap_or(4 << 20)),
        // "latency": the only mode left (checked against MODES above; "kernel" returned).
        _ => latency(&w, max.unwrap_or(8)),
    };
    if let Err(e) = r {
        fail(&format!("rank {}: {e}", w.rank()));
    }
    if let Err(e) = u.finalize() {
        fail(&format!("finalize: {e}"));
    }
}
