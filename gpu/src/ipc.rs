//! CUDA IPC: export a device buffer to another process on the node, and the importer's
//! cache of opened mappings.
//!
//! Lifecycle:
//! 1. The owner calls [`ipc_export`] on a device buffer. It exports the *allocation*
//!    (`cuIpcGetMemHandle` on the allocation base) and records the buffer's offset and
//!    length inside it, the allocation's buffer id and length: an [`IpcExport`], sent
//!    to the peer in the rendezvous `Cts`/`Rts` frame ([`IpcExport::to_bytes`]).
//! 2. The peer calls [`IpcCache::acquire`] with the sender's pid and the descriptor. The
//!    cache maps the allocation once (`cuIpcOpenMemHandle_v2`, lazy peer access) and
//!    returns an [`IpcMapping`] whose [`addr`](IpcMapping::addr) is the buffer in the
//!    peer's address space. The entry's in-flight refcount is raised.
//! 3. When the copy completes, the peer calls [`IpcCache::release`].
//! 4. At finalize, [`IpcCache::close_all`].
//!
//! Staleness (B008): the owner may free the allocation and get the same address back
//! for a new one. Entries are keyed by (peer pid, allocation base) and carry the buffer
//! id; a descriptor with the same base but another buffer id finds a stale entry, which
//! is closed (or, while copies still use it, closed when its refcount drops to zero) and
//! the new handle is opened. Cached entries overlapping the new allocation's range are
//! stale too and go the same way. Entries with no copy in flight stay mapped in an LRU
//! bounded by entry count; when an open fails, one idle entry is evicted and the open
//! retried once.
//!
//! What cannot be exported (the caller stages through host memory instead):
//! managed memory ([`Unsupported::ManagedMemory`], B010), pool (`cuMemAllocAsync`) and
//! VMM memory ([`Unsupported::NotIpcCapable`]: `cuIpcGetMemHandle` returns
//! `CUDA_ERROR_INVALID_VALUE`), host memory and zero-length buffers.
//!
//! Standard: CUDA driver API `cuIpcGetMemHandle`, `cuIpcOpenMemHandle_v2`,
//! `cuIpcCloseMemHandle`. Design after openucx/ucx `src/uct/cuda/cuda_ipc/cuda_ipc_cache.h`.

use std::fmt;
use std::num::NonZeroUsize;

use lru::LruCache;

use crate::error::{GpuError, Unsupported};
use crate::pointer::{self, MemoryInfo, PtrKind};
use crate::release::{Release, release};
use crate::result;

/// An opaque CUDA IPC memory handle (`CUipcMemHandle`, 64 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcHandle(pub [u8; 64]);

impl IpcHandle {
    /// Lower-case hex, 128 characters.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(128);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        s
    }

    /// Parse [`to_hex`](IpcHandle::to_hex) output; `None` unless exactly 128 hex digits.
    pub fn from_hex(s: &str) -> Option<IpcHandle> {
        let s = s.as_bytes();
        if s.len() != 128 {
            return None;
        }
        let mut out = [0u8; 64];
        for (o, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
            *o = (hex_val(pair[0])? << 4) | hex_val(pair[1])?;
        }
        Some(IpcHandle(out))
    }
}

impl fmt::Debug for IpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.to_hex();
        write!(f, "IpcHandle({}…)", &hex[..16])
    }
}

/// What the owner of a device buffer sends a peer so it can map it (see module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpcExport {
    /// Handle of the whole allocation.
    pub handle: IpcHandle,
    /// Owner's device ordinal.
    pub device: i32,
    /// Allocation base in the owner's address space (the importer's cache key).
    pub base: u64,
    /// Allocation length in bytes.
    pub alloc_len: usize,
    /// The allocation's `CU_POINTER_ATTRIBUTE_BUFFER_ID` in the owner's process.
    pub buffer_id: u64,
    /// Offset of the buffer from `base`, in bytes.
    pub offset: u64,
    /// Length of the buffer in bytes.
    pub len: usize,
}

impl IpcExport {
    /// Size of [`to_bytes`](IpcExport::to_bytes) output.
    pub const ENCODED_LEN: usize = 64 + 4 + 8 + 8 + 8 + 8 + 8;

    /// Fixed-size little-endian encoding: handle, device, base, alloc_len, buffer_id,
    /// offset, len.
    pub fn to_bytes(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        out[..64].copy_from_slice(&self.handle.0);
        out[64..68].copy_from_slice(&self.device.to_le_bytes());
        let fields = [
            self.base,
            self.alloc_len as u64,
            self.buffer_id,
            self.offset,
            self.len as u64,
        ];
        for (i, v) in fields.iter().enumerate() {
            out[68 + 8 * i..76 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Decode [`to_bytes`](IpcExport::to_bytes) output. `None` if the length is wrong or
    /// the buffer does not lie inside the allocation (a malformed peer message).
    pub fn from_bytes(b: &[u8]) -> Option<IpcExport> {
        if b.len() != Self::ENCODED_LEN {
            return None;
        }
        let mut handle = [0u8; 64];
        handle.copy_from_slice(&b[..64]);
        let device = i32::from_le_bytes(b[64..68].try_into().ok()?);
        let field = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                b[68 + 8 * i..76 + 8 * i].try_into().ok()?,
            ))
        };
        let e = IpcExport {
            handle: IpcHandle(handle),
            device,
            base: field(0)?,
            alloc_len: usize::try_from(field(1)?).ok()?,
            buffer_id: field(2)?,
            offset: field(3)?,
            len: usize::try_from(field(4)?).ok()?,
        };
        e.is_consistent().then_some(e)
    }

    /// Whether `offset + len <= alloc_len` (no overflow).
    pub fn is_consistent(&self) -> bool {
        self.offset
            .checked_add(self.len as u64)
            .is_some_and(|end| end <= self.alloc_len as u64)
    }
}

/// Export the device buffer `[addr, addr + len)` for CUDA IPC.
///
/// Classifies the pointer (one `cuPointerGetAttributes`), then calls
/// `cuIpcGetMemHandle` on the allocation base with the buffer's device current.
///
/// # Errors
/// - [`GpuError::Unsupported`]: [`Unsupported::ZeroLength`] (never exported, B002),
///   [`Unsupported::ManagedMemory`] (B010), [`Unsupported::HostMemory`],
///   [`Unsupported::NotIpcCapable`] for pool/VMM memory. Stage instead.
/// - [`GpuError::OutsideAllocation`]: `len` runs past the allocation.
/// - [`GpuError::NotBuilt`], [`GpuError::NoDriver`], [`GpuError::Driver`].
pub fn ipc_export(addr: u64, len: usize) -> Result<IpcExport, GpuError> {
    if len == 0 {
        return Err(Unsupported::ZeroLength.into());
    }
    let info = pointer::classify_addr(addr, len)?;
    ipc_export_classified(addr, len, &info)
}

/// [`ipc_export`] for a buffer already classified (for example through a
/// [`PointerCache`](crate::PointerCache)); `info` must describe `addr`.
///
/// # Errors
/// As [`ipc_export`]; [`GpuError::OutsideAllocation`] if `info` does not contain the buffer.
pub fn ipc_export_classified(
    addr: u64,
    len: usize,
    info: &MemoryInfo,
) -> Result<IpcExport, GpuError> {
    if len == 0 {
        return Err(Unsupported::ZeroLength.into());
    }
    let ordinal = match info.kind {
        PtrKind::Device { ordinal } => ordinal,
        PtrKind::Managed { .. } => return Err(Unsupported::ManagedMemory.into()),
        PtrKind::Host | PtrKind::HostRegistered => return Err(Unsupported::HostMemory.into()),
    };
    if !info.contains(addr, len) {
        return Err(GpuError::OutsideAllocation {
            addr,
            len,
            base: info.base,
            alloc_len: info.len,
        });
    }
    result::bind_device(ordinal)?;
    let handle = match result::ipc_get_mem_handle(info.base) {
        Ok(h) => IpcHandle(h),
        // Verified on the H200 (driver 580): pool memory gives INVALID_VALUE here.
        Err(e) if e.driver_code() == Some("CUDA_ERROR_INVALID_VALUE") => {
            return Err(Unsupported::NotIpcCapable.into());
        }
        Err(e) => return Err(e),
    };
    Ok(IpcExport {
        handle,
        device: ordinal,
        base: info.base,
        alloc_len: info.len,
        buffer_id: info.buffer_id,
        offset: info.offset_of(addr),
        len,
    })
}

/// Maps and unmaps IPC handles for an [`IpcCache`]: the CUDA driver in production
/// ([`CudaIpcOpener`]), a fake or a fault-injecting wrapper in tests.
pub trait IpcOpener {
    /// Map the allocation behind `handle`; returns its base in this process.
    ///
    /// # Errors
    /// Whatever the driver reports (`cuIpcOpenMemHandle_v2`).
    fn open(&mut self, handle: &IpcHandle) -> Result<u64, GpuError>;

    /// Unmap a base returned by [`open`](IpcOpener::open). Called once per open, only
    /// when no operation uses the mapping.
    ///
    /// # Errors
    /// Whatever the driver reports (`cuIpcCloseMemHandle`).
    fn close(&mut self, mapped_base: u64) -> Result<(), GpuError>;
}

/// [`IpcOpener`] through the CUDA driver, mapping into one local device's primary
/// context with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
#[derive(Debug, Clone, Copy)]
pub struct CudaIpcOpener {
    device: i32,
}

impl CudaIpcOpener {
    /// Map into the primary context of local device `device`.
    pub fn new(device: i32) -> Self {
        CudaIpcOpener { device }
    }
}

impl IpcOpener for CudaIpcOpener {
    fn open(&mut self, handle: &IpcHandle) -> Result<u64, GpuError> {
        result::bind_device(self.device)?;
        result::ipc_open_mem_handle(&handle.0)
    }

    fn close(&mut self, mapped_base: u64) -> Result<(), GpuError> {
        result::bind_device(self.device)?;
        // SAFETY: the cache calls close once per successful open, only when the entry's
        // in-flight refcount is zero (or at close_all, when the caller has finished).
        // On the release thread once stream-ordered operations are in use: the close
        // waits for every stream of the device (crate::release).
        unsafe { release(Release::IpcMapping(mapped_base)) }
    }
}

/// Counters of an [`IpcCache`] (B008 wants the open-mapping count exported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IpcCacheStats {
    /// Handles opened (`cuIpcOpenMemHandle_v2` successes).
    pub opened: u64,
    /// Mappings closed.
    pub closed: u64,
    /// Acquires served by an existing mapping.
    pub hits: u64,
    /// Entries found stale (same base, other buffer id, or overlapping a new
    /// allocation) and closed or deferred.
    pub stale_evictions: u64,
    /// Idle entries closed to stay within the entry bound or to retry a failed open.
    pub lru_evictions: u64,
    /// Mappings open now (cached plus deferred).
    pub open_now: u64,
    /// Stale mappings waiting for their in-flight operations before closing.
    pub deferred: u64,
    /// Mappings with operations in flight now.
    pub in_flight: u64,
    /// Closes that failed (the mapping is forgotten either way).
    pub close_failures: u64,
}

/// A mapped peer buffer, returned by [`IpcCache::acquire`]; give it back with
/// [`IpcCache::release`] once the operation using it has completed.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "give the mapping back with IpcCache::release when the copy is done"]
pub struct IpcMapping {
    peer: u32,
    key_base: u64,
    id: u64,
    addr: u64,
    len: usize,
}

impl IpcMapping {
    /// The buffer's address in this process (mapped allocation base + offset).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The buffer's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (zero-length acquires map nothing).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

// One opened allocation. `id` is unique per open, so a release finds its own entry even
// after the key was reused by a newer allocation.
#[derive(Debug)]
struct IpcEntry {
    id: u64,
    buffer_id: u64,
    alloc_len: usize,
    mapped_base: u64,
    refcount: u32,
}

/// The importer's cache of opened CUDA IPC mappings, per peer process (see module doc).
///
/// Not thread-safe by itself (`&mut self`); the progress engine owns it.
#[derive(Debug)]
pub struct IpcCache<O: IpcOpener = CudaIpcOpener> {
    opener: O,
    // (peer pid, allocation base in the peer) -> entry, in recency order. Unbounded as a
    // map; the bound is enforced here, because entries in flight cannot be evicted.
    map: LruCache<(u32, u64), IpcEntry>,
    // Stale entries still in use; closed when their refcount reaches zero.
    deferred: Vec<IpcEntry>,
    max_entries: usize,
    next_id: u64,
    stats: IpcCacheStats,
    last_close_error: Option<GpuError>,
}

impl IpcCache<CudaIpcOpener> {
    /// A cache mapping into local device `device`, keeping at most `max_entries`
    /// idle mappings.
    pub fn new(device: i32, max_entries: NonZeroUsize) -> Self {
        Self::with_opener(CudaIpcOpener::new(device), max_entries)
    }
}

impl<O: IpcOpener> IpcCache<O> {
    /// A cache over `opener`, keeping at most `max_entries` idle mappings.
    pub fn with_opener(opener: O, max_entries: NonZeroUsize) -> Self {
        IpcCache {
            opener,
            map: LruCache::unbounded(),
            deferred: Vec::new(),
            max_entries: max_entries.get(),
            next_id: 1,
            stats: IpcCacheStats::default(),
            last_close_error: None,
        }
    }

    /// Map the buffer described by `export`, sent by process `peer`, and mark it in use.
    ///
    /// A zero-length buffer maps nothing and touches nothing (B002).
    ///
    /// # Errors
    /// - [`GpuError::OutsideAllocation`]: the descriptor's offset + len exceeds its
    ///   allocation (a malformed peer message).
    /// - The opener's error if the open fails even after evicting one idle entry (for
    ///   CUDA, [`GpuError::Driver`] from `cuIpcOpenMemHandle_v2`; a peer-access failure
    ///   there means: stage through host memory, B012).
    pub fn acquire(&mut self, peer: u32, export: &IpcExport) -> Result<IpcMapping, GpuError> {
        if export.len == 0 {
            return Ok(IpcMapping {
                peer,
                key_base: export.base,
                id: 0,
                addr: 0,
                len: 0,
            });
        }
        if !export.is_consistent() {
            return Err(GpuError::OutsideAllocation {
                addr: export.base.wrapping_add(export.offset),
                len: export.len,
                base: export.base,
                alloc_len: export.alloc_len,
            });
        }
        let key = (peer, export.base);
        if let Some(e) = self.map.get_mut(&key) {
            if e.buffer_id == export.buffer_id && e.alloc_len == export.alloc_len {
                e.refcount += 1;
                self.stats.hits += 1;
                let (id, mapped_base) = (e.id, e.mapped_base);
                return Ok(self.mapping(peer, export, id, mapped_base));
            }
            if let Some(stale) = self.map.pop(&key) {
                self.stats.stale_evictions += 1;
                self.retire(stale);
            }
        }
        self.retire_overlapping(peer, export.base, export.alloc_len);

        let mapped_base = match self.opener.open(&export.handle) {
            Ok(b) => b,
            Err(first) => {
                if self.evict_one_idle() {
                    self.opener.open(&export.handle)?
                } else {
                    return Err(first);
                }
            }
        };
        self.stats.opened += 1;
        let id = self.next_id;
        self.next_id += 1;
        self.map.push(
            key,
            IpcEntry {
                id,
                buffer_id: export.buffer_id,
                alloc_len: export.alloc_len,
                mapped_base,
                refcount: 1,
            },
        );
        while self.map.len() > self.max_entries {
            if !self.evict_one_idle() {
                break; // everything left is in flight; the bound applies to idle entries
            }
        }
        Ok(self.mapping(peer, export, id, mapped_base))
    }

    /// Give back a mapping from [`acquire`](IpcCache::acquire): its operation is done.
    /// A stale entry whose last operation this was is closed now.
    ///
    /// # Errors
    /// The opener's error if closing a deferred stale mapping fails (it is forgotten
    /// either way and counted in `close_failures`).
    pub fn release(&mut self, mapping: IpcMapping) -> Result<(), GpuError> {
        if mapping.id == 0 {
            return Ok(());
        }
        if let Some(e) = self.map.peek_mut(&(mapping.peer, mapping.key_base))
            && e.id == mapping.id
        {
            e.refcount = e.refcount.saturating_sub(1);
            return Ok(());
        }
        if let Some(pos) = self.deferred.iter().position(|e| e.id == mapping.id) {
            let e = &mut self.deferred[pos];
            e.refcount = e.refcount.saturating_sub(1);
            if e.refcount == 0 {
                let e = self.deferred.swap_remove(pos);
                return self.close_entry(e);
            }
        }
        // Not found: closed by close_all or close_peer already.
        Ok(())
    }

    /// Close every mapping of process `peer` (it exited or failed), in flight or not.
    ///
    /// # Errors
    /// The first close failure; every mapping is forgotten either way.
    pub fn close_peer(&mut self, peer: u32) -> Result<(), GpuError> {
        let keys: Vec<(u32, u64)> = self
            .map
            .iter()
            .filter(|((p, _), _)| *p == peer)
            .map(|(k, _)| *k)
            .collect();
        let mut first_err = None;
        for k in keys {
            if let Some(e) = self.map.pop(&k)
                && let Err(err) = self.close_entry(e)
            {
                first_err.get_or_insert(err);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Close every mapping (finalize). Mappings still in flight are closed too: the
    /// caller guarantees nothing uses them any more.
    ///
    /// # Errors
    /// The first close failure; every mapping is forgotten either way.
    pub fn close_all(&mut self) -> Result<(), GpuError> {
        let mut first_err = None;
        while let Some((_, e)) = self.map.pop_lru() {
            if let Err(err) = self.close_entry(e) {
                first_err.get_or_insert(err);
            }
        }
        for e in std::mem::take(&mut self.deferred) {
            if let Err(err) = self.close_entry(e) {
                first_err.get_or_insert(err);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The counters.
    pub fn stats(&self) -> IpcCacheStats {
        let in_flight =
            self.map.iter().filter(|(_, e)| e.refcount > 0).count() + self.deferred.len();
        IpcCacheStats {
            open_now: (self.map.len() + self.deferred.len()) as u64,
            deferred: self.deferred.len() as u64,
            in_flight: in_flight as u64,
            ..self.stats
        }
    }

    /// The last close failure seen during eviction (evictions cannot return it), taken.
    pub fn take_close_error(&mut self) -> Option<GpuError> {
        self.last_close_error.take()
    }

    /// The opener (for fault injection in tests).
    pub fn opener_mut(&mut self) -> &mut O {
        &mut self.opener
    }

    fn mapping(&self, peer: u32, export: &IpcExport, id: u64, mapped_base: u64) -> IpcMapping {
        IpcMapping {
            peer,
            key_base: export.base,
            id,
            addr: mapped_base.wrapping_add(export.offset),
            len: export.len,
        }
    }

    // Close an entry that left the map now, or defer it while operations use it.
    fn retire(&mut self, e: IpcEntry) {
        if e.refcount == 0 {
            if let Err(err) = self.close_entry(e) {
                self.last_close_error = Some(err);
            }
        } else {
            self.deferred.push(e);
        }
    }

    // Entries of `peer` whose allocation overlaps [base, base + len) belong to freed
    // allocations (the peer cannot have two live allocations overlapping).
    fn retire_overlapping(&mut self, peer: u32, base: u64, len: usize) {
        let end = base.saturating_add(len as u64);
        let stale: Vec<(u32, u64)> = self
            .map
            .iter()
            .filter(|&(&(p, b), e)| {
                p == peer && b != base && b < end && b.saturating_add(e.alloc_len as u64) > base
            })
            .map(|(k, _)| *k)
            .collect();
        for k in stale {
            if let Some(e) = self.map.pop(&k) {
                self.stats.stale_evictions += 1;
                self.retire(e);
            }
        }
    }

    // Close the least recently used idle entry. Returns whether one was found.
    fn evict_one_idle(&mut self) -> bool {
        let victim = self
            .map
            .iter()
            .rev()
            .find(|(_, e)| e.refcount == 0)
            .map(|(k, _)| *k);
        let Some(k) = victim else { return false };
        if let Some(e) = self.map.pop(&k) {
            self.stats.lru_evictions += 1;
            if let Err(err) = self.close_entry(e) {
                self.last_close_error = Some(err);
            }
        }
        true
    }

    fn close_entry(&mut self, e: IpcEntry) -> Result<(), GpuError> {
        match self.opener.close(e.mapped_base) {
            Ok(()) => {
                self.stats.closed += 1;
                Ok(())
            }
            Err(err) => {
                self.stats.close_failures += 1;
                Err(err)
            }
        }
    }
}

impl<O: IpcOpener> Drop for IpcCache<O> {
    fn drop(&mut self) {
        // Drop cannot return the error; call close_all() first to see it. The driver
        // unmaps whatever is left when the process exits.
        if let Err(e) = self.close_all() {
            self.last_close_error = Some(e);
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    // A fake driver: handles are allocation numbers; open returns a fresh local base.
    #[derive(Default)]
    struct FakeOpener {
        open: HashMap<u64, [u8; 64]>,
        next_base: u64,
        opens: u64,
        fail_next_open: bool,
    }

    impl IpcOpener for FakeOpener {
        fn open(&mut self, handle: &IpcHandle) -> Result<u64, GpuError> {
            if std::mem::take(&mut self.fail_next_open) {
                return Err(GpuError::Driver {
                    call: "cuIpcOpenMemHandle_v2",
                    code: "CUDA_ERROR_OUT_OF_MEMORY".into(),
                });
            }
            self.opens += 1;
            self.next_base += 0x1000_0000;
            self.open.insert(self.next_base, handle.0);
            Ok(self.next_base)
        }
        fn close(&mut self, mapped_base: u64) -> Result<(), GpuError> {
            match self.open.remove(&mapped_base) {
                Some(_) => Ok(()),
                None => Err(GpuError::Driver {
                    call: "cuIpcCloseMemHandle",
                    code: "CUDA_ERROR_INVALID_VALUE".into(),
                }),
            }
        }
    }

    fn export(
        tag: u8,
        base: u64,
        alloc_len: usize,
        buffer_id: u64,
        offset: u64,
        len: usize,
    ) -> IpcExport {
        IpcExport {
            handle: IpcHandle([tag; 64]),
            device: 0,
            base,
            alloc_len,
            buffer_id,
            offset,
            len,
        }
    }

    fn cache(cap: usize) -> IpcCache<FakeOpener> {
        IpcCache::with_opener(FakeOpener::default(), NonZeroUsize::new(cap).unwrap())
    }

    #[test]
    fn hex_roundtrip_and_rejects() {
        let mut h = [0u8; 64];
        for (i, b) in h.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37);
        }
        let h = IpcHandle(h);
        let s = h.to_hex();
        assert_eq!(s.len(), 128);
        assert_eq!(IpcHandle::from_hex(&s), Some(h));
        assert_eq!(IpcHandle::from_hex(&s.to_uppercase()), Some(h));
        assert_eq!(IpcHandle::from_hex(&s[1..]), None);
        assert_eq!(IpcHandle::from_hex(&s.replace('a', "g")), None);
    }

    #[test]
    fn export_bytes_roundtrip_and_validation() {
        let e = export(7, 0x7f00_0000_0000, 1 << 20, 917, 4096, 1000);
        let b = e.to_bytes();
        assert_eq!(IpcExport::from_bytes(&b), Some(e));
        assert_eq!(IpcExport::from_bytes(&b[1..]), None);
        let bad = export(7, 0x1000, 4096, 1, 4000, 200);
        assert_eq!(IpcExport::from_bytes(&bad.to_bytes()), None);
        let overflow = export(7, 0x1000, 4096, 1, u64::MAX, 2);
        assert!(!overflow.is_consistent());
    }

    #[test]
    fn hit_reuses_the_mapping() {
        let mut c = cache(4);
        let e = export(1, 0x7000_0000, 1 << 20, 10, 4096, 64);
        let m1 = c.acquire(42, &e).unwrap();
        let addr = m1.addr();
        c.release(m1).unwrap();
        let m2 = c.acquire(42, &e).unwrap();
        assert_eq!(m2.addr(), addr);
        assert_eq!(m2.len(), 64);
        c.release(m2).unwrap();
        let s = c.stats();
        assert_eq!((s.opened, s.hits, s.open_now, s.in_flight), (1, 1, 1, 0));
        assert_eq!(
            addr % 0x1000_0000,
            4096,
            "mapping address includes the offset"
        );
    }

    #[test]
    fn same_base_new_buffer_id_is_stale_and_reopened() {
        // B008: free + re-allocation at the same address in the sender.
        let mut c = cache(4);
        let old = export(1, 0x7000_0000, 1 << 20, 10, 0, 256);
        let m = c.acquire(42, &old).unwrap();
        c.release(m).unwrap();
        let new = export(2, 0x7000_0000, 1 << 20, 11, 0, 256);
        let m = c.acquire(42, &new).unwrap();
        c.release(m).unwrap();
        let s = c.stats();
        assert_eq!(
            (s.opened, s.closed, s.stale_evictions, s.open_now),
            (2, 1, 1, 1)
        );
        assert_eq!(c.opener_mut().open.values().next(), Some(&[2u8; 64]));
    }

    #[test]
    fn stale_entry_in_flight_is_closed_after_its_last_release() {
        let mut c = cache(4);
        let old = export(1, 0x7000_0000, 1 << 20, 10, 0, 256);
        let held = c.acquire(42, &old).unwrap();
        let new = export(2, 0x7000_0000, 1 << 20, 11, 0, 256);
        let m = c.acquire(42, &new).unwrap();
        assert_ne!(m.addr(), held.addr());
        let s = c.stats();
        assert_eq!(
            (s.open_now, s.deferred, s.closed, s.in_flight),
            (2, 1, 0, 2)
        );
        c.release(held).unwrap();
        let s = c.stats();
        assert_eq!(
            (s.open_now, s.deferred, s.closed, s.in_flight),
            (1, 0, 1, 1)
        );
        c.release(m).unwrap();
        assert_eq!(c.stats().in_flight, 0);
    }

    #[test]
    fn overlapping_new_allocation_retires_old_entries() {
        let mut c = cache(8);
        let a = export(1, 0x7000_0000, 0x10_0000, 10, 0, 16);
        let b = export(2, 0x7010_0000, 0x10_0000, 11, 0, 16);
        for e in [&a, &b] {
            let m = c.acquire(1, e).unwrap();
            c.release(m).unwrap();
        }
        // Another peer's entries never count as overlapping.
        let other = export(3, 0x7000_0000, 0x40_0000, 5, 0, 16);
        let m = c.acquire(2, &other).unwrap();
        c.release(m).unwrap();
        let big = export(4, 0x6ff0_0000, 0x40_0000, 12, 0, 16);
        let m = c.acquire(1, &big).unwrap();
        c.release(m).unwrap();
        let s = c.stats();
        assert_eq!(s.stale_evictions, 2);
        assert_eq!(s.open_now, 2);
    }

    #[test]
    fn idle_entries_bounded_in_flight_never_evicted() {
        let mut c = cache(2);
        let mut held = Vec::new();
        for i in 0..3u64 {
            let e = export(i as u8, 0x1000_0000 * (i + 1), 4096, i + 1, 0, 16);
            held.push(c.acquire(7, &e).unwrap());
        }
        // All three in flight: bound exceeded rather than unmapping live buffers.
        assert_eq!(c.stats().open_now, 3);
        for m in held {
            c.release(m).unwrap();
        }
        let e = export(9, 0x9000_0000, 4096, 99, 0, 16);
        let m = c.acquire(7, &e).unwrap();
        c.release(m).unwrap();
        let s = c.stats();
        assert_eq!(s.open_now, 2);
        assert_eq!(s.lru_evictions, 2);
    }

    #[test]
    fn failed_open_evicts_one_idle_entry_and_retries() {
        let mut c = cache(8);
        let a = export(1, 0x1000_0000, 4096, 1, 0, 16);
        let m = c.acquire(7, &a).unwrap();
        c.release(m).unwrap();
        c.opener_mut().fail_next_open = true;
        let b = export(2, 0x2000_0000, 4096, 2, 0, 16);
        let m = c.acquire(7, &b).unwrap();
        c.release(m).unwrap();
        let s = c.stats();
        assert_eq!((s.lru_evictions, s.open_now, s.opened), (1, 1, 2));
        // With nothing idle to evict, the error comes back.
        c.opener_mut().fail_next_open = true;
        let held = c.acquire(7, &b).unwrap(); // hit, no open
        let d = export(3, 0x3000_0000, 4096, 3, 0, 16);
        c.close_all().unwrap();
        c.opener_mut().fail_next_open = true;
        assert!(c.acquire(7, &d).is_err());
        c.release(held).unwrap(); // after close_all: a no-op
    }

    #[test]
    fn close_all_and_close_peer() {
        let mut c = cache(8);
        for (peer, i) in [(1u32, 1u64), (1, 2), (2, 3)] {
            let e = export(i as u8, 0x1000_0000 * i, 4096, i, 0, 16);
            let m = c.acquire(peer, &e).unwrap();
            c.release(m).unwrap();
        }
        c.close_peer(1).unwrap();
        assert_eq!(c.stats().open_now, 1);
        c.close_all().unwrap();
        let s = c.stats();
        assert_eq!((s.open_now, s.closed, s.close_failures), (0, 3, 0));
        assert!(c.opener_mut().open.is_empty());
    }

    #[test]
    fn zero_length_and_malformed_descriptors() {
        let mut c = cache(2);
        let empty = export(1, 0, 0, 0, 0, 0);
        let m = c.acquire(3, &empty).unwrap();
        assert!(m.is_empty());
        c.release(m).unwrap();
        assert_eq!(c.opener_mut().opens, 0, "B002: nothing mapped");
        let bad = export(1, 0x1000, 4096, 1, 4090, 16);
        assert!(matches!(
            c.acquire(3, &bad),
            Err(GpuError::OutsideAllocation { .. })
        ));
        assert_eq!(c.stats(), IpcCacheStats::default());
    }

    #[test]
    fn export_refuses_zero_length_without_touching_anything() {
        assert_eq!(
            ipc_export(0, 0).unwrap_err(),
            GpuError::Unsupported(Unsupported::ZeroLength)
        );
        let managed = MemoryInfo {
            kind: PtrKind::Managed { ordinal: Some(0) },
            base: 0x1000,
            len: 4096,
            buffer_id: 3,
        };
        assert_eq!(
            ipc_export_classified(0x1000, 16, &managed).unwrap_err(),
            GpuError::Unsupported(Unsupported::ManagedMemory)
        );
        let host = MemoryInfo::host(0x1000, 16);
        assert_eq!(
            ipc_export_classified(0x1000, 16, &host).unwrap_err(),
            GpuError::Unsupported(Unsupported::HostMemory)
        );
    }
}
