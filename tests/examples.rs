//! The example programs run end to end through rwrun at several rank counts, each with
//! a timeout; heat2d's result must equal the 1-rank run exactly.

use std::time::Duration;

use rankwire_tests::{binary, rwrun};

fn example(name: &str) -> String {
    binary(&format!("examples/{name}"))
        .to_string_lossy()
        .into_owned()
}

fn result_lines(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("residual ") || l.starts_with("checksum "))
        .map(str::to_string)
        .collect()
}

#[test]
fn heat2d_equals_serial_at_1_to_4_ranks() {
    let args = ["200", "150", "100"];
    // Serial: the program alone, no launcher (a singleton world).
    let serial = std::process::Command::new(example("heat2d"))
        .args(args)
        .output()
        .expect("run heat2d serially");
    assert!(serial.status.success());
    let want = result_lines(&String::from_utf8_lossy(&serial.stdout));
    assert_eq!(want.len(), 2, "serial output lacks residual/checksum");
    for n in 1..=4 {
        let mut v = vec!["-n".to_string(), n.to_string(), example("heat2d")];
        v.extend(args.iter().map(|s| s.to_string()));
        let out = rwrun(v).timeout(Duration::from_secs(120)).run();
        out.assert_ok();
        assert_eq!(result_lines(&out.stdout), want, "heat2d at {n} ranks");
    }
}

#[test]
fn heat2d_and_ring_at_8_ranks_on_2_cores() {
    let out = rwrun(["-n", "8", &example("heat2d"), "64", "64", "50"])
        .timeout(Duration::from_secs(120))
        .run();
    out.assert_ok();
    let serial = std::process::Command::new(example("heat2d"))
        .args(["64", "64", "50"])
        .output()
        .expect("run heat2d serially");
    assert_eq!(
        result_lines(&out.stdout),
        result_lines(&String::from_utf8_lossy(&serial.stdout))
    );
    let out = rwrun(["-n", "8", &example("ring"), "50"])
        .timeout(Duration::from_secs(120))
        .run();
    out.assert_ok();
}

#[test]
fn ring_at_1_2_3_ranks() {
    for n in 1..=3 {
        let out = rwrun(["-n", &n.to_string(), &example("ring"), "20"])
            .timeout(Duration::from_secs(60))
            .run();
        out.assert_ok();
        let want = format!(
            "ring: {n} ranks, 20 laps, token {} OK",
            20 * n * (n + 1) / 2
        );
        assert!(out.stdout.contains(&want), "{}", out.stdout);
    }
}

#[test]
fn ping_pong_at_2_and_3_ranks() {
    for n in [2, 3] {
        let out = rwrun(["-n", &n.to_string(), &example("ping_pong"), "3"])
            .timeout(Duration::from_secs(60))
            .run();
        out.assert_ok();
        assert!(out.stdout.contains("ping_pong: OK"), "{}", out.stdout);
    }
}

#[test]
fn bench_prints_osu_tables() {
    let bench = binary("rankwire-bench").to_string_lossy().into_owned();
    for (mode, header) in [
        ("latency", "# Size  Latency (us)"),
        ("bw", "# Size  Bandwidth (MB/s)"),
    ] {
        let out = rwrun([
            "-n",
            "2",
            &bench,
            mode,
            "--max-size",
            "65536",
            "--iters",
            "50",
            "--warmup",
            "5",
        ])
        .timeout(Duration::from_secs(120))
        .run();
        out.assert_ok();
        assert!(out.stdout.contains(header), "{}", out.stdout);
        let rows: Vec<&str> = out.stdout.lines().filter(|l| !l.starts_with('#')).collect();
        let first = if mode == "latency" { "0" } else { "1" };
        assert!(
            rows.first()
                .is_some_and(|r| r.split_whitespace().next() == Some(first))
        );
        assert!(
            rows.last()
                .is_some_and(|r| r.split_whitespace().next() == Some("65536"))
        );
        for r in rows {
            let v: f64 = r.split_whitespace().nth(1).unwrap().parse().unwrap();
            assert!(v.is_finite() && v > 0.0, "row {r}");
        }
    }
}

#[test]
fn bench_drain_prints_both_sides_per_message_and_flags_a_window_that_did_not_fit() {
    let bench = binary("rankwire-bench").to_string_lossy().into_owned();
    // Rows of `rankwire-bench drain` for `sizes` (min, max) with `iters`, rank 1
    // sleeping 20 ms per window: size and the six columns of each row.
    let drain = |min: &str, max: &str, iters: &str| -> Vec<Vec<String>> {
        let out = rwrun([
            "-n",
            "2",
            &bench,
            "drain",
            "--min-size",
            min,
            "--max-size",
            max,
            "--iters",
            iters,
            "--warmup",
            "10",
            "--drain-sleep-us",
            "20000",
        ])
        .timeout(Duration::from_secs(120))
        .run();
        out.assert_ok();
        assert!(
            out.stdout
                .contains("# Size   send post  send wait  recv post  recv wait  check"),
            "{}",
            out.stdout
        );
        let rows: Vec<Vec<String>> = out
            .stdout
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect();
        for r in &rows {
            assert_eq!(r.len(), 6, "row {r:?}");
            for v in &r[1..5] {
                let x: f64 = v.parse().unwrap();
                assert!(x.is_finite() && x >= 0.0, "row {r:?}");
            }
        }
        rows
    };
    // 1-64 B fit the shared-memory ring: the sends never wait for the receiver. 30
    // windows, so that even a preempted sender stays far below half the sleep on
    // average (the flag's threshold: 10 ms per window).
    let small = drain("1", "64", "300");
    assert_eq!(small.len(), 7, "1 B .. 64 B: {small:?}");
    for r in &small {
        assert_eq!(r[5], "ok", "a 1-64 B window fits: {r:?}");
    }
    // 64 KiB goes by rendezvous: the sends wait for the sleeping receiver, and the row
    // must say so.
    let big = drain("65536", "65536", "100");
    assert_eq!(big.len(), 1, "{big:?}");
    assert_eq!(
        (big[0][0].as_str(), big[0][5].as_str()),
        ("65536", "waited"),
        "{big:?}"
    );
}

#[test]
fn bench_errors_reach_the_user_under_rwrun() {
    let bench = binary("rankwire-bench").to_string_lossy().into_owned();
    // After init (the Universe's drop used to end the job before the message printed).
    let out = rwrun(["-n", "1", &bench, "bw"])
        .timeout(Duration::from_secs(60))
        .run();
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr
            .contains("point-to-point modes need at least 2 ranks"),
        "{}",
        out.stderr
    );
    // Before init.
    for args in [
        ["drain", "-d", "cuda"],
        ["drain", "--recv-buffers", "single"],
    ] {
        let mut a = vec!["-n", "2", bench.as_str()];
        a.extend(args);
        let out = rwrun(a).timeout(Duration::from_secs(60)).run();
        assert_ne!(out.code(), 0, "{args:?}");
        assert!(out.stderr.contains("drain "), "{args:?}: {}", out.stderr);
    }
    let out = rwrun(["-n", "2", &bench, "bw", "--window", "0"])
        .timeout(Duration::from_secs(60))
        .run();
    assert_ne!(out.code(), 0);
    assert!(out.stderr.contains("--window"), "{}", out.stderr);
}
