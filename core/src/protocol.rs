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
//! earlier was taken by a transport), [`Protocol::fail_peer`] (a connection died), and
//! the answers to memory actions: [`Protocol::staged_out`], [`Protocol::staged_in`],
//! [`Protocol::offered`] (and [`Protocol::pull_done`], [`Protocol::push_done`] for
//! pulls and shares).
//! Outputs, in this order after every input: [`Protocol::pop_action`] (memory work on
//! device buffers and buffer offers, see below: execute each and answer it before the
//! next input, since the answer may queue frames), [`Protocol::pop_frame`] (control
//! and eager frames, and `Data` frames of staged device chunks, to be sent to each
//! peer in order), [`Protocol::next_data`] (rendezvous data chunks, pulled when a
//! transport has room; a device chunk is not returned but becomes a
//! [`MemAction::StageOut`], so after `next_data` returns `None` run the actions again
//! and look at `pop_frame`), [`Protocol::pop_pull`] / [`Protocol::pop_push`] (copies),
//! [`Protocol::take_done`] (completions).
//!
//! # Memory actions (sans-IO device and network memory)
//! The protocol never touches device memory and never registers memory: where a
//! message needs that, it queues a [`MemAction`] and waits for the answer.
//! - [`MemAction::StageOut`]: copy a device send buffer (the whole eager message, or
//!   one rendezvous chunk) to host; answer [`Protocol::staged_out`] with the bytes.
//!   The frame goes out after the answer (its sequence number was taken at `isend`, so
//!   a later message that overtakes it is held back by the receiver's matching).
//! - [`MemAction::StageIn`]: copy arrived bytes into a device receive buffer; answer
//!   [`Protocol::staged_in`]. The receive completes once every copy is answered.
//! - [`MemAction::Offer`]: export (CUDA IPC) or register (RDMA) a rendezvous send
//!   buffer for a single-copy pull; answer [`Protocol::offered`] with the descriptor,
//!   or `None` to refuse (the receiver then asks for `Data` frames). The `Rts` goes out
//!   after the answer.
//! - [`MemAction::Release`]: a send whose offer was accepted has ended; free what the
//!   offer set up. No answer.
//!
//! A failed copy fails its request with [`Error::Gpu`]; requests failed by
//! [`Protocol::fail_peer`] drop their queued actions. Host buffers never produce
//! actions (the eager host send and receive paths do no extra work), except an RDMA
//! offer for peers named by [`Protocol::offer_rdma`].
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
//! Buffers are raw `(pointer, length, memory kind)` triples that the API layer keeps
//! borrowed until the request completes. Host buffers are read and written here;
//! device buffers only by whoever executes the [`MemAction`]s. Zero-length buffers are
//! never dereferenced.

use std::collections::VecDeque;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::error::{Error, MatchError};
use crate::matching::{Matched, Matcher, Pattern};
use crate::wire::{Envelope, Frame, HeaderBuf, RemoteMem};
use rankwire_transports::{InPayload, MemoryKind};

/// Request id, unique within one rank for the life of the process.
pub type ReqId = u64;

/// The outcome of a request given by its id ([`crate::RawRequest::from_parts`]) that
/// the runtime does not hold: completed already, or never made.
#[cold]
pub(crate) fn unknown_request(id: ReqId) -> Error {
    Error::Matching(crate::MatchError::UnknownRequest {
        number: reqs::number(id),
    })
}

/// What a completed receive (or send) reports: MPI's `MPI_Status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Rank of the sender (for a send: the destination).
    pub source: usize,
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
pub enum Payload {
    /// No payload.
    Empty,
    /// Bytes in the user's send buffer, valid until the owning request completes.
    User(RawBuf),
    /// Bytes owned by the frame.
    Owned(Vec<u8>),
    /// Bytes in a buffer lent to the frame (a pinned staging buffer of a device chunk,
    /// [`Protocol::staged_out`]); dropping it gives the buffer back.
    Lent(LentBytes),
}

/// Host bytes lent to a frame by their owner: dropping the box gives them back (a
/// pinned staging chunk returns to its pool).
pub type LentBytes = Box<dyn AsRef<[u8]> + Send>;

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
            Payload::Lent(b) => (**b).as_ref(),
        }
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Payload::Empty => f.write_str("Empty"),
            Payload::User(b) => f.debug_tuple("User").field(b).finish(),
            Payload::Owned(v) => write!(f, "Owned({} bytes)", v.len()),
            Payload::Lent(b) => write!(f, "Lent({} bytes)", (**b).as_ref().len()),
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
/// [`MemoryKind::Host`]; device memory is only ever touched by the executor of
/// [`MemAction`]s.
#[derive(Debug, Clone, Copy)]
pub struct RawBuf {
    ptr: *mut u8,
    len: usize,
    kind: MemoryKind,
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

/// What [`Protocol::take_ok_into`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The request succeeded: its status was pushed and the request freed.
    Pushed,
    /// The request is pending.
    Pending,
    /// The request failed or is not held: nothing was changed.
    Other,
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
            source: self.env.src as usize,
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
    /// Eager device message waiting for [`MemAction::StageOut`]; `env` goes in its frame.
    Staging { env: Envelope },
    /// Rendezvous waiting for [`MemAction::Offer`]; `env` goes in its `Rts`.
    Offering { env: Envelope },
    /// Rts sent; waiting for Cts.
    AwaitCts,
    /// Pushing data: `queued` bytes handed out as frames, `sent` taken by the transport.
    /// The device chunks in `staging` (byte offset, length; below `queued`) are being
    /// copied to host ([`MemAction::StageOut`]; at most the protocol's stage depth).
    Data {
        rreq: u64,
        queued: usize,
        sent: usize,
        end: usize,
        staging: Vec<(usize, usize)>,
    },
}

#[derive(Debug)]
struct SendReq {
    dst: u32,
    /// Context id of the message (for revocation, `revoke.rs`).
    ctx: u32,
    tag: i32,
    buf: RawBuf,
    state: SendState,
    /// `Help` was sent for it (`share.rs`).
    helped: bool,
    /// Writes of shares of it queued or under way: it must not complete before they
    /// are done (they read its buffer).
    pushing: u32,
    /// An offer of its buffer was accepted, and how it is pulled:
    /// [`MemAction::Release`] when it ends.
    offered: Option<OfferKind>,
    /// `Cancel` was sent for it ([`Protocol::cancel_send`]); `Cancelled` answers.
    cancel_asked: bool,
}

impl SendReq {
    /// A send of `buf` to `dst` on context `ctx` with `tag`, starting in `state` (no
    /// share yet).
    fn new(dst: u32, ctx: u32, tag: i32, buf: RawBuf, state: SendState) -> Self {
        SendReq {
            dst,
            ctx,
            tag,
            buf,
            state,
            helped: false,
            pushing: 0,
            offered: None,
            cancel_asked: false,
        }
    }
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
        /// Boxed: the remote memory descriptor is large, and every request slot is as
        /// large as its largest state.
        copy: Box<share::PullCopy>,
    },
    /// Matched an Rts and sent Cts; `got` of `accept` bytes arrived.
    Data {
        src: u32,
        tag: i32,
        msg_len: u64,
        accept: usize,
        got: usize,
        /// A share this rank asked the sender to write, before a failed pull made it
        /// fall back to `Cts`, is not answered yet: the sender may still write into the
        /// buffer, so the receive completes only after `Pushed` (`share.rs`).
        pushing: bool,
        /// Chunks being copied into the device buffer ([`MemAction::StageIn`]).
        staging: u32,
        /// A copy into the device buffer failed: the rest is received but not written,
        /// and the receive fails with this once all has arrived.
        failed: Option<Box<Error>>,
    },
    /// An eager message for a device buffer is being copied in
    /// ([`MemAction::StageIn`]); the receive completes with `result` once it is.
    Staging {
        result: Result<Status, Error>,
    },
}

#[derive(Debug)]
struct RecvReq {
    pat: Pattern,
    buf: RawBuf,
    state: RecvState,
}

/// Default of [`Protocol::set_device_staging`]'s depth: device chunks of one send
/// being copied to host at once (`RANKWIRE_GPU_STAGE_DEPTH`). With
/// [`DEFAULT_STAGE_CHUNK_BYTES`], the best of a sweep of 256 KiB–4 MiB chunks and
/// depths 2–8 over TCP on the GPU machine (benches/results/gpu-2026-12-05-staging).
pub const DEFAULT_STAGE_DEPTH: u32 = 4;

/// Default of [`Protocol::set_device_staging`]'s chunk size in bytes
/// (`RANKWIRE_GPU_STAGE_CHUNK`); smaller where the transport's frames are.
pub const DEFAULT_STAGE_CHUNK_BYTES: usize = 1 << 20;

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
    /// Device buffers may be used: someone executes the device [`MemAction`]s.
    gpu: bool,
    /// Device chunks of one rendezvous send being copied to host at once (at least 1).
    stage_depth: u32,
    /// Largest device chunk in bytes (0: the transport's largest frame payload).
    stage_chunk: usize,
    /// Memory actions waiting for [`Protocol::pop_action`] (`actions.rs`).
    actions: VecDeque<MemAction>,
    /// Peers to which rendezvous sends of host buffers offer an RDMA registration.
    net_to: HashSet<u32>,
    /// Peers whose device buffers this rank may pull through CUDA IPC.
    ipc_from: HashSet<u32>,
    /// Peers to which device-buffer rendezvous sends offer a CUDA IPC handle.
    ipc_to: HashSet<u32>,
    /// Peers to which device-buffer rendezvous sends offer an RDMA registration of the
    /// device memory (GPUDirect RDMA).
    gdr_to: HashSet<u32>,
    /// Peers whose RDMA-offered buffers this rank may read into its device buffers
    /// (GPUDirect RDMA), until [`GDR_MAX_FAILURES`] reads in a row failed.
    gdr_from: HashSet<u32>,
    /// Reads into device memory that failed in a row, per peer.
    gdr_failures: HashMap<u32, u32>,
    /// Revoked collective contexts, and the world rank that revoked each
    /// (`revoke.rs`).
    revoked: HashMap<u32, u32>,
    /// Members (world ranks) of the live communicators' collective contexts, other
    /// than the world's ([`Protocol::ctx_live`]): a `Revoke` counts only from one of
    /// them.
    members: HashMap<u32, std::sync::Arc<[u32]>>,
    /// `Revoke`s of collective contexts not live here (yet), and who sent each.
    revokes_early: HashMap<u32, u32>,
}

/// Failed reads into device memory in a row from one peer after which device buffers
/// from it are staged ([`Protocol::allow_gdr`]).
pub const GDR_MAX_FAILURES: u32 = 3;

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
            gpu: false,
            stage_depth: DEFAULT_STAGE_DEPTH,
            stage_chunk: DEFAULT_STAGE_CHUNK_BYTES,
            actions: VecDeque::new(),
            net_to: Default::default(),
            ipc_from: Default::default(),
            ipc_to: Default::default(),
            gdr_to: Default::default(),
            gdr_from: Default::default(),
            gdr_failures: Default::default(),
            revoked: Default::default(),
            members: Default::default(),
            revokes_early: Default::default(),
        }
    }

    /// Accept device buffers: the caller executes [`MemAction::StageOut`],
    /// [`MemAction::StageIn`] and CUDA IPC [`MemAction::Offer`]s. Without it, device
    /// buffers fail their requests with [`Error::Gpu`].
    pub fn enable_device(&mut self) {
        self.gpu = true;
    }

    /// Set how rendezvous sends of device buffers stage through host memory: up to
    /// `depth` chunks (at least 1) of at most `chunk_bytes` each (0: as large as the
    /// transport takes) are being copied to host at once, so the copy of the next
    /// chunks overlaps the transfer of the previous ones. Default: depth
    /// [`DEFAULT_STAGE_DEPTH`], chunks of [`DEFAULT_STAGE_CHUNK_BYTES`].
    pub fn set_device_staging(&mut self, depth: u32, chunk_bytes: usize) {
        self.stage_depth = depth.max(1);
        self.stage_chunk = chunk_bytes;
    }

    /// Let rendezvous sends of host buffers to each of `peers` offer the buffer for an
    /// RDMA READ by the receiver: each such send asks for an RDMA registration with
    /// [`MemAction::Offer`] (`to:` [`OfferKind::Rdma`]).
    pub fn offer_rdma(&mut self, peers: &[u32]) {
        self.net_to = peers.iter().copied().collect();
    }

    /// Allow device buffers to be exchanged with each of `peers` by RDMA on registered
    /// device memory (GPUDirect RDMA) in both directions: rendezvous sends of device
    /// buffers ask for an [`MemAction::Offer`] (`to:` [`OfferKind::Rdma`]: a device
    /// memory region), and device receives read offered buffers with an RDMA READ
    /// ([`Protocol::pop_pull`]). Needs [`Protocol::enable_device`]. A read that fails
    /// makes that message go by `Cts` and staged `Data` frames; after
    /// [`GDR_MAX_FAILURES`] in a row from one peer, device buffers from it are always
    /// staged.
    pub fn allow_gdr(&mut self, peers: &[u32]) {
        self.gdr_to.extend(peers.iter().copied());
        self.gdr_from.extend(peers.iter().copied());
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

    /// Free the per-peer state of a communicator whose last handle dropped: its
    /// contexts `ctx` (point-to-point) and `ctx | 2^31` (collectives) with world ranks
    /// `members`. Returns `false` and changes nothing while a receive is posted or a
    /// message waits on either context (the id must not be reused then: see
    /// [`crate::group`]), or when its collective context was revoked here
    /// (`revoke.rs`: the id is then held for good, so that a new communicator never
    /// inherits the revocation); otherwise the sequence numbers to and from every
    /// member are forgotten and `true` is returned. Costs O(members) when matching is
    /// idle.
    pub fn release_ctx(&mut self, ctx: u32, members: &[u32]) -> bool {
        let coll = ctx | crate::context_id::COLL_CTX_BIT;
        if self.matcher.holds(ctx) || self.matcher.holds(coll) || self.is_revoked(coll) {
            return false;
        }
        self.members.remove(&coll);
        for &w in members {
            for c in [ctx, coll] {
                self.matcher.forget(w, c);
                self.next_seq.remove((w, c));
            }
        }
        true
    }

    /// Number of (peer, context) pairs with sequence state, sending and receiving
    /// (bounded by peers × live communicators; for leak tests).
    pub fn seq_pairs(&self) -> usize {
        self.matcher.seq_pairs() + self.next_seq.len()
    }

    /// Next copy the engine must perform for a pull-mode rendezvous.
    pub fn pop_pull(&mut self) -> Option<PullReq> {
        self.pulls.pop_front()
    }

    /// Whether any receive from `src` (or `ANY_SOURCE` when `None`) could still be
    /// satisfied: false when that peer has failed.
    pub fn peer_failure(&self, src: u32) -> Option<&Error> {
        self.dead.get(&src)
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
                self.release_offer(id, &s);
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
            // A receive with copies into its device buffer in flight completes once they
            // are answered (staged_in), so that no copy lands after it completed.
            if let Some(RecvReq {
                state:
                    RecvState::Data {
                        staging,
                        failed,
                        got,
                        accept,
                        ..
                    },
                ..
            }) = self.reqs.recv_mut(id)
                && *staging > 0
            {
                *got = (*got).max(*accept);
                failed.get_or_insert_with(|| Box::new(err.clone()));
                continue;
            }
            self.reqs.take_recv(id);
            self.reqs.complete(id, Err(err.clone()));
        }
        self.out.retain(|f| f.peer != peer);
        self.pulls.retain(|p| p.peer != peer);
        self.pushes.retain(|p| p.peer != peer);
        self.early_help.retain(|&(p, _)| p != peer);
        self.drop_dead_actions();
    }

    /// Next control or eager frame (or `Data` frame of a staged device chunk) to send,
    /// in the order produced.
    pub fn pop_frame(&mut self) -> Option<OutFrame> {
        self.out.pop_front()
    }

    /// Whether any output is waiting: actions for [`Protocol::pop_action`], frames for
    /// [`Protocol::pop_frame`], data for [`Protocol::next_data`] or copies for
    /// [`Protocol::pop_pull`] and [`Protocol::pop_push`].
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
            || !self.actions.is_empty()
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

    /// A copy of request `id`'s result if it has completed (the result stays, for the
    /// call that completes the request).
    pub fn peek_done(&self, id: ReqId) -> Option<Result<Status, Error>> {
        self.reqs.peek_done(id)
    }

    /// Whether request `id` has completed (without taking the result).
    pub fn is_done(&self, id: ReqId) -> bool {
        self.reqs.is_done(id)
    }

    /// The fast path of [`Protocol::take_settled`] for the common outcome: when request
    /// `id` completed successfully, push its status onto `out` and free the request
    /// ([`Taken::Pushed`]); [`Taken::Pending`] while it is pending; [`Taken::Other`]
    /// (nothing changed) when it failed or is not held: take that with
    /// [`Protocol::take_settled`]. The status is copied straight from the request's
    /// slot into `out`, with no outcome moved in between (a `Result` with an error
    /// in it is 48 bytes, which the compiler moves through temporaries).
    #[inline(always)]
    pub fn take_ok_into(&mut self, id: ReqId, out: &mut Vec<Status>) -> Taken {
        self.reqs.take_ok_into(id, out)
    }

    /// The outcome of request `id` once it is settled: taken when done, an error
    /// ([`crate::MatchError::UnknownRequest`]) when not held; `None` while pending.
    #[inline]
    pub fn take_settled(&mut self, id: ReqId) -> Option<Result<Status, Error>> {
        self.reqs.take_settled(id)
    }

    /// Whether request `id` is settled: completed (its outcome waiting), or not held at
    /// all (taken already, or never made). A wait for an id stops at this.
    #[inline]
    pub fn is_settled(&self, id: ReqId) -> bool {
        self.reqs.is_settled(id)
    }

    /// Whether the table holds request `id` (pending, or its outcome waiting).
    pub fn is_known(&self, id: ReqId) -> bool {
        self.reqs.is_known(id)
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

    /// Whether request `id` is a send or receive that has not completed.
    pub fn is_pending(&self, id: ReqId) -> bool {
        self.reqs.send(id).is_some() || self.reqs.recv(id).is_some()
    }

    /// World rank this protocol was made for.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    #[inline]
    fn alloc_id(&mut self) -> ReqId {
        self.reqs.reserve()
    }
}

fn no_gpu(kind: MemoryKind) -> Error {
    Error::Gpu(format!(
        "a {kind} buffer was passed, but GPU support is not available in this process (run where libcuda is present; a --no-default-features build has no `cuda` feature)"
    ))
}

#[inline]
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
            source: src as usize,
            tag,
            len_bytes: msg_len as usize,
        })
    }
}

mod actions;
mod recv;
mod reqs;
mod revoke;
mod send;
mod share;

pub use actions::{MemAction, OfferKind};
pub use share::{PULL_CHUNK_BYTES, PushReq, SHARE_MIN_BYTES};

#[cfg(test)]
mod tests;
