//! Allreduce (MPI 4.1 §6.9.6): recursive doubling, Rabenseifner, ring, reduce + bcast,
//! linear, exchange (schedules); the blocking form also takes `direct.rs` and
//! `single_copy.rs`.

use bytemuck::Pod;

use crate::coll::check::Spec;
use crate::coll::ops::ReduceOp;
use crate::coll::sched::{Buf, Builder, Slice, UserBufs, block};
use crate::coll::select::{Algo, AllreduceAlgo, pof2_floor};
use crate::coll::{CollKind, CollRequest, args, bcast, reduce};
use crate::comm::Communicator;
use crate::error::Result;

impl Communicator {
    /// The blocking forms' paths without a schedule, on `send` (`None`: in place) →
    /// `recv` as bytes: the single-copy allreduce (`single_copy.rs`), else recursive
    /// doubling, the linear or the exchange algorithm run directly (`direct.rs`).
    /// `None`: neither applies, run the schedule.
    fn allreduce_without_schedule<T: Pod>(
        &self,
        send: Option<&[u8]>,
        recv: &mut [u8],
        op: &ReduceOp<T>,
    ) -> Option<Result<()>> {
        let es = std::mem::size_of::<T>();
        let red = |s: &[u8], d: &mut [u8], left: bool| op.apply_bytes(s, d, left);
        if let Some(r) = self.allreduce_single_copy(send, recv, es, &red) {
            return Some(r);
        }
        let algo = self
            .st
            .cfg
            .allreduce(self.size(), recv.len(), op.is_commutative())
            .ok()?;
        self.allreduce_direct(algo, send, recv, es, &red)
    }

    /// Reduce every rank's `send` element-wise with `op` and deliver the result to
    /// every rank's `recv` (MPI_Allreduce, MPI 4.1 §6.9.6).
    ///
    /// Shape: `send.len() == recv.len()`, equal on every rank (elements). The result is
    /// bitwise identical on every rank, for floating point too (see the module doc of
    /// [`crate::coll`] for the reduction order of each algorithm).
    ///
    /// Algorithm ([`AllreduceAlgo`], `RANKWIRE_ALLREDUCE_ALGO` overrides): recursive
    /// doubling for small vectors, Rabenseifner or ring for large ones, chosen by the
    /// cost model; non-commutative operations never use the ring. Vectors up to 8 KiB
    /// take the linear algorithm instead where some node of the job runs at least 4
    /// ranks per CPU, and vectors up to 1 KiB on 3 to 6 ranks the exchange algorithm
    /// where it runs more ranks than CPUs but fewer than 4 per CPU (docs/design.md,
    /// "Communicators and collectives"). Vectors above 64 KiB
    /// on a communicator whose ranks all read each other by cross-memory attach (one
    /// node) take the single-copy allreduce instead, unless an algorithm is forced
    /// (`RANKWIRE_ALLREDUCE_SINGLE_COPY`; module doc of `coll/single_copy.rs`). This
    /// blocking call matches only the blocking call on the other ranks (MPI 4.1 §6.12).
    ///
    /// # Errors
    /// [`crate::Error::Usage`] if the lengths differ or `op` is not defined on `T`;
    /// [`crate::Error::Collective`] if ranks pass different counts or operations;
    /// [`crate::Error::Connection`] if a peer died; [`crate::Error::Transport`] of
    /// `cma` if a single-copy read or write failed while its peer lived.
    pub fn allreduce<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        let op = op.into();
        if op.is_defined()
            && recv.len() == send.len()
            && let Some(r) = self.allreduce_without_schedule(
                Some(bytemuck::cast_slice(send)),
                bytemuck::cast_slice_mut(recv),
                &op,
            )
        {
            return r;
        }
        self.iallreduce(send, recv, op)?.wait()
    }

    /// Nonblocking allreduce (MPI_Iallreduce, MPI 4.1 §6.12.8).
    ///
    /// # Errors
    /// As [`Communicator::allreduce`], for the arguments.
    pub fn iallreduce<'a, T: Pod>(
        &self,
        send: &'a [T],
        recv: &'a mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<'a>> {
        let op = op.into();
        let (p, es, n) = (self.size(), std::mem::size_of::<T>(), send.len());
        let commutative = op.is_commutative();
        let algo = self.st.cfg.allreduce(p, n * es, commutative)?;
        let red = op.reducer();
        let mut spec = Spec::uniform(CollKind::Allreduce, None, n, es);
        spec.algo = algo.code();
        if let Ok(r) = &red {
            (spec.op_code, spec.dtype_code) = (r.op_code, r.dtype_code);
        }
        spec.invalid = args::first([
            red.as_ref().err().cloned(),
            args::len("allreduce", "the receive buffer", recv.len(), n),
        ]);
        let user = UserBufs::new(
            bytemuck::cast_slice(send),
            bytemuck::cast_slice_mut(recv),
            red.ok(),
        );
        self.start_coll(spec, user, |b| build(b, algo, n, es))
    }

    /// In-place allreduce (MPI_Allreduce with `MPI_IN_PLACE` as the send buffer, MPI 4.1
    /// §6.9.6): every rank's `buf` is its input and, afterwards, the reduction of all
    /// ranks' inputs.
    ///
    /// Shape: `buf.len()` elements, equal on every rank. Algorithm, reduction order and
    /// result bits are those of [`Communicator::allreduce`] on the same inputs (the
    /// schedules just skip their first copy of the send buffer into the receive buffer).
    ///
    /// # Errors
    /// [`crate::Error::Usage`] if `op` is not defined on `T`;
    /// [`crate::Error::Collective`] if ranks pass different counts or operations;
    /// [`crate::Error::Connection`] if a peer died.
    pub fn allreduce_in_place<T: Pod>(
        &self,
        buf: &mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<()> {
        let op = op.into();
        if op.is_defined()
            && let Some(r) =
                self.allreduce_without_schedule(None, bytemuck::cast_slice_mut(buf), &op)
        {
            return r;
        }
        self.iallreduce_in_place(buf, op)?.wait()
    }

    /// Nonblocking in-place allreduce (MPI_Iallreduce with `MPI_IN_PLACE`, MPI 4.1
    /// §6.12.8).
    ///
    /// # Errors
    /// As [`Communicator::allreduce_in_place`], for the arguments.
    pub fn iallreduce_in_place<'a, T: Pod>(
        &self,
        buf: &'a mut [T],
        op: impl Into<ReduceOp<T>>,
    ) -> Result<CollRequest<'a>> {
        let op = op.into();
        let (p, es, n) = (self.size(), std::mem::size_of::<T>(), buf.len());
        let algo = self.st.cfg.allreduce(p, n * es, op.is_commutative())?;
        let red = op.reducer();
        let mut spec = Spec::uniform(CollKind::Allreduce, None, n, es);
        spec.algo = algo.code();
        if let Ok(r) = &red {
            (spec.op_code, spec.dtype_code) = (r.op_code, r.dtype_code);
        }
        spec.invalid = red.as_ref().err().cloned();
        let user = UserBufs::new(&[], bytemuck::cast_slice_mut(buf), red.ok());
        self.start_coll(spec, user, |b| build_from(b, algo, n, es, Buf::Recv))
    }
}

/// Allreduce of `count` elements of `es` bytes from the send buffer into the receive
/// buffer.
pub(crate) fn build(b: &mut Builder, algo: AllreduceAlgo, count: usize, es: usize) {
    build_from(b, algo, count, es, Buf::Send);
}

/// Allreduce of `count` elements of `es` bytes from `input` (the send buffer, or the
/// receive buffer itself for the in-place form) into the receive buffer. With
/// `input == Buf::Recv` the copy of the input into the receive buffer is skipped
/// ([`Builder::copy`] of a slice onto itself) and nothing else changes: every later step
/// reads only the receive buffer and temporaries, and `reduce_bcast`'s tree copies the
/// input into its own accumulator before any receive can land in the receive buffer.
pub(crate) fn build_from(
    b: &mut Builder,
    algo: AllreduceAlgo,
    count: usize,
    es: usize,
    input: Buf,
) {
    if count == 0 || es == 0 {
        return;
    }
    let all = Slice::elems(Buf::Recv, es, 0, count);
    let send = Slice::elems(input, es, 0, count);
    if b.size == 1 {
        b.copy(send, all);
        return;
    }
    match algo {
        AllreduceAlgo::ReduceBcast => {
            // Order-preserving tree to rank 0, then its bits to everyone.
            reduce::binomial(b, send, all, 0, false);
            bcast::binomial(b, all, 0);
        }
        AllreduceAlgo::RecursiveDoubling => {
            b.copy(send, all);
            recursive_doubling(b, count, es);
        }
        AllreduceAlgo::Linear => linear(b, send, all),
        AllreduceAlgo::Exchange => exchange(b, send, all),
        AllreduceAlgo::Rabenseifner => {
            b.copy(send, all);
            rabenseifner(b, count, es);
        }
        AllreduceAlgo::Ring => {
            b.copy(send, all);
            ring(b, count, es);
        }
    }
}

/// The non-power-of-two fold (Thakur et al. 2005 §4.4): with `pof2 = 2^⌊lg p⌋` and
/// `rem = p − pof2`, ranks `2i` (i < rem) send their vector to `2i + 1` and sit out;
/// `2i + 1` combines `a_{2i} ∘ a_{2i+1}`. The remaining `pof2` ranks get new ranks
/// `0..pof2` in rank order. Returns this rank's new rank, or `None` if it sits out.
fn fold_in(b: &mut Builder, all: Slice, tmp: Slice) -> Option<usize> {
    let (me, p) = (b.rank, b.size);
    let pof2 = pof2_floor(p);
    let rem = p - pof2;
    if me < 2 * rem {
        b.round();
        if me % 2 == 0 {
            b.send(me + 1, all);
            None
        } else {
            b.recv(me - 1, tmp);
            b.reduce(tmp, all, true);
            Some(me / 2)
        }
    } else {
        Some(me - rem)
    }
}

/// Real rank of new rank `nr` (inverse of [`fold_in`]).
fn real_rank(nr: usize, rem: usize) -> usize {
    if nr < rem { 2 * nr + 1 } else { nr + rem }
}

/// Send the result back to the ranks that sat out of the fold.
fn fold_out(b: &mut Builder, all: Slice) {
    let (me, p) = (b.rank, b.size);
    let rem = p - pof2_floor(p);
    if me < 2 * rem {
        b.round();
        if me % 2 == 0 {
            b.recv(me + 1, all);
        } else {
            b.send(me - 1, all);
        }
    }
}

/// Recursive doubling: lg pof2 exchanges of the whole vector with new rank `nr XOR
/// 2^k`; both partners compute `lower ∘ upper`, so they hold identical bits and the
/// partial results cover contiguous rank ranges in order.
fn recursive_doubling(b: &mut Builder, count: usize, es: usize) {
    let p = b.size;
    let all = Slice::elems(Buf::Recv, es, 0, count);
    let t = b.tmp(count * es);
    let tmp = Slice::elems(t, es, 0, count);
    let pof2 = pof2_floor(p);
    let rem = p - pof2;
    if let Some(nr) = fold_in(b, all, tmp) {
        let mut mask = 1;
        while mask < pof2 {
            let partner = real_rank(nr ^ mask, rem);
            b.round();
            b.recv(partner, tmp);
            b.send(partner, all);
            // Partner's partial result covers lower ranks iff its new rank is lower.
            b.reduce(tmp, all, nr & mask != 0);
            mask <<= 1;
        }
    }
    fold_out(b, all);
}

/// Rabenseifner: reduce-scatter by recursive halving (distance 1, 2, 4, …: each step
/// keeps half of the current block range, the lower half for the lower partner), then
/// allgather by recursive doubling in the reverse order. The vector is split into
/// `pof2` blocks; each block is reduced by exactly one rank.
fn rabenseifner(b: &mut Builder, count: usize, es: usize) {
    let p = b.size;
    let all = Slice::elems(Buf::Recv, es, 0, count);
    let t = b.tmp(count * es);
    let tmp = Slice::elems(t, es, 0, count);
    let pof2 = pof2_floor(p);
    let rem = p - pof2;
    // Elements of blocks [lo, hi).
    let range = |buf: Buf, lo: usize, hi: usize| {
        let (a, _) = block(count, pof2, lo);
        let z = if hi == pof2 {
            count
        } else {
            block(count, pof2, hi).0
        };
        Slice::elems(buf, es, a, z - a)
    };
    if let Some(nr) = fold_in(b, all, tmp) {
        let (mut lo, mut hi) = (0, pof2);
        let mut mask = 1;
        while mask < pof2 {
            let partner = real_rank(nr ^ mask, rem);
            let mid = (lo + hi) / 2;
            let upper = nr & mask != 0;
            let (keep, give) = if upper {
                ((mid, hi), (lo, mid))
            } else {
                ((lo, mid), (mid, hi))
            };
            b.round();
            b.recv(partner, range(t, keep.0, keep.1));
            b.send(partner, range(Buf::Recv, give.0, give.1));
            b.reduce(
                range(t, keep.0, keep.1),
                range(Buf::Recv, keep.0, keep.1),
                upper,
            );
            (lo, hi) = keep;
            mask <<= 1;
        }
        let mut mask = pof2 >> 1;
        while mask > 0 {
            let partner = real_rank(nr ^ mask, rem);
            let w = hi - lo;
            let upper = nr & mask != 0;
            let other = if upper { (lo - w, lo) } else { (hi, hi + w) };
            b.round();
            b.recv(partner, range(Buf::Recv, other.0, other.1));
            b.send(partner, range(Buf::Recv, lo, hi));
            (lo, hi) = (lo.min(other.0), hi.max(other.1));
            mask >>= 1;
        }
    }
    fold_out(b, all);
}

/// Ring: p−1 reduce-scatter steps (send block `rank − s`, receive and combine block
/// `rank − s − 1` from the left as `received ∘ own`), then p−1 allgather steps. Block
/// `c` is combined in the order `a_c, a_{c+1}, …` around the ring and finished on rank
/// `c − 1`. Commutative operations only.
fn ring(b: &mut Builder, count: usize, es: usize) {
    let (me, p) = (b.rank, b.size);
    let blk = |buf: Buf, i: usize| {
        let (o, n) = block(count, p, i);
        Slice::elems(buf, es, o, n)
    };
    let t = b.tmp(block(count, p, 0).1 * es);
    let (left, right) = ((me + p - 1) % p, (me + 1) % p);
    for s in 0..p - 1 {
        let sc = (me + p - s) % p;
        let rc = (me + 2 * p - s - 1) % p;
        let rcv = Slice::new(t, 0, blk(Buf::Recv, rc).len);
        b.round();
        b.recv(left, rcv);
        b.send(right, blk(Buf::Recv, sc));
        b.reduce(rcv, blk(Buf::Recv, rc), true);
    }
    for s in 0..p - 1 {
        let sc = (me + 1 + p - s) % p;
        let rc = (me + p - s) % p;
        b.round();
        b.recv(left, blk(Buf::Recv, rc));
        b.send(right, blk(Buf::Recv, sc));
    }
}

/// Linear allreduce of `send` into `all`: every other rank sends its vector to rank 0
/// in one round; rank 0 combines them into its own in rank order
/// (`((a_0 ∘ a_1) ∘ a_2) ∘ …`, so non-commutative operations keep rank order) and sends
/// the result to every rank ([`bcast::linear`]). Every rank but 0 waits once.
fn linear(b: &mut Builder, send: Slice, all: Slice) {
    let (me, p) = (b.rank, b.size);
    if me == 0 {
        b.copy(send, all);
        let tmps: Vec<Slice> = (1..p)
            .map(|_| Slice::new(b.tmp(all.len), 0, all.len))
            .collect();
        b.round();
        for (r, &t) in (1..p).zip(&tmps) {
            b.recv(r, t);
        }
        for &t in &tmps {
            b.reduce(t, all, false);
        }
    } else {
        b.round();
        b.send(0, send);
    }
    bcast::linear(b, all, 0);
}

/// Exchange allreduce of `send` into `all` ([`AllreduceAlgo::Exchange`]): in one round
/// every rank receives every other rank's vector into its slot `r` of a temporary of p
/// vectors and sends its own (from slot `me`, where it was copied first: in place,
/// `all` is overwritten afterwards) to every other rank in rank order; then every rank
/// combines the slots in rank order, `((a_0 ∘ a_1) ∘ a_2) ∘ …`, so the bits are the
/// same everywhere and non-commutative operations keep rank order.
fn exchange(b: &mut Builder, send: Slice, all: Slice) {
    let (me, p) = (b.rank, b.size);
    let n = all.len;
    let t = b.tmp(p * n);
    let slot = |r: usize| Slice::new(t, r * n, n);
    b.copy(send, slot(me));
    b.round();
    for r in (0..p).filter(|&r| r != me) {
        b.recv(r, slot(r));
    }
    for r in (0..p).filter(|&r| r != me) {
        b.send(r, slot(me));
    }
    b.copy(slot(0), all);
    for r in 1..p {
        b.reduce(slot(r), all, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::ops::{Op, ReduceOp};
    use crate::coll::testing::{self, concat};

    const ALGOS: [AllreduceAlgo; 6] = [
        AllreduceAlgo::RecursiveDoubling,
        AllreduceAlgo::Rabenseifner,
        AllreduceAlgo::Ring,
        AllreduceAlgo::ReduceBcast,
        AllreduceAlgo::Linear,
        AllreduceAlgo::Exchange,
    ];

    #[test]
    fn integer_sum_every_algorithm_and_size() {
        for algo in ALGOS {
            for p in 1..=9 {
                for count in [0usize, 1, 2, 7, 8, 9, 33, 1000] {
                    let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, count)).collect();
                    let mut recvs = vec![vec![0i64; count]; p];
                    let red = ReduceOp::<i64>::from(Op::Sum).reducer().unwrap();
                    testing::run(&sends, &mut recvs, Some(red), |b| build(b, algo, count, 8));
                    let want: Vec<i64> = (0..count)
                        .map(|i| sends.iter().map(|s| s[i]).sum())
                        .collect();
                    for (r, v) in recvs.iter().enumerate() {
                        assert_eq!(v, &want, "{algo} p={p} count={count} rank {r}");
                    }
                }
            }
        }
    }

    #[test]
    fn order_preserving_algorithms_keep_rank_order() {
        for algo in [
            AllreduceAlgo::RecursiveDoubling,
            AllreduceAlgo::Rabenseifner,
            AllreduceAlgo::ReduceBcast,
            AllreduceAlgo::Linear,
            AllreduceAlgo::Exchange,
        ] {
            for p in 1..=9 {
                for count in [1usize, 3, 16] {
                    let sends: Vec<Vec<[i64; 2]>> =
                        (0..p).map(|r| vec![[r as i64, r as i64]; count]).collect();
                    let mut recvs = vec![vec![[0i64; 2]; count]; p];
                    testing::run(&sends, &mut recvs, Some(concat().reducer().unwrap()), |b| {
                        build(b, algo, count, 16)
                    });
                    for v in &recvs {
                        assert_eq!(
                            v,
                            &vec![[0, p as i64 - 1]; count],
                            "{algo} p={p} count={count}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn float_results_are_bitwise_identical_on_every_rank() {
        for algo in ALGOS {
            for p in [2, 3, 5, 6, 8] {
                let count = 37;
                let sends: Vec<Vec<f32>> = (0..p)
                    .map(|r| {
                        (0..count)
                            .map(|i| ((r * 31 + i * 17) as f32).sin() * 1e3 / (i + 1) as f32)
                            .collect()
                    })
                    .collect();
                let mut recvs = vec![vec![0f32; count]; p];
                let red = ReduceOp::<f32>::from(Op::Sum).reducer().unwrap();
                testing::run(&sends, &mut recvs, Some(red), |b| build(b, algo, count, 4));
                for v in &recvs[1..] {
                    let bits = |x: &Vec<f32>| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(v), bits(&recvs[0]), "{algo} p={p}");
                }
            }
        }
    }

    #[test]
    fn message_counts_match_the_algorithms() {
        // p = 8, power of two: rd 8·3, rabenseifner 8·6, ring 8·14.
        let count = 64;
        let p = 8;
        for (algo, per_rank) in [
            (AllreduceAlgo::RecursiveDoubling, 3),
            (AllreduceAlgo::Rabenseifner, 6),
            (AllreduceAlgo::Ring, 14),
        ] {
            let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, count)).collect();
            let mut recvs = vec![vec![0i64; count]; p];
            let red = ReduceOp::<i64>::from(Op::Sum).reducer().unwrap();
            let m = testing::run(&sends, &mut recvs, Some(red), |b| build(b, algo, count, 8));
            assert_eq!(m, p * per_rank, "{algo}");
        }
        // Linear: p − 1 vectors into rank 0, p − 1 results out of it.
        let sends: Vec<Vec<i64>> = (0..p).map(|r| testing::values(r, count)).collect();
        let mut recvs = vec![vec![0i64; count]; p];
        let red = ReduceOp::<i64>::from(Op::Sum).reducer().unwrap();
        let m = testing::run(&sends, &mut recvs, Some(red), |b| {
            build(b, AllreduceAlgo::Linear, count, 8)
        });
        assert_eq!(m, 2 * (p - 1), "linear");
        // Exchange: every rank sends its vector to each other rank.
        let mut recvs = vec![vec![0i64; count]; p];
        let red = ReduceOp::<i64>::from(Op::Sum).reducer().unwrap();
        let m = testing::run(&sends, &mut recvs, Some(red), |b| {
            build(b, AllreduceAlgo::Exchange, count, 8)
        });
        assert_eq!(m, p * (p - 1), "exchange");
    }

    #[test]
    fn in_place_gives_the_out_of_place_bits_every_algorithm_and_size() {
        for algo in ALGOS {
            for p in 1..=9 {
                for count in [0usize, 1, 2, 7, 8, 9, 33, 1000] {
                    let sends: Vec<Vec<f32>> = (0..p).map(|r| testing::floats(r, count)).collect();
                    let red = || ReduceOp::<f32>::from(Op::Sum).reducer().unwrap();
                    let mut outs = vec![vec![0f32; count]; p];
                    testing::run(&sends, &mut outs, Some(red()), |b| build(b, algo, count, 4));
                    let mut bufs = sends.clone();
                    testing::run_in_place(&mut bufs, Some(red()), |b| {
                        build_from(b, algo, count, 4, Buf::Recv)
                    });
                    for r in 0..p {
                        assert_eq!(
                            testing::bits(&bufs[r]),
                            testing::bits(&outs[r]),
                            "{algo} p={p} count={count} rank {r}"
                        );
                    }
                    if p > 1 && count > 0 {
                        // Not just the input: the sum really happened.
                        assert_ne!(testing::bits(&bufs[0]), testing::bits(&sends[0]));
                    }
                }
            }
        }
    }

    #[test]
    fn in_place_keeps_rank_order() {
        for algo in [
            AllreduceAlgo::RecursiveDoubling,
            AllreduceAlgo::Rabenseifner,
            AllreduceAlgo::ReduceBcast,
            AllreduceAlgo::Linear,
            AllreduceAlgo::Exchange,
        ] {
            for p in 1..=9 {
                for count in [1usize, 3, 16] {
                    let mut bufs: Vec<Vec<[i64; 2]>> =
                        (0..p).map(|r| vec![[r as i64, r as i64]; count]).collect();
                    testing::run_in_place(&mut bufs, Some(concat().reducer().unwrap()), |b| {
                        build_from(b, algo, count, 16, Buf::Recv)
                    });
                    for v in &bufs {
                        assert_eq!(v, &vec![[0, p as i64 - 1]; count], "{algo} p={p}");
                    }
                }
            }
        }
    }
}
