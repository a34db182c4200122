//! Releases that wait for the whole device, moved off the threads that drive progress
//! once stream-ordered operations are in use.
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
//! So from the first stream-ordered operation of the process on ([`host_wait_begin`]),
//! these three releases are handed to one release thread, which holds no lock of the
//! runtime and writes no flag: it may block in the driver for as long as the streams
//! take, and nothing waits for it. Before that, a release runs at once on the caller's
//! thread, as it always did. A handed-over release's error is logged (the caller has
//! moved on). The memory stays allocated (and mapped) until the thread gets to it.
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
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    items: VecDeque::new(),
    busy: 0,
    started: false,
});
static WORK: Condvar = Condvar::new();

fn queue() -> std::sync::MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A stream wait on a host flag is about to be enqueued. From now on, releases that
/// wait for the whole device run on the release thread.
pub fn host_wait_begin() {
    HANDED_OFF.store(true, Ordering::SeqCst);
}

/// Releases handed to the release thread and not finished yet (diagnostics and tests).
pub fn pending_releases() -> usize {
    let q = queue();
    q.items.len() + q.busy
}

/// Perform `r` now, or hand it to the release thread once stream-ordered operations
/// are in use (then `Ok`).
///
/// # Safety
/// As the driver call of `r` (`cuMemFree`, `cuMemFreeHost`, `cuIpcCloseMemHandle`);
/// the caller never uses the memory again.
pub(crate) unsafe fn release(r: Release) -> Result<(), GpuError> {
    if !HANDED_OFF.load(Ordering::SeqCst) {
        // SAFETY: the caller's contract.
        return unsafe { perform(r) };
    }
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
                if let Some(item) = q.items.pop_front() {
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

    #[test]
    fn after_a_host_wait_releases_go_to_the_release_thread() {
        // Without a GPU every driver call fails (NotBuilt / NoDriver): a release made
        // before any host wait fails at once, on this thread; one made after is handed
        // over (Ok), and the thread takes it (its failure logged). With a GPU the
        // address is rejected by the driver the same way. The switch is one-way and
        // process-wide; no other test of this crate begins a host wait.
        let before = HANDED_OFF.load(Ordering::SeqCst);
        // SAFETY: the address is never used; the driver rejects it or is absent.
        let r0 = unsafe { release(Release::IpcMapping(0x1000)) };
        if !before {
            assert!(r0.is_err(), "performed at once: the driver's answer");
        }
        host_wait_begin();
        // SAFETY: as above.
        let r1 = unsafe { release(Release::IpcMapping(0x2000)) };
        assert!(r1.is_ok(), "handed over, so no error here");
        let t = std::time::Instant::now();
        while pending_releases() > 0 {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(10),
                "the release thread takes it"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
