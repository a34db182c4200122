//! Pointer detection: what kind of memory a buffer is, and which allocation it lies in.
//!
//! Every path that touches user memory asks this first (B009: a device pointer must
//! never reach a host `memcpy`). [`classify`] makes one `cuPointerGetAttributes` call
//! reading six attributes: memory type, device ordinal, buffer id, is-managed, range
//! start and range size. Memory CUDA does not know (plain `malloc`, stack, mmap) comes
//! back as `CUDA_ERROR_INVALID_VALUE` or memory type 0, both meaning [`PtrKind::Host`].
//!
//! [`PointerCache`] avoids the six-attribute call on repeated buffers: it keeps the
//! [`MemoryInfo`] of recently seen CUDA allocations, keyed by allocation range, and
//! revalidates each hit by re-reading only the buffer id (one attribute). The buffer id
//! is unique for the lifetime of the process, so a free followed by a new allocation
//! at the same address is seen as a different allocation and never served stale.
//!
//! Zero-length buffers are never queried: Rust hands out dangling non-null pointers for
//! empty slices, and MPI allows null buffers of length zero (B002).
//!
//! Standard: CUDA driver API `cuPointerGetAttributes`, `cuPointerGetAttribute`
//! (`CU_POINTER_ATTRIBUTE_*`).

use std::collections::BTreeMap;
use std::num::NonZeroUsize;

use lru::LruCache;

use crate::error::{GpuError, Unsupported};
use crate::result::{self, MEMTYPE_ARRAY, MEMTYPE_DEVICE, MEMTYPE_HOST, MEMTYPE_UNIFIED};

/// The kind of memory a pointer refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PtrKind {
    /// Memory CUDA does not know: pageable host memory (heap, stack, mmap).
    Host,
    /// Device memory (`cuMemAlloc`, pool `cuMemAllocAsync`, VMM) of one GPU.
    Device {
        /// CUDA device ordinal, as seen by this process.
        ordinal: i32,
    },
    /// Managed (unified) memory (`cuMemAllocManaged`); host and device can touch it.
    Managed {
        /// Device ordinal the allocation is associated with, when the driver says.
        ordinal: Option<i32>,
    },
    /// Host memory pinned or registered with CUDA (`cuMemHostAlloc`,
    /// `cuMemHostRegister`).
    HostRegistered,
}

impl PtrKind {
    /// Whether a plain host `memcpy` may read and write this memory.
    pub fn is_host_accessible(&self) -> bool {
        matches!(
            self,
            PtrKind::Host | PtrKind::HostRegistered | PtrKind::Managed { .. }
        )
    }

    /// Whether this is device memory (never touch it from the host).
    pub fn is_device(&self) -> bool {
        matches!(self, PtrKind::Device { .. })
    }
}

/// What [`classify`] found out about a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    /// The kind of memory.
    pub kind: PtrKind,
    /// Start of the allocation containing the buffer (`CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`).
    /// For [`PtrKind::Host`] memory, the buffer's own start.
    pub base: u64,
    /// Length of that allocation in bytes (`CU_POINTER_ATTRIBUTE_RANGE_SIZE`).
    /// For [`PtrKind::Host`] memory, the buffer's own length.
    pub len: usize,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`: unique per allocation for the process lifetime;
    /// 0 for host memory CUDA does not know.
    pub buffer_id: u64,
}

impl MemoryInfo {
    /// Plain host memory `[addr, addr + len)`.
    pub fn host(addr: u64, len: usize) -> Self {
        MemoryInfo {
            kind: PtrKind::Host,
            base: addr,
            len,
            buffer_id: 0,
        }
    }

    /// Offset in bytes of `addr` from the allocation start (saturating at 0).
    pub fn offset_of(&self, addr: u64) -> u64 {
        addr.saturating_sub(self.base)
    }

    /// Whether `[addr, addr + len)` lies inside this allocation.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        let end = self.base.checked_add(self.len as u64);
        let buf_end = addr.checked_add(len as u64);
        match (end, buf_end) {
            (Some(end), Some(buf_end)) => addr >= self.base && buf_end <= end,
            _ => false,
        }
    }
}

/// Classify the buffer `[ptr, ptr + len)`.
///
/// One `cuPointerGetAttributes` call. A zero-length buffer is not queried and comes back
/// as [`PtrKind::Host`] with `base = ptr`, `len = 0`, in every build (B002).
///
/// # Errors
/// - [`GpuError::NotBuilt`] / [`GpuError::NoDriver`]: no GPU support here (len > 0);
///   a runtime without GPU support treats the buffer as host memory.
/// - [`GpuError::OutsideAllocation`]: the buffer starts in a CUDA allocation but runs
///   past its end.
/// - [`GpuError::Unsupported`] with [`Unsupported::CudaArray`] for CUDA arrays.
/// - [`GpuError::Driver`] for any other driver failure.
pub fn classify(ptr: *const u8, len: usize) -> Result<MemoryInfo, GpuError> {
    classify_addr(ptr as u64, len)
}

/// [`classify`] for an address given as an integer (a `CUdeviceptr`).
///
/// # Errors
/// As [`classify`].
pub fn classify_addr(addr: u64, len: usize) -> Result<MemoryInfo, GpuError> {
    if len == 0 {
        return Ok(MemoryInfo::host(addr, 0));
    }
    let attrs = match with_context_retry(|| result::pointer_attributes(addr)) {
        Ok(a) => a,
        Err(e) if e.driver_code() == Some("CUDA_ERROR_INVALID_VALUE") => {
            return Ok(MemoryInfo::host(addr, len));
        }
        Err(e) => return Err(e),
    };
    from_attrs(addr, len, &attrs)
}

/// The buffer id (`CU_POINTER_ATTRIBUTE_BUFFER_ID`) of the allocation containing
/// `addr`, or 0 for memory CUDA does not know. One attribute read.
///
/// # Errors
/// [`GpuError::NotBuilt`], [`GpuError::NoDriver`], or [`GpuError::Driver`] for
/// failures other than `CUDA_ERROR_INVALID_VALUE` (which means "not CUDA memory").
pub fn buffer_id(addr: u64) -> Result<u64, GpuError> {
    match with_context_retry(|| result::pointer_buffer_id(addr)) {
        Ok(id) => Ok(id),
        Err(e) if e.driver_code() == Some("CUDA_ERROR_INVALID_VALUE") => Ok(0),
        Err(e) => Err(e),
    }
}

/// How many pointer-attribute driver calls this process has made (six-attribute
/// classifications and one-attribute buffer-id reads together). For tests and
/// diagnostics.
pub fn pointer_queries() -> u64 {
    result::pointer_queries()
}

/// The source of truth behind a [`PointerCache`]: the CUDA driver in production
/// ([`CudaPointerQuery`]), a fake in tests.
pub trait PointerQuery {
    /// Full classification of a non-empty buffer, as [`classify_addr`].
    ///
    /// # Errors
    /// As [`classify_addr`].
    fn classify(&mut self, addr: u64, len: usize) -> Result<MemoryInfo, GpuError>;

    /// Current buffer id of the allocation containing `addr` (0: not CUDA memory),
    /// as [`buffer_id`].
    ///
    /// # Errors
    /// As [`buffer_id`].
    fn buffer_id(&mut self, addr: u64) -> Result<u64, GpuError>;
}

/// [`PointerQuery`] through the CUDA driver.
#[derive(Debug, Clone, Copy, Default)]
pub struct CudaPointerQuery;

impl PointerQuery for CudaPointerQuery {
    fn classify(&mut self, addr: u64, len: usize) -> Result<MemoryInfo, GpuError> {
        classify_addr(addr, len)
    }

    fn buffer_id(&mut self, addr: u64) -> Result<u64, GpuError> {
        buffer_id(addr)
    }
}

/// Counters of a [`PointerCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PointerCacheStats {
    /// Lookups answered from the cache after the buffer id matched.
    pub hits: u64,
    /// Lookups that needed a full classification (including host memory, never cached).
    pub misses: u64,
    /// Entries dropped because the buffer id changed or a new allocation overlapped
    /// them (the allocation was freed and the address reused).
    pub stale: u64,
    /// Entries dropped to stay within the entry bound.
    pub evictions: u64,
    /// Zero-length lookups, answered without touching the pointer.
    pub zero_length: u64,
}

/// A bounded cache of [`MemoryInfo`] for CUDA allocations, revalidated by buffer id.
///
/// Contract: call [`classify`](PointerCache::classify) wherever [`classify`] would be
/// called. A hit costs one buffer-id read instead of the six-attribute call; a changed
/// buffer id (free + re-allocation at the same address) drops the entry and classifies
/// again, so a stale answer is never returned. Host memory CUDA does not know is never
/// cached (its classification costs the same single call). Entries never overlap: a new
/// allocation overlapping cached ones replaces them.
///
/// ```
/// use std::num::NonZeroUsize;
/// let mut cache = rankwire_gpu::PointerCache::new(NonZeroUsize::new(256).unwrap());
/// let empty: &[u8] = &[];
/// // Zero-length buffers never touch the driver, with or without a GPU.
/// let info = cache.classify(empty.as_ptr() as u64, 0).unwrap();
/// assert_eq!(info.kind, rankwire_gpu::PtrKind::Host);
/// ```
#[derive(Debug)]
pub struct PointerCache<Q: PointerQuery = CudaPointerQuery> {
    query: Q,
    // Recency order and the cached info, keyed by allocation base.
    lru: LruCache<u64, MemoryInfo>,
    // base -> end, for finding the range containing an address. Same keys as `lru`.
    ranges: BTreeMap<u64, u64>,
    stats: PointerCacheStats,
}

impl PointerCache<CudaPointerQuery> {
    /// A cache of at most `max_entries` allocations, backed by the CUDA driver.
    pub fn new(max_entries: NonZeroUsize) -> Self {
        Self::with_query(CudaPointerQuery, max_entries)
    }
}

impl<Q: PointerQuery> PointerCache<Q> {
    /// A cache of at most `max_entries` allocations, backed by `query`.
    pub fn with_query(query: Q, max_entries: NonZeroUsize) -> Self {
        PointerCache {
            query,
            lru: LruCache::new(max_entries),
            ranges: BTreeMap::new(),
            stats: PointerCacheStats::default(),
        }
    }

    /// Classify `[addr, addr + len)`; zero-length buffers come back as host memory
    /// without a driver call.
    ///
    /// # Errors
    /// As [`classify_addr`].
    pub fn classify(&mut self, addr: u64, len: usize) -> Result<MemoryInfo, GpuError> {
        self.classify_or(addr, len, PtrKind::Host)
    }

    /// Classify `[addr, addr + len)`; a zero-length buffer is not queried and comes back
    /// with `zero_len_kind` (the kind the caller declared for it), `base = addr`, `len = 0`.
    ///
    /// # Errors
    /// As [`classify_addr`].
    pub fn classify_or(
        &mut self,
        addr: u64,
        len: usize,
        zero_len_kind: PtrKind,
    ) -> Result<MemoryInfo, GpuError> {
        if len == 0 {
            self.stats.zero_length += 1;
            return Ok(MemoryInfo {
                kind: zero_len_kind,
                base: addr,
                len: 0,
                buffer_id: 0,
            });
        }
        if let Some((base, end)) = self.range_containing(addr) {
            match self.lru.get(&base).copied() {
                Some(cached) => {
                    let id = self.query.buffer_id(addr)?;
                    let fits = addr.checked_add(len as u64).is_some_and(|e| e <= end);
                    if id != 0 && id == cached.buffer_id {
                        if fits {
                            self.stats.hits += 1;
                            return Ok(cached);
                        }
                        // Same allocation but the buffer runs past it: the full query
                        // below reports OutsideAllocation with the driver's numbers.
                    } else {
                        self.stats.stale += 1;
                        self.remove(base);
                    }
                }
                // Unreachable while `lru` and `ranges` share keys; heal by dropping it.
                None => {
                    self.ranges.remove(&base);
                }
            }
        }
        self.stats.misses += 1;
        let info = self.query.classify(addr, len)?;
        if info.kind != PtrKind::Host && info.len > 0 {
            self.insert(info);
        }
        Ok(info)
    }

    /// Drop the entry containing `addr`, if any (for a free hook). Returns whether one
    /// was dropped.
    pub fn invalidate(&mut self, addr: u64) -> bool {
        match self.range_containing(addr) {
            Some((base, _)) => {
                self.remove(base);
                true
            }
            None => false,
        }
    }

    /// Drop every entry.
    pub fn clear(&mut self) {
        self.lru.clear();
        self.ranges.clear();
    }

    /// Number of cached allocations.
    pub fn len(&self) -> usize {
        self.lru.len()
    }

    /// Whether no allocation is cached.
    pub fn is_empty(&self) -> bool {
        self.lru.is_empty()
    }

    /// The counters.
    pub fn stats(&self) -> PointerCacheStats {
        self.stats
    }

    fn range_containing(&self, addr: u64) -> Option<(u64, u64)> {
        let (&base, &end) = self.ranges.range(..=addr).next_back()?;
        (addr < end).then_some((base, end))
    }

    fn remove(&mut self, base: u64) {
        self.lru.pop(&base);
        self.ranges.remove(&base);
    }

    fn insert(&mut self, info: MemoryInfo) {
        let end = info.base.saturating_add(info.len as u64);
        // Ranges are disjoint and sorted, so their ends increase with their bases: walk
        // back from the last range starting below `end` while ranges still reach past
        // `info.base`. Each overlapped range belongs to a freed allocation.
        let overlapped: Vec<u64> = self
            .ranges
            .range(..end)
            .rev()
            .take_while(|&(_, &e)| e > info.base)
            .map(|(&b, _)| b)
            .collect();
        for b in overlapped {
            self.stats.stale += 1;
            self.remove(b);
        }
        if let Some((evicted, _)) = self.lru.push(info.base, info)
            && evicted != info.base
        {
            self.ranges.remove(&evicted);
            self.stats.evictions += 1;
        }
        self.ranges.insert(info.base, end);
    }
}

// Pointer queries normally need no current context (unified addressing identifies the
// allocation); should a driver answer CUDA_ERROR_INVALID_CONTEXT anyway, make device 0's
// primary context current and ask once more rather than guess "host" (B009).
fn with_context_retry<T>(mut query: impl FnMut() -> Result<T, GpuError>) -> Result<T, GpuError> {
    match query() {
        Err(e) if e.driver_code() == Some("CUDA_ERROR_INVALID_CONTEXT") => {
            result::ensure_some_context()?;
            query()
        }
        other => other,
    }
}

// Turn decoded attributes into a MemoryInfo. Managed is checked first: depending on the
// driver, managed memory reports memory type DEVICE or UNIFIED with IS_MANAGED set.
fn from_attrs(addr: u64, len: usize, a: &result::PtrAttrs) -> Result<MemoryInfo, GpuError> {
    let kind = if a.is_managed || a.memory_type == MEMTYPE_UNIFIED {
        PtrKind::Managed {
            ordinal: (a.device_ordinal >= 0).then_some(a.device_ordinal),
        }
    } else {
        match a.memory_type {
            0 => return Ok(MemoryInfo::host(addr, len)),
            MEMTYPE_HOST => PtrKind::HostRegistered,
            MEMTYPE_DEVICE => PtrKind::Device {
                ordinal: a.device_ordinal,
            },
            MEMTYPE_ARRAY => return Err(Unsupported::CudaArray.into()),
            other => {
                return Err(GpuError::Driver {
                    call: "cuPointerGetAttributes",
                    code: format!("unknown CUmemorytype {other}"),
                });
            }
        }
    };
    let (base, alloc_len) = if a.range_start != 0 && a.range_size != 0 {
        (a.range_start, a.range_size)
    } else {
        // The driver did not report a range (seen for some registered host memory):
        // the buffer is all we know.
        (addr, len)
    };
    let info = MemoryInfo {
        kind,
        base,
        len: alloc_len,
        buffer_id: a.buffer_id,
    };
    if !info.contains(addr, len) {
        return Err(GpuError::OutsideAllocation {
            addr,
            len,
            base,
            alloc_len,
        });
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::PtrAttrs;

    // A fake driver: a list of live allocations (base, len, kind, buffer id), with
    // counters of the calls made.
    #[derive(Default)]
    struct FakeQuery {
        allocs: Vec<MemoryInfo>,
        full: u64,
        id_reads: u64,
        next_id: u64,
    }

    impl FakeQuery {
        fn alloc(&mut self, base: u64, len: usize) -> u64 {
            self.next_id += 1;
            self.allocs.push(MemoryInfo {
                kind: PtrKind::Device { ordinal: 0 },
                base,
                len,
                buffer_id: self.next_id,
            });
            self.next_id
        }
        fn free(&mut self, base: u64) {
            self.allocs.retain(|a| a.base != base);
        }
        fn find(&self, addr: u64) -> Option<MemoryInfo> {
            self.allocs.iter().copied().find(|a| a.contains(addr, 1))
        }
    }

    impl PointerQuery for FakeQuery {
        fn classify(&mut self, addr: u64, len: usize) -> Result<MemoryInfo, GpuError> {
            self.full += 1;
            match self.find(addr) {
                Some(a) if a.contains(addr, len) => Ok(a),
                Some(a) => Err(GpuError::OutsideAllocation {
                    addr,
                    len,
                    base: a.base,
                    alloc_len: a.len,
                }),
                None => Ok(MemoryInfo::host(addr, len)),
            }
        }
        fn buffer_id(&mut self, addr: u64) -> Result<u64, GpuError> {
            self.id_reads += 1;
            Ok(self.find(addr).map_or(0, |a| a.buffer_id))
        }
    }

    fn cache(cap: usize) -> PointerCache<FakeQuery> {
        PointerCache::with_query(FakeQuery::default(), NonZeroUsize::new(cap).unwrap())
    }

    #[test]
    fn hit_is_revalidated_with_one_buffer_id_read() {
        let mut c = cache(8);
        let id = c.query.alloc(0x10_0000, 0x1000);
        let a = c.classify(0x10_0010, 16).unwrap();
        assert_eq!(a.buffer_id, id);
        assert_eq!((a.base, a.len), (0x10_0000, 0x1000));
        let b = c.classify(0x10_0800, 0x800).unwrap();
        assert_eq!(a, b);
        assert_eq!(c.query.full, 1);
        assert_eq!(c.query.id_reads, 1);
        assert_eq!(c.stats().hits, 1);
        assert_eq!(c.stats().misses, 1);
    }

    #[test]
    fn free_and_realloc_at_same_address_is_never_a_stale_hit() {
        // B007/B008 at the detection level.
        let mut c = cache(8);
        let id1 = c.query.alloc(0x20_0000, 0x1000);
        assert_eq!(c.classify(0x20_0000, 64).unwrap().buffer_id, id1);
        c.query.free(0x20_0000);
        let id2 = c.query.alloc(0x20_0000, 0x4000);
        let info = c.classify(0x20_0000, 0x3000).unwrap();
        assert_eq!(info.buffer_id, id2);
        assert_ne!(id1, id2);
        assert_eq!(info.len, 0x4000);
        assert_eq!(c.stats().stale, 1);
        assert_eq!(c.stats().hits, 0);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn freed_allocation_becomes_host_and_is_dropped() {
        let mut c = cache(8);
        c.query.alloc(0x30_0000, 0x1000);
        c.classify(0x30_0000, 1).unwrap();
        c.query.free(0x30_0000);
        let info = c.classify(0x30_0000, 1).unwrap();
        assert_eq!(info.kind, PtrKind::Host);
        assert!(c.is_empty());
        assert_eq!(c.stats().stale, 1);
    }

    #[test]
    fn overlapping_new_allocation_replaces_old_entries() {
        let mut c = cache(8);
        c.query.alloc(0x40_0000, 0x1000);
        c.query.alloc(0x40_1000, 0x1000);
        c.classify(0x40_0000, 1).unwrap();
        c.classify(0x40_1000, 1).unwrap();
        assert_eq!(c.len(), 2);
        c.query.free(0x40_0000);
        c.query.free(0x40_1000);
        c.query.alloc(0x40_0800, 0x2000);
        let info = c.classify(0x40_2000, 4).unwrap();
        assert_eq!(info.base, 0x40_0800);
        assert_eq!(c.len(), 1, "both overlapped entries must go");
    }

    #[test]
    fn bounded_by_entry_count() {
        let mut c = cache(2);
        for i in 0..5u64 {
            c.query.alloc(0x100_0000 * (i + 1), 0x1000);
            c.classify(0x100_0000 * (i + 1), 8).unwrap();
        }
        assert_eq!(c.len(), 2);
        assert_eq!(c.stats().evictions, 3);
        // The evicted ones are re-classified correctly.
        assert_eq!(c.classify(0x100_0000, 8).unwrap().buffer_id, 1);
    }

    #[test]
    fn host_memory_is_never_cached() {
        let mut c = cache(4);
        let v = [0u8; 64];
        for _ in 0..3 {
            assert_eq!(
                c.classify(v.as_ptr() as u64, 64).unwrap().kind,
                PtrKind::Host
            );
        }
        assert!(c.is_empty());
        assert_eq!(c.query.full, 3);
    }

    #[test]
    fn zero_length_never_touches_the_query() {
        // B002: dangling and null pointers of length zero.
        let mut c = cache(4);
        let empty: &[u8] = &[];
        let a = c.classify(empty.as_ptr() as u64, 0).unwrap();
        assert_eq!(a.kind, PtrKind::Host);
        let b = c.classify_or(0, 0, PtrKind::Device { ordinal: 0 }).unwrap();
        assert_eq!(b.kind, PtrKind::Device { ordinal: 0 });
        assert_eq!((c.query.full, c.query.id_reads), (0, 0));
        assert_eq!(c.stats().zero_length, 2);
    }

    #[test]
    fn buffer_past_allocation_end_is_an_error_even_on_hit() {
        let mut c = cache(4);
        c.query.alloc(0x50_0000, 0x1000);
        c.classify(0x50_0000, 8).unwrap();
        let e = c.classify(0x50_0f00, 0x200).unwrap_err();
        assert!(matches!(
            e,
            GpuError::OutsideAllocation {
                alloc_len: 0x1000,
                ..
            }
        ));
    }

    #[test]
    fn attrs_decoding() {
        let dev = PtrAttrs {
            memory_type: MEMTYPE_DEVICE,
            device_ordinal: 1,
            buffer_id: 917,
            is_managed: false,
            range_start: 0x7000_0000,
            range_size: 1 << 20,
        };
        let info = from_attrs(0x7000_0100, 256, &dev).unwrap();
        assert_eq!(info.kind, PtrKind::Device { ordinal: 1 });
        assert_eq!(
            (info.base, info.len, info.buffer_id),
            (0x7000_0000, 1 << 20, 917)
        );
        assert_eq!(info.offset_of(0x7000_0100), 0x100);

        let managed = PtrAttrs {
            is_managed: true,
            ..dev
        };
        assert_eq!(
            from_attrs(0x7000_0000, 1, &managed).unwrap().kind,
            PtrKind::Managed { ordinal: Some(1) }
        );
        let unified = PtrAttrs {
            memory_type: MEMTYPE_UNIFIED,
            device_ordinal: -1,
            ..dev
        };
        assert_eq!(
            from_attrs(0x7000_0000, 1, &unified).unwrap().kind,
            PtrKind::Managed { ordinal: None }
        );
        let host = PtrAttrs::default();
        assert_eq!(
            from_attrs(0x1234, 5, &host).unwrap(),
            MemoryInfo::host(0x1234, 5)
        );
        let pinned = PtrAttrs {
            memory_type: MEMTYPE_HOST,
            range_start: 0,
            range_size: 0,
            ..dev
        };
        let p = from_attrs(0x9000, 64, &pinned).unwrap();
        assert_eq!(
            (p.kind, p.base, p.len),
            (PtrKind::HostRegistered, 0x9000, 64)
        );
        let past = from_attrs(0x7000_0000 + (1 << 20) - 4, 8, &dev).unwrap_err();
        assert!(matches!(past, GpuError::OutsideAllocation { .. }));
        let array = PtrAttrs {
            memory_type: MEMTYPE_ARRAY,
            ..dev
        };
        assert_eq!(
            from_attrs(0x7000_0000, 1, &array).unwrap_err(),
            GpuError::Unsupported(Unsupported::CudaArray)
        );
    }

    #[test]
    fn classify_without_gpu_reports_why() {
        let v = [1u8; 32];
        // Zero length never needs the driver.
        assert_eq!(
            classify(v.as_ptr(), 0).unwrap(),
            MemoryInfo::host(v.as_ptr() as u64, 0)
        );
        match classify(v.as_ptr(), v.len()) {
            Ok(info) => assert_eq!(info.kind, PtrKind::Host, "stack memory is host memory"),
            Err(e) if e.is_no_gpu() => println!("skipped: classify on a GPU: {e}"),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
}
