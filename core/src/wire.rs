//! Wire format of protocol frames (sans-IO: bytes in, bytes out), version 5.
//!
//! Every frame header but the short eager one (below) starts with a 16-byte common
//! prefix, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..2 | magic `0x5752` ("RW") |
//! | 2 | version (4) |
//! | 3 | kind ([`FrameKind`]) |
//! | 4..6 | header length in bytes, prefix included |
//! | 6..8 | flags (0) |
//! | 8..16 | payload length in bytes |
//!
//! followed by the kind's fields. The payload travels after the header (the transport
//! delivers both). Frame kinds are named after the protocol steps (compare Open MPI's
//! `pml_ob1_hdr.h`): `Eager` carries a whole small message; `Rts` (request to send)
//! announces a large one; `Cts` (clear to send) answers it with the receiver's request
//! id and how many bytes it accepts; `Data` carries a chunk at an offset; `Fin` ends a
//! pull-mode rendezvous. `Rts` and `Cts` carry a [`RemoteMem`] descriptor that has room
//! for a CUDA IPC handle or an RDMA key, so GPU and RDMA paths can use the same frames.
//! In a pull-mode rendezvous a waiting sender may take a share of the copy: `Help`
//! (sender: "I am waiting"), `Push` (receiver: "write these bytes to this address"),
//! `Pushed` (sender: "done", or "could not"); see `protocol/share.rs`. A send cancelled
//! before its `Rts` matched (MPI_Cancel, MPI 4.1 §3.8.4) asks the receiver to withdraw
//! that `Rts` from its unexpected queue: `Cancel` (sender), answered by `Cancelled`
//! (receiver: "withdrawn", or "it matched already"). A rank whose collective call
//! received a message of the wrong length (the ranks disagree on counts, roots or
//! datatypes) tells every other member of the communicator with `Revoke`: their
//! receives posted on its collective context fail instead of waiting for messages that
//! will never come, and so do their later operations there (see `protocol/revoke.rs`).
//!
//! Eager messages travel with a 16-byte short header instead
//! ([`Frame::short_eager_header`]: "Re", version, context id, tag, sequence number
//! modulo 2^32), which leaves the source rank and the payload length to the transport,
//! as Open MPI's ob1 match header leaves them to its BTL. The receiver restores the
//! same [`Envelope`] as a full [`Frame::Eager`] carries (which it still accepts).
//!
//! Version 2 added `Help`, `Push` and `Pushed`, version 3 `Cancel` and `Cancelled`,
//! version 4 `Revoke`, version 5 the short eager header; a
//! build speaking an older version refuses the frames as an unsupported version (or,
//! for the short eager header, a bad magic number) instead of misreading them.

use std::fmt;

/// Magic number opening every frame header ("RW").
pub const MAGIC: u16 = 0x5752;
/// Wire protocol version.
pub const VERSION: u8 = 5;
/// Size of the common header prefix in bytes.
pub const PREFIX_BYTES: usize = 16;
/// Size of a short eager header in bytes ([`Frame::short_eager_header`]).
pub const SHORT_EAGER_BYTES: usize = 16;
/// First two bytes of a short eager header ("Re"; full headers start with [`MAGIC`],
/// "RW").
const SHORT_MAGIC: [u8; 2] = [0x52, 0x65];
/// Capacity of a [`HeaderBuf`]: at least the largest header this version encodes (an
/// `Rts` with a CUDA IPC descriptor, 157 bytes), in bytes.
pub const MAX_FRAME_HEADER_BYTES: usize = 192;

/// An encoded frame header held inline (no allocation): what [`Frame::header`]
/// returns and what the protocol hands to transports. Dereferences to its bytes.
#[derive(Clone, Copy)]
pub struct HeaderBuf {
    len: u8,
    // Only the first `len` bytes are initialized (no need to clear the rest).
    bytes: [std::mem::MaybeUninit<u8>; MAX_FRAME_HEADER_BYTES],
}

impl HeaderBuf {
    #[inline]
    const fn new() -> Self {
        HeaderBuf {
            len: 0,
            bytes: [std::mem::MaybeUninit::uninit(); MAX_FRAME_HEADER_BYTES],
        }
    }

    /// The short eager header `b` ([`Frame::short_eager_bytes`]) as a header buffer.
    #[inline]
    pub fn from_short(b: [u8; SHORT_EAGER_BYTES]) -> Self {
        let mut h = HeaderBuf::new();
        h.put(&b);
        h
    }

    /// The encoded bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written by `put` (`len <= capacity`).
        unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast(), self.len as usize) }
    }
}

impl std::ops::Deref for HeaderBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for HeaderBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HeaderBuf({:02x?})", self.as_slice())
    }
}

/// Where `Frame::write` puts bytes: a growable vector or an inline [`HeaderBuf`].
trait Sink {
    fn put(&mut self, b: &[u8]);
    fn at(&mut self, i: usize) -> &mut [u8];
    fn pos(&self) -> usize;
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b)
    }
    fn at(&mut self, i: usize) -> &mut [u8] {
        &mut self[i..]
    }
    fn pos(&self) -> usize {
        self.len()
    }
}

impl Sink for HeaderBuf {
    #[inline]
    fn put(&mut self, b: &[u8]) {
        let at = self.len as usize;
        // Every frame of this version fits (`encoded_headers_fit_a_header_buf`); the
        // guard only keeps a future oversized kind from panicking.
        let n = b.len().min(MAX_FRAME_HEADER_BYTES - at);
        // SAFETY: `at + n <= capacity`; `b` is a distinct buffer of at least `n` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), self.bytes.as_mut_ptr().add(at).cast(), n)
        };
        self.len = (at + n) as u8;
    }
    fn at(&mut self, i: usize) -> &mut [u8] {
        let len = self.len as usize;
        // SAFETY: the first `len` bytes are initialized; `i <= len` (callers patch bytes
        // they wrote).
        unsafe {
            std::slice::from_raw_parts_mut(self.bytes.as_mut_ptr().add(i).cast(), len - i.min(len))
        }
    }
    fn pos(&self) -> usize {
        self.len as usize
    }
}

/// Kind of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A whole message inline.
    Eager = 1,
    /// Request to send (rendezvous start).
    Rts = 2,
    /// Clear to send (rendezvous answer).
    Cts = 3,
    /// A chunk of rendezvous data.
    Data = 4,
    /// Finish (pull-mode rendezvous done).
    Fin = 5,
    /// The sender of a pull-mode rendezvous is waiting for it and can copy.
    Help = 6,
    /// The receiver asks the sender to write part of the message itself.
    Push = 7,
    /// The sender has written the part a `Push` asked for (or could not).
    Pushed = 8,
    /// The sender asks the receiver to withdraw the unmatched `Rts` of a cancelled send.
    Cancel = 9,
    /// The receiver's answer to a `Cancel`: withdrawn, or matched already.
    Cancelled = 10,
    /// The collectives of a communicator are revoked (a rank found a mismatch).
    Revoke = 11,
}

/// Matching information of a message (MPI's envelope, MPI 4.1 §3.2.3) plus the
/// per-(source, communicator) sequence number that enforces non-overtaking (§3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// Communicator context id.
    pub ctx: u32,
    /// World rank of the sender.
    pub src: u32,
    /// Message tag.
    pub tag: i32,
    /// Sequence number of this message among those from `src` on `ctx`.
    pub seq: u64,
}

/// Where the sender's or receiver's buffer lives (defined by the transports, which move
/// the bytes; encoded here).
pub use rankwire_transports::RemoteMem;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A whole message; the payload is the message.
    Eager {
        /// Matching information.
        env: Envelope,
    },
    /// Request to send `msg_len` bytes; `sreq` is the sender's request id.
    Rts {
        /// Matching information.
        env: Envelope,
        /// Message length in bytes.
        msg_len: u64,
        /// Sender's request id.
        sreq: u64,
        /// Sender-side buffer descriptor for pull mode.
        mem: RemoteMem,
    },
    /// Clear to send: the receiver accepts `accept_len` bytes into request `rreq`.
    Cts {
        /// Sender's request id (from the Rts).
        sreq: u64,
        /// Receiver's request id.
        rreq: u64,
        /// Bytes the receiver accepts (less than the message when truncating).
        accept_len: u64,
        /// Receiver-side buffer descriptor for push mode.
        mem: RemoteMem,
    },
    /// A chunk of data for receive request `rreq` at byte `offset`.
    Data {
        /// Receiver's request id.
        rreq: u64,
        /// Byte offset of this chunk in the message.
        offset: u64,
    },
    /// End of a pull-mode transfer for sender request `sreq`.
    Fin {
        /// Sender's request id.
        sreq: u64,
    },
    /// Sender → receiver: the sender of pull-mode rendezvous `sreq` is waiting for it to
    /// complete, so it can take a share of the copy ([`Frame::Push`]).
    Help {
        /// Sender's request id.
        sreq: u64,
    },
    /// Receiver → sender: write bytes `offset .. offset + len` of the message of send
    /// request `sreq` to `mem` (the receiver's buffer at that offset, for receive
    /// request `rreq`) yourself; the receiver copies the rest. Answered by
    /// [`Frame::Pushed`].
    Push {
        /// Sender's request id.
        sreq: u64,
        /// Receiver's request id.
        rreq: u64,
        /// First byte of the share, in bytes from the start of the message.
        offset: u64,
        /// Bytes of the share.
        len: u64,
        /// Where to write it (the receiver's memory).
        mem: RemoteMem,
    },
    /// Sender → receiver: the share a [`Frame::Push`] asked for is written (`ok`), or
    /// could not be (the receiver copies it itself).
    Pushed {
        /// Receiver's request id.
        rreq: u64,
        /// Whether the bytes were written.
        ok: bool,
    },
    /// Sender → receiver: send request `sreq` was cancelled; withdraw its `Rts` if no
    /// receive has matched it yet. Answered by [`Frame::Cancelled`].
    Cancel {
        /// Sender's request id (from the Rts).
        sreq: u64,
    },
    /// Receiver → sender: the `Rts` of send request `sreq` was withdrawn (`ok`: the
    /// message will never be received), or was not in the unexpected queue (it matched
    /// already, or is held for ordering: the rendezvous goes on).
    Cancelled {
        /// Sender's request id.
        sreq: u64,
        /// Whether the message was withdrawn.
        ok: bool,
    },
    /// Any rank → the other members of a communicator: a collective call on collective
    /// context `ctx` received a message of the wrong length (the ranks disagree); the
    /// receives posted on `ctx`, its unmatched rendezvous sends and every later
    /// operation on it fail (transfers already matched go on).
    Revoke {
        /// The communicator's collective context id.
        ctx: u32,
    },
}

/// A frame header that could not be decoded. The peer sent garbage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// First two bytes are not [`MAGIC`].
    #[error("bad magic {0:#06x}")]
    BadMagic(u16),
    /// Unknown protocol version.
    #[error("unsupported wire version {0} (this build speaks {VERSION})")]
    BadVersion(u8),
    /// Unknown frame kind byte.
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    /// Header length field disagrees with the kind's layout or the bytes given.
    #[error("header length {declared} invalid for {kind:?} ({available} bytes available)")]
    BadLength {
        /// Kind byte.
        kind: u8,
        /// Declared header length.
        declared: usize,
        /// Bytes available.
        available: usize,
    },
    /// Unknown remote-memory descriptor tag.
    #[error("unknown memory descriptor tag {0}")]
    BadMem(u8),
    /// Flags set that this version does not know.
    #[error("unknown flags {0:#x}")]
    BadFlags(u16),
}

impl Frame {
    /// The frame's kind.
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Eager { .. } => FrameKind::Eager,
            Frame::Rts { .. } => FrameKind::Rts,
            Frame::Cts { .. } => FrameKind::Cts,
            Frame::Data { .. } => FrameKind::Data,
            Frame::Fin { .. } => FrameKind::Fin,
            Frame::Help { .. } => FrameKind::Help,
            Frame::Push { .. } => FrameKind::Push,
            Frame::Pushed { .. } => FrameKind::Pushed,
            Frame::Cancel { .. } => FrameKind::Cancel,
            Frame::Cancelled { .. } => FrameKind::Cancelled,
            Frame::Revoke { .. } => FrameKind::Revoke,
        }
    }

    /// Append the encoded header to `out`; `payload_len` is the number of payload bytes
    /// that will follow it.
    pub fn encode(&self, payload_len: u64, out: &mut Vec<u8>) {
        self.write(payload_len, out)
    }

    /// The encoded header, inline; `payload_len` is the number of payload bytes that
    /// will follow it.
    #[inline]
    pub fn header(&self, payload_len: u64) -> HeaderBuf {
        let mut h = HeaderBuf::new();
        self.write(payload_len, &mut h);
        h
    }

    #[inline]
    fn write(&self, payload_len: u64, out: &mut impl Sink) {
        let start = out.pos();
        let kind = self.kind() as u8;
        out.put(&[MAGIC as u8, (MAGIC >> 8) as u8, VERSION, kind, 0, 0, 0, 0]); // length patched below
        out.put(&payload_len.to_le_bytes());
        match self {
            Frame::Eager { env } => put_env(out, env),
            Frame::Rts {
                env,
                msg_len,
                sreq,
                mem,
            } => {
                put_env(out, env);
                out.put(&msg_len.to_le_bytes());
                out.put(&sreq.to_le_bytes());
                put_mem(out, mem);
            }
            Frame::Cts {
                sreq,
                rreq,
                accept_len,
                mem,
            } => {
                out.put(&sreq.to_le_bytes());
                out.put(&rreq.to_le_bytes());
                out.put(&accept_len.to_le_bytes());
                put_mem(out, mem);
            }
            Frame::Data { rreq, offset } => {
                out.put(&rreq.to_le_bytes());
                out.put(&offset.to_le_bytes());
            }
            Frame::Fin { sreq } | Frame::Help { sreq } | Frame::Cancel { sreq } => {
                out.put(&sreq.to_le_bytes())
            }
            Frame::Push {
                sreq,
                rreq,
                offset,
                len,
                mem,
            } => {
                out.put(&sreq.to_le_bytes());
                out.put(&rreq.to_le_bytes());
                out.put(&offset.to_le_bytes());
                out.put(&len.to_le_bytes());
                put_mem(out, mem);
            }
            Frame::Pushed { rreq: id, ok } | Frame::Cancelled { sreq: id, ok } => {
                out.put(&id.to_le_bytes());
                out.put(&u64::from(*ok).to_le_bytes());
            }
            Frame::Revoke { ctx } => out.put(&u64::from(*ctx).to_le_bytes()),
        }
        let len = (out.pos() - start) as u16;
        out.at(start + 4)[..2].copy_from_slice(&len.to_le_bytes());
    }

    /// Whether `buf` starts with the header of a `Data` frame (its kind byte only: a
    /// cheap test before [`Frame::decode`]).
    #[inline]
    pub fn is_data(buf: &[u8]) -> bool {
        buf.get(3) == Some(&(FrameKind::Data as u8))
    }

    /// The short eager header of `env` (version 5, [`SHORT_EAGER_BYTES`] bytes): what a
    /// sender puts in front of every eager message. Compared with a full `Eager` header
    /// (40 bytes) it leaves out what the transport knows already: the source rank (the
    /// peer the frame came from) and the payload length (the transport's framing), and it
    /// carries the sequence number modulo 2^32 ([`Frame::short_eager_seq`] restores
    /// it). 16 bytes instead of 40 let a payload of up to 40 bytes share one 64-byte
    /// cache line with its header and the shared-memory ring's 8-byte envelope, and one
    /// of up to 8 bytes half a line.
    ///
    /// Layout, little-endian: `[0..2] 'R' 'e'`, `[2] version`, `[3] 0` (flags),
    /// `[4..8] ctx: u32`, `[8..12] tag: i32`, `[12..16] seq mod 2^32: u32`.
    #[inline]
    pub fn short_eager_header(env: &Envelope) -> HeaderBuf {
        HeaderBuf::from_short(Self::short_eager_bytes(env))
    }

    /// The bytes of [`Frame::short_eager_header`] for `env`, as an array (kept in
    /// registers: the engine hands them to a transport at once).
    #[inline(always)]
    pub fn short_eager_bytes(env: &Envelope) -> [u8; SHORT_EAGER_BYTES] {
        // Built in a register: the transport reads it back with a 16-byte load, which
        // the CPU forwards from one store but not from four (a stall on every send).
        let word = |b: [u8; 4]| u128::from(u32::from_le_bytes(b));
        let v = word([SHORT_MAGIC[0], SHORT_MAGIC[1], VERSION, 0])
            | word(env.ctx.to_le_bytes()) << 32
            | word(env.tag.to_le_bytes()) << 64
            | word((env.seq as u32).to_le_bytes()) << 96;
        v.to_le_bytes()
    }

    /// If `buf` is exactly one short eager header ([`Frame::short_eager_header`]): its
    /// context id, tag and sequence number modulo 2^32. `None` for anything else.
    #[inline]
    pub fn decode_short_eager(buf: &[u8]) -> Option<(u32, i32, u32)> {
        let b: &[u8; SHORT_EAGER_BYTES] = buf.try_into().ok()?;
        if b[0..4] != [SHORT_MAGIC[0], SHORT_MAGIC[1], VERSION, 0] {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some((u32_at(4), u32_at(8) as i32, u32_at(12)))
    }

    /// The sequence number whose low 32 bits are `seq_lo` nearest to `next`, the one
    /// the receiver expects next from that source on that communicator: messages arrive
    /// at most 2^31 numbers ahead of their turn (a pair's frames in flight are bounded
    /// by the transports' buffers, far below that) and never behind it.
    #[inline]
    pub fn short_eager_seq(seq_lo: u32, next: u64) -> u64 {
        next.wrapping_add(i64::from(seq_lo.wrapping_sub(next as u32) as i32) as u64)
    }

    /// Fast path of [`Frame::decode`] for the most common frame: if `buf` is exactly one
    /// valid `Eager` header, its envelope and payload length. `None` for anything else
    /// (decode it with [`Frame::decode`], which says what is wrong).
    #[inline]
    pub fn decode_eager(buf: &[u8]) -> Option<(Envelope, u64)> {
        const LEN: usize = PREFIX_BYTES + ENV_BYTES;
        let b: &[u8; LEN] = buf.try_into().ok()?;
        let head = [
            MAGIC as u8,
            (MAGIC >> 8) as u8,
            VERSION,
            FrameKind::Eager as u8,
        ];
        if b[0..4] != head || b[4..8] != [LEN as u8, 0, 0, 0] {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from_le_bytes(arr8(&b[i..i + 8]));
        Some((
            Envelope {
                ctx: u32_at(16),
                src: u32_at(20),
                tag: u32_at(24) as i32,
                seq: u64_at(32),
            },
            u64_at(8),
        ))
    }

    /// Decode one header from the front of `buf`.
    ///
    /// Returns `Ok(None)` when `buf` does not yet hold a whole header, and
    /// `Ok(Some((frame, header_bytes, payload_len)))` otherwise.
    ///
    /// # Errors
    /// [`WireError`] when the bytes are not a valid header (never panics, never
    /// allocates).
    pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize, u64)>, WireError> {
        if buf.len() >= 2 {
            let magic = u16::from_le_bytes([buf[0], buf[1]]);
            if magic != MAGIC {
                return Err(WireError::BadMagic(magic));
            }
        }
        if buf.len() >= 3 && buf[2] != VERSION {
            return Err(WireError::BadVersion(buf[2]));
        }
        if buf.len() < PREFIX_BYTES {
            return Ok(None);
        }
        let kind = buf[3];
        let hlen = u16::from_le_bytes([buf[4], buf[5]]) as usize;
        let flags = u16::from_le_bytes([buf[6], buf[7]]);
        if flags != 0 {
            return Err(WireError::BadFlags(flags));
        }
        let payload_len = u64::from_le_bytes(arr8(&buf[8..16]));
        let min = match kind {
            1 => PREFIX_BYTES + ENV_BYTES,
            2 => PREFIX_BYTES + ENV_BYTES + 16 + 1,
            3 => PREFIX_BYTES + 24 + 1,
            4 => PREFIX_BYTES + 16,
            5 | 6 | 9 | 11 => PREFIX_BYTES + 8,
            7 => PREFIX_BYTES + 32 + 1,
            8 | 10 => PREFIX_BYTES + 16,
            k => return Err(WireError::BadKind(k)),
        };
        if hlen < min || hlen > rankwire_transports::MAX_HEADER_BYTES {
            return Err(WireError::BadLength {
                kind,
                declared: hlen,
                available: buf.len(),
            });
        }
        if buf.len() < hlen {
            return Ok(None);
        }
        let mut r = Reader {
            buf: &buf[PREFIX_BYTES..hlen],
        };
        let bad_len = || WireError::BadLength {
            kind,
            declared: hlen,
            available: buf.len(),
        };
        let frame = match kind {
            1 => Frame::Eager {
                env: r.env().ok_or_else(bad_len)?,
            },
            2 => Frame::Rts {
                env: r.env().ok_or_else(bad_len)?,
                msg_len: r.u64().ok_or_else(bad_len)?,
                sreq: r.u64().ok_or_else(bad_len)?,
                mem: r.mem(bad_len)?,
            },
            3 => Frame::Cts {
                sreq: r.u64().ok_or_else(bad_len)?,
                rreq: r.u64().ok_or_else(bad_len)?,
                accept_len: r.u64().ok_or_else(bad_len)?,
                mem: r.mem(bad_len)?,
            },
            4 => Frame::Data {
                rreq: r.u64().ok_or_else(bad_len)?,
                offset: r.u64().ok_or_else(bad_len)?,
            },
            5 => Frame::Fin {
                sreq: r.u64().ok_or_else(bad_len)?,
            },
            6 => Frame::Help {
                sreq: r.u64().ok_or_else(bad_len)?,
            },
            7 => Frame::Push {
                sreq: r.u64().ok_or_else(bad_len)?,
                rreq: r.u64().ok_or_else(bad_len)?,
                offset: r.u64().ok_or_else(bad_len)?,
                len: r.u64().ok_or_else(bad_len)?,
                mem: r.mem(bad_len)?,
            },
            9 => Frame::Cancel {
                sreq: r.u64().ok_or_else(bad_len)?,
            },
            8 | 10 => {
                let id = r.u64().ok_or_else(bad_len)?;
                let ok = match r.u64().ok_or_else(bad_len)? {
                    0 => false,
                    1 => true,
                    _ => return Err(bad_len()),
                };
                if kind == 8 {
                    Frame::Pushed { rreq: id, ok }
                } else {
                    Frame::Cancelled { sreq: id, ok }
                }
            }
            11 => Frame::Revoke {
                ctx: u32::try_from(r.u64().ok_or_else(bad_len)?).map_err(|_| bad_len())?,
            },
            k => return Err(WireError::BadKind(k)),
        };
        if !r.buf.is_empty() {
            return Err(bad_len());
        }
        Ok(Some((frame, hlen, payload_len)))
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

const ENV_BYTES: usize = 4 + 4 + 4 + 4 + 8;

#[inline]
fn put_env(out: &mut impl Sink, env: &Envelope) {
    let mut b = [0u8; ENV_BYTES];
    b[0..4].copy_from_slice(&env.ctx.to_le_bytes());
    b[4..8].copy_from_slice(&env.src.to_le_bytes());
    b[8..12].copy_from_slice(&env.tag.to_le_bytes());
    b[16..24].copy_from_slice(&env.seq.to_le_bytes());
    out.put(&b);
}

fn put_mem(out: &mut impl Sink, mem: &RemoteMem) {
    match mem {
        RemoteMem::None => out.put(&[0]),
        RemoteMem::CudaIpc {
            handle,
            offset,
            buffer_id,
            device,
            base,
            alloc_len,
        } => {
            out.put(&[1]);
            out.put(&device.to_le_bytes());
            out.put(&offset.to_le_bytes());
            out.put(&buffer_id.to_le_bytes());
            out.put(&base.to_le_bytes());
            out.put(&alloc_len.to_le_bytes());
            out.put(handle);
        }
        RemoteMem::HostCma { pid, addr } => {
            out.put(&[3]);
            out.put(&pid.to_le_bytes());
            out.put(&addr.to_le_bytes());
        }
        RemoteMem::Rdma { addr, len, rkey } => {
            out.put(&[2]);
            out.put(&addr.to_le_bytes());
            out.put(&len.to_le_bytes());
            out.put(&rkey.to_le_bytes());
        }
    }
}

fn arr8(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    a
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.buf.len() < n {
            return None;
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(arr8).map(u64::from_le_bytes)
    }
    fn env(&mut self) -> Option<Envelope> {
        let ctx = self.u32()?;
        let src = self.u32()?;
        let tag = self.u32()? as i32;
        let _pad = self.u32()?;
        let seq = self.u64()?;
        Some(Envelope { ctx, src, tag, seq })
    }
    fn mem(&mut self, bad: impl Fn() -> WireError) -> Result<RemoteMem, WireError> {
        match self.u8().ok_or_else(&bad)? {
            0 => Ok(RemoteMem::None),
            1 => {
                let device = self.u32().ok_or_else(&bad)? as i32;
                let offset = self.u64().ok_or_else(&bad)?;
                let buffer_id = self.u64().ok_or_else(&bad)?;
                let base = self.u64().ok_or_else(&bad)?;
                let alloc_len = self.u64().ok_or_else(&bad)?;
                let mut handle = [0u8; 64];
                handle.copy_from_slice(self.take(64).ok_or_else(&bad)?);
                Ok(RemoteMem::CudaIpc {
                    handle,
                    offset,
                    buffer_id,
                    device,
                    base,
                    alloc_len,
                })
            }
            2 => Ok(RemoteMem::Rdma {
                addr: self.u64().ok_or_else(&bad)?,
                len: self.u64().ok_or_else(&bad)?,
                rkey: self.u32().ok_or_else(&bad)?,
            }),
            3 => Ok(RemoteMem::HostCma {
                pid: self.u32().ok_or_else(&bad)?,
                addr: self.u64().ok_or_else(&bad)?,
            }),
            t => Err(WireError::BadMem(t)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env() -> Envelope {
        Envelope {
            ctx: 3,
            src: 9,
            tag: -5,
            seq: 1 << 40,
        }
    }

    pub(crate) fn all_frames() -> Vec<Frame> {
        vec![
            Frame::Eager { env: env() },
            Frame::Rts {
                env: env(),
                msg_len: (2 << 30) + 1,
                sreq: 77,
                mem: RemoteMem::None,
            },
            Frame::Rts {
                env: env(),
                msg_len: 5,
                sreq: 1,
                mem: RemoteMem::CudaIpc {
                    handle: [7; 64],
                    offset: 4096,
                    buffer_id: 917,
                    device: 1,
                    base: 0x7f00_0000_0000,
                    alloc_len: 1 << 30,
                },
            },
            Frame::Cts {
                sreq: 1,
                rreq: 2,
                accept_len: 3,
                mem: RemoteMem::Rdma {
                    addr: 0xdead_beef,
                    len: 99,
                    rkey: 0x1234,
                },
            },
            Frame::Rts {
                env: env(),
                msg_len: 1 << 20,
                sreq: 5,
                mem: RemoteMem::HostCma {
                    pid: 4242,
                    addr: 0x7fff_0000_1000,
                },
            },
            Frame::Data {
                rreq: 8,
                offset: 1 << 33,
            },
            Frame::Fin { sreq: 4 },
            Frame::Help { sreq: 9 },
            Frame::Push {
                sreq: 9,
                rreq: 10,
                offset: 1 << 20,
                len: (1 << 20) + 3,
                mem: RemoteMem::HostCma {
                    pid: 77,
                    addr: 0x7ffe_0000_0000,
                },
            },
            Frame::Pushed { rreq: 10, ok: true },
            Frame::Pushed {
                rreq: 11,
                ok: false,
            },
            Frame::Cancel { sreq: 12 },
            Frame::Cancelled { sreq: 12, ok: true },
            Frame::Cancelled {
                sreq: 13,
                ok: false,
            },
            Frame::Revoke { ctx: 0x8000_0003 },
        ]
    }

    #[test]
    fn the_eager_fast_path_agrees_with_decode() {
        for f in all_frames() {
            let mut v = Vec::new();
            f.encode(77, &mut v);
            match (Frame::decode_eager(&v), f) {
                (Some((env, plen)), Frame::Eager { env: want }) => {
                    assert_eq!((env, plen), (want, 77));
                }
                (None, Frame::Eager { .. }) => panic!("missed {f:?}"),
                (Some(_), _) => panic!("took {f:?} for an Eager frame"),
                (None, _) => {}
            }
            // Any one byte changed: either still the same answer as decode, or None.
            for i in 0..v.len() {
                let mut m = v.clone();
                m[i] ^= 0x41;
                if let Some((env, plen)) = Frame::decode_eager(&m) {
                    assert_eq!(
                        Frame::decode(&m),
                        Ok(Some((Frame::Eager { env }, m.len(), plen))),
                        "byte {i} of {f:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn encoded_headers_fit_a_header_buf() {
        for f in all_frames() {
            let mut v = Vec::new();
            f.encode(9, &mut v);
            assert!(
                v.len() <= MAX_FRAME_HEADER_BYTES,
                "{f:?}: {} bytes",
                v.len()
            );
            assert_eq!(f.header(9).as_slice(), &v[..], "{f:?}");
        }
        assert_eq!(Frame::Eager { env: env() }.header(8).len(), 40);
        assert_eq!(
            Frame::short_eager_header(&env()).len(),
            SHORT_EAGER_BYTES,
            "with the ring's 8-byte envelope, a 40-byte eager message is one cache line"
        );
    }

    #[test]
    fn short_eager_round_trips_and_restores_the_sequence_number() {
        let h = Frame::short_eager_header(&env());
        let (ctx, tag, lo) = Frame::decode_short_eager(&h).unwrap();
        assert_eq!((ctx, tag, lo), (3, -5, 0));
        assert_eq!(Frame::short_eager_seq(lo, env().seq), env().seq);
        // Near the next expected number, on both sides of a 2^32 boundary.
        for next in [
            0u64,
            1,
            5,
            (1 << 32) - 2,
            1 << 32,
            (7 << 32) + 3,
            u64::MAX - 9,
        ] {
            for ahead in [0u64, 1, 2, 1000, (1 << 31) - 1] {
                let seq = next.wrapping_add(ahead);
                assert_eq!(
                    Frame::short_eager_seq(seq as u32, next),
                    seq,
                    "next {next} ahead {ahead}"
                );
            }
        }
        // Not a full header, and no full header is a short one.
        assert!(matches!(Frame::decode(&h), Err(WireError::BadMagic(_))));
        for f in all_frames() {
            let mut v = Vec::new();
            f.encode(0, &mut v);
            assert_eq!(Frame::decode_short_eager(&v), None, "{f:?}");
            assert_eq!(
                Frame::decode_short_eager(&v[..SHORT_EAGER_BYTES]),
                None,
                "{f:?}"
            );
        }
        // A changed marker, version or flags byte, or a length other than 16: refused.
        for i in 0..4 {
            let mut m = h.as_slice().to_vec();
            m[i] ^= 0x41;
            assert_eq!(Frame::decode_short_eager(&m), None, "byte {i}");
        }
        assert_eq!(Frame::decode_short_eager(&h[..15]), None);
        let mut long = h.as_slice().to_vec();
        long.push(0);
        assert_eq!(Frame::decode_short_eager(&long), None);
    }

    #[test]
    fn every_kind_round_trips() {
        for f in all_frames() {
            let mut buf = Vec::new();
            f.encode(123, &mut buf);
            let (g, n, p) = Frame::decode(&buf).unwrap().unwrap();
            assert_eq!((g, n, p), (f, buf.len(), 123));
            // Every strict prefix is "not enough bytes yet", never an error.
            for cut in 0..buf.len() {
                assert_eq!(Frame::decode(&buf[..cut]), Ok(None), "{f:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn garbage_is_an_error() {
        assert_eq!(Frame::decode(&[0, 0, 1]), Err(WireError::BadMagic(0)));
        let mut buf = Vec::new();
        Frame::Fin { sreq: 1 }.encode(0, &mut buf);
        let mut b = buf.clone();
        b[2] = 9;
        assert_eq!(Frame::decode(&b), Err(WireError::BadVersion(9)));
        let mut b = buf.clone();
        b[3] = 42;
        assert_eq!(Frame::decode(&b), Err(WireError::BadKind(42)));
        let mut b = buf.clone();
        b[4] = 200;
        assert!(matches!(Frame::decode(&b), Ok(None)));
        b.resize(300, 0);
        assert!(matches!(
            Frame::decode(&b),
            Err(WireError::BadLength { .. })
        ));
        let mut b = buf.clone();
        b[6] = 1;
        assert_eq!(Frame::decode(&b), Err(WireError::BadFlags(1)));
    }

    proptest! {
        #[test]
        fn decode_eager_agrees_with_decode(bytes in proptest::collection::vec(any::<u8>(), 40..41)) {
            if let Some((env, plen)) = Frame::decode_eager(&bytes) {
                prop_assert_eq!(
                    Frame::decode(&bytes),
                    Ok(Some((Frame::Eager { env }, 40, plen)))
                );
            }
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Frame::decode(&bytes);
        }

        #[test]
        fn decode_of_mutated_header_never_panics(i in 0usize..60, v in any::<u8>()) {
            for f in all_frames() {
                let mut buf = Vec::new();
                f.encode(1, &mut buf);
                let i = i % buf.len();
                buf[i] = v;
                let _ = Frame::decode(&buf);
            }
        }
    }
}
