//! Nonblocking requests and completion (MPI 4.1 §3.7: wait, test, waitall, waitany,
//! testall).

use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::Result;
use crate::protocol::{ReqId, Status, Taken};
use crate::runtime::Inner;

/// Names a pending send or receive of this process (from [`Request::cancel_id`]) for
/// [`crate::Communicator::cancel_pending`], which any thread may call, also while
/// another waits for the request. An id outlives its operation harmlessly: once the
/// operation has completed, no later request answers to it (request ids carry a
/// generation, `protocol/reqs.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CancelId {
    pub(crate) id: ReqId,
    pub(crate) is_recv: bool,
}

/// A pending point-to-point operation reduced to the runtime's id: 16 bytes, `Copy`,
/// no reference count and no `Drop` (for tables of C handles: the MPI ABI's
/// `MPI_Request`). Made by [`Request::into_raw`]; completed by
/// [`crate::Communicator::wait_all_raw`] or turned back into a [`Request`] by
/// [`Request::from_raw`]. Its holder must complete it exactly once: nothing waits for
/// or withdraws a forgotten one (its buffer stays the runtime's until the operation
/// ends on its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a pending operation: complete it (wait_all_raw or Request::from_raw)"]
pub struct RawRequest {
    pub(crate) id: ReqId,
    pub(crate) is_recv: bool,
}

impl RawRequest {
    /// The id [`crate::Communicator::cancel_pending`] takes.
    #[inline]
    pub fn cancel_id(self) -> CancelId {
        CancelId {
            id: self.id,
            is_recv: self.is_recv,
        }
    }

    /// The runtime's id of the operation (`generation << 32 | slot`: the generation, a
    /// per-rank counter, is never 0; the slot is dense, below the number of requests
    /// pending at once; `protocol/reqs.rs`) and whether it is a receive, for a holder
    /// that packs requests into handles of its own (the MPI ABI's `MPI_Request`).
    #[inline]
    pub fn parts(self) -> (u64, bool) {
        (self.id, self.is_recv)
    }

    /// The request of [`RawRequest::parts`]. An id that is not, or no longer, pending
    /// in the runtime (completed already, or never made) is not waited for: the calls
    /// that complete it return an error ([`crate::Communicator::raw_known`] tells
    /// before).
    #[inline]
    pub fn from_parts(id: u64, is_recv: bool) -> RawRequest {
        RawRequest { id, is_recv }
    }
}

/// A pending request's parts, taken out of it ([`Request::take_pending`]).
pub(crate) struct Pending {
    pub(crate) inner: Arc<Inner>,
    pub(crate) id: ReqId,
    pub(crate) is_recv: bool,
    pub(crate) comm: Option<Arc<crate::comm_state::CommState>>,
}

/// A pending nonblocking operation. Borrows its buffer for `'a`, so the buffer can be
/// neither read (receive) nor written (send) until the request completes.
///
/// Dropping an unfinished request withdraws a receive that has not matched yet;
/// otherwise it waits for completion (so the buffer is never freed while the runtime
/// may still write or read it). Do not `mem::forget` a pending request: its buffer
/// would stay in use by the runtime after the borrow ends.
#[must_use = "a request must be waited for or tested to completion"]
pub struct Request<'a> {
    /// The runtime, for waiting (`None` for an operation that completed as it started).
    inner: Option<Arc<Inner>>,
    id: ReqId,
    is_recv: bool,
    done: bool,
    /// The outcome of an operation that completed as it started (an eager send a
    /// transport took at once); `id` means nothing then.
    ready: Option<Status>,
    /// The communicator whose ranks statuses and errors are reported in (`None`: world
    /// ranks, also for communicators whose ranks are the world's).
    comm: Option<Arc<crate::comm_state::CommState>>,
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> Request<'a> {
    pub(crate) fn new(
        inner: Arc<Inner>,
        id: ReqId,
        is_recv: bool,
        _buf: PhantomData<&'a mut [u8]>,
    ) -> Self {
        Request {
            inner: Some(inner),
            id,
            is_recv,
            done: false,
            ready: None,
            comm: None,
            _buf,
        }
    }

    /// A request for an operation that has completed already, with `status`.
    pub(crate) fn completed(status: Status, _buf: PhantomData<&'a mut [u8]>) -> Self {
        Request {
            inner: None,
            id: 0,
            is_recv: false,
            done: false,
            ready: Some(status),
            comm: None,
            _buf,
        }
    }

    /// The result if the operation completed as it started.
    fn take_ready(&mut self) -> Option<Result<Status>> {
        let st = self.ready.take()?;
        self.done = true;
        Some(self.localize(Ok(st)))
    }

    /// Report statuses and errors in the ranks of the communicator `st`.
    #[inline]
    pub(crate) fn for_comm(mut self, st: &Arc<crate::comm_state::CommState>) -> Self {
        if !st.is_identity() {
            self.comm = Some(st.clone());
        }
        self
    }

    /// The runtime's id of this request while the runtime may still have to complete
    /// it (`None`: completed as it started, or finished already).
    #[inline]
    fn pending_id(&self) -> Option<ReqId> {
        (!self.done && self.ready.is_none() && self.inner.is_some()).then_some(self.id)
    }

    /// The runtime this request waits in (every request that is not ready has one).
    fn runtime(&self) -> &Arc<Inner> {
        // Invariant: only `completed` builds a request without a runtime, and it is
        // ready until taken (after which no method reaches here: `done` is set).
        self.inner
            .as_ref()
            .expect("a pending request always has its runtime")
    }

    /// Mark a request that completed at post as consumed (its drop does nothing).
    pub(crate) fn mark_consumed(&mut self) {
        self.ready = None;
        self.done = true;
    }

    /// Take the runtime, id, kind and communicator of a pending request, which is then
    /// finished as far as its drop is concerned (the caller owns the operation's
    /// completion); `None` when it is not pending.
    pub(crate) fn take_pending(&mut self) -> Option<Pending> {
        let id = self.pending_id()?;
        let inner = self.inner.take()?;
        self.done = true;
        Some(Pending {
            inner,
            id,
            is_recv: self.is_recv,
            comm: self.comm.take(),
        })
    }

    /// The runtime of a pending request (`None` when it is not pending).
    pub(crate) fn pending_runtime(&self) -> Option<&Arc<Inner>> {
        self.pending_id().and(self.inner.as_ref())
    }

    fn localize(&self, r: Result<Status>) -> Result<Status> {
        match &self.comm {
            Some(st) => crate::comm_state::localize(st, r),
            None => r,
        }
    }

    /// This request as a [`RawRequest`] when it is pending in its runtime and its
    /// statuses need no rank translation (its communicator's ranks are the world's);
    /// otherwise (completed at post, finished, or on a communicator with other ranks)
    /// the request back. The caller then owns the operation's completion and keeps
    /// the buffer valid until then, as `'a` did.
    ///
    /// # Safety
    /// The raw request no longer borrows the buffer: the caller must keep it valid (and
    /// untouched, for a receive) until the operation is completed through
    /// [`crate::Communicator::wait_all_raw`] or a rebuilt request.
    #[inline]
    pub unsafe fn into_raw(self) -> std::result::Result<RawRequest, Self> {
        if self.comm.is_some() || self.pending_id().is_none() {
            return Err(self);
        }
        let raw = RawRequest {
            id: self.id,
            is_recv: self.is_recv,
        };
        let mut me = std::mem::ManuallyDrop::new(self);
        // The runtime handle is let go without `Drop for Request` (which would wait).
        drop(me.inner.take());
        Ok(raw)
    }

    /// Block until the operation completes (MPI_Wait).
    ///
    /// # Errors
    /// A receive fails with [`crate::Error::Matching`] on truncation; any request
    /// fails with [`crate::Error::Connection`] if its peer died.
    pub fn wait(mut self) -> Result<Status> {
        self.wait_in_place()
    }

    /// [`Request::wait`] without consuming the request (which is finished after it).
    fn wait_in_place(&mut self) -> Result<Status> {
        if let Some(r) = self.take_ready() {
            return r;
        }
        if self.done {
            return Err(finished_request());
        }
        // Waiting for a large send: offer the receiver a share of the copy.
        let r = if self.is_recv {
            self.runtime().wait_request_quietly(self.id)
        } else {
            self.runtime().wait_request(self.id)
        };
        self.done = true;
        self.localize(r)
    }

    /// Complete the request if it is done, without blocking (MPI_Test). Returns the
    /// request back when it is still pending.
    ///
    /// # Errors
    /// The outer `Result` is always `Ok`; the inner result is the operation's outcome
    /// as for [`Request::wait`].
    pub fn test(mut self) -> std::result::Result<Result<Status>, Self> {
        if let Some(r) = self.take_ready() {
            return Ok(r);
        }
        if self.done {
            return Ok(Err(finished_request()));
        }
        let r = self.runtime().test_request(self.id);
        match r {
            Some(r) => {
                self.done = true;
                Ok(self.localize(r))
            }
            None => Err(self),
        }
    }

    /// Withdraw a receive that has not matched a message yet (MPI_Cancel on a receive,
    /// MPI 4.1 §3.8.4). Returns `true` when it was withdrawn: nothing was or will be
    /// written to its buffer and the request is finished (drop it; waiting for or
    /// testing it returns [`crate::Error::Usage`] at once). Returns `false` for
    /// a send or a receive that already matched: the request must then be completed as
    /// usual. (To cancel a send, or from another thread, use
    /// [`crate::Communicator::cancel_pending`] with [`Request::cancel_id`].)
    pub fn cancel(&mut self) -> bool {
        if self.done || self.ready.is_some() || !self.is_recv {
            return false;
        }
        let Some(inner) = self.inner.as_ref() else {
            return false;
        };
        if inner.cancel_recv(self.id) {
            self.done = true;
            true
        } else {
            false
        }
    }

    /// The id of this operation while the runtime may still complete it, for
    /// [`crate::Communicator::cancel_pending`] (from any thread, also while another
    /// waits for this request); `None` for an operation that completed at post or is
    /// finished. Costs no runtime call.
    #[inline]
    pub fn cancel_id(&self) -> Option<CancelId> {
        self.pending_id().map(|id| CancelId {
            id,
            is_recv: self.is_recv,
        })
    }

    /// The status of an operation that completed as it was posted (an eager send that
    /// a transport took at once), in the ranks of its communicator; `None` for any
    /// other. Such a request can be dropped without a wait: the runtime holds nothing
    /// of it (its buffer is free again). Costs no runtime call.
    #[inline]
    pub fn completed_at_post(&self) -> Option<Status> {
        let st = self.ready?;
        Some(match &self.comm {
            None => st,
            Some(c) => Status {
                source: c.local(st.source as u32) as usize,
                ..st
            },
        })
    }

    /// Whether the operation has completed (without consuming the request).
    pub fn is_complete(&self) -> bool {
        if self.ready.is_some() || self.done {
            return true;
        }
        self.runtime().requests_done(std::iter::once(self.id))
    }
}

impl Drop for Request<'_> {
    #[inline]
    fn drop(&mut self) {
        // Inline, the common finished request costs a test; the rest out of line.
        if !self.done && self.ready.is_none() {
            self.drop_pending();
        }
    }
}

impl Request<'_> {
    /// [`Drop`] of a request the runtime may still complete.
    #[inline(never)]
    fn drop_pending(&mut self) {
        let Some(inner) = self.inner.as_ref() else {
            return;
        };
        if self.is_recv && inner.cancel_recv(self.id) {
            return;
        }
        let _ = inner.wait_request_quietly(self.id);
    }
}

/// Wait for every request (MPI_Waitall). Returns the statuses in order.
///
/// # Errors
/// The first failure, after all requests have completed (the others' results are
/// dropped; use [`wait_all_results`] to see each one).
pub fn wait_all(mut reqs: Vec<Request<'_>>) -> Result<Vec<Status>> {
    if reqs.iter().all(|r| r.ready.is_some()) {
        // Every operation completed as it started (eager sends a transport took at
        // once): no runtime call, one pass.
        let mut out = Vec::with_capacity(reqs.len());
        for r in reqs.iter_mut() {
            let Some(st) = r.completed_at_post() else {
                continue;
            };
            r.ready = None;
            r.done = true;
            out.push(st);
        }
        return Ok(out);
    }
    let Some(inner) = one_runtime(&reqs) else {
        return wait_all_results(reqs).into_iter().collect();
    };
    // One runtime (every request made by this crate's API): wait under one lock and
    // take each outcome as soon as it and those before it are settled, straight into
    // the result (one look at each request's slot; no vector of outcomes, no copies of
    // the ids). A pending send is first offered help (a share of a large copy); the
    // first one still pending is offered it again each round, as a wait for it alone
    // does.
    let n = reqs.len();
    let mut out = Vec::with_capacity(n);
    let mut first_err = None;
    let mut e = inner.lock();
    for r in reqs.iter().filter(|r| !r.is_recv) {
        if let Some(id) = r.pending_id() {
            e.proto.help(id);
        }
    }
    let mut next = 0;
    inner.wait_with(e, |e| {
        while let Some(r) = reqs.get(next) {
            // The common case first: a success in world ranks, its status copied
            // straight from the request's slot into `out`.
            if let Some(id) = r.pending_id()
                && r.comm.is_none()
            {
                match e.proto.take_ok_into(id, &mut out) {
                    Taken::Pushed => {
                        next += 1;
                        continue;
                    }
                    Taken::Pending => {
                        if !r.is_recv {
                            e.proto.help(id);
                        }
                        e.want_completions(n - next);
                        return None;
                    }
                    Taken::Other => {}
                }
            }
            let outcome = match r.pending_id() {
                // An id the runtime does not hold (a rebuilt raw request completed
                // elsewhere) is settled too, with an error.
                Some(id) => match e.proto.take_settled(id) {
                    Some(o) => r.localize(o),
                    None => {
                        if !r.is_recv {
                            e.proto.help(id);
                        }
                        e.want_completions(n - next);
                        return None;
                    }
                },
                None => match r.ready {
                    Some(st) => r.localize(Ok(st)),
                    None => Err(finished_request()),
                },
            };
            match outcome {
                Ok(st) => out.push(st),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
            next += 1;
        }
        e.want_completions(1);
        Some(())
    });
    for r in reqs.iter_mut() {
        r.ready = None;
        r.done = true;
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The runtime of every pending request of `reqs` when they share one (`None` when
/// none is pending or they belong to several runtimes).
fn one_runtime<'r, 'a: 'r>(
    reqs: impl IntoIterator<Item = &'r Request<'a>>,
) -> Option<&'r Arc<Inner>> {
    let mut inner: Option<&Arc<Inner>> = None;
    for r in reqs.into_iter().filter(|r| r.pending_id().is_some()) {
        match (inner, r.inner.as_ref()) {
            (None, Some(i)) => inner = Some(i),
            (Some(first), Some(i)) if Arc::ptr_eq(first, i) => {}
            _ => return None,
        }
    }
    inner
}

/// Wait for every request and return each one's result, in order (MPI_Waitall with
/// MPI_ERR_IN_STATUS).
///
/// The runtime is locked once for the whole wait and once more never: every pending
/// send first offers its receiver a share of the copy (large messages over shared
/// memory), progress
/// rounds take a window of arrivals each (not one round per message), and the outcomes
/// are taken under the same lock.
pub fn wait_all_results(mut reqs: Vec<Request<'_>>) -> Vec<Result<Status>> {
    let mut out = Vec::with_capacity(reqs.len());
    wait_all_in_place(reqs.iter_mut(), &mut out);
    out
}

/// The outcome of waiting for or testing a request that is finished already: a
/// receive withdrawn by [`Request::cancel`] (whose request must then be dropped).
#[cold]
pub(crate) fn finished_request() -> crate::Error {
    crate::Error::usage(
        "this request is finished already (a receive withdrawn by Request::cancel): nothing \
         was received into its buffer; fix: drop a cancelled request instead of waiting for it",
    )
}

/// Progress until every request of `reqs` has completed, without completing any
/// (each one's [`Request::wait`] then returns at once, without a progress round). Its
/// pending sends first offer their receivers a share of the copy. For
/// callers that keep their own request objects (the MPI ABI's `MPI_Waitall`); it locks
/// the runtime once and takes a window of arrivals per progress round, as
/// [`wait_all_results`] does.
pub fn wait_complete<'r, 'a: 'r>(reqs: impl IntoIterator<Item = &'r Request<'a>>) {
    // A window's ids on the stack (the common MPI_Waitall), a larger set on the heap.
    let mut ids: smallvec::SmallVec<[ReqId; 64]> = smallvec::SmallVec::new();
    let mut inner: Option<&Arc<Inner>> = None;
    for r in reqs {
        let (Some(id), Some(i)) = (r.pending_id(), r.inner.as_ref()) else {
            continue;
        };
        match inner {
            // Several runtimes (not made by this crate's API): each wait progresses.
            Some(first) if !Arc::ptr_eq(first, i) => continue,
            _ => inner = Some(i),
        }
        ids.push(id);
    }
    if let Some(inner) = inner {
        // Offering help is a no-op for a receive's id.
        inner.wait_all_then(ids.len(), |i| Some(ids[i]), ids.iter().copied(), |_| ());
    }
}

/// Waits for every request of `reqs` (as [`wait_complete`]) and takes their outcomes
/// under the same lock of the runtime: `out` (cleared first) gets one outcome per
/// request, in order, and each request is finished (a later `wait` or `test` of it
/// returns an error). For callers that keep their requests in their own tables (the
/// MPI ABI's `MPI_Waitall`), where [`wait_all_results`] would need them moved out:
/// the runtime is locked once, not once more per request.
pub fn wait_all_in_place<'r, 'a: 'r>(
    reqs: impl IntoIterator<Item = &'r mut Request<'a>>,
    out: &mut Vec<Result<Status>>,
) {
    out.clear();
    let mut reqs: smallvec::SmallVec<[&'r mut Request<'a>; 64]> = reqs.into_iter().collect();
    // Several runtimes (not made by this crate's API), or none pending: one by one.
    let Some(inner) = one_runtime(reqs.iter().map(|r| &**r)).cloned() else {
        out.extend(reqs.iter_mut().map(|r| r.wait_in_place()));
        return;
    };
    let ids: smallvec::SmallVec<[Option<ReqId>; 64]> =
        reqs.iter().map(|r| r.pending_id()).collect();
    let sends: smallvec::SmallVec<[ReqId; 64]> = reqs
        .iter()
        .filter(|r| !r.is_recv)
        .filter_map(|r| r.pending_id())
        .collect();
    inner.wait_all_then(
        ids.len(),
        |i| ids[i],
        sends.iter().copied(),
        |e| {
            for r in reqs.iter_mut() {
                let outcome = match r.pending_id() {
                    Some(id) => {
                        r.done = true;
                        // wait_all_then returned once every pending id was settled:
                        // done (only this request takes its own outcome), or not held
                        // (a rebuilt raw request completed elsewhere).
                        let o = e
                            .proto
                            .take_done(id)
                            .unwrap_or_else(|| Err(crate::protocol::unknown_request(id)));
                        r.localize(o)
                    }
                    None => r.take_ready().unwrap_or_else(|| Err(finished_request())),
                };
                out.push(outcome);
            }
        },
    );
}

/// What [`crate::Communicator::isend_detached`] and
/// [`crate::Communicator::irecv_detached`] started.
#[must_use = "a pending operation: complete it"]
pub enum Detached<'a> {
    /// Pending in the runtime; statuses in world ranks, which are the communicator's.
    Raw(RawRequest),
    /// A send that completed as it was posted (a transport took it at once), with its
    /// status in the communicator's ranks.
    Done(Status),
    /// Pending on a communicator whose ranks are not the world's: the ordinary request.
    Request(Request<'a>),
}

/// Wait until one of the requests completes (MPI_Waitany). Completed slots become
/// `None` (MPI_REQUEST_NULL). Returns the index and the result of the completed one, or
/// `None` when every slot is already `None`.
pub fn wait_any<'a>(reqs: &mut [Option<Request<'a>>]) -> Option<(usize, Result<Status>)> {
    reqs.iter().flatten().next()?;
    if let Some(i) = reqs
        .iter()
        .position(|r| r.as_ref().is_some_and(|r| r.pending_id().is_none()))
        && let Some(mut req) = reqs[i].take()
    {
        // Completed as it started, or finished already (a cancelled receive).
        let r = req.take_ready().unwrap_or_else(|| Err(finished_request()));
        return Some((i, r));
    }
    // None is ready, so every one left has its runtime.
    let inner = reqs.iter().flatten().next()?.runtime().clone();
    let ids: Vec<(usize, ReqId)> = reqs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().map(|r| (i, r.id)))
        .collect();
    let (i, r) = inner.wait_any_request(&ids);
    let r = match reqs[i].take() {
        Some(mut req) => {
            req.done = true;
            req.localize(r)
        }
        None => r,
    };
    Some((i, r))
}

/// Test whether all requests are complete (MPI_Testall). If they are, returns every
/// result in order and empties the vector; otherwise leaves it untouched and returns
/// `None`.
pub fn test_all(reqs: &mut Vec<Request<'_>>) -> Option<Vec<Result<Status>>> {
    let Some(first) = reqs.iter().find(|r| r.pending_id().is_some()) else {
        return Some(reqs.drain(..).map(Request::wait).collect());
    };
    let all = first
        .runtime()
        .requests_done(reqs.iter().filter_map(|r| r.pending_id()));
    if !all {
        return None;
    }
    Some(reqs.drain(..).map(Request::wait).collect())
}
