//! Path selection: which transport carries each peer's messages, for each memory kind,
//! and why every faster path was not taken. One pure function, [`select`], decides
//! both the routes the engine runs and the rows `rwrun --explain` prints, so the two
//! cannot disagree.
//!
//! # The ordered table
//! Candidates are ranked fastest first: self, shm, cuda_ipc, rdma, tcp (NCCL's
//! `selectTransport` in `src/transport.cc`; Open MPI's btl exclusivity in
//! `opal/mca/btl/btl.h`). For each peer and memory kind (host, device, managed),
//! each candidate answers in this order, and the first one that fits wins:
//! 1. the allow list (`RANKWIRE_TRANSPORTS`; self and cuda_ipc are not in it: self is
//!    always used for a rank's own messages, cuda_ipc has its own switch,
//!    `RANKWIRE_CUDA_IPC=0`);
//! 2. its declared [`Caps`] for the memory kind (host memory needs `send`; device
//!    memory needs `send`, `get` or `put`);
//! 3. whether it is usable in this process at all (built, library loaded, device
//!    found, turned on);
//! 4. its reach answer for the peer ([`rankwire_transports::Transport::can_reach`],
//!    or what the published facts predict for transports built after selection).
//!
//! Host memory: the winner is the peer's [`Route`]. When nothing fits,
//! [`select`] fails naming both ranks, the memory kind and each candidate's reason.
//!
//! Device memory: where a candidate declares the kind itself (cuda_ipc, for
//! same-node peers), large messages go by its one-sided `get` and small ones, with
//! every control frame, over the host route. Where none does, the core stages the
//! bytes through host memory (`cuMemcpy` into and out of host buffers) over the host
//! route. Managed memory is CPU-accessible and takes the host paths.
//!
//! Host rendezvous between ranks of one node: single copy by cross-memory attach
//! (`process_vm_readv`) where declared caps say a one-sided host `get` reaches the peer.
//! The route's own caps decide where the route is a node-local transport (shm: its
//! `get`/`put` are cross-memory attach, off with `RANKWIRE_CMA=0`); a route that
//! reaches further (tcp between ranks of one node) declares none, and the `cma`
//! candidate, the standalone cross-memory attach path
//! (`rankwire_transports::shm::cma::caps`), decides. Either way only where the `cma`
//! candidate is usable (`RANKWIRE_CMA` not 0) and reaches the peer (same node, and the
//! OS allowed the probe at init). The `cma` candidate carries no messages: it is no
//! route and is left out of the walks above.
//!
//! Gathering the inputs (env, bootstrap exchanges, transports' own answers) is the
//! caller's job ([`allowed_transports`], [`probe_rdma`], `universe.rs`); nothing in
//! [`select`] touches a transport, the environment or the OS.
//!
//! # The table `--explain` prints
//! One row per (this rank, peer, memory kind): the transport that carries the message,
//! the protocol by size (eager up to the transport's eager limit, rendezvous above it,
//! with single copy by cross-memory attach or CUDA IPC where allowed), and for every
//! faster path the reason it was not taken. A row lists the candidates ranked above
//! the route that did not fit (self aside: it only ever reaches the rank itself), and
//! for device and managed memory the GPU paths (cuda_ipc, gdr) that were not taken.
//! Candidates that do not handle the row's memory kind at all are left out of host
//! rows (they are no path for it).
//!
//! # RANKWIRE_REQUIRE
//! A comma-separated list of paths that must be used wherever they apply; any other
//! outcome fails `rankwire::init` with [`Error::Usage`] naming the ranks and the reason:
//! - `shm`: between ranks of one node, host memory goes over shared memory;
//! - `cma`: between ranks of one node, large host messages use single copy;
//! - `ipc`: between ranks of one node, device memory uses CUDA IPC;
//! - `rdma`, `gdr`: between ranks of different nodes, host (rdma) and device (gdr,
//!   GPUDirect RDMA) memory go over RDMA.
//!
//! `rwrun --require=LIST` sets it for every rank.

use rankwire_transports::{Caps, KindCaps, MemoryKind};

use crate::error::{Error, Result};

mod inputs;
pub(crate) mod sharing;
mod table;

pub(crate) use inputs::{
    RdmaProbe, allowed_transports, check_shared_settings, probe_rdma, rdma_caps,
    shared_settings_field,
};
pub use table::{Row, render};

/// Environment variable: print this rank's table to stderr at init (`rwrun --explain`).
pub const EXPLAIN_ENV: &str = "RANKWIRE_EXPLAIN";

/// Environment variable: paths that must be used (see the module doc).
pub const REQUIRE_ENV: &str = "RANKWIRE_REQUIRE";

/// Paths `RANKWIRE_REQUIRE` knows.
pub const REQUIRABLE: &[&str] = &["shm", "cma", "ipc", "rdma", "gdr"];

/// Environment variable: the allow list of transports (see [`allowed_transports`]).
pub(crate) const TRANSPORTS_ENV: &str = "RANKWIRE_TRANSPORTS";

/// Why device buffers do not go NIC-direct where no path was decided: this process has
/// no device memory support, or the table was built without the init that decides.
const GDR_UNDECIDED: &str = "no GPUDirect RDMA path was decided (no RDMA transport with device \
                             memory in this process)";

/// The reason of a candidate the allow list leaves out.
const EXCLUDED: &str = "excluded by RANKWIRE_TRANSPORTS";

/// Which transport serves a peer's host memory (and every control frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The calling rank itself.
    SelfTp,
    /// Shared memory (same node).
    Shm,
    /// RDMA (verbs RC queue pairs).
    Rdma,
    /// TCP.
    Tcp,
    /// No transport could reach the peer (only possible in a broken setup).
    None,
}

impl Route {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Route::SelfTp => "self",
            Route::Shm => "shm",
            Route::Rdma => "rdma",
            Route::Tcp => "tcp",
            Route::None => "none",
        }
    }
}

/// The transports of the table. The variants are in table order, fastest first: the
/// derived `Ord` is the rank [`select`] walks them by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TransportId {
    SelfTp,
    Shm,
    CudaIpc,
    /// Cross-memory attach on its own: the one-sided part of same-node host
    /// rendezvous only (see the module doc), never a route.
    Cma,
    Rdma,
    Tcp,
}

impl TransportId {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TransportId::SelfTp => "self",
            TransportId::Shm => "shm",
            TransportId::CudaIpc => "cuda_ipc",
            TransportId::Cma => "cma",
            TransportId::Rdma => "rdma",
            TransportId::Tcp => "tcp",
        }
    }

    /// The engine's route when this transport carries host memory (cuda_ipc and cma
    /// never do: they declare no host `send`).
    fn route(self) -> Route {
        match self {
            TransportId::SelfTp => Route::SelfTp,
            TransportId::Shm => Route::Shm,
            TransportId::Rdma => Route::Rdma,
            TransportId::Tcp => Route::Tcp,
            TransportId::CudaIpc | TransportId::Cma => Route::None,
        }
    }

    /// Whether `RANKWIRE_TRANSPORTS` names this transport (self and cuda_ipc are
    /// outside the list, see the module doc).
    fn in_allow_list(self) -> bool {
        matches!(
            self,
            TransportId::Shm | TransportId::Rdma | TransportId::Tcp
        )
    }
}

/// One candidate of the table as this rank sees it.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) id: TransportId,
    /// Declared capabilities; `None` where the transport is not built here and its caps
    /// depend on how it would be built (then `usable` says why).
    pub(crate) caps: Option<Caps>,
    /// Usable in this process at all: `Err(reason)` when not built, no library or
    /// device, or turned off.
    pub(crate) usable: std::result::Result<(), String>,
    /// The reach answer per world rank: `Err(reason)` (without the transport's name)
    /// where it cannot reach that rank.
    pub(crate) reach: Vec<std::result::Result<(), String>>,
}

/// Everything [`select`] decides from, gathered by the caller.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    /// This rank (world rank).
    pub(crate) rank: u32,
    /// Per world rank: whether it runs on this rank's node (this rank included).
    pub(crate) same_node: Vec<bool>,
    /// `RANKWIRE_TRANSPORTS` as read by [`allowed_transports`].
    pub(crate) allowed: Vec<&'static str>,
    /// The candidates, in any order (selection walks them in [`TransportId`] order).
    pub(crate) candidates: Vec<Candidate>,
    /// Device memory usable at all in this process: `Err(reason)` when not.
    pub(crate) gpu: std::result::Result<(), String>,
    /// A waiting sender copies a share of large same-node host messages.
    pub(crate) share: bool,
}

/// One candidate's answer for one (peer, memory kind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fit {
    pub(crate) id: TransportId,
    /// The candidate's caps are known and leave this memory kind out (or `send`, for
    /// host memory).
    pub(crate) lacks_kind: bool,
    /// The candidate declares some device memory kind (a GPU path).
    pub(crate) gpu_path: bool,
    /// It reaches the peer.
    pub(crate) reaches: bool,
    /// `Ok` where it fits; else the first reason in the order of the module doc.
    pub(crate) answer: std::result::Result<(), String>,
}

impl Fit {
    fn reason(&self) -> Option<String> {
        self.answer
            .as_ref()
            .err()
            .map(|why| format!("{}: {why}", self.id.name()))
    }
}

/// How large same-node (or RDMA) host messages move, the rendezvous part of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostRndv {
    /// Within the process.
    Local,
    /// No route.
    None,
    /// The receiver RDMA-reads the registered send buffer.
    RdmaRead,
    /// Single copy by cross-memory attach; `share`: a waiting sender writes half.
    Cma { share: bool },
    /// Copied through the transport in `Data` frames.
    Transport,
}

/// What selection decided for one peer.
#[derive(Debug, Clone)]
pub(crate) struct PeerPath {
    pub(crate) peer: u32,
    /// The route of host memory and control frames.
    pub(crate) route: Route,
    pub(crate) same_node: bool,
    /// Every candidate's answer for host memory, in table order.
    pub(crate) host: Vec<Fit>,
    /// Every candidate's answer for device memory, in table order.
    pub(crate) device: Vec<Fit>,
    /// Every candidate's answer for managed memory, in table order.
    pub(crate) managed: Vec<Fit>,
    /// Eager limit of the route for host memory, in bytes (from its declared caps).
    pub(crate) eager_bytes: usize,
    /// Single copy of large host messages: `Ok(name)` of the candidate whose declared
    /// caps decided it (the route's, or `cma`), else why not.
    pub(crate) cma: std::result::Result<&'static str, String>,
    /// How large host messages move.
    pub(crate) rndv: HostRndv,
    /// Device rendezvous by CUDA IPC (cuda_ipc won the device walk).
    pub(crate) cuda_ipc: bool,
}

impl PeerPath {
    fn fit(fits: &[Fit], id: TransportId) -> Option<&Fit> {
        fits.iter().find(|f| f.id == id)
    }

    /// Host candidates ranked above the route that did not fit, each `name: reason`
    /// (self and candidates with no host memory left out).
    fn host_rejected(&self) -> Vec<String> {
        if self.route == Route::SelfTp {
            return Vec::new();
        }
        self.host
            .iter()
            .take_while(|f| f.answer.is_err())
            .filter(|f| f.id != TransportId::SelfTp && !f.lacks_kind)
            .filter_map(Fit::reason)
            .collect()
    }

    /// GPU paths not taken for device or managed memory (`fits`), each `name: reason`:
    /// those declaring the kind, and those declaring another device kind that reach
    /// the peer.
    fn gpu_rejected(&self, fits: &[Fit]) -> Vec<String> {
        if self.route == Route::SelfTp {
            return Vec::new();
        }
        fits.iter()
            .filter(|f| f.gpu_path && (!f.lacks_kind || f.reaches))
            .filter_map(Fit::reason)
            .collect()
    }
}

/// The outcome of selection for one rank: the routes the engine runs and the inputs of
/// the table `--explain` prints.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    pub(crate) rank: u32,
    /// One per world rank, in rank order.
    pub(crate) peers: Vec<PeerPath>,
    /// A waiting sender copies a share of large same-node host messages.
    pub(crate) share: bool,
    /// Device memory usable at all: `Err(reason)` when not.
    pub(crate) gpu: std::result::Result<(), String>,
    /// Job-wide `--explain` notes (ranks sharing a GPU without MPS, [`sharing::notes`]),
    /// the same on every rank; rank 0 prints them once after its table.
    pub(crate) notes: Vec<String>,
    /// This rank's RDMA device, port and GID and why (with several devices, their
    /// distances to the rank's GPU), for `--explain`; `None` without a device.
    pub(crate) rdma_device: Option<String>,
    /// How device buffers reach the NIC on this rank (GPUDirect RDMA path and why),
    /// decided at init where an RDMA transport and device memory (or the stand-in)
    /// exist; `None` otherwise.
    pub(crate) gdr: Option<(rankwire_transports::rdma::GdrPath, String)>,
    /// Process id of each world rank as it published it at start-up (for cross-memory
    /// attach), where it did; empty until the start-up records are read.
    pub(crate) pids: Vec<Option<u32>>,
    /// The most ranks per CPU on any node of the job (from the start-up records, the
    /// same on every rank; 0.0 where no node's CPUs are known). Above 1.0 small
    /// collectives take the algorithms with the fewest waits per rank
    /// (`coll/select.rs`, `CollConfig::barrier`).
    pub(crate) ranks_per_cpu: f64,
}

/// The memory kinds of the table, as rows name them.
const KINDS: [(MemoryKind, &str); 3] = [
    (MemoryKind::Host, "host"),
    (MemoryKind::Cuda { device: 0 }, "device"),
    (MemoryKind::CudaManaged, "managed"),
];

/// Select the paths of rank `input.rank` to every world rank: walk the ordered table
/// for each peer and memory kind (see the module doc). Pure: decides from `input`
/// alone.
///
/// # Errors
/// When no candidate carries host memory to some peer: [`Error::Usage`] if the allow
/// list left some candidate out (the fix is a setting), else [`Error::Connection`];
/// the message names both ranks, the memory kind and each candidate's reason.
pub(crate) fn select(input: &Input) -> Result<Paths> {
    let mut candidates: Vec<&Candidate> = input.candidates.iter().collect();
    candidates.sort_by_key(|c| c.id);
    let size = input.same_node.len();
    let mut peers = Vec::with_capacity(size);
    for peer in 0..size {
        let walk = |kind: MemoryKind| -> Vec<Fit> {
            candidates
                .iter()
                .filter(|c| c.id != TransportId::Cma)
                .map(|c| fit(input, c, peer, kind))
                .collect()
        };
        let host = walk(MemoryKind::Host);
        let device = walk(KINDS[1].0);
        let managed = walk(MemoryKind::CudaManaged);
        let Some(won) = host.iter().find(|f| f.answer.is_ok()) else {
            return Err(nothing_fits(input.rank, peer as u32, "host", &host));
        };
        let route = won.id.route();
        let eager_bytes = candidates
            .iter()
            .find(|c| c.id == won.id)
            .and_then(|c| c.caps.as_ref()?.host)
            .map_or(0, |k| k.eager_limit_bytes);
        let same_node = input.same_node[peer];
        let cma = single_copy(&candidates, won.id, peer);
        let rndv = match (route, &cma) {
            (Route::SelfTp, _) => HostRndv::Local,
            (Route::None, _) => HostRndv::None,
            (Route::Rdma, _) => HostRndv::RdmaRead,
            (_, Ok(by)) if same_node => HostRndv::Cma {
                share: input.share && declared_host(&candidates, by).is_some_and(|k| k.put),
            },
            _ => HostRndv::Transport,
        };
        // Device memory: the first candidate declaring it wins (only cuda_ipc does);
        // without one, the core stages through host memory over `route`.
        let cuda_ipc = route != Route::SelfTp
            && input.gpu.is_ok()
            && device
                .iter()
                .find(|f| f.answer.is_ok())
                .is_some_and(|f| f.id == TransportId::CudaIpc);
        peers.push(PeerPath {
            peer: peer as u32,
            route,
            same_node,
            host,
            device,
            managed,
            eager_bytes,
            cma,
            rndv,
            cuda_ipc,
        });
    }
    Ok(Paths {
        rank: input.rank,
        peers,
        share: input.share,
        gpu: input.gpu.clone(),
        notes: Vec::new(),
        rdma_device: None,
        gdr: None,
        pids: Vec::new(),
        ranks_per_cpu: 0.0,
    })
}

/// The declared host caps of the candidate named `name`.
fn declared_host(candidates: &[&Candidate], name: &str) -> Option<KindCaps> {
    candidates
        .iter()
        .find(|c| c.id.name() == name)
        .and_then(|c| c.caps.as_ref()?.host)
}

/// Whether large host messages to `peer` over the route `route` go by single copy
/// (cross-memory attach), and by whose declared caps (see the module doc): `Ok(name)`
/// of the deciding candidate, else the reason.
fn single_copy(
    candidates: &[&Candidate],
    route: TransportId,
    peer: usize,
) -> std::result::Result<&'static str, String> {
    let Some(cma) = candidates.iter().find(|c| c.id == TransportId::Cma) else {
        return Err("not a candidate".to_string());
    };
    // RANKWIRE_CMA and the probe at init: the cma candidate's own answers.
    cma.usable.clone()?;
    cma.reach
        .get(peer)
        .cloned()
        .unwrap_or_else(|| Err(format!("rank {peer} is not in the job")))?;
    let route_caps = candidates
        .iter()
        .find(|c| c.id == route)
        .and_then(|c| c.caps.as_ref());
    // The receiver gets, from memory the sender registered: both flags.
    let one_sided = |k: Option<KindCaps>| k.is_some_and(|k| k.get && k.register);
    match route_caps {
        Some(caps) if one_sided(caps.host) => Ok(route.name()),
        // A node-local route owns cross-memory attach for its peers: its caps say no.
        Some(caps) if caps.reach == rankwire_transports::Reach::Node => Err(format!(
            "{} declares no one-sided host get of registered memory",
            route.name()
        )),
        _ if one_sided(cma.caps.as_ref().and_then(|c| c.host)) => Ok(TransportId::Cma.name()),
        _ => Err("declares no one-sided host get".to_string()),
    }
}

/// One candidate's answer for (`peer`, `kind`), in the order of the module doc.
fn fit(input: &Input, c: &Candidate, peer: usize, kind: MemoryKind) -> Fit {
    let kind_caps: Option<&KindCaps> = c.caps.as_ref().and_then(|caps| caps.for_kind(kind));
    let declares = match kind {
        MemoryKind::Host => kind_caps.is_some_and(|k| k.send),
        _ => kind_caps.is_some_and(|k| k.send || k.get || k.put),
    };
    let reach = c
        .reach
        .get(peer)
        .cloned()
        .unwrap_or_else(|| Err(format!("rank {peer} is not in the job")));
    let answer = if c.id.in_allow_list() && !input.allowed.contains(&c.id.name()) {
        Err(EXCLUDED.to_string())
    } else if let (None, Err(why)) = (&c.caps, &c.usable) {
        Err(why.clone())
    } else if !declares {
        Err(absent_reason(c.id, kind))
    } else if let Err(why) = &c.usable {
        Err(why.clone())
    } else {
        reach.clone()
    };
    Fit {
        id: c.id,
        lacks_kind: c.caps.is_some() && !declares,
        gpu_path: c
            .caps
            .as_ref()
            .is_some_and(|caps| caps.cuda.is_some() || caps.cuda_managed.is_some()),
        reaches: reach.is_ok(),
        answer,
    }
}

/// Why a candidate that does not declare `kind` cannot carry it.
fn absent_reason(id: TransportId, kind: MemoryKind) -> String {
    match (id, kind) {
        (TransportId::CudaIpc, MemoryKind::CudaManaged) => {
            "managed memory cannot be exported by legacy CUDA IPC".to_string()
        }
        (TransportId::CudaIpc, MemoryKind::Host) => {
            "one-sided only (device-to-host gets): it sends no messages".to_string()
        }
        (_, MemoryKind::Host) => "no host memory".to_string(),
        (_, MemoryKind::Cuda { .. }) => "no device memory".to_string(),
        (_, MemoryKind::CudaManaged) => "no managed memory".to_string(),
    }
}

/// The error of a peer no candidate carries `memory` to.
fn nothing_fits(rank: u32, peer: u32, memory: &str, fits: &[Fit]) -> Error {
    let reasons: Vec<String> = fits.iter().filter_map(Fit::reason).collect();
    let reasons = reasons.join("; ");
    if fits
        .iter()
        .any(|f| f.answer.as_ref().err().is_some_and(|w| w == EXCLUDED))
    {
        // A setting, not a failed connection: say which one.
        Error::usage(format!(
            "no allowed transport carries {memory} memory from rank {rank} to rank {peer}: \
             {reasons}; fix: add tcp (or shm for ranks of one node) to {TRANSPORTS_ENV} \
             (RANKWIRE_LOG=debug shows each transport's reason)"
        ))
    } else {
        Error::Connection {
            peer,
            detail: format!(
                "no transport carries {memory} memory from rank {rank} to rank {peer}: {reasons}"
            ),
        }
    }
}

impl Paths {
    /// The host route per world rank (what the engine runs).
    pub(crate) fn routes(&self) -> Vec<Route> {
        self.peers.iter().map(|p| p.route).collect()
    }
}

/// `RANKWIRE_GPU_EAGER_MAX` (bytes): device-buffer messages to ranks on this node
/// above it go by rendezvous (a CUDA IPC pull: one device copy) instead of eagerly
/// (staged through host memory: a device-to-host copy at the sender, a host-to-device
/// copy at the receiver). Unset: 0 where the CUDA IPC transport runs, else the host
/// eager limit. Measured on one H200, 2 ranks (2026-12-02, one-way): with MPS the
/// IPC rendezvous took 12.2–14.7 µs from 1 B to 1 MiB against 17.5–40.3 µs eager
/// (1 B – 32 KiB); without MPS 151–172 µs against 157–180 µs. Read once.
pub(crate) fn device_eager_max() -> Option<usize> {
    static V: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        crate::settings::raw("RANKWIRE_GPU_EAGER_MAX")
            .and_then(|v| crate::settings::parse_bytes(&v))
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankwire_transports::{RdmaTransport, Reach};

    /// Declared capabilities of CUDA IPC, the candidate for same-node device memory:
    /// one-sided `get` of device memory (the receiver maps the sender's IPC handle and
    /// copies with `cuMemcpyDtoD`), no host or managed memory, reach within the node.
    // The same value as `rankwire_transports::cuda_ipc::caps()` (checked below), written
    // out so that the selection tests also run in builds without the `cuda` feature.
    fn cuda_ipc_caps() -> Caps {
        Caps {
            name: "cuda_ipc",
            reach: Reach::Node,
            host: None,
            cuda: Some(KindCaps {
                send: false,
                put: false,
                get: true,
                register: true,
                eager_limit_bytes: 0,
                max_frame_payload_bytes: 0,
                max_message_bytes: u64::MAX,
                needs_registration: true,
            }),
            cuda_managed: None,
        }
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn the_cuda_ipc_caps_of_these_tests_are_the_transports_own() {
        let real = rankwire_transports::cuda_ipc::caps();
        assert_eq!(real.cuda, cuda_ipc_caps().cuda);
        assert_eq!((real.name, real.reach), ("cuda_ipc", Reach::Node));
        // Its host row is the destination of device-to-host gets only: never a route.
        assert!(real.host.is_none_or(|h| !h.send));
    }

    fn host_caps(name: &'static str, reach: Reach, eager: usize) -> Caps {
        Caps {
            name,
            reach,
            host: Some(KindCaps {
                send: true,
                put: false,
                get: false,
                register: false,
                eager_limit_bytes: eager,
                max_frame_payload_bytes: 1 << 20,
                max_message_bytes: u64::MAX,
                needs_registration: false,
            }),
            cuda: None,
            cuda_managed: None,
        }
    }

    /// A topology seen from rank 0: which ranks share its node, which have an RDMA
    /// device (`None`: none in this process), whether GPUs and IPC are usable.
    struct Topo {
        same_node: Vec<bool>,
        allowed: Vec<&'static str>,
        rdma: Option<Vec<bool>>,
        gpu: bool,
        ipc: bool,
        shm_reach: Vec<std::result::Result<(), String>>,
        cma: bool,
        /// The shm transport declares host get/put (it does where `cma`).
        shm_get: bool,
        /// Per rank: the probe at init refused cross-memory attach to it.
        cma_refused: Vec<Option<String>>,
    }

    impl Topo {
        fn new(same_node: &[bool]) -> Topo {
            Topo {
                same_node: same_node.to_vec(),
                allowed: vec!["shm", "rdma", "tcp"],
                rdma: None,
                gpu: false,
                ipc: true,
                shm_reach: same_node
                    .iter()
                    .enumerate()
                    .map(|(r, &s)| {
                        if s {
                            Ok(())
                        } else {
                            Err(format!("rank {r} is on another node (n{r})"))
                        }
                    })
                    .collect(),
                cma: true,
                shm_get: true,
                cma_refused: vec![None; same_node.len()],
            }
        }

        fn input(&self) -> Input {
            let n = self.same_node.len();
            let others = |f: &dyn Fn(usize) -> std::result::Result<(), String>| {
                (0..n)
                    .map(|r| {
                        if r == 0 {
                            Err("not needed within the process".to_string())
                        } else {
                            f(r)
                        }
                    })
                    .collect::<Vec<_>>()
            };
            let gpu: std::result::Result<(), String> = if self.gpu {
                Ok(())
            } else {
                Err("GPU support not built".into())
            };
            let rdma_ok = self.rdma.clone().unwrap_or_else(|| vec![false; n]);
            Input {
                rank: 0,
                same_node: self.same_node.clone(),
                allowed: self.allowed.clone(),
                // Deliberately out of table order: selection sorts.
                candidates: vec![
                    Candidate {
                        id: TransportId::Tcp,
                        caps: Some(host_caps("tcp", Reach::Network, 65536)),
                        usable: Ok(()),
                        reach: others(&|_| Ok(())),
                    },
                    Candidate {
                        id: TransportId::SelfTp,
                        caps: Some(host_caps("self", Reach::Process, 65536)),
                        usable: Ok(()),
                        reach: (0..n)
                            .map(|r| {
                                if r == 0 {
                                    Ok(())
                                } else {
                                    Err("peer is another process".into())
                                }
                            })
                            .collect(),
                    },
                    // As in universe.rs: an excluded shm is not built, its caps unknown.
                    Candidate {
                        id: TransportId::Shm,
                        caps: self.allowed.contains(&"shm").then(|| {
                            let mut c = host_caps("shm", Reach::Node, 32768);
                            let h = c.host.as_mut().unwrap();
                            (h.get, h.put, h.register) = (
                                self.cma && self.shm_get,
                                self.cma && self.shm_get,
                                self.cma && self.shm_get,
                            );
                            c
                        }),
                        usable: if self.allowed.contains(&"shm") {
                            Ok(())
                        } else {
                            Err("not set up".into())
                        },
                        reach: others(&|r| self.shm_reach[r].clone()),
                    },
                    Candidate {
                        id: TransportId::CudaIpc,
                        caps: Some(cuda_ipc_caps()),
                        usable: gpu.clone().and_then(|()| {
                            if self.ipc {
                                Ok(())
                            } else {
                                Err("turned off by RANKWIRE_CUDA_IPC=0".into())
                            }
                        }),
                        reach: others(&|r| {
                            if self.same_node[r] {
                                Ok(())
                            } else {
                                Err("peer on another node".into())
                            }
                        }),
                    },
                    Candidate {
                        id: TransportId::Cma,
                        caps: Some(rankwire_transports::shm::cma::caps()),
                        usable: if self.cma {
                            Ok(())
                        } else {
                            Err("turned off by RANKWIRE_CMA=0".into())
                        },
                        reach: others(&|r| match &self.cma_refused[r] {
                            _ if !self.same_node[r] => Err(format!("rank {r} is on another node")),
                            Some(why) => Err(why.clone()),
                            None => Ok(()),
                        }),
                    },
                    Candidate {
                        id: TransportId::Rdma,
                        caps: Some(RdmaTransport::declared_caps(8192)),
                        usable: match &self.rdma {
                            Some(_) => Ok(()),
                            None => Err("no RDMA device in this process (no libibverbs)".into()),
                        },
                        reach: others(&|r| {
                            if rdma_ok[r] {
                                Ok(())
                            } else {
                                Err(format!("rank {r} has no RDMA device"))
                            }
                        }),
                    },
                ],
                gpu,
                share: self.cma,
            }
        }

        fn select(&self) -> Paths {
            select(&self.input()).unwrap()
        }
    }

    fn row<'a>(rows: &'a [Row], peer: u32, memory: &str) -> &'a Row {
        rows.iter()
            .find(|r| r.peer == peer && r.memory == memory)
            .unwrap()
    }

    #[test]
    fn the_table_is_walked_fastest_first() {
        // Rank 0 and 1 share a node; 2 is elsewhere.
        let p = Topo::new(&[true, true, false]).select();
        assert_eq!(p.routes(), vec![Route::SelfTp, Route::Shm, Route::Tcp]);
        assert_eq!(
            p.peers.iter().map(|p| p.eager_bytes).collect::<Vec<_>>(),
            vec![65536, 32768, 65536],
            "eager limits come from the winner's declared caps"
        );
        let rows = p.rows();
        assert_eq!(row(&rows, 1, "host").rejected, Vec::<String>::new());
        assert_eq!(
            row(&rows, 2, "host").rejected,
            vec![
                "shm: rank 2 is on another node (n2)",
                "rdma: no RDMA device in this process (no libibverbs)"
            ],
            "one reason per faster candidate, cuda_ipc (no host memory) left out"
        );
        // With RDMA at both ends, remote peers go over it; same-node ones stay on shm.
        let mut t = Topo::new(&[true, true, false, false]);
        t.rdma = Some(vec![true, true, true, false]);
        let p = t.select();
        assert_eq!(
            p.routes(),
            vec![Route::SelfTp, Route::Shm, Route::Rdma, Route::Tcp]
        );
        assert_eq!(p.peers[2].eager_bytes, 8192);
        assert_eq!(p.peers[2].rndv, HostRndv::RdmaRead);
        assert_eq!(
            row(&p.rows(), 3, "host").rejected,
            vec![
                "shm: rank 3 is on another node (n3)",
                "rdma: rank 3 has no RDMA device"
            ]
        );
    }

    #[test]
    fn gdr_rows_and_require_follow_the_path_decided_at_init() {
        use rankwire_transports::rdma::GdrPath;
        let mut t = Topo::new(&[true, false, false]);
        t.rdma = Some(vec![true, true, false]);
        t.gpu = true;
        let mut p = t.select();
        assert_eq!(p.routes()[1], Route::Rdma);
        // Not decided (no init ran): staged, and `gdr` cannot be required.
        let e = p.check_required("gdr").unwrap_err().to_string();
        assert!(e.contains("no GPUDirect RDMA path was decided"), "{e}");
        p.gdr = Some((
            GdrPath::HostStaged,
            "staged through host memory: RANKWIRE_RDMA_GDR=0".into(),
        ));
        let rows = p.rows();
        let r = row(&rows, 1, "device");
        assert!(r.protocol.starts_with("rdma, staged via host"), "{r:?}");
        assert!(
            r.rejected
                .contains(&"gdr: staged through host memory: RANKWIRE_RDMA_GDR=0".to_string()),
            "{r:?}"
        );
        let e = p.check_required("gdr").unwrap_err().to_string();
        assert!(
            e.contains("rank 0 -> rank 1") && e.contains("RANKWIRE_RDMA_GDR=0"),
            "{e}"
        );
        for (path, name) in [
            (GdrPath::DmaBuf, "GPUDirect RDMA: DMA-BUF"),
            (GdrPath::PeerMem, "GPUDirect RDMA: nvidia_peermem"),
            (GdrPath::StandIn, "GPUDirect RDMA: test stand-in"),
        ] {
            p.gdr = Some((path, String::new()));
            let rows = p.rows();
            let r = row(&rows, 1, "device");
            assert!(r.protocol.contains(name), "{r:?}");
            assert!(!r.rejected.iter().any(|x| x.starts_with("gdr:")), "{r:?}");
            // Rank 2 is over TCP: requiring gdr names it.
            let e = p.check_required("gdr").unwrap_err().to_string();
            assert!(
                e.contains("rank 0 -> rank 2") && e.contains("device memory goes over tcp"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_allow_list_and_reach_answers_reject_with_their_reason() {
        let mut t = Topo::new(&[true, true, true]);
        t.allowed = vec!["tcp"];
        t.cma = false;
        let p = t.select();
        assert_eq!(p.routes(), vec![Route::SelfTp, Route::Tcp, Route::Tcp]);
        let host = row(&p.rows(), 1, "host").clone();
        assert_eq!(host.transport, "tcp");
        assert!(host.protocol.contains("eager <= 65536 B"), "{host:?}");
        assert_eq!(
            host.rejected,
            vec![
                "shm: excluded by RANKWIRE_TRANSPORTS",
                "rdma: excluded by RANKWIRE_TRANSPORTS",
                "cma: turned off by RANKWIRE_CMA=0"
            ]
        );
        // A same-node peer shm cannot reach (its ring failed) goes over tcp.
        let mut t = Topo::new(&[true, true, true]);
        t.shm_reach[2] = Err("mapping the segment failed: ENOMEM".into());
        let p = t.select();
        assert_eq!(p.routes(), vec![Route::SelfTp, Route::Shm, Route::Tcp]);
        let r = row(&p.rows(), 2, "host").clone();
        assert_eq!(
            r.rejected[0], "shm: mapping the segment failed: ENOMEM",
            "{r:?}"
        );
        // Still one node: single copy by cma over the tcp route.
        assert_eq!(p.peers[2].rndv, HostRndv::Cma { share: true });
    }

    #[test]
    fn memory_kinds_take_their_own_walk() {
        // No GPU: device rows say why not, managed memory takes the host paths.
        let p = Topo::new(&[true, true, false]).select();
        let rows = p.rows();
        assert_eq!(rows.len(), 9);
        let dev = row(&rows, 1, "device");
        assert_eq!(dev.transport, "none");
        assert!(dev.protocol.contains("GPU support not built"), "{dev:?}");
        let managed = row(&rows, 1, "managed");
        assert_eq!(managed.transport, "shm");
        assert!(
            managed.protocol.starts_with("as host memory"),
            "{managed:?}"
        );
        assert_eq!(
            managed.rejected,
            vec!["cuda_ipc: managed memory cannot be exported by legacy CUDA IPC"]
        );
        assert!(
            row(&rows, 2, "managed")
                .rejected
                .iter()
                .all(|r| !r.starts_with("cuda_ipc"))
        );
        assert!(p.peers.iter().all(|p| !p.cuda_ipc));
        // GPU and IPC usable: same-node device memory by cuda_ipc get, remote staged.
        let mut t = Topo::new(&[true, true, false]);
        t.gpu = true;
        let p = t.select();
        assert_eq!(
            p.peers.iter().map(|p| p.cuda_ipc).collect::<Vec<_>>(),
            vec![false, true, false]
        );
        let rows = p.rows();
        let local = row(&rows, 1, "device");
        assert_eq!(local.transport, "shm");
        assert!(local.protocol.contains("cuda_ipc get"), "{local:?}");
        assert!(local.rejected.is_empty(), "{local:?}");
        let remote = row(&rows, 2, "device");
        assert!(
            remote
                .protocol
                .starts_with("tcp, staged via host (cuMemcpy"),
            "{remote:?}"
        );
        assert!(
            remote
                .rejected
                .contains(&"cuda_ipc: peer on another node".to_string()),
            "{remote:?}"
        );
        assert!(
            remote
                .rejected
                .iter()
                .any(|r| r.starts_with("gdr: device memory goes over tcp: no RDMA device")),
            "{remote:?}"
        );
        assert_eq!(
            row(&rows, 0, "device").protocol,
            "device copy within the process"
        );
        // IPC switched off: staged over shm, and the row says why.
        t.ipc = false;
        let p = t.select();
        assert!(!p.peers[1].cuda_ipc);
        let local = row(&p.rows(), 1, "device").clone();
        assert!(
            local.protocol.starts_with("shm, staged via host"),
            "{local:?}"
        );
        assert_eq!(
            local.rejected,
            vec!["cuda_ipc: turned off by RANKWIRE_CUDA_IPC=0"]
        );
    }

    #[test]
    fn nothing_fits_names_both_ranks_the_kind_and_every_reason() {
        let mut t = Topo::new(&[true, false]);
        t.allowed = vec!["rdma"];
        let e = select(&t.input()).unwrap_err();
        assert!(matches!(e, Error::Usage(_)), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains(
                "no allowed transport carries host memory from rank 0 to rank 1: self: peer is \
                 another process; shm: excluded by RANKWIRE_TRANSPORTS; cuda_ipc: one-sided \
                 only (device-to-host gets): it sends no messages; rdma: no RDMA device in this process (no libibverbs); tcp: excluded \
                 by RANKWIRE_TRANSPORTS"
            ),
            "{e}"
        );
        assert!(e.contains("add tcp"), "{e}");
        // Nothing excluded by a setting: a connection error naming the peer.
        let mut input = Topo::new(&[true, false]).input();
        for c in &mut input.candidates {
            if c.id == TransportId::Tcp {
                c.reach[1] = Err("connect refused".into());
            }
        }
        match select(&input).unwrap_err() {
            Error::Connection { peer: 1, detail } => {
                assert!(detail.contains("tcp: connect refused"), "{detail}")
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn rows_agree_with_the_routes_in_every_topology() {
        let mut topos = Vec::new();
        for same in [
            vec![true],
            vec![true, true, false],
            vec![true, false, false],
        ] {
            for rdma in [None, Some(vec![true; same.len()])] {
                for gpu in [false, true] {
                    let mut t = Topo::new(&same);
                    t.rdma = rdma.clone();
                    t.gpu = gpu;
                    topos.push(t);
                }
            }
        }
        for t in &topos {
            let p = t.select();
            let routes = p.routes();
            let rows = p.rows();
            assert_eq!(rows.len(), 3 * routes.len());
            for (peer, route) in routes.iter().enumerate() {
                let peer = peer as u32;
                let pp = &p.peers[peer as usize];
                assert_eq!(row(&rows, peer, "host").transport, route.name());
                assert_eq!(row(&rows, peer, "managed").transport, route.name());
                assert_eq!(row(&rows, peer, "host").eager_bytes, pp.eager_bytes);
                let dev = row(&rows, peer, "device");
                if t.gpu {
                    assert_eq!(dev.transport, route.name());
                } else {
                    assert_eq!(dev.transport, "none");
                }
                assert_eq!(dev.protocol.contains("cuda_ipc get"), pp.cuda_ipc);
                assert_eq!(
                    pp.cuda_ipc,
                    t.gpu && peer != 0 && t.same_node[peer as usize],
                    "IPC exactly for same-node peers with a usable GPU"
                );
                let expect = match (peer, t.same_node[peer as usize], &t.rdma) {
                    (0, _, _) => Route::SelfTp,
                    (_, true, _) => Route::Shm,
                    (_, false, Some(_)) => Route::Rdma,
                    (_, false, None) => Route::Tcp,
                };
                assert_eq!(*route, expect);
            }
        }
    }

    #[test]
    fn require_turns_a_fallback_into_an_error() {
        let mut t = Topo::new(&[true, true]);
        t.allowed = vec!["tcp"];
        t.cma = false;
        t.ipc = false;
        let p = t.select();
        let e = p.check_required("shm").unwrap_err().to_string();
        assert!(
            e.contains("rank 0 -> rank 1")
                && e.contains(
                    "goes over tcp (shm: excluded by RANKWIRE_TRANSPORTS; rdma: excluded by \
                     RANKWIRE_TRANSPORTS)"
                ),
            "{e}"
        );
        assert!(
            p.check_required("cma")
                .unwrap_err()
                .to_string()
                .contains("RANKWIRE_CMA=0")
        );
        assert!(
            p.check_required("ipc")
                .unwrap_err()
                .to_string()
                .contains("cuda_ipc: GPU support not built")
        );
        assert!(
            p.check_required("rdma,gdr").is_ok(),
            "same node: not applicable"
        );
        assert!(
            p.check_required("warp")
                .unwrap_err()
                .to_string()
                .contains("unknown path")
        );
        assert!(
            Topo::new(&[true, true])
                .select()
                .check_required("shm")
                .is_ok()
        );
        let mut gpu = Topo::new(&[true, true]);
        gpu.gpu = true;
        assert!(gpu.select().check_required("ipc").is_ok());
        gpu.ipc = false;
        assert!(
            gpu.select()
                .check_required("ipc")
                .unwrap_err()
                .to_string()
                .contains("cuda_ipc: turned off by RANKWIRE_CUDA_IPC=0")
        );
        let remote = Topo::new(&[true, false]).select();
        assert!(
            remote
                .check_required("gdr")
                .unwrap_err()
                .to_string()
                .contains("gdr: device memory goes over tcp: no RDMA device")
        );
        let table = render(&remote.rows());
        assert_eq!(table.lines().count(), 7, "{table}");
    }

    #[test]
    fn single_copy_follows_declared_caps() {
        // shm declares no host get/put: no single copy, and the row says whose caps.
        let mut t = Topo::new(&[true, true]);
        t.shm_get = false;
        let p = t.select();
        assert_eq!(p.peers[1].route, Route::Shm);
        assert_eq!(p.peers[1].rndv, HostRndv::Transport);
        let host = row(&p.rows(), 1, "host").clone();
        assert!(!host.protocol.contains("single copy"), "{host:?}");
        assert!(
            host.rejected.contains(
                &"cma: shm declares no one-sided host get of registered memory".to_string()
            ),
            "{host:?}"
        );
        let e = p.check_required("cma").unwrap_err().to_string();
        assert!(e.contains("cma: shm declares no one-sided host get"), "{e}");
        // shm declares them: single copy by shm's caps.
        let p = Topo::new(&[true, true]).select();
        assert_eq!(p.peers[1].cma, Ok("shm"));
        assert!(row(&p.rows(), 1, "host").protocol.contains("by shm caps"));
        // A tcp route on the same node: the cma candidate's caps decide.
        let mut t = Topo::new(&[true, true]);
        t.allowed = vec!["tcp"];
        let p = t.select();
        assert_eq!(p.peers[1].route, Route::Tcp);
        assert_eq!(p.peers[1].rndv, HostRndv::Cma { share: true });
        assert_eq!(p.peers[1].cma, Ok("cma"));
        assert!(row(&p.rows(), 1, "host").protocol.contains("by cma caps"));
        assert!(p.check_required("cma").is_ok());
        // RANKWIRE_CMA=0: none, over either route.
        for allowed in [vec!["shm", "tcp"], vec!["tcp"]] {
            let mut t = Topo::new(&[true, true]);
            t.allowed = allowed;
            t.cma = false;
            let p = t.select();
            assert_eq!(p.peers[1].rndv, HostRndv::Transport);
            assert_eq!(
                p.peers[1].cma,
                Err("turned off by RANKWIRE_CMA=0".to_string())
            );
        }
        // The probe at init refused it: none, over either route, with the reason.
        for allowed in [vec!["shm", "tcp"], vec!["tcp"]] {
            let mut t = Topo::new(&[true, true, true]);
            t.allowed = allowed;
            t.cma_refused[2] = Some("not permitted by the OS: EPERM".into());
            let p = t.select();
            assert!(matches!(p.peers[1].rndv, HostRndv::Cma { .. }));
            assert_eq!(p.peers[2].rndv, HostRndv::Transport);
            let e = p.check_required("cma").unwrap_err().to_string();
            assert!(e.contains("rank 0 -> rank 2") && e.contains("EPERM"), "{e}");
        }
        // Another node: the cma candidate does not reach it.
        let p = Topo::new(&[true, false]).select();
        assert_eq!(p.peers[1].rndv, HostRndv::Transport);
    }

    #[test]
    fn the_cma_candidate_caps_are_one_sided_host_only() {
        let c = rankwire_transports::shm::cma::caps();
        assert_eq!((c.name, c.reach), ("cma", Reach::Node));
        let h = c.host.unwrap();
        assert!(h.get && h.put && !h.send);
        assert!(c.cuda.is_none() && c.cuda_managed.is_none());
    }
}
