//! Broadcast (MPI 4.1 §6.4): binomial tree, scatter + ring allgather, and linear.

use bytemuck::Pod;

use crate::coll::check::Spec;
use crate::coll::sched::{Buf, Builder, Slice, UserBufs};
use crate::coll::select::{Algo, BcastAlgo};
use crate::coll::{CollKind, CollRequest, args};
use crate::comm::Communicator;
use crate::error::Result;

impl Communicator {
    /// Broadcast `buf` from rank `root` to every rank (MPI_Bcast, MPI 4.1 §6.4).
    ///
    /// Shape: `buf.len()` elements, equal on every rank; on `root` it is read, elsewhere
    /// overwritten. Algorithm: binomial tree for small messages (up to 8 KiB run
    /// without a schedule, `coll/direct.rs`, unless `RANKWIRE_COLL_CHECK` is set),
    /// binomial scatter then ring allgather for large ones; where some node of the job
    /// runs more ranks than it has CPUs, up to 8 KiB on 3 to 16 ranks (64 with 2 ranks
    /// per CPU), linear from the root (see [`BcastAlgo`] and docs/design.md,
    /// "Communicators and collectives"); `RANKWIRE_BCAST_ALGO` overrides.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] if `root` is out of range; [`crate::Error::Collective`]
    /// if ranks pass different lengths or roots (detected by `RANKWIRE_COLL_CHECK`, or
    /// when a length reaches a receive); [`crate::Error::Connection`] if a peer died.
    pub fn bcast<T: Pod>(&self, buf: &mut [T], root: usize) -> Result<()> {
        // Small messages without a schedule (`direct.rs`), the same messages.
        if let Ok(algo) = self.st.cfg.bcast(self.size(), std::mem::size_of_val(buf))
            && let Some(r) = self.bcast_direct(algo, bytemuck::cast_slice_mut(buf), root)
        {
            return r;
        }
        self.ibcast(buf, root)?.wait()
    }

    /// Nonblocking broadcast (MPI_Ibcast, MPI 4.1 §6.12.2). `buf` stays borrowed until
    /// the request completes.
    ///
    /// # Errors
    /// As [`Communicator::bcast`], for the arguments; the outcome comes from the
    /// request.
    pub fn ibcast<'a, T: Pod>(&self, buf: &'a mut [T], root: usize) -> Result<CollRequest<'a>> {
        let (p, es, n) = (self.size(), std::mem::size_of::<T>(), buf.len());
        let algo = self.st.cfg.bcast(p, n * es)?;
        let mut spec = Spec::uniform(CollKind::Bcast, Some(root), n, es);
        spec.algo = algo.code();
        spec.invalid = args::root("bcast", root, p);
        let user = UserBufs::new(&[], bytemuck::cast_slice_mut(buf), None);
        self.start_coll(spec, user, |b| build(b, algo, Buf::Recv, n, es, root))
    }
}

/// Broadcast `count` elements of `es` bytes at the start of `buf` from `root`.
pub(crate) fn build(
    b: &mut Builder,
    algo: BcastAlgo,
    buf: Buf,
    count: usize,
    es: usize,
    root: usize,
) {
    if count == 0 || es == 0 || b.size == 1 {
        return;
    }
    match algo {
        BcastAlgo::Binomial => binomial(b, Slice::elems(buf, es, 0, count), root),
        BcastAlgo::ScatterAllgather => scatter_allgather(b, buf, count, es, root),
        BcastAlgo::Linear => linear(b, Slice::elems(buf, es, 0, count), root),
    }
}

/// Linear broadcast: the root sends `whole` to every other rank in relative-rank order,
/// in one round; every other rank receives it from the root. p − 1 messages, each rank
/// waiting on the root only.
pub(crate) fn linear(b: &mut Builder, whole: Slice, root: usize) {
    let (me, p) = (b.rank, b.size);
    b.round();
    if me == root {
        for k in 1..p {
            b.send((root + k) % p, whole);
        }
    } else {
        b.recv(root, whole);
    }
}

/// Binomial tree (MPICH `MPIR_Bcast_intra_binomial`): in relative ranks
/// `rel = rank − root`, a rank receives from `rel − lowbit(rel)` and sends to
/// `rel + 2^k` for every `2^k < lowbit(rel)`. ⌈lg p⌉ steps of the whole message.
pub(crate) fn binomial(b: &mut Builder, whole: Slice, root: usize) {
    let (me, p) = (b.rank, b.size);
    if p == 1 {
        return;
    }
    let rel = (me + p - root) % p;
    let mut mask = 1;
    while mask < p {
        if rel & mask != 0 {
            b.round();
            b.recv((me + p - mask) % p, whole);
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    b.round();
    while mask > 0 {
        if rel + mask < p {
            b.send((me + mask) % p, whole);
        }
        mask >>= 1;
    }
}

/// Binomial scatter of `p` blocks of ⌈count/p⌉ elements, then ring allgather of the
/// blocks (Thakur et al. 2005 §4.1, MPICH `MPIR_Bcast_intra_scatter_ring_allgather`).
/// Moves ≈ 2·(p−1)/p of the message per rank instead of lg p times it.
fn scatter_allgather(b: &mut Builder, buf: Buf, count: usize, es: usize, root: usize) {
    let (me, p) = (b.rank, b.size);
    let ss = count.div_ceil(p);
    // Elements of blocks [lo, hi) (blocks past the end are empty).
    let blocks = |lo: usize, hi: usize| {
        let a = (lo * ss).min(count);
        let z = (hi * ss).min(count);
        Slice::elems(buf, es, a, z - a)
    };
    let rel = (me + p - root) % p;
    let mut mask = 1;
    while mask < p {
        if rel & mask != 0 {
            b.round();
            b.recv((me + p - mask) % p, blocks(rel, (rel + mask).min(p)));
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    b.round();
    while mask > 0 {
        if rel + mask < p {
            let child = rel + mask;
            b.send((me + mask) % p, blocks(child, (child + mask).min(p)));
        }
        mask >>= 1;
    }
    let (left, right) = ((me + p - 1) % p, (me + 1) % p);
    for s in 0..p - 1 {
        b.round();
        let send_blk = (rel + p - s) % p;
        let recv_blk = (rel + 2 * p - s - 1) % p;
        b.recv(left, blocks(recv_blk, recv_blk + 1));
        b.send(right, blocks(send_blk, send_blk + 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::testing;

    #[test]
    fn every_algorithm_every_size_every_root() {
        for algo in [
            BcastAlgo::Binomial,
            BcastAlgo::ScatterAllgather,
            BcastAlgo::Linear,
        ] {
            for p in 1..=9 {
                for count in [0, 1, 2, 7, 9, 100] {
                    for root in 0..p {
                        let data = testing::values(root, count);
                        let sends = vec![Vec::<i64>::new(); p];
                        let mut recvs: Vec<Vec<i64>> = (0..p)
                            .map(|r| {
                                if r == root {
                                    data.clone()
                                } else {
                                    vec![0; count]
                                }
                            })
                            .collect();
                        testing::run(&sends, &mut recvs, None, |b| {
                            build(b, algo, Buf::Recv, count, 8, root)
                        });
                        for (r, v) in recvs.iter().enumerate() {
                            assert_eq!(v, &data, "{algo} p={p} count={count} root={root} rank {r}");
                        }
                    }
                }
            }
        }
    }
}
