//! RDMA transport over verbs RC queue pairs (InfiniBand, RoCE, Soft-RoCE).
//!
//! libibverbs is loaded at run time ([`verbs`]), so the same binary runs on machines
//! with and without RDMA: no library, no device or `ENOSYS` means "no RDMA here"
//! ([`RdmaDevice::probe`] returns `Ok(None)`), and the runtime uses TCP.
//!
//! # Lifecycle
//! 1. [`RdmaDevice::probe`] opens a device and picks port and GID ([`device`]:
//!    `RANKWIRE_IB_HCA`, `RANKWIRE_IB_GID_INDEX`, RoCE v2 IPv4-mapped GID by default).
//! 2. [`RdmaTransport::new_on_demand`] creates a PD, one CQ and a registered pool of
//!    eager slots; the RC QP to a peer is created at the first frame to it and connected
//!    through wireup messages the core carries over TCP
//!    ([`RdmaTransport::take_wireup`], [`RdmaTransport::on_wireup`]; handshake in
//!    [`connect`]). [`RdmaTransport::new`] (`RANKWIRE_RDMA_CONNECT=at-init`) instead
//!    makes every QP at once, exchanges [`connect::ConnInfo`] through the bootstrap
//!    ([`crate::Exchange`]), pre-posts the receives and connects (INIT → RTR → RTS).
//!    Every rank calls one of them (with or without a device) because setup has
//!    job-wide fences.
//! 3. Data path ([`datapath`]): frames go as SENDs into the peer's pre-posted receive
//!    slots under credit-based flow control: a sender may have at most as many
//!    messages outstanding as the receiver posted slots; the receiver returns credits by
//!    RDMA-writing its running count of consumed messages into a word of the sender's
//!    pool, so returning credits never consumes a receive slot (no receiver-not-ready
//!    storms, no credit deadlock). Large messages go by rendezvous: the sender's `Rts`
//!    carries address, length and rkey, and the receiver reads the data with
//!    [`RdmaTransport::get`] (RDMA READ); [`RdmaTransport::put`] (RDMA WRITE) exists
//!    for one-sided use. Through the trait, [`crate::Transport::register`] registers
//!    host memory in the cache and returns [`crate::RemoteMem::Rdma`], and
//!    [`crate::Transport::get`] / [`crate::Transport::put`] take such a descriptor and
//!    an offset (checked against its length) and answer [`crate::OpStart::Pending`].
//!    Completions are polled from the CQ by [`crate::Transport::poll`], which the
//!    progress engine calls, and end each operation with [`crate::Event::OpDone`].
//! 4. Registration ([`reg`]) goes through the generic [`crate::regcache`].
//!
//! Layout follows NCCL's `net_ib` split: device init, connection, registration,
//! data path.

#![allow(unsafe_code)]

pub mod connect;
pub mod datapath;
pub mod device;
pub mod gdr;
pub mod reg;
mod verbs;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::regcache::RegCacheConfig;
use crate::{Caps, ConfigError, Exchange, KindCaps, MAX_HEADER_BYTES, Reach, TransportError};

pub use device::{nic_order, pcie_score};
pub use gdr::{DEFAULT_GDR_MAX_BYTES, DeviceAlloc, DeviceExport, GdrMode, GpuMemory};
pub use reg::{GdrFacts, GdrPath, Held, MemoryRegion, Registry, gdr_path};

use connect::ConnInfo;
use verbs::{IbvCq, IbvMr, IbvPd, IbvQp, Verbs};

const NAME: &str = "rdma";

/// Linux errno values the DMA-BUF probe tells apart.
mod libc_errno {
    pub(super) const EOPNOTSUPP: i32 = 95;
    pub(super) const EPROTONOSUPPORT: i32 = 93;
}

/// Queue pairs the completion queue has room for at first, on demand (it grows by
/// `ibv_resize_cq` as more are made).
const CQ_FIRST_QPS: u32 = 4;

/// Bytes of frames one connection keeps while its queue pair is being set up (on
/// demand) before `send` answers Busy: the first eager messages to a peer complete at
/// once, as over TCP, without the peer having to answer first.
pub const QUEUED_BYTES_WHILE_CONNECTING: usize = 4 << 20;

/// Words every error of a queue pair's set-up carries in its reason (a verbs call
/// while connecting, or the peer's `Fail`), so that the core can give the set-up's fix
/// (locked-memory limit, GID settings) rather than a lost peer's.
pub const SETUP_FAILED: &str = "queue pair set-up failed";

/// Payload bytes of one eager slot frame (rendezvous fallback chunks are this size).
pub const FRAME_PAYLOAD_BYTES: usize = 16 * 1024;

/// Settings of the RDMA transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaConfig {
    /// `RANKWIRE_IB_HCA`: device name, optionally `:port` (e.g. `mlx5_0:1`, `rxe0`).
    pub hca: Option<String>,
    /// `RANKWIRE_IB_GID_INDEX`: GID table index to use instead of the automatic choice.
    pub gid_index: Option<u32>,
    /// `RANKWIRE_RDMA_SLOTS`: receive slots (= send credits) per peer (default 16).
    pub slots: u32,
    /// `RANKWIRE_RDMA_EAGER_LIMIT`: largest eager message in bytes (default 8192, at
    /// most [`FRAME_PAYLOAD_BYTES`]).
    pub eager_limit_bytes: usize,
    /// `RANKWIRE_RDMA_LEAVE_PINNED=1`: keep host registrations across operations (the
    /// application promises not to free communication buffers while the job runs).
    pub leave_pinned: bool,
    /// `RANKWIRE_RDMA_GDR`: device buffers NIC-direct where possible (`auto`), required
    /// (`1`: fail init where they would be staged) or never (`0`).
    pub gdr: GdrMode,
    /// `RANKWIRE_RDMA_GDR_MAX_BYTES`: bytes of device registrations the cache keeps
    /// (idle ones beyond are evicted, least recently used first).
    pub gdr_max_bytes: u64,
    /// `RANKWIRE_RDMA_GDR_FLUSH=1`: flush GPUDirect RDMA writes after every receive into
    /// device memory, also where the GPU does not need it (compute capability ≥ 9.0).
    pub gdr_force_flush: bool,
    /// Registration cache bounds (`RANKWIRE_REGCACHE_MAX_ENTRIES`, `..._MAX_BYTES`).
    pub regcache: RegCacheConfig,
    /// `RANKWIRE_RDMA_CONNECT`: `on-demand` (the default: a peer's queue pair is made at
    /// the first frame to it, [`RdmaTransport::new_on_demand`], its set-up carried over
    /// TCP) or `at-init` (every pair at init, [`RdmaTransport::new`]).
    pub on_demand: bool,
    /// `RANKWIRE_CONNECT_TIMEOUT` (shared with TCP, default 60 s): frames that have waited
    /// this long for a peer's queue pair (on demand) are reported by a warning naming
    /// the peer and the handshake step; they keep waiting, as a TCP frame to a busy peer
    /// does (a peer computing without calling rankwire answers late, legally).
    pub connect_timeout: std::time::Duration,
    /// PCI address of the rank's GPU (e.g. `0000:3b:00.0`), set by the caller where
    /// there are several RDMA devices: without `RANKWIRE_IB_HCA`, devices nearest that
    /// GPU are tried first ([`nic_order`]). Not read from the environment.
    pub near_gpu: Option<String>,
}

impl RdmaConfig {
    /// Read the settings from the environment (variables above).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable whose value is unusable.
    pub fn from_env() -> Result<Self, ConfigError> {
        crate::settings::check_names(&[
            "RANKWIRE_IB_HCA",
            "RANKWIRE_IB_GID_INDEX",
            "RANKWIRE_RDMA_SLOTS",
            "RANKWIRE_RDMA_EAGER_LIMIT",
            "RANKWIRE_RDMA_LEAVE_PINNED",
            "RANKWIRE_RDMA_GDR",
            "RANKWIRE_RDMA_GDR_MAX_BYTES",
            "RANKWIRE_RDMA_GDR_FLUSH",
            "RANKWIRE_RDMA_CONNECT",
            crate::tcp::ENV_CONNECT_TIMEOUT,
        ])?;
        let get = |k: &str| crate::settings::raw(k).filter(|v| !v.trim().is_empty());
        let gid_index = match get("RANKWIRE_IB_GID_INDEX") {
            None => None,
            Some(v) => Some(v.trim().parse().map_err(|_| ConfigError {
                var: "RANKWIRE_IB_GID_INDEX",
                value: v.clone(),
                expected: "a GID table index (0, 1, ...); see `ibv_devinfo -v`",
            })?),
        };
        let slots = match get("RANKWIRE_RDMA_SLOTS") {
            None => 16,
            Some(v) => match v.trim().parse::<u32>() {
                Ok(n) if (2..=1024).contains(&n) => n,
                _ => {
                    return Err(ConfigError {
                        var: "RANKWIRE_RDMA_SLOTS",
                        value: v,
                        expected: "a slot count from 2 to 1024",
                    });
                }
            },
        };
        let eager_limit_bytes = match get("RANKWIRE_RDMA_EAGER_LIMIT") {
            None => 8192,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n <= FRAME_PAYLOAD_BYTES => n,
                _ => {
                    return Err(ConfigError {
                        var: "RANKWIRE_RDMA_EAGER_LIMIT",
                        value: v,
                        expected: "a byte count from 0 to 16384",
                    });
                }
            },
        };
        let on_demand = match get("RANKWIRE_RDMA_CONNECT").map(|v| v.trim().to_ascii_lowercase()) {
            None => true,
            Some(v) if v == "on-demand" => true,
            Some(v) if v == "at-init" => false,
            Some(v) => {
                return Err(ConfigError {
                    var: "RANKWIRE_RDMA_CONNECT",
                    value: v,
                    expected: "on-demand or at-init",
                });
            }
        };
        // Read as TCP reads it (the same variable and default).
        let connect_timeout = match get(crate::tcp::ENV_CONNECT_TIMEOUT) {
            None => crate::tcp::TcpConfig::default().connect_timeout,
            Some(v) => crate::tcp::config::parse_timeout(crate::tcp::ENV_CONNECT_TIMEOUT, v)?,
        };
        let gdr_max_bytes = match get("RANKWIRE_RDMA_GDR_MAX_BYTES") {
            None => DEFAULT_GDR_MAX_BYTES,
            Some(v) => v.trim().parse().map_err(|_| ConfigError {
                var: "RANKWIRE_RDMA_GDR_MAX_BYTES",
                value: v.clone(),
                expected: "a number of bytes (a plain integer)",
            })?,
        };
        let flag = |k: &str| crate::settings::switch_or_unset(k) == Some(true);
        Ok(RdmaConfig {
            on_demand,
            connect_timeout,
            hca: get("RANKWIRE_IB_HCA"),
            gid_index,
            slots,
            eager_limit_bytes,
            leave_pinned: flag("RANKWIRE_RDMA_LEAVE_PINNED"),
            gdr: GdrMode::parse(get("RANKWIRE_RDMA_GDR").as_deref())?,
            gdr_max_bytes,
            gdr_force_flush: flag("RANKWIRE_RDMA_GDR_FLUSH"),
            regcache: RegCacheConfig::from_env()?,
            near_gpu: None,
        })
    }
}

/// An opened RDMA device with its chosen port and GID.
pub struct RdmaDevice {
    dev: device::Device,
}

impl std::fmt::Debug for RdmaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RdmaDevice({})", self.dev.why)
    }
}

impl RdmaDevice {
    /// Find a usable device (see [`device`]). `Ok(None)` means no RDMA on this machine,
    /// with the reason.
    ///
    /// # Errors
    /// A settings problem (`RANKWIRE_IB_HCA` names no device, `RANKWIRE_IB_GID_INDEX`
    /// is out of range or empty): the text names the variable and the valid choices.
    pub fn probe(cfg: &RdmaConfig) -> Result<Result<RdmaDevice, String>, String> {
        match device::probe(cfg.hca.as_deref(), cfg.gid_index, cfg.near_gpu.as_deref()) {
            device::Probe::Found(dev) => Ok(Ok(RdmaDevice { dev })),
            device::Probe::Absent(why) => Ok(Err(why)),
            device::Probe::Misconfigured(e) => Err(e),
        }
    }

    /// Device name (e.g. `rxe0`).
    pub fn name(&self) -> &str {
        &self.dev.name
    }
    /// GID table index in use.
    pub fn gid_index(&self) -> u8 {
        self.dev.gid_index
    }
    /// Why this device, port and GID were chosen (for the debug log).
    pub fn why(&self) -> &str {
        &self.dev.why
    }
    /// Whether libibverbs has `ibv_reg_dmabuf_mr` (for [`gdr_path`]).
    pub fn has_dmabuf_mr(&self) -> bool {
        self.dev.verbs.reg_dmabuf_mr.is_some()
    }
}

// Kinds of work requests, in the top byte of wr_id.
const WR_RECV: u64 = 1;
const WR_SEND: u64 = 2;
const WR_CREDIT: u64 = 3;
const WR_ONESIDED: u64 = 4;

fn wr_id(kind: u64, conn: usize, low: u32) -> u64 {
    (kind << 56) | ((conn as u64 & 0xff_ffff) << 32) | low as u64
}

// Where a peer's queue pair is in its set-up (see `connect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    // No QP yet (on demand).
    Idle,
    // Our QP exists and our Request went out; waiting for the peer's Reply or Request.
    Requested,
    // Our QP is RTS with receives posted; frames wait for the peer's Ack (or Reply).
    Connected,
    // The peer's receives are posted too: frames flow.
    Ready,
}

// One peer's queue pair and its eager-slot accounting.
struct Conn {
    peer: u32,
    // Null until made (on demand).
    qp: *mut IbvQp,
    // This connection's registered pool: `slots` receive slots, `slots` send slots, then
    // two credit words (see `credit_word`). Null until made, with the QP.
    pool: *mut u8,
    pool_mr: *mut IbvMr,
    lkey: u32,
    rkey: u32,
    link: Link,
    // The peer's QPN this QP is connected to.
    remote_qpn: Option<u32>,
    // Messages posted to the peer, and the peer's count of consumed ones (RDMA-written
    // by the peer into our pool at `credit_in`).
    sent: u64,
    // Messages received from the peer and reposted, and the count last reported.
    consumed: u64,
    reported: u64,
    // Send slots in use (freed in order at completion), next slot to use.
    send_busy: u32,
    send_next: u32,
    // Work requests outstanding on the send queue.
    sq_outstanding: u32,
    remote_credit_addr: u64,
    remote_credit_rkey: u32,
    failed: bool,
    // Frames taken while the queue pair is not ready (on demand), as slot images
    // (`[header_len][payload_len][header][payload]`), posted in order once it is; their
    // bytes, and when the first was taken (for the slow-handshake warning).
    queued: VecDeque<Vec<u8>>,
    queued_bytes: usize,
    queued_since: Option<std::time::Instant>,
    warned: bool,
    // Why the connection failed (the first failure), once `failed`.
    error: Option<TransportError>,
}

// A one-sided operation in flight: chunks still to complete and the registration of
// the local buffer.
struct OneSided {
    peer: u32,
    op: u64,
    remaining: u32,
    held: Held,
    error: Option<String>,
    /// Device whose memory the reads wrote, to flush before `OpDone`.
    flush: Option<i32>,
}

// A chunk waiting for room on a send queue.
struct Chunk {
    key: u32,
    conn: usize,
    local: u64,
    lkey: u32,
    len: u32,
    remote: u64,
    rkey: u32,
    read: bool,
}

/// The RDMA transport of one rank. See the module doc.
pub struct RdmaTransport {
    caps: Caps,
    verbs: Arc<Verbs>,
    pd: *mut IbvPd,
    cq: *mut IbvCq,
    /// The CQ's completion channel (null where it could not be made: then waits only
    /// yield), its fd nonblocking.
    channel: *mut verbs::IbvCompChannel,
    /// The CQ is armed (`ibv_req_notify_cq`) and no event consumed since.
    armed: bool,
    /// Events found while arming ([`RdmaTransport::prepare_wait`]), delivered first by
    /// the next poll so frames keep their order.
    deferred: Vec<crate::Event>,
    slot_bytes: usize,
    // Entries the completion queue was made or last resized for.
    cq_entries: usize,
    slots: u32,
    sq_depth: u32,
    conns: Vec<Conn>,
    by_peer: HashMap<u32, usize>,
    registry: Registry,
    onesided: HashMap<u32, OneSided>,
    next_key: u32,
    pending: VecDeque<Chunk>,
    done: Vec<crate::Event>,
    quiesced: bool,
    stats: RdmaStats,
    /// Registrations handed out by `Transport::register`, by handle.
    registered: HashMap<u64, Held>,
    next_reg: u64,
    rank: u32,
    // Wireup messages for the core to carry to peers (on demand).
    wireup_out: VecDeque<(u32, Vec<u8>)>,
    // Connections holding queued frames (on demand), to post once ready.
    waiting: Vec<usize>,
    // How long frames may wait for a queue pair before a warning says so.
    connect_warn_after: std::time::Duration,
    // Last: closing the device must come after every field that holds its objects.
    dev: device::Device,
}

// SAFETY: all verbs objects are used by the one thread that holds the engine lock.
unsafe impl Send for RdmaTransport {}

/// Counters of the data path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RdmaStats {
    /// Eager frames sent.
    pub sends: u64,
    /// `send` calls answered Busy for lack of credits.
    pub credit_stalls: u64,
    /// Credit updates written to peers.
    pub credit_writes: u64,
    /// RDMA READ work requests completed.
    pub reads: u64,
    /// RDMA WRITE work requests completed (one-sided puts, not credit updates).
    pub writes: u64,
    /// Queue pairs made so far, each with its registered pool of eager slots (on demand:
    /// one per peer frames were exchanged with).
    pub queue_pairs: u64,
    /// Entries of the completion queue (on demand it grows with the queue pairs).
    pub cq_entries: u64,
    /// Flushes of GPUDirect RDMA writes made after reads into device memory
    /// ([`GpuMemory::needs_flush`]).
    pub gdr_flushes: u64,
    /// Waits that a completion-channel event ended ([`RdmaTransport::finish_wait`]).
    pub wakeups: u64,
    /// Waits that went to sleep on the completion channel
    /// ([`RdmaTransport::prepare_wait`] gave its fd): woken by an event or a timeout.
    pub sleeps: u64,
    /// The device registration cache (GPUDirect RDMA: hits, misses, evictions,
    /// invalidations by buffer id); all zero while device registration is off.
    pub device_regcache: crate::regcache::RegCacheStats,
}

impl RdmaTransport {
    /// The capabilities an RDMA transport declares when built with an eager limit of
    /// `eager_limit_bytes` ([`RdmaConfig::eager_limit_bytes`]; [`Transport::caps`]
    /// returns the same value), known before one is built: transport selection needs
    /// them to pick the peers it then connects to.
    pub fn declared_caps(eager_limit_bytes: usize) -> Caps {
        Caps {
            name: NAME,
            reach: Reach::Network,
            host: Some(KindCaps {
                send: true,
                put: true,
                get: true,
                register: true,
                eager_limit_bytes,
                max_frame_payload_bytes: FRAME_PAYLOAD_BYTES,
                max_message_bytes: u64::MAX,
                needs_registration: true,
            }),
            cuda: None,
            cuda_managed: None,
        }
    }

    /// Set up queue pairs to `peers` (world ranks, not including `rank`) through the
    /// bootstrap. Every rank of the job must call this, with `dev` `None` where there
    /// is no RDMA (and then `peers` empty), because setup includes two job-wide fences.
    /// Returns `None` when there is no device.
    ///
    /// # Errors
    /// [`TransportError::Connect`] naming the peer, the device, the GID index and the
    /// verbs call that failed; [`TransportError::Os`] for PD/CQ/pool setup.
    pub fn new(
        rank: u32,
        dev: Option<RdmaDevice>,
        cfg: &RdmaConfig,
        ex: &mut dyn Exchange,
        peers: &[u32],
    ) -> Result<Option<RdmaTransport>, TransportError> {
        let Some(RdmaDevice { dev }) = dev else {
            fence(ex)?;
            fence(ex)?;
            return Ok(None);
        };
        let mut t = RdmaTransport::create(rank, dev, cfg, peers, true)?;
        let where_ = format!("device {}, GID index {}", t.dev.name, t.dev.gid_index);
        for (i, c) in t.conns.iter().enumerate() {
            let info = ConnInfo {
                // SAFETY: qp is live.
                qpn: unsafe { (*c.qp).qp_num },
                psn: psn(rank, c.peer),
                gid: t.dev.gid,
                lid: t.dev.lid,
                mtu: t.dev.mtu,
                credit_addr: t.credit_word(i, 0) as u64,
                credit_rkey: c.rkey,
            };
            ex.put(&format!("rdma-qp-{rank}-{}", c.peer), &info.encode())
                .map_err(|e| TransportError::Connect {
                    transport: NAME,
                    peer: c.peer,
                    reason: format!("publishing connection data failed: {e}"),
                })?;
        }
        fence(ex)?;
        for i in 0..t.conns.len() {
            let peer = t.conns[i].peer;
            let raw = ex
                .get(peer, &format!("rdma-qp-{peer}-{rank}"))
                .map_err(|e| TransportError::Connect {
                    transport: NAME,
                    peer,
                    reason: format!("no connection data from rank {peer}: {e}"),
                })?;
            let remote = ConnInfo::decode(&raw).ok_or_else(|| TransportError::Connect {
                transport: NAME,
                peer,
                reason: format!(
                    "rank {peer} published {} bytes of connection data, not a ConnInfo",
                    raw.len()
                ),
            })?;
            connect::connect_qp(&t.dev, t.conns[i].qp, psn(rank, peer), &remote).map_err(|e| {
                TransportError::Connect {
                    transport: NAME,
                    peer,
                    reason: format!("{SETUP_FAILED}: {where_}: {e}"),
                }
            })?;
            // Receives are posted once the QP left RESET (rxe refuses them before) and
            // before the fence below, after which the peer may send.
            for s in 0..t.slots {
                t.post_recv(i, s).map_err(|e| TransportError::Connect {
                    transport: NAME,
                    peer,
                    reason: format!("{SETUP_FAILED}: {where_}: {e}"),
                })?;
            }
            t.conns[i].remote_credit_addr = remote.credit_addr;
            t.conns[i].remote_credit_rkey = remote.credit_rkey;
            t.conns[i].remote_qpn = Some(remote.qpn);
            t.conns[i].link = Link::Ready;
        }
        fence(ex)?;
        tracing::debug!(
            "rdma: rank {rank} connected to {} peer(s) on {} port {}, GID index {}",
            t.conns.len(),
            t.dev.name,
            t.dev.port,
            t.dev.gid_index
        );
        Ok(Some(t))
    }

    /// Set up for `peers` (world ranks, not including `rank`) without making any queue
    /// pair: the one to a peer is made at the first frame to it or at its first
    /// wireup message, through [`RdmaTransport::take_wireup`] and
    /// [`RdmaTransport::on_wireup`], which the caller carries between the two ranks on a
    /// reliable, authenticated channel (the core uses TCP). A frame to a peer whose
    /// queue pair is not ready yet is kept and answered [`crate::SendOutcome::Sent`] (up
    /// to [`QUEUED_BYTES_WHILE_CONNECTING`] bytes per peer, then
    /// [`crate::SendOutcome::Busy`]); kept frames are posted in order once it is ready,
    /// by [`crate::Transport::poll`]. Every rank
    /// of the job must call this or [`RdmaTransport::new`] (same setting everywhere),
    /// with `dev` `None` where there is no RDMA: setup has the same two job-wide fences.
    /// Returns `None` when there is no device.
    ///
    /// # Errors
    /// [`TransportError::Os`] for PD/CQ/pool setup or a failed fence.
    pub fn new_on_demand(
        rank: u32,
        dev: Option<RdmaDevice>,
        cfg: &RdmaConfig,
        ex: &mut dyn Exchange,
        peers: &[u32],
    ) -> Result<Option<RdmaTransport>, TransportError> {
        let t = match dev {
            Some(RdmaDevice { dev }) => Some(RdmaTransport::create(rank, dev, cfg, peers, false)?),
            None => None,
        };
        // The fences of `new`, so that ranks with and without a device stay in step.
        fence(ex)?;
        fence(ex)?;
        if let Some(t) = &t {
            tracing::debug!(
                "rdma: rank {rank} ready for {} peer(s) on {} port {}, GID index {}; queue \
                 pairs are made on demand",
                t.conns.len(),
                t.dev.name,
                t.dev.port,
                t.dev.gid_index
            );
        }
        Ok(t)
    }

    /// The next wireup message to carry to a peer: `(peer, bytes)`; the peer's transport
    /// takes it in [`RdmaTransport::on_wireup`]. Messages to one peer must arrive in the
    /// order taken.
    pub fn take_wireup(&mut self) -> Option<(u32, Vec<u8>)> {
        self.wireup_out.pop_front()
    }

    /// Take a wireup message `msg` from `peer` (see [`connect`] for the handshake):
    /// makes and connects this side's queue pair as needed and queues the answer.
    ///
    /// # Errors
    /// [`TransportError::NoSuchPeer`]; [`TransportError::Malformed`] for bytes that are
    /// no wireup message or one out of order (a Reply without a Request, another QPN
    /// than before); [`TransportError::Connect`] naming the verbs call that failed.
    pub fn on_wireup(&mut self, peer: u32, msg: &[u8]) -> Result<(), TransportError> {
        let Some(&c) = self.by_peer.get(&peer) else {
            return Err(TransportError::NoSuchPeer {
                transport: NAME,
                peer,
            });
        };
        let m = connect::Wireup::decode(msg);
        if let Some(connect::Wireup::Fail { setup, reason }) = &m {
            // The peer gave up on the pair: fail it here too, with the peer's words (a
            // verbs failure there keeps the set-up mark, for the set-up's fix).
            let reason = if !*setup {
                format!("rank {peer} refused the queue pair set-up: {reason}")
            } else if reason.contains(SETUP_FAILED) {
                format!("rank {peer} could not set up its end of the queue pair: {reason}")
            } else {
                format!(
                    "{SETUP_FAILED}: rank {peer} could not set up its end of the queue pair: \
                     {reason}"
                )
            };
            let err = TransportError::Connect {
                transport: NAME,
                peer,
                reason,
            };
            return Err(self.fail_with(c, err));
        }
        let r = match m {
            _ if self.conns[c].failed => Err(self.failure(c)),
            None => Err(TransportError::Malformed {
                transport: NAME,
                peer,
                reason: format!("{} bytes that are no RDMA wireup message", msg.len()),
            }),
            Some(m) => self.handshake(c, m),
        };
        if let Err(e) = &r {
            // Whatever went wrong, the pair is failed on this side (the core fails the
            // peer).
            self.fail_and_tell(c, e);
        }
        r
    }

    // One step of the handshake (module doc of `connect`) on connection `c`.
    fn handshake(&mut self, c: usize, m: connect::Wireup) -> Result<(), TransportError> {
        let peer = self.conns[c].peer;
        let bad = |reason: &str| TransportError::Malformed {
            transport: NAME,
            peer,
            reason: reason.to_string(),
        };
        let link = self.conns[c].link;
        match m {
            connect::Wireup::Request(info) => {
                match link {
                    Link::Idle | Link::Requested => {
                        self.ensure_qp(c)?;
                        self.connect_to(c, &info)?;
                    }
                    Link::Connected | Link::Ready => self.check_same_qp(c, &info)?,
                }
                let reply = connect::Wireup::Reply(self.local_info(c));
                self.wireup_out.push_back((peer, reply.encode()));
            }
            connect::Wireup::Reply(info) => {
                match link {
                    Link::Idle => return Err(bad("a wireup Reply without our Request")),
                    Link::Requested => self.connect_to(c, &info)?,
                    Link::Connected | Link::Ready => self.check_same_qp(c, &info)?,
                }
                self.wireup_out
                    .push_back((peer, connect::Wireup::Ack.encode()));
                self.set_ready(c);
            }
            connect::Wireup::Ack => match link {
                Link::Connected | Link::Ready => self.set_ready(c),
                Link::Idle | Link::Requested => {
                    return Err(bad("a wireup Ack before our Reply"));
                }
            },
            connect::Wireup::Fail { .. } => unreachable!("handled by on_wireup"),
        }
        Ok(())
    }

    // Fail connection `c` by `e` and tell the peer with a `Fail` wireup message, so that
    // it fails the pair too instead of waiting for us: a verbs call that failed
    // (`Connect`, `Os`: set-up) or a refused handshake message (the rest).
    fn fail_and_tell(&mut self, c: usize, e: &TransportError) {
        self.fail_with(c, e.clone());
        let fail = connect::Wireup::Fail {
            setup: matches!(
                e,
                TransportError::Connect { .. } | TransportError::Os { .. }
            ),
            reason: e.to_string(),
        };
        self.wireup_out
            .push_back((self.conns[c].peer, fail.encode()));
    }

    // Frames may go to the peer now (queued ones are posted by the next poll).
    pub(super) fn set_ready(&mut self, c: usize) {
        if self.conns[c].link != Link::Ready {
            self.conns[c].link = Link::Ready;
            tracing::debug!(
                "rdma: rank {} <-> rank {}: queue pair ready (on demand)",
                self.rank,
                self.conns[c].peer
            );
        }
    }

    fn check_same_qp(&self, c: usize, info: &ConnInfo) -> Result<(), TransportError> {
        if self.conns[c].remote_qpn == Some(info.qpn) {
            return Ok(());
        }
        Err(TransportError::Malformed {
            transport: NAME,
            peer: self.conns[c].peer,
            reason: format!(
                "wireup names QPN {} but this queue pair is connected to {:?}",
                info.qpn, self.conns[c].remote_qpn
            ),
        })
    }

    // Make the pool and the QP of connection `c` if it has none.
    fn ensure_qp(&mut self, c: usize) -> Result<(), TransportError> {
        if !self.conns[c].qp.is_null() {
            return Ok(());
        }
        if self.conns[c].pool.is_null() {
            let bytes = self.pool_bytes();
            let layout = std::alloc::Layout::from_size_align(bytes, 4096).map_err(|e| {
                TransportError::Os {
                    transport: NAME,
                    call: "alloc",
                    reason: e.to_string(),
                }
            })?;
            // SAFETY: non-zero size.
            let pool = unsafe { std::alloc::alloc_zeroed(layout) };
            if pool.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            // SAFETY: pool is a live allocation of `bytes` bytes, kept until drop.
            let mr = unsafe {
                (self.verbs.reg_mr)(
                    self.pd,
                    pool as *mut std::ffi::c_void,
                    bytes,
                    verbs::ACCESS_LOCAL_WRITE
                        | verbs::ACCESS_REMOTE_WRITE
                        | verbs::ACCESS_REMOTE_READ,
                )
            };
            if mr.is_null() {
                let reason = format!(
                    "ibv_reg_mr (eager pool of {bytes} bytes, device {}): {}",
                    self.dev.name,
                    verbs::errno_text()
                );
                // SAFETY: allocated above with this layout, never registered.
                unsafe { std::alloc::dealloc(pool, layout) };
                return Err(TransportError::Os {
                    transport: NAME,
                    call: "ibv_reg_mr",
                    reason,
                });
            }
            let conn = &mut self.conns[c];
            conn.pool = pool;
            conn.pool_mr = mr;
            // SAFETY: non-null MR.
            (conn.lkey, conn.rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        }
        self.grow_cq()?;
        let qp = connect::create_qp(&self.dev, self.pd, self.cq, self.sq_depth, self.slots)
            .map_err(|e| TransportError::Connect {
                transport: NAME,
                peer: self.conns[c].peer,
                reason: format!(
                    "device {}, GID index {}: {e}",
                    self.dev.name, self.dev.gid_index
                ),
            })?;
        self.conns[c].qp = qp;
        Ok(())
    }

    // What the peer of connection `c` needs to connect to our QP (which exists).
    fn local_info(&self, c: usize) -> ConnInfo {
        ConnInfo {
            // SAFETY: the QP is live (made by create or ensure_qp).
            qpn: unsafe { (*self.conns[c].qp).qp_num },
            psn: psn(self.rank, self.conns[c].peer),
            gid: self.dev.gid,
            lid: self.dev.lid,
            mtu: self.dev.mtu,
            credit_addr: self.credit_word(c, 0) as u64,
            credit_rkey: self.conns[c].rkey,
        }
    }

    // Move the QP of `c` to RTS against `remote` and post its receives.
    fn connect_to(&mut self, c: usize, remote: &ConnInfo) -> Result<(), TransportError> {
        let peer = self.conns[c].peer;
        let err = |e: String, dev: &device::Device| TransportError::Connect {
            transport: NAME,
            peer,
            reason: format!(
                "{SETUP_FAILED}: device {}, GID index {}: {e}",
                dev.name, dev.gid_index
            ),
        };
        connect::connect_qp(&self.dev, self.conns[c].qp, psn(self.rank, peer), remote)
            .map_err(|e| err(e, &self.dev))?;
        // Receives are posted once the QP left RESET (rxe refuses them before) and
        // before the peer learns it may send.
        for s in 0..self.slots {
            self.post_recv(c, s).map_err(|e| err(e, &self.dev))?;
        }
        let conn = &mut self.conns[c];
        conn.remote_credit_addr = remote.credit_addr;
        conn.remote_credit_rkey = remote.credit_rkey;
        conn.remote_qpn = Some(remote.qpn);
        conn.link = Link::Connected;
        Ok(())
    }

    // The first frame to a peer without a QP: make it and send our Request.
    pub(super) fn start_link(&mut self, c: usize) -> Result<(), TransportError> {
        if let Err(e) = self.ensure_qp(c) {
            self.fail_and_tell(c, &e);
            return Err(e);
        }
        self.conns[c].link = Link::Requested;
        let req = connect::Wireup::Request(self.local_info(c));
        self.wireup_out
            .push_back((self.conns[c].peer, req.encode()));
        Ok(())
    }

    fn create(
        rank: u32,
        dev: device::Device,
        cfg: &RdmaConfig,
        peers: &[u32],
        make_qps: bool,
    ) -> Result<RdmaTransport, TransportError> {
        let verbs = dev.verbs.clone();
        let os = |call: &'static str, dev: &device::Device| TransportError::Os {
            transport: NAME,
            call,
            reason: format!("{} (device {}): {}", call, dev.name, verbs::errno_text()),
        };
        // SAFETY: dev.ctx is open.
        let pd = unsafe { (verbs.alloc_pd)(dev.ctx) };
        if pd.is_null() {
            return Err(os("ibv_alloc_pd", &dev));
        }
        let slots = cfg.slots;
        let n = peers.len().max(1) as u32;
        // Send queue: eager slots, credit writes, one-sided chunks.
        let sq_depth = slots + 64;
        // On demand, room for the first few queue pairs; `ensure_qp` grows it.
        let first = if make_qps { n } else { n.min(CQ_FIRST_QPS) };
        let cqe = (first * (slots + sq_depth) + 16) as i32;
        // A completion channel lets a waiting rank sleep until the next completion
        // (prepare_wait); without one it only yields.
        // SAFETY: dev.ctx is open.
        let mut channel = unsafe { (verbs.create_comp_channel)(dev.ctx) };
        if channel.is_null() {
            tracing::debug!(
                "rdma: ibv_create_comp_channel failed ({}): waits poll instead of sleeping",
                verbs::errno_text()
            );
        } else {
            // SAFETY: a live channel; its fd is ours to make nonblocking.
            let ok = unsafe {
                let fd = (*channel).fd;
                let fl = libc::fcntl(fd, libc::F_GETFL);
                fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
            };
            if !ok {
                // SAFETY: made above, used by nothing yet.
                unsafe { (verbs.destroy_comp_channel)(channel) };
                channel = std::ptr::null_mut();
            }
        }
        // SAFETY: dev.ctx is open; `channel` is null or live.
        let cq =
            unsafe { (verbs.create_cq)(dev.ctx, cqe, std::ptr::null_mut(), channel.cast(), 0) };
        if cq.is_null() {
            let e = os("ibv_create_cq", &dev);
            // SAFETY: allocated above.
            unsafe {
                if !channel.is_null() {
                    (verbs.destroy_comp_channel)(channel);
                }
                (verbs.dealloc_pd)(pd)
            };
            return Err(e);
        }
        let slot_bytes = (8 + MAX_HEADER_BYTES + FRAME_PAYLOAD_BYTES).next_multiple_of(64);
        let mut regcache = cfg.regcache;
        if !cfg.leave_pinned {
            // Host buffers get a new identity per operation (see Registry::acquire_host):
            // idle registrations could never be hit again, so do not keep them.
            regcache.max_idle_entries = 0;
        }
        let registry = Registry::new(verbs.clone(), pd, regcache, cfg.leave_pinned);
        let mut t = RdmaTransport {
            caps: RdmaTransport::declared_caps(cfg.eager_limit_bytes),
            dev,
            verbs,
            pd,
            cq,
            channel,
            armed: false,
            deferred: Vec::new(),
            slot_bytes,
            cq_entries: cqe as usize,
            slots,
            sq_depth,
            conns: Vec::new(),
            by_peer: HashMap::new(),
            registry,
            onesided: HashMap::new(),
            next_key: 1,
            pending: VecDeque::new(),
            done: Vec::new(),
            quiesced: false,
            stats: RdmaStats::default(),
            registered: HashMap::new(),
            next_reg: 1,
            rank,
            wireup_out: VecDeque::new(),
            waiting: Vec::new(),
            connect_warn_after: cfg.connect_timeout,
        };
        for &peer in peers {
            t.by_peer.insert(peer, t.conns.len());
            t.conns.push(Conn {
                peer,
                qp: std::ptr::null_mut(),
                pool: std::ptr::null_mut(),
                pool_mr: std::ptr::null_mut(),
                lkey: 0,
                rkey: 0,
                link: Link::Idle,
                remote_qpn: None,
                sent: 0,
                consumed: 0,
                reported: 0,
                send_busy: 0,
                send_next: 0,
                sq_outstanding: 0,
                remote_credit_addr: 0,
                remote_credit_rkey: 0,
                failed: false,
                queued: VecDeque::new(),
                queued_bytes: 0,
                queued_since: None,
                warned: false,
                error: None,
            });
        }
        if make_qps {
            for c in 0..t.conns.len() {
                t.ensure_qp(c)?;
            }
        }
        Ok(t)
    }

    /// Make the completion queue big enough for one more queue pair (every receive slot
    /// and every send-queue entry of each may complete at once), doubling it when it
    /// grows (`ibv_resize_cq` keeps the completions already queued).
    fn grow_cq(&mut self) -> Result<(), TransportError> {
        let per_qp = (self.slots + self.sq_depth) as usize;
        let made = self.conns.iter().filter(|c| !c.qp.is_null()).count();
        let need = (made + 1) * per_qp + 16;
        if need <= self.cq_entries {
            return Ok(());
        }
        let all = self.conns.len() * per_qp + 16;
        let want = need.max(2 * self.cq_entries).min(all.max(need));
        // SAFETY: the CQ is live; resizing keeps its queued completions.
        let rc = unsafe { (self.verbs.resize_cq)(self.cq, want as i32) };
        if rc != 0 {
            return Err(TransportError::Os {
                transport: NAME,
                call: "ibv_resize_cq",
                reason: format!(
                    "ibv_resize_cq to {want} entries (device {}): {}; fix: \
                     RANKWIRE_RDMA_CONNECT=at-init sizes the queue for every peer at init",
                    self.dev.name,
                    std::io::Error::from_raw_os_error(rc)
                ),
            });
        }
        tracing::debug!(
            "rdma: rank {}: completion queue {} -> {want} entries for {} queue pairs",
            self.rank,
            self.cq_entries,
            made + 1
        );
        self.cq_entries = want;
        Ok(())
    }

    /// Bytes of one connection's pool: both slot rings and the two credit words.
    fn pool_bytes(&self) -> usize {
        (2 * self.slots as usize * self.slot_bytes + 16).next_multiple_of(4096)
    }

    /// The registration cache (shared with the core's rendezvous offer path).
    pub fn registry(&self) -> Registry {
        self.registry.clone()
    }

    /// Data-path counters.
    pub fn stats(&self) -> RdmaStats {
        RdmaStats {
            queue_pairs: self.conns.iter().filter(|c| !c.qp.is_null()).count() as u64,
            cq_entries: self.cq_entries as u64,
            device_regcache: self.registry.device_stats().unwrap_or_default(),
            ..self.stats
        }
    }

    /// Device name and GID index, for messages.
    pub fn device_name(&self) -> String {
        format!("{} (GID index {})", self.dev.name, self.dev.gid_index)
    }

    /// Whether the NIC's driver registers DMA-BUFs: libibverbs has `ibv_reg_dmabuf_mr`,
    /// and a call on fd -1 fails with another error than `EOPNOTSUPP` or
    /// `EPROTONOSUPPORT` (how NCCL probes it; a bad fd gives `EBADF` where supported).
    pub fn has_dmabuf_mr(&self) -> bool {
        let Some(f) = self.verbs.reg_dmabuf_mr else {
            return false;
        };
        // SAFETY: fd -1 is rejected by the kernel before any memory is touched.
        let mr = unsafe { f(self.pd, 0, 4096, 0, -1, 0) };
        if !mr.is_null() {
            // Cannot happen with fd -1; do not leak it if a driver says yes anyway.
            // SAFETY: a non-null MR from the call above.
            self.dereg(unsafe { MemoryRegion::from_raw(mr) });
            return true;
        }
        !(verbs::errno_is(libc_errno::EOPNOTSUPP) || verbs::errno_is(libc_errno::EPROTONOSUPPORT))
    }

    /// Give device memory regions (GPUDirect RDMA) a GPU side, cached up to the bounds
    /// of `cfg` ([`RdmaConfig::gdr_max_bytes`], `RANKWIRE_REGCACHE_MAX_ENTRIES`): device
    /// buffers can then be registered, read into and written from.
    pub fn enable_gdr(&self, gpu: Box<dyn GpuMemory>, cfg: &RdmaConfig) {
        self.registry.set_gpu(
            gpu,
            RegCacheConfig {
                max_bytes: cfg.gdr_max_bytes,
                ..cfg.regcache
            },
        );
    }

    /// Register a DMA-BUF (`fd`, buffer `offset` inside it, `len_bytes`, device address
    /// `iova`) in this transport's protection domain (`ibv_reg_dmabuf_mr`). The region
    /// is deregistered when the returned value is given to [`RdmaTransport::dereg`].
    ///
    /// # Errors
    /// The library lacks the call, or the call's errno text.
    pub fn reg_dmabuf(
        &self,
        fd: i32,
        offset: u64,
        len_bytes: usize,
        iova: u64,
    ) -> Result<MemoryRegion, String> {
        reg::reg_dmabuf(
            &self.verbs,
            self.pd,
            fd,
            offset,
            len_bytes,
            iova,
            reg::ACCESS,
        )
    }

    /// Deregister a region made by [`RdmaTransport::reg_dmabuf`].
    pub fn dereg(&self, mr: MemoryRegion) {
        use crate::regcache::Registrar as _;
        let mut r = reg::MrRegistrar::for_pd(self.verbs.clone(), self.pd);
        r.deregister(mr);
    }

    /// Stop reporting connection errors as failures (after the final fence).
    pub fn set_quiesced(&mut self) {
        self.quiesced = true;
    }

    // Slot `s` of connection `c`: receive slots first, then send slots.
    // (Connection `c` has its pool: made with its QP.)
    fn slot_ptr(&self, c: usize, s: u32, send: bool) -> *mut u8 {
        let idx = if send { self.slots + s } else { s } as usize;
        debug_assert!(!self.conns[c].pool.is_null());
        // SAFETY: inside connection c's pool (s < slots).
        unsafe { self.conns[c].pool.add(idx * self.slot_bytes) }
    }

    // Credit words of connection `c`, after its slots: word 0 is written by the peer (its
    // consumed count), word 1 is the source of our writes to the peer.
    fn credit_word(&self, c: usize, w: usize) -> *mut u64 {
        let base = 2 * self.slots as usize * self.slot_bytes;
        debug_assert!(!self.conns[c].pool.is_null());
        // SAFETY: inside connection c's pool, 8-byte aligned (slot_bytes is a multiple
        // of 64).
        unsafe { self.conns[c].pool.add(base + w * 8) as *mut u64 }
    }
}

impl std::fmt::Debug for RdmaTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaTransport")
            .field("device", &self.dev.name)
            .field("gid_index", &self.dev.gid_index)
            .field(
                "peers",
                &self.conns.iter().map(|c| c.peer).collect::<Vec<_>>(),
            )
            .field("quiesced", &self.quiesced)
            .finish_non_exhaustive()
    }
}

impl Drop for RdmaTransport {
    fn drop(&mut self) {
        let v = &self.verbs;
        // SAFETY: each object was created once here and nothing uses it after drop.
        unsafe {
            for c in self.conns.iter().filter(|c| !c.qp.is_null()) {
                (v.destroy_qp)(c.qp);
            }
            self.registry.clear();
            for c in self.conns.iter().filter(|c| !c.pool_mr.is_null()) {
                (v.dereg_mr)(c.pool_mr);
            }
            (v.destroy_cq)(self.cq);
            if !self.channel.is_null() {
                (v.destroy_comp_channel)(self.channel);
            }
            let rc = (v.dealloc_pd)(self.pd);
            if rc != 0 {
                tracing::debug!("rdma: ibv_dealloc_pd: rc {rc}");
            }
            if let Ok(layout) = std::alloc::Layout::from_size_align(self.pool_bytes(), 4096) {
                for c in self.conns.iter().filter(|c| !c.pool.is_null()) {
                    std::alloc::dealloc(c.pool, layout);
                }
            }
        }
    }
}

// A job-wide bootstrap fence of the transport's setup.
fn fence(ex: &mut dyn Exchange) -> Result<(), TransportError> {
    ex.fence().map_err(|e| TransportError::Os {
        transport: NAME,
        call: "bootstrap fence",
        reason: e,
    })
}

// Initial packet sequence number of the QP from `a` to `b` (24 bits; any value works,
// distinct values make traces readable).
fn psn(a: u32, b: u32) -> u32 {
    (a.wrapping_mul(7919) ^ b.wrapping_mul(104_729) ^ 0x5a5a) & 0xff_ffff
}

impl crate::Transport for RdmaTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }
    fn can_reach(&self, peer: &crate::PeerInfo) -> Result<(), String> {
        if self.by_peer.contains_key(&peer.rank) {
            Ok(())
        } else {
            Err(format!("rdma: no queue pair to rank {}", peer.rank))
        }
    }
    fn send(
        &mut self,
        peer: u32,
        header: &[u8],
        payload: &[u8],
    ) -> Result<crate::SendOutcome, TransportError> {
        self.send_frame(peer, header, payload)
    }
    fn poll(&mut self, events: &mut Vec<crate::Event>) -> bool {
        self.progress(events)
    }
    fn is_flushed(&self) -> bool {
        self.conns
            .iter()
            .all(|c| c.failed || (c.send_busy == 0 && c.sq_outstanding == 0))
            && self.pending.is_empty()
            && self.wireup_out.is_empty()
            && self
                .waiting
                .iter()
                .all(|&c| self.conns[c].queued.is_empty())
    }

    /// Host memory through the registration cache ([`Registry::acquire_host`]); device
    /// memory, once the core enabled GPUDirect RDMA ([`Registry::set_gpu`]), as its
    /// whole allocation through the device cache ([`Registry::acquire_device`]). The
    /// descriptor is [`crate::RemoteMem::Rdma`] (the buffer's address and length, the
    /// region's rkey), held until [`crate::Transport::deregister`].
    fn register(&mut self, buf: crate::LocalBuf) -> Result<crate::Registration, TransportError> {
        let held = match buf.kind {
            crate::MemoryKind::Host => self
                .registry
                .acquire_host(buf.addr, buf.len_bytes as u64)
                .map_err(|e| TransportError::Os {
                transport: NAME,
                call: "memory registration",
                reason: format!("device {}: {e}", self.dev.name),
            })?,
            crate::MemoryKind::Cuda { .. } if self.registry.has_gpu() => {
                self.registry
                    .acquire_device(buf.addr, buf.len_bytes as u64)
                    .map_err(|e| TransportError::Os {
                        transport: NAME,
                        call: "device memory registration",
                        reason: format!("device {}: {e}", self.dev.name),
                    })?
                    .0
            }
            _ => {
                return Err(TransportError::Unsupported {
                    transport: NAME,
                    what: "register of device memory (GPUDirect RDMA not enabled)",
                });
            }
        };
        let remote = crate::RemoteMem::Rdma {
            addr: buf.addr,
            len: buf.len_bytes as u64,
            rkey: held.rkey,
        };
        let handle = self.next_reg;
        self.next_reg += 1;
        self.registered.insert(handle, held);
        Ok(crate::Registration { remote, handle })
    }

    fn deregister(&mut self, reg: crate::Registration) {
        if let Some(h) = self.registered.remove(&reg.handle) {
            self.registry.release(h);
        }
    }

    /// RDMA READ of `dst.len_bytes` bytes at `offset_bytes` into a
    /// [`crate::RemoteMem::Rdma`] region; [`crate::OpStart::Pending`], then
    /// [`crate::Event::OpDone`].
    unsafe fn get(
        &mut self,
        peer: u32,
        op: crate::OpId,
        dst: crate::LocalBuf,
        src: &crate::RemoteMem,
        offset_bytes: u64,
    ) -> Result<crate::OpStart, TransportError> {
        let gpu = self.registry.has_gpu();
        let (addr, rkey) = remote_range(peer, "get", dst, src, offset_bytes, gpu)?;
        let device = dst.kind != crate::MemoryKind::Host;
        // SAFETY: the trait's contract on `dst` is the one of the inherent `get`.
        unsafe {
            self.onesided(
                peer,
                op,
                dst.addr as *mut u8,
                dst.len_bytes,
                addr,
                rkey,
                true,
                device,
            )
        }?;
        Ok(crate::OpStart::Pending)
    }

    /// RDMA WRITE of `src` at `offset_bytes` into a [`crate::RemoteMem::Rdma`] region;
    /// [`crate::OpStart::Pending`], then [`crate::Event::OpDone`].
    unsafe fn put(
        &mut self,
        peer: u32,
        op: crate::OpId,
        src: crate::LocalBuf,
        dst: &crate::RemoteMem,
        offset_bytes: u64,
    ) -> Result<crate::OpStart, TransportError> {
        let gpu = self.registry.has_gpu();
        let (addr, rkey) = remote_range(peer, "put", src, dst, offset_bytes, gpu)?;
        let device = src.kind != crate::MemoryKind::Host;
        // SAFETY: the trait's contract on `src` is the one of the inherent `put`.
        unsafe {
            self.onesided(
                peer,
                op,
                src.addr as *mut u8,
                src.len_bytes,
                addr,
                rkey,
                false,
                device,
            )
        }?;
        Ok(crate::OpStart::Pending)
    }
}

/// The remote address and rkey of a one-sided operation on `local.len_bytes` bytes at
/// `offset_bytes` into `remote`, checked against the region's length. Local device
/// memory only where `gpu` (GPUDirect RDMA enabled); managed memory never.
fn remote_range(
    peer: u32,
    what: &'static str,
    local: crate::LocalBuf,
    remote: &crate::RemoteMem,
    offset_bytes: u64,
    gpu: bool,
) -> Result<(u64, u32), TransportError> {
    let direct = match local.kind {
        crate::MemoryKind::Host => true,
        crate::MemoryKind::Cuda { .. } => gpu,
        crate::MemoryKind::CudaManaged => false,
    };
    if !direct {
        return Err(TransportError::Unsupported {
            transport: NAME,
            what: if what == "get" {
                "get into device memory"
            } else {
                "put from device memory"
            },
        });
    }
    let crate::RemoteMem::Rdma { addr, len, rkey } = *remote else {
        return Err(TransportError::Unsupported {
            transport: NAME,
            what: if what == "get" {
                "get from a descriptor other than Rdma"
            } else {
                "put into a descriptor other than Rdma"
            },
        });
    };
    match (
        offset_bytes.checked_add(local.len_bytes as u64),
        addr.checked_add(offset_bytes),
    ) {
        (Some(end), Some(at)) if end <= len => Ok((at, rkey)),
        _ => Err(TransportError::Malformed {
            transport: NAME,
            peer,
            reason: format!(
                "{what} of {} bytes at offset {offset_bytes} outside a region of {len} bytes",
                local.len_bytes
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalBuf, MemoryKind, RemoteMem};

    fn local(len_bytes: usize, kind: MemoryKind) -> LocalBuf {
        LocalBuf {
            addr: 0x10_0000,
            len_bytes,
            kind,
        }
    }

    #[test]
    fn one_sided_ranges_are_checked_against_the_region() {
        let r = RemoteMem::Rdma {
            addr: 0x2000,
            len: 100,
            rkey: 7,
        };
        let host = MemoryKind::Host;
        assert_eq!(
            remote_range(1, "get", local(100, host), &r, 0, false),
            Ok((0x2000, 7))
        );
        assert_eq!(
            remote_range(1, "put", local(10, host), &r, 90, false),
            Ok((0x2000 + 90, 7))
        );
        for (len, off) in [(11, 90), (1, 100), (1, u64::MAX)] {
            assert!(
                matches!(
                    remote_range(1, "get", local(len, host), &r, off, false),
                    Err(TransportError::Malformed { peer: 1, .. })
                ),
                "{len} at {off}"
            );
        }
        let huge = RemoteMem::Rdma {
            addr: u64::MAX - 1,
            len: 100,
            rkey: 7,
        };
        assert!(remote_range(1, "get", local(1, host), &huge, 10, false).is_err());
        for (mem, kind) in [
            (RemoteMem::None, host),
            (RemoteMem::HostCma { pid: 1, addr: 0 }, host),
            (r, MemoryKind::Cuda { device: 0 }),
        ] {
            assert!(
                matches!(
                    remote_range(1, "get", local(1, kind), &mem, 0, false),
                    Err(TransportError::Unsupported { .. })
                ),
                "{mem:?} {kind}"
            );
        }
        // Device memory once GPUDirect RDMA is enabled; managed memory never.
        let dev = MemoryKind::Cuda { device: 0 };
        assert_eq!(
            remote_range(1, "get", local(100, dev), &r, 0, true),
            Ok((0x2000, 7))
        );
        assert!(matches!(
            remote_range(1, "get", local(1, MemoryKind::CudaManaged), &r, 0, true),
            Err(TransportError::Unsupported { .. })
        ));
    }
}
