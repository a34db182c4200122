//! Collective operations (MPI 4.1 chapter 6) on rankwire's [`Communicator`]: every
//! collective in its blocking form, its nonblocking `MPI_I…` form (§6.12) and its
//! persistent `…_init` form (§6.13), each also as the large-count `_c` form (MPI 4.1
//! §5.2.1: the same call with `MPI_Count` counts and `MPI_Aint` displacements).
//!
//! # Structure
//! Each collective has one implementation taking the C arguments and a [`Mode`]:
//! `Block` calls rankwire's blocking collective (its fast paths included) and then
//! the completion step, `Start` calls the nonblocking one and returns the
//! [`Started`] operation that `MPI_Wait`/`MPI_Test` complete. A persistent request
//! keeps the arguments and runs the implementation with `Start` at each `MPI_Start`
//! (the buffers and count arrays are read at each start: MPI 4.1 §6.13 forbids
//! changing them while the request exists).
//!
//! # Data
//! Collectives move bytes (`u8` elements in rankwire): the two sides of a call may
//! describe their data with different counts and types as long as the byte counts
//! agree (MPI 4.1 §6.1: equal type signatures); non-contiguous types are packed and
//! unpacked, device memory staged through host memory (see `coll_buf.rs`), except
//! for `MPI_Bcast` and `MPI_Allgather` on contiguous device buffers, which run on
//! rankwire's device collectives when every rank's buffers allow it (the agreement of
//! `memkind.rs`). The reductions are in `coll_red.rs`.
//!
//! # `MPI_IN_PLACE` (MPI 4.1 §6.2.3)
//! | collective | where | meaning |
//! |---|---|---|
//! | gather(v) | root's `sendbuf` | the root's block is already in `recvbuf` |
//! | scatter(v) | root's `recvbuf` | the root keeps its block in `sendbuf` |
//! | allgather(v) | every `sendbuf` | each rank's block is already in `recvbuf` |
//! | alltoall(v/w) | every `sendbuf` | the input is `recvbuf` (with the receive layout) |
//! | reduce | root's `sendbuf` | the root's input is `recvbuf` |
//! | allreduce, scan, exscan, reduce_scatter(_block) | every `sendbuf` | the input is `recvbuf` |
//!
//! Roots: intercommunicators do not exist here, so `MPI_ROOT` and `MPI_PROC_NULL` as a
//! root, like any value outside `0..size`, are `MPI_ERR_ROOT`.

use crate::coll_buf::{
    Block, DevRaw, Pinned, Raw, device_span, dst, empty_dst, empty_src, scratch_dst, src, vdst,
    vsrc,
};
use crate::comm::lookup;
use crate::consts::*;
use crate::datatype::{count, for_comm};
use crate::error::{R, err};
use crate::request::{Active, Finish, Keep, Started};
use rankwire::{CollRequest, Communicator};
use std::ffi::{c_int, c_void};

/// How an implementation runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Blocking: complete before returning.
    Block,
    /// Nonblocking: return the started operation.
    Start,
}

/// What an implementation returns: the started operation in [`Mode::Start`].
pub type Out = Option<Started>;

/// Runs `block` (and then `finish`) in [`Mode::Block`], or `start` in [`Mode::Start`],
/// returning the operation with `finish` and `keep` attached.
///
/// # Errors
/// rankwire's error of the call, or `finish`'s.
pub fn run(
    mode: Mode,
    block: impl FnOnce() -> rankwire::Result<()>,
    start: impl FnOnce() -> rankwire::Result<CollRequest<'static>>,
    finish: Option<Finish>,
    keep: Keep,
) -> R<Out> {
    match mode {
        Mode::Block => {
            block()?;
            if let Some(f) = finish {
                f(&mut crate::request::empty_status())?;
            }
            drop(keep);
            Ok(None)
        }
        Mode::Start => {
            let q = start()?;
            Ok(Some(Started {
                active: Active::Coll(q),
                finish,
                keep,
            }))
        }
    }
}

/// As [`run`], with the completion step and what to keep alive unboxed: a blocking
/// call runs `finish` and drops `keep` right away without a heap allocation for either
/// (the common case of `MPI_Allreduce` & co on small buffers); a nonblocking one boxes
/// them into the request.
///
/// # Errors
/// The operation's errors, then those of `finish`.
pub fn run_with<K: std::any::Any + Send>(
    mode: Mode,
    block: impl FnOnce() -> rankwire::Result<()>,
    start: impl FnOnce() -> rankwire::Result<CollRequest<'static>>,
    finish: impl FnOnce() -> R + Send + 'static,
    keep: K,
) -> R<Out> {
    match mode {
        Mode::Block => {
            block()?;
            finish()?;
            drop(keep);
            Ok(None)
        }
        Mode::Start => {
            let q = start()?;
            Ok(Some(Started {
                active: Active::Coll(q),
                finish: Some(Box::new(move |_| finish())),
                keep: vec![Box::new(keep)],
            }))
        }
    }
}

/// A root argument.
///
/// # Errors
/// `MPI_ERR_ROOT` outside `0..size` (`MPI_ROOT` and `MPI_PROC_NULL` included: there are
/// no intercommunicators).
pub fn root_arg(c: &Communicator, root: c_int) -> R<usize> {
    if root < 0 || root as usize >= c.size() {
        return Err(err(
            MPI_ERR_ROOT,
            format!(
                "collective: root {root} is out of range for a communicator of size {} (MPI_ROOT and MPI_PROC_NULL apply to intercommunicators, which this library does not have); fix: pass a root in 0..{}",
                c.size(),
                c.size()
            ),
        ));
    }
    Ok(root as usize)
}

/// Integer types of counts and displacements (`int`, `MPI_Count`, `MPI_Aint`).
pub trait Num: Copy {
    /// As `i64`.
    fn i64(self) -> i64;
}

impl Num for i32 {
    fn i64(self) -> i64 {
        self as i64
    }
}

impl Num for i64 {
    fn i64(self) -> i64 {
        self
    }
}

impl Num for isize {
    fn i64(self) -> i64 {
        self as i64
    }
}

/// `n` entries of a C array of counts or displacements.
///
/// # Safety
/// `p` is null or valid for `n` reads.
///
/// # Errors
/// `MPI_ERR_ARG` for a null array.
pub unsafe fn arr<C: Num>(p: *const C, n: usize, what: &str) -> R<Vec<i64>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(err(
            MPI_ERR_ARG,
            format!("collective: the array {what} is a null pointer; fix: pass one entry per rank"),
        ));
    }
    // SAFETY: caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) }
        .iter()
        .map(|x| x.i64())
        .collect())
}

/// `n` datatype handles of a C array.
///
/// # Safety
/// As [`arr`].
unsafe fn types(p: *const MPI_Datatype, n: usize, what: &str) -> R<Vec<MPI_Datatype>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(err(
            MPI_ERR_ARG,
            format!(
                "collective: the array {what} is a null pointer; fix: pass one datatype per rank"
            ),
        ));
    }
    // SAFETY: caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
}

/// `n` elements per rank for `p` ranks (the count of a root's or an allgather's whole
/// buffer).
///
/// # Errors
/// `MPI_ERR_COUNT` when the product overflows.
fn times_p(n: usize, p: usize) -> R<usize> {
    n.checked_mul(p).ok_or_else(|| {
        err(
            MPI_ERR_COUNT,
            format!(
                "count {n} per rank × {p} ranks overflows; fix: pass the count of one rank's block"
            ),
        )
    })
}

fn cnt<C: Num>(c: C) -> R<usize> {
    count(c.i64())
}

fn in_place(p: *const c_void) -> bool {
    p as usize == MPI_IN_PLACE
}

/// `p + k` bytes.
fn off(p: *const c_void, k: isize) -> *mut u8 {
    (p as isize).wrapping_add(k) as *mut u8
}

fn fin_dst(d: crate::coll_buf::Dst) -> Option<Finish> {
    Some(Box::new(move |_| d.finish()))
}

fn fin_blocks(b: crate::coll_buf::Blocks) -> Option<Finish> {
    Some(Box::new(move |_| b.finish()))
}

/// `MPI_Barrier` (MPI 4.1 §6.3).
pub(crate) unsafe fn barrier(comm: MPI_Comm, mode: Mode) -> R<Out> {
    let c = lookup(comm)?;
    let c2 = c.clone();
    run(
        mode,
        move || c.barrier(),
        move || c2.ibarrier(),
        None,
        Vec::new(),
    )
}

/// `MPI_Bcast` (MPI 4.1 §6.4): `count` elements of `dt` from `root` to every rank.
/// A contiguous device buffer runs on rankwire's device broadcast.
pub(crate) unsafe fn bcast<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    buf: *mut c_void,
    n: C,
    dt: MPI_Datatype,
    root: c_int,
) -> R<Out> {
    // The common blocking case, recognised from the handles alone (no datatype object
    // looked up): `n > 0` elements of a contiguous predefined type in host memory, in a
    // job where the ranks need not agree on a device path (memkind.rs). The general
    // path below makes the same core call for it, after more lookups.
    if mode == Mode::Block
        && !crate::memkind::agreement_needed()
        && let Some(size) = crate::datatype::contiguous_predefined(dt)
        && let Ok(n) = cnt(n)
        && let Some(len) = crate::buf::bytes_of(n, size).filter(|&l| l > 0)
        && !buf.is_null()
        && buf as usize != MPI_IN_PLACE
        && !crate::buf::is_device(buf as *const u8, len)
    {
        let c = lookup(comm)?;
        let root = root_arg(&c, root)?;
        // SAFETY: the caller's `len` bytes of host memory at `buf`, for the call.
        c.bcast(unsafe { crate::buf::bytes_mut(buf as *mut u8, len) }, root)?;
        return Ok(None);
    }
    let c = lookup(comm)?;
    let root = root_arg(&c, root)?;
    let n = cnt(n)?;
    let t = for_comm(dt)?;
    let local = device_span(buf as *const u8, n, &t);
    // Every rank, whatever its buffer: the ranks agree on the path (memkind.rs).
    if crate::memkind::device_path(&c, comm, mode, local.is_some())?
        && let Some((p, len)) = local
    {
        if mode == Mode::Block {
            c.bcast_device(&mut DevRaw(p, len), root)?;
            return Ok(None);
        }
        let b = Pinned::new(DevRaw(p, len));
        // SAFETY: the box lives in the request's keep list until it completes.
        let q = unsafe { c.ibcast_device(b.get(), root)? };
        return Ok(Some(Started {
            active: Active::Coll(q),
            finish: None,
            keep: vec![Box::new(b)],
        }));
    }
    // The common blocking case without a Dst: the caller's contiguous host bytes.
    if mode == Mode::Block
        && crate::buf::bytes_of(n, t.size.max(t.extent.unsigned_abs())).is_some()
        && let Some((off, len)) = t.contiguous_span(n)
        && len > 0
    {
        let p = (buf as *mut u8).wrapping_offset(off);
        if !p.is_null() && buf as usize != MPI_IN_PLACE && !crate::buf::is_device(p, len) {
            // SAFETY: the caller's `len` bytes of host memory at `p`, for the call.
            c.bcast(unsafe { crate::buf::bytes_mut(p, len) }, root)?;
            return Ok(None);
        }
    }
    let at_root = c.rank() == root;
    // SAFETY: the caller's buffer.
    let d = unsafe { dst(buf as *mut u8, n, dt, at_root)? };
    let r = d.raw();
    let c2 = c.clone();
    // The root's buffer is unchanged: its packed or staged copy is dropped.
    let fin: Finish = Box::new(move |_| if at_root { Ok(()) } else { d.finish() });
    // SAFETY (both closures): d lives in the request until completion.
    run(
        mode,
        move || c.bcast(unsafe { r.m() }, root),
        move || c2.ibcast(unsafe { r.m() }, root),
        Some(fin),
        Vec::new(),
    )
}

/// `MPI_Gather` (MPI 4.1 §6.5).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gather<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    sn: C,
    st: MPI_Datatype,
    rbuf: *mut c_void,
    rn: C,
    rt: MPI_Datatype,
    root: c_int,
) -> R<Out> {
    let c = lookup(comm)?;
    let root = root_arg(&c, root)?;
    let p = c.size();
    let (s, d) = if c.rank() == root {
        let rn = cnt(rn)?;
        let t = for_comm(rt)?;
        // SAFETY: the caller's buffers.
        unsafe {
            let d = dst(rbuf as *mut u8, times_p(rn, p)?, rt, false)?;
            let s = if in_place(sbuf) {
                src(
                    off(rbuf, root as isize * rn as isize * t.extent),
                    rn,
                    rt,
                    true,
                )?
            } else {
                src(sbuf as *const u8, cnt(sn)?, st, false)?
            };
            (s, d)
        }
    } else {
        // SAFETY: the caller's buffer.
        (
            unsafe { src(sbuf as *const u8, cnt(sn)?, st, false)? },
            empty_dst(),
        )
    };
    let (sr, dr, c2) = (s.raw(), d.raw(), c.clone());
    // SAFETY (both closures): s and d live in the request until completion.
    run(
        mode,
        move || c.gather(unsafe { sr.s() }, unsafe { dr.m() }, root),
        move || c2.igather(unsafe { sr.s() }, unsafe { dr.m() }, root),
        fin_dst(d),
        vec![Box::new(s)],
    )
}

/// `MPI_Gatherv` (MPI 4.1 §6.5): `recvcounts`/`displs` (elements of `recvtype`) are
/// read on the root only.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gatherv<C: Num, D: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    sn: C,
    st: MPI_Datatype,
    rbuf: *mut c_void,
    rcounts: *const C,
    displs: *const D,
    rt: MPI_Datatype,
    root: c_int,
) -> R<Out> {
    let c = lookup(comm)?;
    let root = root_arg(&c, root)?;
    let p = c.size();
    if c.rank() != root {
        // SAFETY: the caller's buffer.
        let s = unsafe { src(sbuf as *const u8, cnt(sn)?, st, false)? };
        let (sr, c2) = (s.raw(), c.clone());
        // SAFETY (both closures): s lives in the request until completion.
        return run(
            mode,
            move || c.gatherv(unsafe { sr.s() }, &mut [], &[], &[], root),
            move || c2.igatherv(unsafe { sr.s() }, &mut [], &[], &[], root),
            None,
            vec![Box::new(s)],
        );
    }
    let t = for_comm(rt)?;
    // SAFETY: the caller's arrays of p entries.
    let (rc, ds) = unsafe { (arr(rcounts, p, "recvcounts")?, arr(displs, p, "displs")?) };
    let blocks: Vec<Block> = (0..p)
        .map(|i| Ok((off(rbuf, ds[i] as isize * t.extent), count(rc[i])?, rt)))
        .collect::<R<_>>()?;
    // SAFETY: the caller's buffers.
    let (s, v) = unsafe {
        let v = vdst(&blocks)?;
        let s = if in_place(sbuf) {
            src(blocks[root].0, blocks[root].1, rt, true)?
        } else {
            src(sbuf as *const u8, cnt(sn)?, st, false)?
        };
        (s, v)
    };
    let (sr, vr, c2) = (s.raw(), v.raw(), c.clone());
    let (k, d) = (v.counts.clone(), v.displs.clone());
    let (k2, d2) = (k.clone(), d.clone());
    // SAFETY (both closures): s and v live in the request until completion.
    run(
        mode,
        move || c.gatherv(unsafe { sr.s() }, unsafe { vr.m() }, &k, &d, root),
        move || c2.igatherv(unsafe { sr.s() }, unsafe { vr.m() }, &k2, &d2, root),
        fin_blocks(v),
        vec![Box::new(s)],
    )
}

/// `MPI_Scatter` (MPI 4.1 §6.6).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scatter<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    sn: C,
    st: MPI_Datatype,
    rbuf: *mut c_void,
    rn: C,
    rt: MPI_Datatype,
    root: c_int,
) -> R<Out> {
    let c = lookup(comm)?;
    let root = root_arg(&c, root)?;
    let p = c.size();
    // SAFETY: the caller's buffers.
    let (s, d) = unsafe {
        if c.rank() == root {
            let sn = cnt(sn)?;
            let s = src(sbuf as *const u8, times_p(sn, p)?, st, false)?;
            let d = if in_place(rbuf) {
                scratch_dst(s.len / p.max(1))
            } else {
                dst(rbuf as *mut u8, cnt(rn)?, rt, false)?
            };
            (s, d)
        } else {
            (empty_src(), dst(rbuf as *mut u8, cnt(rn)?, rt, false)?)
        }
    };
    let (sr, dr, c2) = (s.raw(), d.raw(), c.clone());
    // SAFETY (both closures): s and d live in the request until completion.
    run(
        mode,
        move || c.scatter(unsafe { sr.s() }, unsafe { dr.m() }, root),
        move || c2.iscatter(unsafe { sr.s() }, unsafe { dr.m() }, root),
        fin_dst(d),
        vec![Box::new(s)],
    )
}

/// `MPI_Scatterv` (MPI 4.1 §6.6): `sendcounts`/`displs` are read on the root only.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scatterv<C: Num, D: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    scounts: *const C,
    displs: *const D,
    st: MPI_Datatype,
    rbuf: *mut c_void,
    rn: C,
    rt: MPI_Datatype,
    root: c_int,
) -> R<Out> {
    let c = lookup(comm)?;
    let root = root_arg(&c, root)?;
    let p = c.size();
    if c.rank() != root {
        // SAFETY: the caller's buffer.
        let d = unsafe { dst(rbuf as *mut u8, cnt(rn)?, rt, false)? };
        let (dr, c2) = (d.raw(), c.clone());
        // SAFETY (both closures): d lives in the request until completion.
        return run(
            mode,
            move || c.scatterv(&[], &[], &[], unsafe { dr.m() }, root),
            move || c2.iscatterv(&[], &[], &[], unsafe { dr.m() }, root),
            fin_dst(d),
            Vec::new(),
        );
    }
    let t = for_comm(st)?;
    // SAFETY: the caller's arrays of p entries.
    let (sc, ds) = unsafe { (arr(scounts, p, "sendcounts")?, arr(displs, p, "displs")?) };
    let blocks: Vec<Block> = (0..p)
        .map(|i| Ok((off(sbuf, ds[i] as isize * t.extent), count(sc[i])?, st)))
        .collect::<R<_>>()?;
    // SAFETY: the caller's buffers.
    let (v, d) = unsafe {
        let v = vsrc(&blocks, false)?;
        let d = if in_place(rbuf) {
            scratch_dst(v.counts[root])
        } else {
            dst(rbuf as *mut u8, cnt(rn)?, rt, false)?
        };
        (v, d)
    };
    let (vr, dr, c2) = (v.raw(), d.raw(), c.clone());
    let (k, o) = (v.counts.clone(), v.displs.clone());
    let (k2, o2) = (k.clone(), o.clone());
    // SAFETY (both closures): v and d live in the request until completion.
    run(
        mode,
        move || c.scatterv(unsafe { vr.s() }, &k, &o, unsafe { dr.m() }, root),
        move || c2.iscatterv(unsafe { vr.s() }, &k2, &o2, unsafe { dr.m() }, root),
        fin_dst(d),
        vec![Box::new(v)],
    )
}

/// `MPI_Allgather` (MPI 4.1 §6.7). Contiguous device buffers (in place or not,
/// blocking or not) run on rankwire's device allgather.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn allgather<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    sn: C,
    st: MPI_Datatype,
    rbuf: *mut c_void,
    rn: C,
    rt: MPI_Datatype,
) -> R<Out> {
    let c = lookup(comm)?;
    let p = c.size();
    let rn = cnt(rn)?;
    let t = for_comm(rt)?;
    let inplace = in_place(sbuf);
    let r = times_p(rn, p)
        .ok()
        .and_then(|all| device_span(rbuf as *const u8, all, &t));
    // Errors of the send arguments are reported by the general path, after the
    // agreement (here they only make the device path unavailable).
    let s = match (r, inplace) {
        (Some(_), false) => match (cnt(sn), for_comm(st)) {
            (Ok(sn), Ok(stt)) => device_span(sbuf as *const u8, sn, &stt),
            _ => None,
        },
        _ => None,
    };
    // The device call this rank's buffers allow.
    let local = r.filter(|_| inplace || s.is_some());
    // Every rank, whatever its buffers: the ranks agree on the path (memkind.rs).
    if crate::memkind::device_path(&c, comm, mode, local.is_some())?
        && let Some(r) = local
    {
        if inplace {
            if mode == Mode::Block {
                c.allgather_device_in_place(&mut DevRaw(r.0, r.1))?;
                return Ok(None);
            }
            let rb = Pinned::new(DevRaw(r.0, r.1));
            // SAFETY: the box lives in the request's keep list until it completes.
            let q = unsafe { c.iallgather_device_in_place(rb.get())? };
            return Ok(Some(Started {
                active: Active::Coll(q),
                finish: None,
                keep: vec![Box::new(rb)],
            }));
        }
        if let Some(s) = s {
            if mode == Mode::Block {
                c.allgather_device(&DevRaw(s.0, s.1), &mut DevRaw(r.0, r.1))?;
                return Ok(None);
            }
            let sb = Pinned::new(DevRaw(s.0, s.1));
            let rb = Pinned::new(DevRaw(r.0, r.1));
            // SAFETY: the boxes live in the request's keep list until it completes.
            let q = unsafe { c.iallgather_device(sb.get(), rb.get())? };
            return Ok(Some(Started {
                active: Active::Coll(q),
                finish: None,
                keep: vec![Box::new(sb), Box::new(rb)],
            }));
        }
    }
    // SAFETY: the caller's buffers.
    let d = unsafe { dst(rbuf as *mut u8, times_p(rn, p)?, rt, inplace)? };
    let dr = d.raw();
    let c2 = c.clone();
    if inplace {
        // SAFETY (both closures): d lives in the request until completion.
        return run(
            mode,
            move || c.allgather_in_place(unsafe { dr.m() }),
            move || c2.iallgather_in_place(unsafe { dr.m() }),
            fin_dst(d),
            Vec::new(),
        );
    }
    // SAFETY: the caller's buffer.
    let s = unsafe { src(sbuf as *const u8, cnt(sn)?, st, false)? };
    let sr = s.raw();
    // SAFETY (both closures): s and d live in the request until completion.
    run(
        mode,
        move || c.allgather(unsafe { sr.s() }, unsafe { dr.m() }),
        move || c2.iallgather(unsafe { sr.s() }, unsafe { dr.m() }),
        fin_dst(d),
        vec![Box::new(s)],
    )
}

/// `MPI_Allgatherv` (MPI 4.1 §6.7).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn allgatherv<C: Num, D: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    sn: C,
    st: MPI_Datatype,
    rbuf: *mut c_void,
    rcounts: *const C,
    displs: *const D,
    rt: MPI_Datatype,
) -> R<Out> {
    let c = lookup(comm)?;
    let (p, me) = (c.size(), c.rank());
    let t = for_comm(rt)?;
    // SAFETY: the caller's arrays of p entries.
    let (rc, ds) = unsafe { (arr(rcounts, p, "recvcounts")?, arr(displs, p, "displs")?) };
    let blocks: Vec<Block> = (0..p)
        .map(|i| Ok((off(rbuf, ds[i] as isize * t.extent), count(rc[i])?, rt)))
        .collect::<R<_>>()?;
    // SAFETY: the caller's buffers.
    let (s, v) = unsafe {
        let v = vdst(&blocks)?;
        let s = if in_place(sbuf) {
            src(blocks[me].0, blocks[me].1, rt, true)?
        } else {
            src(sbuf as *const u8, cnt(sn)?, st, false)?
        };
        (s, v)
    };
    let (sr, vr, c2) = (s.raw(), v.raw(), c.clone());
    let (k, d) = (v.counts.clone(), v.displs.clone());
    let (k2, d2) = (k.clone(), d.clone());
    // SAFETY (both closures): s and v live in the request until completion.
    run(
        mode,
        move || c.allgatherv(unsafe { sr.s() }, unsafe { vr.m() }, &k, &d),
        move || c2.iallgatherv(unsafe { sr.s() }, unsafe { vr.m() }, &k2, &d2),
        fin_blocks(v),
        vec![Box::new(s)],
    )
}

/// `MPI_Alltoall` (MPI 4.1 §6.8).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn alltoall<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    sn: C,
    st: MPI_Datatype,
    rbuf: *mut c_void,
    rn: C,
    rt: MPI_Datatype,
) -> R<Out> {
    // The common blocking case, recognised from the handles alone (as MPI_Bcast's):
    // contiguous predefined types, equal bytes per block on both sides, separate host
    // buffers, in a job where the ranks need not agree on a device path. The general
    // path below makes the same core call on the same bytes, after more lookups.
    if mode == Mode::Block
        && !crate::memkind::agreement_needed()
        && !in_place(sbuf)
        && let (Some(ss), Some(rs)) = (
            crate::datatype::contiguous_predefined(st),
            crate::datatype::contiguous_predefined(rt),
        )
        && let (Ok(sn), Ok(rn)) = (cnt(sn), cnt(rn))
        && let Some(block) = crate::buf::bytes_of(sn, ss)
            .filter(|&b| b > 0 && Some(b) == crate::buf::bytes_of(rn, rs))
        && !sbuf.is_null()
        && !rbuf.is_null()
    {
        let c = lookup(comm)?;
        let ends_before =
            |a: usize, b: usize, len: usize| a.checked_add(len).is_some_and(|e| e <= b);
        if let Some(len) = crate::buf::bytes_of(block, c.size())
            && (ends_before(sbuf as usize, rbuf as usize, len)
                || ends_before(rbuf as usize, sbuf as usize, len))
            && !crate::buf::is_device(sbuf as *const u8, len)
            && !crate::buf::is_device(rbuf as *const u8, len)
        {
            // SAFETY: the caller's `len` bytes at each (host memory, not overlapping),
            // for the call.
            let (sb, rb) = unsafe {
                (
                    crate::buf::bytes(sbuf as *const u8, len),
                    crate::buf::bytes_mut(rbuf as *mut u8, len),
                )
            };
            c.alltoall(sb, rb)?;
            return Ok(None);
        }
    }
    let c = lookup(comm)?;
    let p = c.size();
    let rn = cnt(rn)?;
    // SAFETY: the caller's buffers (an in-place input is copied: it is the output).
    let (s, d) = unsafe {
        let s = if in_place(sbuf) {
            src(rbuf as *const u8, times_p(rn, p)?, rt, true)?
        } else {
            src(sbuf as *const u8, times_p(cnt(sn)?, p)?, st, false)?
        };
        (s, dst(rbuf as *mut u8, times_p(rn, p)?, rt, false)?)
    };
    let (sr, dr, c2) = (s.raw(), d.raw(), c.clone());
    // SAFETY (both closures): s and d live in the request until completion.
    run(
        mode,
        move || c.alltoall(unsafe { sr.s() }, unsafe { dr.m() }),
        move || c2.ialltoall(unsafe { sr.s() }, unsafe { dr.m() }),
        fin_dst(d),
        vec![Box::new(s)],
    )
}

/// The shared part of alltoallv and alltoallw: per-rank send and receive blocks.
fn alltoall_blocks(
    c: crate::comm::CommRef,
    mode: Mode,
    sb: &[Block],
    rb: &[Block],
    copy: bool,
) -> R<Out> {
    // SAFETY: the caller's buffers (an in-place input is copied: it is the output).
    let (s, v) = unsafe { (vsrc(sb, copy)?, vdst(rb)?) };
    let (sr, vr, c2): (Raw, Raw, crate::comm::CommRef) = (s.raw(), v.raw(), c.clone());
    let (sk, sd, rk, rd) = (
        s.counts.clone(),
        s.displs.clone(),
        v.counts.clone(),
        v.displs.clone(),
    );
    let (sk2, sd2, rk2, rd2) = (sk.clone(), sd.clone(), rk.clone(), rd.clone());
    // SAFETY (both closures): s and v live in the request until completion.
    run(
        mode,
        move || c.alltoallv(unsafe { sr.s() }, &sk, &sd, unsafe { vr.m() }, &rk, &rd),
        move || c2.ialltoallv(unsafe { sr.s() }, &sk2, &sd2, unsafe { vr.m() }, &rk2, &rd2),
        fin_blocks(v),
        vec![Box::new(s)],
    )
}

/// `MPI_Alltoallv` (MPI 4.1 §6.8): displacements in elements of the side's type.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn alltoallv<C: Num, D: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    scounts: *const C,
    sdispls: *const D,
    st: MPI_Datatype,
    rbuf: *mut c_void,
    rcounts: *const C,
    rdispls: *const D,
    rt: MPI_Datatype,
) -> R<Out> {
    let c = lookup(comm)?;
    let p = c.size();
    let inplace = in_place(sbuf);
    let rtt = for_comm(rt)?;
    // SAFETY: the caller's arrays of p entries.
    let (rc, rd) = unsafe { (arr(rcounts, p, "recvcounts")?, arr(rdispls, p, "rdispls")?) };
    let rb: Vec<Block> = (0..p)
        .map(|i| Ok((off(rbuf, rd[i] as isize * rtt.extent), count(rc[i])?, rt)))
        .collect::<R<_>>()?;
    let sb: Vec<Block> = if inplace {
        rb.clone()
    } else {
        let stt = for_comm(st)?;
        // SAFETY: as above.
        let (sc, sd) = unsafe { (arr(scounts, p, "sendcounts")?, arr(sdispls, p, "sdispls")?) };
        (0..p)
            .map(|i| Ok((off(sbuf, sd[i] as isize * stt.extent), count(sc[i])?, st)))
            .collect::<R<_>>()?
    };
    alltoall_blocks(c, mode, &sb, &rb, inplace)
}

/// `MPI_Alltoallw` (MPI 4.1 §6.8): a datatype per block, displacements in bytes.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn alltoallw<C: Num, D: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    scounts: *const C,
    sdispls: *const D,
    stypes: *const MPI_Datatype,
    rbuf: *mut c_void,
    rcounts: *const C,
    rdispls: *const D,
    rtypes: *const MPI_Datatype,
) -> R<Out> {
    let c = lookup(comm)?;
    let p = c.size();
    let inplace = in_place(sbuf);
    // SAFETY: the caller's arrays of p entries.
    let (rc, rd, rts) = unsafe {
        (
            arr(rcounts, p, "recvcounts")?,
            arr(rdispls, p, "rdispls")?,
            types(rtypes, p, "recvtypes")?,
        )
    };
    let rb: Vec<Block> = (0..p)
        .map(|i| Ok((off(rbuf, rd[i] as isize), count(rc[i])?, rts[i])))
        .collect::<R<_>>()?;
    let sb: Vec<Block> = if inplace {
        rb.clone()
    } else {
        // SAFETY: as above.
        let (sc, sd, sts) = unsafe {
            (
                arr(scounts, p, "sendcounts")?,
                arr(sdispls, p, "sdispls")?,
                types(stypes, p, "sendtypes")?,
            )
        };
        (0..p)
            .map(|i| Ok((off(sbuf, sd[i] as isize), count(sc[i])?, sts[i])))
            .collect::<R<_>>()?
    };
    alltoall_blocks(c, mode, &sb, &rb, inplace)
}

pub(crate) unsafe fn allreduce<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: C,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> R<Out> {
    // SAFETY: the caller's arguments.
    unsafe { crate::coll_red::allreduce(comm, mode, sbuf as _, rbuf as _, n.i64(), dt, op) }
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn reduce<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: C,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
) -> R<Out> {
    // SAFETY: the caller's arguments.
    unsafe { crate::coll_red::reduce(comm, mode, sbuf as _, rbuf as _, n.i64(), dt, op, root) }
}

pub(crate) unsafe fn reduce_scatter_block<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: C,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> R<Out> {
    // SAFETY: the caller's arguments.
    unsafe {
        crate::coll_red::reduce_scatter_block(comm, mode, sbuf as _, rbuf as _, n.i64(), dt, op)
    }
}

pub(crate) unsafe fn reduce_scatter<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    rcounts: *const C,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> R<Out> {
    let p = lookup(comm)?.size();
    // SAFETY: the caller's array of p entries.
    let counts = unsafe { arr(rcounts, p, "recvcounts")? };
    // SAFETY: the caller's arguments.
    unsafe { crate::coll_red::reduce_scatter(comm, mode, sbuf as _, rbuf as _, &counts, dt, op) }
}

pub(crate) unsafe fn scan<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: C,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> R<Out> {
    // SAFETY: the caller's arguments.
    unsafe { crate::coll_red::scan(comm, mode, sbuf as _, rbuf as _, n.i64(), dt, op, false) }
}

pub(crate) unsafe fn exscan<C: Num>(
    comm: MPI_Comm,
    mode: Mode,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: C,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> R<Out> {
    // SAFETY: the caller's arguments.
    unsafe { crate::coll_red::scan(comm, mode, sbuf as _, rbuf as _, n.i64(), dt, op, true) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll_api::*;

    /// `MPI_Type_vector(3, 1, 2, MPI_INT)`, committed: elements 0, 2, 4 of an int
    /// array, extent 20 bytes.
    fn vector3() -> MPI_Datatype {
        let mut t = 0;
        // SAFETY: plain constructor calls with valid out-pointers.
        unsafe {
            assert_eq!(
                crate::dtype_ctor_c::MPI_Type_vector(3, 1, 2, INT, &mut t),
                0
            );
            assert_eq!(crate::dtype_ctor_c::MPI_Type_commit(&mut t), 0);
        }
        t
    }

    const INT: MPI_Datatype = 0x209;
    const DOUBLE_INT: MPI_Datatype = 0x229;

    // One process: MPI_Init makes a world of one rank (no launcher), so every
    // collective runs its packing, unpacking and in-place paths on derived types.
    #[test]
    fn derived_types_through_the_collectives_on_one_rank() {
        unsafe {
            assert_eq!(
                crate::env::MPI_Init(std::ptr::null_mut(), std::ptr::null_mut()),
                0
            );
            let w = MPI_COMM_WORLD;
            let v = vector3();
            // Send one vector (ints 0, 2, 4 of s), receive as 3 contiguous ints.
            let s: [i32; 6] = [10, -1, 12, -1, 14, -1];
            let mut r = [0i32; 3];
            let sp = s.as_ptr() as *const c_void;
            let rp = r.as_mut_ptr() as *mut c_void;
            assert_eq!(MPI_Allgather(sp, 1, v, rp, 3, INT, w), 0);
            assert_eq!(r, [10, 12, 14]);
            // The other way: contiguous ints into a vector (the gaps stay).
            let mut g = [7i32; 6];
            let gp = g.as_mut_ptr() as *mut c_void;
            assert_eq!(MPI_Alltoall(r.as_ptr() as _, 3, INT, gp, 1, v, w), 0);
            assert_eq!(g, [10, 7, 12, 7, 14, 7]);
            // Bcast, gather, scatter, allgatherv on the vector type.
            assert_eq!(MPI_Bcast(gp, 1, v, 0, w), 0);
            assert_eq!(g, [10, 7, 12, 7, 14, 7]);
            let mut gg = [0i32; 6];
            let ggp = gg.as_mut_ptr() as *mut c_void;
            assert_eq!(MPI_Gather(sp, 1, v, ggp, 1, v, 0, w), 0);
            assert_eq!(gg, [10, 0, 12, 0, 14, 0]);
            let (k, d) = ([1i32], [0i32]);
            let mut sv = [0i32; 6];
            assert_eq!(
                MPI_Scatterv(
                    sp,
                    k.as_ptr(),
                    d.as_ptr(),
                    v,
                    sv.as_mut_ptr() as _,
                    1,
                    v,
                    0,
                    w
                ),
                0
            );
            assert_eq!(sv, [10, 0, 12, 0, 14, 0]);
            // Reductions on the vector type: built-in (packed, typed) and in place.
            let mut out = [0i32; 6];
            assert_eq!(
                MPI_Allreduce(sp, out.as_mut_ptr() as _, 1, v, MPI_SUM, w),
                0
            );
            assert_eq!(out, [10, 0, 12, 0, 14, 0]);
            let mut io = [1i32, 5, 2, 5, 3, 5];
            assert_eq!(
                MPI_Allreduce(MPI_IN_PLACE as _, io.as_mut_ptr() as _, 1, v, MPI_MAX, w),
                0
            );
            assert_eq!(io, [1, 5, 2, 5, 3, 5]);
            // MPI_Reduce_local on the vector type: only the type map is combined.
            let mut acc = [1i32, 100, 1, 100, 1, 100];
            assert_eq!(
                crate::op::MPI_Reduce_local(sp, acc.as_mut_ptr() as _, 1, v, MPI_SUM),
                0
            );
            assert_eq!(acc, [11, 100, 13, 100, 15, 100]);
            // Alltoallw with a vector on one side, ints on the other (bytes displs).
            let mut w3 = [0i32; 4];
            let (one, three, zero, four) = ([1i32], [3i32], [0i32], [4i32]);
            let (tv, ti) = ([v], [INT]);
            assert_eq!(
                MPI_Alltoallw(
                    sp,
                    one.as_ptr(),
                    zero.as_ptr(),
                    tv.as_ptr(),
                    w3.as_mut_ptr() as _,
                    three.as_ptr(),
                    four.as_ptr(),
                    ti.as_ptr(),
                    w
                ),
                0
            );
            assert_eq!(w3, [0, 10, 12, 14]);
            // Nonblocking + persistent on MPI_DOUBLE_INT (a padded predefined type).
            #[repr(C)]
            #[derive(Clone, Copy, Debug, PartialEq)]
            struct Di {
                v: f64,
                i: i32,
            }
            let a = [Di { v: 1.5, i: 3 }, Di { v: -2.0, i: 9 }];
            let mut b = [Di { v: 0.0, i: 0 }; 2];
            let mut q: MPI_Request = MPI_REQUEST_NULL;
            assert_eq!(
                MPI_Iallreduce(
                    a.as_ptr() as _,
                    b.as_mut_ptr() as _,
                    2,
                    DOUBLE_INT,
                    MPI_MINLOC,
                    w,
                    &mut q
                ),
                0
            );
            assert_eq!(crate::request::MPI_Wait(&mut q, std::ptr::null_mut()), 0);
            assert_eq!(b, a);
            let mut b2 = [Di { v: 0.0, i: 0 }; 2];
            assert_eq!(
                MPI_Allgather_init(
                    a.as_ptr() as _,
                    2,
                    DOUBLE_INT,
                    b2.as_mut_ptr() as _,
                    2,
                    DOUBLE_INT,
                    w,
                    MPI_INFO_NULL,
                    &mut q
                ),
                0
            );
            for _ in 0..2 {
                b2 = [Di { v: 0.0, i: 0 }; 2];
                assert_eq!(crate::request::MPI_Start(&mut q), 0);
                assert_eq!(crate::request::MPI_Wait(&mut q, std::ptr::null_mut()), 0);
                assert_eq!(b2, a);
            }
            assert_eq!(crate::request::MPI_Request_free(&mut q), 0);
            assert_eq!(crate::env::MPI_Finalize(), 0);
        }
    }
}
