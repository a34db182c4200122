//! Single-copy allreduce of large host vectors among the ranks of one node.
//!
//! The schedules move a large allreduce as messages: Rabenseifner's reduce-scatter and
//! allgather (`allreduce.rs`) copy each half or block into a temporary by a rendezvous
//! (itself one cross-memory-attach copy) and combine from there, so every byte is read
//! from the peer into a temporary as large as the block, then read again to combine.
//! Where every rank of the communicator can read every other rank's memory by
//! cross-memory attach (`process_vm_readv(2)`, the `cma` rows of `--explain`), this
//! path reads the peers' buffers directly instead, a segment at a time, so a segment is
//! combined while it is still in the cache, and writes each result straight into the
//! peers' receive buffers:
//!
//! 1. **Descriptors.** Each rank sends every other rank its pid, the address of its
//!    input (the send buffer, or the receive buffer in place), of its receive buffer
//!    and the vector length (p − 1 rounds of small exchanges, which also tell that
//!    every rank has entered the call, so its buffers may be read). A descriptor whose
//!    pid is not the one its rank published at start-up, or whose length differs, fails
//!    the call on every rank (after all rounds, so that none waits for a skipped one)
//!    before any memory is touched.
//! 2. **Reduce-scatter.** Block `i` (elements split as evenly as possible, lower blocks
//!    one element larger) belongs to rank `i`. For every segment of its block
//!    ([`SEGMENT_BYTES`]) a rank reads the same segment of each lower rank's input and
//!    combines it on the left (rank `i − 1` down to 0), then of each higher rank on the
//!    right (`i + 1` up to `p − 1`), writing its receive buffer; out of place the first
//!    peer's segment is read straight into the receive buffer and this rank's input
//!    combined onto it, in place a temporary takes every peer's segment. The bracketing
//!    depends only on `p` and the count, operand order is kept (rank order), and each
//!    block is computed once, so every rank ends with the same bits.
//! 3. **Allgather by writes.** Each reduced segment, still in the cache, is written
//!    into every other rank's receive buffer at its offset (`process_vm_writev(2)`).
//!    That region of a rank's receive buffer is read by nobody else: in place it holds
//!    that rank's input for this block, which only this block's owner reads, and it has
//!    read it already. Writing while the data is hot took 0.55–0.75 of the time of
//!    reading the blocks back from their owners afterwards at 128–512 KiB.
//! 4. **Release.** A last zero-byte message to every rank says "I have read your input
//!    and written my block into your buffer": no rank returns (and lets its caller
//!    touch the buffers) while another still reads or writes them.
//!
//! Messages go on the collective context with the call's tag, in the order above on
//! every pair of ranks (non-overtaking), waited for in the runtime's wait loop, which
//! advances nonblocking collectives meanwhile.
//!
//! It runs only for the blocking host forms (`allreduce`, `allreduce_in_place`), for
//! vectors of at least `RANKWIRE_ALLREDUCE_SINGLE_COPY` bytes (default
//! [`super::select::SINGLE_COPY_MIN_BYTES`]; 0 turns it off), when no allreduce algorithm is forced and
//! the collective check is off, on communicators whose ranks agreed (once, at the first
//! such call, by an allreduce of a flag) that each can read every other by
//! cross-memory attach. Blocking and nonblocking calls of one collective do not match
//! (MPI 4.1 §6.12), so the nonblocking form keeps the schedules.
//!
//! Source of the idea: Open MPI's `coll/xhc` and the single-copy collectives over
//! XPMEM/CMA of Jain et al., "Designing efficient shared address space reduction
//! collectives for multi-/many-cores" (IPDPS 2018); the block split and the
//! reduce-scatter + allgather structure are Rabenseifner's (2004).

use rankwire_transports::shm::cma::Cma;
use rankwire_transports::{LocalBuf, MemoryKind, RemoteMem};

use super::direct::Combine;
use super::tag_base;
use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::select::HostRndv;

// The default size is `super::select::SINGLE_COPY_MIN_BYTES` (the settings live with the
// other collective settings, which this file reads through `CollConfig`).
const _: () =
    assert!(super::select::SINGLE_COPY_MIN_BYTES == super::direct::MAX_DIRECT_ALLREDUCE_BYTES + 1);

/// Bytes of one reduce-scatter segment: read from a peer into a temporary of this size
/// and combined while it is in the cache (L2 is 512 KiB per core on the machines here).
pub(crate) const SEGMENT_BYTES: usize = 64 << 10;

/// What a rank tells the others about its buffers (phase 1), little-endian:
/// `[pid u32][0 u32][input address u64][receive address u64][length u64]`.
const DESC_BYTES: usize = 32;

const WHAT: &str = "allreduce";

/// How long a rank whose copy failed waits for the runtime's report of that peer's
/// death (its transport notices the exit and reports it after a short delay,
/// engine.rs), before reporting the copy's own error.
const LOST_PEER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Byte range `[start, end)` of block `b` of a vector of `elems` elements of `es` bytes
/// split over `p` ranks: `elems / p` elements each, the first `elems % p` blocks one
/// more.
pub(crate) fn block(elems: usize, es: usize, p: usize, b: usize) -> (usize, usize) {
    let (base, extra) = (elems / p, elems % p);
    let start = b * base + b.min(extra);
    let len = base + usize::from(b < extra);
    (start * es, (start + len) * es)
}

fn encode_desc(pid: u32, input: u64, recv: u64, len: u64) -> [u8; DESC_BYTES] {
    let mut d = [0u8; DESC_BYTES];
    d[0..4].copy_from_slice(&pid.to_le_bytes());
    d[8..16].copy_from_slice(&input.to_le_bytes());
    d[16..24].copy_from_slice(&recv.to_le_bytes());
    d[24..32].copy_from_slice(&len.to_le_bytes());
    d
}

/// A peer's buffers as its descriptor names them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PeerBufs {
    pid: u32,
    input: u64,
    recv: u64,
    len: u64,
}

fn decode_desc(d: &[u8; DESC_BYTES]) -> PeerBufs {
    let u64_at = |i: usize| u64::from_le_bytes(d[i..i + 8].try_into().expect("8 bytes"));
    PeerBufs {
        pid: u32::from_le_bytes(d[0..4].try_into().expect("4 bytes")),
        input: u64_at(8),
        recv: u64_at(16),
        len: u64_at(24),
    }
}

impl Communicator {
    /// Whether this rank can read every other member by cross-memory attach (its
    /// host rendezvous with each is single copy by CMA), before agreement.
    fn single_copy_local(&self) -> bool {
        let me = self.st.group[self.rank()];
        let paths = &self.inner.paths;
        self.st.group.iter().all(|&w| {
            w == me
                || paths
                    .peers
                    .get(w as usize)
                    .is_some_and(|p| p.same_node && matches!(p.rndv, HostRndv::Cma { .. }))
                    && paths.pids.get(w as usize).is_some_and(Option::is_some)
        })
    }

    /// Whether every rank can read every other by cross-memory attach: decided once per
    /// communicator, by an allreduce (minimum) of each rank's own answer, at the first
    /// call that asks (a blocking allreduce of at least the threshold: the same call on
    /// every rank).
    fn single_copy_agreed(&self) -> Result<bool> {
        if let Some(&v) = self.st.single_copy.get() {
            return Ok(v);
        }
        let mine = [u8::from(self.single_copy_local())];
        let mut all = [0u8];
        // The schedule, not the blocking call: that would come back here.
        self.iallreduce(&mine, &mut all, super::ops::Op::Min)?
            .wait()?;
        let v = all[0] == 1;
        let _ = self.st.single_copy.set(v);
        Ok(v)
    }

    /// The single-copy allreduce (module doc) of `send` (or `recv` in place,
    /// `send == None`) into `recv`, bytes of `elem_bytes`-byte elements combined by
    /// `red`. `None`: not applicable (size, settings, communicator), use another path.
    pub(crate) fn allreduce_single_copy(
        &self,
        send: Option<&[u8]>,
        recv: &mut [u8],
        elem_bytes: usize,
        red: Combine<'_>,
    ) -> Option<Result<()>> {
        let bytes = recv.len();
        let min = self.st.cfg.single_copy_min;
        if min == 0
            || bytes < min
            || self.st.cfg.allreduce_forced()
            || self.st.cfg.check
            || self.size() < 2
            || elem_bytes == 0
            || !bytes.is_multiple_of(elem_bytes)
            || send.is_some_and(|s| s.len() != bytes)
        {
            return None;
        }
        match self.single_copy_agreed() {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
        }
        if let Err(e) = self.inner.check_live() {
            return Some(Err(e));
        }
        let tag = tag_base(self.st.next_seq());
        // A send buffer that is the receive buffer (erroneous in MPI without
        // MPI_IN_PLACE, common in C programs) is the in-place form: reading the first
        // peer's segment straight into the receive buffer would overwrite the input.
        let send = send.filter(|s| s.as_ptr() != recv.as_ptr());
        Some(self.single_copy(tag, send, recv, elem_bytes, red))
    }

    /// The error of a failed cross-memory-attach copy with communicator rank `peer`.
    /// The usual cause is a peer that died (`ESRCH`, also while it is a zombie not yet
    /// reaped): the runtime's own report of that peer is waited for (at most
    /// [`LOST_PEER_WAIT`]), so that the call fails as any other does when a peer dies
    /// ([`Error::Connection`] naming it, after the launcher had time to name the
    /// signal). Without such a report, an [`Error::Transport`] of `cma` with
    /// `detail()`.
    fn cma_failed(&self, peer: usize, detail: impl FnOnce() -> String) -> Error {
        let w = self.st.group[peer];
        let deadline = std::time::Instant::now() + LOST_PEER_WAIT;
        let lost = self.inner.wait_with(self.inner.lock(), |e| {
            if let Some(err) = e.proto.peer_failure(w) {
                return Some(Some(err.clone()));
            }
            (std::time::Instant::now() >= deadline).then_some(None)
        });
        lost.unwrap_or_else(|| Error::Transport {
            transport: "cma",
            peer: w,
            detail: detail(),
        })
    }

    fn single_copy(
        &self,
        tag: i32,
        send: Option<&[u8]>,
        recv: &mut [u8],
        es: usize,
        red: Combine<'_>,
    ) -> Result<()> {
        let (me, p) = (self.rank(), self.size());
        let n = recv.len();
        let cma = Cma::new();
        let input_addr = send.map_or(recv.as_ptr() as u64, |s| s.as_ptr() as u64);
        let desc = encode_desc(
            std::process::id(),
            input_addr,
            recv.as_ptr() as u64,
            n as u64,
        );
        // 1. Descriptors, p - 1 rounds: to me + d, from me - d.
        let mut peers = vec![PeerBufs::default(); p];
        // Every round runs even after a length mismatch, so that every rank gets all
        // descriptors (and each sees the mismatch) instead of one waiting for a round
        // another rank skipped.
        let mut mismatch = None;
        for d in 1..p {
            let (to, from) = ((me + d) % p, (me + p - d) % p);
            let mut got = [0u8; DESC_BYTES];
            self.exchange(WHAT, tag, to, &desc, from, &mut got)?;
            let b = decode_desc(&got);
            // The process the runtime learned at start-up for that rank: a descriptor
            // naming another one is not this call's (mismatched collectives), and its
            // addresses must not be touched.
            let known = self
                .inner
                .paths
                .pids
                .get(self.st.group[from] as usize)
                .copied()
                .flatten();
            if mismatch.is_none() && known != Some(b.pid) {
                mismatch = Some(Error::Collective(format!(
                    "{WHAT}: rank {from} sent a descriptor naming process {} where its process \
                     is {}; the ranks called different collectives (set \
                     RANKWIRE_COLL_CHECK=1 to name the difference)",
                    b.pid,
                    known.map_or("unknown".to_string(), |p| p.to_string())
                )));
            } else if b.len != n as u64 && mismatch.is_none() {
                mismatch = Some(Error::Collective(format!(
                    "{WHAT}: rank {from} passed {} bytes where this rank passed {n}; the ranks \
                     disagree on counts or datatypes (set RANKWIRE_COLL_CHECK=1 to name the \
                     difference)",
                    b.len
                )));
            }
            peers[from] = b;
        }
        if let Some(e) = mismatch {
            return Err(e);
        }
        // One copy between `local` (this rank's memory) and `peer`'s memory at `addr` +
        // `offset`: into `local` (`process_vm_readv`), or out of it when `write`.
        let copy = |peer: usize, addr: u64, offset: usize, local: LocalBuf, write: bool| {
            let remote = RemoteMem::HostCma {
                pid: peers[peer].pid,
                addr,
            };
            // SAFETY: `local` is this rank's own buffer, borrowed for the call (mutably
            // when read into, unchanged while written out).
            let r = unsafe {
                if write {
                    cma.put(local, &remote, offset as u64)
                } else {
                    cma.get(local, &remote, offset as u64)
                }
            };
            r.map(|_| ()).map_err(|e| {
                self.cma_failed(peer, || {
                    format!(
                        "{WHAT}: {} rank {peer}'s buffer by cross-memory attach failed: {e}",
                        if write { "writing into" } else { "reading" }
                    )
                })
            })
        };
        let host = |addr: *const u8, len_bytes: usize| LocalBuf {
            addr: addr as u64,
            len_bytes,
            kind: MemoryKind::Host,
        };
        let read = |from: usize, addr: u64, offset: usize, dst: &mut [u8]| {
            copy(from, addr, offset, host(dst.as_mut_ptr(), dst.len()), false)
        };
        let write = |to: usize, src: &[u8], offset: usize| {
            copy(
                to,
                peers[to].recv,
                offset,
                host(src.as_ptr(), src.len()),
                true,
            )
        };
        // 2. Reduce-scatter of this rank's block, a segment at a time.
        let elems = n / es;
        let (b0, b1) = block(elems, es, p, me);
        let seg = (SEGMENT_BYTES / es).max(1) * es;
        // A temporary for every peer's segment but the first one's (all of them in place).
        let reads_into_tmp = p - 1 - usize::from(send.is_some());
        let tmp_len = if reads_into_tmp > 0 {
            seg.min(b1 - b0)
        } else {
            0
        };
        let mut tmp = vec![0u64; tmp_len.div_ceil(8)];
        let tmp_bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut tmp);
        let mut s0 = b0;
        while s0 < b1 {
            let s1 = (s0 + seg).min(b1);
            let acc = &mut recv[s0..s1];
            // The first peer's segment goes straight into `acc` and this rank's input
            // is combined onto it from its own side: the same bracketing as starting
            // from this rank's input, one copy fewer. In place, `acc` already holds
            // this rank's input.
            let mut lower = (0..me).rev();
            let mut higher = me + 1..p;
            if let Some(send) = send {
                let mine = &send[s0..s1];
                if let Some(k) = lower.next() {
                    read(k, peers[k].input, s0, acc)?;
                    red(mine, acc, false);
                } else if let Some(k) = higher.next() {
                    read(k, peers[k].input, s0, acc)?;
                    red(mine, acc, true);
                }
            }
            let t = &mut tmp_bytes[..if tmp_len > 0 { s1 - s0 } else { 0 }];
            for k in lower {
                read(k, peers[k].input, s0, t)?;
                red(t, acc, true);
            }
            for k in higher {
                read(k, peers[k].input, s0, t)?;
                red(t, acc, false);
            }
            // 3. The reduced segment into every other rank's receive buffer, while it
            // is in the cache.
            for d in 1..p {
                let to = (me + d) % p;
                write(to, acc, s0)?;
            }
            s0 = s1;
        }
        // 4. Release: every rank has written its block here and read this rank's input.
        for d in 1..p {
            let (to, from) = ((me + d) % p, (me + p - d) % p);
            self.exchange(WHAT, tag, to, &[], from, &mut [])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_vector_in_order_and_differ_by_at_most_one_element() {
        for p in 1..9 {
            for elems in [0, 1, 2, 7, 8, 9, 1000, 1001] {
                let mut at = 0;
                let mut lens = Vec::new();
                for b in 0..p {
                    let (s, e) = block(elems, 4, p, b);
                    assert_eq!(s, at, "p {p} elems {elems} block {b}");
                    assert!(e >= s);
                    lens.push((e - s) / 4);
                    at = e;
                }
                assert_eq!(at, elems * 4);
                let (lo, hi) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
                assert!(hi - lo <= 1, "{lens:?}");
            }
        }
    }

    #[test]
    fn descriptors_round_trip() {
        let d = encode_desc(4242, 0x7fff_0000_1000, 0x7fff_0000_9000, 1 << 20);
        assert_eq!(
            decode_desc(&d),
            PeerBufs {
                pid: 4242,
                input: 0x7fff_0000_1000,
                recv: 0x7fff_0000_9000,
                len: 1 << 20
            }
        );
    }
}
