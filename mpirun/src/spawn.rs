//! Starting ranks, watching them exit, signalling their process groups.
//!
//! Every rank is forked from the main thread (see the crate doc for why) with:
//! - `setpgid(0, 0)`: its own process group, so `killpg` reaches the rank and whatever
//!   it started;
//! - `prctl(PR_SET_PDEATHSIG, SIGKILL)`: it dies with rwrun, even if rwrun is SIGKILLed;
//! - the `RANKWIRE_*` environment of [`rankwire::bootstrap::env`], and the rank and
//!   local-rank variables of other launchers ([`launcher_compat_env`]);
//! - piped stdout/stderr (close-on-exec in every other process), and for rank 0 the read
//!   end of rwrun's stdin pipe.
//!
//! Exit is detected with a pidfd (`pidfd_open`, Linux 5.3) and read with
//! `waitid(WNOWAIT)`, which leaves the rank a zombie: its pid, and so its process group
//! id, cannot be reused until rwrun reaps it at the very end. That makes a late
//! `killpg` of a finished rank's group (to catch leftover children) safe.

use crate::cli::JobConfig;
use rand::Rng;
use rankwire::bootstrap::env;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::unix::AsyncFd;

/// Identity of one job: what every bootstrap connection must present.
#[derive(Debug, Clone)]
pub(crate) struct JobIdentity {
    /// `rw<pid><8 hex>`: short and alphanumeric (it goes into /dev/shm names).
    pub(crate) job_id: String,
    /// 128 random bits, hex.
    pub(crate) secret: String,
}

impl JobIdentity {
    /// A fresh job id and secret from the thread RNG (a CSPRNG seeded by the OS).
    pub(crate) fn generate() -> JobIdentity {
        let mut rng = rand::rng();
        let tag: u32 = rng.random();
        let secret: [u8; 16] = rng.random();
        JobIdentity {
            job_id: format!("rw{}{tag:08x}", std::process::id()),
            secret: secret.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

/// A started rank.
#[derive(Debug)]
pub(crate) struct Spawned {
    /// Process id, also its process group id.
    pub(crate) pid: i32,
    /// Read end of its stdout pipe.
    pub(crate) stdout: OwnedFd,
    /// Read end of its stderr pipe.
    pub(crate) stderr: OwnedFd,
}

/// How a rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitKind {
    /// `exit(code)`.
    Code(i32),
    /// Killed by a signal.
    Signal {
        /// Signal number.
        signal: i32,
        /// A core file was written.
        core_dumped: bool,
    },
    /// The status could not be read (someone else reaped the process).
    Unknown,
}

impl ExitKind {
    /// Exit status 0.
    pub(crate) fn is_success(self) -> bool {
        self == ExitKind::Code(0)
    }

    /// The shell convention: the code, or 128 + signal.
    pub(crate) fn shell_status(self) -> i32 {
        match self {
            ExitKind::Code(c) => c,
            ExitKind::Signal { signal, .. } => 128 + signal,
            ExitKind::Unknown => 1,
        }
    }
}

/// What to undo in a rank of rwrun's own process settings.
#[derive(Clone, Copy)]
pub(crate) struct ChildSetup {
    /// Reset SIGTTIN to its default (rwrun ignores it, see `signals`).
    pub(crate) restore_sigttin: bool,
    /// rwrun's original open-file limit, if [`raise_fd_limit`] raised it.
    pub(crate) restore_nofile: Option<libc::rlimit>,
}

/// Descriptors rwrun needs for a job of `size` ranks: a pidfd and two pipes per rank,
/// its two bootstrap connections, and 64 for everything else (the runtime, the
/// listener, stdio).
pub(crate) fn fds_needed(size: u32) -> u64 {
    (size as u64).saturating_mul(6).saturating_add(64)
}

/// Raise the soft open-file limit to the hard limit (issue 21: many ranks per node, one
/// descriptor per peer in each rank). Returns the original limit when it was changed,
/// for the ranks to get back (each rank raises its own at init, `rankwire::init`).
///
/// # Errors
/// The message to print when even the hard limit is below [`fds_needed`] for `size`
/// ranks: the job would stall once rwrun runs out of descriptors (its bootstrap server
/// could not accept the last ranks), so it is refused before any rank starts.
pub(crate) fn raise_fd_limit(size: u32) -> Result<Option<libc::rlimit>, String> {
    let want = fds_needed(size);
    // SAFETY: rlimit is plain data, filled by getrlimit.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Ok(None);
    }
    if lim.rlim_max < want {
        return Err(format!(
            "rwrun: RLIMIT_NOFILE allows {} open files (hard limit), but a job of {size} ranks needs about {want} in rwrun (a pidfd, two pipes and two bootstrap connections per rank, and 64 more); fix: raise the hard limit (`ulimit -Hn {want}` as root, LimitNOFILE= for systemd, docker --ulimit nofile={want}:{want}) or start fewer ranks",
            lim.rlim_max
        ));
    }
    if lim.rlim_cur >= lim.rlim_max {
        return Ok(None);
    }
    let original = lim;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: valid pointer.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        tracing::debug!(
            "cannot raise the open-file limit: {}",
            io::Error::last_os_error()
        );
        return Ok(None);
    }
    tracing::debug!(
        "open-file limit raised from {} to {}",
        original.rlim_cur,
        lim.rlim_cur
    );
    Ok(Some(original))
}

/// The variables other launchers set and that programs read before `MPI_Init` (to pick
/// a GPU, to size a thread pool): world rank and size, and rank and number of ranks on
/// this node (local rank = the rank's index among the ranks placed on its node). Every
/// value is a decimal integer; ranks are 0-based.
///
/// | name | value | set by |
/// |---|---|---|
/// | `RANK`, `WORLD_SIZE` | world rank, size | torchrun |
/// | `LOCAL_RANK`, `LOCAL_WORLD_SIZE` | local rank, local size | torchrun |
/// | `MPI_LOCALRANKID`, `MPI_LOCALNRANKS` | local rank, local size | MPICH's Hydra |
/// | `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE` | world rank, size | Open MPI |
/// | `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE` | local rank, local size | Open MPI |
/// | `MV2_COMM_WORLD_LOCAL_RANK` | local rank | MVAPICH2 |
///
/// OSU micro-benchmarks 7.2 pick the GPU from the first of `MV2_COMM_WORLD_LOCAL_RANK`,
/// `MVP_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_RANK`, `MPI_LOCALRANKID`,
/// `SLURM_PROCID`, `LOCAL_RANK` (`omb_get_local_rank` in `c/util/osu_util_mpi.c`).
///
/// `PMI_RANK`/`PMI_SIZE` are deliberately not set: they are a PMI server's protocol
/// (rankwire's own PMI-1 client and MPICH's read them next to `PMI_FD`), not a hint, and
/// `PMI_RANK` is a world rank, useless for picking a GPU.
pub(crate) fn launcher_compat_env(
    rank: u32,
    size: u32,
    local_rank: u32,
    local_size: u32,
) -> [(&'static str, String); 11] {
    let (r, n, lr, ln) = (
        rank.to_string(),
        size.to_string(),
        local_rank.to_string(),
        local_size.to_string(),
    );
    [
        ("RANK", r.clone()),
        ("WORLD_SIZE", n.clone()),
        ("LOCAL_RANK", lr.clone()),
        ("LOCAL_WORLD_SIZE", ln.clone()),
        ("MPI_LOCALRANKID", lr.clone()),
        ("MPI_LOCALNRANKS", ln.clone()),
        ("OMPI_COMM_WORLD_RANK", r),
        ("OMPI_COMM_WORLD_SIZE", n),
        ("OMPI_COMM_WORLD_LOCAL_RANK", lr.clone()),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", ln),
        ("MV2_COMM_WORLD_LOCAL_RANK", lr),
    ]
}

/// Start rank `rank` of the job with `stdin` as its standard input.
///
/// # Errors
/// The spawn error (`NotFound` when the program does not exist, `PermissionDenied` when
/// it is not executable).
pub(crate) fn spawn_rank(
    cfg: &JobConfig,
    ident: &JobIdentity,
    server: &str,
    rank: u32,
    stdin: Stdio,
    setup: ChildSetup,
) -> io::Result<Spawned> {
    let (local_rank, local_size) = cfg.placement.local_rank(rank);
    // Other launchers' names first, so that `-x NAME[=VALUE]` can override them.
    let mut vars: Vec<(OsString, OsString)> =
        launcher_compat_env(rank, cfg.size, local_rank, local_size)
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
    vars.extend(cfg.env.iter().cloned());
    for (k, v) in [
        (env::RANK, rank.to_string()),
        (env::SIZE, cfg.size.to_string()),
        (env::LOCAL_RANK, local_rank.to_string()),
        (env::LOCAL_SIZE, local_size.to_string()),
        (env::BOOTSTRAP_ADDR, server.to_string()),
        (env::JOB_ID, ident.job_id.clone()),
        (env::JOB_SECRET, ident.secret.clone()),
    ] {
        vars.push((k.into(), v.into()));
    }
    let cwd = std::env::current_dir().map_or_else(|_| OsString::from("/"), OsString::from);
    let (program, args) = cfg
        .placement
        .command_line(rank, &cfg.program, &cfg.args, &vars, &cwd);
    let mut cmd = Command::new(&program);
    cmd.args(&args)
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (setpgid, prctl, getppid, signal, setrlimit); it
    // allocates nothing (last_os_error/from_raw_os_error do not allocate).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // rwrun may have died between fork and prctl: then nobody would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if setup.restore_sigttin {
                libc::signal(libc::SIGTTIN, libc::SIG_DFL);
            }
            if let Some(lim) = &setup.restore_nofile {
                libc::setrlimit(libc::RLIMIT_NOFILE, lim);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    // std returns only after the exec succeeded, so setpgid has happened: no race with
    // an early killpg.
    let pid = child.id() as i32;
    let missing = || io::Error::other("spawned rank has no output pipe");
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let stderr = child.stderr.take().ok_or_else(missing)?;
    // Dropping `child` neither kills nor waits; exit is watched with `wait_exit`.
    drop(child);
    Ok(Spawned {
        pid,
        stdout: stdout.into(),
        stderr: stderr.into(),
    })
}

/// A close-on-exec pipe: (read end, write end).
///
/// # Errors
/// `pipe2` failed (out of file descriptors).
pub(crate) fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are fresh descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Wait until process `pid` (a child of rwrun) has exited, without reaping it.
pub(crate) async fn wait_exit(pid: i32) -> ExitKind {
    match pidfd_open(pid) {
        // SAFETY: the OwnedFd moves into the AsyncFd, which owns and closes it.
        Ok(fd) => {
            match unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) } {
                Ok(afd) => loop {
                    match afd.readable().await {
                        Ok(mut guard) => {
                            if let Some(kind) = peek_exit(pid) {
                                return kind;
                            }
                            guard.clear_ready();
                        }
                        Err(e) => {
                            tracing::debug!("pidfd of {pid}: {e}; polling instead");
                            break;
                        }
                    }
                },
                Err(e) => tracing::debug!("cannot register pidfd of {pid}: {e}; polling instead"),
            }
        }
        Err(e) => tracing::debug!("pidfd_open({pid}): {e}; polling instead"),
    }
    loop {
        if let Some(kind) = peek_exit(pid) {
            return kind;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Reap an exited child (after `wait_exit`). Never blocks.
pub(crate) fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: plain system call on our own child.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
}

/// Send `signal` to process group `pgid`. A group that no longer exists is not an
/// error.
pub(crate) fn kill_group(pgid: i32, signal: i32) {
    // SAFETY: plain system call.
    if unsafe { libc::killpg(pgid, signal) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            tracing::debug!("killpg({pgid}, {signal}): {e}");
        }
    }
}

/// For each of `pgids`, how many processes of that group are alive (not zombies),
/// from a scan of /proc.
pub(crate) fn live_group_members(pgids: &[i32]) -> Vec<usize> {
    let mut counts = vec![0usize; pgids.len()];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return counts;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some((state, pgrp)) = parse_stat(&stat)
            && state != 'Z'
            && state != 'X'
            && let Some(i) = pgids.iter().position(|&g| g == pgrp)
        {
            counts[i] += 1;
        }
    }
    counts
}

/// Name of a signal (`SIGKILL`), or `signal N`.
pub(crate) fn signal_name(signal: i32) -> String {
    match nix::sys::signal::Signal::try_from(signal) {
        Ok(s) => s.as_str().to_string(),
        Err(_) => format!("signal {signal}"),
    }
}

/// Human text for how a rank's program ended, e.g. `exited with status 3`.
pub(crate) fn describe_exit(kind: ExitKind) -> String {
    match kind {
        ExitKind::Code(101) => {
            "exited with status 101 (the status of a Rust panic; see the rank's stderr above)"
                .into()
        }
        ExitKind::Code(c) => format!("exited with status {c}"),
        ExitKind::Signal {
            signal,
            core_dumped,
        } => format!(
            "killed by signal {signal} ({}){}",
            signal_name(signal),
            if core_dumped { " (core dumped)" } else { "" }
        ),
        ExitKind::Unknown => "exited with an unknown status".into(),
    }
}

/// The program name for messages.
pub(crate) fn program_display(p: &OsString) -> String {
    p.to_string_lossy().into_owned()
}

fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain system call; on success it returns a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor returned by the kernel.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    debug_assert!(fd.as_raw_fd() >= 0);
    Ok(fd)
}

// waitid(WEXITED | WNOHANG | WNOWAIT): the exit status without reaping.
fn peek_exit(pid: i32) -> Option<ExitKind> {
    // SAFETY: siginfo_t is plain data; zeroed is its documented initial state for
    // WNOHANG (si_pid stays 0 when no child changed state).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to `info`; pid is our child.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return None;
        }
        tracing::warn!("waitid({pid}): {e}");
        return Some(ExitKind::Unknown);
    }
    // SAFETY: waitid filled `info` for a SIGCHLD-style record (or left it zeroed).
    let (si_pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if si_pid == 0 {
        return None;
    }
    Some(match info.si_code {
        libc::CLD_EXITED => ExitKind::Code(status),
        libc::CLD_KILLED => ExitKind::Signal {
            signal: status,
            core_dumped: false,
        },
        libc::CLD_DUMPED => ExitKind::Signal {
            signal: status,
            core_dumped: true,
        },
        _ => return None,
    })
}

// (state, pgrp) from /proc/PID/stat. The command name is in parentheses and may contain
// anything, so fields are counted from the last ')'.
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_identity_shape() {
        let a = JobIdentity::generate();
        let b = JobIdentity::generate();
        assert!(a.job_id.starts_with("rw") && a.job_id.chars().all(|c| c.is_ascii_alphanumeric()));
        assert!(a.job_id.len() <= 2 + 10 + 8);
        assert_eq!(a.secret.len(), 32);
        assert!(a.secret.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.secret, b.secret);
        assert_ne!(a.job_id, b.job_id);
    }

    #[test]
    fn launcher_compat_values() {
        let v = launcher_compat_env(5, 8, 1, 3);
        let get = |k: &str| v.iter().find(|(n, _)| *n == k).map(|(_, x)| x.as_str());
        for (k, want) in [
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "3"),
            ("MPI_LOCALRANKID", "1"),
            ("MPI_LOCALNRANKS", "3"),
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "3"),
            ("MV2_COMM_WORLD_LOCAL_RANK", "1"),
        ] {
            assert_eq!(get(k), Some(want), "{k}");
        }
        // Never the PMI protocol's own variables (our bootstrap's PMI detection).
        assert!(v.iter().all(|(k, _)| !k.starts_with("PMI_")));
    }

    #[test]
    fn stat_parsing() {
        assert_eq!(parse_stat("123 (a b) c)) S 1 456 456 0"), Some(('S', 456)));
        assert_eq!(parse_stat("garbage"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        // SAFETY: plain system call.
        let pgrp = unsafe { libc::getpgrp() };
        assert_eq!(parse_stat(&own).map(|s| s.1), Some(pgrp));
    }

    #[test]
    fn exit_descriptions() {
        assert_eq!(describe_exit(ExitKind::Code(3)), "exited with status 3");
        assert_eq!(
            describe_exit(ExitKind::Signal {
                signal: 9,
                core_dumped: false
            }),
            "killed by signal 9 (SIGKILL)"
        );
        assert!(describe_exit(ExitKind::Code(101)).contains("panic"));
        assert_eq!(
            ExitKind::Signal {
                signal: 15,
                core_dumped: false
            }
            .shell_status(),
            143
        );
        assert_eq!(ExitKind::Code(3).shell_status(), 3);
    }
}
