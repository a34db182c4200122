//! The reduction collectives (MPI 4.1 §6.9–6.11): reduce, allreduce,
//! reduce_scatter(_block), scan, exscan, on rankwire's collectives.
//!
//! Which path a call takes (the plan of `op.rs`):
//! - **Device**: a [`Plan::Core`] reduction of `float`, `double`, 32/64-bit integers
//!   with `MPI_SUM`/`PROD`/`MIN`/`MAX` (bitwise ops on integers) whose buffers are
//!   both contiguous device memory runs on rankwire's device collectives (GPU
//!   kernels): allreduce, reduce, reduce_scatter_block, scan and exscan, blocking and
//!   nonblocking, in place and not. Every other device case is staged through host
//!   memory. The device collectives exchange
//!   other messages than the host ones, so where a rank could pass device memory the
//!   ranks first agree whether all of them take the device path (`memkind.rs`): a
//!   collective with device buffers on some ranks and host buffers on others, legal
//!   in MPI, runs on the host path.
//! - **Core**: rankwire's typed reduction on `T` = the basic type (host memory).
//! - **Packed**: rankwire's collective on packed records with `op.rs`'s combine as a
//!   commutative rankwire user operation (complex, `long double`, `MPI_DOUBLE_INT`,
//!   `MPI_LONG_INT`, `MPI_SHORT_INT`, `MPI_LONG_DOUBLE_INT`).
//! - **User**: the contributions are exchanged (allgather for allreduce, gather for
//!   reduce, alltoall(v) for reduce_scatter(_block) and the scans) and each rank
//!   combines the ones it needs in rank order, `a_0 ∘ (a_1 ∘ (… ∘ a_k))`, calling the
//!   user function with `len` in elements of the datatype and buffers in its memory
//!   layout. Correct for non-commutative operations; traffic and memory are O(p × n)
//!   per rank (a fallback, not a tuned algorithm).

use crate::coll::{Mode, Out, run, run_with};
use crate::coll_buf::{
    Aligned, DevRaw, Dst, Pinned, Raw, Span, Src, device_span, dst, dst_on, empty_dst, span, src,
    src_on,
};
use crate::comm::lookup;
use crate::consts::*;
use crate::error::{R, err};
use crate::op::{Plan, Reduction, UserOp, combine_builtin, plan, record_bytes, with_core_type};
use crate::request::{Finish, Keep};
use rankwire::bytemuck::{Pod, cast_slice, cast_slice_mut};
use rankwire::{CollRequest, ReduceOp};
use std::ffi::c_int;

/// `dst = src ∘ dst` (`src_left`) for `n` elements of the reduction's datatype, both
/// packed.
pub fn combine_packed(red: &Reduction, src: &[u8], dst: &mut [u8], n: usize, src_left: bool) {
    match &red.plan {
        Plan::Core { basic, builtin, .. } => combine_builtin(*basic, *builtin, src, dst, src_left),
        Plan::Packed { basic, op } => combine_builtin(*basic, *op, src, dst, src_left),
        Plan::User { op } => {
            if src_left {
                user_combine_packed(op, red, src, dst, n)
            } else {
                let mut t = src.to_vec();
                user_combine_packed(op, red, dst, &mut t, n);
                dst.copy_from_slice(&t);
            }
        }
    }
}

/// The `n` elements of a datatype in its memory layout, in an owned buffer.
struct Layout {
    buf: Aligned,
    lo: isize,
}

impl Layout {
    fn new(t: &crate::datatype::TypeInfo, n: usize) -> Layout {
        let last = (n as isize - 1).max(0) * t.extent;
        let lo = t.true_lb.min(t.true_lb + last);
        let hi = (t.true_lb + t.true_extent).max(t.true_lb + t.true_extent + last);
        Layout {
            buf: Aligned::new((hi - lo).max(0) as usize),
            lo,
        }
    }

    fn base(&mut self) -> *mut u8 {
        (self.buf.ptr() as isize).wrapping_sub(self.lo) as *mut u8
    }
}

/// `inout = in ∘ inout` with a user function, on packed elements: directly when the
/// packed bytes are the layout (contiguous types), else through layout copies.
fn user_combine_packed(u: &UserOp, red: &Reduction, inp: &[u8], inout: &mut [u8], n: usize) {
    let t = &red.ty;
    if n == 0 {
        return;
    }
    if let Some((off, _)) = t.contiguous_span(n) {
        let a = (inp.as_ptr() as isize).wrapping_sub(off) as *const u8;
        let b = (inout.as_mut_ptr() as isize).wrapping_sub(off) as *mut u8;
        // SAFETY: the packed bytes are the n elements' data at offset `off`.
        unsafe { u.call(a, b, n, red.dt, t.extent) };
        return;
    }
    let mut a = Layout::new(t, n);
    let mut b = Layout::new(t, n);
    // SAFETY: both layouts hold the n elements' type map.
    unsafe {
        t.unpack(n, inp, a.base());
        t.unpack(n, inout, b.base());
        u.call(a.base(), b.base(), n, red.dt, t.extent);
        t.pack(n, b.base(), inout);
    }
}

/// `out = blocks[0] ∘ blocks[1] ∘ … ∘ blocks[k-1]` (packed, `n` elements each).
fn fold_user(red: &Reduction, u: &UserOp, blocks: &[&[u8]], out: &mut [u8], n: usize) {
    let Some((last, rest)) = blocks.split_last() else {
        return;
    };
    out.copy_from_slice(last);
    for b in rest.iter().rev() {
        user_combine_packed(u, red, b, out, n);
    }
}

/// A typed collective for one element type.
trait Typed {
    fn go<T: Pod>(self, op: ReduceOp<T>) -> R<Out>;
}

// Runs `$body` with `$T` a Pod type of `$n` bytes (the packed record types).
macro_rules! with_record_type {
    ($n:expr, $T:ident => $body:expr, _ => $other:expr) => {
        match $n {
            6 => {
                type $T = [u16; 3];
                $body
            }
            8 => {
                type $T = [u32; 2];
                $body
            }
            12 => {
                type $T = [u32; 3];
                $body
            }
            16 => {
                type $T = [u64; 2];
                $body
            }
            20 => {
                type $T = [u32; 5];
                $body
            }
            32 => {
                type $T = [u64; 4];
                $body
            }
            _ => $other,
        }
    };
}

fn internal(what: &str) -> crate::error::MpiErr {
    err(
        MPI_ERR_INTERN,
        format!("reduction: {what} (a bug in rankwire, please report it)"),
    )
}

fn dispatch(red: &Reduction, t: impl Typed) -> R<Out> {
    match red.plan {
        Plan::Core { dt, op, .. } => with_core_type!(dt, T => t.go::<T>(op.into()),
            _ => Err(internal("no Rust type for a rankwire element type"))),
        Plan::Packed { basic, op } => with_record_type!(record_bytes(basic), T => {
            let f = move |a: &[T], b: &mut [T]| {
                combine_builtin(basic, op, cast_slice(a), cast_slice_mut(b), true)
            };
            t.go::<T>(rankwire::UserOp::<T>::new(f, true).into())
        }, _ => Err(internal("no record type of this size"))),
        Plan::User { .. } => Err(internal("a user operation reached the typed path")),
    }
}

/// Elements of `T` in `bytes`, which must be whole elements.
fn elems<T>(bytes: usize) -> usize {
    bytes / std::mem::size_of::<T>().max(1)
}

fn keep(s: Option<Src>) -> Keep {
    match s {
        Some(s) => vec![Box::new(s)],
        None => Vec::new(),
    }
}

/// The contiguous device range of `n` elements of `dt` at `p`, if it is one.
fn device_run(p: *const u8, n: usize, red: &Reduction) -> Option<(u64, usize)> {
    device_span(p, n, &red.ty)
}

/// Whether rankwire's device kernels reduce this type with this operation.
fn device_plan(red: &Reduction) -> Option<(rankwire::Datatype, rankwire::Op)> {
    use rankwire::Datatype as D;
    use rankwire::Op as O;
    let Plan::Core { dt, op, .. } = red.plan else {
        return None;
    };
    let float = matches!(dt, D::F32 | D::F64);
    let int = matches!(
        dt,
        D::I8 | D::U8 | D::I16 | D::U16 | D::I32 | D::I64 | D::U32 | D::U64
    );
    let ok = (float || int)
        && match op {
            O::Sum | O::Prod | O::Min | O::Max => true,
            O::BitAnd | O::BitOr | O::BitXor => int,
            _ => false,
        };
    ok.then_some((dt, op))
}

fn is_in_place(p: *const u8) -> bool {
    p as usize == MPI_IN_PLACE
}

/// A blocking allreduce of host elements reduced in the caller's buffers (aligned,
/// whole elements: checked again in `go`); `send: None` is the in-place form.
struct HostDirect {
    c: crate::comm::CommRef,
    send: Option<*const u8>,
    recv: *mut u8,
    bytes: usize,
}
impl Typed for HostDirect {
    fn go<T: Pod>(self, op: ReduceOp<T>) -> R<Out> {
        let (es, al) = (std::mem::size_of::<T>(), std::mem::align_of::<T>());
        let misaligned = |p: usize| !p.is_multiple_of(al);
        if es == 0
            || !self.bytes.is_multiple_of(es)
            || misaligned(self.recv as usize)
            || self.send.is_some_and(|s| misaligned(s as usize))
        {
            return Err(internal(
                "a predefined type's layout differs from its element type",
            ));
        }
        let n = self.bytes / es;
        // SAFETY: the caller's `n` elements of T (aligned, checked) in host memory,
        // for the call.
        let d = unsafe { std::slice::from_raw_parts_mut(self.recv as *mut T, n) };
        match self.send {
            Some(s) => {
                // SAFETY: as above; MPI forbids overlap with `recv` out of place.
                let s = unsafe { std::slice::from_raw_parts(s as *const T, n) };
                self.c.allreduce::<T>(s, d, op)?
            }
            None => self.c.allreduce_in_place::<T>(d, op)?,
        }
        Ok(None)
    }
}

/// The blocking `MPI_Allreduce` of the common case, recognised from the handles and
/// pointers alone (no datatype or operation object looked up, no reference count): a
/// predefined operation rankwire reduces natively, on a contiguous predefined datatype
/// it is defined on, `count > 0` aligned elements in host memory, in a job where the
/// ranks need not agree on a device path (`memkind::agreement_needed`). `None`:
/// anything else, which [`allreduce`]'s general path checks and reports (the results
/// are the same either way: the same core call).
///
/// # Safety
/// The C caller's buffers.
unsafe fn allreduce_fast(
    comm: MPI_Comm,
    send: *const u8,
    recv: *mut u8,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> Option<R<Out>> {
    let size = crate::datatype::contiguous_predefined(dt)?;
    let b = crate::op::Builtin::of(op)?;
    let o = b.core()?;
    let (basic, _) = crate::datatype::predefined(dt)?;
    let d = crate::op::core_type(basic)?;
    if !b.defined_on(basic) || crate::memkind::agreement_needed() {
        return None;
    }
    let n = usize::try_from(count).ok().filter(|&n| n > 0)?;
    let bytes = crate::buf::bytes_of(n, size)?;
    let inplace = is_in_place(send) || std::ptr::eq(send, recv);
    let aligned = |p: usize| p != 0 && p != MPI_IN_PLACE && p.is_multiple_of(size);
    if !aligned(recv as usize)
        || (!inplace && !aligned(send as usize))
        || crate::buf::is_device(recv, bytes)
        || (!inplace && crate::buf::is_device(send, bytes))
    {
        return None;
    }
    let c = lookup(comm).ok()?;
    let t = HostDirect {
        c,
        send: (!inplace).then_some(send),
        recv,
        bytes,
    };
    let r = with_core_type!(d, T => t.go::<T>(o.into()), _ => return None);
    Some(r)
}

/// `MPI_Allreduce` & co (MPI 4.1 §6.9.6): every rank's `count` elements reduced
/// into every rank's `recv`; `send == MPI_IN_PLACE`: the input is `recv`.
///
/// # Safety
/// The C caller's buffers.
///
/// # Errors
/// `MPI_ERR_OP`, `MPI_ERR_TYPE`, `MPI_ERR_COUNT`, `MPI_ERR_BUFFER`, `MPI_ERR_COMM`,
/// and rankwire's errors (`MPI_ERR_ARG` for mismatched lengths).
pub unsafe fn allreduce(
    comm: MPI_Comm,
    mode: Mode,
    send: *const u8,
    recv: *mut u8,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> R<Out> {
    if mode == Mode::Block
        // SAFETY: the caller's buffers.
        && let Some(r) = unsafe { allreduce_fast(comm, send, recv, count, dt, op) }
    {
        return r;
    }
    let c = lookup(comm)?;
    let red = plan(op, dt)?;
    let n = crate::datatype::count(count)?;
    // `send == recv` without MPI_IN_PLACE aliases the buffers (erroneous, MPI 4.1 §2.3,
    // and MPICH refuses it), but C programs do it: it is the in-place form, since the
    // input is in `recv`. Taken as two buffers, an algorithm that receives into `recv`
    // before reading `send` would combine a peer's vector with itself.
    let inplace = is_in_place(send) || (n > 0 && std::ptr::eq(send, recv));
    let rs = span(recv, n, &red.ty);
    let ss = if inplace { rs } else { span(send, n, &red.ty) };
    // The device call this rank's buffers allow.
    let local = match (device_plan(&red), rs, ss) {
        (Some(p), Span::Device(..), _) if inplace => Some(p),
        (Some(p), Span::Device(..), Span::Device(..)) => Some(p),
        _ => None,
    };
    // Every rank, whatever its buffers: the ranks agree on the path (memkind.rs).
    if crate::memkind::device_path(&c, comm, mode, local.is_some())?
        && let Some((d, o)) = local
        && let Span::Device(r0, r1) = rs
    {
        let r = (r0, r1);
        if inplace {
            if matches!(mode, Mode::Block) {
                c.allreduce_device_in_place(&mut DevRaw(r.0, r.1), d, o)?;
                return Ok(None);
            }
            let rb = Pinned::new(DevRaw(r.0, r.1));
            // SAFETY: the box lives in the request's keep list until it completes.
            let q = unsafe { c.iallreduce_device_in_place(rb.get(), d, o)? };
            return Ok(Some(crate::request::Started {
                active: crate::request::Active::Coll(q),
                finish: None,
                keep: vec![Box::new(rb)],
            }));
        }
        if let Span::Device(s0, s1) = ss {
            let s = (s0, s1);
            if matches!(mode, Mode::Block) {
                c.allreduce_device(&DevRaw(s.0, s.1), &mut DevRaw(r.0, r.1), d, o)?;
                return Ok(None);
            }
            // SAFETY: MPI keeps both device ranges live and untouched until completion.
            let q = unsafe { c.iallreduce_device_raw(s.0, s.1, r.0, r.1, d, o)? };
            return Ok(Some(crate::request::Started::plain(
                crate::request::Active::Coll(q),
            )));
        }
    }
    // The common blocking case without Src/Dst: a predefined operation on host
    // elements of a contiguous predefined type, aligned, reduced in place in the
    // caller's buffers.
    if mode == Mode::Block
        && n > 0
        && matches!(red.plan, Plan::Core { .. })
        && rs == Span::Host
        && ss == Span::Host
        && let Some(size) = crate::datatype::contiguous_predefined(dt)
        && let Some(bytes) = crate::buf::bytes_of(n, size)
        && !recv.is_null()
        && recv as usize != MPI_IN_PLACE
        && (recv as usize).is_multiple_of(size)
        && (inplace || (!send.is_null() && (send as usize).is_multiple_of(size)))
    {
        let send = (!inplace).then_some(send);
        return dispatch(
            &red,
            HostDirect {
                c,
                send,
                recv,
                bytes,
            },
        );
    }
    let s = if inplace {
        None
    } else {
        // SAFETY: the caller's buffer.
        Some(unsafe { src_on(send, n, dt, false, ss.host())? })
    };
    // SAFETY: the caller's buffer.
    let d = unsafe { dst_on(recv, n, dt, inplace, rs.host())? };
    if let Plan::User { op: u } = &red.plan {
        let s = match s {
            Some(s) => s,
            // SAFETY: the caller's buffer, read before the result is written at finish.
            None => unsafe { src_on(recv, n, dt, false, rs.host())? },
        };
        let nb = s.len;
        let p = c.size();
        let mut g = Aligned::new(p * nb);
        let gr = Raw {
            p: g.ptr(),
            n: g.len(),
        };
        let sr = s.raw();
        let (u, c2) = (u.clone(), c.clone());
        let fin: Finish = Box::new(move |_| {
            let mut d = d;
            let _g = &g;
            // SAFETY: the gathered contributions, complete now.
            let all = unsafe { gr.s() };
            let blocks: Vec<&[u8]> = all.chunks(nb.max(1)).take(p).collect();
            // SAFETY: d's bytes.
            let out = unsafe { d.bytes_mut() };
            if nb > 0 {
                fold_user(&red, &u, &blocks, out, n);
            }
            d.finish()
        });
        // SAFETY (both closures): s and g live in the request until completion.
        return run(
            mode,
            move || c.allgather(unsafe { sr.s() }, unsafe { gr.m() }),
            move || c2.iallgather(unsafe { sr.s() }, unsafe { gr.m() }),
            Some(fin),
            keep(Some(s)),
        );
    }
    struct T0 {
        c: crate::comm::CommRef,
        mode: Mode,
        s: Option<Src>,
        d: Dst,
    }
    impl Typed for T0 {
        fn go<T: Pod>(self, op: ReduceOp<T>) -> R<Out> {
            let al = std::mem::align_of::<T>();
            let d = self.d.align(al);
            let s = self.s.map(|s| s.align(al));
            let (sr, dr) = (s.as_ref().map(|s| s.raw()), d.raw());
            let (c, c2, op2) = (self.c.clone(), self.c, op.clone());
            // SAFETY (both closures): s and d live in the request until completion.
            run_with(
                self.mode,
                move || match sr {
                    Some(sr) => c.allreduce::<T>(unsafe { sr.t() }, unsafe { dr.t() }, op),
                    None => c.allreduce_in_place::<T>(unsafe { dr.t() }, op),
                },
                move || -> rankwire::Result<CollRequest<'static>> {
                    match sr {
                        Some(sr) => c2.iallreduce::<T>(unsafe { sr.t() }, unsafe { dr.t() }, op2),
                        None => c2.iallreduce_in_place::<T>(unsafe { dr.t() }, op2),
                    }
                },
                move || d.finish(),
                s,
            )
        }
    }
    dispatch(&red, T0 { c, mode, s, d })
}

/// `MPI_Reduce` & co (MPI 4.1 §6.9.1): the reduction into `recv` on `root`;
/// `send == MPI_IN_PLACE` on the root: its input is `recv` (root only, MPI 4.1
/// §6.9.1); `recv` is not used elsewhere.
///
/// # Safety
/// The C caller's buffers.
///
/// # Errors
/// As [`allreduce`]; `MPI_ERR_ROOT` for a root out of range.
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce(
    comm: MPI_Comm,
    mode: Mode,
    send: *const u8,
    recv: *mut u8,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
) -> R<Out> {
    let c = lookup(comm)?;
    let root = crate::coll::root_arg(&c, root)?;
    let red = plan(op, dt)?;
    let n = crate::datatype::count(count)?;
    let at_root = c.rank() == root;
    let inplace = at_root && is_in_place(send);
    let rs = if at_root {
        span(recv, n, &red.ty)
    } else {
        Span::Host
    };
    let ss = if inplace { rs } else { span(send, n, &red.ty) };
    let r = match rs {
        Span::Device(a, l) => Some((a, l)),
        _ if !at_root => Some((0, 0)),
        _ => None,
    };
    let s = match ss {
        Span::Device(a, l) => Some((a, l)),
        _ => None,
    };
    // The device call this rank's buffers allow.
    let local = device_plan(&red).filter(|_| r.is_some() && s.is_some());
    // Every rank, whatever its buffers: the ranks agree on the path (memkind.rs).
    if crate::memkind::device_path(&c, comm, mode, local.is_some())?
        && let Some((d, o)) = local
        && let (Some(r), Some(s)) = (r, s)
    {
        if matches!(mode, Mode::Block) {
            if inplace {
                c.reduce_device_in_place(&mut DevRaw(r.0, r.1), d, o, root)?;
            } else {
                c.reduce_device(&DevRaw(s.0, s.1), &mut DevRaw(r.0, r.1), d, o, root)?;
            }
            return Ok(None);
        }
        if inplace {
            let rb = Pinned::new(DevRaw(r.0, r.1));
            // SAFETY: the box lives in the request's keep list until it completes.
            let q = unsafe { c.ireduce_device_in_place(rb.get(), d, o, root)? };
            return Ok(Some(crate::request::Started {
                active: crate::request::Active::Coll(q),
                finish: None,
                keep: vec![Box::new(rb)],
            }));
        }
        let sb = Pinned::new(DevRaw(s.0, s.1));
        let rb = Pinned::new(DevRaw(r.0, r.1));
        // SAFETY: the boxes live in the request's keep list until it completes.
        let q = unsafe { c.ireduce_device(sb.get(), rb.get(), d, o, root)? };
        return Ok(Some(crate::request::Started {
            active: crate::request::Active::Coll(q),
            finish: None,
            keep: vec![Box::new(sb), Box::new(rb)],
        }));
    }
    let s = if inplace {
        None
    } else {
        // SAFETY: the caller's buffer.
        Some(unsafe { src_on(send, n, dt, false, ss.host())? })
    };
    let d = if at_root {
        // SAFETY: the caller's buffer.
        unsafe { dst_on(recv, n, dt, inplace, rs.host())? }
    } else {
        empty_dst()
    };
    if let Plan::User { op: u } = &red.plan {
        let s = match s {
            Some(s) => s,
            // SAFETY: the caller's buffer, read before the result is written.
            None => unsafe { src_on(recv, n, dt, false, rs.host())? },
        };
        let nb = s.len;
        let p = c.size();
        let mut g = Aligned::new(if at_root { p * nb } else { 0 });
        let gr = Raw {
            p: g.ptr(),
            n: g.len(),
        };
        let sr = s.raw();
        let (u, c2) = (u.clone(), c.clone());
        let fin: Finish = Box::new(move |_| {
            if !at_root {
                return Ok(());
            }
            let mut d = d;
            let _g = &g;
            // SAFETY: the gathered contributions.
            let all = unsafe { gr.s() };
            let blocks: Vec<&[u8]> = all.chunks(nb.max(1)).take(p).collect();
            // SAFETY: d's bytes.
            let out = unsafe { d.bytes_mut() };
            if nb > 0 {
                fold_user(&red, &u, &blocks, out, n);
            }
            d.finish()
        });
        // SAFETY (both closures): s and g live in the request until completion.
        return run(
            mode,
            move || c.gather(unsafe { sr.s() }, unsafe { gr.m() }, root),
            move || c2.igather(unsafe { sr.s() }, unsafe { gr.m() }, root),
            Some(fin),
            keep(Some(s)),
        );
    }
    struct T0 {
        c: crate::comm::CommRef,
        mode: Mode,
        s: Option<Src>,
        d: Dst,
        root: usize,
    }
    impl Typed for T0 {
        fn go<T: Pod>(self, op: ReduceOp<T>) -> R<Out> {
            let al = std::mem::align_of::<T>();
            let d = self.d.align(al);
            let s = self.s.map(|s| s.align(al));
            let (sr, dr, root) = (s.as_ref().map(|s| s.raw()), d.raw(), self.root);
            let (c, c2, op2) = (self.c.clone(), self.c, op.clone());
            // SAFETY (both closures): s and d live in the request until completion.
            run_with(
                self.mode,
                move || match sr {
                    Some(sr) => c.reduce::<T>(unsafe { sr.t() }, unsafe { dr.t() }, op, root),
                    None => c.reduce_in_place::<T>(unsafe { dr.t() }, op, root),
                },
                move || -> rankwire::Result<CollRequest<'static>> {
                    match sr {
                        Some(sr) => {
                            c2.ireduce::<T>(unsafe { sr.t() }, unsafe { dr.t() }, op2, root)
                        }
                        None => c2.ireduce_in_place::<T>(unsafe { dr.t() }, op2, root),
                    }
                },
                move || d.finish(),
                s,
            )
        }
    }
    dispatch(
        &red,
        T0 {
            c,
            mode,
            s,
            d,
            root,
        },
    )
}

/// `MPI_Reduce_scatter_block` & co (MPI 4.1 §6.10.1): `p × count` elements
/// reduced, block `i` (of `count` elements) to rank `i`'s `recv`;
/// `send == MPI_IN_PLACE`: the input is `recv` (`p × count` elements).
///
/// # Safety
/// The C caller's buffers.
///
/// # Errors
/// As [`allreduce`].
pub unsafe fn reduce_scatter_block(
    comm: MPI_Comm,
    mode: Mode,
    send: *const u8,
    recv: *mut u8,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> R<Out> {
    let c = lookup(comm)?;
    let red = plan(op, dt)?;
    let n = crate::datatype::count(count)?;
    let p = c.size();
    let inplace = is_in_place(send);
    let plan_ok = device_plan(&red);
    let r = plan_ok.and_then(|_| device_run(recv, if inplace { n * p } else { n }, &red));
    let s = if inplace || r.is_none() {
        None
    } else {
        device_run(send, n * p, &red)
    };
    // The device call this rank's buffers allow.
    let local = plan_ok.filter(|_| r.is_some() && (inplace || s.is_some()));
    // Every rank, whatever its buffers: the ranks agree on the path (memkind.rs).
    if crate::memkind::device_path(&c, comm, mode, local.is_some())?
        && let Some((d, o)) = local
        && let Some(r) = r
    {
        if inplace {
            if matches!(mode, Mode::Block) {
                c.reduce_scatter_block_device_in_place(&mut DevRaw(r.0, r.1), d, o)?;
                return Ok(None);
            }
            let rb = Pinned::new(DevRaw(r.0, r.1));
            // SAFETY: the box lives in the request's keep list until it completes.
            let q = unsafe { c.ireduce_scatter_block_device_in_place(rb.get(), d, o)? };
            return Ok(Some(crate::request::Started {
                active: crate::request::Active::Coll(q),
                finish: None,
                keep: vec![Box::new(rb)],
            }));
        }
        if let Some(s) = s {
            if matches!(mode, Mode::Block) {
                c.reduce_scatter_block_device(&DevRaw(s.0, s.1), &mut DevRaw(r.0, r.1), d, o)?;
                return Ok(None);
            }
            let sb = Pinned::new(DevRaw(s.0, s.1));
            let rb = Pinned::new(DevRaw(r.0, r.1));
            // SAFETY: the boxes live in the request's keep list until it completes.
            let q = unsafe { c.ireduce_scatter_block_device(sb.get(), rb.get(), d, o)? };
            return Ok(Some(crate::request::Started {
                active: crate::request::Active::Coll(q),
                finish: None,
                keep: vec![Box::new(sb), Box::new(rb)],
            }));
        }
    }
    let input = if inplace { recv as *const u8 } else { send };
    // SAFETY: the caller's buffers (an in-place input is copied: it overlaps the output).
    let s = unsafe { src(input, n * p, dt, inplace)? };
    // SAFETY: the caller's buffer.
    let d = unsafe { dst(recv, n, dt, false)? };
    if let Plan::User { op: u } = &red.plan {
        let nb = s.len / p.max(1);
        let mut g = Aligned::new(p * nb);
        let gr = Raw {
            p: g.ptr(),
            n: g.len(),
        };
        let sr = s.raw();
        let (u, c2) = (u.clone(), c.clone());
        let fin = fold_finish(red, u, g, gr, nb, p, n, d);
        // SAFETY (both closures): s and g live in the request until completion.
        return run(
            mode,
            move || c.alltoall(unsafe { sr.s() }, unsafe { gr.m() }),
            move || c2.ialltoall(unsafe { sr.s() }, unsafe { gr.m() }),
            Some(fin),
            keep(Some(s)),
        );
    }
    struct T0 {
        c: crate::comm::CommRef,
        mode: Mode,
        s: Src,
        d: Dst,
    }
    impl Typed for T0 {
        fn go<T: Pod>(self, op: ReduceOp<T>) -> R<Out> {
            let al = std::mem::align_of::<T>();
            let d = self.d.align(al);
            let s = self.s.align(al);
            let (sr, dr) = (s.raw(), d.raw());
            let (c, c2, op2) = (self.c.clone(), self.c, op.clone());
            // SAFETY (both closures): s and d live in the request until completion.
            run_with(
                self.mode,
                move || c.reduce_scatter_block::<T>(unsafe { sr.t() }, unsafe { dr.t() }, op),
                move || c2.ireduce_scatter_block::<T>(unsafe { sr.t() }, unsafe { dr.t() }, op2),
                move || d.finish(),
                s,
            )
        }
    }
    dispatch(&red, T0 { c, mode, s, d })
}

/// The finish of a user-op fallback: fold the `k` gathered blocks of `nb` bytes in
/// rank order into `d`.
#[allow(clippy::too_many_arguments)]
fn fold_finish(
    red: Reduction,
    u: std::sync::Arc<UserOp>,
    g: Aligned,
    gr: Raw,
    nb: usize,
    k: usize,
    n: usize,
    d: Dst,
) -> Finish {
    Box::new(move |_| {
        let mut d = d;
        let _g = &g;
        // SAFETY: the exchanged contributions, complete now.
        let all = unsafe { gr.s() };
        let blocks: Vec<&[u8]> = all.chunks(nb.max(1)).take(k).collect();
        // SAFETY: d's bytes.
        let out = unsafe { d.bytes_mut() };
        if nb > 0 && k > 0 {
            fold_user(&red, &u, &blocks, out, n);
        }
        d.finish()
    })
}

/// `MPI_Reduce_scatter` & co (MPI 4.1 §6.10.2): `Σ counts` elements reduced, block
/// `i` (`counts[i]` elements) to rank `i`; `send == MPI_IN_PLACE`: the input is
/// `recv`.
///
/// # Safety
/// The C caller's buffers.
///
/// # Errors
/// As [`allreduce`]; `MPI_ERR_COUNT` for a negative count.
pub unsafe fn reduce_scatter(
    comm: MPI_Comm,
    mode: Mode,
    send: *const u8,
    recv: *mut u8,
    counts: &[i64],
    dt: MPI_Datatype,
    op: MPI_Op,
) -> R<Out> {
    let c = lookup(comm)?;
    let red = plan(op, dt)?;
    let (p, me) = (c.size(), c.rank());
    let counts: Vec<usize> = counts
        .iter()
        .map(|&k| crate::datatype::count(k))
        .collect::<R<_>>()?;
    if counts.len() != p {
        return Err(err(
            MPI_ERR_COUNT,
            format!("reduce_scatter: {} counts for {p} ranks", counts.len()),
        ));
    }
    let total: usize = counts.iter().sum();
    let inplace = is_in_place(send);
    let input = if inplace { recv as *const u8 } else { send };
    // SAFETY: the caller's buffers (an in-place input is copied).
    let s = unsafe { src(input, total, dt, inplace)? };
    // SAFETY: the caller's buffer.
    let d = unsafe { dst(recv, counts[me], dt, false)? };
    let es = red.ty.size;
    if let Plan::User { op: u } = &red.plan {
        let nb = counts[me] * es;
        let mut g = Aligned::new(p * nb);
        let gr = Raw {
            p: g.ptr(),
            n: g.len(),
        };
        let sr = s.raw();
        let sc: Vec<usize> = counts.iter().map(|k| k * es).collect();
        let sd: Vec<usize> = sc
            .iter()
            .scan(0, |a, &k| {
                let o = *a;
                *a += k;
                Some(o)
            })
            .collect();
        let rc = vec![nb; p];
        let rd: Vec<usize> = (0..p).map(|j| j * nb).collect();
        let (u, c2) = (u.clone(), c.clone());
        let fin = fold_finish(red, u, g, gr, nb, p, counts[me], d);
        let (sc2, sd2, rc2, rd2) = (sc.clone(), sd.clone(), rc.clone(), rd.clone());
        // SAFETY (both closures): s and g live in the request until completion.
        return run(
            mode,
            move || c.alltoallv(unsafe { sr.s() }, &sc, &sd, unsafe { gr.m() }, &rc, &rd),
            move || c2.ialltoallv(unsafe { sr.s() }, &sc2, &sd2, unsafe { gr.m() }, &rc2, &rd2),
            Some(fin),
            keep(Some(s)),
        );
    }
    struct T0 {
        c: crate::comm::CommRef,
        mode: Mode,
        s: Src,
        d: Dst,
        counts: Vec<usize>,
    }
    impl Typed for T0 {
        fn go<T: Pod>(self, op: ReduceOp<T>) -> R<Out> {
            let al = std::mem::align_of::<T>();
            let d = self.d.align(al);
            let s = self.s.align(al);
            let (sr, dr) = (s.raw(), d.raw());
            // Counts in T elements: the datatype's size over T's.
            let per = elems::<T>(s.len) / self.counts.iter().sum::<usize>().max(1);
            let ct: Vec<usize> = self.counts.iter().map(|k| k * per.max(1)).collect();
            let ct2 = ct.clone();
            let (c, c2, op2) = (self.c.clone(), self.c, op.clone());
            // SAFETY (both closures): s and d live in the request until completion.
            run_with(
                self.mode,
                move || c.reduce_scatter::<T>(unsafe { sr.t() }, unsafe { dr.t() }, &ct, op),
                move || c2.ireduce_scatter::<T>(unsafe { sr.t() }, unsafe { dr.t() }, &ct2, op2),
                move || d.finish(),
                s,
            )
        }
    }
    dispatch(
        &red,
        T0 {
            c,
            mode,
            s,
            d,
            counts,
        },
    )
}

/// `MPI_Scan` / `MPI_Exscan` & co (MPI 4.1 §6.11): rank `i` gets
/// `a_0 ∘ … ∘ a_i` (inclusive) or `a_0 ∘ … ∘ a_{i−1}` (exclusive; rank 0's `recv`
/// is left as it is); `send == MPI_IN_PLACE`: the input is `recv`.
///
/// # Safety
/// The C caller's buffers.
///
/// # Errors
/// As [`allreduce`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn scan(
    comm: MPI_Comm,
    mode: Mode,
    send: *const u8,
    recv: *mut u8,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
    exclusive: bool,
) -> R<Out> {
    let c = lookup(comm)?;
    let red = plan(op, dt)?;
    let n = crate::datatype::count(count)?;
    let (p, me) = (c.size(), c.rank());
    let inplace = is_in_place(send);
    // Device buffers: the device scan (kernels combine, no host staging), where the
    // type and op allow it and the ranks agree (memkind.rs), in every mode.
    // Rank 0's receive buffer of an exscan is not significant (MPI 4.1 §6.11.2): it may
    // be NULL or host memory there, and it decides nothing.
    let ignored = exclusive && me == 0 && !inplace;
    let rs = if ignored {
        Span::Device(0, 0)
    } else {
        span(recv, n, &red.ty)
    };
    let ss = if inplace { rs } else { span(send, n, &red.ty) };
    let local = match (device_plan(&red), rs, ss) {
        (Some(p), Span::Device(r0, r1), Span::Device(s0, s1)) => Some((p, (r0, r1), (s0, s1))),
        _ => None,
    };
    if crate::memkind::device_path(&c, comm, mode, local.is_some())?
        && let Some(((d, o), r, s)) = local
    {
        let s = (!inplace).then_some(s);
        // SAFETY: MPI keeps both device ranges live and untouched until completion (the
        // blocking form waits here).
        let q = unsafe { c.iscan_device_raw(s, r, d, o, exclusive)? };
        if matches!(mode, Mode::Block) {
            q.wait()?;
            return Ok(None);
        }
        return Ok(Some(crate::request::Started::plain(
            crate::request::Active::Coll(q),
        )));
    }
    let s = if inplace {
        None
    } else {
        // SAFETY: the caller's buffer.
        Some(unsafe { src(send, n, dt, false)? })
    };
    // Rank 0 of an exscan keeps its receive buffer: start from its contents.
    // SAFETY: the caller's buffer.
    let d = unsafe { dst(recv, n, dt, inplace || (exclusive && me == 0))? };
    if let Plan::User { op: u } = &red.plan {
        let s = match s {
            Some(s) => s,
            // SAFETY: the caller's buffer, read before the result is written.
            None => unsafe { src(recv, n, dt, false)? },
        };
        let nb = s.len;
        // Contributions of ranks 0..k reach this rank.
        let k = if exclusive { me } else { me + 1 };
        let mut g = Aligned::new(k * nb);
        let gr = Raw {
            p: g.ptr(),
            n: g.len(),
        };
        let sr = s.raw();
        let to = |j: usize| if exclusive { j > me } else { j >= me };
        let from = |j: usize| if exclusive { j < me } else { j <= me };
        let sc: Vec<usize> = (0..p).map(|j| if to(j) { nb } else { 0 }).collect();
        let sd = vec![0usize; p];
        let rc: Vec<usize> = (0..p).map(|j| if from(j) { nb } else { 0 }).collect();
        let rd: Vec<usize> = (0..p).map(|j| if from(j) { j * nb } else { 0 }).collect();
        let (u, c2) = (u.clone(), c.clone());
        let fin = fold_finish(red, u, g, gr, nb, k, n, d);
        let fin: Finish = if exclusive && me == 0 {
            Box::new(move |_| {
                drop(fin);
                Ok(())
            })
        } else {
            fin
        };
        let (sc2, sd2, rc2, rd2) = (sc.clone(), sd.clone(), rc.clone(), rd.clone());
        // SAFETY (both closures): s and g live in the request until completion.
        return run(
            mode,
            move || c.alltoallv(unsafe { sr.s() }, &sc, &sd, unsafe { gr.m() }, &rc, &rd),
            move || c2.ialltoallv(unsafe { sr.s() }, &sc2, &sd2, unsafe { gr.m() }, &rc2, &rd2),
            Some(fin),
            keep(Some(s)),
        );
    }
    struct T0 {
        c: crate::comm::CommRef,
        mode: Mode,
        s: Option<Src>,
        d: Dst,
        exclusive: bool,
    }
    impl Typed for T0 {
        fn go<T: Pod>(self, op: ReduceOp<T>) -> R<Out> {
            let al = std::mem::align_of::<T>();
            let d = self.d.align(al);
            let s = self.s.map(|s| s.align(al));
            let (sr, dr, x) = (s.as_ref().map(|s| s.raw()), d.raw(), self.exclusive);
            let (c, c2, op2) = (self.c.clone(), self.c, op.clone());
            // SAFETY (both closures): s and d live in the request until completion.
            run_with(
                self.mode,
                move || match (sr, x) {
                    (Some(sr), false) => c.scan::<T>(unsafe { sr.t() }, unsafe { dr.t() }, op),
                    (Some(sr), true) => c.exscan::<T>(unsafe { sr.t() }, unsafe { dr.t() }, op),
                    (None, false) => c.scan_in_place::<T>(unsafe { dr.t() }, op),
                    (None, true) => c.exscan_in_place::<T>(unsafe { dr.t() }, op),
                },
                move || -> rankwire::Result<CollRequest<'static>> {
                    match (sr, x) {
                        (Some(sr), false) => {
                            c2.iscan::<T>(unsafe { sr.t() }, unsafe { dr.t() }, op2)
                        }
                        (Some(sr), true) => {
                            c2.iexscan::<T>(unsafe { sr.t() }, unsafe { dr.t() }, op2)
                        }
                        (None, false) => c2.iscan_in_place::<T>(unsafe { dr.t() }, op2),
                        (None, true) => c2.iexscan_in_place::<T>(unsafe { dr.t() }, op2),
                    }
                },
                move || d.finish(),
                s,
            )
        }
    }
    dispatch(
        &red,
        T0 {
            c,
            mode,
            s,
            d,
            exclusive,
        },
    )
}
