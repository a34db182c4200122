//! Releases that wait for the whole device, held back while a stream of this process
//! waits for a host thread.
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
//! other streams returned at once. A thread that frees or unmaps while the flag it (or
//! the proxy waiting behind it) must write is pending waits forever: the stream-ordered
//! ping-pong of `rw-gpuapp streamp2p` hung that way when the receiver closed a stale
//! CUDA IPC mapping.
//!
//! So these three releases go through one gate: [`host_wait_begin`] counts a stream
//! wait on a host flag before it is enqueued, [`host_wait_end`] after its flag is
//! written. While the count is above zero a release is queued; when it drops to zero
//! the queue is run. The memory stays allocated (and mapped) a little longer; a
//! release's error is logged, as the caller has moved on.

use std::sync::Mutex;

use crate::error::GpuError;
use crate::result;

/// One release the gate may hold back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// `cuMemFree` of a `cuMemAlloc`/`cuMemAllocManaged` pointer.
    DeviceMemory(u64),
    /// `cuMemFreeHost` of a `cuMemHostAlloc` pointer (as an address).
    PinnedHost(usize),
    /// `cuIpcCloseMemHandle` of a mapping's base in this process.
    IpcMapping(u64),
}

/// The count of stream waits on host flags and the releases held back.
struct Gate<R> {
    waits: usize,
    held: Vec<R>,
}

impl<R> Gate<R> {
    const fn new() -> Self {
        Gate {
            waits: 0,
            held: Vec::new(),
        }
    }

    /// `Some(r)`: perform it now (no wait pending); `None`: held back.
    fn admit(&mut self, r: R) -> Option<R> {
        if self.waits == 0 {
            Some(r)
        } else {
            self.held.push(r);
            None
        }
    }

    /// A wait ended: the releases to perform now, in the order they came (all of them
    /// once no wait is pending, else none).
    fn end(&mut self) -> Vec<R> {
        self.waits = self.waits.saturating_sub(1);
        if self.waits == 0 {
            std::mem::take(&mut self.held)
        } else {
            Vec::new()
        }
    }
}

/// The process's gate, with each held release's context. The lock is held while a
/// release runs, so that no stream wait is enqueued between the check and the call.
static GATE: Mutex<Gate<(Release, usize)>> = Mutex::new(Gate::new());

fn gate() -> std::sync::MutexGuard<'static, Gate<(Release, usize)>> {
    GATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A stream wait on a host flag is about to be enqueued: releases are held back until
/// the matching [`host_wait_end`].
pub fn host_wait_begin() {
    gate().waits += 1;
}

/// The flag of a wait counted by [`host_wait_begin`] has been written (or the wait was
/// never enqueued). When no such wait remains, the releases held back run here.
pub fn host_wait_end() {
    let mut g = gate();
    for (r, ctx) in g.end() {
        if let Err(e) = run(r, ctx) {
            tracing::warn!("rankwire-gpu: a release held back during a stream wait: {e}");
        }
    }
}

/// Releases held back now (diagnostics and tests).
pub fn held_releases() -> usize {
    gate().held.len()
}

/// Perform `r` now, or hold it back while a stream waits on a host flag (then `Ok`).
///
/// # Safety
/// As the driver call of `r` (`cuMemFree`, `cuMemFreeHost`, `cuIpcCloseMemHandle`);
/// the caller never uses the memory again.
pub(crate) unsafe fn release(r: Release) -> Result<(), GpuError> {
    let mut g = gate();
    let ctx = if g.waits == 0 {
        0
    } else {
        result::current_context_raw().unwrap_or(0)
    };
    match g.admit((r, ctx)) {
        // SAFETY: the caller's contract; the lock keeps new stream waits out meanwhile.
        Some((r, _)) => unsafe { perform(r) },
        None => Ok(()),
    }
}

fn run(r: Release, ctx: usize) -> Result<(), GpuError> {
    if ctx != 0 {
        result::set_context_raw(ctx)?;
    }
    // SAFETY: held by `release`, whose caller guaranteed the call.
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
    fn releases_wait_for_the_last_host_wait() {
        let mut g: Gate<u32> = Gate::new();
        assert_eq!(g.admit(1), Some(1), "no wait pending: at once");
        g.waits += 2;
        assert_eq!(g.admit(2), None);
        assert_eq!(g.admit(3), None);
        assert!(g.end().is_empty(), "one wait still pending");
        assert_eq!(g.end(), [2, 3], "in the order they came");
        assert!(g.end().is_empty());
        assert_eq!(g.waits, 0, "an extra end does not underflow");
        assert_eq!(g.admit(4), Some(4));
    }

    #[test]
    fn a_release_during_a_host_wait_is_held_then_run() {
        // The real gate: held while the wait is counted, gone (run, or its failure
        // logged without a GPU) when it ends. No other test of this crate waits on a
        // host flag, so the count is this test's.
        host_wait_begin();
        // SAFETY: the address is never used; without a GPU the call fails (logged),
        // with one cuIpcCloseMemHandle rejects it.
        let r = unsafe { release(Release::IpcMapping(0x1000)) };
        let held_now = held_releases();
        host_wait_end();
        assert!(r.is_ok(), "held, so no error yet");
        assert!(held_now >= 1);
        assert_eq!(held_releases(), 0);
    }
}
