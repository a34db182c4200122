//! Inclusive and exclusive scan (MPI 4.1 §6.11): recursive doubling.

use bytemuck::Pod;

use crate::coll::check::Spec;
use crate::coll::ops::ReduceOp;
use crate::coll::sched::{Buf, Builder, Slice, UserBufs};
use crate::coll::{CollKind, CollRequest, args};
use crate::comm::Communicator;
use crate::error::Result;

impl Communicator {
    /// Inclusive prefix reduction: rank `r` receives `send_0 ∘ send_1 ∘ … ∘ send_r`
    /// (MPI_Scan, MPI 4.1 §6.11.1).
    ///
    /// Shape: `send.len() == recv.len()`, equal on every rank. Algorithm: recursive
    /// doubling (MPICH `MPIR_Scan_intra_recursive_doubling`): ⌈lg p⌉ exchanges of the
    /// partial result with `rank XOR 2^k`, operands kept in rank order, so
    /// non-commutative operations work.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] for different lengths or an operation not defined on
    /// `T`; [`crate::Error::Collective`] if ranks pass different counts or operations;
    /// [`crate::Error::Connection`] if a peer died.
    pub fn scan<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        self.iscan(send, recv, op)?.wait()
    }

    /// Nonblocking scan (MPI_Iscan, MPI 4.1 §6.12.10).
    ///
    /// # Errors
    /// As [`Communicator::scan`], for the arguments.
    pub fn iscan<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<'a>> {
        self.start_scan(CollKind::Scan, send, recv, op.into())
    }

    /// Exclusive prefix reduction: rank `r > 0` receives `send_0 ∘ … ∘ send_{r−1}`;
    /// rank 0's `recv` is left unchanged (MPI_Exscan, MPI 4.1 §6.11.2).
    ///
    /// Shape and algorithm as [`Communicator::scan`].
    ///
    /// # Errors
    /// As [`Communicator::scan`].
    pub fn exscan<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        self.iexscan(send, recv, op)?.wait()
    }

    /// Nonblocking exscan (MPI_Iexscan, MPI 4.1 §6.12.11).
    ///
    /// # Errors
    /// As [`Communicator::exscan`], for the arguments.
    pub fn iexscan<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<'a>> {
        self.start_scan(CollKind::Exscan, send, recv, op.into())
    }

    fn start_scan<'a, T: Pod>(
        &self,
        kind: CollKind,
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp<T>,
    ) -> Result<CollRequest<'a>> {
        let (es, n) = (std::mem::size_of::<T>(), send.len());
        let red = op.reducer();
        let mut spec = Spec::uniform(kind, None, n, es);
        if let Ok(r) = &red {
            (spec.op_code, spec.dtype_code) = (r.op_code, r.dtype_code);
        }
        spec.invalid = args::first([
            red.as_ref().err().cloned(),
            args::len(kind.name(), "the receive buffer", recv.len(), n),
        ]);
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            red.ok(),
        );
        self.start_coll(spec, user, |b| build(b, kind == CollKind::Exscan, n, es))
    }
}

/// Recursive-doubling scan. `partial` holds the reduction of this rank's aligned block
/// of `2^k` ranks (what it forwards); a partner with a lower rank contributes on the
/// left of both `partial` and the result.
pub(crate) fn build(b: &mut Builder, exclusive: bool, count: usize, es: usize) {
    let (me, p) = (b.rank, b.size);
    if count == 0 || es == 0 {
        return;
    }
    let len = count * es;
    let res = Slice::new(Buf::Recv, 0, len);
    let pt = b.tmp(len);
    let partial = Slice::new(pt, 0, len);
    let tt = b.tmp(len);
    let tmp = Slice::new(tt, 0, len);
    b.copy(Slice::new(Buf::Send, 0, len), partial);
    if !exclusive {
        b.copy(Slice::new(Buf::Send, 0, len), res);
    }
    let mut have_res = !exclusive;
    let mut mask = 1;
    while mask < p {
        let partner = me ^ mask;
        if partner < p {
            b.round();
            b.recv(partner, tmp);
            b.send(partner, partial);
            if partner < me {
                b.reduce(tmp, partial, true);
                if have_res {
                    b.reduce(tmp, res, true);
                } else {
                    b.copy(tmp, res);
                    have_res = true;
                }
            } else {
                b.reduce(tmp, partial, false);
            }
        }
        mask <<= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::ops::{Op, ReduceOp};
    use crate::coll::testing::{self, concat};

    #[test]
    fn scan_and_exscan_every_size() {
        for exclusive in [false, true] {
            for p in 1..=9 {
                for count in [0usize, 1, 6] {
                    let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, count)).collect();
                    let mut recvs = vec![vec![77i64; count]; p];
                    let red = ReduceOp::<i64>::from(Op::Sum).reducer().unwrap();
                    testing::run(&sends, &mut recvs, Some(red), |b| {
                        build(b, exclusive, count, 8)
                    });
                    for (r, got) in recvs.iter().enumerate() {
                        let upto = if exclusive { r } else { r + 1 };
                        let want: Vec<i64> = if exclusive && r == 0 {
                            vec![77; count]
                        } else {
                            (0..count)
                                .map(|i| sends[..upto].iter().map(|s| s[i]).sum())
                                .collect()
                        };
                        assert_eq!(got, &want, "exclusive={exclusive} p={p} rank {r}");
                    }
                }
            }
        }
    }

    #[test]
    fn scan_keeps_rank_order() {
        for exclusive in [false, true] {
            for p in 1..=9 {
                let sends: Vec<Vec<[i64; 2]>> =
                    (0..p).map(|r| vec![[r as i64, r as i64]; 2]).collect();
                let mut recvs = vec![vec![[-5i64; 2]; 2]; p];
                testing::run(&sends, &mut recvs, Some(concat().reducer().unwrap()), |b| {
                    build(b, exclusive, 2, 16)
                });
                for (r, v) in recvs.iter().enumerate() {
                    let want = match (exclusive, r) {
                        (true, 0) => [-5, -5],
                        (true, _) => [0, r as i64 - 1],
                        (false, _) => [0, r as i64],
                    };
                    assert_eq!(v, &vec![want; 2], "exclusive={exclusive} p={p} rank {r}");
                }
            }
        }
    }
}
