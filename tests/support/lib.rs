//! Support for multi-process tests: run `rwrun` with a hard timeout, kill the whole
//! process group on expiry, and check that nothing of the job is left running.
//!
//! Every run gets a unique marker variable in its environment (inherited by rwrun and
//! every rank); after the run, `/proc/*/environ` is scanned for it, so a leaked rank is
//! found whatever its name.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Outcome of one run.
#[derive(Debug)]
pub struct RunOutput {
    /// Exit status of rwrun (`None` if it was killed by our timeout).
    pub status: Option<ExitStatus>,
    /// Captured stdout.
    pub stdout: String,
    /// Captured stderr.
    pub stderr: String,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl RunOutput {
    /// Exit code, or 128+signal, or -1 after a timeout.
    pub fn code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        match self.status {
            Some(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
            None => -1,
        }
    }

    /// Panic with both streams unless the run exited 0.
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(
            self.code(),
            0,
            "run failed\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

/// The directory holding the workspace's binaries (`target/<profile>`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// Path of a workspace binary (`rwrun`, `rw-testapp`, `rankwire-bench`) or example
/// (`examples/heat2d`), building the workspace's binaries once if it is missing.
pub fn binary(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    if !p.exists() {
        let profile_release = bin_dir().ends_with("release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "--workspace", "--bins", "--examples"]);
        if profile_release {
            c.arg("--release");
        }
        let st = c.status().expect("run cargo build");
        assert!(st.success(), "cargo build of the workspace binaries failed");
    }
    assert!(p.exists(), "{} not found after building", p.display());
    p
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A unique marker value for this run.
fn marker() -> String {
    format!(
        "{}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        Instant::now().elapsed().as_nanos()
    )
}

/// Builder of an `rwrun` invocation (or of any other launcher: [`command`]).
pub struct Run {
    program: PathBuf,
    slurm_job: Option<String>,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
}

/// Start describing `rwrun <args...>`.
pub fn rwrun<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    command(binary("rwrun"), args)
}

/// Start describing `<program> <args...>` (`srun`, `sbatch`, ...), run like [`rwrun`]:
/// own process group, hard timeout, leftover checks.
pub fn command<I, S>(program: impl Into<PathBuf>, args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    Run {
        program: program.into(),
        slurm_job: None,
        args: args.into_iter().map(|s| s.as_ref().to_string()).collect(),
        envs: Vec::new(),
        stdin: None,
        timeout: Duration::from_secs(60),
    }
}

impl Run {
    /// Set an environment variable for rwrun (and so for the ranks).
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.envs.push((k.into(), v.into()));
        self
    }
    /// Feed these bytes on stdin.
    pub fn stdin(mut self, data: Vec<u8>) -> Self {
        self.stdin = Some(data);
        self
    }
    /// Hard timeout of the whole run.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    /// The run starts Slurm job(s) named `name` (`srun -J name`): after a timeout, and
    /// whenever processes of the run are left, `scancel --name=name` ends them too
    /// (killing srun does not kill tasks that slurmstepd started).
    pub fn slurm_job(mut self, name: &str) -> Self {
        self.slurm_job = Some(name.to_string());
        self
    }

    /// Run to completion (or timeout), then assert nothing of the job is left.
    pub fn run(self) -> RunOutput {
        let timeout = self.timeout;
        self.spawn().finish(timeout)
    }

    /// Start rwrun and return at once (for tests that signal it while it runs); end
    /// with [`Running::finish`]. The progress watchdog is on (`RANKWIRE_WATCHDOG=30`)
    /// unless the run sets it.
    pub fn spawn(self) -> Running {
        let mark = marker();
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .env("RANKWIRE_TEST_MARKER", &mark)
            .env("RANKWIRE_WATCHDOG", "30")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        // Own process group, so a timeout can kill rwrun and everything under it.
        cmd.process_group(0);
        let shm_before = shm_entries();
        let start = Instant::now();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.program.display()));
        let stdin_thread = self.stdin.map(|data| {
            let mut w = child.stdin.take().expect("stdin pipe");
            std::thread::spawn(move || {
                use std::io::Write;
                let _ = w.write_all(&data);
            })
        });
        let out_t = reader(child.stdout.take().expect("stdout pipe"));
        let err_t = reader(child.stderr.take().expect("stderr pipe"));
        Running {
            child,
            program: self.program,
            slurm_job: self.slurm_job,
            args: self.args,
            mark,
            shm_before,
            start,
            stdin_thread,
            out_t,
            err_t,
        }
    }
}

/// A running `rwrun` (see [`Run::spawn`]).
pub struct Running {
    child: Child,
    program: PathBuf,
    slurm_job: Option<String>,
    args: Vec<String>,
    mark: String,
    shm_before: std::collections::HashSet<String>,
    start: Instant,
    stdin_thread: Option<std::thread::JoinHandle<()>>,
    out_t: std::thread::JoinHandle<String>,
    err_t: std::thread::JoinHandle<String>,
}

impl Running {
    /// Process id of rwrun.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Pids of the job's processes still running (rwrun, its reaper, the ranks).
    pub fn processes(&self) -> Vec<u32> {
        processes_with_marker(&self.mark)
    }

    /// Wait for rwrun to exit (killing its process group after `timeout`), then assert
    /// that no process, /dev/shm entry of the job is left.
    pub fn finish(mut self, timeout: Duration) -> RunOutput {
        let pgid = self.child.id() as i32;
        let status = wait_deadline(&mut self.child, timeout);
        if status.is_none() {
            // SAFETY: plain kill(2) on the group we created.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = self.child.wait();
            if let Some(name) = &self.slurm_job {
                slurm::scancel_name(name);
            }
        }
        let elapsed = self.start.elapsed();
        if let Some(t) = self.stdin_thread {
            let _ = t.join();
        }
        let stdout = self.out_t.join().unwrap_or_default();
        let stderr = self.err_t.join().unwrap_or_default();
        if let Some(name) = &self.slurm_job
            && !wait_no_leftovers_quiet(&self.mark, Duration::from_secs(5))
        {
            slurm::scancel_name(name);
        }
        let shm_left = wait_no_new_shm(&self.shm_before, Duration::from_secs(3));
        assert!(
            shm_left.is_empty(),
            "/dev/shm entries left by the job: {shm_left:?}\n--- stderr\n{stderr}"
        );
        let leftovers = wait_no_leftovers(&self.mark, Duration::from_secs(5));
        assert!(
            leftovers.is_empty(),
            "processes of the job left running: {leftovers:?}\n--- stderr\n{stderr}"
        );
        assert!(
            status.is_some(),
            "{} {:?} timed out after {:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            self.program.display(),
            self.args,
            timeout
        );
        RunOutput {
            status,
            stdout,
            stderr,
            elapsed,
        }
    }
}

fn reader<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    })
}

fn wait_deadline(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// Pids of processes whose environment holds `RANKWIRE_TEST_MARKER=<mark>`.
pub fn processes_with_marker(mark: &str) -> Vec<u32> {
    let needle = format!("RANKWIRE_TEST_MARKER={mark}\0");
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            let mut env = env;
            env.push(0);
            if env.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                // Zombies waiting for a reaper do not count as running.
                let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                if !stat.contains(") Z ") {
                    found.push(pid);
                }
            }
        }
    }
    found
}

/// Wait up to `grace` for every process with the marker to be gone; returns the ones
/// still there (and kills them, so one failing test does not disturb others).
pub fn wait_no_leftovers(mark: &str, grace: Duration) -> Vec<u32> {
    if wait_no_leftovers_quiet(mark, grace) {
        return Vec::new();
    }
    let left = processes_with_marker(mark);
    for &p in &left {
        // SAFETY: plain kill(2).
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
    left
}

// Wait up to `grace` for the run's processes to end, without killing any; whether
// they did.
fn wait_no_leftovers_quiet(mark: &str, grace: Duration) -> bool {
    let deadline = Instant::now() + grace;
    while !processes_with_marker(mark).is_empty() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Names of rankwire entries in /dev/shm.
pub fn shm_entries() -> std::collections::HashSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("rankwire-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Wait up to `grace` for rankwire /dev/shm entries that were not in `before` to go
/// away; returns those still there. (Other tests running at the same time create
/// segments too, but theirs live only milliseconds: ranks unlink them once mapped.)
pub fn wait_no_new_shm(before: &std::collections::HashSet<String>, grace: Duration) -> Vec<String> {
    let deadline = Instant::now() + grace;
    loop {
        // Segments of jobs still running belong to tests running at the same time
        // (nextest runs two at once); only those of finished jobs are leftovers.
        let new: Vec<String> = shm_entries()
            .difference(before)
            .filter(|name| !owner_alive(name))
            .cloned()
            .collect();
        if new.is_empty() || Instant::now() > deadline {
            return new;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the job that owns /dev/shm entry `name` is still running: for
/// `rankwire-rw<rwrun pid><8 hex>-…` (rwrun's job ids) whether that rwrun process
/// exists; for `rankwire-slurm-<job>-…` (srun-launched jobs) whether Slurm still lists
/// the job. Unknown names count as finished.
pub fn owner_alive(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("rankwire-") else {
        return false;
    };
    let job = rest.split('-').next().unwrap_or("");
    if let Some(id) = job.strip_prefix("rw")
        && id.len() > 8
        && let Ok(pid) = id[..id.len() - 8].parse::<u32>()
    {
        return std::path::Path::new(&format!("/proc/{pid}")).exists();
    }
    if let Some(slurm) = rest.strip_prefix("slurm-") {
        let job = slurm.split('-').next().unwrap_or("");
        if job.parse::<u64>().is_err() {
            return false;
        }
        // The job may belong to either private test cluster.
        return [slurm::local_conf(), slurm::netns_conf()]
            .iter()
            .any(|conf| {
                Command::new("timeout")
                    .args(["5", "squeue", "-h", "-j", job, "-o", "%T"])
                    .env("SLURM_CONF", conf)
                    .output()
                    .is_ok_and(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
            });
    }
    false
}

/// Run scenario program `app` as `rwrun -n <n> <app> <args...>` with `env`, and assert
/// that the job exits 0 and every rank printed `rank <r>: <args[0]> OK`.
pub fn run_scenario(
    app: &str,
    n: usize,
    env: &[(&str, &str)],
    args: &[&str],
    timeout: Duration,
) -> RunOutput {
    let mut v = vec!["-n".to_string(), n.to_string(), app.to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    let mut run = rwrun(v).timeout(timeout);
    for (k, val) in env {
        run = run.env(k, val);
    }
    let out = run.run();
    assert_eq!(
        out.code(),
        0,
        "{args:?} on {n} ranks with {env:?} failed\n--- stdout\n{}\n--- stderr\n{}",
        out.stdout,
        out.stderr
    );
    for r in 0..n {
        let line = format!("rank {r}: {} OK", args[0]);
        assert!(
            out.stdout.contains(&line),
            "{args:?} with {env:?}: missing {line:?}\n{}",
            out.stdout
        );
    }
    out
}

/// A real, private Slurm cluster for the tests in `tests/slurm.rs`: started by
/// `scripts/slurm/start-local-slurm.sh` (single node) and `start-netns-slurm.sh` (nodes
/// in network namespaces), which `scripts/test.sh` runs as root. The tests reach them only
/// through their own configuration files ([`local_conf`], [`netns_conf`], passed as
/// `SLURM_CONF` to every Slurm command), never through the machine's
/// `/etc/slurm/slurm.conf`: a Slurm the machine runs itself is never used.
pub mod slurm {
    use std::process::Command;
    use std::time::Duration;

    /// Set (to `1`) by `scripts/test.sh` when it started the clusters: a test that
    /// finds no cluster then fails instead of skipping.
    pub const REQUIRE_ENV: &str = "RANKWIRE_REQUIRE_SLURM";

    /// Configuration of the single-node test cluster: `RANKWIRE_SLURM_CONF` (set by
    /// `scripts/test.sh`), else that of `start-local-slurm.sh` with its default directory.
    pub fn local_conf() -> String {
        std::env::var("RANKWIRE_SLURM_CONF")
            .unwrap_or_else(|_| "/tmp/rankwire-slurm/slurm.conf".into())
    }

    /// Configuration of the network-namespace cluster: `RANKWIRE_SLURM_NETNS_CONF` (set
    /// by `scripts/test.sh`), else that of `start-netns-slurm.sh` with its default directory.
    pub fn netns_conf() -> String {
        std::env::var("RANKWIRE_SLURM_NETNS_CONF")
            .unwrap_or_else(|_| "/tmp/rankwire-slurm-netns/slurm.conf".into())
    }

    /// Whether the cluster of `conf` (`None`: the single-node test cluster, [`local_conf`])
    /// answers with at least `nodes` usable nodes. When it does not: panics if
    /// [`REQUIRE_ENV`] is `1`, else prints why `test` is skipped and returns false.
    pub fn available_or_skip(test: &str, conf: Option<&str>, nodes: usize) -> bool {
        let local = local_conf();
        let conf = conf.unwrap_or(&local);
        let mut c = Command::new("timeout");
        c.args(["10", "sinfo", "-h", "-N", "-o", "%N %T"]);
        c.env("SLURM_CONF", conf);
        let (ok, detail) = match c.output() {
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout).into_owned();
                let up = text
                    .lines()
                    .filter(|l| {
                        let st = l.split_whitespace().nth(1).unwrap_or("");
                        ["idle", "mixed", "allocated", "completing"]
                            .iter()
                            .any(|s| st.starts_with(s))
                    })
                    .count();
                (
                    o.status.success() && up >= nodes,
                    format!(
                        "sinfo: {} {text:?} {}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr)
                    ),
                )
            }
            Err(e) => (false, format!("cannot run sinfo: {e}")),
        };
        if ok {
            return true;
        }
        if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
            panic!(
                "{test}: no Slurm cluster with {nodes} usable node(s) ({conf}) although {REQUIRE_ENV}=1 \
                 (scripts/test.sh starts it with scripts/slurm/start-*-slurm.sh; see its output and \
                 /tmp/rankwire-slurm*/log): {detail}"
            );
        }
        eprintln!(
            "skipped: {test}: no Slurm cluster with {nodes} usable node(s) ({conf}); as root, \
             scripts/slurm/start-local-slurm.sh (and start-netns-slurm.sh for multi-node) start \
             one, and scripts/test.sh does so itself ({detail})"
        );
        false
    }

    /// Set to `1` (by .ci/run, which installs libpmix) to make a PMIx test fail instead of
    /// skip when the PMIx library Slurm's plugin loads is absent.
    pub const REQUIRE_PMIX_ENV: &str = "RANKWIRE_REQUIRE_PMIX";

    /// The library Debian's Slurm 22.05 `mpi_pmix_v4` plugin loads (its path is built
    /// in; package libpmix-dev). It must be present when slurmd starts.
    pub const SLURM_PMIX_LIB: &str = "/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so";

    /// As [`available_or_skip`], and also the PMIx library of [`SLURM_PMIX_LIB`]: without
    /// it `srun --mpi=pmix` cannot work (Slurm's step hangs), so the test skips with a
    /// message, or fails where [`REQUIRE_PMIX_ENV`] is `1`.
    pub fn pmix_or_skip(test: &str, conf: Option<&str>, nodes: usize) -> bool {
        if !available_or_skip(test, conf, nodes) {
            return false;
        }
        if std::path::Path::new(SLURM_PMIX_LIB).exists() {
            return true;
        }
        if std::env::var(REQUIRE_PMIX_ENV).as_deref() == Ok("1") {
            panic!(
                "{test}: {SLURM_PMIX_LIB} is absent although {REQUIRE_PMIX_ENV}=1 (install \
                 libpmix2 and libpmix-dev before Slurm starts)"
            );
        }
        eprintln!(
            "skipped: {test}: no {SLURM_PMIX_LIB} (packages libpmix2 libpmix-dev, installed \
             before slurmd starts, give Slurm's PMIx plugin its library)"
        );
        false
    }

    /// `scancel --name=<name>` on both test clusters, ignoring errors.
    pub fn scancel_name(name: &str) {
        for conf in [local_conf(), netns_conf()] {
            if !std::path::Path::new(&conf).exists() {
                continue;
            }
            let mut c = Command::new("timeout");
            c.args(["10", "scancel", &format!("--name={name}")]);
            c.env("SLURM_CONF", conf);
            let _ = c.output();
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    /// A job name unique to this test process and `tag` (`rwtest-<pid>-<tag>`).
    pub fn job_name(tag: &str) -> String {
        format!("rwtest-{}-{tag}", std::process::id())
    }
}
