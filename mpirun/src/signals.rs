//! Process-wide signal setup and the signals rwrun forwards to the ranks.
//!
//! - SIGINT, SIGTERM and SIGHUP are caught and forwarded (by the supervisor) to every
//!   rank's process group. A signal that was *ignored* when rwrun started (`nohup`, a
//!   background job of a non-interactive shell) stays ignored, and the ranks inherit
//!   that, as they would without rwrun.
//! - SIGCHLD is reset to its default so that children stay waitable.
//! - SIGTTIN is ignored (when it was at its default), so reading stdin from a
//!   background job fails with EIO instead of stopping rwrun; ranks get it back at its
//!   default.
//! - SIGPIPE is already ignored by the Rust runtime, and rwrun relies on it: a closed
//!   stdout or stderr shows up as `EPIPE` in the output writer (see [`crate::io`]),
//!   which ends the job cleanly instead of killing rwrun mid-teardown. Ranks get the
//!   default back from `std::process::Command`.

use std::io;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signals rwrun forwards.
pub(crate) const FORWARDED: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// What [`prepare_process`] found and changed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcessSignals {
    /// For each of [`FORWARDED`], whether it was ignored at startup.
    pub(crate) ignored_at_start: [bool; 3],
    /// rwrun set SIGTTIN to ignored; ranks must get the default back.
    pub(crate) sigttin_changed: bool,
}

/// Adjust rwrun's own signal dispositions. Call once, early, before any thread starts.
pub(crate) fn prepare_process() -> ProcessSignals {
    let ignored_at_start = FORWARDED.map(is_ignored);
    // SAFETY: plain system calls changing this process's dispositions to SIG_DFL /
    // SIG_IGN (no handler code runs).
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }
    let sigttin_changed = if is_default(libc::SIGTTIN) {
        // SAFETY: as above.
        unsafe { libc::signal(libc::SIGTTIN, libc::SIG_IGN) };
        true
    } else {
        false
    };
    ProcessSignals {
        ignored_at_start,
        sigttin_changed,
    }
}

/// The forwarded signals rwrun listens to.
pub(crate) struct Forwarded {
    streams: Vec<(i32, Signal)>,
}

impl Forwarded {
    /// Install handlers for [`FORWARDED`] except those ignored at start. Must run inside
    /// the tokio runtime.
    ///
    /// # Errors
    /// Installing a handler failed.
    pub(crate) fn install(process: &ProcessSignals) -> io::Result<Forwarded> {
        let mut streams = Vec::new();
        for (i, &sig) in FORWARDED.iter().enumerate() {
            if process.ignored_at_start[i] {
                tracing::debug!("signal {sig} was ignored at startup; leaving it ignored");
                continue;
            }
            streams.push((sig, signal(SignalKind::from_raw(sig))?));
        }
        Ok(Forwarded { streams })
    }

    /// Wait for the next forwarded signal; returns its number.
    pub(crate) async fn recv(&mut self) -> i32 {
        if self.streams.is_empty() {
            return std::future::pending().await;
        }
        let futures = self.streams.iter_mut().map(|(sig, s)| {
            let sig = *sig;
            Box::pin(async move {
                s.recv().await;
                sig
            })
        });
        select_first(futures.collect()).await
    }
}

// The first of several futures to finish (a tiny `select_all`).
async fn select_first<F: std::future::Future<Output = i32> + Unpin>(mut futures: Vec<F>) -> i32 {
    std::future::poll_fn(|cx| {
        for f in futures.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn current_handler(sig: i32) -> Option<libc::sighandler_t> {
    // SAFETY: querying the disposition (null new action) only writes `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            return None;
        }
        Some(old.sa_sigaction)
    }
}

fn is_ignored(sig: i32) -> bool {
    current_handler(sig) == Some(libc::SIG_IGN)
}

fn is_default(sig: i32) -> bool {
    current_handler(sig) == Some(libc::SIG_DFL)
}
