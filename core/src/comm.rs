//! Communicators and point-to-point operations (MPI 4.1 chapter 3).

use std::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::matching::Pattern;
use crate::protocol::{ProbedMessage, RawBuf, Status};
use crate::request::Request;
use crate::universe::Inner;

/// Largest tag a user may pass (MPI_TAG_UB). Tags run from 0 to this value.
pub const TAG_UB: i32 = (1 << 30) - 1;

/// Context id of the world communicator's point-to-point traffic.
const WORLD_CTX: u32 = 0;
/// Bit set in a context id for a communicator's internal collective traffic, so that
/// user point-to-point messages never match it.
const COLL_CTX_BIT: u32 = 1 << 31;

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
/// Cheap to clone; all clones share the same context.
#[derive(Clone)]
pub struct Communicator {
    inner: Arc<Inner>,
    ctx: u32,
}

/// A message removed from the unexpected queue by [`Communicator::mprobe`]; only
/// [`Message::recv`] can receive it (MPI_Mprobe / MPI_Mrecv, MPI 4.1 §3.8.2).
pub struct Message {
    inner: Arc<Inner>,
    msg: Option<ProbedMessage>,
}

impl Communicator {
    pub(crate) fn world(inner: Arc<Inner>) -> Self {
        Communicator {
            inner,
            ctx: WORLD_CTX,
        }
    }

    /// Rank of the calling process in this communicator (MPI_Comm_rank).
    pub fn rank(&self) -> usize {
        self.inner.rank as usize
    }

    /// Number of ranks in this communicator (MPI_Comm_size).
    pub fn size(&self) -> usize {
        self.inner.size as usize
    }

    /// Largest valid tag (MPI_TAG_UB attribute).
    pub fn tag_ub(&self) -> i32 {
        TAG_UB
    }

    /// Blocking standard-mode send of `buf` to rank `dest` with `tag` (MPI_Send).
    /// Returns once `buf` may be reused.
    ///
    /// # Errors
    /// [`Error::Usage`] for a rank out of range or a tag outside `0..=TAG_UB`;
    /// [`Error::Connection`] if the peer is gone.
    pub fn send<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.isend(buf, dest, tag)?.wait().map(|_| ())
    }

    /// Blocking synchronous send (MPI_Ssend): returns only after the matching receive
    /// has started.
    ///
    /// # Errors
    /// As [`Communicator::send`].
    pub fn ssend<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.issend(buf, dest, tag)?.wait().map(|_| ())
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
        self.irecv(buf, source, tag)?.wait()
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
        let r = self.irecv(recvbuf, source, recvtag)?;
        let s = self.isend(sendbuf, dest, sendtag)?;
        let st = r.wait();
        let ss = s.wait();
        let st = st?;
        ss?;
        Ok(st)
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
    /// # Errors
    /// [`Error::Usage`] for invalid source or tag.
    pub fn irecv<'a, T: Pod>(
        &self,
        buf: &'a mut [T],
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Request<'a>> {
        self.inner.check_live()?;
        let pat = self.pattern(source.into(), tag.into())?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let raw = RawBuf::new(bytes.as_mut_ptr(), bytes.len());
        let id = self.inner.lock().proto.irecv(pat, raw);
        Ok(Request::new(self.inner.clone(), id, true, PhantomData))
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
        self.inner.wait_for(|e| {
            if let Some(st) = e.proto.iprobe(&pat) {
                return Some(Ok(st));
            }
            pat.src
                .and_then(|s| e.proto.peer_failure(s).cloned())
                .map(Err)
        })
    }

    /// Check without blocking for a matching message (MPI_Iprobe).
    ///
    /// # Errors
    /// [`Error::Usage`] for invalid source or tag.
    pub fn iprobe(&self, source: impl Into<Source>, tag: impl Into<Tag>) -> Result<Option<Status>> {
        self.inner.check_live()?;
        let pat = self.pattern(source.into(), tag.into())?;
        let mut e = self.inner.lock();
        if let Some(st) = e.proto.iprobe(&pat) {
            return Ok(Some(st));
        }
        e.progress();
        Ok(e.proto.iprobe(&pat))
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
        let m = self.inner.wait_for(|e| {
            if let Some(m) = e.proto.improbe(&pat) {
                return Some(Ok(m));
            }
            pat.src
                .and_then(|s| e.proto.peer_failure(s).cloned())
                .map(Err)
        })?;
        let st = m.status();
        Ok((
            Message {
                inner: self.inner.clone(),
                msg: Some(m),
            },
            st,
        ))
    }

    /// Barrier: returns once every rank of the communicator has entered it
    /// (MPI_Barrier). Dissemination algorithm (Hensgen, Finkel and Manber, 1988):
    /// ⌈log2 n⌉ rounds of zero-byte messages.
    ///
    /// # Errors
    /// [`Error::Connection`] if a peer died.
    pub fn barrier(&self) -> Result<()> {
        self.inner.check_live()?;
        let n = self.size();
        let me = self.rank();
        let ctx = self.ctx | COLL_CTX_BIT;
        let mut dist = 1;
        while dist < n {
            let to = (me + dist) % n;
            let from = (me + n - dist) % n;
            let empty: [u8; 0] = [];
            let mut sink: [u8; 0] = [];
            let r = {
                let mut e = self.inner.lock();
                let pat = Pattern {
                    ctx,
                    src: Some(from as u32),
                    tag: Some(0),
                };
                e.proto.irecv(pat, RawBuf::new(sink.as_mut_ptr(), 0))
            };
            let r = Request::new(self.inner.clone(), r, true, PhantomData);
            let s = {
                let mut e = self.inner.lock();
                let lim = e.eager_limit(to as u32);
                e.proto
                    .isend(to as u32, ctx, 0, RawBuf::from_slice(&empty), lim, false)
            };
            let s = Request::new(self.inner.clone(), s, false, PhantomData);
            s.wait()?;
            r.wait()?;
            dist *= 2;
        }
        Ok(())
    }

    fn start_send<'a>(
        &self,
        bytes: &'a [u8],
        dest: usize,
        tag: i32,
        sync: bool,
    ) -> Result<Request<'a>> {
        self.inner.check_live()?;
        let dest = self.check_rank(dest)?;
        check_tag(tag)?;
        let mut e = self.inner.lock();
        let lim = e.eager_limit(dest);
        let id = e
            .proto
            .isend(dest, self.ctx, tag, RawBuf::from_slice(bytes), lim, sync);
        // Push eager frames out right away: the common small send completes here.
        e.progress();
        drop(e);
        Ok(Request::new(self.inner.clone(), id, false, PhantomData))
    }

    fn check_rank(&self, r: usize) -> Result<u32> {
        if r >= self.size() {
            return Err(Error::usage(format!(
                "rank {r} is out of range for a communicator of size {}",
                self.size()
            )));
        }
        Ok(r as u32)
    }

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
            ctx: self.ctx,
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
        let id = self.inner.lock().proto.mrecv(m, raw);
        Request::new(self.inner.clone(), id, true, PhantomData).wait()
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        // An unreceived matched message is consumed with an empty buffer so that a
        // rendezvous sender is released instead of waiting forever.
        if let Some(m) = self.msg.take() {
            let id = self
                .inner
                .lock()
                .proto
                .mrecv(m, RawBuf::new(std::ptr::null_mut(), 0));
            let _ = Request::new(self.inner.clone(), id, true, PhantomData).wait();
        }
    }
}

fn check_tag(tag: i32) -> Result<()> {
    if !(0..=TAG_UB).contains(&tag) {
        return Err(Error::usage(format!(
            "tag {tag} is outside the valid range 0..={TAG_UB}"
        )));
    }
    Ok(())
}
