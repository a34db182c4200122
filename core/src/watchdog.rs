//! Progress watchdog: turns a hang into a report and an abort.
//!
//! With `RANKWIRE_WATCHDOG=SECONDS` (off when unset or `0`), a waiting call (`wait`,
//! blocking send/receive, probe, collectives) that sees no request complete, none
//! posted and no data move for that long prints every pending request of this rank (peer, tag, bytes,
//! protocol state, transport) to stderr, asks the launcher to abort the job, and exits
//! with [`EXIT_CODE`]. Time spent outside waiting calls (computing between calls) does
//! not count. The multi-process tests turn it on (`tests/support`), so a hang there
//! fails with the pending requests printed instead of running into the test timeout.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Environment variable: seconds without a completed request before the watchdog fires
/// (fractions allowed; unset or `0`: off).
pub const ENV: &str = "RANKWIRE_WATCHDOG";

/// Exit status of a rank stopped by the watchdog (that of `timeout(1)`).
pub const EXIT_CODE: i32 = 124;

/// The watchdog's bound from [`ENV`]: `None` when off.
///
/// # Errors
/// [`Error::Usage`] when the value is not a non-negative number of seconds.
pub(crate) fn from_env() -> Result<Option<Duration>> {
    let Some(v) = crate::settings::raw(ENV) else {
        return Ok(None);
    };
    match v.trim().parse::<f64>() {
        Ok(0.0) => Ok(None),
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Some(Duration::from_secs_f64(s))),
        _ => Err(Error::usage(format!(
            "{ENV}={v:?} is not a number of seconds (use e.g. {ENV}=60, or 0 for off)"
        ))),
    }
}

/// The watch over one waiting call: fires when neither the number of pending requests
/// changed nor data moved for the bound.
pub(crate) struct Watch {
    limit: Duration,
    pending: usize,
    /// Start of the current run of idle rounds; the clock is read only in idle rounds,
    /// never on the path where data moves.
    idle_since: Option<Instant>,
}

impl Watch {
    pub(crate) fn new(limit: Duration, pending: usize) -> Watch {
        Watch {
            limit,
            pending,
            idle_since: None,
        }
    }

    /// Record the pending count after an idle round; `true` when the bound is exceeded.
    pub(crate) fn expired(&mut self, pending: usize) -> bool {
        if pending != self.pending {
            self.reset(pending);
            return false;
        }
        self.idle_since.get_or_insert_with(Instant::now).elapsed() >= self.limit
    }

    /// Data moved: the next idle round starts the clock again.
    pub(crate) fn reset(&mut self, pending: usize) {
        self.pending = pending;
        self.idle_since = None;
    }
}

/// The report printed when the watchdog fires: one line per pending request.
pub(crate) fn report(rank: u32, limit: Duration, requests: usize, pending: &[String]) -> String {
    let mut s = format!(
        "rankwire watchdog: rank {rank}: no request completed for {:.1} s ({ENV}); {} requests pending:",
        limit.as_secs_f64(),
        requests
    );
    for p in pending {
        s.push_str(&format!("\nrankwire watchdog: rank {rank}:   {p}"));
    }
    s.push_str(&format!(
        "\nrankwire watchdog: rank {rank}: fix: a peer is not making the matching call (compare \
         the tags, sizes and collective order above with the peers' code; a dead peer is \
         reported by rwrun); raise {ENV} if the job is only slow"
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_fires_only_without_change() {
        let mut w = Watch::new(Duration::from_millis(30), 2);
        assert!(!w.expired(2));
        std::thread::sleep(Duration::from_millis(40));
        assert!(!w.expired(1), "a completion resets the clock");
        assert!(!w.expired(1));
        std::thread::sleep(Duration::from_millis(40));
        assert!(w.expired(1));
    }

    #[test]
    fn report_lists_every_request_and_a_fix() {
        let r = report(
            3,
            Duration::from_secs(2),
            2,
            &[
                "recv #4 from rank 0 tag 5".into(),
                "send #9 to rank 1".into(),
            ],
        );
        assert!(r.contains("rank 3: no request completed for 2.0 s"), "{r}");
        assert!(r.contains("2 requests pending"), "{r}");
        assert!(
            r.contains("recv #4 from rank 0 tag 5") && r.contains("send #9"),
            "{r}"
        );
        assert!(r.contains("fix:"), "{r}");
    }
}
