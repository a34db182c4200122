//! All-to-all (MPI 4.1 §6.8): pairwise exchange and linear, with per-pair counts (the
//! `v` form).

use bytemuck::Pod;

use crate::coll::check::{Pairs, Spec};
use crate::coll::sched::{Buf, Builder, Slice, UserBufs};
use crate::coll::select::{Algo, AlltoallAlgo};
use crate::coll::{CollKind, CollRequest, args};
use crate::comm::Communicator;
use crate::error::{Error, Result};

impl Communicator {
    /// Send block `j` of `send` to rank `j`, which stores it as block `i` (the sender's
    /// rank) of its `recv` (MPI_Alltoall, MPI 4.1 §6.8).
    ///
    /// Shape: `send.len() == recv.len() == size() * k`, `k` elements per block, equal
    /// on every rank. Algorithm ([`AlltoallAlgo`], `RANKWIRE_ALLTOALL_ALGO`): linear
    /// for small blocks, pairwise exchange for large ones; on 2 ranks, blocks up to
    /// 8 KiB are one exchange without a schedule (`coll/direct.rs`, the same
    /// messages) unless `RANKWIRE_COLL_CHECK` is set.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] if the lengths differ or are not a multiple of the size;
    /// [`crate::Error::Collective`] if ranks pass different counts;
    /// [`crate::Error::Connection`] if a peer died.
    pub fn alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        // Small blocks without a schedule (`direct.rs`), the same messages.
        if let Some(r) = self.alltoall_direct(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            std::mem::size_of::<T>(),
        ) {
            return r;
        }
        self.ialltoall(send, recv)?.wait()
    }

    /// Nonblocking alltoall (MPI_Ialltoall, MPI 4.1 §6.12.6).
    ///
    /// # Errors
    /// As [`Communicator::alltoall`], for the arguments.
    pub fn ialltoall<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<CollRequest<'a>> {
        let (p, es) = (self.size(), std::mem::size_of::<T>());
        let k = send.len() / p;
        let algo = self.st.cfg.alltoall(p, k * es)?;
        let mut spec = Spec::uniform(CollKind::Alltoall, None, k, es);
        spec.algo = algo.code();
        spec.invalid = args::first([
            (!send.len().is_multiple_of(p)).then(|| {
                Error::usage(format!(
                    "alltoall: the send buffer holds {} elements, not a multiple of the {p} ranks; \
                     fix: send the same number of elements to every rank",
                    send.len()
                ))
            }),
            args::len("alltoall", "the receive buffer", recv.len(), send.len()),
        ]);
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            None,
        );
        self.start_coll(spec, user, |b| {
            if k > 0 && es > 0 {
                build(
                    b,
                    algo,
                    |i| Slice::elems(Buf::Send, es, i * k, k),
                    |i| Slice::elems(Buf::Recv, es, i * k, k),
                )
            }
        })
    }

    /// Send `scounts[j]` elements at `sdispls[j]` of `send` to rank `j`, and receive
    /// `rcounts[i]` elements from rank `i` at `rdispls[i]` of `recv` (MPI_Alltoallv,
    /// MPI 4.1 §6.8).
    ///
    /// Shape: all four slices have `size()` entries; blocks lie inside their buffers;
    /// `scounts[j]` on rank `i` must equal `rcounts[i]` on rank `j`. Algorithm as
    /// [`Communicator::alltoall`].
    ///
    /// # Errors
    /// [`crate::Error::Usage`] for a bad layout; [`crate::Error::Collective`] if a pair
    /// of ranks disagrees on a count; [`crate::Error::Connection`] if a peer died.
    pub fn alltoallv<T: Pod>(
        &self,
        send: &[T],
        scounts: &[usize],
        sdispls: &[usize],
        recv: &mut [T],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<()> {
        self.ialltoallv(send, scounts, sdispls, recv, rcounts, rdispls)?
            .wait()
    }

    /// Nonblocking alltoallv (MPI_Ialltoallv, MPI 4.1 §6.12.6).
    ///
    /// # Errors
    /// As [`Communicator::alltoallv`], for the arguments.
    pub fn ialltoallv<'a, T: Pod>(
        &self,
        send: &'a [T],
        scounts: &[usize],
        sdispls: &[usize],
        recv: &'a mut [T],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<CollRequest<'a>> {
        let (p, me, es) = (self.size(), self.rank(), std::mem::size_of::<T>());
        // Each rank picks by its own average block, so ranks may pick differently; the
        // two algorithms exchange the same messages (one per ordered pair of ranks, the
        // same tag), so they meet either way, and the collective check does not compare
        // the choice (`spec.algo` stays 0).
        let avg = scounts.iter().sum::<usize>() / p;
        let algo = self.st.cfg.alltoall(p, avg * es)?;
        let mut spec = Spec::own(CollKind::Alltoallv, None, 0, es);
        spec.invalid = args::first([
            args::layout("alltoallv (send side)", scounts, sdispls, p, send.len()),
            args::layout("alltoallv (receive side)", rcounts, rdispls, p, recv.len()),
            (scounts.len() == p && rcounts.len() == p)
                .then(|| {
                    args::len(
                        "alltoallv",
                        "the block to this rank itself (rcounts[rank] vs scounts[rank])",
                        rcounts[me],
                        scounts[me],
                    )
                })
                .flatten(),
        ]);
        let others = || (0..p).filter(move |&j| j != me);
        spec.pairs = Some(Pairs {
            send: others()
                .map(|j| (j, scounts.get(j).copied().unwrap_or(0) as u64))
                .collect(),
            expect: others()
                .map(|j| (j, rcounts.get(j).copied().unwrap_or(0) as u64))
                .collect(),
        });
        let s: Vec<(usize, usize)> = sdispls
            .iter()
            .copied()
            .zip(scounts.iter().copied())
            .collect();
        let r: Vec<(usize, usize)> = rdispls
            .iter()
            .copied()
            .zip(rcounts.iter().copied())
            .collect();
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            None,
        );
        self.start_coll(spec, user, |b| {
            build(
                b,
                algo,
                |i| Slice::elems(Buf::Send, es, s[i].0, s[i].1),
                |i| Slice::elems(Buf::Recv, es, r[i].0, r[i].1),
            )
        })
    }
}

/// All-to-all over per-peer send blocks `sblk(j)` and receive blocks `rblk(i)`.
pub(crate) fn build(
    b: &mut Builder,
    algo: AlltoallAlgo,
    sblk: impl Fn(usize) -> Slice,
    rblk: impl Fn(usize) -> Slice,
) {
    let (me, p) = (b.rank, b.size);
    b.copy(sblk(me), rblk(me));
    match algo {
        AlltoallAlgo::Pairwise => {
            for i in 1..p {
                let (src, dst) = if p.is_power_of_two() {
                    (me ^ i, me ^ i)
                } else {
                    ((me + p - i) % p, (me + i) % p)
                };
                b.round();
                b.recv(src, rblk(src));
                b.send(dst, sblk(dst));
            }
        }
        AlltoallAlgo::Linear => {
            b.round();
            for i in 1..p {
                let src = (me + p - i) % p;
                b.recv(src, rblk(src));
            }
            for i in 1..p {
                let dst = (me + i) % p;
                b.send(dst, sblk(dst));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::testing;

    #[test]
    fn every_algorithm_every_size() {
        for algo in [AlltoallAlgo::Pairwise, AlltoallAlgo::Linear] {
            for p in 1..=9 {
                for k in [1usize, 2, 17] {
                    let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, p * k)).collect();
                    let mut recvs = vec![vec![0i64; p * k]; p];
                    testing::run(&sends, &mut recvs, None, |b| {
                        build(
                            b,
                            algo,
                            |i| Slice::elems(Buf::Send, 8, i * k, k),
                            |i| Slice::elems(Buf::Recv, 8, i * k, k),
                        )
                    });
                    for (j, v) in recvs.iter().enumerate() {
                        for i in 0..p {
                            assert_eq!(
                                &v[i * k..(i + 1) * k],
                                &sends[i][j * k..(j + 1) * k],
                                "{algo} p={p}"
                            );
                        }
                    }
                }
            }
        }
    }
}
