//! Groups, context ids and communicator creation (MPI 4.1 chapter 7).
//!
//! A [`Group`] is an ordered set of processes, named by their world ranks; it is a
//! local object (no communication). A communicator is a group plus a *context id*:
//! every message carries the context id of the communicator it was sent on, and a
//! receive only matches messages of its own context, so traffic on one communicator
//! never matches receives on another, even with the same ranks and tags.
//!
//! # Context ids
//! Each communicator has two contexts: `ctx` for user point-to-point messages and
//! `ctx | 2^31` for its collectives' internal traffic. The world communicator has
//! `ctx = 0`. A new communicator's id must differ from the id of every live
//! communicator that shares a process with it (two disjoint communicators may share an
//! id: no message can pass between them). Creating communicators is collective over
//! the parent: its ranks agree on the lowest id free on all of them (an allreduce of
//! free-id masks, as MPICH's `MPIR_Get_contextid_sparse`); ids and their matching
//! state are released when a communicator's last handle drops and reused later. The
//! scheme, and why reuse cannot mis-match, is in `core/src/context_id.rs`. At most
//! 2048 communicators are alive at once in a process. Creating communicators from two
//! threads of one process at the same time is not supported (both could be given the
//! same id).

use std::fmt;
use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use crate::coll::ops::Op;
use crate::comm::Communicator;
use crate::comm_state::CommState;
use crate::context_id::{COLL_CTX_BIT, ContextIds, MASK_WORDS, MAX_CONTEXTS};
use crate::error::{Error, Result};
use crate::runtime::{Releaser, reap_contexts};

/// A communicator's context id (MPI 4.1 §7.1.2). Collectives of the communicator use
/// [`ContextId::collective`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContextId(u32);

impl ContextId {
    pub(crate) fn new(ctx: u32) -> ContextId {
        ContextId(ctx)
    }

    /// The id of point-to-point traffic.
    pub fn get(self) -> u32 {
        self.0
    }

    /// The id of the communicator's internal collective traffic.
    pub fn collective(self) -> u32 {
        self.0 | COLL_CTX_BIT
    }
}

impl fmt::Display for ContextId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How two groups relate (MPI_Group_compare, MPI 4.1 §7.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupRelation {
    /// Same members in the same order (MPI_IDENT).
    Identical,
    /// Same members, different order (MPI_SIMILAR).
    Similar,
    /// Different members (MPI_UNEQUAL).
    Unequal,
}

/// An ordered set of processes (MPI_Group, MPI 4.1 §7.3). Rank `i` of the group is
/// its `i`-th process. Operations are local; cheap to clone.
#[derive(Clone, PartialEq, Eq)]
pub struct Group {
    /// World rank of each group rank.
    world: Arc<[u32]>,
    /// World rank of the calling process.
    me: u32,
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("world_ranks", &&*self.world)
            .field("rank", &self.rank())
            .finish()
    }
}

impl Group {
    pub(crate) fn from_world_ranks(world: Arc<[u32]>, me: u32) -> Group {
        Group { world, me }
    }

    /// Number of processes (MPI_Group_size).
    pub fn size(&self) -> usize {
        self.world.len()
    }

    /// Rank of the calling process in the group, `None` if it is not a member
    /// (MPI_Group_rank returning MPI_UNDEFINED).
    pub fn rank(&self) -> Option<usize> {
        self.world.iter().position(|&w| w == self.me)
    }

    /// World rank of each group rank, in group order.
    pub fn world_ranks(&self) -> Vec<usize> {
        self.world.iter().map(|&w| w as usize).collect()
    }

    /// The group of ranks `ranks` of this group, in that order (MPI_Group_incl).
    ///
    /// # Errors
    /// [`Error::Usage`] if a rank is out of range or repeated.
    pub fn incl(&self, ranks: &[usize]) -> Result<Group> {
        self.check_distinct(ranks, "incl")?;
        Ok(self.with(ranks.iter().map(|&r| self.world[r]).collect()))
    }

    /// This group without ranks `ranks`, order kept (MPI_Group_excl).
    ///
    /// # Errors
    /// [`Error::Usage`] if a rank is out of range or repeated.
    pub fn excl(&self, ranks: &[usize]) -> Result<Group> {
        self.check_distinct(ranks, "excl")?;
        Ok(self.with(
            (0..self.size())
                .filter(|r| !ranks.contains(r))
                .map(|r| self.world[r])
                .collect(),
        ))
    }

    /// For each rank of this group in `ranks`, its rank in `other`, or `None` if that
    /// process is not in `other` (MPI_Group_translate_ranks).
    ///
    /// # Errors
    /// [`Error::Usage`] if a rank is out of range.
    pub fn translate_ranks(&self, ranks: &[usize], other: &Group) -> Result<Vec<Option<usize>>> {
        ranks
            .iter()
            .map(|&r| {
                let w = self.world.get(r).ok_or_else(|| {
                    Error::usage(format!(
                        "translate_ranks: rank {r} is out of range for a group of size {}",
                        self.size()
                    ))
                })?;
                Ok(other.world.iter().position(|x| x == w))
            })
            .collect()
    }

    /// This group's processes, then those of `other` not in it (MPI_Group_union).
    pub fn union(&self, other: &Group) -> Group {
        let mut v: Vec<u32> = self.world.to_vec();
        v.extend(other.world.iter().filter(|w| !self.world.contains(w)));
        self.with(v)
    }

    /// This group's processes that are also in `other`, in this group's order
    /// (MPI_Group_intersection).
    pub fn intersection(&self, other: &Group) -> Group {
        self.with(
            self.world
                .iter()
                .copied()
                .filter(|w| other.world.contains(w))
                .collect(),
        )
    }

    /// This group's processes that are not in `other` (MPI_Group_difference).
    pub fn difference(&self, other: &Group) -> Group {
        self.with(
            self.world
                .iter()
                .copied()
                .filter(|w| !other.world.contains(w))
                .collect(),
        )
    }

    /// How this group relates to `other` (MPI_Group_compare).
    pub fn compare(&self, other: &Group) -> GroupRelation {
        if self.world == other.world {
            GroupRelation::Identical
        } else if self.size() == other.size() && self.world.iter().all(|w| other.world.contains(w))
        {
            GroupRelation::Similar
        } else {
            GroupRelation::Unequal
        }
    }

    fn with(&self, world: Vec<u32>) -> Group {
        Group {
            world: world.into(),
            me: self.me,
        }
    }

    fn check_distinct(&self, ranks: &[usize], what: &str) -> Result<()> {
        let mut seen = vec![false; self.size()];
        for &r in ranks {
            match seen.get_mut(r) {
                None => {
                    return Err(Error::usage(format!(
                        "{what}: rank {r} is out of range for a group of size {}",
                        self.size()
                    )));
                }
                Some(true) => {
                    return Err(Error::usage(format!("{what}: rank {r} is listed twice")));
                }
                Some(s) => *s = true,
            }
        }
        Ok(())
    }
}

/// What `split` exchanges per rank.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct SplitEntry {
    /// Color + 1, or 0 for "no communicator" (MPI_UNDEFINED).
    color: u64,
    key: i64,
}

impl Communicator {
    /// The ranks of this communicator (MPI_Comm_group, MPI 4.1 §7.3.2).
    pub fn group(&self) -> Group {
        Group::from_world_ranks(self.st.group.clone(), self.inner.rank)
    }

    /// Context id of this communicator's point-to-point traffic (unique among the live
    /// communicators any of its ranks belongs to; reused after a communicator is freed,
    /// see [`crate::group`]).
    pub fn context_id(&self) -> ContextId {
        ContextId::new(self.st.ctx)
    }

    /// For leak tests: (context ids taken in this process, the world's included;
    /// (peer, context) pairs with sequence state, sending and receiving), after
    /// releasing what was dropped. Not a stable API.
    #[doc(hidden)]
    pub fn context_stats(&self) -> (usize, usize) {
        let mut e = self.inner.lock();
        reap_contexts(&mut e);
        (e.ctx_ids.taken(), e.proto.seq_pairs())
    }

    /// A new communicator with the same group and a new context (MPI_Comm_dup,
    /// MPI 4.1 §7.4.2). Collective over this communicator.
    ///
    /// # Errors
    /// [`Error::Connection`] if a peer died; [`Error::Usage`] if context ids ran out.
    pub fn dup(&self) -> Result<Communicator> {
        let ctx = self.agree_ctx()?;
        self.derive(ctx, self.st.group.clone())
            .ok_or_else(|| Error::usage("dup: the calling rank is not in the group"))
    }

    /// Partition this communicator by `color` (MPI_Comm_split, MPI 4.1 §7.4.2): ranks
    /// with the same color form a new communicator, ordered by `key`, then by their
    /// rank here. `None` (MPI_UNDEFINED) joins no communicator and gets `Ok(None)`.
    /// Collective over this communicator.
    ///
    /// # Errors
    /// [`Error::Connection`] if a peer died; [`Error::Usage`] if context ids ran out.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        let mine = SplitEntry {
            color: color.map_or(0, |c| c as u64 + 1),
            key: key as i64,
        };
        let mut all = vec![SplitEntry::zeroed(); self.size()];
        self.allgather(std::slice::from_ref(&mine), &mut all)?;
        let ctx = self.agree_ctx()?;
        if mine.color == 0 {
            self.inner.lock().ctx_ids.unclaim(ctx);
            return Ok(None);
        }
        let mut members: Vec<(i64, usize)> = all
            .iter()
            .enumerate()
            .filter(|(_, e)| e.color == mine.color)
            .map(|(r, e)| (e.key, r))
            .collect();
        members.sort_unstable();
        let group: Arc<[u32]> = members.iter().map(|&(_, r)| self.st.group[r]).collect();
        Ok(self.derive(ctx, group))
    }

    /// The ranks of this communicator that share this rank's node (memory, kernel and
    /// network namespace), in rank order (MPI_Comm_split_type with
    /// MPI_COMM_TYPE_SHARED, MPI 4.1 §7.4.2). Collective over this communicator.
    ///
    /// Nodes are told apart by hostname, kernel boot id and network namespace.
    ///
    /// # Errors
    /// [`Error::Connection`] if a peer died; [`Error::Usage`] if context ids ran out.
    pub fn split_shared(&self) -> Result<Communicator> {
        self.split_shared_keyed(true, 0)?
            .ok_or_else(|| Error::usage("split_shared: no communicator for a member"))
    }

    /// [`Communicator::split_shared`] where ranks may opt out and the node
    /// communicator is ordered by `key`, then by rank here (MPI_Comm_split_type with
    /// `MPI_COMM_TYPE_SHARED` or `MPI_UNDEFINED`, MPI 4.1 §7.4.2). `member == false`
    /// (MPI_UNDEFINED) takes part in the collective and gets `Ok(None)`. Collective over
    /// this communicator: every rank calls it, members or not.
    ///
    /// # Errors
    /// As [`Communicator::split_shared`].
    pub fn split_shared_keyed(&self, member: bool, key: i32) -> Result<Option<Communicator>> {
        let node = crate::bootstrap::node::node_id().into_bytes();
        let mut lens = vec![0u64; self.size()];
        self.allgather(&[node.len() as u64], &mut lens)?;
        let counts: Vec<usize> = lens.iter().map(|&l| l as usize).collect();
        let displs: Vec<usize> = counts
            .iter()
            .scan(0, |acc, &c| {
                let d = *acc;
                *acc += c;
                Some(d)
            })
            .collect();
        let mut names = vec![0u8; counts.iter().sum()];
        self.allgatherv(&node, &mut names, &counts, &displs)?;
        let name = |r: usize| &names[displs[r]..displs[r] + counts[r]];
        let color = (0..self.size())
            .find(|&r| name(r) == node.as_slice())
            .unwrap_or(self.rank());
        self.split(member.then_some(color as u32), key)
    }

    /// A communicator of the ranks of `group` (MPI_Comm_create_group, MPI 4.1 §7.4.2),
    /// ordered as in `group`. Collective over the members of `group` only: ranks of this
    /// communicator outside it do not call it (a non-member that calls it gets
    /// `Ok(None)` at once). Concurrent calls by overlapping groups are told apart by
    /// `tag` (`0..=TAG_UB`), as MPI requires of the caller.
    ///
    /// The members agree on a context id as [`Communicator::dup`] does (bitwise AND of
    /// the free-id masks, `crate::context_id`), by a gather to the group's first member
    /// and a broadcast back, on this communicator's collective context with a negative
    /// tag derived from `tag` (collective schedules use non-negative tags there).
    ///
    /// # Errors
    /// [`Error::Usage`] if `group` has a process outside this communicator, `tag` is out
    /// of range or context ids ran out; [`Error::Connection`] if a peer died.
    pub fn create_group(&self, group: &Group, tag: i32) -> Result<Option<Communicator>> {
        if !(0..=crate::comm::TAG_UB).contains(&tag) {
            return Err(Error::usage(format!(
                "create_group: tag {tag} is outside 0..={}",
                crate::comm::TAG_UB
            )));
        }
        let mut members = Vec::with_capacity(group.world.len());
        for w in group.world.iter() {
            match self.st.group.iter().position(|x| x == w) {
                Some(r) => members.push(r),
                None => {
                    return Err(Error::usage(format!(
                        "create_group: world rank {w} of the group is not in this communicator"
                    )));
                }
            }
        }
        let Some(me) = members.iter().position(|&r| r == self.rank()) else {
            return Ok(None);
        };
        let itag = -2 - tag;
        let none = usize::MAX;
        let ctx = self.agree_rounds(|mine| {
            let mut mask = *mine;
            if me == 0 {
                for &r in &members[1..] {
                    let mut theirs = [0u64; MASK_WORDS];
                    self.exchange(
                        "create_group",
                        itag,
                        none,
                        &[],
                        r,
                        bytemuck::cast_slice_mut(&mut theirs),
                    )?;
                    for (m, t) in mask.iter_mut().zip(theirs) {
                        *m &= t;
                    }
                }
                for &r in &members[1..] {
                    self.exchange(
                        "create_group",
                        itag,
                        r,
                        bytemuck::cast_slice(&mask),
                        none,
                        &mut [],
                    )?;
                }
            } else {
                let lead = members[0];
                self.exchange(
                    "create_group",
                    itag,
                    lead,
                    bytemuck::cast_slice(mine),
                    none,
                    &mut [],
                )?;
                self.exchange(
                    "create_group",
                    itag,
                    none,
                    &[],
                    lead,
                    bytemuck::cast_slice_mut(&mut mask),
                )?;
            }
            Ok(mask)
        })?;
        Ok(self.derive(ctx, group.world.clone()))
    }

    /// A communicator of the ranks of `group` (MPI_Comm_create, MPI 4.1 §7.4.2).
    /// Collective over this communicator: every rank calls it, with the same group or
    /// (as MPI allows) with disjoint groups. Ranks not in their group get `Ok(None)`.
    ///
    /// # Errors
    /// [`Error::Usage`] if `group` has a process outside this communicator or context
    /// ids ran out; [`Error::Connection`] if a peer died.
    pub fn create(&self, group: &Group) -> Result<Option<Communicator>> {
        let outside = group.world.iter().find(|w| !self.st.group.contains(w));
        let ctx = self.agree_ctx()?;
        if let Some(w) = outside {
            self.inner.lock().ctx_ids.unclaim(ctx);
            return Err(Error::usage(format!(
                "create: world rank {w} of the group is not in this communicator"
            )));
        }
        Ok(self.derive(ctx, group.world.clone()))
    }

    /// Agree on a context id free on every rank of this communicator (see
    /// `crate::context_id`) and claim it here: rounds of an allreduce (bitwise AND) of
    /// the free-id masks, then of whether every rank could claim the lowest common id
    /// ([`Communicator::agree_rounds`]).
    fn agree_ctx(&self) -> Result<u32> {
        self.agree_rounds(|mine| {
            let mut all = [0u64; MASK_WORDS];
            self.allreduce(mine, &mut all, Op::BitAnd)?;
            Ok(all)
        })
    }

    /// The rounds of a context-id agreement whose exchange (`and_of`: the bitwise AND
    /// of every participant's words, given this rank's) is collective over the
    /// participants. A round: AND of the free-id masks; each rank claims the lowest
    /// common id if it is still free here; AND of whether every rank could. Another
    /// agreement of this process (another thread creating a communicator from another
    /// parent) may have claimed that id since this one offered its mask: without the
    /// second exchange both would keep it (two communicators on one context: their
    /// messages mix; a trial hung). Then the ranks that claimed it give it back and all
    /// go round again, the later rounds after a short pause that grows with the
    /// rounds. Nothing is held while a round waits for its peers (a lock held across
    /// the exchange, as MPICH's mask in use, made a trial's legal program deadlock).
    /// Returns the id, claimed here.
    ///
    /// # Errors
    /// Those of the exchange; [`Error::Usage`] when no id is free on every rank.
    fn agree_rounds(
        &self,
        mut and_of: impl FnMut(&[u64; MASK_WORDS]) -> Result<[u64; MASK_WORDS]>,
    ) -> Result<u32> {
        let mut round = 0u32;
        loop {
            let (mine, revoked) = {
                let mut e = self.inner.lock();
                reap_contexts(&mut e);
                (e.ctx_ids.mask(), e.proto.revoked_count())
            };
            let all = and_of(&mine)?;
            let ctx = ContextIds::lowest(&all).ok_or_else(|| {
                Error::usage(format!(
                    "context ids exhausted: some process of this communicator has \
                     {MAX_CONTEXTS} communicators alive or held ({revoked} held here for \
                     good by communicators whose collectives were revoked after a \
                     mismatch); fix: drop communicators that are no longer used, and do \
                     not go on after collective mismatches"
                ))
            })?;
            let claimed = self.inner.lock().ctx_ids.try_claim(ctx);
            let mut ok = [0u64; MASK_WORDS];
            ok[0] = u64::from(claimed);
            if and_of(&ok)?[0] == 1 {
                return Ok(ctx);
            }
            if claimed {
                self.inner.lock().ctx_ids.unclaim(ctx);
            }
            round += 1;
            // Pauses differ per parent, so that two agreements that keep taking each
            // other's id on different ranks fall out of step.
            let us = (round.min(20) as u64) * (1 + self.context_id().get() as u64 % 7);
            std::thread::sleep(std::time::Duration::from_micros(us * 10));
        }
    }

    /// The communicator of `group` (world ranks) with the agreed id `ctx`, which the
    /// agreement claimed here; `None` (and `ctx` given back) if this rank is not in
    /// `group`.
    fn derive(&self, ctx: u32, group: Arc<[u32]>) -> Option<Communicator> {
        let Some(mut st) = CommState::new(ctx, group, self.inner.rank, self.inner.coll_config())
        else {
            // Not a member: the agreement's id is not used here.
            self.inner.lock().ctx_ids.unclaim(ctx);
            return None;
        };
        let queue = {
            let mut e = self.inner.lock();
            e.proto.ctx_live(ctx, st.group.clone());
            e.ctx_ids.queue()
        };
        let releaser = Releaser::new(&self.inner, queue);
        st.set_releaser(Box::new(move |ctx, group| releaser.free(ctx, group)));
        Some(Communicator {
            inner: self.inner.clone(),
            st: Arc::new(st),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(ranks: &[u32], me: u32) -> Group {
        Group::from_world_ranks(ranks.into(), me)
    }

    #[test]
    fn incl_excl_translate() {
        let world = g(&[0, 1, 2, 3, 4, 5], 3);
        assert_eq!(world.rank(), Some(3));
        let odd = world.incl(&[5, 3, 1]).unwrap();
        assert_eq!(odd.world_ranks(), vec![5, 3, 1]);
        assert_eq!(odd.rank(), Some(1));
        let even = world.excl(&[1, 3, 5]).unwrap();
        assert_eq!(even.world_ranks(), vec![0, 2, 4]);
        assert_eq!(even.rank(), None);
        assert_eq!(
            world.translate_ranks(&[0, 1, 5], &odd).unwrap(),
            vec![None, Some(2), Some(0)]
        );
        assert!(matches!(world.incl(&[6]), Err(Error::Usage(_))));
        assert!(matches!(world.excl(&[1, 1]), Err(Error::Usage(_))));
        assert!(world.translate_ranks(&[9], &odd).is_err());
        assert_eq!(world.incl(&[]).unwrap().size(), 0);
    }

    #[test]
    fn set_operations_keep_mpi_order() {
        let a = g(&[4, 1, 7], 1);
        let b = g(&[7, 2, 4, 9], 1);
        assert_eq!(a.union(&b).world_ranks(), vec![4, 1, 7, 2, 9]);
        assert_eq!(a.intersection(&b).world_ranks(), vec![4, 7]);
        assert_eq!(b.intersection(&a).world_ranks(), vec![7, 4]);
        assert_eq!(a.difference(&b).world_ranks(), vec![1]);
        assert_eq!(a.compare(&a.clone()), GroupRelation::Identical);
        assert_eq!(a.compare(&g(&[7, 4, 1], 1)), GroupRelation::Similar);
        assert_eq!(a.compare(&b), GroupRelation::Unequal);
    }

    #[test]
    fn context_id_parts() {
        let c = ContextId::new(5);
        assert_eq!(c.get(), 5);
        assert_eq!(c.collective(), 5 | (1 << 31));
    }
}
