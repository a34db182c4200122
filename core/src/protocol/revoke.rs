//! Revoking a communicator's collectives after a rank found that the ranks disagree.
//!
//! A collective call whose ranks disagree on counts, roots or datatypes (an erroneous
//! program) is found out by the rank that receives a message of the wrong length. That
//! rank fails its call, but the ranks that wait for its part of the algorithm (its
//! subtree in a broadcast tree, its partners in later rounds) would wait forever, since
//! it does not send what it could not receive. With `MPI_ERRORS_ARE_FATAL` the job ends
//! anyway; with `MPI_ERRORS_RETURN` (or a Rust program that goes on after the error)
//! they hang. So the rank that finds the mismatch revokes the communicator's collective
//! context, as ULFM's `MPIX_Comm_revoke` does for a communicator (the MPI fault
//! tolerance proposal, "User Level Failure Mitigation", MPI Forum): it sends `Revoke
//! { ctx }` to every other member, and on every member every receive still posted on
//! that context and every later send or receive on it fails with
//! [`Error::Collective`]. Receives already matched (their sender is sending) go on.
//!
//! Only collective contexts (`ctx | COLL_CTX_BIT`) are revoked: the communicator's
//! point-to-point traffic is untouched, and its collectives fail from then on (the
//! program should stop using it; a communicator made before, or a new one from another
//! communicator, works: a revoked id is never released, so no new communicator gets
//! it on a rank that knows of the revocation). A rendezvous send on the context whose
//! receive has not matched is withdrawn from the receiver (`Cancel`) and fails too, as
//! does one whose buffer offer was being made.
//!
//! A `Revoke` counts only from a member of the communicator that has the id on this
//! rank ([`Protocol::ctx_live`] records the members): one that arrives after this rank
//! freed the revoked communicator and gave its id to a new one is dropped (the new one
//! cannot contain the revoker, which holds the id, so the agreement never picks it for
//! a communicator with it); one for an id not live here yet waits for it.
//!
//! As with ULFM's revoke, the revocation interrupts whatever is pending on the context:
//! a rank that still runs an earlier, correct collective on the communicator when
//! another rank finds a mismatch in a later one gets an error from the earlier one.
//!
//! Not covered:
//! - a mismatch no rank sees as a message of the wrong length: ranks that disagree on
//!   the root (two "roots" send, nobody receives), call different collectives, pass a
//!   zero count on one rank, or differ in the number of calls (`RANKWIRE_COLL_CHECK=1`
//!   finds those);
//! - an `Rts` held by the receiver for ordering (not yet in its unexpected queue) is not
//!   withdrawn, as with `MPI_Cancel`;
//! - a rank learns of the revocation when the frame arrives: an operation it starts
//!   before that (a broadcast root's eager sends) may still complete;
//! - messages that arrive on the context after the revocation stay in the unexpected
//!   queue (bounded by what was in flight; the id is held anyway);
//! - collectives run as several steps on hidden sub-communicators (the node-aware
//!   device allreduce) revoke only the step that found the mismatch.

use super::*;
use crate::context_id::COLL_CTX_BIT;

impl Protocol {
    /// This rank found a mismatch in a collective call on collective context `ctx`,
    /// whose members are the world ranks `members`: revoke `ctx` here and queue
    /// `Revoke` to every other member. Does nothing for a context that is not a
    /// collective one, or that is revoked already.
    pub fn revoke(&mut self, ctx: u32, members: &[u32]) {
        if ctx & COLL_CTX_BIT == 0 || self.is_revoked(ctx) {
            return;
        }
        self.mark_revoked(ctx, self.rank);
        for &m in members {
            if m == self.rank || self.dead.contains_key(&m) {
                continue;
            }
            self.out.push_back(OutFrame {
                peer: m,
                header: Frame::Revoke { ctx }.header(0),
                payload: Payload::Empty,
                on_sent: OnSent::Nothing,
            });
        }
    }

    /// `Revoke { ctx }` from `peer`.
    ///
    /// # Errors
    /// A context that is not a collective one (a malformed frame).
    pub(super) fn on_revoke(&mut self, peer: u32, ctx: u32) -> Result<(), Error> {
        if ctx & COLL_CTX_BIT == 0 {
            return Err(Error::Transport {
                transport: "wire",
                peer,
                detail: format!("Revoke of context {ctx}, which is not a collective one"),
            });
        }
        if self.is_revoked(ctx) {
            return Ok(());
        }
        if ctx != COLL_CTX_BIT | crate::context_id::WORLD_CTX {
            match self.members.get(&ctx) {
                // The id's communicator here does not contain the sender: the Revoke is
                // for a communicator this rank freed before it arrived, whose id a
                // communicator without the sender got since. Not this one's.
                Some(m) if !m.contains(&peer) => return Ok(()),
                Some(_) => {}
                // Not live here: this rank has not made the communicator yet (or freed
                // it). Kept until it does ([`Protocol::ctx_live`]).
                None => {
                    self.revokes_early.insert(ctx, peer);
                    return Ok(());
                }
            }
        }
        self.mark_revoked(ctx, peer);
        Ok(())
    }

    /// A communicator with context id `ctx` (point-to-point; its collective context is
    /// `ctx | COLL_CTX_BIT`) and world ranks `group` is live on this rank from now on,
    /// until [`Protocol::release_ctx`]. A `Revoke` of its collective context that came
    /// before from one of its members revokes it now; one from a rank outside it was
    /// meant for an earlier communicator with that id and is dropped.
    pub fn ctx_live(&mut self, ctx: u32, group: std::sync::Arc<[u32]>) {
        let coll = ctx | COLL_CTX_BIT;
        let early = self.revokes_early.remove(&coll);
        if let Some(by) = early
            && group.contains(&by)
            && !self.is_revoked(coll)
        {
            self.mark_revoked(coll, by);
        }
        self.members.insert(coll, group);
    }

    /// Whether context `ctx` is revoked here (one length test while none is: this is
    /// on the paths of every send and receive).
    #[inline]
    pub(crate) fn is_revoked(&self, ctx: u32) -> bool {
        !self.revoked.is_empty() && self.revoked.contains_key(&ctx)
    }

    /// The error of an operation on revoked context `ctx`, `None` if it is not revoked.
    #[inline]
    pub(crate) fn revoked_error(&self, ctx: u32) -> Option<Error> {
        if self.revoked.is_empty() {
            return None;
        }
        self.revoked.get(&ctx).map(|&by| revoked(by))
    }

    /// Collective contexts revoked on this rank (each holds its communicator's id for
    /// good; see [`Protocol::release_ctx`]).
    pub fn revoked_count(&self) -> usize {
        self.revoked.len()
    }

    /// Revoke `ctx` here (revoked by world rank `by`): fail every receive still posted
    /// on it, and withdraw every rendezvous send on it whose receive has not matched:
    /// its `Rts` waits in the receiver's unexpected queue, where (the receiver's context
    /// being revoked too) no receive will match it. The withdrawal is a `Cancel`
    /// (`send.rs`), which settles the race with a receive matching at the same moment; a
    /// withdrawn send fails with the revocation.
    fn mark_revoked(&mut self, ctx: u32, by: u32) {
        self.revoked.insert(ctx, by);
        let err = revoked(by);
        for id in self.matcher.drain_posted(|p| p.ctx == ctx) {
            self.reqs.take_recv(id);
            self.reqs.complete(id, Err(err.clone()));
        }
        let sends: Vec<ReqId> = self
            .reqs
            .sends()
            .filter(|(_, s)| s.ctx == ctx && matches!(s.state, SendState::AwaitCts))
            .map(|(id, _)| id)
            .collect();
        for id in sends {
            self.cancel_send(id);
        }
    }
}

/// The error of an operation on a collective context revoked by world rank `by` (short
/// enough, with the class's fix text, for `MPI_Error_string`'s 512 bytes).
fn revoked(by: u32) -> Error {
    Error::Collective(format!(
        "this communicator's collectives are revoked: world rank {by} got a message of the \
         wrong length in a collective (its own error names it); they fail from now on, \
         point-to-point still works"
    ))
    .noted()
}
