//! Reduce-scatter (MPI 4.1 §6.10): ring, or reduce + scatterv.

use bytemuck::Pod;

use crate::coll::check::Spec;
use crate::coll::ops::ReduceOp;
use crate::coll::sched::{Buf, Builder, Slice, UserBufs};
use crate::coll::select::{Algo, ReduceScatterAlgo};
use crate::coll::{CollKind, CollRequest, args, reduce};
use crate::comm::Communicator;
use crate::error::{Error, Result};

impl Communicator {
    /// Reduce every rank's `send` element-wise with `op`, then scatter block `i` of
    /// `recv.len()` elements of the result to rank `i` (MPI_Reduce_scatter_block,
    /// MPI 4.1 §6.10.1).
    ///
    /// Shape: `send.len() == size() * recv.len()`, equal on every rank. Algorithm
    /// ([`ReduceScatterAlgo`], `RANKWIRE_REDUCE_SCATTER_ALGO`): ring for commutative
    /// operations (block `b` is combined starting at rank `b + 1` around the ring), or
    /// an order-preserving binomial reduce to rank 0 followed by a linear scatter.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] for wrong lengths or an operation not defined on `T`;
    /// [`crate::Error::Collective`] if ranks pass different counts or operations;
    /// [`crate::Error::Connection`] if a peer died.
    pub fn reduce_scatter_block<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        self.ireduce_scatter_block(send, recv, op)?.wait()
    }

    /// Nonblocking reduce_scatter_block (MPI_Ireduce_scatter_block, MPI 4.1 §6.12.9).
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter_block`], for the arguments.
    pub fn ireduce_scatter_block<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<'a>> {
        let p = self.size();
        let k = recv.len();
        let counts = vec![k; p];
        let mut spec = Spec::uniform(
            CollKind::ReduceScatterBlock,
            None,
            k,
            std::mem::size_of::<T>(),
        );
        spec.invalid = args::len("reduce_scatter_block", "the send buffer", send.len(), p * k);
        self.start_reduce_scatter(spec, send, recv, &counts, op.into(), false)
    }

    /// In-place reduce_scatter_block (MPI_Reduce_scatter_block with `MPI_IN_PLACE` as
    /// the send buffer, MPI 4.1 §6.10.1): every rank's `buf` is its input vector of
    /// `size()` blocks of `k = buf.len() / size()` elements; afterwards the first `k`
    /// elements of rank `i`'s `buf` hold block `i` of the element-wise reduction. The
    /// other `(size() − 1)·k` elements are unspecified afterwards, as in MPI (in fact
    /// they hold partial results of the algorithm, or the input).
    ///
    /// Shape: `buf.len()` elements, equal on every rank and a multiple of `size()`.
    /// Algorithm, reduction order and result bits as
    /// [`Communicator::reduce_scatter_block`] on the same inputs (the ring works in
    /// `buf` instead of a temporary copy of the input).
    ///
    /// # Errors
    /// [`crate::Error::Usage`] if `buf.len()` is not a multiple of `size()` or `op` is
    /// not defined on `T`; [`crate::Error::Collective`] if ranks pass different counts
    /// or operations; [`crate::Error::Connection`] if a peer died.
    pub fn reduce_scatter_block_in_place<T: Pod>(
        &self,
        buf: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        self.ireduce_scatter_block_in_place(buf, op)?.wait()
    }

    /// Nonblocking in-place reduce_scatter_block (MPI_Ireduce_scatter_block with
    /// `MPI_IN_PLACE`, MPI 4.1 §6.12.9).
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter_block_in_place`], for the arguments.
    pub fn ireduce_scatter_block_in_place<'a, T: Pod>(
        &self,
        buf: &'a mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<'a>> {
        let p = self.size();
        let k = buf.len() / p;
        let counts = vec![k; p];
        let mut spec = Spec::uniform(
            CollKind::ReduceScatterBlock,
            None,
            k,
            std::mem::size_of::<T>(),
        );
        spec.invalid = args::multiple("reduce_scatter_block_in_place", "the buffer", buf.len(), p);
        self.start_reduce_scatter(spec, &[], buf, &counts, op.into(), true)
    }

    /// Reduce every rank's `send` element-wise with `op`, then scatter: rank `i`
    /// receives `counts[i]` elements of the result, the blocks taken in rank order
    /// (MPI_Reduce_scatter, MPI 4.1 §6.10.2).
    ///
    /// Shape: `counts` has `size()` entries, equal on every rank;
    /// `send.len() == counts.iter().sum()`; `recv.len() == counts[rank]`. Algorithm as
    /// [`Communicator::reduce_scatter_block`].
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter_block`].
    pub fn reduce_scatter<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        self.ireduce_scatter(send, recv, counts, op)?.wait()
    }

    /// Nonblocking reduce_scatter (MPI_Ireduce_scatter, MPI 4.1 §6.12.9).
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter`], for the arguments.
    pub fn ireduce_scatter<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<'a>> {
        let (p, me) = (self.size(), self.rank());
        let mut spec = Spec::own(
            CollKind::ReduceScatter,
            None,
            recv.len(),
            std::mem::size_of::<T>(),
        );
        spec.shared_counts = Some(counts.iter().map(|&c| c as u64).collect());
        spec.own_in_shared = true;
        spec.invalid = args::first([
            (counts.len() != p).then(|| {
                Error::usage(format!(
                    "reduce_scatter: counts has {} entries, one per rank ({p}) needed",
                    counts.len()
                ))
            }),
            args::len(
                "reduce_scatter",
                "the send buffer",
                send.len(),
                counts.iter().sum(),
            ),
            counts
                .get(me)
                .and_then(|&c| args::len("reduce_scatter", "the receive buffer", recv.len(), c)),
        ]);
        self.start_reduce_scatter(spec, send, recv, counts, op.into(), false)
    }

    /// `in_place`: `send` is empty and `recv` holds the input vector (the result goes
    /// to its start).
    fn start_reduce_scatter<'a, T: Pod>(
        &self,
        mut spec: Spec,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &[usize],
        op: ReduceOp<T>,
        in_place: bool,
    ) -> Result<CollRequest<'a>> {
        let (p, es) = (self.size(), std::mem::size_of::<T>());
        let commutative = op.is_commutative();
        let input_len = if in_place { recv.len() } else { send.len() };
        let algo = self.st.cfg.reduce_scatter(p, input_len * es, commutative)?;
        let red = op.reducer();
        spec.algo = algo.code();
        if let Ok(r) = &red {
            (spec.op_code, spec.dtype_code) = (r.op_code, r.dtype_code);
        }
        spec.invalid = args::first([red.as_ref().err().cloned(), spec.invalid.take()]);
        let counts = counts.to_vec();
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            red.ok(),
        );
        self.start_coll(spec, user, |b| build_from(b, algo, &counts, es, in_place))
    }
}

/// Reduce-scatter of the send buffer (the concatenation of blocks of `counts[i]`
/// elements) into each rank's receive buffer.
#[cfg(test)]
pub(crate) fn build(b: &mut Builder, algo: ReduceScatterAlgo, counts: &[usize], es: usize) {
    build_from(b, algo, counts, es, false);
}

/// [`build`], or with `in_place` the input vector taken from the receive buffer (which
/// holds all of it) and the result left at its start. In place the ring reduces in the
/// receive buffer itself (its work vector; the final copy of the own block to the start
/// is a move within it), and `reduce_scatterv` accumulates on rank 0 straight into it;
/// on the other ranks the binomial tree copies the input into its accumulator in its
/// first step, before the result block is received.
pub(crate) fn build_from(
    b: &mut Builder,
    algo: ReduceScatterAlgo,
    counts: &[usize],
    es: usize,
    in_place: bool,
) {
    let (me, p) = (b.rank, b.size);
    let input = if in_place { Buf::Recv } else { Buf::Send };
    let total: usize = counts.iter().sum();
    if total == 0 || es == 0 {
        return;
    }
    let displ: Vec<usize> = counts
        .iter()
        .scan(0, |a, &c| {
            let d = *a;
            *a += c;
            Some(d)
        })
        .collect();
    let blk = |buf: Buf, i: usize| Slice::elems(buf, es, displ[i], counts[i]);
    let mine = Slice::elems(Buf::Recv, es, 0, counts[me]);
    if p == 1 {
        b.copy(blk(input, 0), mine);
        return;
    }
    match algo {
        ReduceScatterAlgo::Ring => {
            // Step s: send the partial block rank−s−1 right, combine block rank−s−2
            // from the left as `received ∘ own`; block c starts at rank c+1 and ends,
            // complete, on rank c.
            let w = if in_place {
                Buf::Recv
            } else {
                b.tmp(total * es)
            };
            b.copy(
                Slice::elems(input, es, 0, total),
                Slice::elems(w, es, 0, total),
            );
            let t = b.tmp(counts.iter().max().copied().unwrap_or(0) * es);
            let (left, right) = ((me + p - 1) % p, (me + 1) % p);
            for s in 0..p - 1 {
                let sc = (me + 2 * p - s - 1) % p;
                let rc = (me + 2 * p - s - 2) % p;
                let got = Slice::elems(t, es, 0, counts[rc]);
                b.round();
                b.recv(left, got);
                b.send(right, blk(w, sc));
                b.reduce(got, blk(w, rc), true);
            }
            b.copy(blk(w, me), mine);
        }
        ReduceScatterAlgo::ReduceScatterv => {
            let all = Slice::elems(input, es, 0, total);
            let res = if me == 0 && !in_place {
                let r = b.tmp(total * es);
                Slice::elems(r, es, 0, total)
            } else {
                all
            };
            reduce::binomial(b, all, res, 0, false);
            b.round();
            if me == 0 {
                b.copy(Slice::new(res.buf, displ[0] * es, counts[0] * es), mine);
                for i in 1..p {
                    b.send(i, Slice::new(res.buf, displ[i] * es, counts[i] * es));
                }
            } else {
                b.recv(0, mine);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::ops::{Op, ReduceOp};
    use crate::coll::testing::{self, concat};

    #[test]
    fn every_algorithm_every_size_uneven_counts() {
        for algo in [ReduceScatterAlgo::Ring, ReduceScatterAlgo::ReduceScatterv] {
            for p in 1..=9 {
                for scale in [0usize, 1, 5] {
                    let counts: Vec<usize> = (0..p)
                        .map(|i| scale * ((i % 3) + usize::from(i == 0)))
                        .collect();
                    let total: usize = counts.iter().sum();
                    let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, total)).collect();
                    let mut recvs: Vec<Vec<i64>> = (0..p).map(|r| vec![0; counts[r]]).collect();
                    let red = ReduceOp::<i64>::from(Op::Sum).reducer().unwrap();
                    testing::run(&sends, &mut recvs, Some(red), |b| {
                        build(b, algo, &counts, 8)
                    });
                    let sum: Vec<i64> = (0..total)
                        .map(|i| sends.iter().map(|s| s[i]).sum())
                        .collect();
                    let mut at = 0;
                    for r in 0..p {
                        assert_eq!(
                            recvs[r],
                            sum[at..at + counts[r]],
                            "{algo} p={p} counts={counts:?}"
                        );
                        at += counts[r];
                    }
                }
            }
        }
    }

    #[test]
    fn reduce_scatterv_keeps_rank_order() {
        for p in 1..=7 {
            let counts = vec![2usize; p];
            let sends: Vec<Vec<[i64; 2]>> =
                (0..p).map(|r| vec![[r as i64, r as i64]; 2 * p]).collect();
            let mut recvs = vec![vec![[0i64; 2]; 2]; p];
            testing::run(&sends, &mut recvs, Some(concat().reducer().unwrap()), |b| {
                build(b, ReduceScatterAlgo::ReduceScatterv, &counts, 16)
            });
            for v in &recvs {
                assert_eq!(v, &vec![[0, p as i64 - 1]; 2], "p={p}");
            }
        }
    }

    #[test]
    fn block_in_place_gives_the_out_of_place_bits() {
        for algo in [ReduceScatterAlgo::Ring, ReduceScatterAlgo::ReduceScatterv] {
            for p in 1..=9 {
                for k in [0usize, 1, 5, 130] {
                    let counts = vec![k; p];
                    let sends: Vec<Vec<f32>> = (0..p).map(|r| testing::floats(r, p * k)).collect();
                    let red = || ReduceOp::<f32>::from(Op::Sum).reducer().unwrap();
                    let mut outs = vec![vec![0f32; k]; p];
                    testing::run(&sends, &mut outs, Some(red()), |b| {
                        build(b, algo, &counts, 4)
                    });
                    let mut bufs = sends.clone();
                    testing::run_in_place(&mut bufs, Some(red()), |b| {
                        build_from(b, algo, &counts, 4, true)
                    });
                    for r in 0..p {
                        assert_eq!(
                            testing::bits(&bufs[r][..k]),
                            testing::bits(&outs[r]),
                            "{algo} p={p} k={k} rank {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn block_in_place_reduce_scatterv_keeps_rank_order() {
        for p in 1..=7 {
            let counts = vec![2usize; p];
            let mut bufs: Vec<Vec<[i64; 2]>> =
                (0..p).map(|r| vec![[r as i64, r as i64]; 2 * p]).collect();
            testing::run_in_place(&mut bufs, Some(concat().reducer().unwrap()), |b| {
                build_from(b, ReduceScatterAlgo::ReduceScatterv, &counts, 16, true)
            });
            for v in &bufs {
                assert_eq!(&v[..2], &[[0, p as i64 - 1]; 2], "p={p}");
            }
        }
    }
}
