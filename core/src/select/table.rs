//! The table behind `rwrun --explain`, [`crate::Universe::explain`] and
//! `RANKWIRE_LOG=info`, and the `RANKWIRE_REQUIRE` check: rendered from the
//! [`Paths`] that [`super::select`] returns with the routes (see the parent module doc).

use super::{
    Fit, GDR_UNDECIDED, HostRndv, KINDS, Paths, PeerPath, REQUIRABLE, REQUIRE_ENV, Route,
    TransportId,
};
use crate::error::{Error, Result};

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// This rank (world rank).
    pub rank: u32,
    /// The peer (world rank).
    pub peer: u32,
    /// `host`, `device` or `managed`.
    pub memory: &'static str,
    /// Transport carrying the bytes (`self`, `shm`, `rdma`, `tcp`; `none` when not
    /// possible). Device memory names the host route it is staged over, or whose
    /// frames carry the small messages and the handshake of CUDA IPC.
    pub transport: &'static str,
    /// Messages up to this many bytes go eagerly; larger ones by rendezvous.
    pub eager_bytes: usize,
    /// The protocol by size, in words.
    pub protocol: String,
    /// Faster paths not taken, each `name: reason`.
    pub rejected: Vec<String>,
}

impl Paths {
    /// Every row of this rank: each peer (itself included) × host, device, managed.
    pub(crate) fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for p in &self.peers {
            for (_, memory) in KINDS {
                rows.push(self.row(p, memory));
            }
        }
        rows
    }

    fn row(&self, p: &PeerPath, memory: &'static str) -> Row {
        let transport = p.route.name();
        let mut rejected = p.host_rejected();
        let remote = !p.same_node;
        let mut protocol;
        let mut eager_bytes = p.eager_bytes;
        match memory {
            "host" | "managed" => {
                protocol = match p.rndv {
                    HostRndv::Local => "copy within the process".to_string(),
                    HostRndv::None => "none: no transport reaches the peer".to_string(),
                    HostRndv::RdmaRead => format!(
                        "eager <= {} B into pre-posted registered slots; above: rendezvous by \
                         RDMA READ of the registered send buffer",
                        p.eager_bytes
                    ),
                    HostRndv::Cma { share: true } => format!(
                        "eager <= {} B; above: rendezvous, single copy (cma, process_vm_readv, \
                         {}; from {} KiB a waiting sender writes half)",
                        p.eager_bytes,
                        decided_by(p),
                        (crate::protocol::SHARE_MIN_BYTES + crate::protocol::PULL_CHUNK_BYTES)
                            >> 10
                    ),
                    HostRndv::Cma { share: false } => format!(
                        "eager <= {} B; above: rendezvous, single copy (cma, process_vm_readv, \
                         {})",
                        p.eager_bytes,
                        decided_by(p)
                    ),
                    HostRndv::Transport => format!(
                        "eager <= {} B; above: rendezvous (Rts/Cts/Data) through {transport}",
                        p.eager_bytes
                    ),
                };
                if memory == "managed" {
                    // Managed pages are CPU-accessible: they take the host paths.
                    protocol = format!("as host memory (CPU-accessible pages): {protocol}");
                    rejected.extend(p.gpu_rejected(&p.managed));
                }
                if p.same_node
                    && p.route != Route::SelfTp
                    && let Err(why) = &p.cma
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
                let device_eager = p
                    .cuda_ipc
                    .then(|| super::device_eager_max().map_or(0, |d| d.min(p.eager_bytes)));
                if let Some(d) = device_eager {
                    eager_bytes = d;
                }
                protocol = if p.route == Route::SelfTp {
                    "device copy within the process".to_string()
                } else if p.cuda_ipc {
                    let lim = device_eager.unwrap_or(0);
                    let rndv = "rendezvous, single device copy by cuda_ipc get (stream-ordered \
                                pool memory: first copied into an IPC-capable staging buffer)";
                    if lim == 0 {
                        format!("{rndv} at every size (RANKWIRE_GPU_EAGER_MAX=0, the default)")
                    } else {
                        format!(
                            "eager <= {lim} B staged through host memory (cuMemcpy) over \
                             {transport}; above: {rndv}"
                        )
                    }
                } else if let (Route::Rdma, None) = (p.route, self.gdr_reason(p)) {
                    format!(
                        "eager <= {} B staged through host memory (cuMemcpy) over rdma; above: \
                         rendezvous, RDMA READ into registered device memory (GPUDirect RDMA: \
                         {})",
                        p.eager_bytes,
                        self.gdr_name()
                    )
                } else {
                    format!(
                        "{transport}, staged via host ({} to and from host buffers; eager <= \
                         {} B, rendezvous above)",
                        if crate::gdr_standin::mode().is_some() {
                            "memcpy of the test stand-in's buffers"
                        } else {
                            "cuMemcpy"
                        },
                        p.eager_bytes
                    )
                };
                rejected.extend(p.gpu_rejected(&p.device));
                if (remote || p.route == Route::Rdma)
                    && let Some(why) = self.gdr_reason(p)
                {
                    rejected.push(format!("gdr: {why}"));
                }
            }
        }
        Row {
            rank: self.rank,
            peer: p.peer,
            memory,
            transport,
            eager_bytes,
            protocol,
            rejected,
        }
    }

    /// `RANKWIRE_RDMA_GDR=1`: where device memory is usable, every peer on another node
    /// (or reached over RDMA) must take GPUDirect RDMA.
    ///
    /// # Errors
    /// [`Error::Usage`] naming the first pair that would stage and why.
    pub(crate) fn check_gdr_required(&self) -> Result<()> {
        if self.gpu.is_err() {
            return Ok(());
        }
        for p in self.peers.iter().filter(|p| p.peer != self.rank) {
            if (!p.same_node || p.route == Route::Rdma)
                && let Some(why) = self.gdr_reason(p)
            {
                return Err(Error::usage(format!(
                    "RANKWIRE_RDMA_GDR=1 demands GPUDirect RDMA, but device buffers from rank \
                     {} to rank {} would be staged through host memory: {why}; fix: {}, or \
                     set RANKWIRE_RDMA_GDR=auto",
                    self.rank,
                    p.peer,
                    require_fix("gdr")
                )));
            }
        }
        Ok(())
    }

    /// Why device memory to `p` does not go NIC-direct (GPUDirect RDMA), `None` when it
    /// does.
    fn gdr_reason(&self, p: &PeerPath) -> Option<String> {
        if let Some(why) = self.rdma_reason(p) {
            return Some(format!("device memory goes over {}: {why}", p.route.name()));
        }
        match &self.gdr {
            Some((path, _)) if crate::gdr::is_direct(*path) => None,
            Some((_, why)) => Some(why.clone()),
            None => Some(GDR_UNDECIDED.to_string()),
        }
    }

    /// The GPUDirect RDMA registration path in words (`--explain`).
    fn gdr_name(&self) -> &'static str {
        use rankwire_transports::rdma::GdrPath;
        match self.gdr.as_ref().map(|g| g.0) {
            Some(GdrPath::DmaBuf) => "DMA-BUF",
            Some(GdrPath::PeerMem) => "nvidia_peermem",
            Some(GdrPath::StandIn) => "test stand-in, host memory (RANKWIRE_GDR_STANDIN)",
            _ => "none",
        }
    }

    /// Why host memory to `p` does not go over RDMA (`None` when it does).
    fn rdma_reason(&self, p: &PeerPath) -> Option<String> {
        if p.route == Route::Rdma {
            return None;
        }
        match PeerPath::fit(&p.host, TransportId::Rdma).map(|f| &f.answer) {
            Some(Err(why)) => Some(why.clone()),
            Some(Ok(())) => Some(format!("{} is faster to this peer", p.route.name())),
            None => Some("not a candidate".to_string()),
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
                    "{REQUIRE_ENV}={list:?}: unknown path {want:?}; fix: name paths from {}",
                    REQUIRABLE.join(", ")
                )));
            }
            for p in self.peers.iter().filter(|p| p.peer != self.rank) {
                let fail = |why: String| {
                    Err(Error::usage(format!(
                        "{REQUIRE_ENV} includes {want}, but rank {} -> rank {} cannot use it: \
                         {why}; fix: {}, or drop {want} from {REQUIRE_ENV} / --require \
                         (rwrun --explain shows every path)",
                        self.rank,
                        p.peer,
                        require_fix(want)
                    )))
                };
                match want {
                    "shm" if p.same_node && p.route != Route::Shm => {
                        return fail(format!(
                            "host memory goes over {} ({})",
                            p.route.name(),
                            p.host_rejected().join("; ")
                        ));
                    }
                    "cma" if p.same_node => {
                        if let Err(why) = &p.cma {
                            return fail(format!("cma: {why}"));
                        }
                    }
                    "ipc" if p.same_node && !p.cuda_ipc => {
                        let why = match (&self.gpu, PeerPath::fit(&p.device, TransportId::CudaIpc))
                        {
                            (Err(why), _) => why.clone(),
                            (
                                Ok(()),
                                Some(Fit {
                                    answer: Err(why), ..
                                }),
                            ) => why.clone(),
                            _ => format!("device memory goes over {}", p.route.name()),
                        };
                        return fail(format!("cuda_ipc: {why}"));
                    }
                    "rdma" if !p.same_node => {
                        if let Some(why) = self.rdma_reason(p) {
                            return fail(format!("rdma: {why}"));
                        }
                    }
                    "gdr" if !p.same_node || p.route == Route::Rdma => {
                        if let Some(why) = self.gdr_reason(p) {
                            return fail(format!("gdr: {why}"));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Whose declared caps chose single copy to `p`, in words.
fn decided_by(p: &PeerPath) -> String {
    match &p.cma {
        Ok(name) => format!("by {name} caps"),
        Err(_) => "by no caps".to_string(),
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

/// What makes the required path `want` usable (the fix of a failed `RANKWIRE_REQUIRE`).
fn require_fix(want: &str) -> &'static str {
    match want {
        "shm" => "allow shm in RANKWIRE_TRANSPORTS (its default) for ranks of one node",
        "cma" => {
            "leave RANKWIRE_CMA unset (or 1) and let the ranks read each other \
             (same user, kernel.yama.ptrace_scope 0 or 1, no seccomp filter on \
             process_vm_readv)"
        }
        "ipc" => {
            "leave RANKWIRE_CUDA_IPC unset (or 1), with a CUDA driver and device buffers \
             on ranks of one node"
        }
        "rdma" => {
            "give both nodes an RDMA device with libibverbs (RANKWIRE_IB_HCA picks one) \
             and allow rdma in RANKWIRE_TRANSPORTS"
        }
        "gdr" => {
            "reach the peer over RDMA (an RDMA device on both nodes, rdma allowed in \
             RANKWIRE_TRANSPORTS), with a CUDA driver and NIC that export and register \
             DMA-BUF or nvidia-peermem loaded, and RANKWIRE_RDMA_GDR not 0"
        }
        _ => "remove the reason named above",
    }
}
