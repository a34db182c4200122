//! The progress engine: the only code that calls transports.
//!
//! # Lifecycle
//! Built by [`crate::init`] with one route per world rank (self, shm, rdma or tcp, from
//! the selection table). Every blocking or testing API call runs [`Engine::progress`]
//! from the runtime's progress round (`crate::runtime`, which also advances the
//! nonblocking collectives; the engine knows nothing of them): it takes the frames shared memory lends in place and feeds them to the [`Protocol`]
//! (the payload is copied once, into the receive buffer), moves frames the protocol
//! produced into per-peer backlogs and on to transports, executes the protocol's memory
//! actions (device staging, buffer offers: `crate::device_path`), pulls rendezvous data chunks
//! while transports have room, does the single-copy pulls and share writes the protocol
//! asks for, names the receive buffer as the place of TCP rendezvous data, and polls
//! transports for the rest of their frames and failures.
//!
//! # Calling transports
//! The transports live in one [`Transports`] set and are called through the
//! [`AnyTransport`] enum (a `match` over the closed set, no `dyn`); shared memory is
//! also reached as itself for its fast paths below. One-sided operations go by the
//! kind of the remote descriptor ([`Transports::get_remote`] / `put_remote`):
//! `HostCma` to shm's cross-memory attach (also without shm rings, for TCP between
//! ranks of one node), `Rdma` to RDMA READ, `CudaIpc` to the set's CUDA IPC transport
//! (a device copy out of the peer's export; polled only while copies run).
//! TCP payload placement goes through [`Transport::awaiting_place`] /
//! [`Transport::place_payload`] after each transport's poll.
//!
//! # Fast paths
//! - [`Engine::isend`]: an eager host message with nothing queued before it goes to the
//!   transport at once and is complete on return (no request kept).
//! - [`Engine::recv_direct`]: a blocking receive from a rank of the node, with nothing
//!   else pending (no nonblocking collective running either: its caller checks),
//!   watches that peer's ring and takes the in-order eager message straight into its
//!   buffer.
//! - A round that completed a request returns before the next ring record is looked at
//!   (looking costs a cache miss while the sender may be writing it), unless a wait for
//!   several requests ([`crate::request::wait_all`]) asked for more completions
//!   ([`Engine::want_completions`]): then a window of arrivals is taken in one round
//!   instead of a round per message.
//!
//! # Progress policy
//! Waiting calls spin on `progress` a bounded number of times, then yield the core,
//! then (on transports that can) sleep in the kernel until data arrives. Ranks often
//! outnumber cores (4 ranks on 2 cores is common in CI), where spinning forever
//! starves the rank that would send the awaited message. `RANKWIRE_PROGRESS` chooses:
//! `spin` (never yield), `yield` (spin briefly, then yield), `block` (also sleep in
//! epoll after a while idle), `auto` (default: like `block`, yielding sooner when
//! ranks outnumber cores). Between idle rounds a wait looks at the rings
//! ([`Engine::arrival_hint`], one load each) instead of running a whole round.

use std::collections::VecDeque;
use std::time::Duration;

use rankwire_transports::{
    AnyTransport, Event, LocalBuf, OpStart, RdmaTransport, SelfTransport, SendOutcome,
    ShmTransport, TcpTransport, Transport, TransportKind, Transports,
};

use crate::error::Error;
use crate::protocol::{OutFrame, Protocol, PullReq, RawBuf, ReqId};
use crate::runtime::sleep::PollSet;
use crate::select::Route;
use crate::wire::RemoteMem;

/// Longest sleep on the shared-memory doorbell, which a waiting thread takes with the
/// engine locked (other threads of the process wait that long at most), and longest
/// sleep while frames wait for a transport to take them.
const SHM_SLEEP_MAX: Duration = Duration::from_millis(1);

/// Pause after learning that a peer died, before failing requests with it (once per
/// peer; only on this error path).
const PEER_FAILURE_DELAY: Duration = Duration::from_millis(100);
/// Frames taken from shared memory per progress round, at most (so that a fast sender
/// cannot keep a rank from sending).
const FRAMES_PER_PROGRESS: usize = 64;

/// How a send started ([`Engine::isend`]).
#[derive(Debug)]
pub(crate) enum SendStart {
    /// A transport took the whole message: the send is complete.
    Done(crate::protocol::Status),
    /// The protocol holds it as request `id`.
    Queued(ReqId),
}

/// Progress policy (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// Idle polls before yielding the core.
    pub spin_polls: u32,
    /// Looks at the shared-memory rings (one load each) between two idle polls.
    pub ring_looks: u32,
    /// Idle time before sleeping in the kernel (`None`: never).
    pub block_after: Option<Duration>,
}

impl Backoff {
    /// The policy of `RANKWIRE_PROGRESS` for a rank that shares its node with
    /// `local_ranks - 1` others, which together may run on `node_cpus` CPUs (the union
    /// of their affinity masks; 0 if unknown: this process's CPU count is used).
    pub(crate) fn from_env(local_ranks: usize, node_cpus: usize) -> Backoff {
        let cores = if node_cpus > 0 {
            node_cpus
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        };
        let oversubscribed = local_ranks > cores;
        // Checked at init (`crate::settings`): an invalid value never gets here.
        let policy = crate::settings::raw("RANKWIRE_PROGRESS")
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        Backoff::for_policy(&policy, oversubscribed)
    }

    /// The back-off of `policy` (a `RANKWIRE_PROGRESS` value; anything unknown is
    /// `auto`) for a rank whose node has more ranks than cores (`oversubscribed`).
    fn for_policy(policy: &str, oversubscribed: bool) -> Backoff {
        // Oversubscribed, a waiting rank gives the core away after one progress round
        // and a few ring looks, so that the rank being waited for gets it. Measured with
        // 4 ranks on 2 cores, 12 interleaved runs each: 8 B allreduce / barrier median
        // 8.9 / 8.2 us with 1 x 4 looks, 10.4 / 9.7 with 4 x 4, Open MPI (which yields
        // after every idle poll) 7.5 / 6.8; spins of 64 x 64 looks made an 8-rank ring
        // 13x slower. `yield` and `block` spin that briefly too then; only `spin`
        // ignores the core count.
        let (spin_polls, ring_looks) = if oversubscribed { (1, 4) } else { (64, 64) };
        match policy {
            "spin" => Backoff {
                spin_polls: u32::MAX,
                ring_looks: 64,
                block_after: None,
            },
            "yield" => Backoff {
                spin_polls,
                ring_looks,
                block_after: None,
            },
            "block" => Backoff {
                spin_polls,
                ring_looks,
                block_after: Some(Duration::from_millis(2)),
            },
            _ => Backoff {
                spin_polls: if oversubscribed { spin_polls } else { 256 },
                ring_looks,
                block_after: Some(Duration::from_millis(if oversubscribed { 1 } else { 20 })),
            },
        }
    }

    /// Looks at a ring a blocking receive's fast path takes before it posts the
    /// receive and waits the general way (as long as the spinning phase of a wait).
    #[inline]
    pub(crate) fn direct_looks(&self) -> u32 {
        self.spin_polls.saturating_mul(self.ring_looks.max(1))
    }
}

/// Transports and protocol state of one rank.
pub(crate) struct Engine {
    pub(crate) proto: Protocol,
    /// The transports of this rank (enum dispatch, no `dyn`).
    tp: Transports,
    routes: Vec<Route>,
    /// Eager limit in bytes of host messages to each peer (from its transport's caps).
    eager: Vec<usize>,
    /// Eager limit of device-buffer messages per world rank (bytes): the host limit,
    /// or `RANKWIRE_GPU_EAGER_MAX` for CUDA IPC peers.
    device_eager: Vec<usize>,
    backlog: Vec<VecDeque<OutFrame>>,
    /// Per world rank: the pinned buffers a transport is landing that peer's `Data`
    /// payloads in for device receives (`device_path`), with the frame's receive
    /// request and offset, oldest first, each until its `RecvPlaced` (a transport may
    /// already have placed the next frame's payload when the event of the previous one
    /// is handled).
    landing: Vec<VecDeque<Landing>>,
    // RDMA wireup messages (queue pairs made on demand) waiting for TCP to take them.
    wireup: VecDeque<(u32, Vec<u8>)>,
    events: Vec<Event>,
    pub(crate) backoff: Backoff,
    /// Executes the protocol's memory actions (device staging, buffer offers).
    pub(crate) mem: crate::device_path::MemActions,
    /// GPU temporaries (device collectives, CUDA IPC staging), lent by `Arc`.
    pub(crate) gpu_pool: std::sync::Arc<rankwire_gpu::TmpPool>,
    /// Scratch list of the CUDA IPC transport's events.
    #[cfg(feature = "cuda")]
    ipc_events: Vec<Event>,
    /// Context ids of this process's communicators (see [`crate::context_id`]).
    pub(crate) ctx_ids: crate::context_id::ContextIds,
    /// Completions after which a progress round stops taking shared-memory frames
    /// (module doc, "Fast paths"): 1, except while a wait for several requests
    /// ([`crate::request::wait_all`]) sets how many of its requests are still pending,
    /// so that a window of arrivals is taken in one round.
    completions_wanted: u64,
}

impl Engine {
    /// The engine over the transports built for this job: `routes` has one entry per
    /// world rank; `gpu_pool` holds the GPU temporaries (device collectives, CUDA IPC
    /// staging), built by the caller with its limit.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        rank: u32,
        size: u32,
        shm: Option<ShmTransport>,
        tcp: Option<TcpTransport>,
        rdma: Option<RdmaTransport>,
        routes: Vec<Route>,
        backoff: Backoff,
        gpu_pool: std::sync::Arc<rankwire_gpu::TmpPool>,
    ) -> Engine {
        let mut shm = shm;
        if let Some(t) = shm.as_mut() {
            // progress takes shared-memory frames in place (next_frame).
            t.set_lend_frames(true);
        }
        let mut tcp = tcp;
        if let Some(t) = tcp.as_mut() {
            // Rendezvous data is read straight into receive buffers (place_payload).
            t.set_place_payloads(true);
        }
        let mut proto = Protocol::new(rank, size);
        for (peer, r) in routes.iter().enumerate() {
            if *r == Route::None {
                proto.fail_peer(
                    peer as u32,
                    Error::Connection {
                        peer: peer as u32,
                        detail: "no transport reaches this rank".into(),
                    },
                );
            }
        }
        let mut tp = Transports::new(SelfTransport::new(rank));
        if let Some(t) = shm {
            tp.insert(t);
        }
        if let Some(t) = tcp {
            tp.insert(t);
        }
        if let Some(t) = rdma {
            tp.insert(t);
        }
        // CUDA IPC gets of same-node device rendezvous (always built with `cuda`; it
        // touches no driver until the first get). Polled only while copies run.
        #[cfg(feature = "cuda")]
        tp.insert(rankwire_transports::CudaIpcTransport::new(
            gpu_pool.clone(),
            rankwire_transports::CudaIpcConfig {
                staging: crate::bootstrap::node::env_switch("RANKWIRE_GPU_IPC_STAGING")
                    != Some(false),
                ..Default::default()
            },
        ));
        let mut e = Engine {
            proto,
            tp,
            eager: Vec::new(),
            device_eager: Vec::new(),
            routes,
            backlog: (0..size).map(|_| VecDeque::new()).collect(),
            landing: (0..size).map(|_| VecDeque::new()).collect(),
            wireup: VecDeque::new(),
            events: Vec::new(),
            backoff,
            mem: Default::default(),
            #[cfg(feature = "cuda")]
            ipc_events: Vec::new(),
            gpu_pool,
            ctx_ids: crate::context_id::ContextIds::new(),
            completions_wanted: 1,
        };
        e.eager = (0..size)
            .map(|p| e.host_caps(p).map_or(0, |c| c.eager_limit_bytes))
            .collect();
        e.device_eager = e.eager.clone();
        e
    }

    /// Device messages to `peer` whose device path is CUDA IPC go eagerly up to
    /// `RANKWIRE_GPU_EAGER_MAX` bytes ([`crate::select::device_eager_max`], default
    /// 0: every size by rendezvous) instead of the host eager limit.
    pub(crate) fn set_device_ipc_peer(&mut self, peer: u32) {
        let host = self.eager_limit(peer);
        if let Some(d) = self.device_eager.get_mut(peer as usize) {
            *d = crate::select::device_eager_max().map_or(0, |m| m.min(host));
        }
    }

    /// Eager limit for host messages to `peer`, in bytes.
    #[inline]
    pub(crate) fn eager_limit(&self, peer: u32) -> usize {
        self.eager.get(peer as usize).copied().unwrap_or(0)
    }

    /// Fast path of a blocking receive for `pat` into the host buffer `buf` (MPI_Recv
    /// from a rank on this node, when nothing else is going on): watch that peer's ring
    /// for up to `spins` looks and take its next message straight into `buf`, without
    /// posting a request or running the general progress round. `None` when the
    /// conditions do not hold ([`Protocol::quiet_for`], a specific source reached by
    /// shm, nothing queued), when the next frame is
    /// anything but the in-order eager message the receive accepts, or when the spins
    /// run out: nothing was received then, and the caller posts the receive and waits
    /// the general way (a frame looked at stays where it is). The engine does not know
    /// of nonblocking collectives: the caller takes this path only when none is
    /// running (a receive that bypasses progress would not advance them).
    #[inline]
    pub(crate) fn recv_direct(
        &mut self,
        pat: &crate::matching::Pattern,
        buf: RawBuf,
        spins: u32,
    ) -> Option<Result<crate::protocol::Status, Error>> {
        let src = pat.src?;
        if self.route(src) != Route::Shm
            || !buf.is_host()
            || self.any_backlog()
            || !self.proto.quiet_for(pat)
        {
            return None;
        }
        let t = self.tp.shm_mut()?;
        let idx = t.peer_index(src)?;
        for _ in 0..spins {
            let Some(f) = t.frame_from(idx) else {
                continue;
            };
            let r = self
                .proto
                .take_eager(f.peer, f.header, &f.payload, pat, buf)?;
            t.consume_frame();
            return Some(r);
        }
        None
    }

    /// Cheap look for work: whether a shared-memory frame or event may be waiting
    /// (one load per ring). Waits spin on this between full progress rounds.
    #[inline]
    pub(crate) fn arrival_hint(&self) -> bool {
        self.tp.shm().is_some_and(|t| t.has_work())
    }

    /// Whether transports other than shared memory serve some peer (then waits run
    /// full progress rounds instead of spinning on [`Engine::arrival_hint`]).
    pub(crate) fn shm_only(&self) -> bool {
        !self.tp.contains(TransportKind::Tcp)
            && !self.tp.contains(TransportKind::Rdma)
            && !self.ipc_busy()
    }

    pub(crate) fn route(&self, peer: u32) -> Route {
        self.routes
            .get(peer as usize)
            .copied()
            .unwrap_or(Route::None)
    }

    fn host_caps(&self, peer: u32) -> Option<rankwire_transports::KindCaps> {
        self.tp.by_kind(kind_of(self.route(peer))?)?.caps().host
    }

    /// The RDMA transport, if it serves any peer.
    pub(crate) fn rdma(&self) -> Option<&RdmaTransport> {
        self.tp.rdma()
    }

    /// Allow single copy by cross-memory attach (`on`) or not (`RANKWIRE_CMA=0`): the
    /// shm transport's caps say so, and its `get`/`put` refuse when not.
    pub(crate) fn set_cma_allowed(&mut self, on: bool) {
        self.tp.set_cma_allowed(on);
    }

    /// The transport that serves `peer`.
    #[inline]
    fn transport(&mut self, peer: u32) -> Option<&mut AnyTransport> {
        self.tp.by_kind_mut(kind_of(self.route(peer))?)
    }

    /// Start a send of `buf` to world rank `dst` on context `ctx` with `tag` (the
    /// protocol's `isend`, with the eager fast path): a host message within the eager
    /// limit, with nothing queued for `dst` before it, is handed to the transport at
    /// once and, if taken, is complete on return ([`SendStart::Done`]) without a request
    /// in the protocol's tables. Everything else is queued and driven by `progress`.
    #[inline(always)]
    pub(crate) fn isend(
        &mut self,
        dst: u32,
        ctx: u32,
        tag: i32,
        buf: RawBuf,
        sync: bool,
    ) -> SendStart {
        let lim = self.eager_limit(dst);
        if !sync
            && buf.is_host()
            && buf.len() <= lim
            && self.backlog.get(dst as usize).is_some_and(|q| q.is_empty())
            && !self.proto.has_frames_for(dst)
            && let Some(header) = self.proto.eager_header(dst, ctx, tag)
        {
            // SAFETY: the caller keeps `buf` borrowed until the send completes, which
            // for a frame the transport takes is right here.
            let payload = unsafe { buf.as_slice() };
            // Shared memory called directly (inlined), the others through the enum.
            let sent = match (self.routes[dst as usize], self.tp.shm_mut()) {
                (Route::Shm, Some(t)) => t.send_now(dst, &header, payload),
                _ => self.send_now_other(dst, &header, payload),
            };
            if sent {
                return SendStart::Done(crate::protocol::Status {
                    source: dst as usize,
                    tag,
                    len_bytes: buf.len(),
                });
            }
            // Busy, or an error that flush_backlog reports the usual way.
            return self.queue_eager(dst, ctx, tag, buf, header);
        }
        self.isend_queued(dst, ctx, tag, buf, sync, lim)
    }

    /// [`Engine::isend`]'s eager frame to a peer reached by a transport other than
    /// shared memory: whether the transport took it at once.
    #[inline(never)]
    fn send_now_other(&mut self, dst: u32, header: &[u8], payload: &[u8]) -> bool {
        match self.transport(dst) {
            Some(t) => matches!(t.send(dst, header, payload), Ok(SendOutcome::Sent)),
            None => false,
        }
    }

    /// [`Engine::isend`]'s eager frame that no transport took at once: queued as a
    /// request.
    #[inline(never)]
    fn queue_eager(
        &mut self,
        dst: u32,
        ctx: u32,
        tag: i32,
        buf: RawBuf,
        header: [u8; crate::wire::SHORT_EAGER_BYTES],
    ) -> SendStart {
        let id = self.proto.queue_eager(dst, ctx, tag, buf, header);
        self.progress();
        SendStart::Queued(id)
    }

    /// [`Engine::isend`] for everything but its fast path: the protocol queues it.
    #[inline(never)]
    fn isend_queued(
        &mut self,
        dst: u32,
        ctx: u32,
        tag: i32,
        buf: RawBuf,
        sync: bool,
        lim: usize,
    ) -> SendStart {
        let lim = if buf.is_host() {
            lim
        } else {
            self.device_eager.get(dst as usize).copied().unwrap_or(lim)
        };
        let id = self.proto.isend(dst, ctx, tag, buf, lim, sync);
        // Push eager frames out right away: the common small send completes here.
        self.progress();
        SendStart::Queued(id)
    }

    /// Let progress rounds take shared-memory frames until `n` requests have completed
    /// (at least 1; see `completions_wanted`), rather than stop at the first.
    #[inline]
    pub(crate) fn want_completions(&mut self, n: usize) {
        self.completions_wanted = (n as u64).max(1);
    }

    /// One round of progress. Returns whether anything happened.
    pub(crate) fn progress(&mut self) -> bool {
        let mut any = false;
        // Pipelined device copies that completed answer their requests (device_path).
        if self.mem.in_flight() {
            any |= self.run_mem_actions();
        }
        // Arrivals lent in place by shared memory first: the common small message is
        // copied once, from the ring into the posted receive buffer.
        if let Some(t) = self.tp.shm_mut() {
            let stop_at = self.proto.completions() + self.completions_wanted;
            for _ in 0..FRAMES_PER_PROGRESS {
                let Some(f) = t.next_frame() else {
                    break;
                };
                any = true;
                let peer = f.peer;
                // A large Data chunk for a device receive: copied from the ring into a
                // pinned buffer, then to the device without waiting (device_path).
                if f.payload.len() > crate::device_path::SYNC_MAX_BYTES
                    && crate::wire::Frame::is_data(f.header)
                    && let Some(dst) = self.proto.data_target(peer, f.header, f.payload.len())
                    && !dst.is_host()
                    && let Some(addr) = self.mem.take_landing(f.payload.len())
                {
                    // SAFETY: `addr` is a pinned buffer of at least payload.len() bytes
                    // lent to this frame, and nothing else uses it.
                    f.payload.copy_to(unsafe {
                        std::slice::from_raw_parts_mut(addr as *mut u8, f.payload.len())
                    });
                    let r = self.proto.on_frame_staged(peer, f.header, f.payload.len());
                    t.consume_frame();
                    match r {
                        Ok(Some((rreq, dst))) => {
                            self.mem.stage_in_landed(&mut self.proto, rreq, dst, addr)
                        }
                        Ok(None) => self.mem.give_landing(addr),
                        Err(e) => {
                            self.mem.give_landing(addr);
                            tracing::error!("rank {peer} sent a bad frame: {e}");
                            self.backlog[peer as usize].clear();
                        }
                    }
                    continue;
                }
                let r = self.proto.on_frame(peer, f.header, f.payload);
                t.consume_frame();
                if let Err(e) = r {
                    tracing::error!("rank {peer} sent a bad frame: {e}");
                    self.backlog[peer as usize].clear();
                }
                if self.proto.completions() >= stop_at {
                    // A waiting call may return now; more frames are for the next
                    // round (looking at the next record would cost a cache miss now).
                    break;
                }
            }
        }
        if self.proto.has_output() || self.any_backlog() {
            any |= self.push_output();
        }
        // Arrivals.
        let mut events = std::mem::take(&mut self.events);
        for &kind in POLL_ORDER {
            let Some(t) = self.tp.by_kind_mut(kind) else {
                continue;
            };
            any |= t.poll(&mut events);
            // Big payloads waiting for a place (TCP): Data of a receive goes straight
            // into it.
            while let Some((peer, header, len)) = t.awaiting_place() {
                let dst = match self.proto.data_target(peer, header, len) {
                    Some(b) if b.is_host() => Some(b.as_mut_ptr()),
                    // A device receive's chunk lands in a pinned buffer, copied in
                    // after RecvPlaced (device_path); without one it comes as a Vec.
                    Some(_) => match data_frame(header) {
                        Some((rreq, offset)) => self.mem.take_landing(len).map(|addr| {
                            self.landing[peer as usize].push_back(Landing { addr, rreq, offset });
                            addr as *mut u8
                        }),
                        None => None,
                    },
                    None => None,
                };
                // SAFETY: the target is the unfilled part of a pending receive's buffer,
                // borrowed by that request until its Data frames have arrived (reported
                // by RecvPlaced below) or the peer failed (then the socket is closed);
                // or a pinned landing buffer of `len` bytes lent to this frame until
                // RecvPlaced or the peer's failure.
                unsafe { t.place_payload(peer, dst) };
                any = true;
            }
        }
        if !events.is_empty() {
            any = true;
            self.handle_events(&mut events);
        }
        self.events = events;
        if self.proto.has_output() || self.any_backlog() {
            any |= self.push_output();
        }
        if self.ipc_busy() {
            any |= self.poll_ipc();
        }
        if self.tp.contains(TransportKind::Rdma) {
            any |= self.pump_wireup();
        }
        // No completion may be taken while a device copy still uses its buffer.
        if self.mem.in_flight() {
            self.mem.settle_orphans(&self.proto);
        }
        any
    }

    /// Carry the RDMA transport's wireup messages (queue pairs made on demand) to their
    /// peers over TCP; whether any moved. A TCP failure fails the peer as any TCP
    /// failure does.
    fn pump_wireup(&mut self) -> bool {
        if let Some(r) = self.tp.rdma_mut() {
            while let Some(m) = r.take_wireup() {
                self.wireup.push_back(m);
            }
        }
        let mut any = false;
        while let Some((peer, msg)) = self.wireup.pop_front() {
            let res = match self.tp.tcp_mut() {
                Some(t) => t.send(peer, &msg, &[]),
                None => Err(rankwire_transports::TransportError::NoSuchPeer {
                    transport: "tcp (RDMA wireup)",
                    peer,
                }),
            };
            match res {
                Ok(SendOutcome::Sent) => any = true,
                Ok(SendOutcome::Busy) => {
                    self.wireup.push_front((peer, msg));
                    break;
                }
                Err(e) => {
                    any = true;
                    self.proto.fail_peer(peer, e.into());
                    self.backlog[peer as usize].clear();
                }
            }
        }
        any
    }

    /// Whether CUDA IPC copies are still running.
    #[inline]
    fn ipc_busy(&self) -> bool {
        #[cfg(feature = "cuda")]
        return self.tp.cuda_ipc().is_some_and(|t| t.busy());
        #[cfg(not(feature = "cuda"))]
        false
    }

    /// Counters of the CUDA IPC cache; `None` before the first IPC pull.
    pub(crate) fn ipc_stats(&self) -> Option<rankwire_gpu::IpcCacheStats> {
        #[cfg(feature = "cuda")]
        return self.tp.cuda_ipc().and_then(|t| t.stats());
        #[cfg(not(feature = "cuda"))]
        None
    }

    /// Hand the pulls whose CUDA IPC copies finished to the protocol (the op id of a
    /// get is its receive request). Returns whether any finished.
    #[cfg(feature = "cuda")]
    fn poll_ipc(&mut self) -> bool {
        let Some(t) = self.tp.by_kind_mut(TransportKind::CudaIpc) else {
            return false;
        };
        let mut events = std::mem::take(&mut self.ipc_events);
        let any = t.poll(&mut events);
        for ev in events.drain(..) {
            if let Event::OpDone { op, result, .. } = ev {
                self.proto.pull_done(op, result.map_err(|e| e.to_string()));
            }
        }
        self.ipc_events = events;
        any
    }

    #[cfg(not(feature = "cuda"))]
    fn poll_ipc(&mut self) -> bool {
        false
    }

    /// Start the CUDA IPC copy of a pull (a get of the set's `cuda_ipc` transport,
    /// routed by the descriptor; op id = the receive request); it completes through
    /// [`Engine::poll_ipc`], or at once with the error if it could not be queued.
    fn start_ipc_pull(&mut self, p: &PullReq) {
        #[cfg(feature = "cuda")]
        let r = {
            let dst = LocalBuf {
                addr: p.dst.as_mut_ptr() as u64,
                len_bytes: p.dst.len(),
                kind: p.dst.kind(),
            };
            // SAFETY: `dst` is the accepted prefix of a pending receive's buffer,
            // borrowed by that request until pull_done, which happens on the OpDone of
            // this get (or below, if it did not start).
            match unsafe { self.tp.get_remote(p.peer, p.rreq, dst, &p.mem, 0) } {
                Ok(rankwire_transports::OpStart::Pending) => return,
                Ok(rankwire_transports::OpStart::Done) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        };
        #[cfg(not(feature = "cuda"))]
        let r = Err(rankwire_gpu::GpuError::NotBuilt.to_string());
        self.proto.pull_done(p.rreq, r);
    }

    /// Whether frames wait in some peer's backlog (its transport was busy).
    #[inline]
    fn any_backlog(&self) -> bool {
        self.backlog.iter().any(|q| !q.is_empty())
    }

    /// Move the protocol's output to transports: frames, rendezvous data while
    /// transports take it, and single-copy pulls. Returns whether anything moved.
    fn push_output(&mut self) -> bool {
        // Memory actions first: their answers queue frames (staged eager messages,
        // offered Rts) and complete receives into device buffers.
        let mut any = self.run_mem_actions();
        while let Some(f) = self.proto.pop_frame() {
            if let Some(q) = self.backlog.get_mut(f.peer as usize) {
                q.push_back(f);
            }
        }
        for peer in 0..self.backlog.len() {
            any |= self.flush_backlog(peer as u32);
        }
        // Shares of this rank's sends that receivers asked it to write: before any
        // rendezvous data, so that a send falling back to Data after a Push (its receiver
        // could not pull) has written its share before its last Data frame completes it.
        while let Some(p) = self.proto.pop_push() {
            any = true;
            let src = LocalBuf {
                addr: p.src.as_mut_ptr() as u64,
                len_bytes: p.src.len(),
                kind: p.src.kind(),
            };
            // SAFETY: `src` is part of a pending send's buffer, borrowed by that request
            // until it completes, which needs this write's `Pushed` first. Writes by
            // cross-memory attach are done on return.
            let r = match unsafe { self.tp.put_remote(p.peer, p.sreq, src, &p.mem, 0) } {
                Ok(OpStart::Done) => Ok(()),
                Ok(OpStart::Pending) => Err(format!(
                    "a share write into {:?} did not complete at once",
                    p.mem
                )),
                Err(e) => Err(e.to_string()),
            };
            self.proto.push_done(&p, r);
        }
        // Rendezvous data, while transports take it.
        loop {
            let backlog = &self.backlog;
            let routes = &self.routes;
            let tp = &self.tp;
            let Some(f) = self.proto.next_data(|peer| {
                if !backlog[peer as usize].is_empty() {
                    return None;
                }
                let caps = tp.by_kind(kind_of(routes[peer as usize])?)?.caps().host?;
                Some(caps.max_frame_payload_bytes)
            }) else {
                // Device chunks became staging actions: run them, and send their frames.
                if !self.run_mem_actions() {
                    break;
                }
                any = true;
                while let Some(f) = self.proto.pop_frame() {
                    let peer = f.peer;
                    if let Some(q) = self.backlog.get_mut(peer as usize) {
                        q.push_back(f);
                    }
                    self.flush_backlog(peer);
                }
                continue;
            };
            any = true;
            let peer = f.peer;
            self.backlog[peer as usize].push_back(f);
            self.flush_backlog(peer);
        }
        // Single-copy pulls the protocol asked for. Cross-memory-attach pulls come in
        // chunks, one per round, so that frames (a sender's `Help`) are looked at in
        // between.
        let mut cma_chunks = 0;
        while cma_chunks == 0
            && let Some(p) = self.proto.pop_pull()
        {
            any = true;
            match p.mem {
                // Queued on the device; completes through poll below.
                RemoteMem::CudaIpc { .. } => self.start_ipc_pull(&p),
                // RDMA READ (completes through an OpDone event) or cross-memory attach
                // (done on return; one per round).
                RemoteMem::Rdma { .. } | RemoteMem::HostCma { .. } => {
                    if matches!(p.mem, RemoteMem::HostCma { .. }) {
                        cma_chunks += 1;
                    }
                    let dst = LocalBuf {
                        addr: p.dst.as_mut_ptr() as u64,
                        len_bytes: p.dst.len(),
                        kind: p.dst.kind(),
                    };
                    // SAFETY: `dst` is the accepted prefix of a pending receive's buffer,
                    // borrowed by that request until pull_done: below for a copy done on
                    // return, on the OpDone event of this read otherwise.
                    let r = match unsafe { self.tp.get_remote(p.peer, p.rreq, dst, &p.mem, 0) } {
                        Ok(OpStart::Pending) => continue,
                        Ok(OpStart::Done) => Ok(()),
                        Err(e) => Err(e.to_string()),
                    };
                    self.proto.pull_done(p.rreq, r);
                }
                RemoteMem::None => {
                    self.proto
                        .pull_done(p.rreq, Err("a pull without remote memory".to_string()));
                }
            }
        }
        // A pull's Fin (or a fallback Cts) goes out in this same round.
        while let Some(f) = self.proto.pop_frame() {
            let peer = f.peer;
            if let Some(q) = self.backlog.get_mut(peer as usize) {
                q.push_back(f);
            }
            any |= self.flush_backlog(peer);
        }
        any
    }

    /// Feed the transports' events to the protocol.
    fn handle_events(&mut self, events: &mut Vec<Event>) {
        for ev in events.drain(..) {
            match ev {
                Event::Recv {
                    peer,
                    header,
                    payload,
                } => {
                    // RDMA queue-pair set-up, carried over TCP (on demand).
                    if rankwire_transports::rdma::connect::is_wireup(&header) {
                        let r = match self.tp.rdma_mut() {
                            Some(t) => t.on_wireup(peer, &header),
                            None => Err(rankwire_transports::TransportError::NoSuchPeer {
                                transport: "rdma (wireup)",
                                peer,
                            }),
                        };
                        if let Err(e) = r {
                            tracing::error!("rank {peer}: RDMA connection set-up failed: {e}");
                            self.proto.fail_peer(peer, e.into());
                            self.backlog[peer as usize].clear();
                        }
                        continue;
                    }
                    if let Err(e) = self.proto.on_frame(peer, &header, payload) {
                        tracing::error!("rank {peer} sent a bad frame: {e}");
                        self.backlog[peer as usize].clear();
                    }
                }
                Event::RecvPlaced { peer, header, len } => {
                    // A device receive's payload was placed in the oldest landing
                    // buffer of this peer, recorded with the frame's request and offset.
                    let q = &mut self.landing[peer as usize];
                    let landed = match q.front() {
                        Some(l) if data_frame(&header) == Some((l.rreq, l.offset)) => {
                            q.pop_front().map(|l| l.addr)
                        }
                        _ => None,
                    };
                    let r = match landed {
                        None => self.proto.on_frame_placed(peer, &header, len),
                        Some(addr) => match self.proto.on_frame_staged(peer, &header, len) {
                            Ok(Some((rreq, dst))) => {
                                self.mem.stage_in_landed(&mut self.proto, rreq, dst, addr);
                                Ok(())
                            }
                            r => {
                                self.mem.give_landing(addr);
                                r.map(|_| ())
                            }
                        },
                    };
                    if let Err(e) = r {
                        tracing::error!("rank {peer} sent a bad frame: {e}");
                        self.backlog[peer as usize].clear();
                    }
                }
                Event::OpDone { op, result, .. } => {
                    // An RDMA READ of a pull-mode rendezvous finished.
                    self.proto.pull_done(op, result.map_err(|e| e.to_string()));
                }
                Event::PeerFailed { peer, error } => {
                    tracing::debug!("peer {peer} failed: {error}");
                    // The transport no longer writes a landing buffer of this peer.
                    if let Some(q) = self.landing.get_mut(peer as usize) {
                        for l in q.drain(..) {
                            self.mem.give_landing(l.addr);
                        }
                    }
                    // A peer reached by RDMA can still lose a TCP connection: the one
                    // that carried its queue-pair set-up (on demand). That loss fails the
                    // peer too (the peer process has most likely exited; a job with
                    // queue pairs made at init has no such connection), but the error
                    // says what the connection was for.
                    let error = if self.route(peer) == Route::Rdma {
                        rdma_setup_connection(error)
                    } else {
                        error
                    };
                    // Give the launcher a head start: it sees the peer's own exit at the
                    // moment its connections close, and should report that rank as the
                    // first failure rather than this rank's consequent error.
                    std::thread::sleep(PEER_FAILURE_DELAY);
                    self.proto.fail_peer(peer, error.into());
                    if let Some(q) = self.backlog.get_mut(peer as usize) {
                        q.clear();
                    }
                }
            }
        }
    }

    fn flush_backlog(&mut self, peer: u32) -> bool {
        let mut any = false;
        while let Some(f) = self.backlog[peer as usize].pop_front() {
            // SAFETY: the frame's owning request is pending until on_sent below.
            let payload = unsafe { f.payload.as_slice() };
            let res = match self.transport(peer) {
                Some(t) => t.send(peer, &f.header, payload),
                None => Err(rankwire_transports::TransportError::NoSuchPeer {
                    transport: "none",
                    peer,
                }),
            };
            match res {
                Ok(SendOutcome::Sent) => {
                    any = true;
                    self.proto.on_sent(f.on_sent);
                }
                Ok(SendOutcome::Busy) => {
                    self.backlog[peer as usize].push_front(f);
                    break;
                }
                Err(e) => {
                    self.proto.fail_peer(peer, e.into());
                    self.backlog[peer as usize].clear();
                    return true;
                }
            }
        }
        any
    }

    /// Pending requests with the transport to each peer, for the watchdog report.
    pub(crate) fn describe_pending(&self) -> Vec<String> {
        let mut v = self.proto.describe_pending();
        for (r, route) in self.routes.iter().enumerate() {
            if !self.backlog[r].is_empty() {
                v.push(format!(
                    "{} frames queued for rank {r} ({})",
                    self.backlog[r].len(),
                    route.name()
                ));
            }
        }
        let routes: Vec<String> = self
            .routes
            .iter()
            .enumerate()
            .map(|(r, route)| format!("{r}={}", route.name()))
            .collect();
        v.push(format!("transports by rank: {}", routes.join(" ")));
        v
    }

    /// Execute the protocol's memory actions (device staging, buffer offers through
    /// the `cuda_ipc` and rdma paths); whether any ran.
    fn run_mem_actions(&mut self) -> bool {
        // Device offers register through cuda_ipc, host offers through rdma
        // (`Transport::register`).
        #[cfg(feature = "cuda")]
        let (ipc, rdma) = self.tp.two_mut(TransportKind::CudaIpc, TransportKind::Rdma);
        #[cfg(not(feature = "cuda"))]
        let (ipc, rdma) = (
            None::<&mut AnyTransport>,
            self.tp.by_kind_mut(TransportKind::Rdma),
        );
        self.mem.run(
            &mut self.proto,
            ipc.map(|t| t as &mut dyn rankwire_transports::Transport),
            rdma.map(|t| t as &mut dyn rankwire_transports::Transport),
        )
    }

    /// Whether every frame has been handed to the OS.
    pub(crate) fn is_flushed(&self) -> bool {
        self.backlog.iter().all(|q| q.is_empty())
            && self.wireup.is_empty()
            && !self.proto.has_output()
            && self.tp.is_flushed()
    }

    /// Prepare to sleep until a transport sees activity, at most `timeout`.
    ///
    /// Returns the fds to sleep on in `poll(2)` with the engine unlocked (RDMA
    /// completion channel, TCP epoll: `crate::runtime::sleep`), then call
    /// [`Engine::after_sleep`]. Returns `None` where it slept already, the engine
    /// locked, or only yielded: on the shared-memory doorbell (a futex, not an fd; at
    /// most [`SHM_SLEEP_MAX`]), with device copies in flight (they wake no transport),
    /// or with work pending.
    ///
    /// A futex (shm) and an fd cannot be waited on together: with peers on both, sleep
    /// on the shm doorbell at most 200 µs, so that others' arrivals wait at most that.
    pub(crate) fn prepare_sleep(&mut self, timeout: Duration) -> Option<PollSet> {
        // Device copies in flight (staging, CUDA IPC gets) complete without waking a
        // transport: keep polling.
        if self.mem.in_flight() || self.ipc_busy() {
            std::thread::yield_now();
            return None;
        }
        let uses = |r: Route| self.routes.contains(&r);
        if uses(Route::Shm) {
            let others = uses(Route::Tcp) || self.tp.contains(TransportKind::Rdma);
            let cap = if others {
                Duration::from_micros(200)
            } else {
                SHM_SLEEP_MAX
            };
            if let Some(t) = self.tp.by_kind_mut(TransportKind::Shm) {
                t.wait_activity(timeout.min(cap));
            }
            return None;
        }
        // Frames the transports refused for now are retried by progress, which no fd
        // may signal: come back as often as before the long sleeps.
        let timeout = if self.backlog.iter().all(|q| q.is_empty())
            && self.wireup.is_empty()
            && !self.proto.has_output()
        {
            timeout
        } else {
            timeout.min(SHM_SLEEP_MAX)
        };
        let mut set = PollSet::new(timeout);
        // The RDMA transport exists only when some peer is reached through it.
        if self.tp.contains(TransportKind::Rdma) {
            // Without a completion channel, or with RDMA work pending: yield.
            let Some(rfd) = self.tp.rdma_mut().and_then(|r| r.prepare_wait()) else {
                std::thread::yield_now();
                return None;
            };
            set.push(rfd);
        }
        // TCP carries other peers (and, with RDMA, the queue pairs' set-up).
        if let Some(t) = self.tp.tcp_mut() {
            match t.wait_fd() {
                Some((fd, cap)) => {
                    if let Some(c) = cap {
                        set.timeout = set.timeout.min(c);
                    }
                    set.push(fd);
                }
                // Work to do now.
                None => return None,
            }
        }
        if set.n == 0 {
            std::thread::yield_now();
            return None;
        }
        Some(set)
    }

    /// After a sleep on [`Engine::prepare_sleep`]'s fds: take and acknowledge the RDMA
    /// completion events that came.
    pub(crate) fn after_sleep(&mut self) {
        if let Some(r) = self.tp.rdma_mut() {
            r.finish_wait();
        }
    }

    /// Mark the end of communication: later connection closes are not failures.
    pub(crate) fn quiesce(&mut self) {
        // Releases of offers still queued give their staging buffers back first.
        self.run_mem_actions();
        #[cfg(feature = "cuda")]
        if let Some(t) = self.tp.cuda_ipc_mut() {
            t.close_all();
        }
        // After the final fence no peer maps our collective temporaries any more.
        self.gpu_pool.release_idle();
        self.tp.set_quiesced();
    }
}

/// A pinned buffer a transport lands a device receive's `Data` payload in: its address
/// and the frame's receive request and byte offset.
#[derive(Debug, Clone, Copy)]
struct Landing {
    addr: u64,
    rreq: u64,
    offset: u64,
}

/// The receive request and offset of a `Data` frame header; `None` for other frames.
fn data_frame(header: &[u8]) -> Option<(u64, u64)> {
    match crate::wire::Frame::decode(header) {
        Ok(Some((crate::wire::Frame::Data { rreq, offset }, _, _))) => Some((rreq, offset)),
        _ => None,
    }
}

/// The transport kind of a route (`None` for [`Route::None`]).
#[inline]
/// Rename the transport of a TCP error to say that the connection carried RDMA
/// queue-pair set-up (the peer's data goes over RDMA); other errors unchanged.
fn rdma_setup_connection(
    error: rankwire_transports::TransportError,
) -> rankwire_transports::TransportError {
    use rankwire_transports::TransportError as E;
    const WHAT: &str = "tcp (the connection that set up the RDMA queue pair)";
    match error {
        E::PeerLost {
            transport: "tcp",
            peer,
            reason,
        } => E::PeerLost {
            transport: WHAT,
            peer,
            reason,
        },
        E::Connect {
            transport: "tcp",
            peer,
            reason,
        } => E::Connect {
            transport: WHAT,
            peer,
            reason,
        },
        other => other,
    }
}

fn kind_of(route: Route) -> Option<TransportKind> {
    match route {
        Route::SelfTp => Some(TransportKind::SelfTp),
        Route::Shm => Some(TransportKind::Shm),
        Route::Rdma => Some(TransportKind::Rdma),
        Route::Tcp => Some(TransportKind::Tcp),
        Route::None => None,
    }
}

/// Order in which a progress round polls the transports: self, shm, tcp, rdma (as
/// before the enum dispatch; TCP payload placement right after TCP's poll). CUDA IPC is
/// not polled here: [`Engine::poll_ipc`] polls it only while copies run.
const POLL_ORDER: &[TransportKind] = &[
    TransportKind::SelfTp,
    TransportKind::Shm,
    TransportKind::Tcp,
    TransportKind::Rdma,
];

#[cfg(test)]
mod backoff_tests {
    use super::Backoff;

    /// With more ranks than cores, every policy but `spin` gives the core away as soon
    /// as `auto` does (an 8-rank ring on 2 cores was 13x slower under `yield` when it
    /// spun 64 x 64 looks first); `block` sleeps at some point, `yield` never does.
    #[test]
    fn policies_spin_briefly_when_oversubscribed() {
        let auto = Backoff::for_policy("auto", true);
        for p in ["yield", "block", ""] {
            let b = Backoff::for_policy(p, true);
            assert!(b.direct_looks() <= auto.direct_looks(), "{p}");
            assert!(b.spin_polls <= auto.spin_polls, "{p}");
        }
        assert!(Backoff::for_policy("yield", true).block_after.is_none());
        assert!(Backoff::for_policy("block", true).block_after.is_some());
        assert_eq!(Backoff::for_policy("spin", true).spin_polls, u32::MAX);
        assert_eq!(
            Backoff::for_policy("bogus", true).spin_polls,
            auto.spin_polls
        );
        // With a core each, waits spin longer before yielding.
        assert!(Backoff::for_policy("yield", false).direct_looks() > auto.direct_looks());
    }
}

#[cfg(test)]
mod rdma_setup_error_tests {
    use super::rdma_setup_connection;
    use rankwire_transports::TransportError as E;

    /// A lost TCP connection of a peer reached by RDMA says what it was for; errors of
    /// other transports are left as they are.
    #[test]
    fn a_lost_tcp_connection_of_an_rdma_peer_says_it_set_up_the_queue_pair() {
        let lost = E::PeerLost {
            transport: "tcp",
            peer: 3,
            reason: "Connection reset by peer".into(),
        };
        assert_eq!(
            rdma_setup_connection(lost).to_string(),
            "tcp (the connection that set up the RDMA queue pair): connection to rank 3 lost: Connection reset by peer"
        );
        let rdma = E::PeerLost {
            transport: "rdma",
            peer: 3,
            reason: "queue pair in error".into(),
        };
        assert_eq!(
            rdma_setup_connection(rdma).to_string(),
            "rdma: connection to rank 3 lost: queue pair in error"
        );
    }
}
