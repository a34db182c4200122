//! Gather and scatter (MPI 4.1 §6.5, §6.6), with per-rank counts (the `v` forms).

use bytemuck::Pod;

use crate::coll::check::{Pairs, Spec};
use crate::coll::sched::{Buf, Builder, Slice, UserBufs};
use crate::coll::select::{Algo, GatherAlgo};
use crate::coll::{CollKind, CollRequest, args};
use crate::comm::Communicator;
use crate::error::Result;

impl Communicator {
    /// Gather every rank's `send` into `recv` on `root`, in rank order (MPI_Gather,
    /// MPI 4.1 §6.5).
    ///
    /// Shape: `send.len()` elements, equal on every rank; on `root`,
    /// `recv.len() == size() * send.len()` and block `i` receives rank `i`'s data;
    /// elsewhere `recv` is not used (pass `&mut []`). Algorithm ([`GatherAlgo`],
    /// `RANKWIRE_GATHER_ALGO`): linear or binomial tree.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] for a bad root or receive length on the root;
    /// [`crate::Error::Collective`] if ranks disagree on counts or root;
    /// [`crate::Error::Connection`] if a peer died.
    pub fn gather<T: Pod>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        self.igather(send, recv, root)?.wait()
    }

    /// Nonblocking gather (MPI_Igather, MPI 4.1 §6.12.3).
    ///
    /// # Errors
    /// As [`Communicator::gather`], for the arguments.
    pub fn igather<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
        root: usize,
    ) -> Result<CollRequest<'a>> {
        let (p, es, k) = (self.size(), std::mem::size_of::<T>(), send.len());
        let algo = self.st.cfg.gather(p, k * es, false)?;
        let mut spec = Spec::uniform(CollKind::Gather, Some(root), k, es);
        spec.algo = algo.code();
        spec.invalid = args::first([
            args::root("gather", root, p),
            (self.rank() == root)
                .then(|| args::len("gather", "the receive buffer", recv.len(), p * k))
                .flatten(),
        ]);
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            None,
        );
        self.start_coll(spec, user, |b| gather(b, algo, k, es, root))
    }

    /// Gather `send` (its own length on each rank) into `recv` on `root` at
    /// `displs[i]` (elements) for `counts[i]` elements from rank `i` (MPI_Gatherv,
    /// MPI 4.1 §6.5).
    ///
    /// Shape: on `root`, `counts` and `displs` have `size()` entries, blocks lie inside
    /// `recv`, and `counts[i]` equals rank `i`'s `send.len()`; elsewhere `recv`,
    /// `counts` and `displs` are not used. Algorithm: linear.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] for a bad root or layout on the root;
    /// [`crate::Error::Collective`] if a rank's `send.len()` differs from the root's
    /// `counts` entry (detected by `RANKWIRE_COLL_CHECK`, or when the data arrives);
    /// [`crate::Error::Connection`] if a peer died.
    pub fn gatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        self.igatherv(send, recv, counts, displs, root)?.wait()
    }

    /// Nonblocking gatherv (MPI_Igatherv, MPI 4.1 §6.12.3). `counts` and `displs` are
    /// read during the call.
    ///
    /// # Errors
    /// As [`Communicator::gatherv`], for the arguments.
    pub fn igatherv<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<CollRequest<'a>> {
        let (p, me, es, k) = (
            self.size(),
            self.rank(),
            std::mem::size_of::<T>(),
            send.len(),
        );
        let mut spec = Spec::own(CollKind::Gatherv, Some(root), k, es);
        spec.invalid = args::first([
            args::root("gatherv", root, p),
            (me == root)
                .then(|| args::layout("gatherv", counts, displs, p, recv.len()))
                .flatten(),
            (me == root && counts.len() == p)
                .then(|| {
                    args::len(
                        "gatherv",
                        "the root's own send buffer (counts[root])",
                        k,
                        counts[root],
                    )
                })
                .flatten(),
        ]);
        spec.pairs = (root < p).then(|| root_pairs(me, p, root, counts, k));
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            None,
        );
        self.start_coll(spec, user, |b| {
            if me == root {
                b.copy(
                    Slice::elems(Buf::Send, es, 0, k),
                    Slice::elems(Buf::Recv, es, displs[me], k),
                );
                for i in (0..p).filter(|&i| i != root) {
                    b.recv(i, Slice::elems(Buf::Recv, es, displs[i], counts[i]));
                }
            } else {
                b.send(root, Slice::elems(Buf::Send, es, 0, k));
            }
        })
    }

    /// Scatter block `i` of `send` on `root` to rank `i`'s `recv` (MPI_Scatter,
    /// MPI 4.1 §6.6).
    ///
    /// Shape: `recv.len()` elements, equal on every rank; on `root`,
    /// `send.len() == size() * recv.len()`; elsewhere `send` is not used (pass `&[]`).
    /// Algorithm ([`GatherAlgo`], `RANKWIRE_SCATTER_ALGO`): linear or binomial tree.
    ///
    /// # Errors
    /// As [`Communicator::gather`].
    pub fn scatter<T: Pod>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        self.iscatter(send, recv, root)?.wait()
    }

    /// Nonblocking scatter (MPI_Iscatter, MPI 4.1 §6.12.4).
    ///
    /// # Errors
    /// As [`Communicator::scatter`], for the arguments.
    pub fn iscatter<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
        root: usize,
    ) -> Result<CollRequest<'a>> {
        let (p, es, k) = (self.size(), std::mem::size_of::<T>(), recv.len());
        let algo = self.st.cfg.gather(p, k * es, true)?;
        let mut spec = Spec::uniform(CollKind::Scatter, Some(root), k, es);
        spec.algo = algo.code();
        spec.invalid = args::first([
            args::root("scatter", root, p),
            (self.rank() == root)
                .then(|| args::len("scatter", "the send buffer", send.len(), p * k))
                .flatten(),
        ]);
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            None,
        );
        self.start_coll(spec, user, |b| scatter(b, algo, k, es, root))
    }

    /// Scatter `counts[i]` elements at `displs[i]` of `send` on `root` to rank `i`'s
    /// `recv` (MPI_Scatterv, MPI 4.1 §6.6).
    ///
    /// Shape: rank `i` receives `recv.len()` elements, which must equal the root's
    /// `counts[i]`; `send`, `counts`, `displs` are used on the root only. Algorithm:
    /// linear.
    ///
    /// # Errors
    /// As [`Communicator::gatherv`].
    pub fn scatterv<T: Pod>(
        &self,
        send: &[T],
        counts: &[usize],
        displs: &[usize],
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        self.iscatterv(send, counts, displs, recv, root)?.wait()
    }

    /// Nonblocking scatterv (MPI_Iscatterv, MPI 4.1 §6.12.4).
    ///
    /// # Errors
    /// As [`Communicator::scatterv`], for the arguments.
    pub fn iscatterv<'a, T: Pod>(
        &self,
        send: &'a [T],
        counts: &[usize],
        displs: &[usize],
        recv: &'a mut [T],
        root: usize,
    ) -> Result<CollRequest<'a>> {
        let (p, me, es, k) = (
            self.size(),
            self.rank(),
            std::mem::size_of::<T>(),
            recv.len(),
        );
        let mut spec = Spec::own(CollKind::Scatterv, Some(root), k, es);
        spec.invalid = args::first([
            args::root("scatterv", root, p),
            (me == root)
                .then(|| args::layout("scatterv", counts, displs, p, send.len()))
                .flatten(),
            (me == root && counts.len() == p)
                .then(|| {
                    args::len(
                        "scatterv",
                        "the root's own receive buffer (counts[root])",
                        k,
                        counts[root],
                    )
                })
                .flatten(),
        ]);
        spec.pairs = (root < p).then(|| root_pairs(me, p, root, counts, k));
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            None,
        );
        self.start_coll(spec, user, |b| {
            if me == root {
                b.copy(
                    Slice::elems(Buf::Send, es, displs[me], k),
                    Slice::elems(Buf::Recv, es, 0, k),
                );
                for i in (0..p).filter(|&i| i != root) {
                    b.send(i, Slice::elems(Buf::Send, es, displs[i], counts[i]));
                }
            } else {
                b.recv(root, Slice::elems(Buf::Recv, es, 0, k));
            }
        })
    }
}

/// Check pairs of a rooted v-collective: the root tells rank `i` its `counts[i]`; rank
/// `i` compares it with its own count `k`.
fn root_pairs(me: usize, p: usize, root: usize, counts: &[usize], k: usize) -> Pairs {
    if me == root {
        Pairs {
            send: (0..p)
                .filter(|&i| i != root)
                .map(|i| (i, counts.get(i).copied().unwrap_or(0) as u64))
                .collect(),
            expect: Vec::new(),
        }
    } else {
        Pairs {
            send: Vec::new(),
            expect: vec![(root, k as u64)],
        }
    }
}

/// Subtree of relative rank `rel` in a binomial tree over `p` ranks: its size.
fn subtree(rel: usize, p: usize) -> usize {
    if rel == 0 {
        p
    } else {
        (1 << rel.trailing_zeros()).min(p - rel)
    }
}

/// Gather `k` elements per rank into the root's receive buffer.
pub(crate) fn gather(b: &mut Builder, algo: GatherAlgo, k: usize, es: usize, root: usize) {
    let (me, p) = (b.rank, b.size);
    if k == 0 || es == 0 {
        return;
    }
    let own = Slice::elems(Buf::Send, es, 0, k);
    match algo {
        GatherAlgo::Linear => {
            if me == root {
                b.copy(own, Slice::elems(Buf::Recv, es, root * k, k));
                for i in (0..p).filter(|&i| i != root) {
                    b.recv(i, Slice::elems(Buf::Recv, es, i * k, k));
                }
            } else {
                b.send(root, own);
            }
        }
        GatherAlgo::Binomial => {
            // Blocks of relative ranks [rel, rel + subtree) in relative order.
            let rel = (me + p - root) % p;
            let sub = subtree(rel, p);
            let work = if me == root && root == 0 {
                Buf::Recv
            } else {
                b.tmp(sub * k * es)
            };
            b.copy(own, Slice::elems(work, es, 0, k));
            let mut mask = 1;
            let mut parent = None;
            while mask < p {
                if rel & mask == 0 {
                    if rel + mask < p {
                        let n = mask.min(p - rel - mask);
                        b.recv((me + mask) % p, Slice::elems(work, es, mask * k, n * k));
                    }
                } else {
                    parent = Some((me + p - mask) % p);
                    break;
                }
                mask <<= 1;
            }
            if let Some(par) = parent {
                b.round();
                b.send(par, Slice::elems(work, es, 0, sub * k));
            } else if work != Buf::Recv {
                // Root: relative block q belongs to rank (q + root) mod p.
                let tail = p - root;
                b.copy(
                    Slice::elems(work, es, 0, tail * k),
                    Slice::elems(Buf::Recv, es, root * k, tail * k),
                );
                b.copy(
                    Slice::elems(work, es, tail * k, root * k),
                    Slice::elems(Buf::Recv, es, 0, root * k),
                );
            }
        }
    }
}

/// Scatter `k` elements per rank from the root's send buffer.
pub(crate) fn scatter(b: &mut Builder, algo: GatherAlgo, k: usize, es: usize, root: usize) {
    let (me, p) = (b.rank, b.size);
    if k == 0 || es == 0 {
        return;
    }
    let own = Slice::elems(Buf::Recv, es, 0, k);
    match algo {
        GatherAlgo::Linear => {
            if me == root {
                b.copy(Slice::elems(Buf::Send, es, root * k, k), own);
                for i in (0..p).filter(|&i| i != root) {
                    b.send(i, Slice::elems(Buf::Send, es, i * k, k));
                }
            } else {
                b.recv(root, own);
            }
        }
        GatherAlgo::Binomial => {
            let rel = (me + p - root) % p;
            let sub = subtree(rel, p);
            let work = if me == root && root == 0 {
                Buf::Send
            } else {
                b.tmp(sub * k * es)
            };
            if me == root && root != 0 {
                let tail = p - root;
                b.copy(
                    Slice::elems(Buf::Send, es, root * k, tail * k),
                    Slice::elems(work, es, 0, tail * k),
                );
                b.copy(
                    Slice::elems(Buf::Send, es, 0, root * k),
                    Slice::elems(work, es, tail * k, root * k),
                );
            }
            let mut mask = 1;
            while mask < p {
                if rel & mask != 0 {
                    b.round();
                    b.recv((me + p - mask) % p, Slice::elems(work, es, 0, sub * k));
                    break;
                }
                mask <<= 1;
            }
            mask >>= 1;
            b.round();
            b.copy(Slice::elems(work, es, 0, k), own);
            while mask > 0 {
                if rel + mask < p {
                    let n = mask.min(p - rel - mask);
                    b.send((me + mask) % p, Slice::elems(work, es, mask * k, n * k));
                }
                mask >>= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::testing;

    #[test]
    fn gather_and_scatter_every_algorithm_size_root() {
        for algo in [GatherAlgo::Linear, GatherAlgo::Binomial] {
            for p in 1..=9 {
                for k in [0usize, 1, 3, 50] {
                    for root in 0..p {
                        let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, k)).collect();
                        let mut recvs: Vec<Vec<i64>> = (0..p)
                            .map(|r| vec![0; if r == root { p * k } else { 0 }])
                            .collect();
                        testing::run(&sends, &mut recvs, None, |b| gather(b, algo, k, 8, root));
                        assert_eq!(
                            recvs[root],
                            sends.concat(),
                            "gather {algo} p={p} k={k} root={root}"
                        );

                        let all = sends.concat();
                        let ssend: Vec<Vec<i64>> = (0..p)
                            .map(|r| if r == root { all.clone() } else { Vec::new() })
                            .collect();
                        let mut srecv = vec![vec![0i64; k]; p];
                        testing::run(&ssend, &mut srecv, None, |b| scatter(b, algo, k, 8, root));
                        assert_eq!(srecv, sends, "scatter {algo} p={p} k={k} root={root}");
                    }
                }
            }
        }
    }

    #[test]
    fn subtree_sizes() {
        assert_eq!(
            (0..8).map(|r| subtree(r, 8)).collect::<Vec<_>>(),
            [8, 1, 2, 1, 4, 1, 2, 1]
        );
        assert_eq!(
            (0..6).map(|r| subtree(r, 6)).collect::<Vec<_>>(),
            [6, 1, 2, 1, 2, 1]
        );
    }
}
