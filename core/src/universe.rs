//! Initialization and finalization (MPI 4.1 §11.2: `MPI_Init`, `MPI_Finalize`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rankwire_transports::{
    PeerInfo, RdmaConfig, RdmaDevice, RdmaTransport, ShmConfig, ShmTransport, TcpConfig,
    TcpTransport, Transport,
};

use crate::bootstrap::client::{BootstrapClient, spawn_launcher_watch};
use crate::bootstrap::env;
use crate::comm::Communicator;
use crate::engine::{Backoff, Engine, IdleAction, RdmaOffer, Route, Waiter};
use crate::error::{Error, Result};

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// The running job as seen by this process: owns transports and the bootstrap
/// connection. Finalizes when dropped (or explicitly with [`Universe::finalize`]).
pub struct Universe {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) engine: Mutex<Engine>,
    bootstrap: Mutex<Option<BootstrapClient>>,
    finalized: AtomicBool,
}

/// Start rankwire in this process (MPI_Init).
///
/// Reads the environment `rwrun` sets ([`crate::bootstrap::env`]); without it, the
/// process becomes a singleton world of size 1. Logging goes to stderr, filtered by
/// `RANKWIRE_LOG` (e.g. `RANKWIRE_LOG=debug`).
///
/// # Errors
/// [`Error::Usage`] if called twice in one process; [`Error::Bootstrap`] if the launcher
/// environment is incomplete or the launcher cannot be reached; [`Error::Connection`]
/// if connections to peers cannot be set up.
pub fn init() -> Result<Universe> {
    if INITIALIZED.swap(true, Ordering::SeqCst) {
        return Err(Error::usage(
            "rankwire::init called twice in one process; keep the first Universe",
        ));
    }
    init_logging();
    let r = init_inner();
    if r.is_err() {
        INITIALIZED.store(false, Ordering::SeqCst);
    }
    r
}

impl Universe {
    /// The world communicator (MPI_COMM_WORLD): every rank of the job.
    pub fn world(&self) -> Communicator {
        Communicator::world(self.inner.clone())
    }

    /// Finalize (MPI_Finalize): flushes outgoing data, waits until every rank has
    /// finalized, and closes connections. Dropping the universe does the same and
    /// ignores errors.
    ///
    /// # Errors
    /// [`Error::Bootstrap`] if the launcher is unreachable during the final fence.
    pub fn finalize(self) -> Result<()> {
        self.inner.finalize()
    }

    /// Name of the transport that carries host-memory messages from this rank to
    /// world rank `peer` ("self", "shm", "tcp"), for diagnostics and tests.
    ///
    /// # Errors
    /// [`Error::Usage`] if `peer` is not a rank of the world.
    pub fn transport_to(&self, peer: usize) -> Result<&'static str> {
        if peer >= self.inner.size as usize {
            return Err(Error::usage(format!(
                "rank {peer} out of range for a world of size {}",
                self.inner.size
            )));
        }
        Ok(self.inner.lock().route(peer as u32).name())
    }

    /// Counters of this rank's cache of opened CUDA IPC mappings (opened, hits, stale
    /// evictions, open now); `None` before the first IPC transfer.
    pub fn cuda_ipc_stats(&self) -> Option<rankwire_gpu::IpcCacheStats> {
        self.inner.lock().ipc.stats()
    }

    /// Counters of the RDMA transport (registration cache hits, misses, evictions and
    /// invalidations; data-path sends, credit stalls, reads, writes); `None` when no
    /// peer is reached over RDMA.
    pub fn rdma_stats(
        &self,
    ) -> Option<(
        rankwire_transports::RegCacheStats,
        rankwire_transports::rdma::RdmaStats,
    )> {
        let e = self.inner.lock();
        e.rdma().map(|t| (t.registry().stats(), t.stats()))
    }

    /// Ask the launcher to abort every rank of the job with exit status `code`
    /// (MPI_Abort). Never returns: this process exits with `code`.
    pub fn abort(&self, code: i32, message: &str) -> ! {
        if let Ok(mut b) = self.inner.bootstrap.lock()
            && let Some(c) = b.as_mut()
        {
            let _ = c.abort(code, message);
        }
        eprintln!("rankwire: rank {} aborted: {message}", self.inner.rank);
        std::process::exit(code)
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A panicking rank must exit promptly: finalize would wait in the final
            // fence for ranks that may be waiting for this one. The launcher sees the
            // exit status and ends the job. Connections are deliberately left open
            // (the Arc is leaked) so that peers see them close only when this process
            // exits, and the launcher learns of the panic before peers report the
            // lost connection as their own failure.
            std::mem::forget(self.inner.clone());
            return;
        }
        if let Err(e) = self.inner.finalize() {
            eprintln!("rankwire: rank {}: finalize failed: {e}", self.inner.rank);
        }
    }
}

impl Inner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock leaves the engine as consistent as the
        // protocol's own invariants; keep going rather than cascade the panic.
        self.engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn check_live(&self) -> Result<()> {
        if self.finalized.load(Ordering::Acquire) {
            return Err(Error::usage(
                "rankwire was finalized; no more communication",
            ));
        }
        Ok(())
    }

    /// Progress until `done` returns a value.
    pub(crate) fn wait_for<T>(&self, mut done: impl FnMut(&mut Engine) -> Option<T>) -> T {
        let mut waiter = Waiter::new();
        loop {
            let (progressed, backoff) = {
                let mut e = self.lock();
                if let Some(v) = done(&mut e) {
                    return v;
                }
                let p = e.progress();
                if let Some(v) = done(&mut e) {
                    return v;
                }
                (p, e.backoff)
            };
            if let IdleAction::Block(d) = waiter.idle(progressed, backoff) {
                self.lock().wait_activity(d);
            }
        }
    }

    fn finalize(&self) -> Result<()> {
        if self.finalized.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Flush what was handed to transports (bounded: a dead peer fails its frames).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        self.wait_for(|e| (e.is_flushed() || std::time::Instant::now() > deadline).then_some(()));
        let mut b = self.bootstrap.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = b.as_mut() {
            c.fence()
                .map_err(|e| Error::Bootstrap(format!("final fence failed: {e}")))?;
            self.lock().quiesce();
            c.finalize()
                .map_err(|e| Error::Bootstrap(format!("finalize failed: {e}")))?;
        }
        Ok(())
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RANKWIRE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn var(name: &str) -> Result<String> {
    std::env::var(name).map_err(|_| {
        Error::Bootstrap(format!(
            "environment variable {name} is missing although {} is set; start the program with rwrun",
            env::RANK
        ))
    })
}

fn parse<T: std::str::FromStr>(name: &str) -> Result<T> {
    let v = var(name)?;
    v.parse()
        .map_err(|_| Error::Bootstrap(format!("environment variable {name}={v:?} is not a number")))
}

fn init_inner() -> Result<Universe> {
    if std::env::var_os(env::RANK).is_none() {
        return Ok(singleton());
    }
    let rank: u32 = parse(env::RANK)?;
    let size: u32 = parse(env::SIZE)?;
    if size == 0 || rank >= size {
        return Err(Error::Bootstrap(format!(
            "{}={rank} is not below {}={size}",
            env::RANK,
            env::SIZE
        )));
    }
    let local_size: usize = parse(env::LOCAL_SIZE).unwrap_or(size as usize);
    let addr = var(env::BOOTSTRAP_ADDR)?;
    let job_id = var(env::JOB_ID)?;
    let secret = var(env::JOB_SECRET)?;
    let mut client =
        BootstrapClient::connect(&addr, &job_id, &secret, rank, Duration::from_secs(30))
            .map_err(|e| Error::Bootstrap(e.to_string()))?;
    if let Err(e) = spawn_launcher_watch(&addr, &job_id, &secret, rank) {
        tracing::warn!("cannot watch the launcher connection: {e}");
    }
    let me = node_id();
    client
        .put(&format!("node-{rank}"), me.as_bytes())
        .map_err(|e| Error::Bootstrap(e.to_string()))?;
    client
        .fence()
        .map_err(|e| Error::Bootstrap(e.to_string()))?;
    let mut node_ids = Vec::with_capacity(size as usize);
    for r in 0..size {
        let v = client
            .get(&format!("node-{r}"))
            .map_err(|e| Error::Bootstrap(e.to_string()))?;
        node_ids.push(String::from_utf8_lossy(&v).into_owned());
    }
    // Transport selection, per peer, walks the table self -> shm -> rdma -> tcp. Every
    // rank takes the same decisions (same environment, symmetric node identity, the
    // published RDMA availability), and every rank constructs each transport, because
    // their setup includes job-wide fences.
    let allowed = allowed_transports()?;
    let (rdma_cfg, rdma_dev, rdma_ok) = probe_rdma(rank, size, &allowed, &mut client)?;
    let local: Vec<u32> = (0..size)
        .filter(|&r| r != rank && node_ids[r as usize] == me)
        .collect();
    let use_shm = allowed.contains(&"shm");
    let shm = if use_shm && size > 1 {
        let cfg = ShmConfig::from_env()
            .map_err(|e| Error::usage(format!("shared-memory transport settings: {e}")))?;
        Some(ShmTransport::new(rank, &job_id, cfg, &mut client, &local)?)
    } else {
        None
    };
    let mut routes = Vec::with_capacity(size as usize);
    let mut tcp_peers = Vec::new();
    for r in 0..size {
        let info = PeerInfo {
            rank: r,
            node_id: node_ids[r as usize].clone(),
            pid: 0,
        };
        let mut why_not = Vec::new();
        let mut route = if r == rank {
            Route::SelfTp
        } else if let Some(t) = shm.as_ref().filter(|_| local.contains(&r)) {
            match t.can_reach(&info) {
                Ok(()) => Route::Shm,
                Err(e) => {
                    why_not.push(e);
                    Route::Tcp
                }
            }
        } else {
            why_not.push(if !use_shm {
                "shm: excluded by RANKWIRE_TRANSPORTS".to_string()
            } else {
                format!("shm: rank {r} is on another node ({})", info.node_id)
            });
            Route::Tcp
        };
        if route == Route::Tcp {
            if !allowed.contains(&"rdma") {
                why_not.push("rdma: excluded by RANKWIRE_TRANSPORTS".to_string());
            } else if rdma_dev.is_none() {
                why_not.push("rdma: no RDMA device in this process".to_string());
            } else if !rdma_ok[r as usize] {
                why_not.push(format!("rdma: rank {r} has no RDMA device"));
            } else {
                route = Route::Rdma;
            }
        }
        if route == Route::Tcp {
            if !allowed.contains(&"tcp") {
                return Err(Error::Connection {
                    peer: r,
                    detail: format!(
                        "no allowed transport reaches rank {r} from rank {rank}: {}; tcp: excluded by RANKWIRE_TRANSPORTS (RANKWIRE_LOG=debug shows why RDMA is off)",
                        why_not.join("; ")
                    ),
                });
            }
            tcp_peers.push(r);
        }
        tracing::debug!(
            "rank {rank} -> rank {r}: host memory via {}{}",
            route.name(),
            if why_not.is_empty() {
                String::new()
            } else {
                format!(" (not chosen: {})", why_not.join("; "))
            }
        );
        routes.push(route);
    }
    let tcp = if size > 1 && allowed.contains(&"tcp") {
        let cfg = TcpConfig::from_env()
            .map_err(|e| Error::usage(format!("TCP transport settings: {e}")))?;
        Some(TcpTransport::new(
            rank,
            size,
            &job_id,
            cfg,
            &mut client,
            &tcp_peers,
        )?)
    } else {
        None
    };
    let rdma_peers: Vec<u32> = (0..size)
        .filter(|&r| routes[r as usize] == Route::Rdma)
        .collect();
    let rdma_cfg_kept = rdma_cfg.clone();
    let rdma = match rdma_cfg {
        Some(cfg) => RdmaTransport::new(
            rank,
            rdma_dev.filter(|_| !rdma_peers.is_empty()),
            &cfg,
            &mut client,
            &rdma_peers,
        )?,
        None => None,
    };
    // A transport that serves no peer is dropped after the setup fences, so progress
    // never polls it.
    let shm = shm.filter(|_| routes.contains(&Route::Shm));
    let tcp = tcp.filter(|_| !tcp_peers.is_empty());
    let registry = rdma.as_ref().map(|t| t.registry());
    let mut engine = Engine::new(
        rank,
        size,
        shm,
        tcp,
        rdma,
        routes.clone(),
        Backoff::from_env(local_size),
    );
    // Same-node peers exchange large host messages in one copy by cross-memory attach
    // (process_vm_readv); a receiver that is refused falls back to copying through the
    // transport. RANKWIRE_CMA=0 turns it off.
    let cma = std::env::var("RANKWIRE_CMA").map_or(true, |v| v != "0");
    let gpu = enable_gpu(&mut engine);
    if let (true, Some(t), Some(cfg)) = (gpu, engine.rdma(), rdma_cfg_kept.as_ref()) {
        gdr_choice(rank, t, cfg)?;
    }
    let cuda_ipc = gpu && std::env::var("RANKWIRE_CUDA_IPC").map_or(true, |v| v != "0");
    if let Some(reg) = registry {
        // Rendezvous over RDMA: the Rts carries address, length and rkey of the
        // registered send buffer, and the receiver RDMA-reads it.
        engine
            .proto
            .set_net_offer(Box::new(RdmaOffer::new(reg)), &rdma_peers);
        for &r in &rdma_peers {
            engine.proto.allow_pull(r, true);
            tracing::debug!("rank {rank} <- rank {r}: large host messages by RDMA READ");
        }
    }
    for r in (0..size).filter(|&r| r != rank && node_ids[r as usize] == me) {
        if cuda_ipc {
            engine.proto.allow_cuda_ipc(r);
        }
        if routes[r as usize] == Route::Rdma {
            // Forced onto RDMA inside a node: host rendezvous goes by RDMA READ.
            continue;
        }
        engine.proto.offer_host_cma(r);
        engine.proto.allow_pull(r, cma);
        tracing::debug!(
            "rank {rank} <- rank {r}: large host messages by {}",
            if cma {
                "single copy (cma)"
            } else {
                "copy through the transport"
            }
        );
    }
    Ok(Universe {
        inner: Arc::new(Inner {
            rank,
            size,
            engine: Mutex::new(engine),
            bootstrap: Mutex::new(Some(client)),
            finalized: AtomicBool::new(false),
        }),
    })
}

fn singleton() -> Universe {
    let mut engine = Engine::new(
        0,
        1,
        None,
        None,
        None,
        vec![Route::SelfTp],
        Backoff::from_env(1),
    );
    enable_gpu(&mut engine);
    Universe {
        inner: Arc::new(Inner {
            rank: 0,
            size: 1,
            engine: Mutex::new(engine),
            bootstrap: Mutex::new(None),
            finalized: AtomicBool::new(false),
        }),
    }
}

/// Node identity: boot id + hostname + network namespace. Two ranks with the same
/// string share a kernel and a network stack, hence shared memory and loopback.
pub(crate) fn node_id() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{host}/{boot}/{netns}")
}

/// RDMA device of this process and which ranks have one (published through the
/// bootstrap), when RDMA is allowed and the job has more than one rank. "No RDMA
/// here" (no library, no device, `ENOSYS`) is not an error: it is said once in the
/// debug log and TCP is used. A settings error (`RANKWIRE_IB_HCA`,
/// `RANKWIRE_IB_GID_INDEX`) is [`Error::Usage`].
#[allow(clippy::type_complexity)]
fn probe_rdma(
    rank: u32,
    size: u32,
    allowed: &[&str],
    client: &mut BootstrapClient,
) -> Result<(Option<RdmaConfig>, Option<RdmaDevice>, Vec<bool>)> {
    if !allowed.contains(&"rdma") || size < 2 {
        return Ok((None, None, vec![false; size as usize]));
    }
    let cfg = RdmaConfig::from_env()
        .map_err(|e| Error::usage(format!("RDMA transport settings: {e}")))?;
    let dev = match RdmaDevice::probe(&cfg) {
        Ok(Ok(d)) => {
            tracing::debug!("rdma: rank {rank} uses {}", d.why());
            Some(d)
        }
        Ok(Err(why)) => {
            tracing::debug!("rdma: no RDMA here ({why}); peers off this node use tcp");
            None
        }
        Err(e) => return Err(Error::usage(format!("RDMA transport settings: {e}"))),
    };
    let boot = |e: crate::bootstrap::client::BootstrapError| Error::Bootstrap(e.to_string());
    client
        .put(
            &format!("rdma-{rank}"),
            if dev.is_some() { b"1" } else { b"0" },
        )
        .map_err(boot)?;
    client.fence().map_err(boot)?;
    let mut ok = Vec::with_capacity(size as usize);
    for r in 0..size {
        ok.push(client.get(&format!("rdma-{r}")).map_err(boot)? == b"1");
    }
    Ok((Some(cfg), dev, ok))
}

/// Transports allowed by `RANKWIRE_TRANSPORTS` (comma-separated subset of
/// `shm,rdma,tcp`; default all). The self transport is always used for a rank's own
/// messages.
fn allowed_transports() -> Result<Vec<&'static str>> {
    let Ok(v) = std::env::var("RANKWIRE_TRANSPORTS") else {
        return Ok(vec!["shm", "rdma", "tcp"]);
    };
    let mut out = Vec::new();
    for t in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match t {
            "shm" => out.push("shm"),
            "tcp" => out.push("tcp"),
            "rdma" => out.push("rdma"),
            "self" => {}
            other => {
                return Err(Error::usage(format!(
                    "RANKWIRE_TRANSPORTS={v:?}: unknown transport {other:?} (known: self, shm, rdma, tcp)"
                )));
            }
        }
    }
    Ok(out)
}

/// How GPU buffers would reach the NIC (GPUDirect RDMA): DMA-BUF first
/// (`cuMemGetHandleForAddressRange` + `ibv_reg_dmabuf_mr`), else `ibv_reg_mr` on the
/// device pointer through `nvidia_peermem`, else staging through host memory. The
/// choice and its reason go to the debug log. Device buffers currently always take the
/// staged path over RDMA (the rdma transport declares no CUDA caps); this establishes
/// and reports what a direct path would use, and `RANKWIRE_RDMA_GDR=1` fails the job
/// when no direct path exists.
///
/// # Errors
/// [`Error::Usage`] when `RANKWIRE_RDMA_GDR=1` and neither direct path is available.
fn gdr_choice(rank: u32, t: &RdmaTransport, cfg: &RdmaConfig) -> Result<()> {
    use rankwire_transports::rdma::{GdrFacts, gdr_path};
    let ordinal = 0;
    let facts = GdrFacts {
        cuda_dmabuf: rankwire_gpu::dmabuf_supported(ordinal).unwrap_or(false),
        verbs_dmabuf: t.has_dmabuf_mr(),
        peermem_loaded: GdrFacts::peermem_loaded_here(),
    };
    match gdr_path(facts, cfg.require_gdr) {
        Ok((path, why)) => {
            tracing::debug!(
                "rdma: rank {rank}: GPU buffers on {}: {path:?} ({why}); transfers of device buffers are staged through host memory in this version",
                t.device_name()
            );
            Ok(())
        }
        Err(e) => Err(Error::usage(format!("rank {rank}: {e}"))),
    }
}

/// Give the protocol device-memory access when this build and process can use CUDA.
/// Returns whether it did. Without it, device buffers fail with [`Error::Gpu`].
fn enable_gpu(engine: &mut Engine) -> bool {
    if !rankwire_gpu::available() {
        tracing::debug!("GPU paths off: CUDA support not built or libcuda not loadable");
        return false;
    }
    if let Err(e) = rankwire_gpu::init() {
        tracing::info!("GPU paths off: {e}");
        return false;
    }
    engine
        .proto
        .set_device_mem(Box::new(crate::gpu_path::GpuStaging));
    true
}
