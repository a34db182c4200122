//! The RDMA transport on its own: two transports in one process (two threads, one
//! device, connected to each other through an in-memory bootstrap).
//!
//! Needs an RDMA device (the Soft-RoCE VM runs it with `RANKWIRE_TEST_REQUIRE_RDMA=1`,
//! which turns a missing device into a failure). Without one, each test checks that
//! the probe reports "no RDMA here" cleanly and stops.

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use rankwire_transports::rdma::FRAME_PAYLOAD_BYTES;
use rankwire_transports::{
    Event, Exchange, RdmaConfig, RdmaDevice, RdmaTransport, SendOutcome, Transport,
};

// Job-wide key-value store shared by the threads; fence is a barrier.
#[derive(Clone)]
struct MemExchange {
    kv: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    barrier: Arc<Barrier>,
}

impl Exchange for MemExchange {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        self.kv.lock().unwrap().insert(key.into(), value.to_vec());
        Ok(())
    }
    fn get(&mut self, _owner: u32, key: &str) -> Result<Vec<u8>, String> {
        let t0 = Instant::now();
        loop {
            if let Some(v) = self.kv.lock().unwrap().get(key) {
                return Ok(v.clone());
            }
            if t0.elapsed() > Duration::from_secs(30) {
                return Err(format!("{key} never put"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn fence(&mut self) -> Result<(), String> {
        self.barrier.wait();
        Ok(())
    }
}

fn required() -> bool {
    std::env::var("RANKWIRE_TEST_REQUIRE_RDMA").is_ok_and(|v| v == "1")
}

/// Two connected transports (rank 0 and rank 1), or `None` (test skipped) without RDMA.
fn pair(cfg: RdmaConfig) -> Option<(RdmaTransport, RdmaTransport)> {
    pair_made(cfg, false)
}

/// Two transports of ranks 0 and 1, queue pairs at init or (`on_demand`) none made yet;
/// `None` (test skipped) without RDMA.
fn pair_made(cfg: RdmaConfig, on_demand: bool) -> Option<(RdmaTransport, RdmaTransport)> {
    match RdmaDevice::probe(&cfg).expect("settings") {
        Ok(_) => {}
        Err(why) => {
            assert!(!required(), "RANKWIRE_TEST_REQUIRE_RDMA=1 but: {why}");
            eprintln!("skipped: no RDMA here ({why})");
            return None;
        }
    }
    let ex = MemExchange {
        kv: Default::default(),
        barrier: Arc::new(Barrier::new(2)),
    };
    let mk = |rank: u32, mut ex: MemExchange, cfg: RdmaConfig| {
        std::thread::spawn(move || {
            let dev = RdmaDevice::probe(&cfg).unwrap().unwrap();
            let peers = [1 - rank];
            let t = if on_demand {
                RdmaTransport::new_on_demand(rank, Some(dev), &cfg, &mut ex, &peers)
            } else {
                RdmaTransport::new(rank, Some(dev), &cfg, &mut ex, &peers)
            };
            t.unwrap().unwrap()
        })
    };
    let a = mk(0, ex.clone(), cfg.clone());
    let b = mk(1, ex, cfg);
    Some((a.join().unwrap(), b.join().unwrap()))
}

fn cfg() -> RdmaConfig {
    RdmaConfig::from_env().unwrap()
}

/// Poll both until `done` or a 60 s deadline; returns the events of `b`.
fn drive(
    a: &mut RdmaTransport,
    b: &mut RdmaTransport,
    mut done: impl FnMut(&[Event], &[Event]) -> bool,
) -> (Vec<Event>, Vec<Event>) {
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    let t0 = Instant::now();
    while !done(&ea, &eb) {
        a.poll(&mut ea);
        b.poll(&mut eb);
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "timed out; a: {ea:?} b: {eb:?}"
        );
    }
    (ea, eb)
}

#[test]
fn eager_frames_of_every_slot_size_arrive_in_order_with_credits() {
    let mut c = cfg();
    c.slots = 4;
    let Some((mut a, mut b)) = pair(c) else {
        return;
    };
    // 200 frames with 4 slots: the sender must see Busy and recover through credits.
    let sizes = [0usize, 1, 100, 4096, 8192, FRAME_PAYLOAD_BYTES];
    let total = 200;
    let mut sent = 0;
    let mut busy = 0;
    let mut got = Vec::new();
    let t0 = Instant::now();
    let mut ea = Vec::new();
    let mut round = 0u64;
    while got.len() < total {
        round += 1;
        if sent < total {
            let len = sizes[sent % sizes.len()];
            let payload = vec![(sent % 251) as u8; len];
            let header = (sent as u32).to_le_bytes();
            match a.send(1, &header, &payload).unwrap() {
                SendOutcome::Sent => sent += 1,
                SendOutcome::Busy => busy += 1,
            }
        }
        a.poll(&mut ea);
        // The receiver polls only every few rounds, so the sender runs out of credits.
        if round.is_multiple_of(8) {
            let mut eb = Vec::new();
            b.poll(&mut eb);
            for e in eb {
                match e {
                    Event::Recv {
                        peer,
                        header,
                        payload,
                    } => {
                        assert_eq!(peer, 0);
                        let i = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
                        assert_eq!(i, got.len(), "out of order");
                        assert_eq!(payload.len(), sizes[i % sizes.len()]);
                        assert!(payload.iter().all(|&x| x == (i % 251) as u8));
                        got.push(i);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "stuck at {} of {total}",
            got.len()
        );
    }
    assert!(ea.is_empty(), "{ea:?}");
    assert!(busy > 0, "the sender never saw back-pressure");
    let s = a.stats();
    assert_eq!(s.sends, total as u64);
    assert!(
        s.credit_stalls > 0,
        "4 slots and 200 frames never ran out of credits"
    );
    assert!(b.stats().credit_writes > 0);
    // Oversized frames are refused, not truncated.
    assert!(
        a.send(1, &[0; 8], &vec![0; FRAME_PAYLOAD_BYTES + 1])
            .is_err()
    );
}

#[test]
fn rdma_read_and_write_move_exact_bytes() {
    let Some((mut a, mut b)) = pair(cfg()) else {
        return;
    };
    for (k, len) in [1usize, 4096, 65_537, (1 << 20) + 3, (3 << 20) + 5]
        .into_iter()
        .enumerate()
    {
        // b exposes `remote`; a reads it into `local`, then writes `src` over it.
        let mut remote: Vec<u8> = (0..len).map(|i| (i * 7 + k) as u8).collect();
        let held = b
            .registry()
            .acquire_host(remote.as_ptr() as u64, len as u64)
            .unwrap();
        let mut local = vec![0u8; len];
        // SAFETY: `local` outlives the operation (we drive until OpDone).
        unsafe {
            a.get(
                1,
                10 + k as u64,
                local.as_mut_ptr(),
                len,
                remote.as_ptr() as u64,
                held.rkey,
            )
            .unwrap()
        };
        let (ea, _) = drive(&mut a, &mut b, |ea, _| !ea.is_empty());
        match &ea[0] {
            Event::OpDone {
                peer: 1,
                op,
                result,
            } => {
                assert_eq!(*op, 10 + k as u64);
                assert!(result.is_ok(), "{result:?}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(local == remote, "RDMA READ of {len} bytes differs");
        let src: Vec<u8> = (0..len).map(|i| (i * 3 + 1 + k) as u8).collect();
        // SAFETY: as above.
        unsafe {
            a.put(
                1,
                20 + k as u64,
                src.as_ptr(),
                len,
                remote.as_mut_ptr() as u64,
                held.rkey,
            )
            .unwrap()
        };
        let (ea, _) = drive(&mut a, &mut b, |ea, _| !ea.is_empty());
        assert!(
            matches!(&ea[0], Event::OpDone { result: Ok(()), .. }),
            "{ea:?}"
        );
        // The write is complete at the initiator; RC ordering makes it visible.
        assert!(remote == src, "RDMA WRITE of {len} bytes differs");
        b.registry().release(held);
    }
    assert!(
        a.stats().reads >= 5 && a.stats().writes >= 5,
        "{:?}",
        a.stats()
    );
}

#[test]
fn a_bad_rkey_fails_the_operation_and_the_peer_with_a_named_error() {
    let Some((mut a, mut b)) = pair(cfg()) else {
        return;
    };
    let mut local = vec![0u8; 4096];
    // SAFETY: `local` outlives the operation.
    unsafe {
        a.get(1, 99, local.as_mut_ptr(), 4096, 0x1000, 0xdead_beef)
            .unwrap()
    };
    let (ea, _) = drive(&mut a, &mut b, |ea, _| {
        ea.iter().any(|e| matches!(e, Event::OpDone { .. }))
    });
    let done = ea
        .iter()
        .find_map(|e| match e {
            Event::OpDone { op: 99, result, .. } => Some(result.clone()),
            _ => None,
        })
        .unwrap();
    let err = done.unwrap_err().to_string();
    assert!(err.contains("rdma") && err.contains("device"), "{err}");
}

#[test]
fn registration_cache_counts_hits_and_misses_with_leave_pinned() {
    let mut c = cfg();
    c.leave_pinned = true;
    let Some((a, _b)) = pair(c) else { return };
    let buf = vec![1u8; 100_000];
    let r = a.registry();
    let h1 = r.acquire_host(buf.as_ptr() as u64, 100_000).unwrap();
    let h2 = r.acquire_host(buf.as_ptr() as u64 + 8192, 4096).unwrap();
    assert_eq!(h1.rkey, h2.rkey, "a sub-range must reuse the registration");
    r.release(h1);
    r.release(h2);
    let s = r.stats();
    assert_eq!((s.hits, s.misses, s.entries), (1, 1, 1));
    // Without leave-pinned, each operation registers anew (no stale keys possible).
    drop(a);
}

#[test]
fn gid_index_settings_are_checked() {
    let mut c = cfg();
    match RdmaDevice::probe(&c).unwrap() {
        Ok(_) => {}
        Err(why) => {
            assert!(!required(), "RANKWIRE_TEST_REQUIRE_RDMA=1 but: {why}");
            eprintln!("skipped: no RDMA here ({why})");
            return;
        }
    }
    c.gid_index = Some(100_000);
    let e = RdmaDevice::probe(&c).unwrap_err();
    assert!(
        e.contains("RANKWIRE_IB_GID_INDEX=100000") && e.contains("out of range"),
        "{e}"
    );
    c.gid_index = Some(9);
    let e = RdmaDevice::probe(&c).unwrap_err();
    assert!(
        e.contains("RANKWIRE_IB_GID_INDEX=9") && e.contains("empty"),
        "{e}"
    );
    c.gid_index = None;
    c.hca = Some("nosuchdev0".into());
    let e = RdmaDevice::probe(&c).unwrap_err();
    assert!(
        e.contains("RANKWIRE_IB_HCA") && e.contains("no such device"),
        "{e}"
    );
    c.hca = None;
    let d = RdmaDevice::probe(&c).unwrap().unwrap();
    println!("default choice: {}", d.why());
}

/// Two transports set up for queue pairs on demand (no QP made yet), or `None`.
fn pair_on_demand(cfg: RdmaConfig) -> Option<(RdmaTransport, RdmaTransport)> {
    let (a, b) = pair_made(cfg, true)?;
    // Nothing was published: the bootstrap carries no connection data on demand, and no
    // queue pair (nor its pool) exists before the first frame.
    assert!(a.is_flushed() && b.is_flushed());
    assert_eq!((a.stats().queue_pairs, b.stats().queue_pairs), (0, 0));
    Some((a, b))
}

/// Carry wireup messages both ways (what the core does over TCP); how many moved.
fn ferry(a: &mut RdmaTransport, b: &mut RdmaTransport) -> usize {
    let mut n = 0;
    while let Some((to, m)) = a.take_wireup() {
        assert_eq!(to, 1);
        b.on_wireup(0, &m).unwrap();
        n += 1;
    }
    while let Some((to, m)) = b.take_wireup() {
        assert_eq!(to, 0);
        a.on_wireup(1, &m).unwrap();
        n += 1;
    }
    n
}

/// Send `frames` numbered frames from `from` to `to` (queued while the queue pair is set
/// up) and collect what `to` receives, ferrying wireup messages in between.
fn exchange_on_demand(a: &mut RdmaTransport, b: &mut RdmaTransport, both: bool) {
    let frames = 50usize;
    let (mut sent_a, mut sent_b) = (0usize, 0usize);
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    let (mut busy_a, mut wireups) = (0, 0);
    // The first frame is taken at once, before the queue pair is ready: queued, not
    // posted (no SEND yet), so the transport is not flushed until it goes out.
    assert_eq!(
        a.send(1, &0u32.to_le_bytes(), &[7; 100]).unwrap(),
        SendOutcome::Sent
    );
    sent_a += 1;
    assert_eq!(a.stats().sends, 0, "posted before the queue pair was ready");
    assert!(!a.is_flushed(), "a queued frame counts as unflushed");
    let t0 = Instant::now();
    let want_b = if both { frames } else { 0 };
    while got_b.len() < frames || got_a.len() < want_b {
        if sent_a < frames {
            match a
                .send(1, &(sent_a as u32).to_le_bytes(), &[7; 100])
                .unwrap()
            {
                SendOutcome::Sent => sent_a += 1,
                SendOutcome::Busy => busy_a += 1,
            }
        }
        if both
            && sent_b < frames
            && b.send(0, &(sent_b as u32).to_le_bytes(), &[9; 10]).unwrap() == SendOutcome::Sent
        {
            sent_b += 1;
        }
        wireups += ferry(a, b);
        for (t, got, from) in [(&mut *a, &mut got_a, 1u32), (&mut *b, &mut got_b, 0u32)] {
            let mut ev = Vec::new();
            t.poll(&mut ev);
            for e in ev {
                match e {
                    Event::Recv { peer, header, .. } => {
                        assert_eq!(peer, from);
                        let i = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
                        assert_eq!(i, got.len(), "out of order");
                        got.push(i);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "stuck: a sent {sent_a}, b got {}; b sent {sent_b}, a got {}",
            got_b.len(),
            got_a.len()
        );
    }
    // 50 small frames fit the queue kept while connecting: none was refused.
    assert_eq!(
        busy_a, 0,
        "a frame was refused while the queue pair was made"
    );
    assert_eq!(a.stats().sends, frames as u64);
    assert_eq!((a.stats().queue_pairs, b.stats().queue_pairs), (1, 1));
    // Request, Reply, Ack (and, when both start, the same three the other way).
    assert_eq!(wireups, if both { 6 } else { 3 }, "wireup messages");
}

#[test]
fn queue_pairs_on_demand_connect_at_the_first_frame() {
    let Some((mut a, mut b)) = pair_on_demand(cfg()) else {
        return;
    };
    exchange_on_demand(&mut a, &mut b, false);
    // The connection now works the other way without a new handshake.
    assert_eq!(b.send(0, &[1, 2, 3, 4], &[]).unwrap(), SendOutcome::Sent);
    assert!(b.take_wireup().is_none());
    let (ea, _) = drive(&mut a, &mut b, |ea, _| !ea.is_empty());
    assert!(matches!(&ea[0], Event::Recv { peer: 1, .. }), "{ea:?}");
}

#[test]
fn queue_pairs_on_demand_when_both_ranks_start_at_once() {
    let Some((mut a, mut b)) = pair_on_demand(cfg()) else {
        return;
    };
    exchange_on_demand(&mut a, &mut b, true);
}

/// Carry `from`'s wireup messages to `to` (ranks 0 and 1), collecting `to`'s errors.
fn carry(from: &mut RdmaTransport, to: &mut RdmaTransport, from_rank: u32) -> Vec<String> {
    let mut errors = Vec::new();
    while let Some((_, m)) = from.take_wireup() {
        if let Err(e) = to.on_wireup(from_rank, &m) {
            errors.push(e.to_string());
        }
    }
    errors
}

#[test]
fn wireup_messages_out_of_order_or_foreign_fail_the_pair_on_both_sides() {
    // Each bad message: refused, the pair failed where it arrived, and a Fail sent back,
    // which fails the pair at the other side with the first side's reason.
    type Bad = fn(&mut RdmaTransport, &mut RdmaTransport) -> Result<(), String>;
    let cases: [(&str, Bad); 3] = [
        ("no wireup message", |a, _| {
            a.on_wireup(1, b"RW\x02\x00").map_err(|e| e.to_string())
        }),
        ("an Ack before any Request", |a, _| {
            a.on_wireup(1, b"RQ\x03").map_err(|e| e.to_string())
        }),
        ("its own Reply taken as an answer", |a, b| {
            // b asks, a answers, and the answer goes back to a.
            assert_eq!(b.send(0, &[0; 4], &[]).unwrap(), SendOutcome::Sent);
            let (_, req) = b.take_wireup().unwrap();
            a.on_wireup(1, &req).unwrap();
            let (_, reply) = a.take_wireup().unwrap();
            a.on_wireup(1, &reply).map_err(|e| e.to_string())
        }),
    ];
    for (what, bad) in cases {
        let Some((mut a, mut b)) = pair_on_demand(cfg()) else {
            return;
        };
        let e = bad(&mut a, &mut b).expect_err(what);
        println!("{what}: {e}");
        let errors = carry(&mut a, &mut b, 0);
        assert_eq!(errors.len(), 1, "{what}: b heard {errors:?}");
        // A refused handshake message is not a verbs failure: no set-up mark (whose
        // fix is about locked memory and GIDs).
        assert!(
            errors[0].contains("rank 0 refused the queue pair set-up")
                && !errors[0].contains(rankwire_transports::rdma::SETUP_FAILED),
            "{what}: {}",
            errors[0]
        );
        // Later calls on the failed pair return the first failure, not a generic one.
        let again = a.send(1, &[0; 4], &[]).unwrap_err().to_string();
        assert_eq!(again, e, "{what}");
        // Both ends now refuse frames at once instead of waiting for a handshake.
        assert!(a.send(1, &[0; 4], &[]).is_err(), "{what}: a still sends");
        assert!(b.send(0, &[0; 4], &[]).is_err(), "{what}: b still sends");
        assert!(a.is_flushed() && b.is_flushed(), "{what}: something waits");
        // A late wireup message to a failed pair is refused, and answered with a Fail.
        assert!(b.on_wireup(0, b"RQ\x03").is_err());
        let back = carry(&mut b, &mut a, 1);
        assert_eq!(back.len(), 1, "{what}: {back:?}");
    }
}

/// Frames sent before the queue pair is ready are kept (the send completes at once) up
/// to the bound, then refused with Busy; they arrive in order once it is ready, ahead of
/// later frames; a Fail from the peer drops them and fails the pair.
#[test]
fn frames_wait_in_order_for_the_queue_pair_and_a_fail_drops_them() {
    use rankwire_transports::rdma::QUEUED_BYTES_WHILE_CONNECTING;
    let Some((mut a, mut b)) = pair_on_demand(cfg()) else {
        return;
    };
    let payload = vec![3u8; FRAME_PAYLOAD_BYTES];
    let mut queued = 0u32;
    while a.send(1, &queued.to_le_bytes(), &payload).unwrap() == SendOutcome::Sent {
        queued += 1;
        assert!(queued < 10_000, "never refused");
    }
    let per = 8 + 4 + FRAME_PAYLOAD_BYTES;
    assert_eq!(queued as usize, QUEUED_BYTES_WHILE_CONNECTING / per);
    assert_eq!(a.stats().sends, 0);
    // The handshake, then the queue drains in order (credits permitting) before a
    // frame sent after it.
    let mut got = Vec::new();
    let mut late_sent = false;
    let t0 = Instant::now();
    while got.len() < queued as usize + 1 {
        carry(&mut a, &mut b, 0);
        carry(&mut b, &mut a, 1);
        if !late_sent && a.send(1, &queued.to_le_bytes(), &[]).unwrap() == SendOutcome::Sent {
            late_sent = true;
        }
        let mut ev = Vec::new();
        a.poll(&mut ev);
        assert!(ev.is_empty(), "{ev:?}");
        b.poll(&mut ev);
        for e in ev {
            let Event::Recv {
                peer: 0, header, ..
            } = e
            else {
                panic!("unexpected {e:?}");
            };
            got.push(u32::from_le_bytes(header[..4].try_into().unwrap()));
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "stuck at {}",
            got.len()
        );
    }
    assert_eq!(got, (0..=queued).collect::<Vec<_>>(), "order");
    // Every SEND completes: nothing of the queue is left.
    let t0 = Instant::now();
    while !a.is_flushed() {
        let mut ev = Vec::new();
        a.poll(&mut ev);
        b.poll(&mut ev);
        assert!(ev.is_empty(), "{ev:?}");
        assert!(t0.elapsed() < Duration::from_secs(60), "a never flushed");
    }

    // A second pair: frames queued, then the peer cannot connect and says so.
    let Some((mut a, mut b)) = pair_on_demand(cfg()) else {
        return;
    };
    for i in 0..3u32 {
        assert_eq!(
            a.send(1, &i.to_le_bytes(), &[1]).unwrap(),
            SendOutcome::Sent
        );
    }
    assert!(!a.is_flushed());
    // b refuses a message (as when its verbs calls fail) and answers Fail.
    let _ = a.take_wireup().unwrap();
    assert!(b.on_wireup(0, b"RQ\x03").is_err());
    let errors = carry(&mut b, &mut a, 1);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let mut ev = Vec::new();
    a.poll(&mut ev);
    assert!(
        a.is_flushed(),
        "the queued frames of a failed pair still wait"
    );
    assert!(a.send(1, &[0; 4], &[]).is_err());
}

/// Six ranks in one process, queue pairs on demand, every rank sending to every other:
/// each rank ends with 5 queue pairs, more than its completion queue had room for at
/// first (4), so the queue grows while frames are in flight; every frame arrives once.
#[test]
fn six_ranks_on_demand_every_pair_talks_and_the_completion_queue_grows() {
    let cfg = cfg();
    match RdmaDevice::probe(&cfg).expect("settings") {
        Ok(_) => {}
        Err(why) => {
            assert!(!required(), "RANKWIRE_TEST_REQUIRE_RDMA=1 but: {why}");
            eprintln!("skipped: no RDMA here ({why})");
            return;
        }
    }
    let n = 6u32;
    let ex = MemExchange {
        kv: Default::default(),
        barrier: Arc::new(Barrier::new(n as usize)),
    };
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            let (mut ex, cfg) = (ex.clone(), cfg.clone());
            std::thread::spawn(move || {
                let dev = RdmaDevice::probe(&cfg).unwrap().unwrap();
                let peers: Vec<u32> = (0..n).filter(|&p| p != rank).collect();
                RdmaTransport::new_on_demand(rank, Some(dev), &cfg, &mut ex, &peers)
                    .unwrap()
                    .unwrap()
            })
        })
        .collect();
    let mut ts: Vec<RdmaTransport> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // to_send[r]: the peers r still has to send its frame to.
    let mut to_send: Vec<Vec<u32>> = (0..n)
        .map(|r| (0..n).filter(|&p| p != r).collect())
        .collect();
    let mut got: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
    let t0 = Instant::now();
    while got.iter().any(|g| g.len() < (n - 1) as usize) {
        for r in 0..n as usize {
            to_send[r].retain(|&p| {
                ts[r]
                    .send(p, &(r as u32).to_le_bytes(), &[r as u8; 64])
                    .unwrap()
                    == SendOutcome::Busy
            });
        }
        // Carry every wireup message to its peer.
        let mut moved = true;
        while moved {
            moved = false;
            for r in 0..n as usize {
                while let Some((to, m)) = ts[r].take_wireup() {
                    ts[to as usize].on_wireup(r as u32, &m).unwrap();
                    moved = true;
                }
            }
        }
        for r in 0..n as usize {
            let mut ev = Vec::new();
            ts[r].poll(&mut ev);
            for e in ev {
                match e {
                    Event::Recv {
                        peer,
                        header,
                        payload,
                    } => {
                        assert_eq!(u32::from_le_bytes(header[..4].try_into().unwrap()), peer);
                        assert_eq!(payload, vec![peer as u8; 64]);
                        got[r].push(peer);
                    }
                    other => panic!("rank {r}: unexpected {other:?}"),
                }
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "stuck: got {got:?}, to send {to_send:?}"
        );
    }
    for (r, t) in ts.iter().enumerate() {
        let mut g = got[r].clone();
        g.sort_unstable();
        let want: Vec<u32> = (0..n).filter(|&p| p as usize != r).collect();
        assert_eq!(g, want, "rank {r} received");
        let s = t.stats();
        assert_eq!(s.queue_pairs, (n - 1) as u64, "rank {r}");
        // Every receive slot and send-queue entry of the 5 queue pairs fits.
        let per_qp = (cfg.slots + cfg.slots + 64) as u64;
        assert!(s.cq_entries >= 5 * per_qp + 16, "rank {r}: {s:?}");
    }
}
