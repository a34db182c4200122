//! Barrier (MPI 4.1 §6.3): pairwise exchange for power-of-two sizes, dissemination
//! otherwise; linear (fan-in to rank 0, fan-out) or exchange (every rank to every rank)
//! where ranks share cores.

use crate::coll::check::Spec;
use crate::coll::sched::{Buf, Builder, Slice, UserBufs};
use crate::coll::select::{Algo, BarrierAlgo};
use crate::coll::{CollKind, CollRequest};
use crate::comm::Communicator;
use crate::error::Result;

impl Communicator {
    /// Barrier: returns once every rank of the communicator has entered it
    /// (MPI_Barrier, MPI 4.1 §6.3).
    ///
    /// ⌈lg p⌉ rounds of zero-byte messages. For a power-of-two size, pairwise
    /// exchange (the butterfly barrier, E. D. Brooks, "The butterfly barrier", IJPP
    /// 15(4), 1986): in round `k` each rank exchanges with `rank XOR 2^k`, so the two
    /// ranks of a pair can finish a round together, which matters when ranks share
    /// cores. Other sizes use the dissemination algorithm (D. Hensgen, R. Finkel,
    /// U. Manber, "Two algorithms for barrier synchronization", IJPP 17(1), 1988): in
    /// round `k` each rank sends to `rank + 2^k` and waits for `rank − 2^k` (mod p).
    /// Where some node of the job runs more ranks than it has CPUs, 3 ranks or more (up to
    /// a limit, docs/design.md, "Communicators and collectives") use the linear barrier
    /// instead: every rank sends to rank 0 and waits for its answer,
    /// so each waits once (see [`BarrierAlgo`]); 3 to 5 ranks below 4 per CPU use the
    /// exchange barrier, one round of zero-byte messages between every pair.
    /// `RANKWIRE_BARRIER_ALGO` overrides.
    ///
    /// # Errors
    /// [`crate::Error::Connection`] if a peer died; [`crate::Error::Collective`] on a
    /// mismatch found by `RANKWIRE_COLL_CHECK`; [`crate::Error::Usage`] for an invalid
    /// `RANKWIRE_BARRIER_ALGO`.
    pub fn barrier(&self) -> Result<()> {
        let algo = self.st.cfg.barrier(self.size())?;
        if let Some(r) = self.barrier_direct(algo) {
            return r;
        }
        self.ibarrier()?.wait()
    }

    /// Nonblocking barrier (MPI_Ibarrier, MPI 4.1 §6.12.1): completes once every rank
    /// has started it.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] after finalize, or for an invalid `RANKWIRE_BARRIER_ALGO`.
    pub fn ibarrier(&self) -> Result<CollRequest<'static>> {
        let algo = self.st.cfg.barrier(self.size())?;
        let mut spec = Spec::uniform(CollKind::Barrier, None, 0, 0);
        spec.algo = algo.code();
        self.start_coll(spec, UserBufs::empty(), |b| build(b, algo))
    }
}

/// Peers of round `dist` (= 2^k) for rank `me` of `n`: (send to, receive from).
/// Butterfly for a power-of-two `n`, dissemination otherwise (see
/// [`Communicator::barrier`]). `barrier_direct` runs the same rounds.
pub(crate) fn round_peers(me: usize, n: usize, dist: usize) -> (usize, usize) {
    if n.is_power_of_two() {
        (me ^ dist, me ^ dist)
    } else {
        ((me + dist) % n, (me + n - dist) % n)
    }
}

/// The barrier's schedule: for [`BarrierAlgo::Dissemination`] one round per power of
/// two below `n`; for [`BarrierAlgo::Linear`] a fan-in to rank 0, then (a later round
/// of rank 0, after it heard from every rank) a fan-out from it; for
/// [`BarrierAlgo::Exchange`] one round of zero-byte messages between every pair.
pub(crate) fn build(b: &mut Builder, algo: BarrierAlgo) {
    let (me, n) = (b.rank, b.size);
    let empty_in = Slice::new(Buf::Recv, 0, 0);
    let empty_out = Slice::new(Buf::Send, 0, 0);
    if algo == BarrierAlgo::Linear {
        if n == 1 {
            return;
        }
        if me == 0 {
            b.round();
            for r in 1..n {
                b.recv(r, empty_in);
            }
            b.round();
            for r in 1..n {
                b.send(r, empty_out);
            }
        } else {
            b.round();
            b.send(0, empty_out);
            b.recv(0, empty_in);
        }
        return;
    }
    if algo == BarrierAlgo::Exchange {
        // One round: a zero-byte message from every other rank, one to each.
        b.round();
        for r in (0..n).filter(|&r| r != me) {
            b.recv(r, empty_in);
        }
        for r in (0..n).filter(|&r| r != me) {
            b.send(r, empty_out);
        }
        return;
    }
    let mut dist = 1;
    while dist < n {
        let (to, from) = round_peers(me, n, dist);
        b.round();
        b.recv(from, empty_in);
        b.send(to, empty_out);
        dist *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::testing;

    #[test]
    fn barrier_sends_p_times_ceil_lg_p_messages() {
        for p in 1..=9usize {
            let sends = vec![Vec::<u8>::new(); p];
            let mut recvs = vec![Vec::<u8>::new(); p];
            let msgs = testing::run(&sends, &mut recvs, None, |b| {
                build(b, BarrierAlgo::Dissemination)
            });
            let lg = p.next_power_of_two().trailing_zeros() as usize;
            assert_eq!(msgs, p * lg, "p={p}");
        }
    }

    /// The linear barrier: p − 1 messages into rank 0 and p − 1 out of it, and the
    /// schedules of all ranks complete together (the simulator finds no deadlock).
    #[test]
    fn linear_barrier_sends_2_p_minus_1_messages_through_rank_0() {
        for p in 1..=9usize {
            let sends = vec![Vec::<u8>::new(); p];
            let mut recvs = vec![Vec::<u8>::new(); p];
            let msgs = testing::run(&sends, &mut recvs, None, |b| build(b, BarrierAlgo::Linear));
            assert_eq!(msgs, 2 * p.saturating_sub(1), "p={p}");
        }
    }

    /// The exchange barrier: p − 1 messages from every rank, one round, and the
    /// schedules of all ranks complete together.
    #[test]
    fn exchange_barrier_sends_p_times_p_minus_1_messages() {
        for p in 1..=9usize {
            let sends = vec![Vec::<u8>::new(); p];
            let mut recvs = vec![Vec::<u8>::new(); p];
            let msgs = testing::run(&sends, &mut recvs, None, |b| {
                build(b, BarrierAlgo::Exchange)
            });
            assert_eq!(msgs, p * p.saturating_sub(1), "p={p}");
        }
    }

    /// A barrier: after the last round every rank has heard, through some chain of
    /// messages, from every rank; and each send has its matching receive in the same
    /// round.
    #[test]
    fn every_rank_hears_from_every_rank_and_sends_match_receives() {
        for n in 1..=17usize {
            let mut knows: Vec<u64> = (0..n).map(|r| 1u64 << r).collect();
            let mut dist = 1;
            while dist < n {
                for me in 0..n {
                    let (to, _) = round_peers(me, n, dist);
                    assert_eq!(round_peers(to, n, dist).1, me, "n={n} dist={dist}");
                }
                knows = (0..n)
                    .map(|me| knows[me] | knows[round_peers(me, n, dist).1])
                    .collect();
                dist *= 2;
            }
            let all = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            assert!(knows.iter().all(|&k| k == all), "n={n}: {knows:?}");
        }
    }
}
