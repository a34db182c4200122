//! The job supervisor: start the ranks, watch them, end the job, decide rwrun's exit
//! status.
//!
//! # States
//! 1. **Start**: bootstrap server, then ranks 0..N (forked from the main thread), their
//!    output forwarders, exit watchers and rank 0's stdin copy.
//! 2. **Run** until one of: every rank exited 0 (*completed*); a rank exited non-zero or
//!    by a signal (*rank failed*); a rank sent `Abort`; rwrun got SIGINT/SIGTERM/SIGHUP;
//!    `--timeout` expired. Server events are looked at before exits, so an `Abort`
//!    acknowledged to a rank wins over that rank's exit.
//! 3. **Teardown** (all but *completed*): the signal (the forwarded one, else SIGTERM)
//!    goes to every rank's process group at once; after the grace (300 ms for a failure
//!    or abort, `RANKWIRE_KILL_GRACE_MS` for signals and the timeout) SIGKILL follows.
//!    The grace ends early once every rank and its children are gone. A second
//!    forwarded signal skips the rest of the grace.
//! 4. **Drain**: wait for every output pipe to reach EOF, at most [`OUTPUT_DRAIN`]
//!    (a left-behind grandchild may hold a pipe open), then kill what is left in the
//!    ranks' process groups, reap the ranks and print one line per failed rank.

use crate::cli::{FAILURE_GRACE, JobConfig};
use crate::io::{self, OutputTx, Stream};
use crate::reaper::Reaper;
use crate::server::{self, ServerEvent};
use crate::signals::{Forwarded, ProcessSignals};
use crate::spawn::{self, ExitKind, JobIdentity};
use std::process::Stdio;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// After the last rank exited, how long to wait for its output pipes to reach EOF.
pub(crate) const OUTPUT_DRAIN: Duration = Duration::from_secs(1);
/// After SIGKILL, how long to wait for ranks to be gone before giving up on them.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// Grace for leftover processes in finished ranks' groups.
const LEFTOVER_GRACE: Duration = Duration::from_millis(300);

/// How the job ended, as rwrun's exit status and how to finish writing output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome {
    /// rwrun's exit status.
    pub(crate) code: i32,
    /// Bound on waiting for the output thread (`None`: wait until all is written).
    pub(crate) output_bound: Option<Duration>,
}

/// Run the whole job; returns rwrun's exit status.
pub(crate) async fn run(
    cfg: JobConfig,
    process_signals: ProcessSignals,
    mut reaper: Option<Reaper>,
    out: OutputTx,
) -> Outcome {
    let fail = |code| Outcome {
        code,
        output_bound: None,
    };
    let mut forwarded = match Forwarded::install(&process_signals) {
        Ok(f) => f,
        Err(e) => {
            note!("rwrun: cannot install signal handlers: {e}");
            return fail(1);
        }
    };
    let ident = JobIdentity::generate();
    let (server_tx, mut server_rx) = mpsc::unbounded_channel();
    let addr = match server::start(cfg.size, ident.clone(), server_tx).await {
        Ok(a) => a,
        Err(e) => {
            note!("rwrun: cannot start the bootstrap server on 127.0.0.1: {e}");
            return fail(1);
        }
    };
    tracing::debug!(
        "job {} of {} ranks; bootstrap server at {addr}",
        ident.job_id,
        cfg.size
    );

    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel::<(u32, ExitKind)>();
    let (stop_tx, stop_rx) = watch::channel(false);
    let setup = spawn::ChildSetup {
        restore_sigttin: process_signals.sigttin_changed,
        restore_nofile: spawn::raise_fd_limit(cfg.size),
    };
    let mut job = Job {
        ranks: Vec::new(),
        forwarders: Vec::new(),
    };
    let mut ending = None;
    for rank in 0..cfg.size {
        let mut rank0_stdin = None;
        let stdin = if rank == 0 {
            match spawn::cloexec_pipe() {
                Ok((read_end, write_end)) => {
                    rank0_stdin = Some(write_end);
                    Stdio::from(read_end)
                }
                Err(e) => {
                    tracing::warn!("no stdin pipe for rank 0 ({e}); it reads /dev/null");
                    Stdio::null()
                }
            }
        } else {
            Stdio::null()
        };
        let spawned = match spawn::spawn_rank(&cfg, &ident, addr, rank, stdin, setup) {
            Ok(s) => s,
            Err(e) => {
                ending = Some(spawn_failure(&cfg, rank, &e));
                break;
            }
        };
        let pid = spawned.pid;
        if let Some(r) = reaper.as_mut() {
            r.add_group(pid);
        }
        for (stream, fd) in [
            (Stream::Stdout, spawned.stdout),
            (Stream::Stderr, spawned.stderr),
        ] {
            job.forwarders.push(tokio::spawn(io::forward(
                rank,
                stream,
                fd,
                cfg.tag_output,
                out.clone(),
                stop_rx.clone(),
            )));
        }
        let tx = exit_tx.clone();
        tokio::spawn(async move {
            let kind = spawn::wait_exit(pid).await;
            let _ = tx.send((rank, kind));
        });
        if let Some(w) = rank0_stdin
            && let Err(e) = io::start_stdin_copy(w)
        {
            tracing::warn!("cannot forward stdin to rank 0: {e}");
        }
        tracing::debug!("rank {rank}: pid {pid}");
        job.ranks.push(Rank {
            pid,
            exit: None,
            signalled: false,
            finalized: false,
        });
    }

    let mut timeout = std::pin::pin!(async {
        match cfg.timeout {
            Some((d, _)) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    });
    while ending.is_none() {
        if job.all_exited() {
            ending = Some(Ending::Completed);
            break;
        }
        tokio::select! {
            biased;
            sig = forwarded.recv() => ending = Some(Ending::Signal(sig)),
            Some(ev) = server_rx.recv() => match ev {
                ServerEvent::Abort { rank, code, message } => {
                    ending = Some(Ending::Abort { rank, code, message });
                }
                ServerEvent::Finalized { rank } => job.finalized(rank),
            },
            Some((rank, kind)) = exit_rx.recv() => {
                job.exited(rank, kind);
                if !kind.is_success() {
                    ending = Some(Ending::RankFailed { rank });
                }
            }
            () = &mut timeout => ending = Some(Ending::Timeout),
        }
    }
    let ending = ending.unwrap_or(Ending::Completed);

    let (signal, grace) = match &ending {
        Ending::Signal(sig) => (*sig, cfg.kill_grace),
        Ending::Timeout => (libc::SIGTERM, cfg.kill_grace),
        _ => (libc::SIGTERM, FAILURE_GRACE),
    };
    match &ending {
        Ending::Signal(sig) => note!(
            "rwrun: received {}; forwarding it to the ranks (SIGKILL after {} ms)",
            spawn::signal_name(*sig),
            grace.as_millis()
        ),
        Ending::Timeout => note!(
            "rwrun: job timed out after {} s; killing ranks",
            cfg.timeout.map(|t| t.1).unwrap_or_default()
        ),
        _ => {}
    }
    if !matches!(ending, Ending::Completed) {
        job.teardown(signal, grace, &mut exit_rx, &mut server_rx, &mut forwarded)
            .await;
    }

    // Drain output, then clean up what finished ranks left behind.
    if tokio::time::timeout(OUTPUT_DRAIN, job.wait_forwarders())
        .await
        .is_err()
    {
        tracing::debug!("output pipes still open {OUTPUT_DRAIN:?} after the ranks exited");
        let _ = stop_tx.send(true);
        if tokio::time::timeout(Duration::from_millis(500), job.wait_forwarders())
            .await
            .is_err()
        {
            for h in &job.forwarders {
                h.abort();
            }
        }
    }
    job.kill_leftovers().await;
    remove_shm_segments(&ident.job_id);
    for r in &job.ranks {
        if r.exit.is_some() {
            spawn::reap(r.pid);
        }
    }
    if let Some(r) = reaper {
        r.disarm();
    }

    for line in job.summary(&ending, signal) {
        let _ = out.send((Stream::Stderr, line.into_bytes())).await;
    }
    let code = match &ending {
        Ending::Completed => 0,
        Ending::RankFailed { rank } => job.ranks[*rank as usize]
            .exit
            .map_or(1, ExitKind::shell_status)
            .clamp(1, 255),
        Ending::Signal(sig) => 128 + sig,
        Ending::Abort { code, .. } => {
            if (1..=255).contains(code) {
                *code
            } else {
                1
            }
        }
        Ending::Timeout => 124,
        Ending::SpawnFailed { code } => *code,
    };
    let output_bound = match ending {
        Ending::Signal(_) | Ending::Timeout => Some(Duration::from_secs(2)),
        _ => None,
    };
    Outcome { code, output_bound }
}

// Why the job ended.
#[derive(Debug)]
enum Ending {
    Completed,
    RankFailed {
        rank: u32,
    },
    Signal(i32),
    Abort {
        rank: u32,
        code: i32,
        message: String,
    },
    Timeout,
    SpawnFailed {
        code: i32,
    },
}

#[derive(Debug)]
struct Rank {
    pid: i32,
    exit: Option<ExitKind>,
    // rwrun sent a terminating signal while the rank was running.
    signalled: bool,
    finalized: bool,
}

struct Job {
    ranks: Vec<Rank>,
    forwarders: Vec<JoinHandle<()>>,
}

impl Job {
    fn all_exited(&self) -> bool {
        self.ranks.iter().all(|r| r.exit.is_some())
    }

    fn exited(&mut self, rank: u32, kind: ExitKind) {
        tracing::debug!("rank {rank}: {}", spawn::describe_exit(kind));
        if let Some(r) = self.ranks.get_mut(rank as usize) {
            r.exit = Some(kind);
        }
    }

    fn finalized(&mut self, rank: u32) {
        if let Some(r) = self.ranks.get_mut(rank as usize) {
            r.finalized = true;
        }
    }

    fn pgids(&self) -> Vec<i32> {
        self.ranks.iter().map(|r| r.pid).collect()
    }

    // Signal every group now, SIGKILL after `grace` (or at a second signal).
    async fn teardown(
        &mut self,
        signal: i32,
        grace: Duration,
        exit_rx: &mut mpsc::UnboundedReceiver<(u32, ExitKind)>,
        server_rx: &mut mpsc::UnboundedReceiver<ServerEvent>,
        forwarded: &mut Forwarded,
    ) {
        for r in &mut self.ranks {
            if r.exit.is_none() {
                r.signalled = true;
            }
            // Also finished ranks' groups: their children may still run. The zombie
            // leader keeps the group id from being reused.
            spawn::kill_group(r.pid, signal);
        }
        let deadline = Instant::now() + grace;
        loop {
            if self.all_exited()
                && spawn::live_group_members(&self.pgids())
                    .iter()
                    .all(|&n| n == 0)
            {
                return;
            }
            let all_exited = self.all_exited();
            tokio::select! {
                biased;
                sig = forwarded.recv() => {
                    note!("rwrun: received {} again; killing the ranks now", spawn::signal_name(sig));
                    break;
                }
                Some((rank, kind)) = exit_rx.recv() => self.exited(rank, kind),
                Some(ev) = server_rx.recv() => {
                    if let ServerEvent::Finalized { rank } = ev {
                        self.finalized(rank);
                    }
                }
                () = tokio::time::sleep_until(deadline) => break,
                // Only the leftover children are still around: poll /proc for them.
                () = tokio::time::sleep(Duration::from_millis(20)), if all_exited => {}
            }
        }
        for (i, r) in self.ranks.iter().enumerate() {
            if r.exit.is_none() {
                note!(
                    "rwrun: rank {i} (pid {}) still running {} ms after {}; sending SIGKILL",
                    r.pid,
                    grace.as_millis(),
                    spawn::signal_name(signal)
                );
            }
            spawn::kill_group(r.pid, libc::SIGKILL);
        }
        let deadline = Instant::now() + KILL_WAIT;
        while !self.all_exited() {
            tokio::select! {
                Some((rank, kind)) = exit_rx.recv() => self.exited(rank, kind),
                () = tokio::time::sleep_until(deadline) => {
                    for (i, r) in self.ranks.iter().enumerate().filter(|(_, r)| r.exit.is_none()) {
                        note!("rwrun: rank {i} (pid {}) did not exit after SIGKILL; giving up on it", r.pid);
                    }
                    return;
                }
            }
        }
    }

    async fn wait_forwarders(&mut self) {
        while let Some(h) = self.forwarders.last_mut() {
            let _ = h.await;
            self.forwarders.pop();
        }
    }

    // Processes left in finished ranks' groups (a background child, a daemon): SIGTERM,
    // then SIGKILL after a short grace. The job is over; nothing of it may stay.
    async fn kill_leftovers(&self) {
        let pgids: Vec<i32> = self
            .ranks
            .iter()
            .filter(|r| r.exit.is_some())
            .map(|r| r.pid)
            .collect();
        let counts = spawn::live_group_members(&pgids);
        if counts.iter().all(|&n| n == 0) {
            return;
        }
        for (&g, &n) in pgids.iter().zip(&counts) {
            if n > 0 {
                tracing::debug!("killing {n} leftover process(es) of process group {g}");
                spawn::kill_group(g, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + LEFTOVER_GRACE;
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if spawn::live_group_members(&pgids).iter().all(|&n| n == 0) {
                return;
            }
        }
        for &g in &pgids {
            spawn::kill_group(g, libc::SIGKILL);
        }
    }

    // One line per failed rank (the first failure first); ranks that died from rwrun's
    // own signals are counted, not listed.
    fn summary(&self, ending: &Ending, signal: i32) -> Vec<String> {
        let mut lines = Vec::new();
        if let Ending::Abort {
            rank,
            code,
            message,
        } = ending
        {
            lines.push(format!(
                "rwrun: rank {rank} aborted the job with code {code}: {message}\n"
            ));
        }
        let first = match ending {
            Ending::RankFailed { rank } => Some(*rank as usize),
            _ => None,
        };
        // The aborting rank's own exit status is expected, not news.
        let aborting = match ending {
            Ending::Abort { rank, .. } => Some(*rank as usize),
            _ => None,
        };
        let mut order: Vec<usize> = first.into_iter().collect();
        order.extend((0..self.ranks.len()).filter(|&i| Some(i) != first));
        let mut terminated = 0;
        for i in order {
            let r = &self.ranks[i];
            let Some(kind) = r.exit else { continue };
            if kind.is_success() || Some(i) == aborting {
                continue;
            }
            let by_rwrun = r.signalled
                && matches!(kind, ExitKind::Signal { signal: s, .. } if s == signal || s == libc::SIGKILL);
            if by_rwrun {
                terminated += 1;
                continue;
            }
            let after = if r.finalized { " after finalize" } else { "" };
            lines.push(format!(
                "rwrun: rank {i} (pid {}) {}{after}\n",
                r.pid,
                spawn::describe_exit(kind)
            ));
        }
        if terminated > 0 && matches!(ending, Ending::RankFailed { .. } | Ending::Abort { .. }) {
            let s = if terminated == 1 { "" } else { "s" };
            lines.push(format!("rwrun: terminated {terminated} other rank{s}\n"));
        }
        lines
    }
}

fn spawn_failure(cfg: &JobConfig, rank: u32, e: &std::io::Error) -> Ending {
    let prog = spawn::program_display(&cfg.program);
    let (what, code) = match e.kind() {
        std::io::ErrorKind::NotFound => ("not found", 127),
        std::io::ErrorKind::PermissionDenied => ("permission denied", 126),
        // fork failed: out of processes or memory.
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::OutOfMemory => {
            ("cannot be started", 1)
        }
        // exec failed otherwise (not an executable format, ...), as shells report it.
        _ => ("cannot be executed", 126),
    };
    note!("rwrun: cannot start rank {rank}: {prog}: {what} ({e})");
    Ending::SpawnFailed { code }
}

/// Remove every `/dev/shm/rankwire-<job>-*` entry the job's ranks may have left (a rank
/// killed between creating and unlinking its segment). Ranks normally unlink their
/// segments as soon as every peer has mapped them; this is the backstop.
fn remove_shm_segments(job_id: &str) {
    let prefix = format!("rankwire-{job_id}-");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in dir.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            match std::fs::remove_file(e.path()) {
                Ok(()) => tracing::debug!("removed leftover {}", e.path().display()),
                Err(err) => tracing::warn!("cannot remove {}: {err}", e.path().display()),
            }
        }
    }
}
