//! The pool of GPU temporaries: idle `cuMemAlloc` device buffers and `cuMemHostAlloc`
//! pinned host buffers kept for reuse.
//!
//! Two users share one pool per process: the device collectives (their schedules'
//! temporaries) and CUDA IPC staging (a device buffer legacy IPC cannot export is copied
//! into a pooled `cuMemAlloc` buffer, which is exported instead). Device buffers from
//! the pool are IPC-capable, and reusing them lets peers keep them mapped: their IPC
//! cache hits on later calls instead of opening the handle again.
//!
//! The pool is a value ([`TmpPool`]), not process-global state: its owner (rankwire's
//! progress engine) creates it with the byte bound of idle buffers and lends it by
//! `Arc` to the collectives and to the CUDA IPC transport.
//!
//! # Bookkeeping
//! [`TmpCache`] holds the buffers of one kind: `take(device, len)` returns the address
//! of an idle buffer of the same device holding at least `len` bytes and at most
//! `2 × len` (the smallest such), or allocates a new one rounded up to
//! [`ROUND_BYTES`]; `give(addr)` returns it; while the idle buffers hold more than the
//! bound, the largest idle one is freed. Lent buffers never count against the bound
//! and are never freed by the pool before they are given back.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::{DeviceBuffer, GpuError, PinnedBuffer};

/// New buffers are rounded up to a multiple of this many bytes (64 KiB), so that close
/// sizes share buffers.
pub const ROUND_BYTES: usize = 1 << 16;

/// A buffer a [`TmpCache`] can hold: its address, its length in bytes and its device.
/// Dropping it frees the memory.
pub trait Cached: Send {
    /// Address of the first byte (device pointer or host virtual address).
    fn addr(&self) -> u64;
    /// Length in bytes.
    fn bytes(&self) -> usize;
    /// Device ordinal; `-1` for memory usable from every device (pinned host memory).
    fn device(&self) -> i32;
}

impl Cached for DeviceBuffer {
    fn addr(&self) -> u64 {
        self.ptr()
    }
    fn bytes(&self) -> usize {
        self.len()
    }
    fn device(&self) -> i32 {
        DeviceBuffer::device(self)
    }
}

impl Cached for PinnedBuffer {
    fn addr(&self) -> u64 {
        self.as_ptr() as u64
    }
    fn bytes(&self) -> usize {
        self.len()
    }
    fn device(&self) -> i32 {
        // Pinned memory is portable: usable from every device.
        -1
    }
}

/// Counters of a [`TmpCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TmpCacheStats {
    /// Buffers lent now.
    pub lent: usize,
    /// Idle buffers kept now.
    pub idle: usize,
    /// Bytes of the idle buffers.
    pub idle_bytes: usize,
    /// Takes served by an idle buffer.
    pub hits: u64,
    /// Takes that allocated.
    pub allocs: u64,
    /// Idle buffers freed to stay under the bound.
    pub evictions: u64,
}

/// Idle and lent buffers of one kind, bounded by `limit_bytes` of idle buffers (see
/// the module documentation). Not thread-safe by itself; [`TmpPool`] wraps it.
#[derive(Debug)]
pub struct TmpCache<B> {
    free: Vec<B>,
    lent: HashMap<u64, B>,
    free_bytes: usize,
    limit_bytes: usize,
    stats: TmpCacheStats,
}

impl<B: Cached> TmpCache<B> {
    /// An empty cache keeping at most `limit_bytes` bytes of idle buffers.
    pub fn new(limit_bytes: usize) -> Self {
        TmpCache {
            free: Vec::new(),
            lent: HashMap::new(),
            free_bytes: 0,
            limit_bytes,
            stats: TmpCacheStats::default(),
        }
    }

    /// The address of a buffer of at least `len` bytes for `device`, lent until
    /// [`TmpCache::give`]: an idle one of at most `2 × len` bytes (the smallest), or a
    /// new one from `alloc(n)` with `n` = `len` rounded up to [`ROUND_BYTES`].
    ///
    /// # Errors
    /// What `alloc` returns.
    pub fn take(
        &mut self,
        device: i32,
        len: usize,
        alloc: impl FnOnce(usize) -> Result<B, GpuError>,
    ) -> Result<u64, GpuError> {
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.device() == device && b.bytes() >= len && b.bytes() / 2 <= len)
            .min_by_key(|(_, b)| b.bytes())
            .map(|(i, _)| i);
        let buf = match best {
            Some(i) => {
                let b = self.free.swap_remove(i);
                self.free_bytes -= b.bytes();
                self.stats.hits += 1;
                b
            }
            None => {
                let b = alloc(len.div_ceil(ROUND_BYTES).saturating_mul(ROUND_BYTES))?;
                self.stats.allocs += 1;
                b
            }
        };
        let addr = buf.addr();
        self.lent.insert(addr, buf);
        Ok(addr)
    }

    /// Give back the buffer at `addr` (from [`TmpCache::take`]); it becomes idle, and
    /// the largest idle buffers are freed while more than the bound is idle. Returns
    /// whether `addr` was lent (an unknown address is ignored).
    pub fn give(&mut self, addr: u64) -> bool {
        let Some(buf) = self.lent.remove(&addr) else {
            return false;
        };
        self.free_bytes += buf.bytes();
        self.free.push(buf);
        self.trim();
        true
    }

    /// Change the bound of idle bytes (frees idle buffers over a lower bound).
    pub fn set_limit(&mut self, limit_bytes: usize) {
        self.limit_bytes = limit_bytes;
        self.trim();
    }

    /// Free every idle buffer (lent ones stay lent).
    pub fn release_idle(&mut self) {
        self.free.clear();
        self.free_bytes = 0;
    }

    /// Counters and current sizes.
    pub fn stats(&self) -> TmpCacheStats {
        TmpCacheStats {
            lent: self.lent.len(),
            idle: self.free.len(),
            idle_bytes: self.free_bytes,
            ..self.stats
        }
    }

    fn trim(&mut self) {
        // Free the largest idle buffers first until under the bound.
        while self.free_bytes > self.limit_bytes {
            let Some(i) = self
                .free
                .iter()
                .enumerate()
                .max_by_key(|(_, b)| b.bytes())
                .map(|(i, _)| i)
            else {
                break;
            };
            let b = self.free.swap_remove(i);
            self.free_bytes -= b.bytes();
            self.stats.evictions += 1;
            drop(b);
        }
    }
}

/// The process's GPU temporaries: device buffers (`cuMemAlloc`, IPC-capable) and
/// pinned host buffers (`cuMemHostAlloc`, portable), each bounded by the same number
/// of idle bytes. Thread-safe (`&self`); share it with `Arc`.
#[derive(Debug)]
pub struct TmpPool {
    device: Mutex<TmpCache<DeviceBuffer>>,
    pinned: Mutex<TmpCache<PinnedBuffer>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TmpPool {
    /// An empty pool keeping at most `limit_bytes` idle bytes of each kind (rankwire
    /// passes `RANKWIRE_GPU_TMP_CACHE`, default 2 GiB).
    pub fn new(limit_bytes: usize) -> Self {
        TmpPool {
            device: Mutex::new(TmpCache::new(limit_bytes)),
            pinned: Mutex::new(TmpCache::new(limit_bytes)),
        }
    }

    /// A `cuMemAlloc` buffer of at least `len` bytes on `device`, IPC-capable; its
    /// device address. Give it back with [`TmpPool::give_device`].
    ///
    /// # Errors
    /// [`DeviceBuffer::alloc`]'s errors (out of memory, no driver, not built).
    pub fn take_device(&self, device: i32, len: usize) -> Result<u64, GpuError> {
        locked(&self.device).take(device, len, |n| DeviceBuffer::alloc(device, n))
    }

    /// Give back a buffer from [`TmpPool::take_device`] once no queued work uses it.
    pub fn give_device(&self, addr: u64) {
        locked(&self.device).give(addr);
    }

    /// A pinned host buffer of at least `len` bytes; its address. Give it back with
    /// [`TmpPool::give_pinned`].
    ///
    /// # Errors
    /// [`PinnedBuffer::new`]'s errors (for example a low `ulimit -l`).
    pub fn take_pinned(&self, len: usize) -> Result<u64, GpuError> {
        locked(&self.pinned).take(-1, len, PinnedBuffer::new)
    }

    /// Give back a buffer from [`TmpPool::take_pinned`] once no queued work uses it.
    pub fn give_pinned(&self, addr: u64) {
        locked(&self.pinned).give(addr);
    }

    /// Free every idle buffer of both kinds (finalize: no peer maps them any more).
    pub fn release_idle(&self) {
        locked(&self.device).release_idle();
        locked(&self.pinned).release_idle();
    }

    /// Counters of the device and the pinned cache.
    pub fn stats(&self) -> (TmpCacheStats, TmpCacheStats) {
        (locked(&self.device).stats(), locked(&self.pinned).stats())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fake buffer at a made-up address; counts drops (frees).
    struct Fake {
        addr: u64,
        len: usize,
        device: i32,
        freed: Arc<AtomicUsize>,
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            self.freed.fetch_add(1, Ordering::Relaxed);
        }
    }

    impl Cached for Fake {
        fn addr(&self) -> u64 {
            self.addr
        }
        fn bytes(&self) -> usize {
            self.len
        }
        fn device(&self) -> i32 {
            self.device
        }
    }

    struct Alloc {
        next: u64,
        freed: Arc<AtomicUsize>,
        sizes: Vec<usize>,
    }

    impl Alloc {
        fn new() -> Self {
            Alloc {
                next: 0x1000_0000,
                freed: Arc::new(AtomicUsize::new(0)),
                sizes: Vec::new(),
            }
        }
        fn take(&mut self, c: &mut TmpCache<Fake>, device: i32, len: usize) -> u64 {
            let addr = self.next;
            let freed = self.freed.clone();
            let sizes = &mut self.sizes;
            let got = c
                .take(device, len, |n| {
                    sizes.push(n);
                    Ok(Fake {
                        addr,
                        len: n,
                        device,
                        freed,
                    })
                })
                .unwrap();
            if got == addr {
                self.next += 1 << 32;
            }
            got
        }
        fn freed(&self) -> usize {
            self.freed.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn a_given_buffer_is_reused_for_a_close_size_of_the_same_device() {
        let mut c = TmpCache::new(1 << 30);
        let mut a = Alloc::new();
        let x = a.take(&mut c, 0, 100_000);
        // Rounded up to 64 KiB multiples: 100_000 -> 131_072.
        assert_eq!(a.sizes, vec![131_072]);
        assert!(c.give(x));
        assert_eq!(c.stats().idle_bytes, 131_072);
        // 70_000 <= 131_072 <= 140_000: reused.
        assert_eq!(a.take(&mut c, 0, 70_000), x);
        assert_eq!(c.stats().hits, 1);
        assert!(c.give(x));
        // Another device: not reused.
        let y = a.take(&mut c, 1, 70_000);
        assert_ne!(y, x);
        // Too small a request (buffer more than twice the size): not reused.
        let z = a.take(&mut c, 0, 60_000);
        assert_ne!(z, x);
        // Too large a request: not reused.
        let w = a.take(&mut c, 0, 200_000);
        assert_ne!(w, x);
        let s = c.stats();
        assert_eq!((s.lent, s.idle, s.allocs, s.hits), (3, 1, 4, 1));
        assert_eq!(a.freed(), 0);
    }

    #[test]
    fn the_smallest_fitting_idle_buffer_is_chosen() {
        let mut c = TmpCache::new(1 << 30);
        let mut a = Alloc::new();
        let big = a.take(&mut c, 0, 4 << 16);
        let small = a.take(&mut c, 0, 3 << 16);
        c.give(big);
        c.give(small);
        assert_eq!(a.take(&mut c, 0, 2 << 16), small);
        assert_eq!(a.take(&mut c, 0, 2 << 16), big);
    }

    #[test]
    fn idle_bytes_over_the_limit_free_the_largest_first_and_lent_ones_never() {
        let mut c = TmpCache::new(3 << 16);
        let mut a = Alloc::new();
        let b1 = a.take(&mut c, 0, 1 << 16);
        let b2 = a.take(&mut c, 0, 2 << 16);
        let b3 = a.take(&mut c, 0, 4 << 16);
        // Lent buffers are not bounded.
        assert_eq!(c.stats().lent, 3);
        c.give(b1);
        c.give(b2);
        assert_eq!(c.stats().idle_bytes, 3 << 16);
        assert_eq!(a.freed(), 0);
        // 7 << 16 idle: the 4 << 16 one goes (largest), leaving 3 << 16.
        c.give(b3);
        let s = c.stats();
        assert_eq!((s.idle, s.idle_bytes, s.evictions), (2, 3 << 16, 1));
        assert_eq!(a.freed(), 1);
        // A lower bound trims at once, largest first.
        c.set_limit(1 << 16);
        assert_eq!(c.stats().idle_bytes, 1 << 16);
        assert_eq!(a.freed(), 2);
        assert_eq!(a.take(&mut c, 0, 1 << 16), b1);
    }

    #[test]
    fn unknown_addresses_are_ignored_and_release_idle_keeps_lent_buffers() {
        let mut c = TmpCache::new(1 << 30);
        let mut a = Alloc::new();
        let x = a.take(&mut c, 0, 1);
        let y = a.take(&mut c, 0, 1);
        assert!(!c.give(0xdead));
        assert!(c.give(x));
        assert!(!c.give(x), "a second give of the same address is ignored");
        c.release_idle();
        assert_eq!(a.freed(), 1);
        let s = c.stats();
        assert_eq!((s.lent, s.idle, s.idle_bytes), (1, 0, 0));
        assert!(c.give(y));
    }

    #[test]
    fn a_failed_allocation_leaves_the_cache_unchanged() {
        let mut c: TmpCache<Fake> = TmpCache::new(1 << 30);
        let r = c.take(0, 10, |_| Err(GpuError::NotBuilt));
        assert!(matches!(r, Err(GpuError::NotBuilt)));
        assert_eq!(c.stats(), TmpCacheStats::default());
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn the_pool_reports_not_built_without_cuda() {
        let p = TmpPool::new(1 << 20);
        assert!(matches!(p.take_device(0, 16), Err(GpuError::NotBuilt)));
        assert!(matches!(p.take_pinned(16), Err(GpuError::NotBuilt)));
        p.give_device(0);
        p.release_idle();
        assert_eq!(p.stats().0, TmpCacheStats::default());
    }
}
