//! Point-to-point semantics across processes, through rwrun (scenarios B001–B004,
//! B013 of shared/notes/scenarios.md). Each run has a hard timeout and checks that no
//! process of the job is left.

use std::time::Duration;

use rankwire_tests::{binary, run_scenario, rwrun};

fn app() -> String {
    binary("rw-testapp").to_string_lossy().into_owned()
}

/// Transport configurations every point-to-point scenario runs under: the default
/// selection (shm inside the node, large messages by single copy), shm copying through
/// the rings (`RANKWIRE_CMA=0`), and TCP only (with and without single copy).
const CONFIGS: &[(&str, &[(&str, &str)])] = &[
    ("shm+cma", &[]),
    ("shm", &[("RANKWIRE_CMA", "0")]),
    (
        "tcp",
        &[("RANKWIRE_TRANSPORTS", "tcp"), ("RANKWIRE_CMA", "0")],
    ),
    ("tcp+cma", &[("RANKWIRE_TRANSPORTS", "tcp")]),
];

fn run_ok(n: usize, args: &[&str]) -> rankwire_tests::RunOutput {
    let app = app();
    let mut last = None;
    for (_name, envs) in CONFIGS {
        last = Some(run_scenario(&app, n, envs, args, Duration::from_secs(120)));
    }
    last.expect("at least one configuration")
}

#[test]
fn ordering_with_wildcards_between_specific_receives() {
    run_ok(2, &["ordering"]);
}

#[test]
fn any_source_window_non_overtaking_b003() {
    run_ok(4, &["window", "100"]);
}

#[test]
fn wait_all_over_a_window_completing_out_of_order_with_a_truncation() {
    run_ok(2, &["waitall_window", "20"]);
}

#[test]
fn request_sets_complete_windows_on_two_communicators_with_truncation_and_drop() {
    run_ok(2, &["request_set", "12"]);
}

#[test]
fn detached_windows_raw_on_world_requests_on_a_reversed_communicator() {
    run_ok(2, &["detached_window", "20"]);
}

#[test]
fn waiting_for_a_cancelled_receive_is_an_error_not_a_hang() {
    run_ok(2, &["cancelled_wait"]);
}

#[test]
fn cancel_pending_withdraws_an_unreceived_send_and_a_receive_another_thread_waits_for() {
    run_ok(2, &["cancel_pending"]);
}

#[test]
fn truncation_is_an_error_and_corrupts_nothing_b001() {
    run_ok(2, &["truncation"]);
}

/// A blocking send to self above the eager limit with no receive posted can only complete
/// if another thread receives: it does, and rankwire says so once (issue 17, case 8).
#[test]
fn blocking_big_send_to_self_warns_once_and_completes_when_another_thread_receives() {
    let out = rwrun(["-n", "1", &app(), "self_big"])
        .timeout(Duration::from_secs(30))
        .run();
    out.assert_ok();
    let warning = "blocking send from rank 0 to itself (tag 2; 1048576 bytes, above the eager limit of 65536 bytes) with no matching receive posted: it completes only if another thread of this process posts the receive";
    assert_eq!(out.stderr.matches(warning).count(), 1, "{}", out.stderr);
    assert_eq!(out.stderr.matches("to itself").count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("received by another thread: done"),
        "{}",
        out.stderr
    );
}

#[test]
fn zero_byte_and_self_sends_b002() {
    run_ok(1, &["zero_self"]);
    run_ok(2, &["zero_self"]);
}

#[test]
fn probe_then_receive_and_matched_probe_b004() {
    run_ok(3, &["probe"]);
}

#[test]
fn nonblocking_statuses_use_communicator_ranks() {
    run_ok(4, &["split_status"]);
}

#[test]
fn invalid_rank_and_tag_are_usage_errors() {
    run_ok(2, &["usage"]);
}

#[test]
fn message_over_2_gib() {
    // One message of 2 GiB + 1 byte through each data path: single copy, shm rings,
    // TCP (3 x 2 GiB of buffers per run; the machine has 24 GiB).
    for (name, envs) in &CONFIGS[..3] {
        let mut run = rwrun(["-n", "2", &app(), "big"]).timeout(Duration::from_secs(180));
        for (k, v) in *envs {
            run = run.env(k, v);
        }
        let out = run.run();
        assert_eq!(out.code(), 0, "{name}: {}", out.stderr);
        assert!(
            out.stdout.contains("big: 2147483649 bytes"),
            "{name}: {}",
            out.stdout
        );
    }
}

#[test]
fn rank_exiting_3_ends_the_job_with_3_b013() {
    let out = rwrun(["-n", "4", &app(), "exit_at", "2", "3"])
        .timeout(Duration::from_secs(30))
        .run();
    assert_eq!(out.code(), 3, "{}", out.stderr);
    assert!(out.stderr.contains("rank 2"), "{}", out.stderr);
}

#[test]
fn panicking_rank_ends_the_job_b013() {
    let out = rwrun(["-n", "3", &app(), "panic_at", "1"])
        .timeout(Duration::from_secs(30))
        .run();
    assert_eq!(out.code(), 101, "{}", out.stderr);
    assert!(out.stderr.contains("panics on purpose"), "{}", out.stderr);
    assert!(out.stderr.contains("rank 1"), "{}", out.stderr);
}

#[test]
fn tcp_over_ipv4_and_ipv6_loopback() {
    for family in ["ipv4", "ipv6"] {
        if family == "ipv6" && !ipv6_loopback() {
            eprintln!("skipped: IPv6 loopback (::1) is not configured on this machine");
            continue;
        }
        let out = rwrun(["-n", "3", &app(), "ordering"])
            .env("RANKWIRE_TCP_IF", "lo")
            .env("RANKWIRE_TCP_FAMILY", family)
            .timeout(Duration::from_secs(60))
            .run();
        out.assert_ok();
    }
}

#[test]
fn transport_choice_is_queryable_and_forced_by_env() {
    let out = rwrun(["-n", "3", &app(), "transport"]).run();
    out.assert_ok();
    assert!(out.stdout.contains("rank 0 -> 0: self"), "{}", out.stdout);
    assert!(out.stdout.contains("rank 0 -> 1: shm"), "{}", out.stdout);
    assert!(out.stdout.contains("rank 2 -> 1: shm"), "{}", out.stdout);
    let out = rwrun(["-n", "3", &app(), "transport"])
        .env("RANKWIRE_TRANSPORTS", "tcp")
        .run();
    out.assert_ok();
    assert!(out.stdout.contains("rank 0 -> 1: tcp"), "{}", out.stdout);
    assert!(out.stdout.contains("rank 2 -> 2: self"), "{}", out.stdout);
    let out = rwrun(["-n", "2", &app(), "transport"])
        .env("RANKWIRE_TRANSPORTS", "carrier-pigeon")
        .run();
    assert_eq!(out.code(), 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("RANKWIRE_TRANSPORTS=\"carrier-pigeon\" is not valid"),
        "{}",
        out.stderr
    );
}

#[test]
fn many_ranks_oversubscribed() {
    // 8 ranks on 2 cores must neither livelock nor crawl.
    for cfg in ["shm", "tcp"] {
        let out = rwrun(["-n", "8", &app(), "window", "20"])
            .env("RANKWIRE_TRANSPORTS", cfg)
            .timeout(Duration::from_secs(120))
            .run();
        out.assert_ok();
    }
}

fn ipv6_loopback() -> bool {
    std::net::TcpListener::bind("[::1]:0").is_ok()
}

#[test]
fn launcher_removes_shm_segments_a_killed_rank_left() {
    let out = rwrun([
        "-n",
        "2",
        "sh",
        "-c",
        "touch /dev/shm/rankwire-$RANKWIRE_JOB_ID-$RANKWIRE_RANK-left; echo job=$RANKWIRE_JOB_ID; kill -9 $$",
    ])
    .timeout(Duration::from_secs(30))
    .run();
    assert_eq!(out.code(), 137, "{}", out.stderr);
    let job = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("job="))
        .expect("job id printed");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(job))
        .collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

#[test]
fn gpu_app_skips_cleanly_without_a_gpu() {
    // CI has no GPU: the GPU scenario program must say it skipped, and exit 0. On the
    // GPU machine scripts/gpu-run.sh runs the real checks.
    let app = binary("rw-gpuapp").to_string_lossy().into_owned();
    let out = rwrun(["-n", "2", &app, "check"]).run();
    out.assert_ok();
    if out.stdout.contains("skipped:") {
        eprintln!("skipped: GPU point-to-point checks need a GPU (run scripts/gpu-run.sh there)");
    } else {
        assert!(out.stdout.contains("rank 1: check OK"), "{}", out.stdout);
    }
}

#[test]
fn stream_ordered_p2p_without_a_gpu_is_a_clear_error() {
    // send_device_on_stream / recv_device_on_stream: a rank out of range or a bad tag
    // is a usage error, and without GPU support the call fails with Error::Gpu naming
    // the stream-ordered path (no panic, no hang); finalize is clean. On the GPU
    // machine, `rw-gpuapp streamp2p` (scripts/gpu-run.sh) checks the real thing.
    let app = binary("rw-gpuapp").to_string_lossy().into_owned();
    let out = rwrun(["-n", "2", &app, "stream_nogpu"])
        .timeout(Duration::from_secs(60))
        .run();
    out.assert_ok();
    if out.stdout.contains("skipped:") {
        eprintln!("skipped: this machine has a GPU (scripts/gpu-run.sh runs streamp2p)");
    } else {
        assert!(
            out.stdout.contains("rank 1: stream_nogpu OK"),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains("stream-ordered point-to-point"),
            "{}",
            out.stdout
        );
    }
}

#[test]
fn no_shm_left_after_normal_exit_panic_and_sigkill() {
    // The support library fails any run that leaves a new /dev/shm entry; run the shm
    // transport through a clean exit, a panicking rank and a SIGKILLed rank.
    let app = app();
    rwrun(["-n", "3", &app, "ordering"]).run().assert_ok();
    let out = rwrun(["-n", "3", &app, "panic_at", "1"]).run();
    assert_eq!(out.code(), 101);
    let out = rwrun([
        "-n",
        "3",
        "sh",
        "-c",
        &format!(
            "if [ $RANKWIRE_RANK = 2 ]; then (sleep 0.3; kill -9 $$) & fi; exec {app} exit_at 9 0"
        ),
    ])
    .timeout(Duration::from_secs(30))
    .run();
    assert_ne!(out.code(), 0, "{}", out.stderr);
}

#[test]
fn report_bindings_prints_each_rank_and_local_rank() {
    let app = app();
    let out = rwrun(["-n", "3", "--report-bindings", &app, "ordering"]).run();
    out.assert_ok();
    for r in 0..3 {
        let line = out
            .stderr
            .lines()
            .find(|l| l.starts_with(&format!("rankwire: rank {r} on ")))
            .unwrap_or_else(|| panic!("no binding line for rank {r}: {}", out.stderr));
        // One node here, so the local rank equals the rank.
        assert!(line.contains(&format!("local rank {r},")), "{line}");
        assert!(line.contains("GPU"), "{line}");
    }
}

/// Whether the ranks can run as the unprivileged user `nobody` (root and setpriv), so
/// that ranks made non-dumpable really are refused cross-memory attach; says so if not.
fn can_run_as_nobody() -> bool {
    // SAFETY: geteuid has no preconditions.
    let ok = unsafe { libc::geteuid() } == 0 && std::path::Path::new("/usr/bin/setpriv").exists();
    if !ok {
        eprintln!("skipped: needs root and setpriv to run the ranks as nobody");
    }
    ok
}

/// `rwrun -n 3 [extra] rw-testapp cma_refused` as `nobody` ([`can_run_as_nobody`]).
fn cma_refused_as_nobody(extra: &[&str]) -> rankwire_tests::Run {
    let rwrun = binary("rwrun");
    let app = app();
    let mut args = vec![
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        rwrun.to_str().unwrap(),
        "-n",
        "3",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[app.as_str(), "cma_refused"]);
    rankwire_tests::command("/usr/bin/setpriv", args).env("RANKWIRE_LOG", "info")
}

/// Ranks the OS refuses cross-memory attach from the start (non-dumpable processes of
/// an unprivileged user): init's probe finds it, `--explain` names the reason for each
/// pair, no large message tries a single copy first, and `--require=cma` fails at init
/// naming the pair. Needs root (to run rwrun as `nobody`); skipped otherwise.
#[test]
fn cross_memory_attach_refused_at_init_is_reported_and_required_fails() {
    if !can_run_as_nobody() {
        return;
    }
    let run = |who: &str, extra: &[&str]| {
        cma_refused_as_nobody(extra)
            .env("RW_TESTAPP_NONDUMPABLE_AT_INIT", who)
            .timeout(Duration::from_secs(60))
            .run()
    };
    let out = run("all", &["--explain"]);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert_eq!(out.code(), 0, "{all}");
    assert_eq!(out.stdout.matches("cma_refused OK").count(), 3, "{all}");
    for (a, b) in [(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)] {
        assert!(
            all.lines()
                .any(|l| l.contains(&format!("{a} -> {b}     host"))
                    && l.contains("through shm")
                    && l.contains("cma: not permitted by the OS")),
            "explain row {a} -> {b} names the refusal: {all}"
        );
    }
    assert!(
        !all.contains("single-copy pull from rank"),
        "no large message tried cross-memory attach after the probe: {all}"
    );
    // Refused for every pair, and for one rank only: then the ranks that cannot read
    // rank 1 fail their check while rank 1 passes and waits; the job must still end at
    // once (no final fence waiting for ranks that will never finalize), not after the
    // bootstrap timeout (120 s, beyond this run's 60 s limit).
    for who in ["all", "1"] {
        let out = run(who, &["--require=cma"]);
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(out.status.is_some(), "{who}: the job hung: {all}");
        assert_eq!(out.code(), 1, "{who}: {all}");
        assert!(
            all.contains("RANKWIRE_REQUIRE includes cma")
                && all.contains(if who == "1" {
                    "-> rank 1 cannot use it"
                } else {
                    "cannot use it"
                })
                && all.contains("not permitted by the OS"),
            "{who}: {all}"
        );
        assert!(!all.contains("final fence"), "{who}: {all}");
        assert!(!out.stdout.contains("cma_refused OK"), "{who}: {all}");
    }
}

/// Ranks that may not read or write each other's memory (not root, non-dumpable, so
/// `process_vm_readv`/`writev` fail with EPERM, as under Yama ptrace_scope 1 or in some
/// containers) still exchange large messages: the receiver falls back to Cts + Data by
/// itself, also after it asked a waiting sender for a share (found by a new-user run:
/// the sender's late `Pushed` used to end the job). Needs root (to run rwrun as
/// `nobody` through setpriv); skipped otherwise.
#[test]
fn large_messages_fall_back_when_cross_memory_attach_is_refused() {
    if !can_run_as_nobody() {
        return;
    }
    for share in ["1", "0"] {
        let out = cma_refused_as_nobody(&[])
            .env("RANKWIRE_CMA_SHARE", share)
            .timeout(Duration::from_secs(120))
            .run();
        assert_eq!(out.code(), 0, "share={share}: {}", out.stderr);
        assert_eq!(
            out.stdout.matches("cma_refused OK").count(),
            3,
            "{}",
            out.stdout
        );
        assert!(
            out.stderr.contains("single-copy pull from rank"),
            "share={share}: the pulls really were refused: {}",
            out.stderr
        );
    }
}
