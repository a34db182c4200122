//! TCP transport tests: N ranks as N threads over loopback, with an in-process fake
//! bootstrap `Exchange`. Raw-socket peers speak the documented handshake by hand to
//! inject foreign, garbled and oversized input.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rankwire_transports::tcp::{ConnectMode, Family};
use rankwire_transports::{
    Event, Exchange, Lookup, PeerInfo, SendOutcome, TcpConfig, TcpTransport, Transport,
    TransportError,
};

// ---------------------------------------------------------------------------------------
// Fake bootstrap: a shared map plus a generation-counting fence (with timeouts, so that a
// failing rank makes the others fail instead of hanging).

const KV_TIMEOUT: Duration = Duration::from_secs(20);

struct KvState {
    map: HashMap<String, Vec<u8>>,
    arrived: usize,
    generation: u64,
}

struct Kv {
    state: Mutex<KvState>,
    cv: Condvar,
    ranks: usize,
}

type Rewrite = Arc<dyn Fn(&str, Vec<u8>, &HashMap<String, Vec<u8>>) -> Vec<u8> + Send + Sync>;

struct Ex {
    kv: Arc<Kv>,
    /// Applied to every value this rank gets (to inject bad candidate addresses).
    rewrite: Option<Rewrite>,
}

/// The job secret of these tests' jobs (the TCP handshake proves knowledge of it).
const SECRET: &[u8] = b"tests-job-secret-0123456789abcdef";

fn kv(ranks: usize) -> Arc<Kv> {
    Arc::new(Kv {
        state: Mutex::new(KvState {
            map: HashMap::new(),
            arrived: 0,
            generation: 0,
        }),
        cv: Condvar::new(),
        ranks,
    })
}

impl Ex {
    fn new(kv: &Arc<Kv>) -> Ex {
        Ex {
            kv: kv.clone(),
            rewrite: None,
        }
    }
}

impl Exchange for Ex {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let mut st = self.kv.state.lock().unwrap();
        st.map.insert(key.to_string(), value.to_vec());
        self.kv.cv.notify_all();
        Ok(())
    }

    fn get(&mut self, _owner: u32, key: &str) -> Result<Vec<u8>, String> {
        let st = self.kv.state.lock().unwrap();
        let (st, res) = self
            .kv
            .cv
            .wait_timeout_while(st, KV_TIMEOUT, |s| !s.map.contains_key(key))
            .unwrap();
        if res.timed_out() {
            return Err(format!("get {key}: timeout"));
        }
        let v = st.map[key].clone();
        Ok(match &self.rewrite {
            Some(f) => f(key, v, &st.map),
            None => v,
        })
    }

    fn fence(&mut self) -> Result<(), String> {
        let mut st = self.kv.state.lock().unwrap();
        let generation = st.generation;
        st.arrived += 1;
        if st.arrived == self.kv.ranks {
            st.arrived = 0;
            st.generation += 1;
            self.kv.cv.notify_all();
            return Ok(());
        }
        let (_st, res) = self
            .kv
            .cv
            .wait_timeout_while(st, KV_TIMEOUT, |s| s.generation == generation)
            .unwrap();
        if res.timed_out() {
            return Err("fence: timeout".into());
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Helpers.

/// Loopback, connections at init (what most tests here check; `od_cfg`: on demand).
fn lo_cfg() -> TcpConfig {
    TcpConfig {
        include: Some(vec!["lo".into()]),
        connect: ConnectMode::AtInit,
        addr_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(20),
        ..TcpConfig::default()
    }
}

/// Loopback, connections on demand (the default mode).
fn od_cfg() -> TcpConfig {
    TcpConfig {
        connect: ConnectMode::OnDemand,
        ..lo_cfg()
    }
}

fn all_but(me: u32, n: u32) -> Vec<u32> {
    (0..n).filter(|&r| r != me).collect()
}

/// Run `n` ranks in `n` threads; `body` gets the rank, its exchange and its transport.
fn run_ranks<R: Send>(
    n: u32,
    job: &str,
    cfg: impl Fn(u32) -> TcpConfig + Sync,
    body: impl Fn(u32, &mut Ex, Result<TcpTransport, TransportError>) -> R + Sync,
) -> Vec<R> {
    let kv = kv(n as usize);
    thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (kv, cfg, body) = (&kv, &cfg, &body);
                s.spawn(move || {
                    let mut ex = Ex::new(kv);
                    let t = TcpTransport::new(r, n, job, SECRET, cfg(r), &mut ex, &all_but(r, n));
                    body(r, &mut ex, t)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Poll once; sleep briefly in epoll when nothing happened.
fn pump(t: &mut TcpTransport, sink: &mut Vec<Event>) -> bool {
    let p = t.poll(sink);
    if !p {
        t.wait_activity(Duration::from_millis(1));
    }
    p
}

/// Poll until `done(sink)` or `limit` passes (then panic with what arrived).
fn pump_until(
    t: &mut TcpTransport,
    sink: &mut Vec<Event>,
    limit: Duration,
    mut done: impl FnMut(&TcpTransport, &[Event]) -> bool,
) {
    let end = Instant::now() + limit;
    while !done(t, sink) {
        assert!(
            Instant::now() < end,
            "rank {}: timed out; {} events so far: {:?}",
            t.rank(),
            sink.len(),
            sink.iter().map(short).collect::<Vec<_>>()
        );
        pump(t, sink);
    }
}

/// Send, polling into `sink` while the transport answers Busy.
fn send_blocking(t: &mut TcpTransport, peer: u32, h: &[u8], p: &[u8], sink: &mut Vec<Event>) {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        match t.send(peer, h, p) {
            Ok(SendOutcome::Sent) => return,
            Ok(SendOutcome::Busy) => {
                assert!(Instant::now() < end, "send to {peer} stayed Busy");
                pump(t, sink);
            }
            Err(e) => panic!("rank {} send to {peer}: {e}", t.rank()),
        }
    }
}

/// Finalize like the core: fence, quiesce, drop.
fn finalize(ex: &mut Ex, mut t: TcpTransport) {
    let end = Instant::now() + Duration::from_secs(30);
    let mut sink = Vec::new();
    while !t.is_flushed() {
        assert!(Instant::now() < end, "never flushed");
        pump(&mut t, &mut sink);
    }
    ex.fence().unwrap();
    t.set_quiesced();
    drop(t);
}

fn short(e: &Event) -> String {
    match e {
        Event::Recv {
            peer,
            header,
            payload,
        } => format!("Recv(peer {peer}, h {}, p {})", header.len(), payload.len()),
        Event::PeerFailed { peer, error } => format!("PeerFailed({peer}: {error})"),
        Event::OpDone { peer, op, result } => format!("OpDone({peer}, {op}: {result:?})"),
        Event::RecvPlaced { peer, header, len } => {
            format!("RecvPlaced(peer {peer}, h {}, p {len})", header.len())
        }
    }
}

fn pattern(src: u32, dst: u32, k: usize, len: usize) -> Vec<u8> {
    let seed = (src as usize * 131 + dst as usize * 31 + k * 7) as u8;
    (0..len)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(13)) ^ (i >> 11) as u8)
        .collect()
}

fn header(src: u32, dst: u32, k: usize) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&src.to_le_bytes());
    h.extend_from_slice(&dst.to_le_bytes());
    h.extend_from_slice(&(k as u32).to_le_bytes());
    h
}

fn peer_info(rank: u32) -> PeerInfo {
    PeerInfo {
        rank,
        node_id: "n".into(),
        pid: 0,
    }
}

/// The documented handshake (handshake.rs module doc), written independently here.
fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A hello of protocol version 3 (48 bytes; the connector's nonce is 0x11 bytes).
fn hello(connector: u32, acceptor: u32, size: u32, job: &str) -> [u8; 48] {
    let mut b = [0x11u8; 48];
    b[0..8].copy_from_slice(b"RWTCPHI\0");
    b[8..12].copy_from_slice(&3u32.to_le_bytes());
    b[12..16].copy_from_slice(&connector.to_le_bytes());
    b[16..20].copy_from_slice(&acceptor.to_le_bytes());
    b[20..24].copy_from_slice(&size.to_le_bytes());
    b[24..32].copy_from_slice(&fnv1a(job).to_le_bytes());
    b
}

/// The first 32 bytes of an ack (magic to job hash).
fn ack_base(status: u32, acceptor: u32, size: u32, job: &str) -> [u8; 32] {
    let mut b = [0u8; 32];
    b.copy_from_slice(&hello(status, acceptor, size, job)[..32]);
    b[0..8].copy_from_slice(b"RWTCPACK");
    b
}

/// A whole ack (80 bytes) with a zero nonce and a MAC that is not one.
fn ack(status: u32, acceptor: u32, size: u32, job: &str) -> [u8; 80] {
    let mut b = [0u8; 80];
    b[..32].copy_from_slice(&ack_base(status, acceptor, size, job));
    b
}

/// HMAC-SHA256 of `parts` under `key` (the handshake's MACs, from the module doc).
fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use hmac::Mac;
    let mut m = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

fn envelope(header_len: u32, flags: u32, payload_len: u64) -> Vec<u8> {
    let mut e = Vec::new();
    e.extend_from_slice(&header_len.to_le_bytes());
    e.extend_from_slice(&flags.to_le_bytes());
    e.extend_from_slice(&payload_len.to_le_bytes());
    e
}

fn record_addrs(v: &[u8]) -> Vec<SocketAddr> {
    std::str::from_utf8(v)
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect()
}

/// Play rank 1 of a 2-rank job by hand: publish nothing, fence, dial rank 0 and check its
/// ack. Returns the handshaken stream.
fn raw_rank1(ex: &mut Ex, job: &str) -> TcpStream {
    ex.put("tcp-addr-1", b"rankwire-tcp/1").unwrap();
    ex.fence().unwrap();
    let addrs = record_addrs(&ex.get(0, "tcp-addr-0").unwrap());
    let mut s = TcpStream::connect_timeout(&addrs[0], Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let h = hello(1, 0, 2, job);
    s.write_all(&h).unwrap();
    let mut a = [0u8; 80];
    s.read_exact(&mut a).unwrap();
    assert_eq!(
        a[..32],
        ack_base(0, 0, 2, job),
        "rank 0 should accept the hand-made hello"
    );
    let na = &a[32..48];
    let want = mac(
        SECRET,
        &[
            b"rankwire-tcp-ack-v2",
            &h[8..],
            &0u32.to_le_bytes(),
            &0u32.to_le_bytes(),
            na,
        ],
    );
    assert_eq!(a[48..], want, "the ack's MAC");
    s.write_all(&mac(SECRET, &[b"rankwire-tcp-proof-v2", &h[8..], na]))
        .unwrap();
    s
}

// ---------------------------------------------------------------------------------------
// Data path.

const SIZES: [usize; 5] = [0, 1, 64 * 1024, 4 * 1024 * 1024, 1000];

fn all_to_all(n: u32, rounds: usize, cfg: TcpConfig) {
    let job = format!("a2a-{n}-{}", cfg.connect);
    let on_demand = cfg.connect == ConnectMode::OnDemand;
    run_ranks(
        n,
        &job,
        |_| cfg.clone(),
        |me, ex, t| {
            let mut t = t.unwrap();
            if on_demand {
                // Nothing connected yet; every rank's first frames go to every peer at
                // once, so each pair's two ranks dial each other simultaneously.
                assert!(t.connected_peers().is_empty(), "{:?}", t.connected_peers());
                for p in all_but(me, n) {
                    assert_eq!(t.can_reach(&peer_info(p)), Ok(()));
                }
            } else {
                assert_eq!(t.connected_peers(), all_but(me, n));
            }
            let mut sink = Vec::new();
            let frames: Vec<usize> = (0..rounds).flat_map(|_| SIZES).collect();
            for (k, &len) in frames.iter().enumerate() {
                for peer in all_but(me, n) {
                    let p = pattern(me, peer, k, len);
                    send_blocking(&mut t, peer, &header(me, peer, k), &p, &mut sink);
                }
            }
            let expected = frames.len() * (n as usize - 1);
            pump_until(&mut t, &mut sink, Duration::from_secs(60), |t, s| {
                s.len() >= expected && t.is_flushed()
            });
            let mut next: HashMap<u32, usize> = HashMap::new();
            for e in sink.drain(..) {
                match e {
                    Event::Recv {
                        peer,
                        header: h,
                        payload,
                    } => {
                        let k = next.entry(peer).or_default();
                        assert_eq!(h, header(peer, me, *k), "rank {me}: frame out of order");
                        assert_eq!(payload.len(), frames[*k]);
                        assert!(payload == pattern(peer, me, *k, frames[*k]), "content");
                        *k += 1;
                    }
                    other => panic!("rank {me}: unexpected {}", short(&other)),
                }
            }
            assert!(next.values().all(|&k| k == frames.len()));
            // One connection per peer, whichever side dialled.
            assert_eq!(t.connected_peers(), all_but(me, n));
            finalize(ex, t);
        },
    );
}

#[test]
fn all_to_all_2_ranks() {
    all_to_all(2, 3, lo_cfg());
}

#[test]
fn all_to_all_4_ranks() {
    all_to_all(4, 2, lo_cfg());
}

/// Issue 21, connections on demand: frames queued before the connection exists arrive
/// complete and in order, and simultaneous dials leave one connection per pair.
#[test]
fn all_to_all_on_demand_2_4_and_8_ranks() {
    all_to_all(2, 3, od_cfg());
    all_to_all(4, 2, od_cfg());
    all_to_all(8, 1, od_cfg());
}

#[test]
fn simultaneous_setup_4_and_8_ranks_repeated() {
    simultaneous_setup(ConnectMode::AtInit);
}

/// Issue 21: the same with connections on demand, where every pair's two ranks dial
/// each other at the same moment (their first frames).
#[test]
fn simultaneous_dials_on_demand_4_and_8_ranks_repeated() {
    simultaneous_setup(ConnectMode::OnDemand);
}

fn simultaneous_setup(connect: ConnectMode) {
    // Six rounds of 4 ranks, then one of 8, all dialling and accepting at once.
    for (iter, n) in [4u32, 4, 4, 4, 4, 4, 8].into_iter().enumerate() {
        // Default interface selection (this host's real addresses first, loopback last).
        let cfg = |_| TcpConfig {
            addr_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(20),
            connect,
            ..TcpConfig::default()
        };
        let started = Instant::now();
        run_ranks(n, &format!("setup-{iter}-{connect}"), cfg, |me, ex, t| {
            let mut t = t.unwrap();
            if connect == ConnectMode::AtInit {
                assert_eq!(t.connected_peers(), all_but(me, n), "iteration {iter}");
            }
            assert!(!t.local_addrs().is_empty());
            for p in all_but(me, n) {
                assert_eq!(t.can_reach(&peer_info(p)), Ok(()));
                send_blocking(&mut t, p, &header(me, p, 0), b"x", &mut Vec::new());
            }
            assert!(t.can_reach(&peer_info(me)).is_err());
            let mut sink = Vec::new();
            pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
                s.len() >= n as usize - 1
            });
            let mut from: Vec<u32> = sink
                .iter()
                .map(|e| match e {
                    Event::Recv {
                        peer, header: h, ..
                    } => {
                        // The connection's rank matches the sender's own idea of its rank.
                        assert_eq!(h, &header(*peer, me, 0));
                        *peer
                    }
                    other => panic!("{}", short(other)),
                })
                .collect();
            from.sort();
            assert_eq!(from, all_but(me, n), "one connection per peer");
            assert_eq!(t.connected_peers(), all_but(me, n), "iteration {iter}");
            finalize(ex, t);
        });
        println!(
            "{n} ranks: set up, checked and closed in {:?}",
            started.elapsed()
        );
    }
}

/// Issue 21, the crossing dials found by the RDMA-on-demand review: the lower rank
/// answers the higher rank's hello while it is not dialling (accepting), then dials the
/// higher rank itself before the proof arrives; the higher rank takes that hello in the
/// same poll in which its own dial's accepting ack is read. Before the fix each rank
/// kept its own dial and dropped the other's proof, and the first frames met a reset.
/// Ranks 0 (M), 1 (L) and 2 (H) take turns, one at a time, so the order is the bad
/// one: M's connection to H makes H's listener ready before L's ack reaches H's dial
/// socket, so H accepts L's connection (and reads L's hello) before it reads the ack.
/// Repeated, since the order of epoll's ready list is the kernel's.
#[test]
fn crossing_dials_after_an_accepted_hello_keep_one_connection() {
    for round in 0..5 {
        let turn = std::sync::Barrier::new(3);
        run_ranks(
            3,
            &format!("cross-{round}"),
            |_| od_cfg(),
            |me, ex, t| {
                let mut t = t.unwrap();
                let mut sink = Vec::new();
                let spin = |t: &mut TcpTransport, sink: &mut Vec<Event>| {
                    let end = Instant::now() + Duration::from_millis(40);
                    while Instant::now() < end {
                        t.poll(sink);
                        thread::sleep(Duration::from_millis(1));
                    }
                };
                // 1. H dials L (its hello is written; L is not polling).
                if me == 2 {
                    send_blocking(&mut t, 1, &header(2, 1, 0), b"h", &mut sink);
                    spin(&mut t, &mut sink);
                }
                turn.wait();
                // 2. M dials H: H's listener becomes ready.
                if me == 0 {
                    send_blocking(&mut t, 2, &header(0, 2, 0), b"m", &mut sink);
                    spin(&mut t, &mut sink);
                }
                turn.wait();
                // 3. L answers H's hello (accepting: L is not dialling), then sends to H.
                if me == 1 {
                    spin(&mut t, &mut sink);
                    send_blocking(&mut t, 2, &header(1, 2, 0), b"l", &mut sink);
                    spin(&mut t, &mut sink);
                }
                turn.wait();
                // 4. H polls: its listener (M, and L if L dialled) and its dial's ack.
                if me == 2 {
                    spin(&mut t, &mut sink);
                }
                turn.wait();
                // 5. Everyone: the first frames arrive, and a second round both ways on
                // the connections made.
                let talks: &[u32] = match me {
                    0 => &[2],
                    1 => &[2],
                    _ => &[0, 1],
                };
                for &p in talks {
                    send_blocking(&mut t, p, &header(me, p, 1), b"2", &mut sink);
                }
                // Frames to expect, (from, k): H sent M nothing before step 5.
                let want: Vec<(u32, usize)> = match me {
                    0 => vec![(2, 1)],
                    1 => vec![(2, 0), (2, 1)],
                    _ => vec![(0, 0), (0, 1), (1, 0), (1, 1)],
                };
                let expect = want.len();
                pump_until(&mut t, &mut sink, Duration::from_secs(10), |t, s| {
                    s.len() >= expect && t.is_flushed()
                });
                let mut got: Vec<(u32, Vec<u8>)> = sink
                    .iter()
                    .map(|e| match e {
                        Event::Recv {
                            peer, header: h, ..
                        } => (*peer, h.clone()),
                        other => panic!("round {round}, rank {me}: {}", short(other)),
                    })
                    .collect();
                got.sort();
                let want: Vec<(u32, Vec<u8>)> =
                    want.iter().map(|&(p, k)| (p, header(p, me, k))).collect();
                assert_eq!(got, want, "round {round}, rank {me}");
                assert_eq!(t.connected_peers(), talks.to_vec(), "round {round}");
                finalize(ex, t);
            },
        );
    }
}

#[test]
fn peer_dropped_mid_run_is_reported_once() {
    run_ranks(
        2,
        "drop",
        |_| lo_cfg(),
        |me, ex, t| {
            let mut t = t.unwrap();
            let mut sink = Vec::new();
            if me == 1 {
                send_blocking(&mut t, 0, b"bye", &[7; 100], &mut sink);
                pump_until(&mut t, &mut sink, Duration::from_secs(10), |t, _| {
                    t.is_flushed()
                });
                ex.fence().unwrap();
                drop(t); // dies without quiescing
                return;
            }
            ex.fence().unwrap();
            // Keep sending big frames into the dead peer: send errors or poll reports.
            let big = vec![1u8; 1 << 20];
            let end = Instant::now() + Duration::from_secs(20);
            let mut send_err = None;
            while send_err.is_none() && !sink.iter().any(|e| matches!(e, Event::PeerFailed { .. }))
            {
                assert!(Instant::now() < end, "failure never noticed");
                match t.send(1, b"h", &big) {
                    Ok(_) => {}
                    Err(e) => send_err = Some(e),
                }
                pump(&mut t, &mut sink);
            }
            if let Some(e) = &send_err {
                assert!(matches!(e, TransportError::PeerLost { peer: 1, .. }), "{e}");
            }
            // Collect a little longer: exactly one PeerFailed, after the frame that arrived.
            let settle = Instant::now() + Duration::from_millis(300);
            while Instant::now() < settle {
                pump(&mut t, &mut sink);
            }
            let failed: Vec<_> = sink
                .iter()
                .filter_map(|e| match e {
                    Event::PeerFailed { peer, error } => Some((*peer, error.clone())),
                    _ => None,
                })
                .collect();
            assert_eq!(failed.len(), 1, "{failed:?}");
            assert_eq!(failed[0].0, 1);
            match &failed[0].1 {
                TransportError::PeerLost {
                    peer: 1, reason, ..
                } => eprintln!("rank 0 saw: {reason}"),
                other => panic!("{other:?}"),
            }
            assert!(
                matches!(&sink[0], Event::Recv { peer: 1, header, .. } if header == b"bye"),
                "{}",
                short(&sink[0])
            );
            assert!(matches!(
                t.send(1, b"h", b"p"),
                Err(TransportError::PeerLost { peer: 1, .. })
            ));
            assert!(t.can_reach(&peer_info(1)).is_err());
            assert!(t.is_flushed(), "a dead peer's queue does not count");
        },
    );
}

#[test]
fn close_after_quiesce_is_not_a_failure() {
    run_ranks(
        2,
        "quiet",
        |_| lo_cfg(),
        |me, ex, t| {
            let mut t = t.unwrap();
            ex.fence().unwrap();
            t.set_quiesced();
            if me == 1 {
                drop(t);
                ex.fence().unwrap();
                return;
            }
            ex.fence().unwrap();
            let mut sink = Vec::new();
            let end = Instant::now() + Duration::from_millis(300);
            while Instant::now() < end {
                pump(&mut t, &mut sink);
            }
            assert!(
                sink.is_empty(),
                "{:?}",
                sink.iter().map(short).collect::<Vec<_>>()
            );
            assert!(t.connected_peers().is_empty(), "closed connection released");
        },
    );
}

/// Rank 0 is a real transport; rank 1 is a raw socket that handshakes, sends one valid
/// frame and then `garbage`. Returns rank 0's events.
fn rank0_vs_raw_rank1(job: &str, garbage: Vec<u8>) -> Vec<Event> {
    let kv = kv(2);
    thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<()>();
        let kv = &kv;
        let raw = s.spawn(move || {
            let kv = kv;
            let mut ex = Ex::new(kv);
            let mut sock = raw_rank1(&mut ex, job);
            let mut frame = envelope(2, 0, 3);
            frame.extend_from_slice(b"okabc");
            sock.write_all(&frame).unwrap();
            sock.write_all(&garbage).unwrap();
            // Rank 0 closes the connection after the malformed frame.
            rx.recv_timeout(Duration::from_secs(20)).unwrap();
            let mut b = [0u8; 16];
            let n = sock.read(&mut b).unwrap_or(0);
            assert_eq!(n, 0, "rank 0 should have closed the connection");
        });
        let mut ex = Ex::new(kv);
        let mut t = TcpTransport::new(0, 2, job, SECRET, lo_cfg(), &mut ex, &[1]).unwrap();
        let mut sink = Vec::new();
        let started = Instant::now();
        pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
            s.iter().any(|e| matches!(e, Event::PeerFailed { .. }))
        });
        assert!(started.elapsed() < Duration::from_secs(5));
        tx.send(()).unwrap();
        raw.join().unwrap();
        assert!(matches!(
            t.send(1, b"", b""),
            Err(TransportError::PeerLost { peer: 1, .. })
        ));
        sink
    })
}

fn expect_malformed(events: &[Event], needle: &str) {
    assert_eq!(
        events.len(),
        2,
        "{:?}",
        events.iter().map(short).collect::<Vec<_>>()
    );
    assert!(
        matches!(&events[0], Event::Recv { peer: 1, header, payload } if header == b"ok" && payload == b"abc")
    );
    match &events[1] {
        Event::PeerFailed {
            peer: 1,
            error: TransportError::Malformed {
                peer: 1, reason, ..
            },
        } => {
            assert!(reason.contains(needle), "{reason}");
            eprintln!(
                "malformed reported as: {}",
                events[1..].iter().map(short).collect::<String>()
            );
        }
        other => panic!("{}", short(other)),
    }
}

#[test]
fn garbled_envelope_is_malformed_without_huge_allocation() {
    // header_len ~4 GiB, payload_len ~16 EiB: must be rejected before allocating.
    let mut g = envelope(0xFFFF_FFF0, 0, u64::MAX - 5);
    g.extend_from_slice(&[0xAB; 64]);
    let ev = rank0_vs_raw_rank1("garbled", g);
    expect_malformed(&ev, "header_len 4294967280 exceeds MAX_HEADER_BYTES 4096");

    let ev = rank0_vs_raw_rank1(
        "garbled-flags",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
    );
    expect_malformed(&ev, "flags");
}

#[test]
fn payload_over_max_frame_is_malformed() {
    let g = envelope(4, 0, 4 * 1024 * 1024 + 1);
    let ev = rank0_vs_raw_rank1("oversized", g);
    expect_malformed(
        &ev,
        "payload_len 4194305 exceeds max_frame_payload_bytes 4194304",
    );
}

#[test]
fn foreign_connection_with_wrong_job_is_rejected_and_job_connects() {
    let kv = kv(2);
    let job = "the-job";
    thread::scope(|s| {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        // A process of another job, claiming rank 1, dials rank 0 before the real rank 1.
        let kv_f = &kv;
        let foreign = s.spawn(move || {
            let mut ex = Ex::new(kv_f);
            let addrs = record_addrs(&ex.get(0, "tcp-addr-0").unwrap());
            let mut sock = TcpStream::connect(addrs[0]).unwrap();
            sock.write_all(&hello(1, 0, 2, "another-job")).unwrap();
            go_tx.send(()).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let mut a = [0u8; 80];
            match sock.read_exact(&mut a) {
                Ok(()) => {
                    assert_eq!(&a[0..8], b"RWTCPACK");
                    let status = u32::from_le_bytes([a[12], a[13], a[14], a[15]]);
                    assert_eq!(status, 1, "expected a wrong-job rejection");
                }
                Err(e) => eprintln!("foreign connection closed without ack: {e}"),
            }
        });
        let kv_ref = &kv;
        let real1 = s.spawn(move || {
            let kv = kv_ref;
            go_rx.recv().unwrap();
            let mut ex = Ex::new(kv);
            let mut t = TcpTransport::new(1, 2, job, SECRET, lo_cfg(), &mut ex, &[0]).unwrap();
            send_blocking(&mut t, 0, b"real", b"1", &mut Vec::new());
            finalize(&mut ex, t);
        });
        let mut ex = Ex::new(&kv);
        let mut t = TcpTransport::new(0, 2, job, SECRET, lo_cfg(), &mut ex, &[1]).unwrap();
        let mut sink = Vec::new();
        pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
            !s.is_empty()
        });
        assert!(matches!(&sink[0], Event::Recv { peer: 1, header, .. } if header == b"real"));
        finalize(&mut ex, t);
        foreign.join().unwrap();
        real1.join().unwrap();
    });
}

/// Issue 21: a process that knows the job id and rank 0's address (both are easy to
/// learn) but not the job secret claims to be rank 1. Rank 0 answers its hello, refuses
/// its proof (logged as a warning) and closes; the real rank 1 connects and the job runs
/// on. (Replays: `setup.rs`'s unit test.)
#[test]
fn impostor_without_the_secret_is_refused_and_the_job_connects() {
    impostor(lo_cfg());
}

/// The same with connections on demand, where rank 0's listener stays open for the
/// whole job and the impostor's claim on rank 1 is in progress when the real rank 1
/// connects: the first valid proof takes the slot.
#[test]
fn impostor_on_demand_is_refused_and_the_real_rank_connects() {
    impostor(od_cfg());
}

fn impostor(cfg: TcpConfig) {
    let kv = kv(2);
    let job = "the-job";
    thread::scope(|s| {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let kv_f = &kv;
        let impostor = s.spawn(move || {
            let mut ex = Ex::new(kv_f);
            let addrs = record_addrs(&ex.get(0, "tcp-addr-0").unwrap());
            let mut sock = TcpStream::connect(addrs[0]).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let h = hello(1, 0, 2, job);
            sock.write_all(&h).unwrap();
            // Rank 0 accepts only once both ranks passed the bootstrap fence.
            go_tx.send(()).unwrap();
            let mut a = [0u8; 80];
            sock.read_exact(&mut a).unwrap();
            // Accepted so far (right job, expected rank): now the proof it cannot make.
            assert_eq!(a[..32], ack_base(0, 0, 2, job));
            sock.write_all(&mac(b"a guess at the secret", &[&h[8..], &a[32..48]]))
                .unwrap();
            // Rank 0 must close on it (end of stream or a reset) well before the 20 s
            // read timeout; a timeout here means it was never refused.
            let mut b = [0u8; 1];
            match sock.read(&mut b) {
                Ok(0) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
                Err(e) => panic!("rank 0 did not close on the impostor: {e}"),
                Ok(_) => panic!("rank 0 sent data to an impostor"),
            }
        });
        let kv_ref = &kv;
        let cfg1 = cfg.clone();
        let real1 = s.spawn(move || {
            let kv = kv_ref;
            go_rx.recv().unwrap();
            let mut ex = Ex::new(kv);
            let mut t = TcpTransport::new(1, 2, job, SECRET, cfg1, &mut ex, &[0]).unwrap();
            send_blocking(&mut t, 0, b"real", b"1", &mut Vec::new());
            finalize(&mut ex, t);
        });
        let mut ex = Ex::new(&kv);
        let mut t = TcpTransport::new(0, 2, job, SECRET, cfg, &mut ex, &[1]).unwrap();
        let mut sink = Vec::new();
        pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
            !s.is_empty()
        });
        assert!(matches!(&sink[0], Event::Recv { peer: 1, header, .. } if header == b"real"));
        finalize(&mut ex, t);
        impostor.join().unwrap();
        real1.join().unwrap();
    });
}

/// The listener is bound to every interface, but a connection that arrives on an address
/// the rank does not publish (here 127.0.0.2, while only 127.0.0.1 is published) is
/// closed at once, before any handshake, and the job connects as usual. Three ranks, so
/// that rank 0's listener stays in use (two ranks switch to their direct path once
/// connected); rank 0 keeps polling until the stray connection saw its end, which must
/// come well before the 10 s handshake bound that would end a silent connection.
#[test]
fn a_connection_to_an_unpublished_address_is_dropped_at_accept() {
    let cfg = TcpConfig {
        addr_timeout: Duration::from_secs(10),
        ..od_cfg()
    };
    let kv = kv(3);
    let job = "the-job";
    let stray_done = std::sync::atomic::AtomicBool::new(false);
    let done = &stray_done;
    thread::scope(|s| {
        let kv_f = &kv;
        let stray = s.spawn(move || {
            let mut ex = Ex::new(kv_f);
            let addrs = record_addrs(&ex.get(0, "tcp-addr-0").unwrap());
            assert!(
                addrs
                    .iter()
                    .all(|a| a.ip() != std::net::Ipv4Addr::new(127, 0, 0, 2)),
                "{addrs:?}"
            );
            let mut sock = TcpStream::connect(("127.0.0.2", addrs[0].port())).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let t0 = Instant::now();
            let mut b = [0u8; 1];
            match sock.read(&mut b) {
                Ok(0) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
                other => panic!("rank 0 kept a connection to 127.0.0.2: {other:?}"),
            }
            let took = t0.elapsed();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            assert!(took < Duration::from_secs(5), "closed after {took:?}");
        });
        let others: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|r| {
                let cfg = cfg.clone();
                s.spawn(move || {
                    let mut ex = Ex::new(kv_f);
                    let peers: Vec<u32> = (0..3).filter(|&p| p != r).collect();
                    let mut t = TcpTransport::new(r, 3, job, SECRET, cfg, &mut ex, &peers).unwrap();
                    if r == 1 {
                        send_blocking(&mut t, 0, b"real", b"1", &mut Vec::new());
                    }
                    let mut sink = Vec::new();
                    pump_until(&mut t, &mut sink, Duration::from_secs(30), |_, _| {
                        done.load(std::sync::atomic::Ordering::SeqCst)
                    });
                    finalize(&mut ex, t);
                })
            })
            .collect();
        let mut ex = Ex::new(&kv);
        let mut t = TcpTransport::new(0, 3, job, SECRET, cfg.clone(), &mut ex, &[1, 2]).unwrap();
        let mut sink = Vec::new();
        pump_until(&mut t, &mut sink, Duration::from_secs(30), |_, s| {
            !s.is_empty() && done.load(std::sync::atomic::Ordering::SeqCst)
        });
        assert!(matches!(&sink[0], Event::Recv { peer: 1, header, .. } if header == b"real"));
        finalize(&mut ex, t);
        stray.join().unwrap();
        for o in others {
            o.join().unwrap();
        }
    });
}

/// Two ranks started with different secrets do not connect: the error says why.
#[test]
fn ranks_with_different_secrets_do_not_connect() {
    let kv = kv(2);
    let cfg = || TcpConfig {
        connect_timeout: Duration::from_secs(2),
        addr_timeout: Duration::from_millis(500),
        ..lo_cfg()
    };
    thread::scope(|s| {
        let kv_ref = &kv;
        let r1 = s.spawn(move || {
            let mut ex = Ex::new(kv_ref);
            TcpTransport::new(
                1,
                2,
                "j",
                b"another secret of 16+ bytes",
                cfg(),
                &mut ex,
                &[0],
            )
            .unwrap_err()
        });
        let mut ex = Ex::new(&kv);
        let e0 = TcpTransport::new(0, 2, "j", SECRET, cfg(), &mut ex, &[1]).unwrap_err();
        let e1 = r1.join().unwrap();
        assert!(
            e1.to_string().contains("does not know this job's secret"),
            "{e1}"
        );
        assert!(e0.to_string().contains("did not connect"), "{e0}");
    });
    let mut ex = Ex::new(&kv);
    let e = TcpTransport::new(0, 2, "j", b"short", cfg(), &mut ex, &[1]).unwrap_err();
    assert!(e.to_string().contains("at least 16"), "{e}");
}

/// Bogus candidate addresses put in front of rank 0's real ones, as rank 1 sees them:
/// a closed port, a silent listener, a non-rankwire server, a rank of another job, and
/// rank 1's own listener (the duplicated-bridge case of B019).
struct Decoys {
    addrs: Vec<SocketAddr>,
    _keep: Vec<TcpListener>,
}

fn decoys() -> Decoys {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let http = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_job = TcpListener::bind("127.0.0.1:0").unwrap();
    let addrs = vec![
        closed,
        silent.local_addr().unwrap(),
        http.local_addr().unwrap(),
        other_job.local_addr().unwrap(),
    ];
    let (h, o) = (http.try_clone().unwrap(), other_job.try_clone().unwrap());
    h.set_nonblocking(true).unwrap();
    o.set_nonblocking(true).unwrap();
    thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(8);
        while Instant::now() < end {
            if let Ok((mut c, _)) = h.accept() {
                let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            }
            if let Ok((mut c, _)) = o.accept() {
                c.set_nonblocking(false).unwrap();
                let mut b = [0u8; 48];
                if c.read_exact(&mut b).is_ok() {
                    let _ = c.write_all(&ack(1, 0, 2, "someone-else"));
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
    });
    Decoys {
        addrs,
        _keep: vec![silent, http, other_job],
    }
}

fn with_decoys(decoys: &[SocketAddr], keep_real: bool) -> Rewrite {
    let decoys = decoys.to_vec();
    Arc::new(move |key, v, map| {
        if key != "tcp-addr-0" {
            return v;
        }
        let mut all = decoys.clone();
        all.extend(record_addrs(&map["tcp-addr-1"])); // ourselves
        if keep_real {
            all.extend(record_addrs(&v));
        }
        let mut s = String::from("rankwire-tcp/1");
        for a in all {
            s.push_str(&format!(" {a}"));
        }
        s.into_bytes()
    })
}

#[test]
fn wrong_candidates_are_skipped_b019() {
    let kv = kv(2);
    let cfg = || TcpConfig {
        addr_timeout: Duration::from_millis(300),
        ..lo_cfg()
    };
    thread::scope(|s| {
        let d = decoys();
        let (kv, addrs) = (&kv, d.addrs.clone());
        let rank1 = s.spawn(move || {
            let mut ex = Ex::new(kv);
            ex.rewrite = Some(with_decoys(&addrs, true));
            let started = Instant::now();
            let mut t = TcpTransport::new(1, 2, "b019", SECRET, cfg(), &mut ex, &[0]).unwrap();
            eprintln!(
                "rank 1 connected past the decoys in {:?}",
                started.elapsed()
            );
            send_blocking(&mut t, 0, b"made it", b"", &mut Vec::new());
            finalize(&mut ex, t);
        });
        let mut ex = Ex::new(kv);
        let mut t = TcpTransport::new(0, 2, "b019", SECRET, cfg(), &mut ex, &[1]).unwrap();
        let mut sink = Vec::new();
        pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
            !s.is_empty()
        });
        assert!(matches!(&sink[0], Event::Recv { peer: 1, header, .. } if header == b"made it"));
        finalize(&mut ex, t);
        rank1.join().unwrap();
    });
}

#[test]
fn no_working_candidate_fails_in_time_with_a_useful_error() {
    let kv = kv(2);
    let cfg = || TcpConfig {
        addr_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_secs(3),
        ..lo_cfg()
    };
    thread::scope(|s| {
        let d = decoys();
        let started = Instant::now();
        let (kv, addrs) = (&kv, d.addrs.clone());
        let rank1 = s.spawn(move || {
            let mut ex = Ex::new(kv);
            ex.rewrite = Some(with_decoys(&addrs, false));
            TcpTransport::new(1, 2, "b019-fail", SECRET, cfg(), &mut ex, &[0]).unwrap_err()
        });
        let mut ex = Ex::new(kv);
        let e0 = TcpTransport::new(0, 2, "b019-fail", SECRET, cfg(), &mut ex, &[1]).unwrap_err();
        let e1 = rank1.join().unwrap();
        let elapsed = started.elapsed();
        eprintln!("rank 1: {e1}\nrank 0: {e0}\nafter {elapsed:?}");
        assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
        match &e1 {
            TransportError::Connect {
                peer: 0, reason, ..
            } => {
                for a in &d.addrs {
                    assert!(reason.contains(&a.to_string()), "{a} missing: {reason}");
                }
                for needle in [
                    "refused",
                    "timed out",
                    "not a rankwire",
                    "another job",
                    "itself",
                    "RANKWIRE_TCP_IF",
                ] {
                    assert!(reason.contains(needle), "{needle:?} missing: {reason}");
                }
            }
            other => panic!("{other:?}"),
        }
        match &e0 {
            TransportError::Connect {
                peer: 1, reason, ..
            } => assert!(reason.contains("did not connect"), "{reason}"),
            other => panic!("{other:?}"),
        }
    });
}

/// Both ranks send their first frame before either polls, so each dials the other and
/// each listener then sees the other's hello while its own dial is pending: rank 0 (the
/// lower) answers with a yield, rank 1 takes rank 0's connection and drops its own. The
/// frames both queued go through the one connection left, repeated for races.
#[test]
fn both_ranks_dialling_at_once_keep_one_connection() {
    for iter in 0..20 {
        let kv = kv(2);
        let barrier = std::sync::Barrier::new(2);
        thread::scope(|s| {
            let handles: Vec<_> = (0..2u32)
                .map(|me| {
                    let (kv, barrier) = (&kv, &barrier);
                    s.spawn(move || {
                        let mut ex = Ex::new(kv);
                        let job = format!("both-{iter}");
                        let mut t =
                            TcpTransport::new(me, 2, &job, SECRET, od_cfg(), &mut ex, &[1 - me])
                                .unwrap();
                        for k in 0..4 {
                            let p = pattern(me, 1 - me, k, 100 << k);
                            let sent = t.send(1 - me, &header(me, 1 - me, k), &p);
                            assert_eq!(sent, Ok(SendOutcome::Sent));
                        }
                        barrier.wait();
                        let mut sink = Vec::new();
                        pump_until(&mut t, &mut sink, Duration::from_secs(20), |t, s| {
                            s.len() >= 4 && t.is_flushed()
                        });
                        for (k, e) in sink.iter().enumerate() {
                            match e {
                                Event::Recv {
                                    peer, header: h, ..
                                } => {
                                    assert_eq!(*peer, 1 - me);
                                    assert_eq!(h, &header(1 - me, me, k), "iteration {iter}");
                                }
                                other => panic!("rank {me}: {}", short(other)),
                            }
                        }
                        assert_eq!(t.connected_peers(), vec![1 - me]);
                        finalize(&mut ex, t);
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        });
    }
}

/// The yield, played by hand as rank 0 (the lower rank) would: rank 1 dials, rank 0
/// answers its hello with a yield (status 7, a valid MAC) and dials rank 1 itself. Rank 1
/// drops its attempt, takes rank 0's connection, and the frame it queued arrives on it.
#[test]
fn a_yield_hands_the_queued_frames_to_the_peers_connection() {
    let kv = kv(2);
    let job = "yield";
    thread::scope(|s| {
        let kv_ref = &kv;
        let rank1 = s.spawn(move || {
            let mut ex = Ex::new(kv_ref);
            let mut t = TcpTransport::new(1, 2, job, SECRET, od_cfg(), &mut ex, &[0]).unwrap();
            assert_eq!(t.send(0, b"first", b"queued"), Ok(SendOutcome::Sent));
            let mut sink = Vec::new();
            pump_until(&mut t, &mut sink, Duration::from_secs(20), |_, s| {
                !s.is_empty()
            });
            match &sink[0] {
                Event::Recv {
                    peer: 0,
                    header,
                    payload,
                } => assert_eq!((&header[..], &payload[..]), (&b"back"[..], &b"!"[..])),
                other => panic!("{}", short(other)),
            }
            assert_eq!(t.connected_peers(), vec![0]);
            t.set_quiesced();
        });
        // Rank 0, by hand.
        let mut ex = Ex::new(&kv);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        ex.put(
            "tcp-addr-0",
            format!("rankwire-tcp/1 {}", l.local_addr().unwrap()).as_bytes(),
        )
        .unwrap();
        ex.fence().unwrap();
        let (mut theirs, _) = l.accept().unwrap();
        theirs
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut h1 = [0u8; 48];
        theirs.read_exact(&mut h1).unwrap();
        assert_eq!(h1[12..16], 1u32.to_le_bytes(), "rank 1's hello");
        let na = [0x22u8; 16];
        let mut yield_ack = [0u8; 80];
        yield_ack[..32].copy_from_slice(&ack_base(7, 0, 2, job));
        yield_ack[32..48].copy_from_slice(&na);
        yield_ack[48..].copy_from_slice(&mac(
            SECRET,
            &[
                b"rankwire-tcp-ack-v2",
                &h1[8..],
                &7u32.to_le_bytes(),
                &0u32.to_le_bytes(),
                &na,
            ],
        ));
        theirs.write_all(&yield_ack).unwrap();
        // Rank 1 gives that attempt up: no proof, the socket closes.
        let mut b = [0u8; 1];
        assert_eq!(
            theirs.read(&mut b).unwrap(),
            0,
            "the yielded attempt closes"
        );
        // Rank 0 dials rank 1 as a connector.
        let addrs = record_addrs(&ex.get(1, "tcp-addr-1").unwrap());
        let mut ours = TcpStream::connect(addrs[0]).unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let h0 = hello(0, 1, 2, job);
        ours.write_all(&h0).unwrap();
        let mut a = [0u8; 80];
        ours.read_exact(&mut a).unwrap();
        assert_eq!(
            a[..32],
            ack_base(0, 1, 2, job),
            "rank 1 accepts rank 0's hello"
        );
        ours.write_all(&mac(
            SECRET,
            &[b"rankwire-tcp-proof-v2", &h0[8..], &a[32..48]],
        ))
        .unwrap();
        // The frame rank 1 queued before any connection existed.
        let mut frame = vec![0u8; 16 + 5 + 6];
        ours.read_exact(&mut frame).unwrap();
        assert_eq!(frame[..16], envelope(5, 0, 6)[..]);
        assert_eq!(&frame[16..], b"firstqueued");
        let mut back = envelope(4, 0, 1);
        back.extend_from_slice(b"back!");
        ours.write_all(&back).unwrap();
        rank1.join().unwrap();
    });
}

/// On demand, the first message can reach a peer that is busy (computing between MPI
/// calls, not polling) for longer than the per-address and the overall connect bounds:
/// its kernel has taken the connection, so the dialer waits instead of failing a legal
/// program, and the queued frame arrives once the peer polls.
#[test]
fn on_demand_dial_waits_for_a_peer_that_is_busy_past_the_timeouts() {
    let kv = kv(2);
    let cfg = || TcpConfig {
        addr_timeout: Duration::from_millis(200),
        connect_timeout: Duration::from_millis(600),
        ..od_cfg()
    };
    thread::scope(|s| {
        let kv_ref = &kv;
        let busy = s.spawn(move || {
            let mut ex = Ex::new(kv_ref);
            let mut t = TcpTransport::new(1, 2, "busy", SECRET, cfg(), &mut ex, &[0]).unwrap();
            // Computing: no rankwire call for six times the per-address bound and twice
            // the overall one.
            thread::sleep(Duration::from_millis(1200));
            let mut sink = Vec::new();
            pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
                !s.is_empty()
            });
            assert!(
                matches!(&sink[0], Event::Recv { peer: 0, header, .. } if header == b"early"),
                "{}",
                short(&sink[0])
            );
            send_blocking(&mut t, 0, b"reply", b"", &mut sink);
            finalize(&mut ex, t);
        });
        let mut ex = Ex::new(&kv);
        let mut t = TcpTransport::new(0, 2, "busy", SECRET, cfg(), &mut ex, &[1]).unwrap();
        assert_eq!(t.send(1, b"early", b"x"), Ok(SendOutcome::Sent));
        let mut sink = Vec::new();
        pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
            !s.is_empty()
        });
        assert!(
            matches!(&sink[0], Event::Recv { peer: 1, header, .. } if header == b"reply"),
            "{}",
            short(&sink[0])
        );
        finalize(&mut ex, t);
        busy.join().unwrap();
    });
}

/// A hello proves nothing: one from a process that claims rank 1 and then holds its
/// connection without a proof must not keep rank 0 from connecting to the real rank 1
/// (it would for its whole `addr_timeout`, 20 s here, if the hello claimed the slot).
#[test]
fn an_unproven_hello_does_not_hold_the_peers_slot() {
    let kv = kv(2);
    let job = "unproven";
    let cfg = || TcpConfig {
        addr_timeout: Duration::from_secs(20),
        ..od_cfg()
    };
    thread::scope(|s| {
        let (acked_tx, acked_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let kv_f = &kv;
        let impostor = s.spawn(move || {
            let mut ex = Ex::new(kv_f);
            let addrs = record_addrs(&ex.get(0, "tcp-addr-0").unwrap());
            let mut sock = TcpStream::connect(addrs[0]).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            sock.write_all(&hello(1, 0, 2, job)).unwrap();
            let mut a = [0u8; 80];
            sock.read_exact(&mut a).unwrap();
            acked_tx.send(()).unwrap();
            // Hold the connection, no proof, until the real ranks are done.
            let _ = done_rx.recv_timeout(Duration::from_secs(30));
        });
        let kv_ref = &kv;
        let real1 = s.spawn(move || {
            let mut ex = Ex::new(kv_ref);
            let mut t = TcpTransport::new(1, 2, job, SECRET, cfg(), &mut ex, &[0]).unwrap();
            let mut sink = Vec::new();
            pump_until(&mut t, &mut sink, Duration::from_secs(20), |_, s| {
                !s.is_empty()
            });
            assert!(matches!(&sink[0], Event::Recv { peer: 0, header, .. } if header == b"to 1"));
            finalize(&mut ex, t);
        });
        let mut ex = Ex::new(&kv);
        let mut t = TcpTransport::new(0, 2, job, SECRET, cfg(), &mut ex, &[1]).unwrap();
        let mut sink = Vec::new();
        // Take the impostor's hello in (it gets its ack), then send to rank 1.
        let end = Instant::now() + Duration::from_secs(10);
        while acked_rx.try_recv().is_err() {
            assert!(Instant::now() < end, "the impostor got no ack");
            pump(&mut t, &mut sink);
        }
        let started = Instant::now();
        send_blocking(&mut t, 1, b"to 1", b"", &mut sink);
        pump_until(&mut t, &mut sink, Duration::from_secs(20), |t, _| {
            t.connected_peers() == vec![1] && t.is_flushed()
        });
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "rank 0 reached rank 1 only after {:?}",
            started.elapsed()
        );
        assert!(
            sink.is_empty(),
            "{:?}",
            sink.iter().map(short).collect::<Vec<_>>()
        );
        finalize(&mut ex, t);
        real1.join().unwrap();
        done_tx.send(()).unwrap();
        impostor.join().unwrap();
    });
}

/// With its one peer connected, a 2-rank transport reads that connection directly and
/// no longer watches its listener; a connection someone else leaves waiting there must
/// not make `wait_activity` return at once (a busy loop in a blocking wait).
#[test]
fn a_connection_left_at_the_listener_does_not_wake_a_connected_pair() {
    let kv = kv(2);
    thread::scope(|s| {
        let kv_ref = &kv;
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let rank1 = s.spawn(move || {
            let mut ex = Ex::new(kv_ref);
            let mut t = TcpTransport::new(1, 2, "quiet", SECRET, od_cfg(), &mut ex, &[0]).unwrap();
            send_blocking(&mut t, 0, b"hi", b"", &mut Vec::new());
            pump_until(&mut t, &mut Vec::new(), Duration::from_secs(10), |t, _| {
                t.is_flushed() && !t.connected_peers().is_empty()
            });
            let _ = go_rx.recv_timeout(Duration::from_secs(30));
            finalize(&mut ex, t);
        });
        let mut ex = Ex::new(&kv);
        let mut t = TcpTransport::new(0, 2, "quiet", SECRET, od_cfg(), &mut ex, &[1]).unwrap();
        let mut sink = Vec::new();
        pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
            !s.is_empty()
        });
        // Someone connects to rank 0's listener and says nothing.
        let addr = t.local_addrs()[0];
        let _lurker = TcpStream::connect(addr).unwrap();
        for _ in 0..3 {
            pump(&mut t, &mut sink);
        }
        // Ten waits of 50 ms with nothing to do must sleep (a lower bound on time is
        // not disturbed by a loaded machine).
        let started = Instant::now();
        for _ in 0..10 {
            t.wait_activity(Duration::from_millis(50));
        }
        let slept = started.elapsed();
        assert!(
            slept >= Duration::from_millis(400),
            "wait_activity returned at once: {slept:?}"
        );
        go_tx.send(()).unwrap();
        finalize(&mut ex, t);
        rank1.join().unwrap();
    });
}

/// A [`Lookup`] over the test bootstrap that records the keys it was asked for.
struct CountingLookup {
    ex: Ex,
    keys: Arc<Mutex<Vec<String>>>,
}

impl Lookup for CountingLookup {
    fn get(&mut self, owner: u32, key: &str) -> Result<Vec<u8>, String> {
        self.keys.lock().unwrap().push(key.to_string());
        // The owner named is the rank that put the key (PMIx reads it from that rank).
        if key != format!("tcp-addr-{owner}") {
            return Err(format!("{key:?} read as rank {owner}'s"));
        }
        self.ex.get(owner, key)
    }
}

/// Issue 21: with a lookup, a rank reads only the addresses of the peers it sends to,
/// at the first frame, and holds connections only to the ranks it talks with: in a
/// ring of 6, its two neighbours.
#[test]
fn ring_on_demand_reads_one_address_and_connects_only_neighbours() {
    let n = 6u32;
    let kv = kv(n as usize);
    thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|me| {
                let kv = &kv;
                s.spawn(move || {
                    let keys = Arc::new(Mutex::new(Vec::new()));
                    let lookup = CountingLookup {
                        ex: Ex::new(kv),
                        keys: keys.clone(),
                    };
                    let mut ex = Ex::new(kv);
                    let mut t = TcpTransport::new_with_lookup(
                        me,
                        n,
                        "ring",
                        SECRET,
                        od_cfg(),
                        &mut ex,
                        &all_but(me, n),
                        Some(Box::new(lookup)),
                    )
                    .unwrap();
                    assert!(keys.lock().unwrap().is_empty(), "no address read at init");
                    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
                    let mut sink = Vec::new();
                    for k in 0..3 {
                        let p = pattern(me, right, k, 1000);
                        send_blocking(&mut t, right, &header(me, right, k), &p, &mut sink);
                    }
                    pump_until(&mut t, &mut sink, Duration::from_secs(20), |t, s| {
                        s.len() >= 3 && t.is_flushed()
                    });
                    for (k, e) in sink.iter().enumerate() {
                        match e {
                            Event::Recv {
                                peer,
                                header: h,
                                payload,
                            } => {
                                assert_eq!(*peer, left);
                                assert_eq!(h, &header(left, me, k));
                                assert!(payload == &pattern(left, me, k, 1000));
                            }
                            other => panic!("rank {me}: {}", short(other)),
                        }
                    }
                    let mut want = vec![left, right];
                    want.sort();
                    assert_eq!(t.connected_peers(), want);
                    assert_eq!(*keys.lock().unwrap(), vec![format!("tcp-addr-{right}")]);
                    finalize(&mut ex, t);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

/// On demand, a peer none of whose addresses works fails at its first frame, with the
/// same error as at init (every address tried with its error, and the settings), as a
/// `PeerFailed` event within the bounds. (A silent address is not among them: on demand,
/// a connection that is up but unanswered is waited for, see the next test.)
#[test]
fn on_demand_peer_without_a_working_address_fails_with_a_useful_error() {
    let kv = kv(2);
    let cfg = || TcpConfig {
        addr_timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_secs(3),
        ..od_cfg()
    };
    thread::scope(|s| {
        let d = decoys();
        // Without the silent listener (`decoys()`'s second address).
        let answering: Vec<SocketAddr> = d
            .addrs
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != 1)
            .map(|(_, a)| *a)
            .collect();
        let (kv, addrs) = (&kv, answering.clone());
        let rank1 = s.spawn(move || {
            let mut ex = Ex::new(kv);
            ex.rewrite = Some(with_decoys(&addrs, false));
            let mut t = TcpTransport::new(1, 2, "od-fail", SECRET, cfg(), &mut ex, &[0]).unwrap();
            let started = Instant::now();
            assert_eq!(t.send(0, b"h", b"p"), Ok(SendOutcome::Sent));
            let mut sink = Vec::new();
            pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
                !s.is_empty()
            });
            let elapsed = started.elapsed();
            let reason = match &sink[0] {
                Event::PeerFailed {
                    peer: 0,
                    error: TransportError::Connect { reason, .. },
                } => reason.clone(),
                other => panic!("{}", short(other)),
            };
            eprintln!("rank 1 after {elapsed:?}: {reason}");
            assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
            for a in &answering {
                assert!(reason.contains(&a.to_string()), "{a} missing: {reason}");
            }
            for needle in [
                "refused",
                "not a rankwire",
                "another job",
                "itself",
                "RANKWIRE_TCP_IF",
            ] {
                assert!(reason.contains(needle), "{needle:?} missing: {reason}");
            }
            // Later sends say the same, and nothing is left to flush.
            assert!(t.send(0, b"h", b"p").is_err());
            assert!(t.is_flushed());
            finalize(&mut ex, t);
        });
        let mut ex = Ex::new(kv);
        let t = TcpTransport::new(0, 2, "od-fail", SECRET, cfg(), &mut ex, &[1]).unwrap();
        finalize(&mut ex, t);
        rank1.join().unwrap();
    });
}

#[test]
fn busy_back_pressure_then_everything_arrives() {
    const FRAME: usize = 256 * 1024;
    let cfg = |_| TcpConfig {
        send_queue_high_water_bytes: 1 << 20,
        ..lo_cfg()
    };
    let (tx, rx) = mpsc::channel::<usize>();
    let rx = Mutex::new(rx);
    run_ranks(2, "busy", cfg, |me, ex, t| {
        let mut t = t.unwrap();
        let mut sink = Vec::new();
        if me == 0 {
            // The receiver does not poll: fill until Busy.
            let mut k = 0;
            loop {
                let p = pattern(0, 1, k, FRAME);
                match t.send(1, &header(0, 1, k), &p).unwrap() {
                    SendOutcome::Sent => k += 1,
                    SendOutcome::Busy => break,
                }
                assert!(k < 4096, "never Busy after {} MiB", (k * FRAME) >> 20);
                t.poll(&mut sink);
            }
            assert!(!t.is_flushed());
            // Busy took nothing: frame k is sent again below, and the receiver checks
            // that every index arrives exactly once, in order.
            eprintln!("Busy after {k} frames of {FRAME} bytes");
            let total = k + 20;
            tx.send(total).unwrap();
            for k in k..total {
                send_blocking(
                    &mut t,
                    1,
                    &header(0, 1, k),
                    &pattern(0, 1, k, FRAME),
                    &mut sink,
                );
            }
            finalize(ex, t);
        } else {
            let total = rx
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(30))
                .unwrap();
            pump_until(&mut t, &mut sink, Duration::from_secs(30), |_, s| {
                s.len() >= total
            });
            for (k, e) in sink.drain(..).enumerate() {
                match e {
                    Event::Recv {
                        peer: 0,
                        header: h,
                        payload,
                    } => {
                        assert_eq!(h, header(0, 1, k));
                        assert!(payload == pattern(0, 1, k, FRAME));
                    }
                    other => panic!("{}", short(&other)),
                }
            }
            finalize(ex, t);
        }
    });
}

#[test]
fn oversized_send_is_refused_locally() {
    run_ranks(
        2,
        "oversized-send",
        |_| lo_cfg(),
        |_, ex, t| {
            let mut t = t.unwrap();
            let other = 1 - t.rank();
            assert!(matches!(
                t.send(other, &[0; 4097], b""),
                Err(TransportError::Unsupported { .. })
            ));
            assert!(matches!(
                t.send(other, b"", &vec![0; (4 << 20) + 1]),
                Err(TransportError::Unsupported { .. })
            ));
            assert!(matches!(
                t.send(7, b"", b""),
                Err(TransportError::NoSuchPeer { peer: 7, .. })
            ));
            let caps = t.caps().clone();
            assert_eq!(caps.name, "tcp");
            assert!(caps.cuda.is_none() && caps.cuda_managed.is_none());
            finalize(ex, t);
        },
    );
}

fn loopback_family(family: Family, job: &str) {
    let cfg = |_| TcpConfig { family, ..lo_cfg() };
    run_ranks(2, job, cfg, |me, ex, t| {
        let mut t = t.unwrap();
        assert!(!t.local_addrs().is_empty());
        for a in t.local_addrs() {
            assert!(a.ip().is_loopback(), "{a}");
            assert_eq!(a.is_ipv6(), family == Family::Ipv6, "{a}");
        }
        let other = 1 - me;
        send_blocking(&mut t, other, b"fam", &[me as u8; 70_000], &mut Vec::new());
        let mut sink = Vec::new();
        pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
            !s.is_empty()
        });
        assert!(
            matches!(&sink[0], Event::Recv { peer, payload, .. } if *peer == other && payload.len() == 70_000 && payload[0] == other as u8)
        );
        finalize(ex, t);
    });
}

#[test]
fn ipv4_loopback() {
    loopback_family(Family::Ipv4, "v4");
}

#[test]
fn ipv6_loopback() {
    if TcpListener::bind("[::1]:0").is_err() {
        println!("SKIP ipv6_loopback: ::1 is not configured on this machine");
        return;
    }
    loopback_family(Family::Ipv6, "v6");
}

// ---------------------------------------------------------------------------------------
// Sanity numbers (printed, never asserted). `RANKWIRE_TCP_BENCH_SCALE=10` runs longer.

fn scale() -> usize {
    std::env::var("RANKWIRE_TCP_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// One-way latency (half round trip) of a ping-pong of `len`-byte payloads; spinning.
fn ping_pong(t: &mut TcpTransport, me: u32, len: usize, iters: usize) -> Option<Vec<f64>> {
    let other = 1 - me;
    let buf = vec![3u8; len];
    let mut sink = Vec::with_capacity(4);
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        if me == 0 {
            send_blocking(t, other, b"p", &buf, &mut sink);
        }
        while sink.is_empty() {
            t.poll(&mut sink);
        }
        let e = sink.pop().unwrap();
        assert!(matches!(e, Event::Recv { .. }), "{}", short(&e));
        if me == 1 {
            send_blocking(t, other, b"p", &buf, &mut sink);
        }
        samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    (me == 0).then_some(samples)
}

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2])
}

#[test]
fn latency_and_throughput_sanity() {
    let sc = scale();
    let out = run_ranks(
        2,
        "bench",
        |_| lo_cfg(),
        |me, ex, t| {
            let mut t = t.unwrap();
            let mut lines = Vec::new();
            let mut sink = Vec::new();
            // Idle poll cost (one epoll_wait with timeout 0).
            if me == 0 {
                let n = 100_000 * sc;
                let t0 = Instant::now();
                for _ in 0..n {
                    t.poll(&mut sink);
                }
                lines.push(format!(
                    "# idle poll(): {:.3} us",
                    t0.elapsed().as_secs_f64() * 1e6 / n as f64
                ));
                lines.push("# Size   Latency min (us)   Latency median (us)".into());
            }
            ex.fence().unwrap();
            for len in [
                0usize,
                8,
                1024,
                16 * 1024,
                64 * 1024,
                256 * 1024,
                1 << 20,
                4 << 20,
            ] {
                let iters = if len >= 1 << 20 { 50 * sc } else { 2000 * sc };
                let _ = ping_pong(&mut t, me, len, 20); // warm up
                if let Some(s) = ping_pong(&mut t, me, len, iters) {
                    let (min, med) = stats(s);
                    lines.push(format!("{len:<8} {min:>12.2} {med:>18.2}"));
                }
            }
            // Streaming throughput 0 → 1 in 4 MiB frames.
            let frame = vec![5u8; 4 << 20];
            let count = 64 * sc;
            ex.fence().unwrap();
            let t0 = Instant::now();
            if me == 0 {
                for _ in 0..count {
                    send_blocking(&mut t, 1, b"bw", &frame, &mut sink);
                }
                pump_until(&mut t, &mut sink, Duration::from_secs(60), |_, s| {
                    !s.is_empty()
                });
                let secs = t0.elapsed().as_secs_f64();
                lines.push(format!(
                    "# stream {count} x 4 MiB: {:.2} GB/s ({:.1} ms)",
                    (count * frame.len()) as f64 / secs / 1e9,
                    secs * 1e3
                ));
            } else {
                let mut got = 0;
                while got < count {
                    if !t.poll(&mut sink) {
                        continue;
                    }
                    got += sink.drain(..).count();
                }
                send_blocking(&mut t, 0, b"done", b"", &mut sink);
            }
            finalize(ex, t);
            lines
        },
    );
    println!("{}", out[0].join("\n"));
}

#[test]
fn many_frames_in_flight_keep_order() {
    // Small frames in large numbers, both ways at once, with random-ish sizes.
    run_ranks(
        2,
        "order",
        |_| lo_cfg(),
        |me, ex, t| {
            let mut t = t.unwrap();
            let other = 1 - me;
            let mut sink = Vec::new();
            let n = 20_000;
            let sizes: Vec<usize> = (0..n).map(|k| (k * 7919) % 70_000).collect();
            let mut recv: VecDeque<Event> = VecDeque::new();
            for (k, &len) in sizes.iter().enumerate() {
                send_blocking(
                    &mut t,
                    other,
                    &header(me, other, k),
                    &pattern(me, other, k, len),
                    &mut sink,
                );
                recv.extend(sink.drain(..));
            }
            pump_until(&mut t, &mut sink, Duration::from_secs(60), |t, s| {
                recv.len() + s.len() >= n && t.is_flushed()
            });
            recv.extend(sink.drain(..));
            for (k, e) in recv.into_iter().enumerate() {
                match e {
                    Event::Recv {
                        header: h, payload, ..
                    } => {
                        assert_eq!(h, header(other, me, k));
                        assert!(payload == pattern(other, me, k, sizes[k]));
                    }
                    other => panic!("{}", short(&other)),
                }
            }
            finalize(ex, t);
        },
    );
}

/// Rank 1 (raw) sends one valid frame, then `cut` (a frame cut short), then closes.
/// Returns rank 0's events.
fn rank0_vs_closing_rank1(job: &str, cut: Vec<u8>) -> Vec<Event> {
    let kv = kv(2);
    thread::scope(|s| {
        let kv = &kv;
        let raw = s.spawn(move || {
            let mut ex = Ex::new(kv);
            let mut sock = raw_rank1(&mut ex, job);
            let mut frame = envelope(2, 0, 3);
            frame.extend_from_slice(b"okabc");
            sock.write_all(&frame).unwrap();
            sock.write_all(&cut).unwrap();
            drop(sock); // closes mid-frame
        });
        let mut ex = Ex::new(kv);
        let mut t = TcpTransport::new(0, 2, job, SECRET, lo_cfg(), &mut ex, &[1]).unwrap();
        let mut sink = Vec::new();
        let started = Instant::now();
        pump_until(&mut t, &mut sink, Duration::from_secs(10), |_, s| {
            s.iter().any(|e| matches!(e, Event::PeerFailed { .. }))
        });
        assert!(started.elapsed() < Duration::from_secs(5));
        raw.join().unwrap();
        sink
    })
}

#[test]
fn peer_closing_mid_frame_is_lost_with_the_byte_counts() {
    // Payload cut: 10 of 1000 bytes arrive (a small frame is buffered whole; large ones
    // report "in the middle of a frame (n of m payload bytes)").
    let mut cut = envelope(2, 0, 1000);
    cut.extend_from_slice(b"hd");
    cut.extend_from_slice(&[7u8; 10]);
    let ev = rank0_vs_closing_rank1("cut-payload", cut);
    assert_eq!(
        ev.len(),
        2,
        "{:?}",
        ev.iter().map(short).collect::<Vec<_>>()
    );
    assert!(matches!(&ev[0], Event::Recv { peer: 1, header, .. } if header == b"ok"));
    match &ev[1] {
        Event::PeerFailed {
            peer: 1,
            error: TransportError::PeerLost {
                peer: 1, reason, ..
            },
        } => assert!(
            // 16-byte envelope + 2 header bytes + 10 payload bytes were buffered.
            reason.contains("closed by peer with 28 bytes of an unfinished frame"),
            "{reason}"
        ),
        other => panic!("{}", short(other)),
    }
    // Envelope cut: 7 of its 16 bytes arrive. The peer is named; nothing is delivered.
    let ev = rank0_vs_closing_rank1("cut-envelope", envelope(2, 0, 1000)[..7].to_vec());
    assert_eq!(
        ev.len(),
        2,
        "{:?}",
        ev.iter().map(short).collect::<Vec<_>>()
    );
    assert!(
        matches!(
            &ev[1],
            Event::PeerFailed {
                peer: 1,
                error: TransportError::PeerLost { peer: 1, .. }
                    | TransportError::Malformed { peer: 1, .. }
            }
        ),
        "{}",
        short(&ev[1])
    );
    eprintln!("envelope cut reported as: {}", short(&ev[1]));
    // A large payload cut after 100,000 of 1,000,000 bytes: nothing beyond the frame's
    // declared size is allocated, and the report gives both counts.
    let mut cut = envelope(2, 0, 1_000_000);
    cut.extend_from_slice(b"hd");
    cut.extend_from_slice(&vec![7u8; 100_000]);
    let ev = rank0_vs_closing_rank1("cut-large", cut);
    match &ev[1] {
        Event::PeerFailed {
            peer: 1,
            error: TransportError::PeerLost {
                peer: 1, reason, ..
            },
        } => assert!(
            reason.contains("of 1000000 payload bytes") || reason.contains("unfinished frame"),
            "{reason}"
        ),
        other => panic!("{}", short(other)),
    }
    eprintln!("large cut reported as: {}", short(&ev[1]));
}
