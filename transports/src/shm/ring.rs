//! Single-producer/single-consumer byte ring in shared memory.
//!
//! # Layout of one ring (offsets from its base, which is 64-byte aligned)
//! ```text
//!   0  head: u64     consumer index (bytes ever consumed), written only by the receiver
//! 128  waiting: u32  1 while the sender is blocked on a full ring, written only by it
//! 256  data: `size` bytes, `size` a power of two
//! ```
//! `head` and `waiting` sit on cache lines of their own (128 bytes apart, so the
//! adjacent-line prefetcher does not pair them either). Indices are free-running `u64`
//! byte counters; a byte at index `i` lives at `data[i & (size - 1)]`.
//!
//! # Records
//! A frame is one record: an envelope, the header, `pad` bytes (0 to 63), the payload,
//! then zero to 31 bytes so that every record starts on a 32-byte boundary. The
//! envelope (little-endian) is short, 8 bytes `[u32 stamp][u16 header_len]
//! [u16 payload_len]`, for payloads below [`ALIGN_PAYLOAD_MIN`] bytes (never padded),
//! and long, 16 bytes `[u32 stamp][u16 header_len][u16 0xffff][u16 pad][u16 0]
//! [u32 payload_len]`, for the others. So a small message (the short envelope, the
//! protocol's 16-byte short eager header and up to 8 payload bytes) takes half a cache
//! line, as in Open MPI's fast boxes (32-byte slots): when the producer runs ahead, one
//! cache-line transfer brings the consumer two messages. The
//! producer pads payloads of at least [`ALIGN_PAYLOAD_MIN`] bytes so that they sit at
//! the same offset within a cache line as in the sender's buffer: large copies between
//! buffers at different offsets are several times slower on some CPUs (`rep movsb` on
//! AMD Zen 3, as glibc and the kernel use from 4 KiB on: 1.5 against 7 GB/s measured
//! here), and user buffers are usually line- or page-aligned. Records wrap around
//! the end of the data area by being copied in two pieces; because `size` is a multiple
//! of 64 and records start 32-byte aligned, the envelope itself never wraps. A record is
//! at most `16 + MAX_HEADER_BYTES + 63 + size / 4 + 31` bytes, and the producer always keeps
//! 32 bytes free (below), which together stay below `size` for every ring of at least
//! 16 KiB, so every valid frame fits in an empty ring. The bytes between a record's
//! payload and the next 32-byte boundary are not written: they hold whatever an earlier
//! lap left there, and nothing reads them.
//!
//! # Publishing: the stamp
//! There is no producer index in shared memory. The consumer polls the first word of
//! the record at its own `head`: the record is published once that word holds the
//! stamp of its position, `(index / 32) as u32 | 0x8000_0000` (never 0, and different
//! from the stamp of the same slot one lap earlier for rings below 64 GiB). A frame of
//! up to 64 bytes (with the protocol's short eager header: up to 40 payload bytes) lies
//! in at most one cache line, so a message
//! costs the consumer at most one cache-line transfer, not two (index, then data). Open MPI's
//! shared-memory "fast boxes" publish small messages the same way, with a sequence
//! number in the header (`opal/mca/btl/vader/btl_vader_fbox.h`).
//!
//! The producer writes envelope fields, header and payload, then **clears the stamp
//! word of the next record's slot** (`index + record`), then stores the stamp with
//! `Release`. The consumer `Acquire`-loads the stamp and only then reads the record.
//! The clear is what makes stale bytes harmless: the slot at which the consumer looks
//! next was zeroed before the record that precedes it was published, so it holds either
//! 0 or the stamp of a new record, never leftover payload bytes of an earlier lap that
//! could happen to look like a stamp. That word lies in free space, which is why the
//! producer needs `record + 32` free bytes (32 more before a skip slot, below); a fresh
//! ring is all zeros.
//!
//! # Skip slots
//! A record of two slots (33 to 64 bytes) that would start in the middle of a cache line
//! is preceded by a skip slot, so that it lies in one line: a short envelope with header
//! length 0 and payload length `0xfffe`, published like a record (next stamp cleared
//! first). The consumer steps over it and frees it at once. `payload_len` values of
//! 4096 and more in a short envelope are reserved (`0xffff` marks a long envelope,
//! `0xfffe` a skip); a skip at the start of a line, or right after another skip, is
//! garbage.
//!
//! # Freeing space
//! The consumer frees a record by a `Release` store of `head`, which the producer
//! `Acquire`-loads only when its cached copy shows too little room. No locks.
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
//! the limits, the stamp either 0 or the expected one) and only then used; a failed
//! check is an error string, never a panic or an unbounded allocation. Payload bytes are
//! copied out of the ring as they are: a peer that scribbles over a record it published
//! garbles only that message's data.

use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use crate::MAX_HEADER_BYTES;

/// Bytes of the short envelope (payloads below [`ALIGN_PAYLOAD_MIN`] bytes).
const SHORT_ENVELOPE_BYTES: usize = 8;
/// Bytes of the long envelope (the other payloads).
const LONG_ENVELOPE_BYTES: usize = 16;
/// The `payload_len` field of a short envelope that marks a long one.
const LONG_MARK: u16 = 0xffff;
/// The `payload_len` field of a short envelope that marks a skip: a 32-byte record with
/// no frame, written before a record of 33 to 64 bytes that would otherwise start in
/// the middle of a cache line and straddle two.
const SKIP_MARK: u16 = 0xfffe;
/// Records start on multiples of this many bytes.
pub(super) const RECORD_ALIGN: usize = 32;
/// Bytes of a cache line: large payloads are aligned within one, and a record of at
/// most this many bytes is written in place without wrapping.
const LINE: usize = 64;
/// Bytes of the control block (head and waiting lines) before the data area.
pub(super) const CTRL_BYTES: usize = 256;
const HEAD_OFFSET: usize = 0;
const WAITING_OFFSET: usize = 128;
/// Free bytes the producer keeps beyond a record (the next slot's stamp word).
const RESERVE_BYTES: u64 = RECORD_ALIGN as u64;

/// Header bytes [`Consumer::peek`] copies with one fixed-size copy.
const SHORT_HEADER_COPY: usize = 16;

/// Lines after a record's first that [`Consumer::peek`] prefetches (a record of up to
/// 1 KiB; longer copies are streamed by the hardware prefetcher).
const PREFETCH_LINES: u64 = 15;

/// Payloads of at least this many bytes are placed at their source's offset within a
/// cache line (module doc, "Records").
pub(super) const ALIGN_PAYLOAD_MIN: usize = 4096;

/// Whether a short envelope (its first 8 bytes in `e`) marks a skip slot: header length
/// 0 and [`SKIP_MARK`].
fn is_skip(e: &[u8; LONG_ENVELOPE_BYTES]) -> bool {
    e[4..8] == [0, 0, SKIP_MARK as u8, (SKIP_MARK >> 8) as u8]
}

/// Bytes of the envelope the producer writes for a payload of `payload_len` bytes.
fn envelope_bytes(payload_len: usize) -> usize {
    if payload_len < ALIGN_PAYLOAD_MIN {
        SHORT_ENVELOPE_BYTES
    } else {
        LONG_ENVELOPE_BYTES
    }
}

/// Bytes a frame with an envelope of `env` bytes and `header_len` + `pad` +
/// `payload_len` occupies in a ring (trailing padding included).
pub(super) fn record_bytes(env: usize, header_len: usize, pad: usize, payload_len: usize) -> u64 {
    let raw = (env as u64)
        .saturating_add(header_len as u64)
        .saturating_add(pad as u64)
        .saturating_add(payload_len as u64);
    raw.saturating_add(RECORD_ALIGN as u64 - 1) & !(RECORD_ALIGN as u64 - 1)
}

/// Padding before a payload of `len` bytes at `src` whose record starts at ring index
/// `pos` with a header of `header_len` bytes (the data area is 64-byte aligned, so an
/// index has the offset of its address within a line).
fn payload_pad(pos: u64, header_len: usize, src: *const u8, len: usize) -> usize {
    if len < ALIGN_PAYLOAD_MIN {
        return 0;
    }
    let at = (pos as usize + LONG_ENVELOPE_BYTES + header_len) % LINE;
    (src as usize % LINE + LINE - at) % LINE
}

/// Largest payload of one frame in a ring of `size` bytes.
pub(super) fn max_payload(size: usize) -> usize {
    size / 4
}

/// The stamp that publishes a record starting at ring index `pos` (module doc).
fn stamp(pos: u64) -> u32 {
    ((pos / RECORD_ALIGN as u64) as u32) | 0x8000_0000
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
        debug_assert_eq!(base as usize % LINE, 0);
        RingPtr {
            base,
            size: size as u64,
        }
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: by `new`'s contract the control block is valid and 8-aligned at this
        // offset for as long as `self` is used; it is only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(HEAD_OFFSET).cast()) }
    }

    fn waiting(&self) -> &AtomicU32 {
        // SAFETY: as for `head` (4-aligned).
        unsafe { AtomicU32::from_ptr(self.base.add(WAITING_OFFSET).cast()) }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: within the region `new` guarantees.
        unsafe { self.base.add(CTRL_BYTES) }
    }

    /// The stamp word of the record slot at logical index `pos` (32-aligned).
    fn stamp_at(&self, pos: u64) -> &AtomicU32 {
        debug_assert!(pos.is_multiple_of(RECORD_ALIGN as u64));
        let off = (pos & (self.size - 1)) as usize;
        // SAFETY: `off` is a multiple of 32 below `size`, so the word lies in the data
        // area and is 4-aligned; the stamp word is only accessed atomically.
        unsafe { AtomicU32::from_ptr(self.data().add(off).cast()) }
    }

    /// Pointer to logical index `pos` and the bytes from there to the end of the data
    /// area.
    fn at(&self, pos: u64) -> (*mut u8, usize) {
        let off = (pos & (self.size - 1)) as usize;
        // SAFETY: `off < size`, inside the data area.
        (unsafe { self.data().add(off) }, self.size as usize - off)
    }

    /// Copy `src` into the data area at logical index `pos`, in two pieces if it wraps.
    ///
    /// # Safety
    /// `src.len() <= size`, and the bytes `[pos, pos + len)` are owned by the caller
    /// (the producer, between its index and `head + size`).
    #[inline]
    unsafe fn copy_in(&self, pos: u64, src: &[u8]) {
        let (dst, room) = self.at(pos);
        let first = src.len().min(room);
        // SAFETY: `off + first <= size` and `src.len() - first <= size`, so both
        // destinations lie in the data area; `src` is a separate (caller's) buffer.
        unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), dst, first);
            if first < src.len() {
                ptr::copy_nonoverlapping(src.as_ptr().add(first), self.data(), src.len() - first);
            }
        }
    }

    /// The published bytes `[pos, pos + len)` as at most two pieces (the second one
    /// empty unless they wrap).
    #[inline]
    fn pieces(&self, pos: u64, len: usize) -> [(*const u8, usize); 2] {
        let (p, room) = self.at(pos);
        let first = len.min(room);
        [(p, first), (self.data(), len - first)]
    }
}

/// The sending end of one ring (lives in the sender's process, points into the
/// receiver's segment).
#[derive(Debug)]
pub(super) struct Producer {
    ring: RingPtr,
    /// Producer index (bytes ever written); ours alone, not in shared memory.
    tail: u64,
    /// Last `head` seen; refreshed only when it shows too little room.
    head_cache: u64,
    /// The last write did not fit and `waiting` is set.
    blocked: bool,
}

impl Producer {
    /// The producer of `ring`, starting from the consumer's index (0 in a new ring, the
    /// only kind the transport builds).
    pub(super) fn new(ring: RingPtr) -> Producer {
        let tail = ring.head().load(Ordering::Acquire);
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
    #[inline]
    pub(super) fn try_write(&mut self, header: &[u8], payload: &[u8]) -> Result<bool, String> {
        let pad = payload_pad(self.tail, header.len(), payload.as_ptr(), payload.len());
        let env_bytes = envelope_bytes(payload.len());
        let rec = record_bytes(env_bytes, header.len(), pad, payload.len());
        if header.len() > MAX_HEADER_BYTES || payload.len() > max_payload(self.ring.size as usize) {
            return Err(format!(
                "a frame with a header of {} and a payload of {} bytes is over the limits of a ring of {} bytes",
                header.len(),
                payload.len(),
                self.ring.size
            ));
        }
        // A record of two slots starts on a line (a skip slot first where needed), so
        // that the consumer reads it with one cache-line transfer, not two.
        let skip = rec == LINE as u64 && !self.tail.is_multiple_of(LINE as u64);
        let need = rec + RESERVE_BYTES + if skip { RECORD_ALIGN as u64 } else { 0 };
        if self.free() < need && !self.make_room(need)? {
            return Ok(false);
        }
        if skip {
            self.write_skip();
        }
        let pos = self.tail;
        let (env, room) = self.ring.at(pos);
        if rec <= LINE as u64 {
            // One or two slots (the common small message, a short envelope), which do not
            // wrap: a 32-aligned slot never does, and two slots start on a line (above).
            // Written in place, the stamp last. (Built in a local line first and copied
            // over with wide moves, it cost a store-forwarding stall per message: the
            // wide loads read back the narrow stores just made.)
            debug_assert!(rec as usize <= room);
            let h = SHORT_ENVELOPE_BYTES + header.len();
            let lens = u32::from(header.len() as u16) | u32::from(payload.len() as u16) << 16;
            // SAFETY: `rec <= 64` with a short envelope (a payload below 4096 bytes is
            // never padded), so `h + payload.len() <= rec`; `[pos, pos + rec)` is
            // unpublished space owned by the producer that does not wrap (`rec <=
            // room`), and the caller's buffers are distinct from the ring. The stamp word
            // (bytes 0..4) is left alone.
            unsafe {
                env.add(4).cast::<u32>().write_unaligned(lens.to_le());
                crate::copy_bytes(header.as_ptr(), env.add(SHORT_ENVELOPE_BYTES), header.len());
                crate::copy_bytes(payload.as_ptr(), env.add(h), payload.len());
            }
        } else {
            self.write_record(pos, env, env_bytes, header, pad, payload);
        }
        self.publish(pos, rec);
        if self.blocked {
            self.blocked = false;
            self.ring.waiting().store(0, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// Publish a skip slot at the tail (room checked by the caller): the consumer steps
    /// over it.
    fn write_skip(&mut self) {
        let pos = self.tail;
        let (env, _) = self.ring.at(pos);
        let mut e = [0u8; SHORT_ENVELOPE_BYTES];
        e[6..8].copy_from_slice(&SKIP_MARK.to_le_bytes());
        // SAFETY: `[pos, pos + 32)` is unpublished space owned by the producer (the
        // caller checked the room), 32-aligned, so it does not wrap; the stamp word is
        // left alone.
        unsafe { ptr::copy_nonoverlapping(e.as_ptr().add(4), env.add(4), 4) };
        self.publish(pos, RECORD_ALIGN as u64);
    }

    /// Clear the stamp of the slot after the `rec` bytes written at `pos`, then publish
    /// them (module doc), and move the tail past them.
    #[inline]
    fn publish(&mut self, pos: u64, rec: u64) {
        self.ring.stamp_at(pos + rec).store(0, Ordering::Relaxed);
        self.ring.stamp_at(pos).store(stamp(pos), Ordering::Release);
        self.tail = pos + rec;
    }

    /// Write the envelope of `env_bytes` (all but the stamp), header and payload of a
    /// record of more than one line, or one that wraps, at `pos` (`env` points there).
    fn write_record(
        &mut self,
        pos: u64,
        env: *mut u8,
        env_bytes: usize,
        header: &[u8],
        pad: usize,
        payload: &[u8],
    ) {
        // The envelope's fields are stored as whole words in place (built in a local
        // array and copied, they cost a store-forwarding stall).
        let word = |lo: u16, hi: u16| (u32::from(lo) | u32::from(hi) << 16).to_le();
        let short = env_bytes == SHORT_ENVELOPE_BYTES;
        let plen16 = if short {
            payload.len() as u16
        } else {
            LONG_MARK
        };
        // SAFETY: the caller checked that `[tail, tail + rec + 32)` is unpublished space
        // owned by the producer. The envelope never wraps (32-aligned record start, at
        // most 16 bytes); header and payload are copied in at most two pieces each,
        // shorter than `size`. The stamp word (bytes 0..4) is left alone.
        unsafe {
            env.add(4)
                .cast::<u32>()
                .write_unaligned(word(header.len() as u16, plen16));
            if !short {
                env.add(8)
                    .cast::<u32>()
                    .write_unaligned(word(pad as u16, 0));
                env.add(12)
                    .cast::<u32>()
                    .write_unaligned((payload.len() as u32).to_le());
            }
            self.ring.copy_in(pos + env_bytes as u64, header);
            self.ring
                .copy_in(pos + (env_bytes + header.len() + pad) as u64, payload);
        }
    }

    /// Slow path of `try_write`: refresh the consumer index, and announce that we wait
    /// when `need` bytes are still not free. Returns whether they are free now.
    #[cold]
    fn make_room(&mut self, need: u64) -> Result<bool, String> {
        self.refresh_head()?;
        if self.free() >= need {
            return Ok(true);
        }
        if !self.blocked {
            // Announce, then look once more (module doc, "Waking a blocked sender").
            self.blocked = true;
            self.ring.waiting().store(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            self.refresh_head()?;
        }
        Ok(self.free() >= need)
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

/// A private copy of a record's header, filled by [`Consumer::peek`].
pub(super) struct HeaderCopy {
    bytes: Box<[u8; MAX_HEADER_BYTES]>,
    len: usize,
}

impl HeaderCopy {
    pub(super) fn new() -> HeaderCopy {
        HeaderCopy {
            bytes: Box::new([0; MAX_HEADER_BYTES]),
            len: 0,
        }
    }

    /// The header bytes of the last record peeked.
    #[inline]
    pub(super) fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl std::fmt::Debug for HeaderCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeaderCopy({} bytes)", self.len)
    }
}

/// A published record at the consumer's head, checked: where its header and payload
/// lie in the ring, and how many bytes it occupies.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record {
    /// Ring index of the first payload byte.
    payload_pos: u64,
    /// Payload bytes.
    payload_len: usize,
    /// Bytes of the record, envelope and padding included.
    pub(super) rec_bytes: u64,
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

    /// Cheap check: has the producer published a record we have not read (or written
    /// something that is not a valid stamp, which [`Consumer::peek`] reports)?
    #[inline]
    pub(super) fn has_data(&self) -> bool {
        self.ring.stamp_at(self.head).load(Ordering::Acquire) != 0
    }

    /// After freeing space: is the producer blocked on a full ring (so its doorbell
    /// must be rung)? Module doc, "Waking a blocked sender".
    pub(super) fn producer_waiting(&self) -> bool {
        fence(Ordering::SeqCst);
        self.ring.waiting().load(Ordering::Relaxed) != 0
    }

    /// The record at our head, if one is published: its header is copied into
    /// `header` (cleared first), its payload left in place. Call [`Consumer::consume`]
    /// with it when done; until then the record stays where it is.
    ///
    /// # Errors
    /// An invalid stamp or envelope (module doc, "Untrusted input"): the reason, naming
    /// the numbers. The ring must not be read again.
    #[inline]
    pub(super) fn peek(&mut self, header: &mut HeaderCopy) -> Result<Option<Record>, String> {
        let mut pos = self.head;
        let Some(mut e) = self.published(pos)? else {
            return Ok(None);
        };
        if is_skip(&e) {
            if pos.is_multiple_of(LINE as u64) {
                return Err(format!(
                    "skip slot at the start of a cache line (ring index {pos})"
                ));
            }
            // Step over a skip slot (freed at once, as `consume` frees a record).
            pos += RECORD_ALIGN as u64;
            self.head = pos;
            self.ring.head().store(pos, Ordering::Release);
            let Some(next) = self.published(pos)? else {
                return Ok(None);
            };
            if is_skip(&next) {
                return Err(format!("two skip slots in a row (ring index {pos})"));
            }
            e = next;
        }
        let size = self.ring.size;
        let (env, room) = self.ring.at(pos);
        let header_len = u16::from_le_bytes([e[4], e[5]]) as usize;
        let short_len = u16::from_le_bytes([e[6], e[7]]);
        let (env_bytes, pad, payload_len) = if short_len != LONG_MARK {
            if usize::from(short_len) >= ALIGN_PAYLOAD_MIN {
                return Err(format!(
                    "short envelope with a payload of {short_len} bytes (short ones carry \
                     less than {ALIGN_PAYLOAD_MIN}) at ring index {pos}"
                ));
            }
            (SHORT_ENVELOPE_BYTES, 0, u64::from(short_len))
        } else {
            // SAFETY: as above, the second half of a long envelope.
            unsafe {
                ptr::copy_nonoverlapping(
                    env.add(SHORT_ENVELOPE_BYTES),
                    e.as_mut_ptr().add(SHORT_ENVELOPE_BYTES),
                    LONG_ENVELOPE_BYTES - SHORT_ENVELOPE_BYTES,
                )
            };
            let pad = u16::from_le_bytes([e[8], e[9]]) as usize;
            let zero = u16::from_le_bytes([e[10], e[11]]);
            if zero != 0 {
                return Err(format!(
                    "long envelope with {zero:#x} in its reserved field at ring index {pos}"
                ));
            }
            let len = u32::from_le_bytes([e[12], e[13], e[14], e[15]]);
            (LONG_ENVELOPE_BYTES, pad, u64::from(len))
        };
        if pad >= LINE {
            return Err(format!(
                "payload padding of {pad} bytes (at most 63) at ring index {pos}"
            ));
        }
        if header_len > MAX_HEADER_BYTES {
            return Err(format!(
                "header of {header_len} bytes exceeds the limit of {MAX_HEADER_BYTES}"
            ));
        }
        let max_payload = max_payload(size as usize) as u64;
        if payload_len > max_payload {
            return Err(format!(
                "payload of {payload_len} bytes exceeds the frame limit of {max_payload} (ring {size} bytes)"
            ));
        }
        // Both lengths are bounded now, so this cannot overflow, and the record is
        // shorter than the ring.
        let rec_bytes = record_bytes(env_bytes, header_len, pad, payload_len as usize);
        header.len = header_len;
        if header_len <= SHORT_HEADER_COPY {
            // A short header (the protocol's short eager one): copy 16 bytes after the
            // envelope at once (a fixed-size copy is two moves). They lie in this record,
            // which has at least 32 bytes, and in the ring (a 32-aligned slot never
            // wraps).
            debug_assert!(room >= RECORD_ALIGN);
            // SAFETY: `[pos, pos + 32)` is published, and `env_bytes + 16 <= 32`.
            unsafe {
                ptr::copy_nonoverlapping(
                    env.add(env_bytes),
                    header.bytes.as_mut_ptr(),
                    SHORT_HEADER_COPY,
                )
            };
        } else {
            let [(a, al), (b, bl)] = self.ring.pieces(pos + env_bytes as u64, header_len);
            // SAFETY: the pieces lie in the data area and are published; `header` is ours
            // and holds MAX_HEADER_BYTES >= al + bl bytes.
            unsafe {
                ptr::copy_nonoverlapping(a, header.bytes.as_mut_ptr(), al);
                ptr::copy_nonoverlapping(b, header.bytes.as_mut_ptr().add(al), bl);
            }
        }
        if rec_bytes > LINE as u64 {
            self.prefetch_rest(pos, rec_bytes);
        }
        Ok(Some(Record {
            payload_pos: pos + (env_bytes + header_len + pad) as u64,
            payload_len: payload_len as usize,
            rec_bytes,
        }))
    }

    /// Ask for the lines of a record after its first (up to [`PREFETCH_LINES`]) at once:
    /// they were written by the producer's core, and fetched one by one they would
    /// arrive one miss after another, the first only when the copy reaches it, after
    /// the protocol has matched the message. A hint: no effect on what is read.
    #[inline]
    fn prefetch_rest(&self, pos: u64, rec_bytes: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            // The lines after the one holding `pos` that lie wholly in the record (a last
            // line shared with the next record may still be written by the producer:
            // fetching it early would only move it twice).
            let first = pos & !(LINE as u64 - 1);
            let lines = (pos + rec_bytes - first) / LINE as u64;
            for k in 1..lines.min(PREFETCH_LINES + 1) {
                let (p, _) = self.ring.at(first + k * LINE as u64);
                // SAFETY: a prefetch is a hint that never faults; `p` lies in the data
                // area anyway.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        p.cast::<i8>(),
                    )
                };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (pos, rec_bytes);
    }

    /// The slot at `pos` if published: its short envelope (the first 8 bytes of the
    /// returned buffer, read once; a long envelope's second half is for the caller to
    /// read). `None` while unpublished.
    ///
    /// # Errors
    /// A stamp that is neither 0 nor the one of `pos` (module doc, "Untrusted input").
    #[inline]
    fn published(&self, pos: u64) -> Result<Option<[u8; LONG_ENVELOPE_BYTES]>, String> {
        let s = self.ring.stamp_at(pos).load(Ordering::Acquire);
        if s == 0 {
            return Ok(None);
        }
        if s != stamp(pos) {
            return Err(format!(
                "bad stamp {s:#010x} at ring index {pos} (expected {:#010x})",
                stamp(pos)
            ));
        }
        let (env, _) = self.ring.at(pos);
        let mut e = [0u8; LONG_ENVELOPE_BYTES];
        // SAFETY: the stamp (Acquire) published the slot at `pos`; its first 8 bytes
        // never wrap (32-aligned slot); `e` is a local buffer.
        unsafe { ptr::copy_nonoverlapping(env, e.as_mut_ptr(), SHORT_ENVELOPE_BYTES) };
        Ok(Some(e))
    }

    /// Where the payload of `rec` (from [`Consumer::peek`], not consumed yet) lies: at
    /// most two pieces `(pointer, bytes)` in the ring, the second empty unless it wraps.
    #[inline]
    pub(super) fn payload(&self, rec: &Record) -> [(*const u8, usize); 2] {
        self.ring.pieces(rec.payload_pos, rec.payload_len)
    }

    /// Free the record `peek` returned (its bytes may be overwritten from now on).
    #[inline]
    pub(super) fn consume(&mut self, rec: &Record) {
        self.head += rec.rec_bytes;
        // Free the space at once: a producer waiting for room may go on.
        self.ring.head().store(self.head, Ordering::Release);
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
        let mut h = HeaderCopy::new();
        while let Some(r) = c.peek(&mut h)? {
            let mut p = Vec::new();
            for (ptr, len) in c.payload(&r) {
                // SAFETY: published bytes of the record, before consume.
                p.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr, len) });
            }
            out.push((h.as_slice().to_vec(), p));
            c.consume(&r);
        }
        Ok(out)
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn record_sizes() {
        let rec = |h: usize, pad: usize, p: usize| record_bytes(envelope_bytes(p), h, pad, p);
        assert_eq!(rec(0, 0, 0), 32);
        assert_eq!(rec(24, 0, 0), 32);
        assert_eq!(rec(24, 0, 1), 64);
        assert_eq!(
            rec(16, 0, 8),
            32,
            "an 8-byte eager message with its short header is half a line"
        );
        assert_eq!(
            rec(16, 0, 40),
            64,
            "a 40-byte eager message with its short header is one line"
        );
        assert_eq!(rec(16, 0, 4095), 4128, "short envelope below 4096 bytes");
        assert_eq!(rec(16, 0, 4096), 4128, "long envelope from 4096 bytes");
        assert_eq!(rec(MAX_HEADER_BYTES, 0, max_payload(16 << 10)), 8224);
        assert!(rec(MAX_HEADER_BYTES, 63, max_payload(16 << 10)) + RESERVE_BYTES < 16 << 10);
        assert_eq!(
            record_bytes(usize::MAX, usize::MAX, usize::MAX, usize::MAX) % 32,
            0
        );
        // Small payloads are never padded; large ones land at their source's offset.
        let buf = vec![0u8; 8192];
        assert_eq!(payload_pad(0, 40, buf.as_ptr(), 4095), 0);
        for (pos, hl) in [(0u64, 0usize), (64, 40), (96, 12), (4096, 63), (32, 16)] {
            for off in [0usize, 1, 16, 63] {
                let src = buf[off..].as_ptr();
                let pad = payload_pad(pos, hl, src, 4096);
                assert!(pad < 64);
                assert_eq!(
                    (pos as usize + LONG_ENVELOPE_BYTES + hl + pad) % 64,
                    src as usize % 64,
                    "pos {pos} header {hl} offset {off}"
                );
            }
        }
    }

    #[test]
    fn stamps_are_never_zero_and_differ_between_laps() {
        for size in [16u64 << 10, 1 << 20, 1 << 30] {
            for pos in [
                0u64,
                64,
                size - 64,
                5 * size,
                (1 << 38) - 64,
                1 << 38,
                u64::MAX - 63,
            ] {
                assert_ne!(stamp(pos), 0);
                assert_ne!(stamp(pos), stamp(pos.wrapping_add(size)));
            }
        }
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

    /// Payload bytes of an earlier lap that look exactly like the stamp the consumer
    /// expects next must never be taken for a record: the producer cleared that slot.
    #[test]
    fn stale_payload_that_looks_like_a_stamp_is_not_a_record() {
        let size = 16usize << 10;
        let (_mem, ring) = heap_ring(size);
        let mut p = Producer::new(ring);
        let mut c = Consumer::new(ring);
        // Lap 1: one big frame whose payload holds, at every 32-byte slot, the stamp that
        // slot will have one lap later.
        let mut pl = vec![0u8; 4000];
        for k in 1..pl.len() / 32 {
            let pos = size as u64 + k as u64 * 32;
            let at = 32 * k - 8; // short envelope 8 + header 0: payload starts at byte 8
            if at + 4 <= pl.len() {
                pl[at..at + 4].copy_from_slice(&stamp(pos).to_le_bytes());
            }
        }
        assert!(p.try_write(&[], &pl).unwrap());
        assert_eq!(drain(&mut c).unwrap().len(), 1);
        // Fill up to exactly one lap with small frames and drain them.
        while p.tail < size as u64 {
            assert!(p.try_write(&[], &[]).unwrap());
            drain(&mut c).unwrap();
        }
        // Lap 2: one small frame at index `size`; the next slot lies where lap 1's payload
        // put a stamp-lookalike, but it was cleared.
        assert!(p.try_write(b"h", b"x").unwrap());
        let got = drain(&mut c).unwrap();
        assert_eq!(got, vec![(b"h".to_vec(), b"x".to_vec())]);
        assert!(!c.has_data());
    }

    /// A record of two slots never straddles two cache lines: where it would start in
    /// the middle of one, a skip slot goes first, which the consumer steps over (also
    /// when the record after it is not published yet).
    #[test]
    fn two_slot_records_start_on_a_line() {
        let (_mem, ring) = heap_ring(16 << 10);
        let mut p = Producer::new(ring);
        let mut c = Consumer::new(ring);
        assert!(p.try_write(b"h", b"one slot").unwrap());
        assert_eq!(p.tail, 32);
        assert!(p.try_write(&[7; 16], &[9; 40]).unwrap());
        assert_eq!(p.tail, 128, "skip slot at 32, record at 64");
        assert!(p.try_write(&[7; 16], &[8; 40]).unwrap());
        assert_eq!(p.tail, 192, "on a line already: no skip");
        let got = drain(&mut c).unwrap();
        assert_eq!(
            got,
            vec![
                (b"h".to_vec(), b"one slot".to_vec()),
                (vec![7; 16], vec![9; 40]),
                (vec![7; 16], vec![8; 40]),
            ]
        );
        assert_eq!(c.head, 192);
        // A skip published alone: stepped over, nothing returned, then the record.
        assert!(p.try_write(b"", b"").unwrap());
        p.write_skip();
        let mut h = HeaderCopy::new();
        let r = c.peek(&mut h).unwrap().unwrap();
        c.consume(&r);
        assert!(c.peek(&mut h).unwrap().is_none());
        assert_eq!(c.head, 256, "the skip slot was freed");
        assert!(p.try_write(b"x", b"y").unwrap());
        assert_eq!(drain(&mut c).unwrap(), vec![(b"x".to_vec(), b"y".to_vec())]);
    }

    #[test]
    fn full_ring_says_not_now_and_frees_on_read() {
        let (_mem, ring) = heap_ring(16 << 10);
        let mut p = Producer::new(ring);
        let mut c = Consumer::new(ring);
        // Three 4 KiB records and one of 4 KiB - 32 leave exactly the reserve free.
        let pl = vec![5u8; 4096 - 8];
        for _ in 0..3 {
            assert!(p.try_write(&[], &pl).unwrap());
        }
        assert!(p.try_write(&[], &pl[..4096 - 32 - 8]).unwrap());
        assert!(!p.try_write(&[], &[]).unwrap(), "full but for the reserve");
        assert!(c.producer_waiting() && !p.room_freed());
        assert_eq!(drain(&mut c).unwrap().len(), 4);
        assert!(p.room_freed() && c.producer_waiting());
        assert!(p.try_write(&[], &[]).unwrap());
        assert!(!c.producer_waiting() && !p.room_freed());
        assert!(p.try_write(&[], &vec![1; 16 << 10]).is_err(), "never fits");
    }

    fn write_raw(ring: &RingPtr, pos: u64, bytes: &[u8]) {
        // SAFETY: test-only; nobody else uses the ring.
        unsafe { ring.copy_in(pos, bytes) };
    }

    /// A long envelope (`pad`, `zero`: its reserved field, `p`: payload bytes).
    fn long_envelope(stamp: u32, h: u16, pad: u16, zero: u16, p: u32) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&stamp.to_le_bytes());
        v.extend_from_slice(&h.to_le_bytes());
        v.extend_from_slice(&LONG_MARK.to_le_bytes());
        v.extend_from_slice(&pad.to_le_bytes());
        v.extend_from_slice(&zero.to_le_bytes());
        v.extend_from_slice(&p.to_le_bytes());
        v
    }

    /// A short envelope (`p`: payload bytes).
    fn short_envelope(stamp: u32, h: u16, p: u16) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&stamp.to_le_bytes());
        v.extend_from_slice(&h.to_le_bytes());
        v.extend_from_slice(&p.to_le_bytes());
        v
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (long_envelope(stamp(32), 0, 0, 0, u32::MAX), "payload"),
            (short_envelope(stamp(32), 0, 0xfffd), "payload"),
            (long_envelope(stamp(32), u16::MAX, 0, 0, 0), "header"),
            (short_envelope(stamp(32), 4097, 0), "header"),
            (long_envelope(stamp(32), 0, 64, 0, 4096), "padding"),
            (long_envelope(stamp(32), 0, 0, 1, 4096), "reserved"),
            (short_envelope(0x1234_5678, 0, 0), "stamp"),
            // A skip mark with a header is no skip, and a reserved length.
            (short_envelope(stamp(32), 1, SKIP_MARK), "payload"),
            (short_envelope(stamp(32), 0, 4096), "payload"),
            // A skip right after a skip.
            (
                [
                    short_envelope(stamp(32), 0, SKIP_MARK),
                    vec![0; 24],
                    short_envelope(stamp(64), 0, SKIP_MARK),
                ]
                .concat(),
                "two skip",
            ),
            (short_envelope(stamp(32 + (16 << 10)), 0, 0), "stamp"),
        ];
        for (env, want) in cases {
            let (_mem, ring) = heap_ring(16 << 10);
            let mut p = Producer::new(ring);
            let mut c = Consumer::new(ring);
            assert!(p.try_write(b"ok", b"first").unwrap());
            write_raw(&ring, 32, &env);
            let mut h = HeaderCopy::new();
            let first = c.peek(&mut h).unwrap().unwrap();
            assert_eq!(h.as_slice(), b"ok");
            c.consume(&first);
            let err = c.peek(&mut h).unwrap_err();
            assert!(err.contains(want), "{err:?} should mention {want}");
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
