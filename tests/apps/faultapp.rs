//! rw-faultapp: fault-injection and soak programs for tests/faults.rs (run under rwrun).
//!
//! - `kill <eager|rndv|coll> <victim> <iterations>`: ranks exchange in a ring (1 KiB
//!   eager messages, 1 MiB rendezvous messages, or 256 KiB nonblocking allreduces);
//!   after `iterations` the victim starts one more operation and SIGKILLs itself inside
//!   it. Survivors print the error they got (`FAILED: ...`) and exit 1.
//! - `explain`: print this rank's path table from `Universe::explain` (`api: ` lines).
//! - `hang`: rank 0 waits for a message nobody sends, the others for one from rank 0
//!   that never comes (for the progress watchdog).
//! - `block`: every rank prints `rank R: blocked` and waits in a receive forever.
//! - `soak <messages> <max_bytes> <seed>`: every rank sends `messages / size` messages
//!   to random ranks (random sizes 0..=max_bytes, random tags 0..8) and receives with
//!   ANY_SOURCE/ANY_TAG only; afterwards every received message is checked against the
//!   sender's schedule (no loss, duplication, corruption or overtaking) and the
//!   resident set size between half-way and the end is printed.

use std::time::Instant;

use rankwire::{ANY_SOURCE, ANY_TAG, Communicator, Op, Request, Result};

#[path = "common.rs"]
mod common;
use common::{arg, fail};

fn main() {
    common::run_scenario(|universe, world, scenario, args| match scenario {
        "kill" => kill(
            world,
            args.get(2).map(String::as_str).unwrap_or("eager"),
            arg(args, 3, 1),
            arg(args, 4, 20),
        ),
        "hang" => hang(world),
        "explain" => {
            // The table from the API, for comparison with RANKWIRE_EXPLAIN's.
            let table = rankwire::explain::render(&universe.explain());
            let mut out = String::new();
            for line in table.lines() {
                out.push_str(&format!("api: {line}\n"));
            }
            print!("{out}");
            world.barrier()
        }
        "block" => {
            println!("rank {}: blocked", world.rank());
            let mut b = [0u8; 8];
            world.recv(&mut b, ANY_SOURCE, 77).map(|_| ())
        }
        "soak" => soak(
            world,
            arg(args, 2, 10_000),
            arg(args, 3, 160 * 1024),
            arg(args, 4, 1),
        ),
        other => fail(&format!("unknown scenario {other:?}")),
    });
}

fn sigkill_self() -> ! {
    // SAFETY: plain kill(2) on this process.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    unreachable!("SIGKILL cannot be caught")
}

fn kill(w: &Communicator, mode: &str, victim: usize, iterations: usize) -> Result<()> {
    let (me, n) = (w.rank(), w.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let len = match mode {
        "eager" => 1024,
        "rndv" => 1 << 20,
        "coll" => 256 * 1024,
        "coll-single-copy" => 4 << 20,
        "coll-small" => 8,
        other => fail(&format!("unknown kill mode {other:?}")),
    };
    let out = vec![me as u8; len];
    let mut inb = vec![0u8; len];
    for i in 0..1_000_000usize {
        if mode == "coll-single-copy" {
            // Blocking, 4 MiB: the single-copy allreduce (coll/single_copy.rs); the
            // victim dies from another thread while it copies to and from the others.
            let src = vec![1.0f64; len / 8];
            let mut dst = vec![0.0f64; len / 8];
            if me == victim && i == iterations {
                std::thread::spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    sigkill_self();
                });
            }
            w.allreduce(&src, &mut dst, Op::Sum)?;
            if dst[len / 8 - 1] != n as f64 {
                fail(&format!(
                    "allreduce gave {} instead of {n}",
                    dst[len / 8 - 1]
                ));
            }
            continue;
        }
        if mode == "coll-small" {
            // Blocking, 8 B: the direct path (coll/direct.rs; the exchange allreduce
            // where the test forces it); the victim dies between two calls, so the
            // others wait for its vector.
            let mut dst = [0.0f64];
            if me == victim && i == iterations {
                sigkill_self();
            }
            w.allreduce(&[1.0f64], &mut dst, Op::Sum)?;
            if dst[0] != n as f64 {
                fail(&format!("allreduce gave {} instead of {n}", dst[0]));
            }
            continue;
        }
        if mode == "coll" {
            let src = vec![1.0f64; len / 8];
            let mut dst = vec![0.0f64; len / 8];
            let req = w.iallreduce(&src, &mut dst, Op::Sum)?;
            if me == victim && i == iterations {
                sigkill_self();
            }
            req.wait()?;
            if dst[0] != n as f64 {
                fail(&format!("allreduce gave {} instead of {n}", dst[0]));
            }
            continue;
        }
        let s = w.isend(&out, next, 1)?;
        if me == victim && i == iterations {
            sigkill_self();
        }
        let st = w.recv(&mut inb, prev, 1)?;
        s.wait()?;
        if st.len_bytes != len || inb[len - 1] != prev as u8 {
            fail(&format!("iteration {i}: wrong message {st:?}"));
        }
    }
    Ok(())
}

fn hang(w: &Communicator) -> Result<()> {
    let mut b = vec![0u8; 64 * 1024];
    if w.rank() == 0 {
        w.recv(&mut b, 1 % w.size(), 5)?;
    } else {
        w.irecv(&mut b, 0, 9)?.wait()?;
    }
    Ok(())
}

/// Deterministic schedule of sender `s`'s message `k`: (destination, tag, bytes, seed).
fn message(seed: u64, s: usize, k: usize, n: usize, max: usize) -> (usize, i32, usize, u64) {
    let mut x = splitmix(seed ^ ((s as u64) << 40) ^ k as u64);
    let mut next = || {
        x = splitmix(x);
        x
    };
    let dest = (next() % n as u64) as usize;
    let tag = (next() % 8) as i32;
    let class = next() % 100;
    let r = next() as usize;
    let len = match class {
        0..=84 => r % 4097,
        85..=94 => 4096 + r % (64 * 1024 - 4096 + 1),
        _ => r % (max + 1),
    }
    .min(max);
    (dest, tag, len, next())
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fill(buf: &mut [u8], mut x: u64) {
    for c in buf.chunks_mut(8) {
        x = splitmix(x);
        c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// What a wildcard receive got: (post index, source, tag, bytes, content hash).
type Got = (usize, usize, i32, usize, u64);

fn soak(w: &Communicator, messages: usize, max: usize, seed: u64) -> Result<()> {
    const WINDOW: usize = 8;
    let (me, n) = (w.rank(), w.size());
    let per = messages / n;
    // What each source sends to me, in order.
    let expect: Vec<Vec<(i32, usize, u64)>> = (0..n)
        .map(|s| {
            (0..per)
                .map(|k| message(seed, s, k, n, max))
                .filter(|m| m.0 == me)
                .map(|(_, tag, len, x)| {
                    let mut b = vec![0u8; len];
                    fill(&mut b, x);
                    (tag, len, fnv(&b))
                })
                .collect()
        })
        .collect();
    let to_receive: usize = expect.iter().map(Vec::len).sum();
    let mut storage = vec![0u8; 2 * WINDOW * max.max(1)];
    let base = storage.as_mut_ptr();
    let slot_len = max.max(1);
    // SAFETY: slot `s` is borrowed by at most one pending request at a time (re-posted
    // only after wait_any reported its request complete); `storage` outlives them all.
    let slot =
        |s: usize| unsafe { std::slice::from_raw_parts_mut(base.add(s * slot_len), slot_len) };
    let mut reqs: Vec<Option<Request>> = (0..2 * WINDOW).map(|_| None).collect();
    let mut post_of = [0usize; 2 * WINDOW];
    // Allocated and touched up front, so the resident set measures the runtime, not
    // this bookkeeping.
    let mut got: Vec<Got> = vec![(usize::MAX, 0, 0, 0, 0); to_receive];
    let (mut sent, mut posted, mut received) = (0usize, 0usize, 0usize);
    // Slots 0..WINDOW send, WINDOW..2*WINDOW receive.
    for s in 0..WINDOW {
        if sent < per {
            let (dest, tag, len, x) = message(seed, me, sent, n, max);
            let b = &mut slot(s)[..len];
            fill(b, x);
            reqs[s] = Some(w.isend(b, dest, tag)?);
            sent += 1;
        }
        if posted < to_receive {
            reqs[WINDOW + s] = Some(w.irecv(slot(WINDOW + s), ANY_SOURCE, ANY_TAG)?);
            post_of[WINDOW + s] = posted;
            posted += 1;
        }
    }
    let total = per + to_receive;
    let (mut done, mut rss_half) = (0usize, None);
    let start = Instant::now();
    while let Some((s, st)) = rankwire::wait_any(&mut reqs) {
        let st = st?;
        done += 1;
        if s < WINDOW {
            if sent < per {
                let (dest, tag, len, x) = message(seed, me, sent, n, max);
                let b = &mut slot(s)[..len];
                fill(b, x);
                reqs[s] = Some(w.isend(b, dest, tag)?);
                sent += 1;
            }
        } else {
            let b = &slot(s)[..st.len_bytes];
            got[received] = (post_of[s], st.source, st.tag, st.len_bytes, fnv(b));
            received += 1;
            if posted < to_receive {
                reqs[s] = Some(w.irecv(slot(s), ANY_SOURCE, ANY_TAG)?);
                post_of[s] = posted;
                posted += 1;
            }
        }
        if rss_half.is_none() && done * 2 >= total {
            rss_half = Some(common::rss_kib());
        }
    }
    let rss_end = common::rss_kib();
    drop(storage);
    if sent != per || received != to_receive {
        fail(&format!(
            "rank {me}: sent {sent} of {per}, received {received} of {to_receive}"
        ));
    }
    // Matching order is posting order: per source, the j-th receive posted that got a
    // message from it must hold that source's j-th message to me.
    got.sort_unstable_by_key(|g| g.0);
    let mut next = vec![0usize; n];
    for &(post, src, tag, len, hash) in &got {
        let j = next[src];
        let Some(&want) = expect[src].get(j) else {
            fail(&format!(
                "rank {me}: post {post}: extra message from {src} (duplicate?)"
            ));
        };
        if (tag, len, hash) != want {
            fail(&format!(
                "rank {me}: post {post}: message {j} from rank {src}: got tag {tag}, {len} bytes, \
                 hash {hash:016x}; expected tag {}, {} bytes, hash {:016x}",
                want.0, want.1, want.2
            ));
        }
        next[src] += 1;
    }
    let half = rss_half.unwrap_or(rss_end);
    println!(
        "soak: rank {me}: sent {sent}, received {received} in {:.2} s; rss half-way {half} KiB, end {rss_end} KiB",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
