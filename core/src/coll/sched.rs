//! Collective schedules: what one rank does in one collective call, as data.
//!
//! An algorithm does not send or receive anything itself. It appends steps to a
//! [`Builder`]: local copies and reductions between buffer slices, and transfers
//! (send a slice to rank `p`, receive a slice from rank `p`). Steps are grouped in
//! *rounds*; [`Exec`] runs a round by first executing its local steps in order, then
//! posting all its transfers (receives first), and starts the next round once every
//! transfer of this one has completed. This is the libNBC design (T. Hoefler, A.
//! Lumsdaine, W. Rehm, "Implementation and Performance Analysis of Non-Blocking
//! Collective Operations for MPI", SC07): one description of each algorithm serves the
//! blocking call (start, then wait) and the nonblocking one (start, then advance from
//! `test`/`wait`).
//!
//! Buffers are the user's send buffer (read-only), the user's receive buffer, and
//! temporaries the builder allocates (16-byte aligned, so any element type's slices
//! stay aligned). Slices are byte ranges; algorithms compute them in elements.
//!
//! Transfers go through the [`Net`] trait: the progress engine in production, an
//! in-memory mailbox in the unit tests ([`sim`]), so every algorithm is tested for
//! every communicator size without processes.

use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Arc;

use rankwire_transports::MemoryKind;

use crate::coll::ops::Reducer;
use crate::engine::Engine;
use crate::error::{Error, MatchError, Result};
use crate::matching::Pattern;
use crate::protocol::{RawBuf, ReqId, Status};

/// Which buffer a slice lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Buf {
    /// The user's send buffer (never written).
    Send,
    /// The user's receive (or in/out) buffer.
    Recv,
    /// Temporary `n`, allocated by [`Builder::tmp`].
    Tmp(u32),
}

/// A byte range of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slice {
    pub(crate) buf: Buf,
    pub(crate) off: usize,
    pub(crate) len: usize,
}

impl Slice {
    /// Bytes `[off, off + len)` of `buf`.
    pub(crate) fn new(buf: Buf, off: usize, len: usize) -> Slice {
        Slice { buf, off, len }
    }

    /// Elements `[off, off + n)` of `es`-byte elements in `buf`.
    pub(crate) fn elems(buf: Buf, es: usize, off: usize, n: usize) -> Slice {
        Slice {
            buf,
            off: off * es,
            len: n * es,
        }
    }
}

/// Split `count` elements into `parts` blocks as evenly as possible (the first
/// `count % parts` blocks get one more). Returns (offset, length) of block `i`.
pub(crate) fn block(count: usize, parts: usize, i: usize) -> (usize, usize) {
    let base = count / parts;
    let extra = count % parts;
    (i * base + i.min(extra), base + usize::from(i < extra))
}

/// A local step run by [`Exec`] at the start of a round, given the buffers.
pub(crate) type LocalFn = Box<dyn FnMut(&mut Bufs) -> Result<()> + Send>;

enum Local {
    Copy {
        src: Slice,
        dst: Slice,
    },
    Reduce {
        src: Slice,
        dst: Slice,
        src_left: bool,
    },
    /// `dst = row 0 ∘ row 1 ∘ … ∘ row rows−1` of `src` (rows of `dst.len` bytes, one
    /// after the other), on the device; `src` is device or pinned host memory.
    ReduceRows {
        src: Slice,
        rows: usize,
        dst: Slice,
    },
    Call(LocalFn),
    /// A host function that enqueues device work (a kernel launch): the schedule
    /// counts the device busy after it, as after a copy.
    DeviceCall(LocalFn),
}

/// Where a temporary lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TmpKind {
    Host,
    Device,
    /// Page-locked host memory the device can read (schedules on device buffers).
    Pinned,
}

#[derive(Debug, Clone, Copy)]
enum Xfer {
    Send { peer: usize, s: Slice },
    Recv { peer: usize, s: Slice },
}

/// Tag phase of a round: collective-check traffic and the algorithm's own traffic use
/// different tags (see `coll::tag_base`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The algorithm.
    Main = 0,
    /// Pairwise count exchange of `RANKWIRE_COLL_CHECK`.
    CheckPairs = 1,
    /// Descriptor allgather of `RANKWIRE_COLL_CHECK`.
    CheckDesc = 2,
}

struct Round {
    locals: Vec<Local>,
    xfers: Vec<Xfer>,
    phase: Phase,
}

/// Accumulates the rounds of one rank's part of a collective.
pub(crate) struct Builder {
    /// Calling rank in the communicator.
    pub(crate) rank: usize,
    /// Communicator size.
    pub(crate) size: usize,
    rounds: Vec<Round>,
    /// Length in bytes and where it lives, per temporary.
    tmps: Vec<(usize, TmpKind)>,
    phase: Phase,
    device_tmps: bool,
}

impl Builder {
    /// An empty schedule for `rank` of `size`.
    pub(crate) fn new(rank: usize, size: usize) -> Builder {
        Builder {
            rank,
            size,
            rounds: Vec::new(),
            tmps: Vec::new(),
            phase: Phase::Main,
            device_tmps: false,
        }
    }

    /// Tag phase of the rounds appended from now on.
    pub(crate) fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
        self.round();
        if let Some(r) = self.rounds.last_mut()
            && r.locals.is_empty()
            && r.xfers.is_empty()
        {
            r.phase = phase;
        }
    }

    /// End the current round: later steps wait for its transfers.
    pub(crate) fn round(&mut self) {
        if self
            .rounds
            .last()
            .is_none_or(|r| !r.locals.is_empty() || !r.xfers.is_empty())
        {
            self.rounds.push(Round {
                locals: Vec::new(),
                xfers: Vec::new(),
                phase: self.phase,
            });
        }
    }

    /// A temporary buffer of `len` bytes, 16-byte aligned. Temporaries of more than
    /// [`ZEROED_TMP_MAX`] bytes start uninitialised: every step must write a region
    /// (receive or copy into it) before reading it, which every algorithm here does.
    pub(crate) fn tmp(&mut self, len: usize) -> Buf {
        let kind = if self.device_tmps {
            TmpKind::Device
        } else {
            TmpKind::Host
        };
        self.tmps.push((len, kind));
        Buf::Tmp(self.tmps.len() as u32 - 1)
    }

    /// A host temporary of `len` bytes, whatever [`Builder::set_device_tmps`] says
    /// (descriptors a device collective exchanges over the host path).
    pub(crate) fn tmp_host(&mut self, len: usize) -> Buf {
        self.tmps.push((len, TmpKind::Host));
        Buf::Tmp(self.tmps.len() as u32 - 1)
    }

    /// A temporary of `len` bytes in page-locked host memory that the device can read
    /// directly (schedules on device buffers only).
    pub(crate) fn pinned_tmp(&mut self, len: usize) -> Buf {
        self.tmps.push((len, TmpKind::Pinned));
        Buf::Tmp(self.tmps.len() as u32 - 1)
    }

    /// `dst = row 0 ∘ row 1 ∘ …` over the `rows` rows of `dst.len` bytes at the start of
    /// `src`, reduced on the device in row order, once earlier transfers have completed.
    pub(crate) fn reduce_rows(&mut self, src: Slice, rows: usize, dst: Slice) {
        debug_assert_eq!(src.len, dst.len * rows);
        if dst.len == 0 || rows == 0 {
            return;
        }
        self.local(Local::ReduceRows { src, rows, dst });
    }

    /// Whether temporaries created from now on live in device memory (collectives on
    /// device buffers: the algorithm's temporaries, not the check's).
    pub(crate) fn set_device_tmps(&mut self, on: bool) {
        self.device_tmps = on;
    }

    /// Copy `src` to `dst` (equal lengths) once earlier transfers have completed.
    pub(crate) fn copy(&mut self, src: Slice, dst: Slice) {
        debug_assert_eq!(src.len, dst.len);
        if src.len == 0 || src == dst {
            return;
        }
        self.local(Local::Copy { src, dst });
    }

    /// `dst = src ∘ dst` (`src_left`) or `dst = dst ∘ src`, once earlier transfers have
    /// completed.
    pub(crate) fn reduce(&mut self, src: Slice, dst: Slice, src_left: bool) {
        debug_assert_eq!(src.len, dst.len);
        if src.len == 0 {
            return;
        }
        self.local(Local::Reduce { src, dst, src_left });
    }

    /// Run `f` once earlier transfers have completed; an error ends the collective.
    pub(crate) fn call(&mut self, f: LocalFn) {
        self.local(Local::Call(f));
    }

    /// Run `f` like [`Builder::call`]; `f` enqueues work on the schedule's device
    /// stream, which the schedule then waits for like its own device steps.
    pub(crate) fn device_call(&mut self, f: LocalFn) {
        self.local(Local::DeviceCall(f));
    }

    /// Send `s` to rank `peer` in the current round.
    pub(crate) fn send(&mut self, peer: usize, s: Slice) {
        self.cur().xfers.push(Xfer::Send { peer, s });
    }

    /// Receive exactly `s.len` bytes from rank `peer` into `s` in the current round.
    pub(crate) fn recv(&mut self, peer: usize, s: Slice) {
        self.cur().xfers.push(Xfer::Recv { peer, s });
    }

    /// Finish: the executable schedule over these buffers.
    pub(crate) fn finish(self, name: &'static str, user: UserBufs, ctx: CommCtx) -> Exec {
        let mut rounds: Vec<Round> = self
            .rounds
            .into_iter()
            .filter(|r| !r.locals.is_empty() || !r.xfers.is_empty())
            .collect();
        rounds.reverse();
        let mut dev = user.dev;
        let mut error = None;
        let mut tmps = Vec::with_capacity(self.tmps.len());
        for &(n, kind) in &self.tmps {
            let wrap = |addr| match kind {
                TmpKind::Pinned => Tmp::Pinned(addr),
                _ => Tmp::Dev(addr),
            };
            let t = match (kind, dev.as_mut()) {
                (TmpKind::Host, _) => Tmp::Host(HostTmp::new(n)),
                (_, _) if n == 0 => wrap(0),
                (_, Some(d)) => match if kind == TmpKind::Pinned {
                    d.alloc_pinned(n)
                } else {
                    d.alloc(n)
                } {
                    Ok(addr) => wrap(addr),
                    Err(e) => {
                        error.get_or_insert(e);
                        wrap(0)
                    }
                },
                (_, None) => {
                    error.get_or_insert(internal("device temporary without a device".into()));
                    wrap(0)
                }
            };
            tmps.push(t);
        }
        Exec {
            name,
            rounds,
            bufs: Bufs {
                send: user.send,
                recv: user.recv,
                tmps,
                tmp_lens: self.tmps.iter().map(|&(n, _)| n).collect(),
                reducer: user.reducer,
                dev,
                dirty: false,
            },
            ctx,
            pending: Vec::new(),
            deferred: Vec::new(),
            busy: Vec::new(),
            error,
            result: None,
            finished: false,
        }
    }

    fn local(&mut self, l: Local) {
        if self.rounds.last().is_none_or(|r| !r.xfers.is_empty()) {
            self.rounds.push(Round {
                locals: Vec::new(),
                xfers: Vec::new(),
                phase: self.phase,
            });
        }
        self.cur().locals.push(l);
    }

    fn cur(&mut self) -> &mut Round {
        if self.rounds.is_empty() {
            self.round();
        }
        let last = self.rounds.len() - 1;
        &mut self.rounds[last]
    }
}

/// The user's buffers of one call, as raw parts (the API layer keeps them borrowed
/// until the collective completes), plus the reduction if there is one.
pub(crate) struct UserBufs {
    pub(crate) send: (*const u8, usize),
    pub(crate) recv: (*mut u8, usize),
    pub(crate) reducer: Option<Reducer>,
    /// For collectives on device buffers: the device operations (the user's buffers and
    /// the algorithm's temporaries are then device memory).
    pub(crate) dev: Option<Box<dyn DevOps>>,
}

/// Direction of a copy step of a schedule on device buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyDir {
    /// Device to device.
    DtoD,
    /// Device to host.
    DtoH,
    /// Host to device.
    HtoD,
}

/// The device side of a schedule on device buffers: temporaries, copies and
/// reductions, all asynchronous in one stream order. The CUDA implementation is in
/// `coll/device.rs`; the unit tests use an asynchronous fake on host memory.
pub(crate) trait DevOps: Send {
    /// The memory kind of the device buffers (for the transfers' `RawBuf`s).
    fn kind(&self) -> MemoryKind;
    /// A device temporary of `len > 0` bytes (16-byte aligned); its address.
    fn alloc(&mut self, len: usize) -> Result<u64>;
    /// Give back a temporary from [`DevOps::alloc`] once no queued work uses it.
    fn release(&mut self, addr: u64, len: usize);
    /// A page-locked host temporary of `len > 0` bytes that the device can read at
    /// the same address (unified addressing); its address.
    fn alloc_pinned(&mut self, len: usize) -> Result<u64>;
    /// Give back a temporary from [`DevOps::alloc_pinned`].
    fn release_pinned(&mut self, addr: u64, len: usize);
    /// Enqueue `dst = row 0 ∘ … ∘ row rows−1` of the `rows` rows of `len` bytes at
    /// `src` (device or pinned host memory).
    fn reduce_rows(&mut self, dst: u64, src: u64, len: usize, rows: usize) -> Result<()>;
    /// Enqueue a copy of `len` bytes from `src` to `dst` (disjoint or equal); host
    /// addresses are those of host temporaries, live until the schedule ends.
    fn copy(&mut self, dst: u64, src: u64, len: usize, dir: CopyDir) -> Result<()>;
    /// Enqueue `dst = a ∘ b` over `len` bytes (whole elements; `dst` equals `a` or `b`).
    fn reduce(&mut self, dst: u64, a: u64, b: u64, len: usize) -> Result<()>;
    /// Whether all enqueued work has completed (never blocks).
    fn poll_idle(&mut self) -> Result<bool>;
    /// Block until all enqueued work has completed.
    fn sync(&mut self) -> Result<()>;
    /// Whether a schedule with nothing but device work to wait for should [`sync`]
    /// rather than poll ([`poll_idle`]) from its progress loop.
    ///
    /// [`sync`]: DevOps::sync
    /// [`poll_idle`]: DevOps::poll_idle
    fn block_when_idle(&self) -> bool {
        false
    }
}

impl UserBufs {
    /// No user buffers (barrier).
    pub(crate) fn empty() -> UserBufs {
        UserBufs::new(&[], &mut [], None)
    }

    /// From a send slice and a receive slice.
    pub(crate) fn new(send: &[u8], recv: &mut [u8], reducer: Option<Reducer>) -> UserBufs {
        UserBufs {
            send: (send.as_ptr(), send.len()),
            recv: (recv.as_mut_ptr(), recv.len()),
            reducer,
            dev: None,
        }
    }
}

/// Where a schedule's transfers go: comm rank → world rank, context id, tag base.
#[derive(Clone)]
pub(crate) struct CommCtx {
    pub(crate) group: Arc<[u32]>,
    pub(crate) ctx: u32,
    pub(crate) tag_base: i32,
}

/// The buffers of a running schedule.
pub(crate) struct Bufs {
    send: (*const u8, usize),
    recv: (*mut u8, usize),
    tmps: Vec<Tmp>,
    tmp_lens: Vec<usize>,
    reducer: Option<Reducer>,
    dev: Option<Box<dyn DevOps>>,
    /// Device work was enqueued since the device was last seen idle.
    dirty: bool,
}

/// Temporaries up to this size are zeroed (cheap); larger ones are left
/// uninitialised, saving a memset of up to the whole message per call. Steps only read
/// what an earlier step wrote (copy, receive, [`Bufs::write`]).
pub(crate) const ZEROED_TMP_MAX: usize = 4096;

/// Storage of one host temporary, only accessed through raw pointers.
struct HostTmp(Box<[MaybeUninit<u128>]>);

impl HostTmp {
    fn new(len: usize) -> HostTmp {
        let words = len.div_ceil(16);
        if len <= ZEROED_TMP_MAX {
            HostTmp(vec![MaybeUninit::new(0u128); words].into_boxed_slice())
        } else {
            HostTmp(Box::new_uninit_slice(words))
        }
    }
}

/// A temporary: host storage, a device address from [`DevOps::alloc`] or a pinned
/// host address from [`DevOps::alloc_pinned`] (0 when empty).
enum Tmp {
    Host(HostTmp),
    Dev(u64),
    Pinned(u64),
}

impl Drop for Bufs {
    fn drop(&mut self) {
        let Some(dev) = self.dev.as_mut() else {
            return;
        };
        // Queued work may still use the temporaries (a failed schedule); wait for it.
        if self.dirty
            && let Err(e) = dev.sync()
        {
            tracing::warn!("collective on device buffers: waiting for the stream: {e}");
        }
        for (t, &n) in self.tmps.iter().zip(&self.tmp_lens) {
            match *t {
                Tmp::Dev(addr) if addr != 0 => dev.release(addr, n),
                Tmp::Pinned(addr) if addr != 0 => dev.release_pinned(addr, n),
                _ => {}
            }
        }
    }
}

// SAFETY: the raw user pointers are only dereferenced while the owning collective is
// pending, and the API layer keeps the user buffers borrowed (shared for the send
// buffer, exclusive for the receive buffer) until then.
unsafe impl Send for Bufs {}

impl Bufs {
    /// Base pointer and length of a buffer.
    fn base(&mut self, b: Buf) -> Result<(*mut u8, usize)> {
        Ok(match b {
            Buf::Send => (self.send.0 as *mut u8, self.send.1),
            Buf::Recv => self.recv,
            Buf::Tmp(i) => {
                let i = i as usize;
                let (Some(v), Some(&n)) = (self.tmps.get_mut(i), self.tmp_lens.get(i)) else {
                    return Err(internal(format!("temporary {i} does not exist")));
                };
                match v {
                    Tmp::Host(h) => (h.0.as_mut_ptr() as *mut u8, n),
                    Tmp::Dev(addr) | Tmp::Pinned(addr) => (*addr as *mut u8, n),
                }
            }
        })
    }

    /// Whether `b` is a pinned host temporary.
    fn is_pinned(&self, b: Buf) -> bool {
        matches!(b, Buf::Tmp(i) if matches!(self.tmps.get(i as usize), Some(Tmp::Pinned(_))))
    }

    /// Whether `b` is device memory.
    fn on_device(&self, b: Buf) -> bool {
        match b {
            Buf::Send | Buf::Recv => self.dev.is_some(),
            Buf::Tmp(i) => matches!(self.tmps.get(i as usize), Some(Tmp::Dev(_))),
        }
    }

    /// Pointer to the start of `s`, after checking bounds.
    fn ptr(&mut self, s: Slice) -> Result<*mut u8> {
        let (p, n) = self.base(s.buf)?;
        if s.off.checked_add(s.len).is_none_or(|end| end > n) {
            return Err(internal(format!("slice {s:?} outside its {n}-byte buffer")));
        }
        if s.len == 0 {
            return Ok(std::ptr::NonNull::<u128>::dangling().as_ptr() as *mut u8);
        }
        // SAFETY: off + len <= n, checked above.
        Ok(unsafe { p.add(s.off) })
    }

    /// Address of the start of `s` (device or host), after checking bounds.
    pub(crate) fn addr(&mut self, s: Slice) -> Result<u64> {
        Ok(self.ptr(s)? as u64)
    }

    /// The bytes of `s`, which an earlier step has written (temporaries may start
    /// uninitialised).
    pub(crate) fn bytes(&mut self, s: Slice) -> Result<&[u8]> {
        if self.on_device(s.buf) {
            return Err(internal(format!("host read of device slice {s:?}")));
        }
        let p = self.ptr(s)?;
        // SAFETY: in bounds (checked); the buffer is live while the schedule runs and
        // the region was written before (the caller's contract).
        Ok(unsafe { std::slice::from_raw_parts(p, s.len) })
    }

    /// Copy `data` into `s` (equal lengths).
    ///
    /// # Errors
    /// An internal error for a slice of the send buffer or a length mismatch.
    pub(crate) fn write(&mut self, s: Slice, data: &[u8]) -> Result<()> {
        if (s.buf == Buf::Send && s.len > 0) || s.len != data.len() || self.on_device(s.buf) {
            return Err(internal(format!(
                "bad write of {} bytes to {s:?}",
                data.len()
            )));
        }
        let p = self.ptr(s)?;
        // SAFETY: in bounds (checked), `data` cannot overlap a buffer the schedule owns
        // or borrows mutably; raw copy, so the destination may be uninitialised.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    fn raw(&mut self, s: Slice) -> Result<RawBuf> {
        let p = self.ptr(s)?;
        match (&self.dev, self.on_device(s.buf)) {
            (Some(d), true) if s.len > 0 => Ok(RawBuf::with_kind(p, s.len, d.kind())),
            _ => Ok(RawBuf::new(p, s.len)),
        }
    }

    /// A local step on device slices: enqueued on the device, not run here.
    fn run_device(&mut self, l: &mut Local) -> Result<()> {
        if let Local::ReduceRows { src, rows, dst } = *l {
            let src_ok = self.on_device(src.buf) || self.is_pinned(src.buf);
            if !src_ok || !self.on_device(dst.buf) || src.len != dst.len * rows || rows == 0 {
                return Err(internal(format!(
                    "bad row reduction {src:?} ({rows} rows) -> {dst:?}"
                )));
            }
            let s = self.ptr(src)? as u64;
            let d = self.ptr(dst)? as u64;
            let Some(dev) = self.dev.as_mut() else {
                return Err(internal("device step without a device".into()));
            };
            dev.reduce_rows(d, s, dst.len, rows)?;
            self.dirty = true;
            return Ok(());
        }
        let (src, dst) = match l {
            Local::Copy { src, dst } | Local::Reduce { src, dst, .. } => (*src, *dst),
            Local::ReduceRows { .. } | Local::Call(_) | Local::DeviceCall(_) => {
                return Err(internal("host step on device buffers".into()));
            }
        };
        let dir = match (self.on_device(src.buf), self.on_device(dst.buf)) {
            (true, true) => CopyDir::DtoD,
            (true, false) => CopyDir::DtoH,
            (false, true) => CopyDir::HtoD,
            (false, false) => return Err(internal("host step sent to the device".into())),
        };
        if dir != CopyDir::DtoD && matches!(l, Local::Reduce { .. }) {
            return Err(internal(format!(
                "reduction mixes host and device slices: {src:?} -> {dst:?}"
            )));
        }
        if src.len != dst.len || (dst.buf == Buf::Send && dst.len > 0) {
            return Err(internal(format!("bad device step {src:?} -> {dst:?}")));
        }
        let s = self.ptr(src)? as u64;
        let d = self.ptr(dst)? as u64;
        let Some(dev) = self.dev.as_mut() else {
            return Err(internal("device step without a device".into()));
        };
        match l {
            Local::Copy { .. } => dev.copy(d, s, src.len, dir)?,
            Local::Reduce { src_left, .. } => {
                if src.buf == dst.buf && src.off < dst.off + dst.len && dst.off < src.off + src.len
                {
                    return Err(internal(format!("overlapping reduction {src:?} {dst:?}")));
                }
                if *src_left {
                    dev.reduce(d, s, d, src.len)?
                } else {
                    dev.reduce(d, d, s, src.len)?
                }
            }
            Local::ReduceRows { .. } | Local::Call(_) | Local::DeviceCall(_) => {}
        }
        self.dirty = true;
        Ok(())
    }

    /// Whether enqueued device work has finished (true without a device). When the
    /// schedule has nothing else to wait for (`may_block`) and the policy allows it,
    /// waits for the device instead of polling it.
    fn device_idle(&mut self, may_block: bool) -> Result<bool> {
        if !self.dirty {
            return Ok(true);
        }
        let Some(dev) = self.dev.as_mut() else {
            return Ok(true);
        };
        if may_block && dev.block_when_idle() {
            dev.sync()?;
            self.dirty = false;
            return Ok(true);
        }
        let idle = dev.poll_idle()?;
        if idle {
            self.dirty = false;
        }
        Ok(idle)
    }

    fn run(&mut self, l: &mut Local) -> Result<()> {
        let touches_device = match l {
            Local::Copy { src, dst } | Local::Reduce { src, dst, .. } => {
                self.on_device(src.buf) || self.on_device(dst.buf)
            }
            Local::ReduceRows { .. } => true,
            Local::Call(_) | Local::DeviceCall(_) => false,
        };
        if touches_device {
            return self.run_device(l);
        }
        match l {
            Local::Copy { src, dst } => {
                let (src, dst) = (*src, *dst);
                if src.len != dst.len || (dst.buf == Buf::Send && dst.len > 0) {
                    return Err(internal(format!("bad copy {src:?} -> {dst:?}")));
                }
                let s = self.ptr(src)?;
                let d = self.ptr(dst)?;
                // SAFETY: both ranges are in bounds; copy handles overlap.
                unsafe { std::ptr::copy(s, d, src.len) };
                Ok(())
            }
            Local::Reduce { src, dst, src_left } => {
                let (src, dst) = (*src, *dst);
                let Some(r) = self.reducer.clone() else {
                    return Err(internal("reduction without an operation".into()));
                };
                if src.len != dst.len || src.len % r.elem_bytes.max(1) != 0 {
                    return Err(internal(format!("bad reduction {src:?} -> {dst:?}")));
                }
                if src.buf == dst.buf && src.off < dst.off + dst.len && dst.off < src.off + src.len
                {
                    return Err(internal(format!("overlapping reduction {src:?} {dst:?}")));
                }
                if dst.buf == Buf::Send {
                    return Err(internal("reduction into the send buffer".into()));
                }
                let s = self.ptr(src)?;
                let d = self.ptr(dst)?;
                // SAFETY: in bounds, disjoint (checked above), buffers live.
                let (s, d) = unsafe {
                    (
                        std::slice::from_raw_parts(s, src.len),
                        std::slice::from_raw_parts_mut(d, dst.len),
                    )
                };
                r.apply(s, d, *src_left);
                Ok(())
            }
            Local::ReduceRows { .. } => Err(internal("row reduction on the host".into())),
            Local::Call(f) => f(self),
            Local::DeviceCall(f) => {
                let r = f(self);
                self.dirty = true;
                r
            }
        }
    }
}

/// Posting transfers and collecting completions, in world ranks.
pub(crate) trait Net {
    /// Start sending `buf` to `peer` on context `ctx` with `tag`.
    fn send(&mut self, peer: u32, ctx: u32, tag: i32, buf: RawBuf) -> ReqId;
    /// Post a receive of at most `buf.len()` bytes from `peer`.
    fn recv(&mut self, peer: u32, ctx: u32, tag: i32, buf: RawBuf) -> ReqId;
    /// The outcome of request `id` if it has completed.
    fn take_done(&mut self, id: ReqId) -> Option<Result<Status>>;
    /// Withdraw a receive that has not matched; whether it was withdrawn.
    fn cancel_recv(&mut self, id: ReqId) -> bool;
    /// This rank found that the ranks disagree (a message of the wrong length): revoke
    /// collective context `ctx` on every member of `group` (world ranks), so that no
    /// rank waits for messages that will not come (`protocol/revoke.rs`).
    fn revoke(&mut self, ctx: u32, group: &[u32]);
}

impl Net for Engine {
    fn send(&mut self, peer: u32, ctx: u32, tag: i32, buf: RawBuf) -> ReqId {
        match self.isend(peer, ctx, tag, buf, false) {
            crate::engine::SendStart::Queued(id) => id,
            crate::engine::SendStart::Done(st) => self.proto.complete_now(peer, tag, st.len_bytes),
        }
    }
    fn recv(&mut self, peer: u32, ctx: u32, tag: i32, buf: RawBuf) -> ReqId {
        let pat = Pattern {
            ctx,
            src: Some(peer),
            tag: Some(tag),
        };
        self.proto.irecv(pat, buf)
    }
    fn take_done(&mut self, id: ReqId) -> Option<Result<Status>> {
        self.proto.take_done(id)
    }
    fn cancel_recv(&mut self, id: ReqId) -> bool {
        self.proto.cancel_recv(id)
    }
    fn revoke(&mut self, ctx: u32, group: &[u32]) {
        self.proto.revoke(ctx, group);
        // Push the Revoke frames out now: this rank's call returns its error next, and
        // the program may not call into the runtime again soon.
        self.progress();
    }
}

struct Pending {
    id: ReqId,
    /// For a receive: the peer's comm rank and the bytes expected.
    recv: Option<(usize, usize)>,
}

/// A running schedule (one rank's part of one collective call).
pub(crate) struct Exec {
    name: &'static str,
    /// Rounds not started yet, last round first.
    rounds: Vec<Round>,
    bufs: Bufs,
    ctx: CommCtx,
    pending: Vec<Pending>,
    /// Transfers of the current round held back until the round's device work has
    /// finished (sends of device slices; receives into slices that work uses), with
    /// their tag.
    deferred: Vec<(Xfer, i32)>,
    /// Slices read or written by device work not yet seen finished.
    busy: Vec<Slice>,
    error: Option<Error>,
    result: Option<Result<()>>,
    finished: bool,
}

impl fmt::Debug for Exec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exec")
            .field("name", &self.name)
            .field("rounds_left", &self.rounds.len())
            .field("pending", &self.pending.len())
            .field("deferred", &self.deferred.len())
            .finish()
    }
}

impl Exec {
    /// Whether the schedule has finished (its result may have been taken already).
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    fn finish_with(&mut self, r: Result<()>) {
        self.rounds.clear();
        self.result = Some(r);
        self.finished = true;
    }

    /// Take the outcome once finished.
    pub(crate) fn take_result(&mut self) -> Option<Result<()>> {
        self.result.take()
    }

    /// Collect completions and start rounds until something must be waited for.
    /// Returns whether anything changed.
    pub(crate) fn advance(&mut self, net: &mut impl Net) -> bool {
        if self.finished {
            return false;
        }
        let mut changed = false;
        loop {
            let before = self.pending.len();
            let mut i = 0;
            while i < self.pending.len() {
                let Some(r) = net.take_done(self.pending[i].id) else {
                    i += 1;
                    continue;
                };
                let p = self.pending.swap_remove(i);
                if let Err((e, mismatch)) = self.completion(p.recv, r) {
                    if mismatch {
                        net.revoke(self.ctx.ctx, &self.ctx.group);
                    }
                    self.fail(net, e);
                }
            }
            changed |= self.pending.len() != before;
            if !self.deferred.is_empty() {
                let nothing_else = self.pending.is_empty();
                match self.bufs.device_idle(nothing_else) {
                    Ok(true) => {
                        self.busy.clear();
                        for (x, tag) in std::mem::take(&mut self.deferred) {
                            self.post(net, x, tag);
                        }
                        changed = true;
                        continue;
                    }
                    Ok(false) => return changed,
                    Err(e) => {
                        self.deferred.clear();
                        self.fail(net, e);
                    }
                }
            }
            if !self.pending.is_empty() {
                return changed;
            }
            if let Some(e) = self.error.take() {
                self.finish_with(Err(e));
                return true;
            }
            let Some(mut round) = self.rounds.pop() else {
                // Device work of the last round must finish before the call does.
                match self.bufs.device_idle(true) {
                    Ok(true) => self.finish_with(Ok(())),
                    Ok(false) => return changed,
                    Err(e) => self.finish_with(Err(e)),
                }
                return true;
            };
            changed = true;
            if matches!(self.bufs.device_idle(false), Ok(true)) {
                self.busy.clear();
            }
            for l in round.locals.iter_mut() {
                if let Local::Copy { src, dst }
                | Local::Reduce { src, dst, .. }
                | Local::ReduceRows { src, dst, .. } = l
                    && (self.bufs.on_device(dst.buf) || self.bufs.on_device(src.buf))
                {
                    self.busy.extend([*src, *dst]);
                }
                if let Err(e) = self.bufs.run(l) {
                    self.finish_with(Err(e));
                    return true;
                }
            }
            let dev_busy = self.bufs.dirty;
            let tag = self.ctx.tag_base | round.phase as i32;
            // Receives first, so that sends rarely land in the unexpected queue. While
            // device work runs, sends of device slices wait for it (the peer reads
            // them), and so do receives into slices that work reads or writes.
            let recvs = round
                .xfers
                .iter()
                .filter(|x| matches!(x, Xfer::Recv { .. }));
            let sends = round
                .xfers
                .iter()
                .filter(|x| matches!(x, Xfer::Send { .. }));
            for &x in recvs.chain(sends) {
                let hold = dev_busy
                    && match x {
                        Xfer::Send { s, .. } => {
                            self.bufs.on_device(s.buf) || self.busy.iter().any(|t| overlaps(t, &s))
                        }
                        Xfer::Recv { s, .. } => self.busy.iter().any(|t| overlaps(t, &s)),
                    };
                if hold {
                    self.deferred.push((x, tag));
                } else {
                    self.post(net, x, tag);
                }
            }
        }
    }

    /// Post one transfer and remember it as pending.
    fn post(&mut self, net: &mut impl Net, x: Xfer, tag: i32) {
        let (peer, s) = match x {
            Xfer::Send { peer, s } | Xfer::Recv { peer, s } => (peer, s),
        };
        match (self.world(peer), self.bufs.raw(s)) {
            (Ok(w), Ok(raw)) => {
                let (id, recv) = match x {
                    Xfer::Recv { .. } => (net.recv(w, self.ctx.ctx, tag, raw), Some((peer, s.len))),
                    Xfer::Send { .. } => (net.send(w, self.ctx.ctx, tag, raw), None),
                };
                self.pending.push(Pending { id, recv });
            }
            (Err(e), _) | (_, Err(e)) => self.fail(net, e),
        }
    }

    fn world(&self, peer: usize) -> Result<u32> {
        self.ctx
            .group
            .get(peer)
            .copied()
            .ok_or_else(|| internal(format!("peer {peer} outside the communicator")))
    }

    /// Record the first error and withdraw receives that have not matched, so the
    /// schedule ends as soon as the transfers already under way have finished.
    fn fail(&mut self, net: &mut impl Net, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
        self.pending
            .retain(|p| !(p.recv.is_some() && net.cancel_recv(p.id)));
    }

    /// The outcome of a transfer: `Err((error, true))` for a message of another length
    /// than expected (the ranks disagree), `Err((error, false))` for any other failure.
    fn completion(
        &self,
        recv: Option<(usize, usize)>,
        r: Result<Status>,
    ) -> std::result::Result<(), (Error, bool)> {
        let mismatch = |peer: usize, got: u64, want: usize| {
            Error::Collective(format!(
                "{}: rank {peer} sent {got} bytes where {want} were expected; the ranks \
                 disagree on counts, roots or datatypes (set RANKWIRE_COLL_CHECK=1 to name \
                 the difference)",
                self.name
            ))
        };
        match (recv, r) {
            (Some((peer, want)), Ok(st)) if st.len_bytes != want => {
                Err((mismatch(peer, st.len_bytes as u64, want), true))
            }
            (
                Some((peer, want)),
                Err(Error::Matching(MatchError::Truncated { message_bytes, .. })),
            ) => Err((mismatch(peer, message_bytes, want), true)),
            (_, Err(e)) => Err((e, false)),
            _ => Ok(()),
        }
    }
}

/// Whether two slices share a byte.
fn overlaps(a: &Slice, b: &Slice) -> bool {
    a.buf == b.buf && a.len > 0 && b.len > 0 && a.off < b.off + b.len && b.off < a.off + a.len
}

fn internal(msg: String) -> Error {
    Error::Collective(format!(
        "internal error in a collective schedule (a rankwire bug, please report): {msg}"
    ))
}

/// In-memory execution of schedules for unit tests: sends are buffered at once,
/// receives match per (source, destination, context, tag) in send order.
#[cfg(test)]
pub(crate) mod sim {
    use std::collections::{HashMap, VecDeque};

    use super::*;

    type Key = (u32, u32, u32, i32);

    /// All ranks' mailboxes.
    #[derive(Default)]
    pub(crate) struct Mail {
        queues: HashMap<Key, VecDeque<Vec<u8>>>,
        posted: HashMap<Key, VecDeque<(ReqId, RawBuf)>>,
        done: HashMap<ReqId, Result<Status>>,
        next: ReqId,
        /// Messages sent so far.
        pub(crate) messages: usize,
        /// Revoked contexts and the rank that revoked each ([`Net::revoke`]).
        pub(crate) revoked: HashMap<u32, u32>,
    }

    /// One rank's view of the mailboxes.
    pub(crate) struct RankNet<'m> {
        pub(crate) me: u32,
        pub(crate) mail: &'m mut Mail,
    }

    impl Mail {
        fn id(&mut self) -> ReqId {
            self.next += 1;
            self.next
        }
        fn deliver(&mut self, key: Key) {
            loop {
                let (Some(q), Some(p)) = (self.queues.get_mut(&key), self.posted.get_mut(&key))
                else {
                    return;
                };
                if q.is_empty() || p.is_empty() {
                    return;
                }
                let (Some(data), Some((id, buf))) = (q.pop_front(), p.pop_front()) else {
                    return;
                };
                let st = Status {
                    source: key.0 as usize,
                    tag: key.3,
                    len_bytes: data.len(),
                };
                let r = if data.len() > buf.len() {
                    Err(MatchError::Truncated {
                        source_rank: key.0,
                        tag: key.3,
                        message_bytes: data.len() as u64,
                        buffer_bytes: buf.len() as u64,
                    }
                    .into())
                } else {
                    if !data.is_empty() {
                        // SAFETY: the test keeps the buffers alive; length checked.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                data.as_ptr(),
                                buf.as_slice().as_ptr() as *mut u8,
                                data.len(),
                            )
                        };
                    }
                    Ok(st)
                };
                self.done.insert(id, r);
            }
        }
    }

    fn revoked(by: u32) -> Error {
        Error::Collective(format!("revoked by rank {by}"))
    }

    impl Net for RankNet<'_> {
        fn send(&mut self, peer: u32, ctx: u32, tag: i32, buf: RawBuf) -> ReqId {
            let id = self.mail.id();
            if let Some(&by) = self.mail.revoked.get(&ctx) {
                self.mail.done.insert(id, Err(revoked(by)));
                return id;
            }
            // SAFETY: the schedule keeps the buffer valid while the send is pending.
            let data = unsafe { buf.as_slice() }.to_vec();
            let key = (self.me, peer, ctx, tag);
            self.mail.queues.entry(key).or_default().push_back(data);
            self.mail.messages += 1;
            self.mail.deliver(key);
            self.mail.done.insert(
                id,
                Ok(Status {
                    source: peer as usize,
                    tag,
                    len_bytes: buf.len(),
                }),
            );
            id
        }
        fn recv(&mut self, peer: u32, ctx: u32, tag: i32, buf: RawBuf) -> ReqId {
            let id = self.mail.id();
            if let Some(&by) = self.mail.revoked.get(&ctx) {
                self.mail.done.insert(id, Err(revoked(by)));
                return id;
            }
            let key = (peer, self.me, ctx, tag);
            self.mail
                .posted
                .entry(key)
                .or_default()
                .push_back((id, buf));
            self.mail.deliver(key);
            id
        }
        fn take_done(&mut self, id: ReqId) -> Option<Result<Status>> {
            self.mail.done.remove(&id)
        }
        fn cancel_recv(&mut self, id: ReqId) -> bool {
            for q in self.mail.posted.values_mut() {
                if let Some(i) = q.iter().position(|(x, _)| *x == id) {
                    q.remove(i);
                    return true;
                }
            }
            false
        }
        fn revoke(&mut self, ctx: u32, _group: &[u32]) {
            if self.mail.revoked.contains_key(&ctx) {
                return;
            }
            self.mail.revoked.insert(ctx, self.me);
            // Every rank's receives still posted on `ctx` fail (as the Revoke frames
            // do in the protocol).
            let keys: Vec<Key> = self
                .mail
                .posted
                .keys()
                .filter(|k| k.2 == ctx)
                .copied()
                .collect();
            for k in keys {
                for (id, _) in self.mail.posted.remove(&k).unwrap_or_default() {
                    self.mail.done.insert(id, Err(revoked(self.me)));
                }
            }
        }
    }

    /// Run every rank's schedule to completion (round-robin); panics on deadlock.
    /// Returns each rank's outcome and the number of messages sent.
    pub(crate) fn run(execs: &mut [Exec]) -> (Vec<Result<()>>, usize) {
        let mut mail = Mail::default();
        let mut out: Vec<Option<Result<()>>> = execs.iter().map(|_| None).collect();
        loop {
            let mut changed = false;
            for (r, ex) in execs.iter_mut().enumerate() {
                if out[r].is_some() {
                    continue;
                }
                let mut net = RankNet {
                    me: r as u32,
                    mail: &mut mail,
                };
                changed |= ex.advance(&mut net);
                if let Some(res) = ex.take_result() {
                    out[r] = Some(res);
                }
            }
            if out.iter().all(Option::is_some) {
                return (out.into_iter().flatten().collect(), mail.messages);
            }
            assert!(
                changed,
                "schedules deadlocked: {execs:?}; finished: {:?}",
                out.iter().map(Option::is_some).collect::<Vec<_>>()
            );
        }
    }

    /// Identity group of `n` ranks, context 0, tag base 0.
    pub(crate) fn ctx(n: usize) -> CommCtx {
        CommCtx {
            group: (0..n as u32).collect(),
            ctx: 0,
            tag_base: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_splits_rounds_at_local_steps_after_transfers() {
        let mut b = Builder::new(0, 2);
        let t = b.tmp(8);
        b.copy(Slice::new(Buf::Send, 0, 8), Slice::new(Buf::Recv, 0, 8));
        b.send(1, Slice::new(Buf::Recv, 0, 8));
        b.recv(1, Slice::new(t, 0, 8));
        b.copy(Slice::new(t, 0, 8), Slice::new(Buf::Recv, 0, 8));
        b.round();
        b.round();
        let rounds: Vec<&Round> = b
            .rounds
            .iter()
            .filter(|r| !r.locals.is_empty() || !r.xfers.is_empty())
            .collect();
        assert_eq!(rounds.len(), 2);
        assert_eq!(rounds[0].locals.len(), 1);
        assert_eq!(rounds[0].xfers.len(), 2);
        assert_eq!(rounds[1].locals.len(), 1);
    }

    #[test]
    fn a_phase_change_applies_to_the_next_transfers_even_after_an_empty_step() {
        // Rank A has a local step between the phases, rank B's was empty (skipped):
        // both must tag the following transfer with the new phase.
        for with_local in [true, false] {
            let mut b = Builder::new(0, 2);
            b.set_phase(Phase::CheckDesc);
            b.send(1, Slice::new(Buf::Send, 0, 0));
            b.call(Box::new(|_| Ok(())));
            b.set_phase(Phase::Main);
            let n = if with_local { 8 } else { 0 };
            b.copy(Slice::new(Buf::Send, 0, n), Slice::new(Buf::Recv, 0, n));
            b.round();
            b.send(1, Slice::new(Buf::Send, 0, 0));
            let last = b.rounds.iter().rev().find(|r| !r.xfers.is_empty()).unwrap();
            assert_eq!(last.phase, Phase::Main, "with_local={with_local}");
            let first = b.rounds.iter().find(|r| !r.xfers.is_empty()).unwrap();
            assert_eq!(first.phase, Phase::CheckDesc);
        }
    }

    #[test]
    fn exchange_between_two_ranks_runs_in_memory() {
        let send: Vec<Vec<u64>> = vec![vec![1, 2], vec![3, 4]];
        let mut recv: Vec<Vec<u64>> = vec![vec![0; 2]; 2];
        let mut execs: Vec<Exec> = (0..2)
            .zip(recv.iter_mut())
            .map(|(r, rb)| {
                let mut b = Builder::new(r, 2);
                b.send(1 - r, Slice::new(Buf::Send, 0, 16));
                b.recv(1 - r, Slice::new(Buf::Recv, 0, 16));
                b.finish(
                    "test",
                    UserBufs::new(
                        bytemuck::cast_slice(&send[r]),
                        bytemuck::cast_slice_mut(rb),
                        None,
                    ),
                    sim::ctx(2),
                )
            })
            .collect();
        let (res, msgs) = sim::run(&mut execs);
        assert!(res.iter().all(Result::is_ok));
        assert_eq!(msgs, 2);
        drop(execs);
        assert_eq!(recv, vec![vec![3, 4], vec![1, 2]]);
    }

    #[test]
    fn short_message_is_a_collective_error() {
        let send = [0u8; 4];
        let mut r0 = [0u8; 8];
        let mut r1 = [0u8; 8];
        let mk = |r: usize, len: usize, rb: &mut [u8]| {
            let mut b = Builder::new(r, 2);
            b.send(1 - r, Slice::new(Buf::Send, 0, len));
            b.recv(1 - r, Slice::new(Buf::Recv, 0, 8));
            b.finish("allgather", UserBufs::new(&send, rb, None), sim::ctx(2))
        };
        let mut execs = vec![mk(0, 4, &mut r0), mk(1, 0, &mut r1)];
        let (res, _) = sim::run(&mut execs);
        let e = res[0].as_ref().unwrap_err().to_string();
        assert!(
            e.contains("rank 1 sent 0 bytes where 8 were expected"),
            "{e}"
        );
    }

    /// A broadcast tree whose root sends more than the others expect: the ranks that
    /// receive from the root find the mismatch and revoke the context, so the ranks
    /// below them, which would wait forever for their part, fail too (`sim::run`
    /// panics on a deadlock). Without the revocation this deadlocks.
    #[test]
    fn a_mismatch_revokes_so_the_ranks_below_do_not_wait_forever() {
        // 0 -> 1 -> 2 -> 3 (a chain); rank 0 sends 16 bytes, the others expect 8.
        let src = [7u8; 16];
        let mut bufs = vec![vec![0u8; 16]; 4];
        let mut execs: Vec<Exec> = bufs
            .iter_mut()
            .enumerate()
            .map(|(r, rb)| {
                let want = if r == 0 { 16 } else { 8 };
                let mut b = Builder::new(r, 4);
                if r > 0 {
                    b.recv(r - 1, Slice::new(Buf::Recv, 0, want));
                    b.round();
                }
                if r < 3 {
                    let from = if r == 0 { Buf::Send } else { Buf::Recv };
                    b.send(r + 1, Slice::new(from, 0, want));
                }
                b.finish(
                    "bcast",
                    UserBufs::new(&src, &mut rb[..want], None),
                    sim::ctx(4),
                )
            })
            .collect();
        let (res, _) = sim::run(&mut execs);
        assert!(res[0].is_ok(), "{:?}", res[0]);
        let e1 = res[1].as_ref().unwrap_err().to_string();
        assert!(
            e1.contains("rank 0 sent 16 bytes where 8 were expected"),
            "{e1}"
        );
        for r in [2, 3] {
            let e = res[r].as_ref().unwrap_err().to_string();
            assert!(e.contains("revoked by rank 1"), "rank {r}: {e}");
        }
    }
}
