//! Barrier (MPI 4.1 §6.3): pairwise exchange for power-of-two sizes, dissemination
//! otherwise.

use crate::coll::check::Spec;
use crate::coll::sched::{Buf, Builder, Slice, UserBufs};
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
    ///
    /// # Errors
    /// [`crate::Error::Connection`] if a peer died; [`crate::Error::Collective`] on a
    /// mismatch found by `RANKWIRE_COLL_CHECK`.
    pub fn barrier(&self) -> Result<()> {
        if let Some(r) = self.barrier_direct() {
            return r;
        }
        self.ibarrier()?.wait()
    }

    /// Nonblocking barrier (MPI_Ibarrier, MPI 4.1 §6.12.1): completes once every rank
    /// has started it.
    ///
    /// # Errors
    /// [`crate::Error::Usage`] after finalize.
    pub fn ibarrier(&self) -> Result<CollRequest<'static>> {
        let spec = Spec::uniform(CollKind::Barrier, None, 0, 0);
        self.start_coll(spec, UserBufs::empty(), build)
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

/// The barrier's schedule: one round per power of two below `n`.
pub(crate) fn build(b: &mut Builder) {
    let (me, n) = (b.rank, b.size);
    let empty_in = Slice::new(Buf::Recv, 0, 0);
    let empty_out = Slice::new(Buf::Send, 0, 0);
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
            let msgs = testing::run(&sends, &mut recvs, None, build);
            let lg = p.next_power_of_two().trailing_zeros() as usize;
            assert_eq!(msgs, p * lg, "p={p}");
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
