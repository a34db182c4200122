//! rw-collapp: collective and communicator scenarios for the multi-process tests (run
//! under rwrun).
//!
//! `rw-collapp <scenario> [args]`. Every rank computes a sequential reference from the
//! deterministic inputs of all ranks and checks its own results; any mismatch prints
//! a message and exits 1. Success prints `rank R: <scenario> OK`.
//!
//! Scenarios: `all <count>...` (every collective at each count), `bits` (allreduce
//! f32/f64 bitwise equal on every rank), `comms` (dup/split/create/split_shared and
//! isolation), `overlap` (nonblocking collectives overlapped with point-to-point),
//! `check` (mismatches caught by `RANKWIRE_COLL_CHECK=1`), `nocheck` (a length
//! mismatch without the check fails instead of hanging), `soak <cycles>` (split, dup,
//! collectives and drop, `cycles` times: prints VmRSS after warm-up and at the end and
//! the largest context id seen), `reuse` (context ids reused after communicators are
//! freed, at different times on different ranks, with traffic interleaved on old and
//! new communicators; needs 4 ranks), `exhaust` (2047 communicators alive, the next
//! creation is a clear error, a freed id is then reused), `inplace <count>...` (every
//! in-place collective, blocking and nonblocking, bitwise against the out-of-place form
//! and against the reference, and its argument errors; `collapp_inplace.rs`).

use std::fmt::Debug;

use rankwire::{
    Communicator, Error, Loc, Op, ReduceOp, Result, Status, UserOp, bf16, f16, wait_all_coll,
};

#[path = "common.rs"]
mod common;
use common::fail;

#[path = "collapp_inplace.rs"]
mod inplace;

fn main() {
    common::run_scenario(|_universe, world, scenario, args| match scenario {
        "all" => {
            let counts: Vec<usize> = args[2..].iter().filter_map(|s| s.parse().ok()).collect();
            counts.iter().try_for_each(|&c| all(world, c))
        }
        "inplace" => {
            let counts: Vec<usize> = args[2..].iter().filter_map(|s| s.parse().ok()).collect();
            counts.iter().try_for_each(|&c| inplace::inplace(world, c))
        }
        "bits" => bits(world, 1003, true),
        // The blocking call takes the single-copy path (RANKWIRE_ALLREDUCE_SINGLE_COPY
        // set low): a bracketing of its own, so only ranks are compared with each other.
        "bits-single-copy" => bits(world, 20_011, false),
        "comms" => comms(world),
        "barrier_order" => barrier_order(world),
        "overlap" => overlap(world),
        "check" => check_mode(world),
        "nocheck" => nocheck(world),
        "nocheck-single-copy" => nocheck_single_copy(world),
        "soak" => soak(world, common::arg(args, 2, 10_000)),
        "reuse" => reuse(world),
        "exhaust" => exhaust(world),
        "scale" => scale(world),
        "hier" => hier(world),
        other => fail(&format!("unknown scenario {other:?}")),
    });
}

fn expect<T: PartialEq + Debug>(what: &str, got: &T, want: &T) -> Result<()> {
    if got != want {
        let (g, w) = (format!("{got:?}"), format!("{want:?}"));
        fail(&format!(
            "{what}: got {} want {}",
            &g[..g.len().min(400)],
            &w[..w.len().min(400)]
        ));
    }
    Ok(())
}

/// Rank `r`'s input element `i`.
fn val(r: usize, i: usize) -> i64 {
    ((r * 131 + i * 7 + 3) % 97) as i64 - 48
}

fn vals(r: usize, n: usize) -> Vec<i64> {
    (0..n).map(|i| val(r, i)).collect()
}

/// Per-rank count of the v-collectives (zeros included).
fn vcount(r: usize, count: usize) -> usize {
    (r * 3 + count) % 5 + count / 3
}

fn displs(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |a, &c| {
            let d = *a;
            *a += c;
            Some(d)
        })
        .collect()
}

/// Non-commutative, associative: concatenation of rank ranges [first, last].
fn concat() -> UserOp<[i64; 2]> {
    UserOp::new(
        |inv: &[[i64; 2]], io: &mut [[i64; 2]]| {
            for (l, r) in inv.iter().zip(io.iter_mut()) {
                *r = if l[1] + 1 == r[0] && l[0] >= 0 {
                    [l[0], r[1]]
                } else {
                    [-1, -1]
                };
            }
        },
        false,
    )
}

/// Every collective at `count` against the sequential reference.
fn all(w: &Communicator, count: usize) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    let c = |what: &str| format!("{what} (p={p}, count={count}, rank {me})");
    let mine = vals(me, count);
    let sum: Vec<i64> = (0..count)
        .map(|i| (0..p).map(|r| val(r, i)).sum())
        .collect();

    w.barrier()?;
    for root in [0, p - 1, p / 2] {
        let mut b: Vec<i64> = if me == root {
            vals(root, count)
        } else {
            vec![0; count]
        };
        w.bcast(&mut b, root)?;
        expect(&c("bcast"), &b, &vals(root, count))?;
        let mut bytes: Vec<u8> = if me == root {
            (0..count).map(|i| i as u8).collect()
        } else {
            vec![9; count]
        };
        w.bcast(&mut bytes, root)?;
        expect(
            &c("bcast u8"),
            &bytes,
            &(0..count).map(|i| i as u8).collect(),
        )?;

        let mut red = vec![0i64; if me == root { count } else { 0 }];
        w.reduce(&mine, &mut red, Op::Sum, root)?;
        if me == root {
            expect(&c("reduce sum"), &red, &sum)?;
        }
        let ranges = vec![[me as i64, me as i64]; count.min(50)];
        let mut ord = vec![[0i64; 2]; if me == root { ranges.len() } else { 0 }];
        w.reduce(&ranges, &mut ord, concat(), root)?;
        if me == root {
            expect(
                &c("reduce non-commutative"),
                &ord,
                &vec![[0, p as i64 - 1]; ranges.len()],
            )?;
        }

        let mut g = vec![0i64; if me == root { p * count } else { 0 }];
        w.gather(&mine, &mut g, root)?;
        if me == root {
            expect(
                &c("gather"),
                &g,
                &(0..p).flat_map(|r| vals(r, count)).collect(),
            )?;
        }
        let counts: Vec<usize> = (0..p).map(|r| vcount(r, count)).collect();
        let dis = displs(&counts);
        let total: usize = counts.iter().sum();
        let mut gv = vec![-7i64; if me == root { total } else { 0 }];
        w.gatherv(&vals(me, counts[me]), &mut gv, &counts, &dis, root)?;
        if me == root {
            expect(
                &c("gatherv"),
                &gv,
                &(0..p).flat_map(|r| vals(r, counts[r])).collect(),
            )?;
        }

        let full: Vec<i64> = (0..p).flat_map(|r| vals(r + 100, count)).collect();
        let mut s = vec![0i64; count];
        w.scatter(if me == root { &full } else { &[] }, &mut s, root)?;
        expect(&c("scatter"), &s, &vals(me + 100, count))?;
        let fullv: Vec<i64> = (0..p).flat_map(|r| vals(r + 200, counts[r])).collect();
        let mut sv = vec![0i64; counts[me]];
        w.scatterv(
            if me == root { &fullv } else { &[] },
            &counts,
            &dis,
            &mut sv,
            root,
        )?;
        expect(&c("scatterv"), &sv, &vals(me + 200, counts[me]))?;
    }

    let mut ar = vec![0i64; count];
    w.allreduce(&mine, &mut ar, Op::Sum)?;
    expect(&c("allreduce sum"), &ar, &sum)?;
    let mut mx = vec![0i64; count];
    w.allreduce(&mine, &mut mx, Op::Max)?;
    expect(
        &c("allreduce max"),
        &mx,
        &(0..count)
            .map(|i| (0..p).map(|r| val(r, i)).max().unwrap_or(0))
            .collect(),
    )?;
    let um: Vec<u32> = mine.iter().map(|&x| x as u32).collect();
    let mut bx = vec![0u32; count];
    w.allreduce(&um, &mut bx, Op::BitXor)?;
    expect(
        &c("allreduce bxor"),
        &bx,
        &(0..count)
            .map(|i| (0..p).fold(0, |a, r| a ^ val(r, i) as u32))
            .collect(),
    )?;
    let fl: Vec<f64> = mine.iter().map(|&x| x as f64).collect();
    let mut fs = vec![0f64; count];
    w.allreduce(&fl, &mut fs, Op::Sum)?;
    expect(
        &c("allreduce f64"),
        &fs,
        &sum.iter().map(|&x| x as f64).collect(),
    )?;
    let h: Vec<f16> = (0..count)
        .map(|i| f16::from_f32(((me + i) % 4) as f32))
        .collect();
    let mut hs = vec![f16::ZERO; count];
    w.allreduce(&h, &mut hs, Op::Sum)?;
    let hw: Vec<f16> = (0..count)
        .map(|i| f16::from_f32((0..p).map(|r| ((r + i) % 4) as f32).sum()))
        .collect();
    expect(&c("allreduce f16"), &hs, &hw)?;
    let bh: Vec<bf16> = h.iter().map(|x| bf16::from_f32(x.to_f32())).collect();
    let mut bs = vec![bf16::ZERO; count];
    w.allreduce(&bh, &mut bs, Op::Max)?;
    let bw: Vec<bf16> = (0..count)
        .map(|i| bf16::from_f32((0..p).map(|r| ((r + i) % 4) as f32).fold(0.0, f32::max)))
        .collect();
    expect(&c("allreduce bf16 max"), &bs, &bw)?;
    let locs: Vec<Loc<f64, i64>> = (0..count)
        .map(|i| Loc::new(((me * 37 + i) % 11) as f64, me as i64))
        .collect();
    let mut ml = vec![Loc::new(0.0, 0); count];
    w.allreduce(&locs, &mut ml, Op::MinLoc)?;
    let mlw: Vec<Loc<f64, i64>> = (0..count)
        .map(|i| {
            let v = (0..p).map(|r| (r * 37 + i) % 11).min().unwrap_or(0);
            let at = (0..p).find(|r| (r * 37 + i) % 11 == v).unwrap_or(0);
            Loc::new(v as f64, at as i64)
        })
        .collect();
    expect(&c("allreduce minloc"), &ml, &mlw)?;
    let ranges = vec![[me as i64, me as i64]; count.min(64)];
    let mut ordr = vec![[0i64; 2]; ranges.len()];
    w.allreduce(&ranges, &mut ordr, concat())?;
    expect(
        &c("allreduce non-commutative"),
        &ordr,
        &vec![[0, p as i64 - 1]; ranges.len()],
    )?;

    let mut ag = vec![0i64; p * count];
    w.allgather(&mine, &mut ag)?;
    expect(
        &c("allgather"),
        &ag,
        &(0..p).flat_map(|r| vals(r, count)).collect(),
    )?;
    let counts: Vec<usize> = (0..p).map(|r| vcount(r, count)).collect();
    let dis: Vec<usize> = displs(&counts).iter().map(|d| d + 3).collect();
    let total: usize = counts.iter().sum::<usize>() + 3;
    let mut agv = vec![-1i64; total];
    w.allgatherv(&vals(me, counts[me]), &mut agv, &counts, &dis)?;
    let mut want = vec![-1i64; 3];
    want.extend((0..p).flat_map(|r| vals(r, counts[r])));
    expect(&c("allgatherv"), &agv, &want)?;

    let a2a: Vec<i64> = (0..p * count).map(|i| val(me, 1000 + i)).collect();
    let mut a2r = vec![0i64; p * count];
    w.alltoall(&a2a, &mut a2r)?;
    let a2w: Vec<i64> = (0..p)
        .flat_map(|src| (0..count).map(move |t| val(src, 1000 + me * count + t)))
        .collect();
    expect(&c("alltoall"), &a2r, &a2w)?;
    // alltoallv with send counts `sc` and receive counts `rc`; element t of the block
    // for rank j carries val(me, j * stride + t).
    let alltoallv_with = |sc: Vec<usize>, rc: Vec<usize>, stride: usize, what: &str| {
        let (sd, rd) = (displs(&sc), displs(&rc));
        let sbuf: Vec<i64> = (0..p)
            .flat_map(|j| (0..sc[j]).map(move |t| val(me, j * stride + t)))
            .collect();
        let mut rbuf = vec![0i64; rc.iter().sum()];
        w.alltoallv(&sbuf, &sc, &sd, &mut rbuf, &rc, &rd)?;
        let rw: Vec<i64> = (0..p)
            .flat_map(|i| (0..rc[i]).map(move |t| val(i, me * stride + t)))
            .collect();
        expect(&c(what), &rbuf, &rw)
    };
    let f = |i: usize, j: usize| (i + 2 * j + count) % 4 + count / 4;
    alltoallv_with(
        (0..p).map(|j| f(me, j)).collect(),
        (0..p).map(|i| f(i, me)).collect(),
        1000,
        "alltoallv",
    )?;
    // Skewed: rank 0 sends 1100 elements (8800 bytes) to every rank, the others 1, so
    // the ranks' average blocks lie on either side of the 8 KiB where the algorithm
    // choice of oversubscribed jobs changes (each rank picks by its own).
    let sk = |i: usize| if i == 0 { 1100 } else { 1 };
    alltoallv_with(
        (0..p).map(|_| sk(me)).collect(),
        (0..p).map(sk).collect(),
        2000,
        "alltoallv (skewed)",
    )?;

    let rsin: Vec<i64> = (0..p * count).map(|i| val(me, i)).collect();
    let mut rsb = vec![0i64; count];
    w.reduce_scatter_block(&rsin, &mut rsb, Op::Sum)?;
    expect(
        &c("reduce_scatter_block"),
        &rsb,
        &(0..count)
            .map(|t| (0..p).map(|r| val(r, me * count + t)).sum())
            .collect(),
    )?;
    let rcounts: Vec<usize> = (0..p).map(|r| vcount(r, count)).collect();
    let rtotal: usize = rcounts.iter().sum();
    let start: usize = rcounts[..me].iter().sum();
    let rsv_in = vals(me, rtotal);
    let mut rsv = vec![0i64; rcounts[me]];
    w.reduce_scatter(&rsv_in, &mut rsv, &rcounts, Op::Sum)?;
    expect(
        &c("reduce_scatter"),
        &rsv,
        &(start..start + rcounts[me])
            .map(|i| (0..p).map(|r| val(r, i)).sum())
            .collect(),
    )?;
    let rsr: Vec<[i64; 2]> = vec![[me as i64, me as i64]; 2 * p];
    let mut rso = vec![[0i64; 2]; 2];
    w.reduce_scatter_block(&rsr, &mut rso, concat())?;
    expect(
        &c("reduce_scatter_block non-commutative"),
        &rso,
        &vec![[0, p as i64 - 1]; 2],
    )?;

    let mut sc_out = vec![0i64; count];
    w.scan(&mine, &mut sc_out, Op::Sum)?;
    expect(
        &c("scan"),
        &sc_out,
        &(0..count)
            .map(|i| (0..=me).map(|r| val(r, i)).sum())
            .collect(),
    )?;
    let mut ex = vec![555i64; count];
    w.exscan(&mine, &mut ex, Op::Sum)?;
    let exw: Vec<i64> = if me == 0 {
        vec![555; count]
    } else {
        (0..count)
            .map(|i| (0..me).map(|r| val(r, i)).sum())
            .collect()
    };
    expect(&c("exscan"), &ex, &exw)?;
    let mut so = vec![[0i64; 2]; 3];
    w.scan(&[[me as i64, me as i64]; 3], &mut so, concat())?;
    expect(&c("scan non-commutative"), &so, &vec![[0, me as i64]; 3])?;

    // Vectors below the single-copy allreduce's size (64 KiB by default) take the
    // schedule's algorithm in the blocking form too.
    let single_copy = std::env::var_os("RANKWIRE_ALLREDUCE_SINGLE_COPY").is_some();
    bits(w, count, !single_copy && count * 8 < 64 << 10)
}

/// Allreduce of non-integer f32 and f64 sums: every rank's result bits must be equal;
/// rank 0 gathers and compares them, then shares the verdict. `like_schedule`: the
/// blocking call must also give the bits of the nonblocking one (the same algorithm).
fn bits(w: &Communicator, count: usize, like_schedule: bool) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    let x32: Vec<f32> = (0..count)
        .map(|i| ((me * 7919 + i * 104729) as f32).sin() * 1e3 / (1 + i % 13) as f32)
        .collect();
    let x64: Vec<f64> = (0..count)
        .map(|i| ((me * 7919 + i * 104729) as f64).cos() * 1e7 / (1 + i % 17) as f64)
        .collect();
    let mut r32 = vec![0f32; count];
    let mut r64 = vec![0f64; count];
    w.allreduce(&x32, &mut r32, Op::Sum)?;
    w.allreduce(&x64, &mut r64, Op::Sum)?;
    // The blocking call of a small vector runs without a schedule (coll/direct.rs); the
    // nonblocking one always runs the schedule: same algorithm, so the same bits.
    let mut n32 = vec![0f32; count];
    let mut n64 = vec![0f64; count];
    w.iallreduce(&x32, &mut n32, Op::Sum)?.wait()?;
    w.iallreduce(&x64, &mut n64, Op::Sum)?.wait()?;
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    let same64 = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    if like_schedule {
        expect(
            "blocking and nonblocking allreduce give the same bits",
            &(same(&r32, &n32) && same64(&r64, &n64)),
            &true,
        )?;
    }
    let b32: Vec<u32> = r32.iter().map(|f| f.to_bits()).collect();
    let b64: Vec<u64> = r64.iter().map(|f| f.to_bits()).collect();
    let mut g32 = vec![0u32; if me == 0 { p * count } else { 0 }];
    let mut g64 = vec![0u64; if me == 0 { p * count } else { 0 }];
    w.gather(&b32, &mut g32, 0)?;
    w.gather(&b64, &mut g64, 0)?;
    let mut bad = [0u64];
    if me == 0 {
        for r in 1..p {
            if g32[r * count..(r + 1) * count] != b32[..]
                || g64[r * count..(r + 1) * count] != b64[..]
            {
                eprintln!("rank {r}'s allreduce bits differ from rank 0's");
                bad[0] = 1;
            }
        }
        // Sanity: close to the sequential sums.
        for (i, &got) in r64.iter().enumerate() {
            let s: f64 = (0..p)
                .map(|r| ((r * 7919 + i * 104729) as f64).cos() * 1e7 / (1 + i % 17) as f64)
                .sum();
            if (s - got).abs() > 1e-6 * s.abs().max(1.0) {
                eprintln!("f64 sum {i}: {got} vs {s}");
                bad[0] = 1;
            }
        }
    }
    w.bcast(&mut bad, 0)?;
    expect("allreduce bits identical on every rank", &bad[0], &0)
}

/// Communicator creation and isolation.
fn comms(w: &Communicator) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    let dup = w.dup()?;
    expect("dup size", &(dup.size(), dup.rank()), &(p, me))?;
    if dup.context_id() == w.context_id() {
        fail("dup has the world's context id");
    }
    let dup2 = dup.dup()?;
    if dup2.context_id() == dup.context_id() || dup2.context_id() == w.context_id() {
        fail("dup of dup reuses a context id");
    }
    // Same tag on world and dup never cross: rank 0 sends world first, rank 1 receives
    // dup first.
    if p >= 2 {
        if me == 0 {
            w.send(&[1u32], 1, 5)?;
            dup.send(&[2u32], 1, 5)?;
            dup2.send(&[3u32], 1, 5)?;
        } else if me == 1 {
            // World and dup messages wait in the unexpected queue; a wildcard receive on
            // dup2 must skip them, and each of the others gets its own.
            let mut x = [0u32];
            let st = dup2.recv(&mut x, rankwire::ANY_SOURCE, rankwire::ANY_TAG)?;
            expect(
                "dup2 message via ANY_SOURCE/ANY_TAG",
                &(x[0], st.source),
                &(3, 0),
            )?;
            if dup2
                .iprobe(rankwire::ANY_SOURCE, rankwire::ANY_TAG)?
                .is_some()
            {
                fail("dup2 sees a message of another communicator");
            }
            dup.recv(&mut x, 0, 5)?;
            expect("dup message", &x[0], &2)?;
            w.recv(&mut x, 0, 5)?;
            expect("world message", &x[0], &1)?;
        }
    }
    finish_comms(w, &dup)
}

fn finish_comms(w: &Communicator, dup: &Communicator) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    // Split by parity, reversed order by key.
    let sub = w
        .split(Some((me % 2) as u32), -(me as i32))?
        .expect("a color was given");
    let members: Vec<usize> = (0..p).filter(|r| r % 2 == me % 2).rev().collect();
    expect("split size", &sub.size(), &members.len())?;
    expect(
        "split rank",
        &sub.rank(),
        &members.iter().position(|&r| r == me).unwrap(),
    )?;
    expect("split group", &sub.group().world_ranks(), &members)?;
    let mut s = [0i64];
    sub.allreduce(&[me as i64], &mut s, Op::Sum)?;
    expect(
        "allreduce on split",
        &s[0],
        &(members.iter().sum::<usize>() as i64),
    )?;
    // Point-to-point on the split with communicator ranks, interleaved with the same
    // tags on world and dup.
    let n = sub.size();
    let (right, left) = ((sub.rank() + 1) % n, (sub.rank() + n - 1) % n);
    let mut got = [0u64];
    let st: Status = sub.sendrecv(&[sub.rank() as u64 * 10], right, 9, &mut got, left, 9)?;
    expect(
        "split sendrecv",
        &(got[0], st.source),
        &(left as u64 * 10, left),
    )?;
    let mut d = [0i64];
    dup.allreduce(&[1i64], &mut d, Op::Sum)?;
    expect("allreduce on dup", &d[0], &(p as i64))?;
    // Undefined color: no communicator.
    let none = w.split(if me == 0 { None } else { Some(0) }, 0)?;
    expect("split with MPI_UNDEFINED", &none.is_none(), &(me == 0))?;
    if let Some(c) = &none {
        expect("split without rank 0", &c.size(), &(p - 1))?;
        c.barrier()?;
    }
    // create from a group of the even ranks.
    let evens = w.group().incl(&(0..p).step_by(2).collect::<Vec<_>>())?;
    let ec = w.create(&evens)?;
    expect("create membership", &ec.is_some(), &(me % 2 == 0))?;
    if let Some(ec) = &ec {
        let mut b = [if ec.rank() == 0 { 42u8 } else { 0 }];
        ec.bcast(&mut b, 0)?;
        expect("bcast on created", &b[0], &42)?;
        let t = w.group().translate_ranks(&[me], &ec.group())?;
        expect("translate", &t, &vec![Some(me / 2)])?;
    }
    // All ranks of a job run on this machine.
    let node = w.split_shared()?;
    expect("split_shared size", &(node.size(), node.rank()), &(p, me))?;
    // Collectives on several communicators interleaved keep apart.
    let mut a = [0i64];
    let mut b = [0i64];
    let ra = sub.iallreduce(&[1i64], &mut a, Op::Sum)?;
    let rb = w.iallreduce(&[2i64], &mut b, Op::Sum)?;
    rb.wait()?;
    ra.wait()?;
    expect(
        "interleaved",
        &(a[0], b[0]),
        &(sub.size() as i64, 2 * p as i64),
    )?;
    w.barrier()
}

/// Nonblocking collectives overlapped with point-to-point traffic, completed in
/// different orders on different ranks.
fn overlap(w: &Communicator) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    let n = 5000;
    let mine = vals(me, n);
    let sum: Vec<i64> = (0..n).map(|i| (0..p).map(|r| val(r, i)).sum()).collect();
    let dup = w.dup()?;
    let mut bc = if me == 0 { vals(0, n) } else { vec![0i64; n] };
    let mut ar = vec![0i64; n];
    let mut ag = vec![0i64; p * 64];
    let mut ar2 = vec![0i64; n];
    let small = vals(me, 64);
    let mut a2 = vec![0i64; p * 3];
    let a2s: Vec<i64> = (0..3 * p).map(|i| val(me, i)).collect();
    let ib = w.ibarrier()?;
    let rb = w.ibcast(&mut bc, 0)?;
    let ra = w.iallreduce(&mine, &mut ar, Op::Sum)?;
    let rg = w.iallgather(&small, &mut ag)?;
    let rd = dup.iallreduce(&mine, &mut ar2, Op::Max)?;
    let rt = w.ialltoall(&a2s, &mut a2)?;
    // Point-to-point around the ring, eager and rendezvous sizes, while they run.
    let (right, left) = ((me + 1) % p, (me + p - 1) % p);
    for len in [8usize, 100_000] {
        let out = vec![me as u8; len];
        let mut inn = vec![0u8; len];
        w.sendrecv(&out, right, 3, &mut inn, left, 3)?;
        expect("p2p during collectives", &inn[len - 1], &(left as u8))?;
    }
    // Test some, wait the rest in rank-dependent order.
    let rb = match rb.test() {
        Ok(r) => {
            r?;
            None
        }
        Err(req) => Some(req),
    };
    if me % 2 == 0 {
        rd.wait()?;
        rt.wait()?;
        rg.wait()?;
        ra.wait()?;
        ib.wait()?;
    } else {
        wait_all_coll(vec![ib, ra, rg, rt, rd])?;
    }
    rb.map(rankwire::CollRequest::wait).transpose()?;
    expect("ibcast", &bc, &vals(0, n))?;
    expect("iallreduce", &ar, &sum)?;
    expect(
        "iallgather",
        &ag,
        &(0..p).flat_map(|r| vals(r, 64)).collect(),
    )?;
    expect(
        "iallreduce on dup",
        &ar2,
        &(0..n)
            .map(|i| (0..p).map(|r| val(r, i)).max().unwrap_or(0))
            .collect(),
    )?;
    expect(
        "ialltoall",
        &a2,
        &(0..p)
            .flat_map(|s| (0..3).map(move |t| val(s, me * 3 + t)))
            .collect(),
    )?;
    // MPI's progress rule: rank 0 blocks in a receive from rank 2, which sends only
    // once its ibarrier is complete; that needs rank 0's second barrier round,
    // which rank 0 can only start from inside the blocking receive.
    if p >= 3 {
        let b = w.ibarrier()?;
        if me == 0 {
            let mut x = [0u8];
            w.recv(&mut x, 2, 6)?;
            b.wait()?;
        } else if me == 2 {
            b.wait()?;
            w.send(&[1u8], 0, 6)?;
        } else {
            b.wait()?;
        }
    }
    // A receive posted before a nonblocking collective starts and matched after it.
    let mut x = [0u32];
    let r = w.irecv(&mut x, left, 4)?;
    let mut y = [0i64];
    let c = w.iallreduce(&[1i64], &mut y, Op::Sum)?;
    w.send(&[me as u32], right, 4)?;
    c.wait()?;
    r.wait()?;
    expect(
        "recv around a collective",
        &(x[0], y[0]),
        &(left as u32, p as i64),
    )?;
    Ok(())
}

/// Each mismatch fails on every rank with a message naming it, then the communicator
/// keeps working.
fn check_mode(w: &Communicator) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    let expect_err = |what: &str, r: Result<()>, needles: &[&str]| -> Result<()> {
        match r {
            Err(Error::Collective(m)) => {
                for n in needles {
                    if !m.contains(n) {
                        fail(&format!("{what}: error {m:?} lacks {n:?}"));
                    }
                }
                println!("rank {me}: {what}: {m}");
                Ok(())
            }
            other => fail(&format!(
                "{what}: expected a collective error, got {other:?}"
            )),
        }
    };
    // Count mismatch: the last rank passes one element more.
    let n = if me == p - 1 { 5 } else { 4 };
    let mut out = vec![0i64; n];
    expect_err(
        "count",
        w.allreduce(&vec![1i64; n], &mut out, Op::Sum),
        &[
            "count mismatch",
            &format!("rank {}: 5 elements (40 bytes)", p - 1),
        ],
    )?;
    // Root mismatch.
    let root = if me == p - 1 { 1 } else { 0 };
    let mut b = [0u8; 16];
    expect_err(
        "root",
        w.bcast(&mut b, root),
        &["root mismatch", &format!("rank {}: root 1", p - 1)],
    )?;
    // Different collectives.
    let r = if me == 0 {
        w.barrier()
    } else {
        w.allgather(&[1u8], &mut vec![0u8; p])
    };
    expect_err("kind", r, &["different collectives", "rank 0: barrier"])?;
    // Operation mismatch.
    let op = if me == 0 { Op::Max } else { Op::Sum };
    expect_err(
        "op",
        w.allreduce(&[1u32], &mut [0u32], op),
        &["operation mismatch", "MPI_MAX"],
    )?;
    // gatherv: one rank sends a different count than the root expects.
    let counts = vec![2usize; p];
    let dis = displs(&counts);
    let mine = if me == p - 1 { 3 } else { 2 };
    let mut g = vec![0i32; if me == 0 { 2 * p } else { 0 }];
    expect_err(
        "gatherv",
        w.gatherv(&vec![1i32; mine], &mut g, &counts, &dis, 0),
        &[&format!(
            "rank {} sends 3 elements but root 0 expects recvcounts[{}] = 2",
            p - 1,
            p - 1
        )],
    )?;
    // alltoallv: the last rank sends two elements to rank 0, which expects one.
    let sc: Vec<usize> = (0..p)
        .map(|j| if me == p - 1 && j == 0 { 2 } else { 1 })
        .collect();
    let rc = vec![1usize; p];
    let sbuf = vec![7u16; sc.iter().sum()];
    let mut rbuf = vec![0u16; p];
    expect_err(
        "alltoallv",
        w.alltoallv(&sbuf, &sc, &displs(&sc), &mut rbuf, &rc, &displs(&rc)),
        &[&format!(
            "rank {} sends 2 elements to rank 0, which expects 1",
            p - 1
        )],
    )?;
    // Invalid arguments on one rank are reported everywhere: that rank gets the same
    // Usage error as without the check, the others a Collective error naming it.
    let bad_len = if me == 1 % p { p + 1 } else { p };
    let mut ag = vec![0u8; bad_len];
    let r = w.allgather(&[1u8], &mut ag);
    if me == 1 % p {
        match r {
            Err(Error::Usage(m)) if m.contains("receive buffer") => {
                println!("rank {me}: invalid: {m}")
            }
            other => fail(&format!("invalid: expected a usage error, got {other:?}")),
        }
    } else {
        expect_err("invalid", r, &["invalid arguments"])?;
    }
    // Still usable.
    let mut s = [0i64];
    w.allreduce(&[1i64], &mut s, Op::Sum)?;
    expect("allreduce after mismatches", &s[0], &(p as i64))?;
    w.barrier()
}

/// The node-aware device allreduce's decision (host collectives only, no GPU): with
/// `RANKWIRE_TEST_GPU_HIER_SPLIT=k`, ranks `k·i ..` form fake node `i`; without it, all
/// ranks of this machine are one node and the hierarchy does not apply. Asked twice:
/// the second answer is the kept one.
fn hier(w: &Communicator) -> Result<()> {
    let (n, me) = (w.size(), w.rank());
    let want = match std::env::var("RANKWIRE_TEST_GPU_HIER_SPLIT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(k) if k > 0 => {
            let nodes = n.div_ceil(k);
            let node_size = k.min(n - (me / k) * k);
            (n >= 3 && nodes >= 2 && k.min(n) >= 2).then_some((me % k, node_size, nodes))
        }
        _ => None,
    };
    let before = w.context_stats().0;
    expect("hierarchy", &w.device_allreduce_hierarchy()?, &want)?;
    // Where it applies, two communicators (the node's, the leaders' on leaders) are kept.
    let kept = w.context_stats().0 - before;
    let want_kept = match want {
        Some((0, ..)) => 2,
        Some(_) => 1,
        None => 0,
    };
    expect("context ids kept", &kept, &want_kept)?;
    // Asked again: the kept answer, no new communicator.
    expect("hierarchy", &w.device_allreduce_hierarchy()?, &want)?;
    expect("context ids", &w.context_stats().0, &(before + want_kept))?;
    // Later collectives on the world still match.
    let mut out = [0u64];
    w.allreduce(&[me as u64], &mut out, Op::Sum)?;
    expect("sum", &out[0], &((n * (n - 1) / 2) as u64))
}

/// Without the check, a count mismatch that reaches a receive fails the call on the
/// ranks involved instead of truncating or hanging (2 ranks, recursive doubling).
fn nocheck(w: &Communicator) -> Result<()> {
    let me = w.rank();
    let n = if me == 1 { 5 } else { 4 };
    let mut out = vec![0i64; n];
    match w.allreduce(&vec![1i64; n], &mut out, ReduceOp::from(Op::Sum)) {
        Err(Error::Collective(m)) if m.contains("bytes where") => {
            println!("rank {me}: nocheck: {m}");
            Ok(())
        }
        // From 3 ranks a rank may still have a receive posted when another rank that
        // saw the mismatch revokes the context (protocol/revoke.rs): that receive fails
        // with the revocation, which names the rank that saw it.
        Err(Error::Collective(m)) if w.size() > 2 && m.contains("collectives are revoked") => {
            println!("rank {me}: nocheck: {m}");
            Ok(())
        }
        other => fail(&format!("expected a collective error, got {other:?}")),
    }
}

/// The same above 64 KiB, where the blocking allreduce takes the single-copy path
/// (coll/single_copy.rs): the last rank passes one element more, and every rank, not
/// only those that exchange descriptors with it first, fails with the mismatch.
fn nocheck_single_copy(w: &Communicator) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    let n = if me == p - 1 { 20_001 } else { 20_000 };
    let mut out = vec![0i64; n];
    match w.allreduce(&vec![1i64; n], &mut out, Op::Sum) {
        Err(Error::Collective(m)) if m.contains("bytes where this rank passed") => {
            println!("rank {me}: nocheck-single-copy: {m}");
            Ok(())
        }
        other => fail(&format!("expected a collective error, got {other:?}")),
    }
}

/// Barrier semantics: in each round one rank (round-robin) enters 30 ms late; no rank
/// may leave before that rank entered (its entry time, broadcast afterwards, is at or
/// before every rank's exit time; same machine, CLOCK_MONOTONIC). Blocking and
/// nonblocking.
fn barrier_order(w: &Communicator) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    // CLOCK_MONOTONIC: one clock for every process of the machine, never stepped.
    let now = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec, which `ts` is.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    for round in 0..2 * p {
        let late = round % p;
        let mut entered = [0u64];
        if me == late {
            std::thread::sleep(std::time::Duration::from_millis(30));
            entered[0] = now();
        }
        if round < p {
            w.barrier()?;
        } else {
            w.ibarrier()?.wait()?;
        }
        let left = now();
        w.bcast(&mut entered, late)?;
        if left < entered[0] {
            fail(&format!(
                "barrier round {round}: rank {me} left {} µs before rank {late} entered",
                (entered[0] - left) / 1000
            ));
        }
    }
    Ok(())
}

/// `cycles` rounds of split + allreduce + dup + barrier + drop (issue 17 case 4), with
/// point-to-point traffic on the new communicators. Prints
/// `rank R: soak rss_warm_kib=A rss_end_kib=B max_ctx=C ids_taken=I seq_pairs=P
/// cycles=N secs=S` (I, P: `Communicator::context_stats` at the end).
fn soak(w: &Communicator, cycles: usize) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    let warm = (cycles / 10).max(1);
    let start = std::time::Instant::now();
    let (mut rss_warm, mut max_ctx) = (0, 0);
    for i in 0..cycles {
        if i == warm {
            rss_warm = common::rss_kib();
        }
        let sub = w
            .split(Some((me % 2) as u32), 0)?
            .expect("a color was given");
        let mut s = [0i64];
        sub.allreduce(&[me as i64], &mut s, Op::Sum)?;
        let want: usize = (0..p).filter(|r| r % 2 == me % 2).sum();
        if s[0] != want as i64 {
            fail(&format!(
                "soak cycle {i}: allreduce on split {} want {want}",
                s[0]
            ));
        }
        let dup = sub.dup()?;
        let n = dup.size();
        let mut got = [0u64];
        dup.sendrecv(
            &[i as u64],
            (dup.rank() + 1) % n,
            3,
            &mut got,
            (dup.rank() + n - 1) % n,
            3,
        )?;
        if got[0] != i as u64 {
            fail(&format!(
                "soak cycle {i}: sendrecv on dup got {} want {i}",
                got[0]
            ));
        }
        dup.barrier()?;
        max_ctx = max_ctx
            .max(sub.context_id().get())
            .max(dup.context_id().get());
    }
    w.barrier()?;
    let (ids, pairs) = w.context_stats();
    println!(
        "rank {me}: soak rss_warm_kib={rss_warm} rss_end_kib={} max_ctx={max_ctx} ids_taken={ids} seq_pairs={pairs} cycles={cycles} secs={:.1}",
        common::rss_kib(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Context-id reuse (issue 17 case 4) at 4 ranks: freed ids come back, ids still held
/// by some rank do not, and traffic on old and new communicators never mixes.
fn reuse(w: &Communicator) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    if p != 4 {
        fail("reuse needs 4 ranks");
    }
    let id = |c: &Communicator| c.context_id().get();
    let a = w.dup()?;
    let b = w.dup()?;
    let b_id = id(&b);
    // Rank 0 sends on a and keeps it; rank 1 receives it after new communicators exist.
    if me == 0 {
        a.send(&[11u32], 1, 5)?;
    }
    drop(b);
    // b was freed everywhere: its id is the lowest free one and comes back.
    let d = w.dup()?;
    expect("dup after a free reuses the id", &id(&d), &b_id)?;
    if me == 0 {
        // Same tag on the world, a and the reused id, in this order.
        w.send(&[1u32], 1, 5)?;
        a.send(&[12u32], 1, 5)?;
        d.send(&[13u32], 1, 5)?;
    } else if me == 1 {
        let mut x = [0u32];
        let st = d.recv(&mut x, rankwire::ANY_SOURCE, rankwire::ANY_TAG)?;
        expect(
            "reused id gets its own message",
            &(x[0], st.source),
            &(13, 0),
        )?;
        a.recv(&mut x, 0, 5)?;
        expect("old communicator, first message", &x[0], &11)?;
        a.recv(&mut x, 0, 5)?;
        expect("old communicator, second message", &x[0], &12)?;
        w.recv(&mut x, 0, 5)?;
        expect("world message", &x[0], &1)?;
    }
    let mut s = [0i64];
    d.allreduce(&[me as i64 + 1], &mut s, Op::Sum)?;
    expect("allreduce on the reused id", &s[0], &10)?;
    // Ranks free at different times: x is dropped by the even ranks only.
    let x = w.dup()?;
    let x_id = id(&x);
    let x = (me % 2 == 1).then_some(x);
    let half = w
        .split(Some((me % 2) as u32), 0)?
        .expect("a color was given");
    if id(&half) == x_id {
        fail("split over the world took an id the odd ranks still hold");
    }
    // Within the even ranks x's id is free on both: their dup may take it, while the
    // odd ranks keep using x with the same tags.
    let z = half.dup()?;
    if me % 2 == 0 {
        expect("even ranks reuse the id the odd ranks hold", &id(&z), &x_id)?;
    }
    let (peer, n) = ((half.rank() + 1) % 2, 2);
    let mut got = [0u64; 2];
    for i in 0..50u64 {
        let v = me as u64 * 1000 + i;
        match &x {
            Some(x) => {
                // Odd ranks 1 and 3: ranks 1 and 3 of x.
                let other = if me == 1 { 3 } else { 1 };
                x.sendrecv(&[v], other, 7, &mut got[..1], other, 7)?;
                expect("odd ranks on x", &got[0], &(other as u64 * 1000 + i))?;
            }
            None => {
                z.sendrecv(&[v], peer, 7, &mut got[1..], peer, 7)?;
                let other = if me == 0 { 2 } else { 0 };
                expect("even ranks on z", &got[1], &(other as u64 * 1000 + i))?;
            }
        }
        let mut t = [0i64];
        z.allreduce(&[i as i64], &mut t, Op::Sum)?;
        expect("allreduce on z", &t[0], &(n * i as i64))?;
    }
    drop(x);
    drop(z);
    drop(half);
    // A nonblocking collective outliving its communicator's handle keeps the id taken
    // until it completes (its later rounds still use the context).
    let s = w.split(Some(0), 0)?.expect("a color was given");
    let s_id = id(&s);
    let n = 3000;
    let big = vals(me, n);
    let mut sum = vec![0i64; n];
    let req = s.iallreduce(&big, &mut sum, Op::Sum)?;
    drop(s);
    let t = w.dup()?;
    if id(&t) == s_id {
        fail("a communicator with a collective running gave its id away");
    }
    let mut tt = [0i64];
    t.allreduce(&[1i64], &mut tt, Op::Sum)?;
    expect("allreduce next to the running one", &tt[0], &4)?;
    req.wait()?;
    let want: Vec<i64> = (0..n).map(|i| (0..p).map(|r| val(r, i)).sum()).collect();
    expect("iallreduce on a dropped communicator", &sum, &want)?;
    drop(t);
    let u = w.dup()?;
    expect(
        "the id comes back once the collective is done",
        &id(&u),
        &s_id,
    )?;
    drop(u);
    // A message nobody receives (erroneous) keeps its id taken on the receiver only.
    let q = w.dup()?;
    let q_id = id(&q);
    if me == 0 {
        q.send(&[99u32], 1, 1)?;
    } else if me == 1 {
        // Wait until it is here, then free q without receiving it.
        q.probe(0, 1)?;
    }
    drop(q);
    let r = w.dup()?;
    if id(&r) == q_id {
        fail("an id with a message waiting on rank 1 was reused");
    }
    if r.iprobe(rankwire::ANY_SOURCE, rankwire::ANY_TAG)?.is_some() {
        fail("a new communicator sees a message of a freed one");
    }
    r.barrier()?;
    drop((a, d, r));
    let (taken, _) = w.context_stats();
    // The world, plus q's id held on rank 1.
    expect("ids taken at the end", &taken, &(1 + usize::from(me == 1)))?;
    w.barrier()
}

/// As many communicators alive as there are context ids: the next creation fails with
/// a `Usage` error on every rank, and one freed id makes creation work again.
fn exhaust(w: &Communicator) -> Result<()> {
    let mut live = Vec::new();
    loop {
        match w.dup() {
            Ok(c) => live.push(c),
            Err(Error::Usage(m)) => {
                if !m.contains("context ids exhausted") {
                    fail(&format!("unexpected usage error: {m}"));
                }
                break;
            }
            Err(e) => return Err(e),
        }
        if live.len() > 5000 {
            fail("context ids never ran out");
        }
    }
    expect("communicators alive besides the world", &live.len(), &2047)?;
    let ids: std::collections::BTreeSet<u32> = live.iter().map(|c| c.context_id().get()).collect();
    expect("distinct ids", &ids.len(), &2047)?;
    // Traffic on the last and the first still works.
    let mut s = [0i64];
    live[2046].allreduce(&[1i64], &mut s, Op::Sum)?;
    expect("allreduce on id 2047", &s[0], &(w.size() as i64))?;
    let freed = live.remove(700).context_id().get();
    let again = w.dup()?;
    expect("the freed id is reused", &again.context_id().get(), &freed)?;
    again.allreduce(&[2i64], &mut s, Op::Sum)?;
    expect("allreduce on the reused id", &s[0], &(2 * w.size() as i64))?;
    drop(live);
    drop(again);
    expect("ids taken at the end", &w.context_stats().0, &1)?;
    w.barrier()
}

/// Issue 21: what a job of many ranks on one node does first. An allreduce of the ranks,
/// a ring that passes 64 KiB (rendezvous at every derived ring size) and 8 bytes (eager)
/// to the next rank, a small alltoall (every pair talks) and a barrier, each checked.
fn scale(world: &Communicator) -> Result<()> {
    let (me, n) = (world.rank(), world.size());
    let mut sum = [0u64];
    world.allreduce(&[me as u64 + 1], &mut sum, Op::Sum)?;
    expect(
        "allreduce of rank + 1",
        &sum[0],
        &((n * (n + 1) / 2) as u64),
    )?;
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    for len in [64 << 10, 1] {
        let out: Vec<u64> = (0..len).map(|i| (me * 1_000_003 + i) as u64).collect();
        let mut got = vec![0u64; len];
        world.sendrecv(&out, next, 7, &mut got, prev, 7)?;
        let want: Vec<u64> = (0..len).map(|i| (prev * 1_000_003 + i) as u64).collect();
        if got != want {
            fail(&format!(
                "ring of {len} elements: wrong data from rank {prev}"
            ));
        }
    }
    let send: Vec<u32> = (0..n).map(|j| (me * n + j) as u32).collect();
    let mut recv = vec![0u32; n];
    world.alltoall(&send, &mut recv)?;
    let want: Vec<u32> = (0..n).map(|j| (j * n + me) as u32).collect();
    expect("alltoall", &recv, &want)?;
    world.barrier()
}
