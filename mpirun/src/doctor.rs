//! `rwrun --doctor`: the checks of a GPU/RDMA troubleshooting checklist, on this node.
//!
//! Each check prints one line, `[pass]`, `[warn]`, `[fail]` or `[skip]` (could not be
//! checked, and why), with a `fix:` for every warn and fail. Nothing needs a GPU, an RDMA
//! device or root: what is missing is reported, never fatal. GPU checks go through
//! `rankwire::gpu` (functional when rwrun is built with the `cuda` feature, its default);
//! checks that only matter with a GPU or an RDMA device (`nvidia_peermem`, memlock) are
//! skipped, and say so, on a node that has neither. RDMA
//! devices, ports, link layers and GID tables are read from sysfs
//! (`/sys/class/infiniband`), PCIe distances from `/sys/bus/pci`.
//!
//! Exit status: 1 if any check failed, else 0.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Pass,
    Warn,
    Fail,
    Skip,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    pub(crate) level: Level,
    pub(crate) name: &'static str,
    pub(crate) detail: String,
    pub(crate) fix: Option<String>,
}

fn check(level: Level, name: &'static str, detail: impl Into<String>, fix: Option<&str>) -> Check {
    Check {
        level,
        name,
        detail: detail.into(),
        fix: fix.map(str::to_string),
    }
}

/// Run every check and print the report; returns the exit status. `local_ranks`: the
/// ranks per node the user plans (`rwrun -n N --doctor`), for the GPU sharing check.
pub(crate) fn run(local_ranks: Option<u32>) -> i32 {
    let checks = all_checks(Path::new("/"), local_ranks);
    print!("{}", render(&checks));
    i32::from(checks.iter().any(|c| c.level == Level::Fail))
}

/// Every check, reading system files under `root` (`/` normally; a fake tree in tests).
/// `local_ranks`: ranks per node the user plans, if known (see [`run`]).
pub(crate) fn all_checks(root: &Path, local_ranks: Option<u32>) -> Vec<Check> {
    let mut v = Vec::new();
    let (gpu_checks, driver_gpus) = gpus();
    v.extend(gpu_checks);
    v.push(gpu_sharing(root, driver_gpus, local_ranks));
    let found = Found {
        gpu: driver_gpus > 0 || !nvidia_pci_gpus(root).is_empty(),
        rdma: !entries(&root.join("sys/class/infiniband")).is_empty(),
    };
    v.extend(rdma(root));
    v.push(pcie_distance(root));
    v.push(peermem(root, found));
    v.push(memlock(found));
    v.push(dev_shm(local_ranks));
    v.push(ptrace_scope(root));
    v.push(iommu(root));
    v.push(hugepages(root));
    v.push(slurm_env());
    v
}

/// The report: one line per check, then a summary line.
pub(crate) fn render(checks: &[Check]) -> String {
    let mut s = String::new();
    for c in checks {
        let tag = match c.level {
            Level::Pass => "pass",
            Level::Warn => "warn",
            Level::Fail => "fail",
            Level::Skip => "skip",
        };
        let _ = write!(s, "[{tag}] {}: {}", c.name, c.detail);
        if let Some(f) = &c.fix {
            let _ = write!(s, "; fix: {f}");
        }
        s.push('\n');
    }
    let count = |l| checks.iter().filter(|c| c.level == l).count();
    let _ = writeln!(
        s,
        "doctor: {} pass, {} warn, {} fail, {} not checked",
        count(Level::Pass),
        count(Level::Warn),
        count(Level::Fail),
        count(Level::Skip)
    );
    s
}

fn read(root: &Path, p: &str) -> Option<String> {
    std::fs::read_to_string(root.join(p.trim_start_matches('/')))
        .ok()
        .map(|s| s.trim().to_string())
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// What this node has, deciding whether the GPU- and RDMA-only checks apply.
#[derive(Debug, Clone, Copy)]
struct Found {
    /// The CUDA driver sees a GPU, or an NVIDIA GPU is on the PCI bus.
    gpu: bool,
    /// `/sys/class/infiniband` lists a device.
    rdma: bool,
}

/// How to get a GPU-enabled rwrun (the `cuda` feature of `rankwire-mpirun`, on by default).
const REBUILD_RWRUN: &str = "this rwrun was built with --no-default-features; rebuild it with \
    its default features (they include `cuda`): `cargo install --path mpirun` or `cargo build \
    --release -p rankwire-mpirun`";

// ---------------------------------------------------------------------------------------
// GPUs (through rankwire::gpu)

/// The GPU checks, and how many GPUs the driver sees (0 without a driver).
fn gpus() -> (Vec<Check>, usize) {
    use rankwire::gpu;
    if !cfg!(feature = "cuda") {
        return (
            vec![check(
                Level::Skip,
                "gpu",
                "could not check GPUs, their P2P matrix or DMA-BUF export: GPU support not built",
                Some(REBUILD_RWRUN),
            )],
            0,
        );
    }
    if let Err(e) = gpu::init() {
        return (
            vec![check(
                Level::Skip,
                "gpu",
                format!(
                    "no GPU found: skipped (could not check GPUs, their P2P matrix or DMA-BUF export: {e})"
                ),
                None,
            )],
            0,
        );
    }
    let n = match gpu::device_count() {
        Ok(n) => n,
        Err(e) => {
            return (
                vec![check(
                    Level::Fail,
                    "gpu",
                    format!("cuDeviceGetCount: {e}"),
                    Some("check nvidia-smi and CUDA_VISIBLE_DEVICES"),
                )],
                0,
            );
        }
    };
    (gpu_devices(n), n)
}

/// The checks of the `n` GPUs the driver sees.
fn gpu_devices(n: usize) -> Vec<Check> {
    use rankwire::gpu;
    let mut v = Vec::new();
    if n == 0 {
        v.push(check(
            Level::Warn,
            "gpu",
            "the driver sees no GPU",
            Some("check CUDA_VISIBLE_DEVICES and nvidia-smi"),
        ));
        return v;
    }
    for d in 0..n as i32 {
        match gpu::device_info(d) {
            Ok(i) => v.push(check(
                Level::Pass,
                "gpu",
                format!(
                    "device {d}: {} (DMA-BUF {}, GPUDirect RDMA {})",
                    i.name,
                    if i.dma_buf { "yes" } else { "no" },
                    if i.gpu_direct_rdma { "yes" } else { "no" }
                ),
                None,
            )),
            Err(e) => v.push(check(
                Level::Fail,
                "gpu",
                format!("device {d}: {e}"),
                Some("see nvidia-smi for this device"),
            )),
        }
    }
    // P2P matrix (cuDeviceCanAccessPeer).
    if n > 1 {
        let mut m = String::new();
        let mut missing = 0;
        for a in 0..n as i32 {
            for b in 0..n as i32 {
                let ok = a == b || gpu::can_access_peer(a, b).unwrap_or(false);
                missing += usize::from(!ok);
                m.push(if a == b {
                    '-'
                } else if ok {
                    'Y'
                } else {
                    'N'
                });
            }
            m.push(' ');
        }
        v.push(check(
            if missing == 0 { Level::Pass } else { Level::Warn },
            "gpu p2p",
            format!("cuDeviceCanAccessPeer rows: {}", m.trim()),
            (missing > 0).then_some("pairs marked N stage through host memory; check nvidia-smi topo -m and ACS/IOMMU settings"),
        ));
    } else {
        v.push(check(
            Level::Skip,
            "gpu p2p",
            "only one GPU: no peer pairs to check",
            None,
        ));
    }
    // DMA-BUF export of a test buffer.
    match gpu::DeviceBuffer::alloc(0, 2 << 20) {
        Ok(buf) => match gpu::export_dmabuf(buf.ptr(), buf.len()) {
            Ok((_fd, off)) => v.push(check(Level::Pass, "dma-buf", format!("exported a 2 MiB test buffer of device 0 (offset {off})"), None)),
            Err(e) => v.push(check(Level::Warn, "dma-buf", format!("export of a 2 MiB test buffer failed: {e}"), Some("GPUDirect RDMA then needs nvidia_peermem; DMA-BUF needs Linux 5.12+ and the open kernel modules"))),
        },
        Err(e) => v.push(check(Level::Fail, "dma-buf", format!("cannot allocate a test buffer: {e}"), Some("free device memory or check nvidia-smi"))),
    }
    v
}

// ---------------------------------------------------------------------------------------
// GPU sharing: MPS (CU_DEVICE_ATTRIBUTE_MPS_ENABLED, the MPS pipe directory)

/// Time a device operation of one process waits after one of another process on a GPU
/// shared without MPS (time-slicing), in microseconds: measured on one H200 (driver
/// 580), `rankwire-bench latency -d cuda` 8 B one-way 158.6 µs without MPS, 17.6 µs
/// with it.
const TIME_SLICE_US: u32 = 150;

/// The fix of the GPU sharing check.
const START_MPS: &str = "start the MPS control daemon: `nvidia-cuda-mps-control -d`, as root \
    or the GPU's owner, with the same CUDA_MPS_PIPE_DIRECTORY for the daemon and the ranks \
    (stop it with `echo quit | nvidia-cuda-mps-control`)";

/// What the GPU sharing check knows about one GPU the driver sees.
#[derive(Debug, Clone)]
struct GpuShare {
    /// Device ordinal.
    ordinal: i32,
    /// PCI address (`rankwire::gpu::pci_bus_id`), or why it could not be read.
    pci: Result<String, String>,
    /// `CU_DEVICE_ATTRIBUTE_MPS_ENABLED` (`rankwire::gpu::mps_enabled`), or why it could
    /// not be read (drivers before CUDA 12.9 lack the attribute).
    mps: Result<bool, String>,
}

/// The MPS pipe directory clients connect through: `$CUDA_MPS_PIPE_DIRECTORY`, else
/// `/tmp/nvidia-mps` (CUDA MPS documentation, "Environment variables").
#[derive(Debug, Clone)]
struct MpsPipe {
    dir: String,
    /// Named by `CUDA_MPS_PIPE_DIRECTORY` (not the default).
    from_env: bool,
    exists: bool,
}

/// The "gpu sharing / mps" check of the `n_gpus` GPUs the driver sees.
fn gpu_sharing(root: &Path, n_gpus: usize, local_ranks: Option<u32>) -> Check {
    if n_gpus == 0 {
        return check(
            Level::Skip,
            "gpu sharing / mps",
            "no GPU found: skipped (could not check whether MPS shares the GPUs)",
            None,
        );
    }
    let gpus: Vec<GpuShare> = (0..n_gpus as i32)
        .map(|d| GpuShare {
            ordinal: d,
            pci: rankwire::gpu::pci_bus_id(d).map_err(|e| e.to_string()),
            mps: rankwire::gpu::mps_enabled(d).map_err(|e| e.to_string()),
        })
        .collect();
    let env = std::env::var("CUDA_MPS_PIPE_DIRECTORY")
        .ok()
        .filter(|d| !d.is_empty());
    let dir = env.clone().unwrap_or_else(|| "/tmp/nvidia-mps".to_string());
    let pipe = MpsPipe {
        exists: root.join(dir.trim_start_matches('/')).is_dir(),
        dir,
        from_env: env.is_some(),
    };
    mps_check(&gpus, &pipe, local_ranks)
}

/// The decision and text of the GPU sharing check, from the facts (pure; unit-tested).
/// Without MPS, ranks sharing a GPU time-slice it: warn with the cost and the fix, unless
/// `local_ranks` says every rank of the node gets a GPU of its own (ranks pick
/// `local_rank % device_count`, `Universe::gpu_device`).
fn mps_check(gpus: &[GpuShare], pipe: &MpsPipe, local_ranks: Option<u32>) -> Check {
    const NAME: &str = "gpu sharing / mps";
    let g = gpus.len();
    let per_gpu: Vec<String> = gpus
        .iter()
        .map(|d| {
            let pci = d.pci.as_deref().unwrap_or("PCI id unknown");
            let mps = match &d.mps {
                Ok(true) => "MPS on".to_string(),
                Ok(false) => "MPS off".to_string(),
                Err(e) => format!("MPS unknown ({e})"),
            };
            format!("device {} ({pci}): {mps}", d.ordinal)
        })
        .collect();
    let pipe_text = format!(
        "MPS pipe directory {} ({}) {}",
        pipe.dir,
        if pipe.from_env {
            "CUDA_MPS_PIPE_DIRECTORY"
        } else {
            "default; CUDA_MPS_PIPE_DIRECTORY not set"
        },
        if pipe.exists {
            "exists"
        } else {
            "does not exist"
        }
    );
    let facts = format!("{}; {pipe_text}", per_gpu.join(", "));
    let off = gpus.iter().filter(|d| d.mps == Ok(false)).count();
    let unknown = gpus.iter().filter(|d| d.mps.is_err()).count();
    if off == 0 && unknown == g {
        return check(
            Level::Skip,
            NAME,
            format!("could not check whether MPS is on: {facts}"),
            None,
        );
    }
    // Ranks per GPU at most, where the planned rank count is known.
    let sharing = local_ranks.map(|n| (n as usize).div_ceil(g));
    if off == 0 {
        let meaning = match (local_ranks, sharing) {
            (Some(n), Some(k)) if k > 1 => format!(
                "{n} ranks on {g} GPU(s): up to {k} per GPU, running concurrently through MPS"
            ),
            _ => "ranks sharing a GPU run concurrently through MPS".to_string(),
        };
        return check(Level::Pass, NAME, format!("{facts}; {meaning}"), None);
    }
    let stale = if pipe.exists {
        " (the pipe directory exists but the driver reports MPS off: the daemon is not \
         running, runs for another user, or listens on another CUDA_MPS_PIPE_DIRECTORY)"
    } else {
        ""
    };
    let cost = format!(
        "ranks sharing a GPU time-slice it: each device operation after one of another \
         rank waits ~{TIME_SLICE_US} µs (measured on one H200)"
    );
    match (local_ranks, sharing) {
        (Some(n), Some(k)) if k <= 1 => check(
            Level::Pass,
            NAME,
            format!(
                "{facts}{stale}; {n} rank(s) on {g} GPU(s): one GPU per rank, no sharing \
                 (with more ranks than GPUs, {cost})"
            ),
            None,
        ),
        (Some(n), Some(k)) => check(
            Level::Warn,
            NAME,
            format!(
                "{facts}{stale}; {n} ranks on {g} GPU(s) share them, up to {k} per GPU: {cost}"
            ),
            Some(START_MPS),
        ),
        _ => check(
            Level::Warn,
            NAME,
            format!("{facts}{stale}; if you run more ranks than GPUs on a node, {cost}"),
            Some(START_MPS),
        ),
    }
}

// ---------------------------------------------------------------------------------------
// RDMA (sysfs only)

fn rdma(root: &Path) -> Vec<Check> {
    let dir = root.join("sys/class/infiniband");
    let devs = entries(&dir);
    if devs.is_empty() {
        return vec![check(
            Level::Warn,
            "rdma",
            "no RDMA devices in /sys/class/infiniband (inter-node traffic uses TCP; rdma: not built / no device)",
            Some(
                "install the NIC's driver and rdma-core (modprobe mlx5_ib / rdma_rxe), or ignore on a TCP-only cluster",
            ),
        )];
    }
    let mut v = Vec::new();
    for d in devs {
        let ports_dir = dir.join(&d).join("ports");
        let ports = entries(&ports_dir);
        if ports.is_empty() {
            v.push(check(
                Level::Warn,
                "rdma",
                format!("{d}: no ports"),
                Some("check the driver (dmesg)"),
            ));
        }
        for p in ports {
            let pdir = ports_dir.join(&p);
            let rel = |f: &str| {
                std::fs::read_to_string(pdir.join(f))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default()
            };
            let state = rel("state");
            let link = rel("link_layer");
            let (gids, chosen) = gid_table(&pdir);
            let active = state.contains("ACTIVE");
            v.push(check(
                if active { Level::Pass } else { Level::Fail },
                "rdma",
                format!(
                    "{d} port {p}: state {state:?}, link layer {link:?}, GIDs [{gids}], index used: {}",
                    chosen.map_or("none".to_string(), |i| i.to_string())
                ),
                (!active).then_some("bring the port up (cable, switch, `ip link set <netdev> up`; for rxe `rdma link add`)"),
            ));
            if link == "Ethernet" && chosen.is_none() {
                v.push(check(
                    Level::Fail,
                    "rdma gid",
                    format!("{d} port {p}: no usable RoCE GID"),
                    Some("give the port's netdev an IP address so a RoCE v2 GID appears"),
                ));
            }
        }
    }
    v
}

/// The GID table of a port as "index:type:gid" entries (non-zero GIDs only), and the
/// index rankwire would choose: the first RoCE v2 GID with an IPv4-mapped address, else
/// the first RoCE v2, else the first non-zero one (InfiniBand).
fn gid_table(port: &Path) -> (String, Option<usize>) {
    let mut rows = Vec::new();
    let (mut v2_v4, mut v2, mut any) = (None, None, None);
    for i in 0..256usize {
        let Ok(gid) = std::fs::read_to_string(port.join(format!("gids/{i}"))) else {
            break;
        };
        let gid = gid.trim().to_string();
        if gid.is_empty() || gid.chars().all(|c| c == '0' || c == ':') {
            continue;
        }
        let ty = std::fs::read_to_string(port.join(format!("gid_attrs/types/{i}")))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let is_v2 = ty.contains("v2");
        if is_v2 && gid.starts_with("0000:0000:0000:0000:0000:ffff") && v2_v4.is_none() {
            v2_v4 = Some(i);
        }
        if is_v2 && v2.is_none() {
            v2 = Some(i);
        }
        if any.is_none() {
            any = Some(i);
        }
        rows.push(format!(
            "{i}:{}:{gid}",
            if ty.is_empty() { "IB" } else { &ty }
        ));
    }
    (rows.join(", "), v2_v4.or(v2).or(any))
}

/// The NVIDIA GPUs on the PCI bus (vendor 0x10de, class 3D or VGA controller): PCI
/// address and canonical sysfs path.
fn nvidia_pci_gpus(root: &Path) -> Vec<(String, PathBuf)> {
    let pci = root.join("sys/bus/pci/devices");
    entries(&pci)
        .into_iter()
        .filter(|d| {
            let f = |x: &str| std::fs::read_to_string(pci.join(d).join(x)).unwrap_or_default();
            f("vendor").trim() == "0x10de"
                && (f("class").starts_with("0x0302") || f("class").starts_with("0x0300"))
        })
        .filter_map(|d| Some((d.clone(), std::fs::canonicalize(pci.join(&d)).ok()?)))
        .collect()
}

/// PCIe distance between each RDMA device and each NVIDIA GPU, from sysfs paths.
fn pcie_distance(root: &Path) -> Check {
    let nics: Vec<(String, PathBuf)> = entries(&root.join("sys/class/infiniband"))
        .into_iter()
        .filter_map(|d| {
            let p =
                std::fs::canonicalize(root.join("sys/class/infiniband").join(&d).join("device"))
                    .ok()?;
            Some((d, p))
        })
        .collect();
    let gpus = nvidia_pci_gpus(root);
    if nics.is_empty() || gpus.is_empty() {
        return check(
            Level::Skip,
            "nic-gpu distance",
            format!(
                "could not check: {} RDMA devices and {} NVIDIA GPUs on the PCI bus",
                nics.len(),
                gpus.len()
            ),
            None,
        );
    }
    let mut worst = Level::Pass;
    let mut parts = Vec::new();
    let croot = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    for (n, np) in &nics {
        for (g, gp) in &gpus {
            // Counted from the PCI root, as the RDMA device choice does: 4 or more =
            // behind a shared switch, 2-3 = the same root complex.
            let (what, level) = match rankwire::explain::pcie_score(&croot, np, gp) {
                c if c >= 4 => ("same PCIe switch", Level::Pass),
                c if c >= 2 => ("same root complex (through the host bridge)", Level::Warn),
                _ => ("different root complexes / CPU sockets", Level::Warn),
            };
            if level == Level::Warn {
                worst = Level::Warn;
            }
            parts.push(format!("{n} <-> GPU {g}: {what}"));
        }
    }
    check(
        worst,
        "nic-gpu distance",
        parts.join("; "),
        (worst == Level::Warn).then_some("GPUDirect RDMA is fastest with NIC and GPU behind one PCIe switch; pick the NIC nearest each GPU"),
    )
}

/// nvidia_peermem matters only for GPUDirect RDMA: a GPU and an RDMA device on the node.
fn peermem(root: &Path, found: Found) -> Check {
    if !found.gpu {
        return check(Level::Skip, "nvidia_peermem", "no GPU found: skipped", None);
    }
    if !found.rdma {
        return check(
            Level::Skip,
            "nvidia_peermem",
            "no RDMA device found: skipped (only GPUDirect RDMA uses it)",
            None,
        );
    }
    let loaded = root.join("sys/module/nvidia_peermem").exists()
        || read(root, "proc/modules")
            .is_some_and(|m| m.lines().any(|l| l.starts_with("nvidia_peermem ")));
    if loaded {
        check(Level::Pass, "nvidia_peermem", "loaded", None)
    } else {
        check(
            Level::Warn,
            "nvidia_peermem",
            "not loaded (GPUDirect RDMA then needs DMA-BUF registration)",
            Some(
                "`modprobe nvidia_peermem` on GPU+RDMA nodes, or use DMA-BUF (open kernel modules, Linux 5.12+)",
            ),
        )
    }
}

/// The locked-memory limit matters for RDMA registration and pinned GPU staging buffers:
/// only warned about where a GPU or an RDMA device is present.
fn memlock(found: Found) -> Check {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return check(
            Level::Skip,
            "memlock",
            format!("getrlimit failed: {}", std::io::Error::last_os_error()),
            None,
        );
    }
    if r.rlim_cur == libc::RLIM_INFINITY {
        return check(Level::Pass, "memlock", "ulimit -l: unlimited", None);
    }
    let kib = r.rlim_cur / 1024;
    if r.rlim_cur < (64 << 20) && !found.gpu && !found.rdma {
        return check(
            Level::Skip,
            "memlock",
            format!(
                "no GPU found: skipped (and no RDMA device; ulimit -l: {kib} KiB is enough for host memory)"
            ),
            None,
        );
    }
    check(
        if r.rlim_cur < (64 << 20) { Level::Warn } else { Level::Pass },
        "memlock",
        format!("ulimit -l: {kib} KiB"),
        (r.rlim_cur < (64 << 20)).then_some("RDMA registration and pinned buffers need more: `ulimit -l unlimited` (memlock in /etc/security/limits.conf, LimitMEMLOCK for systemd, --ulimit memlock=-1 for docker)"),
    )
}

fn dev_shm(local_ranks: Option<u32>) -> Check {
    // SAFETY: statvfs(3) on a NUL-terminated path into a zeroed struct.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c"/dev/shm".as_ptr(), &mut s) } != 0 {
        return check(
            Level::Fail,
            "/dev/shm",
            format!("statvfs failed: {}", std::io::Error::last_os_error()),
            Some("mount a tmpfs on /dev/shm (the shm transport needs it)"),
        );
    }
    let total = s.f_blocks as u64 * s.f_frsize as u64;
    let free = s.f_bavail as u64 * s.f_frsize as u64;
    // An invalid RANKWIRE_SHM_RING_BYTES is reported by the settings check; size with
    // the default then.
    let cfg = rankwire::explain::ShmConfig::from_env().unwrap_or_default();
    let (detail, level) = shm_fit(&cfg, total, free, local_ranks);
    check(
        level,
        "/dev/shm",
        detail,
        (level != Level::Pass).then_some("each rank's segment holds one ring per other rank of its node (RANKWIRE_SHM_RING_BYTES; unset, about 4 MiB per rank up to 256 ranks per node); enlarge /dev/shm (docker --shm-size=8g), run fewer ranks per node, or remove stale rankwire-* files"),
    )
}

/// The `/dev/shm` verdict: sizes, how many ranks per node fit in `free` bytes, and what
/// `local_ranks` (when planned) would take.
fn shm_fit(
    cfg: &rankwire::explain::ShmConfig,
    total: u64,
    free: u64,
    local_ranks: Option<u32>,
) -> (String, Level) {
    let mib = |b: u64| b >> 20;
    // The node's footprint grows with the rank count: the largest count that fits.
    let fits = (2..=4096usize)
        .take_while(|&n| cfg.node_bytes(n) <= free)
        .last()
        .unwrap_or(1);
    let mut detail = format!(
        "{} MiB total, {} MiB free: room for the rings of {}{fits} ranks per node",
        mib(total),
        mib(free),
        if fits == 4096 { "at least " } else { "" },
    );
    let mut level = if free < (64 << 20) {
        Level::Fail
    } else if total < (1 << 30) {
        Level::Warn
    } else {
        Level::Pass
    };
    if let Some(n) = local_ranks.filter(|&n| n >= 2) {
        let need = cfg.node_bytes(n as usize);
        if need == u64::MAX {
            // More peers than a segment's slot table holds (4096).
            detail += &format!(
                "; {n} ranks per node are more than the shm transport supports (at most 4097)"
            );
            return (detail, Level::Fail);
        }
        detail += &format!(
            "; {n} ranks need {} MiB (rings of {} KiB)",
            mib(need).max(1),
            cfg.ring_bytes_for(n as usize) >> 10
        );
        if need > free {
            level = Level::Fail;
        }
    }
    (detail, level)
}

#[cfg(test)]
mod shm_fit_tests {
    use super::*;

    #[test]
    fn the_verdict_relates_free_space_to_the_planned_ranks() {
        let cfg = rankwire::explain::ShmConfig::default();
        let g = 1u64 << 30;
        // 128 ranks take about 537 MB with the derived ring size.
        let (d, l) = shm_fit(&cfg, 8 * g, 8 * g, Some(128));
        assert_eq!(l, Level::Pass, "{d}");
        assert!(
            d.contains("128 ranks need 512 MiB (rings of 32 KiB)"),
            "{d}"
        );
        // 512 ranks take 4.4 GB: more than 2 GiB free.
        let (d, l) = shm_fit(&cfg, 2 * g, 2 * g, Some(512));
        assert_eq!(l, Level::Fail, "{d}");
        let fits: usize = d
            .split("room for the rings of ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse().ok())
            .unwrap();
        assert!(
            cfg.node_bytes(fits) <= 2 * g && cfg.node_bytes(fits + 1) > 2 * g,
            "{d}"
        );
        // Beyond the slot table: a plain statement, not a figure.
        let (d, l) = shm_fit(&cfg, 8 * g, 8 * g, Some(100_000));
        assert_eq!(l, Level::Fail, "{d}");
        assert!(d.contains("more than the shm transport supports"), "{d}");
        // Nothing planned: no rank count in the verdict.
        let (d, l) = shm_fit(&cfg, 8 * g, 8 * g, None);
        assert_eq!(l, Level::Pass);
        assert!(!d.contains("ranks need"), "{d}");
    }
}

fn ptrace_scope(root: &Path) -> Check {
    match read(root, "proc/sys/kernel/yama/ptrace_scope").as_deref() {
        None => check(
            Level::Pass,
            "cma (ptrace scope)",
            "no Yama LSM: single-copy cross-memory attach allowed",
            None,
        ),
        Some("0") => check(
            Level::Pass,
            "cma (ptrace scope)",
            "kernel.yama.ptrace_scope = 0: single copy allowed",
            None,
        ),
        Some(v) => check(
            Level::Warn,
            "cma (ptrace scope)",
            format!(
                "kernel.yama.ptrace_scope = {v}: process_vm_readv between ranks may be refused (they then copy through the rings)"
            ),
            Some("`sysctl kernel.yama.ptrace_scope=0` (or RANKWIRE_CMA=0 to not try)"),
        ),
    }
}

fn iommu(root: &Path) -> Check {
    let groups = entries(&root.join("sys/kernel/iommu_groups")).len();
    let cmdline = read(root, "proc/cmdline").unwrap_or_default();
    let pt = cmdline
        .split_whitespace()
        .any(|w| w == "iommu=pt" || w == "iommu.passthrough=1");
    if groups == 0 {
        check(Level::Pass, "iommu", "off (no IOMMU groups)", None)
    } else if pt {
        check(
            Level::Pass,
            "iommu",
            format!("on, passthrough ({groups} groups)"),
            None,
        )
    } else {
        check(
            Level::Warn,
            "iommu",
            format!(
                "on in translated mode ({groups} groups; no iommu=pt on the kernel command line)"
            ),
            Some(
                "GPU peer-to-peer and GPUDirect RDMA need iommu=pt (or the IOMMU off) on the kernel command line",
            ),
        )
    }
}

fn hugepages(root: &Path) -> Check {
    let info = read(root, "proc/meminfo").unwrap_or_default();
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
    };
    match (
        field("HugePages_Total:"),
        field("HugePages_Free:"),
        field("Hugepagesize:"),
    ) {
        (Some(t), Some(f), Some(sz)) => check(
            Level::Pass,
            "hugepages",
            format!("{t} pages of {sz} KiB, {f} free (not required by rankwire)"),
            None,
        ),
        _ => check(
            Level::Skip,
            "hugepages",
            "could not read /proc/meminfo",
            None,
        ),
    }
}

fn slurm_env() -> Check {
    let var = |k: &str| std::env::var(k).ok();
    match (var("SLURM_JOB_ID"), var("SLURM_STEP_ID")) {
        (None, _) => check(
            Level::Pass,
            "slurm/pmi",
            "not in a Slurm job (start ranks with rwrun)",
            None,
        ),
        (Some(job), step) => {
            let ntasks: u32 = var("SLURM_NTASKS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let in_step = step.is_some();
            let pmix = rankwire::bootstrap::pmix::offered(var);
            if in_step && pmix {
                return match rankwire::bootstrap::pmix::probe_library() {
                    Ok(v) => check(
                        Level::Pass,
                        "slurm/pmi",
                        format!(
                            "Slurm job {job} step {}: PMIx server offered (namespace {}), client \
                             library {v}",
                            step.unwrap_or_default(),
                            var("PMIX_NAMESPACE").unwrap_or_default()
                        ),
                        None,
                    ),
                    Err(e) => check(
                        Level::Fail,
                        "slurm/pmi",
                        // The error's text ends with its fix.
                        format!("Slurm job {job}: srun offered PMIx, but {e}"),
                        None,
                    ),
                };
            }
            let has_pmi = var("PMI_FD").is_some() || var("PMI_PORT").is_some();
            if in_step && ntasks > 1 && !has_pmi {
                return check(
                    Level::Warn,
                    "slurm/pmi",
                    format!(
                        "Slurm job {job}: a {ntasks}-task step without a PMI-2/PMI-1 or PMIx \
                         connection (srun --mpi={}); rankwire ranks would refuse to start",
                        var("SLURM_MPI_TYPE").unwrap_or_else(|| "none".into())
                    ),
                    Some(
                        "start the step with `srun --mpi=pmi2` or `--mpi=pmix`, or run `rwrun` inside \
                         the allocation",
                    ),
                );
            }
            let pmi: Vec<String> = [
                "PMI_RANK",
                "PMI_SIZE",
                "PMI_FD",
                "PMIX_RANK",
                "SLURM_MPI_TYPE",
            ]
            .iter()
            .filter_map(|k| var(k).map(|v| format!("{k}={v}")))
            .collect();
            check(
                Level::Pass,
                "slurm/pmi",
                format!(
                    "Slurm job {job}{}, tasks {}; PMI: {}",
                    step.map_or(String::new(), |s| format!(" step {s}")),
                    var("SLURM_NTASKS").unwrap_or_else(|| "?".into()),
                    if pmi.is_empty() {
                        "none".into()
                    } else {
                        pmi.join(" ")
                    }
                ),
                None,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, p: &str, s: &str) {
        let f = root.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, s).unwrap();
    }

    #[test]
    fn fake_roce_port_gid_choice_and_missing_pieces() {
        let dir = std::env::temp_dir().join(format!("rw-doctor-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let port = "sys/class/infiniband/rxe0/ports/1";
        write(&dir, &format!("{port}/state"), "4: ACTIVE\n");
        write(&dir, &format!("{port}/link_layer"), "Ethernet\n");
        write(
            &dir,
            &format!("{port}/gids/0"),
            "fe80:0000:0000:0000:0000:00ff:fe00:0001\n",
        );
        write(&dir, &format!("{port}/gid_attrs/types/0"), "IB/RoCE v1\n");
        write(
            &dir,
            &format!("{port}/gids/1"),
            "fe80:0000:0000:0000:0000:00ff:fe00:0001\n",
        );
        write(&dir, &format!("{port}/gid_attrs/types/1"), "RoCE v2\n");
        write(
            &dir,
            &format!("{port}/gids/2"),
            "0000:0000:0000:0000:0000:ffff:0a4d:0001\n",
        );
        write(&dir, &format!("{port}/gid_attrs/types/2"), "RoCE v2\n");
        write(
            &dir,
            &format!("{port}/gids/3"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        );
        write(&dir, "proc/sys/kernel/yama/ptrace_scope", "1\n");
        let checks = all_checks(&dir, None);
        let text = render(&checks);
        assert!(
            text.contains("[pass] rdma: rxe0 port 1: state \"4: ACTIVE\", link layer \"Ethernet\""),
            "{text}"
        );
        assert!(
            text.contains("index used: 2"),
            "RoCE v2 with IPv4 preferred: {text}"
        );
        assert!(text.contains("1:RoCE v2:fe80"), "{text}");
        assert!(
            text.contains("[warn] cma (ptrace scope): kernel.yama.ptrace_scope = 1"),
            "{text}"
        );
        if !rankwire::gpu::available() {
            // An RDMA device but no GPU: nvidia_peermem does not apply.
            assert!(
                text.contains("[skip] nvidia_peermem: no GPU found: skipped"),
                "{text}"
            );
        }
        assert!(
            text.contains(
                "[skip] nic-gpu distance: could not check: 0 RDMA devices and 0 NVIDIA GPUs on the PCI bus"
            ),
            "{text}"
        );
        // Every warn and fail carries a fix.
        for c in &checks {
            if matches!(c.level, Level::Warn | Level::Fail) {
                assert!(c.fix.is_some(), "{c:?}");
            }
        }
        // With an NVIDIA GPU on the (fake) PCI bus as well, nvidia_peermem is checked.
        write(&dir, "sys/bus/pci/devices/0000:41:00.0/vendor", "0x10de\n");
        write(&dir, "sys/bus/pci/devices/0000:41:00.0/class", "0x030200\n");
        let text = render(&all_checks(&dir, None));
        assert!(text.contains("[warn] nvidia_peermem: not loaded"), "{text}");
        write(&dir, &format!("{port}/state"), "1: DOWN\n");
        let text = render(&all_checks(&dir, None));
        assert!(
            text.contains("[fail] rdma: rxe0 port 1: state \"1: DOWN\""),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn gpus(mps: &[Result<bool, String>]) -> Vec<GpuShare> {
        mps.iter()
            .enumerate()
            .map(|(i, m)| GpuShare {
                ordinal: i as i32,
                pci: Ok(format!("0000:{:02x}:00", 0x41 + i)),
                mps: m.clone(),
            })
            .collect()
    }

    fn pipe(exists: bool) -> MpsPipe {
        MpsPipe {
            dir: "/tmp/nvidia-mps".into(),
            from_env: false,
            exists,
        }
    }

    #[test]
    fn mps_off_warns_with_cost_and_fix_when_ranks_share_a_gpu() {
        let one_off = gpus(&[Ok(false)]);
        // No rank count: the conditional warning.
        let c = mps_check(&one_off, &pipe(false), None);
        assert_eq!(c.level, Level::Warn);
        assert!(c.detail.starts_with("device 0 (0000:41:00): MPS off; MPS pipe directory /tmp/nvidia-mps (default; CUDA_MPS_PIPE_DIRECTORY not set) does not exist; if you run more ranks than GPUs on a node, ranks sharing a GPU time-slice it: each device operation after one of another rank waits ~150 µs"), "{}", c.detail);
        let fix = c.fix.as_deref().unwrap();
        assert!(
            fix.contains("nvidia-cuda-mps-control -d")
                && fix.contains("as root or the GPU's owner"),
            "{fix}"
        );
        // 4 ranks on 1 GPU: all four share it.
        let c = mps_check(&one_off, &pipe(false), Some(4));
        assert_eq!(c.level, Level::Warn);
        assert!(
            c.detail
                .contains("; 4 ranks on 1 GPU(s) share them, up to 4 per GPU: ranks sharing"),
            "{}",
            c.detail
        );
        // 3 ranks on 2 GPUs: up to 2 per GPU (local_rank % 2).
        let c = mps_check(&gpus(&[Ok(false), Ok(false)]), &pipe(false), Some(3));
        assert!(
            c.detail.contains("device 1 (0000:42:00): MPS off"),
            "{}",
            c.detail
        );
        assert!(
            c.detail
                .contains("3 ranks on 2 GPU(s) share them, up to 2 per GPU"),
            "{}",
            c.detail
        );
        // A pipe directory without MPS on: a stale or foreign daemon.
        let c = mps_check(&one_off, &pipe(true), Some(2));
        assert_eq!(c.level, Level::Warn);
        assert!(c.detail.contains("/tmp/nvidia-mps (default; CUDA_MPS_PIPE_DIRECTORY not set) exists (the pipe directory exists but the driver reports MPS off"), "{}", c.detail);
    }

    #[test]
    fn mps_off_passes_with_a_gpu_per_rank_and_mps_on_passes() {
        let c = mps_check(&gpus(&[Ok(false), Ok(false)]), &pipe(false), Some(2));
        assert_eq!(c.level, Level::Pass);
        assert!(
            c.detail
                .contains("2 rank(s) on 2 GPU(s): one GPU per rank, no sharing"),
            "{}",
            c.detail
        );
        assert!(c.fix.is_none());
        let env_pipe = MpsPipe {
            dir: "/tmp/mps-pipe".into(),
            from_env: true,
            exists: true,
        };
        let c = mps_check(&gpus(&[Ok(true)]), &env_pipe, Some(4));
        assert_eq!(c.level, Level::Pass);
        assert_eq!(
            c.detail,
            "device 0 (0000:41:00): MPS on; MPS pipe directory /tmp/mps-pipe (CUDA_MPS_PIPE_DIRECTORY) exists; 4 ranks on 1 GPU(s): up to 4 per GPU, running concurrently through MPS"
        );
        let c = mps_check(&gpus(&[Ok(true)]), &env_pipe, None);
        assert!(
            c.detail
                .ends_with("; ranks sharing a GPU run concurrently through MPS"),
            "{}",
            c.detail
        );
        // One GPU on, one off: the off one warns.
        let c = mps_check(&gpus(&[Ok(true), Ok(false)]), &env_pipe, Some(8));
        assert_eq!(c.level, Level::Warn);
        // An old driver without the attribute: not checked.
        let c = mps_check(
            &gpus(&[Err("CUDA_ERROR_INVALID_VALUE".into())]),
            &pipe(false),
            Some(2),
        );
        assert_eq!(c.level, Level::Skip);
        assert!(c.detail.starts_with("could not check whether MPS is on: device 0 (0000:41:00): MPS unknown (CUDA_ERROR_INVALID_VALUE)"), "{}", c.detail);
    }

    #[test]
    fn no_rdma_and_no_gpu_say_what_was_not_checked() {
        let dir = std::env::temp_dir().join(format!("rw-doctor-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = render(&all_checks(&dir, None));
        assert!(text.contains("[warn] rdma: no RDMA devices"), "{text}");
        if !rankwire::gpu::available() {
            assert!(
                text.contains("[skip] gpu sharing / mps: no GPU found: skipped"),
                "{text}"
            );
            assert!(text.contains("[skip] gpu: "), "{text}");
            assert!(text.contains("could not check GPUs"), "{text}");
            // Neither a GPU nor an RDMA device: nothing to warn about for either.
            assert!(
                text.contains("[skip] nvidia_peermem: no GPU found: skipped"),
                "{text}"
            );
            assert!(!text.contains("[warn] nvidia_peermem"), "{text}");
            assert!(!text.contains("[warn] memlock"), "{text}");
        }
        if cfg!(feature = "cuda") {
            assert!(!text.contains("rebuild"), "{text}");
        } else {
            // The rebuild hint names rwrun's crate and its default features.
            assert!(
                text.contains("cargo install --path mpirun") && text.contains("-p rankwire-mpirun"),
                "{text}"
            );
        }
        assert!(text.contains("doctor: "), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
