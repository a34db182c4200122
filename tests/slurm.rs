//! Runs under a real Slurm (22.05, started by scripts/slurm/start-local-slurm.sh):
//! direct launch by `srun --mpi=pmi2` (PMI-2 and PMI-1 wire-up) and by `srun --mpi=pmix`
//! (PMIx through libpmix), the clear error of `srun --mpi=none`, a failing rank, `scancel`
//! of a running batch job.
//!
//! Every srun/sbatch has a hard timeout (Slurm queues forever when asked for more CPUs
//! than configured), a unique job name that is `scancel`led if anything is left, and a
//! Slurm time limit; afterwards no process of the run and no new /dev/shm segment may
//! remain. Without a cluster these tests skip with a message, unless
//! RANKWIRE_REQUIRE_SLURM=1 (set by scripts/test.sh), where they fail.

use std::time::{Duration, Instant};

use rankwire_tests::{binary, command, processes_with_marker, shm_entries, slurm};

fn path(name: &str) -> String {
    binary(name).to_string_lossy().into_owned()
}

fn result_lines(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("residual ") || l.starts_with("checksum "))
        .map(str::to_string)
        .collect()
}

fn serial_heat2d(args: &[&str]) -> Vec<String> {
    let out = std::process::Command::new(path("examples/heat2d"))
        .args(args)
        .output()
        .expect("run heat2d serially");
    assert!(out.status.success());
    let want = result_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(want.len(), 2, "serial output lacks residual/checksum");
    want
}

// `srun -J <unique> -t 2 <args>` with a hard timeout.
fn srun(tag: &str, args: &[&str]) -> rankwire_tests::Run {
    let name = slurm::job_name(tag);
    let mut v = vec!["-J".to_string(), name.clone(), "-t".into(), "2".into()];
    v.extend(args.iter().map(|s| s.to_string()));
    command("srun", v)
        .env("SLURM_CONF", &slurm::local_conf())
        .slurm_job(&name)
        .timeout(Duration::from_secs(90))
}

#[test]
fn srun_pmi2_heat2d_equals_serial() {
    if !slurm::available_or_skip("srun_pmi2_heat2d_equals_serial", None, 1) {
        return;
    }
    let args = ["200", "150", "100"];
    let want = serial_heat2d(&args);
    let heat = path("examples/heat2d");
    let mut v = vec!["-n", "4", "--mpi=pmi2", &heat];
    v.extend(args);
    let out = srun("heat4", &v).env("RANKWIRE_LOG", "debug").run();
    out.assert_ok();
    assert_eq!(result_lines(&out.stdout), want, "heat2d under srun -n 4");
    assert!(out.stdout.contains("4 ranks"), "{}", out.stdout);
    for r in 0..4 {
        let line = format!("rank {r} of 4: wire-up by PMI-2 on PMI_FD");
        assert!(
            out.stderr.contains(&line),
            "missing {line:?}\n{}",
            out.stderr
        );
    }
}

#[test]
fn srun_pmi1_fallback_heat2d_equals_serial() {
    if !slurm::available_or_skip("srun_pmi1_fallback_heat2d_equals_serial", None, 1) {
        return;
    }
    let args = ["120", "90", "60"];
    let want = serial_heat2d(&args);
    let heat = path("examples/heat2d");
    let mut v = vec!["-n", "3", "--mpi=pmi2", &heat];
    v.extend(args);
    let out = srun("heat3pmi1", &v)
        .env("RANKWIRE_PMI", "1")
        .env("RANKWIRE_LOG", "debug")
        .run();
    out.assert_ok();
    assert_eq!(result_lines(&out.stdout), want, "heat2d under PMI-1");
    for r in 0..3 {
        let line = format!("rank {r} of 3: wire-up by PMI-1 on PMI_FD");
        assert!(
            out.stderr.contains(&line),
            "missing {line:?}\n{}",
            out.stderr
        );
    }
}

#[test]
fn srun_mpi_none_is_a_clear_error_not_singletons() {
    if !slurm::available_or_skip("srun_mpi_none_is_a_clear_error_not_singletons", None, 1) {
        return;
    }
    let heat = path("examples/heat2d");
    let t0 = Instant::now();
    let out = srun(
        "mpinone",
        &["-n", "2", "--mpi=none", &heat, "50", "40", "10"],
    )
    .run();
    assert_ne!(out.code(), 0, "--mpi=none must fail\n{}", out.stdout);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    // Never ran as singletons: no result lines at all.
    assert!(result_lines(&out.stdout).is_empty(), "{}", out.stdout);
    for r in 0..2 {
        let line = format!("task {r} of a 2-task Slurm step");
        assert!(
            out.stderr.contains(&line),
            "missing {line:?}\n{}",
            out.stderr
        );
    }
    for want in ["bootstrap:", "--mpi=none", "srun --mpi=pmi2", "rwrun -n 2"] {
        assert!(
            out.stderr.contains(want),
            "missing {want:?}\n{}",
            out.stderr
        );
    }
}

#[test]
fn srun_failing_rank_gives_its_status_and_leaves_nothing() {
    if !slurm::available_or_skip(
        "srun_failing_rank_gives_its_status_and_leaves_nothing",
        None,
        1,
    ) {
        return;
    }
    let app = path("rw-testapp");
    // Rank 2 exits 3 right after init; the others block in a receive from it.
    let t0 = Instant::now();
    let out = srun(
        "exit3",
        &["-n", "4", "--mpi=pmi2", &app, "exit_at", "2", "3"],
    )
    .run();
    assert_eq!(out.code(), 3, "{}\n{}", out.stdout, out.stderr);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    // The waiting ranks learned of the loss themselves (no hang).
    assert!(
        out.stderr.contains("connection to rank 2"),
        "{}",
        out.stderr
    );
    // A panicking rank exits 101 and aborts the job (its Universe is dropped without
    // finalize: PMI-2 abort), so Slurm kills the others at once and srun reports the
    // largest status: 137 (or 101 when the others were already gone).
    let out = srun("panic1", &["-n", "3", "--mpi=pmi2", &app, "panic_at", "1"]).run();
    assert!(
        [101, 137].contains(&out.code()),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stderr.contains("task 1: Exited with exit code 101")
            && out.stderr.contains("panics on purpose"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    // A rank calling abort: PMI-2 `abort isworld=TRUE` makes Slurm cancel the step at
    // once (srun reports the largest status: the others' SIGKILL, 137).
    let t0 = Instant::now();
    let out = srun(
        "abort1",
        &["-n", "3", "--mpi=pmi2", &app, "abort_at", "1", "7"],
    )
    .run();
    assert_ne!(out.code(), 0, "{}", out.stderr);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    assert!(
        out.stderr.contains("rank 1 aborted: abort_at on purpose")
            && out.stderr.contains("task 1: Exited with exit code 7"),
        "{}",
        out.stderr
    );
}

#[test]
fn scancel_of_a_running_batch_job_leaves_nothing() {
    if !slurm::available_or_skip("scancel_of_a_running_batch_job_leaves_nothing", None, 1) {
        return;
    }
    let app = path("rw-testapp");
    // Ranks started by srun directly, and by rwrun inside the allocation.
    scancel_case(
        "scancel-srun",
        &format!("srun --mpi=pmi2 -n 3 {app} hold 120"),
    );
    scancel_case(
        "scancel-rwrun",
        &format!("{} {app} hold 120", path("rwrun")),
    );
}

fn scancel_case(tag: &str, script: &str) {
    let dir = std::env::temp_dir().join(format!("rwtest-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let outfile = dir.join("out.txt");
    let name = slurm::job_name(tag);
    let shm_before = shm_entries();
    let mark = format!("{tag}-{}", std::process::id());
    let out = command(
        "sbatch",
        [
            "--parsable",
            "-J",
            &name,
            "-t",
            "3",
            "-n",
            "3",
            "-o",
            outfile.to_str().unwrap(),
            "--wrap",
            script,
        ],
    )
    .env("RANKWIRE_TEST_MARKER", &mark)
    .env("SLURM_CONF", &slurm::local_conf())
    .slurm_job(&name)
    .timeout(Duration::from_secs(30))
    .run();
    out.assert_ok();
    let job = out
        .stdout
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .to_string();
    assert!(job.parse::<u64>().is_ok(), "sbatch said {:?}", out.stdout);
    let guard = CancelGuard(name.clone());
    // Wait until all three ranks communicate.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&outfile).unwrap_or_default();
        if (0..3).all(|r| text.contains(&format!("rank {r}: holding"))) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job {job} did not start its ranks within 60 s; output so far:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ranks = processes_with_marker(&mark);
    assert!(ranks.len() >= 3, "ranks not found by marker: {ranks:?}");
    let t0 = Instant::now();
    let st = std::process::Command::new("timeout")
        .args(["10", "scancel", &job])
        .env("SLURM_CONF", slurm::local_conf())
        .status()
        .unwrap();
    assert!(st.success(), "scancel {job}: {st}");
    // Gone from the queue, and no process of the job left.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let q = std::process::Command::new("timeout")
            .args(["10", "squeue", "-h", "-j", &job, "-o", "%T"])
            .env("SLURM_CONF", slurm::local_conf())
            .output()
            .unwrap();
        let left = processes_with_marker(&mark);
        if String::from_utf8_lossy(&q.stdout).trim().is_empty() && left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "30 s after scancel: squeue {:?}, processes {left:?}",
            String::from_utf8_lossy(&q.stdout)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{tag}: scancel -> nothing left after {:?}", t0.elapsed());
    let new_shm = rankwire_tests::wait_no_new_shm(&shm_before, Duration::from_secs(5));
    assert!(new_shm.is_empty(), "/dev/shm entries left: {new_shm:?}");
    drop(guard);
    let _ = std::fs::remove_dir_all(&dir);
}

// Cancels the job by name if the test fails half-way.
struct CancelGuard(String);

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            slurm::scancel_name(&self.0);
        }
    }
}

// The 2-node cluster of scripts/slurm/start-netns-slurm.sh: nodes nn1 and nn2 are
// network namespaces with their own hostname and address (10.77.0.11/12).
fn netns_srun(tag: &str, args: &[&str]) -> rankwire_tests::Run {
    srun(tag, args).env("SLURM_CONF", &slurm::netns_conf())
}

// Parse "rank A -> B: transport" lines into a map.
fn transports(stdout: &str) -> std::collections::BTreeMap<(usize, usize), String> {
    stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("rank ")?;
            let (a, rest) = rest.split_once(" -> ")?;
            let (b, t) = rest.split_once(": ")?;
            Some(((a.parse().ok()?, b.parse().ok()?), t.trim().to_string()))
        })
        .collect()
}

#[test]
fn two_nodes_use_tcp_between_and_shm_within() {
    if !slurm::available_or_skip(
        "two_nodes_use_tcp_between_and_shm_within",
        Some(&slurm::netns_conf()),
        2,
    ) {
        return;
    }
    let app = path("rw-testapp");
    let out = netns_srun(
        "netns-transport",
        &[
            "-N",
            "2",
            "--ntasks-per-node=2",
            "--mpi=pmi2",
            &app,
            "transport",
        ],
    )
    .env("RANKWIRE_LOG", "debug")
    .run();
    out.assert_ok();
    let got = transports(&out.stdout);
    assert_eq!(got.len(), 16, "{}", out.stdout);
    // Block distribution with 2 per node: ranks 0,1 on nn1; 2,3 on nn2.
    for a in 0..4 {
        for b in 0..4 {
            let want = if a == b {
                "self"
            } else if a / 2 == b / 2 {
                "shm"
            } else {
                "tcp"
            };
            assert_eq!(got[&(a, b)], want, "rank {a} -> {b}\n{}", out.stdout);
        }
    }
    // The debug log says why shm was not taken across nodes.
    // (One selection row per line: route, protocol, then the candidates not chosen.)
    assert!(
        out.stderr
            .lines()
            .any(|l| l.contains("rank 0 -> rank 2: host memory via tcp:")
                && l.contains("(not chosen: shm: rank 2 is on another node (nn2/")),
        "{}",
        out.stderr
    );
    // And a real computation across the two nodes equals the serial run.
    let args = ["200", "150", "100"];
    let want = serial_heat2d(&args);
    let heat = path("examples/heat2d");
    let mut v = vec!["-N", "2", "--ntasks-per-node=2", "--mpi=pmi2", &heat];
    v.extend(args);
    let out = netns_srun("netns-heat", &v).run();
    out.assert_ok();
    assert_eq!(result_lines(&out.stdout), want, "heat2d on 2 nodes x 2");
}

// Run `sbatch --wait <opts> script` (the script's output lands in `out.txt` of a fresh
// directory) and return (sbatch's result, the job's output).
fn sbatch_wait(
    tag: &str,
    conf: Option<&str>,
    opts: &[&str],
    script: &str,
) -> (rankwire_tests::RunOutput, String) {
    let dir = std::env::temp_dir().join(format!("rwtest-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("job.sh");
    std::fs::write(&file, format!("#!/bin/sh\n{script}")).unwrap();
    let outfile = dir.join("out.txt");
    let name = slurm::job_name(tag);
    let mut args = vec![
        "--wait".to_string(),
        "-J".into(),
        name.clone(),
        "-t".into(),
        "3".into(),
        "-o".into(),
        outfile.to_string_lossy().into_owned(),
    ];
    args.extend(opts.iter().map(|s| s.to_string()));
    args.push(file.to_string_lossy().into_owned());
    let local = slurm::local_conf();
    let out = command("sbatch", args)
        .env("SLURM_CONF", conf.unwrap_or(&local))
        .slurm_job(&name)
        .timeout(Duration::from_secs(120))
        .run();
    let text = std::fs::read_to_string(&outfile).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    (out, text)
}

#[test]
fn sbatch_wait_with_rwrun_inside_the_allocation() {
    if !slurm::available_or_skip("sbatch_wait_with_rwrun_inside_the_allocation", None, 1) {
        return;
    }
    let args = ["200", "150", "100"];
    let want: Vec<String> = serial_heat2d(&args)
        .iter()
        .map(|l| format!("[0] {l}"))
        .collect();
    let (rwrun, heat, app) = (path("rwrun"), path("examples/heat2d"), path("rw-testapp"));
    // -n from the allocation (4), output tagging, then an explicit -n 3 that shows each
    // rank is its own srun step, then a failing rank (its status comes back).
    let script = format!(
        "{rwrun} --tag-output {heat} 200 150 100\n\
         echo \"rwrun-a exit $?\"\n\
         {rwrun} -n 3 sh -c 'echo \"rank $RANKWIRE_RANK step $SLURM_STEP_ID local $RANKWIRE_LOCAL_RANK/$RANKWIRE_LOCAL_SIZE\"'\n\
         echo \"rwrun-b exit $?\"\n\
         {rwrun} {app} exit_at 2 3\n\
         echo \"rwrun-c exit $?\"\n\
         {rwrun} --timeout 2 {app} hold 60\n\
         echo \"rwrun-d exit $?\"\n\
         {rwrun} {app} abort_at 1 9\n\
         echo \"rwrun-e exit $?\"\n"
    );
    let (out, text) = sbatch_wait("rwrun-alloc", None, &["-n", "4"], &script);
    out.assert_ok();
    let tagged: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("[0] residual ") || l.starts_with("[0] checksum "))
        .map(str::to_string)
        .collect();
    assert_eq!(tagged, want, "job output:\n{text}");
    assert!(text.contains("4 ranks"), "{text}");
    assert!(text.contains("rwrun-a exit 0"), "{text}");
    assert!(text.contains("rwrun-b exit 0"), "{text}");
    let mut steps = std::collections::BTreeSet::new();
    for r in 0..3 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("rank {r} step ")))
            .unwrap_or_else(|| panic!("no line of rank {r}:\n{text}"));
        assert!(line.ends_with(&format!("local {r}/3")), "{line}");
        let step = line.split_whitespace().nth(3).unwrap_or("");
        assert!(step.parse::<u32>().is_ok(), "{line}");
        steps.insert(step.to_string());
    }
    assert_eq!(steps.len(), 3, "each rank its own step:\n{text}");
    assert!(text.contains("rwrun-c exit 3"), "{text}");
    assert!(text.contains("rwrun: rank 2"), "{text}");
    // --timeout: rwrun's SIGTERM reaches the ranks through srun; 124, ranks counted as
    // terminated by rwrun (not reported as failing on their own).
    assert!(text.contains("rwrun-d exit 124"), "{text}");
    assert!(text.contains("job timed out after 2 s"), "{text}");
    // abort through rwrun's server: its code, and the others are ended.
    assert!(text.contains("rwrun-e exit 9"), "{text}");
    assert!(
        text.contains("rwrun: rank 1 aborted the job with code 9: abort_at on purpose"),
        "{text}"
    );
}

#[test]
fn sbatch_wait_with_rwrun_on_two_nodes() {
    if !slurm::available_or_skip(
        "sbatch_wait_with_rwrun_on_two_nodes",
        Some(&slurm::netns_conf()),
        2,
    ) {
        return;
    }
    let (rwrun, app) = (path("rwrun"), path("rw-testapp"));
    let script = format!("{rwrun} {app} transport\necho \"rwrun exit $?\"\n");
    let (out, text) = sbatch_wait(
        "rwrun-2nodes",
        Some(&slurm::netns_conf()),
        &["-N", "2", "--ntasks-per-node=2"],
        &script,
    );
    out.assert_ok();
    assert!(text.contains("rwrun exit 0"), "{text}");
    let got = transports(&text);
    assert_eq!(got.len(), 16, "{text}");
    for a in 0..4 {
        for b in 0..4 {
            let want = match (a == b, a / 2 == b / 2) {
                (true, _) => "self",
                (false, true) => "shm",
                (false, false) => "tcp",
            };
            assert_eq!(got[&(a, b)], want, "rank {a} -> {b}\n{text}");
        }
    }
}

#[test]
fn rwrun_host_with_a_launch_agent_on_two_netns_nodes() {
    // Needs the namespaces of the netns cluster (not Slurm itself).
    if !slurm::available_or_skip(
        "rwrun_host_with_a_launch_agent_on_two_netns_nodes",
        Some(&slurm::netns_conf()),
        2,
    ) {
        return;
    }
    let agent = format!(
        "{}/../scripts/slurm/netns-agent.sh {{host}}",
        env!("CARGO_MANIFEST_DIR")
    );
    let app = path("rw-testapp");
    let out = rankwire_tests::rwrun(["--host", "nn1:2,nn2:2", &app, "transport"])
        .env("RANKWIRE_LAUNCH_AGENT", &agent)
        .timeout(Duration::from_secs(60))
        .run();
    out.assert_ok();
    let got = transports(&out.stdout);
    assert_eq!(got.len(), 16, "{}", out.stdout);
    for a in 0..4 {
        for b in 0..4 {
            let want = match (a == b, a / 2 == b / 2) {
                (true, _) => "self",
                (false, true) => "shm",
                (false, false) => "tcp",
            };
            assert_eq!(got[&(a, b)], want, "rank {a} -> {b}\n{}", out.stdout);
        }
    }
    // This machine plus one namespace node: heat2d equals serial.
    let args = ["200", "150", "100"];
    let want = serial_heat2d(&args);
    let heat = path("examples/heat2d");
    let mut v = vec!["--host", "localhost:1,nn2:2", &heat];
    v.extend(args);
    let out = rankwire_tests::rwrun(v)
        .env("RANKWIRE_LAUNCH_AGENT", &agent)
        .timeout(Duration::from_secs(60))
        .run();
    out.assert_ok();
    assert_eq!(result_lines(&out.stdout), want);
    // A failing rank on a namespace node ends the job; nothing is left (checked by run()).
    let out = rankwire_tests::rwrun(["--host", "nn1:2,nn2:2", &app, "exit_at", "3", "5"])
        .env("RANKWIRE_LAUNCH_AGENT", &agent)
        .timeout(Duration::from_secs(60))
        .run();
    assert_eq!(out.code(), 5, "{}", out.stderr);
}

#[test]
fn fake_slurm_step_without_pmi_fails_fast_in_every_task() {
    // B016 without Slurm: four copies with the variables of a 4-task step and no PMI.
    let heat = path("examples/heat2d");
    let t0 = Instant::now();
    let children: Vec<_> = (0..4)
        .map(|r| {
            std::process::Command::new(&heat)
                .args(["50", "40", "10"])
                .env("SLURM_JOB_ID", "77")
                .env("SLURM_STEP_ID", "0")
                .env("SLURM_NTASKS", "4")
                .env("SLURM_PROCID", r.to_string())
                .env_remove("PMI_FD")
                .env_remove("RANKWIRE_RANK")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn heat2d")
        })
        .collect();
    for (r, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "task {r} ran as a singleton");
        assert!(out.stdout.is_empty(), "task {r} printed results");
        assert!(
            err.contains(&format!("task {r} of a 4-task Slurm step (job 77, step 0)"))
                && err.contains("srun --mpi=pmi2")
                && err.contains("rwrun -n 4"),
            "{err}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

// ---- PMIx (issue 21): `srun --mpi=pmix`, libpmix loaded at run time ----

#[test]
fn srun_pmix_heat2d_equals_serial() {
    if !slurm::pmix_or_skip("srun_pmix_heat2d_equals_serial", None, 1) {
        return;
    }
    let args = ["200", "150", "100"];
    let want = serial_heat2d(&args);
    let heat = path("examples/heat2d");
    let mut v = vec!["-n", "4", "--mpi=pmix", &heat];
    v.extend(args);
    let out = srun("pmix-heat4", &v).env("RANKWIRE_LOG", "debug").run();
    out.assert_ok();
    assert_eq!(
        result_lines(&out.stdout),
        want,
        "heat2d under srun --mpi=pmix -n 4"
    );
    for r in 0..4 {
        let line = format!("rank {r} of 4: wire-up by PMIx ");
        assert!(
            out.stderr.contains(&line),
            "missing {line:?}\n{}",
            out.stderr
        );
    }
    // The server told every rank its local rank and the 4 ranks on the node.
    assert!(
        out.stderr.contains("local rank Some(3) of Some(4)"),
        "{}",
        out.stderr
    );
}

#[test]
fn srun_pmix_every_collective_on_two_nodes() {
    if !slurm::pmix_or_skip(
        "srun_pmix_every_collective_on_two_nodes",
        Some(&slurm::netns_conf()),
        2,
    ) {
        return;
    }
    // Paths as under PMI-2: shm inside a node, TCP between (on demand, each peer's
    // address read from the PMIx server).
    let app = path("rw-testapp");
    let out = netns_srun(
        "pmix-netns-transport",
        &[
            "-N",
            "2",
            "--ntasks-per-node=2",
            "--mpi=pmix",
            &app,
            "transport",
        ],
    )
    .run();
    out.assert_ok();
    let got = transports(&out.stdout);
    assert_eq!(got.len(), 16, "{}", out.stdout);
    for a in 0..4 {
        for b in 0..4 {
            let want = if a == b {
                "self"
            } else if a / 2 == b / 2 {
                "shm"
            } else {
                "tcp"
            };
            assert_eq!(got[&(a, b)], want, "rank {a} -> {b}\n{}", out.stdout);
        }
    }
    // Every collective (alltoall included: every pair connects) against the reference.
    let coll = path("rw-collapp");
    let out = netns_srun(
        "pmix-netns-coll",
        &[
            "-N",
            "2",
            "--ntasks-per-node=2",
            "--mpi=pmix",
            &coll,
            "all",
            "0",
            "1",
            "7",
            "300",
        ],
    )
    .run();
    out.assert_ok();
    for r in 0..4 {
        let line = format!("rank {r}: all OK");
        assert!(
            out.stdout.contains(&line),
            "missing {line:?}\n{}",
            out.stdout
        );
    }
}

#[test]
fn srun_pmix_failing_panicking_and_aborting_ranks_end_the_step() {
    if !slurm::pmix_or_skip(
        "srun_pmix_failing_panicking_and_aborting_ranks_end_the_step",
        None,
        1,
    ) {
        return;
    }
    let app = path("rw-testapp");
    // Rank 2 exits 3 after init; the others learn of it from the lost connection.
    let t0 = Instant::now();
    let out = srun(
        "pmix-exit3",
        &["-n", "4", "--mpi=pmix", &app, "exit_at", "2", "3"],
    )
    .run();
    assert_eq!(out.code(), 3, "{}\n{}", out.stdout, out.stderr);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    assert!(
        out.stderr.contains("connection to rank 2"),
        "{}",
        out.stderr
    );
    // Under srun the fix names srun's tools, not rwrun's.
    assert!(
        out.stderr.contains("srun -K") && !out.stderr.contains("rwrun's line"),
        "{}",
        out.stderr
    );
    // A panicking rank aborts the job through PMIx_Abort.
    let t0 = Instant::now();
    let out = srun(
        "pmix-panic1",
        &["-n", "3", "--mpi=pmix", &app, "panic_at", "1"],
    )
    .run();
    assert_ne!(out.code(), 0, "{}\n{}", out.stdout, out.stderr);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    assert!(out.stderr.contains("panics on purpose"), "{}", out.stderr);
    // Universe::abort: the others block in a receive from rank 1 and must be ended by
    // the server, within the bound.
    let t0 = Instant::now();
    let out = srun(
        "pmix-abort1",
        &["-n", "3", "--mpi=pmix", &app, "abort_at", "1", "7"],
    )
    .run();
    assert_ne!(out.code(), 0, "{}", out.stderr);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    assert!(
        out.stderr.contains("rank 1 aborted: abort_at on purpose"),
        "{}",
        out.stderr
    );
}

#[test]
fn srun_pmix_without_the_library_is_a_clear_error() {
    if !slurm::pmix_or_skip("srun_pmix_without_the_library_is_a_clear_error", None, 1) {
        return;
    }
    let heat = path("examples/heat2d");
    let t0 = Instant::now();
    let out = srun(
        "pmix-nolib",
        &["-n", "2", "--mpi=pmix", &heat, "50", "40", "10"],
    )
    .env("RANKWIRE_PMIX_LIB", "/nonexistent/libpmix.so.2")
    .run();
    assert_ne!(out.code(), 0, "{}", out.stdout);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    assert!(result_lines(&out.stdout).is_empty(), "{}", out.stdout);
    for want in [
        "bootstrap:",
        "srun --mpi=pmix",
        "/nonexistent/libpmix.so.2",
        "libpmix2",
        "srun --mpi=pmi2",
    ] {
        assert!(
            out.stderr.contains(want),
            "missing {want:?}\n{}",
            out.stderr
        );
    }
}

#[test]
fn srun_pmix_fences_agree_when_only_some_ranks_put_and_missing_keys_fail_fast() {
    let probe = path("rw-pmixprobe");
    // One node (3 ranks), then two nodes (2 + 2): with differing data-collection flags a
    // server refuses the fence on one node and waits forever across nodes.
    if slurm::pmix_or_skip(
        "srun_pmix_fences_agree_when_only_some_ranks_put_and_missing_keys_fail_fast",
        None,
        1,
    ) {
        let out = srun("pmix-probe", &["-n", "3", "--mpi=pmix", &probe]).run();
        out.assert_ok();
        assert_eq!(
            out.stdout.matches("pmixprobe OK").count(),
            3,
            "{}",
            out.stdout
        );
    }
    if slurm::pmix_or_skip(
        "srun_pmix_fences_agree_when_only_some_ranks_put_and_missing_keys_fail_fast (2 nodes)",
        Some(&slurm::netns_conf()),
        2,
    ) {
        let out = netns_srun(
            "pmix-probe-2n",
            &["-N", "2", "--ntasks-per-node=2", "--mpi=pmix", &probe],
        )
        .run();
        out.assert_ok();
        assert_eq!(
            out.stdout.matches("pmixprobe OK").count(),
            4,
            "{}",
            out.stdout
        );
    }
}

#[test]
fn pmix_variables_without_their_server_fail_within_the_bound() {
    // Variables of a PMIx step, but nobody at the address (a closed port), and a server
    // that accepts and never answers: a clear error within the bootstrap timeout.
    let heat = path("examples/heat2d");
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for (port, want) in [(closed_port, "PMIx_Init"), (silent_port, "PMIx_Init")] {
        let t0 = Instant::now();
        let out = command(&heat, ["50", "40", "10"])
            .env("PMIX_NAMESPACE", "slurm.pmix.999.0")
            .env("PMIX_RANK", "0")
            .env(
                "PMIX_SERVER_URI41",
                &format!("pmix-server.1;tcp4://127.0.0.1:{port}"),
            )
            .env("RANKWIRE_BOOTSTRAP_TIMEOUT", "3")
            .timeout(Duration::from_secs(60))
            .run();
        if out.stderr.contains("cannot load the PMIx client library") {
            eprintln!("skipped: no libpmix here ({})", out.stderr.trim());
            return;
        }
        assert_ne!(out.code(), 0, "{}", out.stdout);
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "port {port}: took {:?}\n{}",
            t0.elapsed(),
            out.stderr
        );
        assert!(
            out.stderr.contains("bootstrap:") && out.stderr.contains(want),
            "port {port}: {}",
            out.stderr
        );
        assert!(result_lines(&out.stdout).is_empty(), "{}", out.stdout);
    }
    drop(silent);
}
