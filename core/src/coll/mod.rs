//! Collective operations on host buffers (MPI 4.1 chapter 6).
//!
//! Every collective is a method of [`Communicator`] in a blocking form (`allreduce`)
//! and a nonblocking one (`iallreduce`, MPI 4.1 §6.12) returning a [`CollRequest`] that
//! borrows the buffers until it completes. All ranks of the communicator must call the
//! same collectives in the same order (blocking and nonblocking alike; a blocking call
//! matches only a blocking one, MPI 4.1 §6.12), with matching arguments; `RANKWIRE_COLL_CHECK=1` verifies that ([`check`](self#mismatch-detection)).
//!
//! The reductions, allgather, reduce_scatter_block and the scans also have in-place
//! forms (`allreduce_in_place`, …; MPI_IN_PLACE): the same schedules with the input
//! read from the receive buffer, so the copy of the send buffer into the receive buffer
//! that most algorithms start with is skipped, and the results are bitwise those of
//! the out-of-place forms on the same inputs.
//!
//! # Design
//! - **Schedules.** An algorithm appends rounds of local steps (copy, reduce) and
//!   transfers to a schedule (`sched.rs`, after libNBC); one description serves the
//!   blocking call and the nonblocking one. A call builds its schedule, posts the first
//!   round at once, and later rounds start when the previous round's transfers have
//!   completed.
//! - **Progress.** A running nonblocking collective's schedule sits in the runtime's
//!   list of active schedules (`crate::runtime`), which every completion call
//!   advances, oldest first: `wait`/`test` on any request, point-to-point or
//!   collective, `wait_any`/`wait_all`/`test_all`, the drop of a pending request,
//!   probes, and every blocking call. So waiting in any order cannot deadlock.
//! - **Contexts and tags.** Collective traffic uses the communicator's collective
//!   context (`ctx | 2^31`, see [`crate::group`]), so it never matches user receives.
//!   Each call takes the communicator's next call number `seq`; its messages carry tag
//!   `(seq mod 2^28) · 4 + phase` (phase 0: algorithm, 1–3: the check's exchanges), so
//!   the messages of different calls, even of overlapping nonblocking ones, never
//!   match each other.
//! - **Selection.** Each call picks an algorithm from an α–β–γ cost model, unless
//!   `RANKWIRE_<COLLECTIVE>_ALGO` forces one, or some node of the job runs more ranks
//!   than CPUs: small barriers, broadcasts, all-to-alls and allreduces then take the
//!   linear or (barrier, allreduce, on few ranks) the exchange algorithms ([`select`]).
//!
//! # Algorithms
//! | collective | algorithms (`RANKWIRE_*_ALGO` name) | source |
//! |---|---|---|
//! | barrier | `dissemination`: butterfly (power-of-two sizes), dissemination (others); `linear` (fan-in, fan-out through rank 0); `exchange` (zero-byte messages between every pair, one round) | Brooks 1986; Hensgen, Finkel, Manber 1988; Open MPI `basic_linear` |
//! | bcast | `binomial`, `scatter_allgather`, `linear` | MPICH; Barnett et al. 1994 / van de Geijn |
//! | reduce | `binomial` | MPICH |
//! | allreduce | `recursive_doubling`, `rabenseifner`, `ring`, `reduce_bcast`, `linear`, `exchange` (every rank's vector to every rank, one round); blocking, above 64 KiB, one node: single copy (`single_copy.rs`) | Thakur et al. 2005; Rabenseifner 2004; Patarasuk & Yuan 2009; Jain et al. 2018 |
//! | gather, scatter | `linear`, `binomial` | MPICH |
//! | gatherv, scatterv | linear | MPICH |
//! | allgather | `ring`, `bruck`, `recursive_doubling` (2^k ranks) | Bruck et al. 1997; Thakur et al. 2005 |
//! | allgatherv | ring | Thakur et al. 2005 |
//! | alltoall, alltoallv | `pairwise`, `linear` | Thakur et al. 2005 §4.5 |
//! | reduce_scatter(_block) | `ring`, `reduce_scatterv` | Patarasuk & Yuan 2009; MPICH |
//! | scan, exscan | recursive doubling | MPICH `MPIR_Scan_intra_recursive_doubling` |
//!
//! Non-power-of-two sizes: recursive doubling and Rabenseifner fold the first
//! `2·(p − 2^⌊lg p⌋)` ranks in pairs before and out after (Thakur et al. §4.4); the
//! others work for any size.
//!
//! # Reduction order and floating point
//! Every algorithm combines contributions in a fixed bracketing that depends only on
//! the communicator size, the count and the algorithm, never on timing, so a result is
//! reproducible run to run. The automatic choice of algorithm also depends on the most
//! ranks per CPU of any node of the job (the linear algorithms where ranks share CPUs,
//! `select.rs`, `CollConfig::barrier`): the same program run with other CPU counts or
//! affinities may round differently; a forced `RANKWIRE_ALLREDUCE_ALGO` fixes the
//! bracketing everywhere. Operand order is kept (`a_i` left of `a_j` for `i < j`) by
//! recursive doubling, Rabenseifner, single copy, binomial reduce, `reduce_bcast`,
//! linear, exchange, `reduce_scatterv` and scan; ring algorithms combine block `b` starting at rank `b`
//! (allreduce) or `b + 1` (reduce-scatter) and go round the ring, so they serve only
//! commutative operations (every built-in one; a [`UserOp`] declared
//! non-commutative gets an order-keeping algorithm instead).
//!
//! Allreduce results are bitwise identical on every rank: in ring, Rabenseifner and
//! single copy each block is reduced by exactly one rank and copied to the others; in recursive
//! doubling both partners of an exchange evaluate the same expression (lower ranks'
//! partial result on the left) on the same bits; `reduce_bcast` and linear broadcast
//! rank 0's result; in exchange every rank evaluates `((a_0 ∘ a_1) ∘ a_2) ∘ …` on the
//! same p vectors. Different algorithms may round differently from each other.
//!
//! # Mismatch detection
//! With `RANKWIRE_COLL_CHECK=1` (read at communicator creation) every collective first
//! exchanges small descriptors on its own tags and fails with
//! [`crate::Error::Collective`] on every rank, naming the ranks and the difference,
//! instead of hanging or corrupting memory; see `check.rs` for what is compared.
//! Without it, a length mismatch that reaches a receive still fails the call with
//! [`crate::Error::Collective`] rather than truncating, but other mismatches can hang.
//!
//! [`UserOp`]: ops::UserOp

pub mod ops;
pub mod select;

mod allgather;
mod allreduce;
mod alltoall;
mod barrier;
mod bcast;
mod check;
pub mod device;
mod device_channels;
pub use device_channels::DeviceChannels;
pub(crate) mod device_hier;
pub(crate) mod device_peer;
mod direct;
mod gather;
mod peer_setup;
mod reduce;
mod reduce_scatter;
mod scan;
pub(crate) mod sched;
mod single_copy;

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::comm::{COLL_CTX_BIT, CommState, Communicator};
use crate::engine::Engine;
use crate::error::Result;
use crate::runtime::Inner;

pub(crate) use check::CollKind;
use check::Spec;
use sched::{Builder, CommCtx, Exec, UserBufs};

/// Tag of phase 0 of collective call `seq` (see the module doc).
pub(crate) fn tag_base(seq: u64) -> i32 {
    ((seq & 0x0FFF_FFFF) << 2) as i32
}

/// A pending nonblocking collective (MPI_Request of `MPI_Ibcast` & co.). Borrows the
/// call's buffers for `'a`.
///
/// Complete it with [`CollRequest::wait`] or [`CollRequest::test`]. Dropping an
/// unfinished request waits for it (a collective cannot be withdrawn once peers may
/// depend on it). Do not `mem::forget` one: the runtime would keep using its buffers.
#[must_use = "a collective request must be waited for or tested to completion"]
pub struct CollRequest<'a> {
    inner: Arc<Inner>,
    exec: Arc<Mutex<Exec>>,
    /// The communicator, kept alive while its collective runs: its context id must not
    /// be released and reused before the schedule has posted its last receive.
    _comm: Arc<CommState>,
    done: bool,
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> CollRequest<'a> {
    fn start(inner: Arc<Inner>, comm: Arc<CommState>, exec: Exec) -> CollRequest<'a> {
        let exec = Arc::new(Mutex::new(exec));
        {
            let mut e = inner.lock();
            lock(&exec).advance(&mut *e);
            inner.progress(&mut e);
        }
        if !lock(&exec).is_finished() {
            inner.schedules.set(&exec, true);
        }
        CollRequest {
            inner,
            exec,
            _comm: comm,
            done: false,
            _buf: PhantomData,
        }
    }

    /// Block until the collective has completed on this rank (MPI_Wait).
    ///
    /// # Errors
    /// [`crate::Error::Collective`] if the ranks called it inconsistently (detected
    /// always for lengths that reach a receive, otherwise with `RANKWIRE_COLL_CHECK=1`);
    /// [`crate::Error::Connection`] if a peer died.
    pub fn wait(mut self) -> Result<()> {
        self.done = true;
        // Its own wait loop advances it; the list is for the others'.
        self.inner.schedules.set(&self.exec, false);
        wait_exec(&self.inner, &self.exec)
    }

    /// Complete the collective if it is done, without blocking (MPI_Test). Returns the
    /// request back when it is still pending.
    ///
    /// # Errors
    /// The outer `Result` is always `Ok`; the inner one is the outcome, as for
    /// [`CollRequest::wait`].
    pub fn test(mut self) -> std::result::Result<Result<()>, Self> {
        let r = {
            let mut e = self.inner.lock();
            poll(&self.inner, &mut e, &self.exec)
        };
        match r {
            Some(r) => {
                self.done = true;
                self.inner.schedules.set(&self.exec, false);
                Ok(r)
            }
            None => Err(self),
        }
    }

    /// Whether the collective has completed on this rank (without consuming the
    /// request).
    pub fn is_complete(&self) -> bool {
        let mut e = self.inner.lock();
        self.inner.progress(&mut e);
        lock(&self.exec).is_finished()
    }
}

impl Drop for CollRequest<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.inner.schedules.set(&self.exec, false);
            let _ = wait_exec(&self.inner, &self.exec);
        }
    }
}

/// Wait for every request, in order (MPI_Waitall on collective requests).
///
/// # Errors
/// The first failure, after all have completed.
pub fn wait_all_coll(reqs: Vec<CollRequest<'_>>) -> Result<()> {
    let mut first = Ok(());
    for r in reqs {
        let res = r.wait();
        if first.is_ok() {
            first = res;
        }
    }
    first
}

fn lock(m: &Mutex<Exec>) -> MutexGuard<'_, Exec> {
    // A panic in a user reduction leaves the schedule as consistent as its own
    // bookkeeping; keep going rather than cascade.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One progress round of the runtime, then `exec` (taken out of the active list by
/// its owner, so advanced here); its outcome if done.
fn poll(inner: &Inner, e: &mut Engine, exec: &Mutex<Exec>) -> Option<Result<()>> {
    inner.progress(e);
    if lock(exec).advance(e) {
        // Push out what the new round posted.
        e.progress();
    }
    lock(exec).take_result()
}

fn wait_exec(inner: &Inner, exec: &Mutex<Exec>) -> Result<()> {
    // The wait loop advances the other schedules in each round.
    inner.wait_for(|e| {
        let mut x = lock(exec);
        x.advance(e);
        x.take_result()
    })
}

impl Communicator {
    /// Start a collective: take the next call number, prepend the check phases if
    /// enabled, let `build` append the algorithm, post the first round.
    ///
    /// # Errors
    /// `spec.invalid` when checking is off (with checking on, the check reports it on
    /// every rank); [`crate::Error::Usage`] after finalize.
    pub(crate) fn start_coll<'a>(
        &self,
        spec: Spec,
        user: UserBufs,
        build: impl FnOnce(&mut Builder),
    ) -> Result<CollRequest<'a>> {
        self.start_coll_in(spec, user, false, build)
    }

    /// [`Communicator::start_coll`] for buffers on a device: the algorithm's
    /// temporaries are device memory (the check's stay on the host).
    ///
    /// # Errors
    /// As [`Communicator::start_coll`].
    pub(crate) fn start_coll_device<'a>(
        &self,
        spec: Spec,
        user: UserBufs,
        build: impl FnOnce(&mut Builder),
    ) -> Result<CollRequest<'a>> {
        self.start_coll_in(spec, user, true, build)
    }

    fn start_coll_in<'a>(
        &self,
        spec: Spec,
        user: UserBufs,
        device: bool,
        build: impl FnOnce(&mut Builder),
    ) -> Result<CollRequest<'a>> {
        self.inner.check_live()?;
        let seq = self.st.next_seq();
        let check = self.st.cfg.check;
        if !check && let Some(e) = spec.invalid {
            return Err(e);
        }
        let mut b = Builder::new(self.rank(), self.size());
        if check {
            check::build(&mut b, &spec);
        }
        if spec.invalid.is_none() {
            b.set_device_tmps(device);
            build(&mut b);
        }
        let ctx = CommCtx {
            group: self.st.group.clone(),
            ctx: self.st.ctx | COLL_CTX_BIT,
            tag_base: tag_base(seq),
        };
        Ok(CollRequest::start(
            self.inner.clone(),
            self.st.clone(),
            b.finish(spec.kind.name(), user, ctx),
        ))
    }
}

/// Checks shared by the API functions.
pub(crate) mod args {
    use crate::error::Error;

    /// `Some(error)` if `root` is not a rank of a communicator of `size`.
    pub(crate) fn root(what: &str, root: usize, size: usize) -> Option<Error> {
        (root >= size).then(|| {
            Error::usage(format!(
                "{what}: root {root} is out of range for a communicator of size {size}"
            ))
        })
    }

    /// `Some(error)` unless `got == want` (lengths in elements).
    pub(crate) fn len(what: &str, buf: &str, got: usize, want: usize) -> Option<Error> {
        (got != want).then(|| {
            Error::usage(format!(
                "{what}: {buf} holds {got} elements but {want} are needed"
            ))
        })
    }

    /// `Some(error)` unless `got` (elements) is a multiple of the communicator `size`
    /// (the in-place forms whose buffer holds one block per rank).
    pub(crate) fn multiple(what: &str, buf: &str, got: usize, size: usize) -> Option<Error> {
        (!got.is_multiple_of(size.max(1))).then(|| {
            Error::usage(format!(
                "{what}: {buf} holds {got} elements, not a multiple of the communicator \
                 size {size} (one block of equal length per rank is needed); fix: pass a \
                 buffer of size × block elements, the same block length on every rank"
            ))
        })
    }

    /// `Some(error)` unless `counts`/`displs` have `size` entries and each block lies in
    /// a buffer of `len` elements.
    pub(crate) fn layout(
        what: &str,
        counts: &[usize],
        displs: &[usize],
        size: usize,
        len: usize,
    ) -> Option<Error> {
        if counts.len() != size || displs.len() != size {
            return Some(Error::usage(format!(
                "{what}: counts and displacements need {size} entries (one per rank), got {} and {}",
                counts.len(),
                displs.len()
            )));
        }
        for (i, (&c, &d)) in counts.iter().zip(displs).enumerate() {
            if d.checked_add(c).is_none_or(|end| end > len) {
                return Some(Error::usage(format!(
                    "{what}: block {i} (displacement {d}, count {c}) lies outside the \
                     {len}-element buffer"
                )));
            }
        }
        None
    }

    /// First error of several.
    pub(crate) fn first(errs: impl IntoIterator<Item = Option<Error>>) -> Option<Error> {
        errs.into_iter().flatten().next()
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn a_block_length_error_carries_its_own_fix() {
            // "per rank" in the message must not draw the fix about ranks.
            let e = super::multiple("allgather_in_place", "the buffer", 10, 3)
                .expect("10 is no multiple of 3")
                .to_string();
            assert_eq!(e.matches("fix:").count(), 1, "{e}");
            assert!(e.contains("fix: pass a buffer of size × block"), "{e}");
            assert!(super::multiple("x", "b", 9, 3).is_none());
        }
    }
}

/// In-memory runs of whole algorithms for the unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use bytemuck::Pod;

    use super::ops::{ReduceOp, Reducer, UserOp};
    use super::sched::{Builder, UserBufs, sim};

    /// Build every rank's schedule with `build` (which reads `b.rank`), run them in
    /// memory, and return the number of messages. Panics if a rank fails.
    pub(crate) fn run<S: Pod, R: Pod>(
        sends: &[Vec<S>],
        recvs: &mut [Vec<R>],
        reducer: Option<Reducer>,
        build: impl Fn(&mut Builder),
    ) -> usize {
        let p = sends.len();
        let mut execs: Vec<_> = sends
            .iter()
            .zip(recvs.iter_mut())
            .enumerate()
            .map(|(r, (s, rv))| {
                let mut b = Builder::new(r, p);
                build(&mut b);
                b.finish(
                    "test",
                    UserBufs::new(
                        bytemuck::cast_slice(s),
                        bytemuck::cast_slice_mut(rv),
                        reducer.clone(),
                    ),
                    sim::ctx(p),
                )
            })
            .collect();
        let (res, msgs) = sim::run(&mut execs);
        for (r, x) in res.into_iter().enumerate() {
            if let Err(e) = x {
                panic!("rank {r} of {p} failed: {e}");
            }
        }
        msgs
    }

    /// Non-commutative test operation on (first, last) digit pairs: concatenation of
    /// ranges, `(a, b) ∘ (c, d) = (a, d)`, valid only if `b + 1 == c`; otherwise
    /// marks the result bad with -1.
    pub(crate) fn concat() -> ReduceOp<[i64; 2]> {
        UserOp::new(
            |inv: &[[i64; 2]], io: &mut [[i64; 2]]| {
                for (l, r) in inv.iter().zip(io.iter_mut()) {
                    *r = if l[1] + 1 == r[0] && l[0] >= 0 && r[1] >= 0 {
                        [l[0], r[1]]
                    } else {
                        [-1, -1]
                    };
                }
            },
            false,
        )
        .into()
    }

    /// [`run`] of an in-place form: `bufs` are every rank's input and output (the
    /// receive buffer), the send buffers are empty.
    pub(crate) fn run_in_place<R: Pod>(
        bufs: &mut [Vec<R>],
        reducer: Option<Reducer>,
        build: impl Fn(&mut Builder),
    ) -> usize {
        let sends = vec![Vec::<u8>::new(); bufs.len()];
        run(&sends, bufs, reducer, build)
    }

    /// Deterministic non-integer test values for `rank`, `count` elements, whose sums
    /// round differently in different orders (for bitwise comparisons).
    pub(crate) fn floats(rank: usize, count: usize) -> Vec<f32> {
        (0..count)
            .map(|i| ((rank * 31 + i * 17) as f32).sin() * 1e3 / (i + 1) as f32)
            .collect()
    }

    /// The bits of `v`.
    pub(crate) fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|f| f.to_bits()).collect()
    }

    /// Deterministic test values for `rank`, `count` elements.
    pub(crate) fn values(rank: usize, count: usize) -> Vec<i64> {
        (0..count)
            .map(|i| ((rank * 1_000_003 + i * 7919) % 2003) as i64 - 1000)
            .collect()
    }
}
