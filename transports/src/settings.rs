//! Every `RANKWIRE_*` setting in one table: name, default, valid values, who reads it,
//! and the check of its value ([`SETTINGS`]).
//!
//! One validation path: `rwrun` checks every `RANKWIRE_*` variable of the environment it
//! passes to ranks (and the variables its own options set, such as `--require`) with
//! [`check_env`] before any rank starts; every rank checks its own environment with the
//! same function at init, before any communication (which covers ranks started by
//! `srun` or by hand, and variables set in the rank's command line). Readers take
//! values through [`get`] / [`switch`], which look the name up in the table and apply
//! the same check, so a value is never silently replaced by a default. An invalid value
//! is a [`crate::ConfigError`] naming the variable, the value and the valid values. An
//! unknown `RANKWIRE_*` name is only a warning ([`unknown`]), with the closest known
//! name as a suggestion.
//!
//! This table lives in the transports crate (the lowest crate that reads settings) so
//! that the transports, the core library (`rankwire::settings`) and `rwrun` share it.
//! The names of collective algorithms are repeated here as plain strings; a unit test
//! of the core library checks them against its algorithm enums.
//!
//! Values are read at init or when a transport or communicator is set up, never on the
//! data path.

use crate::ConfigError;

/// Who reads a setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// Every rank (at init or setup). `rwrun` checks the value it passes; each rank
    /// checks it again at init.
    Rank,
    /// `rwrun` only.
    Rwrun,
    /// Both `rwrun` and every rank (`RANKWIRE_LOG`).
    Both,
    /// Set by the launcher for each rank (not a user setting; never checked by rwrun,
    /// which overwrites it).
    Launcher,
    /// The MPI standard-ABI tools (`abi/bin/mpicc`, `mpicxx`): read at compile time,
    /// never by rwrun or a rank.
    Tools,
}

/// How a value is checked.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// Any text (interface names, filters, commands).
    Any,
    /// One of these words (case-insensitive, surrounding blanks ignored).
    OneOf(&'static [&'static str]),
    /// A comma-separated list of these words (blank items ignored).
    ListOf(&'static [&'static str]),
    /// On/off: `1`, `on`, `true`, `yes` or `0`, `off`, `false`, `no`.
    Switch,
    /// Seconds (fractions allowed), above 0 and below 10^9; `zero` also allows 0.
    Seconds {
        /// Whether 0 is valid (meaning off).
        zero: bool,
    },
    /// Seconds with an optional `s` or `ms` suffix, above 0.
    Duration,
    /// An unsigned integer in `min..=max`.
    Uint {
        /// Smallest valid value.
        min: u64,
        /// Largest valid value.
        max: u64,
    },
    /// A byte count in `min..=max`, optionally with a binary suffix (`K`, `M`, `G`).
    Bytes {
        /// Smallest valid value.
        min: u64,
        /// Largest valid value.
        max: u64,
    },
    /// `name` or `name:port` with a port from 1.
    DevicePort,
    /// A kernel algorithm's name (tcp(7) `TCP_CONGESTION`): 1 to 15 ASCII letters,
    /// digits or `_` (the kernel's limit is 15 plus a NUL); whether this kernel has it
    /// is checked where it is used.
    AlgorithmName,
}

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The environment variable.
    pub name: &'static str,
    /// The default, as a user would read it.
    pub default: &'static str,
    /// The valid values, as the error message and the README say them.
    pub valid: &'static str,
    /// The check of a value.
    pub check: Check,
    /// Who reads it.
    pub reader: Reader,
    /// One line of documentation (what it does; checks only a rank can make).
    pub doc: &'static str,
}

const SWITCH: &str = "1, on, true, yes or 0, off, false, no";
const G: u64 = 1 << 30;

/// Names of the collective algorithms (`RANKWIRE_<COLL>_ALGO`), `auto` first.
pub mod algos {
    /// `RANKWIRE_ALLREDUCE_ALGO`.
    pub const ALLREDUCE: &[&str] = &[
        "auto",
        "recursive_doubling",
        "rabenseifner",
        "ring",
        "reduce_bcast",
        "linear",
        "exchange",
    ];
    /// `RANKWIRE_BCAST_ALGO`.
    pub const BCAST: &[&str] = &["auto", "binomial", "scatter_allgather", "linear"];
    /// `RANKWIRE_BARRIER_ALGO`.
    pub const BARRIER: &[&str] = &["auto", "dissemination", "linear", "exchange"];
    /// `RANKWIRE_REDUCE_ALGO`.
    pub const REDUCE: &[&str] = &["auto", "binomial"];
    /// `RANKWIRE_ALLGATHER_ALGO`.
    pub const ALLGATHER: &[&str] = &["auto", "ring", "bruck", "recursive_doubling"];
    /// `RANKWIRE_ALLTOALL_ALGO`.
    pub const ALLTOALL: &[&str] = &["auto", "pairwise", "linear"];
    /// `RANKWIRE_GATHER_ALGO` and `RANKWIRE_SCATTER_ALGO`.
    pub const GATHER: &[&str] = &["auto", "linear", "binomial"];
    /// `RANKWIRE_REDUCE_SCATTER_ALGO`.
    pub const REDUCE_SCATTER: &[&str] = &["auto", "ring", "reduce_scatterv"];
}

const fn rank(
    name: &'static str,
    default: &'static str,
    valid: &'static str,
    check: Check,
    doc: &'static str,
) -> Setting {
    with_reader(Reader::Rank, name, default, valid, check, doc)
}

const fn rwrun(
    name: &'static str,
    default: &'static str,
    valid: &'static str,
    check: Check,
    doc: &'static str,
) -> Setting {
    with_reader(Reader::Rwrun, name, default, valid, check, doc)
}

const fn with_reader(
    reader: Reader,
    name: &'static str,
    default: &'static str,
    valid: &'static str,
    check: Check,
    doc: &'static str,
) -> Setting {
    Setting {
        name,
        default,
        valid,
        check,
        reader,
        doc,
    }
}

const fn launcher(name: &'static str, doc: &'static str) -> Setting {
    Setting {
        name,
        default: "(set by rwrun)",
        valid: "set by the launcher",
        check: Check::Any,
        reader: Reader::Launcher,
        doc,
    }
}

macro_rules! algo {
    ($name:literal, $list:expr, $valid:literal, $doc:literal) => {
        rank($name, "auto", $valid, Check::OneOf($list), $doc)
    };
}

const fn tools(
    name: &'static str,
    default: &'static str,
    valid: &'static str,
    doc: &'static str,
) -> Setting {
    with_reader(Reader::Tools, name, default, valid, Check::Any, doc)
}

/// Every `RANKWIRE_*` setting.
pub static SETTINGS: &[Setting] = &[
    // The MPI standard-ABI wrappers (abi/bin/mpicc, mpicxx).
    tools(
        "RANKWIRE_ABI_LIBDIR",
        "(the prefix's lib, or target/<profile> in the source tree)",
        "a directory holding libmpi_abi.so.1",
        "library directory mpicc/mpicxx link programs against",
    ),
    tools(
        "RANKWIRE_ABI_PROFILE",
        "debug",
        "debug or release",
        "which cargo profile's library mpicc uses in the source tree",
    ),
    tools(
        "RANKWIRE_CC",
        "$CC, else cc",
        "a C compiler command",
        "the C compiler mpicc runs",
    ),
    tools(
        "RANKWIRE_CXX",
        "$CXX, else c++",
        "a C++ compiler command",
        "the C++ compiler mpicxx runs",
    ),
    Setting {
        name: "RANKWIRE_LOG",
        default: "warn",
        valid: "a tracing filter (error, warn, info, debug, trace, rankwire=debug, ...)",
        check: Check::Any,
        reader: Reader::Both,
        doc: "log filter of rwrun and of every rank (stderr)",
    },
    // Ranks: choices of the run.
    rank(
        "RANKWIRE_TRANSPORTS",
        "self,shm,rdma,tcp",
        "a comma-separated list of self, shm, rdma, tcp",
        Check::ListOf(&["self", "shm", "rdma", "tcp"]),
        "transports a rank may use (self is always used for a rank's own messages)",
    ),
    rank(
        "RANKWIRE_PROGRESS",
        "auto",
        "spin, yield, block or auto",
        Check::OneOf(&["spin", "yield", "block", "auto"]),
        "how a waiting call waits: spin (never yield), yield (spin briefly, then yield), block (also sleep in the kernel when idle), auto (like block, yielding sooner when ranks outnumber cores)",
    ),
    rank(
        "RANKWIRE_BOOTSTRAP_TIMEOUT",
        "120",
        "a number of seconds above 0 (fractions allowed)",
        Check::Seconds { zero: false },
        "bound on one bootstrap request (get, fence: waits for the other ranks)",
    ),
    rank(
        "RANKWIRE_WATCHDOG",
        "0 (off)",
        "a number of seconds, 0 for off (fractions allowed)",
        Check::Seconds { zero: true },
        "end a rank whose waiting call makes no progress for this long (exit 124)",
    ),
    rank(
        "RANKWIRE_COLL_CHECK",
        "0",
        SWITCH,
        Check::Switch,
        "check before every collective that all ranks call it alike (names the ranks that differ)",
    ),
    rank(
        "RANKWIRE_EXPLAIN",
        "0",
        SWITCH,
        Check::Switch,
        "every rank prints its path table at init (rwrun --explain)",
    ),
    rank(
        "RANKWIRE_REQUIRE",
        "(none)",
        "a comma-separated list of shm, cma, ipc, rdma, gdr",
        Check::ListOf(&["shm", "cma", "ipc", "rdma", "gdr"]),
        "paths that must be used where they apply; a fallback fails init (rwrun --require)",
    ),
    rank(
        "RANKWIRE_REPORT_BINDINGS",
        "0",
        SWITCH,
        Check::Switch,
        "every rank prints node, local rank and GPU at init (rwrun --report-bindings)",
    ),
    rank(
        "RANKWIRE_PMI",
        "2",
        "1, 2, pmi1 or pmi2",
        Check::OneOf(&["1", "2", "pmi1", "pmi2"]),
        "PMI version asked for under srun --mpi=pmi2 (falls back to 1)",
    ),
    rank(
        "RANKWIRE_PMIX_LIB",
        "libpmix.so.2 (then Debian's pmix2/lib directory)",
        "a library file name or path",
        Check::Any,
        "PMIx client library loaded under srun --mpi=pmix",
    ),
    // Shared memory and single copy.
    rank(
        "RANKWIRE_SHM_RING_BYTES",
        "from the local rank count (1M up to 4 ranks, 32K at 128, 16K above 128)",
        "a byte count from 16K to 1G (suffix K, M or G optional)",
        Check::Bytes {
            min: 16 << 10,
            max: G,
        },
        "bytes of each inbound shared-memory ring (rounded up to a power of two); unset, a rank's rings take about 4 MiB in all",
    ),
    rank(
        "RANKWIRE_CMA",
        "1",
        SWITCH,
        Check::Switch,
        "single-copy transfers between ranks of a node (process_vm_readv)",
    ),
    rank(
        "RANKWIRE_CMA_SHARE",
        "1",
        SWITCH,
        Check::Switch,
        "a waiting sender copies half of a large single-copy message",
    ),
    rank(
        "RANKWIRE_ALLREDUCE_SINGLE_COPY",
        "65537 (just above 64 KiB)",
        "a byte count, 0 for off (suffix K, M or G optional)",
        Check::Bytes {
            min: 0,
            max: 1 << 50,
        },
        "smallest blocking host allreduce (bytes per rank) that reads the peers' buffers by single copy when every rank of the communicator is on one node",
    ),
    // TCP.
    rank(
        "RANKWIRE_TCP_IF",
        "(automatic)",
        "a comma-separated list of interface names",
        Check::Any,
        "interfaces TCP may use (e.g. eth0, or lo on one host)",
    ),
    rank(
        "RANKWIRE_TCP_IF_EXCLUDE",
        "container and VM bridges (docker*, virbr*, veth*, ...)",
        "a comma-separated list of interface names",
        Check::Any,
        "interfaces TCP must not use (when RANKWIRE_TCP_IF is unset)",
    ),
    rank(
        "RANKWIRE_TCP_FAMILY",
        "any",
        "ipv4, ipv6 or any (also inet, inet6, 4, 6)",
        Check::OneOf(&["ipv4", "ipv6", "any", "inet", "inet6", "4", "6"]),
        "address family of TCP connections",
    ),
    rank(
        "RANKWIRE_TCP_CONNECT",
        "on-demand",
        "on-demand or at-init",
        Check::OneOf(&["on-demand", "at-init"]),
        "when TCP connections are made: at the first message to a peer, or all at init",
    ),
    rank(
        "RANKWIRE_CONNECT_TIMEOUT",
        "60s",
        "a positive number of seconds, e.g. 60, 2.5, 60s or 500ms",
        Check::Duration,
        "bound on setting up the TCP connections",
    ),
    rank(
        "RANKWIRE_TCP_CONGESTION",
        "auto",
        "auto, system, or a congestion control this kernel has (e.g. cubic, reno)",
        Check::AlgorithmName,
        "TCP congestion control of the connections; auto: cubic (or reno) where the \
         kernel's default is BBR, whose window caps a large message's bytes in flight",
    ),
    rank(
        "RANKWIRE_TCP_ADDR_TIMEOUT",
        "5s",
        "a positive number of seconds, e.g. 60, 2.5, 60s or 500ms",
        Check::Duration,
        "bound on one connection attempt to one address",
    ),
    // RDMA.
    rank(
        "RANKWIRE_IB_HCA",
        "(first active device)",
        "a device name, optionally with :port (e.g. mlx5_0:1)",
        Check::DevicePort,
        "RDMA device to use (its existence is checked by each rank)",
    ),
    rank(
        "RANKWIRE_IB_GID_INDEX",
        "(first RoCE v2 IPv4 entry)",
        "a GID table index (0, 1, ...); see ibv_devinfo -v",
        Check::Uint {
            min: 0,
            max: u32::MAX as u64,
        },
        "GID table entry to use (its range is checked by each rank)",
    ),
    rank(
        "RANKWIRE_RDMA_SLOTS",
        "16",
        "a slot count from 2 to 1024",
        Check::Uint { min: 2, max: 1024 },
        "receive slots (= send credits) per RDMA peer",
    ),
    rank(
        "RANKWIRE_RDMA_EAGER_LIMIT",
        "8192",
        "a byte count from 0 to 16384",
        Check::Uint { min: 0, max: 16384 },
        "largest eager RDMA message in bytes",
    ),
    rank(
        "RANKWIRE_RDMA_LEAVE_PINNED",
        "0",
        SWITCH,
        Check::Switch,
        "keep host registrations across operations",
    ),
    rank(
        "RANKWIRE_RDMA_GDR",
        "auto",
        "auto, 1 (require) or 0 (off); also on/off, true/false, yes/no",
        Check::OneOf(&["auto", "1", "0", "on", "off", "true", "false", "yes", "no"]),
        "GPUDirect RDMA for device buffers: where possible (auto), required (fail init \
         where they would be staged through host memory), or off",
    ),
    rank(
        "RANKWIRE_RDMA_GDR_MAX_BYTES",
        "4294967296 (4 GiB)",
        "a number of bytes (a plain integer)",
        Check::Uint {
            min: 0,
            max: u64::MAX,
        },
        "bytes of device (GPUDirect RDMA) registrations kept by the registration cache",
    ),
    rank(
        "RANKWIRE_RDMA_GDR_FLUSH",
        "0",
        SWITCH,
        Check::Switch,
        "flush GPUDirect RDMA writes after each receive into device memory also on \
         compute capability 9.0 and newer",
    ),
    rank(
        "RANKWIRE_GDR_STANDIN",
        "0",
        "0, 1 or refuse",
        Check::OneOf(&["0", "1", "refuse"]),
        "TEST ONLY, machines without a GPU: rankwire::gdr_standin buffers (host memory) \
         count as device memory and go through the GPUDirect RDMA device-region path \
         (refuse: every device registration fails)",
    ),
    rank(
        "RANKWIRE_RDMA_CONNECT",
        "on-demand",
        "on-demand or at-init",
        Check::OneOf(&["on-demand", "at-init"]),
        "when RDMA queue pairs are made: at the first message to a peer (set up over TCP), \
         or all at init",
    ),
    rank(
        "RANKWIRE_REGCACHE_MAX_ENTRIES",
        "256",
        "a count of idle registrations (0 turns caching off)",
        Check::Uint {
            min: 0,
            max: u32::MAX as u64,
        },
        "idle registrations kept by the registration cache",
    ),
    rank(
        "RANKWIRE_REGCACHE_MAX_BYTES",
        "1073741824 (1 GiB)",
        "a number of bytes (a plain integer)",
        Check::Uint {
            min: 0,
            max: u64::MAX,
        },
        "bytes of registrations kept by the registration cache",
    ),
    // GPU.
    rank(
        "RANKWIRE_GPU_DEVICE",
        "local rank % device count",
        "a device ordinal (0, 1, ...)",
        Check::Uint {
            min: 0,
            max: i32::MAX as u64,
        },
        "GPU of the rank (that it is below the device count is checked by each rank)",
    ),
    rank(
        "RANKWIRE_CUDA_IPC",
        "1",
        SWITCH,
        Check::Switch,
        "CUDA IPC between GPUs of one node (0 stages device buffers through host memory)",
    ),
    rank(
        "RANKWIRE_GPU_IPC_STAGING",
        "1",
        SWITCH,
        Check::Switch,
        "stage device messages through a peer's IPC buffer",
    ),
    rank(
        "RANKWIRE_GPU_WAIT",
        "poll",
        "poll or sync",
        Check::OneOf(&["poll", "sync"]),
        "how a rank waits for GPU work (poll the stream, or synchronize)",
    ),
    rank(
        "RANKWIRE_GPU_TMP_CACHE",
        "2G",
        "a byte count (suffix K, M or G optional)",
        Check::Bytes {
            min: 0,
            max: u64::MAX,
        },
        "bytes of idle device temporaries kept per cache",
    ),
    rank(
        "RANKWIRE_GPU_ALLREDUCE_STAGED_MAX",
        "512K x ranks",
        "a byte count, 0 for off (suffix K, M or G optional)",
        Check::Bytes {
            min: 0,
            max: u64::MAX,
        },
        "largest device allreduce that takes the staged small-message algorithm",
    ),
    rank(
        "RANKWIRE_GPU_STAGE_DEPTH",
        "4",
        "a number of chunks, 1 to 64",
        Check::Uint { min: 1, max: 64 },
        "chunks of a device message staged through pinned host memory at once (pipelining)",
    ),
    rank(
        "RANKWIRE_GPU_STAGE_CHUNK",
        "1M",
        "a byte count, 0 for the transport's (suffix K, M or G optional)",
        Check::Bytes {
            min: 0,
            max: u64::MAX,
        },
        "largest chunk of a device message staged through host memory",
    ),
    rank(
        "RANKWIRE_GPU_EAGER_MAX",
        "0 with CUDA IPC, else the host eager limit",
        "a byte count (suffix K, M or G optional)",
        Check::Bytes {
            min: 0,
            max: u64::MAX,
        },
        "largest device message to a rank on this node sent eagerly (staged through host memory)",
    ),
    rank(
        "RANKWIRE_ABI_MEMORY_AGREEMENT",
        "auto",
        "auto, on or off",
        Check::OneOf(&["auto", "on", "off", "1", "0"]),
        "MPI ABI: ranks agree before a bcast, allgather, allreduce, reduce or \
         reduce_scatter_block whether all pass device buffers (auto: where a rank of the \
         job has a CUDA driver; off: the program never mixes host and device buffers)",
    ),
    rank(
        "RANKWIRE_GPU_PEER",
        "auto",
        "auto, on or off",
        Check::OneOf(&["auto", "on", "off", "1", "0"]),
        "peer-memory device collectives inside a node (auto: not where ranks share a GPU without MPS)",
    ),
    rank(
        "RANKWIRE_GPU_PEER_SCRATCH",
        "4M",
        "a byte count (suffix K, M or G optional)",
        Check::Bytes {
            min: 4096,
            max: 1 << 34,
        },
        "bytes of each of a rank's two scratch slots for peer-memory collectives",
    ),
    rank(
        "RANKWIRE_GPU_PEER_TIMEOUT",
        "600",
        "seconds, 0 for none",
        Check::Seconds { zero: true },
        "how long a peer-memory collective kernel waits for the other ranks before failing",
    ),
    // Collective algorithms.
    algo!(
        "RANKWIRE_ALLREDUCE_ALGO",
        algos::ALLREDUCE,
        "auto, recursive_doubling, rabenseifner, ring, reduce_bcast, linear or exchange",
        "force the allreduce algorithm"
    ),
    algo!(
        "RANKWIRE_BCAST_ALGO",
        algos::BCAST,
        "auto, binomial, scatter_allgather or linear",
        "force the broadcast algorithm"
    ),
    algo!(
        "RANKWIRE_BARRIER_ALGO",
        algos::BARRIER,
        "auto, dissemination, linear or exchange",
        "force the barrier algorithm"
    ),
    algo!(
        "RANKWIRE_REDUCE_ALGO",
        algos::REDUCE,
        "auto or binomial",
        "force the reduce algorithm"
    ),
    algo!(
        "RANKWIRE_ALLGATHER_ALGO",
        algos::ALLGATHER,
        "auto, ring, bruck or recursive_doubling",
        "force the allgather algorithm"
    ),
    algo!(
        "RANKWIRE_ALLTOALL_ALGO",
        algos::ALLTOALL,
        "auto, pairwise or linear",
        "force the alltoall(v) algorithm"
    ),
    algo!(
        "RANKWIRE_GATHER_ALGO",
        algos::GATHER,
        "auto, linear or binomial",
        "force the gather algorithm"
    ),
    algo!(
        "RANKWIRE_SCATTER_ALGO",
        algos::GATHER,
        "auto, linear or binomial",
        "force the scatter algorithm"
    ),
    algo!(
        "RANKWIRE_REDUCE_SCATTER_ALGO",
        algos::REDUCE_SCATTER,
        "auto, ring or reduce_scatterv",
        "force the reduce_scatter algorithm"
    ),
    // rwrun.
    rwrun(
        "RANKWIRE_KILL_GRACE_MS",
        "2000",
        "a number of milliseconds",
        Check::Uint {
            min: 0,
            max: u64::MAX,
        },
        "grace between a forwarded signal (or --timeout) and SIGKILL",
    ),
    rwrun(
        "RANKWIRE_LAUNCH_AGENT",
        "ssh -x -o BatchMode=yes {host}",
        "a command line; {host} is replaced by the host",
        Check::Any,
        "how rwrun starts ranks on --host nodes other than this machine",
    ),
    rwrun(
        "RANKWIRE_BOOTSTRAP_HOST",
        "(every address of this machine)",
        "a comma-separated list of host names or addresses",
        Check::Any,
        "addresses at which ranks on other nodes reach rwrun",
    ),
    rwrun(
        "RANKWIRE_SLURM_LAUNCH",
        "1",
        SWITCH,
        Check::Switch,
        "inside a Slurm allocation start ranks with srun (0: start them here)",
    ),
    // Set by rwrun for every rank.
    launcher("RANKWIRE_RANK", "world rank (0-based)"),
    launcher("RANKWIRE_SIZE", "number of ranks"),
    launcher("RANKWIRE_LOCAL_RANK", "rank among the ranks of its node"),
    launcher("RANKWIRE_LOCAL_SIZE", "number of ranks of its node"),
    launcher(
        "RANKWIRE_BOOTSTRAP_ADDR",
        "address of rwrun's bootstrap server",
    ),
    launcher("RANKWIRE_JOB_ID", "job id"),
    launcher("RANKWIRE_JOB_SECRET", "secret the bootstrap server checks"),
];

/// Names used by the test and benchmark scripts, never read by the library or rwrun
/// (not warned about): every `RANKWIRE_TEST_*` and these.
const HARNESS: &[&str] = &[
    "RANKWIRE_REQUIRE_SLURM",
    "RANKWIRE_REQUIRE_PMIX",
    "RANKWIRE_PMIX_INCLUDE",
    "RANKWIRE_SOAK_MESSAGES",
    "RANKWIRE_SLURM",
    "RANKWIRE_RDMA_PEER",
    "RANKWIRE_RDMA_TWO_NODE",
    "RANKWIRE_SLURM_CONF",
    "RANKWIRE_SLURM_NETNS_CONF",
    "RANKWIRE_CI_SOFTROCE",
    "RANKWIRE_CI_ABI",
    "RANKWIRE_CI_ABI_REF",
    "RANKWIRE_CI_ABI_SUITES",
    "RANKWIRE_BENCH",
];

/// The table entry of `name`.
pub fn find(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

fn entry(name: &str) -> &'static Setting {
    match find(name) {
        Some(s) => s,
        // A reader asking for a name missing from the table is a bug of rankwire
        // (caught by every test that reads it).
        None => panic!("rankwire: setting {name} is missing from the settings table"),
    }
}

impl Setting {
    /// Check `value` (unset and blank values are not passed here: they mean the
    /// default).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable, the value and the valid values.
    pub fn check(&self, value: &str) -> Result<(), ConfigError> {
        if check_value(self.check, value) {
            Ok(())
        } else {
            Err(ConfigError {
                var: self.name,
                value: value.to_string(),
                expected: self.valid,
            })
        }
    }
}

fn check_value(check: Check, value: &str) -> bool {
    let v = value.trim();
    let lower = v.to_ascii_lowercase();
    match check {
        Check::Any => true,
        Check::OneOf(words) => words.contains(&lower.as_str()),
        Check::ListOf(words) => lower
            .split(',')
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .all(|w| words.contains(&w)),
        Check::Switch => parse_switch(v).is_some(),
        Check::Seconds { zero } => match v.parse::<f64>() {
            Ok(0.0) => zero,
            Ok(s) => s.is_finite() && s > 0.0 && s < 1e9,
            Err(_) => false,
        },
        Check::Duration => parse_duration(v).is_some(),
        Check::Uint { min, max } => v.parse::<u64>().is_ok_and(|n| (min..=max).contains(&n)),
        Check::Bytes { min, max } => parse_bytes(v).is_some_and(|n| (min..=max).contains(&n)),
        Check::DevicePort => match v.split_once(':') {
            None => !v.is_empty(),
            Some((dev, port)) => !dev.is_empty() && port.trim().parse::<u8>().is_ok_and(|p| p >= 1),
        },
        Check::AlgorithmName => is_algorithm_name(v),
    }
}

/// Whether `v` has the form of a kernel algorithm's name ([`Check::AlgorithmName`]):
/// 1 to 15 ASCII letters, digits or `_`.
pub(crate) fn is_algorithm_name(v: &str) -> bool {
    (1..16).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `1/on/true/yes` → `true`, `0/off/false/no` → `false` (case-insensitive).
pub fn parse_switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => None,
    }
}

/// A byte count with an optional binary suffix (`K`, `KiB`, `M`, `MiB`, `G`, `GiB`).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// Seconds with an optional `s` or `ms` suffix, above 0 and below 10^9 s.
pub fn parse_duration(v: &str) -> Option<std::time::Duration> {
    let v = v.trim();
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1.0)
    } else {
        (v, 1.0)
    };
    let secs = num.trim().parse::<f64>().ok()? * scale;
    if secs.is_finite() && secs > 0.0 && secs < 1e9 {
        Some(std::time::Duration::from_secs_f64(secs))
    } else {
        None
    }
}

/// The value of setting `name` from the process environment: `None` when unset or
/// blank (the default applies).
///
/// # Errors
/// [`ConfigError`] when the value is not valid for `name`.
///
/// # Panics
/// When `name` is not in [`SETTINGS`] (a bug of rankwire).
pub fn get(name: &str) -> Result<Option<String>, ConfigError> {
    lookup_with(name, |k| std::env::var(k).ok())
}

/// Like [`get`], reading through `lookup` (tests, or an environment being built).
///
/// # Errors
/// As [`get`].
pub fn lookup_with(
    name: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, ConfigError> {
    let s = entry(name);
    match lookup(name) {
        Some(v) if !v.trim().is_empty() => {
            s.check(&v)?;
            Ok(Some(v))
        }
        _ => Ok(None),
    }
}

/// The raw value of setting `name` (unset: `None`), for readers that parse it after
/// [`check_names`] or [`check_env`] checked it.
///
/// # Panics
/// When `name` is not in [`SETTINGS`] (a bug of rankwire).
pub fn raw(name: &str) -> Option<String> {
    entry(name);
    std::env::var(name).ok()
}

/// Check the values of `names` in the process environment.
///
/// # Errors
/// The first invalid one, as [`get`].
pub fn check_names(names: &[&str]) -> Result<(), ConfigError> {
    names.iter().try_for_each(|n| get(n).map(drop))
}

/// An on/off setting: `None` when unset or blank.
///
/// # Errors
/// [`ConfigError`] when the value is not a switch value.
pub fn switch(name: &str) -> Result<Option<bool>, ConfigError> {
    Ok(get(name)?.and_then(|v| parse_switch(&v)))
}

/// An on/off setting whose value was checked at init ([`check_env`]): an invalid value
/// (which init has already refused) reads as unset.
pub fn switch_or_unset(name: &str) -> Option<bool> {
    switch(name).ok().flatten()
}

/// What [`check_env`] found.
#[derive(Debug, Default)]
pub struct Report {
    /// Invalid values, in table order.
    pub errors: Vec<ConfigError>,
    /// One warning per unknown `RANKWIRE_*` name (with a suggestion where one is close).
    pub warnings: Vec<String>,
}

impl Report {
    /// The errors as one message (one per line after the first), `None` when there are
    /// none.
    pub fn error_message(&self) -> Option<String> {
        (!self.errors.is_empty()).then(|| {
            self.errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// Check every `RANKWIRE_*` variable of `vars` against the table. `checked` picks the
/// readers whose settings are checked (rwrun: all but [`Reader::Launcher`]; a rank:
/// [`Reader::Rank`] and [`Reader::Both`]). Unknown names give warnings.
pub fn check_env<I, K, V>(vars: I, checked: impl Fn(Reader) -> bool) -> Report
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut report = Report::default();
    let mut vars: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, _)| k.as_ref().starts_with("RANKWIRE_"))
        .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
        .collect();
    vars.sort();
    for (name, value) in &vars {
        match find(name) {
            Some(s) => {
                if checked(s.reader)
                    && !value.trim().is_empty()
                    && let Err(e) = s.check(value)
                {
                    report.errors.push(e);
                }
            }
            None => {
                if let Some(w) = unknown(name) {
                    report.warnings.push(w);
                }
            }
        }
    }
    report
}

/// The warning for `name` when it is a `RANKWIRE_*` name that no setting has (with the
/// closest known name when one is close): `None` for known and harness names.
pub fn unknown(name: &str) -> Option<String> {
    if !name.starts_with("RANKWIRE_")
        || find(name).is_some()
        || name.starts_with("RANKWIRE_TEST_")
        || HARNESS.contains(&name)
    {
        return None;
    }
    let best = SETTINGS
        .iter()
        .map(|s| (strsim::jaro_winkler(name, s.name), s.name))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    Some(match best {
        Some((score, near)) if score >= 0.9 => {
            format!("{name} is not a rankwire setting (ignored); did you mean {near}?")
        }
        _ => format!(
            "{name} is not a rankwire setting (ignored); the settings are listed in rankwire::settings::SETTINGS"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid and, where there is one, an invalid value of every setting.
    fn samples(s: &Setting) -> (&'static str, Option<&'static str>) {
        match s.check {
            Check::Any => ("eth0", None),
            Check::OneOf(w) => (w[w.len() - 1], Some("bogus")),
            Check::ListOf(w) => (w[0], Some("bogus")),
            Check::Switch => ("on", Some("maybe")),
            Check::Seconds { .. } => ("2.5", Some("abc")),
            Check::Duration => ("500ms", Some("soon")),
            Check::Uint { min: 0, .. } => ("0", Some("-1")),
            Check::Uint { min: 1, .. } => ("16", Some("0")),
            Check::Uint { .. } => ("16", Some("1")),
            Check::Bytes { .. } => ("64K", Some("1.5M")),
            Check::DevicePort => ("mlx5_0:1", Some("mlx5_0:x")),
            Check::AlgorithmName => ("cubic", Some("cubic,reno")),
        }
    }

    #[test]
    fn every_setting_parses_a_valid_value_and_names_itself_when_invalid() {
        let mut rejected = 0;
        for s in SETTINGS {
            let (good, bad) = samples(s);
            assert!(s.check(good).is_ok(), "{}={good:?}", s.name);
            assert_eq!(get_from(s.name, good).unwrap().as_deref(), Some(good));
            assert_eq!(
                get_from(s.name, "  ").unwrap(),
                None,
                "blank is the default"
            );
            if let Some(bad) = bad {
                let e = get_from(s.name, bad).unwrap_err();
                let m = e.to_string();
                assert!(m.contains(s.name), "{m}");
                assert!(m.contains(&format!("{bad:?}")), "{m}");
                assert!(m.contains(s.valid), "{m}");
                rejected += 1;
            }
            assert!(!s.doc.is_empty() && !s.default.is_empty(), "{}", s.name);
        }
        assert!(rejected >= 35, "{rejected}");
    }

    fn get_from(name: &str, v: &str) -> Result<Option<String>, ConfigError> {
        lookup_with(name, |k| (k == name).then(|| v.to_string()))
    }

    #[test]
    fn the_cases_of_the_issue_are_errors() {
        for (var, value, valid) in [
            ("RANKWIRE_PROGRESS", "bogus", "spin, yield, block or auto"),
            ("RANKWIRE_BOOTSTRAP_TIMEOUT", "abc", "seconds above 0"),
            ("RANKWIRE_BOOTSTRAP_TIMEOUT", "0", "seconds above 0"),
            ("RANKWIRE_REQUIRE", "shm,foo", "shm, cma, ipc, rdma, gdr"),
            (
                "RANKWIRE_TRANSPORTS",
                "carrier-pigeon",
                "self, shm, rdma, tcp",
            ),
            ("RANKWIRE_SHM_RING_BYTES", "1K", "16K to 1G"),
            ("RANKWIRE_ALLREDUCE_ALGO", "fastest", "ring"),
            ("RANKWIRE_CMA", "maybe", "off"),
            ("RANKWIRE_GPU_WAIT", "later", "poll or sync"),
            ("RANKWIRE_KILL_GRACE_MS", "2s", "milliseconds"),
        ] {
            let m = get_from(var, value).unwrap_err().to_string();
            assert!(
                m.starts_with(&format!("{var}={value:?} is not valid")) && m.contains(valid),
                "{m}"
            );
        }
        // Case and blanks do not matter; blank list items are ignored.
        assert!(get_from("RANKWIRE_PROGRESS", " Block ").is_ok());
        assert!(get_from("RANKWIRE_TRANSPORTS", "shm, tcp,").is_ok());
        assert!(get_from("RANKWIRE_WATCHDOG", "0").is_ok());
        assert!(get_from("RANKWIRE_SHM_RING_BYTES", "1 MiB").is_ok());
    }

    #[test]
    fn check_env_collects_errors_and_suggests_names() {
        let env = [
            ("RANKWIRE_PROGRES", "spin"),
            ("RANKWIRE_PROGRESS", "bogus"),
            ("RANKWIRE_WATCHDOG", "soon"),
            ("RANKWIRE_RANK", "x"),
            ("RANKWIRE_KILL_GRACE_MS", "x"),
            ("RANKWIRE_TEST_MARKER", "1"),
            ("RANKWIRE_ZZZZZZZZZZZZZZZZ", "1"),
            ("PATH", "/bin"),
        ];
        let r = check_env(env, |r| matches!(r, Reader::Rank | Reader::Both));
        let names: Vec<_> = r.errors.iter().map(|e| e.var).collect();
        assert_eq!(names, ["RANKWIRE_PROGRESS", "RANKWIRE_WATCHDOG"]);
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        assert!(
            r.warnings[0].contains("RANKWIRE_PROGRES is not a rankwire setting")
                && r.warnings[0].contains("did you mean RANKWIRE_PROGRESS?"),
            "{:?}",
            r.warnings
        );
        assert!(!r.warnings[1].contains("did you mean"), "{:?}", r.warnings);
        let m = r.error_message().unwrap();
        assert!(m.contains("RANKWIRE_PROGRESS=\"bogus\"") && m.contains("RANKWIRE_WATCHDOG"));
        // rwrun also checks its own settings.
        let r = check_env(env, |r| r != Reader::Launcher);
        assert_eq!(r.errors.len(), 3);
    }

    /// The defaults the table states are those of the code (for the transports).
    #[test]
    fn defaults_match_the_transports() {
        let d = |n: &str| find(n).unwrap().default;
        let shm = crate::ShmConfig::default();
        assert_eq!(shm.ring_bytes, None);
        let stated = d("RANKWIRE_SHM_RING_BYTES");
        for (n, b) in [(4, "1M"), (128, "32K"), (129, "16K")] {
            assert!(stated.contains(b), "{stated}");
            assert_eq!(parse_bytes(b), Some(shm.ring_bytes_for(n) as u64), "{n}");
        }
        let tcp = crate::TcpConfig::default();
        assert_eq!(d("RANKWIRE_TCP_CONNECT"), tcp.connect.to_string());
        assert_eq!(
            parse_duration(d("RANKWIRE_CONNECT_TIMEOUT")),
            Some(tcp.connect_timeout)
        );
        assert_eq!(
            parse_duration(d("RANKWIRE_TCP_ADDR_TIMEOUT")),
            Some(tcp.addr_timeout)
        );
        let rc = crate::RegCacheConfig::default();
        assert_eq!(
            d("RANKWIRE_REGCACHE_MAX_ENTRIES"),
            rc.max_idle_entries.to_string()
        );
        assert!(d("RANKWIRE_REGCACHE_MAX_BYTES").starts_with(&rc.max_bytes.to_string()));
    }

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut names: Vec<_> = SETTINGS.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), SETTINGS.len());
        assert!(names.iter().all(|n| {
            n.starts_with("RANKWIRE_")
                && n[9..]
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        }));
    }

    /// Every `RANKWIRE_*` name in the sources of the library, the transports, rwrun, the
    /// examples, benchmarks and scripts is in the table (a new setting cannot bypass
    /// it), except the harness names.
    #[test]
    fn every_name_in_the_sources_is_in_the_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut missing = Vec::new();
        for dir in [
            "core/src",
            "transports/src",
            "gpu/src",
            "mpirun/src",
            "examples",
            "benches",
            "scripts",
        ] {
            scan(&root.join(dir), &mut missing);
        }
        missing.sort();
        missing.dedup();
        assert!(missing.is_empty(), "not in the settings table: {missing:?}");
    }

    fn scan(dir: &std::path::Path, missing: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                scan(&p, missing);
            } else if p.extension().is_some_and(|x| x == "rs" || x == "sh")
                && !p.ends_with("settings.rs")
            {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let mut rest = text.as_str();
                while let Some(i) = rest.find("RANKWIRE_") {
                    let tail = &rest[i..];
                    let end = tail
                        .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(tail.len());
                    let name = tail[..end].trim_end_matches('_');
                    // `RANKWIRE_*` / `RANKWIRE_<COLL>_ALGO` in docs are patterns.
                    let pattern = tail[end..].starts_with('*') || tail[end..].starts_with('<');
                    if !pattern && find(name).is_none() && unknown(name).is_some() {
                        missing.push(format!("{name} ({})", p.display()));
                    }
                    rest = &tail[end.max(1)..];
                }
            }
        }
    }
}
