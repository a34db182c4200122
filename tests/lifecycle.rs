//! A rank that ends without finalizing ends the job at once and says why (issue 17,
//! cases 1-3): an error returned from `main` with `?`, a panic, a rank leaving under
//! the watchdog. Every run goes through rwrun with a hard timeout; the support library
//! fails a run that leaves processes or /dev/shm entries behind.

use std::time::Duration;

use rankwire_tests::{RunOutput, binary, command, rwrun};

fn app() -> String {
    binary("rw-lifeapp").display().to_string()
}

/// Run `rw-lifeapp <scenario>` on 2 ranks with extra environment; a generous hard
/// timeout so that the old behaviour (120 s in the final fence) fails the time bound.
fn run(scenario: &str, env: &[(&str, &str)]) -> RunOutput {
    let mut r = rwrun(["-n", "2", &app(), scenario]).timeout(Duration::from_secs(60));
    for (k, v) in env {
        r = r.env(k, v);
    }
    r.run()
}

/// The job ended non-zero within `secs`, and rwrun's output names `rank` and `text`.
fn assert_fast_failure(out: &RunOutput, secs: u64, rank: u32, text: &[&str]) {
    let all = format!("--- stdout\n{}\n--- stderr\n{}", out.stdout, out.stderr);
    assert_ne!(out.code(), 0, "{all}");
    assert_ne!(out.code(), -1, "hard timeout: {all}");
    assert!(
        out.elapsed < Duration::from_secs(secs),
        "took {:?}: {all}",
        out.elapsed
    );
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with(&format!("rwrun: rank {rank} aborted the job")))
        .unwrap_or_else(|| panic!("no abort line for rank {rank}: {all}"));
    for t in text {
        assert!(line.contains(t), "{t:?} not in {line:?}: {all}");
    }
}

#[test]
fn error_out_of_main_ends_the_job_at_once() {
    // (a) rank 0 sends to rank 2 of 2 and returns the Err; rank 1 finalizes.
    let out = run("bad_dest", &[]);
    assert_fast_failure(
        &out,
        10,
        0,
        &["usage: rank 2 is out of range", "size 2", "; fix: "],
    );
    assert_eq!(out.code(), 1, "{}", out.stderr);
}

#[test]
fn error_out_of_main_while_the_peer_receives() {
    // (b) the peer blocks in a receive from the rank that left.
    let out = run("bad_dest_recv", &[]);
    assert_fast_failure(&out, 10, 0, &["usage: rank 2 is out of range", "; fix: "]);
}

#[test]
fn error_out_of_main_with_a_large_send_unreceived() {
    // (c) rank 0 blocks in an 8 MiB send nobody receives: rank 1 returns an error.
    let out = run("big_unreceived", &[]);
    assert_fast_failure(&out, 10, 1, &["usage: rank 2 is out of range"]);
}

/// An eager message never received (erroneous, but common) to a rank already in
/// finalize: its connection is made on demand, so the receiver must keep progressing
/// in the final fence; before, the sender's flush waited out its 60 s bound.
#[test]
fn an_eager_message_nobody_receives_does_not_hold_finalize() {
    for transports in ["tcp", "shm,tcp"] {
        let out = rwrun(["-n", "2", &app(), "eager_unreceived"])
            .env("RANKWIRE_TRANSPORTS", transports)
            .env("RANKWIRE_CMA", "0")
            .timeout(Duration::from_secs(90))
            .run();
        out.assert_ok();
        assert!(
            out.elapsed < Duration::from_secs(20),
            "{transports}: took {:?}: {}",
            out.elapsed,
            out.stderr
        );
    }
}

#[test]
fn panic_ends_the_job_at_once_with_its_message() {
    // (d)
    let out = run("panic", &[]);
    assert_fast_failure(&out, 10, 1, &["lifeapp panics on purpose", "lifeapp.rs"]);
    assert_eq!(out.code(), 101, "{}", out.stderr);
}

#[test]
fn watchdog_job_names_the_rank_that_left_and_its_error() {
    // (f) with the watchdog on, the job ends on rank 1's own error, not on rank 0's
    // watchdog (124, "a peer is not making the matching call").
    let out = run("usage_leaves", &[("RANKWIRE_WATCHDOG", "5")]);
    assert_fast_failure(&out, 5, 1, &["usage:", "tag -1", "; fix: "]);
    assert_ne!(out.code(), 124, "{}", out.stderr);
    assert!(!out.stderr.contains("watchdog"), "{}", out.stderr);
}

#[test]
fn a_collective_error_out_of_main_is_the_jobs_reason() {
    // Both ranks return the allreduce's length mismatch with `?`: rwrun's line names
    // that error (recorded as the rank's last one), not an internal one or none.
    let out = run("allreduce_mismatch", &[]);
    let all = format!("--- stdout\n{}\n--- stderr\n{}", out.stdout, out.stderr);
    assert_ne!(out.code(), 0, "{all}");
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("aborted the job"))
        .unwrap_or_else(|| panic!("no abort line: {all}"));
    assert!(
        line.contains("its last rankwire error: collective: allreduce: rank ")
            && line.contains(" bytes where "),
        "{all}"
    );
}

#[test]
fn watchdog_in_a_dropped_isend_prints_the_ranks_own_error() {
    // A large isend dropped by `?` waits in its drop; the watchdog ends the job and its
    // output must carry rank 0's own error (the root cause), not only blame a peer.
    let out = run("isend_dropped", &[("RANKWIRE_WATCHDOG", "3")]);
    let all = format!("--- stdout\n{}\n--- stderr\n{}", out.stdout, out.stderr);
    assert_eq!(out.code(), 124, "{all}");
    assert!(
        out.elapsed < Duration::from_secs(30),
        "{:?}: {all}",
        out.elapsed
    );
    assert!(
        out.stderr.contains(
            "rank 0: its last rankwire error, maybe why it is stuck: usage: rank 7 is out of range"
        ),
        "{all}"
    );
}

#[test]
fn clean_finalize_still_exits_zero() {
    // (g)
    let out = run("clean", &[]);
    out.assert_ok();
    assert!(!out.stderr.contains("aborted"), "{}", out.stderr);
}

#[test]
fn singleton_error_out_of_main_prints_display_and_exits_1() {
    // Without rwrun there is no job to abort: Rust prints the error (its Debug, which is
    // its Display: layer and fix) and the process exits 1 at once.
    let out = command(binary("rw-lifeapp"), ["bad_dest"])
        .timeout(Duration::from_secs(30))
        .run();
    assert_eq!(out.code(), 1, "{}", out.stderr);
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
    assert!(
        out.stderr
            .contains("Error: usage: rank 2 is out of range for a communicator of size 1; fix: "),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("Usage("), "{}", out.stderr);
}
