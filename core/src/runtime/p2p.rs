//! The runtime's point-to-point entry points: posting, probing, cancelling, waiting
//! for and testing requests of the protocol.
//!
//! The API types (`crate::comm`, `crate::request`) call these instead of reaching into
//! the engine's protocol, so that every completion call goes through the runtime's
//! progress ([`Inner::progress`], [`Inner::wait_for`]) and the decision to take the
//! progress-free fast path of a blocking receive is made in one place, beside the
//! schedules it depends on. Ranks here are world ranks; translating them to a
//! communicator's is the caller's (`crate::comm_state`).

use crate::engine::Engine;
use crate::error::Result;
use crate::matching::Pattern;
use crate::protocol::{ProbedMessage, RawBuf, ReqId, Status};

use super::Inner;

impl Inner {
    /// Post a receive of `pat` into `raw`; the caller keeps `raw` valid until the
    /// request completes.
    #[inline]
    pub(crate) fn irecv(&self, pat: Pattern, raw: RawBuf) -> ReqId {
        self.lock().proto.irecv(pat, raw)
    }

    /// Receive the matched message `m` into `raw` (MPI_Mrecv); the caller keeps `raw`
    /// valid until the request completes.
    pub(crate) fn mrecv(&self, m: ProbedMessage, raw: RawBuf) -> ReqId {
        self.lock().proto.mrecv(m, raw)
    }

    /// Blocking receive of `pat` into `raw`: post and wait under one lock of the
    /// engine. With no nonblocking collective running, the engine's fast path may
    /// complete it without a full progress round (`Engine::recv_direct`).
    ///
    /// # Errors
    /// As the request's outcome: truncation, a dead source.
    pub(crate) fn recv(&self, pat: Pattern, raw: RawBuf) -> Result<Status> {
        let mut e = self.lock();
        if let Some(r) = self.recv_direct(&mut e, &pat, raw) {
            return r;
        }
        let id = e.proto.irecv(pat, raw);
        self.wait_with(e, |e| e.proto.take_done(id))
    }

    /// The fast path of a blocking receive, with `e` (this runtime's engine) locked:
    /// the outcome if the message is already there or arrives within a few looks.
    /// It skips progress, so it is taken only with no nonblocking collective running
    /// (else `None`, and the caller posts and waits).
    pub(crate) fn recv_direct(
        &self,
        e: &mut Engine,
        pat: &Pattern,
        raw: RawBuf,
    ) -> Option<Result<Status>> {
        if self.schedules.any() {
            return None;
        }
        let spins = e.backoff.direct_looks();
        e.recv_direct(pat, raw, spins)
    }

    /// Withdraw receive `id` if it has not matched yet; `false` when it has (it must
    /// then be completed).
    pub(crate) fn cancel_recv(&self, id: ReqId) -> bool {
        self.lock().proto.cancel_recv(id)
    }

    /// Ask the receiver of rendezvous send `id` to withdraw it
    /// ([`crate::protocol::Protocol::cancel_send`]) and push the question out; whether
    /// it was asked.
    pub(crate) fn cancel_send(&self, id: ReqId) -> bool {
        let mut e = self.lock();
        let asked = e.proto.cancel_send(id);
        if asked {
            self.progress(&mut e);
        }
        asked
    }

    /// Withdraw receive `id` if it has not matched yet, completing its request with
    /// [`crate::MatchError::Cancelled`], and wake a thread asleep waiting for it.
    pub(crate) fn withdraw_recv(&self, id: ReqId) -> bool {
        let done = self.lock().proto.withdraw_recv(id);
        if done {
            self.kick.wake_sleepers();
        }
        done
    }

    /// Wait for request `id` and take its outcome. A send waited for offers its
    /// receiver a share of the copy (for a receive's id that does nothing).
    ///
    /// # Errors
    /// As the request's outcome.
    pub(crate) fn wait_request(&self, id: ReqId) -> Result<Status> {
        self.wait_for(|e| {
            e.proto.help(id);
            e.proto.take_settled(id)
        })
    }

    /// Wait for request `id` without offering help (the drop of a pending request).
    ///
    /// # Errors
    /// As the request's outcome.
    pub(crate) fn wait_request_quietly(&self, id: ReqId) -> Result<Status> {
        self.wait_for(|e| e.proto.take_settled(id))
    }

    /// One progress round, then the outcome of request `id` if it is done (taken).
    pub(crate) fn test_request(&self, id: ReqId) -> Option<Result<Status>> {
        // A test loop takes the lock again and again: other threads' calls first.
        let mut e = self.relock();
        self.progress(&mut e);
        e.proto.take_settled(id)
    }

    /// One progress round, then a copy of request `id`'s outcome if it has completed
    /// (left for the call that completes it: MPI_Request_get_status).
    pub(crate) fn peek_request(&self, id: ReqId) -> Option<Result<Status>> {
        // As test_request: other threads' calls first.
        let mut e = self.relock();
        self.progress(&mut e);
        e.proto.peek_done(id)
    }

    /// One progress round, then whether every request of `ids` is done (none taken).
    pub(crate) fn requests_done(&self, mut ids: impl Iterator<Item = ReqId>) -> bool {
        // As test_request: other threads' calls first.
        let mut e = self.relock();
        self.progress(&mut e);
        ids.all(|id| e.proto.is_done(id))
    }

    /// Wait until every request `id_at(0..n)` names has completed (`None`: nothing to
    /// wait for at that index), then run `finish` with the engine still locked (to take
    /// the outcomes under the same lock). The sends of `help` first offer their
    /// receivers a share of the copy. The engine is locked once for the whole wait (let
    /// go only to yield or sleep), and while requests remain a progress round takes a
    /// window of arrivals instead of stopping at the first completion
    /// ([`Engine::want_completions`]): one round per window, not per message.
    pub(crate) fn wait_all_then<T>(
        &self,
        n: usize,
        id_at: impl Fn(usize) -> Option<ReqId>,
        help: impl Iterator<Item = ReqId>,
        finish: impl FnOnce(&mut Engine) -> T,
    ) -> T {
        let mut e = self.lock();
        for id in help {
            e.proto.help(id);
        }
        let mut next = 0;
        let mut finish = Some(finish);
        self.wait_with(e, |e| {
            // An id the runtime does not hold (a raw request completed elsewhere) is
            // settled too: its outcome is then an error, never a wait.
            while next < n && id_at(next).is_none_or(|id| e.proto.is_settled(id)) {
                next += 1;
            }
            if next < n {
                // The first one still pending is offered help again each round, as a
                // wait for it alone does (a send that was not waiting for its receiver
                // yet at the start may be now; a no-op for a receive).
                if let Some(id) = id_at(next) {
                    e.proto.help(id);
                }
                e.want_completions(n - next);
                return None;
            }
            e.want_completions(1);
            finish.take().map(|f| f(e))
        })
    }

    /// Wait until one of `ids` (tagged with the caller's index) completes; returns its
    /// index and outcome.
    pub(crate) fn wait_any_request(&self, ids: &[(usize, ReqId)]) -> (usize, Result<Status>) {
        self.wait_for(|e| {
            ids.iter()
                .find_map(|&(i, id)| e.proto.take_done(id).map(|r| (i, r)))
        })
    }

    /// Wait for a message matching `pat` and return its status, leaving it queued
    /// (MPI_Probe).
    ///
    /// # Errors
    /// The failure of `pat`'s specific source, if it died.
    pub(crate) fn probe(&self, pat: &Pattern) -> Result<Status> {
        self.wait_for(|e| {
            if let Some(st) = e.proto.iprobe(pat) {
                return Some(Ok(st));
            }
            pat.src
                .and_then(|s| e.proto.peer_failure(s).cloned())
                .map(Err)
        })
    }

    /// The status of a queued message matching `pat`, after one progress round if none
    /// was queued yet (MPI_Iprobe).
    pub(crate) fn iprobe(&self, pat: &Pattern) -> Option<Status> {
        let mut e = self.lock();
        if let Some(st) = e.proto.iprobe(pat) {
            return Some(st);
        }
        self.progress(&mut e);
        e.proto.iprobe(pat)
    }

    /// Wait for a message matching `pat` and take it out of matching (MPI_Mprobe).
    ///
    /// # Errors
    /// The failure of `pat`'s specific source, if it died.
    pub(crate) fn mprobe(&self, pat: &Pattern) -> Result<ProbedMessage> {
        self.wait_for(|e| {
            if let Some(m) = e.proto.improbe(pat) {
                return Some(Ok(m));
            }
            pat.src
                .and_then(|s| e.proto.peer_failure(s).cloned())
                .map(Err)
        })
    }

    /// Take a queued message matching `pat` out of matching, after one progress round
    /// if none was queued yet (MPI_Improbe).
    pub(crate) fn improbe(&self, pat: &Pattern) -> Option<ProbedMessage> {
        let mut e = self.lock();
        if let Some(m) = e.proto.improbe(pat) {
            return Some(m);
        }
        self.progress(&mut e);
        e.proto.improbe(pat)
    }

    /// Whether a receive from world rank `src` with `tag` on context `ctx` is posted,
    /// and the eager limit in bytes towards `src` (for the blocking self-send warning).
    pub(crate) fn posted_and_eager(&self, ctx: u32, src: u32, tag: i32) -> (bool, usize) {
        let e = self.lock();
        (e.proto.has_posted_recv(ctx, src, tag), e.eager_limit(src))
    }
}
