//! Barrier (MPI 4.1 §6.3): dissemination algorithm.

use crate::coll::check::Spec;
use crate::coll::sched::{Buf, Builder, Slice, UserBufs};
use crate::coll::{CollKind, CollRequest};
use crate::comm::Communicator;
use crate::error::Result;

impl Communicator {
    /// Barrier: returns once every rank of the communicator has entered it
    /// (MPI_Barrier, MPI 4.1 §6.3).
    ///
    /// Dissemination algorithm (D. Hensgen, R. Finkel, U. Manber, "Two algorithms for
    /// barrier synchronization", IJPP 17(1), 1988): ⌈lg p⌉ rounds; in round `k` each
    /// rank sends a zero-byte message to `rank + 2^k` and waits for one from
    /// `rank − 2^k` (mod p). Works for any size.
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

/// Dissemination barrier.
pub(crate) fn build(b: &mut Builder) {
    let (me, n) = (b.rank, b.size);
    let empty_in = Slice::new(Buf::Recv, 0, 0);
    let empty_out = Slice::new(Buf::Send, 0, 0);
    let mut dist = 1;
    while dist < n {
        b.round();
        b.recv((me + n - dist) % n, empty_in);
        b.send((me + dist) % n, empty_out);
        dist *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::testing;

    #[test]
    fn dissemination_sends_p_times_ceil_lg_p_messages() {
        for p in 1..=9usize {
            let sends = vec![Vec::<u8>::new(); p];
            let mut recvs = vec![Vec::<u8>::new(); p];
            let msgs = testing::run(&sends, &mut recvs, None, build);
            let lg = p.next_power_of_two().trailing_zeros() as usize;
            assert_eq!(msgs, p * lg, "p={p}");
        }
    }
}
