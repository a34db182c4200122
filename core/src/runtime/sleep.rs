//! Sleeping without the engine lock: a thread whose wait sleeps in `poll(2)` on
//! transport fds (RDMA completion channel, TCP epoll) lets the engine go first, so that
//! other threads of the process post and progress meanwhile, and sleeps on one more fd,
//! the runtime's [`Kick`], which those threads write when they take the engine while
//! someone sleeps. So such a sleep may be long (up to [`MAX_FD_SLEEP`]) without delaying
//! anything a transport does not signal: a change another thread makes wakes it.
//!
//! Sleeps on the shared-memory doorbell (a futex, not an fd) stay short and keep the
//! lock (`Engine::prepare_sleep`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// Longest sleep in `poll(2)` of a waiting thread (the bound grows with the idle time,
/// `runtime::block_bound`). What else could need the thread sooner: the watchdog (its
/// bounds are seconds).
pub(crate) const MAX_FD_SLEEP: Duration = Duration::from_millis(50);

/// The fds a waiting thread sleeps on, at most 2 transport fds
/// ([`crate::engine::Engine::prepare_sleep`]).
pub(crate) struct PollSet {
    pub(crate) fds: [libc::pollfd; 3],
    pub(crate) n: usize,
    pub(crate) timeout: Duration,
}

impl PollSet {
    /// An empty set that sleeps at most `timeout`.
    pub(crate) fn new(timeout: Duration) -> PollSet {
        PollSet {
            fds: [libc::pollfd {
                fd: -1,
                events: 0,
                revents: 0,
            }; 3],
            n: 0,
            timeout,
        }
    }

    /// Also wake when `fd` is readable (at most 2 transport fds).
    pub(crate) fn push(&mut self, fd: std::os::fd::RawFd) {
        if self.n < 2 {
            self.fds[self.n] = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            self.n += 1;
        }
    }
}

/// An eventfd that wakes the threads sleeping in [`Kick::sleep`], and the count of
/// those threads. The count changes and the eventfd is written only with the engine
/// locked ([`Kick::register`], [`Kick::unregister`], [`Kick::wake_sleepers`]); it is
/// emptied only when the last sleeper has gone, so a wakeup is never taken from a
/// thread that registered but has not reached `poll` yet, and written at most once
/// until then.
pub(crate) struct Kick {
    fd: Option<OwnedFd>,
    sleepers: AtomicU32,
    /// The eventfd was written and not emptied yet.
    rung: AtomicBool,
}

impl Kick {
    /// A kick; without an eventfd (the call failed) sleeps are cut to 1 ms instead.
    pub(crate) fn new() -> Kick {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        Kick {
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            fd: (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }),
            sleepers: AtomicU32::new(0),
            rung: AtomicBool::new(false),
        }
    }

    /// Wake the sleepers, if any. Call with the engine locked: a sleeper registered
    /// itself before letting the lock go, so this sees it.
    #[inline]
    pub(crate) fn wake_sleepers(&self) {
        if self.sleepers.load(Ordering::Relaxed) != 0 && !self.rung.swap(true, Ordering::Relaxed) {
            self.ring();
        }
    }

    #[cold]
    fn ring(&self) {
        if let Some(fd) = &self.fd {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a live u64 to our eventfd. A full counter
            // (EAGAIN) means it is readable already.
            let _ = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// Count this thread as a sleeper. Call with the engine locked, then unlock, then
    /// [`Kick::sleep`], then lock again and [`Kick::unregister`].
    pub(crate) fn register(&self) {
        self.sleepers.fetch_add(1, Ordering::Relaxed);
    }

    /// This thread no longer sleeps (call with the engine locked again). The last
    /// sleeper to go empties the eventfd.
    pub(crate) fn unregister(&self) {
        if self.sleepers.fetch_sub(1, Ordering::Relaxed) == 1
            && self.rung.swap(false, Ordering::Relaxed)
            && let Some(fd) = &self.fd
        {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a live u64 from our nonblocking eventfd.
            let _ = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        }
    }

    /// Sleep in `poll(2)` on `set` and the kick until one is readable or the timeout
    /// passes (the engine unlocked). Returns whether the kick was readable.
    pub(crate) fn sleep(&self, mut set: PollSet) -> bool {
        let mut n = set.n;
        let mut timeout = set.timeout;
        match &self.fd {
            Some(fd) => {
                set.fds[n] = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                n += 1;
            }
            None => timeout = timeout.min(Duration::from_millis(1)),
        }
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: `set.fds` holds at least `n` initialised pollfds.
        unsafe { libc::poll(set.fds.as_mut_ptr(), n as libc::nfds_t, ms) };
        self.fd.is_some() && set.fds[n - 1].revents & libc::POLLIN != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_sleeper_wakes_at_the_timeout_without_a_kick() {
        let k = Kick::new();
        let t = Instant::now();
        k.register();
        assert!(!k.sleep(PollSet::new(Duration::from_millis(20))));
        k.unregister();
        assert!(t.elapsed() >= Duration::from_millis(19));
        assert_eq!(k.sleepers.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_kick_wakes_a_long_sleep_early_and_is_emptied_by_the_last_sleeper() {
        let k = Arc::new(Kick::new());
        k.register();
        let k2 = k.clone();
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            k2.wake_sleepers();
        });
        let t = Instant::now();
        assert!(k.sleep(PollSet::new(Duration::from_secs(20))));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        waker.join().unwrap();
        k.unregister();
        // Emptied: the next sleep is not woken by the old kick.
        k.register();
        assert!(!k.sleep(PollSet::new(Duration::from_millis(10))));
        k.unregister();
    }

    #[test]
    fn a_kick_stays_for_a_second_sleeper_until_the_last_one_goes() {
        let k = Kick::new();
        k.register();
        k.register();
        k.wake_sleepers();
        k.wake_sleepers(); // written once
        assert!(k.sleep(PollSet::new(Duration::from_secs(5))));
        k.unregister();
        // The second sleeper, registered before the kick, still sees it.
        let t = Instant::now();
        assert!(k.sleep(PollSet::new(Duration::from_secs(5))));
        assert!(t.elapsed() < Duration::from_secs(2));
        k.unregister();
        assert!(!k.rung.load(Ordering::Relaxed));
    }

    #[test]
    fn no_kick_is_written_without_sleepers() {
        let k = Kick::new();
        k.wake_sleepers();
        k.register();
        assert!(!k.sleep(PollSet::new(Duration::from_millis(5))));
        k.unregister();
    }
}
