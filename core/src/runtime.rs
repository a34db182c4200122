//! The runtime: the one owner of progress in a process.
//!
//! # Ownership
//! [`Inner`] (one per [`crate::Universe`], shared by every communicator and request
//! through an `Arc`) holds the engine behind its lock, the bootstrap connection, the
//! path table and the [`Schedules`] of the nonblocking collectives still running. No
//! list of pending work lives outside it.
//!
//! # Progress
//! [`Inner::progress`] is the one progress round: it runs [`Engine::progress`]
//! (transports, protocol, point-to-point requests) and then advances every active
//! collective schedule, oldest first, pushing out what their new rounds posted. Every
//! completion call of the API goes through it: point-to-point `wait`/`test`/
//! `is_complete`/`wait_any`/`wait_all`/`test_all`, the drop of a pending request,
//! collective `wait`/`test`/`is_complete`, probes, and the blocking calls, which all
//! wait in [`Inner::wait_for`]. So a process waiting on any request keeps its
//! nonblocking collectives moving (MPI 4.1 §2.9 and §6.12), whatever it waits on. The
//! engine itself knows nothing of collectives; its fast path that skips progress
//! (`Engine::recv_direct`) is taken only through [`Inner::recv_direct`], which checks
//! first that no collective is running ([`Schedules::any`]). The API types post, probe,
//! cancel, wait and test point-to-point requests through the runtime
//! (`runtime/p2p.rs`), not through the engine's protocol.
//!
//! # Locks
//! Order: engine, then a schedule (`Mutex<Exec>`), then the schedule list (held only to
//! copy or edit it, never while taking another lock). A schedule is advanced with the
//! engine locked; a schedule already locked is being advanced by its owner on this call
//! stack (the engine lock serialises owners), so the list skips it (`try_lock`).
//!
//! # State it owns
//! Besides progress, the runtime holds what would otherwise be process-global: the
//! world communicator's shared state ([`Inner::world_state`], so every
//! `Universe::world()` handle counts collective calls together), the collective
//! settings read once ([`Inner::coll_config`]), the watchdog's bound
//! ([`Inner::set_watchdog`]), one-time warnings, and, through its engine, context-id
//! allocation (`Engine::ctx_ids`, released by [`Releaser`] and [`reap_contexts`]).
//! What stays process-wide, and why, is listed where it is declared: the init-once
//! flag (`crate::universe`), the panic message and last error (`crate::abort`: a
//! panic hook can only reach statics, and errors are recorded where they are built,
//! with no runtime at hand), and the cross-memory-attach probe word
//! (`rankwire_transports::shm::cma::CMA_PROBE_WORD`, transports/src/shm/cma.rs: a
//! peer reads it at a fixed address of this process). The GPU temporary pool is no
//! longer process-wide: a `rankwire_gpu::TmpPool` value (gpu/src/pool.rs) owned by
//! the engine (`Engine::gpu_pool`).
//!
//! # Waiting
//! [`Inner::wait_for`] spins on progress rounds a bounded number of times, then yields,
//! then blocks in the transports (the policy of [`crate::engine`]), and runs the
//! watchdog ([`crate::watchdog`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError, Weak};
use std::time::{Duration, Instant};

use crate::bootstrap::Wireup;
use crate::coll::sched::Exec;
use crate::coll::select::CollConfig;
use crate::comm_state::CommState;
use crate::context_id::{Freed, FreedQueue, WORLD_CTX};
use crate::engine::{Backoff, Engine};
use crate::error::{Error, Result};
use crate::explain::Paths;
use crate::watchdog::Watch;

mod p2p;
pub(crate) mod sleep;

/// The running job as seen by this process (behind [`crate::Universe`]).
pub(crate) struct Inner {
    pub(crate) rank: u32,
    pub(crate) size: u32,
    /// Position of this rank among the ranks of its node, in rank order.
    pub(crate) local_rank: u32,
    pub(crate) engine: Mutex<Engine>,
    /// Threads blocked taking `engine` now. A waiting thread lets the lock go every
    /// [`SPINS_PER_LOCK`] rounds and takes it again at once; a mutex is not fair, so on
    /// a machine with idle cores (where the waiter never sleeps) another thread's call
    /// (an `MPI_Cancel`, an `MPI_Send` of another thread) could wait seconds for it. The
    /// waiter therefore first lets such threads have it ([`Inner::relock`]).
    contenders: AtomicUsize,
    /// Shared with the TCP transport, which reads peers' addresses through it when it
    /// connects on demand (`bootstrap::SharedLookup`). Never take the engine lock while
    /// holding this one (a send holds the engine lock and may take this one).
    pub(crate) bootstrap: Arc<Mutex<Option<Wireup>>>,
    pub(crate) finalized: AtomicBool,
    /// What transport selection decided, for [`crate::Universe::explain`].
    pub(crate) paths: Paths,
    /// Nonblocking collectives still running, advanced by every progress round.
    pub(crate) schedules: Schedules,
    /// The world communicator's shared state, made by the first `Universe::world()`.
    world: OnceLock<Arc<CommState>>,
    /// Collective settings from the environment, read once (communicator creation is
    /// no place for environment reads; the values were checked at init).
    coll_cfg: OnceLock<CollConfig>,
    /// Bound of the progress watchdog (unset: off; see [`crate::watchdog`]).
    watchdog: OnceLock<Duration>,
    /// Whether the blocking-send-to-self warning was logged (once per runtime).
    pub(crate) warned_self_send: AtomicBool,
    /// Wakes threads that sleep in `poll(2)` with the engine unlocked ([`sleep`]).
    kick: sleep::Kick,
    /// The proxy of stream-ordered point-to-point (`crate::stream_p2p`), made by the
    /// first such call; stopped at finalize.
    pub(crate) stream_proxy: OnceLock<Arc<dyn Stoppable>>,
}

/// A helper of the runtime that finalize stops first (the stream proxy): typed here as
/// a trait so that this file does not depend on the helper's.
pub(crate) trait Stoppable: Send + Sync {
    /// Let the helper finish its work in flight, then end it.
    fn stop(&self);
    /// The helper itself, for its own module to downcast.
    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync>;
}

impl Inner {
    pub(crate) fn new(
        rank: u32,
        size: u32,
        local_rank: u32,
        engine: Engine,
        bootstrap: Arc<Mutex<Option<Wireup>>>,
        paths: Paths,
    ) -> Inner {
        Inner {
            rank,
            size,
            local_rank,
            engine: Mutex::new(engine),
            contenders: AtomicUsize::new(0),
            bootstrap,
            finalized: AtomicBool::new(false),
            paths,
            schedules: Schedules::default(),
            world: OnceLock::new(),
            coll_cfg: OnceLock::new(),
            watchdog: OnceLock::new(),
            warned_self_send: AtomicBool::new(false),
            kick: sleep::Kick::new(),
            stream_proxy: OnceLock::new(),
        }
    }

    /// The world communicator's shared state (context [`WORLD_CTX`], every rank),
    /// made on first use and shared by every world handle of this runtime.
    pub(crate) fn world_state(&self) -> Arc<CommState> {
        self.world
            .get_or_init(|| {
                let group: Arc<[u32]> = (0..self.size).collect();
                let st = CommState::new(WORLD_CTX, group, self.rank, self.coll_config());
                // The world group holds every rank, so `self.rank` is in it.
                Arc::new(st.unwrap_or_else(|| unreachable!("rank outside the world")))
            })
            .clone()
    }

    /// The collective settings of this runtime (`RANKWIRE_COLL_*`, read once).
    pub(crate) fn coll_config(&self) -> CollConfig {
        self.coll_cfg
            .get_or_init(|| CollConfig::from_env(self.paths.ranks_per_cpu))
            .clone()
    }

    /// Turn the progress watchdog on with bound `limit` (once, at init; a later call
    /// changes nothing).
    pub(crate) fn set_watchdog(&self, limit: Duration) {
        let _ = self.watchdog.set(limit);
    }

    /// The watchdog's bound, `None` when it is off.
    pub(crate) fn watchdog_bound(&self) -> Option<Duration> {
        self.watchdog.get().copied()
    }

    /// The engine, locked, for a call of the API: threads sleeping with the engine
    /// unlocked are woken, since what this call does may be what they wait for.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Engine> {
        let e = self.lock_quiet();
        self.kick.wake_sleepers();
        e
    }

    /// The engine, locked, without waking sleepers (a waiting thread taking it again,
    /// a test: [`Inner::progress`] wakes them if it moved something).
    fn lock_quiet(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock leaves the engine as consistent as the
        // protocol's own invariants; keep going rather than cascade the panic.
        match self.engine.try_lock() {
            Ok(g) => return g,
            Err(TryLockError::Poisoned(p)) => return p.into_inner(),
            Err(TryLockError::WouldBlock) => {}
        }
        self.contenders.fetch_add(1, Ordering::Relaxed);
        let g = self.engine.lock().unwrap_or_else(|p| p.into_inner());
        self.contenders.fetch_sub(1, Ordering::Relaxed);
        g
    }

    /// The engine, locked again by a thread that waits ([`Inner::wait_with`]) or polls
    /// (a test) and let it go a moment ago: threads blocked taking it get it first
    /// (yielding until they have, for at most [`RELOCK_WAIT`]), so that a thread
    /// spinning on an idle machine cannot starve them. Uncontended: one relaxed load.
    pub(crate) fn relock(&self) -> MutexGuard<'_, Engine> {
        if self.contenders.load(Ordering::Relaxed) != 0 {
            let until = Instant::now() + RELOCK_WAIT;
            while self.contenders.load(Ordering::Relaxed) != 0 && Instant::now() < until {
                std::thread::yield_now();
            }
        }
        self.lock_quiet()
    }

    #[inline]
    pub(crate) fn check_live(&self) -> Result<()> {
        if self.finalized.load(Ordering::Acquire) {
            return Err(finalized());
        }
        Ok(())
    }

    /// One progress round of everything (see the module doc): the engine, then every
    /// active collective schedule, oldest first. `e` is this runtime's engine, locked.
    /// Returns whether anything happened; if so, threads sleeping with the engine
    /// unlocked are woken (what moved may complete their waits).
    #[inline]
    pub(crate) fn progress(&self, e: &mut Engine) -> bool {
        let mut moved = e.progress();
        if self.schedules.advance(e) {
            // Push out what the new rounds posted.
            e.progress();
            moved = true;
        }
        if moved {
            self.kick.wake_sleepers();
        }
        moved
    }

    /// Progress until `done` returns a value. With the watchdog on
    /// ([`crate::watchdog`]), a wait without any completion for its bound reports the
    /// pending requests and aborts the job.
    pub(crate) fn wait_for<T>(&self, done: impl FnMut(&mut Engine) -> Option<T>) -> T {
        self.wait_with(self.lock(), done)
    }

    /// [`Inner::wait_for`] starting with the engine locked already (`e`), so that a
    /// blocking call that posts and waits takes the lock once.
    pub(crate) fn wait_with<T>(
        &self,
        first: MutexGuard<'_, Engine>,
        mut done: impl FnMut(&mut Engine) -> Option<T>,
    ) -> T {
        let mut waiter = Waiter::new();
        let mut watch = None;
        let mut first = Some(first);
        loop {
            let mut e = match first.take() {
                Some(g) => g,
                None => self.relock(),
            };
            if let Some(v) = done(&mut e) {
                return v;
            }
            let backoff = e.backoff;
            // Spin with the engine locked, so that a short wait (the common case) takes
            // the lock once; `done` is asked again only after something happened. The
            // lock is let go now and then for other threads of this process.
            let mut rounds = 0u32;
            let action = loop {
                if self.progress(&mut e) {
                    if let Some(v) = done(&mut e) {
                        return v;
                    }
                    waiter.reset();
                    if let Some(w) = watch.as_mut() {
                        Watch::reset(w, e.proto.pending());
                    }
                } else {
                    match waiter.idle(backoff) {
                        IdleAction::Spin => {
                            if e.shm_only() {
                                // Watch the rings (a load each) until a frame lands,
                                // for a while, instead of a full round per look.
                                for _ in 0..backoff.ring_looks {
                                    if e.arrival_hint() {
                                        break;
                                    }
                                }
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                        other => break other,
                    }
                }
                rounds += 1;
                if rounds == SPINS_PER_LOCK {
                    break IdleAction::Spin;
                }
            };
            if matches!(action, IdleAction::Spin) {
                continue;
            }
            // Yielding or sleeping: the watchdog's clock is read here only.
            if let Some(limit) = self.watchdog_bound() {
                let pending = e.proto.pending();
                let w = watch.get_or_insert_with(|| Watch::new(limit, pending));
                if w.expired(pending) {
                    let lines = e.describe_pending();
                    drop(e);
                    self.watchdog_abort(limit, pending, &lines);
                }
            }
            match action {
                IdleAction::Block(d) => {
                    if let Some(set) = e.prepare_sleep(d) {
                        // Sleep with the engine unlocked; a thread that takes it
                        // meanwhile wakes this one through the kick.
                        self.kick.register();
                        drop(e);
                        self.kick.sleep(set);
                        let mut e = self.relock();
                        self.kick.unregister();
                        e.after_sleep();
                        first = Some(e);
                    }
                }
                _ => {
                    drop(e);
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Print the watchdog report, ask the launcher to end the job, and exit.
    fn watchdog_abort(&self, limit: Duration, requests: usize, pending: &[String]) -> ! {
        let report = crate::watchdog::report(self.rank, limit, requests, pending);
        eprintln!("{report}");
        // A rank stuck in the drop of a pending request after its own error (`?` out of
        // main with a large isend unreceived) must not hide that error behind the report.
        let last = crate::abort::last_error();
        if let Some(e) = &last {
            eprintln!(
                "rankwire: rank {}: its last rankwire error, maybe why it is stuck: {e}",
                self.rank
            );
        }
        tracing::error!("watchdog fired on rank {}", self.rank);
        if let Ok(mut b) = self.bootstrap.lock()
            && let Some(c) = b.as_mut()
        {
            let _ = c.abort(
                crate::watchdog::EXIT_CODE,
                &format!(
                    "watchdog: rank {} waited {:.1} s with {} requests pending (listed above){}",
                    self.rank,
                    limit.as_secs_f64(),
                    requests,
                    last.map(|e| format!("; its last rankwire error: {e}"))
                        .unwrap_or_default()
                ),
            );
        }
        std::process::exit(crate::watchdog::EXIT_CODE)
    }
}

/// Release the communicators dropped so far in `e`'s runtime: each context id whose
/// matching state the protocol lets go becomes free (see [`crate::context_id`]).
pub(crate) fn reap_contexts(e: &mut Engine) {
    let proto = &mut e.proto;
    e.ctx_ids.reap(|ctx, group| proto.release_ctx(ctx, group));
}

/// What a communicator's state needs to release its context id when dropped: the
/// runtime (weakly: a communicator outliving its universe releases nothing) and the
/// allocator's queue.
pub(crate) struct Releaser {
    inner: Weak<Inner>,
    queue: FreedQueue,
}

impl Releaser {
    /// For a communicator of `inner`, whose allocator gave `queue`.
    pub(crate) fn new(inner: &Arc<Inner>, queue: FreedQueue) -> Releaser {
        Releaser {
            inner: Arc::downgrade(inner),
            queue,
        }
    }

    /// Queue the release of `ctx` (members `group`, world ranks) and perform it now if
    /// the engine's lock is free; otherwise the next drop or creation performs it.
    pub(crate) fn free(&self, ctx: u32, group: Arc<[u32]>) {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Freed::new(ctx, group));
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let engine = match inner.engine.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(mut e) = engine {
            reap_contexts(&mut e);
        }
    }
}

#[cold]
fn finalized() -> Error {
    Error::usage("rankwire was finalized; no more communication")
}

// The schedules of the nonblocking collectives still running in this runtime, oldest
// first. A collective request adds its schedule when its first round did not finish it
// and takes it out when it is completed (its own wait or test advances it from then
// on); a schedule whose request is gone (`Weak` dead) is pruned. `len` mirrors the
// list's length so that a round with no collective running costs one load.
#[derive(Default)]
pub(crate) struct Schedules {
    list: Mutex<Vec<Weak<Mutex<Exec>>>>,
    len: AtomicUsize,
}

impl Schedules {
    /// Add `x` (if `add`) after removing dead schedules and `x` itself.
    pub(crate) fn set(&self, x: &Arc<Mutex<Exec>>, add: bool) {
        let mut a = self.list.lock().unwrap_or_else(|p| p.into_inner());
        let me = Arc::downgrade(x);
        a.retain(|w| w.strong_count() > 0 && !w.ptr_eq(&me));
        if add {
            a.push(me);
        }
        self.len.store(a.len(), Ordering::Release);
    }

    /// Whether some nonblocking collective is running.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.len.load(Ordering::Acquire) != 0
    }

    /// Advance every schedule, oldest first, with the engine `e` locked. Returns
    /// whether any changed.
    #[inline]
    fn advance(&self, e: &mut Engine) -> bool {
        if !self.any() {
            return false;
        }
        self.advance_all(e)
    }

    fn advance_all(&self, e: &mut Engine) -> bool {
        let list: Vec<Arc<Mutex<Exec>>> = {
            let mut a = self.list.lock().unwrap_or_else(|p| p.into_inner());
            a.retain(|w| w.strong_count() > 0);
            self.len.store(a.len(), Ordering::Release);
            a.iter().filter_map(Weak::upgrade).collect()
        };
        let mut any = false;
        for x in list {
            // A schedule locked elsewhere is being advanced by its owner right now (the
            // engine lock we hold serialises owners, so that is this very call stack).
            let g = match x.try_lock() {
                Ok(g) => Some(g),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            if let Some(mut g) = g {
                any |= g.advance(e);
            }
        }
        any
    }
}

/// Progress rounds a waiting call runs with the engine locked before letting other
/// threads of the process take it.
const SPINS_PER_LOCK: u32 = 64;

/// Longest [`Inner::relock`] defers to threads blocked on the engine (a blocked thread
/// woken on an idle core may take tens of microseconds to run); then the waiter takes
/// its turn, and defers again at its next relock.
const RELOCK_WAIT: Duration = Duration::from_micros(200);

/// Drives waiting: spin, then yield, then block (the progress policy of
/// [`crate::engine`]).
struct Waiter {
    idle_polls: u32,
    idle_since: Option<Instant>,
}

impl Waiter {
    fn new() -> Self {
        Waiter {
            idle_polls: 0,
            idle_since: None,
        }
    }

    /// Something happened: start the back-off again.
    #[inline]
    fn reset(&mut self) {
        self.idle_polls = 0;
        self.idle_since = None;
    }

    /// After an idle progress round: what to do next. The clock is read only once the
    /// spinning is over (a yield costs a system call anyway).
    #[inline]
    fn idle(&mut self, backoff: Backoff) -> IdleAction {
        self.idle_polls = self.idle_polls.saturating_add(1);
        if self.idle_polls < backoff.spin_polls {
            return IdleAction::Spin;
        }
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        let idle = since.elapsed();
        match backoff.block_after {
            Some(d) if idle >= d => IdleAction::Block(block_bound(idle)),
            _ => IdleAction::Yield,
        }
    }
}

/// The longest sleep of a wait idle for `idle`: 1/16 of it, between [`MIN_BLOCK`] and
/// [`sleep::MAX_FD_SLEEP`] (shared-memory sleeps are cut shorter by the engine).
/// Transports wake a sleeper when data arrives, and other threads through the kick;
/// the bound only limits how late it sees what wakes neither (the watchdog's clock).
/// Sleeping 1 ms at a time (4 ms: the guest's timer tick), a rank waiting 1.5 s on an
/// RDMA peer in the emulated Soft-RoCE VM woke about 300 times and spent 12–17 % (in
/// one CI run above 30 %) of the wait on the CPU, two thirds of it in the kernel.
fn block_bound(idle: Duration) -> Duration {
    (idle / 16).clamp(MIN_BLOCK, sleep::MAX_FD_SLEEP)
}

/// Shortest sleep of a blocking wait ([`block_bound`]).
const MIN_BLOCK: Duration = Duration::from_millis(1);

/// What a waiter should do after an idle round.
enum IdleAction {
    /// Poll again at once.
    Spin,
    /// Give the core away once, then poll again.
    Yield,
    /// Sleep in the kernel until a transport sees activity, at most this long.
    Block(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_idle_wait_sleeps_longer_up_to_the_bound() {
        assert_eq!(block_bound(Duration::ZERO), MIN_BLOCK);
        assert_eq!(block_bound(Duration::from_millis(12)), MIN_BLOCK);
        assert_eq!(
            block_bound(Duration::from_millis(40)),
            Duration::from_micros(2500)
        );
        assert_eq!(block_bound(Duration::from_secs(5)), sleep::MAX_FD_SLEEP);
    }
}
