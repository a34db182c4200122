//! Initialization and finalization (MPI 4.1 §11.2: `MPI_Init`, `MPI_Finalize`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rankwire_transports::{
    PeerInfo, RdmaTransport, SelfTransport, ShmConfig, ShmTransport, TcpConfig, TcpTransport,
    Transport,
};

use crate::bootstrap::client::{BootstrapClient, default_timeout, spawn_launcher_watch};
use crate::bootstrap::env;
use crate::bootstrap::launch::{self, Launch};
use crate::bootstrap::node::{affinity_cpus, cpu_list, env_switch, node_id, parse_cpu_list};
use crate::bootstrap::pmi::PmiClient;
use crate::bootstrap::{SharedLookup, Wireup};
use crate::comm::Communicator;
use crate::engine::{Backoff, Engine};
use crate::error::{Error, Result};
use crate::runtime::Inner;
use crate::select::{self, Candidate, HostRndv, Paths, Route, TransportId};

// Process-wide on purpose (MPI's init-once rule, MPI 4.1 §11.2.1): it guards the
// creation of a runtime, so it cannot live inside one. Set by `init`, cleared when
// init fails so that a later call may try again.
static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// The running job as seen by this process: owns transports and the bootstrap
/// connection. End it with [`Universe::finalize`]; dropped without it, it aborts the
/// job with its last error (see `core/src/abort.rs`).
pub struct Universe {
    inner: Arc<Inner>,
}

/// Start rankwire in this process (MPI_Init).
///
/// Reads the environment `rwrun` sets ([`crate::bootstrap::env`]), or, for a task started
/// directly by `srun --mpi=pmi2`, speaks PMI-2 (PMI-1 as a fallback) on `PMI_FD`
/// ([`crate::bootstrap::pmi`]), or, for one started by `srun --mpi=pmix`, is a PMIx
/// client through libpmix loaded at run time ([`crate::bootstrap::pmix`]); without any of
/// these, the process becomes a singleton world of size 1 (see
/// [`crate::bootstrap::launch`]). Logging goes to stderr, filtered by
/// `RANKWIRE_LOG` (e.g. `RANKWIRE_LOG=debug`).
///
/// # Errors
/// [`Error::Usage`] if called twice in one process; [`Error::Bootstrap`] if the launcher
/// environment is incomplete, the launcher or PMI server cannot be reached (or, under
/// PMIx, libpmix cannot be loaded: the message names the package), or the
/// process is one task of a multi-task Slurm step without a PMI connection (`srun
/// --mpi=none`; the message names the fix); [`Error::Connection`] if connections to
/// peers cannot be set up.
pub fn init() -> Result<Universe> {
    if INITIALIZED.swap(true, Ordering::SeqCst) {
        return Err(Error::usage(
            "rankwire::init called twice in one process; fix: keep the first Universe and pass it (or its communicators) to the code that needs it",
        ));
    }
    init_logging();
    crate::abort::install_panic_hook();
    let r = init_inner();
    match &r {
        Ok(u) => report_binding(u),
        Err(_) => INITIALIZED.store(false, Ordering::SeqCst),
    }
    r
}

impl Universe {
    /// This rank's position among the ranks on its node (0-based, in rank order; nodes
    /// told apart by boot id, hostname and network namespace, as for shared memory).
    pub fn local_rank(&self) -> usize {
        self.inner.local_rank as usize
    }

    /// The GPU this rank should use: `RANKWIRE_GPU_DEVICE` if set, else
    /// `local_rank % device_count` (ranks on a node spread round-robin over its GPUs).
    /// Also makes that device's primary context current on the calling thread. The
    /// runtime itself takes the device of each buffer from the buffer; this is the
    /// device to allocate on. Initializes CUDA on first use only (a host-only job never
    /// does).
    ///
    /// # Errors
    /// [`Error::Gpu`] when no GPU is usable (not built with `cuda`, no driver, no
    /// device) or when `RANKWIRE_GPU_DEVICE` is not a visible device ordinal.
    pub fn gpu_device(&self) -> Result<i32> {
        let n =
            rankwire_gpu::device_count().map_err(|e| Error::Gpu(format!("no usable GPU: {e}")))?;
        let dev = select_gpu(
            self.inner.local_rank as usize,
            n,
            crate::settings::raw("RANKWIRE_GPU_DEVICE").as_deref(),
        )?;
        rankwire_gpu::set_current_device(dev)
            .map_err(|e| Error::Gpu(format!("making GPU {dev} current: {e}")))?;
        Ok(dev)
    }

    /// The world communicator (MPI_COMM_WORLD): every rank of the job.
    pub fn world(&self) -> Communicator {
        Communicator::world(self.inner.clone())
    }

    /// Finalize (MPI_Finalize): flushes outgoing data, waits until every rank has
    /// finalized, and closes connections. This is the only clean end: a universe
    /// dropped without it (an error returned from `main` with `?`, a panic) aborts the
    /// whole job at once, and `rwrun` prints this rank's last error or panic message.
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

    /// The path table of this rank (what `rwrun --explain` prints): for each peer
    /// (itself included) and each memory kind (host, device, managed), the transport,
    /// the eager limit in bytes, the protocol by size, and why faster paths were not
    /// taken. Render it with [`crate::explain::render`].
    pub fn explain(&self) -> Vec<crate::explain::Row> {
        self.inner.paths.rows()
    }

    /// Counters of this rank's cache of opened CUDA IPC mappings (opened, hits, stale
    /// evictions, open now); `None` before the first IPC transfer.
    pub fn cuda_ipc_stats(&self) -> Option<rankwire_gpu::IpcCacheStats> {
        self.inner.lock().ipc_stats()
    }

    /// Counters of the RDMA transport (host registration cache hits, misses, evictions
    /// and invalidations; data-path sends, credit stalls, reads, writes; the device
    /// registration cache of GPUDirect RDMA and its flushes in
    /// [`rankwire_transports::rdma::RdmaStats::device_regcache`] and `gdr_flushes`);
    /// `None` when no peer is reached over RDMA.
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
    /// Dropped without [`Universe::finalize`] (an error returned from `main` with `?`,
    /// a panic): abort the job at once with the reason (`crate::abort`) instead of
    /// waiting in the final fence for ranks that may wait for this one. Without a
    /// launcher (a singleton) there is nobody to tell: it just ends.
    fn drop(&mut self) {
        if self.inner.finalized.load(Ordering::Acquire) {
            return;
        }
        self.inner.leave_unfinalized(std::thread::panicking());
    }
}

impl Inner {
    /// See `Drop for Universe`. Connections are deliberately left open (the `Arc` is
    /// leaked) so that peers see them close only when this process exits, after the
    /// launcher has the abort and its reason (peers then report the lost connection,
    /// not a failure of their own, if they get to report at all).
    fn leave_unfinalized(self: &Arc<Self>, panicking: bool) {
        self.finalized.store(true, Ordering::Release);
        let mut b = self.bootstrap.lock().unwrap_or_else(|p| p.into_inner());
        let Some(c) = b.as_mut() else {
            return;
        };
        // rwrun names the rank in its line; this rank's own line names it here.
        let (code, why) = crate::abort::reason(panicking);
        eprintln!("rankwire: rank {} {why}; ending the job", self.rank);
        if let Err(e) = c.abort(code, &why) {
            eprintln!(
                "rankwire: rank {}: telling the launcher failed: {e}",
                self.rank
            );
        }
        drop(b);
        std::mem::forget(self.clone());
    }

    pub(crate) fn finalize(&self) -> Result<()> {
        // Stream-ordered operations in flight finish first (they need progress).
        if let Some(p) = self.stream_proxy.get() {
            p.stop();
        }
        if self.finalized.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Flush what was handed to transports (bounded: a dead peer fails its frames).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        self.wait_for(|e| (e.is_flushed() || std::time::Instant::now() > deadline).then_some(()));
        // The client is taken out of its lock for the final fence, so that the rank
        // keeps progressing while it waits (the engine lock is never taken under the
        // bootstrap lock, runtime.rs): a peer may still need this rank to answer before
        // its own flush above ends, e.g. to set up the connection or queue pair that
        // carries a last eager message (never received: an erroneous program, but one
        // that must not cost the peer its 60 s flush bound). No new connection is made
        // meanwhile (this rank's frames are flushed, and answers go back on the
        // connection the peer made), so no address is read from the bootstrap.
        let Some(mut c) = self
            .bootstrap
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return Ok(());
        };
        let fenced = c.fence_progressing(FINAL_FENCE_POLL, || {
            // Rounds while they move something (a peer's burst of frames), bounded.
            let mut e = self.lock();
            let mut moved = false;
            for _ in 0..FINAL_FENCE_ROUNDS {
                if !self.progress(&mut e) {
                    break;
                }
                moved = true;
            }
            moved
        });
        *self.bootstrap.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
        fenced.map_err(|e| {
            Error::Bootstrap(format!(
                "final fence failed: {e} (the other ranks did not reach finalize: if they \
                 wait for this rank, because it is ending after an error or left a receive \
                 or collective unmatched, the job cannot end cleanly; end such a rank with \
                 Universe::abort instead)"
            ))
        })?;
        self.lock().quiesce();
        let mut b = self.bootstrap.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = b.as_mut() {
            c.finalize()
                .map_err(|e| Error::Bootstrap(format!("finalize failed: {e}")))?;
        }
        Ok(())
    }
}

/// The longest pause between progress in the final fence ([`Inner::finalize`]): after
/// a round that moved something the next comes after 1 ms, after an idle one the pause
/// doubles up to this.
const FINAL_FENCE_POLL: Duration = Duration::from_millis(50);

/// Progress rounds at most at each stop in the final fence, while they move something.
const FINAL_FENCE_ROUNDS: usize = 256;

fn init_logging() {
    let filter = crate::settings::raw("RANKWIRE_LOG")
        .and_then(|v| tracing_subscriber::EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("warn"));
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

// What the wire-up gave: this rank's place in the job and the connection to use.
struct Joined {
    rank: u32,
    size: u32,
    /// Ranks on this node, if the launcher said (`None`: count same-node identities).
    local_size: Option<usize>,
    job_id: String,
    /// The job secret the TCP handshake proves knowledge of: rwrun's
    /// `RANKWIRE_JOB_SECRET`; `None` under PMI, where rank 0 makes one and shares it
    /// through the PMI key-value space (readable only by the job's tasks).
    secret: Option<String>,
    wireup: Wireup,
}

/// Key under which rank 0 shares the job secret when the launcher gave none (PMI).
const SECRET_KEY: &str = "job-secret";

fn init_inner() -> Result<Universe> {
    crate::settings_check::at_init()?;
    let watchdog = crate::watchdog::from_env()?;
    let u = init_world()?;
    if let Some(limit) = watchdog {
        u.inner.set_watchdog(limit);
    }
    // The path table is built only when someone reads it.
    let explain = env_switch(select::EXPLAIN_ENV) == Some(true);
    let info = tracing::enabled!(tracing::Level::INFO);
    if explain || info {
        let table = select::render(&u.inner.paths.rows());
        if explain {
            let mut out = String::new();
            for line in table.lines() {
                out.push_str(&format!("rankwire explain: {line}\n"));
            }
            if let Some(d) = &u.inner.paths.rdma_device {
                out.push_str(&format!(
                    "rankwire explain: rank {} rdma device: {d}\n",
                    u.inner.rank
                ));
            }
            // Job-wide notes: every rank holds the same ones; rank 0 says them once.
            if u.inner.rank == 0 {
                for note in &u.inner.paths.notes {
                    out.push_str(&format!("rankwire explain: note: {note}\n"));
                }
            }
            eprint!("{out}");
        }
        if info {
            for line in table.lines() {
                tracing::info!("path: {line}");
            }
        }
    }
    if let Some(list) = crate::settings::raw(select::REQUIRE_ENV)
        && let Err(e) = u.inner.paths.check_required(&list.to_ascii_lowercase())
    {
        // Each rank checks its own paths, so other ranks may have passed and wait for
        // this one: finalizing would wait for them in the final fence (until the
        // bootstrap timeout). Leave without it, as a panicking rank does; the launcher
        // ends the job when this process exits with the error.
        std::mem::forget(u);
        return Err(e);
    }
    Ok(u)
}

fn init_world() -> Result<Universe> {
    let launched = launch::detect(|k| std::env::var(k).ok()).map_err(Error::Bootstrap)?;
    launch::note_launch(&launched);
    let joined = match launched {
        Launch::Singleton => return Ok(singleton()),
        Launch::Rwrun => join_rwrun()?,
        Launch::Pmi => join_pmi()?,
        Launch::Pmix => join_pmix()?,
    };
    build(joined)
}

fn join_rwrun() -> Result<Joined> {
    let rank: u32 = parse(env::RANK)?;
    let size: u32 = parse(env::SIZE)?;
    if size == 0 || rank >= size {
        return Err(Error::Bootstrap(format!(
            "{}={rank} is not below {}={size}",
            env::RANK,
            env::SIZE
        )));
    }
    let local_size: Option<usize> = parse(env::LOCAL_SIZE).ok();
    let addr = var(env::BOOTSTRAP_ADDR)?;
    let job_id = var(env::JOB_ID)?;
    let secret = var(env::JOB_SECRET)?;
    let client = BootstrapClient::connect(&addr, &job_id, &secret, rank, Duration::from_secs(30))
        .map_err(|e| Error::Bootstrap(e.to_string()))?;
    if let Err(e) = spawn_launcher_watch(&addr, &job_id, &secret, rank) {
        tracing::warn!("cannot watch the launcher connection: {e}");
    }
    Ok(Joined {
        rank,
        size,
        local_size,
        job_id,
        secret: Some(secret),
        wireup: Wireup::Rwrun(client),
    })
}

// A task started by a PMI server (srun --mpi=pmi2): rank and size come from the server.
fn join_pmi() -> Result<Joined> {
    let pmi_err = |e: crate::bootstrap::pmi::PmiError| {
        Error::Bootstrap(format!(
            "PMI wire-up on PMI_FD (as started by `srun --mpi=pmi2`) failed: {e}"
        ))
    };
    let client = PmiClient::from_env(default_timeout()).map_err(pmi_err)?;
    let (rank, size) = (client.rank(), client.size());
    tracing::debug!(
        "rank {rank} of {size}: wire-up by {} on PMI_FD (process mapping: {:?})",
        client.version().name(),
        client.node_of_rank()
    );
    let pmi_job = std::env::var(crate::bootstrap::pmi::env::PMI_JOBID).unwrap_or_default();
    Ok(Joined {
        rank,
        size,
        local_size: None,
        job_id: resource_manager_job_id("pmi", &pmi_job),
        secret: None,
        wireup: Wireup::Pmi(client),
    })
}

// A task started by a PMIx server (srun --mpi=pmix): rank, size and the ranks on this
// node come from the server.
fn join_pmix() -> Result<Joined> {
    use crate::bootstrap::pmix::PmixClient;
    let client = PmixClient::from_env(default_timeout()).map_err(|e| {
        Error::Bootstrap(format!(
            "PMIx wire-up (as started by `srun --mpi=pmix`) failed: {e}"
        ))
    })?;
    let (rank, size) = (client.rank(), client.size());
    tracing::debug!(
        "rank {rank} of {size}: wire-up by PMIx {} (namespace {}, local rank {:?} of {:?})",
        client.library_version(),
        client.namespace(),
        client.local_rank(),
        client.local_size()
    );
    let ns = client.namespace();
    Ok(Joined {
        rank,
        size,
        local_size: client.local_size().map(|n| n as usize),
        job_id: resource_manager_job_id("pmix", &ns),
        secret: None,
        wireup: Wireup::Pmix(Box::new(client)),
    })
}

/// The job id of a job started by a resource manager. Names of /dev/shm segments and the
/// TCP handshake need one that every task computes alike and that differs between steps
/// and between runs of a cluster whose job ids restart: Slurm's job and step plus srun's
/// own (ephemeral) port; elsewhere `<prefix>-<the server's job name>`. At most 40
/// characters per part, all safe in a /dev/shm name.
fn resource_manager_job_id(prefix: &str, server_job: &str) -> String {
    let clean = |x: &str| -> String {
        x.chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_'))
            .take(40)
            .collect()
    };
    let mut job_id = String::from("slurm");
    for v in ["SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_SRUN_COMM_PORT"] {
        if let Ok(x) = std::env::var(v) {
            job_id.push('-');
            job_id.push_str(&clean(&x));
        }
    }
    if job_id == "slurm" {
        job_id = format!("{prefix}-{}", clean(server_job));
    }
    job_id
}

fn build(joined: Joined) -> Result<Universe> {
    let Joined {
        rank,
        size,
        local_size,
        job_id,
        secret,
        wireup: mut client,
    } = joined;
    let boot = |e: String| Error::Bootstrap(e);
    use rankwire_transports::Exchange as _;
    if secret.is_none() && rank == 0 && size > 1 {
        let bytes: [u8; 16] = rand::random();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        client.put(SECRET_KEY, hex.as_bytes()).map_err(boot)?;
    }
    let me = node_id();
    // The node identity, the CPUs this process may run on, and its pid and the
    // address of its cross-memory-attach probe word, tab-separated: ranks of one node
    // learn how many CPUs they share (the union of their affinity masks), which decides
    // whether they are oversubscribed, and whether the OS lets them read each other.
    let my_cpus = affinity_cpus();
    // A fourth field, with --explain only (else empty): this process's GPUs (PCI id,
    // MPS) and its RANKWIRE_GPU_DEVICE, for the note on ranks sharing a GPU without MPS
    // (select/sharing.rs). A host-only job without --explain reads no GPU attribute. A
    // fifth: whether it has an RDMA device and makes queue pairs on demand or at init (1d, 1i,
    // 0d, 0i, or - where RDMA is not considered); a sixth: the settings every rank must
    // share (select::shared_settings_field: the allow list, TCP's connect mode;
    // coll::select::shared_settings_field: the collective algorithms and checks).
    let explain = env_switch(select::EXPLAIN_ENV) == Some(true);
    let gpu_field = if explain {
        select::sharing::local_field(crate::settings::raw("RANKWIRE_GPU_DEVICE").as_deref())
    } else {
        None
    };
    // Fifth field: whether this process has an RDMA device (select::probe_rdma).
    let allowed = select::allowed_transports()?;
    let mut rdma_probe = select::probe_rdma(rank, size, &allowed)?;
    client
        .put(
            &format!("node-{rank}"),
            format!(
                "{me}\t{}\t{}:{:x}\t{}\t{}\t{}",
                cpu_list(&my_cpus),
                std::process::id(),
                rankwire_transports::shm::cma::CMA_PROBE_WORD.as_ptr() as usize,
                gpu_field.as_deref().unwrap_or(""),
                rdma_probe.publish(allowed.contains(&"tcp")),
                select::shared_settings_field(
                    &allowed,
                    crate::settings::raw("RANKWIRE_TCP_CONNECT").as_deref()
                ) + " "
                    + &crate::coll::select::shared_settings_field()
            )
            .as_bytes(),
        )
        .map_err(boot)?;
    client.fence().map_err(boot)?;
    let mut node_ids = Vec::with_capacity(size as usize);
    // What each rank published as the settings all must share (sixth field).
    let mut shared_by: Vec<Option<String>> = Vec::with_capacity(size as usize);
    let mut node_cpus: Vec<u32> = Vec::new();
    // (node identity, CPU list) of every rank, for the most ranks per CPU of any node.
    let mut cpu_records: Vec<(String, String)> = Vec::with_capacity(size as usize);
    // (pid, probe address) of each rank, where published.
    let mut probe_at: Vec<Option<(u32, u64)>> = Vec::with_capacity(size as usize);
    // What each rank published about its GPUs (with --explain only).
    let mut gpu_facts: Vec<Option<select::sharing::GpuFacts>> = Vec::with_capacity(size as usize);
    // One round trip per 1024 ranks (GetMany), not one per rank.
    let keys: Vec<(u32, String)> = (0..size).map(|r| (r, format!("node-{r}"))).collect();
    let values = client.get_many(&keys).map_err(boot)?;
    // Published by rank 0 before the fence above where the launcher gave none.
    let secret = match secret {
        Some(s) => s,
        None if size > 1 => {
            String::from_utf8_lossy(&client.get(0, SECRET_KEY).map_err(boot)?).into_owned()
        }
        None => String::new(),
    };
    for (r, v) in values.iter().enumerate() {
        let v = String::from_utf8_lossy(v);
        let mut parts = v.split('\t');
        let id = parts.next().unwrap_or_default();
        let cpus = parts.next().unwrap_or_default();
        probe_at.push(parts.next().and_then(|p| {
            let (pid, addr) = p.split_once(':')?;
            Some((pid.parse().ok()?, u64::from_str_radix(addr, 16).ok()?))
        }));
        gpu_facts.push(parts.next().and_then(select::sharing::parse_field));
        rdma_probe.learn(r as u32, parts.next());
        shared_by.push(parts.next().map(str::to_string));
        if id == me {
            node_cpus.extend(parse_cpu_list(cpus));
        }
        cpu_records.push((id.to_string(), cpus.to_string()));
        node_ids.push(id.to_string());
    }
    select::check_shared_settings(&shared_by.iter().map(Option::as_deref).collect::<Vec<_>>())?;
    node_cpus.sort_unstable();
    node_cpus.dedup();
    let local_size = local_size.unwrap_or_else(|| node_ids.iter().filter(|n| **n == me).count());
    // Transport selection, per peer, walks the table self -> shm -> cuda_ipc -> rdma ->
    // tcp (select.rs). Every rank takes the same decisions (same environment, symmetric
    // node identity, the published RDMA availability), and every rank constructs each
    // transport, because their setup includes job-wide fences.
    let local: Vec<u32> = (0..size)
        .filter(|&r| r != rank && node_ids[r as usize] == me)
        .collect();
    // Node identity, not the launcher's numbering, decides who shares a node.
    let local_rank = local.iter().filter(|&&r| r < rank).count() as u32;
    // Same-node peers exchange large host messages in one copy by cross-memory attach
    // (process_vm_readv); a receiver that is refused falls back to copying through the
    // transport. RANKWIRE_CMA=0 turns it off.
    let cma = env_switch("RANKWIRE_CMA") != Some(false);
    // One descriptor per peer from here on (a pidfd per same-node peer, a socket per TCP
    // peer): raise the soft limit, and say so clearly if even the hard one is too low,
    // before a connect fails with EMFILE deep in a transport.
    if let Some((soft, hard)) = crate::bootstrap::node::raise_nofile() {
        let need = crate::bootstrap::node::nofile_needed(size, crate::bootstrap::node::open_fds());
        crate::bootstrap::node::check_nofile(size, need, soft, hard).map_err(Error::Usage)?;
    }
    let shm = if allowed.contains(&"shm") && size > 1 {
        let cfg = ShmConfig::from_env()
            .map_err(|e| Error::usage(format!("shared-memory transport settings: {e}")))?;
        let mut t = ShmTransport::new(rank, &job_id, cfg, &mut client, &local)?;
        // Before selection reads its caps: their host get/put follow single copy.
        t.set_cma_allowed(cma);
        // Its can_reach refuses peers of other nodes (caps: reach Node).
        t.set_node_id(me.as_str());
        Some(t)
    } else {
        None
    };
    // Whether the OS lets this rank read each same-node peer (ptrace rules, containers):
    // probed once here, so that `--explain` and `--require=cma` tell the truth and no
    // large message tries first. A refused peer gets its large messages through the
    // transport; a read refused later (rules changed at run time) falls back the same
    // way, per message.
    // Per rank: why the OS refused this rank cross-memory attach to it.
    let mut cma_refused: Vec<Option<String>> = vec![None; size as usize];
    if cma {
        for &r in &local {
            // A peer already gone (Ok(false)) is not a refusal: its transport reports it.
            if let Some((pid, addr)) = probe_at[r as usize]
                && let Err(e) = rankwire_transports::shm::cma::cma_probe(pid, addr)
            {
                tracing::info!(
                    "rank {rank} <- rank {r}: cross-memory attach not permitted: {e}; large messages copy through the transport"
                );
                cma_refused[r as usize] = Some(format!(
                    "not permitted by the OS: {e} (ptrace rules: same user, not non-dumpable, \
                     kernel.yama.ptrace_scope; containers may forbid it)"
                ));
            }
        }
    }
    // A sender waiting for a large single-copy send writes a share itself (share.rs).
    let share = cma && env_switch("RANKWIRE_CMA_SHARE") != Some(false);
    let gpu_state = probe_gpu();
    let use_tcp = allowed.contains(&"tcp");
    let same_node: Vec<bool> = node_ids.iter().map(|n| *n == me).collect();
    let mut paths = select::select(&select::Input {
        rank,
        candidates: candidates(
            rank,
            &node_ids,
            &same_node,
            shm.as_ref(),
            &rdma_probe,
            &gpu_state,
            cma.then_some(&cma_refused[..]),
        ),
        same_node,
        allowed,
        gpu: gpu_state.clone(),
        share,
    })?;
    if explain {
        paths.notes = gpu_sharing_notes(&node_ids, gpu_facts);
        paths.rdma_device = rdma_probe.dev.as_ref().map(|d| d.why().to_string());
    }
    paths.pids = probe_at.iter().map(|p| p.map(|(pid, _)| pid)).collect();
    paths.ranks_per_cpu = crate::bootstrap::node::max_ranks_per_cpu(
        cpu_records.iter().map(|(i, c)| (i.as_str(), c.as_str())),
    );
    if paths.ranks_per_cpu > 1.0 {
        let note = oversubscribed_note(paths.ranks_per_cpu);
        tracing::debug!("collectives: {note}");
        if explain {
            paths.notes.push(note);
        }
    }
    log_choices(&paths);
    let routes = paths.routes();
    let tcp_peers: Vec<u32> = (0..size)
        .filter(|&r| routes[r as usize] == Route::Tcp)
        .collect();
    let rdma_peers: Vec<u32> = (0..size)
        .filter(|&r| routes[r as usize] == Route::Rdma)
        .collect();
    // An RDMA route needs a device at both ends. Every rank holds the same `ok`, so
    // with fewer than two such ranks all skip the transport's setup fences together.
    let rdma_connect_modes = rdma_probe.check_connect_modes();
    let select::RdmaProbe {
        cfg: rdma_cfg,
        dev: rdma_dev,
        ok: rdma_ok,
        ..
    } = rdma_probe;
    let rdma_job = rdma_cfg.is_some() && rdma_ok.iter().filter(|&&ok| ok).count() >= 2;
    if rdma_job {
        rdma_connect_modes?;
    }
    // Queue pairs on demand are set up through messages the TCP transport carries, so
    // it serves the RDMA peers too (its connections are made on demand as well). Every
    // rank decides alike: the settings are the job's.
    let rdma_on_demand = rdma_job && use_tcp && rdma_cfg.as_ref().is_some_and(|c| c.on_demand);
    let tcp_serves: Vec<u32> = if rdma_on_demand {
        let mut v: Vec<u32> = tcp_peers.iter().chain(&rdma_peers).copied().collect();
        v.sort_unstable();
        v
    } else {
        tcp_peers.clone()
    };
    // The bootstrap client ends up here (below), shared with the TCP transport's
    // on-demand address reads.
    let shared: Arc<std::sync::Mutex<Option<Wireup>>> = Arc::new(std::sync::Mutex::new(None));
    // Built by every rank alike (its setup has job-wide fences), dropped below where it
    // serves no peer.
    let tcp = if size > 1 && use_tcp {
        let cfg = TcpConfig::from_env()
            .map_err(|e| Error::usage(format!("TCP transport settings: {e}")))?;
        Some(TcpTransport::new_with_lookup(
            rank,
            size,
            &job_id,
            secret.as_bytes(),
            cfg,
            &mut client,
            &tcp_serves,
            Some(Box::new(SharedLookup(shared.clone()))),
        )?)
    } else {
        None
    };
    let rdma = match &rdma_cfg {
        Some(cfg) if rdma_job => {
            let dev = rdma_dev.filter(|_| !rdma_peers.is_empty());
            if rdma_on_demand {
                RdmaTransport::new_on_demand(rank, dev, cfg, &mut client, &rdma_peers)?
            } else {
                RdmaTransport::new(rank, dev, cfg, &mut client, &rdma_peers)?
            }
        }
        _ => None,
    };
    // A transport that serves no peer is dropped after the setup fences, so progress
    // never polls it.
    let shm = shm.filter(|_| routes.contains(&Route::Shm));
    let tcp = tcp.filter(|_| !tcp_serves.is_empty());
    let rdma_offers = rdma.is_some();
    let mut engine = Engine::new(
        rank,
        size,
        shm,
        tcp,
        rdma,
        routes.clone(),
        Backoff::from_env(local_size, node_cpus.len()),
        gpu_pool(),
    );
    // The shm transport already follows `cma` (set before selection); this sets the
    // set's own cross-memory attach (TCP-only runs between ranks of one node) alike.
    engine.set_cma_allowed(cma);
    for p in &paths.peers {
        // Selection read the same caps the engine's transports declare.
        debug_assert_eq!(engine.eager_limit(p.peer), p.eager_bytes, "rank {}", p.peer);
    }
    enable_gpu(&mut engine, &gpu_state);
    let standin = crate::gdr_standin::mode();
    if let Some(m) = standin {
        if gpu_state.is_ok() {
            return Err(Error::usage(format!(
                "rank {rank}: {}={m:?} is a test stand-in for machines without a GPU, and \
                 this process has one; fix: unset it",
                crate::gdr_standin::STANDIN_ENV
            )));
        }
        engine.mem.set_standin(&mut engine.proto);
        // Stand-in buffers count as device memory (--explain's device rows).
        paths.gpu = Ok(());
    }
    if let (Some(t), Some(cfg), true) = (
        engine.rdma(),
        rdma_cfg.as_ref(),
        gpu_state.is_ok() || standin.is_some(),
    ) {
        // GPUDirect RDMA: device buffers to RDMA peers by RDMA READ on registered device
        // memory where a direct path exists (crate::gdr).
        // DMA-BUF support of this rank's GPU (as Universe::gpu_device picks it).
        let ordinal = rankwire_gpu::device_count()
            .ok()
            .and_then(|n| {
                select_gpu(
                    local_rank as usize,
                    n,
                    crate::settings::raw("RANKWIRE_GPU_DEVICE").as_deref(),
                )
                .ok()
            })
            .unwrap_or(0);
        let (path, why) = crate::gdr::gdr_choice(rank, t, cfg, ordinal)?;
        if crate::gdr::is_direct(path) && !rdma_peers.is_empty() {
            let gpu: Box<dyn rankwire_transports::rdma::GpuMemory> = match standin {
                Some(m) => Box::new(crate::gdr_standin::StandInGpu {
                    refuse: m == crate::gdr_standin::StandInMode::Refuse,
                }),
                None => {
                    Box::new(crate::gdr::CudaGdr::new(path, cfg.gdr_force_flush).with_devices())
                }
            };
            t.enable_gdr(gpu, cfg);
            engine.proto.allow_gdr(&rdma_peers);
        }
        paths.gdr = Some((path, why));
    }
    // RANKWIRE_RDMA_GDR=1 also where a peer on another node is not reached over RDMA at
    // all (gdr_choice above only runs with an RDMA transport).
    if rankwire_transports::rdma::GdrMode::parse(
        crate::settings::raw("RANKWIRE_RDMA_GDR").as_deref(),
    )
    .ok()
        == Some(rankwire_transports::rdma::GdrMode::Require)
    {
        paths.check_gdr_required()?;
    }
    if rdma_offers {
        // Rendezvous over RDMA: the Rts carries address, length and rkey of the send
        // buffer, registered through the rdma transport, and the receiver RDMA-reads it.
        engine.mem.set_rdma(&rdma_peers, &mut engine.proto);
        for &r in &rdma_peers {
            engine.proto.allow_pull(r, true);
            tracing::debug!("rank {rank} <- rank {r}: large host messages by RDMA READ");
        }
    }
    for p in paths.peers.iter().filter(|p| p.same_node && p.peer != rank) {
        let r = p.peer;
        if p.cuda_ipc {
            engine.proto.allow_cuda_ipc(r);
            engine.set_device_ipc_peer(r);
        }
        if p.route == Route::Rdma {
            // Forced onto RDMA inside a node: host rendezvous goes by RDMA READ.
            continue;
        }
        let cma_r = matches!(p.rndv, HostRndv::Cma { .. });
        engine.proto.offer_host_cma(r);
        engine.proto.allow_pull(r, cma_r);
        engine
            .proto
            .allow_sharing(r, matches!(p.rndv, HostRndv::Cma { share: true }));
        tracing::debug!(
            "rank {rank} <- rank {r}: large host messages by {}",
            if cma_r {
                "single copy (cma)"
            } else {
                "copy through the transport"
            }
        );
    }
    *shared.lock().unwrap_or_else(|p| p.into_inner()) = Some(client);
    Ok(Universe {
        inner: Arc::new(Inner::new(rank, size, local_rank, engine, shared, paths)),
    })
}

/// The candidates of the selection table as this rank sees them: declared caps, whether
/// each is usable here, and its reach answer per world rank. Shm answers with its
/// transport's own `can_reach` (it is built before selection); rdma and tcp are built
/// after it, for the peers it gives them, so their reach is what the published facts
/// predict (rdma: a device at both ends; tcp: every other rank).
fn candidates(
    rank: u32,
    node_ids: &[String],
    same_node: &[bool],
    shm: Option<&ShmTransport>,
    rdma: &select::RdmaProbe,
    gpu: &std::result::Result<(), String>,
    // Per rank, why the probe refused cross-memory attach; `None`: RANKWIRE_CMA=0.
    cma_refused: Option<&[Option<String>]>,
) -> Vec<Candidate> {
    let size = node_ids.len() as u32;
    let info = |r: u32| PeerInfo {
        rank: r,
        node_id: node_ids[r as usize].clone(),
        pid: 0,
    };
    // Transports prefix their answers with their name; the table adds it again.
    let strip = |name: &str, why: String| match why.strip_prefix(&format!("{name}: ")) {
        Some(rest) => rest.to_string(),
        None => why,
    };
    let others = |f: &dyn Fn(u32) -> std::result::Result<(), String>| -> Vec<_> {
        (0..size)
            .map(|r| {
                if r == rank {
                    Err("not needed within the process".to_string())
                } else {
                    f(r)
                }
            })
            .collect()
    };
    let self_tp = SelfTransport::new(rank);
    let ipc_usable = gpu.clone().and_then(|()| {
        if env_switch("RANKWIRE_CUDA_IPC") == Some(false) {
            Err("turned off by RANKWIRE_CUDA_IPC=0".to_string())
        } else {
            Ok(())
        }
    });
    vec![
        Candidate {
            id: TransportId::SelfTp,
            caps: Some(self_tp.caps().clone()),
            usable: Ok(()),
            reach: (0..size)
                .map(|r| self_tp.can_reach(&info(r)).map_err(|e| strip("self", e)))
                .collect(),
        },
        Candidate {
            id: TransportId::Shm,
            caps: shm.map(|t| t.caps().clone()),
            usable: match shm {
                Some(_) => Ok(()),
                None if size < 2 => Err("no other rank".to_string()),
                None => Err("not set up".to_string()),
            },
            reach: others(&|r| match shm {
                _ if !same_node[r as usize] => Err(format!(
                    "rank {r} is on another node ({})",
                    node_ids[r as usize]
                )),
                Some(t) => t.can_reach(&info(r)).map_err(|e| strip("shm", e)),
                None => Err("not set up".to_string()),
            }),
        },
        Candidate {
            id: TransportId::CudaIpc,
            #[cfg(feature = "cuda")]
            caps: Some(rankwire_transports::cuda_ipc::caps()),
            #[cfg(not(feature = "cuda"))]
            caps: None,
            usable: ipc_usable,
            reach: others(&|r| {
                if same_node[r as usize] {
                    Ok(())
                } else {
                    Err("peer on another node".to_string())
                }
            }),
        },
        Candidate {
            id: TransportId::Cma,
            caps: Some(rankwire_transports::shm::cma::caps()),
            usable: if size < 2 {
                Err("no other rank".to_string())
            } else if cma_refused.is_some() {
                Ok(())
            } else {
                Err("turned off by RANKWIRE_CMA=0".to_string())
            },
            reach: others(
                &|r| match cma_refused.and_then(|c| c[r as usize].as_ref()) {
                    _ if !same_node[r as usize] => Err(format!(
                        "rank {r} is on another node ({})",
                        node_ids[r as usize]
                    )),
                    Some(why) => Err(why.clone()),
                    None => Ok(()),
                },
            ),
        },
        Candidate {
            id: TransportId::Rdma,
            caps: Some(select::rdma_caps(rdma.cfg.as_ref())),
            usable: rdma.usable.clone(),
            reach: others(&|r| {
                if rdma.ok.get(r as usize) == Some(&true) {
                    Ok(())
                } else {
                    Err(format!("rank {r} has no RDMA device"))
                }
            }),
        },
        Candidate {
            id: TransportId::Tcp,
            caps: Some(TcpTransport::declared_caps()),
            usable: if size > 1 {
                Ok(())
            } else {
                Err("no other rank".to_string())
            },
            reach: others(&|_| Ok(())),
        },
    ]
}

/// The `--explain` note (and debug log line) of a job where some node runs more ranks
/// than CPUs: which collectives then take the linear algorithms
/// (`coll/select.rs`, `CollConfig::barrier`).
fn oversubscribed_note(ranks_per_cpu: f64) -> String {
    use crate::coll::select::{
        EXCHANGE_BARRIER_MAX_RANKS, EXCHANGE_MAX_BYTES, EXCHANGE_MAX_RANKS,
        LINEAR_ALLREDUCE_RANKS_PER_CPU, LINEAR_MAX_BYTES, LINEAR_MAX_RANKS,
        LINEAR_MAX_RANKS_CROWDED,
    };
    let kib = LINEAR_MAX_BYTES >> 10;
    let allreduce = if ranks_per_cpu >= LINEAR_ALLREDUCE_RANKS_PER_CPU {
        format!(", and allreduce up to {kib} KiB")
    } else {
        String::new()
    };
    let exchange = if ranks_per_cpu < LINEAR_ALLREDUCE_RANKS_PER_CPU {
        format!(
            "; allreduce up to {} KiB on 3 to {EXCHANGE_MAX_RANKS} ranks and the barrier on 3 \
             to {EXCHANGE_BARRIER_MAX_RANKS} take the exchange algorithms instead (one round, \
             every rank to every rank)",
            EXCHANGE_MAX_BYTES >> 10
        )
    } else {
        String::new()
    };
    let most = if ranks_per_cpu >= 2.0 {
        LINEAR_MAX_RANKS_CROWDED
    } else {
        LINEAR_MAX_RANKS
    };
    format!(
        "up to {ranks_per_cpu:.1} ranks per CPU on a node: barrier, bcast and alltoall up to \
         {kib} KiB per message{allreduce} take linear algorithms on communicators of 3 to \
         {most} ranks (every rank waits once){exchange}; RANKWIRE_BARRIER_ALGO, \
         RANKWIRE_BCAST_ALGO, RANKWIRE_ALLTOALL_ALGO and RANKWIRE_ALLREDUCE_ALGO choose others"
    )
}

/// The `--explain` notes on ranks sharing a GPU without MPS, from the node identities
/// and the GPU facts every rank published (see `select/sharing.rs`).
fn gpu_sharing_notes(
    node_ids: &[String],
    gpu_facts: Vec<Option<select::sharing::GpuFacts>>,
) -> Vec<String> {
    let ranks: Vec<select::sharing::RankGpu> = gpu_facts
        .into_iter()
        .enumerate()
        .map(|(r, gpu)| select::sharing::RankGpu {
            node: &node_ids[r],
            // As in `build`: the ranks of the same node below this one.
            local_rank: node_ids[..r].iter().filter(|n| **n == node_ids[r]).count(),
            gpu,
        })
        .collect();
    select::sharing::notes(&ranks)
}

/// Say each peer's choice once in the debug log.
fn log_choices(paths: &Paths) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    for row in paths.rows() {
        tracing::debug!(
            "rank {} -> rank {}: {} memory via {}: {}{}",
            row.rank,
            row.peer,
            row.memory,
            row.transport,
            row.protocol,
            if row.rejected.is_empty() {
                String::new()
            } else {
                format!(" (not chosen: {})", row.rejected.join("; "))
            }
        );
    }
}

fn singleton() -> Universe {
    let gpu = probe_gpu();
    let self_tp = SelfTransport::new(0);
    let paths = select::select(&select::Input {
        rank: 0,
        same_node: vec![true],
        allowed: Vec::new(),
        candidates: vec![Candidate {
            id: TransportId::SelfTp,
            caps: Some(self_tp.caps().clone()),
            usable: Ok(()),
            reach: vec![Ok(())],
        }],
        gpu: gpu.clone(),
        share: false,
    })
    // The self candidate always reaches rank 0.
    .expect("the self transport reaches the only rank");
    let mut engine = Engine::new(
        0,
        1,
        None,
        None,
        None,
        paths.routes(),
        Backoff::from_env(1, affinity_cpus().len()),
        gpu_pool(),
    );
    enable_gpu(&mut engine, &gpu);
    Universe {
        inner: Arc::new(Inner::new(
            0,
            1,
            0,
            engine,
            Arc::new(std::sync::Mutex::new(None)),
            paths,
        )),
    }
}

/// GPU of a rank: `forced` (`RANKWIRE_GPU_DEVICE`) if given, else `local_rank % count`.
fn select_gpu(local_rank: usize, count: usize, forced: Option<&str>) -> Result<i32> {
    if count == 0 {
        return Err(Error::Gpu(
            "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)".into(),
        ));
    }
    match forced.map(str::trim).filter(|s| !s.is_empty()) {
        Some(v) => match v.parse::<usize>() {
            Ok(d) if d < count => Ok(d as i32),
            _ => Err(Error::Gpu(format!(
                "RANKWIRE_GPU_DEVICE={v:?} is not a device ordinal below {count} (the number \
                 of visible devices)"
            ))),
        },
        None => Ok((local_rank % count) as i32),
    }
}

/// With `RANKWIRE_REPORT_BINDINGS=1` (`rwrun --report-bindings`), print this rank's
/// node, local rank and GPU to stderr, once, at init.
fn report_binding(u: &Universe) {
    if env_switch("RANKWIRE_REPORT_BINDINGS") != Some(true) {
        return;
    }
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let gpu = if rankwire_gpu::available() {
        match u.gpu_device() {
            Ok(d) => {
                let name = rankwire_gpu::device_info(d)
                    .map(|i| i.name)
                    .unwrap_or_default();
                format!("GPU {d} ({name})")
            }
            Err(e) => format!("no GPU ({e})"),
        }
    } else {
        "no GPU (CUDA driver not loadable or support not built)".into()
    };
    eprintln!(
        "rankwire: rank {} on {host}: local rank {}, {gpu}",
        u.inner.rank, u.inner.local_rank
    );
}

/// Whether this build and process can use CUDA: `Err(reason)` when not (then device
/// buffers fail with [`Error::Gpu`]).
fn probe_gpu() -> std::result::Result<(), String> {
    if !rankwire_gpu::available() {
        tracing::debug!("GPU paths off: CUDA support not built or libcuda not loadable");
        return Err(if cfg!(feature = "cuda") {
            "libcuda.so.1 could not be loaded (no NVIDIA driver)".into()
        } else {
            "GPU support not built (this build used --no-default-features; rebuild with the default features, or `--features cuda`)".into()
        });
    }
    if let Err(e) = rankwire_gpu::init() {
        tracing::info!("GPU paths off: {e}");
        return Err(e.to_string());
    }
    Ok(())
}

/// Give the protocol device-memory access where [`probe_gpu`] found CUDA usable.
/// The pool of GPU temporaries, with its limit of idle bytes (`RANKWIRE_GPU_TMP_CACHE`).
fn gpu_pool() -> Arc<rankwire_gpu::TmpPool> {
    Arc::new(rankwire_gpu::TmpPool::new(
        crate::coll::device::tmp_cache_limit(),
    ))
}

fn enable_gpu(engine: &mut Engine, gpu: &std::result::Result<(), String>) {
    if gpu.is_ok() {
        engine.mem.set_gpu(
            crate::device_path::GpuStaging::new(engine.gpu_pool.clone()),
            &mut engine.proto,
        );
        // Checked at init (`crate::settings`): invalid values never get here.
        let depth = crate::settings::raw("RANKWIRE_GPU_STAGE_DEPTH")
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(crate::protocol::DEFAULT_STAGE_DEPTH);
        let chunk = crate::settings::raw("RANKWIRE_GPU_STAGE_CHUNK")
            .and_then(|v| crate::settings::parse_bytes(&v))
            .map_or(crate::protocol::DEFAULT_STAGE_CHUNK_BYTES, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            });
        engine.proto.set_device_staging(depth, chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_state_is_per_runtime_and_shared_by_its_handles() {
        let (a, b) = (singleton(), singleton());
        let (w1, w2) = (a.world(), a.world());
        assert!(Arc::ptr_eq(&w1.st, &w2.st), "one world state per runtime");
        assert_eq!(w1.st.next_seq(), 0);
        assert_eq!(
            w2.st.next_seq(),
            1,
            "world handles count collective calls together"
        );
        let other = b.world();
        assert!(
            !Arc::ptr_eq(&w1.st, &other.st),
            "a second runtime has its own"
        );
        assert_eq!(other.st.next_seq(), 0);
    }

    #[test]
    fn context_ids_are_released_through_the_runtime() {
        let u = singleton();
        let w = u.world();
        assert_eq!(w.context_stats().0, 1, "the world's id only");
        let d = w.dup().unwrap();
        let dd = d.dup().unwrap();
        assert_eq!(w.context_stats().0, 3);
        assert_ne!(d.context_id(), dd.context_id());
        drop(dd);
        assert_eq!(
            w.context_stats().0,
            2,
            "a dropped communicator frees its id"
        );
        let again = d.dup().unwrap();
        assert_eq!(again.context_id().get(), 2, "the lowest free id is reused");
        drop((again, d));
        assert_eq!(w.context_stats().0, 1);
    }

    #[test]
    fn create_group_of_the_members_only() {
        let u = singleton();
        let w = u.world();
        let c = w
            .create_group(&w.group(), 7)
            .unwrap()
            .expect("a member gets a communicator");
        assert_eq!((c.rank(), c.size()), (0, 1));
        assert_ne!(c.context_id(), w.context_id());
        c.send(&[5u32], 0, 3).unwrap();
        let mut got = [0u32];
        c.recv(&mut got, 0, 3).unwrap();
        assert_eq!(got, [5]);
        let empty = w.group().incl(&[]).unwrap();
        assert!(w.create_group(&empty, 7).unwrap().is_none(), "not a member");
        assert!(matches!(
            w.create_group(&w.group(), -1),
            Err(crate::Error::Usage(_))
        ));
        assert!(matches!(
            w.create_group(&w.group(), crate::TAG_UB + 1),
            Err(crate::Error::Usage(_))
        ));
    }

    #[test]
    fn watchdog_bound_is_set_once() {
        let u = singleton();
        assert_eq!(u.inner.watchdog_bound(), None);
        u.inner.set_watchdog(Duration::from_secs(3));
        u.inner.set_watchdog(Duration::from_secs(9));
        assert_eq!(u.inner.watchdog_bound(), Some(Duration::from_secs(3)));
    }

    #[test]
    fn gpu_selection_round_robin_or_forced() {
        assert_eq!(select_gpu(0, 1, None).unwrap(), 0);
        assert_eq!(select_gpu(5, 2, None).unwrap(), 1);
        assert_eq!(select_gpu(5, 8, Some("")).unwrap(), 5);
        assert_eq!(select_gpu(5, 8, Some("3")).unwrap(), 3);
        let e = select_gpu(0, 2, Some("2")).unwrap_err().to_string();
        assert!(
            e.contains("RANKWIRE_GPU_DEVICE") && e.contains("below 2"),
            "{e}"
        );
        assert!(select_gpu(0, 2, Some("x")).is_err());
        assert!(
            select_gpu(0, 0, None)
                .unwrap_err()
                .to_string()
                .contains("no CUDA device")
        );
    }
}
