//! Peer-memory collectives on device buffers inside a node: each rank's kernel reads
//! (and for two-shot forms writes) the other ranks' device memory through CUDA IPC
//! mappings and synchronizes with them through flags in device memory
//! ([`rankwire_gpu::peer`]): one kernel per call, no host round trip per step.
//!
//! # When it runs
//! On a communicator of 2..=32 ranks whose ranks are all on one node, can map each
//! other's workspaces, and do not share a GPU without MPS (ranks time-slicing one GPU
//! would spin against each other: `RANKWIRE_GPU_PEER=on` forces it anyway;
//! `RANKWIRE_GPU_PEER=off` turns the path off). The first device collective on a
//! communicator decides, collectively (one host allgather of each rank's node, GPU,
//! MPS state and workspace handle, one allreduce of whether every mapping opened);
//! every rank reaches the same verdict. Elsewhere the host-scheduled algorithms of
//! [`crate::coll::device`] run.
//!
//! # Algorithms
//! - **Scratch** (input ≤ one scratch slot, `RANKWIRE_GPU_PEER_SCRATCH`, default
//!   4 MiB): the kernel copies the rank's input into its slot, crosses the entry
//!   barrier, and reads the peers' slots. Allreduce is one-shot (every rank reduces
//!   all inputs in rank order), reduce has the root reduce, reduce_scatter_block has
//!   each rank reduce its block, allgather and bcast copy. No host message at all.
//! - **Mapped** (larger inputs): the ranks exchange IPC handles of their user
//!   buffers over the host path (one small message to each peer), map them through a
//!   per-communicator IPC cache, and the kernel works on the user buffers directly.
//!   Allreduce is two-shot: rank `r` reduces shard `r` of all inputs and writes it
//!   into every rank's output (reduce-scatter and all-gather in one pass); reduce
//!   writes only into the root's output. An exit barrier ends the call when no peer
//!   touches this rank's buffers any more. Buffers that cannot be exported (pool
//!   memory) are copied into an exportable runtime temporary first (and back).
//!
//! # Numerics
//! Every output element is computed once, by one rank, combining the `p` inputs in
//! rank order (`f16`/`bf16` in `f32`, one rounding): results are bitwise identical
//! on every rank, but may differ in the last bit from the host-scheduled algorithms
//! (a different combination order).
//!
//! # Ordering
//! A communicator's peer-memory calls must be ordered: on one stream, or on streams
//! whose order the runtime can see (when a call comes on another stream than the last
//! one, the new stream first waits for the old one, `cuStreamWaitEvent`). Kernels of
//! different communicators are independent.

use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rankwire_gpu::peer::{self, MAX_PEERS, PeerArgs, PeerWorkspace};
use rankwire_gpu::{
    CudaIpcOpener, DType, Event, IpcCache, IpcExport, IpcMapping, IpcOpener, RedOp, Stream,
};

use crate::coll::sched::{Buf, Builder, Slice};
use crate::error::{Error, Result};

/// `RANKWIRE_GPU_PEER`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerSetting {
    /// Where no ranks share a GPU without MPS.
    Auto,
    /// Wherever the mappings open.
    On,
    /// Never.
    Off,
}

struct Settings {
    mode: PeerSetting,
    scratch: usize,
    timeout_ns: u64,
}

fn settings() -> &'static Settings {
    static S: OnceLock<Settings> = OnceLock::new();
    S.get_or_init(|| {
        // Values are checked at init (`crate::settings`).
        let mode = match crate::settings::raw("RANKWIRE_GPU_PEER")
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            Some("on" | "1") => PeerSetting::On,
            Some("off" | "0") => PeerSetting::Off,
            _ => PeerSetting::Auto,
        };
        let scratch = crate::settings::raw("RANKWIRE_GPU_PEER_SCRATCH")
            .and_then(|v| crate::settings::parse_bytes(&v))
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .unwrap_or(4 << 20);
        let secs = crate::settings::raw("RANKWIRE_GPU_PEER_TIMEOUT")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(600.0);
        Settings {
            mode,
            scratch,
            timeout_ns: (secs.max(0.0) * 1e9) as u64,
        }
    })
}

/// What one rank tells the others when a communicator sets up its peer path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RankInfo {
    /// Hash of the node identity (boot id, hostname, network namespace).
    pub(crate) node: u64,
    /// PCI address of the rank's GPU.
    pub(crate) pci: String,
    /// Whether MPS serves that GPU.
    pub(crate) mps: bool,
    /// Whether the rank allocated and exported its workspace.
    pub(crate) ok: bool,
    /// Multiprocessors of its GPU.
    pub(crate) sms: u32,
    /// Its workspace's IPC export (valid when `ok`).
    pub(crate) export: Option<IpcExport>,
    /// Its `RANKWIRE_GPU_PEER` (0 auto, 1 on, 2 off): must agree.
    pub(crate) mode: u8,
    /// Its scratch slot bytes: must agree (the kernels address peers' slots with it).
    pub(crate) slot: u64,
}

const PCI_LEN: usize = 16;
const INFO_LEN: usize = 8 + PCI_LEN + 1 + 1 + 4 + 1 + 8 + IpcExport::ENCODED_LEN;

impl RankInfo {
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(INFO_LEN);
        v.extend_from_slice(&self.node.to_le_bytes());
        let mut pci = [0u8; PCI_LEN];
        let b = self.pci.as_bytes();
        pci[..b.len().min(PCI_LEN)].copy_from_slice(&b[..b.len().min(PCI_LEN)]);
        v.extend_from_slice(&pci);
        v.push(self.mps as u8);
        v.push(self.ok as u8);
        v.extend_from_slice(&self.sms.to_le_bytes());
        v.push(self.mode);
        v.extend_from_slice(&self.slot.to_le_bytes());
        match &self.export {
            Some(e) => v.extend_from_slice(&e.to_bytes()),
            None => v.extend_from_slice(&[0u8; IpcExport::ENCODED_LEN]),
        }
        v
    }

    fn from_bytes(b: &[u8]) -> RankInfo {
        let node = u64::from_le_bytes(b[0..8].try_into().unwrap_or([0; 8]));
        let pci_raw = &b[8..8 + PCI_LEN];
        let end = pci_raw.iter().position(|&c| c == 0).unwrap_or(PCI_LEN);
        let pci = String::from_utf8_lossy(&pci_raw[..end]).into_owned();
        let o = 8 + PCI_LEN;
        let mps = b[o] != 0;
        let ok = b[o + 1] != 0;
        let sms = u32::from_le_bytes(b[o + 2..o + 6].try_into().unwrap_or([0; 4]));
        let mode = b[o + 6];
        let slot = u64::from_le_bytes(b[o + 7..o + 15].try_into().unwrap_or([0; 8]));
        let export = if ok {
            IpcExport::from_bytes(&b[o + 15..])
        } else {
            None
        };
        RankInfo {
            node,
            pci,
            mps,
            ok: ok && export.is_some(),
            sms,
            export,
            mode,
            slot,
        }
    }
}

/// FNV-1a of `s` (stable across processes and builds).
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The verdict on gathered infos: `Ok((ranks sharing the busiest GPU, fewest
/// multiprocessors))` or why the path is not used. Pure; every rank computes it on the
/// same infos.
pub(crate) fn verdict(
    infos: &[RankInfo],
    mode: PeerSetting,
) -> std::result::Result<(usize, u32), String> {
    if let Some(r) = infos.iter().position(|i| i.mode != infos[0].mode) {
        return Err(format!(
            "RANKWIRE_GPU_PEER differs between rank 0 and rank {r}; set it alike on every rank"
        ));
    }
    if mode == PeerSetting::Off {
        return Err("off (RANKWIRE_GPU_PEER=off)".into());
    }
    if let Some(r) = infos.iter().position(|i| i.slot != infos[0].slot) {
        return Err(format!(
            "RANKWIRE_GPU_PEER_SCRATCH differs between rank 0 ({} B) and rank {r} ({} B); \
             set it alike on every rank",
            infos[0].slot, infos[r].slot
        ));
    }
    if let Some(r) = infos.iter().position(|i| !i.ok) {
        return Err(format!(
            "rank {r} could not allocate or export its peer workspace"
        ));
    }
    let nodes: std::collections::BTreeSet<u64> = infos.iter().map(|i| i.node).collect();
    if nodes.len() > 1 {
        return Err(format!(
            "the ranks are on {} nodes (peer memory reaches only inside a node)",
            nodes.len()
        ));
    }
    let mut sharing = 1;
    for (r, a) in infos.iter().enumerate() {
        let same: Vec<usize> = (0..infos.len())
            .filter(|&s| infos[s].pci == a.pci)
            .collect();
        sharing = sharing.max(same.len());
        if same.len() > 1 && !a.mps && mode != PeerSetting::On && same[0] == r {
            return Err(format!(
                "ranks {same:?} share GPU {} without MPS: their spinning kernels would \
                 time-slice; fix: start the MPS control daemon (nvidia-cuda-mps-control \
                 -d), or RANKWIRE_GPU_PEER=on to use peer memory anyway",
                a.pci
            ));
        }
    }
    let sms = infos.iter().map(|i| i.sms).min().unwrap_or(1).max(1);
    Ok((sharing, sms))
}

/// The per-communicator state of the peer path.
#[derive(Default)]
pub(crate) enum PeerSlot {
    /// Not decided yet (no device collective ran).
    #[default]
    Unset,
    /// Decided against, with the reason.
    Unusable(String),
    /// Set up.
    Ready(Arc<Mutex<PeerGroup>>),
}

/// A communicator's mapped workspaces and user-buffer mappings.
pub(crate) struct PeerGroup {
    p: usize,
    me: usize,
    device: i32,
    ws: PeerWorkspace,
    /// Each rank's workspace base as mapped here (own: `ws.base()`).
    bases: Vec<u64>,
    opener: CudaIpcOpener,
    /// Mapped peer workspaces to close.
    opened: Vec<u64>,
    sharing: usize,
    sms: u32,
    /// Whether every rank uses this GPU (device-scope fences suffice).
    one_gpu: bool,
    /// World ranks, keys of the user-buffer cache.
    world: Arc<[u32]>,
    cache: IpcCache,
    /// Mappings used by launches that may still run, released once the event fired.
    in_flight: VecDeque<(Event, Vec<IpcMapping>)>,
    /// The stream of the last launch ([`Stream::id`]: an identity the driver does not
    /// reuse, never used as a handle).
    last_stream: Option<u64>,
    /// Recorded after every launch.
    last_event: Event,
    /// Set once a kernel reported an error: the flags are out of step.
    failed: Option<String>,
    /// Tickets handed out: one per peer-memory call, in call order (the same order on
    /// every rank, as MPI requires of collectives on a communicator).
    issued: u64,
    /// Tickets whose kernel is enqueued (or skipped): kernels are enqueued in ticket
    /// order, whatever order the calls' host exchanges finish in, so every rank's
    /// `k`-th kernel is the same collective.
    launched: u64,
    /// Submitted launches waiting for an earlier ticket (`None`: skipped).
    pending: std::collections::BTreeMap<u64, Option<PendingLaunch>>,
}

/// A kernel launch waiting for its turn ([`PeerGroup::submit`]).
pub(crate) struct PendingLaunch {
    what: &'static str,
    red: Option<(DType, RedOp)>,
    args: PeerArgs,
    work: usize,
    stream: &'static Stream,
    maps: Vec<IpcMapping>,
    /// A device copy `(dst, src, bytes)` enqueued right after the kernel (an output
    /// temporary back into the user's buffer).
    post_copy: Option<(u64, u64, usize)>,
}

// SAFETY: the raw handles inside (device addresses, CUDA events, IPC mappings) are
// process-wide; the group is only used under its mutex.
unsafe impl Send for PeerGroup {}

impl Drop for PeerGroup {
    fn drop(&mut self) {
        // Kernels may still read the mappings: wait for the runtime stream and for
        // the last stream used.
        if let Ok(s) = Stream::runtime(self.device) {
            let _ = s.synchronize();
        }
        let _ = self.last_event.synchronize();
        for (e, _) in &self.in_flight {
            let _ = e.synchronize();
        }
        let _ = self.cache.close_all();
        for &b in &self.opened {
            let _ = self.opener.close(b);
        }
    }
}

/// Lock a group, whatever a panicking holder left.
fn lock(g: &Mutex<PeerGroup>) -> MutexGuard<'_, PeerGroup> {
    g.lock().unwrap_or_else(|p| p.into_inner())
}

/// Open the peers' workspaces (`infos` gathered from every rank) for rank `me` on
/// `device`: the group, or why this rank cannot map them (after closing what it
/// opened).
#[allow(clippy::too_many_arguments)]
pub(crate) fn open_group(
    me: usize,
    device: i32,
    ws: PeerWorkspace,
    infos: &[RankInfo],
    world: Arc<[u32]>,
    sharing: usize,
    sms: u32,
) -> std::result::Result<PeerGroup, String> {
    let p = infos.len();
    let last_event = Event::new(device).map_err(|e| format!("rank {me}: event: {e}"))?;
    let mut opener = CudaIpcOpener::new(device);
    let mut bases = vec![0u64; p];
    let mut opened = Vec::new();
    for (j, info) in infos.iter().enumerate() {
        if j == me {
            bases[j] = ws.base();
            continue;
        }
        let Some(e) = &info.export else {
            continue;
        };
        match opener.open(&e.handle) {
            Ok(b) => {
                opened.push(b);
                bases[j] = b + e.offset;
            }
            Err(err) => {
                for b in opened {
                    let _ = opener.close(b);
                }
                return Err(format!(
                    "rank {me} cannot map rank {j}'s workspace (GPU {}): {err}",
                    info.pci
                ));
            }
        }
    }
    Ok(PeerGroup {
        p,
        me,
        device,
        ws,
        bases,
        opener,
        opened,
        sharing,
        sms,
        one_gpu: infos.iter().all(|i| i.pci == infos[0].pci),
        world,
        cache: IpcCache::new(device, NonZeroUsize::new(256).expect("nonzero")),
        in_flight: VecDeque::new(),
        last_stream: None,
        last_event,
        failed: None,
        issued: 0,
        launched: 0,
        pending: Default::default(),
    })
}

/// This rank's [`RankInfo`] for its workspace on `device`.
pub(crate) fn local_info(
    device: i32,
    ws: Option<&PeerWorkspace>,
    mode: PeerSetting,
    slot: usize,
) -> RankInfo {
    let export = ws.and_then(|w| {
        rankwire_gpu::ipc_export(w.base(), w.buffer().len())
            .map_err(|e| tracing::debug!("peer workspace export: {e}"))
            .ok()
    });
    RankInfo {
        node: fnv(&crate::bootstrap::node::node_id()),
        pci: rankwire_gpu::pci_bus_id(device).unwrap_or_default(),
        mps: rankwire_gpu::mps_enabled(device).unwrap_or(false),
        ok: export.is_some(),
        sms: rankwire_gpu::multiprocessor_count(device).unwrap_or(1),
        export,
        mode: match mode {
            PeerSetting::Auto => 0,
            PeerSetting::On => 1,
            PeerSetting::Off => 2,
        },
        slot: slot.div_ceil(256) as u64 * 256,
    }
}

impl PeerGroup {
    /// The device of this group's buffers.
    pub(crate) fn device(&self) -> i32 {
        self.device
    }

    /// The next ticket (call order).
    pub(crate) fn ticket(&mut self) -> u64 {
        self.issued += 1;
        self.issued
    }

    /// Whether every ticket handed out has been launched (a direct launch may go now).
    pub(crate) fn idle(&self) -> bool {
        self.issued == self.launched
    }

    /// Whether ticket `t`'s kernel is enqueued.
    pub(crate) fn launched(&self, t: u64) -> bool {
        self.launched >= t
    }

    /// Give up ticket `t` (its call ended before launching: a failed exchange). The
    /// other ranks' kernels for it may wait for this one: the group is failed from now.
    pub(crate) fn skip(&mut self, t: u64) {
        if self.launched(t) {
            return;
        }
        if let Some(Some(l)) = self.pending.insert(t, None) {
            for m in l.maps {
                let _ = self.cache.release(m);
            }
        }
        self.failed.get_or_insert_with(|| {
            "a peer-memory collective ended before its kernel was launched".into()
        });
        let _ = self.drain();
    }

    /// Submit ticket `t`'s launch; launches it and any that waited for it, in order.
    fn submit(&mut self, t: u64, l: PendingLaunch) -> Result<()> {
        self.pending.insert(t, Some(l));
        self.drain()
    }

    fn drain(&mut self) -> Result<()> {
        while let Some(entry) = self.pending.remove(&(self.launched + 1)) {
            self.launched += 1;
            let Some(l) = entry else { continue };
            let stream = l.stream;
            let r = self
                .launch(l.what, l.red, l.args, l.work, stream, l.maps)
                .and_then(|()| match l.post_copy {
                    // SAFETY: the schedule keeps the temporary and the user buffer live
                    // until this group reports the ticket launched and the stream idle.
                    Some((dst, src, n)) => {
                        unsafe { rankwire_gpu::memcpy_dtod_async(dst, src, n, stream) }
                            .map_err(|e| gpu("copying a collective's output temporary", e))
                    }
                    None => Ok(()),
                });
            if let Err(e) = r {
                self.fail_with(&e);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Record that this rank's epochs are out of step with its peers' (a launch that
    /// did not happen): every later call on the group fails at once.
    fn fail_with(&mut self, e: &Error) {
        self.failed
            .get_or_insert_with(|| format!("this rank could not launch a collective: {e}"));
    }
}

/// Bytes of one [`RankInfo`] on the wire.
pub(crate) const INFO_BYTES: usize = INFO_LEN;

/// Encode / decode a [`RankInfo`] (the setup allgather's record).
pub(crate) fn info_bytes(i: &RankInfo) -> Vec<u8> {
    i.to_bytes()
}

/// See [`info_bytes`].
pub(crate) fn info_from(b: &[u8]) -> RankInfo {
    RankInfo::from_bytes(b)
}

/// The settings the setup reads: `RANKWIRE_GPU_PEER` and the scratch slot bytes.
pub(crate) fn setup_settings() -> (PeerSetting, usize) {
    let s = settings();
    (s.mode, s.scratch)
}

/// One collective's shape, in bytes and elements of its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerColl {
    /// `n` elements of `es` bytes, every rank's result.
    Allreduce { n: usize, es: usize },
    /// `n` elements into the root's buffer.
    Reduce { n: usize, es: usize, root: usize },
    /// `k` elements per rank (input `p·k`).
    ReduceScatterBlock { k: usize, es: usize },
    /// `k` bytes per rank (output `p·k`).
    Allgather { k: usize },
    /// `n` bytes from the root.
    Bcast { n: usize, root: usize },
}

impl PeerColl {
    /// The call's fingerprint for the kernel's agreement check
    /// ([`rankwire_gpu::peer::PeerArgs::check`]): FNV-1a over the collective's kind,
    /// sizes and root, folded to 32 bits, never 0. Equal on every rank of a correct
    /// call; ranks whose counts, element sizes, roots or collectives differ get
    /// different values (but for a 2^-32 chance).
    pub(crate) fn fingerprint(&self) -> u32 {
        let f: [u64; 4] = match *self {
            PeerColl::Allreduce { n, es } => [1, n as u64, es as u64, 0],
            PeerColl::Reduce { n, es, root } => [2, n as u64, es as u64, root as u64],
            PeerColl::ReduceScatterBlock { k, es } => [3, k as u64, es as u64, 0],
            PeerColl::Allgather { k } => [4, k as u64, 0, 0],
            PeerColl::Bcast { n, root } => [5, n as u64, 0, root as u64],
        };
        let h = f
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
            });
        ((h ^ (h >> 32)) as u32).max(1)
    }

    /// Bytes of this rank's input as the kernel reads it.
    fn input_bytes(&self, p: usize) -> usize {
        match *self {
            PeerColl::Allreduce { n, es } | PeerColl::Reduce { n, es, .. } => n * es,
            PeerColl::ReduceScatterBlock { k, es } => p * k * es,
            PeerColl::Allgather { k } => k,
            PeerColl::Bcast { n, .. } => n,
        }
    }

    /// Bytes moved per rank (for the grid size).
    fn work_bytes(&self, p: usize) -> usize {
        self.input_bytes(p).max(match *self {
            PeerColl::Allgather { k } => p * k,
            _ => 0,
        })
    }

    /// Whether the scratch form applies: the input fits one slot, and for allreduce
    /// and reduce (where every rank reads all `p` inputs: `p·bytes` per rank) at most
    /// 8 MiB / p. Measured on one H200 under MPS (2026-12-02): at 4 ranks a 4 MiB
    /// one-shot allreduce took 168 µs and the 8 MiB two-shot 77 µs; at 2 ranks 4 MiB
    /// one-shot 40 µs, 8 MiB two-shot 45 µs.
    pub(crate) fn fits_scratch(&self, p: usize, slot: usize) -> bool {
        let cap = match self {
            PeerColl::Allreduce { .. } | PeerColl::Reduce { .. } => (8 << 20) / p.max(1),
            _ => usize::MAX,
        };
        self.input_bytes(p) <= slot.min(cap)
    }
}

/// The addresses of one call on this rank: its input region (where peers read) and
/// output region (device addresses in this process).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Regions {
    /// Input (send buffer, or receive buffer in place).
    pub(crate) input: u64,
    /// Output (receive buffer).
    pub(crate) output: u64,
}

/// Range `lo..hi` of shard `j` of `n` elements among `p` ranks, in whole 16-byte
/// vectors where possible (so every shard but the last stays vector-aligned).
pub(crate) fn shard(n: usize, es: usize, p: usize, j: usize) -> (u64, u64) {
    let unit = (16 / es.max(1)).max(1);
    let units = n.div_ceil(unit);
    let (off, len) = crate::coll::sched::block(units, p, j);
    let lo = (off * unit).min(n);
    let hi = ((off + len) * unit).min(n);
    (lo as u64, hi as u64)
}

/// Kernel arguments of the scratch form; `bases[j]` is rank `j`'s workspace base as
/// mapped here.
pub(crate) fn scratch_args(
    c: PeerColl,
    me: usize,
    bases: &[u64],
    slot_bytes: usize,
    r: Regions,
) -> PeerArgs {
    let p = bases.len();
    let mut a = PeerArgs::zeroed();
    a.p = p as u32;
    a.me = me as u32;
    a.check = c.fingerprint();
    a.slot_bytes = slot_bytes as u64;
    for (j, &b) in bases.iter().enumerate() {
        a.input[j] = b + PeerWorkspace::slots_offset();
    }
    a.src = r.input;
    a.src_bytes = c.input_bytes(p) as u64;
    match c {
        PeerColl::Allreduce { n, .. } => {
            (a.lo, a.hi) = (0, n as u64);
            a.out[0] = r.output;
            a.nout = 1;
        }
        PeerColl::Reduce { n, root, .. } => {
            if me == root {
                (a.lo, a.hi) = (0, n as u64);
                a.out[0] = r.output;
                a.nout = 1;
            }
        }
        PeerColl::ReduceScatterBlock { k, .. } => {
            (a.lo, a.hi) = ((me * k) as u64, ((me + 1) * k) as u64);
            a.out_sub = a.lo;
            a.out[0] = r.output;
            a.nout = 1;
        }
        PeerColl::Allgather { k } => {
            // In place, this rank's block is copied from its slot onto itself: the
            // same bytes.
            a.seg = k as u64;
            a.stride = k as u64;
            a.out[0] = r.output;
            a.nout = 1;
        }
        PeerColl::Bcast { n, root } => {
            // Only the root's slot is read; the root copies its buffer in and
            // nothing out.
            let root_slot = a.input[root];
            a.input = [0; MAX_PEERS];
            a.input[root] = root_slot;
            if me == root {
                a.seg = 0;
            } else {
                a.src = 0;
                a.src_bytes = 0;
                a.seg = n as u64;
            }
            a.stride = 0;
            a.out[0] = r.output;
            a.nout = 1;
        }
    }
    a
}

/// Kernel arguments of the mapped form: `ins[j]`/`outs[j]` are rank `j`'s input and
/// output regions as mapped here (0 where not exchanged).
pub(crate) fn mapped_args(
    c: PeerColl,
    me: usize,
    bases: &[u64],
    ins: &[u64],
    outs: &[u64],
) -> PeerArgs {
    let p = bases.len();
    let mut a = PeerArgs::zeroed();
    a.p = p as u32;
    a.me = me as u32;
    a.check = c.fingerprint();
    a.exit_barrier = 1;
    a.input[..p].copy_from_slice(&ins[..p]);
    match c {
        PeerColl::Allreduce { n, es } => {
            (a.lo, a.hi) = shard(n, es, p, me);
            a.out[..p].copy_from_slice(&outs[..p]);
            a.nout = p as u32;
        }
        PeerColl::Reduce { n, es, root } => {
            (a.lo, a.hi) = shard(n, es, p, me);
            a.out[0] = outs[root];
            a.nout = 1;
        }
        PeerColl::ReduceScatterBlock { k, .. } => {
            (a.lo, a.hi) = ((me * k) as u64, ((me + 1) * k) as u64);
            a.out_sub = a.lo;
            a.out[0] = outs[me];
            a.nout = 1;
        }
        PeerColl::Allgather { k } => {
            a.seg = k as u64;
            a.stride = k as u64;
            a.out[0] = outs[me];
            a.nout = 1;
            if ins[me] == outs[me] + (me * k) as u64 {
                a.input[me] = 0;
            }
        }
        PeerColl::Bcast { n, root } => {
            a.input = [0; MAX_PEERS];
            if me != root {
                a.input[root] = ins[root];
                a.seg = n as u64;
            }
            a.out[0] = outs[me];
            a.nout = 1;
        }
    }
    a
}

/// Which regions a rank exports in the mapped form: (input, output).
fn mapped_exports(c: PeerColl, me: usize) -> (bool, bool) {
    match c {
        PeerColl::Allreduce { .. } => (true, true),
        PeerColl::Reduce { root, .. } => (true, me == root),
        PeerColl::ReduceScatterBlock { .. } => (true, false),
        PeerColl::Allgather { .. } => (true, false),
        PeerColl::Bcast { root, .. } => (me == root, false),
    }
}

/// Bytes of the output region of a rank.
fn output_bytes(c: PeerColl, p: usize, me: usize) -> usize {
    match c {
        PeerColl::Allreduce { n, es } => n * es,
        PeerColl::Reduce { n, es, root } => {
            if me == root {
                n * es
            } else {
                0
            }
        }
        PeerColl::ReduceScatterBlock { k, es } => k * es,
        PeerColl::Allgather { k } => p * k,
        PeerColl::Bcast { n, .. } => n,
    }
}

impl PeerGroup {
    fn fill_common(&self, a: &mut PeerArgs) {
        for (j, &b) in self.bases.iter().enumerate() {
            a.flags[j] = b;
        }
        a.ctrl = self.ws.ctrl();
        a.status = self.ws.status();
        a.timeout_ns = settings().timeout_ns;
        a.sys_fence = u32::from(!self.one_gpu);
    }

    /// An error if an earlier kernel of this group failed (or the last one did).
    fn check(&mut self, what: &str) -> Result<()> {
        if self.failed.is_none()
            && let Some(m) = peer::decode_status(self.ws.status_value())
        {
            self.failed = Some(m);
        }
        match &self.failed {
            None => Ok(()),
            Some(m) => Err(Error::Collective(format!(
                "{what}: a peer-memory collective kernel on this communicator failed: {m}; \
                 the communicator's device collectives cannot continue (set \
                 RANKWIRE_GPU_PEER=off to use the host schedules)"
            ))),
        }
    }

    /// Release mappings of launches that have finished.
    fn reap(&mut self) {
        while let Some((e, _)) = self.in_flight.front() {
            if !e.query().unwrap_or(false) {
                break;
            }
            if let Some((_, maps)) = self.in_flight.pop_front() {
                for m in maps {
                    let _ = self.cache.release(m);
                }
            }
        }
    }

    /// Order `stream` after the last launch when it went to another stream, or may
    /// have (a wait on the event recorded after it: no stream handle is kept).
    fn order_on(&mut self, stream: &Stream) -> Result<()> {
        // Without an id the stream may be another one: wait (the wait is free when the
        // event has fired, and only orders when it has not).
        let id = stream.id();
        if self.last_stream.is_some() && (id.is_none() || self.last_stream != id) {
            stream
                .wait_event(&self.last_event)
                .map_err(|e| gpu("stream wait", e))?;
        }
        self.last_stream = Some(id.unwrap_or(u64::MAX));
        Ok(())
    }

    fn launch(
        &mut self,
        what: &str,
        red: Option<(DType, RedOp)>,
        mut a: PeerArgs,
        work_bytes: usize,
        stream: &Stream,
        maps: Vec<IpcMapping>,
    ) -> Result<()> {
        self.check(what)?;
        let r = self.launch_inner(what, red, &mut a, work_bytes, stream, maps);
        if let Err(e) = &r {
            self.fail_with(e);
        }
        r
    }

    fn launch_inner(
        &mut self,
        what: &str,
        red: Option<(DType, RedOp)>,
        a: &mut PeerArgs,
        work_bytes: usize,
        stream: &Stream,
        maps: Vec<IpcMapping>,
    ) -> Result<()> {
        self.fill_common(a);
        self.order_on(stream)?;
        let blocks = peer::peer_blocks(work_bytes, self.sharing, self.sms);
        // SAFETY: every address in `a` is this group's workspace (own or mapped), a
        // mapping held in `maps` until the launch completes, or a user buffer the
        // caller keeps live until then.
        unsafe { peer::peer_launch(red, a, blocks, stream) }
            .map_err(|e| gpu(&format!("{what}: peer-memory kernel"), e))?;
        // The last launch's completion: the next launch on another stream waits for
        // it, and Drop waits for it (a stream-ordered kernel on a user stream).
        self.last_event
            .record(stream)
            .map_err(|e| gpu("event record", e))?;
        if !maps.is_empty() {
            let ev = Event::new(self.device).map_err(|e| gpu("event", e))?;
            ev.record(stream).map_err(|e| gpu("event record", e))?;
            self.in_flight.push_back((ev, maps));
        }
        Ok(())
    }
}

fn gpu(what: &str, e: rankwire_gpu::GpuError) -> Error {
    Error::Gpu(format!("{what}: {e}"))
}

/// Descriptor bytes of one rank in the mapped form: input and output exports.
const DESC_LEN: usize = 2 * IpcExport::ENCODED_LEN;

fn export_or_zero(addr: u64, len: usize) -> Result<[u8; IpcExport::ENCODED_LEN]> {
    if len == 0 {
        return Ok([0; IpcExport::ENCODED_LEN]);
    }
    rankwire_gpu::ipc_export(addr, len)
        .map(|e| e.to_bytes())
        .map_err(|e| gpu("exporting a collective buffer for CUDA IPC", e))
}

/// Add the steps of a peer-memory collective to `b`. `send`/`recv` are the user's
/// device addresses (`send == recv` in place), `stream` the stream to launch on.
/// Every rank builds the same rounds (the scratch form has one local step; the
/// mapped form a descriptor exchange round, then the launch).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build(
    b: &mut Builder,
    what: &'static str,
    group: Arc<Mutex<PeerGroup>>,
    c: PeerColl,
    red: Option<(DType, RedOp)>,
    send: u64,
    recv: u64,
    stream: &'static Stream,
    ticket: u64,
) {
    let (me, p) = (b.rank, b.size);
    let slot = lock(&group).ws.slot_bytes();
    let regions = Regions {
        input: send,
        output: recv,
    };
    let work = c.work_bytes(p);
    if c.fits_scratch(p, slot) {
        b.device_call(Box::new(move |_bufs| {
            let mut g = lock(&group);
            let args = scratch_args(c, me, &g.bases, slot, regions);
            let l = PendingLaunch {
                what,
                red,
                args,
                work,
                stream,
                maps: Vec::new(),
                post_copy: None,
            };
            g.submit(ticket, l)
        }));
        return;
    }
    // Mapped form. Regions this rank exports; temporaries where they cannot be.
    let (ex_in, ex_out) = mapped_exports(c, me);
    let in_len = c.input_bytes(p);
    let out_len = output_bytes(c, p, me);
    let in_place = send == recv && out_len > 0;
    // Exports of the user's own regions, made once here (the descriptor step reuses
    // them); `None` where the memory cannot be exported (then a temporary is).
    let export_of = |on: bool, addr: u64, len: usize| {
        (on && len > 0)
            .then(|| {
                rankwire_gpu::ipc_export(addr, len)
                    .ok()
                    .map(|e| e.to_bytes())
            })
            .flatten()
    };
    let in_pre = export_of(ex_in, if send == recv { recv } else { send }, in_len);
    let out_pre = export_of(ex_out, recv, out_len);
    let in_ok = !ex_in || in_len == 0 || in_pre.is_some();
    let out_ok = !ex_out || out_len == 0 || out_pre.is_some();
    if !(in_ok && out_ok) {
        tracing::debug!(
            "peer {what}: {in_len} B: a buffer cannot be exported for CUDA IPC (input {in_ok}, \
             output {out_ok}): through a runtime temporary"
        );
    }
    let user_in = if in_place { Buf::Recv } else { Buf::Send };
    let (in_buf, out_buf) = if in_place && !(in_ok && out_ok) {
        let t = b.tmp(in_len.max(out_len));
        b.copy(Slice::new(Buf::Recv, 0, in_len), Slice::new(t, 0, in_len));
        (t, t)
    } else {
        let ib = if in_ok {
            user_in
        } else {
            let t = b.tmp(in_len);
            b.copy(Slice::new(user_in, 0, in_len), Slice::new(t, 0, in_len));
            t
        };
        let ob = if out_ok { Buf::Recv } else { b.tmp(out_len) };
        (ib, ob)
    };
    let d = b.tmp_host(p * DESC_LEN);
    let desc = move |j: usize| Slice::new(d, j * DESC_LEN, DESC_LEN);
    let in_s = Slice::new(in_buf, 0, in_len);
    let out_s = Slice::new(out_buf, 0, out_len);
    b.call(Box::new(move |bufs| {
        let mut v = Vec::with_capacity(DESC_LEN);
        for (on, s, len, pre) in [
            (ex_in, in_s, in_len, in_pre),
            (ex_out, out_s, out_len, out_pre),
        ] {
            match (on, pre) {
                // The user's buffer, exported above.
                (true, Some(b)) if matches!(s.buf, Buf::Send | Buf::Recv) => {
                    v.extend_from_slice(&b)
                }
                (true, _) => v.extend_from_slice(&export_or_zero(bufs.addr(s)?, len)?),
                (false, _) => v.extend_from_slice(&[0; IpcExport::ENCODED_LEN]),
            }
        }
        bufs.write(desc(me), &v)
    }));
    b.round();
    for j in (0..p).filter(|&j| j != me) {
        b.recv(j, desc(j));
    }
    for j in (0..p).filter(|&j| j != me) {
        b.send(j, desc(me));
    }
    b.round();
    b.device_call(Box::new(move |bufs| {
        let mut ins = vec![0u64; p];
        let mut outs = vec![0u64; p];
        let my_in = if in_len > 0 { bufs.addr(in_s)? } else { 0 };
        let my_out = if out_len > 0 { bufs.addr(out_s)? } else { 0 };
        let mut g = lock(&group);
        g.reap();
        let t0 = std::time::Instant::now();
        let mut maps = Vec::new();
        for j in 0..p {
            if j == me {
                ins[j] = my_in;
                outs[j] = my_out;
                continue;
            }
            let raw = bufs.bytes(desc(j))?.to_vec();
            for (half, slot) in [(0usize, &mut ins[j]), (1, &mut outs[j])] {
                let e = &raw[half * IpcExport::ENCODED_LEN..(half + 1) * IpcExport::ENCODED_LEN];
                if e.iter().all(|&x| x == 0) {
                    continue;
                }
                let Some(ex) = IpcExport::from_bytes(e) else {
                    return Err(Error::Collective(format!(
                        "{what}: rank {j} sent a malformed IPC descriptor"
                    )));
                };
                let peer = g.world[j];
                let m = g
                    .cache
                    .acquire(peer, &ex)
                    .map_err(|e| gpu(&format!("{what}: mapping rank {j}'s buffer"), e))?;
                *slot = m.addr();
                maps.push(m);
            }
        }
        if tracing::enabled!(tracing::Level::DEBUG) {
            let st = g.cache.stats();
            tracing::debug!(
                "peer {what}: mapped form, {in_len} B: {} peer buffers mapped in {:.1} us (IPC \
                 cache so far: opened {}, hits {}, stale {}, evicted {})",
                maps.len(),
                t0.elapsed().as_secs_f64() * 1e6,
                st.opened,
                st.hits,
                st.stale_evictions,
                st.lru_evictions
            );
        }
        let args = mapped_args(c, me, &g.bases, &ins, &outs);
        let post_copy = if out_buf != Buf::Recv && out_len > 0 {
            Some((
                bufs.addr(Slice::new(Buf::Recv, 0, out_len))?,
                my_out,
                out_len,
            ))
        } else {
            None
        };
        let l = PendingLaunch {
            what,
            red,
            args,
            work,
            stream,
            maps,
            post_copy,
        };
        g.submit(ticket, l)
    }));
}

/// An error recorded by a kernel of `group` (after its launches completed).
/// Makes `group`'s launches assume at least `n` kernels of this GPU's ranks resident at
/// once (fewer blocks per launch, [`peer::peer_blocks`]). Every rank of the group must
/// pass the same `n` (the barriers wait for every peer block).
pub(crate) fn widen_sharing(group: &Mutex<PeerGroup>, n: usize) {
    let mut g = lock(group);
    g.sharing = g.sharing.max(n);
}

pub(crate) fn check_group(group: &Mutex<PeerGroup>, what: &str) -> Result<()> {
    lock(group).check(what)
}

/// A kernel [`launch_on_stream`] enqueued: how a host that waits for it sees it end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Launched {
    /// The launch's epoch (the group's ticket).
    pub(crate) epoch: u32,
    /// The group workspace's done word (the kernel stores its epoch there last).
    pub(crate) done: rankwire_gpu::DoneWord,
}

impl Launched {
    /// Spin until the kernel has stored its epoch in the done word, or `stream` is
    /// idle (queried every [`STREAM_QUERY_EVERY`]: a kernel that never stores the word,
    /// which should not happen, still ends the wait about as before).
    ///
    /// # Safety
    /// The launch's group (its workspace) must be alive.
    ///
    /// # Errors
    /// [`Error::Gpu`] if the stream reports an error.
    pub(crate) unsafe fn wait(self, stream: &Stream, what: &str) -> Result<()> {
        let mut last = std::time::Instant::now();
        loop {
            for _ in 0..256 {
                // SAFETY: the caller keeps the group alive.
                if unsafe { self.done.reached(self.epoch) } {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
            if last.elapsed() >= STREAM_QUERY_EVERY {
                if stream
                    .is_idle()
                    .map_err(|e| gpu(&format!("{what}: peer-memory kernel"), e))?
                {
                    return Ok(());
                }
                last = std::time::Instant::now();
            }
        }
    }
}

/// How often [`Launched::wait`] also asks the driver whether the stream is idle.
/// Short, so that a done word that never comes costs a few µs, not more; a query takes
/// ~1.3 µs (H100), so this is a small share of the host's spinning. (With the word, 8 B
/// – 64 KiB allreduces took 0.80–0.87× the time of querying alone: H100, MPS, 2 ranks,
/// `benches/results/gpu-2026-12-07/` run-2.)
const STREAM_QUERY_EVERY: std::time::Duration = std::time::Duration::from_micros(5);

/// Launch the scratch form directly on `stream` (stream-ordered: no host wait, no
/// host message). Returns `None` (nothing done) when the call does not fit the
/// scratch form or an earlier call of this group has not launched its kernel yet
/// (a nonblocking call still exchanging handles): the caller then takes the
/// schedule, whose launch waits for its turn.
///
/// # Safety
/// `send`/`recv` must stay valid until the work enqueued on `stream` has completed.
pub(crate) unsafe fn launch_on_stream(
    group: &Mutex<PeerGroup>,
    what: &str,
    c: PeerColl,
    red: Option<(DType, RedOp)>,
    send: u64,
    recv: u64,
    stream: &Stream,
) -> Result<Option<Launched>> {
    let mut g = lock(group);
    let slot = g.ws.slot_bytes();
    if !c.fits_scratch(g.p, slot) || !g.idle() {
        return Ok(None);
    }
    let a = scratch_args(
        c,
        g.me,
        &g.bases,
        slot,
        Regions {
            input: send,
            output: recv,
        },
    );
    let work = c.work_bytes(g.p);
    let t = g.ticket();
    g.launched = t;
    g.launch(what, red, a, work, stream, Vec::new())?;
    Ok(Some(Launched {
        epoch: t as u32,
        done: g.ws.done_word(),
    }))
}

#[cfg(test)]
#[path = "device_peer_host_tests.rs"]
mod host_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn info(node: u64, pci: &str, mps: bool) -> RankInfo {
        RankInfo {
            node,
            pci: pci.into(),
            mps,
            ok: true,
            sms: 132,
            export: None,
            mode: 0,
            slot: 4 << 20,
        }
    }

    #[test]
    fn fingerprints_differ_where_calls_disagree() {
        let calls = [
            PeerColl::Bcast { n: 8, root: 0 },
            PeerColl::Bcast { n: 8, root: 1 },
            PeerColl::Bcast { n: 16, root: 0 },
            PeerColl::Allgather { k: 8 },
            PeerColl::Allreduce { n: 2, es: 4 },
            PeerColl::Allreduce { n: 4, es: 2 },
            PeerColl::Allreduce { n: 1, es: 8 },
            PeerColl::Reduce {
                n: 2,
                es: 4,
                root: 0,
            },
            PeerColl::ReduceScatterBlock { k: 2, es: 4 },
        ];
        let f: Vec<u32> = calls.iter().map(|c| c.fingerprint()).collect();
        for (i, a) in f.iter().enumerate() {
            assert_ne!(*a, 0, "0 means no check");
            for (j, b) in f.iter().enumerate().skip(i + 1) {
                assert_ne!(a, b, "{:?} and {:?}", calls[i], calls[j]);
            }
        }
        assert_eq!(f[0], PeerColl::Bcast { n: 8, root: 0 }.fingerprint());
        let a = scratch_args(
            calls[0],
            1,
            &[0x1000, 0x2000],
            256,
            Regions {
                input: 0,
                output: 0x3000,
            },
        );
        assert_eq!(a.check, f[0], "the scratch form carries the fingerprint");
        let m = mapped_args(calls[4], 0, &[0x1000, 0x2000], &[1, 2], &[3, 4]);
        assert_eq!(m.check, f[4], "and the mapped form");
    }

    #[test]
    fn verdict_names_why_not() {
        let two = [info(1, "0000:18:00", false), info(1, "0000:19:00", false)];
        assert_eq!(verdict(&two, PeerSetting::Auto), Ok((1, 132)));
        let shared = [info(1, "0000:18:00", false), info(1, "0000:18:00", false)];
        let e = verdict(&shared, PeerSetting::Auto).unwrap_err();
        assert!(
            e.contains("share GPU 0000:18:00 without MPS") && e.contains("[0, 1]"),
            "{e}"
        );
        assert_eq!(verdict(&shared, PeerSetting::On), Ok((2, 132)));
        let mps = [info(1, "0000:18:00", true), info(1, "0000:18:00", true)];
        assert_eq!(verdict(&mps, PeerSetting::Auto), Ok((2, 132)));
        let nodes = [info(1, "a", true), info(2, "a", true)];
        assert!(
            verdict(&nodes, PeerSetting::On)
                .unwrap_err()
                .contains("2 nodes")
        );
        let mut bad = mps.clone();
        bad[1].ok = false;
        assert!(
            verdict(&bad, PeerSetting::On)
                .unwrap_err()
                .contains("rank 1")
        );
        // Settings must agree: a differing mode or slot size is a verdict, not a hang.
        let mut m = mps.clone();
        m[1].mode = 2;
        assert!(
            verdict(&m, PeerSetting::Auto)
                .unwrap_err()
                .contains("differs")
        );
        let mut sl = mps.clone();
        sl[1].slot = 1 << 20;
        let e = verdict(&sl, PeerSetting::Auto).unwrap_err();
        assert!(e.contains("SCRATCH differs") && e.contains("rank 1"), "{e}");
        let off = [info(1, "a", true), info(1, "b", true)].map(|mut i| {
            i.mode = 2;
            i
        });
        assert!(verdict(&off, PeerSetting::Off).unwrap_err().contains("off"));
    }

    #[test]
    fn info_round_trips() {
        let mut i = info(0xdead_beef, "0000:18:00", true);
        i.export = Some(IpcExport {
            handle: rankwire_gpu::IpcHandle([7; 64]),
            device: 0,
            base: 0x7000_0000,
            alloc_len: 1 << 20,
            buffer_id: 42,
            offset: 0,
            len: 1 << 20,
        });
        let b = i.to_bytes();
        assert_eq!(b.len(), INFO_LEN);
        assert_eq!(RankInfo::from_bytes(&b), i);
        // A rank without a workspace is decoded as not ok, whatever the export bytes.
        let mut bad = i.clone();
        bad.ok = false;
        let back = RankInfo::from_bytes(&bad.to_bytes());
        assert!(!back.ok && back.export.is_none());
    }

    #[test]
    fn shards_cover_the_range_in_vectors() {
        for n in [0usize, 1, 3, 4, 5, 17, 1000, 1 << 20] {
            for p in 1..=8 {
                for es in [2usize, 4, 8] {
                    let mut next = 0u64;
                    for j in 0..p {
                        let (lo, hi) = shard(n, es, p, j);
                        assert_eq!(lo, next, "n={n} p={p} es={es} j={j}");
                        assert!(hi >= lo);
                        if hi < n as u64 {
                            assert_eq!((hi as usize * es) % 16, 0, "n={n} p={p} j={j}");
                        }
                        next = hi;
                    }
                    assert_eq!(next, n as u64);
                }
            }
        }
    }

    /// Host model of the kernels ([`rankwire_gpu::peer`]'s protocol) over host
    /// memory: every rank's pre-copy, then (entry barrier) every rank's work. It runs
    /// the arguments the builders produce and checks the results, so address,
    /// range, slot-parity and output mistakes show here without a GPU.
    fn model(args: &[PeerArgs], es: usize, epoch: u32, red: bool) {
        let slot = |a: &PeerArgs, j: usize| {
            if a.input[j] == 0 {
                0
            } else {
                a.input[j]
                    + if a.slot_bytes > 0 {
                        (epoch as u64 & 1) * a.slot_bytes
                    } else {
                        0
                    }
            }
        };
        // SAFETY (all raw accesses): the tests below allocate every address they pass.
        for a in args {
            if a.src != 0 {
                unsafe {
                    std::ptr::copy(
                        a.src as *const u8,
                        slot(a, a.me as usize) as *mut u8,
                        a.src_bytes as usize,
                    )
                };
            }
        }
        for a in args {
            if red {
                for i in a.lo..a.hi {
                    let mut acc = 0i64;
                    for j in 0..a.p as usize {
                        let v = unsafe { *((slot(a, j) as *const i64).add(i as usize)) };
                        acc = acc.wrapping_add(v);
                    }
                    for k in 0..a.nout as usize {
                        unsafe { *((a.out[k] as *mut i64).add((i - a.out_sub) as usize)) = acc };
                    }
                }
            } else {
                for j in 0..a.p as usize {
                    let s = slot(a, j);
                    if s != 0 && a.seg > 0 {
                        unsafe {
                            std::ptr::copy(
                                s as *const u8,
                                (a.out[0] + j as u64 * a.stride) as *mut u8,
                                a.seg as usize,
                            )
                        };
                    }
                }
            }
        }
        let _ = es;
    }

    /// Every rank's arguments of the scratch or the mapped form.
    fn rank_args(
        c: PeerColl,
        mapped: bool,
        bases: &[u64],
        slot_bytes: usize,
        ins: &[u64],
        outs: &[u64],
    ) -> Vec<PeerArgs> {
        (0..bases.len())
            .map(|me| {
                if mapped {
                    mapped_args(c, me, bases, ins, outs)
                } else {
                    let r = Regions {
                        input: ins[me],
                        output: outs[me],
                    };
                    scratch_args(c, me, bases, slot_bytes, r)
                }
            })
            .collect()
    }

    fn inputs(p: usize, n: usize) -> Vec<Vec<i64>> {
        (0..p)
            .map(|r| {
                (0..n)
                    .map(|i| (r as i64 + 1) * 1_000_003 + i as i64 * 7)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn scratch_and_mapped_arguments_compute_the_collectives() {
        for p in [2usize, 3, 4, 7] {
            for n in [1usize, 5, 64, 1001] {
                let slot_bytes = 16 * 1024 * 8;
                let mut ws: Vec<Vec<u8>> = (0..p)
                    .map(|_| vec![0u8; PeerWorkspace::slots_offset() as usize + 2 * slot_bytes])
                    .collect();
                let bases: Vec<u64> = ws.iter_mut().map(|w| w.as_mut_ptr() as u64).collect();
                let send = inputs(p, n * p);
                let sum: Vec<i64> = (0..n * p)
                    .map(|i| send.iter().fold(0i64, |a, s| a.wrapping_add(s[i])))
                    .collect();
                for epoch in [1u32, 2] {
                    // Allreduce, both forms.
                    for mapped in [false, true] {
                        let c = PeerColl::Allreduce { n, es: 8 };
                        let mut recv = vec![vec![-1i64; n]; p];
                        let ins: Vec<u64> = send.iter().map(|s| s.as_ptr() as u64).collect();
                        let outs: Vec<u64> =
                            recv.iter_mut().map(|r| r.as_mut_ptr() as u64).collect();
                        let args = rank_args(c, mapped, &bases, slot_bytes, &ins, &outs);
                        model(&args, 8, epoch, true);
                        for r in &recv {
                            assert_eq!(r[..], sum[..n], "allreduce p={p} n={n} mapped={mapped}");
                        }
                    }
                    // Reduce-scatter-block (input p·n, block n).
                    for mapped in [false, true] {
                        let c = PeerColl::ReduceScatterBlock { k: n, es: 8 };
                        let mut recv = vec![vec![-1i64; n]; p];
                        let ins: Vec<u64> = send.iter().map(|s| s.as_ptr() as u64).collect();
                        let outs: Vec<u64> =
                            recv.iter_mut().map(|r| r.as_mut_ptr() as u64).collect();
                        let args = rank_args(c, mapped, &bases, slot_bytes, &ins, &outs);
                        model(&args, 8, epoch, true);
                        for (me, r) in recv.iter().enumerate() {
                            assert_eq!(r[..], sum[me * n..(me + 1) * n], "rsb p={p} n={n}");
                        }
                    }
                    // Reduce to a root.
                    for mapped in [false, true] {
                        let root = p - 1;
                        let c = PeerColl::Reduce { n, es: 8, root };
                        let mut recv = vec![vec![-1i64; n]; p];
                        let ins: Vec<u64> = send.iter().map(|s| s.as_ptr() as u64).collect();
                        let outs: Vec<u64> =
                            recv.iter_mut().map(|r| r.as_mut_ptr() as u64).collect();
                        let args = rank_args(c, mapped, &bases, slot_bytes, &ins, &outs);
                        model(&args, 8, epoch, true);
                        let want: Vec<i64> = (0..n)
                            .map(|i| send.iter().fold(0i64, |a, s| a.wrapping_add(s[i])))
                            .collect();
                        assert_eq!(recv[root], want, "reduce p={p} n={n} mapped={mapped}");
                        for (r, v) in recv.iter().enumerate().filter(|&(r, _)| r != root) {
                            assert!(v.iter().all(|&x| x == -1), "reduce wrote rank {r}");
                        }
                    }
                    // Allgather (k = n·8 bytes) and bcast, out of place and in place.
                    for mapped in [false, true] {
                        for in_place in [false, true] {
                            let k = n * 8;
                            let c = PeerColl::Allgather { k };
                            let mut recv = vec![vec![-1i64; n * p]; p];
                            if in_place {
                                for (me, r) in recv.iter_mut().enumerate() {
                                    r[me * n..(me + 1) * n].copy_from_slice(&send[me][..n]);
                                }
                            }
                            let outs: Vec<u64> =
                                recv.iter_mut().map(|r| r.as_mut_ptr() as u64).collect();
                            let ins: Vec<u64> = (0..p)
                                .map(|me| {
                                    if in_place {
                                        outs[me] + (me * k) as u64
                                    } else {
                                        send[me].as_ptr() as u64
                                    }
                                })
                                .collect();
                            let args = rank_args(c, mapped, &bases, slot_bytes, &ins, &outs);
                            model(&args, 1, epoch, false);
                            let want: Vec<i64> =
                                (0..p).flat_map(|j| send[j][..n].to_vec()).collect();
                            for r in &recv {
                                assert_eq!(
                                    r, &want,
                                    "allgather p={p} n={n} mapped={mapped} in_place={in_place}"
                                );
                            }
                        }
                        let root = p / 2;
                        let c = PeerColl::Bcast { n: n * 8, root };
                        let mut bufs: Vec<Vec<i64>> = (0..p)
                            .map(|r| {
                                if r == root {
                                    send[r][..n].to_vec()
                                } else {
                                    vec![-1; n]
                                }
                            })
                            .collect();
                        let addrs: Vec<u64> =
                            bufs.iter_mut().map(|b| b.as_mut_ptr() as u64).collect();
                        let args = rank_args(c, mapped, &bases, slot_bytes, &addrs, &addrs);
                        model(&args, 1, epoch, false);
                        for b in &bufs {
                            assert_eq!(b[..], send[root][..n], "bcast p={p} n={n} mapped={mapped}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn scratch_fit_follows_the_input() {
        assert!(PeerColl::Allreduce { n: 1 << 18, es: 4 }.fits_scratch(2, 1 << 20));
        assert!(
            !PeerColl::Allreduce {
                n: (1 << 18) + 1,
                es: 4
            }
            .fits_scratch(2, 1 << 20)
        );
        // Reduce-scatter reads p blocks.
        assert!(!PeerColl::ReduceScatterBlock { k: 1 << 18, es: 4 }.fits_scratch(2, 1 << 20));
        assert!(PeerColl::Allgather { k: 1 << 20 }.fits_scratch(8, 1 << 20));
        // One-shot reads p inputs: capped at 8 MiB / p.
        assert!(PeerColl::Allreduce { n: 1 << 19, es: 4 }.fits_scratch(4, 4 << 20));
        assert!(
            !PeerColl::Allreduce {
                n: (1 << 19) + 4,
                es: 4
            }
            .fits_scratch(4, 4 << 20)
        );
    }
}
