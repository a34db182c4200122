//! rw-rdmaapp: point-to-point checks for the RDMA transport (run under rwrun).
//!
//! `rw-rdmaapp <scenario>`; `RDMA_EXPECT=<transport>` makes every rank check that its
//! peers are reached by that transport ("rdma" in the Soft-RoCE VM, "tcp" on machines
//! without RDMA); `RDMA_EXPECT=nodes:K` (K ranks per node, in rank order) expects shared
//! memory inside a node and RDMA across nodes. Each scenario checks its own results and exits non-zero with a
//! message on a mismatch; the last line of each rank is `rank N: <scenario> OK` plus
//! the RDMA counters.
//!
//! - `sizes`: every size class (0 B, 1 B, around the eager limit and the slot payload,
//!   64 KiB, 1 MiB + 3, 5 MiB + 1) from every rank to its ring neighbour, blocking and
//!   nonblocking, content checked byte for byte.
//! - `reuse`: a send buffer is freed and a new one (of the same size, so usually at the
//!   same address) is sent: the receiver must see the new content, never the old pages.
//! - `repeat`: the same buffers sent 20 times (with `RANKWIRE_RDMA_LEAVE_PINNED=1` the
//!   registration cache must report hits).
//! - `allpairs`: every rank sends to every other rank at once (nonblocking, 8 B eager
//!   and 64 KiB rendezvous, 5 rounds), so with queue pairs on demand every pair wires up
//!   at the same moment from both sides; content checked.
//! - `busypeer`: rank 0 sends rank 1 a blocking 8 B and 4 KiB eager message while rank 1
//!   is not calling rankwire: it waits (up to 60 s) for the file `RDMA_SIGNAL_FILE`,
//!   which rank 0 creates only once both sends returned. So the sends must complete
//!   without the peer's answer (queued while the queue pair is made on demand, as at
//!   init); otherwise both ranks wait and rank 1 fails at its bound. Content checked.
//! - `idle`: three rounds in which rank 1 sleeps 0.6 s without calling rankwire, then
//!   sends rank 0 8 bytes; rank 0 waits for them in a blocking receive and prints the
//!   wall and CPU time (`getrusage`) of the three waits; with `RDMA_IDLE_MAX_CPU=F` it
//!   fails if the CPU time is above F × the wall time (a rank waiting on an RDMA peer
//!   must sleep on the completion channel, not spin). Three rounds, not one: a
//!   completion that lands while rank 0 is awake between two timed-out sleeps is found
//!   by polling, rightly, and its event is taken only at the next sleep; with one round
//!   that next sleep may never come (a few per cent of runs under TCG, where rank 0 is
//!   awake ~2 % of the time), so the wakeup check in `main` could fail on a correct
//!   runtime.
//! - `gdr` (with `RANKWIRE_GDR_STANDIN` set: the **test stand-in** for GPU memory, host
//!   memory the runtime treats as device memory, see `rankwire::gdr_standin`): every
//!   size class from every rank to its ring neighbour device→device, device→host and
//!   host→device, content checked; then one buffer pair sent 5 times (device
//!   registrations reused), then both buffers "freed and allocated again" at the same
//!   address with new content (the cache must drop the old registration by buffer id,
//!   never read old pages). `GDR_EXPECT=direct` checks the counters of the
//!   device-region path (RDMA READs into device memory, flushes, cache misses, hits,
//!   invalidations); `GDR_EXPECT=staged` (registration refused, or GPUDirect RDMA off)
//!   checks that no device region was registered and no flush ran.

use rankwire::{Communicator, Result};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let scenario = args.get(1).map(String::as_str).unwrap_or("");
    let universe = match rankwire::init() {
        Ok(u) => u,
        Err(e) => fail(&format!("init: {e}")),
    };
    let world = universe.world();
    if let Ok(expect) = std::env::var("RDMA_EXPECT") {
        // `nodes:K`: K ranks per node in rank order (rwrun --host fills nodes in order):
        // shared memory inside a node, RDMA across.
        let per_node = expect.strip_prefix("nodes:").map(|k| {
            k.parse::<usize>()
                .unwrap_or_else(|_| fail("RDMA_EXPECT=nodes:K"))
        });
        for peer in (0..world.size()).filter(|&p| p != world.rank()) {
            let got = universe.transport_to(peer).unwrap_or("?");
            let want = match per_node {
                Some(k) if peer / k == world.rank() / k => "shm",
                Some(_) => "rdma",
                None => expect.as_str(),
            };
            if got != want {
                fail(&format!(
                    "rank {} reaches rank {peer} by {got}, expected {want}",
                    world.rank()
                ));
            }
        }
    }
    let r = match scenario {
        "sizes" => sizes(&world),
        "reuse" => reuse(&world),
        "repeat" => repeat(&world),
        "allpairs" => allpairs(&world),
        "busypeer" => busypeer(&world),
        "gdr" => gdr(&universe, &world),
        "idle" => idle(&universe, &world),
        other => fail(&format!("unknown scenario {other:?}")),
    };
    if let Err(e) = r {
        fail(&format!("rank {}: {scenario}: {e}", world.rank()));
    }
    let stats = universe.rdma_stats();
    if let Some((reg, dp)) = stats {
        println!(
            "rank {}: rdma regcache hits={} misses={} evictions={} invalidations={} sends={} credit_stalls={} credit_writes={} reads={} queue_pairs={}",
            world.rank(),
            reg.hits,
            reg.misses,
            reg.evictions,
            reg.invalidations,
            dp.sends,
            dp.credit_stalls,
            dp.credit_writes,
            dp.reads,
            dp.queue_pairs
        );
        // Every rank reads its ring neighbour's rendezvous messages over RDMA, unless
        // that neighbour is on its node (RDMA_EXPECT=nodes:K: shared memory there).
        let all_rdma = std::env::var("RDMA_EXPECT").is_ok_and(|v| v == "rdma");
        if scenario == "sizes" && all_rdma && dp.reads == 0 {
            fail("rendezvous messages went over RDMA but no RDMA READ completed");
        }
        if scenario == "gdr" {
            check_gdr_counters(world.rank(), &dp);
        }
        if scenario == "idle" {
            println!("rank {}: rdma wakeups={}", world.rank(), dp.wakeups);
            if world.rank() == 0 && std::env::var("RDMA_IDLE_MAX_CPU").is_ok() && dp.wakeups == 0 {
                fail("the idle wait never slept on the completion channel (0 wakeups)");
            }
        }
        if scenario == "repeat"
            && std::env::var("RANKWIRE_RDMA_LEAVE_PINNED").is_ok_and(|v| v == "1")
            && reg.hits == 0
        {
            fail("leave-pinned registrations were never reused (0 cache hits)");
        }
    }
    if let Err(e) = universe.finalize() {
        fail(&format!("finalize: {e}"));
    }
    println!("rank {}: {scenario} OK", world.rank());
}

fn fail(msg: &str) -> ! {
    eprintln!("rw-rdmaapp: FAILED: {msg}");
    std::process::exit(1)
}

/// Message sizes in bytes: empty, tiny, around the RDMA eager limit (8 KiB) and the
/// slot payload (16 KiB), and rendezvous sizes up to several one-sided chunks.
const SIZES: &[usize] = &[
    0,
    1,
    7,
    4096,
    8191,
    8192,
    8193,
    16384,
    16385,
    65536,
    (1 << 20) + 3,
    (5 << 20) + 1,
];

fn pattern(len: usize, from: usize, salt: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + from * 7 + salt * 13) % 251) as u8)
        .collect()
}

fn busypeer(w: &Communicator) -> Result<()> {
    let signal =
        std::env::var("RDMA_SIGNAL_FILE").unwrap_or_else(|_| fail("RDMA_SIGNAL_FILE unset"));
    let lens = [8usize, 4096];
    match w.rank() {
        0 => {
            for (k, &len) in lens.iter().enumerate() {
                w.send(&pattern(len, 0, k), 1, k as i32)?;
            }
            std::fs::write(&signal, b"sent").unwrap_or_else(|e| fail(&format!("{signal}: {e}")));
        }
        1 => {
            let t0 = std::time::Instant::now();
            while !std::path::Path::new(&signal).exists() {
                if t0.elapsed() > std::time::Duration::from_secs(60) {
                    fail(
                        "rank 0's eager sends did not complete in 60 s while rank 1 was not calling rankwire",
                    );
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            for (k, &len) in lens.iter().enumerate() {
                let mut inb = vec![0u8; len];
                w.recv(&mut inb, 0, k as i32)?;
                if inb != pattern(len, 0, k) {
                    fail(&format!("rank 1: {len} B from rank 0 differs"));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn allpairs(w: &Communicator) -> Result<()> {
    let (me, n) = (w.rank(), w.size());
    for round in 0..5 {
        for (k, len) in [8usize, 65536].into_iter().enumerate() {
            let salt = round * 2 + k;
            let out = pattern(len, me, salt);
            let mut inbs: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; len]).collect();
            let mut recvs = Vec::new();
            for (p, buf) in inbs.iter_mut().enumerate() {
                if p != me {
                    recvs.push((p, w.irecv(buf, p, salt as i32)?));
                }
            }
            let mut sends = Vec::new();
            for p in (0..n).filter(|&p| p != me) {
                sends.push(w.isend(&out, p, salt as i32)?);
            }
            for s in sends {
                s.wait()?;
            }
            let mut from = Vec::new();
            for (p, r) in recvs {
                let st = r.wait()?;
                if st.len_bytes != len {
                    fail(&format!(
                        "rank {me}: round {round}: {len} B from rank {p}: status {st:?}"
                    ));
                }
                from.push(p);
            }
            for p in from {
                if inbs[p] != pattern(len, p, salt) {
                    fail(&format!(
                        "rank {me}: round {round}: {len} B from rank {p} differs"
                    ));
                }
            }
        }
    }
    Ok(())
}

fn sizes(w: &Communicator) -> Result<()> {
    let (me, n) = (w.rank(), w.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    for (k, &len) in SIZES.iter().enumerate() {
        let out = pattern(len, me, k);
        let mut inb = vec![0u8; len];
        // Nonblocking both ways (works for any ring size).
        let rr = w.irecv(&mut inb, prev, k as i32)?;
        let sr = w.isend(&out, next, k as i32)?;
        sr.wait()?;
        let st = rr.wait()?;
        if st.len_bytes != len || inb != pattern(len, prev, k) {
            fail(&format!(
                "rank {me}: size {len} from rank {prev}: status {st:?}, data differs at byte {:?}",
                inb.iter()
                    .zip(pattern(len, prev, k))
                    .position(|(a, b)| *a != b)
            ));
        }
    }
    // Blocking pairs (0<->1) of every size in both directions.
    if n >= 2 && me < 2 {
        let other = 1 - me;
        for (k, &len) in SIZES.iter().enumerate() {
            let out = pattern(len, me, k + 100);
            let mut inb = vec![0u8; len];
            if me == 0 {
                w.send(&out, other, 7)?;
                w.recv(&mut inb, other, 7)?;
            } else {
                w.recv(&mut inb, other, 7)?;
                w.send(&out, other, 7)?;
            }
            if inb != pattern(len, other, k + 100) {
                fail(&format!(
                    "rank {me}: blocking size {len} from {other}: data differs"
                ));
            }
        }
    }
    // A burst of small messages, more than the slots: exercises credits.
    if n >= 2 && me < 2 {
        let other = 1 - me;
        let count = 500;
        if me == 0 {
            for i in 0..count {
                w.send(&(i as u64).to_le_bytes(), other, 9)?;
            }
        } else {
            let mut b = [0u8; 8];
            for i in 0..count {
                w.recv(&mut b, other, 9)?;
                if u64::from_le_bytes(b) != i as u64 {
                    fail(&format!(
                        "burst message {i} arrived as {}",
                        u64::from_le_bytes(b)
                    ));
                }
            }
        }
    }
    w.barrier()
}

fn gdr(u: &rankwire::Universe, w: &Communicator) -> Result<()> {
    use rankwire::gdr_standin::StandInDeviceBuffer;
    if rankwire::gdr_standin::mode().is_none() {
        fail("gdr needs RANKWIRE_GDR_STANDIN (the test stand-in for GPU memory)");
    }
    let (me, n) = (w.rank(), w.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    // Device -> device, device -> host, host -> device.
    for (case, (send_dev, recv_dev)) in [(true, true), (true, false), (false, true)]
        .into_iter()
        .enumerate()
    {
        for (k, &len) in SIZES.iter().enumerate() {
            let tag = (case * 100 + k) as i32;
            let out = pattern(len, me, tag as usize);
            let want = pattern(len, prev, tag as usize);
            let mut sdev = StandInDeviceBuffer::new(len);
            sdev.as_mut_slice().copy_from_slice(&out);
            let mut rdev = StandInDeviceBuffer::new(len);
            let mut rhost = vec![0u8; len];
            let rreq = if recv_dev {
                w.irecv_device(&mut rdev, prev, tag)?
            } else {
                w.irecv(&mut rhost, prev, tag)?
            };
            if send_dev {
                w.send_device(&sdev, next, tag)?;
            } else {
                w.send(&out, next, tag)?;
            }
            let st = rreq.wait()?;
            let got = if recv_dev {
                rdev.as_slice()
            } else {
                &rhost[..]
            };
            if st.len_bytes != len || got != &want[..] {
                fail(&format!(
                    "case {case} (send device {send_dev}, receive device {recv_dev}), {len} B from rank {prev}: wrong data or length {}",
                    st.len_bytes
                ));
            }
        }
    }
    // One pair of buffers, five times: the device registrations are reused.
    let len = (2 << 20) + 5;
    let mut sdev = StandInDeviceBuffer::new(len);
    let mut rdev = StandInDeviceBuffer::new(len);
    let mut invalidations_before = None;
    for round in 0..7usize {
        if round == 5 {
            // "cudaFree + cudaMalloc" at the same address: new buffer ids. The stand-in
            // keeps the pages, so the data cannot show a stale registration: the counters
            // must (both buffers' registrations dropped by buffer id).
            w.barrier()?;
            invalidations_before = u.rdma_stats().map(|s| s.1.device_regcache);
            sdev.reallocate();
            rdev.reallocate();
        }
        sdev.as_mut_slice()
            .copy_from_slice(&pattern(len, me, 1000 + round));
        let rreq = w.irecv_device(&mut rdev, prev, 500 + round as i32)?;
        w.send_device(&sdev, next, 500 + round as i32)?;
        rreq.wait()?;
        if rdev.as_slice() != &pattern(len, prev, 1000 + round)[..] {
            fail(&format!(
                "round {round}: received stale or corrupt device data"
            ));
        }
    }
    w.barrier()?;
    // Where device regions are in use (GDR_EXPECT=direct), each rank's reallocated send
    // and receive buffers were registered again, their old regions invalidated.
    if std::env::var("GDR_EXPECT").as_deref() == Ok("direct")
        && let (Some(b), Some(a)) = (
            invalidations_before,
            u.rdma_stats().map(|s| s.1.device_regcache),
        )
    {
        let (inv, miss) = (a.invalidations - b.invalidations, a.misses - b.misses);
        println!("rank {me}: after reallocation: {inv} invalidations, {miss} new registrations");
        if inv < 2 || miss < 2 {
            fail(&format!(
                "reallocated buffers: {inv} invalidations and {miss} registrations, expected 2 each"
            ));
        }
    }
    Ok(())
}

/// The device-region counters after `gdr` (`GDR_EXPECT`).
fn check_gdr_counters(rank: usize, dp: &rankwire::RdmaStats) {
    let d = dp.device_regcache;
    println!(
        "rank {rank}: gdr device regcache hits={} misses={} evictions={} invalidations={} entries={} flushes={} reads={}",
        d.hits, d.misses, d.evictions, d.invalidations, d.entries, dp.gdr_flushes, dp.reads
    );
    match std::env::var("GDR_EXPECT").as_deref() {
        // Every rendezvous device receive is read into a registered region and flushed,
        // and registrations are reused (the 7 rounds on one buffer pair); invalidation
        // by buffer id is checked around the reallocation in `gdr`.
        Ok("direct") if dp.gdr_flushes == 0 || d.misses == 0 || d.hits == 0 => {
            fail(&format!(
                "device-region path not used: {d:?}, flushes {}",
                dp.gdr_flushes
            ));
        }
        Ok("staged") if dp.gdr_flushes != 0 || d.entries != 0 || d.hits != 0 => {
            fail(&format!(
                "staged run registered device memory: {d:?}, flushes {}",
                dp.gdr_flushes
            ));
        }
        _ => {}
    }
}

/// User and system CPU time of this process so far.
fn cpu_time() -> (std::time::Duration, std::time::Duration) {
    // SAFETY: getrusage writes the struct it is given.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let tv = |t: libc::timeval| {
        std::time::Duration::from_secs(t.tv_sec as u64)
            + std::time::Duration::from_micros(t.tv_usec as u64)
    };
    (tv(u.ru_utime), tv(u.ru_stime))
}

/// Rounds of the `idle` scenario (see the module docs for why more than one).
const IDLE_ROUNDS: u8 = 3;

fn idle(universe: &rankwire::Universe, w: &Communicator) -> Result<()> {
    let me = w.rank();
    // Both ranks have talked once (queue pairs made on demand are up).
    w.barrier()?;
    match me {
        0 => {
            let sleeps = || universe.rdma_stats().map_or(0, |(_, d)| d.sleeps);
            let (t0, c0, s0) = (std::time::Instant::now(), cpu_time(), sleeps());
            for round in 0..IDLE_ROUNDS {
                let mut b = [0u8; 8];
                w.recv(&mut b, 1, 9)?;
                if b != [7u8 + round; 8] {
                    fail("idle: wrong data");
                }
            }
            let (wall, c1, s1) = (t0.elapsed(), cpu_time(), sleeps());
            let (user, sys) = (c1.0 - c0.0, c1.1 - c0.1);
            let cpu = user + sys;
            println!(
                "rank 0: idle wait ({IDLE_ROUNDS} rounds): wall {} ms, cpu {} ms (user {} ms, system {} ms), {} sleeps",
                wall.as_millis(),
                cpu.as_millis(),
                user.as_millis(),
                sys.as_millis(),
                s1 - s0
            );
            if let Ok(f) = std::env::var("RDMA_IDLE_MAX_CPU") {
                let f: f64 = f.parse().unwrap_or_else(|_| fail("RDMA_IDLE_MAX_CPU"));
                if cpu.as_secs_f64() > f * wall.as_secs_f64() {
                    fail(&format!(
                        "waiting {} ms on an RDMA peer took {} ms of CPU (more than {f} of it)",
                        wall.as_millis(),
                        cpu.as_millis()
                    ));
                }
            }
        }
        1 => {
            for round in 0..IDLE_ROUNDS {
                std::thread::sleep(std::time::Duration::from_millis(600));
                w.send(&[7u8 + round; 8], 0, 9)?;
            }
        }
        _ => {}
    }
    w.barrier()
}

fn reuse(w: &Communicator) -> Result<()> {
    let (me, n) = (w.rank(), w.size());
    if n < 2 || me > 1 {
        return w.barrier();
    }
    let other = 1 - me;
    let len = 3 << 20;
    for round in 0..4usize {
        if me == 0 {
            // A fresh allocation each round; the allocator usually hands back the
            // address just freed, which is the case a stale registration would break.
            let buf = pattern(len, round, 77);
            println!("rank 0: round {round} send buffer at {:p}", buf.as_ptr());
            w.send(&buf, other, round as i32)?;
            drop(buf);
        } else {
            let mut inb = vec![0u8; len];
            w.recv(&mut inb, other, round as i32)?;
            if inb != pattern(len, round, 77) {
                fail(&format!("round {round}: received stale or corrupt data"));
            }
        }
    }
    w.barrier()
}

fn repeat(w: &Communicator) -> Result<()> {
    let (me, n) = (w.rank(), w.size());
    if n < 2 || me > 1 {
        return w.barrier();
    }
    let other = 1 - me;
    let len = 256 * 1024;
    let out = pattern(len, me, 5);
    let mut inb = vec![0u8; len];
    for i in 0..20 {
        if me == 0 {
            w.send(&out, other, i)?;
            w.recv(&mut inb, other, i)?;
        } else {
            w.recv(&mut inb, other, i)?;
            w.send(&out, other, i)?;
        }
        if inb != pattern(len, other, 5) {
            fail(&format!("repeat {i}: data differs"));
        }
    }
    w.barrier()
}
