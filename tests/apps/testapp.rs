//! rw-testapp: scenario programs for the multi-process tests (run under rwrun).
//!
//! `rw-testapp <scenario> [args]`; each scenario checks its own results and exits
//! non-zero with a message on any mismatch. Scenario ids (B001, ...) refer to
//! shared/notes/scenarios.md.

use std::time::Duration;

use rankwire::{ANY_SOURCE, ANY_TAG, Communicator, Error, MatchError, Request, Result};

#[path = "common.rs"]
mod common;
use common::{arg, fail};

fn main() {
    // `all`, or one rank's number: cross-memory attach to those ranks is refused from
    // the start (ptrace rules); init's probe must see it.
    if let Ok(who) = std::env::var("RW_TESTAPP_NONDUMPABLE_AT_INIT")
        && (who == "all" || std::env::var("RANKWIRE_RANK").is_ok_and(|r| r == who))
    {
        // SAFETY: prctl with PR_SET_DUMPABLE only changes this process's flag.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    }
    common::run_scenario(|universe, world, scenario, args| match scenario {
        "ordering" => ordering(world),
        "window" => window_any_source(world, arg(args, 2, 200)),
        "truncation" => truncation(world),
        "zero_self" => zero_self(world),
        "self_big" => self_big(world),
        "big" => big(world, arg(args, 2, (2usize << 30) + 1)),
        "cma_refused" => cma_refused(world),
        "probe" => probe(world),
        "usage" => usage(world),
        "split_status" => split_status(world),
        "waitall_window" => waitall_window(world, arg(args, 2, 20)),
        "request_set" => request_set(world, arg(args, 2, 12)),
        "detached_window" => detached_window(world, arg(args, 2, 20)),
        "cancelled_wait" => cancelled_wait(world),
        "cancel_pending" => cancel_pending(world),
        "exit_at" => exit_at(world, arg(args, 2, 2), arg(args, 3, 3)),
        "panic_at" => panic_at(world, arg(args, 2, 1)),
        "hold" => hold(world, arg(args, 2, 60)),
        "abort_at" => {
            // Rank `who` aborts the job (MPI_Abort) while the others block in a receive.
            let (who, code) = (arg(args, 2, 1usize), arg(args, 3, 7i32));
            if world.rank() == who {
                std::thread::sleep(Duration::from_millis(100));
                universe.abort(code, "abort_at on purpose");
            }
            let mut b = [0u8; 4];
            world.recv(&mut b, who % world.size(), 0).map(|_| ())
        }
        "transport" => {
            for peer in 0..world.size() {
                println!(
                    "rank {} -> {peer}: {}",
                    world.rank(),
                    universe.transport_to(peer).unwrap_or("?")
                );
            }
            Ok(())
        }
        other => fail(&format!("unknown scenario {other:?}")),
    });
}

fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if !cond {
        fail(&msg());
    }
    Ok(())
}

/// Wildcard receives posted between specific ones keep the send order (MPI 4.1 §3.5).
fn ordering(w: &Communicator) -> Result<()> {
    if w.size() < 2 {
        fail("ordering needs 2 ranks");
    }
    if w.rank() == 1 {
        // Alternate eager and rendezvous sizes; nonblocking, since the rendezvous ones
        // can only complete once rank 0 posts its receives after the barrier.
        let msgs: Vec<Vec<u32>> = (0..6u32)
            .map(|i| vec![i; if i % 2 == 0 { 2 } else { 300_000 }])
            .collect();
        let mut reqs = Vec::new();
        for (i, v) in msgs.iter().enumerate() {
            reqs.push(w.isend(v, 0, (i % 3) as i32)?);
        }
        w.barrier()?;
        rankwire::wait_all(reqs)?;
    } else if w.rank() == 0 {
        w.barrier()?; // everything is now in the unexpected queue or in rendezvous
        let mut bufs: Vec<Vec<u32>> = (0..6).map(|_| vec![u32::MAX; 300_000]).collect();
        let mut it = bufs.iter_mut();
        let reqs: Vec<Request> = vec![
            w.irecv(it.next().unwrap(), 1, 0)?,
            w.irecv(it.next().unwrap(), ANY_SOURCE, ANY_TAG)?,
            w.irecv(it.next().unwrap(), 1, ANY_TAG)?,
            w.irecv(it.next().unwrap(), ANY_SOURCE, 0)?,
            w.irecv(it.next().unwrap(), ANY_SOURCE, ANY_TAG)?,
            w.irecv(it.next().unwrap(), 1, ANY_TAG)?,
        ];
        let st = rankwire::wait_all(reqs)?;
        // Expected: r0 tag0 -> msg0; r1 any -> msg1; r2 any -> msg2; r3 tag0 -> msg3;
        // r4 -> msg4; r5 -> msg5.
        for (k, s) in st.iter().enumerate() {
            check(bufs[k][0] == k as u32, || {
                format!("receive {k} got message {} (status {s:?})", bufs[k][0])
            })?;
            check(s.tag == (k % 3) as i32 && s.source == 1, || {
                format!("receive {k} status {s:?}")
            })?;
            let len = if k % 2 == 0 { 8 } else { 1_200_000 };
            check(s.len_bytes == len, || {
                format!("receive {k} length {}", s.len_bytes)
            })?;
        }
    } else {
        w.barrier()?;
    }
    Ok(())
}

/// B003: ranks 1.. send `n` messages each, alternating 8 B and 256 KiB, tags 0..4;
/// rank 0 keeps 16 ANY_SOURCE/ANY_TAG receives posted and completes them with
/// wait_any; per sender, sequence numbers must increase in posting order.
fn window_any_source(w: &Communicator, n: usize) -> Result<()> {
    const BIG: usize = 256 * 1024;
    let me = w.rank();
    if me > 0 {
        let mut buf = vec![0u8; BIG];
        for seq in 0..n {
            let len = if seq % 2 == 0 { 8 } else { BIG };
            let tag = (seq % 5) as i32;
            buf[0] = me as u8;
            buf[1..5].copy_from_slice(&(seq as u32).to_le_bytes());
            buf[5] = tag as u8;
            buf[len - 1] = 0xA5;
            w.send(&buf[..len], 0, tag)?;
        }
        return Ok(());
    }
    let total = n * (w.size() - 1);
    let window = 16.min(total.max(1));
    let mut storage = vec![0u8; window * BIG];
    let base = storage.as_mut_ptr();
    // SAFETY: slot `s` is borrowed by at most one pending request at a time (a slot is
    // re-posted only after wait_any reported its request complete), and `storage`
    // outlives every request.
    let slot = |s: usize| unsafe { std::slice::from_raw_parts_mut(base.add(s * BIG), BIG) };
    let mut reqs: Vec<Option<Request>> = Vec::new();
    let mut slot_post: Vec<usize> = Vec::new();
    for s in 0..window {
        reqs.push(Some(w.irecv(slot(s), ANY_SOURCE, ANY_TAG)?));
        slot_post.push(s);
    }
    let mut posted = window;
    let mut done = 0usize;
    let mut last_seq = vec![-1i64; w.size()];
    let mut results: Vec<Option<(u32, u32)>> = vec![None; total];
    while done < total {
        let Some((s, st)) = rankwire::wait_any(&mut reqs) else {
            break;
        };
        let st = st?;
        let b = slot(s);
        let src = b[0] as usize;
        let seq = u32::from_le_bytes([b[1], b[2], b[3], b[4]]);
        let tag = b[5] as i32;
        check(st.source == src && st.tag == tag, || {
            format!("status {st:?} disagrees with payload (src {src}, tag {tag})")
        })?;
        let len = if seq % 2 == 0 { 8 } else { BIG };
        check(st.len_bytes == len && b[len - 1] == 0xA5, || {
            format!("status {st:?} length, expected {len}")
        })?;
        results[slot_post[s]] = Some((src as u32, seq));
        done += 1;
        if posted < total {
            reqs[s] = Some(w.irecv(slot(s), ANY_SOURCE, ANY_TAG)?);
            slot_post[s] = posted;
            posted += 1;
        }
    }
    for (i, r) in results.iter().enumerate() {
        let Some((src, seq)) = r else {
            fail(&format!("post {i} never completed"));
        };
        let s = *src as usize;
        check((*seq as i64) > last_seq[s], || {
            format!("sender {s}: seq {seq} after {} (overtaking)", last_seq[s])
        })?;
        last_seq[s] = *seq as i64;
    }
    for (s, &l) in last_seq.iter().enumerate().skip(1) {
        check(l == n as i64 - 1, || format!("sender {s}: last seq {l}"))?;
    }
    drop(storage);
    Ok(())
}

/// B001: truncation is an error naming sizes, nothing written past the slice, the
/// message consumed, the next one intact; also for rendezvous sizes and wait_any.
fn truncation(w: &Communicator) -> Result<()> {
    if w.rank() == 0 {
        let big: Vec<i32> = (0..100).collect();
        w.send(&big, 1, 7)?;
        w.send(&[1i32, 2, 3, 4], 1, 7)?;
        let huge: Vec<u8> = (0..4 << 20).map(|i: usize| (i % 251) as u8).collect();
        w.send(&huge, 1, 8)?;
        w.send(&[9u8; 16], 1, 8)?;
        // wait_any set: one truncating, two fine.
        w.send(&[5u8; 64], 1, 20)?;
        w.send(&[6u8; 8], 1, 21)?;
        w.send(&[7u8; 8], 1, 22)?;
    } else if w.rank() == 1 {
        let mut buf = vec![-1i32; 100];
        let e = w.recv(&mut buf[..10], 0, 7).unwrap_err();
        check(
            e == Error::Matching(MatchError::Truncated {
                source_rank: 0,
                tag: 7,
                message_bytes: 400,
                buffer_bytes: 40,
            }),
            || format!("wrong error {e:?}"),
        )?;
        check(buf[..10] == (0..10).collect::<Vec<_>>()[..], || {
            "prefix".into()
        })?;
        check(buf[10..].iter().all(|&x| x == -1), || {
            "wrote past the slice".into()
        })?;
        let mut four = [0i32; 4];
        let st = w.recv(&mut four, 0, 7)?;
        check(four == [1, 2, 3, 4] && st.count::<i32>() == Some(4), || {
            format!("second message {four:?}")
        })?;
        // Rendezvous: 4 MiB into a 1 MiB slice of a guarded 5 MiB buffer.
        let mut g = vec![0xEEu8; 5 << 20];
        let e = w.recv(&mut g[1 << 20..2 << 20], 0, 8).unwrap_err();
        check(
            matches!(e, Error::Matching(MatchError::Truncated { message_bytes, buffer_bytes, .. }) if message_bytes == 4 << 20 && buffer_bytes == 1 << 20),
            || format!("wrong error {e:?}"),
        )?;
        check(g[..1 << 20].iter().all(|&x| x == 0xEE), || {
            "guard before".into()
        })?;
        check(g[2 << 20..].iter().all(|&x| x == 0xEE), || {
            "guard after".into()
        })?;
        check(
            g[1 << 20..2 << 20]
                .iter()
                .enumerate()
                .all(|(i, &x)| x == (i % 251) as u8),
            || "truncated prefix content".into(),
        )?;
        let mut small = [0u8; 16];
        w.recv(&mut small, 0, 8)?;
        check(small == [9u8; 16], || {
            "message after truncated rendezvous".into()
        })?;
        let (mut a, mut b, mut c) = ([0u8; 8], [0u8; 8], [0u8; 8]);
        let mut set = vec![
            Some(w.irecv(&mut a, 0, 20)?),
            Some(w.irecv(&mut b, 0, 21)?),
            Some(w.irecv(&mut c, 0, 22)?),
        ];
        let mut outcomes = [None, None, None];
        while let Some((i, r)) = rankwire::wait_any(&mut set) {
            outcomes[i] = Some(r);
        }
        check(
            matches!(
                outcomes[0],
                Some(Err(Error::Matching(MatchError::Truncated {
                    message_bytes: 64,
                    buffer_bytes: 8,
                    ..
                })))
            ),
            || format!("wait_any truncation {:?}", outcomes[0]),
        )?;
        check(
            matches!(outcomes[1], Some(Ok(s)) if s.len_bytes == 8),
            || "b".into(),
        )?;
        check(
            matches!(outcomes[2], Some(Ok(s)) if s.len_bytes == 8),
            || "c".into(),
        )?;
        drop(set);
        check(a == [5u8; 8] && b == [6u8; 8] && c == [7u8; 8], || {
            "data".into()
        })?;
    }
    Ok(())
}

/// B002: zero-byte messages and self-sends.
/// Blocking 1 MiB sends to self (above the self transport's eager limit): with the
/// receive posted first (no warning), then twice with no receive posted while another
/// thread receives after a pause (completes; warned once).
fn self_big(w: &Communicator) -> Result<()> {
    let me = w.rank();
    let data = vec![7u8; 1 << 20];
    let mut got = vec![0u8; 1 << 20];
    let r = w.irecv(&mut got, me, 1)?;
    w.send(&data, me, 1)?;
    r.wait()?;
    eprintln!("rank {me}: posted first: done");
    std::thread::scope(|s| {
        let t = s.spawn(|| -> Result<()> {
            let mut b = vec![0u8; 1 << 20];
            for _ in 0..2 {
                std::thread::sleep(Duration::from_millis(300));
                w.recv(&mut b, me, 2)?;
            }
            Ok(())
        });
        w.send(&data, me, 2)?;
        w.send(&data, me, 2)?;
        t.join().expect("receiving thread")
    })?;
    eprintln!("rank {me}: received by another thread: done");
    Ok(())
}

fn zero_self(w: &Communicator) -> Result<()> {
    let me = w.rank();
    // Self-send of an empty slice, receive with ANY_TAG, both orders.
    let empty: [u64; 0] = [];
    let mut sink: [u64; 0] = [];
    let s = w.isend(&empty, me, 3)?;
    let st = w.recv(&mut sink, me, ANY_TAG)?;
    s.wait()?;
    check(st.source == me && st.tag == 3 && st.len_bytes == 0, || {
        format!("{st:?}")
    })?;
    let r = w.irecv(&mut sink, me, ANY_TAG)?;
    w.send(&empty, me, 4)?;
    let st = r.wait()?;
    check(st.tag == 4 && st.len_bytes == 0, || format!("{st:?}"))?;
    // Zero-byte sendrecv to self; a large self-send both orders.
    let st = w.sendrecv(&empty, me, 5, &mut sink, me, 5)?;
    check(st.len_bytes == 0, || format!("{st:?}"))?;
    let big: Vec<u32> = (0..1 << 20).collect();
    let mut got = vec![0u32; 1 << 20];
    let s = w.isend(&big, me, 6)?;
    w.recv(&mut got, me, 6)?;
    s.wait()?;
    check(got == big, || "large self-send".into())?;
    if w.size() >= 2 {
        if me == 0 {
            w.send(&empty, 1, 10)?; // before the receive is posted
            w.barrier()?;
            w.barrier()?;
            w.send(&empty, 1, 11)?; // after it was posted
            w.send(&empty, 1, 12)?; // to a non-empty ANY_SOURCE buffer
        } else if me == 1 {
            w.barrier()?;
            let st = w.recv(&mut sink, 0, 10)?;
            check(st.len_bytes == 0 && st.tag == 10, || format!("{st:?}"))?;
            let r = w.irecv(&mut sink, 0, 11)?;
            w.barrier()?;
            let st = r.wait()?;
            check(st.len_bytes == 0 && st.tag == 11, || format!("{st:?}"))?;
            let mut nonempty = [7u8; 32];
            let st = w.recv(&mut nonempty, ANY_SOURCE, ANY_TAG)?;
            check(
                st.len_bytes == 0 && st.source == 0 && st.tag == 12 && nonempty == [7u8; 32],
                || format!("{st:?}"),
            )?;
        } else {
            w.barrier()?;
            w.barrier()?;
        }
    }
    Ok(())
}

/// A message larger than 2^31 bytes (default 2 GiB + 1) from rank 0 to rank 1,
/// checked by a checksum and spot checks.
fn big(w: &Communicator, len: usize) -> Result<()> {
    let fill = |i: usize| (i.wrapping_mul(2654435761) >> 13) as u8;
    if w.rank() == 0 {
        let v: Vec<u8> = (0..len).map(fill).collect();
        let sum = checksum(&v);
        w.send(&[sum], 1, 2)?;
        w.send(&v, 1, 1)?;
    } else if w.rank() == 1 {
        let mut sum = [0u64];
        w.recv(&mut sum, 0, 2)?;
        let mut v = vec![0u8; len];
        let st = w.recv(&mut v, 0, 1)?;
        check(st.len_bytes == len, || format!("length {}", st.len_bytes))?;
        check(checksum(&v) == sum[0], || "checksum mismatch".into())?;
        for i in [0, 1, len / 2, len - 2, len - 1] {
            check(v[i] == fill(i), || format!("byte {i}"))?;
        }
        println!("big: {len} bytes, checksum {:016x} OK", sum[0]);
    }
    Ok(())
}

/// Large messages between 3 ranks that refuse cross-memory attach to each other (each
/// makes itself non-dumpable; run as a user without CAP_SYS_PTRACE): every pull and
/// every share write fails with EPERM and each message falls back to Cts + Data,
/// including one whose receiver asked its waiting sender for a share first.
fn cma_refused(w: &Communicator) -> Result<()> {
    // Every rank has finished init (and its probe of the others) before any turns
    // non-dumpable: the refusal is met by the messages themselves, at run time.
    w.barrier()?;
    // SAFETY: prctl with PR_SET_DUMPABLE only changes this process's flag.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    w.barrier()?;
    let fill = |i: usize, k: u8| (i as u8).wrapping_mul(31).wrapping_add(k);
    for (round, n) in [512usize << 10, 3 << 20, (1 << 20) + 4093]
        .into_iter()
        .enumerate()
    {
        let k = round as u8 * 3;
        match w.rank() {
            0 => {
                let m: Vec<u8> = (0..n).map(|i| fill(i, k)).collect();
                w.send(&m, 1, 1)?;
            }
            2 => {
                let m: Vec<u8> = (0..n).map(|i| fill(i, k + 1)).collect();
                let q = w.isend(&m, 1, 2)?;
                q.wait()?;
            }
            1 => {
                let mut a = vec![0u8; n];
                w.recv(&mut a, 0, 1)?;
                check(a.iter().enumerate().all(|(i, &b)| b == fill(i, k)), || {
                    format!("round {round}: bytes from rank 0")
                })?;
                std::thread::sleep(Duration::from_millis(2));
                w.recv(&mut a, 2, 2)?;
                check(
                    a.iter().enumerate().all(|(i, &b)| b == fill(i, k + 1)),
                    || format!("round {round}: bytes from rank 2"),
                )?;
            }
            _ => {}
        }
        w.barrier()?;
    }
    Ok(())
}

fn checksum(v: &[u8]) -> u64 {
    // FNV-1a over 8-byte words (position-dependent, cheap).
    let mut h = 0xcbf29ce484222325u64;
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        let x = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h ^ x).wrapping_mul(0x100000001b3);
    }
    for &b in chunks.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    h
}

/// B004: matched probe then receive in reverse order; probe then receive of the probed
/// message while a third rank sends same-tag messages of another size.
fn probe(w: &Communicator) -> Result<()> {
    let me = w.rank();
    for len in [80_000usize, 65_535, 65_536, 65_537] {
        if me == 0 {
            // Nonblocking: above the eager limit the first send completes only when
            // rank 1 receives it, which it does after probing both.
            let (one, two) = (vec![1u8; len], vec![2u8; len]);
            let a = w.isend(&one, 1, 5)?;
            let b = w.isend(&two, 1, 5)?;
            rankwire::wait_all(vec![a, b])?;
        } else if me == 1 {
            let (h1, s1) = w.mprobe(0, 5)?;
            let (h2, s2) = w.mprobe(0, 5)?;
            check(s1.len_bytes == len && s2.len_bytes == len, || {
                format!("{s1:?} {s2:?}")
            })?;
            let mut b2 = vec![0u8; len];
            let mut b1 = vec![0u8; len];
            h2.recv(&mut b2)?;
            h1.recv(&mut b1)?;
            check(
                b1.iter().all(|&x| x == 1) && b2.iter().all(|&x| x == 2),
                || format!("mixed data at len {len}"),
            )?;
        }
        w.barrier()?;
    }
    if w.size() >= 3 {
        if me == 0 {
            w.send(&vec![3u8; 1000], 1, 5)?;
        } else if me == 2 {
            for _ in 0..20 {
                w.send(&[4u8; 10], 1, 5)?;
            }
        } else if me == 1 {
            let mut got_from_0 = false;
            let mut n = 0;
            while n < 21 {
                let st = w.probe(ANY_SOURCE, 5)?;
                let mut b = vec![0u8; st.len_bytes];
                let rs = w.recv(&mut b, st.source, st.tag)?;
                check(rs == st, || format!("probed {st:?} received {rs:?}"))?;
                got_from_0 |= st.source == 0;
                n += 1;
            }
            check(got_from_0, || "missing rank 0 message".into())?;
        }
    }
    w.barrier()?;
    Ok(())
}

/// Invalid arguments are `Usage` errors, not panics.
fn usage(w: &Communicator) -> Result<()> {
    let n = w.size();
    let e = w.send(&[1u8], n, 0).unwrap_err();
    check(
        matches!(e, Error::Usage(_)) && e.to_string().contains(&n.to_string()),
        || format!("{e}"),
    )?;
    let e = w.send(&[1u8], 0, -1).unwrap_err();
    check(matches!(e, Error::Usage(_)), || format!("{e}"))?;
    let e = w.send(&[1u8], 0, w.tag_ub() + 1).unwrap_err();
    check(matches!(e, Error::Usage(_)), || format!("{e}"))?;
    let mut b = [0u8];
    let e = w.recv(&mut b, n + 5, 0).unwrap_err();
    check(matches!(e, Error::Usage(_)), || format!("{e}"))?;
    check(w.tag_ub() >= 32767, || "tag_ub below MPI's minimum".into())?;
    Ok(())
}

/// Rank `who` exits with `code` right after init while the others block receiving
/// from it (B013 a).
fn exit_at(w: &Communicator, who: usize, code: i32) -> Result<()> {
    if w.rank() == who {
        std::process::exit(code);
    }
    let mut b = [0u8; 4];
    w.recv(&mut b, who % w.size(), 0)?;
    Ok(())
}

/// Every rank joins, says so, then keeps exchanging with its neighbours for `secs`
/// seconds (a job to cancel or signal while it communicates).
fn hold(w: &Communicator, secs: u64) -> Result<()> {
    use std::io::Write;
    w.barrier()?;
    println!("rank {}: holding", w.rank());
    let _ = std::io::stdout().flush();
    let end = std::time::Instant::now() + Duration::from_secs(secs);
    let (n, r) = (w.size(), w.rank());
    while std::time::Instant::now() < end {
        let mut got = [0u64; 1];
        w.sendrecv(&[r as u64], (r + 1) % n, 0, &mut got, (r + n - 1) % n, 0)?;
        check(got[0] == ((r + n - 1) % n) as u64, || {
            format!("hold: got {}", got[0])
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    w.barrier()
}

/// Rank `who` panics while the others block in a receive (B013 b).
fn panic_at(w: &Communicator, who: usize) -> Result<()> {
    if w.rank() == who {
        std::thread::sleep(Duration::from_millis(50));
        panic!("rank {who} panics on purpose");
    }
    let mut b = [0u8; 4];
    w.recv(&mut b, who % w.size(), 0)?;
    Ok(())
}

/// Statuses of nonblocking receives on a sub-communicator name communicator ranks.
fn split_status(w: &Communicator) -> Result<()> {
    let Some(sub) = w.split(Some((w.rank() % 2) as u32), w.rank() as i32)? else {
        fail("split returned no communicator");
    };
    if w.size() < 4 {
        fail("split_status needs at least 4 ranks");
    }
    if sub.rank() == 1 {
        w.barrier()?;
        sub.send(&[7u8; 3], 0, 4)?;
    } else if sub.rank() == 0 {
        let mut b = [0u8; 3];
        let r = sub.irecv(&mut b, ANY_SOURCE, ANY_TAG)?;
        w.barrier()?;
        let st = r.wait()?;
        check(st.source == 1 && st.tag == 4, || {
            format!("irecv status {st:?} in a split communicator")
        })?;
        let mut c = [0u8; 3];
        let mut set = vec![Some(sub.irecv(&mut c, ANY_SOURCE, 5)?)];
        let s2 = sub.isend(&[1u8; 3], 0, 5)?;
        let (_, st) = rankwire::wait_any(&mut set).expect("one request");
        s2.wait()?;
        check(st?.source == 0, || {
            "wait_any status in a split communicator".into()
        })?;
    } else {
        w.barrier()?;
    }
    Ok(())
}

/// One round of the window tests (`waitall_window`, `detached_window`) for rank `me`:
/// whether receive `short` is too small this round (every other round), the `window`
/// messages to send (`[me << 32 | round, tag]`, 16 bytes each), and the receive
/// buffers (2 words each, filled with `u64::MAX`; 1 word at `short` when truncating).
fn window_round(
    me: u64,
    round: usize,
    window: usize,
    short: usize,
) -> (bool, Vec<[u64; 2]>, Vec<Vec<u64>>) {
    let truncate = round % 2 == 1;
    let out = (0..window)
        .map(|t| [me << 32 | round as u64, t as u64])
        .collect();
    let bufs = (0..window)
        .map(|t| vec![u64::MAX; if truncate && t == short { 1 } else { 2 }])
        .collect();
    (truncate, out, bufs)
}

/// `rounds` windows of 64 messages between ranks 0 and 1 of a communicator that
/// numbers them the other way round, each window completed by one `wait_all`: the
/// receives are posted in one tag order and the messages sent in the reverse one (so
/// they complete out of the order they are waited in), each rank's own sends to the
/// other are in the same list, and in every other window one receive (index 17) is
/// too small: `wait_all_results` reports its truncation at its index, in communicator
/// ranks, and every other entry has its message. Then `wait_complete` followed by each
/// request's `wait`.
fn waitall_window(w: &Communicator, rounds: usize) -> Result<()> {
    const WINDOW: usize = 64;
    const SHORT: usize = 17;
    if w.size() < 2 {
        fail("waitall_window needs 2 ranks");
    }
    let key = (w.size() - w.rank()) as i32;
    let color = (w.rank() < 2).then_some(0);
    let Some(c) = w.split(color, key)? else {
        return Ok(());
    };
    // World rank 0 is c's rank 1 and world rank 1 is c's rank 0.
    let peer = 1 - c.rank();
    let me = c.rank() as u64;
    for round in 0..rounds {
        let (truncate, out, mut bufs) = window_round(me, round, WINDOW, SHORT);
        let mut reqs = Vec::with_capacity(2 * WINDOW);
        for (t, b) in bufs.iter_mut().enumerate() {
            reqs.push(c.irecv(b, peer, t as i32)?);
        }
        for t in (0..WINDOW).rev() {
            reqs.push(c.isend(&out[t], peer, t as i32)?);
        }
        let results = rankwire::wait_all_results(reqs);
        check(results.len() == 2 * WINDOW, || {
            format!("{} results for {} requests", results.len(), 2 * WINDOW)
        })?;
        for (t, r) in results.iter().enumerate().take(WINDOW) {
            match r {
                Err(Error::Matching(MatchError::Truncated {
                    source_rank,
                    tag,
                    message_bytes,
                    buffer_bytes,
                })) if truncate && t == SHORT => {
                    check(
                        *source_rank as usize == peer
                            && *tag == t as i32
                            && *message_bytes == 16
                            && *buffer_bytes == 8,
                        || format!("round {round}: truncation reported as {r:?}"),
                    )?;
                }
                Ok(st) if !(truncate && t == SHORT) => {
                    check(
                        st.source == peer && st.tag == t as i32 && st.len_bytes == 16,
                        || format!("round {round}: receive {t} status {st:?}"),
                    )?;
                    let want = [(peer as u64) << 32 | round as u64, t as u64];
                    check(bufs[t][..] == want[..], || {
                        format!(
                            "round {round}: receive {t} got {:?}, want {want:?}",
                            bufs[t]
                        )
                    })?;
                }
                other => fail(&format!("round {round}: receive {t}: {other:?}")),
            }
        }
        for (k, r) in results.iter().enumerate().skip(WINDOW) {
            let t = 2 * WINDOW - 1 - k;
            match r {
                Ok(st) => check(st.source == peer && st.tag == t as i32, || {
                    format!("round {round}: send {t} status {st:?}")
                })?,
                Err(e) => fail(&format!("round {round}: send {t}: {e}")),
            }
        }
    }
    // wait_complete, then each wait returns at once with its own outcome.
    let mut bufs = vec![[0u64; 2]; WINDOW];
    let out: Vec<[u64; 2]> = (0..WINDOW).map(|t| [me, t as u64]).collect();
    let mut reqs = Vec::new();
    for (t, b) in bufs.iter_mut().enumerate() {
        reqs.push(c.irecv(b, ANY_SOURCE, t as i32)?);
    }
    for t in (0..WINDOW).rev() {
        reqs.push(c.isend(&out[t], peer, t as i32)?);
    }
    rankwire::wait_complete(&reqs);
    check(reqs.iter().all(|r| r.is_complete()), || {
        "wait_complete returned with a request pending".into()
    })?;
    for (t, r) in reqs.into_iter().enumerate().take(WINDOW) {
        let st = r.wait()?;
        check(st.source == peer && st.tag == t as i32, || {
            format!("after wait_complete: receive {t} status {st:?}")
        })?;
    }
    for (t, b) in bufs.iter().enumerate() {
        check(*b == [peer as u64, t as u64], || {
            format!("after wait_complete: receive {t} got {b:?}")
        })?;
    }
    Ok(())
}

/// `rankwire::RequestSet` (a request set): `rounds` windows between ranks 0 and 1, on the
/// world and on a communicator that numbers them the other way round, alternating. Per
/// window one set holds the receives of 48 tags (posted in tag order; every eighth
/// message 100 KiB, above the eager limit, so rendezvous receives and pending sends
/// are in the set too) and this rank's sends in the reverse order, plus a synchronous
/// send (with its receive), an eager send that completed at post (with its receive)
/// and a world receive added with `push` (two communicators in one set). Even windows:
/// every status (sender or destination in the window's communicator's ranks, tag,
/// bytes) and every buffer is checked, in the order added. Odd windows: receives 3 and
/// 40 are too small (40's message arrives first: the sends go in reverse order), and
/// `wait_all` returns the truncation of 3, the first added (in communicator ranks),
/// after completing the rest, whose buffers are checked (every fourth window
/// `wait_all_results`: both truncations at their places, every other status). Then: an empty set; a set
/// holding a receive withdrawn by `Request::cancel` (its wait is an error); a set
/// dropped with a receive no message matched (withdrawn: the message sent later goes to
/// a new receive); a set dropped with a rendezvous receive that matched and a
/// rendezvous send (the drop waits for both: the bytes arrived).
fn request_set(w: &Communicator, rounds: usize) -> Result<()> {
    const WINDOW: usize = 48;
    // Too small in odd windows; LATE is added later but its message arrives first.
    const SHORT: usize = 3;
    const LATE: usize = 40;
    const BIG: usize = 100 << 10;
    if w.size() < 2 {
        fail("request_set needs 2 ranks");
    }
    let key = (w.size() - w.rank()) as i32;
    let color = (w.rank() < 2).then_some(0);
    let Some(rev) = w.split(color, key)? else {
        return Ok(());
    };
    let len_of = |t: usize| if t % 8 == 5 { BIG } else { 16 + t };
    let fill = |from: usize, round: usize, t: usize| -> Vec<u8> {
        (0..len_of(t))
            .map(|i| (from * 31 + round * 7 + t * 3 + i) as u8)
            .collect()
    };
    for round in 0..rounds {
        let c = if round % 4 < 2 { w } else { &rev };
        let (me, peer) = (c.rank(), 1 - c.rank());
        let truncate = round % 2 == 1;
        let out: Vec<Vec<u8>> = (0..WINDOW).map(|t| fill(me, round, t)).collect();
        let mut bufs: Vec<Vec<u8>> = (0..WINDOW)
            .map(|t| {
                let short = truncate && (t == SHORT || t == LATE);
                vec![0u8; if short { 8 } else { len_of(t) }]
            })
            .collect();
        let sync_out = fill(me, round, 1000);
        let mut sync_in = vec![0u8; len_of(1000)];
        let eager_out = fill(me, round, 1001);
        let mut eager_in = vec![0u8; len_of(1001)];
        let mut world_in = vec![0u8; 32];
        let world_out = vec![(round + w.rank()) as u8; 32];
        let mut set = rankwire::RequestSet::with_capacity(2 * WINDOW + 5);
        // Sent first, into empty rings and sockets: it completes at post (pushed later,
        // it takes the set's path for a finished send; if a transport did not take it
        // at once, the pending one, also checked).
        let eager = c.isend(&eager_out, peer, 1001)?;
        for (t, b) in bufs.iter_mut().enumerate() {
            set.irecv(c, b, peer, t as i32)?;
        }
        for t in (0..WINDOW).rev() {
            set.isend(c, &out[t], peer, t as i32)?;
        }
        set.push(c.issend(&sync_out, peer, 1000)?)?;
        set.irecv(c, &mut sync_in, peer, 1000)?;
        set.irecv(c, &mut eager_in, peer, 1001)?;
        set.push(eager)?;
        set.push(w.irecv(&mut world_in, 1 - w.rank(), 2000)?)?;
        check(set.len() == 2 * WINDOW + 5, || {
            format!("set of {}", set.len())
        })?;
        w.send(&world_out, 1 - w.rank(), 2000)?;
        if round % 4 == 3 {
            // Each operation's result: the two truncations at their places (communicator
            // ranks), every other operation's status.
            let rs = set.wait_all_results();
            check(rs.len() == 2 * WINDOW + 5, || {
                format!("{} results", rs.len())
            })?;
            let want = |i: usize| -> (usize, i32) {
                match i {
                    i if i < WINDOW => (peer, i as i32),
                    i if i < 2 * WINDOW => (peer, (2 * WINDOW - 1 - i) as i32),
                    i if i < 2 * WINDOW + 2 => (peer, 1000),
                    i if i < 2 * WINDOW + 4 => (peer, 1001),
                    _ => (1 - w.rank(), 2000),
                }
            };
            for (i, r) in rs.iter().enumerate() {
                let (src, tag) = want(i);
                match r {
                    Err(Error::Matching(MatchError::Truncated {
                        source_rank,
                        tag: t,
                        ..
                    })) if i == SHORT || i == LATE => {
                        check(*source_rank as usize == src && *t == tag, || {
                            format!("round {round}: result {i}: {r:?}")
                        })?
                    }
                    Ok(st) if i != SHORT && i != LATE => {
                        check(st.source == src && st.tag == tag, || {
                            format!("round {round}: result {i}: {st:?}")
                        })?
                    }
                    other => fail(&format!("round {round}: result {i}: {other:?}")),
                }
            }
        } else {
            let res = set.wait_all();
            match (&res, truncate) {
                (Ok(st), false) => {
                    check(st.len() == 2 * WINDOW + 5, || {
                        format!("{} statuses", st.len())
                    })?;
                    for (t, s) in st.iter().enumerate().take(WINDOW) {
                        check(
                            s.source == peer && s.tag == t as i32 && s.len_bytes == len_of(t),
                            || format!("round {round}: receive {t} status {s:?}"),
                        )?;
                    }
                    for (k, s) in st.iter().enumerate().skip(WINDOW).take(WINDOW) {
                        let t = 2 * WINDOW - 1 - k;
                        check(
                            s.source == peer && s.tag == t as i32 && s.len_bytes == len_of(t),
                            || format!("round {round}: send {t} status {s:?}"),
                        )?;
                    }
                    let (ss, sr) = (st[2 * WINDOW], st[2 * WINDOW + 1]);
                    let (er, es, ws) = (st[2 * WINDOW + 2], st[2 * WINDOW + 3], st[2 * WINDOW + 4]);
                    for (what, x) in [("receive", er), ("pushed send completed at post", es)] {
                        check(
                            x.source == peer && x.tag == 1001 && x.len_bytes == len_of(1001),
                            || format!("round {round}: eager {what} status {x:?}"),
                        )?;
                    }
                    check(
                        ss.source == peer && ss.tag == 1000 && ss.len_bytes == len_of(1000),
                        || format!("round {round}: pushed ssend status {ss:?}"),
                    )?;
                    check(
                        sr.source == peer && sr.tag == 1000 && sr.len_bytes == len_of(1000),
                        || format!("round {round}: synchronous message's receive status {sr:?}"),
                    )?;
                    check(
                        ws.source == 1 - w.rank() && ws.tag == 2000 && ws.len_bytes == 32,
                        || format!("round {round}: pushed world receive status {ws:?}"),
                    )?;
                }
                (
                    Err(Error::Matching(MatchError::Truncated {
                        source_rank,
                        tag,
                        message_bytes,
                        buffer_bytes,
                    })),
                    true,
                ) => check(
                    *source_rank as usize == peer
                        && *tag == SHORT as i32
                        && *message_bytes == len_of(SHORT) as u64
                        && *buffer_bytes == 8,
                    || format!("round {round}: truncation reported as {res:?}"),
                )?,
                _ => fail(&format!("round {round} (truncate {truncate}): {res:?}")),
            }
        }
        for (t, b) in bufs.iter().enumerate() {
            if truncate && (t == SHORT || t == LATE) {
                continue;
            }
            check(*b == fill(peer, round, t), || {
                format!("round {round}: receive {t} has the wrong bytes")
            })?;
        }
        check(eager_in == fill(peer, round, 1001), || {
            format!("round {round}: the eager message has the wrong bytes")
        })?;
        check(sync_in == fill(peer, round, 1000), || {
            format!("round {round}: the synchronous message has the wrong bytes")
        })?;
        check(world_in == vec![(round + 1 - w.rank()) as u8; 32], || {
            format!("round {round}: pushed world receive has the wrong bytes")
        })?;
    }
    // An empty set.
    check(rankwire::RequestSet::new().wait_all()?.is_empty(), || {
        "an empty set has statuses".into()
    })?;
    // A withdrawn receive in a set: its wait is an error, the other operation's done.
    let mut a = [0u8; 4];
    let mut b = [0u8; 4];
    let mut withdrawn = w.irecv(&mut a, 1 - w.rank(), 3000)?;
    check(withdrawn.cancel(), || {
        "cancel of an unmatched receive".into()
    })?;
    let mut set = rankwire::RequestSet::new();
    set.push(withdrawn)?;
    set.irecv(w, &mut b, 1 - w.rank(), 3001)?;
    w.send(&[9u8; 4], 1 - w.rank(), 3001)?;
    let res = set.wait_all();
    check(matches!(res, Err(Error::Usage(_))), || {
        format!("wait of a set with a withdrawn receive: {res:?}")
    })?;
    check(b == [9u8; 4], || format!("the other receive got {b:?}"))?;
    // A set dropped with a receive nothing matched: withdrawn, so the message sent
    // after the barrier goes to the receive posted after it.
    let mut early = [0u8; 4];
    {
        let mut set = rankwire::RequestSet::new();
        set.irecv(w, &mut early, 1 - w.rank(), 4000)?;
    }
    w.barrier()?;
    let mut late = [0u8; 4];
    let r = w.irecv(&mut late, 1 - w.rank(), 4000)?;
    w.send(&[w.rank() as u8 + 1; 4], 1 - w.rank(), 4000)?;
    r.wait()?;
    check(
        late == [(1 - w.rank()) as u8 + 1; 4] && early == [0u8; 4],
        || format!("after a dropped set: late {late:?}, early {early:?}"),
    )?;
    // A set dropped with a rendezvous receive that matched (the barrier's progress took
    // the peer's request to send, which came first) and a rendezvous send: the drop
    // waits for both.
    let other = 1 - w.rank();
    let mut big_in = vec![0u8; BIG];
    {
        let big_out = vec![w.rank() as u8 + 5; BIG];
        let mut set = rankwire::RequestSet::new();
        set.irecv(w, &mut big_in, other, 5000)?;
        set.isend(w, &big_out, other, 5000)?;
        w.barrier()?;
    }
    check(big_in.iter().all(|&b| b == other as u8 + 5), || {
        "a matched receive of a dropped set did not get its bytes".into()
    })?;
    Ok(())
}

/// `Communicator::cancel_pending` (MPI 4.1 §3.8.4): a 1 MiB send nobody receives is
/// withdrawn by its receiver (the sender's wait returns `Cancelled`, the receiver no
/// longer sees the message); a receive another thread waits for is withdrawn from the
/// main thread; an eager send that completed at post has nothing to cancel.
fn cancel_pending(w: &Communicator) -> Result<()> {
    let me = w.rank();
    let is_cancelled =
        |r: &Result<rankwire::Status>| matches!(r, Err(Error::Matching(MatchError::Cancelled)));
    let big = vec![7u8; 1 << 20];
    if me == 0 {
        let r = w.isend(&big, 1, 50)?;
        let id = r.cancel_id();
        check(id.is_some(), || "a rendezvous send has an id".into())?;
        check(w.cancel_pending(id.unwrap()), || "cancel asked".into())?;
        let out = r.wait();
        check(is_cancelled(&out), || {
            format!("wait of a cancelled send: {out:?}")
        })?;
    }
    w.barrier()?;
    if me == 1 {
        let seen = w.iprobe(0, 50)?;
        check(seen.is_none(), || {
            format!("the cancelled send is still there: {seen:?}")
        })?;
    }
    // A receive a thread waits for, cancelled from another thread.
    let mut b = [0u8; 4];
    let r = w.irecv(&mut b, 1 - me, 51)?;
    let id = r.cancel_id().expect("a posted receive has an id");
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            w.cancel_pending(id)
        });
        r.wait()
    });
    check(is_cancelled(&out), || {
        format!("wait of a receive cancelled by a thread: {out:?}")
    })?;
    check(b == [0u8; 4], || format!("a cancelled receive wrote {b:?}"))?;
    // An eager send: completed at post, or completes; never cancelled.
    let s = w.isend(&[1u8; 4], 1 - me, 52)?;
    if let Some(id) = s.cancel_id() {
        check(!w.cancel_pending(id), || {
            "an eager send was cancelled".into()
        })?;
    }
    let mut e = [0u8; 4];
    w.recv(&mut e, 1 - me, 52)?;
    check(s.wait().is_ok() && e == [1u8; 4], || {
        format!("eager send: got {e:?}")
    })?;
    w.barrier()
}

/// Waiting for or testing a receive that `cancel` withdrew returns a usage error at
/// once, through every completion call (it used to wait forever for the freed request),
/// and the other requests of the same call complete as usual.
fn cancelled_wait(w: &Communicator) -> Result<()> {
    let me = w.rank();
    let is_finished = |r: &Result<rankwire::Status>| matches!(r, Err(Error::Usage(m)) if m.contains("finished already"));
    let mut b = [0u8; 4];
    let mut r = w.irecv(&mut b, me, 99)?;
    check(r.cancel(), || "cancel of an unmatched receive".into())?;
    check(r.is_complete(), || "a cancelled request is complete".into())?;
    let out = r.wait();
    check(is_finished(&out), || {
        format!("wait of a cancelled receive: {out:?}")
    })?;

    let mut b = [0u8; 4];
    let mut r = w.irecv(&mut b, me, 99)?;
    r.cancel();
    match r.test() {
        Ok(out) => check(is_finished(&out), || format!("test: {out:?}"))?,
        Err(_) => fail("test of a cancelled receive left it pending"),
    }

    let (mut b1, mut b2) = ([0u8; 4], [0u8; 4]);
    let mut c = w.irecv(&mut b1, me, 99)?;
    c.cancel();
    let ok = w.irecv(&mut b2, me, 7)?;
    let s = w.isend(&[5u8; 4], me, 7)?;
    let res = rankwire::wait_all_results(vec![c, ok, s]);
    check(
        is_finished(&res[0]) && res[1].is_ok() && res[2].is_ok(),
        || format!("wait_all_results with a cancelled receive: {res:?}"),
    )?;
    check(b2 == [5u8; 4], || format!("the other receive got {b2:?}"))?;

    // wait_all: the first failure, returned after every request has completed (the
    // other receive got its message, which was sent after the cancelled one's post).
    let (mut b1, mut b2, mut b3) = ([0u8; 4], [0u8; 4], [0u8; 2]);
    let ok = w.irecv(&mut b2, me, 8)?;
    let mut c = w.irecv(&mut b1, me, 99)?;
    c.cancel();
    let short = w.irecv(&mut b3, me, 9)?;
    let s = w.isend(&[6u8; 4], me, 8)?;
    let t = w.isend(&[7u8; 4], me, 9)?;
    let res = rankwire::wait_all(vec![ok, c, short, s, t]);
    check(
        matches!(&res, Err(Error::Usage(m)) if m.contains("finished already")),
        || format!("wait_all with a cancelled receive: {res:?}"),
    )?;
    check(b2 == [6u8; 4] && b3 == [7u8; 2], || {
        format!("the other receives got {b2:?} {b3:?}")
    })?;

    // The other way round: the truncation first in request order, though the
    // cancellation is known at once; and a receive from the other rank, whose message
    // rank 0 sends 200 ms late: rank 1's wait_all returns the truncation only once that
    // message is in its buffer.
    if w.size() == 2 {
        let peer = 1 - me;
        let (mut b1, mut b3, mut b4) = ([0u8; 4], [0u8; 2], [0u8; 4]);
        let short = w.irecv(&mut b3, me, 10)?;
        let mut c = w.irecv(&mut b1, me, 99)?;
        c.cancel();
        let late = w.irecv(&mut b4, peer, 11)?;
        let t = w.isend(&[8u8; 4], me, 10)?;
        if me == 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
        let s = w.isend(&[9u8; 4], peer, 11)?;
        let t0 = std::time::Instant::now();
        let res = rankwire::wait_all(vec![short, c, late, t, s]);
        check(
            matches!(
                &res,
                Err(Error::Matching(MatchError::Truncated {
                    message_bytes: 4,
                    buffer_bytes: 2,
                    ..
                }))
            ),
            || format!("wait_all with a truncation before a cancellation: {res:?}"),
        )?;
        check(b3 == [8u8; 2] && b4 == [9u8; 4], || {
            format!("the receives got {b3:?} {b4:?}")
        })?;
        if me == 1 {
            check(t0.elapsed() >= Duration::from_millis(100), || {
                format!("rank 1's wait_all returned after {:?}", t0.elapsed())
            })?;
        }
    }

    let mut b = [0u8; 4];
    let mut c = w.irecv(&mut b, me, 99)?;
    c.cancel();
    let mut set = vec![Some(c)];
    match rankwire::wait_any(&mut set) {
        Some((0, out)) => check(is_finished(&out), || format!("wait_any: {out:?}"))?,
        other => fail(&format!("wait_any of a cancelled receive: {other:?}")),
    }

    let mut b = [0u8; 4];
    let mut c = w.irecv(&mut b, me, 99)?;
    c.cancel();
    let mut v = vec![c];
    match rankwire::test_all(&mut v) {
        Some(res) => check(res.len() == 1 && is_finished(&res[0]), || {
            format!("test_all: {res:?}")
        })?,
        None => fail("test_all of a cancelled receive is never done"),
    }
    Ok(())
}

/// `rounds` windows of 64 messages each way between world ranks 0 and 1 posted with
/// `isend_detached` / `irecv_detached` (the MPI ABI's path): on the world
/// communicator every pending operation is a raw request, completed by one
/// `wait_all_raw` (statuses in world ranks; receive 17 of every other window is too
/// small and reports its truncation at its index); on a communicator that numbers the
/// two ranks the other way round, the operations are ordinary requests whose statuses
/// name the sender by its rank there.
fn detached_window(w: &Communicator, rounds: usize) -> Result<()> {
    use rankwire::{Detached, Source, Tag};
    const WINDOW: usize = 64;
    const SHORT: usize = 17;
    let key = (w.size() - w.rank()) as i32;
    let color = (w.rank() < 2).then_some(0);
    let Some(rev) = w.split(color, key)? else {
        return Ok(());
    };
    for (comm, name) in [(w, "world"), (&rev, "reversed")] {
        let peer = 1 - comm.rank();
        let me = comm.rank() as u64;
        for round in 0..rounds {
            let (truncate, out, mut bufs) = window_round(me, round, WINDOW, SHORT);
            let mut posted = Vec::with_capacity(2 * WINDOW);
            for (t, b) in bufs.iter_mut().enumerate() {
                // SAFETY: `bufs` outlives the wait below and is not touched meanwhile.
                posted.push(unsafe {
                    comm.irecv_detached(
                        b.as_mut_ptr().cast(),
                        b.len() * 8,
                        Source::Rank(peer),
                        Tag::Value(t as i32),
                    )?
                });
            }
            for t in (0..WINDOW).rev() {
                // SAFETY: `out` outlives the wait below.
                posted.push(unsafe {
                    comm.isend_detached(out[t].as_ptr().cast(), 16, peer, t as i32, false)?
                });
            }
            let mut raws = Vec::new();
            let mut at = Vec::new();
            let mut results: Vec<Option<Result<rankwire::Status>>> = Vec::new();
            let mut reqs = Vec::new();
            let mut req_at = Vec::new();
            for (i, d) in posted.into_iter().enumerate() {
                results.push(None);
                match d {
                    Detached::Raw(r) => {
                        raws.push(r);
                        at.push(i);
                    }
                    Detached::Done(st) => results[i] = Some(Ok(st)),
                    Detached::Request(r) => {
                        reqs.push(r);
                        req_at.push(i);
                    }
                }
            }
            check(name != "world" || reqs.is_empty(), || {
                "world: a detached operation built a request".into()
            })?;
            check(name != "reversed" || raws.is_empty(), || {
                "reversed: a raw request on a communicator with other ranks".into()
            })?;
            // Through their parts and back, as the MPI ABI's handles carry them.
            let raws: Vec<_> = raws
                .iter()
                .map(|r| {
                    let (id, is_recv) = r.parts();
                    rankwire::RawRequest::from_parts(id, is_recv)
                })
                .collect();
            check(raws.iter().all(|&r| comm.raw_known(r)), || {
                format!("{name} round {round}: a pending raw request is not known")
            })?;
            let mut out_raw = Vec::new();
            // SAFETY: each raw request is pending and given once.
            unsafe { comm.wait_all_raw(&raws, &mut out_raw) };
            for (i, r) in at.into_iter().zip(out_raw) {
                results[i] = Some(r);
            }
            if let Some(&done) = raws.first() {
                // Completed: no longer known, and waiting for them again (a copy of a
                // handle used after completion) errs at once instead of waiting.
                check(!comm.raw_known(done), || {
                    format!("{name} round {round}: a completed raw request is still known")
                })?;
                let mut again = Vec::new();
                // SAFETY: completed requests: nothing is written to their buffers.
                unsafe { comm.wait_all_raw(&raws, &mut again) };
                let unknown = |r: &Result<rankwire::Status>| {
                    matches!(r, Err(Error::Matching(MatchError::UnknownRequest { .. })))
                };
                check(
                    again.len() == raws.len() && again.iter().all(unknown),
                    || {
                        format!(
                            "{name} round {round}: waiting again gave {:?}",
                            again.first()
                        )
                    },
                )?;
                // SAFETY: as above.
                let r = unsafe { rankwire::Request::<'static>::from_raw(done, comm) };
                let t = r.test().map_err(|_| ()).map(|r| unknown(&r));
                check(t == Ok(true), || {
                    format!("{name} round {round}: testing a completed raw request: {t:?}")
                })?;
                // SAFETY: as above.
                let r = unsafe { rankwire::Request::<'static>::from_raw(done, comm) };
                let w = r.wait();
                check(unknown(&w), || {
                    format!("{name} round {round}: waiting for a completed raw request: {w:?}")
                })?;
            }
            for (i, r) in req_at.into_iter().zip(rankwire::wait_all_results(reqs)) {
                results[i] = Some(r);
            }
            for (t, r) in results.iter().enumerate() {
                let Some(r) = r else {
                    fail(&format!("{name} round {round}: no outcome at {t}"))
                };
                if t >= WINDOW {
                    check(r.is_ok(), || {
                        format!("{name} round {round}: send {t}: {r:?}")
                    })?;
                    continue;
                }
                match r {
                    Err(Error::Matching(MatchError::Truncated {
                        source_rank, tag, ..
                    })) if truncate && t == SHORT => {
                        check(*source_rank as usize == peer && *tag == t as i32, || {
                            format!("{name} round {round}: truncation reported as {r:?}")
                        })?;
                    }
                    Ok(st) if !(truncate && t == SHORT) => {
                        let want = [(peer as u64) << 32 | round as u64, t as u64];
                        check(
                            st.source == peer
                                && st.tag == t as i32
                                && st.len_bytes == 16
                                && bufs[t][..] == want[..],
                            || {
                                format!(
                                    "{name} round {round}: receive {t} status {st:?} data {:?}",
                                    bufs[t]
                                )
                            },
                        )?;
                    }
                    other => fail(&format!("{name} round {round}: receive {t}: {other:?}")),
                }
            }
        }
    }
    Ok(())
}
