//! One established connection: framing, the out-queue and the input parser.
//!
//! # Envelope
//! Every frame is `[u32 header_len LE][u32 flags = 0][u64 payload_len LE]`, then the
//! header bytes, then the payload bytes. The receiver checks `header_len <=
//! MAX_HEADER_BYTES`, `payload_len <= max_frame_payload_bytes` and `flags == 0` before
//! allocating anything, so a garbled or hostile stream costs at most one frame's worth of
//! memory (bounded by the caps) and never panics.
//!
//! # Output
//! `send` writes directly with one gather `sendmsg` (envelope, header, payload) when the
//! out-queue is empty, and copies only the unwritten rest into the queue; otherwise it
//! first tries to drain the queue, then writes or queues. Frames stay in order because a
//! frame is only written directly when nothing is queued before it.
//!
//! # Input
//! Reads go into a 256 KiB per-connection buffer (allocated on first use, reused), from
//! which complete frames are cut. A frame whose payload is at least
//! [`DIRECT_READ_MIN_BYTES`] and is not yet complete is read into a place of its own:
//! with placement on (`TcpTransport::set_place_payloads`) the connection stops after
//! its header until the caller names the place (its final memory, e.g. the receive
//! buffer of a rendezvous: no copy at all, and no allocation), otherwise a `Vec` of the
//! payload's size; the rest of the payload is read straight into it.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};

use super::sys;
use crate::{Event, MAX_HEADER_BYTES, SendOutcome};

/// Envelope size in bytes.
pub(crate) const ENVELOPE_LEN: usize = 16;
/// Size of the per-connection input buffer and of one read, in bytes.
pub(crate) const READ_CHUNK_BYTES: usize = 256 * 1024;
/// Payloads at least this large are read directly into their own `Vec`.
pub(crate) const DIRECT_READ_MIN_BYTES: usize = 32 * 1024;
/// Most bytes read from one connection per `poll`, for fairness between peers (level-
/// triggered readiness brings us back for the rest).
const READ_BUDGET_BYTES: usize = 16 << 20;
/// Most iovecs per gather write when draining the queue.
const MAX_IOV: usize = 64;

// Every frame that is not read directly must fit in the input buffer.
const _: () = assert!(ENVELOPE_LEN + MAX_HEADER_BYTES + DIRECT_READ_MIN_BYTES <= READ_CHUNK_BYTES);

/// Encode an envelope.
pub(crate) fn envelope(header_len: usize, payload_len: usize) -> [u8; ENVELOPE_LEN] {
    let mut e = [0u8; ENVELOPE_LEN];
    e[0..4].copy_from_slice(&(header_len as u32).to_le_bytes());
    // e[4..8]: flags = 0
    e[8..16].copy_from_slice(&(payload_len as u64).to_le_bytes());
    e
}

/// Decode and check an envelope: `(header_len, payload_len)` or what is wrong.
pub(crate) fn check_envelope(
    e: &[u8; ENVELOPE_LEN],
    max_payload: usize,
) -> Result<(usize, usize), String> {
    let header_len = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
    let flags = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
    let mut p = [0u8; 8];
    p.copy_from_slice(&e[8..16]);
    let payload_len = u64::from_le_bytes(p);
    if flags != 0 {
        return Err(format!(
            "envelope flags {flags:#x} are not 0 (header_len {header_len}, payload_len {payload_len}): garbled stream"
        ));
    }
    if header_len as usize > MAX_HEADER_BYTES {
        return Err(format!(
            "header_len {header_len} exceeds MAX_HEADER_BYTES {MAX_HEADER_BYTES}"
        ));
    }
    if payload_len > max_payload as u64 {
        return Err(format!(
            "payload_len {payload_len} exceeds max_frame_payload_bytes {max_payload}"
        ));
    }
    Ok((header_len as usize, payload_len as usize))
}

/// Why a connection stopped.
#[derive(Debug)]
pub(crate) enum ConnError {
    /// Orderly end of stream from the peer (`Some` if it cut a frame short).
    Closed(Option<String>),
    /// An OS error while reading, or from epoll (reset, ...).
    Io(io::Error),
    /// An OS error while writing (`EPIPE`, reset, ...): frames that arrived before it
    /// may still be readable and are delivered first.
    Write(io::Error),
    /// The peer sent an invalid envelope.
    Malformed(String),
}

// A big frame being read straight into its place.
struct Partial {
    header: Vec<u8>,
    len: usize,
    dest: Dest,
}

// Where a big frame's payload goes: not decided yet (the bytes read so far), its own
// Vec, or memory the caller named (`got` bytes written).
enum Dest {
    Undecided(Vec<u8>),
    Owned(Vec<u8>),
    Placed { ptr: *mut u8, got: usize },
}

// SAFETY: `Placed` memory is owned by a pending request of the caller, which keeps it
// valid and untouched until the frame is delivered; the connection is driven by one
// thread at a time.
unsafe impl Send for Dest {}

/// One established, nonblocking connection to one peer.
pub(crate) struct Conn {
    stream: std::net::TcpStream,
    /// Queued output: whole chunks; `out_head` bytes of the front one are written.
    out: VecDeque<Vec<u8>>,
    out_head: usize,
    out_bytes: usize,
    /// Input buffer (empty until the first read); valid bytes are `inbuf[start..end]`.
    inbuf: Vec<u8>,
    start: usize,
    end: usize,
    partial: Option<Partial>,
    /// Big payloads wait for a place (module doc, "Input").
    pub(crate) place: bool,
    /// Written-out queue chunks kept for the next frame's unwritten rest: a fresh
    /// multi-megabyte `Vec` per frame costs a page fault per 4 KiB.
    spare: Vec<Vec<u8>>,
}

/// Queue chunks kept for reuse, and the largest one kept.
const SPARE_CHUNKS: usize = 2;
const SPARE_MAX_BYTES: usize = 8 << 20;

impl Conn {
    pub(crate) fn new(stream: std::net::TcpStream) -> Self {
        Conn {
            stream,
            out: VecDeque::new(),
            out_head: 0,
            out_bytes: 0,
            inbuf: Vec::new(),
            start: 0,
            end: 0,
            partial: None,
            place: false,
            spare: Vec::new(),
        }
    }

    /// The header and payload length of a big frame waiting for its place.
    pub(crate) fn undecided(&self) -> Option<(&[u8], usize)> {
        match &self.partial {
            Some(Partial {
                header,
                len,
                dest: Dest::Undecided(_),
            }) => Some((header, *len)),
            _ => None,
        }
    }

    /// Name the place of the waiting frame's payload: `dst` (the frame is then delivered
    /// as [`Event::RecvPlaced`]), or `None` for a `Vec` of its own ([`Event::Recv`]).
    ///
    /// # Safety
    /// `dst` (if given) is valid for writes of the payload's length and nothing else
    /// touches it until the frame is delivered or the connection fails.
    pub(crate) unsafe fn decide(&mut self, dst: Option<*mut u8>) {
        let Some(p) = self.partial.as_mut() else {
            return;
        };
        let Dest::Undecided(prefix) = &mut p.dest else {
            return;
        };
        let prefix = std::mem::take(prefix);
        p.dest = match dst {
            Some(ptr) => {
                // SAFETY: `prefix.len() <= len` and the caller's contract covers `len`
                // bytes at `ptr`.
                unsafe { std::ptr::copy_nonoverlapping(prefix.as_ptr(), ptr, prefix.len()) };
                Dest::Placed {
                    ptr,
                    got: prefix.len(),
                }
            }
            None => {
                let mut v = prefix;
                v.reserve_exact(p.len - v.len());
                Dest::Owned(v)
            }
        };
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Bytes waiting in the out-queue.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.out_bytes
    }

    /// Send or queue one frame (module doc). `Busy` if `high_water` bytes are queued.
    pub(crate) fn send(
        &mut self,
        header: &[u8],
        payload: &[u8],
        high_water: usize,
    ) -> io::Result<SendOutcome> {
        if self.out_bytes >= high_water {
            // Maybe the socket drained since the last poll.
            self.flush()?;
            if self.out_bytes >= high_water {
                return Ok(SendOutcome::Busy);
            }
        }
        let env = envelope(header.len(), payload.len());
        let parts = [&env[..], header, payload];
        let total = ENVELOPE_LEN + header.len() + payload.len();
        if !self.out.is_empty() {
            self.flush()?;
        }
        let written = if self.out.is_empty() {
            let iov = [
                IoSlice::new(parts[0]),
                IoSlice::new(parts[1]),
                IoSlice::new(parts[2]),
            ];
            match sys::send_vectored(self.fd(), &iov) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) => return Err(e),
            }
        } else {
            0
        };
        if written < total {
            let mut rest = match self
                .spare
                .iter()
                .position(|v| v.capacity() >= total - written)
            {
                Some(i) => self.spare.swap_remove(i),
                None => Vec::with_capacity(total - written),
            };
            rest.clear();
            let mut skip = written;
            for p in parts {
                if skip >= p.len() {
                    skip -= p.len();
                } else {
                    rest.extend_from_slice(&p[skip..]);
                    skip = 0;
                }
            }
            self.out_bytes += rest.len();
            self.out.push_back(rest);
        }
        Ok(SendOutcome::Sent)
    }

    /// Append already framed bytes (frames queued before the connection existed) to
    /// the out-queue; [`Conn::flush`] writes them.
    pub(crate) fn enqueue(&mut self, bytes: Vec<u8>) {
        if !bytes.is_empty() {
            self.out_bytes += bytes.len();
            self.out.push_back(bytes);
        }
    }

    /// Write queued bytes until the queue is empty or the socket is full. Returns the
    /// number of bytes written.
    pub(crate) fn flush(&mut self) -> io::Result<usize> {
        let mut moved = 0;
        while !self.out.is_empty() {
            let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
            let mut n_iov = 0;
            for (i, chunk) in self.out.iter().take(MAX_IOV).enumerate() {
                let from = if i == 0 { self.out_head } else { 0 };
                iov[i] = IoSlice::new(&chunk[from..]);
                n_iov += 1;
            }
            let n = match sys::send_vectored(self.fd(), &iov[..n_iov]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            };
            moved += n;
            self.out_bytes -= n;
            let mut left = n;
            while left > 0 {
                let Some(front) = self.out.front() else { break };
                let avail = front.len() - self.out_head;
                if left >= avail {
                    left -= avail;
                    if let Some(done) = self.out.pop_front()
                        && self.spare.len() < SPARE_CHUNKS
                        && done.capacity() <= SPARE_MAX_BYTES
                    {
                        self.spare.push(done);
                    }
                    self.out_head = 0;
                } else {
                    self.out_head += left;
                    left = 0;
                }
            }
            if n == 0 {
                break;
            }
        }
        Ok(moved)
    }

    /// Read what is available (up to a per-call budget), appending every complete frame
    /// to `events`. Returns the bytes read.
    ///
    /// # Errors
    /// The connection is unusable afterwards; frames before the error were delivered.
    pub(crate) fn read_frames(
        &mut self,
        peer: u32,
        max_payload: usize,
        events: &mut Vec<Event>,
    ) -> Result<usize, ConnError> {
        let mut total = 0;
        while total < READ_BUDGET_BYTES {
            if let Some(p) = &mut self.partial {
                let fd = self.stream.as_raw_fd();
                let (have, res) = match &mut p.dest {
                    // Wait until the caller names the place.
                    Dest::Undecided(_) => return Ok(total),
                    Dest::Owned(v) => {
                        let want = p.len - v.len();
                        (v.len(), (want > 0).then(|| sys::recv_append(fd, v, want)))
                    }
                    Dest::Placed { ptr, got } => {
                        let want = p.len - *got;
                        // SAFETY: `decide`'s contract: `len` bytes at `ptr` are ours.
                        let r =
                            (want > 0).then(|| unsafe { sys::recv_raw(fd, ptr.add(*got), want) });
                        if let Some(Ok(n)) = r {
                            *got += n;
                        }
                        (*got, r)
                    }
                };
                let want = p.len - have;
                let n = match res {
                    None => 0,
                    Some(Ok(0)) => {
                        return Err(ConnError::Closed(Some(format!(
                            "in the middle of a frame ({have} of {} payload bytes)",
                            p.len
                        ))));
                    }
                    Some(Ok(n)) => n,
                    Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
                    Some(Err(e)) => return Err(ConnError::Io(e)),
                };
                total += n;
                let done = match &p.dest {
                    Dest::Owned(v) => v.len() == p.len,
                    Dest::Placed { got, .. } => *got == p.len,
                    Dest::Undecided(_) => false,
                };
                if done {
                    if let Some(p) = self.partial.take() {
                        events.push(match p.dest {
                            Dest::Owned(payload) => Event::Recv {
                                peer,
                                header: p.header,
                                payload,
                            },
                            _ => Event::RecvPlaced {
                                peer,
                                header: p.header,
                                len: p.len,
                            },
                        });
                    }
                } else if n < want {
                    // Drained for now; level-triggered readiness brings us back.
                    return Ok(total);
                }
                continue;
            }
            if self.inbuf.is_empty() {
                self.inbuf = vec![0; READ_CHUNK_BYTES];
            }
            // Make room: everything left is less than one (non-direct) frame.
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            } else if READ_CHUNK_BYTES - self.end < READ_CHUNK_BYTES / 4 {
                self.inbuf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let space = READ_CHUNK_BYTES - self.end;
            if space == 0 {
                // Unreachable: every incomplete frame that is not read directly fits in
                // the buffer once compacted. Fail the connection rather than misread.
                return Err(ConnError::Malformed(
                    "internal: input buffer full without a complete frame".into(),
                ));
            }
            let n = match io::Read::read(&mut &self.stream, &mut self.inbuf[self.end..]) {
                Ok(0) => {
                    let cut = (self.end > self.start).then(|| {
                        format!(
                            "with {} bytes of an unfinished frame",
                            self.end - self.start
                        )
                    });
                    return Err(ConnError::Closed(cut));
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ConnError::Io(e)),
            };
            total += n;
            self.end += n;
            self.cut_frames(peer, max_payload, events)
                .map_err(ConnError::Malformed)?;
            if n < space && self.partial.is_none() {
                return Ok(total);
            }
        }
        Ok(total)
    }

    /// Cut every complete frame out of `inbuf[start..end]`; start a direct read for a big
    /// incomplete one.
    fn cut_frames(
        &mut self,
        peer: u32,
        max_payload: usize,
        events: &mut Vec<Event>,
    ) -> Result<(), String> {
        while self.end - self.start >= ENVELOPE_LEN {
            let s = self.start;
            let mut env = [0u8; ENVELOPE_LEN];
            env.copy_from_slice(&self.inbuf[s..s + ENVELOPE_LEN]);
            let (hl, pl) = check_envelope(&env, max_payload)?;
            let avail = self.end - s;
            let h0 = s + ENVELOPE_LEN;
            let p0 = h0 + hl;
            if avail >= ENVELOPE_LEN + hl + pl {
                events.push(Event::Recv {
                    peer,
                    header: self.inbuf[h0..p0].to_vec(),
                    payload: self.inbuf[p0..p0 + pl].to_vec(),
                });
                self.start = p0 + pl;
            } else if pl >= DIRECT_READ_MIN_BYTES && avail >= ENVELOPE_LEN + hl {
                let prefix = self.inbuf[p0..self.end].to_vec();
                let dest = if self.place {
                    Dest::Undecided(prefix)
                } else {
                    let mut payload = Vec::with_capacity(pl);
                    payload.extend_from_slice(&prefix);
                    Dest::Owned(payload)
                };
                self.partial = Some(Partial {
                    header: self.inbuf[h0..p0].to_vec(),
                    len: pl,
                    dest,
                });
                self.start = self.end;
                break;
            } else {
                // Incomplete: it fits once compacted (see the const assert above).
                if s + ENVELOPE_LEN + hl + pl.min(DIRECT_READ_MIN_BYTES) > READ_CHUNK_BYTES {
                    self.inbuf.copy_within(s..self.end, 0);
                    self.end -= s;
                    self.start = 0;
                }
                break;
            }
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_roundtrip_and_limits() {
        let e = envelope(12, 4 << 20);
        assert_eq!(check_envelope(&e, 4 << 20), Ok((12, 4 << 20)));
        let err = check_envelope(&envelope(12, (4 << 20) + 1), 4 << 20).unwrap_err();
        assert!(
            err.contains("payload_len 4194305 exceeds max_frame_payload_bytes 4194304"),
            "{err}"
        );
        let err = check_envelope(&envelope(MAX_HEADER_BYTES + 1, 0), 4 << 20).unwrap_err();
        assert!(err.contains("header_len 4097"), "{err}");
        let mut e = envelope(0, 0);
        e[5] = 1;
        assert!(check_envelope(&e, 4 << 20).unwrap_err().contains("flags"));
        // Absurd values never overflow.
        assert!(check_envelope(&[0xff; ENVELOPE_LEN], usize::MAX).is_err());
    }
}
