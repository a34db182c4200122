//! Point-to-point communication (MPI 4.1 chapter 3): the four send modes, receives,
//! probes and matched probes, sendrecv, their nonblocking and persistent forms, and the
//! large-count `_c` forms.
//!
//! Buffers go through [`crate::buf`] (in place for contiguous types, packed otherwise)
//! and are host or device memory, detected per call: host buffers take rankwire's
//! blocking fast paths, device buffers its raw (pointer-classifying) forms.
//!
//! Modes: ready sends are standard sends (allowed: MPI 4.1 §3.4); buffered sends copy
//! the data into library memory and complete at once, the copy being sent in the
//! background (the space of `MPI_Buffer_attach` is accounted for, as the standard
//! requires, and `MPI_Buffer_detach` waits for every buffered send).

use crate::buf::{RecvBuf, SendBuf, is_device, recv_buf, send_buf};
use crate::comm::{lookup, rank_arg};
use crate::consts::*;
use crate::error::{MpiErr, R, err, guard, out_arg, put};
use crate::handles::{Kind, Table};
use crate::request::{
    Active, Started, empty_status, insert, insert_detached, insert_persistent, write_status,
};
use rankwire::{Communicator, Source, Tag};
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

/// Send modes (MPI 4.1 §3.4).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// `MPI_Send`: eager below the path's limit, rendezvous above.
    Standard,
    /// `MPI_Ssend`: completes once the receive has matched.
    Sync,
    /// `MPI_Bsend`: copied, completes at once.
    Buffered,
    /// `MPI_Rsend`: as standard.
    Ready,
}

#[inline]
fn tag_arg(tag: c_int) -> R<i32> {
    if !(0..=rankwire::TAG_UB).contains(&tag) {
        return Err(bad_tag(tag));
    }
    Ok(tag)
}

/// [`tag_arg`]'s error (out of line: the hot path stays small).
#[cold]
fn bad_tag(tag: c_int) -> MpiErr {
    err(
        MPI_ERR_TAG,
        format!(
            "tag {tag} is invalid for a send; fix: pass a tag in 0..={} (MPI_TAG_UB)",
            rankwire::TAG_UB
        ),
    )
}

#[inline]
fn recv_tag(tag: c_int) -> R<Tag> {
    if tag == MPI_ANY_TAG {
        return Ok(Tag::Any);
    }
    if !(0..=rankwire::TAG_UB).contains(&tag) {
        return Err(bad_recv_tag(tag));
    }
    Ok(Tag::Value(tag))
}

/// [`recv_tag`]'s error (out of line).
#[cold]
fn bad_recv_tag(tag: c_int) -> MpiErr {
    err(
        MPI_ERR_TAG,
        format!(
            "tag {tag} is invalid for a receive or probe; fix: pass a tag in 0..={} (MPI_TAG_UB) or MPI_ANY_TAG",
            rankwire::TAG_UB
        ),
    )
}

#[inline]
fn recv_source(c: &Communicator, src: c_int) -> R<Source> {
    if src == MPI_ANY_SOURCE {
        return Ok(Source::Any);
    }
    rank_arg(c, src, "source").map(Source::Rank)
}

/// A nonblocking send of `b` (kept alive by the returned operation).
fn start_send(
    c: &Communicator,
    comm: MPI_Comm,
    b: SendBuf,
    dest: usize,
    tag: i32,
    mode: Mode,
) -> R<Started> {
    if mode == Mode::Buffered {
        return start_bsend(c, comm, b, dest, tag);
    }
    let req = if is_device(b.ptr, b.len) {
        // SAFETY: the buffer is the C caller's (valid until completion, MPI's
        // contract) or owned by `b`, kept in the Started.
        unsafe { c.isend_raw(b.ptr, b.len, dest, tag)? }
    } else {
        // SAFETY: as above.
        isend_host(
            c,
            unsafe { crate::buf::bytes(b.ptr, b.len) },
            dest,
            tag,
            mode,
        )?
    };
    if b.packed.is_some() {
        return Ok(Started {
            active: Active::P2p(req),
            finish: None,
            keep: vec![Box::new(b)],
        });
    }
    // In place (contiguous): the C caller owns the buffer, nothing to keep.
    Ok(Started::plain(send_active(req)))
}

/// A nonblocking send of host bytes in `mode` (standard and ready: `isend`;
/// synchronous: `issend`).
fn isend_host(
    c: &Communicator,
    slice: &'static [u8],
    dest: usize,
    tag: i32,
    mode: Mode,
) -> rankwire::Result<rankwire::Request<'static>> {
    if mode == Mode::Sync {
        c.issend(slice, dest, tag)
    } else {
        c.isend(slice, dest, tag)
    }
}

/// The operation of a send of the caller's own bytes: a send the transport took at
/// once (the common eager send) is done, and its wait needs no runtime call.
fn send_active(req: rankwire::Request<'static>) -> Active {
    match req.completed_at_post() {
        Some(st) => Active::Ready(st),
        None => Active::P2p(req),
    }
}

fn start_recv(c: &Communicator, b: RecvBuf, src: Source, tag: Tag) -> R<Started> {
    let req = if is_device(b.ptr, b.len) {
        // SAFETY: the C caller's buffer, valid until completion; or owned by `b`.
        unsafe { c.irecv_raw(b.ptr, b.len, src, tag)? }
    } else {
        // SAFETY: as above.
        let s: &'static mut [u8] = unsafe { crate::buf::bytes_mut(b.ptr, b.len) };
        c.irecv(s, src, tag)?
    };
    if !b.needs_finish() {
        return Ok(Started::plain(Active::P2p(req)));
    }
    let b = Mutex::new(Some(b));
    Ok(Started {
        active: Active::P2p(req),
        finish: Some(Box::new(move |st| {
            let b = b.lock().unwrap_or_else(|e| e.into_inner()).take();
            match b {
                Some(b) => b.finish(st.len_bytes),
                None => Ok(()),
            }
        })),
        keep: Vec::new(),
    })
}

/// A host copy of the bytes of `b` (staged from device memory when it is there): the
/// data of a buffered send, or of a sendrecv_replace before its receive overwrites it.
///
/// # Errors
/// `MPI_ERR_OTHER` when the device-to-host copy fails.
/// The C address of `v`'s bytes. An empty `Vec`'s pointer is dangling (the address 1
/// for bytes, which is `MPI_IN_PLACE` in the standard ABI): an empty `v` gets the
/// address of a static byte instead.
fn c_addr(v: &[u8]) -> *const c_void {
    static EMPTY: u8 = 0;
    if v.is_empty() {
        &EMPTY as *const u8 as *const c_void
    } else {
        v.as_ptr() as *const c_void
    }
}

fn owned_copy(b: &SendBuf) -> R<Vec<u8>> {
    if is_device(b.ptr, b.len) {
        let mut v = vec![0u8; b.len];
        crate::buf::copy_device_to_host(b.ptr, &mut v)?;
        Ok(v)
    } else {
        // SAFETY: `b` describes readable bytes (send_buf's contract).
        Ok(unsafe { crate::buf::bytes(b.ptr, b.len) }.to_vec())
    }
}

// ---- buffered mode ----------------------------------------------------------------
//
// MPI 4.1 §3.6: a buffered send on a communicator uses the buffer attached to that
// communicator (`MPI_Comm_attach_buffer`), else the process's (`MPI_Buffer_attach`;
// rankwire has no sessions). rankwire copies the message into its own memory, but
// accounts it against the attached size as the standard requires, so a program that
// would overflow its buffer elsewhere gets MPI_ERR_BUFFER here too.
// `MPI_BUFFER_AUTOMATIC` attaches a buffer without a size limit.

struct Attached {
    /// User buffer (address, bytes); the address `MPI_BUFFER_AUTOMATIC` = no limit.
    buf: Option<(usize, usize)>,
    /// Bytes of buffered sends not yet completed.
    used: usize,
    /// Buffered sends in flight, with their accounted size.
    pending: Vec<(Started, usize)>,
}

impl Attached {
    const fn new() -> Attached {
        Attached {
            buf: None,
            used: 0,
            pending: Vec::new(),
        }
    }
}

/// Key of the process's buffer in [`BSEND`] (never a communicator handle).
const PROCESS: MPI_Comm = usize::MAX;

/// Attached buffers: the process's ([`PROCESS`]) and per communicator handle.
static BSEND: Mutex<BTreeMap<MPI_Comm, Attached>> = Mutex::new(BTreeMap::new());

fn bsend_table() -> std::sync::MutexGuard<'static, BTreeMap<MPI_Comm, Attached>> {
    BSEND.lock().unwrap_or_else(|e| e.into_inner())
}

fn reap_bsends(a: &mut Attached) {
    let pending = std::mem::take(&mut a.pending);
    for (s, n) in pending {
        match s.active {
            Active::P2p(r) => match r.test() {
                Ok(_) => a.used -= n,
                Err(r) => a.pending.push((
                    Started {
                        active: Active::P2p(r),
                        ..s
                    },
                    n,
                )),
            },
            _ => a.used -= n,
        }
    }
}

fn start_bsend(c: &Communicator, comm: MPI_Comm, b: SendBuf, dest: usize, tag: i32) -> R<Started> {
    let mut t = bsend_table();
    let key = if t.get(&comm).is_some_and(|a| a.buf.is_some()) {
        comm
    } else {
        PROCESS
    };
    let a = t.entry(key).or_insert_with(Attached::new);
    reap_bsends(a);
    let need = b.len + MPI_BSEND_OVERHEAD as usize;
    let cap = match a.buf {
        Some((MPI_BUFFER_AUTOMATIC, _)) => usize::MAX,
        Some((_, n)) => n,
        None => 0,
    };
    if a.used.saturating_add(need) > cap {
        return Err(err(
            MPI_ERR_BUFFER,
            format!(
                "buffered send of {} bytes needs {need} bytes of attached buffer (incl. MPI_BSEND_OVERHEAD), {} of {cap} are free; fix: MPI_Buffer_attach (or MPI_Comm_attach_buffer) a larger buffer (sum of message sizes + MPI_BSEND_OVERHEAD each), or MPI_BUFFER_AUTOMATIC",
                b.len,
                cap - a.used.min(cap)
            ),
        ));
    }
    let copy = owned_copy(&b)?;
    let owned = SendBuf {
        ptr: copy.as_ptr(),
        len: copy.len(),
        packed: Some(copy),
    };
    let s = start_send(c, comm, owned, dest, tag, Mode::Standard)?;
    a.used += need;
    a.pending.push((s, need));
    Ok(Started::plain(Active::Ready(empty_status())))
}

fn attach(key: MPI_Comm, buffer: *mut c_void, size: MPI_Count) -> R {
    if size < 0 {
        return Err(err(MPI_ERR_ARG, format!("buffer size {size} is negative")));
    }
    let mut t = bsend_table();
    let a = t.entry(key).or_insert_with(Attached::new);
    if a.buf.is_some() {
        return Err(err(
            MPI_ERR_BUFFER,
            "a buffer is already attached; fix: detach it first",
        ));
    }
    a.buf = Some((buffer as usize, size as usize));
    Ok(())
}

/// The buffered sends of `key` still in flight, taken out of the accounting.
fn take_pending(key: MPI_Comm) -> Vec<(Started, usize)> {
    let mut t = bsend_table();
    match t.get_mut(&key) {
        Some(a) => {
            let p = std::mem::take(&mut a.pending);
            a.used -= p.iter().map(|(_, n)| n).sum::<usize>();
            p
        }
        None => Vec::new(),
    }
}

/// Waits until every buffered send of `key` is delivered (`MPI_Buffer_flush`).
fn flush(key: MPI_Comm) -> R {
    for (s, _) in take_pending(key) {
        if let Active::P2p(r) = s.active {
            r.wait()?;
        }
    }
    Ok(())
}

/// A request completing when the buffered sends of `key` in flight now are delivered
/// (`MPI_Buffer_iflush`). Their space is released from the accounting at once (the
/// data lives in rankwire's own copies, so no user memory is reused early).
fn iflush(key: MPI_Comm) -> Started {
    let reqs = take_pending(key)
        .into_iter()
        .filter_map(|(s, _)| match s.active {
            Active::P2p(r) => Some(r),
            _ => None,
        })
        .collect();
    Started::plain(Active::Multi(reqs))
}

/// Flushes, then detaches the buffer of `key`: (address, size) or (0, 0).
fn detach(key: MPI_Comm) -> R<(usize, usize)> {
    flush(key)?;
    let mut t = bsend_table();
    Ok(t.get_mut(&key)
        .and_then(|a| {
            a.used = 0;
            a.buf.take()
        })
        .unwrap_or((0, 0)))
}

/// Writes a detached buffer to C's `void**` / size outputs.
///
/// # Safety
/// `buffer_addr` null or a `void**`; `size` valid for a write.
unsafe fn put_detached<T: TryFrom<usize>>(
    (addr, n): (usize, usize),
    buffer_addr: *mut c_void,
    size: *mut T,
) -> R {
    if !buffer_addr.is_null() {
        // SAFETY: buffer_addr is a `void**` in C.
        unsafe { *(buffer_addr as *mut *mut c_void) = addr as *mut c_void };
    }
    let n = T::try_from(n).map_err(|_| {
        err(
            MPI_ERR_COUNT,
            format!("the detached buffer's size {n} does not fit the int; fix: use the _c form"),
        )
    })?;
    // SAFETY: caller's contract.
    unsafe { put(size, n, "size") }
}

/// `MPI_Buffer_attach`: space for buffered sends of the process (rankwire copies into
/// its own memory, but accounts the messages against this size as the standard
/// requires); `MPI_BUFFER_AUTOMATIC`: no limit.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    // SAFETY: forwarded.
    unsafe { MPI_Buffer_attach_c(buffer, size as MPI_Count) }
}

/// `MPI_Buffer_attach_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Buffer_attach_c(buffer: *mut c_void, size: MPI_Count) -> c_int {
    guard(MPI_COMM_SELF, || attach(PROCESS, buffer, size))
}

/// `MPI_Buffer_detach`: waits until every buffered send of the process has been
/// delivered to the transport, then returns the attached buffer's address and size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    // SAFETY: C caller's pointers.
    guard(MPI_COMM_SELF, || unsafe {
        put_detached(detach(PROCESS)?, buffer_addr, size)
    })
}

/// `MPI_Buffer_detach_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Buffer_detach_c(
    buffer_addr: *mut c_void,
    size: *mut MPI_Count,
) -> c_int {
    // SAFETY: C caller's pointers.
    guard(MPI_COMM_SELF, || unsafe {
        put_detached(detach(PROCESS)?, buffer_addr, size)
    })
}

/// `MPI_Buffer_flush` (MPI 4.1 §3.6.1): waits until the process's buffered sends are
/// delivered; the buffer stays attached.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Buffer_flush() -> c_int {
    guard(MPI_COMM_SELF, || flush(PROCESS))
}

/// `MPI_Buffer_iflush`: the nonblocking [`MPI_Buffer_flush`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Buffer_iflush(request: *mut MPI_Request) -> c_int {
    // SAFETY: C caller's pointer.
    guard(MPI_COMM_SELF, || unsafe {
        put(request, insert(MPI_COMM_SELF, iflush(PROCESS)), "request")
    })
}

/// `MPI_Comm_attach_buffer` (MPI 4.1 §3.6.1): a buffer for the buffered sends on
/// `comm`, used instead of the process's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_attach_buffer(
    comm: MPI_Comm,
    buffer: *mut c_void,
    size: c_int,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { MPI_Comm_attach_buffer_c(comm, buffer, size as MPI_Count) }
}

/// `MPI_Comm_attach_buffer_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_attach_buffer_c(
    comm: MPI_Comm,
    buffer: *mut c_void,
    size: MPI_Count,
) -> c_int {
    guard(comm, || {
        lookup(comm)?;
        attach(comm, buffer, size)
    })
}

/// `MPI_Comm_detach_buffer`: flushes `comm`'s buffered sends, then returns its buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_detach_buffer(
    comm: MPI_Comm,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> c_int {
    // SAFETY: C caller's pointers.
    guard(comm, || unsafe {
        lookup(comm)?;
        put_detached(detach(comm)?, buffer_addr, size)
    })
}

/// `MPI_Comm_detach_buffer_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_detach_buffer_c(
    comm: MPI_Comm,
    buffer_addr: *mut c_void,
    size: *mut MPI_Count,
) -> c_int {
    // SAFETY: C caller's pointers.
    guard(comm, || unsafe {
        lookup(comm)?;
        put_detached(detach(comm)?, buffer_addr, size)
    })
}

/// `MPI_Comm_flush_buffer`: waits until the buffered sends on `comm`'s buffer are
/// delivered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_flush_buffer(comm: MPI_Comm) -> c_int {
    guard(comm, || {
        lookup(comm)?;
        flush(comm)
    })
}

/// `MPI_Comm_iflush_buffer`: the nonblocking [`MPI_Comm_flush_buffer`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_iflush_buffer(
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: C caller's pointer.
    guard(comm, || unsafe {
        lookup(comm)?;
        put(request, insert(comm, iflush(comm)), "request")
    })
}

/// Drops the buffer bookkeeping of a freed communicator (its sends were flushed by
/// `MPI_Comm_free`'s caller or complete on their own).
pub fn forget_comm_buffer(comm: MPI_Comm) {
    bsend_table().remove(&comm);
}

// ---- blocking --------------------------------------------------------------------

unsafe fn send_impl(
    buf: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    mode: Mode,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        if dest == MPI_PROC_NULL {
            return Ok(());
        }
        let d = rank_arg(&c, dest, "destination")?;
        let t = tag_arg(tag)?;
        // The packed copy of a derived type, kept for the call.
        let packed: SendBuf;
        let slice = match crate::buf::host_run(buf as *const u8, count, dt) {
            // The common case without a SendBuf: contiguous host bytes sent in place.
            // SAFETY: C caller's buffer of `len` bytes.
            Some(len) if mode != Mode::Buffered => unsafe {
                crate::buf::bytes(buf as *const u8, len)
            },
            _ => {
                // SAFETY: C caller's buffer.
                let b = unsafe { send_buf(buf as *const u8, count, dt)? };
                if mode == Mode::Buffered || is_device(b.ptr, b.len) {
                    let s = start_send(&c, comm, b, d, t, mode)?;
                    if let Active::P2p(r) = s.active {
                        r.wait()?;
                    }
                    return Ok(());
                }
                packed = b;
                // SAFETY: the caller's buffer (or the packed copy in it) for the call.
                unsafe { crate::buf::bytes(packed.ptr, packed.len) }
            }
        };
        if mode == Mode::Sync {
            c.ssend(slice, d, t)?;
        } else {
            c.send(slice, d, t)?;
        }
        Ok(())
    })
}

unsafe fn recv_impl(
    buf: *mut c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        if source == MPI_PROC_NULL {
            // SAFETY: C caller's pointer.
            unsafe { write_status(status, &empty_status(), false, MPI_SUCCESS) };
            return Ok(());
        }
        let src = recv_source(&c, source)?;
        let tg = recv_tag(tag)?;
        // The common case without a RecvBuf: contiguous host bytes received in place.
        if let Some(len) = crate::buf::host_run(buf as *const u8, count, dt) {
            // SAFETY: C caller's buffer of `len` bytes.
            let s = unsafe { crate::buf::bytes_mut(buf as *mut u8, len) };
            return match c.recv(s, src, tg) {
                Ok(st) => {
                    // SAFETY: C caller's pointer.
                    unsafe { write_status(status, &st, false, MPI_SUCCESS) };
                    Ok(())
                }
                // SAFETY: as above (truncation fills the status).
                Err(e) => finish_recv(
                    Err(e),
                    unsafe { recv_buf(buf as *mut u8, count, dt)? },
                    status,
                ),
            };
        }
        // SAFETY: C caller's buffer.
        let b = unsafe { recv_buf(buf as *mut u8, count, dt)? };
        let r = if is_device(b.ptr, b.len) {
            // SAFETY: as above.
            unsafe { c.irecv_raw(b.ptr, b.len, src, tg) }.and_then(|r| r.wait())
        } else {
            // SAFETY: as above.
            let s = unsafe { crate::buf::bytes_mut(b.ptr, b.len) };
            c.recv(s, src, tg)
        };
        finish_recv(r, b, status)
    })
}

/// Writes the status of a finished receive and unpacks; truncation is reported with
/// the status filled (MPI 4.1 §3.2.4).
fn finish_recv(r: rankwire::Result<rankwire::Status>, b: RecvBuf, status: *mut MPI_Status) -> R {
    match r {
        Ok(st) => {
            b.finish(st.len_bytes)?;
            // SAFETY: C caller's pointer.
            unsafe { write_status(status, &st, false, MPI_SUCCESS) };
            Ok(())
        }
        Err(e) => {
            if let rankwire::Error::Matching(rankwire::MatchError::Truncated {
                source_rank,
                tag,
                ..
            }) = &e
            {
                let st = rankwire::Status {
                    source: *source_rank as usize,
                    tag: *tag,
                    len_bytes: b.len,
                };
                let _ = b.finish(st.len_bytes);
                // SAFETY: C caller's pointer.
                // (One status: the error is the call's return value, MPI_ERROR untouched.)
                unsafe { write_status(status, &st, false, MPI_SUCCESS) };
            }
            Err(e.into())
        }
    }
}

macro_rules! send_fns {
    ($name:ident, $name_c:ident, $mode:expr, $doc:literal) => {
        #[doc = $doc]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
        ) -> c_int {
            // SAFETY: forwarded C arguments.
            unsafe { send_impl(buf, count as MPI_Count, datatype, dest, tag, comm, $mode) }
        }
        #[doc = concat!($doc, " (large count)")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name_c(
            buf: *const c_void,
            count: MPI_Count,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
        ) -> c_int {
            // SAFETY: forwarded C arguments.
            unsafe { send_impl(buf, count, datatype, dest, tag, comm, $mode) }
        }
    };
}
send_fns!(MPI_Send, MPI_Send_c, Mode::Standard, "`MPI_Send`.");
send_fns!(MPI_Ssend, MPI_Ssend_c, Mode::Sync, "`MPI_Ssend`.");
send_fns!(
    MPI_Rsend,
    MPI_Rsend_c,
    Mode::Ready,
    "`MPI_Rsend` (as a standard send)."
);
send_fns!(MPI_Bsend, MPI_Bsend_c, Mode::Buffered, "`MPI_Bsend`.");

/// `MPI_Recv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: forwarded C arguments.
    unsafe { recv_impl(buf, count as MPI_Count, datatype, source, tag, comm, status) }
}

/// `MPI_Recv_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Recv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: forwarded C arguments.
    unsafe { recv_impl(buf, count, datatype, source, tag, comm, status) }
}

// ---- nonblocking and persistent ------------------------------------------------------

/// Posts a send; `MPI_PROC_NULL` gives a completed operation.
unsafe fn post_send(
    buf: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    mode: Mode,
) -> R<Started> {
    // SAFETY: the caller's buffer, valid until completion.
    if let Some(d) = unsafe { send_plain(buf, count, dt, dest, tag, comm, mode)? } {
        return Ok(Started::plain(crate::request::detached_active(d)));
    }
    let c = lookup(comm)?;
    if dest == MPI_PROC_NULL {
        return Ok(Started::plain(Active::Ready(empty_status())));
    }
    let d = rank_arg(&c, dest, "destination")?;
    let t = tag_arg(tag)?;
    // SAFETY: C caller's buffer.
    let b = unsafe { send_buf(buf as *const u8, count, dt)? };
    start_send(&c, comm, b, d, t, mode)
}

/// The common send, without a [`SendBuf`]: the caller's contiguous host bytes of a
/// predefined type sent as they are (not buffered mode, not `MPI_PROC_NULL`), checked
/// in [`post_send`]'s order. `None`: any other case, for the general path.
///
/// # Safety
/// The C caller's buffer, valid until completion (MPI's contract).
#[inline(always)]
unsafe fn send_plain(
    buf: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    mode: Mode,
) -> R<Option<rankwire::Detached<'static>>> {
    if mode == Mode::Buffered || dest == MPI_PROC_NULL {
        return Ok(None);
    }
    let Some(len) = crate::buf::host_run(buf as *const u8, count, dt) else {
        return Ok(None);
    };
    let c = lookup(comm)?;
    let d = rank_arg(&c, dest, "destination")?;
    let t = tag_arg(tag)?;
    // SAFETY: the caller's contract (host bytes, unchanged until completion).
    Ok(Some(unsafe {
        c.isend_detached(buf as *const u8, len, d, t, mode == Mode::Sync)?
    }))
}

/// The common receive, without a [`RecvBuf`]: contiguous host bytes of a predefined
/// type received in place (not `MPI_PROC_NULL`), checked in [`post_recv`]'s order.
/// `None`: any other case, for the general path.
///
/// # Safety
/// The C caller's buffer, valid until completion (MPI's contract).
#[inline(always)]
unsafe fn recv_plain(
    buf: *mut c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> R<Option<rankwire::Detached<'static>>> {
    if source == MPI_PROC_NULL {
        return Ok(None);
    }
    let Some(len) = crate::buf::host_run(buf as *const u8, count, dt) else {
        return Ok(None);
    };
    let c = lookup(comm)?;
    let src = recv_source(&c, source)?;
    let tg = recv_tag(tag)?;
    // SAFETY: the caller's contract (host bytes, untouched until completion).
    Ok(Some(unsafe {
        c.irecv_detached(buf as *mut u8, len, src, tg)?
    }))
}

unsafe fn post_recv(
    buf: *mut c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> R<Started> {
    // SAFETY: the caller's buffer, valid until completion.
    if let Some(d) = unsafe { recv_plain(buf, count, dt, source, tag, comm)? } {
        return Ok(Started::plain(crate::request::detached_active(d)));
    }
    let c = lookup(comm)?;
    if source == MPI_PROC_NULL {
        return Ok(Started::plain(Active::Ready(empty_status())));
    }
    let src = recv_source(&c, source)?;
    let tg = recv_tag(tag)?;
    // SAFETY: C caller's buffer.
    let b = unsafe { recv_buf(buf as *mut u8, count, dt)? };
    start_recv(&c, b, src, tg)
}

macro_rules! isend_fns {
    ($name:ident, $name_c:ident, $init:ident, $init_c:ident, $mode:expr, $doc:literal) => {
        #[doc = $doc]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            // SAFETY: forwarded C arguments.
            unsafe { $name_c(buf, count as MPI_Count, datatype, dest, tag, comm, request) }
        }
        #[doc = concat!($doc, " (large count)")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name_c(
            buf: *const c_void,
            count: MPI_Count,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            guard(comm, || {
                out_arg(request, "request")?;
                // The common case first, its request built in place.
                // SAFETY: C caller's buffer, valid until completion.
                if let Some(d) =
                    unsafe { send_plain(buf, count, datatype, dest, tag, comm, $mode)? }
                {
                    // SAFETY: C caller's pointer.
                    return unsafe { put(request, insert_detached(comm, d), "request") };
                }
                // SAFETY: C caller's buffer, valid until completion.
                let s = unsafe { post_send(buf, count, datatype, dest, tag, comm, $mode)? };
                // SAFETY: C caller's pointer.
                unsafe { put(request, insert(comm, s), "request") }
            })
        }
        #[doc = concat!($doc, " (persistent: `_init`)")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $init(
            buf: *const c_void,
            count: c_int,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            // SAFETY: forwarded C arguments.
            unsafe { $init_c(buf, count as MPI_Count, datatype, dest, tag, comm, request) }
        }
        #[doc = concat!($doc, " (persistent, large count)")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $init_c(
            buf: *const c_void,
            count: MPI_Count,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            guard(comm, || {
                // Check the arguments now (errors at init, as MPI 4.1 §3.9 allows).
                let c = lookup(comm)?;
                if dest != MPI_PROC_NULL {
                    rank_arg(&c, dest, "destination")?;
                    tag_arg(tag)?;
                }
                crate::datatype::for_comm(datatype)?;
                crate::datatype::count(count)?;
                let addr = buf as usize;
                let start = move || {
                    // SAFETY: the persistent request's buffer stays valid while it is used.
                    unsafe {
                        post_send(
                            addr as *const c_void,
                            count,
                            datatype,
                            dest,
                            tag,
                            comm,
                            $mode,
                        )
                    }
                };
                // SAFETY: C caller's pointer.
                unsafe { put(request, insert_persistent(comm, Box::new(start)), "request") }
            })
        }
    };
}
isend_fns!(
    MPI_Isend,
    MPI_Isend_c,
    MPI_Send_init,
    MPI_Send_init_c,
    Mode::Standard,
    "`MPI_Isend`."
);
isend_fns!(
    MPI_Issend,
    MPI_Issend_c,
    MPI_Ssend_init,
    MPI_Ssend_init_c,
    Mode::Sync,
    "`MPI_Issend`."
);
isend_fns!(
    MPI_Irsend,
    MPI_Irsend_c,
    MPI_Rsend_init,
    MPI_Rsend_init_c,
    Mode::Ready,
    "`MPI_Irsend`."
);
isend_fns!(
    MPI_Ibsend,
    MPI_Ibsend_c,
    MPI_Bsend_init,
    MPI_Bsend_init_c,
    Mode::Buffered,
    "`MPI_Ibsend`."
);

/// `MPI_Irecv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        MPI_Irecv_c(
            buf,
            count as MPI_Count,
            datatype,
            source,
            tag,
            comm,
            request,
        )
    }
}

/// `MPI_Irecv_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Irecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard(comm, || {
        out_arg(request, "request")?;
        // The common case first, its request built in place.
        // SAFETY: C caller's buffer, valid until completion.
        if let Some(d) = unsafe { recv_plain(buf, count, datatype, source, tag, comm)? } {
            // SAFETY: C caller's pointer.
            return unsafe { put(request, insert_detached(comm, d), "request") };
        }
        // SAFETY: C caller's buffer, valid until completion.
        let s = unsafe { post_recv(buf, count, datatype, source, tag, comm)? };
        // SAFETY: C caller's pointer.
        unsafe { put(request, insert(comm, s), "request") }
    })
}

/// `MPI_Recv_init`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Recv_init(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        MPI_Recv_init_c(
            buf,
            count as MPI_Count,
            datatype,
            source,
            tag,
            comm,
            request,
        )
    }
}

/// `MPI_Recv_init_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Recv_init_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        if source != MPI_PROC_NULL {
            recv_source(&c, source)?;
            recv_tag(tag)?;
        }
        crate::datatype::for_comm(datatype)?;
        crate::datatype::count(count)?;
        let addr = buf as usize;
        let start = move || {
            // SAFETY: the persistent request's buffer stays valid while it is used.
            unsafe { post_recv(addr as *mut c_void, count, datatype, source, tag, comm) }
        };
        // SAFETY: C caller's pointer.
        unsafe { put(request, insert_persistent(comm, Box::new(start)), "request") }
    })
}

// ---- sendrecv --------------------------------------------------------------------

/// `MPI_Sendrecv`: the receive is posted first, so two ranks exchanging never deadlock.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        MPI_Sendrecv_c(
            sendbuf,
            sendcount as MPI_Count,
            sendtype,
            dest,
            sendtag,
            recvbuf,
            recvcount as MPI_Count,
            recvtype,
            source,
            recvtag,
            comm,
            status,
        )
    }
}

/// `MPI_Sendrecv_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Sendrecv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: forwarded C arguments.
    guard(comm, || unsafe {
        sendrecv(
            sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
            recvtag, comm, status,
        )
    })
}

/// [`MPI_Sendrecv_c`]'s work, its error returned (not raised) for the exported caller.
///
/// # Safety
/// The C caller's buffers, valid for the call; `status` null or writable.
#[allow(clippy::too_many_arguments)]
unsafe fn sendrecv(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> R {
    // SAFETY: C caller's buffers, valid for the call.
    let r = unsafe { post_recv(recvbuf, recvcount, recvtype, source, recvtag, comm)? };
    // SAFETY: as above.
    let s = unsafe {
        post_send(
            sendbuf,
            sendcount,
            sendtype,
            dest,
            sendtag,
            comm,
            Mode::Standard,
        )?
    };
    let mut hr = insert(comm, r);
    let mut hs = insert(comm, s);
    // Both waits run; their errors are raised once, by this call (the receive's
    // first), with their own messages.
    // SAFETY: local handles; status is the caller's pointer.
    let rr = unsafe { crate::request::wait_quiet(&mut hr, status) };
    // SAFETY: local handle.
    let rs = unsafe { crate::request::wait_quiet(&mut hs, std::ptr::null_mut()) };
    rr.and(rs)
}

/// `MPI_Sendrecv_replace`: the data is sent from a copy, then received into `buf`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        MPI_Sendrecv_replace_c(
            buf,
            count as MPI_Count,
            datatype,
            dest,
            sendtag,
            source,
            recvtag,
            comm,
            status,
        )
    }
}

/// `MPI_Sendrecv_replace_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Sendrecv_replace_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    guard(comm, || {
        // Pack (or copy) the outgoing data first: the receive overwrites `buf`.
        // SAFETY: C caller's buffer.
        let b = unsafe { send_buf(buf as *const u8, count, datatype)? };
        let copy = owned_copy(&b)?;
        drop(b);
        let n = copy.len();
        // SAFETY: the copy is contiguous bytes.
        // (Its error is this call's, raised once by its guard.)
        unsafe {
            sendrecv(
                c_addr(&copy),
                n as MPI_Count,
                MPI_BYTE,
                dest,
                sendtag,
                buf,
                count,
                datatype,
                source,
                recvtag,
                comm,
                status,
            )
        }
    })
}

// ---- probes ----------------------------------------------------------------------

/// `MPI_Probe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Probe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        if source == MPI_PROC_NULL {
            // SAFETY: C caller's pointer.
            unsafe { write_status(status, &empty_status(), false, MPI_SUCCESS) };
            return Ok(());
        }
        let st = c.probe(recv_source(&c, source)?, recv_tag(tag)?)?;
        // SAFETY: C caller's pointer.
        unsafe { write_status(status, &st, false, MPI_SUCCESS) };
        Ok(())
    })
}

/// `MPI_Iprobe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        if source == MPI_PROC_NULL {
            // SAFETY: C caller's pointers.
            unsafe { write_status(status, &empty_status(), false, MPI_SUCCESS) };
            return unsafe { put(flag, 1, "flag") };
        }
        let st = c.iprobe(recv_source(&c, source)?, recv_tag(tag)?)?;
        if let Some(st) = &st {
            // SAFETY: C caller's pointer.
            unsafe { write_status(status, st, false, MPI_SUCCESS) };
        }
        // SAFETY: C caller's pointer.
        unsafe { put(flag, st.is_some() as c_int, "flag") }
    })
}

/// A message taken out of matching by `MPI_Mprobe`/`MPI_Improbe`.
pub struct Msg {
    comm: MPI_Comm,
    msg: Mutex<Option<rankwire::Message>>,
}

static MESSAGES: Table<Msg> = Table::new(Kind::Message);

/// Whether a message from `MPI_Mprobe`/`MPI_Improbe` on `comm` is still to be
/// received: its receive raises errors on `comm`'s handler, so `MPI_Comm_free` keeps
/// the handle until then.
pub fn messages_reference(comm: MPI_Comm) -> bool {
    MESSAGES.any(|m| m.comm == comm)
}

fn new_message(comm: MPI_Comm, m: rankwire::Message) -> MPI_Message {
    MESSAGES.insert(Msg {
        comm,
        msg: Mutex::new(Some(m)),
    })
}

/// `MPI_Mprobe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Mprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        if source == MPI_PROC_NULL {
            // SAFETY: C caller's pointers.
            unsafe { write_status(status, &empty_status(), false, MPI_SUCCESS) };
            return unsafe { put(message, MPI_MESSAGE_NO_PROC, "message") };
        }
        let (m, st) = c.mprobe(recv_source(&c, source)?, recv_tag(tag)?)?;
        // SAFETY: C caller's pointers.
        unsafe {
            write_status(status, &st, false, MPI_SUCCESS);
            put(message, new_message(comm, m), "message")
        }
    })
}

/// `MPI_Improbe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Improbe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        if source == MPI_PROC_NULL {
            // SAFETY: C caller's pointers.
            unsafe {
                write_status(status, &empty_status(), false, MPI_SUCCESS);
                put(message, MPI_MESSAGE_NO_PROC, "message")?;
                return put(flag, 1, "flag");
            }
        }
        match c.improbe(recv_source(&c, source)?, recv_tag(tag)?)? {
            Some((m, st)) => {
                // SAFETY: C caller's pointers.
                unsafe {
                    write_status(status, &st, false, MPI_SUCCESS);
                    put(message, new_message(comm, m), "message")?;
                    put(flag, 1, "flag")
                }
            }
            // SAFETY: C caller's pointer.
            None => unsafe { put(flag, 0, "flag") },
        }
    })
}

fn take_message(message: *mut MPI_Message) -> R<Option<(MPI_Comm, rankwire::Message)>> {
    if message.is_null() {
        return Err(err(MPI_ERR_ARG, "message is a null pointer"));
    }
    // SAFETY: non-null C pointer.
    let h = unsafe { *message };
    if h == MPI_MESSAGE_NO_PROC {
        // SAFETY: as above.
        unsafe { *message = MPI_MESSAGE_NULL };
        return Ok(None);
    }
    let m = MESSAGES.remove(h).ok_or_else(|| {
        err(
            MPI_ERR_REQUEST,
            format!("matching: {h:#x} is not a message from MPI_Mprobe/MPI_Improbe (already received?); fix: receive each probed message once"),
        )
    })?;
    // SAFETY: as above.
    unsafe { *message = MPI_MESSAGE_NULL };
    let inner = m.msg.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok(inner.map(|x| (m.comm, x)))
}

/// `MPI_Mrecv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Mrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { MPI_Mrecv_c(buf, count as MPI_Count, datatype, message, status) }
}

/// `MPI_Mrecv_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Mrecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> c_int {
    let mut req = MPI_REQUEST_NULL;
    // SAFETY: forwarded.
    let rc = unsafe { MPI_Imrecv_c(buf, count, datatype, message, &mut req) };
    if rc != MPI_SUCCESS {
        return rc;
    }
    // SAFETY: local handle; caller's status.
    unsafe { crate::request::MPI_Wait(&mut req, status) }
}

/// `MPI_Imrecv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Imrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { MPI_Imrecv_c(buf, count as MPI_Count, datatype, message, request) }
}

/// `MPI_Imrecv_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Imrecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    request: *mut MPI_Request,
) -> c_int {
    guard(MPI_COMM_WORLD, || {
        let Some((comm, m)) = take_message(message)? else {
            // SAFETY: C caller's pointer.
            return unsafe {
                put(
                    request,
                    insert(MPI_COMM_SELF, Started::plain(Active::Ready(empty_status()))),
                    "request",
                )
            };
        };
        // SAFETY: C caller's buffer, valid until completion.
        let b = unsafe { recv_buf(buf as *mut u8, count, datatype)? };
        // SAFETY: as above.
        let r = unsafe { m.irecv_raw(b.ptr, b.len)? };
        let b = Arc::new(Mutex::new(Some(b)));
        let s = Started {
            active: Active::P2p(r),
            finish: Some(Box::new(move |st| {
                match b.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    Some(b) => b.finish(st.len_bytes),
                    None => Ok(()),
                }
            })),
            keep: Vec::new(),
        };
        // SAFETY: C caller's pointer.
        unsafe { put(request, insert(comm, s), "request") }
    })
}

// ---- nonblocking sendrecv (MPI 4.0) ---------------------------------------------------

/// One operation of a posted receive and a posted send, completing together; its
/// status is the receive's.
fn combine(r: Started, s: Started) -> Started {
    let recv_ready = match &r.active {
        Active::Ready(st) => Some(*st),
        _ => None,
    };
    let mut v = Vec::new();
    if let Active::P2p(x) = r.active {
        v.push(x);
    }
    if let Active::P2p(x) = s.active {
        v.push(x);
    }
    let rf = r.finish;
    let mut keep = r.keep;
    keep.extend(s.keep);
    Started {
        active: Active::Multi(v),
        finish: Some(Box::new(move |st| {
            if let Some(rs) = recv_ready {
                *st = rs;
            }
            match rf {
                Some(f) => f(st),
                None => Ok(()),
            }
        })),
        keep,
    }
}

/// `MPI_Isendrecv` (MPI 4.0 §3.10.2): the receive is posted first; the request's
/// status is the receive's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Isendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        MPI_Isendrecv_c(
            sendbuf,
            sendcount as MPI_Count,
            sendtype,
            dest,
            sendtag,
            recvbuf,
            recvcount as MPI_Count,
            recvtype,
            source,
            recvtag,
            comm,
            request,
        )
    }
}

/// `MPI_Isendrecv_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Isendrecv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard(comm, || {
        // SAFETY: the C caller's buffers, valid until completion.
        let r = unsafe { post_recv(recvbuf, recvcount, recvtype, source, recvtag, comm)? };
        // SAFETY: as above.
        let s = unsafe {
            post_send(
                sendbuf,
                sendcount,
                sendtype,
                dest,
                sendtag,
                comm,
                Mode::Standard,
            )?
        };
        // SAFETY: C caller's pointer.
        unsafe { put(request, insert(comm, combine(r, s)), "request") }
    })
}

/// `MPI_Isendrecv_replace`: the outgoing data is copied first (packed for a derived
/// type, staged for device memory), then received into `buf`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Isendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        MPI_Isendrecv_replace_c(
            buf,
            count as MPI_Count,
            datatype,
            dest,
            sendtag,
            source,
            recvtag,
            comm,
            request,
        )
    }
}

/// `MPI_Isendrecv_replace_c`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Isendrecv_replace_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    guard(comm, || {
        // SAFETY: C caller's buffer.
        let b = unsafe { send_buf(buf as *const u8, count, datatype)? };
        let copy = owned_copy(&b)?;
        drop(b);
        // SAFETY: the C caller's buffer, valid until completion.
        let r = unsafe { post_recv(buf, count, datatype, source, recvtag, comm)? };
        let n = copy.len() as MPI_Count;
        // SAFETY: the copy stays alive in the request (kept below).
        let mut s = unsafe {
            post_send(
                c_addr(&copy),
                n,
                MPI_BYTE,
                dest,
                sendtag,
                comm,
                Mode::Standard,
            )?
        };
        s.keep.push(Box::new(copy));
        // SAFETY: C caller's pointer.
        unsafe { put(request, insert(comm, combine(r, s)), "request") }
    })
}
