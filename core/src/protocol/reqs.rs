//! The request table: every send and receive of one rank, and then its outcome, in
//! one vector of slots (dense, reused; a lookup is an index and a generation check, no
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
//! [`Reqs::take_done`] hands out and frees. A freed slot is `Free` and its index goes on
//! the free list, whose last entry the next request takes; entries are never removed,
//! so every index on the list is in range, and an id finds nothing in a `Free` slot.
//!
//! The table is written in place, not through a general slab: a request is built
//! straight into its slot and an outcome read straight out of it. A slab's `insert`
//! and `remove` move the whole slot (120 bytes) through a temporary, and on the
//! small-message path those wide copies read back narrow stores just made, which the
//! CPU cannot forward (perf put most of the slab insert's samples on the store after
//! such a copy).

use super::{RawBuf, RecvReq, RecvState, ReqId, SendReq, Status};
use crate::error::Error;
use crate::matching::Pattern;

// The in-place writes below (`ptr::write` over a free slot, a posted receive or a
// success) skip drop glue on the grounds that these own nothing: keep it so.
const _: () = assert!(
    !std::mem::needs_drop::<Status>()
        && !std::mem::needs_drop::<Pattern>()
        && !std::mem::needs_drop::<RawBuf>()
);

pub(super) enum Slot {
    /// No request: on the free list.
    Free,
    Reserved,
    Send(SendReq),
    Recv(RecvReq),
    Done(Result<Status, Error>),
}

struct Entry {
    /// Generation of the request in it (or of the last one, while free).
    generation: u32,
    slot: Slot,
}

#[derive(Default)]
pub(super) struct Reqs {
    entries: Vec<Entry>,
    /// Indices of free entries, the one freed last at the end (reused first: its
    /// cache line is the likeliest to be at hand).
    free: Vec<u32>,
    generation: u32,
    /// Sends and receives held (not reserved, not done).
    live: usize,
    /// Outcomes stored so far.
    completions: u64,
}

impl std::fmt::Debug for Reqs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reqs")
            .field("slots", &(self.entries.len() - self.free.len()))
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
    /// A free entry's index, with a fresh generation stored in it (its slot is
    /// `Free` still: the caller writes it).
    #[inline(always)]
    fn alloc(&mut self) -> (usize, ReqId) {
        self.generation = self.generation.wrapping_add(1).max(1);
        let g = self.generation;
        let k = match self.free.pop() {
            Some(k) => k as usize,
            None => self.grow(),
        };
        debug_assert!(k < self.entries.len());
        // SAFETY: free indices and `grow`'s are below `entries.len()` (entries are
        // never removed).
        unsafe { self.entries.get_unchecked_mut(k) }.generation = g;
        (k, (u64::from(g) << 32) | k as u64)
    }

    /// A new free entry at the end; its index.
    #[cold]
    fn grow(&mut self) -> usize {
        let k = self.entries.len();
        assert!(
            k < u32::MAX as usize,
            "more than 2^32 - 1 requests held at once"
        );
        self.entries.push(Entry {
            generation: 0,
            slot: Slot::Free,
        });
        k
    }

    /// Store `slot` in the entry `k` that [`Reqs::alloc`] just handed out.
    #[inline(always)]
    fn fill(&mut self, k: usize, slot: Slot) {
        debug_assert!(k < self.entries.len());
        // SAFETY: `k` came from `alloc`, so it is below `entries.len()`.
        let e = unsafe { self.entries.get_unchecked_mut(k) };
        debug_assert!(matches!(e.slot, Slot::Free));
        // SAFETY: the entry is free, and `Slot::Free` owns nothing: overwriting it
        // without running drop glue leaks nothing. (An assignment would call the drop
        // glue first, and the compiler then builds the new slot on the stack and
        // copies it over, 120 bytes, instead of writing its fields in place.)
        unsafe { std::ptr::write(&mut e.slot, slot) };
    }

    /// A fresh id whose slot holds nothing yet.
    #[inline]
    pub(super) fn reserve(&mut self) -> ReqId {
        let (k, id) = self.alloc();
        self.fill(k, Slot::Reserved);
        id
    }

    /// The entry of `id` unless it is free or holds another request.
    #[inline(always)]
    fn entry_mut(&mut self, id: ReqId) -> Option<&mut Entry> {
        let (k, g) = split(id);
        match self.entries.get_mut(k) {
            Some(e) if e.generation == g && !matches!(e.slot, Slot::Free) => Some(e),
            _ => None,
        }
    }

    #[inline]
    fn slot(&self, id: ReqId) -> Option<&Slot> {
        let (k, g) = split(id);
        match self.entries.get(k) {
            Some(e) if e.generation == g && !matches!(e.slot, Slot::Free) => Some(&e.slot),
            _ => None,
        }
    }

    #[inline]
    fn slot_mut(&mut self, id: ReqId) -> Option<&mut Slot> {
        self.entry_mut(id).map(|e| &mut e.slot)
    }

    /// Put entry `k` (its slot emptied already) on the free list.
    #[inline(always)]
    fn release(&mut self, k: usize) {
        debug_assert!(matches!(self.entries[k].slot, Slot::Free));
        self.free.push(k as u32);
    }

    /// Store send `s` in the reserved slot `id`.
    #[inline]
    pub(super) fn set_send(&mut self, id: ReqId, s: SendReq) {
        if let Some(slot) = self.slot_mut(id) {
            *slot = Slot::Send(s);
            self.live += 1;
        }
    }

    /// A fresh id holding a posted receive of `pat` into `buf` (a [`Reqs::reserve`] and
    /// [`Reqs::set_recv`] in one write of the slot: the posting path of every receive).
    #[inline]
    pub(super) fn insert_recv(&mut self, pat: Pattern, buf: RawBuf) -> ReqId {
        let (k, id) = self.alloc();
        // Built in the call, after the entry is known: the compiler writes the fields
        // straight into it (a request built first goes through a temporary).
        self.fill(
            k,
            Slot::Recv(RecvReq {
                pat,
                buf,
                state: RecvState::Posted,
            }),
        );
        self.live += 1;
        id
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
    /// the message of `msg_len` bytes from world rank `src` with `tag` into it, as much
    /// as fits) and store the outcome (success, or truncation when `msg_len` exceeds
    /// the buffer), in one lookup of the slot. `None`, and nothing called, when `id` is
    /// not a receive or its buffer is device memory.
    ///
    /// A success is written straight into the slot: an outcome built first and then
    /// stored is copied through a temporary whose narrow stores its wide loads read
    /// back (the CPU cannot forward those).
    #[inline(always)]
    pub(super) fn complete_host_recv(
        &mut self,
        id: ReqId,
        src: u32,
        tag: i32,
        msg_len: u64,
        fill: impl FnOnce(RawBuf),
    ) -> Option<()> {
        let slot = self.slot_mut(id)?;
        let (buf, posted) = match slot {
            Slot::Recv(r) if r.buf.is_host() => (r.buf, matches!(r.state, RecvState::Posted)),
            _ => return None,
        };
        fill(buf);
        if msg_len <= buf.len() as u64 {
            let done = Slot::Done(Ok(Status {
                source: src as usize,
                tag,
                len_bytes: msg_len as usize,
            }));
            if posted {
                // SAFETY: a posted receive owns nothing (its pattern and buffer
                // descriptor are plain data, `RecvState::Posted` holds nothing):
                // overwriting it without running drop glue leaks nothing.
                unsafe { std::ptr::write(slot, done) };
            } else {
                *slot = done;
            }
        } else {
            *slot = Slot::Done(super::recv_result(src, tag, msg_len, buf.len()));
        }
        self.live -= 1;
        self.completions += 1;
        Some(())
    }

    /// The outcome of request `id` if it has one, the slot freed, in one lookup; else
    /// `Err(held)`: whether the id is still held (pending).
    #[inline(always)]
    fn take_or_held(&mut self, id: ReqId) -> Result<Result<Status, Error>, bool> {
        let (k, g) = split(id);
        let Some(e) = self.entries.get_mut(k) else {
            return Err(false);
        };
        if e.generation != g {
            return Err(false);
        }
        match &e.slot {
            // The common outcome read where it lies (24 bytes), not moved out with the
            // slot.
            Slot::Done(Ok(st)) => {
                let st = *st;
                self.free_ok(k);
                Ok(Ok(st))
            }
            Slot::Done(Err(_)) => {
                let Slot::Done(r) = std::mem::replace(&mut e.slot, Slot::Free) else {
                    unreachable!("matched Done above")
                };
                self.release(k);
                Ok(r)
            }
            Slot::Free => Err(false),
            _ => Err(true),
        }
    }

    /// Free entry `k`, whose slot holds a success (`Done(Ok(_))`) the caller has read.
    #[inline(always)]
    fn free_ok(&mut self, k: usize) {
        let e = &mut self.entries[k];
        debug_assert!(matches!(e.slot, Slot::Done(Ok(_))));
        // SAFETY: `Done(Ok(_))` owns nothing (a `Status`: the check at the top of this
        // file): overwriting it without running drop glue leaks nothing.
        unsafe { std::ptr::write(&mut e.slot, Slot::Free) };
        self.release(k);
    }

    /// [`super::Protocol::take_ok_into`].
    #[inline(always)]
    pub(super) fn take_ok_into(&mut self, id: ReqId, out: &mut Vec<Status>) -> super::Taken {
        let (k, g) = split(id);
        let Some(e) = self.entries.get_mut(k) else {
            return super::Taken::Other;
        };
        if e.generation != g {
            return super::Taken::Other;
        }
        match &e.slot {
            Slot::Done(Ok(st)) => {
                out.push(*st);
                self.free_ok(k);
                super::Taken::Pushed
            }
            Slot::Reserved | Slot::Send(_) | Slot::Recv(_) => super::Taken::Pending,
            Slot::Done(Err(_)) | Slot::Free => super::Taken::Other,
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
        let k = split(id).0;
        if let Some(e) = self.entry_mut(id) {
            let s = std::mem::replace(&mut e.slot, Slot::Free);
            if matches!(s, Slot::Send(_) | Slot::Recv(_)) {
                self.live -= 1;
            }
            self.release(k);
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
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(k, e)| match &e.slot {
                Slot::Send(s) => Some(((u64::from(e.generation) << 32) | k as u64, s)),
                _ => None,
            })
    }

    /// Every receive held, with its id.
    pub(super) fn recvs(&self) -> impl Iterator<Item = (ReqId, &RecvReq)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(k, e)| match &e.slot {
                Slot::Recv(r) => Some(((u64::from(e.generation) << 32) | k as u64, r)),
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

    fn host_buf(buf: &mut [u8]) -> RawBuf {
        RawBuf::new(buf.as_mut_ptr(), buf.len())
    }

    #[test]
    fn fast_take_pushes_successes_and_leaves_the_rest() {
        use crate::protocol::Taken;
        let mut t = Reqs::default();
        let mut out = Vec::new();
        let a = t.reserve();
        assert_eq!(t.take_ok_into(a, &mut out), Taken::Pending, "reserved");
        t.complete(a, ok());
        assert_eq!(t.take_ok_into(a, &mut out), Taken::Pushed);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len_bytes, 3);
        assert_eq!(t.take_ok_into(a, &mut out), Taken::Other, "taken already");
        assert!(t.take_settled(a).unwrap().is_err(), "unknown now");
        // A failure is left for take_settled, untouched.
        let b = t.reserve();
        t.complete(b, Err(Error::usage("boom")));
        assert_eq!(t.take_ok_into(b, &mut out), Taken::Other);
        assert!(t.is_done(b));
        let e = t.take_settled(b).unwrap().unwrap_err();
        assert!(e.to_string().contains("boom"), "{e}");
        assert_eq!(out.len(), 1);
        for forged in [0, u64::MAX, b ^ (1 << 32)] {
            assert_eq!(t.take_ok_into(forged, &mut out), Taken::Other);
        }
    }

    #[test]
    fn host_receive_completes_in_place_with_success_or_truncation() {
        let mut t = Reqs::default();
        let mut buf = [0u8; 4];
        let a = t.insert_recv(recv().pat, host_buf(&mut buf));
        assert_eq!(t.live(), 1);
        let done = t.complete_host_recv(a, 7, 9, 3, |b| {
            // SAFETY: `b` is `buf`, live and 4 bytes long.
            unsafe { b.write_at(0, &[1, 2, 3]) }
        });
        assert!(done.is_some());
        assert_eq!(t.live(), 0);
        assert_eq!(t.completions(), 1);
        let st = t.take_done(a).unwrap().unwrap();
        assert_eq!((st.source, st.tag, st.len_bytes), (7, 9, 3));
        let mut small = [0u8; 2];
        let b = t.insert_recv(recv().pat, host_buf(&mut small));
        let mut wrote = 0;
        t.complete_host_recv(b, 1, 2, 5, |b| wrote = b.len())
            .unwrap();
        assert_eq!(wrote, 2, "fill sees the whole buffer");
        let e = t.take_done(b).unwrap().unwrap_err();
        assert!(
            e.to_string().contains("5"),
            "truncation names the sizes: {e}"
        );
        // Not a receive: nothing called.
        let c = t.reserve();
        assert!(
            t.complete_host_recv(c, 0, 0, 0, |_| panic!("called"))
                .is_none()
        );
        assert_eq!(buf, [1, 2, 3, 0]);
    }

    /// Random operations against a model: every id finds its own request or nothing,
    /// the counts and the free list stay consistent, and freed entries are reused.
    #[test]
    fn random_operations_match_a_model() {
        use crate::protocol::Taken;
        use rand::{Rng, SeedableRng};
        #[derive(Clone, Copy, Debug, PartialEq)]
        enum M {
            Reserved,
            Recv,
            Ok(usize),
            Failed,
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(22);
        let mut t = Reqs::default();
        let mut model: std::collections::HashMap<ReqId, M> = Default::default();
        let mut gone: Vec<ReqId> = Vec::new();
        let mut out = Vec::new();
        let mut buf = [0u8; 8];
        let mut max_slots = 0;
        for step in 0..50_000usize {
            let ids: Vec<ReqId> = model.keys().copied().collect();
            let pick = |rng: &mut rand::rngs::StdRng| ids[rng.random_range(0..ids.len())];
            match rng.random_range(0..9) {
                0 if model.len() < 40 => {
                    let id = t.reserve();
                    assert!(!model.contains_key(&id) && !gone.contains(&id));
                    model.insert(id, M::Reserved);
                }
                1 if model.len() < 40 => {
                    let id = t.insert_recv(recv().pat, host_buf(&mut buf));
                    assert!(!model.contains_key(&id) && !gone.contains(&id));
                    model.insert(id, M::Recv);
                }
                2 if !ids.is_empty() => {
                    // Complete a reserved request, or a receive taken out first.
                    let id = pick(&mut rng);
                    if model[&id] == M::Recv {
                        assert!(t.take_recv(id).is_some());
                    }
                    if matches!(model[&id], M::Reserved | M::Recv) {
                        if rng.random_bool(0.8) {
                            t.complete(
                                id,
                                Ok(Status {
                                    source: 0,
                                    tag: 0,
                                    len_bytes: step,
                                }),
                            );
                            model.insert(id, M::Ok(step));
                        } else {
                            t.complete(id, Err(Error::usage("failed")));
                            model.insert(id, M::Failed);
                        }
                    }
                }
                3 if !ids.is_empty() => {
                    // An eager message into a receive: fits, or is truncated.
                    let id = pick(&mut rng);
                    let len = rng.random_range(0..12u64);
                    let done = t.complete_host_recv(id, 1, 2, len, |_| {});
                    assert_eq!(done.is_some(), model[&id] == M::Recv, "step {step}");
                    if done.is_some() {
                        let m = if len <= 8 {
                            M::Ok(len as usize)
                        } else {
                            M::Failed
                        };
                        model.insert(id, m);
                    }
                }
                4 if !ids.is_empty() => {
                    let id = pick(&mut rng);
                    let before = out.len();
                    match (t.take_ok_into(id, &mut out), model[&id]) {
                        (Taken::Pushed, M::Ok(len)) => {
                            assert_eq!(out[before].len_bytes, len);
                            model.remove(&id);
                            gone.push(id);
                        }
                        (Taken::Pending, M::Reserved | M::Recv) | (Taken::Other, M::Failed) => {}
                        (got, want) => panic!("step {step}: {got:?} for {want:?}"),
                    }
                }
                5 if !ids.is_empty() => {
                    let id = pick(&mut rng);
                    match (t.take_settled(id), model[&id]) {
                        (None, M::Reserved | M::Recv) => {}
                        (Some(Ok(st)), M::Ok(len)) => {
                            assert_eq!(st.len_bytes, len);
                            model.remove(&id);
                            gone.push(id);
                        }
                        (Some(Err(_)), M::Failed) => {
                            model.remove(&id);
                            gone.push(id);
                        }
                        (got, want) => panic!("step {step}: {got:?} for {want:?}"),
                    }
                }
                6 if !ids.is_empty() => {
                    // Withdraw a receive.
                    let id = pick(&mut rng);
                    if model[&id] == M::Recv {
                        t.free(id);
                        model.remove(&id);
                        gone.push(id);
                    }
                }
                _ if !gone.is_empty() => {
                    let id = gone[rng.random_range(0..gone.len())];
                    assert!(!t.is_known(id), "step {step}: a taken id is found");
                    assert!(t.take_done(id).is_none() && t.recv_mut(id).is_none());
                    assert_eq!(t.take_ok_into(id, &mut out), Taken::Other);
                    assert!(matches!(t.take_settled(id), Some(Err(_))), "unknown");
                }
                _ => {}
            }
            // Invariants: counts, the free list, every held id.
            let live = model.values().filter(|m| matches!(m, M::Recv)).count();
            assert_eq!(t.live(), live, "step {step}");
            assert_eq!(t.entries.len() - t.free.len(), model.len(), "step {step}");
            let mut free = t.free.clone();
            free.sort_unstable();
            free.dedup();
            assert_eq!(
                free.len(),
                t.free.len(),
                "step {step}: an index freed twice"
            );
            assert!(
                free.iter()
                    .all(|&k| matches!(t.entries[k as usize].slot, Slot::Free))
            );
            for (&id, &m) in &model {
                assert_eq!(
                    t.is_done(id),
                    matches!(m, M::Ok(_) | M::Failed),
                    "step {step}"
                );
                assert_eq!(t.recv_mut(id).is_some(), m == M::Recv, "step {step}");
            }
            max_slots = max_slots.max(t.entries.len());
        }
        assert!(
            max_slots <= 40,
            "free entries are reused: {max_slots} slots"
        );
        assert_eq!(t.recvs().count(), t.live());
    }
}
