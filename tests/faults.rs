//! Fault injection through rwrun (issue 10): ranks SIGKILLed during eager traffic, during
//! a rendezvous and inside a collective; rwrun SIGKILLed while ranks wait inside
//! rankwire; the progress watchdog on a hang; and the soak test. Each run has a hard
//! timeout and checks (tests/support) that no process or /dev/shm entry of the job is
//! left. The README's fault table is made from these tests and the ones it names in
//! tests/p2p.rs, tests/coll.rs, transports/tests/tcp.rs and mpirun/tests/launcher.rs.

use std::time::Duration;

use rankwire_tests::{binary, rwrun};

fn app() -> String {
    binary("rw-faultapp").to_string_lossy().into_owned()
}

/// Transports the kill scenarios run over.
const TRANSPORTS: &[(&str, &[(&str, &str)])] = &[
    ("shm+cma", &[]),
    (
        "tcp",
        &[("RANKWIRE_TRANSPORTS", "tcp"), ("RANKWIRE_CMA", "0")],
    ),
];

/// Rank `victim` of 3 SIGKILLs itself inside operation `mode`: the job must end with
/// 137 within 10 s, rwrun must name the rank and the signal, and any survivor that
/// reported an error before rwrun stopped it must blame the dead rank's connection.
fn killed_rank(mode: &str) {
    killed_rank_with(mode, &[]);
}

/// [`killed_rank`] with `extra` set in the ranks' environment.
fn killed_rank_with(mode: &str, extra: &[(&str, &str)]) {
    let victim = 1;
    for (name, envs) in TRANSPORTS {
        let mut run = rwrun(["-n", "3", &app(), "kill", mode, &victim.to_string(), "20"])
            .timeout(Duration::from_secs(60));
        for (k, v) in envs.iter().chain(extra) {
            run = run.env(k, v);
        }
        let out = run.run();
        assert_eq!(out.code(), 137, "{mode}/{name}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("rank {victim}"))
                && out.stderr.contains("killed by signal 9 (SIGKILL)"),
            "{mode}/{name}: {}",
            out.stderr
        );
        // A survivor may see the victim's connection drop, or that of another survivor
        // that already failed because of the victim (a cascade): either way the error
        // is a connection error naming a rank that did fail, with a remedy.
        let failed: Vec<(usize, usize)> = out
            .stderr
            .lines()
            .filter_map(|l| l.split_once("FAILED: rank ")?.1.split_once(": kill: "))
            .map(|(me, rest)| {
                let peer = rest
                    .strip_prefix("connection to rank ")
                    .and_then(|r| r.split(' ').next()?.parse().ok())
                    .unwrap_or_else(|| panic!("{mode}/{name}: not a connection error: {rest}"));
                assert!(rest.contains("fix:"), "{mode}/{name}: no remedy: {rest}");
                (me.parse().expect("rank number"), peer)
            })
            .collect();
        for &(me, peer) in &failed {
            assert!(
                me != victim
                    && me != peer
                    && (peer == victim || failed.iter().any(|f| f.0 == peer)),
                "{mode}/{name}: rank {me} blamed rank {peer}, which did not fail: {}",
                out.stderr
            );
        }
        assert!(
            out.elapsed < Duration::from_secs(10),
            "{mode}/{name}: took {:?}",
            out.elapsed
        );
        eprintln!(
            "{mode}/{name}: job ended in {:.2} s; survivors reporting an error: {}",
            out.elapsed.as_secs_f64(),
            out.stderr.lines().filter(|l| l.contains("FAILED")).count()
        );
    }
}

#[test]
fn rank_sigkilled_during_eager_traffic() {
    killed_rank("eager");
}

#[test]
fn rank_sigkilled_during_rendezvous() {
    killed_rank("rndv");
}

#[test]
fn rank_sigkilled_inside_a_collective() {
    killed_rank("coll");
}

/// The same inside a blocking 8-byte allreduce by the exchange algorithm
/// (coll/direct.rs, `exchange_with_all`: every survivor has a receive from the victim
/// posted).
#[test]
fn rank_sigkilled_inside_an_exchange_allreduce() {
    killed_rank_with("coll-small", &[("RANKWIRE_ALLREDUCE_ALGO", "exchange")]);
}

/// The same inside a blocking 4 MiB allreduce, which reads and writes the other ranks'
/// buffers by cross-memory attach (coll/single_copy.rs): a copy that finds the victim
/// gone reports the runtime's connection error for it, not a `cma` transport error.
#[test]
fn rank_sigkilled_inside_a_single_copy_allreduce() {
    killed_rank("coll-single-copy");
}

#[test]
fn rwrun_sigkilled_while_ranks_wait_in_rankwire() {
    // B015: ranks blocked in a receive must go when the launcher is SIGKILLed.
    let run = rwrun(["-n", "3", &app(), "block"])
        .env("RANKWIRE_WATCHDOG", "0")
        .spawn();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // Wait until all three ranks (and rwrun, its reaper) are up and blocked.
    while run.processes().len() < 4 {
        assert!(std::time::Instant::now() < deadline, "ranks never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let killed_at = std::time::Instant::now();
    // SAFETY: plain kill(2) on the rwrun process we started.
    unsafe { libc::kill(run.pid() as i32, libc::SIGKILL) };
    let gone_deadline = killed_at + Duration::from_secs(10);
    let mut left = run.processes();
    while !left.is_empty() && std::time::Instant::now() < gone_deadline {
        std::thread::sleep(Duration::from_millis(20));
        left = run.processes();
    }
    let took = killed_at.elapsed();
    let out = run.finish(Duration::from_secs(5));
    assert_eq!(out.code(), 137);
    assert!(
        left.is_empty(),
        "still running 10 s after SIGKILL: {left:?}"
    );
    eprintln!(
        "ranks gone {:.2} s after rwrun's SIGKILL",
        took.as_secs_f64()
    );
}

#[test]
fn watchdog_reports_pending_requests_and_ends_the_job() {
    let out = rwrun(["-n", "2", &app(), "hang"])
        .env("RANKWIRE_WATCHDOG", "1")
        .timeout(Duration::from_secs(30))
        .run();
    assert_eq!(out.code(), 124, "{}", out.stderr);
    let e = &out.stderr;
    assert!(
        e.contains("rankwire watchdog: rank 0: no request completed for 1.0 s")
            || e.contains("rankwire watchdog: rank 1: no request completed for 1.0 s"),
        "{e}"
    );
    // The pending receive is listed with its peer, tag, size and state.
    assert!(
        e.contains("rank 0:   recv #1 from rank 1 tag 5 (65536 bytes) posted")
            || e.contains("rank 1:   recv #1 from rank 0 tag 9 (65536 bytes) posted"),
        "{e}"
    );
    assert!(e.contains("fix:"), "{e}");
    assert!(e.contains("aborted the job with code 124"), "{e}");
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?}",
        out.elapsed
    );
}

#[test]
fn watchdog_is_off_by_default() {
    // Without RANKWIRE_WATCHDOG the hang lasts until rwrun's own --timeout.
    let out = rwrun(["--timeout", "3", "-n", "2", &app(), "hang"])
        .env("RANKWIRE_WATCHDOG", "0")
        .timeout(Duration::from_secs(30))
        .run();
    assert_eq!(out.code(), 124, "{}", out.stderr);
    assert!(!out.stderr.contains("rankwire watchdog"), "{}", out.stderr);
    assert!(out.elapsed >= Duration::from_secs(3));
}

#[test]
fn bad_watchdog_value_is_a_usage_error() {
    let out = rwrun(["-n", "1", &app(), "hang"])
        .env("RANKWIRE_WATCHDOG", "soon")
        .timeout(Duration::from_secs(30))
        .run();
    // Refused by rwrun before any rank starts.
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "usage: RANKWIRE_WATCHDOG=\"soon\" is not valid: expected a number of seconds, 0 for off"
        ),
        "{}",
        out.stderr
    );
}

/// Messages of the soak test in CI (`RANKWIRE_SOAK_MESSAGES` overrides, e.g. 1000000).
fn soak_messages() -> usize {
    std::env::var("RANKWIRE_SOAK_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

#[test]
fn soak_random_sizes_tags_and_wildcards() {
    // 4 ranks, sizes 0 B .. 160 KiB (above both eager limits: shm 32 KiB, TCP 64 KiB),
    // over shm with single copy and over TCP; every message checked.
    let n = soak_messages();
    for (name, envs) in TRANSPORTS {
        let mut run = rwrun(["-n", "4", &app(), "soak", &n.to_string(), "163840", "7"])
            .timeout(Duration::from_secs(300));
        for (k, v) in *envs {
            run = run.env(k, v);
        }
        let out = run.run();
        out.assert_ok();
        let mut total = 0;
        for line in out.stdout.lines().filter(|l| l.starts_with("soak: ")) {
            eprintln!("{name}: {line}");
            let num = |key: &str| -> u64 {
                line.split(key)
                    .nth(1)
                    .and_then(|r| {
                        r.trim_start()
                            .split(|c: char| !c.is_ascii_digit())
                            .next()?
                            .parse()
                            .ok()
                    })
                    .unwrap_or_else(|| panic!("no {key} in {line}"))
            };
            total += num("received ");
            let (half, end) = (num("half-way "), num("end "));
            // Flat memory: the second half of the run adds at most 16 MiB.
            assert!(
                end <= half + 16 * 1024,
                "{name}: memory grew from {half} KiB to {end} KiB: {line}"
            );
        }
        assert_eq!(total as usize, n / 4 * 4, "{name}: {}", out.stdout);
        eprintln!("{name}: {n} messages in {:.1} s", out.elapsed.as_secs_f64());
    }
}
