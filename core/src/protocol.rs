//! Eager and rendezvous protocol state machines (sans-IO).
//!
//! [`Protocol`] holds every request of one rank and turns API calls and arriving frames
//! into frames to send and completed requests. It never touches a socket, a thread or a
//! clock: the progress engine feeds it and executes what it asks for, and the in-memory
//! harness in the tests drives several of them with no processes at all.
//!
//! # Contract
//! Inputs: [`Protocol::isend`], [`Protocol::irecv`], [`Protocol::mrecv`] (API calls),
//! [`Protocol::on_frame`] (a frame arrived), [`Protocol::on_sent`] (a frame produced
//! earlier was taken by a transport), [`Protocol::fail_peer`] (a connection died).
//! Outputs, in this order after every input: [`Protocol::pop_frame`] (control and eager
//! frames, to be sent to each peer in order), [`Protocol::next_data`] (rendezvous data
//! chunks, pulled when a transport has room), [`Protocol::take_done`] (completions).
//!
//! # Protocols
//! - **Eager** (`len <= eager_limit` and not synchronous): one `Eager` frame carries the
//!   message. The send completes when a transport has taken the frame. An eager message
//!   with no posted receive is kept in the unexpected message queue.
//! - **Rendezvous** (larger messages, and every synchronous send): the sender sends `Rts`
//!   (length, its request id). When a receive matches, the receiver answers `Cts` with
//!   its request id and the number of bytes it accepts (less than the message when the
//!   buffer is too small: the rest is never sent). The sender pushes `Data` chunks; the
//!   receiver completes when all accepted bytes have arrived, the sender when the last
//!   chunk was taken by the transport. An unexpected `Rts` costs only its header, so a
//!   receiver never buffers unbounded large data.
//! - **Pull-mode rendezvous** (single copy): when the sender may offer its buffer to a
//!   peer ([`Protocol::offer_host_cma`]), the `Rts` carries a [`RemoteMem`] descriptor.
//!   A receiver allowed to pull from that peer ([`Protocol::allow_pull`]) does not answer
//!   `Cts`; it asks the engine to copy the accepted bytes straight from the sender's
//!   memory ([`Protocol::pop_pull`]), and once the engine reports [`Protocol::pull_done`]
//!   it completes and sends `Fin`, which completes the sender. If the copy fails (e.g.
//!   cross-memory attach is forbidden), the receiver falls back to `Cts` + `Data` for
//!   this message and stops pulling from that peer.
//!
//! # Memory
//! Buffers are raw `(pointer, length)` pairs of host memory that the API layer keeps
//! borrowed until the request completes. Zero-length buffers are never dereferenced.

use std::collections::VecDeque;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::error::{Error, MatchError};
use crate::matching::{Matched, Matcher, Pattern};
use crate::wire::{Envelope, Frame, HeaderBuf, RemoteMem};
use rankwire_transports::{InPayload, MemoryKind};

/// Request id, unique within one rank for the life of the process.
pub type ReqId = u64;

/// What a completed receive (or send) reports: MPI's `MPI_Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Rank of the sender (for a send: the destination).
    pub source: u32,
    /// Tag of the message.
    pub tag: i32,
    /// Length of the received data in bytes (for a truncated receive: the bytes written).
    pub len_bytes: usize,
}

impl Status {
    /// Number of elements of type `T` received, or `None` if the byte count is not a
    /// multiple of `size_of::<T>()` (MPI_Get_count returning MPI_UNDEFINED).
    pub fn count<T>(&self) -> Option<usize> {
        let s = std::mem::size_of::<T>();
        if s == 0 {
            return Some(0);
        }
        self.len_bytes
            .is_multiple_of(s)
            .then_some(self.len_bytes / s)
    }
}

/// A frame the protocol wants sent to `peer`.
#[derive(Debug)]
pub struct OutFrame {
    /// Destination world rank.
    pub peer: u32,
    /// Encoded header.
    pub header: HeaderBuf,
    /// Payload.
    pub payload: Payload,
    /// What to report to [`Protocol::on_sent`] once a transport took the frame.
    pub on_sent: OnSent,
}

/// Payload of an [`OutFrame`].
#[derive(Debug)]
pub enum Payload {
    /// No payload.
    Empty,
    /// Bytes in the user's send buffer, valid until the owning request completes.
    User(RawBuf),
    /// Bytes owned by the frame.
    Owned(Vec<u8>),
}

impl Payload {
    /// The payload bytes.
    ///
    /// # Safety
    /// For [`Payload::User`], the request owning the buffer must not have completed.
    pub unsafe fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Empty => &[],
            // SAFETY: forwarded to the caller.
            Payload::User(b) => unsafe { b.as_slice() },
            Payload::Owned(v) => v,
        }
    }
}

/// Follow-up of a sent frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnSent {
    /// Nothing to do.
    Nothing,
    /// An eager send completed.
    CompleteSend(ReqId),
    /// `len` bytes of rendezvous data of send `sreq` went out.
    DataSent {
        /// The send request.
        sreq: ReqId,
        /// Bytes in the chunk.
        len: usize,
    },
}

/// A raw buffer: pointer, length in bytes, and where the memory lives. Host memory
/// (including managed and pinned memory, which the host may touch) has kind
/// [`MemoryKind::Host`]; device memory is only ever touched through [`DeviceMem`].
#[derive(Debug, Clone, Copy)]
pub struct RawBuf {
    ptr: *mut u8,
    len: usize,
    kind: MemoryKind,
}

/// Access to device memory for the protocol (provided by the engine when a GPU is
/// usable). Without it, device buffers fail their requests with [`Error::Gpu`].
pub trait DeviceMem: Send {
    /// Copy host bytes `src` to byte `offset` of device buffer `dst` (complete on
    /// return).
    fn copy_to_device(&mut self, dst: RawBuf, offset: usize, src: &[u8]) -> Result<(), String>;
    /// Copy the whole device buffer `src` into a new host vector (complete on return).
    fn copy_from_device(&mut self, src: RawBuf) -> Result<Vec<u8>, String>;
    /// A descriptor a same-node peer can use to pull `buf`, the buffer of send request
    /// `sreq`, directly (CUDA IPC; memory legacy IPC cannot export may be offered through
    /// a staging copy), or `None` when it cannot be offered (staged through host memory
    /// instead).
    fn offer(&mut self, sreq: ReqId, buf: RawBuf) -> Option<RemoteMem>;
    /// Send request `sreq` has ended (completed or failed): resources
    /// [`DeviceMem::offer`] took for it may be reused.
    fn done_with(&mut self, _sreq: ReqId) {}
}

/// Registration of host send buffers for network pull-mode rendezvous (RDMA READ by
/// the receiver). Provided by the engine when an RDMA transport serves some peers.
pub trait NetOffer: Send {
    /// Register `buf` for the rendezvous send `sreq` and describe it for the peer
    /// ([`RemoteMem::Rdma`]), or `None` if it cannot be registered (the receiver is
    /// then asked to take `Data` frames instead).
    fn offer(&mut self, sreq: ReqId, buf: RawBuf) -> Option<RemoteMem>;
    /// The send `sreq` finished (completed or failed): its registration may go.
    fn release(&mut self, sreq: ReqId);
}

// SAFETY: RawBuf is only dereferenced while the owning request is pending, and the API
// layer keeps the buffer borrowed (shared for sends, exclusive for receives) until then.
unsafe impl Send for RawBuf {}

impl RawBuf {
    /// A host buffer from a pointer and a length in bytes.
    pub fn new(ptr: *mut u8, len: usize) -> Self {
        RawBuf {
            ptr,
            len,
            kind: MemoryKind::Host,
        }
    }
    /// A buffer of the given memory kind.
    pub fn with_kind(ptr: *mut u8, len: usize, kind: MemoryKind) -> Self {
        RawBuf { ptr, len, kind }
    }
    /// A read-only host buffer from a slice.
    pub fn from_slice(s: &[u8]) -> Self {
        RawBuf::new(s.as_ptr() as *mut u8, s.len())
    }
    /// Where the memory lives.
    pub fn kind(&self) -> MemoryKind {
        self.kind
    }
    /// Whether the host may read and write it directly.
    pub fn is_host(&self) -> bool {
        self.kind == MemoryKind::Host
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// # Safety
    /// The memory must be valid for reads of `len` bytes.
    pub unsafe fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: forwarded to the caller; non-empty buffers come from live slices.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    /// Copy `src` to byte `offset` of this host buffer. Bounds are checked by the
    /// caller.
    ///
    /// # Safety
    /// The memory must be valid for writes and `offset + src.len() <= len`.
    unsafe fn write_at(&self, offset: usize, src: &[u8]) {
        if src.is_empty() {
            return;
        }
        debug_assert!(offset + src.len() <= self.len);
        // SAFETY: forwarded to the caller.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(offset), src.len()) }
    }
}

/// A message removed from the unexpected queue by a matched probe (MPI_Mprobe), to be
/// received with [`Protocol::mrecv`].
#[derive(Debug)]
pub struct ProbedMessage {
    env: Envelope,
    body: Unexpected,
    peer_ok: bool,
}

impl ProbedMessage {
    /// The status a receive of this message would report (full message length).
    pub fn status(&self) -> Status {
        Status {
            source: self.env.src,
            tag: self.env.tag,
            len_bytes: self.body.len() as usize,
        }
    }
}

/// The body of an unexpected message.
#[derive(Debug)]
enum Unexpected {
    Eager(Vec<u8>),
    Rts {
        msg_len: u64,
        sreq: u64,
        mem: RemoteMem,
    },
}

impl Unexpected {
    fn len(&self) -> u64 {
        match self {
            Unexpected::Eager(v) => v.len() as u64,
            Unexpected::Rts { msg_len, .. } => *msg_len,
        }
    }
}

#[derive(Debug)]
enum SendState {
    /// Eager frame queued; completes on `on_sent`.
    Eager,
    /// Rts sent; waiting for Cts.
    AwaitCts,
    /// Pushing data: `queued` bytes handed out as frames, `sent` taken by the transport.
    Data {
        rreq: u64,
        queued: usize,
        sent: usize,
        end: usize,
    },
}

#[derive(Debug)]
struct SendReq {
    dst: u32,
    tag: i32,
    buf: RawBuf,
    state: SendState,
    /// `Help` was sent for it (`share.rs`).
    helped: bool,
}

/// A copy the engine must do for a pull-mode rendezvous: `dst.len()` bytes from the
/// sender's memory described by `mem` into the receive buffer `dst`, then report
/// [`Protocol::pull_done`] with `rreq`.
#[derive(Debug)]
pub struct PullReq {
    /// The receive request.
    pub rreq: ReqId,
    /// World rank of the sender.
    pub peer: u32,
    /// Where the data is in the sender's process.
    pub mem: RemoteMem,
    /// Destination (the accepted prefix of the receive buffer).
    pub dst: RawBuf,
}

impl RawBuf {
    /// Raw pointer to the first byte.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

#[derive(Debug)]
enum RecvState {
    Posted,
    /// Pulling `accept` bytes from the sender (`share.rs`).
    Pulling {
        src: u32,
        tag: i32,
        msg_len: u64,
        sreq: u64,
        accept: usize,
        copy: share::PullCopy,
    },
    /// Matched an Rts and sent Cts; `got` of `accept` bytes arrived.
    Data {
        src: u32,
        tag: i32,
        msg_len: u64,
        accept: usize,
        got: usize,
    },
}

#[derive(Debug)]
struct RecvReq {
    pat: Pattern,
    buf: RawBuf,
    state: RecvState,
}

/// All point-to-point protocol state of one rank.
#[derive(Debug)]
pub struct Protocol {
    rank: u32,
    size: u32,
    matcher: Matcher<ReqId, Unexpected>,
    /// Every request, then its outcome (`reqs.rs`).
    reqs: reqs::Reqs,
    next_seq: crate::matching::SeqMap,
    out: VecDeque<OutFrame>,
    data_ready: VecDeque<ReqId>,
    dead: HashMap<u32, Error>,
    matched: Vec<Matched<ReqId, Unexpected>>,
    pulls: VecDeque<PullReq>,
    /// Writes of shares of pulls this rank sends (`share.rs`).
    pushes: VecDeque<share::PushReq>,
    /// `Help` for messages not matched yet: (sender, its send request).
    early_help: HashSet<(u32, u64)>,
    /// Peers this rank may write shares into (those it offers its buffers to by cross-
    /// memory attach, until a write fails).
    push_to: HashSet<u32>,
    /// Peers this rank may hand shares of its pulls to (until one fails).
    share_with: HashSet<u32>,
    /// Peers whose host buffers this rank may read by cross-memory attach.
    pull_from: HashSet<u32>,
    /// Peers to which rendezvous sends offer the buffer for cross-memory attach, and
    /// this process's id for the descriptor.
    offer_to: HashSet<u32>,
    pid: u32,
    device: Option<Box<dyn DeviceMem>>,
    /// Registration for RDMA pull-mode rendezvous, and the peers it serves.
    net: Option<Box<dyn NetOffer>>,
    net_to: HashSet<u32>,
    /// Peers whose device buffers this rank may pull through CUDA IPC.
    ipc_from: HashSet<u32>,
    /// Peers to which device-buffer rendezvous sends offer a CUDA IPC handle.
    ipc_to: HashSet<u32>,
}

impl std::fmt::Debug for dyn NetOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NetOffer")
    }
}

impl std::fmt::Debug for dyn DeviceMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceMem")
    }
}

impl Protocol {
    /// Protocol state for world rank `rank` of `size`.
    pub fn new(rank: u32, size: u32) -> Self {
        Protocol {
            rank,
            size,
            matcher: Matcher::new(),
            reqs: reqs::Reqs::default(),
            next_seq: crate::matching::SeqMap::default(),
            out: VecDeque::new(),
            data_ready: VecDeque::new(),
            dead: HashMap::default(),
            matched: Vec::new(),
            pulls: VecDeque::new(),
            pushes: VecDeque::new(),
            early_help: Default::default(),
            push_to: Default::default(),
            share_with: Default::default(),
            pull_from: Default::default(),
            offer_to: Default::default(),
            pid: std::process::id(),
            device: None,
            net: None,
            net_to: Default::default(),
            ipc_from: Default::default(),
            ipc_to: Default::default(),
        }
    }

    /// Give the protocol access to device memory (see [`DeviceMem`]).
    pub fn set_device_mem(&mut self, d: Box<dyn DeviceMem>) {
        self.device = Some(d);
    }

    /// Let rendezvous sends of host buffers to each of `peers` offer the buffer for an
    /// RDMA READ by the receiver, registered through `net`.
    pub fn set_net_offer(&mut self, net: Box<dyn NetOffer>, peers: &[u32]) {
        self.net = Some(net);
        self.net_to = peers.iter().copied().collect();
    }

    /// Allow device buffers to be exchanged with `peer` by CUDA IPC in both
    /// directions (offer handles to it, pull its handles).
    pub fn allow_cuda_ipc(&mut self, peer: u32) {
        self.ipc_to.insert(peer);
        self.ipc_from.insert(peer);
    }

    /// Let rendezvous sends to `peer` offer the send buffer for a single-copy pull by
    /// cross-memory attach (the `Rts` carries [`RemoteMem::HostCma`]).
    pub fn offer_host_cma(&mut self, peer: u32) {
        self.offer_to.insert(peer);
        self.push_to.insert(peer);
    }

    /// Allow (or forbid) this rank to pull offered buffers of `peer` itself.
    pub fn allow_pull(&mut self, peer: u32, allowed: bool) {
        if allowed {
            self.pull_from.insert(peer);
            self.share_with.insert(peer);
        } else {
            self.pull_from.remove(&peer);
            self.share_with.remove(&peer);
        }
    }

    /// Allow (or forbid) shares of large cross-memory-attach copies with `peer` in both
    /// directions: this rank writing a share of its sends into `peer`, and handing
    /// `peer` a share of its pulls (`share.rs`). On by default where the buffers are
    /// offered and pulled.
    pub fn allow_sharing(&mut self, peer: u32, allowed: bool) {
        if allowed {
            self.push_to.insert(peer);
            self.share_with.insert(peer);
        } else {
            self.push_to.remove(&peer);
            self.share_with.remove(&peer);
        }
    }

    /// Next copy the engine must perform for a pull-mode rendezvous.
    pub fn pop_pull(&mut self) -> Option<PullReq> {
        self.pulls.pop_front()
    }

    /// Start a send of `buf` to world rank `dst` on context `ctx` with `tag`. Messages
    /// of at most `eager_limit` bytes go eagerly unless `sync` (MPI_Ssend semantics:
    /// complete only once the receive has matched) is set.
    ///
    /// The caller has validated `dst` and `tag`.
    pub fn isend(
        &mut self,
        dst: u32,
        ctx: u32,
        tag: i32,
        buf: RawBuf,
        eager_limit: usize,
        sync: bool,
    ) -> ReqId {
        let id = self.alloc_id();
        if let Some(e) = self.dead.get(&dst) {
            self.reqs.complete(id, Err(e.clone()));
            return id;
        }
        let env = self.next_env(dst, ctx, tag);
        if !sync && buf.len() <= eager_limit {
            let payload = if buf.is_empty() {
                Payload::Empty
            } else if buf.is_host() {
                Payload::User(buf)
            } else {
                // Device memory: stage now (the send buffer must be ready at isend).
                match self.read_device(buf) {
                    Ok(v) => Payload::Owned(v),
                    Err(e) => {
                        self.reqs.complete(id, Err(e));
                        return id;
                    }
                }
            };
            self.out.push_back(OutFrame {
                peer: dst,
                header: Frame::Eager { env }.header(buf.len() as u64),
                payload,
                on_sent: OnSent::CompleteSend(id),
            });
            self.reqs.set_send(
                id,
                SendReq {
                    dst,
                    tag,
                    buf,
                    state: SendState::Eager,
                    helped: false,
                },
            );
        } else {
            let mem = if buf.is_empty() {
                RemoteMem::None
            } else if !buf.is_host() {
                if self.ipc_to.contains(&dst) {
                    self.device
                        .as_mut()
                        .and_then(|d| d.offer(id, buf))
                        .unwrap_or(RemoteMem::None)
                } else {
                    RemoteMem::None
                }
            } else if self.net_to.contains(&dst) {
                self.net
                    .as_mut()
                    .and_then(|n| n.offer(id, buf))
                    .unwrap_or(RemoteMem::None)
            } else if self.offer_to.contains(&dst) {
                RemoteMem::HostCma {
                    pid: self.pid,
                    addr: buf.ptr as u64,
                }
            } else {
                RemoteMem::None
            };
            let header = Frame::Rts {
                env,
                msg_len: buf.len() as u64,
                sreq: id,
                mem,
            }
            .header(0);
            self.out.push_back(OutFrame {
                peer: dst,
                header,
                payload: Payload::Empty,
                on_sent: OnSent::Nothing,
            });
            self.reqs.set_send(
                id,
                SendReq {
                    dst,
                    tag,
                    buf,
                    state: SendState::AwaitCts,
                    helped: false,
                },
            );
        }
        id
    }

    /// Fast path of an eager send of host memory, for the engine: the header of an
    /// `Eager` frame of `len_bytes` to `dst` on context `ctx` with `tag`, taking the
    /// message's sequence number; `None` when `dst` has failed (use
    /// [`Protocol::isend`], which reports that). The caller hands the frame to a
    /// transport at once; if the transport does not take it, it queues the frame with
    /// [`Protocol::queue_eager`] (the sequence number is spent either way). Frames
    /// queued for `dst` earlier must have gone out first ([`Protocol::has_frames_for`]),
    /// so that messages keep their order.
    #[inline]
    pub fn eager_header(
        &mut self,
        dst: u32,
        ctx: u32,
        tag: i32,
        len_bytes: usize,
    ) -> Option<HeaderBuf> {
        if !self.dead.is_empty() && self.dead.contains_key(&dst) {
            return None;
        }
        let env = self.next_env(dst, ctx, tag);
        Some(Frame::Eager { env }.header(len_bytes as u64))
    }

    /// Queue the eager frame `header` (from [`Protocol::eager_header`]) carrying the
    /// host buffer `buf` to `dst` as a send request, completed when a transport takes
    /// it (as [`Protocol::isend`] does).
    pub fn queue_eager(&mut self, dst: u32, tag: i32, buf: RawBuf, header: HeaderBuf) -> ReqId {
        let id = self.alloc_id();
        self.out.push_back(OutFrame {
            peer: dst,
            header,
            payload: if buf.is_empty() {
                Payload::Empty
            } else {
                Payload::User(buf)
            },
            on_sent: OnSent::CompleteSend(id),
        });
        self.reqs.set_send(
            id,
            SendReq {
                dst,
                tag,
                buf,
                state: SendState::Eager,
                helped: false,
            },
        );
        id
    }

    /// Record a send of `len_bytes` to `dst` with `tag` as completed now (a fast eager
    /// send a transport took at once; see [`Protocol::eager_header`]), so that
    /// [`Protocol::take_done`] reports it under the returned fresh request id.
    pub fn complete_now(&mut self, dst: u32, tag: i32, len_bytes: usize) -> ReqId {
        let id = self.alloc_id();
        self.reqs.complete(
            id,
            Ok(Status {
                source: dst,
                tag,
                len_bytes,
            }),
        );
        id
    }

    /// Whether a frame for `dst` is waiting in [`Protocol::pop_frame`]'s queue.
    #[inline]
    pub fn has_frames_for(&self, dst: u32) -> bool {
        !self.out.is_empty() && self.out.iter().any(|f| f.peer == dst)
    }

    /// The envelope of the next message to `dst` on `ctx` (takes its sequence number).
    #[inline]
    fn next_env(&mut self, dst: u32, ctx: u32, tag: i32) -> Envelope {
        let seq = self.next_seq.entry((dst, ctx));
        let env = Envelope {
            ctx,
            src: self.rank,
            tag,
            seq: *seq,
        };
        *seq += 1;
        env
    }

    /// Whether a receive for `pat` may take its message straight from a transport with
    /// [`Protocol::take_eager`] (the fast path of a blocking receive): no request is
    /// pending, nothing is queued to send, no peer has failed, and no message is
    /// waiting that `pat` accepts or that arrived ahead of its turn. Then the next
    /// in-order message `pat` accepts is the receive's, as if it had been posted.
    #[inline]
    pub fn quiet_for(&self, pat: &Pattern) -> bool {
        self.reqs.live() == 0
            && self.out.is_empty()
            && self.data_ready.is_empty()
            && self.pulls.is_empty()
            && self.pushes.is_empty()
            && self.dead.is_empty()
            && self.matcher.quiet()
            && !self.matcher.has_unexpected(pat)
    }

    /// With [`Protocol::quiet_for`]`(pat)` true: if the frame `header` + `payload` from
    /// `peer` is the next in-order `Eager` message `pat` accepts, receive it into the
    /// host buffer `buf` (truncation as in MPI: the first `buf.len()` bytes, and
    /// [`MatchError::Truncated`]) and return the result. `None` for any other frame,
    /// and nothing changes (process it with [`Protocol::on_frame`] after posting the
    /// receive with [`Protocol::irecv`]).
    #[inline]
    pub fn take_eager(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: &InPayload<'_>,
        pat: &Pattern,
        buf: RawBuf,
    ) -> Option<Result<Status, Error>> {
        let (env, plen) = Frame::decode_eager(header)?;
        if plen != payload.len() as u64
            || env.src != peer
            || !buf.is_host()
            || !pat.accepts(&env)
            || !self.matcher.take_in_order(&env)
        {
            return None;
        }
        let cap = buf.len();
        Some(
            match self.write_payload(buf, 0, payload, payload.len().min(cap)) {
                Ok(()) => recv_result(env.src, env.tag, plen, cap),
                Err(e) => Err(e),
            },
        )
    }

    /// Post a receive into `buf` for messages accepted by `pat`.
    pub fn irecv(&mut self, pat: Pattern, buf: RawBuf) -> ReqId {
        let id = self.alloc_id();
        if let Some(src) = pat.src
            && let Some(e) = self.dead.get(&src)
        {
            self.reqs.complete(id, Err(e.clone()));
            return id;
        }
        self.reqs.set_recv(
            id,
            RecvReq {
                pat,
                buf,
                state: RecvState::Posted,
            },
        );
        if let Some(m) = self.matcher.post(pat, id) {
            self.deliver(m);
        } else if pat.src.is_none()
            && let Some(e) = self.dead.values().next().cloned()
        {
            // Nothing waiting matched, and a peer that might have been the sender is
            // gone: fail now rather than wait forever (compare MPI 4.1 fault tolerance
            // proposals, MPI_ERR_PROC_FAILED_PENDING).
            self.matcher.cancel(id);
            self.reqs.take_recv(id);
            self.reqs.complete(id, Err(e));
        }
        id
    }

    /// Receive a message removed by [`Protocol::improbe`] into `buf`.
    pub fn mrecv(&mut self, msg: ProbedMessage, buf: RawBuf) -> ReqId {
        let id = self.alloc_id();
        let pat = Pattern {
            ctx: msg.env.ctx,
            src: Some(msg.env.src),
            tag: Some(msg.env.tag),
        };
        if !msg.peer_ok
            && let Some(e) = self.dead.get(&msg.env.src)
        {
            self.reqs.complete(id, Err(e.clone()));
            return id;
        }
        self.reqs.set_recv(
            id,
            RecvReq {
                pat,
                buf,
                state: RecvState::Posted,
            },
        );
        self.deliver(Matched {
            recv: id,
            env: msg.env,
            msg: msg.body,
        });
        id
    }

    /// Status of the earliest unexpected message `pat` accepts (MPI_Iprobe).
    pub fn iprobe(&self, pat: &Pattern) -> Option<Status> {
        self.matcher.probe(pat).map(|(env, body)| Status {
            source: env.src,
            tag: env.tag,
            len_bytes: body.len() as usize,
        })
    }

    /// Remove the earliest unexpected message `pat` accepts (MPI_Improbe).
    pub fn improbe(&mut self, pat: &Pattern) -> Option<ProbedMessage> {
        self.matcher.take(pat).map(|(env, body)| ProbedMessage {
            env,
            body,
            peer_ok: true,
        })
    }

    /// Whether any receive from `src` (or `ANY_SOURCE` when `None`) could still be
    /// satisfied: false when that peer has failed.
    pub fn peer_failure(&self, src: u32) -> Option<&Error> {
        self.dead.get(&src)
    }

    /// A frame arrived from `peer`: its header bytes and its payload, owned
    /// (`Vec<u8>`) or lent by the transport ([`InPayload`]; the payload is copied
    /// straight into a matching receive buffer, or into the unexpected message queue).
    ///
    /// # Errors
    /// [`Error::Transport`] when the frame is malformed or inconsistent with the
    /// protocol state (the peer is then treated as failed).
    #[inline]
    pub fn on_frame<'a>(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: impl Into<InPayload<'a>>,
    ) -> Result<(), Error> {
        let r = self.on_frame_inner(peer, header, payload.into());
        if let Err(e) = &r {
            self.fail_peer(peer, e.clone());
        }
        r
    }

    /// Where the payload of the frame `header` (with `len_bytes` of payload) from
    /// `peer` may be written directly by a transport: for a `Data` frame of a host
    /// receive that expects it, that part of the receive buffer (valid until the frame
    /// is reported with [`Protocol::on_frame_placed`] or the peer fails); `None`
    /// otherwise (the frame then comes with its own payload to [`Protocol::on_frame`]).
    pub fn data_target(&self, peer: u32, header: &[u8], len_bytes: usize) -> Option<RawBuf> {
        let Ok(Some((Frame::Data { rreq, offset }, hlen, plen))) = Frame::decode(header) else {
            return None;
        };
        if hlen != header.len() || plen != len_bytes as u64 {
            return None;
        }
        let r = self.reqs.recv(rreq)?;
        let RecvState::Data { src, accept, .. } = r.state else {
            return None;
        };
        let end = offset.checked_add(len_bytes as u64)?;
        if src != peer || end > accept as u64 || !r.buf.is_host() {
            return None;
        }
        Some(RawBuf {
            ptr: r.buf.ptr.wrapping_add(offset as usize),
            len: len_bytes,
            kind: r.buf.kind,
        })
    }

    /// A frame arrived from `peer` whose payload (`len_bytes`) a transport wrote to the
    /// place [`Protocol::data_target`] gave for it.
    ///
    /// # Errors
    /// [`Error::Transport`] when the frame is not the `Data` frame that place was for
    /// (the peer is then treated as failed).
    pub fn on_frame_placed(
        &mut self,
        peer: u32,
        header: &[u8],
        len_bytes: usize,
    ) -> Result<(), Error> {
        let r = self.on_placed_inner(peer, header, len_bytes);
        if let Err(e) = &r {
            self.fail_peer(peer, e.clone());
        }
        r
    }

    fn on_placed_inner(&mut self, peer: u32, header: &[u8], len: usize) -> Result<(), Error> {
        let bad = |detail: String| Error::Transport {
            transport: "wire",
            peer,
            detail,
        };
        let Ok(Some((Frame::Data { rreq, offset }, _, plen))) = Frame::decode(header) else {
            return Err(bad("a placed payload for a frame that is not Data".into()));
        };
        let Some(r) = self.reqs.recv_mut(rreq) else {
            return Err(bad(format!(
                "placed Data for unknown receive request {rreq}"
            )));
        };
        let RecvState::Data {
            src, accept, got, ..
        } = &mut r.state
        else {
            return Err(bad(format!(
                "placed Data before Cts for receive request {rreq}"
            )));
        };
        let end = offset.checked_add(len as u64);
        if *src != peer || plen != len as u64 || end.is_none_or(|e| e > *accept as u64) {
            return Err(bad(format!(
                "placed Data chunk at offset {offset} of {len} bytes outside the {accept} accepted bytes"
            )));
        }
        *got += len;
        if *got >= *accept {
            self.finish_rndv_recv(rreq);
        }
        Ok(())
    }

    /// A frame produced earlier was taken by a transport.
    pub fn on_sent(&mut self, what: OnSent) {
        match what {
            OnSent::Nothing => {}
            OnSent::CompleteSend(id) => {
                if let Some(s) = self.reqs.take_send(id) {
                    self.complete_send(id, &s);
                }
            }
            OnSent::DataSent { sreq, len } => {
                let finished = match self.reqs.send_mut(sreq) {
                    Some(SendReq {
                        state: SendState::Data { sent, end, .. },
                        ..
                    }) => {
                        *sent += len;
                        *sent >= *end
                    }
                    _ => false,
                };
                if finished && let Some(s) = self.reqs.take_send(sreq) {
                    self.complete_send(sreq, &s);
                }
            }
        }
    }

    /// The connection to `peer` failed: fail every request involving it, every
    /// `ANY_SOURCE` receive still posted, and every later request naming it.
    pub fn fail_peer(&mut self, peer: u32, err: Error) {
        if self.dead.contains_key(&peer) {
            return;
        }
        self.dead.insert(peer, err.clone());
        let sends: Vec<ReqId> = self
            .reqs
            .sends()
            .filter(|(_, s)| s.dst == peer)
            .map(|(id, _)| id)
            .collect();
        for id in sends {
            if let Some(s) = self.reqs.take_send(id) {
                self.release_offer(id, s.buf);
            }
            self.reqs.complete(id, Err(err.clone()));
        }
        let posted = self
            .matcher
            .drain_posted(|p| p.src.is_none_or(|s| s == peer));
        for id in posted {
            self.reqs.take_recv(id);
            self.reqs.complete(id, Err(err.clone()));
        }
        let recvs: Vec<ReqId> = self
            .reqs
            .recvs()
            .filter(|(_, r)| {
                matches!(r.state, RecvState::Data { src, .. } | RecvState::Pulling { src, .. } if src == peer)
            })
            .map(|(id, _)| id)
            .collect();
        for id in recvs {
            self.reqs.take_recv(id);
            self.reqs.complete(id, Err(err.clone()));
        }
        self.out.retain(|f| f.peer != peer);
        self.pulls.retain(|p| p.peer != peer);
        self.pushes.retain(|p| p.peer != peer);
        self.early_help.retain(|&(p, _)| p != peer);
    }

    /// Next control or eager frame to send, in the order produced.
    pub fn pop_frame(&mut self) -> Option<OutFrame> {
        self.out.pop_front()
    }

    /// Next rendezvous data chunk. `room(peer)` gives the largest chunk the peer's
    /// transport takes now (`None`: peer backed up, skip it for now).
    pub fn next_data(&mut self, mut room: impl FnMut(u32) -> Option<usize>) -> Option<OutFrame> {
        for _ in 0..self.data_ready.len() {
            let sreq = self.data_ready.pop_front()?;
            let Some(s) = self.reqs.send_mut(sreq) else {
                continue;
            };
            let SendState::Data {
                rreq, queued, end, ..
            } = &mut s.state
            else {
                continue;
            };
            let Some(max) = room(s.dst) else {
                self.data_ready.push_back(sreq);
                continue;
            };
            let n = (*end - *queued).min(max.max(1));
            let header = Frame::Data {
                rreq: *rreq,
                offset: *queued as u64,
            }
            .header(n as u64);
            // queued + n <= end <= buf.len(), checked when the Cts arrived.
            let chunk = RawBuf {
                ptr: s.buf.ptr.wrapping_add(*queued),
                len: n,
                kind: s.buf.kind,
            };
            *queued += n;
            if *queued < *end {
                self.data_ready.push_back(sreq);
            }
            let peer = s.dst;
            let payload = if chunk.is_host() {
                Payload::User(chunk)
            } else {
                match self.read_device(chunk) {
                    Ok(v) => Payload::Owned(v),
                    Err(e) => {
                        if let Some(s) = self.reqs.take_send(sreq) {
                            self.release_offer(sreq, s.buf);
                        }
                        self.data_ready.retain(|&x| x != sreq);
                        self.reqs.complete(sreq, Err(e));
                        continue;
                    }
                }
            };
            return Some(OutFrame {
                peer,
                header,
                payload,
                on_sent: OnSent::DataSent { sreq, len: n },
            });
        }
        None
    }

    /// Whether rendezvous data is waiting to be pulled with [`Protocol::next_data`].
    pub fn has_data(&self) -> bool {
        !self.data_ready.is_empty()
    }

    /// Whether any output is waiting: frames for [`Protocol::pop_frame`], data for
    /// [`Protocol::next_data`] or copies for [`Protocol::pop_pull`].
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
            || !self.data_ready.is_empty()
            || !self.pulls.is_empty()
            || !self.pushes.is_empty()
    }

    /// How many requests have completed so far (a counter: compare two readings to
    /// learn whether an input completed something).
    #[inline]
    pub fn completions(&self) -> u64 {
        self.reqs.completions()
    }

    /// Take the result of request `id` if it has completed.
    pub fn take_done(&mut self, id: ReqId) -> Option<Result<Status, Error>> {
        self.reqs.take_done(id)
    }

    /// Whether request `id` has completed (without taking the result).
    pub fn is_done(&self, id: ReqId) -> bool {
        self.reqs.is_done(id)
    }

    /// Try to withdraw a receive that has not matched yet (used when a request is
    /// dropped unfinished). Returns whether it was withdrawn.
    pub fn cancel_recv(&mut self, id: ReqId) -> bool {
        if self.matcher.cancel(id) {
            self.reqs.free(id);
            true
        } else {
            false
        }
    }

    /// Number of requests not yet completed (sends and receives).
    pub fn pending(&self) -> usize {
        self.reqs.live()
    }

    /// Human-readable list of pending requests, for hang diagnostics.
    pub fn describe_pending(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .reqs
            .sends()
            .map(|(id, s)| {
                format!(
                    "send #{} to rank {} tag {} ({} bytes) {:?}",
                    reqs::number(id),
                    s.dst,
                    s.tag,
                    s.buf.len(),
                    s.state
                )
            })
            .collect();
        v.extend(self.reqs.recvs().map(|(id, r)| {
            let state = match &r.state {
                RecvState::Posted => "posted".to_string(),
                other => format!("{other:?}"),
            };
            format!(
                "recv #{} from {} tag {} ({} bytes) {state}",
                reqs::number(id),
                r.pat.src.map_or("any rank".into(), |s| format!("rank {s}")),
                r.pat.tag.map_or("any".into(), |t| t.to_string()),
                r.buf.len(),
            )
        }));
        v.sort();
        v
    }

    /// World size this protocol was made for.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Write `src` at `offset` of a pending receive's buffer, host or device.
    fn write_buf(&mut self, buf: RawBuf, offset: usize, src: &[u8]) -> Result<(), Error> {
        if src.is_empty() {
            return Ok(());
        }
        if buf.is_host() {
            // SAFETY: callers check offset + len <= buf.len(); the receive is pending.
            unsafe { buf.write_at(offset, src) };
            return Ok(());
        }
        match self.device.as_mut() {
            Some(d) => d
                .copy_to_device(buf, offset, src)
                .map_err(|e| Error::Gpu(format!("copy into the {} receive buffer: {e}", buf.kind))),
            None => Err(no_gpu(buf.kind)),
        }
    }

    /// Write the first `n` bytes of `payload` at `offset` of a pending receive's
    /// buffer, host or device. Callers check `offset + n <= buf.len()` and
    /// `n <= payload.len()`.
    #[inline]
    fn write_payload(
        &mut self,
        buf: RawBuf,
        offset: usize,
        payload: &InPayload<'_>,
        n: usize,
    ) -> Result<(), Error> {
        if n == 0 {
            return Ok(());
        }
        if buf.is_host() {
            debug_assert!(offset + n <= buf.len);
            // SAFETY: callers check the bounds; the receive is pending, so its buffer is
            // borrowed exclusively by it.
            let dst = unsafe { std::slice::from_raw_parts_mut(buf.ptr.add(offset), n) };
            payload.copy_to(dst);
            return Ok(());
        }
        let mut res = Ok(());
        payload.for_each_piece(|o, piece| {
            if res.is_ok() && o < n {
                let piece = &piece[..piece.len().min(n - o)];
                res = self.write_buf(buf, offset + o, piece);
            }
        });
        res
    }

    /// An eager message arrived: straight into a posted receive when one matches in
    /// order (copied once, from wherever the transport holds it), else into the
    /// unexpected message queue.
    #[inline]
    fn arrive_eager(&mut self, env: Envelope, payload: InPayload<'_>) {
        if let Some(recv) = self.matcher.arrive_matched(&env, &mut self.matched) {
            self.deliver_eager(recv, env, &payload);
        } else {
            self.matcher.arrive(
                env,
                Unexpected::Eager(payload.into_vec()),
                &mut self.matched,
            );
        }
        if !self.matched.is_empty() {
            let mut matched = std::mem::take(&mut self.matched);
            for m in matched.drain(..) {
                self.deliver(m);
            }
            self.matched = matched;
        }
    }

    /// Complete receive `recv` with the eager message `env` whose payload arrived
    /// just now (matched at once, never queued).
    #[inline]
    fn deliver_eager(&mut self, recv: ReqId, env: Envelope, payload: &InPayload<'_>) {
        let Some(r) = self.reqs.recv_mut(recv) else {
            return;
        };
        let buf = r.buf;
        let cap = buf.len();
        let n = payload.len().min(cap);
        let res = match self.write_payload(buf, 0, payload, n) {
            Ok(()) => recv_result(env.src, env.tag, payload.len() as u64, cap),
            Err(e) => Err(e),
        };
        self.reqs.complete(recv, res);
    }

    /// Stage a device buffer into host memory.
    fn read_device(&mut self, buf: RawBuf) -> Result<Vec<u8>, Error> {
        match self.device.as_mut() {
            Some(d) => d
                .copy_from_device(buf)
                .map_err(|e| Error::Gpu(format!("copy from the {} send buffer: {e}", buf.kind))),
            None => Err(no_gpu(buf.kind)),
        }
    }

    #[inline]
    fn alloc_id(&mut self) -> ReqId {
        self.reqs.reserve()
    }

    /// Let the side that offered `buf` (send request `sreq`) for a single copy release
    /// what it set up: the device side for device memory (CUDA IPC staging), the
    /// network side for host memory (RDMA registration).
    fn release_offer(&mut self, sreq: ReqId, buf: RawBuf) {
        if buf.is_host() {
            if let Some(n) = self.net.as_mut() {
                n.release(sreq);
            }
        } else if let Some(d) = self.device.as_mut() {
            d.done_with(sreq);
        }
    }

    fn complete_send(&mut self, id: ReqId, s: &SendReq) {
        self.release_offer(id, s.buf);
        self.reqs.complete(
            id,
            Ok(Status {
                source: s.dst,
                tag: s.tag,
                len_bytes: s.buf.len(),
            }),
        );
    }

    fn on_frame_inner(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: InPayload<'_>,
    ) -> Result<(), Error> {
        // The common frame first, without building a `Frame`.
        if let Some((env, plen)) = Frame::decode_eager(header)
            && plen == payload.len() as u64
            && env.src == peer
        {
            self.arrive_eager(env, payload);
            return Ok(());
        }
        let bad = |detail: String| Error::Transport {
            transport: "wire",
            peer,
            detail,
        };
        let (frame, hlen, plen) = match Frame::decode(header) {
            Ok(Some(x)) => x,
            Ok(None) => {
                return Err(bad(format!(
                    "truncated frame header ({} bytes)",
                    header.len()
                )));
            }
            Err(e) => return Err(bad(format!("malformed frame: {e}"))),
        };
        if hlen != header.len() || plen != payload.len() as u64 {
            return Err(bad(format!(
                "frame lengths disagree: header {hlen} of {} bytes, payload {plen} of {} bytes",
                header.len(),
                payload.len()
            )));
        }
        match frame {
            Frame::Eager { env } | Frame::Rts { env, .. } if env.src != peer => Err(bad(format!(
                "frame claims source rank {} but came from rank {peer}",
                env.src
            ))),
            Frame::Eager { env } => {
                self.arrive_eager(env, payload);
                Ok(())
            }
            Frame::Rts {
                env,
                msg_len,
                sreq,
                mem,
            } => {
                if !payload.is_empty() {
                    return Err(bad("Rts frame with a payload".into()));
                }
                self.arrive(env, Unexpected::Rts { msg_len, sreq, mem });
                Ok(())
            }
            Frame::Cts {
                sreq,
                rreq,
                accept_len,
                ..
            } => {
                let Some(s) = self.reqs.send_mut(sreq) else {
                    return Err(bad(format!("Cts for unknown send request {sreq}")));
                };
                if s.dst != peer || !matches!(s.state, SendState::AwaitCts) {
                    return Err(bad(format!("unexpected Cts for send request {sreq}")));
                }
                if accept_len > s.buf.len() as u64 {
                    return Err(bad(format!(
                        "Cts accepts {accept_len} bytes of a {}-byte message",
                        s.buf.len()
                    )));
                }
                let end = accept_len as usize;
                s.state = SendState::Data {
                    rreq,
                    queued: 0,
                    sent: 0,
                    end,
                };
                if end == 0 {
                    if let Some(s) = self.reqs.take_send(sreq) {
                        self.complete_send(sreq, &s);
                    }
                } else {
                    self.data_ready.push_back(sreq);
                }
                Ok(())
            }
            Frame::Data { rreq, offset } => {
                let Some(r) = self.reqs.recv_mut(rreq) else {
                    return Err(bad(format!("Data for unknown receive request {rreq}")));
                };
                let RecvState::Data {
                    src, accept, got, ..
                } = &mut r.state
                else {
                    return Err(bad(format!("Data before Cts for receive request {rreq}")));
                };
                let end = offset.checked_add(payload.len() as u64);
                if *src != peer || end.is_none_or(|e| e > *accept as u64) {
                    return Err(bad(format!(
                        "Data chunk at offset {offset} of {} bytes outside the {} accepted bytes",
                        payload.len(),
                        accept
                    )));
                }
                *got += payload.len();
                let finished = *got >= *accept;
                let buf = r.buf;
                // offset + len <= accept <= buf.len(), checked above; the receive is
                // pending so its buffer is still borrowed.
                if let Err(e) = self.write_payload(buf, offset as usize, &payload, payload.len()) {
                    self.reqs.take_recv(rreq);
                    self.reqs.complete(rreq, Err(e));
                    return Ok(());
                }
                if finished {
                    self.finish_rndv_recv(rreq);
                }
                Ok(())
            }
            Frame::Help { sreq } => {
                self.on_help(peer, sreq);
                Ok(())
            }
            Frame::Push {
                sreq,
                rreq,
                offset,
                len,
                mem,
            } => self
                .on_push(peer, sreq, rreq, offset, len, mem)
                .map_err(bad),
            Frame::Pushed { rreq, ok } => self.on_pushed(peer, rreq, ok).map_err(bad),
            Frame::Fin { sreq } => {
                match self.reqs.send(sreq) {
                    Some(s) if s.dst == peer && matches!(s.state, SendState::AwaitCts) => {}
                    _ => return Err(bad(format!("unexpected Fin for send request {sreq}"))),
                }
                if let Some(s) = self.reqs.take_send(sreq) {
                    self.complete_send(sreq, &s);
                }
                Ok(())
            }
        }
    }

    fn arrive(&mut self, env: Envelope, body: Unexpected) {
        let mut matched = std::mem::take(&mut self.matched);
        self.matcher.arrive(env, body, &mut matched);
        for m in matched.drain(..) {
            self.deliver(m);
        }
        self.matched = matched;
    }

    fn deliver(&mut self, m: Matched<ReqId, Unexpected>) {
        let Matched { recv, env, msg } = m;
        let Some(r) = self.reqs.recv_mut(recv) else {
            return;
        };
        let cap = r.buf.len();
        match msg {
            Unexpected::Eager(data) => {
                let n = data.len().min(cap);
                let buf = r.buf;
                self.reqs.take_recv(recv);
                // n <= cap; the receive was pending until now, its buffer borrowed.
                let res = match self.write_buf(buf, 0, &data[..n]) {
                    Ok(()) => recv_result(env.src, env.tag, data.len() as u64, cap),
                    Err(e) => Err(e),
                };
                self.reqs.complete(recv, res);
            }
            Unexpected::Rts { msg_len, sreq, mem } => {
                let accept = (msg_len.min(cap as u64)) as usize;
                let pull = match mem {
                    RemoteMem::HostCma { .. } => {
                        r.buf.is_host() && self.pull_from.contains(&env.src)
                    }
                    RemoteMem::CudaIpc { .. } => {
                        self.device.is_some() && self.ipc_from.contains(&env.src)
                    }
                    RemoteMem::Rdma { len, .. } => {
                        r.buf.is_host() && self.pull_from.contains(&env.src) && len >= msg_len
                    }
                    _ => false,
                };
                if accept > 0 && pull {
                    r.state = RecvState::Pulling {
                        src: env.src,
                        tag: env.tag,
                        msg_len,
                        sreq,
                        accept,
                        copy: share::PullCopy {
                            mem,
                            pulled: 0,
                            end: accept,
                            inflight: 0,
                            helped: false,
                            pushing: false,
                        },
                    };
                    self.start_pull(recv, env.src, sreq, mem);
                    return;
                }
                let header = Frame::Cts {
                    sreq,
                    rreq: recv,
                    accept_len: accept as u64,
                    mem: RemoteMem::None,
                }
                .header(0);
                self.out.push_back(OutFrame {
                    peer: env.src,
                    header,
                    payload: Payload::Empty,
                    on_sent: OnSent::Nothing,
                });
                r.state = RecvState::Data {
                    src: env.src,
                    tag: env.tag,
                    msg_len,
                    accept,
                    got: 0,
                };
                if accept == 0 {
                    self.finish_rndv_recv(recv);
                }
            }
        }
    }

    fn finish_rndv_recv(&mut self, id: ReqId) {
        if let Some(RecvReq {
            buf,
            state: RecvState::Data {
                src, tag, msg_len, ..
            },
            ..
        }) = self.reqs.take_recv(id)
        {
            self.reqs
                .complete(id, recv_result(src, tag, msg_len, buf.len()));
        }
    }
}

fn no_gpu(kind: MemoryKind) -> Error {
    Error::Gpu(format!(
        "a {kind} buffer was passed, but GPU support is not available in this process (build rankwire with the `cuda` feature and run where libcuda is present)"
    ))
}

fn recv_result(src: u32, tag: i32, msg_len: u64, cap: usize) -> Result<Status, Error> {
    if msg_len > cap as u64 {
        Err(MatchError::Truncated {
            source_rank: src,
            tag,
            message_bytes: msg_len,
            buffer_bytes: cap as u64,
        }
        .into())
    } else {
        Ok(Status {
            source: src,
            tag,
            len_bytes: msg_len as usize,
        })
    }
}

mod reqs;
mod share;

pub use share::{PULL_CHUNK_BYTES, PushReq, SHARE_MIN_BYTES};

#[cfg(test)]
mod tests;
