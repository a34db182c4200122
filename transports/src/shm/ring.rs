//! Single-producer/single-consumer byte ring in shared memory.
//!
//! # Layout of one ring (offsets from its base, which is 64-byte aligned)
//! ```text
//!   0  tail: u64     producer index (bytes ever written), written only by the sender
//! 128  head: u64     consumer index (bytes ever consumed), written only by the receiver
//! 192  waiting: u32  1 while the sender is blocked on a full ring, written only by it
//! 256  data: `size` bytes, `size` a power of two
//! ```
//! Tail and head sit on cache lines of their own (128 bytes apart, so the adjacent-line
//! prefetcher does not pair them either). Both are free-running `u64` byte counters; a
//! byte at index `i` lives at `data[i & (size - 1)]`. `tail - head` is the number of
//! bytes written and not yet consumed, never more than `size`.
//!
//! # Records
//! A frame is one record: a 16-byte envelope `[u32 header_len LE][u32 flags = 0]
//! [u64 payload_len LE]`, the header, the payload, then zero to 63 bytes of padding so
//! that every record starts on a 64-byte boundary (the consumer of one frame and the
//! producer of the next never share a cache line). Records wrap around the end of the
//! data area by being copied in two pieces; no wrap marker is written. Because `size` is
//! a multiple of 64 and records start 64-byte aligned, the envelope itself never wraps.
//! A record is at most `16 + MAX_HEADER_BYTES + size / 4 + 63` bytes, which is below
//! `size` for every ring of at least 16 KiB, so every valid frame fits in an empty ring.
//!
//! # Ordering
//! The producer copies the record into the data area, then publishes it with a
//! `Release` store of `tail`; the consumer `Acquire`-loads `tail`, copies the record out
//! and frees it with a `Release` store of `head`, which the producer `Acquire`-loads
//! (only when its cached copy shows too little room). No locks.
//!
//! # Waking a blocked sender
//! A sender whose frame does not fit sets `waiting = 1`, then a SeqCst fence, then
//! re-reads `head` before answering "not now"; it clears `waiting` after its next
//! successful write. A consumer that freed space: a SeqCst fence, then if `waiting` is
//! set it rings the sender's doorbell (the caller does that; see the `shm` module doc).
//! Store, fence, load on both sides: either the sender's re-read sees the freed space or
//! the consumer sees `waiting`. Only the sender writes `waiting`, so a clear can never
//! overwrite a newer set.
//!
//! # Untrusted input
//! The other side is another process. Every index and length read from shared memory is
//! read once into a local, checked (indices within `size` of each other, lengths under
//! the limits, the record within the published bytes) and only then used; a failed
//! check is an error string, never a panic or an unbounded allocation.

use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use crate::MAX_HEADER_BYTES;

/// Bytes of the envelope that starts every record.
pub(super) const ENVELOPE_BYTES: usize = 16;
/// Records start on multiples of this many bytes.
pub(super) const RECORD_ALIGN: usize = 64;
/// Bytes of the control block (tail and head lines) before the data area.
pub(super) const CTRL_BYTES: usize = 256;
const TAIL_OFFSET: usize = 0;
const HEAD_OFFSET: usize = 128;
const WAITING_OFFSET: usize = 192;

/// Bytes a frame of `header_len` + `payload_len` occupies in a ring (envelope and
/// padding included).
pub(super) fn record_bytes(header_len: usize, payload_len: usize) -> u64 {
    let raw = (ENVELOPE_BYTES as u64)
        .saturating_add(header_len as u64)
        .saturating_add(payload_len as u64);
    raw.saturating_add(RECORD_ALIGN as u64 - 1) & !(RECORD_ALIGN as u64 - 1)
}

/// Largest payload of one frame in a ring of `size` bytes.
pub(super) fn max_payload(size: usize) -> usize {
    size / 4
}

/// A ring somewhere in mapped memory: its base pointer and data size.
#[derive(Debug, Clone, Copy)]
pub(super) struct RingPtr {
    base: *mut u8,
    size: u64,
}

// SAFETY: a `RingPtr` is an address into a shared mapping that its owner (the
// transport) keeps alive; the memory is shared with other processes anyway and accessed
// only through atomics and the SPSC protocol, so which thread holds the pointer does not
// matter. Each end (`Producer`, `Consumer`) is used by one thread at a time (`&mut`).
unsafe impl Send for RingPtr {}

impl RingPtr {
    /// # Safety
    /// `base` is 64-byte aligned and valid for reads and writes of `CTRL_BYTES + size`
    /// bytes for as long as this value (or anything built from it) is used; `size` is a
    /// power of two, a multiple of [`RECORD_ALIGN`], at least 16 KiB. Other processes may
    /// access the memory only by the protocol in the module doc (a peer breaking it can
    /// garble bytes, which the consumer's checks catch, but cannot make this process
    /// touch memory outside the ring).
    pub(super) unsafe fn new(base: *mut u8, size: usize) -> RingPtr {
        debug_assert!(size.is_power_of_two() && size >= 16 << 10);
        debug_assert_eq!(base as usize % RECORD_ALIGN, 0);
        RingPtr {
            base,
            size: size as u64,
        }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: by `new`'s contract the control block is valid and 8-aligned at this
        // offset for as long as `self` is used; it is only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(TAIL_OFFSET).cast()) }
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: as for `tail`.
        unsafe { AtomicU64::from_ptr(self.base.add(HEAD_OFFSET).cast()) }
    }

    fn waiting(&self) -> &AtomicU32 {
        // SAFETY: as for `tail` (4-aligned).
        unsafe { AtomicU32::from_ptr(self.base.add(WAITING_OFFSET).cast()) }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: within the region `new` guarantees.
        unsafe { self.base.add(CTRL_BYTES) }
    }

    /// Copy `src` into the data area at logical index `pos`, in two pieces if it wraps.
    ///
    /// # Safety
    /// `src.len() <= size`, and the bytes `[pos, pos + len)` are owned by the caller
    /// (the producer, between `tail` and `head + size`).
    unsafe fn copy_in(&self, pos: u64, src: &[u8]) {
        let off = (pos & (self.size - 1)) as usize;
        let first = src.len().min(self.size as usize - off);
        // SAFETY: `off + first <= size` and `src.len() - first <= size`, so both
        // destinations lie in the data area; `src` is a separate (caller's) buffer.
        unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), self.data().add(off), first);
            ptr::copy_nonoverlapping(src.as_ptr().add(first), self.data(), src.len() - first);
        }
    }

    /// Copy `len` bytes at logical index `pos` out to `dst`, in two pieces if they wrap.
    ///
    /// # Safety
    /// `len <= size`; `dst` is valid for `len` bytes and not in the ring; the bytes are
    /// published (between `head` and `tail`) and owned by the caller (the consumer).
    unsafe fn copy_out(&self, pos: u64, dst: *mut u8, len: usize) {
        let off = (pos & (self.size - 1)) as usize;
        let first = len.min(self.size as usize - off);
        // SAFETY: as in `copy_in`, with the roles of the buffers swapped.
        unsafe {
            ptr::copy_nonoverlapping(self.data().add(off), dst, first);
            ptr::copy_nonoverlapping(self.data(), dst.add(first), len - first);
        }
    }

    /// Copy `len` published bytes at `pos` into a new vector.
    ///
    /// # Safety
    /// As for `copy_out`.
    unsafe fn read_vec(&self, pos: u64, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len);
        // SAFETY: the vector has capacity `len`; `copy_out` initializes all `len` bytes
        // before `set_len`.
        unsafe {
            self.copy_out(pos, v.as_mut_ptr(), len);
            v.set_len(len);
        }
        v
    }
}

/// The sending end of one ring (lives in the sender's process, points into the
/// receiver's segment).
#[derive(Debug)]
pub(super) struct Producer {
    ring: RingPtr,
    /// Our copy of `tail` (we are its only writer).
    tail: u64,
    /// Last `head` seen; refreshed only when it shows too little room.
    head_cache: u64,
    /// The last write did not fit and `waiting` is set.
    blocked: bool,
}

impl Producer {
    /// The producer of `ring`, starting from the indices found there (0 in a new ring).
    pub(super) fn new(ring: RingPtr) -> Producer {
        let tail = ring.tail().load(Ordering::Acquire);
        Producer {
            ring,
            tail,
            head_cache: tail,
            blocked: false,
        }
    }

    /// Write one frame if it fits. `Ok(false)`: not enough room now (nothing written).
    ///
    /// # Errors
    /// The consumer's index is out of range (a corrupt or hostile receiver), or the
    /// frame is over the limits (the caller checks lengths first; this is a guard).
    pub(super) fn try_write(&mut self, header: &[u8], payload: &[u8]) -> Result<bool, String> {
        let rec = record_bytes(header.len(), payload.len());
        if header.len() > MAX_HEADER_BYTES || payload.len() > max_payload(self.ring.size as usize) {
            return Err(format!(
                "a frame with a header of {} and a payload of {} bytes is over the limits of a ring of {} bytes",
                header.len(),
                payload.len(),
                self.ring.size
            ));
        }
        if self.free() < rec {
            self.refresh_head()?;
            if self.free() < rec {
                if !self.blocked {
                    // Announce, then look once more (module doc, "Waking a blocked sender").
                    self.blocked = true;
                    self.ring.waiting().store(1, Ordering::Relaxed);
                    fence(Ordering::SeqCst);
                    self.refresh_head()?;
                }
                if self.free() < rec {
                    return Ok(false);
                }
            }
        }
        let mut env = [0u8; ENVELOPE_BYTES];
        env[0..4].copy_from_slice(&(header.len() as u32).to_le_bytes());
        env[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        let pos = self.tail;
        // SAFETY: `rec <= free`, so `[tail, tail + rec)` is unpublished space owned by the
        // producer; each piece is shorter than `size`.
        unsafe {
            self.ring.copy_in(pos, &env);
            self.ring.copy_in(pos + ENVELOPE_BYTES as u64, header);
            self.ring
                .copy_in(pos + (ENVELOPE_BYTES + header.len()) as u64, payload);
        }
        self.tail = pos + rec;
        self.ring.tail().store(self.tail, Ordering::Release);
        if self.blocked {
            self.blocked = false;
            self.ring.waiting().store(0, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// Whether the last write did not fit and the consumer has freed space since (the
    /// sender should try again instead of sleeping).
    pub(super) fn room_freed(&self) -> bool {
        self.blocked && self.ring.head().load(Ordering::Acquire) != self.head_cache
    }

    /// Load and check the consumer index.
    fn refresh_head(&mut self) -> Result<(), String> {
        let head = self.ring.head().load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > self.ring.size || !used.is_multiple_of(RECORD_ALIGN as u64) {
            return Err(format!(
                "consumer index {head} out of range (producer at {}, ring {} bytes)",
                self.tail, self.ring.size
            ));
        }
        self.head_cache = head;
        Ok(())
    }

    /// Bytes free according to the cached head.
    fn free(&self) -> u64 {
        self.ring
            .size
            .saturating_sub(self.tail.wrapping_sub(self.head_cache))
    }
}

/// The receiving end of one ring (in the receiver's own segment).
#[derive(Debug)]
pub(super) struct Consumer {
    ring: RingPtr,
    /// Our copy of `head` (we are its only writer).
    head: u64,
}

impl Consumer {
    /// The consumer of `ring`, starting from the index found there (0 in a new ring).
    pub(super) fn new(ring: RingPtr) -> Consumer {
        let head = ring.head().load(Ordering::Acquire);
        Consumer { ring, head }
    }

    /// Cheap check: has the producer published anything we have not read?
    pub(super) fn has_data(&self) -> bool {
        self.ring.tail().load(Ordering::Acquire) != self.head
    }

    /// After freeing space: is the producer blocked on a full ring (so its doorbell
    /// must be rung)? Module doc, "Waking a blocked sender".
    pub(super) fn producer_waiting(&self) -> bool {
        fence(Ordering::SeqCst);
        self.ring.waiting().load(Ordering::Relaxed) != 0
    }

    /// Read the frames published when this call starts (not more, so a fast producer
    /// cannot keep the caller here), passing each `(header, payload)` to `sink`. Returns
    /// the number of bytes consumed.
    ///
    /// # Errors
    /// An invalid index or envelope (module doc, "Untrusted input"): the reason, naming
    /// the numbers. Frames before it were delivered; the ring must not be read again.
    pub(super) fn read_available(
        &mut self,
        mut sink: impl FnMut(Vec<u8>, Vec<u8>),
    ) -> Result<u64, String> {
        let tail = self.ring.tail().load(Ordering::Acquire);
        let start = self.head;
        let size = self.ring.size;
        let used = tail.wrapping_sub(start);
        if used > size || !used.is_multiple_of(RECORD_ALIGN as u64) {
            return Err(format!(
                "producer index {tail} out of range (consumer at {start}, ring {size} bytes)"
            ));
        }
        let max_payload = max_payload(size as usize) as u64;
        while self.head != tail {
            let avail = tail - self.head;
            let mut env = [0u8; ENVELOPE_BYTES];
            // SAFETY: `avail >= 64 > 16` bytes are published at `head` (checked above:
            // a non-zero multiple of 64); `env` is a local buffer.
            unsafe {
                self.ring
                    .copy_out(self.head, env.as_mut_ptr(), ENVELOPE_BYTES)
            };
            let header_len = u64::from(u32::from_le_bytes([env[0], env[1], env[2], env[3]]));
            let flags = u32::from_le_bytes([env[4], env[5], env[6], env[7]]);
            let payload_len = u64::from_le_bytes([
                env[8], env[9], env[10], env[11], env[12], env[13], env[14], env[15],
            ]);
            if flags != 0 {
                return Err(format!(
                    "unknown flags {flags:#x} at ring index {}",
                    self.head
                ));
            }
            if header_len > MAX_HEADER_BYTES as u64 {
                return Err(format!(
                    "header of {header_len} bytes exceeds the limit of {MAX_HEADER_BYTES}"
                ));
            }
            if payload_len > max_payload {
                return Err(format!(
                    "payload of {payload_len} bytes exceeds the frame limit of {max_payload} (ring {size} bytes)"
                ));
            }
            // Both lengths are bounded now, so this cannot overflow.
            let rec = record_bytes(header_len as usize, payload_len as usize);
            if rec > avail {
                return Err(format!(
                    "frame record of {rec} bytes (header {header_len}, payload {payload_len}) but only {avail} bytes published"
                ));
            }
            // SAFETY: the record `[head, head + rec)` is published (`rec <= avail`) and
            // both lengths are below `size`.
            let (header, payload) = unsafe {
                (
                    self.ring
                        .read_vec(self.head + ENVELOPE_BYTES as u64, header_len as usize),
                    self.ring.read_vec(
                        self.head + ENVELOPE_BYTES as u64 + header_len,
                        payload_len as usize,
                    ),
                )
            };
            self.head += rec;
            // Free the space at once: a producer waiting for room may go on.
            self.ring.head().store(self.head, Ordering::Release);
            sink(header, payload);
        }
        Ok(tail - start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(64))]
    struct Line([u8; 64]);

    /// A ring in 64-byte aligned heap memory (keep the vector alive while using it).
    fn heap_ring(size: usize) -> (Vec<Line>, RingPtr) {
        let mut mem: Vec<Line> = (0..(CTRL_BYTES + size) / 64)
            .map(|_| Line([0; 64]))
            .collect();
        // SAFETY: the vector is 64-aligned, `CTRL_BYTES + size` bytes long and outlives
        // every use in the test (returned together).
        let ring = unsafe { RingPtr::new(mem.as_mut_ptr().cast(), size) };
        (mem, ring)
    }

    type Frames = Vec<(Vec<u8>, Vec<u8>)>;

    fn drain(c: &mut Consumer) -> Result<Frames, String> {
        let mut out = Vec::new();
        c.read_available(|h, p| out.push((h, p)))?;
        Ok(out)
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn record_sizes() {
        assert_eq!(record_bytes(0, 0), 64);
        assert_eq!(record_bytes(48, 0), 64);
        assert_eq!(record_bytes(48, 1), 128);
        assert_eq!(record_bytes(MAX_HEADER_BYTES, max_payload(16 << 10)), 8256);
        assert!(record_bytes(MAX_HEADER_BYTES, max_payload(16 << 10)) < 16 << 10);
        assert_eq!(record_bytes(usize::MAX, usize::MAX) % 64, 0);
    }

    #[test]
    fn wraps_many_times_with_odd_sizes() {
        let (_mem, ring) = heap_ring(16 << 10);
        let mut p = Producer::new(ring);
        let mut c = Consumer::new(ring);
        let mut sent = 0usize;
        let mut got = 0usize;
        let sizes = [0usize, 1, 7, 63, 64, 65, 1000, 4096, 4095, 4033, 3000];
        for round in 0..2000usize {
            let len = sizes[round % sizes.len()];
            let h = pattern(round % 50, 1);
            let pl = pattern(len, round as u8);
            while !p.try_write(&h, &pl).unwrap() {
                for (hh, pp) in drain(&mut c).unwrap() {
                    assert_eq!(hh, pattern(got % 50, 1));
                    assert_eq!(pp, pattern(sizes[got % sizes.len()], got as u8));
                    got += 1;
                }
            }
            sent += 1;
        }
        for (hh, pp) in drain(&mut c).unwrap() {
            assert_eq!(hh, pattern(got % 50, 1));
            assert_eq!(pp, pattern(sizes[got % sizes.len()], got as u8));
            got += 1;
        }
        assert_eq!(got, sent);
        assert!(p.tail > 20 * (16 << 10) as u64, "wrapped many times");
    }

    #[test]
    fn full_ring_says_not_now_and_frees_on_read() {
        let (_mem, ring) = heap_ring(16 << 10);
        let mut p = Producer::new(ring);
        let mut c = Consumer::new(ring);
        let pl = vec![5u8; 4096 - 16];
        for _ in 0..4 {
            assert!(p.try_write(&[], &pl).unwrap());
        }
        assert!(!p.try_write(&[], &[]).unwrap(), "exactly full");
        assert!(c.producer_waiting() && !p.room_freed());
        assert_eq!(drain(&mut c).unwrap().len(), 4);
        assert!(p.room_freed() && c.producer_waiting());
        assert!(p.try_write(&[], &[]).unwrap());
        assert!(!c.producer_waiting() && !p.room_freed());
        assert!(p.try_write(&[], &vec![1; 16 << 10]).is_err(), "never fits");
    }

    fn write_raw(ring: &RingPtr, pos: u64, bytes: &[u8], new_tail: u64) {
        // SAFETY: test-only; nobody else uses the ring.
        unsafe { ring.copy_in(pos, bytes) };
        ring.tail().store(new_tail, Ordering::Release);
    }

    fn envelope(h: u32, flags: u32, p: u64) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&h.to_le_bytes());
        v.extend_from_slice(&flags.to_le_bytes());
        v.extend_from_slice(&p.to_le_bytes());
        v
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let cases: Vec<(Vec<u8>, u64, &str)> = vec![
            (envelope(0, 0, u64::MAX), 64, "payload"),
            (envelope(u32::MAX, 0, 0), 64, "header"),
            (envelope(0, 1, 0), 64, "flags"),
            (envelope(0, 0, 1000), 64, "published"),
            (envelope(0, 0, 0), 1 << 40, "producer index"),
            (envelope(0, 0, 0), 32, "producer index"),
        ];
        for (env, tail, want) in cases {
            let (_mem, ring) = heap_ring(16 << 10);
            let mut p = Producer::new(ring);
            let mut c = Consumer::new(ring);
            assert!(p.try_write(b"ok", b"first").unwrap());
            write_raw(&ring, 64, &env, 64 + tail);
            let mut got = Vec::new();
            let err = c.read_available(|h, p| got.push((h, p))).unwrap_err();
            assert!(err.contains(want), "{err:?} should mention {want}");
            if want != "producer index" {
                assert_eq!(got, vec![(b"ok".to_vec(), b"first".to_vec())]);
            }
        }
    }

    #[test]
    fn hostile_head_is_an_error_for_the_producer() {
        let (_mem, ring) = heap_ring(16 << 10);
        let mut p = Producer::new(ring);
        ring.head().store(12345, Ordering::Release);
        let big = vec![0u8; 4096];
        let mut err = None;
        for _ in 0..8 {
            match p.try_write(&[], &big) {
                Ok(_) => {}
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        assert!(err.unwrap().contains("consumer index"));
    }
}
