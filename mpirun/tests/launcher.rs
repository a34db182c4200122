//! Multi-process tests of `rwrun` (scenarios B013, B015, B017).
//!
//! Every run has a hard timeout enforced here (rwrun is SIGKILLed and the test fails on
//! expiry), and afterwards no process may be left that carries the run's unique
//! `RW_TEST_MARKER` environment value (ranks and their children inherit it from rwrun).
//!
//! `probe_rank` is not a test of its own: when the environment has `RW_PROBE`, this test
//! binary is running as a rank under rwrun and plays a bootstrap client (or a rankwire
//! program, through `rankwire::init`).

use rankwire::bootstrap::client::{BootstrapClient, BootstrapError, spawn_launcher_watch};
use rankwire::bootstrap::env as rwenv;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const RWRUN: &str = env!("CARGO_BIN_EXE_rwrun");
/// Hard bound on one rwrun run unless a test says otherwise.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long leftovers may take to disappear after rwrun exited.
const LEFTOVER_TIMEOUT: Duration = Duration::from_secs(5);

static COUNTER: AtomicUsize = AtomicUsize::new(0);

// ---------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------

enum Input {
    /// /dev/null.
    Null,
    /// Written in full, then closed.
    Bytes(Vec<u8>),
    /// Written in chunks of `chunk` bytes with `pause` between them, then closed.
    Slow {
        data: Vec<u8>,
        chunk: usize,
        pause: Duration,
    },
    /// A pipe the test holds open (never written, never closed during the run).
    Held,
}

struct Job {
    name: String,
    child: Child,
    marker: String,
    started: Instant,
    stdout: JoinHandle<Vec<u8>>,
    stderr: JoinHandle<Vec<u8>>,
    held_stdin: Option<ChildStdin>,
}

struct Finished {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
    elapsed: Duration,
}

impl Finished {
    fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    fn assert_code(&self, want: i32) {
        assert_eq!(
            self.code,
            Some(want),
            "exit status; stdout:\n{}\nstderr:\n{}",
            truncate(&self.stdout_str()),
            truncate(&self.stderr)
        );
    }
}

fn truncate(s: &str) -> String {
    if s.len() > 4000 {
        format!(
            "{}... ({} bytes)",
            s.chars().take(4000).collect::<String>(),
            s.len()
        )
    } else {
        s.to_string()
    }
}

/// Start rwrun with `args` (and extra environment), with a unique marker.
fn start(name: &str, args: &[&str], envs: &[(&str, &str)], input: Input, own_pgroup: bool) -> Job {
    start_with(name, args, envs, input, own_pgroup, [None, None])
}

/// Read at most this many bytes of rwrun's stdout / stderr, then close the pipe (as
/// `head -c` would): `[stdout, stderr]`, `None` reads to the end.
type CloseAfter = [Option<usize>; 2];

/// [`start`], closing rwrun's stdout and/or stderr early.
fn start_with(
    name: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    input: Input,
    own_pgroup: bool,
    close_after: CloseAfter,
) -> Job {
    let marker = format!(
        "{name}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let mut cmd = Command::new(RWRUN);
    cmd.args(args)
        .env("RW_TEST_MARKER", &marker)
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(match input {
            Input::Null => Stdio::null(),
            _ => Stdio::piped(),
        });
    // SAFETY: only async-signal-safe calls between fork and exec. The test harness may
    // run with signals ignored (nohup, background CI); rwrun must see defaults.
    unsafe {
        cmd.pre_exec(move || {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGTTIN] {
                libc::signal(sig, libc::SIG_DFL);
            }
            if own_pgroup {
                libc::setpgid(0, 0);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn rwrun");
    let mut held_stdin = None;
    let stdin = child.stdin.take();
    match input {
        Input::Null => {}
        Input::Held => held_stdin = stdin,
        Input::Bytes(data) => {
            let mut w = stdin.expect("stdin pipe");
            std::thread::spawn(move || {
                // EPIPE is fine: rank 0 may exit without reading.
                let _ = w.write_all(&data);
            });
        }
        Input::Slow { data, chunk, pause } => {
            let mut w = stdin.expect("stdin pipe");
            std::thread::spawn(move || {
                for c in data.chunks(chunk) {
                    if w.write_all(c).is_err() {
                        return;
                    }
                    std::thread::sleep(pause);
                }
            });
        }
    }
    let out = child.stdout.take().expect("stdout pipe");
    let err = child.stderr.take().expect("stderr pipe");
    let stdout = std::thread::spawn(move || read_pipe(out, close_after[0]));
    let stderr = std::thread::spawn(move || read_pipe(err, close_after[1]));
    Job {
        name: name.to_string(),
        child,
        marker,
        started: Instant::now(),
        stdout,
        stderr,
        held_stdin,
    }
}

impl Job {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: i32) {
        // SAFETY: plain system call on our own child.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// Wait for rwrun with a hard timeout; then for its output to end and for every
    /// process of the job to be gone.
    fn wait(mut self, timeout: Duration) -> Finished {
        let deadline = self.started + timeout;
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                kill_marked(&self.marker);
                panic!("{}: rwrun did not finish within {timeout:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.started.elapsed();
        drop(self.held_stdin.take());
        // rwrun's stdout/stderr must reach EOF right away: nothing else may hold them.
        let pipes_deadline = Instant::now() + LEFTOVER_TIMEOUT;
        while !(self.stdout.is_finished() && self.stderr.is_finished()) {
            if Instant::now() >= pipes_deadline {
                kill_marked(&self.marker);
                panic!(
                    "{}: rwrun's output pipes stayed open after it exited",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let stdout = self.stdout.join().expect("stdout reader");
        let stderr =
            String::from_utf8_lossy(&self.stderr.join().expect("stderr reader")).into_owned();
        assert_nothing_left(&self.name, &self.marker, &stderr);
        Finished {
            code: status
                .code()
                .or_else(|| status_signal(status).map(|s| 128 + s)),
            stdout,
            stderr,
            elapsed,
        }
    }
}

// Read to EOF, or only `limit` bytes and then close the pipe.
fn read_pipe(mut r: impl Read, limit: Option<usize>) -> Vec<u8> {
    let mut v = Vec::new();
    match limit {
        None => {
            let _ = r.read_to_end(&mut v);
        }
        Some(n) => {
            // `take` consumes `r`: the read end closes right after.
            let _ = r.take(n as u64).read_to_end(&mut v);
        }
    }
    v
}

fn status_signal(st: std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    st.signal()
}

/// Run to completion.
fn run(name: &str, args: &[&str], input: Input) -> Finished {
    start(name, args, &[], input, false).wait(RUN_TIMEOUT)
}

/// Pids of live processes whose environment has `RW_TEST_MARKER=<marker>`.
fn marked_processes(marker: &str) -> Vec<(u32, String)> {
    let needle = format!("RW_TEST_MARKER={marker}\0").into_bytes();
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if environ
            .windows(needle.len())
            .any(|w| w == needle.as_slice())
        {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push((pid, cmdline));
        }
    }
    found
}

fn kill_marked(marker: &str) {
    for (pid, _) in marked_processes(marker) {
        // SAFETY: plain system call; the marker is unique to this test run.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

fn assert_nothing_left(name: &str, marker: &str, stderr: &str) {
    let deadline = Instant::now() + LEFTOVER_TIMEOUT;
    loop {
        let left = marked_processes(marker);
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            kill_marked(marker);
            panic!("{name}: processes of the job still running: {left:?}\nrwrun stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "rwrun-test-{name}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn count(&self, prefix: &str) -> usize {
        std::fs::read_dir(&self.0)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .count()
    }

    /// Wait until `n` files named `prefix*` exist.
    fn wait_for(&self, prefix: &str, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.count(prefix) < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} {prefix}* files in {:?}",
                self.count(prefix),
                self.0
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    // xorshift64*: deterministic, includes NULs and every byte value.
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

fn sha256_of(data: &[u8]) -> String {
    let mut c = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = c.stdin.take().unwrap();
    let data = data.to_vec();
    let t = std::thread::spawn(move || w.write_all(&data).unwrap());
    let out = c.wait_with_output().unwrap();
    t.join().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

// ---------------------------------------------------------------------------------------
// Basics and CLI
// ---------------------------------------------------------------------------------------

#[test]
fn two_ranks_run_hostname() {
    let f = run("hostname", &["-n", "2", "hostname"], Input::Null);
    f.assert_code(0);
    let out = f.stdout_str();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0], lines[1]);
}

#[test]
fn np_single_dash_and_environment_contract() {
    let script = r#"echo "$RANKWIRE_RANK $RANKWIRE_SIZE $RANKWIRE_LOCAL_RANK $RANKWIRE_LOCAL_SIZE $RANKWIRE_BOOTSTRAP_ADDR $RANKWIRE_JOB_ID $RANKWIRE_JOB_SECRET FOO=$FOO EMPTY=[$EMPTY] HOME=$HOME""#;
    let f = run(
        "env",
        &[
            "-np",
            "2",
            "-x",
            "FOO=bar baz",
            "-x",
            "EMPTY=",
            "-x",
            "HOME",
            "--oversubscribe",
            "sh",
            "-c",
            script,
        ],
        Input::Null,
    );
    f.assert_code(0);
    let out = f.stdout_str();
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{out}");
    let home = std::env::var("HOME").unwrap_or_default();
    let mut job = None;
    for (i, line) in lines.iter().enumerate() {
        let w: Vec<&str> = line.split(' ').collect();
        assert_eq!(
            &w[..4],
            &[i.to_string().as_str(), "2", i.to_string().as_str(), "2"],
            "{line}"
        );
        assert!(w[4].starts_with("127.0.0.1:"), "{line}");
        assert!(
            w[5].starts_with("rw") && w[5].chars().all(|c| c.is_ascii_alphanumeric()),
            "{line}"
        );
        assert!(
            w[6].len() == 32 && w[6].chars().all(|c| c.is_ascii_hexdigit()),
            "{line}"
        );
        assert!(
            line.ends_with(&format!("FOO=bar baz EMPTY=[] HOME={home}")),
            "{line}"
        );
        // Same job for every rank.
        assert_eq!(*job.get_or_insert((w[4], w[5], w[6])), (w[4], w[5], w[6]));
    }
}

/// Issue 21: a hard RLIMIT_NOFILE below what rwrun itself needs for the ranks (a pidfd,
/// two pipes and two bootstrap connections each) refuses the job before any rank starts,
/// naming the limit, the need and the fix, instead of stalling in the bootstrap's
/// accept once the descriptors run out.
#[test]
fn hard_open_file_limit_below_the_launchers_need_refuses_the_job() {
    let started = std::time::Instant::now();
    let out = std::process::Command::new("timeout")
        .args(["-k", "5", "60", "bash", "-c"])
        .arg(format!("ulimit -n 300 && exec {RWRUN} -n 64 true"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    for needle in [
        "RLIMIT_NOFILE allows 300",
        "a job of 64 ranks needs about 448",
        "ulimit -Hn 448",
    ] {
        assert!(stderr.contains(needle), "{needle:?} missing: {stderr}");
    }
}

#[test]
fn version_help_and_usage_errors() {
    let f = run("version", &["--version"], Input::Null);
    f.assert_code(0);
    assert_eq!(
        f.stdout_str().trim(),
        format!("rwrun {}", env!("CARGO_PKG_VERSION"))
    );
    let f = run("help", &["--help"], Input::Null);
    f.assert_code(0);
    assert!(f.stdout_str().contains("RANKWIRE_KILL_GRACE_MS"));
    let f = run("noprog", &["-n", "2"], Input::Null);
    assert_eq!(f.code, Some(2), "{}", f.stderr);
    let f = run("zero", &["-n", "0", "true"], Input::Null);
    assert_eq!(f.code, Some(2), "{}", f.stderr);
}

#[test]
fn rank_count_spellings_timeouts_and_usage() {
    for spelling in [
        &["-np", "2"][..],
        &["-np=2"],
        &["-np2"],
        &["-n=2"],
        &["-n2"],
        &["--np=2"],
    ] {
        let mut args = spelling.to_vec();
        args.extend(["sh", "-c", "echo $RANKWIRE_SIZE"]);
        let f = run("np-spelling", &args, Input::Null);
        f.assert_code(0);
        assert_eq!(f.stdout_str(), "2\n2\n", "{spelling:?}");
    }
    let f = run(
        "unknown-option",
        &["--bind-to", "core", "true"],
        Input::Null,
    );
    assert_eq!(f.code, Some(2), "{}", f.stderr);
    assert!(
        f.stderr.contains("unknown option \"--bind-to\""),
        "{}",
        f.stderr
    );
    // Huge timeouts are accepted (clamped to 10 years).
    for t in ["1e20", "inf"] {
        let f = run(
            "huge-timeout",
            &["--timeout", t, "-n", "2", "true"],
            Input::Null,
        );
        f.assert_code(0);
    }
    let f = run("bad-timeout", &["--timeout", "0", "true"], Input::Null);
    assert_eq!(f.code, Some(2), "{}", f.stderr);
    assert!(
        f.stderr.contains("positive number of seconds"),
        "{}",
        f.stderr
    );
    // -n is optional: the usage line does not demand it, and the help gives its default.
    let f = run("usage", &["--help"], Input::Null);
    f.assert_code(0);
    let help = f.stdout_str();
    assert!(
        help.contains("Usage: rwrun [OPTIONS] PROGRAM [ARGS]..."),
        "{help}"
    );
    assert!(
        help.contains("Default: the slot count of --host/--hostfile, else 1"),
        "{help}"
    );
    let f = run(
        "default-n",
        &["sh", "-c", "echo $RANKWIRE_SIZE"],
        Input::Null,
    );
    f.assert_code(0);
    assert_eq!(f.stdout_str(), "1\n");
}

/// A non-loopback IPv4 address of this machine's interfaces, if it has one.
fn own_non_loopback_ipv4() -> Option<std::net::Ipv4Addr> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `ifap` with a list that freeifaddrs releases below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: `p` walks the list returned by getifaddrs, still allocated.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null()
            // SAFETY: non-null address of the entry.
            && i32::from(unsafe { (*ifa.ifa_addr).sa_family }) == libc::AF_INET
        {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            if !ip.is_loopback() {
                found = Some(ip);
                break;
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifap) };
    found
}

#[test]
fn own_interface_addresses_count_as_local() {
    let mut hosts = vec!["127.0.1.1:2".to_string(), "[::1]".to_string()];
    match own_non_loopback_ipv4() {
        Some(ip) => hosts.push(format!("{ip}:2")),
        None => eprintln!("no non-loopback IPv4 address here; checking loopback only"),
    }
    let want = if hosts.len() == 3 { "5\n" } else { "3\n" };
    let list = hosts.join(",");
    let f = run(
        "own-address",
        &[
            "--host",
            &list,
            "sh",
            "-c",
            "[ $RANKWIRE_RANK = 0 ] && echo $RANKWIRE_SIZE; true",
        ],
        Input::Null,
    );
    f.assert_code(0);
    assert_eq!(f.stdout_str(), want, "--host {list}: {}", f.stderr);
}

#[test]
fn remote_hosts_go_through_the_launch_agent_and_local_slots_set_the_size() {
    // An agent that runs the command line here, but tells which host it was given: the
    // local host's rank is forked directly, the remote one goes through the template.
    let agent = [("RANKWIRE_LAUNCH_AGENT", "env RW_AGENT_HOST={host} sh -c")];
    let script = "echo rank=$RANKWIRE_RANK via=${RW_AGENT_HOST:-direct} \
                  local=$RANKWIRE_LOCAL_RANK/$RANKWIRE_LOCAL_SIZE dir=$(pwd) \
                  addr=$RANKWIRE_BOOTSTRAP_ADDR";
    let f = start(
        "remote",
        &["--host", "localhost,far-away-node-7:2", "sh", "-c", script],
        &agent,
        Input::Null,
        false,
    )
    .wait(RUN_TIMEOUT);
    f.assert_code(0);
    let out = f.stdout_str();
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 3, "{out}");
    let cwd = std::env::current_dir().unwrap();
    assert!(
        lines[0].starts_with("rank=0 via=direct local=0/1 "),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("rank=1 via=far-away-node-7 local=0/2 "),
        "{lines:?}"
    );
    assert!(
        lines[2].starts_with("rank=2 via=far-away-node-7 local=1/2 "),
        "{lines:?}"
    );
    for l in &lines {
        assert!(l.contains(&format!("dir={}", cwd.display())), "{l}");
        // Other nodes get every address of this one, loopback last.
        assert!(l.contains("127.0.0.1:") && l.contains(','), "{l}");
    }
    // More ranks than the remote list's slots: refused (usage error).
    let f = run(
        "remote-over",
        &["--host", "localhost,far-away-node-7", "-n", "3", "true"],
        Input::Null,
    );
    assert_eq!(f.code, Some(2));
    assert!(
        f.stderr.contains("-n 3 exceeds the 2 slot(s)"),
        "{}",
        f.stderr
    );
    // A failing agent (host unreachable) is a failing rank: the job ends.
    let f = start(
        "remote-fail",
        &["--host", "localhost,far-away-node-7", "sleep", "30"],
        &[("RANKWIRE_LAUNCH_AGENT", "false {host}")],
        Input::Null,
        false,
    )
    .wait(RUN_TIMEOUT);
    assert_eq!(f.code, Some(1), "{}", f.stderr);
    assert!(f.stderr.contains("rank 1"), "{}", f.stderr);
    // An agent that does not exist: 127, naming the agent and the variable.
    let f = start(
        "remote-noagent",
        &["--host", "far-away-node-7", "true"],
        &[("RANKWIRE_LAUNCH_AGENT", "rw-no-such-agent-x {host}")],
        Input::Null,
        false,
    )
    .wait(RUN_TIMEOUT);
    assert_eq!(f.code, Some(127), "{}", f.stderr);
    assert!(
        f.stderr.contains("with rw-no-such-agent-x: not found")
            && f.stderr.contains("RANKWIRE_LAUNCH_AGENT"),
        "{}",
        f.stderr
    );
    let f = run(
        "localslots",
        &[
            "--host",
            "localhost:2,127.0.0.1",
            "sh",
            "-c",
            "echo $RANKWIRE_SIZE",
        ],
        Input::Null,
    );
    f.assert_code(0);
    assert_eq!(f.stdout_str(), "3\n3\n3\n");

    let dir = TempDir::new("hostfile");
    let hf = dir.0.join("hosts");
    std::fs::write(&hf, "# local only\nlocalhost slots=2\n").unwrap();
    let f = run(
        "hostfile",
        &[
            "--hostfile",
            hf.to_str().unwrap(),
            "sh",
            "-c",
            "echo $RANKWIRE_SIZE",
        ],
        Input::Null,
    );
    f.assert_code(0);
    assert_eq!(f.stdout_str(), "2\n2\n");
}

#[test]
fn missing_program_gives_127() {
    let f = run(
        "missing",
        &["-n", "2", "rwrun-test-no-such-program"],
        Input::Null,
    );
    f.assert_code(127);
    assert!(
        f.stderr.contains("rwrun-test-no-such-program") && f.stderr.contains("not found"),
        "{}",
        f.stderr
    );
}

// ---------------------------------------------------------------------------------------
// B013: failing ranks end the job
// ---------------------------------------------------------------------------------------

#[test]
fn every_rank_failing_gives_its_status() {
    let f = run("allfail", &["-n", "3", "sh", "-c", "exit 3"], Input::Null);
    f.assert_code(3);
}

#[test]
fn ranks_failing_on_their_own_each_get_a_line() {
    // Ranks 1 and 2 ignore SIGTERM and fail by themselves, about when rank 0 fails (often
    // before they are even past `trap`): none of them was ended by rwrun.
    let script = r#"trap "" TERM; [ $RANKWIRE_RANK = 0 ] && exit 3; exit 5"#;
    for i in 0..6 {
        let f = run(
            &format!("ownfail{i}"),
            &["-n", "3", "sh", "-c", script],
            Input::Null,
        );
        assert!(matches!(f.code, Some(3 | 5)), "{:?}\n{}", f.code, f.stderr);
        for (rank, status) in [(0, 3), (1, 5), (2, 5)] {
            let want = format!("rwrun: rank {rank} (pid ");
            let line = f.stderr.lines().find(|l| l.starts_with(&want));
            assert!(
                line.is_some_and(|l| l.ends_with(&format!(") exited with status {status}"))),
                "run {i}: rank {rank}:\n{}",
                f.stderr
            );
        }
        assert!(!f.stderr.contains("terminated"), "run {i}:\n{}", f.stderr);
        assert!(f.elapsed < Duration::from_secs(5), "took {:?}", f.elapsed);
    }
}

#[test]
fn one_failing_rank_ends_the_job_quickly() {
    let script = r#"if [ "$RANKWIRE_RANK" = 2 ]; then exit 3; fi; sleep 30"#;
    let f = run("onefail", &["-n", "4", "sh", "-c", script], Input::Null);
    f.assert_code(3);
    assert!(f.elapsed < Duration::from_secs(5), "took {:?}", f.elapsed);
    assert!(f.stderr.contains("rwrun: rank 2 (pid "), "{}", f.stderr);
    assert!(f.stderr.contains("exited with status 3"), "{}", f.stderr);
    // The ranks rwrun terminated are not reported as failures.
    assert_eq!(
        f.stderr.matches("exited with status").count(),
        1,
        "{}",
        f.stderr
    );
    assert!(
        f.stderr.contains("terminated 3 other ranks"),
        "{}",
        f.stderr
    );
}

#[test]
fn panic_status_and_signals_are_reported() {
    let script = r#"if [ "$RANKWIRE_RANK" = 1 ]; then exit 101; fi; sleep 30"#;
    let f = run("panic", &["-n", "2", "sh", "-c", script], Input::Null);
    f.assert_code(101);
    assert!(
        f.stderr.contains("rank 1") && f.stderr.contains("panic"),
        "{}",
        f.stderr
    );

    // B013 (e): a rank killed by SIGKILL.
    let script = r#"if [ "$RANKWIRE_RANK" = 1 ]; then kill -9 $$; fi; sleep 30"#;
    let f = run("sigkilled", &["-n", "3", "sh", "-c", script], Input::Null);
    f.assert_code(137);
    assert!(
        f.stderr.contains("rank 1 (pid") && f.stderr.contains("killed by signal 9 (SIGKILL)"),
        "{}",
        f.stderr
    );
    assert!(f.elapsed < Duration::from_secs(5), "took {:?}", f.elapsed);
}

#[test]
fn timeout_kills_the_job() {
    let f = run(
        "timeout",
        &["--timeout", "0.5", "-n", "2", "sleep", "30"],
        Input::Null,
    );
    f.assert_code(124);
    assert!(
        f.stderr
            .contains("rwrun: job timed out after 0.5 s; killing ranks"),
        "{}",
        f.stderr
    );
    assert!(f.elapsed < Duration::from_secs(10), "took {:?}", f.elapsed);
}

// ---------------------------------------------------------------------------------------
// B015: signals
// ---------------------------------------------------------------------------------------

fn signal_run(
    name: &str,
    script_body: &str,
    sig: i32,
    grace_ms: &str,
    group: bool,
) -> (Finished, TempDir) {
    let dir = TempDir::new(name);
    let script = format!("D={}; {script_body}", dir.path());
    let job = start(
        name,
        &["-n", "4", "sh", "-c", &script],
        &[("RANKWIRE_KILL_GRACE_MS", grace_ms)],
        Input::Null,
        group,
    );
    dir.wait_for("ready.", 4, Duration::from_secs(20));
    if group {
        // SAFETY: plain system call; rwrun leads its own process group here.
        assert_eq!(unsafe { libc::killpg(job.pid(), sig) }, 0);
    } else {
        job.signal(sig);
    }
    (job.wait(RUN_TIMEOUT), dir)
}

#[test]
fn sigterm_reaches_sleeping_ranks() {
    let (f, _d) = signal_run(
        "term-sleep",
        r#"touch $D/ready.$RANKWIRE_RANK; sleep 30; true"#,
        libc::SIGTERM,
        "5000",
        false,
    );
    f.assert_code(143);
    assert!(f.stderr.contains("received SIGTERM"), "{}", f.stderr);
    // The ranks die of SIGTERM at once, well before the grace.
    assert!(f.elapsed < Duration::from_secs(4), "took {:?}", f.elapsed);
}

#[test]
fn sigint_is_forwarded() {
    let (f, _d) = signal_run(
        "int-sleep",
        r#"touch $D/ready.$RANKWIRE_RANK; sleep 30; true"#,
        libc::SIGINT,
        "5000",
        false,
    );
    f.assert_code(130);
}

#[test]
fn sigterm_to_rwruns_process_group() {
    let (f, _d) = signal_run(
        "term-group",
        r#"touch $D/ready.$RANKWIRE_RANK; sleep 30; true"#,
        libc::SIGTERM,
        "5000",
        true,
    );
    f.assert_code(143);
}

#[test]
fn ranks_handling_sigterm_all_see_it() {
    let body = r#"trap 'touch $D/term.$RANKWIRE_RANK; exit 0' TERM; touch $D/ready.$RANKWIRE_RANK; while :; do sleep 1; done"#;
    let (f, d) = signal_run("term-trap", body, libc::SIGTERM, "5000", false);
    f.assert_code(143);
    assert_eq!(d.count("term."), 4, "stderr: {}", f.stderr);
}

#[test]
fn ranks_ignoring_sigterm_are_killed_after_the_grace() {
    let body = r#"trap '' TERM; touch $D/ready.$RANKWIRE_RANK; while :; do sleep 0.1; done"#;
    let t0 = Instant::now();
    let (f, _d) = signal_run("term-ignored", body, libc::SIGTERM, "400", false);
    f.assert_code(143);
    assert!(f.stderr.contains("sending SIGKILL"), "{}", f.stderr);
    assert!(t0.elapsed() >= Duration::from_millis(400));
    assert!(f.elapsed < Duration::from_secs(10), "took {:?}", f.elapsed);
}

#[test]
fn a_second_sigterm_kills_at_once_and_says_so() {
    // As `timeout(1)` does: SIGTERM twice. The ranks ignore it; the grace is long.
    let dir = TempDir::new("term-twice");
    let script = format!(
        r#"trap '' TERM; touch {}/ready.$RANKWIRE_RANK; while :; do sleep 0.1; done"#,
        dir.path()
    );
    let job = start(
        "term-twice",
        &["-n", "2", "sh", "-c", &script],
        &[("RANKWIRE_KILL_GRACE_MS", "20000")],
        Input::Null,
        false,
    );
    dir.wait_for("ready.", 2, Duration::from_secs(20));
    job.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    job.signal(libc::SIGTERM);
    let f = job.wait(RUN_TIMEOUT);
    f.assert_code(143);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        f.stderr
            .contains("rwrun: received SIGTERM again; sending SIGKILL to the ranks now"),
        "{}",
        f.stderr
    );
    // Nothing claims the grace ran out.
    assert!(!f.stderr.contains("still running"), "{}", f.stderr);
}

#[test]
fn sigkill_to_rwrun_takes_the_ranks_and_their_children_down() {
    let dir = TempDir::new("sigkill");
    // Rank 0 is `sleep` itself (PDEATHSIG); the others are shells with a `sleep` child,
    // which only the reaper can catch.
    let script = format!(
        r#"touch {d}/ready.$RANKWIRE_RANK; if [ "$RANKWIRE_RANK" = 0 ]; then exec sleep 30; fi; sleep 30; true"#,
        d = dir.path()
    );
    let job = start(
        "sigkill",
        &["-n", "3", "sh", "-c", &script],
        &[],
        Input::Null,
        false,
    );
    dir.wait_for("ready.", 3, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(100));
    job.signal(libc::SIGKILL);
    let f = job.wait(RUN_TIMEOUT); // also asserts that nothing is left within 5 s
    assert_eq!(f.code, Some(137));
}

// ---------------------------------------------------------------------------------------
// B017: stdin
// ---------------------------------------------------------------------------------------

const HASH_RANK0: &str =
    r#"if [ "$RANKWIRE_RANK" = 0 ]; then sha256sum; else cat; echo "eof$RANKWIRE_RANK"; fi"#;

fn check_stdin(name: &str, data: Vec<u8>, input: impl FnOnce(Vec<u8>) -> Input, script: &str) {
    let want = sha256_of(&data);
    let f = run(name, &["-n", "2", "sh", "-c", script], input(data));
    f.assert_code(0);
    let out = f.stdout_str();
    assert!(out.contains(&want), "want {want} in {out}");
    // Rank 1 reads /dev/null: EOF at once, nothing else.
    assert!(out.contains("eof1\n"), "{out}");
    assert_eq!(out.len(), want.len() + "eof1\n".len(), "{out}");
}

#[test]
fn stdin_goes_to_rank0_whole() {
    for (i, n) in [0usize, 1, 65_535, 65_536, 65_537, 1 << 20, 64 << 20]
        .into_iter()
        .enumerate()
    {
        check_stdin(
            &format!("stdin{n}"),
            random_bytes(n, i as u64 + 7),
            Input::Bytes,
            HASH_RANK0,
        );
    }
}

#[test]
fn stdin_with_slow_producer_and_slow_reader() {
    let data = random_bytes(300_000, 99);
    check_stdin(
        "stdin-slow-producer",
        data.clone(),
        |data| Input::Slow {
            data,
            chunk: 7_001,
            pause: Duration::from_millis(2),
        },
        HASH_RANK0,
    );
    let slow_reader = r#"if [ "$RANKWIRE_RANK" = 0 ]; then sleep 0.5; sha256sum; else cat; echo "eof$RANKWIRE_RANK"; fi"#;
    check_stdin("stdin-slow-reader", data, Input::Bytes, slow_reader);
}

#[test]
fn rank0_not_reading_stdin_does_not_hang_rwrun() {
    // Rank 0 exits without reading 4 MiB of input.
    let f = run(
        "stdin-unread",
        &["-n", "2", "true"],
        Input::Bytes(random_bytes(4 << 20, 3)),
    );
    f.assert_code(0);
    assert!(f.elapsed < Duration::from_secs(5), "took {:?}", f.elapsed);
    // stdin is a pipe that never closes (like a terminal nobody types into).
    let job = start(
        "stdin-held",
        &["-n", "2", "sh", "-c", "sleep 0.2"],
        &[],
        Input::Held,
        false,
    );
    let f = job.wait(Duration::from_secs(10));
    f.assert_code(0);
    assert!(f.elapsed < Duration::from_secs(5), "took {:?}", f.elapsed);
}

// ---------------------------------------------------------------------------------------
// Output forwarding
// ---------------------------------------------------------------------------------------

#[test]
fn tagged_output_of_many_lines_arrives_complete_and_in_order() {
    let f = run(
        "tagged",
        &[
            "-n",
            "2",
            "--tag-output",
            "sh",
            "-c",
            "seq 1 10000; echo err$RANKWIRE_RANK >&2",
        ],
        Input::Null,
    );
    f.assert_code(0);
    let out = f.stdout_str();
    for rank in 0..2 {
        let prefix = format!("[{rank}] ");
        let nums: Vec<u32> = out
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(|n| n.parse().unwrap_or_else(|_| panic!("bad line {n:?}")))
            .collect();
        assert_eq!(nums, (1..=10_000).collect::<Vec<_>>(), "rank {rank}");
        assert!(
            f.stderr.contains(&format!("[{rank}] err{rank}\n")),
            "{}",
            f.stderr
        );
    }
    assert_eq!(out.lines().count(), 20_000);
}

#[test]
fn untagged_output_keeps_lines_whole() {
    let f = run(
        "untagged",
        &["-n", "3", "sh", "-c", "seq 1 10000; seq 1 10000 >&2"],
        Input::Null,
    );
    f.assert_code(0);
    for text in [f.stdout_str(), f.stderr.clone()] {
        let mut counts = vec![0u32; 10_001];
        for line in text.lines() {
            let n: usize = line
                .parse()
                .unwrap_or_else(|_| panic!("mangled line {line:?}"));
            counts[n] += 1;
        }
        assert!(counts[1..].iter().all(|&c| c == 3));
    }
}

#[test]
fn last_line_without_newline_and_binary_bytes() {
    let f = run(
        "partial",
        &["-n", "1", "printf", "a\\nb\\000\\377c"],
        Input::Null,
    );
    f.assert_code(0);
    // The last line is ended with a newline.
    assert_eq!(f.stdout, b"a\nb\0\xffc\n");
    let f = run(
        "partial-tagged",
        &["-n", "1", "--tag-output", "printf", "a\\nb"],
        Input::Null,
    );
    f.assert_code(0);
    assert_eq!(f.stdout_str(), "[0] a\n[0] b\n");
}

/// rwrun with its stdout (or stderr) closed after `limit` bytes: like a program killed
/// by SIGPIPE, it ends the job promptly and exits with 141.
fn closed_output_run(name: &str, args: &[&str], close_after: CloseAfter) -> Finished {
    let job = start_with(name, args, &[], Input::Null, false, close_after);
    let f = job.wait(Duration::from_secs(20));
    f.assert_code(141);
    assert!(f.elapsed < Duration::from_secs(5), "took {:?}", f.elapsed);
    f
}

#[test]
fn closed_stdout_ends_the_job_with_141() {
    // `rwrun -n 1 yes | head -1`
    let f = closed_output_run("epipe-yes", &["-n", "1", "yes"], [Some(2), None]);
    assert_eq!(f.stdout, b"y\n");
    // `rwrun -n 4 --tag-output sh -c 'seq 1 100000000' | head -2`
    let f = closed_output_run(
        "epipe-seq",
        &["-n", "4", "--tag-output", "sh", "-c", "seq 1 100000000"],
        [Some(12), None],
    );
    assert_eq!(f.stdout.len(), 12);
    // Ranks that do not write keep nothing alive either.
    let script = r#"if [ "$RANKWIRE_RANK" = 0 ]; then yes; else sleep 30; fi"#;
    closed_output_run(
        "epipe-quiet",
        &["-n", "3", "sh", "-c", script],
        [Some(100), None],
    );
}

#[test]
fn closed_stderr_ends_the_job_with_141() {
    let script = r#"if [ "$RANKWIRE_RANK" = 1 ]; then yes >&2; else sleep 30; fi"#;
    let f = closed_output_run(
        "epipe-stderr",
        &["-n", "2", "sh", "-c", script],
        [None, Some(2)],
    );
    assert_eq!(f.stderr, "y\n");
}

#[test]
fn last_lines_without_newline_are_not_joined() {
    let script = r#"printf "out$RANKWIRE_RANK"; printf "err$RANKWIRE_RANK" >&2; exit 1"#;
    let f = run(
        "partial-many",
        &["-n", "3", "sh", "-c", script],
        Input::Null,
    );
    f.assert_code(1);
    let mut out: Vec<&str> = f
        .stdout
        .split(|&b| b == b'\n')
        .map(|l| std::str::from_utf8(l).unwrap())
        .collect();
    assert_eq!(out.pop(), Some(""), "ends with a newline");
    out.sort();
    assert_eq!(out, ["out0", "out1", "out2"]);
    // Each rank's partial line and each of rwrun's lines is a line of its own.
    let err: Vec<&str> = f.stderr.lines().collect();
    assert!(f.stderr.ends_with('\n'), "{}", f.stderr);
    for rank in 0..3 {
        assert!(err.contains(&format!("err{rank}").as_str()), "{}", f.stderr);
    }
    for line in &err {
        assert!(
            line.starts_with("err") && line.len() == 4 || line.starts_with("rwrun: rank "),
            "{line:?} in\n{}",
            f.stderr
        );
    }
}

#[test]
fn a_background_child_holding_stdout_does_not_keep_rwrun() {
    let f = run(
        "grandchild",
        &["-n", "1", "sh", "-c", "echo a; sleep 30 & echo b"],
        Input::Null,
    );
    f.assert_code(0);
    assert_eq!(f.stdout_str(), "a\nb\n");
    assert!(f.elapsed < Duration::from_secs(5), "took {:?}", f.elapsed);
}

// ---------------------------------------------------------------------------------------
// Bootstrap server, through the real client
// ---------------------------------------------------------------------------------------

fn probe(name: &str, mode: &str, ranks: &str) -> Finished {
    probe_with(name, mode, ranks, None)
}

/// The probe command line (this test binary as a rank).
fn probe_command() -> String {
    let exe = std::env::current_exe().unwrap();
    format!(
        "{} --exact probe_rank --nocapture --test-threads=1",
        exe.to_str().unwrap()
    )
}

/// Run `ranks` probes in `mode`; with `shell`, every rank runs `sh -c shell` instead,
/// where `$PROBE` is the probe command.
fn probe_with(name: &str, mode: &str, ranks: &str, shell: Option<&str>) -> Finished {
    let probe_env = format!("RW_PROBE={mode}");
    let cmd = probe_command();
    let mut args = vec!["-n", ranks, "-x", &probe_env];
    let script;
    match shell {
        Some(sh) => {
            script = format!("PROBE='{cmd}'; {sh}");
            args.extend(["sh", "-c", &script]);
        }
        None => args.extend(cmd.split(' ')),
    }
    let job = start(
        name,
        &args,
        &[("RANKWIRE_BOOTSTRAP_TIMEOUT", "20")],
        Input::Null,
        false,
    );
    job.wait(RUN_TIMEOUT)
}

#[test]
fn bootstrap_put_get_fence_and_wrong_secret() {
    let f = probe("probe-kv", "kv", "3");
    f.assert_code(0);
    let out = f.stdout_str();
    for rank in 0..3 {
        assert!(
            out.contains(&format!("PROBE rank {rank} ok")),
            "{out}\n{}",
            f.stderr
        );
    }
    assert!(out.contains("PROBE refused: wrong job secret"), "{out}");
    assert!(
        f.stderr
            .contains("rwrun: refused bootstrap connection from 127.0.0.1:")
            && f.stderr.contains(": wrong job secret"),
        "{}",
        f.stderr
    );
}

#[test]
fn bootstrap_abort_ends_the_job_with_its_code() {
    let f = probe("probe-abort", "abort", "2");
    f.assert_code(7);
    assert!(
        f.stderr
            .contains("rwrun: rank 1 aborted the job with code 7: probe abort"),
        "{}",
        f.stderr
    );
    assert!(f.elapsed < Duration::from_secs(15), "took {:?}", f.elapsed);
}

#[test]
fn a_rank_exiting_0_after_init_without_finalize_fails_the_job() {
    // Rank 1 calls std::process::exit(0) after rankwire::init; rank 0 waits for it in
    // finalize's fence.
    let f = probe("probe-init-exit", "init-exit", "2");
    f.assert_code(1);
    let line = f
        .stderr
        .lines()
        .find(|l| l.starts_with("rwrun: rank 1 (pid "))
        .unwrap_or_else(|| panic!("no line for rank 1:\n{}", f.stderr));
    assert!(
        line.ends_with(") exited with status 0 without finalizing rankwire"),
        "{}",
        f.stderr
    );
    assert!(
        f.stderr.contains("rwrun: terminated 1 other rank"),
        "{}",
        f.stderr
    );
    assert!(f.elapsed < Duration::from_secs(10), "took {:?}", f.elapsed);
}

#[test]
fn a_rank_exiting_0_without_joining_fails_a_rankwire_job() {
    // Rank 1 exits 0 at once (before or after rank 0 joined), or a second later (after).
    for (name, rank1) in [
        ("nojoin-early", "exit 0"),
        ("nojoin-late", "sleep 1; exit 0"),
    ] {
        let script = format!(r#"if [ "$RANKWIRE_RANK" = 1 ]; then {rank1}; fi; exec $PROBE"#);
        let f = probe_with(name, "init-finalize", "2", Some(&script));
        f.assert_code(1);
        assert!(
            f.stderr.contains(
                "exited with status 0 without joining the job (it never called rankwire::init)"
            ) && f.stderr.contains("rwrun: rank 1 (pid "),
            "{name}:\n{}",
            f.stderr
        );
        assert!(f.elapsed < Duration::from_secs(10), "took {:?}", f.elapsed);
    }
    // Without the odd rank, the same job is fine.
    let f = probe("probe-init-finalize", "init-finalize", "2");
    f.assert_code(0);
    assert_eq!(
        f.stdout_str().matches("PROBE finalized").count(),
        2,
        "{}",
        f.stderr
    );
}

#[test]
fn finalize_right_before_exit_is_never_misjudged() {
    // Each rank sends Finalize and exits without waiting for the answer, one while the
    // other still runs: the Finalize must be seen before the exit is judged.
    for i in 0..4 {
        let f = probe(&format!("probe-finalize-noack{i}"), "finalize-noack", "3");
        f.assert_code(0);
        assert!(!f.stderr.contains("rwrun:"), "{}", f.stderr);
    }
}

/// Runs only as a rank under rwrun (see the file doc).
#[test]
fn probe_rank() {
    let Ok(mode) = std::env::var("RW_PROBE") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let rank: u32 = var(rwenv::RANK).parse().unwrap();
    let size: u32 = var(rwenv::SIZE).parse().unwrap();
    let (addr, job, secret) = (
        var(rwenv::BOOTSTRAP_ADDR),
        var(rwenv::JOB_ID),
        var(rwenv::JOB_SECRET),
    );
    let t = Duration::from_secs(10);
    match mode.as_str() {
        "kv" => {
            let mut _silent = None;
            if rank == 0 {
                let wrong: String = secret
                    .chars()
                    .rev()
                    .map(|c| if c == '0' { '1' } else { '0' })
                    .collect();
                match BootstrapClient::connect(&addr, &job, &wrong, rank, t) {
                    Err(BootstrapError::Refused { message, .. }) => {
                        println!("PROBE refused: {message}")
                    }
                    other => panic!("wrong secret not refused: {other:?}"),
                }
                // A client that connects and says nothing must not hold anybody up.
                _silent = Some(std::net::TcpStream::connect(&addr).unwrap());
            }
            spawn_launcher_watch(&addr, &job, &secret, rank).unwrap();
            let mut c = BootstrapClient::from_env(t).unwrap();
            c.put(&format!("k{rank}"), format!("v{rank}").as_bytes())
                .unwrap();
            c.fence().unwrap();
            for r in 0..size {
                assert_eq!(
                    c.get(&format!("k{r}")).unwrap(),
                    format!("v{r}").into_bytes()
                );
            }
            // Gets of keys another rank may not have put yet are held by the server.
            let next = (rank + 1) % size;
            c.put(&format!("late{rank}"), b"x").unwrap();
            assert_eq!(c.get(&format!("late{next}")).unwrap(), b"x");
            c.fence().unwrap();
            c.fence().unwrap();
            c.finalize().unwrap();
            println!("PROBE rank {rank} ok");
        }
        "abort" => {
            let mut c = BootstrapClient::from_env(t).unwrap();
            if rank == 1 {
                c.abort(7, "probe abort").unwrap();
            }
            std::thread::sleep(Duration::from_secs(30));
        }
        "init-exit" => {
            let universe = rankwire::init().unwrap();
            if rank == 1 {
                std::process::exit(0);
            }
            // Waits for rank 1 in the final fence, until rwrun ends the job.
            let _ = universe.finalize();
            std::thread::sleep(Duration::from_secs(30));
        }
        "init-finalize" => {
            rankwire::init().unwrap().finalize().unwrap();
            println!("PROBE finalized");
        }
        "finalize-noack" => {
            use rankwire::bootstrap::proto::{self, Request, Response};
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            proto::write_message(
                &mut s,
                &Request::Hello {
                    job_id: job,
                    secret,
                    rank,
                },
            )
            .unwrap();
            let ok: Response = proto::read_message(&mut s).unwrap();
            assert_eq!(ok, Response::Ok);
            // Rank r goes at r * 300 ms: the others are still running.
            std::thread::sleep(Duration::from_millis(300) * rank);
            proto::write_message(&mut s, &Request::Finalize).unwrap();
            std::process::exit(0);
        }
        other => panic!("unknown probe mode {other}"),
    }
}
