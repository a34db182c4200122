//! Why each path was chosen: the table behind `rwrun --explain`,
//! [`crate::Universe::explain`] and `RANKWIRE_LOG=info`, and the `RANKWIRE_REQUIRE`
//! check that turns a fallback into an error at init.
//!
//! # The table
//! One row per (this rank, peer, memory kind): the transport that carries the message,
//! the protocol by size (eager up to the transport's eager limit, rendezvous above it,
//! with single copy by cross-memory attach or CUDA IPC where allowed), and for every
//! faster path the reason it was not taken. Paths are ranked fastest first:
//! self, shm (+ cma single copy), cuda_ipc, rdma/gdr, tcp. Every rank computes its own
//! rows from the same inputs as transport selection, so the table cannot disagree with
//! what the engine does.
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

use crate::engine::Route;
use crate::error::{Error, Result};

/// Environment variable: print this rank's table to stderr at init (`rwrun --explain`).
pub const EXPLAIN_ENV: &str = "RANKWIRE_EXPLAIN";

/// Environment variable: paths that must be used (see the module doc).
pub const REQUIRE_ENV: &str = "RANKWIRE_REQUIRE";

/// Paths `RANKWIRE_REQUIRE` knows.
pub const REQUIRABLE: &[&str] = &["shm", "cma", "ipc", "rdma", "gdr"];

/// Why device buffers do not go NIC-direct (GPUDirect RDMA) even where the RDMA
/// transport is used: the DMA-BUF / peermem registration is chosen and logged at init
/// but not wired into the data path yet.
const GDR_NOT_WIRED: &str = "device buffers over RDMA are staged through host memory (GPUDirect \
                             registration is chosen at init but not used by the data path yet)";

/// What selection decided for one peer.
#[derive(Debug, Clone)]
pub(crate) struct PeerPath {
    pub(crate) peer: u32,
    pub(crate) route: Route,
    pub(crate) same_node: bool,
    /// Transports rejected for host memory, each "name: reason".
    pub(crate) rejected: Vec<String>,
    /// Eager limit of the route for host memory, in bytes.
    pub(crate) eager_bytes: usize,
    /// Why the OS refused this rank cross-memory attach to the peer (probed at init).
    pub(crate) cma_refused: Option<String>,
}

/// The inputs of the table for one rank.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    pub(crate) rank: u32,
    pub(crate) peers: Vec<PeerPath>,
    /// Single copy for large same-node host messages: `Err(reason)` when off.
    pub(crate) cma: std::result::Result<(), String>,
    /// A waiting sender copies a share of large same-node host messages.
    pub(crate) share: bool,
    /// Device memory usable at all: `Err(reason)` when not.
    pub(crate) gpu: std::result::Result<(), String>,
    /// CUDA IPC for same-node device memory: `Err(reason)` when off.
    pub(crate) cuda_ipc: std::result::Result<(), String>,
    /// The RDMA transport in this process: `Err(reason)` when not usable (no library,
    /// no device, turned off).
    pub(crate) rdma: std::result::Result<(), String>,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// This rank (world rank).
    pub rank: u32,
    /// The peer (world rank).
    pub peer: u32,
    /// `host`, `device` or `managed`.
    pub memory: &'static str,
    /// Transport carrying the bytes (`self`, `shm`, `tcp`; `none` when not possible).
    pub transport: &'static str,
    /// Messages up to this many bytes go eagerly; larger ones by rendezvous.
    pub eager_bytes: usize,
    /// The protocol by size, in words.
    pub protocol: String,
    /// Faster paths not taken, each `name: reason`.
    pub rejected: Vec<String>,
}

impl Paths {
    /// Single copy to peer `p`: off for the whole rank (`self.cma`), or refused by the OS
    /// for that peer.
    fn cma_for<'a>(&'a self, p: &'a PeerPath) -> std::result::Result<(), &'a str> {
        match (&self.cma, &p.cma_refused) {
            (Err(why), _) | (Ok(()), Some(why)) => Err(why),
            (Ok(()), None) => Ok(()),
        }
    }

    /// Every row of this rank: each peer (itself included) × host, device, managed.
    pub(crate) fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for p in &self.peers {
            for memory in ["host", "device", "managed"] {
                rows.push(self.row(p, memory));
            }
        }
        rows
    }

    fn row(&self, p: &PeerPath, memory: &'static str) -> Row {
        let transport = p.route.name();
        let mut rejected = p.rejected.clone();
        let remote = !p.same_node;
        let rdma = self.rdma_reason(p.route);
        let mut protocol;
        match memory {
            "host" | "managed" => {
                protocol = match p.route {
                    Route::SelfTp => "copy within the process".to_string(),
                    Route::None => "none: no transport reaches the peer".to_string(),
                    Route::Rdma => format!(
                        "eager <= {} B into pre-posted registered slots; above: rendezvous by \
                         RDMA READ of the registered send buffer",
                        p.eager_bytes
                    ),
                    _ if p.same_node && self.cma_for(p).is_ok() && self.share => format!(
                        "eager <= {} B; above: rendezvous, single copy (cma, process_vm_readv; \
                         from {} KiB a waiting sender writes half)",
                        p.eager_bytes,
                        (crate::protocol::SHARE_MIN_BYTES + crate::protocol::PULL_CHUNK_BYTES)
                            >> 10
                    ),
                    _ if p.same_node && self.cma_for(p).is_ok() => format!(
                        "eager <= {} B; above: rendezvous, single copy (cma, process_vm_readv)",
                        p.eager_bytes
                    ),
                    _ => format!(
                        "eager <= {} B; above: rendezvous (Rts/Cts/Data) through {transport}",
                        p.eager_bytes
                    ),
                };
                if memory == "managed" {
                    // Managed pages are CPU-accessible: they take the host paths.
                    protocol = format!("as host memory (CPU-accessible pages): {protocol}");
                    if p.same_node && p.route != Route::SelfTp {
                        rejected.push(
                            "cuda_ipc: managed memory cannot be exported by legacy CUDA IPC"
                                .to_string(),
                        );
                    }
                }
                if p.same_node
                    && p.route != Route::SelfTp
                    && let Err(why) = self.cma_for(p)
                {
                    rejected.push(format!("cma: {why}"));
                } else if p.same_node
                    && !matches!(p.route, Route::SelfTp | Route::Rdma | Route::None)
                    && !self.share
                {
                    rejected.push(
                        "share (a waiting sender writes half): turned off by RANKWIRE_CMA_SHARE=0"
                            .to_string(),
                    );
                }
                if remote && let Some(why) = &rdma {
                    rejected.push(format!("rdma: {why}"));
                }
            }
            _ => {
                if let Err(why) = &self.gpu {
                    return Row {
                        rank: self.rank,
                        peer: p.peer,
                        memory,
                        transport: "none",
                        eager_bytes: 0,
                        protocol: format!("not possible: {why} (Error::Gpu)"),
                        rejected,
                    };
                }
                let ipc = if p.route == Route::SelfTp {
                    Err("not needed within the process".to_string())
                } else if remote {
                    Err("peer on another node".to_string())
                } else {
                    self.cuda_ipc.clone()
                };
                protocol = match (&ipc, p.route) {
                    (_, Route::SelfTp) => "device copy within the process".to_string(),
                    (Ok(()), _) => format!(
                        "eager <= {} B staged through host memory over {transport}; above: \
                         rendezvous, single device copy through CUDA IPC (stream-ordered pool \
                         memory: first copied into an IPC-capable staging buffer)",
                        p.eager_bytes
                    ),
                    (Err(_), _) => format!(
                        "staged through host memory over {transport} (eager <= {} B, \
                         rendezvous above)",
                        p.eager_bytes
                    ),
                };
                if let Err(why) = &ipc
                    && p.route != Route::SelfTp
                {
                    rejected.push(format!("cuda_ipc: {why}"));
                }
                if remote {
                    let why = rdma.clone().unwrap_or_else(|| GDR_NOT_WIRED.to_string());
                    rejected.push(format!("gdr: {why}"));
                }
            }
        }
        Row {
            rank: self.rank,
            peer: p.peer,
            memory,
            transport,
            eager_bytes: p.eager_bytes,
            protocol,
            rejected,
        }
    }

    /// Why a peer reached by `route` is not reached over RDMA (`None` when it is).
    fn rdma_reason(&self, route: Route) -> Option<String> {
        match (&self.rdma, route) {
            (_, Route::Rdma) => None,
            (Err(why), _) => Some(why.clone()),
            (Ok(()), _) => Some("the peer has no usable RDMA device".to_string()),
        }
    }

    /// Check `RANKWIRE_REQUIRE` (`list`) against the rows.
    ///
    /// # Errors
    /// [`Error::Usage`] for an unknown name, or naming the first pair of ranks where a
    /// required path is not used and why.
    pub(crate) fn check_required(&self, list: &str) -> Result<()> {
        for want in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if !REQUIRABLE.contains(&want) {
                return Err(Error::usage(format!(
                    "{REQUIRE_ENV}={list:?}: unknown path {want:?} (known: {})",
                    REQUIRABLE.join(", ")
                )));
            }
            for p in self.peers.iter().filter(|p| p.peer != self.rank) {
                let fail = |why: String| {
                    Err(Error::usage(format!(
                        "{REQUIRE_ENV} includes {want}, but rank {} -> rank {} cannot use it: \
                         {why}; remove the reason, or drop {want} from {REQUIRE_ENV} / \
                         --require (rwrun --explain shows every path)",
                        self.rank, p.peer
                    )))
                };
                match want {
                    "shm" if p.same_node && p.route != Route::Shm => {
                        return fail(format!(
                            "host memory goes over {} ({})",
                            p.route.name(),
                            p.rejected.join("; ")
                        ));
                    }
                    "cma" if p.same_node => {
                        if let Err(why) = self.cma_for(p) {
                            return fail(format!("cma: {why}"));
                        }
                    }
                    "ipc" if p.same_node => {
                        if let Err(why) = self.gpu.as_ref().and(self.cuda_ipc.as_ref()) {
                            return fail(format!("cuda_ipc: {why}"));
                        }
                    }
                    "rdma" if !p.same_node => {
                        if let Some(why) = self.rdma_reason(p.route) {
                            return fail(format!("rdma: {why}"));
                        }
                    }
                    "gdr" if !p.same_node => {
                        let why = self
                            .rdma_reason(p.route)
                            .unwrap_or_else(|| GDR_NOT_WIRED.to_string());
                        return fail(format!("gdr: {why}"));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Render rows as an aligned text table (one line per row, a header first).
pub fn render(rows: &[Row]) -> String {
    let mut s = String::from(
        "rank -> peer  memory   transport  protocol (thresholds)  |  faster paths not taken\n",
    );
    for r in rows {
        s.push_str(&format!(
            "{:>4} -> {:<4}  {:<7}  {:<9}  {}  |  {}\n",
            r.rank,
            r.peer,
            r.memory,
            r.transport,
            r.protocol,
            if r.rejected.is_empty() {
                "-".to_string()
            } else {
                r.rejected.join("; ")
            }
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(route: Route, same_node: bool, rejected: &[&str]) -> Paths {
        Paths {
            rank: 0,
            peers: vec![
                PeerPath {
                    peer: 0,
                    route: Route::SelfTp,
                    same_node: true,
                    rejected: vec![],
                    eager_bytes: usize::MAX,
                    cma_refused: None,
                },
                PeerPath {
                    peer: 1,
                    route,
                    same_node,
                    rejected: rejected.iter().map(|s| s.to_string()).collect(),
                    eager_bytes: 65536,
                    cma_refused: None,
                },
            ],
            cma: Err("RANKWIRE_CMA=0".into()),
            share: false,
            gpu: Err("GPU support not built".into()),
            cuda_ipc: Err("RANKWIRE_CUDA_IPC=0".into()),
            rdma: Err("not built / no device".into()),
        }
    }

    #[test]
    fn rows_name_transport_thresholds_and_rejections() {
        let p = paths(Route::Tcp, true, &["shm: excluded by RANKWIRE_TRANSPORTS"]);
        let rows = p.rows();
        assert_eq!(rows.len(), 6);
        let host = &rows[3];
        assert_eq!((host.peer, host.memory, host.transport), (1, "host", "tcp"));
        assert!(host.protocol.contains("eager <= 65536 B"), "{host:?}");
        assert_eq!(
            host.rejected,
            vec![
                "shm: excluded by RANKWIRE_TRANSPORTS",
                "cma: RANKWIRE_CMA=0"
            ]
        );
        let managed = &rows[5];
        assert_eq!(
            managed.transport, "tcp",
            "managed memory takes the host paths"
        );
        assert!(
            managed.protocol.starts_with("as host memory"),
            "{managed:?}"
        );
        assert!(
            managed
                .rejected
                .iter()
                .any(|r| r.starts_with("cuda_ipc: managed")),
            "{managed:?}"
        );
        let dev = &rows[4];
        assert_eq!(dev.transport, "none");
        assert!(dev.protocol.contains("GPU support not built"), "{dev:?}");
        let remote = paths(Route::Tcp, false, &["shm: rank 1 is on another node (x)"]);
        let r = &remote.rows()[3];
        assert!(
            r.rejected.iter().any(|s| s.starts_with("rdma: not built")),
            "{r:?}"
        );
        let table = render(&remote.rows());
        assert!(table.lines().count() == 7, "{table}");
    }

    #[test]
    fn require_turns_a_fallback_into_an_error() {
        let p = paths(Route::Tcp, true, &["shm: excluded by RANKWIRE_TRANSPORTS"]);
        let e = p.check_required("shm").unwrap_err().to_string();
        assert!(
            e.contains("rank 0 -> rank 1") && e.contains("goes over tcp"),
            "{e}"
        );
        assert!(
            p.check_required("cma")
                .unwrap_err()
                .to_string()
                .contains("RANKWIRE_CMA=0")
        );
        assert!(p.check_required("ipc").is_err());
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
        let ok = paths(Route::Shm, true, &[]);
        assert!(ok.check_required("shm").is_ok());
        let remote = paths(Route::Tcp, false, &[]);
        assert!(
            remote
                .check_required("gdr")
                .unwrap_err()
                .to_string()
                .contains("gdr: not built")
        );
    }
}
