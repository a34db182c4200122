//! Diagnostics through rwrun (issue 10): `--explain` (and the same table from
//! `Universe::explain` and `RANKWIRE_LOG=info`), `--require`, and `--doctor`.

use std::time::Duration;

use rankwire_tests::{binary, rwrun};

fn app() -> String {
    binary("rw-faultapp").to_string_lossy().into_owned()
}

/// Lines of rank `r`'s table in `text` after `prefix`, without the prefix.
fn table_of(text: &str, prefix: &str, r: usize) -> Vec<String> {
    let row = format!("{r:>4} -> ");
    text.lines()
        .filter_map(|l| l.split_once(prefix).map(|x| x.1))
        .filter(|l| l.starts_with(&row))
        .map(str::to_string)
        .collect()
}

#[test]
fn explain_prints_every_pair_and_memory_kind_same_as_the_api() {
    let out = rwrun(["--explain", "-n", "3", &app(), "explain"])
        .timeout(Duration::from_secs(60))
        .run();
    out.assert_ok();
    for r in 0..3 {
        let env_rows = table_of(&out.stderr, "rankwire explain: ", r);
        let api_rows = table_of(&out.stdout, "api: ", r);
        assert_eq!(
            env_rows.len(),
            9,
            "3 peers x 3 kinds for rank {r}:\n{}",
            out.stderr
        );
        assert_eq!(env_rows, api_rows, "RANKWIRE_EXPLAIN and the API disagree");
    }
    let e = &out.stderr;
    // Same node, default: shm with single copy above the 32 KiB eager limit.
    assert!(
        e.contains("rankwire explain:    0 -> 1     host     shm        eager <= 32768 B; above: rendezvous, single copy (cma, process_vm_readv, by shm caps; from 256 KiB a waiting sender writes half)  |  -"),
        "{e}"
    );
    assert!(
        e.contains("rankwire explain:    1 -> 1     host     self       copy within the process"),
        "{e}"
    );
    if !rankwire::gpu::available() {
        // Default build (cuda on) without a driver, or a --no-default-features build.
        let why = if cfg!(feature = "cuda") {
            "not possible: libcuda.so.1 could not be loaded"
        } else {
            "not possible: GPU support not built"
        };
        assert!(
            e.contains(&format!("0 -> 2     device   none       {why}")),
            "{e}"
        );
        // No GPU: no note on ranks sharing one (issue 18).
        assert!(!e.contains("share GPU"), "{e}");
    }
}

/// `--explain` says when ranks outnumber CPUs and collectives take the linear
/// algorithms, once (rank 0), and says nothing of it when every rank has a CPU.
#[test]
fn explain_notes_linear_collectives_when_ranks_outnumber_cpus() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus > 8 {
        eprintln!("skipped: {cpus} CPUs here; the test oversubscribes with at most 9 ranks");
        return;
    }
    let n = (cpus + 1).max(3).to_string();
    let out = rwrun(["--explain", "-n", &n, &app(), "explain"])
        .timeout(Duration::from_secs(60))
        .run();
    out.assert_ok();
    let notes: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("ranks per CPU on a node"))
        .collect();
    assert_eq!(notes.len(), 1, "{}", out.stderr);
    assert!(
        notes[0].contains("take linear algorithms on communicators of 3 to")
            && notes[0].contains("RANKWIRE_BARRIER_ALGO"),
        "{}",
        notes[0]
    );
    // Below 4 ranks per CPU small allreduces take exchange, and the note says so.
    assert_eq!(
        notes[0].contains("take the exchange algorithms"),
        (cpus + 1).max(3) < 4 * cpus,
        "{}",
        notes[0]
    );
    if cpus >= 2 {
        let out = rwrun(["--explain", "-n", "2", &app(), "explain"])
            .timeout(Duration::from_secs(60))
            .run();
        out.assert_ok();
        assert!(!out.stderr.contains("ranks per CPU"), "{}", out.stderr);
    }
}

#[test]
fn explain_names_the_reasons_faster_paths_were_rejected() {
    let out = rwrun(["--explain", "-n", "2", &app(), "explain"])
        .env("RANKWIRE_TRANSPORTS", "tcp")
        .env("RANKWIRE_CMA", "0")
        .run();
    out.assert_ok();
    assert!(
        out.stderr.contains(
            "0 -> 1     host     tcp        eager <= 65536 B; above: rendezvous (Rts/Cts/Data) through tcp  |  shm: excluded by RANKWIRE_TRANSPORTS; rdma: excluded by RANKWIRE_TRANSPORTS; cma: turned off by RANKWIRE_CMA=0"
        ),
        "{}",
        out.stderr
    );
    // The same table at RANKWIRE_LOG=info.
    let out = rwrun(["-n", "2", &app(), "explain"])
        .env("RANKWIRE_LOG", "info")
        .env("RANKWIRE_TRANSPORTS", "tcp")
        .run();
    out.assert_ok();
    let info = table_of(&out.stderr, "path: ", 1);
    assert_eq!(info, table_of(&out.stdout, "api: ", 1), "{}", out.stderr);
}

#[test]
fn require_turns_a_fallback_into_an_init_error() {
    let out = rwrun(["--require=shm", "-n", "2", &app(), "explain"])
        .env("RANKWIRE_TRANSPORTS", "tcp")
        .run();
    assert_eq!(out.code(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "usage: RANKWIRE_REQUIRE includes shm, but rank 0 -> rank 1 cannot use it: host memory goes over tcp (shm: excluded by RANKWIRE_TRANSPORTS; rdma: excluded by RANKWIRE_TRANSPORTS)"
        ),
        "{}",
        out.stderr
    );
    // Through the environment variable, for CMA.
    let out = rwrun(["-n", "2", &app(), "explain"])
        .env("RANKWIRE_REQUIRE", "cma")
        .env("RANKWIRE_CMA", "0")
        .run();
    assert_eq!(out.code(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("cma: turned off by RANKWIRE_CMA=0"),
        "{}",
        out.stderr
    );
    if !rankwire::gpu::available() {
        let out = rwrun(["--require", "ipc", "-n", "2", &app(), "explain"]).run();
        assert_eq!(out.code(), 1, "{}", out.stderr);
        assert!(
            out.stderr.contains(if cfg!(feature = "cuda") {
                "cuda_ipc: libcuda.so.1 could not be loaded"
            } else {
                "cuda_ipc: GPU support not built"
            }),
            "{}",
            out.stderr
        );
    }
    // What is met passes; gdr and rdma apply only between nodes.
    rwrun(["--require=shm,cma,gdr,rdma", "-n", "2", &app(), "explain"])
        .run()
        .assert_ok();
    // An unknown path is refused by rwrun, before any rank starts (issue 17).
    let out = rwrun(["--require=warp", "-n", "1", &app(), "explain"]).run();
    assert_eq!(out.code(), 2);
    assert!(
        out.stderr.contains(
            "--require \"warp\" (RANKWIRE_REQUIRE) is not valid: expected a comma-separated list of shm, cma, ipc, rdma, gdr"
        ),
        "{}",
        out.stderr
    );
}

/// One rank started with another `RANKWIRE_TRANSPORTS` (here: tcp only, the others
/// the default) fails at init on every rank with one error naming the setting, instead
/// of waiting in a transport's set-up fence until the bootstrap timeout.
#[test]
fn ranks_with_different_transport_settings_fail_at_init_naming_the_setting() {
    let script = format!(
        "if [ \"$RANKWIRE_RANK\" = 2 ]; then export RANKWIRE_TRANSPORTS=tcp; fi; exec '{}' explain",
        app()
    );
    let t0 = std::time::Instant::now();
    let out = rwrun(["-n", "3", "sh", "-c", &script])
        .env("RANKWIRE_BOOTSTRAP_TIMEOUT", "60")
        .timeout(Duration::from_secs(120))
        .run();
    assert_eq!(out.code(), 1, "{}\n{}", out.stdout, out.stderr);
    let want = "ranks differ in RANKWIRE_TRANSPORTS: rank 0 has shm,rdma,tcp, rank 2 has tcp";
    assert!(out.stderr.contains(want), "{}", out.stderr);
    // At init, not at the bootstrap timeout (60 s here).
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    // The same list spelled in another order is the same list.
    let script = format!(
        "if [ \"$RANKWIRE_RANK\" = 1 ]; then export RANKWIRE_TRANSPORTS=tcp,rdma,shm; fi; exec '{}' explain",
        app()
    );
    rwrun(["-n", "2", "sh", "-c", &script])
        .timeout(Duration::from_secs(60))
        .run()
        .assert_ok();
    // TCP connections made at init on one rank and on demand on another: the same,
    // for RANKWIRE_TCP_CONNECT (before: a 60 s connect timeout blaming the network).
    let script = format!(
        "if [ \"$RANKWIRE_RANK\" = 0 ]; then export RANKWIRE_TCP_CONNECT=at-init; fi; exec '{}' explain",
        app()
    );
    let t0 = std::time::Instant::now();
    let out = rwrun(["-n", "3", "sh", "-c", &script])
        .env("RANKWIRE_TRANSPORTS", "tcp")
        .timeout(Duration::from_secs(120))
        .run();
    assert_eq!(out.code(), 1, "{}\n{}", out.stdout, out.stderr);
    let want = "ranks differ in RANKWIRE_TCP_CONNECT: rank 0 has at-init, rank 1 has on-demand";
    assert!(out.stderr.contains(want), "{}", out.stderr);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn doctor_runs_without_gpu_or_rdma_and_says_what_it_could_not_check() {
    let out = std::process::Command::new(binary("rwrun"))
        .arg("--doctor")
        .output()
        .expect("run rwrun --doctor");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let code = out.status.code();
    let fails = stdout.lines().filter(|l| l.starts_with("[fail]")).count();
    assert_eq!(code, Some(i32::from(fails > 0)), "{stdout}");
    for name in [
        "gpu",
        "gpu sharing / mps",
        "rdma",
        "nic-gpu distance",
        "nvidia_peermem",
        "memlock",
        "/dev/shm",
        "cma (ptrace scope)",
        "iommu",
        "hugepages",
        "slurm/pmi",
    ] {
        assert!(
            stdout.lines().any(|l| l.contains(&format!("] {name}"))),
            "no {name} check:\n{stdout}"
        );
    }
    for l in stdout
        .lines()
        .filter(|l| l.starts_with("[warn]") || l.starts_with("[fail]"))
    {
        assert!(l.contains("; fix: "), "{l}");
    }
    if !rankwire::gpu::available() {
        assert!(stdout.contains("could not check GPUs"), "{stdout}");
        if cfg!(feature = "cuda") {
            assert!(
                stdout.contains("[skip] gpu: no GPU found: skipped"),
                "{stdout}"
            );
            assert!(
                stdout.contains("[skip] gpu sharing / mps: no GPU found: skipped"),
                "{stdout}"
            );
        }
    }
    assert!(stdout.contains("doctor: "), "{stdout}");
}

// ---------------------------------------------------------------------------------------
// Settings (issue 17, case 5): one check for every RANKWIRE_* variable and rwrun option.
// ---------------------------------------------------------------------------------------

/// Bound on a run refused before any rank starts.
const REFUSED_BOUND: Duration = Duration::from_secs(5);

/// `rwrun <opts> -n 2 sh -c 'touch <dir>/started-$RANKWIRE_RANK'` with `env`: must exit
/// 2 within [`REFUSED_BOUND`], start no rank, and print `expect` (every piece).
fn refused_before_start(tag: &str, opts: &[&str], env: &[(&str, &str)], expect: &[&str]) {
    let dir = std::env::temp_dir().join(format!("rw-settings-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!("touch {}/started-$RANKWIRE_RANK", dir.display());
    let mut args: Vec<&str> = opts.to_vec();
    args.extend(["-n", "2", "sh", "-c", &script]);
    let mut run = rwrun(args).timeout(Duration::from_secs(30));
    for (k, v) in env {
        run = run.env(k, v);
    }
    let out = run.run();
    let started: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.code(), 2, "{tag}: {}", out.stderr);
    assert!(started.is_empty(), "{tag}: a rank started: {started:?}");
    assert!(out.elapsed < REFUSED_BOUND, "{tag}: took {:?}", out.elapsed);
    for e in expect {
        assert!(out.stderr.contains(e), "{tag}: no {e:?} in: {}", out.stderr);
    }
    assert!(out.stderr.contains("no rank was started"), "{}", out.stderr);
}

#[test]
fn bad_progress_policy_is_refused_before_any_rank_starts() {
    refused_before_start(
        "progress",
        &[],
        &[("RANKWIRE_PROGRESS", "bogus")],
        &[
            "rwrun: usage: RANKWIRE_PROGRESS=\"bogus\" is not valid: expected spin, yield, block or auto",
        ],
    );
}

#[test]
fn bad_bootstrap_timeout_is_refused_before_any_rank_starts() {
    refused_before_start(
        "timeout",
        &[],
        &[("RANKWIRE_BOOTSTRAP_TIMEOUT", "abc")],
        &["RANKWIRE_BOOTSTRAP_TIMEOUT=\"abc\" is not valid: expected a number of seconds above 0"],
    );
}

#[test]
fn bad_require_option_is_refused_before_any_rank_starts() {
    refused_before_start(
        "require",
        &["--require", "foo"],
        &[],
        &[
            "--require \"foo\" (RANKWIRE_REQUIRE) is not valid: expected a comma-separated list of shm, cma, ipc, rdma, gdr",
        ],
    );
    // Through -x, every invalid variable at once.
    refused_before_start(
        "export",
        &[
            "-x",
            "RANKWIRE_CMA=maybe",
            "-x",
            "RANKWIRE_KILL_GRACE_MS=2s",
        ],
        &[("RANKWIRE_TRANSPORTS", "carrier-pigeon")],
        &[
            "RANKWIRE_CMA=\"maybe\" is not valid: expected 1, on, true, yes or 0, off, false, no",
            "RANKWIRE_KILL_GRACE_MS=\"2s\" is not valid: expected a number of milliseconds",
            "RANKWIRE_TRANSPORTS=\"carrier-pigeon\" is not valid: expected a comma-separated list of self, shm, rdma, tcp",
        ],
    );
}

#[test]
fn mistyped_setting_name_is_warned_about_with_a_suggestion() {
    let out = rwrun(["-n", "2", "true"])
        .env("RANKWIRE_PROGRES", "spin")
        .timeout(Duration::from_secs(30))
        .run();
    out.assert_ok();
    assert_eq!(
        out.stderr
            .matches("rwrun: warning: RANKWIRE_PROGRES is not a rankwire setting (ignored); did you mean RANKWIRE_PROGRESS?")
            .count(),
        1,
        "{}",
        out.stderr
    );
}

/// A variable rwrun cannot see (set in the rank's own command line) is reported by
/// every rank at init, before any communication.
#[test]
fn setting_rwrun_cannot_see_is_reported_by_every_rank_at_init() {
    let script = format!("RANKWIRE_PROGRESS=bogus exec {} explain", app());
    let out = rwrun(["--tag-output", "-n", "2", "sh", "-c", &script])
        .timeout(Duration::from_secs(30))
        .run();
    assert_ne!(out.code(), 0, "{}", out.stderr);
    assert!(out.elapsed < Duration::from_secs(15), "{:?}", out.elapsed);
    for r in 0..2 {
        let line = format!(
            "[{r}] rw-faultapp: FAILED: init: usage: RANKWIRE_PROGRESS=\"bogus\" is not valid: expected spin, yield, block or auto (checked at init, before any communication)"
        );
        assert!(out.stderr.contains(&line), "no {line:?} in: {}", out.stderr);
    }
    // No path table: the check came before the wire-up.
    assert!(!out.stdout.contains("api: "), "{}", out.stdout);
}

#[test]
fn rwrun_settings_lists_every_setting() {
    let out = rwrun(["--settings"]).timeout(Duration::from_secs(10)).run();
    out.assert_ok();
    for s in rankwire::settings::SETTINGS {
        let block = format!(
            "{}\n    {}\n    default: {}\n    valid: {}\n",
            s.name, s.doc, s.default, s.valid
        );
        assert!(
            out.stdout.contains(&block),
            "no {block:?} in: {}",
            out.stdout
        );
    }
}

// Whether this machine has an NVIDIA GPU on the PCI bus or an RDMA device (sysfs).
fn gpu_or_rdma_hardware() -> bool {
    let names = |d: &str| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(d)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let nvidia = names("/sys/bus/pci/devices")
        .iter()
        .any(|p| std::fs::read_to_string(p.join("vendor")).is_ok_and(|v| v.trim() == "0x10de"));
    nvidia || !names("/sys/class/infiniband").is_empty() || rankwire::gpu::available()
}

#[test]
fn doctor_without_gpu_and_rdma_skips_peermem_and_memlock() {
    if gpu_or_rdma_hardware() {
        eprintln!(
            "skipped: doctor_without_gpu_and_rdma_skips_peermem_and_memlock: this machine has a GPU or an RDMA device"
        );
        return;
    }
    let out = std::process::Command::new(binary("rwrun"))
        .arg("--doctor")
        .env("RANKWIRE_LOG", "off")
        .output()
        .expect("run rwrun --doctor");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[skip] nvidia_peermem: no GPU found: skipped"),
        "{stdout}"
    );
    for l in stdout.lines() {
        assert!(
            !(l.starts_with("[warn]") || l.starts_with("[fail]"))
                || !(l.contains("nvidia_peermem") || l.contains("memlock")),
            "no GPU and no RDMA device here, yet: {l}\n{stdout}"
        );
    }
    // The memlock line is a pass (large limit) or a skip that says why.
    assert!(
        stdout.contains("[pass] memlock: ")
            || stdout.contains("[skip] memlock: no GPU found: skipped"),
        "{stdout}"
    );
    // A default build has GPU support; only a --no-default-features rwrun names the rebuild.
    if cfg!(feature = "cuda") {
        assert!(!stdout.contains("GPU support not built"), "{stdout}");
    }
}
