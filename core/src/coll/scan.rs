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
        self.start_scan(CollKind::Scan, send, recv, op.into(), false)
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
        self.start_scan(CollKind::Exscan, send, recv, op.into(), false)
    }

    /// In-place inclusive scan (MPI_Scan with `MPI_IN_PLACE` as the send buffer, MPI
    /// 4.1 §6.11.1): rank `r`'s `buf` is its input and afterwards holds
    /// `buf_0 ∘ buf_1 ∘ … ∘ buf_r` (the inputs).
    ///
    /// Shape: `buf.len()` elements, equal on every rank. Algorithm, reduction order and
    /// result bits as [`Communicator::scan`] on the same inputs.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] if `op` is not defined on `T`;
    /// [`crate::Error::Collective`] if ranks pass different counts or operations;
    /// [`crate::Error::Connection`] if a peer died.
    pub fn scan_in_place<T: Pod>(&self, buf: &mut [T], op: impl Into<ReduceOp<T>>) -> Result<()> {
        self.iscan_in_place(buf, op)?.wait()
    }

    /// Nonblocking in-place scan (MPI_Iscan with `MPI_IN_PLACE`, MPI 4.1 §6.12.10).
    ///
    /// # Errors
    /// As [`Communicator::scan_in_place`], for the arguments.
    pub fn iscan_in_place<'a, T: Pod>(
        &self,
        buf: &'a mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<'a>> {
        self.start_scan(CollKind::Scan, &[], buf, op.into(), true)
    }

    /// In-place exclusive scan (MPI_Exscan with `MPI_IN_PLACE` as the send buffer, MPI
    /// 4.1 §6.11.2): rank `r > 0`'s `buf` is its input and afterwards holds
    /// `buf_0 ∘ … ∘ buf_{r−1}` (the inputs). On rank 0, where MPI leaves the result
    /// undefined, `buf` is left unchanged (it keeps rank 0's input).
    ///
    /// Shape, algorithm and result bits as [`Communicator::scan_in_place`] and
    /// [`Communicator::exscan`].
    ///
    /// # Errors
    /// As [`Communicator::scan_in_place`].
    pub fn exscan_in_place<T: Pod>(&self, buf: &mut [T], op: impl Into<ReduceOp<T>>) -> Result<()> {
        self.iexscan_in_place(buf, op)?.wait()
    }

    /// Nonblocking in-place exscan (MPI_Iexscan with `MPI_IN_PLACE`, MPI 4.1
    /// §6.12.11).
    ///
    /// # Errors
    /// As [`Communicator::exscan_in_place`], for the arguments.
    pub fn iexscan_in_place<'a, T: Pod>(
        &self,
        buf: &'a mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<'a>> {
        self.start_scan(CollKind::Exscan, &[], buf, op.into(), true)
    }

    /// `in_place`: `send` is empty and `recv` holds the input.
    fn start_scan<'a, T: Pod>(
        &self,
        kind: CollKind,
        send: &'a [T],
        recv: &'a mut [T],
        op: ReduceOp<T>,
        in_place: bool,
    ) -> Result<CollRequest<'a>> {
        let es = std::mem::size_of::<T>();
        let n = if in_place { recv.len() } else { send.len() };
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
        let input = if in_place { Buf::Recv } else { Buf::Send };
        self.start_coll(spec, user, |b| {
            build_from(b, kind == CollKind::Exscan, n, es, input)
        })
    }
}

/// Recursive-doubling scan. `partial` holds the reduction of this rank's aligned block
/// of `2^k` ranks (what it forwards); a partner with a lower rank contributes on the
/// left of both `partial` and the result.
#[cfg(test)]
pub(crate) fn build(b: &mut Builder, exclusive: bool, count: usize, es: usize) {
    build_from(b, exclusive, count, es, Buf::Send);
}

/// The recursive-doubling scan with the input read from `input`: the send buffer, or the receive buffer
/// for the in-place forms. The input is read once, by the first local steps (into
/// `partial`, and for the inclusive scan into the result, a copy skipped in place),
/// before anything is received or written to the result.
pub(crate) fn build_from(b: &mut Builder, exclusive: bool, count: usize, es: usize, input: Buf) {
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
    b.copy(Slice::new(input, 0, len), partial);
    if !exclusive {
        b.copy(Slice::new(input, 0, len), res);
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

    #[test]
    fn in_place_gives_the_out_of_place_bits() {
        for exclusive in [false, true] {
            for p in 1..=9 {
                for count in [0usize, 1, 6, 100] {
                    let sends: Vec<Vec<f32>> = (0..p).map(|r| testing::floats(r, count)).collect();
                    let red = || ReduceOp::<f32>::from(Op::Sum).reducer().unwrap();
                    // Out of place, rank 0's exscan output keeps what was there: its input
                    // here, which is what the in-place form leaves.
                    let mut outs = sends.clone();
                    testing::run(&sends, &mut outs, Some(red()), |b| {
                        build(b, exclusive, count, 4)
                    });
                    let mut bufs = sends.clone();
                    testing::run_in_place(&mut bufs, Some(red()), |b| {
                        build_from(b, exclusive, count, 4, Buf::Recv)
                    });
                    for r in 0..p {
                        assert_eq!(
                            testing::bits(&bufs[r]),
                            testing::bits(&outs[r]),
                            "exclusive={exclusive} p={p} count={count} rank {r}"
                        );
                    }
                    if exclusive {
                        assert_eq!(testing::bits(&bufs[0]), testing::bits(&sends[0]));
                    }
                    if count > 0 && p > 2 {
                        assert_ne!(testing::bits(&bufs[2]), testing::bits(&sends[2]));
                    }
                }
            }
        }
    }

    #[test]
    fn in_place_keeps_rank_order() {
        for exclusive in [false, true] {
            for p in 1..=9 {
                let mut bufs: Vec<Vec<[i64; 2]>> =
                    (0..p).map(|r| vec![[r as i64, r as i64]; 2]).collect();
                testing::run_in_place(&mut bufs, Some(concat().reducer().unwrap()), |b| {
                    build_from(b, exclusive, 2, 16, Buf::Recv)
                });
                for (r, v) in bufs.iter().enumerate() {
                    let want = match (exclusive, r) {
                        (true, 0) => [0, 0],
                        (true, _) => [0, r as i64 - 1],
                        (false, _) => [0, r as i64],
                    };
                    assert_eq!(v, &vec![want; 2], "exclusive={exclusive} p={p} rank {r}");
                }
            }
        }
    }
}
