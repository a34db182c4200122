//! Collectives on device (GPU) buffers: allreduce, reduce, reduce_scatter_block,
//! allgather, bcast, scan, exscan, blocking and nonblocking, in place, and
//! stream-ordered.
//!
//! Inside a node, where the ranks can map each other's memory and do not share a GPU
//! without MPS, they run as peer-memory kernels (`coll/device_peer.rs`: one
//! kernel per call, flags in device memory). Elsewhere, and with a forced host
//! algorithm, the host schedules below run:
//!
//! The same schedules as the host collectives ([`crate::coll`]) run with their buffers
//! on the device: the user's buffers and the algorithm's temporaries are device memory,
//! local copies are `cuMemcpyDtoDAsync` and every reduction is an NVRTC-compiled kernel
//! ([`rankwire_gpu::reduce`]) on the runtime's stream of the buffers' device, never a
//! host loop. Transfers go over the GPU point-to-point path (CUDA IPC inside a node,
//! staged through host memory otherwise). A round's kernels are enqueued without
//! waiting; its receives that do not touch the slices those kernels use are posted at
//! once, and its sends (which the peer reads) are posted when the stream has drained.
//! Copies into device memory that the engine makes for receives are enqueued on the
//! same stream, after the kernels. The call completes when its last kernel has
//! finished.
//!
//! Temporaries come from the engine's pool ([`rankwire_gpu::TmpPool`], shared with CUDA
//! IPC staging) of `cuMemAlloc` buffers (IPC-exportable, so peers map them once and hit
//! their IPC cache on later calls) and pinned host buffers, bounded by
//! `RANKWIRE_GPU_TMP_CACHE` bytes of idle buffers of each kind (default 2 GiB; buffers
//! over the bound are freed).
//!
//! # Numerics
//! Results are bitwise identical on every rank (the host schedules' guarantee: each
//! block is combined by one rank in a fixed order, or both partners evaluate the same
//! expression, and kernels use no FMA contraction). `f16`/`bf16` are combined in `f32`.
//! On the schedules they are rounded to the storage type after each combine step (one
//! rounding per step, `p − 1` per element for a ring at `p` ranks: the schedules move
//! elements in their storage type between ranks); the staged small-message allreduce
//! reduces all `p` inputs in one kernel and rounds once.
//!
//! # Buffers
//! Both buffers must be device memory of the same device. Buffers from
//! [`rankwire_gpu::DeviceBuffer::alloc`] (`cuMemAlloc`) are mapped by peers through CUDA
//! IPC; stream-ordered pool memory (`cuMemAllocAsync`, cudarc's allocator) is first
//! copied on the device into an IPC-capable staging buffer (one extra device copy).

use std::sync::{Arc, OnceLock};

use rankwire_gpu::{DType, PtrKind, RedOp, Stream, TmpPool};
use rankwire_transports::MemoryKind;

use crate::coll::check::Spec;
use crate::coll::device_hier::Hier;
use crate::coll::device_peer::{self, PeerColl, PeerGroup};
use crate::coll::ops::{Datatype, Op};
use crate::coll::sched::{Buf, Builder, CopyDir, DevOps, Slice, UserBufs};
use crate::coll::select::Algo;
use crate::coll::{
    CollKind, CollRequest, allgather, allreduce, args, bcast, reduce, reduce_scatter, scan,
};
use crate::comm::Communicator;
use crate::device::{DeviceMemory, DeviceMemoryMut};
use crate::error::{Error, Result};

/// Element types the device collectives reduce.
fn dtype_of(dt: Datatype) -> Result<DType> {
    Ok(match dt {
        Datatype::F16 => DType::F16,
        Datatype::BF16 => DType::BF16,
        Datatype::F32 => DType::F32,
        Datatype::F64 => DType::F64,
        Datatype::I8 => DType::I8,
        Datatype::U8 => DType::U8,
        Datatype::I16 => DType::I16,
        Datatype::U16 => DType::U16,
        Datatype::I32 => DType::I32,
        Datatype::I64 => DType::I64,
        Datatype::U32 => DType::U32,
        Datatype::U64 => DType::U64,
        other => {
            return Err(Error::usage(format!(
                "collectives on device buffers support f16, bf16, f32, f64 and the 8- to \
                 64-bit integers, not {other:?}; copy to the host for other types"
            )));
        }
    })
}

fn op_of(op: Op, dt: DType) -> Result<RedOp> {
    let r = match op {
        Op::Sum => RedOp::Sum,
        Op::Prod => RedOp::Prod,
        Op::Min => RedOp::Min,
        Op::Max => RedOp::Max,
        Op::BitAnd => RedOp::Band,
        Op::BitOr => RedOp::Bor,
        Op::BitXor => RedOp::Bxor,
        other => {
            return Err(Error::usage(format!(
                "{other} is not available on device buffers (sum, prod, min, max, band, bor, \
                 bxor are)"
            )));
        }
    };
    if !r.valid_for(dt) {
        return Err(Error::usage(format!(
            "{op} is defined for integer types only, not {dt} (MPI 4.1 §6.9.2)"
        )));
    }
    Ok(r)
}

fn gpu_err(what: &str, e: rankwire_gpu::GpuError) -> Error {
    Error::Gpu(format!("{what}: {e}"))
}

/// Device ordinal of `len` bytes at `addr`, which must be device memory.
fn device_of(what: &str, name: &str, addr: u64, len: usize) -> Result<Option<i32>> {
    if len == 0 {
        return Ok(None);
    }
    let info = rankwire_gpu::classify_addr(addr, len)
        .map_err(|e| gpu_err(&format!("{what}: cannot classify {name}"), e))?;
    match info.kind {
        PtrKind::Device { ordinal } => Ok(Some(ordinal)),
        other => Err(Error::usage(format!(
            "{what}: {name} at {addr:#x} is {other:?} memory, not device memory; use the \
             host collective for host buffers"
        ))),
    }
}

/// The one device of both buffers.
fn common_device(what: &str, send: (u64, usize), recv: (u64, usize)) -> Result<i32> {
    let a = device_of(what, "the send buffer", send.0, send.1)?;
    let b = device_of(what, "the receive buffer", recv.0, recv.1)?;
    match (a, b) {
        (Some(x), Some(y)) if x != y => Err(Error::usage(format!(
            "{what}: the send buffer is on device {x} and the receive buffer on device {y}; \
             both must be on one device"
        ))),
        (Some(x), _) | (_, Some(x)) => Ok(x),
        (None, None) => Ok(0),
    }
}

/// The device of a call's buffers: [`common_device`] of both, or, for an in-place
/// call, of its one buffer (named "the buffer" in errors).
fn call_device(what: &str, in_place: bool, send: (u64, usize), recv: (u64, usize)) -> Result<i32> {
    if in_place {
        Ok(device_of(what, "the buffer", recv.0, recv.1)?.unwrap_or(0))
    } else {
        common_device(what, send, recv)
    }
}

/// Check-descriptor code of the staged small-message allreduce (outside the host
/// algorithms' codes).
const STAGED_CODE: u32 = 100;
/// Check-descriptor code of the peer-memory algorithms.
const PEER_CODE: u32 = 101;

/// Process-wide settings of the device collectives, read from the environment once.
struct Settings {
    /// `RANKWIRE_GPU_ALLREDUCE_STAGED_MAX` (bytes), if set.
    staged_max: Option<usize>,
    /// `RANKWIRE_GPU_WAIT=sync`.
    wait_sync: bool,
    /// `RANKWIRE_GPU_TMP_CACHE` (bytes of idle temporaries kept, per cache).
    tmp_cache_limit: usize,
}

fn settings() -> &'static Settings {
    static S: OnceLock<Settings> = OnceLock::new();
    S.get_or_init(|| {
        // Checked at init (`crate::settings`).
        let num = |k: &str| {
            crate::settings::raw(k)
                .and_then(|v| crate::settings::parse_bytes(&v))
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        Settings {
            staged_max: num("RANKWIRE_GPU_ALLREDUCE_STAGED_MAX"),
            wait_sync: crate::settings::raw("RANKWIRE_GPU_WAIT")
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("sync")),
            tmp_cache_limit: num("RANKWIRE_GPU_TMP_CACHE").unwrap_or(2 << 30),
        }
    })
}

/// Largest allreduce (bytes) that takes the staged small-message algorithm at `p`
/// ranks: `RANKWIRE_GPU_ALLREDUCE_STAGED_MAX`, default 512 KiB × p (0 turns it off).
/// The default is the measured crossover on one H200 shared by the ranks
/// (2026-11-29): staged beat the schedules up to 1 MiB at 2 ranks and up to 2 MiB at
/// 4 ranks, and lost from 2 MiB and 4 MiB on.
fn staged_max(p: usize) -> usize {
    settings().staged_max.unwrap_or(p.saturating_mul(512 << 10))
}

/// Small-message allreduce on device buffers, built for the fewest device operations
/// (each costs a GPU context switch when ranks share a GPU): copy the `bytes` of input
/// (from `input`: the send buffer, or the receive buffer in place) into a pinned host
/// temporary (one device-to-host copy), exchange blocks with every
/// other rank in one round over the host path, then one kernel reads the `p` blocks
/// straight from the pinned memory and reduces them in rank order on the device
/// (`((b0 ∘ b1) ∘ b2) …`, accumulating `f16`/`bf16` in `f32` with one final rounding).
/// Every rank evaluates the same expression on the same bits, so results are bitwise
/// identical.
fn staged_allreduce(b: &mut Builder, bytes: usize, input: Buf) {
    let (me, p) = (b.rank, b.size);
    if bytes == 0 {
        return;
    }
    let h = b.pinned_tmp(p * bytes);
    let blk = |buf: Buf, i: usize| Slice::new(buf, i * bytes, bytes);
    b.copy(Slice::new(input, 0, bytes), blk(h, me));
    b.round();
    for j in (0..p).filter(|&j| j != me) {
        b.recv(j, blk(h, j));
    }
    for j in (0..p).filter(|&j| j != me) {
        b.send(j, blk(h, me));
    }
    b.round();
    b.reduce_rows(
        Slice::new(h, 0, p * bytes),
        p,
        Slice::new(Buf::Recv, 0, bytes),
    );
}

/// Bound of idle bytes of each kind kept by the GPU temporary pool
/// (`RANKWIRE_GPU_TMP_CACHE`, default 2 GiB); the engine builds its
/// [`rankwire_gpu::TmpPool`] with it.
pub(crate) fn tmp_cache_limit() -> usize {
    settings().tmp_cache_limit
}

/// [`DevOps`] on one CUDA device, in the runtime's stream of that device.
struct CudaOps {
    device: i32,
    /// Temporaries come from the engine's pool.
    pool: Arc<TmpPool>,
    stream: &'static Stream,
    red: Option<(DType, RedOp)>,
    block: bool,
    /// The peer-memory group whose kernel this schedule launches, and the call's
    /// ticket: the work is done once the ticket is launched and the stream idle; the
    /// group's status word is checked then.
    peer: Option<(Arc<std::sync::Mutex<PeerGroup>>, u64)>,
}

impl CudaOps {
    fn check_peer(&self) -> Result<()> {
        match &self.peer {
            Some((g, _)) => device_peer::check_group(g, "collective on device buffers"),
            None => Ok(()),
        }
    }

    fn peer_launched(&self) -> bool {
        self.peer
            .as_ref()
            .is_none_or(|(g, t)| g.lock().unwrap_or_else(|e| e.into_inner()).launched(*t))
    }
}

impl Drop for CudaOps {
    fn drop(&mut self) {
        // A call that ended before its turn to launch gives its ticket up, so later
        // calls are not held back (and the group reports itself failed).
        if let Some((g, t)) = &self.peer {
            g.lock().unwrap_or_else(|e| e.into_inner()).skip(*t);
        }
    }
}

impl DevOps for CudaOps {
    fn kind(&self) -> MemoryKind {
        MemoryKind::Cuda {
            device: self.device,
        }
    }
    fn alloc(&mut self, len: usize) -> Result<u64> {
        self.pool
            .take_device(self.device, len)
            .map_err(|e| gpu_err(&format!("collective temporary of {len} bytes"), e))
    }
    fn release(&mut self, addr: u64, _len: usize) {
        self.pool.give_device(addr);
    }
    fn alloc_pinned(&mut self, len: usize) -> Result<u64> {
        self.pool.take_pinned(len).map_err(|e| {
            gpu_err(
                &format!("pinned host temporary of {len} bytes (check ulimit -l)"),
                e,
            )
        })
    }
    fn release_pinned(&mut self, addr: u64, _len: usize) {
        self.pool.give_pinned(addr);
    }
    fn reduce_rows(&mut self, dst: u64, src: u64, len: usize, rows: usize) -> Result<()> {
        let Some((dt, op)) = self.red else {
            return Err(Error::Gpu(
                "reduction step in a collective without an operation".into(),
            ));
        };
        let rows32 =
            u32::try_from(rows).map_err(|_| Error::Gpu(format!("{rows} rows in one reduction")))?;
        // SAFETY: the schedule checked dst is device memory of `len` bytes and src
        // `rows·len` bytes of device or pinned host memory, both live until the
        // schedule has seen the stream drain.
        unsafe {
            rankwire_gpu::reduce_rows_async(dt, op, dst, src, len / dt.size(), rows32, self.stream)
        }
        .map_err(|e| gpu_err(&format!("{op} row kernel on {dt}"), e))
    }
    fn copy(&mut self, dst: u64, src: u64, len: usize, dir: CopyDir) -> Result<()> {
        // SAFETY: the schedule checked both slices lie in live buffers (user buffers
        // borrowed by the request, cached device temporaries, or host temporaries the
        // schedule owns until it ends, after the stream has drained).
        unsafe {
            match dir {
                CopyDir::DtoD => rankwire_gpu::memcpy_dtod_async(dst, src, len, self.stream),
                CopyDir::DtoH => {
                    rankwire_gpu::memcpy_dtoh_async(dst as *mut u8, src, len, self.stream)
                }
                CopyDir::HtoD => {
                    rankwire_gpu::memcpy_htod_async(dst, src as *const u8, len, self.stream)
                }
            }
        }
        .map_err(|e| gpu_err("copy in a collective on device buffers", e))
    }
    fn reduce(&mut self, dst: u64, a: u64, b: u64, len: usize) -> Result<()> {
        let Some((dt, op)) = self.red else {
            return Err(Error::Gpu(
                "reduction step in a collective without an operation".into(),
            ));
        };
        // SAFETY: as in copy; dst equals a or b (checked by the schedule).
        unsafe { rankwire_gpu::reduce_async(dt, op, dst, a, b, len / dt.size(), self.stream) }
            .map_err(|e| gpu_err(&format!("{op} kernel on {dt}"), e))
    }
    fn poll_idle(&mut self) -> Result<bool> {
        if !self.peer_launched() {
            return Ok(false);
        }
        let idle = self
            .stream
            .is_idle()
            .map_err(|e| gpu_err("collective kernels", e))?;
        if idle {
            self.check_peer()?;
        }
        Ok(idle)
    }
    fn sync(&mut self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| gpu_err("collective kernels", e))?;
        self.check_peer()
    }
    fn block_when_idle(&self) -> bool {
        // A peer-memory call may wait for an earlier call's launch, which only
        // progress brings: poll.
        self.block && self.peer.is_none()
    }
}

/// `RANKWIRE_GPU_WAIT`: `poll` (default) polls the stream with `cuStreamQuery` from
/// the progress loop; `sync` waits with `cuStreamSynchronize` when a collective has
/// nothing else to wait for. Measured on one H200 shared by 2 ranks (2026-11-29),
/// polling gave 200–210 µs per small allreduce, blocking 240–330 µs.
fn gpu_wait_blocks() -> bool {
    settings().wait_sync
}

fn dev_bufs(
    pool: Arc<TmpPool>,
    send: (u64, usize),
    recv: (u64, usize),
    device: i32,
    red: Option<(DType, RedOp)>,
    peer: Option<(Arc<std::sync::Mutex<PeerGroup>>, u64)>,
) -> Result<UserBufs> {
    let stream = Stream::runtime(device).map_err(|e| gpu_err("runtime stream", e))?;
    if peer.is_some() {
        rankwire_gpu::peer_prepare(device, red)
            .map_err(|e| gpu_err("compiling the peer-memory kernels", e))?;
    }
    if let Some((dt, _)) = red {
        rankwire_gpu::reduce::prepare(device, dt)
            .map_err(|e| gpu_err(&format!("compiling the {dt} reduction kernels"), e))?;
    }
    Ok(UserBufs {
        send: (send.0 as *const u8, send.1),
        recv: (recv.0 as *mut u8, recv.1),
        reducer: None,
        dev: Some(Box::new(CudaOps {
            device,
            pool,
            stream,
            red,
            block: gpu_wait_blocks(),
            peer,
        })),
    })
}

/// Address and byte length of a user buffer.
#[derive(Clone, Copy)]
struct Region {
    addr: u64,
    bytes: usize,
}

impl Region {
    fn of<B: DeviceMemory + ?Sized>(b: &B) -> Result<Region> {
        let (addr, bytes) = b.device_region()?;
        Ok(Region { addr, bytes })
    }
    fn of_mut<B: DeviceMemoryMut + ?Sized>(b: &mut B) -> Result<Region> {
        let (addr, bytes) = b.device_region_mut()?;
        Ok(Region { addr, bytes })
    }
    fn ptr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.bytes
    }
}

fn elems(what: &str, name: &str, bytes: usize, dt: DType) -> Result<usize> {
    if !bytes.is_multiple_of(dt.size()) {
        return Err(Error::usage(format!(
            "{what}: {name} holds {bytes} bytes, not a whole number of {dt} elements ({} bytes \
             each)",
            dt.size()
        )));
    }
    Ok(bytes / dt.size())
}

impl Communicator {
    /// The engine's GPU temporary pool (lent to this collective's schedule).
    fn gpu_pool(&self) -> Arc<TmpPool> {
        self.inner.lock().gpu_pool.clone()
    }

    /// The peer-memory group and this call's launch ticket when the call takes the
    /// peer-memory path (`usable`, valid arguments, and a group for `device`), with the
    /// check descriptor's algorithm set to it. Sets the group up (collectively) on the
    /// first device collective whatever this rank's arguments: every rank takes part.
    fn peer_call(
        &self,
        device: i32,
        spec: &mut Spec,
        usable: bool,
    ) -> Result<Option<(Arc<std::sync::Mutex<PeerGroup>>, u64)>> {
        let group = self.peer_group(device)?;
        let Some(g) = group.filter(|_| usable && spec.invalid.is_none()) else {
            return Ok(None);
        };
        spec.algo = PEER_CODE;
        let t = g.lock().unwrap_or_else(|e| e.into_inner()).ticket();
        Ok(Some((g, t)))
    }

    /// Allreduce on device buffers (MPI_Allreduce, MPI 4.1 §6.9.6): every rank's
    /// `send` (elements of `dtype`) reduced with `op` into every rank's `recv`, by GPU
    /// kernels (see [`crate::coll::device`](self) for paths and numerics).
    ///
    /// Shape: `send.len() == recv.len()` bytes, a multiple of the element size, equal on
    /// every rank; both on one device. Algorithm: up to
    /// `RANKWIRE_GPU_ALLREDUCE_STAGED_MAX` bytes (default 512 KiB × ranks) the staged
    /// small-message path (one copy to pinned memory, one exchange round, one kernel);
    /// above it the host allreduce's schedules (recursive doubling, Rabenseifner or ring
    /// by the cost model). `RANKWIRE_ALLREDUCE_ALGO` forces a schedule and turns the
    /// staged path off.
    ///
    /// # Errors
    /// [`Error::Usage`] for lengths that differ, host buffers, buffers on two devices,
    /// a type or op the kernels lack (bitwise ops on floats, `MINLOC`, logical ops);
    /// [`Error::Gpu`] when a copy, kernel compile (NVRTC) or launch fails;
    /// [`Error::Collective`] if ranks disagree on counts or ops; [`Error::Connection`]
    /// if a peer died.
    pub fn allreduce_device<S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        let send = send.device_region()?;
        let recv = recv.device_region_mut()?;
        // SAFETY: both buffers are borrowed for the whole (blocking) call.
        unsafe { self.allreduce_device_blocking(Some(send), recv, dtype, op) }
    }

    /// The blocking allreduce of `send` (`(address, bytes)`) into `recv`, or of `recv` in
    /// place (`send` `None`): node-aware on several nodes, else the peer-memory kernel
    /// waited for directly where it applies, else the nonblocking form's schedule.
    ///
    /// # Safety
    /// Both ranges must be live device memory for the whole call.
    unsafe fn allreduce_device_blocking(
        &self,
        send: Option<(u64, usize)>,
        (rp, rl): (u64, usize),
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        let what = match send {
            Some(_) => "allreduce_device",
            None => "allreduce_device_in_place",
        };
        let (sp, sl) = send.unwrap_or((rp, rl));
        // Ranks on several nodes: node-aware (coll/device_hier.rs), decided from the
        // communicator and the settings only, alike on every rank.
        if let Some(h) = self.node_aware()? {
            // SAFETY: the caller's ranges (equal ones: in place).
            return unsafe { self.node_aware_allreduce(&h, what, (sp, sl), (rp, rl), dtype, op) };
        }
        if sl == rl
            && let (Ok(dt), Ok(device)) = (dtype_of(dtype), common_device("", (sp, sl), (rp, rl)))
            && let Ok(rop) = op_of(op, dt)
            && sl.is_multiple_of(dt.size())
        {
            let c = PeerColl::Allreduce {
                n: sl / dt.size(),
                es: dt.size(),
            };
            let forced = self.st.cfg.allreduce_forced();
            // SAFETY: the caller's ranges; the peer kernels take equal ones in place.
            if unsafe { self.peer_direct(what, c, Some((dt, rop)), sp, rp, sl, forced, device)? } {
                return Ok(());
            }
        }
        self.start_allreduce_device(send, (rp, rl), dtype, op)?
            .wait()
    }

    /// Nonblocking [`Communicator::allreduce_device`] (MPI_Iallreduce). The buffers stay
    /// borrowed until the request completes.
    ///
    /// # Errors
    /// As [`Communicator::allreduce_device`], for the arguments.
    pub fn iallreduce_device<'a, S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let (sp, sl) = send.device_region()?;
        let (rp, rl) = recv.device_region_mut()?;
        // SAFETY: both buffers own their bytes and stay borrowed for 'a.
        unsafe { self.iallreduce_device_raw(sp, sl, rp, rl, dtype, op) }
    }

    /// [`Communicator::iallreduce_device`] on raw device pointers (FFI, cudarc slices):
    /// `send_bytes` at `send` and `recv_bytes` at `recv`.
    ///
    /// # Safety
    /// Both ranges must be live device memory until the request completes; `recv` must
    /// not be accessed meanwhile and must not overlap `send`.
    ///
    /// # Errors
    /// As [`Communicator::allreduce_device`].
    pub unsafe fn iallreduce_device_raw<'a>(
        &self,
        send: u64,
        send_bytes: usize,
        recv: u64,
        recv_bytes: usize,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        self.start_allreduce_device(Some((send, send_bytes)), (recv, recv_bytes), dtype, op)
    }

    /// Starts a device allreduce of `send` (`(address, bytes)`) into `recv`, or of
    /// `recv` in place (`send` `None`: the schedules read the input from the receive
    /// buffer; the peer-memory kernels take the same address for both).
    fn start_allreduce_device<'a>(
        &self,
        send: Option<(u64, usize)>,
        (recv, recv_bytes): (u64, usize),
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let in_place = send.is_none();
        let (w, input_name) = match in_place {
            false => ("allreduce_device", "the send buffer"),
            true => ("allreduce_device_in_place", "the buffer"),
        };
        let input = if in_place { Buf::Recv } else { Buf::Send };
        let (send, send_bytes) = send.unwrap_or((recv, recv_bytes));
        let dt = dtype_of(dtype)?;
        let rop = op_of(op, dt)?;
        let n = elems(w, input_name, send_bytes, dt)?;
        let es = dt.size();
        let p = self.size();
        let algo = self.st.cfg.allreduce(p, send_bytes, true)?;
        let staged = p > 1 && send_bytes <= staged_max(p) && !self.st.cfg.allreduce_forced();
        let mut spec = Spec::uniform(CollKind::Allreduce, None, n, es);
        spec.algo = if staged { STAGED_CODE } else { algo.code() };
        (spec.op_code, spec.dtype_code) = (op.code(), dtype.code());
        spec.invalid = (recv_bytes != send_bytes).then(|| {
            Error::usage(format!(
                "{w}: the receive buffer holds {recv_bytes} bytes but the send buffer \
                 {send_bytes}; they must be equal"
            ))
        });
        let device = call_device(w, in_place, (send, send_bytes), (recv, recv_bytes))?;
        let peer = self.peer_call(
            device,
            &mut spec,
            send_bytes > 0 && !self.st.cfg.allreduce_forced(),
        )?;
        let user = dev_bufs(
            self.gpu_pool(),
            (send, send_bytes),
            (recv, recv_bytes),
            device,
            Some((dt, rop)),
            peer.clone(),
        )?;
        let stream = Stream::runtime(device).map_err(|e| gpu_err("runtime stream", e))?;
        self.start_coll_device(spec, user, |b| {
            if let Some((g, t)) = peer {
                let c = PeerColl::Allreduce { n, es };
                device_peer::build(b, w, g, c, Some((dt, rop)), send, recv, stream, t)
            } else if staged {
                staged_allreduce(b, n * es, input)
            } else {
                allreduce::build_from(b, algo, n, es, input)
            }
        })
    }

    /// Reduce on device buffers (MPI_Reduce, MPI 4.1 §6.9.1) into `recv` on `root`
    /// (`recv` is not touched on other ranks; pass any buffer there, e.g. an empty one).
    ///
    /// # Errors
    /// As [`Communicator::allreduce_device`], and [`Error::Usage`] for a bad root.
    pub fn reduce_device<S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        dtype: Datatype,
        op: Op,
        root: usize,
    ) -> Result<()> {
        let (sp, sl) = send.device_region()?;
        let (rp, rl) = recv.device_region_mut()?;
        let at_root = self.rank() == root;
        if root < self.size()
            && (!at_root || rl == sl)
            && let (Ok(dt), Ok(device)) = (
                dtype_of(dtype),
                common_device("", (sp, sl), (rp, if at_root { rl } else { 0 })),
            )
            && let Ok(rop) = op_of(op, dt)
            && sl.is_multiple_of(dt.size())
        {
            let c = PeerColl::Reduce {
                n: sl / dt.size(),
                es: dt.size(),
                root,
            };
            // SAFETY: both buffers are borrowed for the whole (blocking) call.
            if unsafe {
                self.peer_direct(
                    "reduce_device",
                    c,
                    Some((dt, rop)),
                    sp,
                    rp,
                    sl,
                    false,
                    device,
                )?
            } {
                return Ok(());
            }
        }
        self.ireduce_device(send, recv, dtype, op, root)?.wait()
    }

    /// Nonblocking [`Communicator::reduce_device`] (MPI_Ireduce).
    ///
    /// # Errors
    /// As [`Communicator::reduce_device`], for the arguments.
    pub fn ireduce_device<'a, S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        dtype: Datatype,
        op: Op,
        root: usize,
    ) -> Result<CollRequest<'a>> {
        let (s, r) = (Region::of(send)?, Region::of_mut(recv)?);
        self.start_reduce_device(Some(s), r, dtype, op, root)
    }

    /// Starts a device reduce of `send` into `recv` (used on `root` only), or of `recv`
    /// in place (`send` `None`: `recv` is the input on every rank and is written on
    /// `root` only).
    fn start_reduce_device<'a>(
        &self,
        send: Option<Region>,
        recv: Region,
        dtype: Datatype,
        op: Op,
        root: usize,
    ) -> Result<CollRequest<'a>> {
        let in_place = send.is_none();
        let (w, input_name) = match in_place {
            false => ("reduce_device", "the send buffer"),
            true => ("reduce_device_in_place", "the buffer"),
        };
        let input = if in_place { Buf::Recv } else { Buf::Send };
        let send = send.unwrap_or(recv);
        let dt = dtype_of(dtype)?;
        let rop = op_of(op, dt)?;
        let n = elems(w, input_name, send.len(), dt)?;
        let es = dt.size();
        let p = self.size();
        let mut spec = Spec::uniform(CollKind::Reduce, Some(root), n, es);
        (spec.op_code, spec.dtype_code) = (op.code(), dtype.code());
        let at_root = self.rank() == root;
        spec.invalid = args::first([
            args::root(w, root, p),
            (at_root && !in_place)
                .then(|| args::len(w, "the receive buffer", recv.len() / es, n))
                .flatten(),
        ]);
        // In place the buffer is every rank's input (its device counts on every rank);
        // out of place the receive buffer matters at the root only.
        let rl = if at_root || in_place { recv.len() } else { 0 };
        let device = call_device(w, in_place, (send.ptr(), send.len()), (recv.ptr(), rl))?;
        let peer = self.peer_call(device, &mut spec, n > 0)?;
        let user = dev_bufs(
            self.gpu_pool(),
            (send.ptr(), send.len()),
            (recv.ptr(), recv.len()),
            device,
            Some((dt, rop)),
            peer.clone(),
        )?;
        let stream = Stream::runtime(device).map_err(|e| gpu_err("runtime stream", e))?;
        let (sp, rp) = (send.ptr(), recv.ptr());
        self.start_coll_device(spec, user, |b| {
            if let Some((g, t)) = peer {
                let c = PeerColl::Reduce { n, es, root };
                device_peer::build(b, w, g, c, Some((dt, rop)), sp, rp, stream, t)
            } else {
                reduce_schedule(b, n * es, root, input);
            }
        })
    }

    /// Broadcast of a device buffer from `root` (MPI_Bcast, MPI 4.1 §6.4); `buf.len()`
    /// bytes, equal on every rank.
    ///
    /// # Errors
    /// [`Error::Usage`] for a bad root or a host buffer; [`Error::Gpu`],
    /// [`Error::Collective`], [`Error::Connection`] as for
    /// [`Communicator::allreduce_device`].
    pub fn bcast_device<B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &mut B,
        root: usize,
    ) -> Result<()> {
        let (bp, bl) = buf.device_region_mut()?;
        if root < self.size()
            && let Ok(device) = common_device("", (0, 0), (bp, bl))
        {
            let c = PeerColl::Bcast { n: bl, root };
            // SAFETY: the buffer is borrowed for the whole (blocking) call.
            if unsafe { self.peer_direct("bcast_device", c, None, bp, bp, bl, false, device)? } {
                return Ok(());
            }
        }
        self.ibcast_device(buf, root)?.wait()
    }

    /// Nonblocking [`Communicator::bcast_device`] (MPI_Ibcast).
    ///
    /// # Errors
    /// As [`Communicator::bcast_device`], for the arguments.
    pub fn ibcast_device<'a, B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &'a mut B,
        root: usize,
    ) -> Result<CollRequest<'a>> {
        const W: &str = "bcast_device";
        let buf = Region::of_mut(buf)?;
        let (p, n) = (self.size(), buf.len());
        let algo = self.st.cfg.bcast(p, n)?;
        let mut spec = Spec::uniform(CollKind::Bcast, Some(root), n, 1);
        spec.algo = algo.code();
        spec.invalid = args::root(W, root, p);
        let device = common_device(W, (0, 0), (buf.ptr(), n))?;
        let peer = self.peer_call(device, &mut spec, n > 0)?;
        let user = dev_bufs(
            self.gpu_pool(),
            (0, 0),
            (buf.ptr(), n),
            device,
            None,
            peer.clone(),
        )?;
        let stream = Stream::runtime(device).map_err(|e| gpu_err("runtime stream", e))?;
        let bp = buf.ptr();
        self.start_coll_device(spec, user, |b| {
            if let Some((g, t)) = peer {
                device_peer::build(
                    b,
                    W,
                    g,
                    PeerColl::Bcast { n, root },
                    None,
                    bp,
                    bp,
                    stream,
                    t,
                )
            } else {
                bcast::build(b, algo, Buf::Recv, n, 1, root)
            }
        })
    }

    /// Allgather of device buffers (MPI_Allgather, MPI 4.1 §6.7): every rank's `send`
    /// (k bytes, equal on every rank) lands at offset `i·k` of every rank's `recv`
    /// (`size()·k` bytes).
    ///
    /// # Errors
    /// As [`Communicator::bcast_device`], and [`Error::Usage`] for a wrong receive
    /// length.
    pub fn allgather_device<S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
    ) -> Result<()> {
        let (sp, sl) = send.device_region()?;
        let (rp, rl) = recv.device_region_mut()?;
        if rl == sl * self.size()
            && let Ok(device) = common_device("", (sp, sl), (rp, rl))
        {
            let c = PeerColl::Allgather { k: sl };
            // SAFETY: both buffers are borrowed for the whole (blocking) call.
            if unsafe { self.peer_direct("allgather_device", c, None, sp, rp, sl, false, device)? }
            {
                return Ok(());
            }
        }
        self.iallgather_device(send, recv)?.wait()
    }

    /// Nonblocking [`Communicator::allgather_device`] (MPI_Iallgather).
    ///
    /// # Errors
    /// As [`Communicator::allgather_device`], for the arguments.
    pub fn iallgather_device<'a, S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
    ) -> Result<CollRequest<'a>> {
        let (s, r) = (Region::of(send)?, Region::of_mut(recv)?);
        self.start_allgather_device(Some(s), r)
    }

    /// Starts a device allgather of `send` into `recv`, or in place (`send` `None`:
    /// this rank's block is already at its place in `recv`; the peer-memory kernels
    /// read it there).
    fn start_allgather_device<'a>(
        &self,
        send: Option<Region>,
        recv: Region,
    ) -> Result<CollRequest<'a>> {
        let p = self.size();
        let in_place = send.is_none();
        let w = match in_place {
            false => "allgather_device",
            true => "allgather_device_in_place",
        };
        let send = send.unwrap_or_else(|| {
            let k = recv.len() / p;
            Region {
                addr: recv.ptr() + (self.rank() * k) as u64,
                bytes: k,
            }
        });
        let k = send.len();
        let algo = self.st.cfg.allgather(p, k)?;
        let mut spec = Spec::uniform(CollKind::Allgather, None, k, 1);
        spec.algo = algo.code();
        spec.invalid = if in_place {
            args::multiple(w, "the buffer", recv.len(), p)
        } else {
            args::len(w, "the receive buffer (bytes)", recv.len(), p * k)
        };
        let device = call_device(w, in_place, (send.ptr(), k), (recv.ptr(), recv.len()))?;
        let peer = self.peer_call(device, &mut spec, k > 0)?;
        let user = dev_bufs(
            self.gpu_pool(),
            (send.ptr(), k),
            (recv.ptr(), recv.len()),
            device,
            None,
            peer.clone(),
        )?;
        let stream = Stream::runtime(device).map_err(|e| gpu_err("runtime stream", e))?;
        let (sp, rp) = (send.ptr(), recv.ptr());
        self.start_coll_device(spec, user, |b| {
            if let Some((g, t)) = peer {
                device_peer::build(b, w, g, PeerColl::Allgather { k }, None, sp, rp, stream, t)
            } else {
                allgather::build_from(b, algo, k, 1, in_place)
            }
        })
    }

    /// Reduce-scatter with equal blocks on device buffers (MPI_Reduce_scatter_block,
    /// MPI 4.1 §6.10.1): `send` holds `size()` blocks of `recv.len()` bytes; rank `i`
    /// gets block `i` of the element-wise reduction.
    ///
    /// # Errors
    /// As [`Communicator::allreduce_device`].
    pub fn reduce_scatter_block_device<S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        let (sp, sl) = send.device_region()?;
        let (rp, rl) = recv.device_region_mut()?;
        if sl == rl * self.size()
            && let (Ok(dt), Ok(device)) = (dtype_of(dtype), common_device("", (sp, sl), (rp, rl)))
            && let Ok(rop) = op_of(op, dt)
            && rl.is_multiple_of(dt.size())
        {
            let c = PeerColl::ReduceScatterBlock {
                k: rl / dt.size(),
                es: dt.size(),
            };
            // SAFETY: both buffers are borrowed for the whole (blocking) call.
            if unsafe {
                self.peer_direct(
                    "reduce_scatter_block_device",
                    c,
                    Some((dt, rop)),
                    sp,
                    rp,
                    rl,
                    false,
                    device,
                )?
            } {
                return Ok(());
            }
        }
        self.ireduce_scatter_block_device(send, recv, dtype, op)?
            .wait()
    }

    /// Nonblocking [`Communicator::reduce_scatter_block_device`]
    /// (MPI_Ireduce_scatter_block).
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter_block_device`], for the arguments.
    pub fn ireduce_scatter_block_device<
        'a,
        S: DeviceMemory + ?Sized,
        R: DeviceMemoryMut + ?Sized,
    >(
        &self,
        send: &'a S,
        recv: &'a mut R,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let (s, r) = (Region::of(send)?, Region::of_mut(recv)?);
        self.start_reduce_scatter_block_device(Some(s), r, dtype, op)
    }

    /// Starts a device reduce-scatter of `send` into `recv`, or in place (`send`
    /// `None`: `recv` holds the `size()` input blocks, and block 0 gets the result). The
    /// in-place form runs the host schedule (its input is read before its first block is
    /// written), never the peer-memory kernels: peers read a rank's input while it
    /// writes its result.
    fn start_reduce_scatter_block_device<'a>(
        &self,
        send: Option<Region>,
        recv: Region,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let dt = dtype_of(dtype)?;
        let rop = op_of(op, dt)?;
        let p = self.size();
        let es = dt.size();
        let in_place = send.is_none();
        let w = match in_place {
            false => "reduce_scatter_block_device",
            true => "reduce_scatter_block_device_in_place",
        };
        // In place the input is the whole buffer and the result its first block.
        let input = send.unwrap_or(recv);
        let k = if in_place {
            elems(w, "the buffer", recv.len(), dt)? / p
        } else {
            elems(w, "the receive buffer", recv.len(), dt)?
        };
        let algo = self.st.cfg.reduce_scatter(p, input.len(), true)?;
        let mut spec = Spec::uniform(CollKind::ReduceScatterBlock, None, k, es);
        spec.algo = algo.code();
        (spec.op_code, spec.dtype_code) = (op.code(), dtype.code());
        spec.invalid = if in_place {
            args::multiple(w, "the buffer", recv.len() / es, p)
        } else {
            args::len(w, "the send buffer", input.len() / es, p * k)
        };
        let device = call_device(
            w,
            in_place,
            (input.ptr(), input.len()),
            (recv.ptr(), recv.len()),
        )?;
        let peer = self.peer_call(device, &mut spec, k > 0 && !in_place)?;
        let send = if in_place {
            Region {
                addr: recv.ptr(),
                bytes: 0,
            }
        } else {
            input
        };
        let user = dev_bufs(
            self.gpu_pool(),
            (send.ptr(), send.len()),
            (recv.ptr(), recv.len()),
            device,
            Some((dt, rop)),
            peer.clone(),
        )?;
        let stream = Stream::runtime(device).map_err(|e| gpu_err("runtime stream", e))?;
        let (sp, rp) = (send.ptr(), recv.ptr());
        let counts = vec![k; p];
        self.start_coll_device(spec, user, |b| {
            if let Some((g, t)) = peer {
                let c = PeerColl::ReduceScatterBlock { k, es };
                device_peer::build(b, w, g, c, Some((dt, rop)), sp, rp, stream, t)
            } else {
                reduce_scatter::build_from(b, algo, &counts, es, in_place)
            }
        })
    }
}

/// Scan and exscan on device buffers (MPI 4.1 §6.11), blocking and nonblocking, in
/// place and not. They run the host scan's recursive-doubling schedule
/// (`coll/scan.rs`, MPICH's `MPIR_Scan_intra_recursive_doubling`) with device
/// buffers and temporaries: local copies and combines are kernels on the runtime
/// stream, transfers go over the GPU point-to-point path; no peer-memory kernel. The
/// in-place forms need no extra copy: the schedule reads its input once, before
/// anything is written to the result.
impl Communicator {
    /// Inclusive prefix reduction on device buffers (MPI_Scan): rank `i`'s `recv`
    /// gets `send_0 ∘ … ∘ send_i`, element-wise, combined in rank order.
    ///
    /// Shape: `send.len() == recv.len()` bytes, a multiple of the element size, equal
    /// on every rank; both on one device.
    ///
    /// # Errors
    /// As [`Communicator::allreduce_device`].
    pub fn scan_device<S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        self.iscan_device(send, recv, dtype, op)?.wait()
    }

    /// Nonblocking [`Communicator::scan_device`] (MPI_Iscan).
    ///
    /// # Errors
    /// As [`Communicator::scan_device`], for the arguments.
    pub fn iscan_device<'a, S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let (s, r) = (Region::of(send)?, Region::of_mut(recv)?);
        self.start_scan_device(CollKind::Scan, Some(s), r, dtype, op)
    }

    /// Exclusive prefix reduction on device buffers (MPI_Exscan): rank `i > 0`'s
    /// `recv` gets `send_0 ∘ … ∘ send_{i−1}`; rank 0's `recv` is not written and may be
    /// empty (not significant there, MPI 4.1 §6.11.2).
    ///
    /// # Errors
    /// As [`Communicator::scan_device`].
    pub fn exscan_device<S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &S,
        recv: &mut R,
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        self.iexscan_device(send, recv, dtype, op)?.wait()
    }

    /// Nonblocking [`Communicator::exscan_device`] (MPI_Iexscan).
    ///
    /// # Errors
    /// As [`Communicator::scan_device`], for the arguments.
    pub fn iexscan_device<'a, S: DeviceMemory + ?Sized, R: DeviceMemoryMut + ?Sized>(
        &self,
        send: &'a S,
        recv: &'a mut R,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let (s, r) = (Region::of(send)?, Region::of_mut(recv)?);
        self.start_scan_device(CollKind::Exscan, Some(s), r, dtype, op)
    }

    /// [`Communicator::scan_device`] in place (MPI_Scan with MPI_IN_PLACE): `buf` is
    /// the input and receives the result.
    ///
    /// # Errors
    /// As [`Communicator::scan_device`].
    pub fn scan_device_in_place<B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &mut B,
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        self.iscan_device_in_place(buf, dtype, op)?.wait()
    }

    /// Nonblocking [`Communicator::scan_device_in_place`] (MPI_Iscan with
    /// MPI_IN_PLACE).
    ///
    /// # Errors
    /// As [`Communicator::scan_device`], for the arguments.
    pub fn iscan_device_in_place<'a, B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &'a mut B,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let r = Region::of_mut(buf)?;
        self.start_scan_device(CollKind::Scan, None, r, dtype, op)
    }

    /// [`Communicator::exscan_device`] in place (MPI_Exscan with MPI_IN_PLACE): `buf`
    /// is the input and, on ranks above 0, receives the result; rank 0's is left as it
    /// is.
    ///
    /// # Errors
    /// As [`Communicator::scan_device`].
    pub fn exscan_device_in_place<B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &mut B,
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        self.iexscan_device_in_place(buf, dtype, op)?.wait()
    }

    /// Nonblocking [`Communicator::exscan_device_in_place`] (MPI_Iexscan with
    /// MPI_IN_PLACE).
    ///
    /// # Errors
    /// As [`Communicator::scan_device`], for the arguments.
    pub fn iexscan_device_in_place<'a, B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &'a mut B,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let r = Region::of_mut(buf)?;
        self.start_scan_device(CollKind::Exscan, None, r, dtype, op)
    }

    /// The device scans on raw device pointers (FFI): `send` (`(address, bytes)`) into
    /// `recv`, or `recv` in place (`send` `None`); `exclusive`: exscan. Nonblocking.
    ///
    /// # Safety
    /// Both ranges must be live device memory until the request completes; `recv` must
    /// not be accessed meanwhile and must not overlap `send`.
    ///
    /// # Errors
    /// As [`Communicator::scan_device`].
    pub unsafe fn iscan_device_raw<'a>(
        &self,
        send: Option<(u64, usize)>,
        recv: (u64, usize),
        dtype: Datatype,
        op: Op,
        exclusive: bool,
    ) -> Result<CollRequest<'a>> {
        let region = |(addr, bytes)| Region { addr, bytes };
        let kind = if exclusive {
            CollKind::Exscan
        } else {
            CollKind::Scan
        };
        self.start_scan_device(kind, send.map(region), region(recv), dtype, op)
    }

    /// Starts a device scan (`kind`: `Scan` or `Exscan`) of `send` into `recv`, or of
    /// `recv` in place (`send` `None`).
    fn start_scan_device<'a>(
        &self,
        kind: CollKind,
        send: Option<Region>,
        recv: Region,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let in_place = send.is_none();
        let w = match (kind, in_place) {
            (CollKind::Exscan, false) => "exscan_device",
            (CollKind::Exscan, true) => "exscan_device_in_place",
            (_, false) => "scan_device",
            (_, true) => "scan_device_in_place",
        };
        let dt = dtype_of(dtype)?;
        let rop = op_of(op, dt)?;
        let input = send.unwrap_or(recv);
        let input_name = if in_place {
            "the buffer"
        } else {
            "the send buffer"
        };
        let n = elems(w, input_name, input.len(), dt)?;
        let es = dt.size();
        let mut spec = Spec::uniform(kind, None, n, es);
        (spec.op_code, spec.dtype_code) = (op.code(), dtype.code());
        // Rank 0's receive buffer of an out-of-place exscan is never written and may be
        // empty (MPI 4.1 §6.11.2: not significant there).
        let recv_unused = kind == CollKind::Exscan && self.rank() == 0 && !in_place;
        spec.invalid =
            (recv.len() != input.len() && !(recv_unused && recv.len() == 0)).then(|| {
                Error::usage(format!(
                    "{w}: the receive buffer holds {} bytes but the send buffer {}; they must be \
                 equal",
                    recv.len(),
                    input.len()
                ))
            });
        let device = call_device(
            w,
            in_place,
            (input.ptr(), input.len()),
            (recv.ptr(), recv.len()),
        )?;
        let user = dev_bufs(
            self.gpu_pool(),
            (input.ptr(), if send.is_some() { input.len() } else { 0 }),
            (recv.ptr(), recv.len()),
            device,
            Some((dt, rop)),
            None,
        )?;
        let from = if send.is_some() { Buf::Send } else { Buf::Recv };
        self.start_coll_device(spec, user, |b| {
            scan::build_from(b, kind == CollKind::Exscan, n, es, from)
        })
    }
}

/// In-place and stream-ordered forms of the device collectives.
impl Communicator {
    /// Whether this call takes the peer-memory path (collective on first use: every
    /// rank must ask at the same point, with the same `bytes`).
    fn peer_for(
        &self,
        device: i32,
        bytes: usize,
        forced: bool,
    ) -> Result<Option<Arc<std::sync::Mutex<PeerGroup>>>> {
        if bytes == 0 || forced {
            return Ok(None);
        }
        self.peer_group(device)
    }

    /// The blocking forms' fast path: the scratch-form peer kernel on the runtime
    /// stream, launched and waited for directly (no schedule, no progress loop: the
    /// kernel needs no host message). `false` (nothing done) where it does not apply:
    /// collective check on, nothing to move, a forced host algorithm, no peer path, or
    /// an input above the scratch form. Every rank decides alike.
    #[allow(clippy::too_many_arguments)]
    unsafe fn peer_direct(
        &self,
        what: &str,
        c: PeerColl,
        red: Option<(DType, RedOp)>,
        send: u64,
        recv: u64,
        bytes: usize,
        forced: bool,
        device: i32,
    ) -> Result<bool> {
        if self.st.cfg.check {
            return Ok(false);
        }
        self.inner.check_live()?;
        let Some(g) = self.peer_for(device, bytes, forced)? else {
            return Ok(false);
        };
        rankwire_gpu::peer_prepare(device, red)
            .map_err(|e| gpu_err("compiling the peer-memory kernels", e))?;
        let stream = Stream::runtime(device).map_err(|e| gpu_err("runtime stream", e))?;
        // SAFETY: the caller keeps both ranges live until this call returns, after every
        // block of the kernel is past its memory accesses (the done word, or the stream
        // idle).
        let Some(launched) =
            (unsafe { device_peer::launch_on_stream(&g, what, c, red, send, recv, stream)? })
        else {
            return Ok(false);
        };
        if gpu_wait_blocks() {
            stream
                .synchronize()
                .map_err(|e| gpu_err(&format!("{what}: peer-memory kernel"), e))?;
        } else {
            // SAFETY: `g` (the group and its workspace) lives until this call returns.
            unsafe { launched.wait(stream, what)? };
        }
        device_peer::check_group(&g, what)?;
        // One collective sequence number, as the schedule path takes.
        self.st.next_seq();
        Ok(true)
    }

    /// The node-aware allreduce (`coll/device_hier.rs`) of `send` into `recv` (`(address,
    /// bytes)`; the same range: in place): the arguments checked as the flat forms check
    /// them, then a reduce to each node's first rank, an in-place allreduce among the
    /// node leaders, and a broadcast inside each node.
    ///
    /// # Safety
    /// Both ranges must be live device memory for the whole call.
    unsafe fn node_aware_allreduce(
        &self,
        h: &Hier,
        what: &str,
        (sp, sl): (u64, usize),
        (rp, rl): (u64, usize),
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        let dt = dtype_of(dtype)?;
        op_of(op, dt)?;
        elems(what, "the send buffer", sl, dt)?;
        if sl != rl {
            return Err(Error::usage(format!(
                "{what}: the receive buffer has {rl} bytes and the send buffer {sl}; they \
                 must be equal"
            )));
        }
        common_device(what, (sp, sl), (rp, rl))?;
        let node = h.node(self);
        let leader = node.rank() == 0;
        if sp == rp {
            node.reduce_device_in_place(&mut DevRaw(rp, rl), dtype, op, 0)?;
        } else {
            let out = if leader { rl } else { 0 };
            node.reduce_device(&DevRaw(sp, sl), &mut DevRaw(rp, out), dtype, op, 0)?;
        }
        if let Some(l) = h.leaders(self) {
            l.allreduce_device_in_place(&mut DevRaw(rp, rl), dtype, op)?;
        }
        node.bcast_device(&mut DevRaw(rp, rl), 0)
    }

    /// Run `f` with a device copy of the `bytes` at `buf` (a pooled temporary, filled
    /// and synchronized on the runtime stream first): for the blocking in-place
    /// reduce-scatter (whose peer-memory kernels read every rank's input while the
    /// result is written) and the stream-ordered forms' host fallback.
    unsafe fn with_input_copy(
        &self,
        device: i32,
        buf: u64,
        bytes: usize,
        f: impl FnOnce(u64) -> Result<()>,
    ) -> Result<()> {
        if bytes == 0 {
            return f(buf);
        }
        let pool = self.gpu_pool();
        let tmp = pool
            .take_device(device, bytes)
            .map_err(|e| gpu_err(&format!("in-place temporary of {bytes} bytes"), e))?;
        let stream = Stream::runtime(device).map_err(|e| gpu_err("runtime stream", e))?;
        // SAFETY: tmp has `bytes`; buf is the caller's live device range.
        let copied = unsafe { rankwire_gpu::memcpy_dtod_async(tmp, buf, bytes, stream) }
            .and_then(|()| stream.synchronize())
            .map_err(|e| gpu_err("copying the in-place input", e));
        let r = copied.and_then(|()| f(tmp));
        pool.give_device(tmp);
        r
    }

    /// Allreduce in place on a device buffer (MPI_Allreduce with MPI_IN_PLACE,
    /// MPI 4.1 §6.9.6): `buf` (elements of `dtype`, the same length on every rank) is
    /// both input and result. No extra copy is made: the peer-memory kernels take the
    /// same address for input and output, and the host schedules read the input from
    /// `buf` before they write the result there. Ranks on several nodes take the
    /// node-aware form.
    ///
    /// # Errors
    /// As [`Communicator::allreduce_device`].
    pub fn allreduce_device_in_place<B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &mut B,
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        let r = Region::of_mut(buf)?;
        // SAFETY: `buf` is borrowed exclusively for the whole call.
        unsafe { self.allreduce_device_blocking(None, (r.ptr(), r.len()), dtype, op) }
    }

    /// Nonblocking [`Communicator::allreduce_device_in_place`] (MPI_Iallreduce with
    /// MPI_IN_PLACE): one communicator-wide allreduce over all ranks (no node-aware
    /// form), on the peer-memory kernels or the host schedules, which read the input
    /// from `buf` before writing the result there (no extra copy).
    ///
    /// # Errors
    /// As [`Communicator::allreduce_device`], for the arguments.
    pub fn iallreduce_device_in_place<'a, B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &'a mut B,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let r = Region::of_mut(buf)?;
        self.start_allreduce_device(None, (r.ptr(), r.len()), dtype, op)
    }

    /// Reduce in place (MPI_Reduce with MPI_IN_PLACE at the root, MPI 4.1 §6.9.1):
    /// on `root`, `buf` is input and result; elsewhere it is input only and left
    /// unchanged.
    ///
    /// # Errors
    /// As [`Communicator::reduce_device`].
    pub fn reduce_device_in_place<B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &mut B,
        dtype: Datatype,
        op: Op,
        root: usize,
    ) -> Result<()> {
        let r = Region::of_mut(buf)?;
        self.start_reduce_device(None, r, dtype, op, root)?.wait()
    }

    /// Nonblocking [`Communicator::reduce_device_in_place`] (MPI_Ireduce with
    /// MPI_IN_PLACE at the root).
    ///
    /// # Errors
    /// As [`Communicator::reduce_device`], for the arguments.
    pub fn ireduce_device_in_place<'a, B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &'a mut B,
        dtype: Datatype,
        op: Op,
        root: usize,
    ) -> Result<CollRequest<'a>> {
        let r = Region::of_mut(buf)?;
        self.start_reduce_device(None, r, dtype, op, root)
    }

    /// Allgather in place (MPI_IN_PLACE, MPI 4.1 §6.7): `recv` holds `size()` blocks
    /// of `recv.len() / size()` bytes; rank `i`'s own block is already at block `i`.
    ///
    /// # Errors
    /// As [`Communicator::allgather_device`]; [`Error::Usage`] when the length is not
    /// a multiple of `size()`.
    pub fn allgather_device_in_place<B: DeviceMemoryMut + ?Sized>(
        &self,
        recv: &mut B,
    ) -> Result<()> {
        let r = Region::of_mut(recv)?;
        let p = self.size();
        if !r.len().is_multiple_of(p) {
            return Err(Error::usage(format!(
                "allgather_device_in_place: the buffer holds {} bytes, not a multiple of the \
                 {p} ranks; fix: pass a buffer of size × block bytes, the same block length on \
                 every rank",
                r.len()
            )));
        }
        self.start_allgather_device(None, r)?.wait()
    }

    /// Nonblocking [`Communicator::allgather_device_in_place`] (MPI_Iallgather with
    /// MPI_IN_PLACE).
    ///
    /// # Errors
    /// As [`Communicator::allgather_device_in_place`], for the arguments.
    pub fn iallgather_device_in_place<'a, B: DeviceMemoryMut + ?Sized>(
        &self,
        recv: &'a mut B,
    ) -> Result<CollRequest<'a>> {
        let r = Region::of_mut(recv)?;
        self.start_allgather_device(None, r)
    }

    /// Reduce-scatter with equal blocks in place (MPI_IN_PLACE, MPI 4.1 §6.10.1):
    /// `buf` holds `size()` blocks of `k` elements; afterwards its first `k` elements
    /// are this rank's block of the result and the rest is unspecified (as in MPI).
    /// The input is copied to a pooled temporary first (peers may still read it while
    /// the result is written).
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter_block_device`]; [`Error::Usage`] when the
    /// length is not a multiple of `size()` elements.
    pub fn reduce_scatter_block_device_in_place<B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &mut B,
        dtype: Datatype,
        op: Op,
    ) -> Result<()> {
        let r = Region::of_mut(buf)?;
        let p = self.size();
        let es = dtype_of(dtype)?.size();
        if !r.len().is_multiple_of(p * es) {
            return Err(Error::usage(format!(
                "reduce_scatter_block_device_in_place: the buffer holds {} bytes, not {p} \
                 equal blocks of {dtype:?} elements; fix: pass a buffer of size × block \
                 elements, the same block length on every rank",
                r.len()
            )));
        }
        let device = device_of(
            "reduce_scatter_block_device_in_place",
            "the buffer",
            r.ptr(),
            r.len(),
        )?
        .unwrap_or(0);
        // SAFETY: `buf` is borrowed exclusively for the whole call.
        unsafe {
            self.with_input_copy(device, r.ptr(), r.len(), |tmp| {
                let send = DevRaw(tmp, r.len());
                let mut out = DevRaw(r.ptr(), r.len() / p);
                self.ireduce_scatter_block_device(&send, &mut out, dtype, op)?
                    .wait()
            })
        }
    }

    /// Nonblocking [`Communicator::reduce_scatter_block_device_in_place`]
    /// (MPI_Ireduce_scatter_block with MPI_IN_PLACE). Unlike the blocking form it makes
    /// no copy of the input and never takes the peer-memory kernels: it runs the host
    /// schedule, which reads the input before writing the result into the first block.
    /// Every rank must call this form (as MPI requires `MPI_IN_PLACE` on all ranks or
    /// none): a rank in another form may take the peer-memory path and wait for this
    /// one until the peer-memory timeout.
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter_block_device_in_place`], for the arguments.
    pub fn ireduce_scatter_block_device_in_place<'a, B: DeviceMemoryMut + ?Sized>(
        &self,
        buf: &'a mut B,
        dtype: Datatype,
        op: Op,
    ) -> Result<CollRequest<'a>> {
        let r = Region::of_mut(buf)?;
        self.start_reduce_scatter_block_device(None, r, dtype, op)
    }

    /// Allreduce enqueued on `stream` (the stream-ordered form, like NCCL's
    /// `ncclAllReduce` or MPICH's MPIX stream communicators): `bytes` of `dtype`
    /// elements at `send` reduced into `recv` (`send == recv`: in place), ordered
    /// after the work enqueued on `stream` before the call and before the work after.
    ///
    /// On the peer-memory path with inputs up to one scratch slot
    /// (`RANKWIRE_GPU_PEER_SCRATCH`, default 4 MiB) this is one kernel on `stream`
    /// and the call returns without waiting (the kernel keeps its epoch in device
    /// memory, so it can be captured in a CUDA graph and replayed, on every rank
    /// alike). Otherwise (larger inputs, ranks on several nodes, no peer path) the
    /// call synchronizes `stream`, runs the host-synchronous collective and returns
    /// when it has completed: ordering is kept, but the host waits. A kernel error
    /// (a barrier timeout) is reported by the next device collective on this
    /// communicator. `RANKWIRE_COLL_CHECK` does not check the stream-ordered kernel.
    ///
    /// # Safety
    /// `send` and `recv` must be device memory of `stream`'s device, valid until the
    /// work enqueued on `stream` has completed, and not overlap unless equal; `stream`
    /// must belong to the device's primary context (see
    /// [`rankwire_gpu::Stream::from_raw`]). All ranks must enqueue this
    /// communicator's stream-ordered calls in the same order.
    ///
    /// # Errors
    /// As [`Communicator::allreduce_device`].
    pub unsafe fn allreduce_device_on_stream(
        &self,
        send: u64,
        recv: u64,
        bytes: usize,
        dtype: Datatype,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        const W: &str = "allreduce_device_on_stream";
        let dt = dtype_of(dtype)?;
        let rop = op_of(op, dt)?;
        let n = elems(W, "the buffer", bytes, dt)?;
        let c = PeerColl::Allreduce { n, es: dt.size() };
        // SAFETY: the caller's contract.
        unsafe {
            self.on_stream(
                W,
                c,
                Some((dt, rop)),
                send,
                recv,
                bytes,
                self.st.cfg.allreduce_forced(),
                stream,
                || {
                    if send == recv {
                        self.with_input_copy(stream.device(), send, bytes, |tmp| {
                            self.iallreduce_device_raw(tmp, bytes, recv, bytes, dtype, op)?
                                .wait()
                        })
                    } else {
                        self.iallreduce_device_raw(send, bytes, recv, bytes, dtype, op)?
                            .wait()
                    }
                },
            )
        }
    }

    /// Allgather enqueued on `stream`: `k` bytes at `send` from every rank into
    /// `recv` (`size()·k` bytes). Paths, ordering and errors as
    /// [`Communicator::allreduce_device_on_stream`].
    ///
    /// # Safety
    /// As [`Communicator::allreduce_device_on_stream`], except that `send` and `recv`
    /// must not overlap (there is no in-place form on a stream).
    ///
    /// # Errors
    /// As [`Communicator::allgather_device`].
    pub unsafe fn allgather_device_on_stream(
        &self,
        send: u64,
        k: usize,
        recv: u64,
        stream: &Stream,
    ) -> Result<()> {
        const W: &str = "allgather_device_on_stream";
        let p = self.size();
        // SAFETY: the caller's contract.
        unsafe {
            self.on_stream(
                W,
                PeerColl::Allgather { k },
                None,
                send,
                recv,
                k,
                false,
                stream,
                || {
                    let s = DevRaw(send, k);
                    let mut r = DevRaw(recv, p * k);
                    self.iallgather_device(&s, &mut r)?.wait()
                },
            )
        }
    }

    /// Broadcast of `bytes` at `buf` from `root`, enqueued on `stream`. Paths,
    /// ordering and errors as [`Communicator::allreduce_device_on_stream`].
    ///
    /// # Safety
    /// As [`Communicator::allreduce_device_on_stream`].
    ///
    /// # Errors
    /// As [`Communicator::bcast_device`].
    pub unsafe fn bcast_device_on_stream(
        &self,
        buf: u64,
        bytes: usize,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        const W: &str = "bcast_device_on_stream";
        if root >= self.size() {
            return Err(Error::usage(format!(
                "{W}: root {root} is not a rank of this communicator of {} ranks",
                self.size()
            )));
        }
        let c = PeerColl::Bcast { n: bytes, root };
        // SAFETY: the caller's contract.
        unsafe {
            self.on_stream(W, c, None, buf, buf, bytes, false, stream, || {
                let mut b = DevRaw(buf, bytes);
                self.ibcast_device(&mut b, root)?.wait()
            })
        }
    }

    /// Reduce-scatter with equal blocks enqueued on `stream`: `send` holds `size()`
    /// blocks of `block_bytes`; `recv` (`block_bytes`) gets this rank's block of the
    /// reduction. Paths, ordering and errors as
    /// [`Communicator::allreduce_device_on_stream`].
    ///
    /// # Safety
    /// As [`Communicator::allreduce_device_on_stream`]; `send` and `recv` must not
    /// overlap.
    ///
    /// # Errors
    /// As [`Communicator::reduce_scatter_block_device`].
    pub unsafe fn reduce_scatter_block_device_on_stream(
        &self,
        send: u64,
        recv: u64,
        block_bytes: usize,
        dtype: Datatype,
        op: Op,
        stream: &Stream,
    ) -> Result<()> {
        const W: &str = "reduce_scatter_block_device_on_stream";
        let dt = dtype_of(dtype)?;
        let rop = op_of(op, dt)?;
        let k = elems(W, "the receive block", block_bytes, dt)?;
        let p = self.size();
        let c = PeerColl::ReduceScatterBlock { k, es: dt.size() };
        // SAFETY: the caller's contract.
        unsafe {
            self.on_stream(
                W,
                c,
                Some((dt, rop)),
                send,
                recv,
                block_bytes,
                false,
                stream,
                || {
                    let s = DevRaw(send, p * block_bytes);
                    let mut r = DevRaw(recv, block_bytes);
                    self.ireduce_scatter_block_device(&s, &mut r, dtype, op)?
                        .wait()
                },
            )
        }
    }

    /// Reduce enqueued on `stream`: `bytes` of `dtype` elements at `send` reduced into
    /// `recv` on `root` (`recv` is not touched elsewhere; `send == recv` at the root:
    /// in place). Paths, ordering and errors as
    /// [`Communicator::allreduce_device_on_stream`].
    ///
    /// # Safety
    /// As [`Communicator::allreduce_device_on_stream`].
    ///
    /// # Errors
    /// As [`Communicator::reduce_device`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce_device_on_stream(
        &self,
        send: u64,
        recv: u64,
        bytes: usize,
        dtype: Datatype,
        op: Op,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        const W: &str = "reduce_device_on_stream";
        if root >= self.size() {
            return Err(Error::usage(format!(
                "{W}: root {root} is not a rank of this communicator of {} ranks",
                self.size()
            )));
        }
        let dt = dtype_of(dtype)?;
        let rop = op_of(op, dt)?;
        let n = elems(W, "the buffer", bytes, dt)?;
        let c = PeerColl::Reduce {
            n,
            es: dt.size(),
            root,
        };
        let at_root = self.rank() == root;
        // SAFETY: the caller's contract.
        unsafe {
            self.on_stream(
                W,
                c,
                Some((dt, rop)),
                send,
                recv,
                bytes,
                false,
                stream,
                || {
                    if at_root && send == recv {
                        self.with_input_copy(stream.device(), send, bytes, |tmp| {
                            let s = DevRaw(tmp, bytes);
                            let mut r = DevRaw(recv, bytes);
                            self.ireduce_device(&s, &mut r, dtype, op, root)?.wait()
                        })
                    } else {
                        let s = DevRaw(send, bytes);
                        let mut r = DevRaw(recv, if at_root { bytes } else { 0 });
                        self.ireduce_device(&s, &mut r, dtype, op, root)?.wait()
                    }
                },
            )
        }
    }

    /// The stream-ordered driver: the scratch peer kernel on `stream`, else
    /// synchronize `stream` and run `fallback` (host-synchronous).
    #[allow(clippy::too_many_arguments)]
    unsafe fn on_stream(
        &self,
        what: &str,
        c: PeerColl,
        red: Option<(DType, RedOp)>,
        send: u64,
        recv: u64,
        bytes: usize,
        forced: bool,
        stream: &Stream,
        fallback: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.inner.check_live()?;
        let device = stream.device();
        if let Some(g) = self.peer_for(device, bytes, forced)? {
            rankwire_gpu::peer_prepare(device, red)
                .map_err(|e| gpu_err("compiling the peer-memory kernels", e))?;
            // SAFETY: the caller's contract.
            if unsafe { device_peer::launch_on_stream(&g, what, c, red, send, recv, stream)? }
                .is_some()
            {
                // One collective sequence number, as the schedule path takes.
                self.st.next_seq();
                return Ok(());
            }
        }
        stream
            .synchronize()
            .map_err(|e| gpu_err(&format!("{what}: synchronizing the stream"), e))?;
        fallback()
    }
}

/// A raw device range as [`DeviceMemory`] (the in-place and stream-ordered forms, and
/// the device channels' host route).
pub(crate) struct DevRaw(pub(crate) u64, pub(crate) usize);

// SAFETY: the callers above pass live device ranges they keep borrowed (or, for the
// stream-ordered forms, the caller's contract keeps them live) for the whole call.
unsafe impl DeviceMemory for DevRaw {
    fn device_region(&self) -> Result<(u64, usize)> {
        Ok((self.0, self.1))
    }
}

// SAFETY: as above.
unsafe impl DeviceMemoryMut for DevRaw {
    fn device_region_mut(&mut self) -> Result<(u64, usize)> {
        Ok((self.0, self.1))
    }
}

/// The device reduce's host schedule (no peer memory): a binomial tree of `bytes` from
/// `input` (the send buffer, or the receive buffer in place) into the root's receive
/// buffer (nothing for 0 bytes). Device reductions are commutative.
fn reduce_schedule(b: &mut Builder, bytes: usize, root: usize, input: Buf) {
    if bytes > 0 {
        reduce::binomial(
            b,
            Slice::new(input, 0, bytes),
            Slice::new(Buf::Recv, 0, bytes),
            root,
            true,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::coll::sched::{Builder, Exec, sim};
    use crate::coll::select::{AllgatherAlgo, AllreduceAlgo, BcastAlgo, ReduceScatterAlgo};

    /// A fake device on host memory whose work runs late: enqueued steps execute only
    /// when `poll_idle` is called the second time after them (or on `sync`). A
    /// schedule that posted a transfer before its device work finished would send stale
    /// bytes or have them overwritten, and the results below would be wrong.
    enum Job {
        Copy {
            dst: u64,
            src: u64,
            len: usize,
        },
        Reduce {
            dst: u64,
            a: u64,
            b: u64,
            len: usize,
        },
        Rows {
            dst: u64,
            src: u64,
            len: usize,
            rows: usize,
        },
    }

    struct LateDevice {
        queue: Vec<Job>,
        polls: u32,
        red: Option<(DType, RedOp)>,
        allocs: HashMap<u64, Vec<u128>>,
        waited: Arc<AtomicUsize>,
        block: bool,
    }

    impl LateDevice {
        fn run_all(&mut self) {
            // SAFETY (every read and write below): addresses are of live host buffers of
            // the test, lengths in bounds (checked by the schedule).
            let bytes = |addr: u64, len: usize| unsafe {
                std::slice::from_raw_parts(addr as *const u8, len).to_vec()
            };
            for job in std::mem::take(&mut self.queue) {
                let red = || self.red.expect("reduction without op");
                let (dst, out) = match job {
                    Job::Copy { dst, src, len } => (dst, bytes(src, len)),
                    Job::Reduce { dst, a, b, len } => {
                        let (dt, op) = red();
                        let out = rankwire_gpu::reduce::reduce_host(
                            dt,
                            op,
                            &bytes(a, len),
                            &bytes(b, len),
                        );
                        (dst, out)
                    }
                    Job::Rows {
                        dst,
                        src,
                        len,
                        rows,
                    } => {
                        let (dt, op) = red();
                        let out = rankwire_gpu::reduce::reduce_rows_host(
                            dt,
                            op,
                            &bytes(src, len * rows),
                            rows,
                        );
                        (dst, out)
                    }
                };
                // SAFETY: as above.
                unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), dst as *mut u8, out.len()) };
            }
        }
    }

    impl DevOps for LateDevice {
        fn kind(&self) -> MemoryKind {
            MemoryKind::Host
        }
        fn alloc(&mut self, len: usize) -> Result<u64> {
            let mut v = vec![0xdead_beef_u128; len.div_ceil(16)];
            let addr = v.as_mut_ptr() as u64;
            self.allocs.insert(addr, v);
            Ok(addr)
        }
        fn release(&mut self, addr: u64, _len: usize) {
            assert!(self.queue.is_empty(), "temporary released with work queued");
            self.allocs.remove(&addr);
        }
        fn alloc_pinned(&mut self, len: usize) -> Result<u64> {
            self.alloc(len)
        }
        fn release_pinned(&mut self, addr: u64, len: usize) {
            self.release(addr, len)
        }
        fn copy(&mut self, dst: u64, src: u64, len: usize, _dir: CopyDir) -> Result<()> {
            self.queue.push(Job::Copy { dst, src, len });
            Ok(())
        }
        fn reduce(&mut self, dst: u64, a: u64, b: u64, len: usize) -> Result<()> {
            self.queue.push(Job::Reduce { dst, a, b, len });
            Ok(())
        }
        fn reduce_rows(&mut self, dst: u64, src: u64, len: usize, rows: usize) -> Result<()> {
            self.queue.push(Job::Rows {
                dst,
                src,
                len,
                rows,
            });
            Ok(())
        }
        fn poll_idle(&mut self) -> Result<bool> {
            if self.queue.is_empty() {
                return Ok(true);
            }
            self.polls += 1;
            self.waited.fetch_add(1, Ordering::Relaxed);
            if self.polls.is_multiple_of(2) {
                self.run_all();
                return Ok(true);
            }
            Ok(false)
        }
        fn sync(&mut self) -> Result<()> {
            self.run_all();
            Ok(())
        }
        fn block_when_idle(&self) -> bool {
            self.block
        }
    }

    /// Run one schedule per rank over `LateDevice`s; returns how often a schedule found
    /// the device busy.
    fn run_late(
        sends: &[Vec<i64>],
        recvs: &mut [Vec<i64>],
        red: bool,
        build: impl Fn(&mut Builder),
    ) -> usize {
        let p = sends.len();
        let waited = Arc::new(AtomicUsize::new(0));
        let mut execs: Vec<Exec> = (0..p)
            .map(|r| {
                let mut b = Builder::new(r, p);
                b.set_device_tmps(true);
                build(&mut b);
                let user = UserBufs {
                    send: (sends[r].as_ptr().cast(), sends[r].len() * 8),
                    recv: (recvs[r].as_mut_ptr().cast(), recvs[r].len() * 8),
                    reducer: None,
                    dev: Some(Box::new(LateDevice {
                        queue: Vec::new(),
                        polls: 0,
                        red: red.then_some((DType::I64, RedOp::Sum)),
                        allocs: HashMap::new(),
                        waited: waited.clone(),
                        // Odd sizes wait by blocking when the schedule allows it.
                        block: p % 2 == 1,
                    })),
                };
                b.finish("test", user, sim::ctx(p))
            })
            .collect();
        let mut mail = sim::Mail::default();
        let mut done = vec![false; p];
        let mut idle_passes = 0;
        while !done.iter().all(|&d| d) {
            let mut changed = false;
            for (r, ex) in execs.iter_mut().enumerate() {
                if done[r] {
                    continue;
                }
                let mut net = sim::RankNet {
                    me: r as u32,
                    mail: &mut mail,
                };
                changed |= ex.advance(&mut net);
                if let Some(res) = ex.take_result() {
                    res.expect("schedule failed");
                    done[r] = true;
                }
            }
            idle_passes = if changed { 0 } else { idle_passes + 1 };
            assert!(idle_passes < 8, "schedules deadlocked: {execs:?}");
        }
        waited.load(Ordering::Relaxed)
    }

    fn inputs(p: usize, n: usize) -> Vec<Vec<i64>> {
        (0..p)
            .map(|r| (0..n).map(|i| (r as i64 + 1) * 1000 + i as i64).collect())
            .collect()
    }

    #[test]
    fn device_schedules_wait_for_late_device_work() {
        let mut waited = 0;
        for p in 1..=6 {
            for n in [0usize, 1, 7, 64, 1001] {
                let sends = inputs(p, n);
                let sum: Vec<i64> = (0..n).map(|i| sends.iter().map(|s| s[i]).sum()).collect();
                for algo in [
                    AllreduceAlgo::RecursiveDoubling,
                    AllreduceAlgo::Rabenseifner,
                    AllreduceAlgo::Ring,
                    AllreduceAlgo::ReduceBcast,
                    AllreduceAlgo::Linear,
                    AllreduceAlgo::Exchange,
                ] {
                    let mut recvs = vec![vec![-1i64; n]; p];
                    waited += run_late(&sends, &mut recvs, true, |b| {
                        allreduce::build(b, algo, n, 8)
                    });
                    for (r, v) in recvs.iter().enumerate() {
                        assert_eq!(v, &sum, "allreduce {algo} p={p} n={n} rank {r}");
                    }
                }
                let mut recvs = vec![vec![-1i64; n]; p];
                waited += run_late(&sends, &mut recvs, true, |b| {
                    if b.size == 1 {
                        allreduce::build(b, AllreduceAlgo::Ring, n, 8)
                    } else {
                        staged_allreduce(b, n * 8, Buf::Send)
                    }
                });
                for (r, v) in recvs.iter().enumerate() {
                    assert_eq!(v, &sum, "staged allreduce p={p} n={n} rank {r}");
                }
                // The in-place forms (iallreduce_device_in_place & co without peer
                // memory): the input in the receive buffer, no send buffer.
                let no_send = vec![Vec::new(); p];
                for algo in [
                    AllreduceAlgo::RecursiveDoubling,
                    AllreduceAlgo::Rabenseifner,
                    AllreduceAlgo::Ring,
                    AllreduceAlgo::ReduceBcast,
                    AllreduceAlgo::Linear,
                    AllreduceAlgo::Exchange,
                ] {
                    let mut bufs = sends.clone();
                    waited += run_late(&no_send, &mut bufs, true, |b| {
                        allreduce::build_from(b, algo, n, 8, Buf::Recv)
                    });
                    for (r, v) in bufs.iter().enumerate() {
                        assert_eq!(v, &sum, "allreduce in place {algo} p={p} n={n} rank {r}");
                    }
                }
                if p > 1 {
                    let mut bufs = sends.clone();
                    waited += run_late(&no_send, &mut bufs, true, |b| {
                        staged_allreduce(b, n * 8, Buf::Recv)
                    });
                    for (r, v) in bufs.iter().enumerate() {
                        assert_eq!(v, &sum, "staged allreduce in place p={p} n={n} rank {r}");
                    }
                }
                for root in [0, p - 1] {
                    let mut bufs = sends.clone();
                    waited += run_late(&no_send, &mut bufs, true, |b| {
                        reduce_schedule(b, n * 8, root, Buf::Recv)
                    });
                    for (r, v) in bufs.iter().enumerate() {
                        let want = if r == root { &sum } else { &sends[r] };
                        assert_eq!(v, want, "reduce in place p={p} n={n} root {root} rank {r}");
                    }
                }
                for algo in [
                    AllgatherAlgo::Ring,
                    AllgatherAlgo::Bruck,
                    AllgatherAlgo::RecursiveDoubling,
                ] {
                    if algo == AllgatherAlgo::RecursiveDoubling && !p.is_power_of_two() {
                        continue;
                    }
                    // Rank r's block at its place, the rest poisoned.
                    let mut bufs: Vec<Vec<i64>> = (0..p)
                        .map(|r| {
                            let mut v = vec![-1i64; n * p];
                            v[r * n..(r + 1) * n].copy_from_slice(&sends[r]);
                            v
                        })
                        .collect();
                    waited += run_late(&no_send, &mut bufs, false, |b| {
                        allgather::build_from(b, algo, n * 8, 1, true)
                    });
                    for (r, v) in bufs.iter().enumerate() {
                        assert_eq!(
                            v,
                            &sends.concat(),
                            "allgather in place {algo} p={p} n={n} rank {r}"
                        );
                    }
                }
                for algo in [ReduceScatterAlgo::Ring, ReduceScatterAlgo::ReduceScatterv] {
                    let k = n / p.max(1);
                    let ins = inputs(p, k * p);
                    let mut bufs = ins.clone();
                    let counts = vec![k; p];
                    waited += run_late(&no_send, &mut bufs, true, |b| {
                        reduce_scatter::build_from(b, algo, &counts, 8, true)
                    });
                    for (r, v) in bufs.iter().enumerate() {
                        let want: Vec<i64> = (r * k..(r + 1) * k)
                            .map(|i| ins.iter().map(|s| s[i]).sum())
                            .collect();
                        assert_eq!(
                            &v[..k],
                            &want[..],
                            "reduce_scatter in place {algo} p={p} k={k} rank {r}"
                        );
                    }
                }
                // The device reduce's schedule (reduce_device / ireduce_device without
                // peer memory): only the root's output is written.
                for root in [0, p - 1, p / 2] {
                    let mut recvs = vec![vec![-1i64; n]; p];
                    waited += run_late(&sends, &mut recvs, true, |b| {
                        reduce_schedule(b, n * 8, root, Buf::Send)
                    });
                    for (r, v) in recvs.iter().enumerate() {
                        if r == root {
                            assert_eq!(v, &sum, "reduce p={p} n={n} root {root}");
                        } else {
                            assert!(v.iter().all(|&x| x == -1), "reduce wrote rank {r}");
                        }
                    }
                }
                // The device scan's schedule (scan_device & co), out of place and in
                // place (the input in the receive buffer, no send buffer).
                for exclusive in [false, true] {
                    for in_place in [false, true] {
                        let mut recvs = if in_place {
                            sends.clone()
                        } else {
                            vec![vec![-1i64; n]; p]
                        };
                        let from = if in_place { Buf::Recv } else { Buf::Send };
                        let s = if in_place { &no_send } else { &sends };
                        waited += run_late(s, &mut recvs, true, |b| {
                            scan::build_from(b, exclusive, n, 8, from)
                        });
                        for (r, v) in recvs.iter().enumerate() {
                            let upto = if exclusive { r } else { r + 1 };
                            let want: Vec<i64> = if exclusive && r == 0 {
                                if in_place {
                                    sends[0].clone()
                                } else {
                                    vec![-1; n]
                                }
                            } else {
                                (0..n)
                                    .map(|i| sends[..upto].iter().map(|s| s[i]).sum())
                                    .collect()
                            };
                            assert_eq!(
                                v, &want,
                                "scan exclusive={exclusive} in_place={in_place} p={p} n={n} rank {r}"
                            );
                        }
                    }
                }
                for algo in [ReduceScatterAlgo::Ring, ReduceScatterAlgo::ReduceScatterv] {
                    let k = n / p.max(1);
                    let sends = inputs(p, k * p);
                    let mut recvs = vec![vec![-1i64; k]; p];
                    let counts = vec![k; p];
                    waited += run_late(&sends, &mut recvs, true, |b| {
                        reduce_scatter::build(b, algo, &counts, 8)
                    });
                    for (r, v) in recvs.iter().enumerate() {
                        let want: Vec<i64> = (r * k..(r + 1) * k)
                            .map(|i| sends.iter().map(|s| s[i]).sum())
                            .collect();
                        assert_eq!(v, &want, "reduce_scatter {algo} p={p} k={k} rank {r}");
                    }
                }
                for algo in [AllgatherAlgo::Ring, AllgatherAlgo::Bruck] {
                    let mut recvs = vec![vec![-1i64; n * p]; p];
                    waited += run_late(&sends, &mut recvs, false, |b| {
                        allgather::build(b, algo, n * 8, 1)
                    });
                    let want: Vec<i64> = sends.concat();
                    for v in &recvs {
                        assert_eq!(v, &want, "allgather {algo} p={p} n={n}");
                    }
                }
                for algo in [
                    BcastAlgo::Binomial,
                    BcastAlgo::ScatterAllgather,
                    BcastAlgo::Linear,
                ] {
                    let root = p / 2;
                    let mut recvs: Vec<Vec<i64>> = (0..p)
                        .map(|r| {
                            if r == root {
                                sends[r].clone()
                            } else {
                                vec![-1; n]
                            }
                        })
                        .collect();
                    waited += run_late(&sends, &mut recvs, false, |b| {
                        bcast::build(b, algo, Buf::Recv, n * 8, 1, root)
                    });
                    for v in &recvs {
                        assert_eq!(v, &sends[root], "bcast {algo} p={p} n={n}");
                    }
                }
            }
        }
        // The fake really was busy when schedules wanted to go on.
        assert!(waited > 100, "device never busy: {waited}");
    }

    #[test]
    fn types_and_ops_map_or_say_why_not() {
        assert_eq!(dtype_of(Datatype::BF16).unwrap(), DType::BF16);
        assert_eq!(dtype_of(Datatype::I8).unwrap(), DType::I8);
        assert_eq!(dtype_of(Datatype::U16).unwrap(), DType::U16);
        let e = dtype_of(Datatype::LocF32).unwrap_err();
        assert!(
            matches!(e, Error::Usage(_)) && e.to_string().contains("LocF32"),
            "{e}"
        );
        assert_eq!(op_of(Op::BitXor, DType::U64).unwrap(), RedOp::Bxor);
        let e = op_of(Op::BitAnd, DType::F32).unwrap_err();
        assert!(e.to_string().contains("integer types only"), "{e}");
        let e = op_of(Op::MaxLoc, DType::F32).unwrap_err();
        assert!(e.to_string().contains("MPI_MAXLOC"), "{e}");
        assert!(elems("x", "b", 6, DType::F32).is_err());
        assert_eq!(elems("x", "b", 8, DType::F32).unwrap(), 2);
    }
}
