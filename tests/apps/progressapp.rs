//! rw-progressapp: nonblocking collectives must progress while a rank waits on anything
//! else (MPI 4.1 §2.9, §6.12), for the multi-process tests (run under rwrun).
//!
//! `rw-progressapp <scenario> [args]`; success prints `rank R: <scenario> OK`, a wrong
//! value prints a message and exits 1, a hang is caught by rwrun's timeout.
//!
//! - `deadlock wait|test`: every rank starts `ibarrier`; rank 0 then completes an
//!   `irecv` from rank 2 (with `wait`, or a `test` loop) before its barrier; rank 2 sends
//!   only after its own barrier completed. Needs rank 0's waiting to advance its
//!   barrier. At least 3 ranks.
//! - `mix`: ranks pair up (0–1, 2–3, …; with an odd size the last rank only does the
//!   collectives). Each iteration starts `ibarrier`, `iallreduce` and `ibcast`; in each
//!   pair one rank (the waiter) completes point-to-point requests first, through one
//!   completion call (`wait`, `test` loop, `is_complete` loop, `wait_any`, `wait_all`,
//!   `test_all`, drop, `probe`, `iprobe` loop, `mprobe`), and the collectives after; its
//!   partner completes the collectives first, in a rotating order and way (`wait`,
//!   `test` loop, `is_complete` loop, `wait_all_coll`, drop), and only then sends and
//!   receives. The partner's collectives can complete only if the waiter's
//!   point-to-point completion advances the waiter's collectives. Roles swap every
//!   other iteration; every value is checked.

use rankwire::{CollRequest, Communicator, Op, Request, Result, test_all, wait_all, wait_any};

#[path = "common.rs"]
mod common;
use common::fail;

fn main() {
    common::run_scenario(|_universe, world, scenario, args| match scenario {
        "deadlock" => deadlock(world, args.get(2).map(String::as_str).unwrap_or("wait")),
        "mix" => mix(world),
        other => fail(&format!("unknown scenario {other:?}")),
    });
}

fn check(what: &str, got: &[i64], want: &[i64]) {
    if got != want {
        let n = got.len().min(8);
        fail(&format!(
            "{what}: got {:?}… want {:?}… ({} elements)",
            &got[..n],
            &want[..n.min(want.len())],
            want.len()
        ));
    }
}

/// Rank `r`'s data of iteration `it`, `n` elements.
fn vals(r: usize, it: usize, n: usize) -> Vec<i64> {
    (0..n)
        .map(|i| ((r * 131 + it * 17 + i * 7 + 3) % 97) as i64 - 48)
        .collect()
}

fn deadlock(w: &Communicator, how: &str) -> Result<()> {
    if w.size() < 3 {
        fail("deadlock needs at least 3 ranks");
    }
    let bar = w.ibarrier()?;
    match w.rank() {
        0 => {
            let mut buf = [0i64; 4];
            let req = w.irecv(&mut buf, 2, 7)?;
            match how {
                "wait" => {
                    req.wait()?;
                }
                "test" => {
                    let mut req = req;
                    loop {
                        match req.test() {
                            Ok(r) => {
                                r?;
                                break;
                            }
                            Err(back) => req = back,
                        }
                        std::thread::yield_now();
                    }
                }
                other => fail(&format!("unknown completion {other:?}")),
            }
            check("message from rank 2", &buf, &[2, 20, 200, 2000]);
            bar.wait()?;
        }
        2 => {
            bar.wait()?;
            w.send(&[2i64, 20, 200, 2000], 0, 7)?;
        }
        _ => bar.wait()?,
    }
    Ok(())
}

/// Point-to-point completion calls of the waiter.
const P2P: [&str; 10] = [
    "wait",
    "test",
    "is_complete",
    "wait_any",
    "wait_all",
    "test_all",
    "drop",
    "probe",
    "iprobe",
    "mprobe",
];

/// Ways the partner completes the collectives.
const COLL: [&str; 5] = ["wait", "test", "is_complete", "wait_all_coll", "drop"];

/// Elements of the large message (sent by rendezvous on every transport).
const BIG: usize = 40_000;

fn mix(w: &Communicator) -> Result<()> {
    let (me, p) = (w.rank(), w.size());
    let partner = if me % 2 == 0 { me + 1 } else { me - 1 };
    let paired = partner < p;
    let mut it = 0;
    for (hi, how) in P2P.iter().enumerate() {
        for order in 0..3 {
            it += 1;
            let count = [1, 5, 300][order];
            let root = it % p;
            let mine = vals(me, it, count);
            let mut sum = vec![0i64; count];
            let mut bc = if me == root {
                vals(root, it, count)
            } else {
                vec![0i64; count]
            };
            let colls = vec![
                w.ibarrier()?,
                w.iallreduce(&mine, &mut sum, Op::Sum)?,
                w.ibcast(&mut bc, root)?,
            ];
            let coll_way = COLL[(hi + order) % COLL.len()];
            let waiter = paired && me % 2 == it % 2;
            if waiter {
                p2p_waiter(w, partner, it, how)?;
                finish_colls(colls, order, coll_way)?;
            } else {
                finish_colls(colls, order, coll_way)?;
                if paired {
                    p2p_partner(w, partner, it)?;
                }
            }
            let want: Vec<i64> = (0..count)
                .map(|i| (0..p).map(|r| vals(r, it, count)[i]).sum())
                .collect();
            check(&format!("iteration {it} ({how}): allreduce"), &sum, &want);
            check(
                &format!("iteration {it} ({how}): bcast from {root}"),
                &bc,
                &vals(root, it, count),
            );
        }
    }
    // Everyone passes every iteration before leaving.
    w.barrier()
}

/// Complete `colls` in the order given by `order` (0: as started, 1: reversed, 2:
/// middle first), the way `how`.
fn finish_colls(colls: Vec<CollRequest<'_>>, order: usize, how: &str) -> Result<()> {
    let mut colls: Vec<Option<CollRequest<'_>>> = colls.into_iter().map(Some).collect();
    let idx: [usize; 3] = match order {
        0 => [0, 1, 2],
        1 => [2, 1, 0],
        _ => [1, 2, 0],
    };
    let ordered: Vec<CollRequest<'_>> = idx.iter().filter_map(|&i| colls[i].take()).collect();
    match how {
        "wait" => ordered.into_iter().try_for_each(CollRequest::wait),
        "test" => ordered.into_iter().try_for_each(|mut r| {
            loop {
                match r.test() {
                    Ok(res) => return res,
                    Err(back) => r = back,
                }
                std::thread::yield_now();
            }
        }),
        "is_complete" => ordered.into_iter().try_for_each(|r| {
            while !r.is_complete() {
                std::thread::yield_now();
            }
            r.wait()
        }),
        "wait_all_coll" => rankwire::wait_all_coll(ordered),
        "drop" => {
            // Dropping a pending collective request waits for it.
            for r in ordered {
                drop(r);
            }
            Ok(())
        }
        other => fail(&format!("unknown collective completion {other:?}")),
    }
}

/// The waiter's side: receive `a` (tag 1) and `b` (tag 2) from `partner`, send the
/// large `c` (tag 3) to it, all completed through `how` before the collectives.
fn p2p_waiter(w: &Communicator, partner: usize, it: usize, how: &str) -> Result<()> {
    let c = vals(w.rank(), it, BIG);
    let mut a = vec![0i64; 5];
    let mut b = vec![0i64; 7];
    match how {
        "probe" | "iprobe" | "mprobe" => {
            let sc = w.isend(&c, partner, 3)?;
            for (tag, buf) in [(1, &mut a), (2, &mut b)] {
                match how {
                    "probe" => {
                        let st = w.probe(partner, tag)?;
                        if st.len_bytes != buf.len() * 8 {
                            fail(&format!("probe: {} bytes", st.len_bytes));
                        }
                        w.recv(buf, partner, tag)?;
                    }
                    "iprobe" => {
                        while w.iprobe(partner, tag)?.is_none() {
                            std::thread::yield_now();
                        }
                        w.recv(buf, partner, tag)?;
                    }
                    _ => {
                        let (m, _) = w.mprobe(partner, tag)?;
                        m.recv(buf)?;
                    }
                }
            }
            sc.wait()?;
        }
        _ => {
            let ra = w.irecv(&mut a, partner, 1)?;
            let rb = w.irecv(&mut b, partner, 2)?;
            let sc = w.isend(&c, partner, 3)?;
            let reqs = vec![ra, rb, sc];
            complete_p2p(reqs, how)?;
        }
    }
    check("p2p a", &a, &vals(partner, it, 5));
    check("p2p b", &b, &vals(partner + 100, it, 7));
    Ok(())
}

fn complete_p2p(mut reqs: Vec<Request<'_>>, how: &str) -> Result<()> {
    match how {
        "wait" => {
            for r in reqs {
                r.wait()?;
            }
        }
        "test" => {
            for mut r in reqs {
                loop {
                    match r.test() {
                        Ok(res) => {
                            res?;
                            break;
                        }
                        Err(back) => r = back,
                    }
                    std::thread::yield_now();
                }
            }
        }
        "is_complete" => {
            // Last first: the large send completes only after the partner's collectives.
            while let Some(r) = reqs.pop() {
                while !r.is_complete() {
                    std::thread::yield_now();
                }
                r.wait()?;
            }
        }
        "wait_any" => {
            let mut slots: Vec<Option<Request<'_>>> = reqs.into_iter().map(Some).collect();
            while let Some((_, r)) = wait_any(&mut slots) {
                r?;
            }
        }
        "wait_all" => {
            wait_all(reqs)?;
        }
        "test_all" => loop {
            if let Some(rs) = test_all(&mut reqs) {
                for r in rs {
                    r?;
                }
                break;
            }
            std::thread::yield_now();
        },
        "drop" => {
            // Drop the pending large send first: the drop waits for it, which takes the
            // partner's collectives. Then wait for the receives (dropping one not matched
            // yet would withdraw it).
            drop(reqs.pop());
            for r in reqs {
                r.wait()?;
            }
        }
        other => fail(&format!("unknown completion {other:?}")),
    }
    Ok(())
}

/// The partner's side, after its collectives: send `a` and `b`, receive `c`.
fn p2p_partner(w: &Communicator, partner: usize, it: usize) -> Result<()> {
    let me = w.rank();
    w.send(&vals(me, it, 5), partner, 1)?;
    w.send(&vals(me + 100, it, 7), partner, 2)?;
    let mut c = vec![0i64; BIG];
    w.recv(&mut c, partner, 3)?;
    check("p2p c", &c, &vals(partner, it, BIG));
    Ok(())
}
