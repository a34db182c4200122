//! Context-id allocation with reuse (MPI 4.1 §7.4; issue 17 case 4).
//!
//! A communicator's context id must differ from the id of every other live
//! communicator that shares a process with it; two disjoint communicators may share
//! one (no message passes between them). Ids are reused once freed, so a job that
//! creates and frees communicators forever keeps both its ids and its per-(peer,
//! context) matching state bounded.
//!
//! # Agreement (MPICH's free-id mask, `MPIR_Get_contextid_sparse`, simplified)
//! Every process keeps a mask of [`MAX_CONTEXTS`] bits, bit `i` set when id `i` is
//! free here (id 0 is the world). Creating communicators from a parent is collective
//! over the parent: its ranks allreduce their masks with bitwise AND and take the
//! lowest id set in the result, `c`; each rank that is a member of a new communicator
//! marks `c` taken. Communicators split off together share `c` and are disjoint.
//! `c` is unique: every member of the new communicator took part and had `c` free.
//!
//! # Freeing, and why reuse cannot mis-match
//! When the last handle of a communicator drops, its id and the sequence numbers to
//! and from its members (`crate::protocol::Protocol::release_ctx`) are released —
//! but only when nothing is posted or waiting in matching on its two contexts;
//! otherwise the id stays taken (held here, retried at every creation), so messages
//! still buffered for it can never be matched by a later communicator with that id.
//!
//! In a correct program a rank frees a communicator only after it received every
//! message sent to it on that communicator, so no frame for the old communicator is in
//! flight *towards* it. Frames it sent may still be in flight towards a peer, but that
//! peer still holds the id taken (its mask bit is clear) until it, too, has received
//! them and freed the communicator, and no communicator containing both can get the id
//! before that. Conversely a message for an id that is free here may legitimately
//! arrive: a peer that finished the agreement first sends on the new communicator
//! before this rank has created it; it waits in the unexpected queue as for any
//! context, and the sequence numbers of both sides start at 0. A message sent on a
//! communicator after its receiver freed it is erroneous (it can never be received);
//! it waits in matching and is not a crash. Limitation: if it arrives after the
//! receiver released the id, and the id is later reused by a communicator that
//! contains its sender, it may be matched there (there is no generation in the id).
//! Such a message that arrives *before* the receiver frees the communicator keeps the
//! id taken on the receiver for good instead (tested).
//!
//! A pending nonblocking collective keeps its communicator alive (`CollRequest` holds
//! its state) until it completes, so the id is not released between two rounds of its
//! schedule; a pending receive keeps it through the matching check above.
//!
//! A drop queues the release and performs it at once when the engine's lock is free;
//! when it is held (by another thread, or by this one) the queued release is performed
//! by the next drop that finds the lock free or by the next creation, before the mask
//! is read.
//!
//! # Ownership
//! The allocator ([`ContextIds`]) is per runtime, not per process: the engine of each
//! `crate::runtime::Inner` holds one (`Engine::ctx_ids`), behind the engine's lock, and
//! `crate::runtime::reap_contexts` / `crate::runtime::Releaser` are the runtime's side
//! of a release. This file is plain data (no engine, no communicator) so that every
//! layer may name its constants ([`COLL_CTX_BIT`]).

use std::sync::{Arc, Mutex};

/// Context id of the world communicator's point-to-point traffic.
pub(crate) const WORLD_CTX: u32 = 0;
/// Bit set in a context id for a communicator's internal collective traffic, so that
/// user point-to-point messages never match it.
pub(crate) const COLL_CTX_BIT: u32 = 1 << 31;

/// Most communicators alive at once in one process, the world included (as MPICH's
/// default of 2048). The agreement allreduces `MAX_CONTEXTS / 8` bytes.
pub(crate) const MAX_CONTEXTS: usize = 2048;
/// Words of the free-id mask.
pub(crate) const MASK_WORDS: usize = MAX_CONTEXTS / 64;

/// A communicator whose last handle dropped, to be released by the engine.
#[derive(Debug)]
pub(crate) struct Freed {
    ctx: u32,
    group: Arc<[u32]>,
}

impl Freed {
    /// The release of `ctx`, a communicator of `group` (world ranks).
    pub(crate) fn new(ctx: u32, group: Arc<[u32]>) -> Freed {
        Freed { ctx, group }
    }
}

/// Releases queued by drops, shared by the allocator and every communicator's state.
pub(crate) type FreedQueue = Arc<Mutex<Vec<Freed>>>;

/// This process's context ids (one per engine).
#[derive(Debug)]
pub(crate) struct ContextIds {
    /// Bit `i` of word `i / 64` set: id `i` is free here.
    free: [u64; MASK_WORDS],
    /// Dropped communicators not released yet.
    queued: FreedQueue,
    /// Dropped communicators whose matching state was not empty at the last attempt.
    held: Vec<Freed>,
    /// Ids taken (the world included).
    taken: usize,
}

impl Default for ContextIds {
    fn default() -> Self {
        Self::new()
    }
}

impl ContextIds {
    /// Every id free but the world's.
    pub(crate) fn new() -> ContextIds {
        let mut free = [u64::MAX; MASK_WORDS];
        free[0] &= !1;
        ContextIds {
            free,
            queued: Arc::default(),
            held: Vec::new(),
            taken: 1,
        }
    }

    /// The free-id mask to contribute to an agreement.
    pub(crate) fn mask(&self) -> [u64; MASK_WORDS] {
        self.free
    }

    /// The lowest id free in an agreed (AND-reduced) mask, or `None` if none is.
    pub(crate) fn lowest(mask: &[u64]) -> Option<u32> {
        let (w, word) = mask.iter().enumerate().find(|(_, w)| **w != 0)?;
        Some(w as u32 * 64 + word.trailing_zeros())
    }

    /// Mark `id` taken if it is free here; whether it was (another agreement of this
    /// process may have taken it since this one offered its mask).
    pub(crate) fn try_claim(&mut self, id: u32) -> bool {
        let (w, b) = (id as usize / 64, id % 64);
        if self.free[w] & (1 << b) == 0 {
            return false;
        }
        self.free[w] &= !(1 << b);
        self.taken += 1;
        true
    }

    /// [`ContextIds::try_claim`] of an id known to be free (tests).
    #[cfg(test)]
    pub(crate) fn claim(&mut self, id: u32) {
        assert!(self.try_claim(id), "context id {id} claimed twice");
    }

    /// Give back an id taken by [`ContextIds::try_claim`] whose agreement failed on
    /// another rank, or that no communicator of this rank uses (a split's
    /// `MPI_UNDEFINED`, a non-member of a create).
    pub(crate) fn unclaim(&mut self, id: u32) {
        self.release(id);
    }

    /// Mark `id` free again.
    fn release(&mut self, id: u32) {
        let (w, b) = (id as usize / 64, id % 64);
        if id != 0 && self.free[w] & (1 << b) == 0 {
            self.free[w] |= 1 << b;
            self.taken -= 1;
        }
    }

    /// Ids taken now, the world's included.
    pub(crate) fn taken(&self) -> usize {
        self.taken
    }

    /// The queue a communicator's state pushes itself onto when dropped.
    pub(crate) fn queue(&self) -> FreedQueue {
        self.queued.clone()
    }

    /// Release what was dropped: each id whose matching state `release` accepts to
    /// free (see `Protocol::release_ctx`) becomes free, the others are kept for the
    /// next call.
    pub(crate) fn reap(&mut self, mut release: impl FnMut(u32, &[u32]) -> bool) {
        let queued = std::mem::take(&mut *self.queued.lock().unwrap_or_else(|p| p.into_inner()));
        if queued.is_empty() && self.held.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut self.held);
        pending.extend(queued);
        for f in pending {
            if release(f.ctx, &f.group) {
                self.release(f.ctx);
            } else {
                self.held.push(f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(r: &[u32]) -> Arc<[u32]> {
        r.into()
    }

    #[test]
    fn world_is_taken_and_lowest_free_comes_first() {
        let ids = ContextIds::new();
        assert_eq!(ids.taken(), 1);
        assert_eq!(ContextIds::lowest(&ids.mask()), Some(1));
    }

    #[test]
    fn agreement_takes_the_lowest_id_free_on_every_rank() {
        // Rank a has 1 and 2 taken, rank b has 3 taken: the AND leaves 4 as lowest.
        let (mut a, mut b) = (ContextIds::new(), ContextIds::new());
        a.claim(1);
        a.claim(2);
        b.claim(3);
        let and: Vec<u64> = a.mask().iter().zip(b.mask()).map(|(x, y)| x & y).collect();
        assert_eq!(ContextIds::lowest(&and), Some(4));
        // Past the first word.
        let mut c = ContextIds::new();
        for id in 1..70 {
            c.claim(id);
        }
        assert_eq!(ContextIds::lowest(&c.mask()), Some(70));
        assert_eq!(c.taken(), 70);
    }

    #[test]
    fn exhausted_mask_has_no_lowest() {
        let mut ids = ContextIds::new();
        for id in 1..MAX_CONTEXTS as u32 {
            ids.claim(id);
        }
        assert_eq!(ContextIds::lowest(&ids.mask()), None);
        assert_eq!(ids.taken(), MAX_CONTEXTS);
    }

    #[test]
    fn freed_ids_are_reused_only_when_matching_lets_go() {
        let mut ids = ContextIds::new();
        ids.claim(1);
        ids.claim(2);
        let q = ids.queue();
        q.lock().unwrap().push(Freed {
            ctx: 1,
            group: group(&[0, 1]),
        });
        q.lock().unwrap().push(Freed {
            ctx: 2,
            group: group(&[0, 1]),
        });
        // Id 2 still has a message waiting: it stays taken, 1 is free again.
        ids.reap(|ctx, _| ctx != 2);
        assert_eq!(ContextIds::lowest(&ids.mask()), Some(1));
        assert_eq!(ids.taken(), 2);
        assert_eq!(ids.held.len(), 1);
        ids.claim(1);
        assert_eq!(ContextIds::lowest(&ids.mask()), Some(3));
        // Later its matching state is empty: released on the next reap.
        let mut seen = Vec::new();
        ids.reap(|ctx, g| {
            seen.push((ctx, g.to_vec()));
            true
        });
        assert_eq!(seen, vec![(2, vec![0, 1])]);
        assert_eq!(ContextIds::lowest(&ids.mask()), Some(2));
        assert!(ids.held.is_empty());
        // Nothing queued: the closure is not called.
        ids.reap(|_, _| panic!("nothing to release"));
    }

    #[test]
    fn releasing_the_world_or_a_free_id_changes_nothing() {
        let mut ids = ContextIds::new();
        ids.release(0);
        ids.release(5);
        assert_eq!(ids.taken(), 1);
        assert_eq!(ContextIds::lowest(&ids.mask()), Some(1));
    }
}
