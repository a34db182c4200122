//! Blocking small collectives run straight on the engine, without a schedule.
//!
//! A schedule (`sched.rs`) costs a few allocations, a shared lock and a registration in
//! the list of active collectives per call: little next to a large message, most of
//! the time of an 8-byte allreduce, broadcast, all-to-all or barrier. The blocking
//! forms of those four take this path instead when it applies (host buffers,
//! `RANKWIRE_COLL_CHECK` off, for allreduce the recursive-doubling algorithm the cost
//! model picks for small vectors, or the linear or exchange one of oversubscribed jobs
//! (exchange up to [`MAX_DIRECT_EXCHANGE_RANKS`] ranks), for
//! broadcast the binomial tree it picks for small messages, or the linear one, for
//! all-to-all 2 ranks and blocks up to [`MAX_DIRECT_ALLTOALL_BLOCK_BYTES`]; the barrier
//! either way).
//!
//! The path sends exactly the messages of the schedule it replaces (same peers, same
//! order, same sizes, same collective context and tag `tag_base(seq)`), and combines in
//! the same order, so a rank on this path and a rank running the schedule (a
//! nonblocking call, or a rank that has nonblocking collectives in flight) still meet,
//! and results stay bitwise identical on every rank. It waits in the runtime's wait
//! loop, which advances the active nonblocking collectives, as every blocking call
//! does.
//!
//! Each step is an exchange: the send is handed to the transport at once (an eager
//! message completes there), the receive takes its message straight from the ring
//! when nothing else is pending ([`crate::engine::Engine::recv_direct`]), else it is
//! posted and waited for.

use super::select::{AllreduceAlgo, BarrierAlgo, BcastAlgo, pof2_floor};
use super::tag_base;
use crate::comm::{COLL_CTX_BIT, Communicator};
use crate::engine::SendStart;
use crate::error::{Error, MatchError, Result};
use crate::matching::Pattern;
use crate::protocol::{RawBuf, Status};

/// `dst = src ∘ dst` (`true`: `src` on the left) or `dst = dst ∘ src` on byte slices
/// of whole elements ([`super::ops::ReduceOp::apply_bytes`]).
pub(crate) type Combine<'a> = &'a dyn Fn(&[u8], &mut [u8], bool);

/// Largest vector (bytes) an allreduce takes this path for (above it the message costs
/// dominate anyway, and the cost model moves to other algorithms).
pub(crate) const MAX_DIRECT_ALLREDUCE_BYTES: usize = 64 << 10;
/// Largest broadcast (bytes) this path takes: its sends go one after the other (each
/// waited for before the next), which costs nothing while they are eager (8 KiB: at 4
/// ranks on 2 cores 16 and 32 KiB were slower this way than with the schedule).
pub(crate) const MAX_DIRECT_BCAST_BYTES: usize = 8 << 10;
/// Largest all-to-all block (bytes per pair) this path takes, on 2 ranks (one
/// exchange).
pub(crate) const MAX_DIRECT_ALLTOALL_BLOCK_BYTES: usize = 8 << 10;
/// Largest communicator an exchange allreduce takes this path on (the schedule
/// beyond: this path keeps one request per rank on the stack).
pub(crate) const MAX_DIRECT_EXCHANGE_RANKS: usize = 16;
/// Vectors up to this many bytes use a temporary on the stack.
const STACK_TMP_BYTES: usize = 4096;

/// Vectors up to this many bytes use the small temporary on the stack (zeroing the
/// 4 KiB one on every call took about 1 % of a 4-rank 8-byte allreduce's time on 2
/// cores).
const SMALL_TMP_BYTES: usize = 256;

/// Room for one temporary: a 256-byte or a 4 KiB array on the stack, else a vector on
/// the heap (allocated and zeroed on every call: exchange allreduces of more than 4 KiB
/// in all, e.g. 6 ranks × 1 KiB). [`Scratch::get`] zeroes the array or vector it uses.
#[derive(Default)]
struct Scratch {
    small: Option<[u64; SMALL_TMP_BYTES / 8]>,
    large: Option<[u64; STACK_TMP_BYTES / 8]>,
    heap: Vec<u64>,
}

impl Scratch {
    /// A zeroed temporary of `n` bytes, 8-byte aligned: the first `n` bytes of the
    /// smallest room that holds them.
    fn get(&mut self, n: usize) -> &mut [u8] {
        let words: &mut [u64] = if n <= SMALL_TMP_BYTES {
            self.small.insert([0; SMALL_TMP_BYTES / 8])
        } else if n <= STACK_TMP_BYTES {
            self.large.insert([0; STACK_TMP_BYTES / 8])
        } else {
            self.heap.resize(n.div_ceil(8), 0);
            &mut self.heap
        };
        &mut bytemuck::cast_slice_mut::<u64, u8>(words)[..n]
    }
}

impl Communicator {
    /// The barrier's rounds (`barrier.rs`: [`super::barrier::round_peers`], or the
    /// linear fan-in and fan-out of [`BarrierAlgo::Linear`]), run directly. `None`: not
    /// applicable, use the schedule.
    pub(crate) fn barrier_direct(&self, algo: BarrierAlgo) -> Option<Result<()>> {
        if self.st.cfg.check
            || (algo == BarrierAlgo::Exchange && self.size() > MAX_DIRECT_EXCHANGE_RANKS)
        {
            return None;
        }
        if let Err(e) = self.inner.check_live() {
            return Some(Err(e));
        }
        let tag = tag_base(self.st.next_seq());
        let (me, n) = (self.rank(), self.size());
        if algo == BarrierAlgo::Linear {
            const WHAT: &str = "barrier";
            let r = if n == 1 {
                Ok(())
            } else if me == 0 {
                // Every rank's message first, then the answers, in rank order (the
                // schedule's two rounds).
                (1..n)
                    .try_for_each(|r| self.exchange(WHAT, tag, usize::MAX, &[], r, &mut []))
                    .and_then(|()| {
                        (1..n)
                            .try_for_each(|r| self.exchange(WHAT, tag, r, &[], usize::MAX, &mut []))
                    })
            } else {
                self.exchange(WHAT, tag, 0, &[], 0, &mut [])
            };
            return Some(r);
        }
        if algo == BarrierAlgo::Exchange {
            if n == 1 {
                return Some(Ok(()));
            }
            // The schedule's one round: zero-byte rows.
            return Some(self.exchange_with_all("barrier", tag, &mut [], 0));
        }
        let mut dist = 1;
        while dist < n {
            let (to, from) = super::barrier::round_peers(me, n, dist);
            if let Err(e) = self.exchange("barrier", tag, to, &[], from, &mut []) {
                return Some(Err(e));
            }
            dist *= 2;
        }
        Some(Ok(()))
    }

    /// The binomial tree (`bcast.rs`, [`super::bcast::binomial`]) or the linear
    /// broadcast ([`super::bcast::linear`]) run directly on `buf` (bytes, equal
    /// lengths) from `root`: for the tree the message from the parent, then the sends to
    /// the children, largest subtree first; for linear the root's sends in relative-rank
    /// order, or the one receive from the root. `None`: not applicable (another
    /// algorithm, above [`MAX_DIRECT_BCAST_BYTES`], `root` out of range: the schedule
    /// reports it), use the schedule.
    pub(crate) fn bcast_direct(
        &self,
        algo: BcastAlgo,
        buf: &mut [u8],
        root: usize,
    ) -> Option<Result<()>> {
        let (me, p) = (self.rank(), self.size());
        if self.st.cfg.check
            || !matches!(algo, BcastAlgo::Binomial | BcastAlgo::Linear)
            || buf.len() > MAX_DIRECT_BCAST_BYTES
            || root >= p
        {
            return None;
        }
        if let Err(e) = self.inner.check_live() {
            return Some(Err(e));
        }
        let tag = tag_base(self.st.next_seq());
        if buf.is_empty() || p == 1 {
            return Some(Ok(()));
        }
        const WHAT: &str = "bcast";
        if algo == BcastAlgo::Linear {
            // The root's sends in relative-rank order (`bcast::linear`'s one round).
            let r = if me == root {
                (1..p).try_for_each(|k| {
                    self.exchange(WHAT, tag, (root + k) % p, buf, usize::MAX, &mut [])
                })
            } else {
                self.exchange(WHAT, tag, usize::MAX, &[], root, buf)
            };
            return Some(r);
        }
        let rel = (me + p - root) % p;
        let mut mask = 1;
        while mask < p {
            if rel & mask != 0 {
                let parent = (me + p - mask) % p;
                if let Err(e) = self.exchange(WHAT, tag, usize::MAX, &[], parent, buf) {
                    return Some(Err(e));
                }
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if rel + mask < p
                && let Err(e) = self.exchange(WHAT, tag, (me + mask) % p, buf, usize::MAX, &mut [])
            {
                return Some(Err(e));
            }
            mask >>= 1;
        }
        Some(Ok(()))
    }

    /// The all-to-all of `alltoall.rs` on 2 ranks run directly on `send` → `recv` (bytes
    /// of `elem_bytes`-byte elements, 2 blocks each, equal lengths): the own block
    /// copied, then one exchange with the other rank, the message either schedule
    /// (`alltoall.rs`, [`super::alltoall::build`]) sends, with its context and tag.
    /// `None`: not applicable (not 2 ranks, lengths the schedule reports as errors,
    /// blocks above [`MAX_DIRECT_ALLTOALL_BLOCK_BYTES`], an invalid
    /// `RANKWIRE_ALLTOALL_ALGO`), use the schedule.
    pub(crate) fn alltoall_direct(
        &self,
        send: &[u8],
        recv: &mut [u8],
        elem_bytes: usize,
    ) -> Option<Result<()>> {
        let (me, p) = (self.rank(), self.size());
        // Whole elements per block (the schedule's check, on elements). Two ranks only:
        // with more, the exchanges one after the other waited for ranks that were not
        // running (4 ranks on 2 cores: 4 B, 64 B, 1 KiB medians 10.6–10.9 µs against the
        // linear schedule's 6.5–8.7, benches/results/2026-12-08d_direct-bcast-alltoall).
        if self.st.cfg.check
            || p != 2
            || elem_bytes == 0
            || send.len() != recv.len()
            || !(send.len() / elem_bytes).is_multiple_of(p)
        {
            return None;
        }
        let block = send.len() / p;
        if block > MAX_DIRECT_ALLTOALL_BLOCK_BYTES || self.st.cfg.alltoall(p, block).is_err() {
            return None;
        }
        if let Err(e) = self.inner.check_live() {
            return Some(Err(e));
        }
        let tag = tag_base(self.st.next_seq());
        if block == 0 {
            return Some(Ok(()));
        }
        let blk = |j: usize| j * block..(j + 1) * block;
        recv[blk(me)].copy_from_slice(&send[blk(me)]);
        // Two ranks: the one pairwise step is the exchange with the other rank.
        let peer = 1 - me;
        Some(self.exchange(
            "alltoall",
            tag,
            peer,
            &send[blk(peer)],
            peer,
            &mut recv[blk(peer)],
        ))
    }

    /// Recursive doubling, the linear or the exchange algorithm (`allreduce.rs`), run
    /// directly on `send` → `recv` (bytes, equal lengths, `es`-byte elements);
    /// `send == None` is the in-place form (the input is `recv`). `None`: not
    /// applicable, use the schedule.
    pub(crate) fn allreduce_direct(
        &self,
        algo: AllreduceAlgo,
        send: Option<&[u8]>,
        recv: &mut [u8],
        elem_bytes: usize,
        red: Combine<'_>,
    ) -> Option<Result<()>> {
        let bytes = recv.len();
        if self.st.cfg.check
            || !matches!(
                algo,
                AllreduceAlgo::RecursiveDoubling | AllreduceAlgo::Linear | AllreduceAlgo::Exchange
            )
            || (algo == AllreduceAlgo::Exchange && self.size() > MAX_DIRECT_EXCHANGE_RANKS)
            || send.is_some_and(|s| s.len() != bytes)
            || bytes > MAX_DIRECT_ALLREDUCE_BYTES
            || elem_bytes == 0
        {
            return None;
        }
        if let Err(e) = self.inner.check_live() {
            return Some(Err(e));
        }
        let tag = tag_base(self.st.next_seq());
        if bytes == 0 || self.size() == 1 {
            if let Some(send) = send {
                recv.copy_from_slice(send);
            }
            return Some(Ok(()));
        }
        match algo {
            AllreduceAlgo::Linear => return Some(self.linear_allreduce(tag, send, recv, red)),
            AllreduceAlgo::Exchange => {
                return Some(self.exchange_allreduce(tag, send, recv, red));
            }
            _ => {}
        }
        Some(self.recursive_doubling(tag, send, recv, red))
    }

    /// The linear allreduce (`allreduce.rs`, `linear`) of `send` (`None`: in place, the
    /// input is `all`) into `all`: rank 0 takes every other rank's vector in rank order
    /// and combines it on the right of what it holds, then sends the result to each rank
    /// in rank order; every other rank sends its vector and receives the result in one
    /// exchange.
    fn linear_allreduce(
        &self,
        tag: i32,
        send: Option<&[u8]>,
        all: &mut [u8],
        red: Combine<'_>,
    ) -> Result<()> {
        const WHAT: &str = "allreduce";
        let (me, p) = (self.rank(), self.size());
        let mut scratch = Scratch::default();
        let tmp = scratch.get(all.len());
        if me != 0 {
            // In place, the vector leaves from a copy: the result lands in `all`.
            let out: &[u8] = match send {
                Some(s) => s,
                None => {
                    tmp.copy_from_slice(all);
                    tmp
                }
            };
            return self.exchange(WHAT, tag, 0, out, 0, all);
        }
        if let Some(s) = send {
            all.copy_from_slice(s);
        }
        for r in 1..p {
            self.exchange(WHAT, tag, usize::MAX, &[], r, tmp)?;
            // all = all ∘ a_r: rank order.
            red(tmp, all, false);
        }
        (1..p).try_for_each(|r| self.exchange(WHAT, tag, r, all, usize::MAX, &mut []))
    }

    /// The exchange allreduce (`allreduce.rs`, `exchange`) of `send` (`None`: in place,
    /// the input is `all`) into `all`: this rank's vector goes to every other rank and
    /// theirs land in slots of one temporary, all in flight at once; then the p vectors
    /// are combined in rank order into `all`, as the schedule does.
    fn exchange_allreduce(
        &self,
        tag: i32,
        send: Option<&[u8]>,
        all: &mut [u8],
        red: Combine<'_>,
    ) -> Result<()> {
        let (me, n) = (self.rank(), all.len());
        let mut scratch = Scratch::default();
        let slots = scratch.get(self.size() * n);
        slots[me * n..(me + 1) * n].copy_from_slice(send.unwrap_or(all));
        self.exchange_with_all("allreduce", tag, slots, n)?;
        let (first, rest) = slots.split_at(n);
        all.copy_from_slice(first);
        for row in rest.chunks_exact(n) {
            // all = all ∘ a_r: rank order.
            red(row, all, false);
        }
        Ok(())
    }

    /// Send this rank's row of `rows` (p rows of `n` bytes, row `r` for communicator
    /// rank `r`) to every other rank and receive row `r` from each rank `r`, all posted
    /// before any is waited for (receives first, then the sends in rank order, as the
    /// schedule of `allreduce.rs`'s `exchange` posts them), on the collective context
    /// with `tag`. At most [`MAX_DIRECT_EXCHANGE_RANKS`] ranks.
    ///
    /// # Errors
    /// Returned after every operation has completed: the first failed receive's error
    /// in rank order ([`Error::Collective`] for a row of the wrong length, the context
    /// revoked: [`Communicator::recv_failure`]), else the first send error to complete.
    fn exchange_with_all(
        &self,
        what: &'static str,
        tag: i32,
        rows: &mut [u8],
        n: usize,
    ) -> Result<()> {
        let (me, p) = (self.rank(), self.size());
        debug_assert!(p <= MAX_DIRECT_EXCHANGE_RANKS && rows.len() == p * n);
        let ctx = self.st.ctx | COLL_CTX_BIT;
        let group = &self.st.group;
        let inner = &self.inner;
        let base = rows.as_mut_ptr();
        let out = RawBuf::from_slice(&rows[me * n..(me + 1) * n]);
        let mut recvs = [None; MAX_DIRECT_EXCHANGE_RANKS];
        let mut sends = [None; MAX_DIRECT_EXCHANGE_RANKS];
        let mut e = inner.lock();
        for r in (0..p).filter(|&r| r != me) {
            let pat = Pattern {
                ctx,
                src: Some(group[r]),
                tag: Some(tag),
            };
            // Row r only: rows of other ranks are not touched while it is posted.
            let raw = RawBuf::new(base.wrapping_add(r * n), n);
            recvs[r] = Some(e.proto.irecv(pat, raw));
        }
        for r in (0..p).filter(|&r| r != me) {
            if let SendStart::Queued(id) = e.isend(group[r], ctx, tag, out, false) {
                sends[r] = Some(id);
            }
        }
        // The failed receive of the lowest rank (its outcome), and the first send error.
        let mut bad_recv: Option<(usize, Result<Status>)> = None;
        let mut send_err: Option<Error> = None;
        inner.wait_with(e, |e| {
            let mut left = false;
            for r in 0..p {
                if let Some(id) = recvs[r] {
                    match e.proto.take_done(id) {
                        Some(o) => {
                            if !matches!(&o, Ok(st) if st.len_bytes == n)
                                && bad_recv.as_ref().is_none_or(|(b, _)| r < *b)
                            {
                                bad_recv = Some((r, o));
                            }
                            recvs[r] = None;
                        }
                        None => left = true,
                    }
                }
                if let Some(id) = sends[r] {
                    match e.proto.take_done(id) {
                        Some(o) => {
                            if let Err(err) = o
                                && send_err.is_none()
                            {
                                send_err = Some(err);
                            }
                            sends[r] = None;
                        }
                        None => left = true,
                    }
                }
            }
            (!left).then_some(())
        });
        if let Some((r, o)) = bad_recv {
            return Err(self.recv_failure(what, ctx, r, n, o));
        }
        send_err.map_or(Ok(()), Err)
    }

    /// Recursive doubling of `send` into `all`, as `allreduce.rs` schedules it (the
    /// fold of non-power-of-two sizes included), except that this rank's own vector
    /// is sent from `send` and combined from there, not copied into `all` first: the
    /// first message this rank receives lands in `all` and is combined with `send` in
    /// the same order (lower ranks' values on the left), so the bits are the same.
    /// In place (`send == None`) `all` holds this rank's vector from the start and
    /// every message lands in a temporary first, exactly as in the schedule.
    fn recursive_doubling(
        &self,
        tag: i32,
        send: Option<&[u8]>,
        all: &mut [u8],
        red: Combine<'_>,
    ) -> Result<()> {
        const WHAT: &str = "allreduce";
        let (me, p) = (self.rank(), self.size());
        let pof2 = pof2_floor(p);
        let rem = p - pof2;
        let n = all.len();
        // Whether `all` holds this rank's partial result yet (else it is `send`).
        let mut in_all = send.is_none();
        // A temporary is needed from the second exchange on (more than 2 ranks), or
        // from the first in place.
        let mut scratch = Scratch::default();
        let tmp: &mut [u8] = if p <= 2 && !in_all {
            &mut []
        } else {
            scratch.get(n)
        };
        // Fold the first 2·rem ranks in pairs (allreduce.rs, `fold_in`).
        let nr = if me < 2 * rem {
            if me % 2 == 0 {
                self.exchange(WHAT, tag, me + 1, send.unwrap_or(all), usize::MAX, &mut [])?;
                None
            } else if let Some(send) = send {
                self.exchange(WHAT, tag, usize::MAX, &[], me - 1, all)?;
                // all = a_{me-1} ∘ a_me
                red(send, all, false);
                in_all = true;
                Some(me / 2)
            } else {
                self.exchange(WHAT, tag, usize::MAX, &[], me - 1, tmp)?;
                // all = a_{me-1} ∘ a_me
                red(tmp, all, true);
                Some(me / 2)
            }
        } else {
            Some(me - rem)
        };
        if let Some(nr) = nr {
            let real = |nr: usize| if nr < rem { 2 * nr + 1 } else { nr + rem };
            let mut mask = 1;
            while mask < pof2 {
                let partner = real(nr ^ mask);
                // The partner's partial result covers lower ranks iff its new rank is.
                let partner_left = nr & mask != 0;
                if in_all {
                    self.exchange(WHAT, tag, partner, all, partner, tmp)?;
                    red(tmp, all, partner_left);
                } else if let Some(send) = send {
                    self.exchange(WHAT, tag, partner, send, partner, all)?;
                    // `all` holds the partner's; ours (`send`) goes on the other side.
                    red(send, all, !partner_left);
                    in_all = true;
                }
                mask <<= 1;
            }
        }
        // Back to the ranks that sat out (`fold_out`).
        if me < 2 * rem {
            if me % 2 == 0 {
                self.exchange(WHAT, tag, usize::MAX, &[], me + 1, all)?;
            } else {
                self.exchange(WHAT, tag, me - 1, all, usize::MAX, &mut [])?;
            }
        }
        // With p >= 2 every rank took part in an exchange (in_all) or got the result
        // back from its fold partner.
        debug_assert!(in_all || (me < 2 * rem && me % 2 == 0));
        Ok(())
    }

    /// Send `out` to rank `to` and receive exactly `inb.len()` bytes from rank `from`
    /// (communicator ranks; `usize::MAX` leaves that side out), on the collective
    /// context with `tag`. The receive is posted before the send is waited for, so two
    /// ranks exchanging with each other cannot deadlock.
    pub(crate) fn exchange(
        &self,
        what: &'static str,
        tag: i32,
        to: usize,
        out: &[u8],
        from: usize,
        inb: &mut [u8],
    ) -> Result<()> {
        let ctx = self.st.ctx | COLL_CTX_BIT;
        let world = |r: usize| self.st.group.get(r).copied();
        let to_w = if to == usize::MAX { None } else { world(to) };
        let from_w = if from == usize::MAX {
            None
        } else {
            world(from)
        };
        let inner = &self.inner;
        let mut e = inner.lock();
        let send = to_w.map(|w| e.isend(w, ctx, tag, RawBuf::from_slice(out), false));
        let want = inb.len();
        let raw = RawBuf::new(inb.as_mut_ptr(), want);
        let mut got: Option<Result<Status>> = None;
        let mut recv_id = None;
        if let Some(w) = from_w {
            let pat = Pattern {
                ctx,
                src: Some(w),
                tag: Some(tag),
            };
            // The fast path skips progress: the runtime takes it only with no
            // nonblocking collective running.
            match inner.recv_direct(&mut e, &pat, raw) {
                Some(r) => got = Some(r),
                None => recv_id = Some(e.proto.irecv(pat, raw)),
            }
        }
        let mut send_id = match send {
            Some(SendStart::Queued(id)) => Some(id),
            _ => None,
        };
        let mut send_res: Result<()> = Ok(());
        if recv_id.is_some() || send_id.is_some() {
            inner.wait_with(e, |e| {
                if let Some(id) = recv_id
                    && let Some(r) = e.proto.take_done(id)
                {
                    got = Some(r);
                    recv_id = None;
                }
                if let Some(id) = send_id
                    && let Some(r) = e.proto.take_done(id)
                {
                    send_res = r.map(|_| ());
                    send_id = None;
                }
                (recv_id.is_none() && send_id.is_none()).then_some(())
            });
        } else {
            drop(e);
        }
        if let Some(r) = got
            && !matches!(&r, Ok(st) if st.len_bytes == want)
        {
            return Err(self.recv_failure(what, ctx, from, want, r));
        }
        send_res
    }

    /// The error of a receive of exactly `want` bytes from rank `from` on collective
    /// context `ctx` that did not get them (`r`: its outcome, not `Ok` with `want`
    /// bytes): its own error, or, for a message of another length,
    /// [`Error::Collective`] after revoking the context, so that the ranks waiting for
    /// this one's part fail instead of waiting forever (protocol/revoke.rs). Out of
    /// line: the callers test for success inline.
    #[cold]
    #[inline(never)]
    fn recv_failure(
        &self,
        what: &'static str,
        ctx: u32,
        from: usize,
        want: usize,
        r: Result<Status>,
    ) -> Error {
        let got = match r {
            Ok(st) => st.len_bytes as u64,
            Err(Error::Matching(MatchError::Truncated { message_bytes, .. })) => message_bytes,
            Err(e) => return e,
        };
        let mut e = self.inner.lock();
        e.proto.revoke(ctx, &self.st.group);
        self.inner.progress(&mut e);
        Error::Collective(format!(
            "{what}: rank {from} sent {got} bytes where {want} were expected; the ranks \
             disagree on counts, roots or datatypes (set RANKWIRE_COLL_CHECK=1 to name the \
             difference)"
        ))
        .noted()
    }
}
