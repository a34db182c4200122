//! Communicators and point-to-point operations (MPI 4.1 chapter 3).
//!
//! A [`Communicator`] is a group of ranks (stored as their world ranks) with a context
//! id. Its API speaks *communicator* ranks: destinations and sources are translated to
//! world ranks on the way in, and [`Status::source`] back to the communicator rank on
//! the way out; the protocol below only knows world ranks and context ids. How context
//! ids are allocated, and how communicators are created, is in [`crate::group`];
//! collectives are in [`crate::coll`].

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytemuck::Pod;

pub(crate) use crate::comm_state::CommState;
use crate::comm_state::local_err;
pub(crate) use crate::context_id::COLL_CTX_BIT;
use crate::engine::SendStart;
use crate::error::{Error, Result};
use crate::matching::Pattern;
use crate::protocol::{ProbedMessage, RawBuf, ReqId, Status};
use crate::request::{Detached, RawRequest, Request};
use crate::runtime::Inner;

/// Largest tag a user may pass (MPI_TAG_UB). Tags run from 0 to this value.
pub const TAG_UB: i32 = (1 << 30) - 1;

/// Where a receive accepts messages from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Any rank (MPI_ANY_SOURCE).
    Any,
    /// Only this rank of the communicator.
    Rank(usize),
}

/// Which tags a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// Any tag (MPI_ANY_TAG).
    Any,
    /// Only this tag.
    Value(i32),
}

/// `Source::Any`, MPI's name.
pub const ANY_SOURCE: Source = Source::Any;
/// `Tag::Any`, MPI's name.
pub const ANY_TAG: Tag = Tag::Any;

impl From<usize> for Source {
    fn from(r: usize) -> Self {
        Source::Rank(r)
    }
}

impl From<i32> for Tag {
    fn from(t: i32) -> Self {
        Tag::Value(t)
    }
}

/// A group of ranks that communicate, with its own matching context (MPI_Comm).
///
/// Cheap to clone; all clones are the same communicator (same context, same sequence
/// of collective calls). Ranks given to and returned by its methods are ranks *in this
/// communicator* (`0..size()`).
#[derive(Clone)]
pub struct Communicator {
    pub(crate) inner: Arc<Inner>,
    pub(crate) st: Arc<CommState>,
}

/// A message removed from the unexpected queue by [`Communicator::mprobe`]; only
/// [`Message::recv`] can receive it (MPI_Mprobe / MPI_Mrecv, MPI 4.1 §3.8.2).
pub struct Message {
    pub(crate) inner: Arc<Inner>,
    pub(crate) st: Arc<CommState>,
    pub(crate) msg: Option<ProbedMessage>,
}

impl Communicator {
    /// The world communicator of `inner` (its shared state is the runtime's).
    pub(crate) fn world(inner: Arc<Inner>) -> Self {
        let st = inner.world_state();
        Communicator { inner, st }
    }

    /// Rank of the calling process in this communicator (MPI_Comm_rank).
    pub fn rank(&self) -> usize {
        self.st.rank
    }

    /// Number of ranks in this communicator (MPI_Comm_size).
    pub fn size(&self) -> usize {
        self.st.group.len()
    }

    /// World rank of communicator rank `rank`, or `None` if out of range.
    pub fn world_rank(&self, rank: usize) -> Option<usize> {
        self.st.group.get(rank).map(|&w| w as usize)
    }

    /// Largest valid tag (MPI_TAG_UB attribute).
    pub fn tag_ub(&self) -> i32 {
        TAG_UB
    }

    /// Blocking standard-mode send of `buf` to rank `dest` with `tag` (MPI_Send).
    /// Returns once `buf` may be reused.
    ///
    /// A message above the eager limit (64 KiB on the self transport) waits for its
    /// receive (rendezvous). So a blocking send **to this rank itself** above that
    /// size, with no matching receive posted, completes only if another thread of this
    /// process posts the receive; otherwise it waits forever (legal MPI, as with
    /// `MPI_Send`). rankwire logs a one-time warning when it sees one; post the receive
    /// first ([`Communicator::irecv`]) or use [`Communicator::isend`].
    ///
    /// # Errors
    /// [`Error::Usage`] for a rank out of range or a tag outside `0..=TAG_UB`;
    /// [`Error::Connection`] if the peer is gone.
    pub fn send<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.warn_blocking_self_send(std::mem::size_of_val(buf), dest, tag, false);
        match self.post_send(bytemuck::cast_slice(buf), dest, tag, false)? {
            SendStart::Done(_) => Ok(()),
            SendStart::Queued(id) => wait_id(&self.inner, id).map(|_| ()),
        }
    }

    /// Blocking synchronous send (MPI_Ssend): returns only after the matching receive
    /// has started. To this rank itself, of any size, it completes only if the receive
    /// is posted already or by another thread (warned about once, as for
    /// [`Communicator::send`]).
    ///
    /// # Errors
    /// As [`Communicator::send`].
    pub fn ssend<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.warn_blocking_self_send(std::mem::size_of_val(buf), dest, tag, true);
        match self.post_send(bytemuck::cast_slice(buf), dest, tag, true)? {
            SendStart::Done(_) => Ok(()),
            SendStart::Queued(id) => wait_id(&self.inner, id).map(|_| ()),
        }
    }

    /// Blocking receive into `buf` (MPI_Recv). `buf.len()` elements is the capacity;
    /// [`Status::len_bytes`] gives what arrived.
    ///
    /// # Errors
    /// [`Error::Matching`] with [`crate::MatchError::Truncated`] if the message is larger
    /// than `buf` (the first `buf` bytes are written, the message is consumed);
    /// [`Error::Usage`] for invalid source or tag; [`Error::Connection`] if the source
    /// died.
    pub fn recv<T: Pod>(
        &self,
        buf: &mut [T],
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Status> {
        self.inner.check_live()?;
        let pat = self.pattern(source.into(), tag.into())?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let raw = RawBuf::new(bytes.as_mut_ptr(), bytes.len());
        self.inner
            .recv(pat, raw)
            .map(|st| self.local_status(st))
            .map_err(|e| self.local_err(e))
    }

    /// Send and receive in one call without deadlock (MPI_Sendrecv).
    ///
    /// # Errors
    /// As [`Communicator::send`] and [`Communicator::recv`]; the receive's error wins.
    pub fn sendrecv<S: Pod, R: Pod>(
        &self,
        sendbuf: &[S],
        dest: usize,
        sendtag: i32,
        recvbuf: &mut [R],
        source: impl Into<Source>,
        recvtag: impl Into<Tag>,
    ) -> Result<Status> {
        let r = self.post_recv(
            bytemuck::cast_slice_mut(recvbuf),
            source.into(),
            recvtag.into(),
        )?;
        let s = match self.post_send(bytemuck::cast_slice(sendbuf), dest, sendtag, false) {
            Ok(s) => s,
            Err(e) => {
                // Withdraw the receive (or, if it already matched, let it finish) so
                // the runtime no longer holds `recvbuf`.
                if !self.inner.cancel_recv(r) {
                    let _ = wait_id(&self.inner, r);
                }
                return Err(e);
            }
        };
        let st = wait_id(&self.inner, r);
        let ss = match s {
            SendStart::Done(st) => Ok(st),
            SendStart::Queued(s) => wait_id(&self.inner, s),
        };
        let st = st.map_err(|e| self.local_err(e))?;
        ss?;
        Ok(self.local_status(st))
    }

    /// Nonblocking send (MPI_Isend). `buf` stays borrowed until the request completes.
    ///
    /// # Errors
    /// [`Error::Usage`] for invalid rank or tag.
    pub fn isend<'a, T: Pod>(&self, buf: &'a [T], dest: usize, tag: i32) -> Result<Request<'a>> {
        self.start_send(bytemuck::cast_slice(buf), dest, tag, false)
    }

    /// Nonblocking synchronous send (MPI_Issend).
    ///
    /// # Errors
    /// [`Error::Usage`] for invalid rank or tag.
    pub fn issend<'a, T: Pod>(&self, buf: &'a [T], dest: usize, tag: i32) -> Result<Request<'a>> {
        self.start_send(bytemuck::cast_slice(buf), dest, tag, true)
    }

    /// Nonblocking receive (MPI_Irecv). `buf` stays borrowed until the request
    /// completes.
    ///
    /// The [`Status`] the request reports names the sender by its rank in this
    /// communicator.
    ///
    /// # Errors
    /// [`Error::Usage`] for invalid source or tag.
    pub fn irecv<'a, T: Pod>(
        &self,
        buf: &'a mut [T],
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Request<'a>> {
        let id = self.post_recv(bytemuck::cast_slice_mut(buf), source.into(), tag.into())?;
        Ok(Request::new(self.inner.clone(), id, true, PhantomData).for_comm(&self.st))
    }

    /// Cancel the pending operation `id` (from [`Request::cancel_id`]; MPI_Cancel, MPI
    /// 4.1 §3.8.4), from any thread, also while another thread waits for or tests its
    /// request. The request then completes either with [`Error::Matching`]
    /// [`crate::MatchError::Cancelled`] (nothing of the message was or will be
    /// received) or as usual:
    /// - a receive that has not matched a message is withdrawn at once (returns `true`);
    /// - a rendezvous send (above the eager limit, or synchronous) whose request to send
    ///   went out unanswered asks its receiver to withdraw it (returns `true`: asked).
    ///   The receiver answers when its runtime next progresses (any call into it there;
    ///   no receive needs to be posted): cancelled if the message was still in its
    ///   unexpected queue, else the rendezvous goes on (it matched, or, not seen in
    ///   tests, it is held back for ordering and waits for its receive). A message
    ///   already seen by a probe there can still be withdrawn, so a receive posted
    ///   after that probe may wait for a later one.
    ///
    /// Returns `false` when there is nothing to cancel (an eager send: it completed
    /// locally; a matched receive; a send asked already; a finished operation).
    pub fn cancel_pending(&self, id: crate::CancelId) -> bool {
        if id.is_recv {
            self.inner.withdraw_recv(id.id)
        } else {
            self.inner.cancel_send(id.id)
        }
    }

    /// Whether this communicator's runtime holds `raw` (pending, or completed and not
    /// yet completed by its request): `false` for one completed already or never made
    /// ([`RawRequest::from_parts`]). Locks the runtime once.
    pub fn raw_known(&self, raw: RawRequest) -> bool {
        self.inner.lock().proto.is_known(raw.id)
    }

    /// Wait for a message that a receive with `source` and `tag` would match and return
    /// its status without receiving it (MPI_Probe).
    ///
    /// # Errors
    /// [`Error::Usage`] for invalid source or tag; [`Error::Connection`] if the
    /// specific source died.
    pub fn probe(&self, source: impl Into<Source>, tag: impl Into<Tag>) -> Result<Status> {
        self.inner.check_live()?;
        let pat = self.pattern(source.into(), tag.into())?;
        self.inner.probe(&pat).map(|st| self.local_status(st))
    }

    /// Check without blocking for a matching message (MPI_Iprobe).
    ///
    /// # Errors
    /// [`Error::Usage`] for invalid source or tag.
    pub fn iprobe(&self, source: impl Into<Source>, tag: impl Into<Tag>) -> Result<Option<Status>> {
        self.inner.check_live()?;
        let pat = self.pattern(source.into(), tag.into())?;
        Ok(self.inner.iprobe(&pat).map(|st| self.local_status(st)))
    }

    /// Matched probe (MPI_Mprobe): wait for a matching message and remove it from
    /// matching, so that only the returned [`Message`] can receive it.
    ///
    /// # Errors
    /// As [`Communicator::probe`].
    pub fn mprobe(
        &self,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<(Message, Status)> {
        self.inner.check_live()?;
        let pat = self.pattern(source.into(), tag.into())?;
        let m = self.inner.mprobe(&pat)?;
        let st = self.local_status(m.status());
        Ok((
            Message {
                inner: self.inner.clone(),
                st: self.st.clone(),
                msg: Some(m),
            },
            st,
        ))
    }

    /// Nonblocking matched probe (MPI_Improbe): a matching message taken out of
    /// matching, or `None` when none has arrived.
    ///
    /// # Errors
    /// As [`Communicator::probe`].
    pub fn improbe(
        &self,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Option<(Message, Status)>> {
        self.inner.check_live()?;
        let pat = self.pattern(source.into(), tag.into())?;
        Ok(self.inner.improbe(&pat).map(|m| {
            let st = self.local_status(m.status());
            (
                Message {
                    inner: self.inner.clone(),
                    st: self.st.clone(),
                    msg: Some(m),
                },
                st,
            )
        }))
    }

    #[inline]
    fn start_send<'a>(
        &self,
        bytes: &'a [u8],
        dest: usize,
        tag: i32,
        sync: bool,
    ) -> Result<Request<'a>> {
        let start = self.post_send(bytes, dest, tag, sync)?;
        Ok(self.send_request(start))
    }

    /// The request of a send that started as `start`.
    #[inline]
    fn send_request<'a>(&self, start: SendStart) -> Request<'a> {
        match start {
            SendStart::Done(st) => Request::completed(st, PhantomData),
            SendStart::Queued(id) => Request::new(self.inner.clone(), id, false, PhantomData),
        }
        .for_comm(&self.st)
    }

    /// Start a send of `bytes`; the caller keeps them borrowed until it completes.
    #[inline]
    pub(crate) fn post_send(
        &self,
        bytes: &[u8],
        dest: usize,
        tag: i32,
        sync: bool,
    ) -> Result<SendStart> {
        self.post_send_raw(RawBuf::from_slice(bytes), dest, tag, sync)
    }

    /// The one-time warning about a blocking send to this rank that can only complete if
    /// another thread receives it: above the eager limit (or synchronous) with no
    /// matching receive posted. Costs one comparison for a send to another rank.
    #[inline]
    fn warn_blocking_self_send(&self, bytes: usize, dest: usize, tag: i32, sync: bool) {
        if self.st.group.get(dest) == Some(&self.inner.rank) {
            self.warn_self_send_cold(bytes, dest, tag, sync);
        }
    }

    #[cold]
    fn warn_self_send_cold(&self, bytes: usize, dest: usize, tag: i32, sync: bool) {
        let warned = &self.inner.warned_self_send;
        if warned.load(Ordering::Relaxed) {
            return;
        }
        let me = self.inner.rank;
        let (posted, limit) = self.inner.posted_and_eager(self.st.ctx, me, tag);
        if posted || (!sync && bytes <= limit) {
            return;
        }
        if !warned.swap(true, Ordering::Relaxed) {
            let what = if sync {
                "a synchronous send (ssend)".to_string()
            } else {
                format!("{bytes} bytes, above the eager limit of {limit} bytes")
            };
            tracing::warn!(
                "blocking send from rank {dest} to itself (tag {tag}; {what}) with no matching \
                 receive posted: it completes only if another thread of this process posts \
                 the receive, else it waits forever; post the receive first (irecv) or use \
                 isend (warned once)"
            );
        }
    }

    /// Start a send of `raw` (host or device memory); the caller keeps it valid until
    /// the send completes.
    #[inline]
    pub(crate) fn post_send_raw(
        &self,
        raw: RawBuf,
        dest: usize,
        tag: i32,
        sync: bool,
    ) -> Result<SendStart> {
        self.inner.check_live()?;
        let dest = self.check_rank(dest)?;
        check_tag(tag)?;
        Ok(self.inner.lock().isend(dest, self.st.ctx, tag, raw, sync))
    }

    /// Post a receive into `bytes`; the caller keeps them borrowed until it completes.
    pub(crate) fn post_recv(&self, bytes: &mut [u8], source: Source, tag: Tag) -> Result<ReqId> {
        self.post_recv_raw(RawBuf::new(bytes.as_mut_ptr(), bytes.len()), source, tag)
    }

    /// Post a receive into `raw` (host or device memory); the caller keeps it valid
    /// until the receive completes.
    #[inline]
    pub(crate) fn post_recv_raw(&self, raw: RawBuf, source: Source, tag: Tag) -> Result<ReqId> {
        self.inner.check_live()?;
        let pat = self.pattern(source, tag)?;
        Ok(self.inner.irecv(pat, raw))
    }

    /// [`Error::Usage`] unless `dest` is a rank of this communicator and `tag` a valid
    /// send tag (the checks of a send, made before an operation is queued).
    pub(crate) fn check_dest_tag(&self, dest: usize, tag: i32) -> Result<()> {
        self.check_rank(dest)?;
        check_tag(tag)
    }

    /// [`Error::Usage`] unless `source` and `tag` are valid for a receive.
    pub(crate) fn check_source_tag(&self, source: Source, tag: Tag) -> Result<()> {
        if let Source::Rank(r) = source {
            self.check_rank(r)?;
        }
        match tag {
            Tag::Value(t) => check_tag(t),
            Tag::Any => Ok(()),
        }
    }

    /// [`Error::Usage`] once the runtime was finalized.
    pub(crate) fn check_live(&self) -> Result<()> {
        self.inner.check_live()
    }

    /// World rank of communicator rank `r`.
    #[inline]
    fn check_rank(&self, r: usize) -> Result<u32> {
        match self.st.group.get(r) {
            Some(&w) => Ok(w),
            None => Err(self.bad_rank(r)),
        }
    }

    #[cold]
    fn bad_rank(&self, r: usize) -> Error {
        Error::usage(format!(
            "rank {r} is out of range for a communicator of size {}",
            self.size()
        ))
    }

    /// `st` with the source translated from world to communicator rank.
    #[inline]
    fn local_status(&self, st: Status) -> Status {
        if self.st.is_identity() {
            return st;
        }
        Status {
            source: self.st.local(st.source as u32) as usize,
            ..st
        }
    }

    /// `e` with ranks translated from world to communicator ranks.
    fn local_err(&self, e: Error) -> Error {
        local_err(&self.st, e)
    }

    #[inline]
    fn pattern(&self, source: Source, tag: Tag) -> Result<Pattern> {
        let src = match source {
            Source::Any => None,
            Source::Rank(r) => Some(self.check_rank(r)?),
        };
        let tag = match tag {
            Tag::Any => None,
            Tag::Value(t) => {
                check_tag(t)?;
                Some(t)
            }
        };
        Ok(Pattern {
            ctx: self.st.ctx,
            src,
            tag,
        })
    }
}

impl Message {
    /// Receive this message into `buf` (MPI_Mrecv).
    ///
    /// # Errors
    /// [`Error::Matching`] on truncation; [`Error::Connection`] if the sender died
    /// during a rendezvous.
    pub fn recv<T: Pod>(mut self, buf: &mut [T]) -> Result<Status> {
        let Some(m) = self.msg.take() else {
            return Err(Error::usage("message already received"));
        };
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let raw = RawBuf::new(bytes.as_mut_ptr(), bytes.len());
        let id = self.inner.mrecv(m, raw);
        let st = wait_id(&self.inner, id).map_err(|e| local_err(&self.st, e))?;
        Ok(Status {
            source: self.st.local(st.source as u32) as usize,
            ..st
        })
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        // An unreceived matched message is consumed with an empty buffer so that a
        // rendezvous sender is released instead of waiting forever.
        if let Some(m) = self.msg.take() {
            let id = self.inner.mrecv(m, RawBuf::new(std::ptr::null_mut(), 0));
            let _ = Request::new(self.inner.clone(), id, true, PhantomData).wait();
        }
    }
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("context_id", &self.st.ctx)
            .field("rank", &self.st.rank)
            .field("size", &self.st.group.len())
            .finish()
    }
}

/// Wait for protocol request `id` (the wait loop advances nonblocking collectives
/// meanwhile, MPI's progress rule; see `crate::runtime`).
fn wait_id(inner: &Inner, id: ReqId) -> Result<Status> {
    // A large send waited for offers its receiver a share of the copy (a receive's id
    // is not a send: nothing happens).
    inner.wait_request(id)
}

#[inline]
fn check_tag(tag: i32) -> Result<()> {
    if !(0..=TAG_UB).contains(&tag) {
        return Err(bad_tag(tag));
    }
    Ok(())
}

#[cold]
fn bad_tag(tag: i32) -> Error {
    Error::usage(format!("tag {tag} is outside the valid range 0..={TAG_UB}"))
}

// Entry points for buffers given as raw memory (device memory, FFI): used by
// `crate::device`. The caller guarantees the memory stays valid for `'a`.
impl Communicator {
    pub(crate) fn start_send_raw<'a>(
        &self,
        raw: RawBuf,
        dest: usize,
        tag: i32,
        sync: bool,
    ) -> Result<Request<'a>> {
        let start = self.post_send_raw(raw, dest, tag, sync)?;
        Ok(self.send_request(start))
    }

    pub(crate) fn start_recv_raw<'a>(
        &self,
        raw: RawBuf,
        source: Source,
        tag: Tag,
    ) -> Result<Request<'a>> {
        let id = self.post_recv_raw(raw, source, tag)?;
        Ok(Request::new(self.inner.clone(), id, true, PhantomData).for_comm(&self.st))
    }
}

impl<'a> Request<'a> {
    /// Rebuilds the [`Request`] of `raw` in `comm`'s runtime, statuses in world ranks.
    ///
    /// A request whose id the runtime no longer holds (completed already, or never
    /// made: [`RawRequest::from_parts`]) is not waited for: its wait or test returns
    /// [`crate::MatchError::UnknownRequest`].
    ///
    /// # Safety
    /// `raw` must come from [`Request::into_raw`] (or [`RawRequest::parts`]) of a
    /// request of `comm`'s runtime, rebuilt once; the buffer must stay valid for `'a`.
    pub unsafe fn from_raw(raw: RawRequest, comm: &Communicator) -> Request<'a> {
        Request::new(comm.inner.clone(), raw.id, raw.is_recv, PhantomData)
    }
}

impl Communicator {
    /// [`crate::Communicator::isend`] (`sync`: [`crate::Communicator::issend`]) of
    /// `len_bytes` host bytes at `ptr` without building a [`Request`] where none is
    /// needed: a send a transport took at once is [`Detached::Done`], a pending one
    /// on a communicator whose ranks are the world's [`Detached::Raw`].
    ///
    /// # Safety
    /// `ptr` must be host memory valid for reads of `len_bytes` bytes, unchanged until
    /// the operation completes.
    ///
    /// # Errors
    /// As [`crate::Communicator::isend`].
    pub unsafe fn isend_detached<'a>(
        &self,
        ptr: *const u8,
        len_bytes: usize,
        dest: usize,
        tag: i32,
        sync: bool,
    ) -> Result<Detached<'a>> {
        let start = self.post_send_raw(
            crate::protocol::RawBuf::new(ptr as *mut u8, len_bytes),
            dest,
            tag,
            sync,
        )?;
        if !self.st.is_identity() {
            // The ordinary request, its status in this communicator's ranks.
            let r = self.send_request(start);
            return Ok(match r.completed_at_post() {
                Some(st) => Detached::Done(st),
                None => Detached::Request(r),
            });
        }
        Ok(match start {
            SendStart::Done(st) => Detached::Done(st),
            SendStart::Queued(id) => Detached::Raw(RawRequest { id, is_recv: false }),
        })
    }

    /// [`crate::Communicator::irecv`] into `len_bytes` host bytes at `ptr` without
    /// building a [`Request`] where none is needed: on a communicator whose ranks are
    /// the world's, [`Detached::Raw`].
    ///
    /// # Safety
    /// `ptr` must be host memory valid for writes of `len_bytes` bytes, not accessed
    /// until the operation completes.
    ///
    /// # Errors
    /// As [`crate::Communicator::irecv`].
    pub unsafe fn irecv_detached<'a>(
        &self,
        ptr: *mut u8,
        len_bytes: usize,
        source: Source,
        tag: Tag,
    ) -> Result<Detached<'a>> {
        let id = self.post_recv_raw(crate::protocol::RawBuf::new(ptr, len_bytes), source, tag)?;
        Ok(if self.st.is_identity() {
            Detached::Raw(RawRequest { id, is_recv: true })
        } else {
            Detached::Request(
                Request::new(self.inner.clone(), id, true, PhantomData).for_comm(&self.st),
            )
        })
    }

    /// One progress round, then a copy of the outcome of operation `id` (from
    /// [`Request::cancel_id`] or [`RawRequest::cancel_id`]) if it has completed and
    /// was not completed by its request yet, statuses in this communicator's ranks
    /// (pass the operation's own communicator); the request still completes as usual,
    /// with the same outcome (MPI_Request_get_status, also while another thread waits
    /// for the request). `None` while it is pending, and for an id whose request has
    /// completed (ids carry a generation).
    pub fn peek_pending(&self, id: crate::CancelId) -> Option<Result<Status>> {
        let r = self.inner.peek_request(id.id)?;
        Some(if self.st.is_identity() {
            r
        } else {
            crate::comm_state::localize(&self.st, r)
        })
    }

    /// [`crate::wait_all_in_place`] of raw requests ([`Request::into_raw`]) of this
    /// communicator's runtime: progress until every one has completed, then `out`
    /// (cleared first) gets one outcome per request, in order, statuses in world ranks,
    /// taken under the same lock of the runtime. Each request is finished after it.
    ///
    /// A request whose id the runtime does not hold (completed elsewhere, or never
    /// made: [`RawRequest::from_parts`]) is not waited for: its outcome is
    /// [`crate::MatchError::UnknownRequest`].
    ///
    /// # Safety
    /// Each request's buffer must stay valid until the request completes (given once:
    /// a request given twice completes once, the other entry is unknown).
    pub unsafe fn wait_all_raw(&self, reqs: &[RawRequest], out: &mut Vec<Result<Status>>) {
        out.clear();
        let sends: smallvec::SmallVec<[ReqId; 64]> =
            reqs.iter().filter(|r| !r.is_recv).map(|r| r.id).collect();
        self.inner.wait_all_then(
            reqs.len(),
            |i| Some(reqs[i].id),
            sends.iter().copied(),
            |e| {
                out.extend(reqs.iter().map(|r| {
                    e.proto
                        .take_done(r.id)
                        .unwrap_or_else(|| Err(crate::protocol::unknown_request(r.id)))
                }));
            },
        );
    }
}
