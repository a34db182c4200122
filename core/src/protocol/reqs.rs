//! The request table: every send and receive of one rank, and then its outcome, in
//! one slab (dense, reused slots; a lookup is an index and a generation check, no
//! hashing), so that the small-message path touches one slot per request.
//!
//! A request id is `generation << 32 | slot`. The generation comes from a counter that
//! is bumped on every allocation (never 0), so an id that outlived its request (a
//! late or forged `Cts`, `Data` or `Fin` from a peer, a late RDMA completion) does not
//! find the slot's next occupant: it would need the same slot and a counter that has
//! gone round all 2^32 values in between.
//!
//! A slot is `Reserved` from [`Reqs::reserve`] until it holds a send, a receive or an
//! outcome; taking a send or receive out ([`Reqs::take_send`], [`Reqs::take_recv`])
//! leaves it `Reserved` until [`Reqs::complete`] stores the outcome, which
//! [`Reqs::take_done`] hands out and frees.

use slab::Slab;

use super::{RawBuf, RecvReq, ReqId, SendReq, Status};
use crate::error::Error;

pub(super) enum Slot {
    Reserved,
    Send(SendReq),
    Recv(RecvReq),
    Done(Result<Status, Error>),
}

#[derive(Default)]
pub(super) struct Reqs {
    slab: Slab<(u32, Slot)>,
    generation: u32,
    /// Sends and receives held (not reserved, not done).
    live: usize,
    /// Outcomes stored so far.
    completions: u64,
}

impl std::fmt::Debug for Reqs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reqs")
            .field("slots", &self.slab.len())
            .field("live", &self.live)
            .field("completions", &self.completions)
            .finish()
    }
}

/// The number shown to people for request `id`: its place among this rank's requests
/// in the order they were made (its generation), 1 for the first.
pub(super) fn number(id: ReqId) -> u64 {
    id >> 32
}

#[inline]
fn split(id: ReqId) -> (usize, u32) {
    ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
}

impl Reqs {
    /// A fresh id whose slot holds nothing yet.
    #[inline]
    pub(super) fn reserve(&mut self) -> ReqId {
        self.generation = self.generation.wrapping_add(1).max(1);
        let key = self.slab.insert((self.generation, Slot::Reserved));
        (u64::from(self.generation) << 32) | key as u64
    }

    #[inline]
    fn slot(&self, id: ReqId) -> Option<&Slot> {
        let (k, g) = split(id);
        match self.slab.get(k) {
            Some((generation, s)) if *generation == g => Some(s),
            _ => None,
        }
    }

    #[inline]
    fn slot_mut(&mut self, id: ReqId) -> Option<&mut Slot> {
        let (k, g) = split(id);
        match self.slab.get_mut(k) {
            Some((generation, s)) if *generation == g => Some(s),
            _ => None,
        }
    }

    /// Store send `s` in the reserved slot `id`.
    #[inline]
    pub(super) fn set_send(&mut self, id: ReqId, s: SendReq) {
        if let Some(slot) = self.slot_mut(id) {
            *slot = Slot::Send(s);
            self.live += 1;
        }
    }

    /// A fresh id holding receive `r` (a [`Reqs::reserve`] and [`Reqs::set_recv`] in one
    /// write of the slot: the posting path of every receive).
    #[inline]
    pub(super) fn insert_recv(&mut self, r: RecvReq) -> ReqId {
        self.generation = self.generation.wrapping_add(1).max(1);
        let key = self.slab.insert((self.generation, Slot::Recv(r)));
        self.live += 1;
        (u64::from(self.generation) << 32) | key as u64
    }

    /// Store receive `r` in the reserved slot `id`.
    #[inline]
    pub(super) fn set_recv(&mut self, id: ReqId, r: RecvReq) {
        if let Some(slot) = self.slot_mut(id) {
            *slot = Slot::Recv(r);
            self.live += 1;
        }
    }

    #[inline]
    pub(super) fn send(&self, id: ReqId) -> Option<&SendReq> {
        match self.slot(id) {
            Some(Slot::Send(s)) => Some(s),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn send_mut(&mut self, id: ReqId) -> Option<&mut SendReq> {
        match self.slot_mut(id) {
            Some(Slot::Send(s)) => Some(s),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn recv(&self, id: ReqId) -> Option<&RecvReq> {
        match self.slot(id) {
            Some(Slot::Recv(r)) => Some(r),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn recv_mut(&mut self, id: ReqId) -> Option<&mut RecvReq> {
        match self.slot_mut(id) {
            Some(Slot::Recv(r)) => Some(r),
            _ => None,
        }
    }

    /// Take send `id` out (its slot stays reserved until [`Reqs::complete`]).
    #[inline]
    pub(super) fn take_send(&mut self, id: ReqId) -> Option<SendReq> {
        let slot = self.slot_mut(id)?;
        if !matches!(slot, Slot::Send(_)) {
            return None;
        }
        let Slot::Send(s) = std::mem::replace(slot, Slot::Reserved) else {
            return None;
        };
        self.live -= 1;
        Some(s)
    }

    /// Take receive `id` out (its slot stays reserved until [`Reqs::complete`]).
    #[inline]
    pub(super) fn take_recv(&mut self, id: ReqId) -> Option<RecvReq> {
        let slot = self.slot_mut(id)?;
        if !matches!(slot, Slot::Recv(_)) {
            return None;
        }
        let Slot::Recv(r) = std::mem::replace(slot, Slot::Reserved) else {
            return None;
        };
        self.live -= 1;
        Some(r)
    }

    /// Store the outcome of request `id` (whatever it held).
    #[inline]
    pub(super) fn complete(&mut self, id: ReqId, r: Result<Status, Error>) {
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        let was_live = matches!(slot, Slot::Send(_) | Slot::Recv(_));
        *slot = Slot::Done(r);
        if was_live {
            self.live -= 1;
        }
        self.completions += 1;
    }

    /// For a receive `id` whose buffer is host memory: call `fill(buf)` (which writes
    /// the message into it and returns the outcome) and store that outcome, in one
    /// lookup of the slot. `None`, and nothing called, when `id` is not a receive or
    /// its buffer is device memory.
    #[inline]
    pub(super) fn complete_host_recv(
        &mut self,
        id: ReqId,
        fill: impl FnOnce(RawBuf) -> Result<Status, Error>,
    ) -> Option<()> {
        let slot = self.slot_mut(id)?;
        let buf = match slot {
            Slot::Recv(r) if r.buf.is_host() => r.buf,
            _ => return None,
        };
        *slot = Slot::Done(fill(buf));
        self.live -= 1;
        self.completions += 1;
        Some(())
    }

    /// The outcome of request `id` if it has one, the slot freed, in one lookup; else
    /// `Err(held)`: whether the id is still held (pending).
    #[inline]
    fn take_or_held(&mut self, id: ReqId) -> Result<Result<Status, Error>, bool> {
        let (k, g) = split(id);
        match self.slab.get(k) {
            Some((generation, Slot::Done(_))) if *generation == g => match self.slab.remove(k) {
                (_, Slot::Done(r)) => Ok(r),
                _ => Err(false),
            },
            Some((generation, _)) => Err(*generation == g),
            None => Err(false),
        }
    }

    /// The outcome of request `id` if it has one; frees the slot.
    #[inline]
    pub(super) fn take_done(&mut self, id: ReqId) -> Option<Result<Status, Error>> {
        self.take_or_held(id).ok()
    }

    /// A copy of request `id`'s outcome if it has one waiting (left in place).
    pub(super) fn peek_done(&self, id: ReqId) -> Option<Result<Status, Error>> {
        match self.slot(id) {
            Some(Slot::Done(r)) => Some(r.clone()),
            _ => None,
        }
    }

    /// Whether request `id` has an outcome waiting.
    #[inline]
    pub(super) fn is_done(&self, id: ReqId) -> bool {
        matches!(self.slot(id), Some(Slot::Done(_)))
    }

    /// The outcome of request `id` if it is settled, in one lookup: taken (the slot
    /// freed) when done; [`crate::MatchError::UnknownRequest`] when not held at all
    /// (taken already, or never made). `None` while it is pending.
    #[inline]
    pub(super) fn take_settled(&mut self, id: ReqId) -> Option<Result<Status, Error>> {
        match self.take_or_held(id) {
            Ok(r) => Some(r),
            Err(true) => None,
            Err(false) => Some(Err(crate::protocol::unknown_request(id))),
        }
    }

    /// Whether request `id` is done, or not held at all.
    #[inline]
    pub(super) fn is_settled(&self, id: ReqId) -> bool {
        !matches!(
            self.slot(id),
            Some(Slot::Reserved | Slot::Send(_) | Slot::Recv(_))
        )
    }

    /// Whether request `id` is held (pending or done).
    pub(super) fn is_known(&self, id: ReqId) -> bool {
        self.slot(id).is_some()
    }

    /// Forget request `id` entirely (a withdrawn receive).
    pub(super) fn free(&mut self, id: ReqId) {
        let (k, g) = split(id);
        if matches!(self.slab.get(k), Some((generation, _)) if *generation == g) {
            let (_, s) = self.slab.remove(k);
            if matches!(s, Slot::Send(_) | Slot::Recv(_)) {
                self.live -= 1;
            }
        }
    }

    /// Sends and receives held.
    #[inline]
    pub(super) fn live(&self) -> usize {
        self.live
    }

    /// Outcomes stored so far.
    #[inline]
    pub(super) fn completions(&self) -> u64 {
        self.completions
    }

    /// Every send held, with its id.
    pub(super) fn sends(&self) -> impl Iterator<Item = (ReqId, &SendReq)> {
        self.slab.iter().filter_map(|(k, (g, s))| match s {
            Slot::Send(s) => Some(((u64::from(*g) << 32) | k as u64, s)),
            _ => None,
        })
    }

    /// Every receive held, with its id.
    pub(super) fn recvs(&self) -> impl Iterator<Item = (ReqId, &RecvReq)> {
        self.slab.iter().filter_map(|(k, (g, s))| match s {
            Slot::Recv(r) => Some(((u64::from(*g) << 32) | k as u64, r)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matching::Pattern;
    use crate::protocol::{RawBuf, RecvState};

    fn recv() -> RecvReq {
        RecvReq {
            pat: Pattern {
                ctx: 0,
                src: None,
                tag: None,
            },
            buf: RawBuf::new(std::ptr::null_mut(), 0),
            state: RecvState::Posted,
        }
    }

    fn ok() -> Result<Status, Error> {
        Ok(Status {
            source: 1,
            tag: 2,
            len_bytes: 3,
        })
    }

    #[test]
    fn lifecycle_and_counts() {
        let mut t = Reqs::default();
        let a = t.reserve();
        let b = t.reserve();
        assert_ne!(a, b);
        assert_ne!(a, 0);
        t.set_recv(a, recv());
        assert_eq!(t.live(), 1);
        assert!(t.recv_mut(a).is_some() && t.send_mut(a).is_none());
        assert!(t.take_done(a).is_none(), "not done yet");
        assert!(t.take_recv(a).is_some());
        assert_eq!(t.live(), 0);
        t.complete(a, ok());
        t.complete(b, ok());
        assert_eq!(t.completions(), 2);
        assert!(t.is_done(a));
        assert_eq!(t.take_done(a).unwrap().unwrap().len_bytes, 3);
        assert!(t.take_done(a).is_none(), "taken once");
        assert!(t.take_done(b).is_some());
    }

    #[test]
    fn stale_ids_never_reach_a_reused_slot() {
        let mut t = Reqs::default();
        let a = t.reserve();
        t.complete(a, ok());
        t.take_done(a);
        let b = t.reserve();
        assert_eq!(a & 0xffff_ffff, b & 0xffff_ffff, "the slot is reused");
        t.set_recv(b, recv());
        assert!(t.recv_mut(a).is_none());
        assert!(t.take_recv(a).is_none());
        t.complete(a, ok());
        assert!(!t.is_done(b) && t.recv_mut(b).is_some(), "b untouched");
        assert!(t.take_done(a).is_none());
        for forged in [0, u64::MAX, 1 << 40, b ^ (1 << 32)] {
            assert!(t.recv_mut(forged).is_none() && t.take_done(forged).is_none());
        }
        t.free(b);
        assert_eq!(t.live(), 0);
        assert!(t.recv_mut(b).is_none());
    }
}
