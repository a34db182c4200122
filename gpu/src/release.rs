//! Releases that wait for the whole device, moved off the threads that drive progress
//! once stream-ordered operations are in use, and run only while no stream waits on a
//! host flag.
//!
//! Stream-ordered operations (rankwire's `send_device_on_stream` and co.) enqueue
//! `cuStreamWaitValue32` on a word of host memory that a host thread of this process
//! (the runtime's proxy) writes when the operation completes. Some driver calls do not
//! return until *every* stream of the device has passed the work queued on it,
//! including such a wait. Measured on an H100 (driver 580, with and without MPS;
//! `benches/results/gpu-2026-12-06c-h100/`): while a non-blocking stream waited on a
//! host flag, `cuMemFree`, `cuMemFreeHost` and `cuIpcCloseMemHandle` blocked until the
//! flag was written; `cuMemAlloc`, `cuMemHostAlloc`, `cuMemHostRegister`,
//! `cuIpcOpenMemHandle`, `cuIpcGetMemHandle`, and copies, events and synchronizes on
//! other streams returned at once. A thread that makes such a call while the flag that
//! it, or a thread waiting for a lock it holds, must write is pending, waits forever: the
//! stream-ordered ping-pong of `rw-gpuapp streamp2p` hung that way when the proxy closed
//! a stale CUDA IPC mapping.
//!
//! Moving these calls to another thread is not enough: while one of them waits in the
//! driver, the driver blocks the other threads of the process too, in `cuMemAlloc`,
//! `cuMemHostAlloc`, copies and their synchronizes, and `cuEventRecord` /
//! `cuEventSynchronize` on any stream (`benches/results/gpu-2026-12-07/`, test C, with
//! and without MPS; only `cuIpcGetMemHandle` and `cuPointerGetAttribute` returned). So a
//! free that started while a stream waited stopped the proxy's own copies and events,
//! and the flag it waited for was never written (the stream proxy's hangs of
//! `benches/results/gpu-2026-12-06k/` without MPS, where the previous round's frees
//! were still queued when the next operation's wait was enqueued).
//!
//! Hence two rules, from the first stream-ordered operation of the process on
//! ([`host_wait_begin`]):
//! - These three releases are handed to one release thread, which holds no lock of the
//!   runtime and writes no flag. Before that, a release runs at once on the caller's
//!   thread, as it always did, counted so that the first host wait waits for it to end
//!   (the hand-off is decided under the queue's lock). A handed-over release's error is logged (the caller has
//!   moved on). The memory stays allocated (and mapped) until the thread gets to it.
//! - The thread runs a release only while no host wait is pending: each wait is counted
//!   from before it is enqueued until its flag has been written ([`HostWait`], dropped
//!   by the proxy after the write), and [`host_wait_begin`] waits while a release runs
//!   (one that started with no wait pending, so it does not wait for a flag). The
//!   driver call therefore never waits for a flag, and never holds the other threads
//!   for one. Releases queued while operations keep being enqueued back to back wait
//!   for the first moment with none pending.
//!
//! Known limit: reopening a CUDA IPC handle whose close is still queued can fail
//! (`CUDA_ERROR_ALREADY_MAPPED`); the IPC cache closes an entry only after it was
//! evicted or went stale, so the same handle comes back only if the peer's buffer
//! itself is sent again after an eviction.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use crate::error::GpuError;
use crate::result;

/// One release that may wait for the whole device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// `cuMemFree` of a `cuMemAlloc`/`cuMemAllocManaged` pointer.
    DeviceMemory(u64),
    /// `cuMemFreeHost` of a `cuMemHostAlloc` pointer (as an address).
    PinnedHost(usize),
    /// `cuIpcCloseMemHandle` of a mapping's base in this process.
    IpcMapping(u64),
}

/// Whether releases go to the release thread (set by the first [`host_wait_begin`]).
static HANDED_OFF: AtomicBool = AtomicBool::new(false);

/// The queue of the release thread: releases with the context they were made in.
struct Queue {
    items: VecDeque<(Release, usize)>,
    /// Taken by the thread and not finished yet.
    busy: usize,
    started: bool,
    /// Host waits enqueued (or being enqueued) whose flag has not been written yet.
    waits: usize,
    /// Releases running on their callers' threads (made before the hand-off).
    direct: usize,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    items: VecDeque::new(),
    busy: 0,
    started: false,
    waits: 0,
    direct: 0,
});
/// Signals the release thread: a release was queued, or the last host wait ended.
static WORK: Condvar = Condvar::new();
/// Signals [`host_wait_begin`]: a release finished.
static IDLE: Condvar = Condvar::new();

fn queue() -> std::sync::MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A pending stream wait on a host flag (see the module doc): while one is alive, the
/// release thread starts no release. Drop it once the flag has been written (or when
/// the wait was not enqueued after all).
#[derive(Debug)]
#[must_use = "the wait counts as pending until this is dropped"]
pub struct HostWait {
    _counted: (),
}

impl Drop for HostWait {
    fn drop(&mut self) {
        let mut q = queue();
        q.waits -= 1;
        let last = q.waits == 0;
        drop(q);
        if last {
            WORK.notify_all();
        }
    }
}

/// A stream wait on a host flag is about to be enqueued: from now on, releases that wait
/// for the whole device run on the release thread, and none starts until the returned
/// guard is dropped (after the flag was written). Waits, on the host, for a release
/// running now (it started with no host wait pending, so it ends without one).
pub fn host_wait_begin() -> HostWait {
    let mut q = queue();
    // Set under the queue's lock, which `release` holds while it decides: a release
    // either counts itself as direct first (waited for below) or is handed over.
    HANDED_OFF.store(true, Ordering::SeqCst);
    while q.busy > 0 || q.direct > 0 {
        q = IDLE.wait(q).unwrap_or_else(|p| p.into_inner());
    }
    q.waits += 1;
    HostWait { _counted: () }
}

/// Releases handed to the release thread and not finished yet (diagnostics and tests).
pub fn pending_releases() -> usize {
    let q = queue();
    q.items.len() + q.busy
}

/// Whether `r` waits in the release thread's queue (tests: other tests of the crate
/// may queue releases of their own meanwhile).
#[cfg(test)]
fn is_queued(r: Release) -> bool {
    queue().items.iter().any(|(x, _)| *x == r)
}

/// Perform `r` now, or hand it to the release thread once stream-ordered operations
/// are in use (then `Ok`).
///
/// # Safety
/// As the driver call of `r` (`cuMemFree`, `cuMemFreeHost`, `cuIpcCloseMemHandle`);
/// the caller never uses the memory again.
pub(crate) unsafe fn release(r: Release) -> Result<(), GpuError> {
    let mut q = queue();
    if !HANDED_OFF.load(Ordering::SeqCst) {
        // Counted, so that a first host wait begun meanwhile waits for it to end (it
        // started with no wait pending).
        q.direct += 1;
        drop(q);
        // SAFETY: the caller's contract.
        let res = unsafe { perform(r) };
        queue().direct -= 1;
        IDLE.notify_all();
        return res;
    }
    drop(q);
    let ctx = result::current_context_raw().unwrap_or(0);
    let mut q = queue();
    q.items.push_back((r, ctx));
    if !q.started {
        match std::thread::Builder::new()
            .name("rankwire-gpu-release".into())
            .spawn(release_thread)
        {
            Ok(_) => q.started = true,
            Err(e) => {
                // No thread: run it here (as before stream-ordered operations).
                q.items.pop_back();
                drop(q);
                tracing::warn!("rankwire-gpu: cannot start the release thread: {e}");
                // SAFETY: the caller's contract.
                return unsafe { perform(r) };
            }
        }
    }
    drop(q);
    WORK.notify_one();
    Ok(())
}

fn release_thread() {
    loop {
        let (r, ctx) = {
            let mut q = queue();
            loop {
                if q.waits == 0
                    && let Some(item) = q.items.pop_front()
                {
                    q.busy += 1;
                    break item;
                }
                q = WORK.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        if let Err(e) = run(r, ctx) {
            tracing::warn!("rankwire-gpu: a release handed to the release thread: {e}");
        }
        queue().busy -= 1;
        IDLE.notify_all();
    }
}

/// `r` in the context it was made in: device memory and IPC mappings belong to one
/// context (the callers bind its device's primary context first); portable pinned host
/// memory can be freed from any.
fn run(r: Release, ctx: usize) -> Result<(), GpuError> {
    match (r, ctx) {
        (Release::PinnedHost(_), _) | (_, 0) => result::ensure_some_context()?,
        (_, ctx) => result::set_context_raw(ctx)?,
    }
    // SAFETY: handed over by `release`, whose caller guaranteed the call.
    unsafe { perform(r) }
}

unsafe fn perform(r: Release) -> Result<(), GpuError> {
    // SAFETY: forwarded from the callers' contracts.
    unsafe {
        match r {
            Release::DeviceMemory(p) => result::mem_free(p),
            Release::PinnedHost(p) => result::mem_free_host(p as *mut u8),
            Release::IpcMapping(p) => result::ipc_close_mem_handle(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// The release state is process-wide: its tests take turns.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn wait_until_released(what: &str) {
        let t = Instant::now();
        while pending_releases() > 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn after_a_host_wait_releases_go_to_the_release_thread() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        // Without a GPU every driver call fails (NotBuilt / NoDriver): a release made
        // before any host wait fails at once, on this thread; one made after is handed
        // over (Ok), and the thread takes it (its failure logged). With a GPU the
        // address is rejected by the driver the same way. The switch is one-way and
        // process-wide; only the tests of this module begin host waits.
        let before = HANDED_OFF.load(Ordering::SeqCst);
        // SAFETY: the address is never used; the driver rejects it or is absent.
        let r0 = unsafe { release(Release::IpcMapping(0x1000)) };
        if !before {
            assert!(r0.is_err(), "performed at once: the driver's answer");
        }
        drop(host_wait_begin());
        // SAFETY: as above.
        let r1 = unsafe { release(Release::IpcMapping(0x2000)) };
        assert!(r1.is_ok(), "handed over, so no error here");
        wait_until_released("the release thread takes it");
    }

    #[test]
    fn no_release_starts_while_a_host_wait_is_pending() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        // A release that waits for the whole device must not start while a stream
        // waits on a host flag: it would wait for the flag, and hold every other
        // thread's copies and events meanwhile (gpu-2026-12-07, test C), the proxy's
        // included. Two waits pending, a release queued: it stays queued until both
        // have ended, then runs.
        let first = host_wait_begin();
        let second = host_wait_begin();
        let ours = Release::DeviceMemory(0x3000);
        // SAFETY: the address is never used; the driver rejects it or is absent.
        let r = unsafe { release(ours) };
        assert!(r.is_ok(), "handed over");
        std::thread::sleep(Duration::from_millis(50));
        assert!(is_queued(ours), "held while two waits are pending");
        drop(first);
        std::thread::sleep(Duration::from_millis(50));
        assert!(is_queued(ours), "held while one wait is pending");
        drop(second);
        let t = Instant::now();
        while is_queued(ours) {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "runs once no wait is pending"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        wait_until_released("and finishes");
        // A new wait after that starts at once (no release is running).
        let t = Instant::now();
        drop(host_wait_begin());
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
