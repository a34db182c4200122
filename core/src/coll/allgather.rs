//! Allgather (MPI 4.1 §6.7): ring, Bruck, recursive doubling; allgatherv by ring.

use bytemuck::Pod;

use crate::coll::check::Spec;
use crate::coll::sched::{Buf, Builder, Slice, UserBufs};
use crate::coll::select::{Algo, AllgatherAlgo};
use crate::coll::{CollKind, CollRequest, args};
use crate::comm::Communicator;
use crate::error::Result;

impl Communicator {
    /// Gather every rank's `send` into every rank's `recv`, in rank order
    /// (MPI_Allgather, MPI 4.1 §6.7).
    ///
    /// Shape: `send.len()` elements, equal on every rank;
    /// `recv.len() == size() * send.len()`, block `i` from rank `i`. Algorithm
    /// ([`AllgatherAlgo`], `RANKWIRE_ALLGATHER_ALGO`): recursive doubling (power-of-two
    /// sizes) or Bruck for small blocks, ring for large ones.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] for a wrong receive length; [`crate::Error::Collective`]
    /// if ranks pass different counts; [`crate::Error::Connection`] if a peer died.
    pub fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.iallgather(send, recv)?.wait()
    }

    /// Nonblocking allgather (MPI_Iallgather, MPI 4.1 §6.12.5).
    ///
    /// # Errors
    /// As [`Communicator::allgather`], for the arguments.
    pub fn iallgather<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>> {
        let (p, es, k) = (self.size(), std::mem::size_of::<T>(), send.len());
        let algo = self.st.cfg.allgather(p, k * es)?;
        let mut spec = Spec::uniform(CollKind::Allgather, None, k, es);
        spec.algo = algo.code();
        spec.invalid = args::len("allgather", "the receive buffer", recv.len(), p * k);
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            None,
        );
        self.start_coll(spec, user, |b| build(b, algo, k, es))
    }

    /// In-place allgather (MPI_Allgather with `MPI_IN_PLACE` as the send buffer, MPI 4.1
    /// §6.7): rank `i`'s block is taken from its place in `recv`, elements
    /// `[i·k, (i+1)·k)` with `k = recv.len() / size()`, and afterwards every block holds
    /// its rank's contribution.
    ///
    /// Shape: `recv.len()` elements, equal on every rank and a multiple of `size()`.
    /// Algorithm as [`Communicator::allgather`] with `k`-element blocks (the ring and
    /// recursive doubling skip the copy of the own block; Bruck still rotates through
    /// a temporary on ranks other than 0).
    ///
    /// # Errors
    /// [`crate::Error::Usage`] if `recv.len()` is not a multiple of `size()`;
    /// [`crate::Error::Collective`] if ranks pass different counts;
    /// [`crate::Error::Connection`] if a peer died.
    pub fn allgather_in_place<T: Pod>(&self, recv: &mut [T]) -> Result<()> {
        self.iallgather_in_place(recv)?.wait()
    }

    /// Nonblocking in-place allgather (MPI_Iallgather with `MPI_IN_PLACE`, MPI 4.1
    /// §6.12.5).
    ///
    /// # Errors
    /// As [`Communicator::allgather_in_place`], for the arguments.
    pub fn iallgather_in_place<'a, T: Pod>(&self, recv: &'a mut [T]) -> Result<CollRequest<'a>> {
        let (p, es) = (self.size(), std::mem::size_of::<T>());
        let k = recv.len() / p;
        let algo = self.st.cfg.allgather(p, k * es)?;
        let mut spec = Spec::uniform(CollKind::Allgather, None, k, es);
        spec.algo = algo.code();
        spec.invalid = args::multiple("allgather_in_place", "the buffer", recv.len(), p);
        let user = UserBufs::new(&[], bytemuck::cast_slice_mut(recv), None);
        self.start_coll(spec, user, |b| build_from(b, algo, k, es, true))
    }

    /// Gather every rank's `send` (its own length) into every rank's `recv`, rank `i`'s
    /// block at `displs[i]` with `counts[i]` elements (MPI_Allgatherv, MPI 4.1 §6.7).
    ///
    /// Shape: on every rank `counts`/`displs` have `size()` entries, are equal, blocks
    /// lie inside `recv`, and `counts[rank] == send.len()`. Algorithm: ring.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] for a bad layout; [`crate::Error::Collective`] if ranks
    /// hold different counts; [`crate::Error::Connection`] if a peer died.
    pub fn allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        self.iallgatherv(send, recv, counts, displs)?.wait()
    }

    /// Nonblocking allgatherv (MPI_Iallgatherv, MPI 4.1 §6.12.5).
    ///
    /// # Errors
    /// As [`Communicator::allgatherv`], for the arguments.
    pub fn iallgatherv<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<CollRequest<'a>> {
        let (p, me, es, k) = (
            self.size(),
            self.rank(),
            std::mem::size_of::<T>(),
            send.len(),
        );
        let mut spec = Spec::own(CollKind::Allgatherv, None, k, es);
        spec.shared_counts = Some(counts.iter().map(|&c| c as u64).collect());
        spec.own_in_shared = true;
        spec.invalid = args::first([
            args::layout("allgatherv", counts, displs, p, recv.len()),
            counts
                .get(me)
                .and_then(|&c| args::len("allgatherv", "the send buffer (counts[rank])", k, c)),
        ]);
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            None,
        );
        self.start_coll(spec, user, |b| {
            let blocks: Vec<Slice> = (0..p)
                .map(|i| Slice::elems(Buf::Recv, es, displs[i], counts[i]))
                .collect();
            b.copy(Slice::elems(Buf::Send, es, 0, k), blocks[me]);
            ring(b, &blocks);
        })
    }
}

/// Allgather of `k` elements per rank.
pub(crate) fn build(b: &mut Builder, algo: AllgatherAlgo, k: usize, es: usize) {
    build_from(b, algo, k, es, false);
}

/// Allgather of `k` elements per rank; `in_place`: the own block is already at its
/// place in the receive buffer (not in the send buffer). Every algorithm reads the own
/// block once, in its first local step, before anything is received; in place that
/// step is a copy of the block onto itself, skipped ([`Builder::copy`]), except for
/// Bruck's copy into its work buffer on ranks other than 0.
pub(crate) fn build_from(
    b: &mut Builder,
    algo: AllgatherAlgo,
    k: usize,
    es: usize,
    in_place: bool,
) {
    let (me, p) = (b.rank, b.size);
    if k == 0 || es == 0 {
        return;
    }
    let blk = |i: usize| Slice::elems(Buf::Recv, es, i * k, k);
    let own = if in_place {
        blk(me)
    } else {
        Slice::elems(Buf::Send, es, 0, k)
    };
    match algo {
        AllgatherAlgo::Ring => {
            b.copy(own, blk(me));
            let blocks: Vec<Slice> = (0..p).map(blk).collect();
            ring(b, &blocks);
        }
        AllgatherAlgo::RecursiveDoubling if p.is_power_of_two() => {
            b.copy(own, blk(me));
            let mut mask = 1;
            while mask < p {
                let partner = me ^ mask;
                let (mine, theirs) = (me & !(mask - 1), partner & !(mask - 1));
                b.round();
                b.recv(partner, Slice::elems(Buf::Recv, es, theirs * k, mask * k));
                b.send(partner, Slice::elems(Buf::Recv, es, mine * k, mask * k));
                mask <<= 1;
            }
        }
        AllgatherAlgo::Bruck | AllgatherAlgo::RecursiveDoubling => bruck(b, k, es, own),
    }
}

/// Ring over the blocks (one per rank, any sizes): in step `s` send block `rank − s`
/// to the right, receive block `rank − s − 1` from the left. p−1 steps.
fn ring(b: &mut Builder, blocks: &[Slice]) {
    let (me, p) = (b.rank, b.size);
    let (left, right) = ((me + p - 1) % p, (me + 1) % p);
    for s in 0..p.saturating_sub(1) {
        b.round();
        b.recv(left, blocks[(me + 2 * p - s - 1) % p]);
        b.send(right, blocks[(me + p - s) % p]);
    }
}

/// Bruck: a work buffer holds the blocks of ranks `rank, rank+1, …` (mod p); step
/// `2^j` sends the first `min(2^j, p − 2^j)` blocks to `rank − 2^j` and appends as
/// many from `rank + 2^j`. ⌈lg p⌉ steps, then one rotation into place (none on rank 0).
/// `own` is this rank's block (in the send buffer, or in place in the receive buffer).
fn bruck(b: &mut Builder, k: usize, es: usize, own: Slice) {
    let (me, p) = (b.rank, b.size);
    let work = if me == 0 {
        Buf::Recv
    } else {
        b.tmp(p * k * es)
    };
    b.copy(own, Slice::elems(work, es, 0, k));
    let mut dist = 1;
    while dist < p {
        let n = dist.min(p - dist);
        b.round();
        b.recv((me + dist) % p, Slice::elems(work, es, dist * k, n * k));
        b.send((me + p - dist) % p, Slice::elems(work, es, 0, n * k));
        dist *= 2;
    }
    if me != 0 {
        let tail = p - me;
        b.copy(
            Slice::elems(work, es, 0, tail * k),
            Slice::elems(Buf::Recv, es, me * k, tail * k),
        );
        b.copy(
            Slice::elems(work, es, tail * k, me * k),
            Slice::elems(Buf::Recv, es, 0, me * k),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::testing;

    #[test]
    fn every_algorithm_every_size() {
        for algo in [
            AllgatherAlgo::Ring,
            AllgatherAlgo::Bruck,
            AllgatherAlgo::RecursiveDoubling,
        ] {
            for p in 1..=9 {
                for k in [0usize, 1, 3, 40] {
                    let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, k)).collect();
                    let mut recvs = vec![vec![0i64; p * k]; p];
                    testing::run(&sends, &mut recvs, None, |b| build(b, algo, k, 8));
                    for v in &recvs {
                        assert_eq!(v, &sends.concat(), "{algo} p={p} k={k}");
                    }
                }
            }
        }
    }

    #[test]
    fn ring_with_uneven_blocks() {
        for p in 1..=7 {
            let counts: Vec<usize> = (0..p).map(|r| (r * 3) % 4).collect();
            let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, counts[r])).collect();
            let total: usize = counts.iter().sum();
            let mut recvs = vec![vec![0i64; total + 2]; p];
            // Blocks stored in reverse rank order with a gap of 2 at the start.
            let mut displs = vec![0; p];
            let mut at = 2;
            for r in (0..p).rev() {
                displs[r] = at;
                at += counts[r];
            }
            testing::run(&sends, &mut recvs, None, |b| {
                let blocks: Vec<Slice> = (0..p)
                    .map(|i| Slice::elems(Buf::Recv, 8, displs[i], counts[i]))
                    .collect();
                b.copy(
                    Slice::elems(Buf::Send, 8, 0, counts[b.rank]),
                    blocks[b.rank],
                );
                ring(b, &blocks);
            });
            for v in &recvs {
                for r in 0..p {
                    assert_eq!(&v[displs[r]..displs[r] + counts[r]], &sends[r][..], "p={p}");
                }
            }
        }
    }

    #[test]
    fn in_place_every_algorithm_every_size() {
        for algo in [
            AllgatherAlgo::Ring,
            AllgatherAlgo::Bruck,
            AllgatherAlgo::RecursiveDoubling,
        ] {
            for p in 1..=9 {
                for k in [0usize, 1, 3, 40] {
                    let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, k)).collect();
                    // Own block in place, the rest garbage that must be overwritten.
                    let mut bufs: Vec<Vec<i64>> = (0..p)
                        .map(|r| {
                            let mut v = vec![-7777i64; p * k];
                            v[r * k..(r + 1) * k].copy_from_slice(&sends[r]);
                            v
                        })
                        .collect();
                    testing::run_in_place(&mut bufs, None, |b| build_from(b, algo, k, 8, true));
                    for (r, v) in bufs.iter().enumerate() {
                        assert_eq!(v, &sends.concat(), "{algo} p={p} k={k} rank {r}");
                    }
                }
            }
        }
    }
}
