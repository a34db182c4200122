//! POSIX shared-memory segments: one per rank, holding its inbound rings.
//!
//! # Layout (byte offsets; all fields little-endian, accessed only through atomics)
//! ```text
//! Header (first `rings_offset` bytes, a multiple of 4096):
//!     0  magic        u64  b"RWSHMv02", stored last (Release) once the header is complete
//!     8  version      u32  3 (ring records in 32-byte slots, short and long envelopes,
//!                            ring.rs; 2: 64-byte slots, one envelope)
//!    12  owner_rank   u32  world rank of the receiver that owns the segment
//!    16  owner_pid    u32  its process id (informational; liveness uses `shm-pid-<rank>`)
//!    20  slot_count   u32  number of inbound rings = number of the owner's local peers
//!    24  ring_bytes   u64  data bytes of every ring (a power of two)
//!    32  rings_offset u64  offset of ring 0
//!    40  ring_stride  u64  offset between rings (CTRL_BYTES + ring_bytes, rounded up to 128)
//!    64  bell         u32  futex doorbell word (senders bump it; own cache line)
//!   128  sleeping     u32  1 while the owner is (about to be) asleep on `bell` (own line)
//!   192  slot table   u32 × slot_count: the sender rank of each ring, ascending
//! Ring i at rings_offset + i × ring_stride (layout in ring.rs).
//! ```
//! Slot `i` is the ring written by the owner's `i`-th local peer in ascending rank order
//! (the owner itself excluded). Senders do not recompute this: they look their rank up
//! in the slot table, so both sides agree on the index by construction.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::ring::{CTRL_BYTES, RingPtr};
use super::sys;

/// `b"RWSHMv02"` as a little-endian u64.
const MAGIC: u64 = u64::from_le_bytes(*b"RWSHMv02");
const VERSION: u32 = 3;
const PAGE: usize = 4096;
/// Rings start on multiples of this many bytes (two cache lines: a ring's control block
/// never shares a line pair with the previous ring's data).
const RING_ALIGN: usize = 128;
/// Most inbound rings one segment may declare (bounds what a peer's header can claim).
pub(super) const MAX_SLOTS: usize = 4096;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_OWNER_RANK: usize = 12;
const OFF_OWNER_PID: usize = 16;
const OFF_SLOTS: usize = 20;
const OFF_RING_BYTES: usize = 24;
const OFF_RINGS_OFFSET: usize = 32;
const OFF_RING_STRIDE: usize = 40;
const OFF_BELL: usize = 64;
const OFF_SLEEPING: usize = 128;
const OFF_SLOT_TABLE: usize = 192;

/// Sizes and offsets of a segment with `slots` rings of `ring_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) slots: usize,
    pub(super) ring_bytes: usize,
    pub(super) rings_offset: usize,
    pub(super) stride: usize,
    pub(super) total: usize,
}

impl Layout {
    /// `None` if the numbers are out of range or the total overflows.
    pub(super) fn new(slots: usize, ring_bytes: usize) -> Option<Layout> {
        if slots == 0
            || slots > MAX_SLOTS
            || !ring_bytes.is_power_of_two()
            || !(super::MIN_RING_BYTES..=super::MAX_RING_BYTES).contains(&ring_bytes)
        {
            return None;
        }
        let rings_offset = (OFF_SLOT_TABLE + 4 * slots).next_multiple_of(PAGE);
        let stride = (CTRL_BYTES + ring_bytes).next_multiple_of(RING_ALIGN);
        let total = stride.checked_mul(slots)?.checked_add(rings_offset)?;
        Some(Layout {
            slots,
            ring_bytes,
            rings_offset,
            stride,
            total,
        })
    }
}

/// A shared mapping, unmapped on drop.
#[derive(Debug)]
pub(super) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: the mapping is plain shared memory owned by this value; every access through it
// goes through atomics or the SPSC ring protocol, which does not depend on the thread.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing derived from the
        // mapping is used after its owner (the transport) drops it.
        if unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) } != 0 {
            tracing::debug!("shm: munmap: {}", io::Error::last_os_error());
        }
    }
}

impl Mapping {
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= self.layout.rings_offset && off.is_multiple_of(4));
        // SAFETY: `off` is a 4-aligned header offset inside the mapping (the header is at
        // least one page), and the mapping outlives the returned reference.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= self.layout.rings_offset && off.is_multiple_of(8));
        // SAFETY: as for `u32_at`, 8-aligned (the mapping is page-aligned).
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    /// The layout this mapping was validated against.
    pub(super) fn layout(&self) -> Layout {
        self.layout
    }

    /// Ring `slot` of this segment.
    ///
    /// # Panics
    /// If `slot >= slots`: callers pass a slot found in (or sized from) this layout.
    pub(super) fn ring(&self, slot: usize) -> RingPtr {
        // Invariant, not input: slots come from the validated slot table or our own list.
        assert!(slot < self.layout.slots, "ring slot out of range");
        let off = self.layout.rings_offset + slot * self.layout.stride;
        // SAFETY: `Layout` puts ring `slot` (CTRL_BYTES + ring_bytes, 128-aligned start)
        // inside `total <= len` bytes of the mapping; the transport keeps the mapping
        // alive as long as it uses the ring; ring_bytes is a valid ring size (checked in
        // `Layout::new`).
        unsafe { RingPtr::new(self.ptr.as_ptr().add(off), self.layout.ring_bytes) }
    }

    /// The doorbell word and sleeping flag of this segment's owner.
    pub(super) fn doorbell(&self) -> Doorbell<'_> {
        Doorbell {
            bell: self.u32_at(OFF_BELL),
            sleeping: self.u32_at(OFF_SLEEPING),
        }
    }

    /// Sender rank of each slot, as stored in the header.
    fn slot_ranks(&self) -> Vec<u32> {
        (0..self.layout.slots)
            .map(|i| self.u32_at(OFF_SLOT_TABLE + 4 * i).load(Ordering::Relaxed))
            .collect()
    }
}

/// The owner's doorbell (module doc of `shm` for the protocol).
#[derive(Debug, Clone, Copy)]
pub(super) struct Doorbell<'a> {
    pub(super) bell: &'a AtomicU32,
    pub(super) sleeping: &'a AtomicU32,
}

impl Doorbell<'_> {
    /// Sender side, after publishing a frame: wake the owner if it sleeps or is about to.
    pub(super) fn ring(&self) {
        // Pairs with the fence in `sleep`: either the owner's re-check sees our tail, or
        // we see its `sleeping` flag (store; SeqCst fence; load on both sides).
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) != 0 {
            self.bell.fetch_add(1, Ordering::Release);
            sys::futex_wake(self.bell);
        }
    }

    /// Owner side: sleep up to `timeout` unless `has_work` (called after announcing the
    /// sleep) finds something.
    pub(super) fn sleep(&self, timeout: std::time::Duration, has_work: impl Fn() -> bool) {
        let seq = self.bell.load(Ordering::Acquire);
        self.sleeping.store(1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        if !has_work() {
            sys::futex_wait(self.bell, seq, timeout);
        }
        self.sleeping.store(0, Ordering::Relaxed);
    }
}

/// This rank's own segment: mapped, and unlinked on drop unless already unlinked.
#[derive(Debug)]
pub(super) struct OwnSegment {
    pub(super) map: Mapping,
    name: CString,
    linked: bool,
}

impl OwnSegment {
    /// Create, size (allocating the pages, so that a full /dev/shm is an error now and
    /// not a SIGBUS later), map and initialize the segment `name` with one ring per rank
    /// of `slot_ranks` (ascending).
    ///
    /// # Errors
    /// The failing call and the OS error, with a hint where one helps.
    pub(super) fn create(
        name: &str,
        owner_rank: u32,
        slot_ranks: &[u32],
        ring_bytes: usize,
    ) -> Result<OwnSegment, (&'static str, String)> {
        let layout = Layout::new(slot_ranks.len(), ring_bytes).ok_or((
            "shm_open",
            format!(
                "{} local peers with rings of {ring_bytes} bytes is out of range (at most {MAX_SLOTS} peers)",
                slot_ranks.len()
            ),
        ))?;
        let cname = CString::new(name).map_err(|_| ("shm_open", format!("bad name {name:?}")))?;
        // SAFETY: `cname` is a valid C string; shm_open returns a new fd or -1.
        let fd = unsafe {
            libc::shm_open(
                cname.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                0o600 as libc::mode_t,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            let hint = if e.raw_os_error() == Some(libc::EEXIST) {
                " (left over from an earlier job with the same id? remove /dev/shm/rankwire-<job>-*)"
            } else {
                ""
            };
            return Err(("shm_open", format!("{name}: {e}{hint}")));
        }
        // SAFETY: shm_open just returned this fd; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // From here on, unlink on every error path (and on drop).
        let unlink = |what: &'static str, e: String| {
            // SAFETY: valid C string.
            unsafe { libc::shm_unlink(cname.as_ptr()) };
            (what, e)
        };
        // SAFETY: valid fd; plain integer arguments.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), layout.total as libc::off_t) } != 0 {
            return Err(unlink(
                "ftruncate",
                format!(
                    "{name} to {} bytes: {}",
                    layout.total,
                    io::Error::last_os_error()
                ),
            ));
        }
        // SAFETY: valid fd; plain integer arguments. Returns an errno value, not -1.
        let rc = unsafe { libc::posix_fallocate(fd.as_raw_fd(), 0, layout.total as libc::off_t) };
        match rc {
            0 | libc::EOPNOTSUPP | libc::EINVAL => {}
            _ => {
                return Err(unlink(
                    "posix_fallocate",
                    format!(
                        "{name}, {} bytes: {} (is /dev/shm too small? lower RANKWIRE_SHM_RING_BYTES or enlarge /dev/shm)",
                        layout.total,
                        io::Error::from_raw_os_error(rc)
                    ),
                ));
            }
        }
        let map = map_fd(&fd, layout.total, layout).map_err(|e| unlink("mmap", e))?;
        drop(fd);
        let seg = OwnSegment {
            map,
            name: cname,
            linked: true,
        };
        let m = &seg.map;
        m.u32_at(OFF_VERSION).store(VERSION, Ordering::Relaxed);
        m.u32_at(OFF_OWNER_RANK)
            .store(owner_rank, Ordering::Relaxed);
        m.u32_at(OFF_OWNER_PID)
            .store(std::process::id(), Ordering::Relaxed);
        m.u32_at(OFF_SLOTS)
            .store(layout.slots as u32, Ordering::Relaxed);
        m.u64_at(OFF_RING_BYTES)
            .store(layout.ring_bytes as u64, Ordering::Relaxed);
        m.u64_at(OFF_RINGS_OFFSET)
            .store(layout.rings_offset as u64, Ordering::Relaxed);
        m.u64_at(OFF_RING_STRIDE)
            .store(layout.stride as u64, Ordering::Relaxed);
        for (i, &r) in slot_ranks.iter().enumerate() {
            m.u32_at(OFF_SLOT_TABLE + 4 * i).store(r, Ordering::Relaxed);
        }
        m.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Remove the name from /dev/shm (the mappings stay valid).
    pub(super) fn unlink(&mut self) -> io::Result<()> {
        if !self.linked {
            return Ok(());
        }
        self.linked = false;
        // SAFETY: valid C string.
        if unsafe { libc::shm_unlink(self.name.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for OwnSegment {
    fn drop(&mut self) {
        if let Err(e) = self.unlink() {
            tracing::debug!("shm: shm_unlink {:?}: {e}", self.name);
        }
    }
}

/// Open and map `peer`'s segment `name`, check its header, and find the slot of
/// `my_rank` in it. Returns the mapping and the slot index.
///
/// # Errors
/// A reason naming what is wrong (the caller turns it into `Connect`).
pub(super) fn open_peer(name: &str, peer: u32, my_rank: u32) -> Result<(Mapping, usize), String> {
    let cname = CString::new(name).map_err(|_| format!("bad segment name {name:?}"))?;
    // SAFETY: valid C string; returns a new fd or -1.
    let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("shm_open {name}: {}", io::Error::last_os_error()));
    }
    // SAFETY: shm_open just returned this fd; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `st` is a plain C struct that fstat fills in.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(format!("fstat {name}: {}", io::Error::last_os_error()));
    }
    let len = usize::try_from(st.st_size).unwrap_or(0);
    if len < PAGE {
        return Err(format!(
            "{name} is {len} bytes, smaller than a segment header"
        ));
    }
    // Map the header page first, read the layout it declares, then map all of it.
    let probe = Layout {
        slots: 0,
        ring_bytes: 0,
        rings_offset: PAGE,
        stride: 0,
        total: PAGE,
    };
    let head = map_fd(&fd, PAGE, probe)?;
    if head.u64_at(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
        return Err(format!("{name} has no rankwire segment header (bad magic)"));
    }
    let version = head.u32_at(OFF_VERSION).load(Ordering::Relaxed);
    if version != VERSION {
        return Err(format!(
            "{name} has layout version {version}, this build speaks {VERSION}"
        ));
    }
    let owner = head.u32_at(OFF_OWNER_RANK).load(Ordering::Relaxed);
    if owner != peer {
        return Err(format!(
            "{name} belongs to rank {owner}, expected rank {peer}"
        ));
    }
    let slots = head.u32_at(OFF_SLOTS).load(Ordering::Relaxed) as usize;
    let ring_bytes = head.u64_at(OFF_RING_BYTES).load(Ordering::Relaxed);
    let layout = usize::try_from(ring_bytes)
        .ok()
        .and_then(|rb| Layout::new(slots, rb))
        .ok_or_else(|| {
            format!("{name} declares {slots} rings of {ring_bytes} bytes: out of range")
        })?;
    let declared = (
        head.u64_at(OFF_RINGS_OFFSET).load(Ordering::Relaxed),
        head.u64_at(OFF_RING_STRIDE).load(Ordering::Relaxed),
    );
    if declared != (layout.rings_offset as u64, layout.stride as u64) || layout.total > len {
        return Err(format!(
            "{name}: header offsets {declared:?} / size {len} do not match the layout {layout:?}"
        ));
    }
    drop(head);
    let map = map_fd(&fd, layout.total, layout)?;
    let ranks = map.slot_ranks();
    let slot = ranks.iter().position(|&r| r == my_rank).ok_or_else(|| {
        format!("rank {peer} has no ring for rank {my_rank} (its local peers are {ranks:?}); both ranks must list each other as local")
    })?;
    Ok((map, slot))
}

fn map_fd(fd: &OwnedFd, len: usize, layout: Layout) -> Result<Mapping, String> {
    // SAFETY: a fresh shared mapping of a valid fd; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!(
            "mmap of {len} bytes: {}",
            io::Error::last_os_error()
        ));
    }
    let ptr = NonNull::new(p.cast::<u8>()).ok_or("mmap returned null")?;
    Ok(Mapping { ptr, len, layout })
}
