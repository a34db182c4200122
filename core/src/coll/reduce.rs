//! Reduce (MPI 4.1 §6.9.1): binomial tree.

use bytemuck::Pod;

use crate::coll::check::Spec;
use crate::coll::ops::ReduceOp;
use crate::coll::sched::{Buf, Builder, Slice, UserBufs};
use crate::coll::select::Algo;
use crate::coll::{CollKind, CollRequest, args};
use crate::comm::Communicator;
use crate::error::Result;

impl Communicator {
    /// Reduce every rank's `send` element-wise with `op` into `recv` on `root`
    /// (MPI_Reduce, MPI 4.1 §6.9.1): `recv[i] = send_0[i] ∘ send_1[i] ∘ … ∘
    /// send_{p−1}[i]`.
    ///
    /// Shape: `send.len()` elements, equal on every rank; on `root`, `recv.len()` must
    /// equal it; elsewhere `recv` is not used (pass `&mut []`). `op` is an
    /// [`crate::Op`] (for [`crate::Reducible`] types) or a [`crate::UserOp`].
    ///
    /// Algorithm: binomial tree; a node combines its own partial result with its
    /// children's in rank order (`own ∘ child`), so non-commutative operations are
    /// applied in rank order (for them the tree is rooted at rank 0, which then sends
    /// the result to `root`).
    ///
    /// # Errors
    /// [`crate::Error::Usage`] if `root` is out of range, `recv` has the wrong length on
    /// the root, or `op` is not defined on `T`; [`crate::Error::Collective`] if ranks
    /// pass different counts, roots or operations; [`crate::Error::Connection`] if a
    /// peer died.
    pub fn reduce<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<ReduceOp<T>>,
        root: usize,
    ) -> Result<()> {
        self.ireduce(send, recv, op, root)?.wait()
    }

    /// Nonblocking reduce (MPI_Ireduce, MPI 4.1 §6.12.7).
    ///
    /// # Errors
    /// As [`Communicator::reduce`], for the arguments.
    pub fn ireduce<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
        op: impl Into<ReduceOp<T>>,
        root: usize,
    ) -> Result<CollRequest<'a>> {
        let op = op.into();
        let (p, es, n) = (self.size(), std::mem::size_of::<T>(), send.len());
        let algo = self.st.cfg.reduce(p, n * es)?;
        let red = op.reducer();
        let mut spec = Spec::uniform(CollKind::Reduce, Some(root), n, es);
        spec.algo = algo.code();
        if let Ok(r) = &red {
            (spec.op_code, spec.dtype_code) = (r.op_code, r.dtype_code);
        }
        spec.invalid = args::first([
            red.as_ref().err().cloned(),
            args::root("reduce", root, p),
            (self.rank() == root)
                .then(|| args::len("reduce", "the receive buffer", recv.len(), n))
                .flatten(),
        ]);
        let commutative = op.is_commutative();
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            red.ok(),
        );
        self.start_coll(spec, user, |b| {
            if n > 0 && es > 0 {
                let all = n * es;
                binomial(
                    b,
                    Slice::new(Buf::Send, 0, all),
                    Slice::new(Buf::Recv, 0, all),
                    root,
                    commutative,
                );
            }
        })
    }

    /// In-place reduce (MPI_Reduce with `MPI_IN_PLACE` as the root's send buffer,
    /// MPI 4.1 §6.9.1): every rank's `buf` is its input; on `root` it then holds the
    /// result `buf_0[i] ∘ buf_1[i] ∘ … ∘ buf_{p−1}[i]`, elsewhere it is only read and
    /// left unchanged.
    ///
    /// Shape: `buf.len()` elements, equal on every rank. Algorithm, reduction order and
    /// result bits as [`Communicator::reduce`] on the same inputs (on the root of a
    /// commutative operation the tree accumulates straight into `buf`, without the
    /// out-of-place form's first copy).
    ///
    /// # Errors
    /// [`crate::Error::Usage`] if `root` is out of range or `op` is not defined on `T`;
    /// [`crate::Error::Collective`] if ranks pass different counts, roots or
    /// operations; [`crate::Error::Connection`] if a peer died.
    pub fn reduce_in_place<T: Pod>(
        &self,
        buf: &mut [T],
        op: impl Into<ReduceOp<T>>,
        root: usize,
    ) -> Result<()> {
        self.ireduce_in_place(buf, op, root)?.wait()
    }

    /// Nonblocking in-place reduce (MPI_Ireduce with `MPI_IN_PLACE`, MPI 4.1 §6.12.7).
    ///
    /// # Errors
    /// As [`Communicator::reduce_in_place`], for the arguments.
    pub fn ireduce_in_place<'a, T: Pod>(
        &self,
        buf: &'a mut [T],
        op: impl Into<ReduceOp<T>>,
        root: usize,
    ) -> Result<CollRequest<'a>> {
        let op = op.into();
        let (p, es, n) = (self.size(), std::mem::size_of::<T>(), buf.len());
        let algo = self.st.cfg.reduce(p, n * es)?;
        let red = op.reducer();
        let mut spec = Spec::uniform(CollKind::Reduce, Some(root), n, es);
        spec.algo = algo.code();
        if let Ok(r) = &red {
            (spec.op_code, spec.dtype_code) = (r.op_code, r.dtype_code);
        }
        spec.invalid = args::first([
            red.as_ref().err().cloned(),
            args::root("reduce_in_place", root, p),
        ]);
        let commutative = op.is_commutative();
        let user = UserBufs::new(&[], bytemuck::cast_slice_mut(buf), red.ok());
        self.start_coll(spec, user, |b| {
            if n > 0 && es > 0 {
                // Input and output are both the buffer; `binomial` copies the input
                // into a temporary accumulator wherever the result does not stay here.
                let all = Slice::new(Buf::Recv, 0, n * es);
                binomial(b, all, all, root, commutative);
            }
        })
    }
}

/// Binomial reduce of `input` (every rank) into `out` (used on `root` only).
///
/// `input` may be `out` itself (the in-place form): the only step that reads `input`
/// is the first one, a copy into the accumulator, which is skipped when the
/// accumulator is `out`; `out` is written only on `root` and only after that copy.
///
/// In relative ranks `rel = rank − tree_root`, rank `rel` receives the partial results
/// of its children `rel + 2^k` (for `2^k < lowbit(rel)`, all posted at once into
/// separate temporaries), combines them in increasing `k` as `acc = acc ∘ child`, and
/// sends `acc` to `rel − lowbit(rel)`. Rank `rel` thus holds the reduction of the
/// contiguous ranks `[rel, rel + lowbit(rel))` in rank order. The tree is rooted at
/// `root` for commutative operations, else at rank 0 (a final message carries the
/// result to `root`).
pub(crate) fn binomial(b: &mut Builder, input: Slice, out: Slice, root: usize, commutative: bool) {
    let (me, p) = (b.rank, b.size);
    let len = input.len;
    let tree_root = if commutative { root } else { 0 };
    let rel = (me + p - tree_root) % p;
    let acc = if me == root && tree_root == root {
        out
    } else {
        let t = b.tmp(len);
        Slice::new(t, 0, len)
    };
    b.copy(input, acc);
    let mut children = Vec::new();
    let mut parent = None;
    let mut mask = 1;
    while mask < p {
        if rel & mask == 0 {
            if rel + mask < p {
                children.push((me + mask) % p);
            }
        } else {
            parent = Some((me + p - mask) % p);
            break;
        }
        mask <<= 1;
    }
    let tmps: Vec<Slice> = children
        .iter()
        .map(|_| {
            let t = b.tmp(len);
            Slice::new(t, 0, len)
        })
        .collect();
    for (&c, &t) in children.iter().zip(&tmps) {
        b.recv(c, t);
    }
    for &t in &tmps {
        b.reduce(t, acc, false);
    }
    if let Some(par) = parent {
        b.send(par, acc);
    }
    if tree_root != root {
        if me == tree_root {
            b.round();
            b.send(root, acc);
        } else if me == root {
            b.round();
            b.recv(tree_root, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::ops::Op;
    use crate::coll::testing::{self, concat};

    #[test]
    fn binomial_sum_every_size_and_root() {
        for p in 1..=9 {
            for count in [0usize, 1, 7, 64] {
                for root in 0..p {
                    let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, count)).collect();
                    let mut recvs = vec![vec![0i64; count]; p];
                    let red = ReduceOp::<i64>::from(Op::Sum).reducer().unwrap();
                    testing::run(&sends, &mut recvs, Some(red), |b| {
                        if count > 0 {
                            binomial(
                                b,
                                Slice::new(Buf::Send, 0, count * 8),
                                Slice::new(Buf::Recv, 0, count * 8),
                                root,
                                true,
                            )
                        }
                    });
                    let want: Vec<i64> = (0..count)
                        .map(|i| sends.iter().map(|s| s[i]).sum())
                        .collect();
                    assert_eq!(recvs[root], want, "p={p} count={count} root={root}");
                }
            }
        }
    }

    #[test]
    fn binomial_keeps_rank_order_for_non_commutative_ops() {
        for p in 1..=9 {
            for root in 0..p {
                let sends: Vec<Vec<[i64; 2]>> =
                    (0..p).map(|r| vec![[r as i64, r as i64]; 3]).collect();
                let mut recvs = vec![vec![[0i64; 2]; 3]; p];
                let red = concat().reducer().unwrap();
                testing::run(&sends, &mut recvs, Some(red), |b| {
                    binomial(
                        b,
                        Slice::new(Buf::Send, 0, 48),
                        Slice::new(Buf::Recv, 0, 48),
                        root,
                        false,
                    )
                });
                assert_eq!(recvs[root], vec![[0, p as i64 - 1]; 3], "p={p} root={root}");
            }
        }
    }

    #[test]
    fn in_place_root_gets_the_out_of_place_bits_and_others_keep_their_input() {
        for commutative in [true, false] {
            for p in 1..=9 {
                for count in [0usize, 1, 7, 64] {
                    for root in 0..p {
                        let sends: Vec<Vec<f32>> =
                            (0..p).map(|r| testing::floats(r, count)).collect();
                        let red = || {
                            // The same sum, declared non-commutative: rank-0 rooted tree.
                            let op: ReduceOp<f32> = if commutative {
                                Op::Sum.into()
                            } else {
                                crate::coll::ops::UserOp::new(
                                    |a: &[f32], io: &mut [f32]| {
                                        for (x, y) in a.iter().zip(io.iter_mut()) {
                                            *y += *x;
                                        }
                                    },
                                    false,
                                )
                                .into()
                            };
                            op.reducer().unwrap()
                        };
                        let n = count * 4;
                        let mut outs = vec![vec![0f32; count]; p];
                        testing::run(&sends, &mut outs, Some(red()), |b| {
                            if n > 0 {
                                binomial(
                                    b,
                                    Slice::new(Buf::Send, 0, n),
                                    Slice::new(Buf::Recv, 0, n),
                                    root,
                                    commutative,
                                )
                            }
                        });
                        let mut bufs = sends.clone();
                        testing::run_in_place(&mut bufs, Some(red()), |b| {
                            if n > 0 {
                                let all = Slice::new(Buf::Recv, 0, n);
                                binomial(b, all, all, root, commutative)
                            }
                        });
                        let what =
                            format!("commutative={commutative} p={p} count={count} root={root}");
                        assert_eq!(
                            testing::bits(&bufs[root]),
                            testing::bits(&outs[root]),
                            "{what}"
                        );
                        for r in (0..p).filter(|&r| r != root) {
                            assert_eq!(
                                testing::bits(&bufs[r]),
                                testing::bits(&sends[r]),
                                "{what} rank {r}"
                            );
                        }
                    }
                }
            }
        }
    }
}
