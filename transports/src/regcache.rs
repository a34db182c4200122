//! A registration cache with lazy unpinning, generic over the registrar.
//!
//! Registering memory with a NIC (`ibv_reg_mr`, `ibv_reg_dmabuf_mr`) costs tens of
//! microseconds to milliseconds, so a transport keeps regions registered after use and
//! reuses them. This cache knows nothing about verbs or CUDA: a [`Registrar`] does the
//! registering, and the caller supplies a *buffer id* that changes when the memory at an
//! address is freed and allocated again (for CUDA, `CU_POINTER_ATTRIBUTE_BUFFER_ID`; for
//! host memory, whatever identity the caller can vouch for).
//!
//! # Lifecycle of an entry
//! 1. [`RegCache::acquire`] rounds the range out to whole pages and looks for a live
//!    entry of the same buffer id that covers it (a *hit*). An entry covering the range
//!    with a different buffer id is stale: it is *invalidated* (deregistered now, or as
//!    soon as its last in-flight operation ends) and never handed out again. Otherwise
//!    the range is registered (a *miss*). If registration fails, the least recently
//!    used idle entry is evicted and registration is retried once.
//! 2. Each [`Lease`] counts as one operation in flight; the entry cannot be evicted
//!    while any lease on it is held.
//! 3. [`RegCache::release`] ends the operation. An entry with no operation in flight
//!    stays registered in an LRU list of idle entries, bounded by
//!    [`RegCacheConfig::max_idle_entries`] and by [`RegCacheConfig::max_bytes`]
//!    registered in total; past either bound the least recently used idle entries are
//!    deregistered (*evictions*).
//!
//! Compare Open MPI's `rcache/grdma` and UCX's `ucs/memory/rcache.h`, which keep the
//! same refcount-plus-LRU structure.

use std::collections::HashMap;
use std::fmt;

use lru::LruCache;

/// Does the actual (de)registration for a [`RegCache`].
pub trait Registrar {
    /// What a registration produces (a memory region with its keys).
    type Handle;
    /// Why a registration failed.
    type Error: fmt::Display;
    /// Register `len_bytes` bytes at `addr` (page-aligned by the cache).
    ///
    /// # Errors
    /// Whatever the underlying call reports (out of pinnable memory, bad address, ...).
    fn register(&mut self, addr: u64, len_bytes: u64) -> Result<Self::Handle, Self::Error>;
    /// Undo a registration. Never fails from the cache's point of view; implementations
    /// log their own errors.
    fn deregister(&mut self, handle: Self::Handle);
}

/// Bounds of a [`RegCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegCacheConfig {
    /// Idle (registered, no operation in flight) entries kept at most. 0 turns caching
    /// off: entries are deregistered as soon as their last operation ends.
    pub max_idle_entries: usize,
    /// Registered bytes (in use plus idle) above which idle entries are evicted.
    pub max_bytes: u64,
    /// Page size in bytes used to round ranges (a power of two).
    pub page_bytes: u64,
}

impl Default for RegCacheConfig {
    fn default() -> Self {
        RegCacheConfig {
            max_idle_entries: 256,
            max_bytes: 1 << 30,
            page_bytes: 4096,
        }
    }
}

impl RegCacheConfig {
    /// The defaults, overridden by `RANKWIRE_REGCACHE_MAX_ENTRIES` (idle entries) and
    /// `RANKWIRE_REGCACHE_MAX_BYTES` (bytes, a plain integer).
    ///
    /// # Errors
    /// [`crate::ConfigError`] naming the variable when a value is not a number.
    pub fn from_env() -> Result<Self, crate::ConfigError> {
        crate::settings::check_names(&[
            "RANKWIRE_REGCACHE_MAX_ENTRIES",
            "RANKWIRE_REGCACHE_MAX_BYTES",
        ])?;
        let mut c = RegCacheConfig::default();
        if let Some(v) = crate::settings::raw("RANKWIRE_REGCACHE_MAX_ENTRIES") {
            c.max_idle_entries = v.trim().parse().map_err(|_| crate::ConfigError {
                var: "RANKWIRE_REGCACHE_MAX_ENTRIES",
                value: v.clone(),
                expected: "a count of idle registrations (0 turns caching off)",
            })?;
        }
        if let Some(v) = crate::settings::raw("RANKWIRE_REGCACHE_MAX_BYTES") {
            c.max_bytes = v.trim().parse().map_err(|_| crate::ConfigError {
                var: "RANKWIRE_REGCACHE_MAX_BYTES",
                value: v.clone(),
                expected: "a number of bytes",
            })?;
        }
        Ok(c)
    }
}

/// Counters of a [`RegCache`], for the API and the debug log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegCacheStats {
    /// Acquisitions served by an existing registration.
    pub hits: u64,
    /// Acquisitions that registered memory.
    pub misses: u64,
    /// Idle registrations dropped to respect the bounds or to retry a failed
    /// registration.
    pub evictions: u64,
    /// Registrations dropped because the buffer id at their address changed.
    pub invalidations: u64,
    /// Registrations that failed once and were retried after an eviction.
    pub retries: u64,
    /// Registrations alive now (in use or idle).
    pub entries: usize,
    /// Bytes registered now.
    pub bytes: u64,
}

/// One operation's hold on a registration. Plain data: give it back with
/// [`RegCache::release`] exactly once.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    entry: u64,
    /// Page-aligned start address of the registration.
    pub region_addr: u64,
    /// Length in bytes of the registration.
    pub region_len: u64,
}

/// A registration failed even after evicting an idle entry and retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "registration of {len_bytes} bytes at {addr:#x} failed: {reason} ({entries} registrations, {bytes} bytes held; lower RANKWIRE_REGCACHE_MAX_BYTES or raise the memlock limit)"
)]
pub struct RegCacheError {
    /// Page-aligned start address.
    pub addr: u64,
    /// Page-aligned length in bytes.
    pub len_bytes: u64,
    /// The registrar's error text (of the retry, if one happened).
    pub reason: String,
    /// Registrations alive when it failed.
    pub entries: usize,
    /// Bytes registered when it failed.
    pub bytes: u64,
}

/// The cache. See the module doc for the lifecycle.
pub struct RegCache<R: Registrar> {
    registrar: R,
    cfg: RegCacheConfig,
    next_id: u64,
    entries: HashMap<u64, Entry<R::Handle>>,
    // Idle entries (refs == 0, not stale), least recently used first.
    idle: LruCache<u64, ()>,
    stats: RegCacheStats,
}

// A live registration. `stale` entries are no longer found by lookups and are
// deregistered when `refs` drops to 0.
struct Entry<H> {
    start: u64,
    len: u64,
    buffer_id: u64,
    handle: H,
    refs: u32,
    stale: bool,
}

impl<R: Registrar> RegCache<R> {
    /// An empty cache.
    ///
    /// # Panics
    /// If `cfg.page_bytes` is not a power of two (a programming error).
    pub fn new(registrar: R, cfg: RegCacheConfig) -> Self {
        assert!(
            cfg.page_bytes.is_power_of_two(),
            "page size must be a power of two"
        );
        RegCache {
            registrar,
            cfg,
            next_id: 1,
            entries: HashMap::new(),
            idle: LruCache::unbounded(),
            stats: RegCacheStats::default(),
        }
    }

    /// Hold a registration covering `[addr, addr + len_bytes)` of the buffer `buffer_id`
    /// for one operation (see the module doc).
    ///
    /// # Errors
    /// [`RegCacheError`] when registering failed twice (before and after evicting the
    /// least recently used idle entry), or once with nothing to evict.
    pub fn acquire(
        &mut self,
        addr: u64,
        len_bytes: u64,
        buffer_id: u64,
    ) -> Result<Lease, RegCacheError> {
        let (start, len) = self.page_span(addr, len_bytes);
        let end = start + len;
        let mut found = None;
        let mut stale = Vec::new();
        for (&id, e) in self.entries.iter() {
            if e.stale || e.start > start || e.start + e.len < end {
                continue;
            }
            if e.buffer_id == buffer_id {
                found = Some(id);
            } else {
                stale.push(id);
            }
        }
        for id in stale {
            self.invalidate(id);
        }
        // Memory at this range changed identity: anything overlapping it with another
        // buffer id is stale too (a partial overlap cannot cover the range but would
        // still hold dead pages of the old buffer).
        let overlapping: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                !e.stale && e.buffer_id != buffer_id && e.start < end && start < e.start + e.len
            })
            .map(|(&id, _)| id)
            .collect();
        for id in overlapping {
            self.invalidate(id);
        }
        if let Some(id) = found {
            self.stats.hits += 1;
            self.idle.pop(&id);
            let e = self
                .entries
                .get_mut(&id)
                .expect("found ids come from the entry table");
            e.refs += 1;
            return Ok(Lease {
                entry: id,
                region_addr: e.start,
                region_len: e.len,
            });
        }
        self.stats.misses += 1;
        let handle = match self.registrar.register(start, len) {
            Ok(h) => h,
            Err(first) => {
                let Some((victim, ())) = self.idle.pop_lru() else {
                    return Err(self.error(start, len, first.to_string()));
                };
                self.drop_entry(victim);
                self.stats.evictions += 1;
                self.stats.retries += 1;
                self.registrar
                    .register(start, len)
                    .map_err(|e| self.error(start, len, e.to_string()))?
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        self.entries.insert(
            id,
            Entry {
                start,
                len,
                buffer_id,
                handle,
                refs: 1,
                stale: false,
            },
        );
        self.stats.entries += 1;
        self.stats.bytes += len;
        self.enforce_bounds();
        Ok(Lease {
            entry: id,
            region_addr: start,
            region_len: len,
        })
    }

    /// The registration a lease holds.
    ///
    /// # Panics
    /// If `lease` was already released (a use-after-release bug in the caller).
    pub fn handle(&self, lease: &Lease) -> &R::Handle {
        &self
            .entries
            .get(&lease.entry)
            .expect("a lease keeps its entry alive until released")
            .handle
    }

    /// End the operation that held `lease`. The registration stays cached while the
    /// bounds allow.
    pub fn release(&mut self, lease: Lease) {
        let Some(e) = self.entries.get_mut(&lease.entry) else {
            return;
        };
        e.refs = e.refs.saturating_sub(1);
        if e.refs > 0 {
            return;
        }
        if e.stale || self.cfg.max_idle_entries == 0 {
            self.drop_entry(lease.entry);
            if self.cfg.max_idle_entries == 0 {
                self.stats.evictions += 1;
            }
            return;
        }
        self.idle.put(lease.entry, ());
        self.enforce_bounds();
    }

    /// Drop every cached registration of `buffer_id` (the buffer is being freed).
    /// Entries with operations in flight go when their last lease is released.
    pub fn invalidate_buffer(&mut self, buffer_id: u64) {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.buffer_id == buffer_id && !e.stale)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            self.invalidate(id);
        }
    }

    /// The counters.
    pub fn stats(&self) -> RegCacheStats {
        self.stats
    }

    /// The bounds in use.
    pub fn config(&self) -> RegCacheConfig {
        self.cfg
    }

    /// The registrar (for calls outside the cache, e.g. its own statistics).
    pub fn registrar(&self) -> &R {
        &self.registrar
    }

    /// Deregister every idle entry (e.g. before closing the device). Entries in use stay.
    pub fn flush_idle(&mut self) {
        while let Some((id, ())) = self.idle.pop_lru() {
            self.drop_entry(id);
            self.stats.evictions += 1;
        }
    }

    /// Deregister every entry, including those with operations in flight (teardown,
    /// once the NIC can no longer touch them: queue pairs destroyed). Later releases of
    /// their leases do nothing.
    pub fn clear(&mut self) {
        self.idle.clear();
        let ids: Vec<u64> = self.entries.keys().copied().collect();
        for id in ids {
            self.drop_entry(id);
        }
    }

    fn invalidate(&mut self, id: u64) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        self.stats.invalidations += 1;
        if e.refs == 0 {
            self.idle.pop(&id);
            self.drop_entry(id);
        } else {
            e.stale = true;
        }
    }

    fn enforce_bounds(&mut self) {
        while self.idle.len() > self.cfg.max_idle_entries
            || (self.stats.bytes > self.cfg.max_bytes && !self.idle.is_empty())
        {
            let Some((id, ())) = self.idle.pop_lru() else {
                break;
            };
            self.drop_entry(id);
            self.stats.evictions += 1;
        }
    }

    fn drop_entry(&mut self, id: u64) {
        if let Some(e) = self.entries.remove(&id) {
            self.stats.entries -= 1;
            self.stats.bytes -= e.len;
            self.registrar.deregister(e.handle);
        }
    }

    fn page_span(&self, addr: u64, len: u64) -> (u64, u64) {
        let page = self.cfg.page_bytes;
        let start = addr & !(page - 1);
        let end = addr.saturating_add(len.max(1)).div_ceil(page) * page;
        (start, end - start)
    }

    fn error(&self, addr: u64, len_bytes: u64, reason: String) -> RegCacheError {
        RegCacheError {
            addr,
            len_bytes,
            reason,
            entries: self.stats.entries,
            bytes: self.stats.bytes,
        }
    }
}

impl<R: Registrar> Drop for RegCache<R> {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    // A fake NIC: hands out increasing keys, remembers what is registered, and fails
    // on demand.
    #[derive(Default)]
    struct FakeLog {
        live: HashMap<u32, (u64, u64)>,
        next_key: u32,
        registers: u32,
        deregisters: u32,
        fail_next: u32,
        // Fail any registration while this many bytes or more are live.
        fail_above_bytes: Option<u64>,
    }

    #[derive(Clone, Default)]
    struct Fake(Rc<RefCell<FakeLog>>);

    #[derive(Debug, PartialEq, Eq)]
    struct Mr {
        key: u32,
        addr: u64,
        len: u64,
    }

    impl Registrar for Fake {
        type Handle = Mr;
        type Error = String;
        fn register(&mut self, addr: u64, len: u64) -> Result<Mr, String> {
            let mut l = self.0.borrow_mut();
            l.registers += 1;
            if l.fail_next > 0 {
                l.fail_next -= 1;
                return Err("ENOMEM (fake)".into());
            }
            let live: u64 = l.live.values().map(|(_, n)| n).sum();
            if let Some(cap) = l.fail_above_bytes
                && live + len > cap
            {
                return Err(format!("ENOMEM: {live} + {len} > {cap} (fake)"));
            }
            l.next_key += 1;
            let key = l.next_key;
            l.live.insert(key, (addr, len));
            Ok(Mr { key, addr, len })
        }
        fn deregister(&mut self, h: Mr) {
            let mut l = self.0.borrow_mut();
            l.deregisters += 1;
            assert!(l.live.remove(&h.key).is_some(), "double deregister");
        }
    }

    fn cache(max_idle: usize, max_bytes: u64) -> (RegCache<Fake>, Fake) {
        let f = Fake::default();
        let c = RegCache::new(
            f.clone(),
            RegCacheConfig {
                max_idle_entries: max_idle,
                max_bytes,
                page_bytes: 4096,
            },
        );
        (c, f)
    }

    #[test]
    fn second_use_hits_and_ranges_are_page_aligned() {
        let (mut c, f) = cache(8, 1 << 30);
        let l = c.acquire(0x10_0010, 100, 7).unwrap();
        assert_eq!((l.region_addr, l.region_len), (0x10_0000, 4096));
        let key = c.handle(&l).key;
        c.release(l);
        // A sub-range of the same pages, same buffer: same registration.
        let l = c.acquire(0x10_0800, 200, 7).unwrap();
        assert_eq!(c.handle(&l).key, key);
        c.release(l);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.evictions), (1, 1, 0));
        assert_eq!((s.entries, s.bytes), (1, 4096));
        assert_eq!(f.0.borrow().registers, 1);
        // Crossing a page boundary needs two pages.
        let l = c.acquire(0x20_0ff0, 32, 8).unwrap();
        assert_eq!((l.region_addr, l.region_len), (0x20_0000, 8192));
        c.release(l);
        assert_eq!(c.stats().misses, 2);
    }

    #[test]
    fn freed_and_reallocated_at_the_same_address_never_uses_a_stale_key() {
        let (mut c, f) = cache(8, 1 << 30);
        let a = c.acquire(0x40_0000, 1 << 20, 100).unwrap();
        let old = c.handle(&a).key;
        c.release(a);
        // The buffer is freed and another allocation lands at the same address with a
        // new buffer id: the old key must not come back.
        let b = c.acquire(0x40_0000, 1 << 20, 101).unwrap();
        let new = c.handle(&b).key;
        assert_ne!(new, old);
        assert!(
            !f.0.borrow().live.contains_key(&old),
            "stale MR still registered"
        );
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.invalidations), (0, 2, 1));
        assert_eq!(s.entries, 1);
        c.release(b);
        // And the same id again hits the new registration.
        let b2 = c.acquire(0x40_0000, 4096, 101).unwrap();
        assert_eq!(c.handle(&b2).key, new);
        c.release(b2);
    }

    #[test]
    fn stale_entry_in_flight_is_kept_until_released_and_never_reused() {
        let (mut c, f) = cache(8, 1 << 30);
        let a = c.acquire(0x40_0000, 8192, 1).unwrap();
        let old = c.handle(&a).key;
        let b = c.acquire(0x40_0000, 8192, 2).unwrap();
        assert_ne!(c.handle(&b).key, old);
        // The old registration is still live: an operation uses it.
        assert!(f.0.borrow().live.contains_key(&old));
        // A third lookup of the old id must not find the stale entry either.
        let a2 = c.acquire(0x40_0000, 8192, 1).unwrap();
        assert_ne!(c.handle(&a2).key, old);
        c.release(a);
        assert!(
            !f.0.borrow().live.contains_key(&old),
            "stale MR not dropped"
        );
        c.release(b);
        c.release(a2);
        assert_eq!(c.stats().entries, 1);
    }

    #[test]
    fn partial_overlap_with_another_buffer_id_is_invalidated() {
        let (mut c, f) = cache(8, 1 << 30);
        let a = c.acquire(0x10_0000, 3 * 4096, 1).unwrap();
        c.release(a);
        let b = c.acquire(0x10_2000, 2 * 4096, 2).unwrap();
        c.release(b);
        assert_eq!(c.stats().invalidations, 1);
        assert_eq!(f.0.borrow().live.len(), 1);
    }

    #[test]
    fn in_use_entries_are_never_evicted_idle_ones_go_lru_first() {
        let (mut c, f) = cache(2, 1 << 30);
        let l1 = c.acquire(0x1000, 10, 1).unwrap();
        let l2 = c.acquire(0x10000, 10, 2).unwrap();
        let l3 = c.acquire(0x20000, 10, 3).unwrap();
        let l4 = c.acquire(0x30000, 10, 4).unwrap();
        // Four in flight: none evictable even though the idle bound is 2.
        assert_eq!(c.stats().entries, 4);
        let (k1, k2) = (c.handle(&l1).key, c.handle(&l2).key);
        c.release(l1); // LRU order: 1
        c.release(l2); // 1, 2
        c.release(l3); // 1, 2, 3 -> evict 1
        assert_eq!(c.stats().evictions, 1);
        assert!(!f.0.borrow().live.contains_key(&k1));
        assert!(f.0.borrow().live.contains_key(&k2));
        // Touch 2 so 3 becomes least recently used.
        let l2 = c.acquire(0x10000, 10, 2).unwrap();
        c.release(l2); // order 3, 2
        c.release(l4); // 3, 2, 4 -> evict 3
        let s = c.stats();
        assert_eq!((s.evictions, s.entries, s.hits), (2, 2, 1));
        let live: Vec<u64> = {
            let mut v: Vec<u64> = f.0.borrow().live.values().map(|(a, _)| *a).collect();
            v.sort();
            v
        };
        assert_eq!(live, vec![0x10000, 0x30000]);
    }

    #[test]
    fn byte_bound_evicts_idle_entries() {
        let (mut c, _f) = cache(100, 3 * 4096);
        for i in 0..5u64 {
            let l = c.acquire(0x100_0000 + i * 0x10000, 4096, i).unwrap();
            c.release(l);
            assert!(c.stats().bytes <= 3 * 4096, "bytes {}", c.stats().bytes);
        }
        let s = c.stats();
        assert_eq!((s.entries, s.evictions), (3, 2));
    }

    #[test]
    fn registration_failure_evicts_lru_and_retries_once() {
        let (mut c, f) = cache(100, 1 << 40);
        // The fake NIC can pin 3 pages.
        f.0.borrow_mut().fail_above_bytes = Some(3 * 4096);
        for i in 0..3u64 {
            let l = c.acquire(0x100_0000 + i * 0x10000, 4096, i).unwrap();
            c.release(l);
        }
        let first_lru = 0x100_0000;
        let l = c.acquire(0x200_0000, 4096, 9).unwrap();
        let s = c.stats();
        assert_eq!((s.retries, s.evictions, s.entries), (1, 1, 3));
        assert!(
            !f.0.borrow().live.values().any(|(a, _)| *a == first_lru),
            "the least recently used entry should have been evicted"
        );
        c.release(l);
        // Failing twice is an error naming the range, not a panic.
        f.0.borrow_mut().fail_next = 2;
        let e = c.acquire(0x300_0000, 10, 10).unwrap_err();
        assert_eq!(e.addr, 0x300_0000);
        assert!(e.reason.contains("ENOMEM"), "{e}");
        // Failing with nothing idle is an error at once (no retry).
        let leases: Vec<Lease> = {
            let ids: Vec<(u64, u64)> = vec![(0x100_0000 + 0x10000, 1), (0x100_0000 + 0x20000, 2)];
            ids.into_iter()
                .map(|(a, id)| c.acquire(a, 10, id).unwrap())
                .collect()
        };
        let l = c.acquire(0x200_0000, 10, 9).unwrap();
        f.0.borrow_mut().fail_next = 1;
        let before = f.0.borrow().registers;
        assert!(c.acquire(0x400_0000, 10, 11).is_err());
        assert_eq!(f.0.borrow().registers, before + 1);
        c.release(l);
        for l in leases {
            c.release(l);
        }
    }

    #[test]
    fn zero_idle_entries_means_no_caching() {
        let (mut c, f) = cache(0, 1 << 30);
        let l = c.acquire(0x1000, 10, 1).unwrap();
        c.release(l);
        assert!(f.0.borrow().live.is_empty());
        let l = c.acquire(0x1000, 10, 1).unwrap();
        c.release(l);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries), (0, 2, 0));
    }

    #[test]
    fn invalidate_buffer_and_drop_deregister_everything() {
        let (mut c, f) = cache(8, 1 << 30);
        let a = c.acquire(0x1000, 10, 1).unwrap();
        c.release(a);
        let b = c.acquire(0x9000, 10, 1).unwrap();
        let other = c.acquire(0x20000, 10, 2).unwrap();
        c.invalidate_buffer(1);
        // The idle one is gone at once, the one in flight on release.
        assert_eq!(f.0.borrow().live.len(), 2);
        c.release(b);
        assert_eq!(f.0.borrow().live.len(), 1);
        assert_eq!(c.stats().invalidations, 2);
        c.release(other);
        c.flush_idle();
        assert!(f.0.borrow().live.is_empty());
        let x = c.acquire(0x1000, 10, 3).unwrap();
        c.release(x);
        drop(c);
        let l = f.0.borrow();
        assert!(l.live.is_empty());
        assert_eq!(l.registers, l.deregisters);
    }

    #[test]
    fn clear_deregisters_entries_in_use_and_their_late_release_is_harmless() {
        let (mut c, f) = cache(8, 1 << 30);
        let a = c.acquire(0x1000, 10, 1).unwrap();
        let b = c.acquire(0x9000, 10, 2).unwrap();
        c.release(b);
        c.clear();
        assert!(f.0.borrow().live.is_empty());
        assert_eq!(c.stats().entries, 0);
        c.release(a);
        let l = f.0.borrow();
        assert_eq!(l.registers, l.deregisters);
    }

    #[test]
    fn env_config_is_parsed_and_bad_values_name_the_variable() {
        // Only this test touches these variables.
        unsafe {
            std::env::set_var("RANKWIRE_REGCACHE_MAX_ENTRIES", "12");
            std::env::set_var("RANKWIRE_REGCACHE_MAX_BYTES", "65536");
        }
        let c = RegCacheConfig::from_env().unwrap();
        assert_eq!((c.max_idle_entries, c.max_bytes), (12, 65536));
        unsafe { std::env::set_var("RANKWIRE_REGCACHE_MAX_BYTES", "lots") };
        let e = RegCacheConfig::from_env().unwrap_err();
        assert_eq!(e.var, "RANKWIRE_REGCACHE_MAX_BYTES");
        unsafe {
            std::env::remove_var("RANKWIRE_REGCACHE_MAX_ENTRIES");
            std::env::remove_var("RANKWIRE_REGCACHE_MAX_BYTES");
        }
    }
}
