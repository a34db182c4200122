//! The job supervisor: start the ranks, watch them, end the job, decide rwrun's exit
//! status.
//!
//! # States
//! 1. **Start**: bootstrap server, then ranks 0..N (forked from the main thread), their
//!    output forwarders, exit watchers and rank 0's stdin copy.
//! 2. **Run** until one of: every rank exited 0 (*completed*); a rank failed (below); a
//!    rank sent `Abort`; rwrun got SIGINT/SIGTERM/SIGHUP; writing rwrun's stdout or
//!    stderr failed with EPIPE (*output closed*); `--timeout` expired. Server events are
//!    looked at before exits, so an `Abort` or `Finalize` acknowledged to a rank is seen
//!    before that rank's exit.
//!
//!    A rank *failed* when it exited non-zero or by a signal, or when it exited 0 but
//!    leaves the others waiting for it:
//!    - it joined the bootstrap (a `Hello` of it was accepted), had not finalized, and
//!      other ranks were still running. Such an exit is judged only once every
//!      bootstrap connection of the rank has closed (so every message it sent, its
//!      `Finalize` included, has been handled), or [`FINALIZE_WAIT`] after its exit;
//!    - it never joined, while another rank that joined is still running (that rank
//!      waits for it in a fence or get that cannot complete). This is checked again
//!      whenever a rank joins, so the order of the exit and the join does not matter.
//!
//!    Programs that never join (hostname, sh) may exit 0 at any time.
//! 3. **Teardown** (all but *completed*): for a rank failure, rwrun first waits
//!    [`FAILURE_SETTLE`] (or until every rank exited) so that ranks failing on their
//!    own at about the same time, or still starting up (not yet past their signal
//!    setup), are not mistaken for ranks rwrun terminated. Then the signal (the
//!    forwarded one, else SIGTERM) goes to every rank's process group at once; after the
//!    grace (300 ms for a failure, an abort or a closed output, `RANKWIRE_KILL_GRACE_MS`
//!    for signals and the timeout) SIGKILL follows. The grace ends early once every rank
//!    and its children are gone. A further forwarded signal (`timeout(1)` sends two)
//!    sends SIGKILL at once.
//! 4. **Drain**: wait for every output pipe to reach EOF, at most [`OUTPUT_DRAIN`]
//!    (a left-behind grandchild may hold a pipe open), then kill what is left in the
//!    ranks' process groups, reap the ranks and print one line per rank that failed on
//!    its own (ranks that died of rwrun's own signals are only counted).

use crate::cli::{FAILURE_GRACE, FAILURE_SETTLE, JobConfig};
use crate::io::{self, BrokenRx, OutputTx, Stream};
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
/// After a rank that joined exited 0 without having finalized, how long to wait for its
/// bootstrap connections to close (and so for a `Finalize` still in flight) before
/// judging it.
pub(crate) const FINALIZE_WAIT: Duration = Duration::from_secs(1);
/// rwrun's exit status when its own output was closed (128 + SIGPIPE).
pub(crate) const BROKEN_PIPE_STATUS: i32 = 128 + libc::SIGPIPE;

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
    mut broken_rx: BrokenRx,
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
    let network = cfg.placement.needs_network();
    let addr = match server::start(cfg.size, ident.clone(), server_tx, network).await {
        Ok(a) => a,
        Err(e) => {
            note!("rwrun: cannot start the bootstrap server: {e}");
            return fail(1);
        }
    };
    // Ranks on other nodes get every address of this node to try.
    let addr = if network {
        crate::hosts::advertised_addresses(addr.port())
    } else {
        addr.to_string()
    };
    tracing::debug!(
        "job {} of {} ranks; bootstrap server at {addr}",
        ident.job_id,
        cfg.size
    );

    let restore_nofile = match spawn::raise_fd_limit(cfg.size) {
        Ok(original) => original,
        Err(msg) => {
            note!("{msg}");
            return fail(1);
        }
    };
    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel::<(u32, ExitKind)>();
    let (stop_tx, stop_rx) = watch::channel(false);
    let setup = spawn::ChildSetup {
        restore_sigttin: process_signals.sigttin_changed,
        restore_nofile,
    };
    let mut job = Job {
        ranks: Vec::new(),
        forwarders: Vec::new(),
        unsettled: Vec::new(),
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
        let spawned = match spawn::spawn_rank(&cfg, &ident, &addr, rank, stdin, setup) {
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
            joined: false,
            connections: 0,
            problem: None,
        });
    }

    let mut timeout = std::pin::pin!(async {
        match cfg.timeout {
            Some((d, _)) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    });
    while ending.is_none() {
        if let Some(rank) = job.judge(Instant::now()) {
            ending = Some(Ending::RankFailed { rank });
            break;
        }
        if job.all_exited() && job.unsettled.is_empty() {
            ending = Some(Ending::Completed);
            break;
        }
        let judge_at = job.unsettled.iter().map(|u| u.1).min();
        tokio::select! {
            biased;
            sig = forwarded.recv() => ending = Some(Ending::Signal(sig)),
            Some(stream) = broken_rx.recv() => {
                tracing::debug!("rwrun's {stream:?} is closed (EPIPE); ending the job");
                ending = Some(Ending::OutputClosed);
            }
            Some(ev) = server_rx.recv() => ending = job.server_event(ev),
            Some((rank, kind)) = exit_rx.recv() => {
                job.exited(rank, kind);
                if !kind.is_success() {
                    ending = Some(Ending::RankFailed { rank });
                }
            }
            () = &mut timeout => ending = Some(Ending::Timeout),
            () = sleep_until_opt(judge_at), if judge_at.is_some() => {}
        }
    }
    let ending = ending.unwrap_or(Ending::Completed);

    let (signal, grace) = match &ending {
        Ending::Signal(sig) => (*sig, cfg.kill_grace),
        Ending::Timeout => (libc::SIGTERM, cfg.kill_grace),
        _ => (libc::SIGTERM, FAILURE_GRACE),
    };
    // Ranks failing together, or still starting, get a moment before SIGTERM.
    let settle = match &ending {
        Ending::RankFailed { .. } => FAILURE_SETTLE,
        _ => Duration::ZERO,
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
        let plan = Teardown {
            signal,
            grace,
            settle,
            after_signal: matches!(ending, Ending::Signal(_)),
        };
        job.teardown(plan, &mut exit_rx, &mut server_rx, &mut forwarded)
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
        Ending::OutputClosed => BROKEN_PIPE_STATUS,
        Ending::SpawnFailed { code } => *code,
    };
    let output_bound = match ending {
        Ending::Signal(_) | Ending::Timeout | Ending::OutputClosed => Some(Duration::from_secs(2)),
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
    // Writing rwrun's stdout or stderr failed with EPIPE.
    OutputClosed,
    SpawnFailed {
        code: i32,
    },
}

// Why a rank that exited 0 failed the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Problem {
    // Joined the bootstrap, exited 0 without finalizing while others ran.
    NotFinalized,
    // Exited 0 without joining while a rank that joined was still running.
    NeverJoined,
}

#[derive(Debug)]
struct Rank {
    pid: i32,
    exit: Option<ExitKind>,
    // rwrun sent a terminating signal while the rank was running.
    signalled: bool,
    finalized: bool,
    // A bootstrap connection of the rank was accepted.
    joined: bool,
    // Its accepted bootstrap connections still open.
    connections: u32,
    // Set when an exit with status 0 was judged a failure.
    problem: Option<Problem>,
}

// How to end the job.
#[derive(Debug, Clone, Copy)]
struct Teardown {
    // Sent first.
    signal: i32,
    // Between `signal` and SIGKILL.
    grace: Duration,
    // Before `signal`: time for ranks to exit on their own.
    settle: Duration,
    // The job ends because rwrun got a signal (a further one is a "second signal").
    after_signal: bool,
}

struct Job {
    ranks: Vec<Rank>,
    forwarders: Vec<JoinHandle<()>>,
    // Ranks that joined and exited 0 without having finalized while others still ran,
    // waiting for their connections to close; with the deadline for judging them.
    unsettled: Vec<(u32, Instant)>,
}

// Sleep until `at` (`None`: forever).
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Job {
    fn all_exited(&self) -> bool {
        self.ranks.iter().all(|r| r.exit.is_some())
    }

    fn record_exit(&mut self, rank: u32, kind: ExitKind) {
        tracing::debug!("rank {rank}: {}", spawn::describe_exit(kind));
        if let Some(r) = self.ranks.get_mut(rank as usize) {
            r.exit = Some(kind);
        }
    }

    // An exit while the job runs: remember a rank to judge (see `judge`).
    fn exited(&mut self, rank: u32, kind: ExitKind) {
        self.record_exit(rank, kind);
        if let Some(r) = self.ranks.get(rank as usize)
            && kind.is_success()
            && r.joined
            && !r.finalized
        {
            self.exited_unfinalized(rank);
        }
    }

    // A rank that joined exited 0 and no Finalize of it has been seen (yet). Only a
    // failure while other ranks still run; judged once its connections closed.
    fn exited_unfinalized(&mut self, rank: u32) {
        let others_running = self
            .ranks
            .iter()
            .enumerate()
            .any(|(i, r)| i != rank as usize && r.exit.is_none());
        if others_running && !self.unsettled.iter().any(|u| u.0 == rank) {
            self.unsettled.push((rank, Instant::now() + FINALIZE_WAIT));
        }
    }

    // Record a server event; an `Abort` ends the job.
    fn server_event(&mut self, ev: ServerEvent) -> Option<Ending> {
        let rank = match &ev {
            ServerEvent::Abort { rank, .. }
            | ServerEvent::Finalized { rank }
            | ServerEvent::Joined { rank }
            | ServerEvent::Disconnected { rank } => *rank,
        };
        let r = self.ranks.get_mut(rank as usize)?;
        match ev {
            ServerEvent::Abort {
                rank,
                code,
                message,
            } => {
                return Some(Ending::Abort {
                    rank,
                    code,
                    message,
                });
            }
            ServerEvent::Finalized { .. } => r.finalized = true,
            ServerEvent::Joined { .. } => {
                r.connections += 1;
                let first = !r.joined;
                r.joined = true;
                // A hello handled only after the rank's exit (it did not wait for the
                // answer).
                if first && r.exit.is_some_and(ExitKind::is_success) && !r.finalized {
                    self.exited_unfinalized(rank);
                }
            }
            ServerEvent::Disconnected { .. } => r.connections = r.connections.saturating_sub(1),
        }
        None
    }

    // A rank that exited 0 but fails the job (see the module doc), if any.
    fn judge(&mut self, now: Instant) -> Option<u32> {
        let mut i = 0;
        while i < self.unsettled.len() {
            let (rank, deadline) = self.unsettled[i];
            let r = &mut self.ranks[rank as usize];
            if r.finalized {
                self.unsettled.swap_remove(i);
                continue;
            }
            if r.connections == 0 || now >= deadline {
                r.problem = Some(Problem::NotFinalized);
                return Some(rank);
            }
            i += 1;
        }
        if self.ranks.iter().any(|r| r.joined && r.exit.is_none()) {
            let i = self
                .ranks
                .iter()
                .position(|r| r.exit.is_some_and(ExitKind::is_success) && !r.joined)?;
            self.ranks[i].problem = Some(Problem::NeverJoined);
            return Some(i as u32);
        }
        None
    }

    fn pgids(&self) -> Vec<i32> {
        self.ranks.iter().map(|r| r.pid).collect()
    }

    // After `plan.settle` (ended early when every rank exited or at a signal), signal
    // every group, SIGKILL after `plan.grace` (or at a further signal).
    async fn teardown(
        &mut self,
        plan: Teardown,
        exit_rx: &mut mpsc::UnboundedReceiver<(u32, ExitKind)>,
        server_rx: &mut mpsc::UnboundedReceiver<ServerEvent>,
        forwarded: &mut Forwarded,
    ) {
        let settled = Instant::now() + plan.settle;
        let mut hurry = false;
        while !plan.settle.is_zero() && !self.all_exited() {
            tokio::select! {
                biased;
                sig = forwarded.recv() => {
                    note!("rwrun: received {}; sending SIGKILL to the ranks now", spawn::signal_name(sig));
                    hurry = true;
                    break;
                }
                Some((rank, kind)) = exit_rx.recv() => self.record_exit(rank, kind),
                Some(ev) = server_rx.recv() => {
                    self.server_event(ev);
                }
                () = tokio::time::sleep_until(settled) => break,
            }
        }
        for r in &mut self.ranks {
            if r.exit.is_none() {
                r.signalled = true;
            }
            // Also finished ranks' groups: their children may still run. The zombie
            // leader keeps the group id from being reused.
            spawn::kill_group(r.pid, plan.signal);
        }
        let deadline = Instant::now() + plan.grace;
        while !hurry {
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
                    let again = if plan.after_signal { " again" } else { "" };
                    note!(
                        "rwrun: received {}{again}; sending SIGKILL to the ranks now",
                        spawn::signal_name(sig)
                    );
                    hurry = true;
                }
                Some((rank, kind)) = exit_rx.recv() => self.record_exit(rank, kind),
                Some(ev) = server_rx.recv() => {
                    self.server_event(ev);
                }
                () = tokio::time::sleep_until(deadline) => {
                    for (i, r) in self.ranks.iter().enumerate().filter(|(_, r)| r.exit.is_none()) {
                        note!(
                            "rwrun: rank {i} (pid {}) still running {} ms after {}; sending SIGKILL",
                            r.pid,
                            plan.grace.as_millis(),
                            spawn::signal_name(plan.signal)
                        );
                    }
                    break;
                }
                // Only the leftover children are still around: poll /proc for them.
                () = tokio::time::sleep(Duration::from_millis(20)), if all_exited => {}
            }
        }
        for r in &self.ranks {
            spawn::kill_group(r.pid, libc::SIGKILL);
        }
        let deadline = Instant::now() + KILL_WAIT;
        while !self.all_exited() {
            tokio::select! {
                Some((rank, kind)) = exit_rx.recv() => self.record_exit(rank, kind),
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

    // One line per rank that failed on its own (the first failure first): exited
    // non-zero, killed by a signal rwrun did not send, or exited 0 but judged a failure.
    // Ranks that died from rwrun's own signals are counted, not listed.
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
            if let Some(problem) = r.problem {
                let what = match problem {
                    Problem::NotFinalized => "without finalizing rankwire",
                    Problem::NeverJoined => {
                        "without joining the job (it never called rankwire::init) while other ranks joined it"
                    }
                };
                lines.push(format!(
                    "rwrun: rank {i} (pid {}) {} {what}\n",
                    r.pid,
                    spawn::describe_exit(kind)
                ));
                continue;
            }
            if kind.is_success() || Some(i) == aborting {
                continue;
            }
            // A rank started through srun or a launch agent (or a shell) reports the
            // signal that ended it as exit code 128 + signal.
            let by_rwrun = r.signalled
                && match kind {
                    ExitKind::Signal { signal: s, .. } => s == signal || s == libc::SIGKILL,
                    ExitKind::Code(c) => c == 128 + signal || c == 128 + libc::SIGKILL,
                    ExitKind::Unknown => false,
                };
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
        _ if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
            // SAFETY: rlimit is plain data, filled by getrlimit (zeros if it fails).
            let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
            // SAFETY: valid pointer.
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
            let want = spawn::fds_needed(cfg.size);
            note!(
                "rwrun: cannot start rank {rank}: {prog}: out of file descriptors ({e}): RLIMIT_NOFILE is {} (hard limit {}), and {} ranks need about {want} in rwrun; raise the hard limit (`ulimit -Hn {want}` as root, LimitNOFILE= for systemd, docker --ulimit nofile={want}:{want})",
                lim.rlim_cur,
                lim.rlim_max,
                cfg.size
            );
            return Ending::SpawnFailed { code: 1 };
        }
        // exec failed otherwise (not an executable format, ...), as shells report it.
        _ => ("cannot be executed", 126),
    };
    match cfg.placement.launcher_of(rank) {
        Some((launcher, hint)) => {
            note!("rwrun: cannot start rank {rank} ({prog}) with {launcher}: {what} ({e}); {hint}")
        }
        None => note!("rwrun: cannot start rank {rank}: {prog}: {what} ({e})"),
    }
    Ending::SpawnFailed { code }
}

/// Remove every `/dev/shm/rankwire-<job>-*` entry the job's ranks may have left (a rank
/// killed between creating and unlinking its segment). Ranks normally unlink their
/// segments as soon as every peer has mapped them; this is the backstop.
fn remove_shm_segments(job_id: &str) {
    let prefix = format!("rankwire-{job_id}-");
    remove_shm_where(|name| name.starts_with(&prefix));
}

/// Remove every `/dev/shm` entry whose name `matches` (also used by the reaper).
pub(crate) fn remove_shm_where(matches: impl Fn(&str) -> bool) {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in dir.flatten() {
        if matches(&e.file_name().to_string_lossy()) {
            match std::fs::remove_file(e.path()) {
                Ok(()) => tracing::debug!("removed leftover {}", e.path().display()),
                Err(err) => tracing::warn!("cannot remove {}: {err}", e.path().display()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: usize) -> Job {
        Job {
            ranks: (0..n)
                .map(|i| Rank {
                    pid: 1000 + i as i32,
                    exit: None,
                    signalled: false,
                    finalized: false,
                    joined: false,
                    connections: 0,
                    problem: None,
                })
                .collect(),
            forwarders: Vec::new(),
            unsettled: Vec::new(),
        }
    }

    fn ev(job: &mut Job, ev: ServerEvent) {
        assert!(job.server_event(ev).is_none());
    }

    fn join(job: &mut Job, rank: u32, connections: u32) {
        for _ in 0..connections {
            ev(job, ServerEvent::Joined { rank });
        }
    }

    const OK: ExitKind = ExitKind::Code(0);

    #[test]
    fn exit_0_before_a_finalize_still_in_flight_is_fine() {
        let mut j = job(2);
        join(&mut j, 0, 2);
        join(&mut j, 1, 2);
        // The exit is seen first; the rank's connections are still open.
        j.exited(1, OK);
        assert_eq!(j.judge(Instant::now()), None);
        assert_eq!(j.unsettled.len(), 1);
        ev(&mut j, ServerEvent::Finalized { rank: 1 });
        ev(&mut j, ServerEvent::Disconnected { rank: 1 });
        ev(&mut j, ServerEvent::Disconnected { rank: 1 });
        assert_eq!(j.judge(Instant::now()), None);
        assert!(j.unsettled.is_empty());
    }

    #[test]
    fn exit_0_without_finalize_fails_once_the_connections_close() {
        let mut j = job(3);
        for r in 0..3 {
            join(&mut j, r, 2);
        }
        j.exited(2, OK);
        ev(&mut j, ServerEvent::Disconnected { rank: 2 });
        assert_eq!(j.judge(Instant::now()), None);
        ev(&mut j, ServerEvent::Disconnected { rank: 2 });
        assert_eq!(j.judge(Instant::now()), Some(2));
        assert_eq!(j.ranks[2].problem, Some(Problem::NotFinalized));
        let lines = j.summary(&Ending::RankFailed { rank: 2 }, libc::SIGTERM);
        assert_eq!(
            lines,
            ["rwrun: rank 2 (pid 1002) exited with status 0 without finalizing rankwire\n"]
        );

        // A connection that stays open (inherited by a child) only delays the verdict.
        let mut j = job(2);
        join(&mut j, 0, 1);
        join(&mut j, 1, 1);
        j.exited(1, OK);
        let now = Instant::now();
        assert_eq!(j.judge(now), None);
        assert_eq!(j.judge(now + FINALIZE_WAIT), Some(1));
    }

    #[test]
    fn the_last_rank_may_skip_finalize() {
        let mut j = job(2);
        join(&mut j, 0, 1);
        join(&mut j, 1, 1);
        ev(&mut j, ServerEvent::Finalized { rank: 0 });
        j.exited(0, OK);
        j.exited(1, OK);
        ev(&mut j, ServerEvent::Disconnected { rank: 1 });
        assert_eq!(j.judge(Instant::now()), None);
        assert!(j.all_exited() && j.unsettled.is_empty());
    }

    #[test]
    fn exit_0_without_joining_fails_only_next_to_a_joined_rank() {
        // Non-rankwire programs: exits in any order are fine.
        let mut j = job(3);
        j.exited(1, OK);
        j.exited(0, OK);
        assert_eq!(j.judge(Instant::now()), None);

        // The exit comes first, the other rank joins later.
        let mut j = job(2);
        j.exited(1, OK);
        assert_eq!(j.judge(Instant::now()), None);
        join(&mut j, 0, 1);
        assert_eq!(j.judge(Instant::now()), Some(1));
        assert_eq!(j.ranks[1].problem, Some(Problem::NeverJoined));

        // The other rank joined first.
        let mut j = job(2);
        join(&mut j, 0, 1);
        j.exited(1, OK);
        assert_eq!(j.judge(Instant::now()), Some(1));
        let lines = j.summary(&Ending::RankFailed { rank: 1 }, libc::SIGTERM);
        assert!(
            lines[0].starts_with("rwrun: rank 1 (pid 1001) exited with status 0 without joining the job (it never called rankwire::init)"),
            "{lines:?}"
        );

        // The joined rank is already gone: nobody waits.
        let mut j = job(2);
        join(&mut j, 0, 1);
        ev(&mut j, ServerEvent::Finalized { rank: 0 });
        j.exited(0, OK);
        j.exited(1, OK);
        assert_eq!(j.judge(Instant::now()), None);
    }
}
