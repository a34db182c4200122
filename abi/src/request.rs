//! `MPI_Request`: nonblocking point-to-point and collective operations, persistent
//! requests, and the wait/test families (MPI 4.1 §3.7, §3.9, §6.12).
//!
//! A request owns what its operation needs until it completes: the rankwire request
//! (`Request<'static>` / `CollRequest<'static>`: the C caller guarantees the buffers
//! outlive the operation, as MPI requires), temporary buffers (packed derived
//! datatypes), and a `finish` step run once at completion (unpacking into the user's
//! buffer, writing counts). Persistent requests keep a `start` closure that posts a
//! new operation at each `MPI_Start`.

use crate::consts::*;
use crate::error::{MpiErr, R, err, guard, guard_on};
use crate::handles::Kind;
use std::any::Any;
use std::ffi::c_int;
use std::sync::{Arc, Mutex};

/// Runs once when the operation has completed, with its status (bytes received etc.).
pub type Finish = Box<dyn FnOnce(&mut rankwire::Status) -> R + Send>;

/// Objects kept alive until the request completes (temporary buffers).
pub type Keep = Vec<Box<dyn Any + Send>>;

/// An operation in flight.
pub enum Active {
    /// Point-to-point send or receive.
    P2p(rankwire::Request<'static>),
    /// Nonblocking collective.
    Coll(rankwire::CollRequest<'static>),
    /// Completed when posted (e.g. with `MPI_PROC_NULL`), with this status.
    Ready(rankwire::Status),
    /// Several point-to-point operations completing together (`MPI_Isendrecv`,
    /// neighborhood collectives): the first error, else the first operation's status
    /// (the receive of `MPI_Isendrecv`; empty when there is none).
    Multi(Vec<rankwire::Request<'static>>),
    /// A generalized request (`MPI_Grequest_start`), complete once the program calls
    /// `MPI_Grequest_complete`.
    Greq(Arc<Greq>),
    /// A point-to-point operation that failed or was cancelled, its outcome taken from
    /// the runtime by `MPI_Request_get_status` and kept for the completing wait or test.
    Finished(rankwire::Result<rankwire::Status>),
}

/// `MPI_Grequest_query_function`.
pub type GreqQueryFn = unsafe extern "C" fn(*mut std::ffi::c_void, *mut MPI_Status) -> c_int;
/// `MPI_Grequest_free_function`.
pub type GreqFreeFn = unsafe extern "C" fn(*mut std::ffi::c_void) -> c_int;
/// `MPI_Grequest_cancel_function`.
pub type GreqCancelFn = unsafe extern "C" fn(*mut std::ffi::c_void, c_int) -> c_int;

/// A generalized request (MPI 4.1 §13.2): the program's callbacks and its state.
pub struct Greq {
    done: std::sync::atomic::AtomicBool,
    query: Option<GreqQueryFn>,
    free: Option<GreqFreeFn>,
    cancel: Option<GreqCancelFn>,
    extra: usize,
}

impl Greq {
    fn is_done(&self) -> bool {
        self.done.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The end of a request freed by `MPI_Request_free`: only `free_fn` runs (nobody
    /// asks for the status).
    ///
    /// # Errors
    /// The class of the code `free_fn` returned, if not `MPI_SUCCESS`.
    fn release(&self) -> R {
        let rc = self.call_free();
        if rc != MPI_SUCCESS {
            return Err(err(
                crate::error::class_of(rc),
                "a generalized request's free_fn returned an error",
            ));
        }
        Ok(())
    }

    /// Runs `free_fn` (if any) on the program's state; its return code.
    fn call_free(&self) -> c_int {
        let extra = self.extra as *mut std::ffi::c_void;
        // SAFETY: the program's callback with its own state (MPI's contract).
        self.free.map_or(MPI_SUCCESS, |f| unsafe { f(extra) })
    }

    /// Completion (MPI 4.1 §13.2): `query_fn` fills the status, then `free_fn` runs;
    /// an error code either returns is the operation's error.
    fn finish(&self) -> Done {
        let mut c = MPI_Status {
            MPI_SOURCE: MPI_ANY_SOURCE,
            MPI_TAG: MPI_ANY_TAG,
            MPI_ERROR: MPI_SUCCESS,
            MPI_internal: [0; 5],
        };
        let extra = self.extra as *mut std::ffi::c_void;
        // SAFETY: the program's callbacks with its own state (MPI's contract).
        let q = self
            .query
            .map_or(MPI_SUCCESS, |f| unsafe { f(extra, &mut c) });
        let fr = self.call_free();
        let code = [q, fr].into_iter().find(|&r| r != MPI_SUCCESS);
        let st = rankwire::Status {
            source: c.MPI_SOURCE as isize as usize,
            tag: c.MPI_TAG,
            len_bytes: status_bytes(&c) as usize,
        };
        Done {
            st,
            cancelled: c.MPI_internal[2] != 0,
            result: match code {
                Some(e) => Err(err(
                    crate::error::class_of(e),
                    "a generalized request's query_fn or free_fn returned an error",
                )),
                None => Ok(()),
            },
        }
    }
}

/// A started operation: what `MPI_Start` (or a nonblocking call) produces.
pub struct Started {
    /// The operation.
    pub active: Active,
    /// Runs at completion.
    pub finish: Option<Finish>,
    /// Kept alive until completion.
    pub keep: Keep,
}

impl Started {
    /// An operation with nothing to do at completion.
    pub fn plain(active: Active) -> Started {
        Started {
            active,
            finish: None,
            keep: Vec::new(),
        }
    }
}

/// Posts the operation of a persistent request (called at each `MPI_Start`).
pub type StartFn = Box<dyn Fn() -> R<Started> + Send + Sync>;

/// The object behind a created `MPI_Request`: one slot of the request slab.
struct Slot {
    /// Whose error handler reports its errors.
    comm: MPI_Comm,
    /// The operation in flight; [`Body::None`] when inactive (persistent) or while
    /// `busy`.
    op: Body,
    /// Persistent requests: how to start again; `None` for one-shot requests.
    start: Option<Arc<StartFn>>,
    /// A call has taken `op` out to wait for, test or start it without holding the
    /// table's lock (the runtime may run user callbacks meanwhile); other calls on the
    /// same handle see it active and do not touch it.
    busy: bool,
    /// A generalized request's state, reachable by `MPI_Grequest_complete` from another
    /// thread while a wait holds the operation.
    greq: Option<Arc<Greq>>,
    /// `MPI_Request_free` was called on this active generalized request: the slot stays
    /// (the program may still call `MPI_Grequest_complete` with a copy of the handle)
    /// until that completion, which runs `free_fn` and removes it.
    freed: bool,
    /// While `busy` with a point-to-point operation the runtime may still complete: its
    /// id, so that `MPI_Cancel` from another thread can cancel it
    /// (`rankwire::Communicator::cancel_pending`) and the waiter return.
    cancel_id: Option<rankwire::CancelId>,
}

/// The operation of a [`Slot`]. The common point-to-point request (the caller's own
/// contiguous host bytes, nothing to run at completion, on a communicator whose ranks
/// are the world's) is held as the runtime's id alone, or as the status of a send
/// that completed at post: a small slot, moved in and out of the table cheaply
/// (`MPI_Isend`/`MPI_Irecv`/`MPI_Waitall` windows, issue 20).
enum Body {
    /// Nothing: inactive (persistent), or taken out while `busy`.
    None,
    /// A plain point-to-point operation pending in the runtime.
    Raw(rankwire::RawRequest),
    /// A plain send that completed when posted, with its status.
    Ready(rankwire::Status),
    /// Anything else.
    Full(Box<Started>),
}

impl Body {
    /// The body holding `op`.
    fn of(op: Started) -> Body {
        match op {
            Started {
                active,
                finish: None,
                keep,
            } if keep.is_empty() => Body::plain(active),
            op => Body::Full(Box::new(op)),
        }
    }

    /// The body of an operation with nothing to run or keep at completion.
    fn plain(active: Active) -> Body {
        match active {
            // SAFETY: a request held by a slot is completed through the slot, which
            // keeps the C caller's buffer contract (valid until completion).
            Active::P2p(r) => match unsafe { r.into_raw() } {
                Ok(raw) => Body::Raw(raw),
                Err(r) => Body::Full(Box::new(Started::plain(Active::P2p(r)))),
            },
            Active::Ready(st) => Body::Ready(st),
            a => Body::Full(Box::new(Started::plain(a))),
        }
    }

    fn is_some(&self) -> bool {
        !matches!(self, Body::None)
    }

    /// The operation, out of the body (which becomes [`Body::None`]).
    fn take(&mut self) -> Option<Started> {
        match std::mem::replace(self, Body::None) {
            Body::None => None,
            Body::Raw(raw) => Some(Started::plain(raw_active(raw))),
            Body::Ready(st) => Some(Started::plain(Active::Ready(st))),
            Body::Full(b) => Some(*b),
        }
    }

    /// Its id for `rankwire::Communicator::cancel_pending`, if it is a point-to-point
    /// operation still pending.
    fn cancel_id(&self) -> Option<rankwire::CancelId> {
        match self {
            Body::Raw(raw) => Some(raw.cancel_id()),
            Body::Full(op) => cancel_id_of(op),
            Body::None | Body::Ready(_) => None,
        }
    }

    /// A generalized request's state, if it holds one.
    fn greq(&self) -> Option<Arc<Greq>> {
        match self {
            Body::Full(op) => match &op.active {
                Active::Greq(g) => Some(g.clone()),
                _ => None,
            },
            _ => None,
        }
    }
}

/// The request of a raw point-to-point operation, rebuilt in the process's runtime
/// (every communicator shares `MPI_COMM_WORLD`'s; statuses in world ranks, which are
/// its communicator's: [`rankwire::Request::into_raw`] keeps no other).
fn raw_active(raw: rankwire::RawRequest) -> Active {
    match crate::env::world() {
        // SAFETY: `raw` came out of a slot, which held it once; it is rebuilt once.
        Ok(w) => Active::P2p(unsafe { rankwire::Request::from_raw(raw, w) }),
        Err(e) => Active::Finished(Err(outlived_runtime(&e))),
    }
}

/// The outcome of a raw request whose runtime is gone (`e`: why `MPI_COMM_WORLD` is not
/// there: after `MPI_Finalize`).
fn outlived_runtime(e: &MpiErr) -> rankwire::Error {
    rankwire::Error::Usage(format!("a request outlived the runtime: {}", e.msg))
}

/// The id of `op` for `rankwire::Communicator::cancel_pending`, if it is a
/// point-to-point operation still pending.
fn cancel_id_of(op: &Started) -> Option<rankwire::CancelId> {
    match &op.active {
        Active::P2p(r) => r.cancel_id(),
        _ => None,
    }
}

/// Every created request: a slab (dense keys, slots reused, no allocation per
/// request once it has grown) behind one mutex, held only for the few instructions that
/// move an operation in or out of its slot, never while the runtime waits or
/// progresses. A handle is `(key + 1) << 12 | Kind::Request` (see `handles.rs`).
static REQUESTS: Mutex<slab::Slab<Slot>> = Mutex::new(slab::Slab::new());

fn table() -> std::sync::MutexGuard<'static, slab::Slab<Slot>> {
    REQUESTS.lock().unwrap_or_else(|e| e.into_inner())
}

fn handle_of(key: usize) -> MPI_Request {
    ((key + 1) << 12) | Kind::Request as usize
}

/// The slab key of a created request handle (`None` for any other value).
fn key_of(h: MPI_Request) -> Option<usize> {
    if h & 0xfff != Kind::Request as usize || h >> 12 == 0 {
        return None;
    }
    Some((h >> 12) - 1)
}

// ---- Fast handles: a plain point-to-point request without a slot ----------------------
//
// The common request (`MPI_Isend`/`MPI_Irecv` of contiguous host bytes on
// `MPI_COMM_WORLD` or `MPI_COMM_SELF`) is not stored in the table: its handle carries
// the runtime's request id (`rankwire::RawRequest::parts`), or, for a send that
// completed when posted, a count that keeps it unique. No lock and no slot per message (issue 20: the
// table cost about 100 instructions per message on each side of a windowed exchange,
// 2026-12-08). Other requests, and ones whose fields do not fit, take a slot.
//
// Layout (64-bit handles): bits 0-3 are `FAST_TAG` (a created handle's low 12 bits are
// its kind, 1-9, and predefined handles are below 0x400, so neither is ever taken for a
// fast one: a fast handle is also at least 2^32); bit 4 `FAST_DONE`; bit 5
// `FAST_SELF` (the error handler's communicator: `MPI_COMM_SELF`, else
// `MPI_COMM_WORLD`).
// - pending: bit 6 receive; bits 7-31 the id's slot (below 2^25); bits 32-63 its
//   generation (never 0);
// - done send: bits 6-62 a per-process count of such sends (so that no two requests
//   share a handle); bit 63 set. Its status: source and tag `MPI_UNDEFINED`, count 0
//   (MPI 4.1 §3.7.3: a send's status fields are undefined but for the error and
//   `MPI_Test_cancelled`).
//
// A pending handle that outlived its request (a copy used after completion) names an
// id the runtime no longer holds: `MPI_ERR_REQUEST` (checked by
// `Communicator::raw_known`, or the runtime's `MatchError::UnknownRequest` in the
// waits), never a wait. A done-send handle holds nothing the runtime keeps: a copy
// used after completion completes again (erroneous in MPI, and not detected).

/// Low 4 bits of a fast request handle.
const FAST_TAG: usize = 0xb;
/// A send that completed when it was posted (no id: a count).
const FAST_DONE: usize = 1 << 4;
/// The request's communicator is `MPI_COMM_SELF` (else `MPI_COMM_WORLD`).
const FAST_SELF: usize = 1 << 5;
/// A pending receive.
const FAST_RECV: usize = 1 << 6;
/// Whether handles are wide enough for the layout.
const FAST_OK: bool = usize::BITS == 64;

/// A fast handle's request.
#[derive(Clone, Copy)]
enum Fast {
    /// Pending in the runtime.
    Raw(MPI_Comm, rankwire::RawRequest),
    /// A send that completed at post (its status: [`send_done_status`]).
    Done(MPI_Comm),
}

impl Fast {
    fn comm(self) -> MPI_Comm {
        match self {
            Fast::Raw(c, _) | Fast::Done(c) => c,
        }
    }
}

/// The communicator bit of a fast handle for `comm` (`None`: not a predefined one).
#[inline]
fn fast_comm(comm: MPI_Comm) -> Option<usize> {
    match comm {
        MPI_COMM_WORLD => Some(0),
        MPI_COMM_SELF => Some(FAST_SELF),
        _ => None,
    }
}

/// The fast handle of pending `raw` on `comm`, if it fits (see the layout above).
#[inline]
fn fast_raw(comm: MPI_Comm, raw: rankwire::RawRequest) -> Option<MPI_Request> {
    let c = fast_comm(comm)?;
    let (id, is_recv) = raw.parts();
    let (slot, generation) = (id & 0xffff_ffff, id >> 32);
    if !FAST_OK || slot >= 1 << 25 || generation == 0 {
        return None;
    }
    let recv = if is_recv { FAST_RECV } else { 0 };
    Some(((generation << 32) | (slot << 7)) as usize | recv | c | FAST_TAG)
}

/// Sends given a done-send fast handle so far (its bits 6-62).
static DONE_SENDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The fast handle of a send on `comm` that completed at post (see the layout above).
#[inline]
fn fast_done(comm: MPI_Comm) -> Option<MPI_Request> {
    let c = fast_comm(comm)?;
    if !FAST_OK {
        return None;
    }
    let n = DONE_SENDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & ((1 << 57) - 1);
    Some(((1u64 << 63) | (n << 6)) as usize | FAST_DONE | c | FAST_TAG)
}

/// The status of a send completed through a done-send fast handle: source and tag
/// `MPI_UNDEFINED`, count 0 (MPI 4.1 §3.7.3: a send's status fields are undefined but
/// for the error and `MPI_Test_cancelled`; the handle keeps no more).
fn send_done_status() -> rankwire::Status {
    rankwire::Status {
        source: MPI_UNDEFINED as isize as usize,
        tag: MPI_UNDEFINED,
        len_bytes: 0,
    }
}

/// The request of fast handle `h` (`None`: not a fast handle).
#[inline]
fn fast(h: MPI_Request) -> Option<Fast> {
    if !FAST_OK || h & 0xf != FAST_TAG || (h as u64) < 1 << 32 {
        return None;
    }
    let comm = if h & FAST_SELF != 0 {
        MPI_COMM_SELF
    } else {
        MPI_COMM_WORLD
    };
    let b = h as u64;
    if h & FAST_DONE != 0 {
        if b >> 63 == 0 {
            return None;
        }
        return Some(Fast::Done(comm));
    }
    let id = (b & !0xffff_ffff) | ((b >> 7) & 0x1ff_ffff);
    Some(Fast::Raw(
        comm,
        rankwire::RawRequest::from_parts(id, h & FAST_RECV != 0),
    ))
}

/// The operation of fast handle `h` as a [`Started`] (for the general paths).
///
/// # Errors
/// `MPI_ERR_REQUEST` when the runtime no longer holds its request (completed through a
/// copy of the handle); the runtime's absence (after `MPI_Finalize`).
fn fast_started(h: MPI_Request, f: Fast) -> R<Started> {
    match f {
        Fast::Done(_) => Ok(Started::plain(Active::Ready(send_done_status()))),
        Fast::Raw(_, raw) => {
            if !crate::env::world()?.raw_known(raw) {
                return Err(bad_request(h));
            }
            Ok(Started::plain(raw_active(raw)))
        }
    }
}

/// Fast handles given out as `int`s by [`MPI_Request_toint`]: entry `i` of `slots` is
/// the `int` `(i + 1) << 12 | FAST_TAG` (never a created handle's `int`, whose low 12
/// bits are its kind, nor a fast handle, which is at least 2^32). An entry lives until
/// its request completes ([`fast_retired`]); fewer than 2^19 at once fit in an `int`
/// (as for every kind of handle, `handles.rs`).
struct IntHandles {
    slots: Vec<MPI_Request>,
    by_handle: std::collections::HashMap<MPI_Request, usize>,
    free: Vec<usize>,
}

static INT_HANDLES: Mutex<Option<IntHandles>> = Mutex::new(None);
/// Whether [`INT_HANDLES`] ever held an entry (completions look at it only then).
static INT_USED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `MPI_Request_toint` (MPI 5.0 ABI): the handle as an `int`, which
/// [`MPI_Request_fromint`] turns back into the same handle (see `handles.rs`). A fast
/// handle (at least 2^32) is given an entry of a map, the same one each time, until
/// its request completes.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Request_toint(h: MPI_Request) -> c_int {
    if fast(h).is_none() {
        return h as c_int;
    }
    let mut g = INT_HANDLES.lock().unwrap_or_else(|e| e.into_inner());
    let m = g.get_or_insert_with(|| IntHandles {
        slots: Vec::new(),
        by_handle: std::collections::HashMap::new(),
        free: Vec::new(),
    });
    INT_USED.store(true, std::sync::atomic::Ordering::Relaxed);
    let i = match m.by_handle.get(&h) {
        Some(&i) => i,
        None => {
            let i = match m.free.pop() {
                Some(i) => {
                    m.slots[i] = h;
                    i
                }
                None => {
                    m.slots.push(h);
                    m.slots.len() - 1
                }
            };
            m.by_handle.insert(h, i);
            i
        }
    };
    (((i + 1) << 12) | FAST_TAG) as c_int
}

/// `MPI_Request_fromint`: the handle of an `int` from [`MPI_Request_toint`].
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Request_fromint(i: c_int) -> MPI_Request {
    let h = i as u32 as MPI_Request;
    if h & 0xfff != FAST_TAG || h >> 12 == 0 {
        return h;
    }
    let g = INT_HANDLES.lock().unwrap_or_else(|e| e.into_inner());
    // An int never given out (or of a completed request) converts to itself, which
    // every call rejects.
    g.as_ref()
        .and_then(|m| m.slots.get((h >> 12) - 1).copied())
        .filter(|&x| x != 0)
        .unwrap_or(h)
}

/// Retires `*h` if it is a fast handle (its `int` entry let go, `*h` becomes
/// `MPI_REQUEST_NULL`); whether it was one.
#[inline]
fn retire_fast(h: &mut MPI_Request) -> bool {
    if fast(*h).is_none() {
        return false;
    }
    fast_retired(*h);
    *h = MPI_REQUEST_NULL;
    true
}

/// Fast handle `h`'s request completed (or was freed): its `int` entry, if any, is
/// let go. One relaxed load unless `MPI_Request_toint` was ever called.
#[inline]
fn fast_retired(h: MPI_Request) {
    if !INT_USED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let mut g = INT_HANDLES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = g.as_mut()
        && let Some(i) = m.by_handle.remove(&h)
    {
        m.slots[i] = 0;
        m.free.push(i);
    }
}

fn slot_mut(t: &mut slab::Slab<Slot>, h: MPI_Request) -> R<&mut Slot> {
    key_of(h)
        .and_then(|k| t.get_mut(k))
        .ok_or_else(|| bad_request(h))
}

#[inline]
fn new_slot(comm: MPI_Comm, op: Body, start: Option<Arc<StartFn>>) -> MPI_Request {
    let greq = op.greq();
    handle_of(table().insert(Slot {
        comm,
        op,
        start,
        busy: false,
        greq,
        freed: false,
        cancel_id: None,
    }))
}

/// A new active request for `s`, whose errors go to `comm`'s handler.
pub fn insert(comm: MPI_Comm, s: Started) -> MPI_Request {
    new_slot(comm, Body::of(s), None)
}

/// A new active request for the plain point-to-point operation `d` (the caller's own
/// contiguous host bytes, nothing to run or keep at completion), whose errors go to
/// `comm`'s handler: a fast handle where one fits (see `FAST_TAG`), else a slot
/// holding the runtime's id or the status of a send done at post.
#[inline(always)]
pub fn insert_detached(comm: MPI_Comm, d: rankwire::Detached<'static>) -> MPI_Request {
    let op = match d {
        rankwire::Detached::Raw(raw) => match fast_raw(comm, raw) {
            Some(h) => return h,
            None => Body::Raw(raw),
        },
        rankwire::Detached::Done(st) => match fast_done(comm) {
            Some(h) => return h,
            None => Body::Ready(st),
        },
        rankwire::Detached::Request(r) => Body::plain(Active::P2p(r)),
    };
    new_slot(comm, op, None)
}

/// The operation of `d` (see [`insert_detached`]) for the general paths.
pub fn detached_active(d: rankwire::Detached<'static>) -> Active {
    match d {
        rankwire::Detached::Raw(raw) => raw_active(raw),
        rankwire::Detached::Done(st) => Active::Ready(st),
        rankwire::Detached::Request(r) => Active::P2p(r),
    }
}

/// A new inactive persistent request; `MPI_Start` runs `start`.
pub fn insert_persistent(comm: MPI_Comm, start: StartFn) -> MPI_Request {
    new_slot(comm, Body::None, Some(Arc::new(start)))
}

fn busy_error(h: MPI_Request) -> MpiErr {
    err(
        MPI_ERR_REQUEST,
        format!(
            "matching: request {h:#x} is being completed or started by another thread; fix: complete a request from one thread at a time"
        ),
    )
}

/// What [`take_op`] found.
enum Taken {
    /// `MPI_REQUEST_NULL` or an inactive persistent request.
    Inactive,
    /// The operation, now out of its slot (which is marked busy until [`put_back`] or
    /// [`retire`]), and the communicator of its error handler.
    Op(MPI_Comm, Started),
}

/// Takes the operation of `h` out of its slot.
///
/// # Errors
/// `MPI_ERR_REQUEST` for a handle that is not a live request, or one another thread is
/// completing.
fn take_op(h: MPI_Request) -> R<Taken> {
    if h == MPI_REQUEST_NULL {
        return Ok(Taken::Inactive);
    }
    // As in `arrays`: nothing completes after MPI_Finalize.
    crate::env::check_live()?;
    if let Some(f) = fast(h) {
        return Ok(Taken::Op(f.comm(), fast_started(h, f)?));
    }
    let mut t = table();
    let s = slot_mut(&mut t, h)?;
    if s.busy {
        return Err(busy_error(h));
    }
    match s.op.take() {
        None => Ok(Taken::Inactive),
        Some(op) => {
            s.busy = true;
            s.cancel_id = cancel_id_of(&op);
            Ok(Taken::Op(s.comm, op))
        }
    }
}

/// Whether a live request (active, being completed, or persistent) was created on
/// `comm`: `MPI_Comm_free` keeps such a communicator's handle and error handler until
/// none is left. A scan of the table (communicator frees are rare).
pub fn references(comm: MPI_Comm) -> bool {
    table().iter().any(|(_, s)| s.comm == comm)
}

/// Puts a still-pending operation back into its slot.
fn put_back(h: MPI_Request, op: Started) {
    if fast(h).is_some() {
        // The handle still names it: the runtime keeps the operation (a plain one
        // becomes its raw id again, dropping nothing that would wait).
        if let Body::Full(op) = Body::of(op) {
            // Not reached (a fast handle's operation is always plain); kept running.
            DETACHED.lock().unwrap_or_else(|e| e.into_inner()).push(*op);
        }
        return;
    }
    let mut t = table();
    if let Ok(s) = slot_mut(&mut t, h) {
        s.op = Body::of(op);
        s.busy = false;
        s.cancel_id = None;
    }
}

/// After the operation of `*h` completed: frees a one-shot request (`*h` becomes
/// `MPI_REQUEST_NULL`) or makes a persistent one inactive.
fn retire(t: &mut slab::Slab<Slot>, h: &mut MPI_Request) {
    if retire_fast(h) {
        return;
    }
    let Some(k) = key_of(*h) else { return };
    let Some(s) = t.get_mut(k) else { return };
    s.busy = false;
    s.cancel_id = None;
    if s.start.is_none() {
        t.remove(k);
        *h = MPI_REQUEST_NULL;
    }
}

/// Writes the status of a completed operation into a C `MPI_Status` (null =
/// `MPI_STATUS_IGNORE`). Internal slots: 0 and 1 = received bytes (low, high 32
/// bits), 2 = cancelled flag.
///
/// `MPI_ERROR` is written only when `error` is not `MPI_SUCCESS`, and callers pass an
/// error only for the statuses of a call that returns `MPI_ERR_IN_STATUS` (MPI 4.1
/// §3.2.5: calls with one status return their error and leave the field alone; calls
/// with arrays of statuses set it only when they return `MPI_ERR_IN_STATUS`, see
/// [`set_status_errors`]). The exception is the *empty* status of a null or inactive
/// request ([`inactive_status`]), which MPI 4.1 §3.7.3 defines with error
/// `MPI_SUCCESS`: it is written whole.
///
/// # Safety
/// `out` null or valid for a write.
pub unsafe fn write_status(
    out: *mut MPI_Status,
    st: &rankwire::Status,
    cancelled: bool,
    error: c_int,
) {
    if out.is_null() {
        return;
    }
    let bytes = st.len_bytes as u64;
    // SAFETY: caller's contract; field by field, so that MPI_ERROR keeps its value.
    unsafe {
        (*out).MPI_SOURCE = st.source as c_int;
        (*out).MPI_TAG = st.tag;
        (*out).MPI_internal = [
            bytes as u32 as c_int,
            (bytes >> 32) as c_int,
            cancelled as c_int,
            0,
            0,
        ];
        if error != MPI_SUCCESS {
            (*out).MPI_ERROR = error;
        } else if !cancelled && *st == inactive_status() {
            (*out).MPI_ERROR = MPI_SUCCESS;
        }
    }
}

/// For a call with an array of statuses that returns `MPI_ERR_IN_STATUS`: the
/// `MPI_ERROR` of each of the first `n` statuses that did not fail (`failed`: the
/// indices that did, their field already written) becomes `MPI_SUCCESS` (MPI 4.1
/// §3.7.5). Nothing for `MPI_STATUSES_IGNORE`.
///
/// # Safety
/// `statuses` null or valid for `n` statuses.
unsafe fn set_status_errors(statuses: *mut MPI_Status, n: usize, failed: &[usize]) {
    if statuses.is_null() {
        return;
    }
    // Sorted once, then walked alongside (a search per status made 20 000 failures
    // cost 0.2 s: trial of 2026-12-07).
    let mut failed = failed.to_vec();
    failed.sort_unstable();
    let mut next = failed.iter().peekable();
    for i in 0..n {
        while next.next_if(|&&f| f < i).is_some() {}
        if next.peek() == Some(&&i) {
            continue;
        }
        // SAFETY: caller's contract.
        unsafe { (*statuses.add(i)).MPI_ERROR = MPI_SUCCESS };
    }
}

/// The status of a completed operation with `MPI_PROC_NULL` (MPI 4.1 §3.10: source
/// `MPI_PROC_NULL`, tag `MPI_ANY_TAG`, count 0).
pub fn empty_status() -> rankwire::Status {
    rankwire::Status {
        source: MPI_PROC_NULL as isize as usize,
        tag: MPI_ANY_TAG,
        len_bytes: 0,
    }
}

/// The *empty* status of a null or inactive request (MPI 4.1 §3.7.3: source
/// `MPI_ANY_SOURCE`, tag `MPI_ANY_TAG`, count 0, error `MPI_SUCCESS`).
pub fn inactive_status() -> rankwire::Status {
    rankwire::Status {
        source: MPI_ANY_SOURCE as isize as usize,
        tag: MPI_ANY_TAG,
        len_bytes: 0,
    }
}

/// Received byte count of a C status.
pub fn status_bytes(s: &MPI_Status) -> u64 {
    (s.MPI_internal[0] as u32 as u64) | ((s.MPI_internal[1] as u32 as u64) << 32)
}

/// Sets the received byte count of a C status (`MPI_Status_set_elements`).
pub fn set_status_bytes(s: &mut MPI_Status, bytes: u64) {
    s.MPI_internal[0] = bytes as u32 as c_int;
    s.MPI_internal[1] = (bytes >> 32) as c_int;
}

/// The outcome of an `Active::Multi`: its first error, else the status of its first
/// operation (empty when there is none).
fn multi_status(rs: Vec<rankwire::Result<rankwire::Status>>) -> rankwire::Result<rankwire::Status> {
    if let Some(e) = rs.iter().find_map(|r| r.as_ref().err()) {
        return Err(e.clone());
    }
    Ok(rs
        .into_iter()
        .next()
        .and_then(|r| r.ok())
        .unwrap_or_else(empty_status))
}

/// Outcome of one completion: the status, and whether the operation was cancelled.
struct Done {
    st: rankwire::Status,
    cancelled: bool,
    result: R,
}

/// How a point-to-point operation that did not succeed is reported: its status and its
/// error. A truncated receive's status has its source, tag and the bytes received (the
/// buffer's size: MPI 4.1 §3.2.4); other failures have the empty status. An operation
/// cancelled by `MPI_Cancel` (`MatchError::Cancelled`) has no error: it completes with
/// a cancelled status.
fn failure(e: rankwire::Error) -> (rankwire::Status, Option<MpiErr>) {
    match e {
        rankwire::Error::Matching(rankwire::MatchError::Cancelled) => (empty_status(), None),
        rankwire::Error::Matching(rankwire::MatchError::Truncated {
            source_rank,
            tag,
            buffer_bytes,
            ..
        }) => (
            rankwire::Status {
                source: source_rank as usize,
                tag,
                len_bytes: buffer_bytes as usize,
            },
            Some(MpiErr::from(e)),
        ),
        e => (empty_status(), Some(MpiErr::from(e))),
    }
}

fn finish_started(s: Started, r: rankwire::Result<rankwire::Status>) -> Done {
    let Started { finish, keep, .. } = s;
    let mut result: R = Ok(());
    let mut truncated = false;
    let mut st = match r {
        Ok(st) => st,
        Err(e) => {
            truncated = matches!(
                e,
                rankwire::Error::Matching(rankwire::MatchError::Truncated { .. })
            );
            match failure(e) {
                (st, Some(e)) => {
                    result = Err(e);
                    st
                }
                // Cancelled (MPI_Cancel, also from another thread while this ran).
                (st, None) => {
                    drop(keep);
                    return Done {
                        st,
                        cancelled: true,
                        result: Ok(()),
                    };
                }
            }
        }
    };
    if let Some(f) = finish {
        if result.is_ok() {
            result = f(&mut st);
        } else if truncated {
            // A truncated receive: what arrived is unpacked into the user's buffer
            // too; the call still reports the truncation.
            let _ = f(&mut st);
        }
    }
    drop(keep);
    Done {
        st,
        cancelled: false,
        result,
    }
}

/// Blocks until `s` completes.
fn wait_started(mut s: Started) -> Done {
    let active = std::mem::replace(&mut s.active, Active::Ready(empty_status()));
    let r = match active {
        Active::P2p(r) => r.wait(),
        Active::Coll(c) => c.wait().map(|()| empty_status()),
        Active::Ready(st) => Ok(st),
        Active::Finished(r) => r,
        Active::Multi(v) => multi_status(rankwire::wait_all_results(v)),
        Active::Greq(g) => {
            while !g.is_done() {
                rankwire_progress_hint();
            }
            return g.finish();
        }
    };
    finish_started(s, r)
}

/// The outcome of `a` if it is done (a generalized request excepted: it is given back
/// whether done or not, its completion runs its callbacks); else `a` back.
fn poll(a: Active) -> Result<rankwire::Result<rankwire::Status>, Active> {
    match a {
        Active::P2p(r) => r.test().map_err(Active::P2p),
        Active::Coll(c) => c
            .test()
            .map(|r| r.map(|()| empty_status()))
            .map_err(Active::Coll),
        Active::Ready(st) => Ok(Ok(st)),
        Active::Finished(r) => Ok(r),
        Active::Multi(v) => {
            if v.iter().all(|r| r.is_complete()) {
                Ok(multi_status(rankwire::wait_all_results(v)))
            } else {
                Err(Active::Multi(v))
            }
        }
        g @ Active::Greq(_) => Err(g),
    }
}

/// Completes `s` if it is done; gives it back otherwise.
fn test_started(mut s: Started) -> Result<Done, Started> {
    let active = std::mem::replace(&mut s.active, Active::Ready(empty_status()));
    if let Active::Greq(g) = &active
        && g.is_done()
    {
        return Ok(g.finish());
    }
    match poll(active) {
        Ok(r) => Ok(finish_started(s, r)),
        Err(a) => {
            s.active = a;
            Err(s)
        }
    }
}

/// What a wait or test did with one request handle.
enum Outcome {
    /// `MPI_REQUEST_NULL` or an inactive persistent request: empty status.
    Inactive,
    /// Completed now.
    Completed(Done),
    /// Still pending (test only).
    Pending,
}

/// Completes (or, with `block == false`, tests) the request `*h`; frees one-shot
/// requests and sets `*h = MPI_REQUEST_NULL` (persistent ones become inactive).
///
/// # Errors
/// `MPI_ERR_REQUEST` for a handle that is not a request.
fn complete(h: &mut MPI_Request, block: bool, ec: &mut MPI_Comm) -> R<Outcome> {
    match take_op(*h)? {
        Taken::Inactive => Ok(Outcome::Inactive),
        Taken::Op(comm, op) => {
            *ec = comm;
            Ok(finish_taken(h, op, block))
        }
    }
}

/// Waits for (or tests) `op`, taken out of `*h` by [`take_op`], and retires `*h` when
/// it completed (or puts `op` back).
fn finish_taken(h: &mut MPI_Request, op: Started, block: bool) -> Outcome {
    let done = if block {
        wait_started(op)
    } else {
        match test_started(op) {
            Ok(d) => d,
            Err(op) => {
                put_back(*h, op);
                return Outcome::Pending;
            }
        }
    };
    retire_one(h);
    Outcome::Completed(done)
}

/// [`retire`], locking the table only for a handle with a slot.
fn retire_one(h: &mut MPI_Request) {
    if !retire_fast(h) {
        retire(&mut table(), h);
    }
}

fn bad_request(h: MPI_Request) -> MpiErr {
    err(
        MPI_ERR_REQUEST,
        format!(
            "matching: {h:#x} is not an active or persistent request (freed, completed, or never created); fix: pass a request from a nonblocking call and complete it once"
        ),
    )
}

/// Writes `o`'s status and returns its error, if any. `multi`: the status is an entry
/// of an array (its `MPI_ERROR` gets the error); otherwise `MPI_ERROR` is left alone.
///
/// # Safety
/// `status` null or valid.
unsafe fn report(o: &Outcome, status: *mut MPI_Status, multi: bool) -> R {
    match o {
        Outcome::Inactive | Outcome::Pending => {
            // SAFETY: caller's pointer.
            unsafe { write_status(status, &inactive_status(), false, MPI_SUCCESS) };
            Ok(())
        }
        Outcome::Completed(d) => {
            let code = match &d.result {
                Err(e) if multi => e.class,
                _ => MPI_SUCCESS,
            };
            // SAFETY: caller's pointer.
            unsafe { write_status(status, &d.st, d.cancelled, code) };
            d.result.clone()
        }
    }
}

/// Frees every request still live at `MPI_Finalize` (they would otherwise keep
/// buffers of a finished job); a program that leaves requests pending is wrong, and
/// its pending receives are withdrawn.
pub fn finalize_check() {
    let n = table().len();
    if n > 0 {
        tracing::debug!("MPI_Finalize with {n} requests not completed or freed");
    }
}

/// `MPI_Wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
    guard_on(|ec| {
        if request.is_null() {
            return Err(err(MPI_ERR_REQUEST, "request is a null pointer"));
        }
        // SAFETY: non-null C pointer; the caller's status pointer.
        unsafe { wait_on(&mut *request, status, ec) }
    })
}

/// [`MPI_Wait`]'s work: completes `*h` and writes `status`; `ec` becomes the request's
/// communicator (whose error handler applies).
///
/// # Safety
/// `status` null or writable.
unsafe fn wait_on(h: &mut MPI_Request, status: *mut MPI_Status, ec: &mut MPI_Comm) -> R {
    let o = match take_op(*h)? {
        Taken::Inactive => Outcome::Inactive,
        Taken::Op(comm, op) => {
            *ec = comm;
            finish_taken(h, op, true)
        }
    };
    // SAFETY: caller's pointer.
    unsafe { report(&o, status, false) }
}

/// [`MPI_Wait`] inside another exported call (`MPI_Sendrecv`'s two waits): the error is
/// returned, not raised, so that the calling function raises it once, with its message.
///
/// # Safety
/// `status` null or writable.
pub unsafe fn wait_quiet(h: &mut MPI_Request, status: *mut MPI_Status) -> R {
    let mut ec = MPI_COMM_WORLD;
    // SAFETY: the caller's contract.
    unsafe { wait_on(h, status, &mut ec) }
}

/// `MPI_Test`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Test(
    request: *mut MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard_on(|ec| {
        if request.is_null() || flag.is_null() {
            return Err(err(MPI_ERR_ARG, "request or flag is a null pointer"));
        }
        // SAFETY: non-null C pointers.
        let (h, flag) = unsafe { (&mut *request, &mut *flag) };
        let o = match take_op(*h)? {
            Taken::Inactive => Outcome::Inactive,
            Taken::Op(comm, op) => {
                *ec = comm;
                finish_taken(h, op, false)
            }
        };
        *flag = !matches!(o, Outcome::Pending) as c_int;
        if matches!(o, Outcome::Pending) {
            return Ok(());
        }
        // SAFETY: caller's pointer.
        unsafe { report(&o, status, false) }
    })
}

/// Slices of the C arrays of a wait/test-all/any/some call.
///
/// # Safety
/// `reqs` valid for `n` requests; `statuses` null or valid for `n` statuses.
unsafe fn arrays<'a>(n: c_int, reqs: *mut MPI_Request) -> R<&'a mut [MPI_Request]> {
    // A request's operation cannot complete once the runtime is gone (a wait would
    // never return).
    crate::env::check_live()?;
    if n < 0 {
        return Err(err(MPI_ERR_COUNT, format!("count {n} is negative")));
    }
    if n == 0 {
        return Ok(&mut []);
    }
    if reqs.is_null() {
        return Err(err(MPI_ERR_REQUEST, "array of requests is a null pointer"));
    }
    // SAFETY: caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(reqs, n as usize) })
}

/// Status `i` of an array (null = `MPI_STATUSES_IGNORE`).
fn status_at(statuses: *mut MPI_Status, i: usize) -> *mut MPI_Status {
    if statuses.is_null() {
        statuses
    } else {
        // SAFETY: the array has an entry per request.
        unsafe { statuses.add(i) }
    }
}

/// `MPI_Waitall`'s working vectors: (index in the array, operation taken out),
/// (index, outcome), the point-to-point outcomes, and the indices and raw requests of
/// the plain point-to-point operations ([`Body::Raw`]: the common case, completed
/// without building a request or a [`Done`]).
type WaitallScratch = (
    Vec<(usize, Started)>,
    Vec<(usize, Done)>,
    Vec<rankwire::Result<rankwire::Status>>,
    Vec<usize>,
    Vec<rankwire::RawRequest>,
);

thread_local! {
    /// The vectors of the thread's last `MPI_Waitall`, kept (empty) so that the next one
    /// does not allocate.
    static WAITALL_SCRATCH: std::cell::Cell<WaitallScratch> =
        const {
            std::cell::Cell::new((Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new()))
        };
}

/// `MPI_Waitall`: completes every request; on any failure returns
/// `MPI_ERR_IN_STATUS` with each status's `MPI_ERROR` set (MPI 4.1 §3.7.5).
///
/// The operations are taken out of the table under one lock, the runtime progresses
/// until every point-to-point operation among them is complete
/// ([`rankwire::wait_complete`]: pending sends offered to help their receivers, a
/// window of arrivals per progress round), the operations are completed one by one,
/// and the requests are retired under one lock again. Errors go to the handler of the
/// first request's communicator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    reqs: *mut MPI_Request,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's arrays.
    guard_on(|ec| unsafe { waitall_impl(ec, count, reqs, statuses) })
}

/// The body of [`MPI_Waitall`] (also [`MPI_Testall`]'s, once every request is done):
/// `*ec` becomes the communicator of the first request.
///
/// # Safety
/// As `MPI_Waitall`'s arguments.
unsafe fn waitall_impl(
    ec: &mut MPI_Comm,
    count: c_int,
    reqs: *mut MPI_Request,
    statuses: *mut MPI_Status,
) -> R {
    // SAFETY: C arrays of `count` entries.
    let arr = unsafe { arrays(count, reqs)? };
    // The failure of the lowest index (the operations complete in another order).
    let mut failed: Option<(usize, MpiErr)> = None;
    // Every index that failed (their MPI_ERROR written; the others get MPI_SUCCESS when
    // the call returns MPI_ERR_IN_STATUS).
    let mut failed_at: Vec<usize> = Vec::new();
    // Vectors reused from the thread's previous MPI_Waitall (a nested call, from a
    // callback the runtime runs meanwhile, finds them taken and allocates its own).
    let mut scratch = WAITALL_SCRATCH.with(|c| c.take());
    let mut ops = std::mem::take(&mut scratch.0);
    let mut raw_at = std::mem::take(&mut scratch.3);
    let mut raws = std::mem::take(&mut scratch.4);
    // Requests on another communicator than the first one's (index, communicator): a
    // failure is raised on the failing request's communicator (its error handler).
    let mut other_comms: Vec<(usize, MPI_Comm)> = Vec::new();
    {
        // Locked at the first request with a slot (fast handles need no lock).
        let mut table_lock = None;
        // The first request's communicator becomes `*ec`; others are noted by index.
        let mut comm_set = false;
        let mut note_comm = |i: usize, c: MPI_Comm| {
            if !comm_set {
                *ec = c;
                comm_set = true;
            } else if c != *ec {
                other_comms.push((i, c));
            }
        };
        for (i, hp) in arr.iter_mut().enumerate() {
            let h = *hp;
            // SAFETY (both writes below): the status array has `count` entries (or
            // is ignored).
            let empty = || unsafe {
                write_status(
                    status_at(statuses, i),
                    &inactive_status(),
                    false,
                    MPI_SUCCESS,
                )
            };
            if h == MPI_REQUEST_NULL {
                empty();
                continue;
            }
            if let Some(f) = fast(h) {
                note_comm(i, f.comm());
                match f {
                    Fast::Done(_) => {
                        retire_fast(hp);
                        // SAFETY: the status array has `count` entries (or is ignored).
                        unsafe {
                            write_status(
                                status_at(statuses, i),
                                &send_done_status(),
                                false,
                                MPI_SUCCESS,
                            )
                        };
                    }
                    // A request the runtime no longer holds completes with an error.
                    Fast::Raw(_, raw) => {
                        raw_at.push(i);
                        raws.push(raw);
                    }
                }
                continue;
            }
            let t = table_lock.get_or_insert_with(table);
            let s = match slot_mut(t, h) {
                Ok(s) if s.busy => Err(busy_error(h)),
                other => other,
            };
            match s {
                Ok(s) => {
                    note_comm(i, s.comm);
                    match std::mem::replace(&mut s.op, Body::None) {
                        // Done when it was posted (an eager send) with nothing to run at
                        // completion: completed and retired here, under this lock.
                        Body::Ready(st) => {
                            retire(t, hp);
                            // SAFETY: the status array has `count` entries (or is
                            // ignored).
                            unsafe {
                                write_status(status_at(statuses, i), &st, false, MPI_SUCCESS)
                            };
                        }
                        Body::Raw(raw) => {
                            s.busy = true;
                            s.cancel_id = Some(raw.cancel_id());
                            raw_at.push(i);
                            raws.push(raw);
                        }
                        Body::None => empty(),
                        Body::Full(op) => {
                            s.busy = true;
                            s.cancel_id = cancel_id_of(&op);
                            ops.push((i, *op));
                        }
                    }
                }
                Err(e) => {
                    // SAFETY: the status array has `count` entries (or is ignored).
                    unsafe {
                        write_status(status_at(statuses, i), &inactive_status(), false, e.class)
                    };
                    first_failure(&mut failed, &mut failed_at, i, e);
                }
            }
        }
    }
    let mut dones = std::mem::take(&mut scratch.1);
    let mut outcomes = std::mem::take(&mut scratch.2);
    if ops.is_empty() {
        // The common case: every request a plain point-to-point one. Progress until
        // all are complete (pending sends first offered to help their receivers copy,
        // a window of arrivals per round, the runtime locked once), their outcomes
        // taken under the same lock (rankwire's wait_all_raw), then each retired and
        // its status written under one lock of the table.
        if !raws.is_empty() {
            match crate::env::world() {
                // SAFETY: each raw request came out of its slot (marked busy) once.
                Ok(w) => unsafe { w.wait_all_raw(&raws, &mut outcomes) },
                Err(e) => {
                    outcomes.clear();
                    outcomes.extend(raws.iter().map(|_| Err(outlived_runtime(&e))));
                }
            }
            let mut table_lock = None;
            for (&i, r) in raw_at.iter().zip(outcomes.drain(..)) {
                if matches!(
                    r,
                    Err(rankwire::Error::Matching(
                        rankwire::MatchError::UnknownRequest { .. }
                    ))
                ) {
                    // A handle that names no request is left as it is (as one that is
                    // not a request at all).
                } else if !retire_fast(&mut arr[i]) {
                    retire(table_lock.get_or_insert_with(table), &mut arr[i]);
                }
                let (st, cancelled, err) = match r {
                    Ok(st) => (st, false, None),
                    Err(e) => {
                        let (st, err) = failure(e);
                        (st, err.is_none(), err)
                    }
                };
                let code = err.as_ref().map_or(MPI_SUCCESS, |e| e.class);
                // SAFETY: the status array has `count` entries (or is ignored).
                unsafe { write_status(status_at(statuses, i), &st, cancelled, code) };
                if let Some(e) = err {
                    first_failure(&mut failed, &mut failed_at, i, e);
                }
            }
        }
    } else {
        // Other operations too: the plain ones go the general way (as requests).
        ops.extend(
            raw_at
                .iter()
                .zip(raws.iter())
                .map(|(&i, &raw)| (i, Started::plain(raw_active(raw)))),
        );
        if ops
            .iter()
            .any(|(_, s)| matches!(s.active, Active::Multi(_)))
        {
            // Progress until every point-to-point operation is complete
            // (rankwire::wait_complete), then each is completed (at once).
            rankwire::wait_complete(ops.iter().flat_map(|(_, s)| match &s.active {
                Active::P2p(r) => std::slice::from_ref(r),
                Active::Multi(rs) => rs.as_slice(),
                _ => &[],
            }));
            dones.extend(ops.drain(..).map(|(i, op)| (i, wait_started(op))));
        } else {
            // The point-to-point outcomes taken under the same lock of the runtime as
            // the wait (rankwire::wait_all_in_place), in order, then the others'.
            rankwire::wait_all_in_place(
                ops.iter_mut().filter_map(|(_, s)| match &mut s.active {
                    Active::P2p(r) => Some(r),
                    _ => None,
                }),
                &mut outcomes,
            );
            let mut taken = outcomes.drain(..);
            dones.extend(ops.drain(..).map(|(i, op)| {
                // One outcome per point-to-point operation, in order.
                let d = if matches!(op.active, Active::P2p(_))
                    && let Some(r) = taken.next()
                {
                    finish_started(op, r)
                } else {
                    wait_started(op)
                };
                (i, d)
            }));
        }
    }
    raw_at.clear();
    raws.clear();
    scratch.2 = outcomes;
    scratch.3 = raw_at;
    scratch.4 = raws;
    if !dones.is_empty() {
        let mut t = table();
        for (i, d) in dones.iter() {
            // A fast handle that names no request is left as it is (see above).
            if fast(arr[*i]).is_some() && matches!(&d.result, Err(e) if e.class == MPI_ERR_REQUEST)
            {
                continue;
            }
            retire(&mut t, &mut arr[*i]);
        }
    }
    for (i, d) in dones.drain(..) {
        // SAFETY: the status array has `count` entries (or is ignored).
        if let Err(e) = unsafe { report(&Outcome::Completed(d), status_at(statuses, i), true) } {
            first_failure(&mut failed, &mut failed_at, i, e);
        }
    }
    scratch.0 = ops;
    scratch.1 = dones;
    WAITALL_SCRATCH.with(|c| c.set(scratch));
    if let Some((i, _)) = &failed
        && let Some(&(_, c)) = other_comms.iter().find(|(j, _)| j == i)
    {
        *ec = c;
    }
    match failed {
        Some((_, e)) if !statuses.is_null() => {
            // SAFETY: the status array has `count` entries.
            unsafe { set_status_errors(statuses, arr.len(), &failed_at) };
            Err(err(MPI_ERR_IN_STATUS, e.msg))
        }
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Keeps in `failed` the error of the lowest request index seen so far, and `i` in
/// `at`.
fn first_failure(failed: &mut Option<(usize, MpiErr)>, at: &mut Vec<usize>, i: usize, e: MpiErr) {
    at.push(i);
    if failed.as_ref().is_none_or(|(j, _)| i < *j) {
        *failed = Some((i, e));
    }
}

/// `MPI_Testall`: `*flag` = 1 and every request completed when all are done;
/// otherwise `*flag` = 0 and none is completed (MPI 4.1 §3.7.5), and a handle that is
/// not a request is `MPI_ERR_REQUEST` at once (when all others are done, it is reported
/// in its status with `MPI_ERR_IN_STATUS`, as by `MPI_Waitall`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    reqs: *mut MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    guard_on(|ec| {
        // SAFETY: C arrays of `count` entries.
        let arr = unsafe { arrays(count, reqs)? };
        if flag.is_null() {
            return Err(err(MPI_ERR_ARG, "flag is a null pointer"));
        }
        // One look at the table: a handle that is no request, and the communicator of
        // the first request (whose handler reports errors, as for MPI_Waitall).
        let (bad, first) = {
            // Per index, the request's communicator or why it is none: table handles
            // under the table's lock, then fast ones without it (raw_known locks the
            // runtime, which is never taken inside the table's lock).
            let mut found: Vec<(usize, R<MPI_Comm>)> = Vec::new();
            {
                let mut t = None;
                for (i, &h) in arr.iter().enumerate() {
                    if h != MPI_REQUEST_NULL && fast(h).is_none() {
                        let t = t.get_or_insert_with(table);
                        found.push((i, slot_mut(t, h).map(|s| s.comm)));
                    }
                }
            }
            for (i, &h) in arr.iter().enumerate() {
                if let Some(f) = fast(h) {
                    let known = match f {
                        Fast::Raw(_, raw) => crate::env::world().is_ok_and(|w| w.raw_known(raw)),
                        Fast::Done(_) => true,
                    };
                    found.push((
                        i,
                        if known {
                            Ok(f.comm())
                        } else {
                            Err(bad_request(h))
                        },
                    ));
                }
            }
            found.sort_unstable_by_key(|(i, _)| *i);
            let first = found.iter().find_map(|(_, r)| r.as_ref().ok().copied());
            (found.into_iter().find_map(|(_, r)| r.err()), first)
        };
        let all = arr.iter().all(|&h| is_done(h));
        // SAFETY: checked non-null.
        unsafe { *flag = all as c_int };
        if !all {
            // A handle that is no request is reported now, not once the others
            // complete (which may be never): the call fails and completes nothing.
            if let Some(e) = bad {
                if let Some(c) = first {
                    *ec = c;
                }
                return Err(e);
            }
            rankwire_progress_hint();
            return Ok(());
        }
        // SAFETY: as MPI_Waitall. Its errors go to the first request's communicator.
        unsafe { waitall_impl(ec, count, reqs, statuses) }
    })
}

/// Whether request `h` would complete without blocking (null and inactive: yes).
fn is_done(h: MPI_Request) -> bool {
    let op = match take_op(h) {
        Ok(Taken::Op(_, op)) => op,
        Ok(Taken::Inactive) => return true,
        // Another thread is completing, testing or starting it: not done for this one.
        Err(_) if slot_mut(&mut table(), h).is_ok_and(|s| s.busy) => return false,
        // Bad handles are reported as errors when completed.
        Err(_) => return true,
    };
    let d = match &op.active {
        Active::P2p(r) => r.is_complete(),
        Active::Coll(c) => c.is_complete(),
        Active::Ready(_) | Active::Finished(_) => true,
        Active::Multi(v) => v.iter().all(|r| r.is_complete()),
        Active::Greq(g) => g.is_done(),
    };
    put_back(h, op);
    d
}

fn rankwire_progress_hint() {
    std::thread::yield_now();
}

/// Index of a completed request among `arr` (active ones only), waiting when `block`.
fn any_index(arr: &[MPI_Request], block: bool) -> Option<usize> {
    loop {
        let mut active = false;
        for (i, &h) in arr.iter().enumerate() {
            if h == MPI_REQUEST_NULL || !is_active(h) {
                continue;
            }
            active = true;
            if is_done(h) {
                return Some(i);
            }
        }
        if !active || !block {
            return None;
        }
        rankwire_progress_hint();
    }
}

fn is_active(h: MPI_Request) -> bool {
    if fast(h).is_some() {
        return true;
    }
    let mut t = table();
    slot_mut(&mut t, h)
        .map(|s| s.op.is_some() || s.busy)
        .unwrap_or(true)
}

/// `MPI_Waitany`: completes one active request; `*index` = `MPI_UNDEFINED` when none
/// is active.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY: C arrays.
    unsafe { any_impl(count, reqs, index, ptr_flag_none(), status, true) }
}

/// `MPI_Testany`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    if flag.is_null() {
        return guard(MPI_COMM_WORLD, || {
            Err(err(MPI_ERR_ARG, "flag is a null pointer"))
        });
    }
    // SAFETY: C arrays.
    unsafe { any_impl(count, reqs, index, flag, status, false) }
}

fn ptr_flag_none() -> *mut c_int {
    std::ptr::null_mut()
}

unsafe fn any_impl(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
    block: bool,
) -> c_int {
    guard_on(|ec| {
        // SAFETY: C arrays.
        let arr = unsafe { arrays(count, reqs)? };
        if index.is_null() {
            return Err(err(MPI_ERR_ARG, "index is a null pointer"));
        }
        let any_active = arr.iter().any(|&h| h != MPI_REQUEST_NULL && is_active(h));
        match any_index(arr, block) {
            Some(i) => {
                // SAFETY: checked pointers.
                unsafe {
                    *index = i as c_int;
                    if !flag.is_null() {
                        *flag = 1;
                    }
                }
                // Errors go to the handler of the completed request's communicator.
                let o = complete(&mut arr[i], true, ec)?;
                // SAFETY: caller's pointer.
                unsafe { report(&o, status, false) }
            }
            None => {
                // SAFETY: checked pointers.
                unsafe {
                    *index = MPI_UNDEFINED;
                    if !flag.is_null() {
                        *flag = (!any_active) as c_int;
                    }
                    if !any_active {
                        write_status(status, &inactive_status(), false, MPI_SUCCESS);
                    }
                }
                Ok(())
            }
        }
    })
}

/// `MPI_Waitsome`: waits until at least one active request completes, then completes
/// every one that is done; `*outcount` = `MPI_UNDEFINED` when none is active.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Waitsome(
    n: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: C arrays.
    unsafe { some_impl(n, reqs, outcount, indices, statuses, true) }
}

/// `MPI_Testsome`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Testsome(
    n: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: C arrays.
    unsafe { some_impl(n, reqs, outcount, indices, statuses, false) }
}

unsafe fn some_impl(
    n: c_int,
    reqs: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
    block: bool,
) -> c_int {
    guard_on(|ec| {
        // SAFETY: C arrays.
        let arr = unsafe { arrays(n, reqs)? };
        if outcount.is_null() || (n > 0 && indices.is_null()) {
            return Err(err(MPI_ERR_ARG, "outcount or indices is a null pointer"));
        }
        if !arr.iter().any(|&h| h != MPI_REQUEST_NULL && is_active(h)) {
            // SAFETY: checked.
            unsafe { *outcount = MPI_UNDEFINED };
            return Ok(());
        }
        if block {
            any_index(arr, true);
        }
        let mut k = 0usize;
        let mut failed = None;
        let mut failed_at: Vec<usize> = Vec::new();
        // Errors go to the handler of the first failed request's communicator.
        let mut failed_comm = None;
        for (i, h) in arr.iter_mut().enumerate() {
            if *h == MPI_REQUEST_NULL || !is_active(*h) || !is_done(*h) {
                continue;
            }
            let mut comm = *ec;
            // A handle that is not a request is reported in its slot of the output
            // (MPI_ERR_IN_STATUS), after the requests completed before it.
            let r = complete(h, true, &mut comm).and_then(|o| {
                // SAFETY: the status array has n entries (or is ignored).
                unsafe { report(&o, status_at(statuses, k), true) }
            });
            // SAFETY: arrays of n entries; k <= i.
            unsafe { *indices.add(k) = i as c_int };
            if let Err(e) = r {
                // SAFETY: as above.
                unsafe {
                    if !statuses.is_null() {
                        (*status_at(statuses, k)).MPI_ERROR = e.class;
                    }
                }
                failed_at.push(k);
                failed.get_or_insert(e);
                failed_comm.get_or_insert(comm);
            }
            k += 1;
        }
        // SAFETY: checked.
        unsafe { *outcount = k as c_int };
        if let Some(c) = failed_comm {
            *ec = c;
        }
        match failed {
            Some(e) if !statuses.is_null() => {
                // SAFETY: the status array has n entries, k of them written.
                unsafe { set_status_errors(statuses, k, &failed_at) };
                Err(err(MPI_ERR_IN_STATUS, e.msg))
            }
            Some(e) => Err(e),
            None => Ok(()),
        }
    })
}

/// `MPI_Request_free`: an active request completes in the background (its resources
/// are released once it does; a receive's data still arrives); the handle becomes
/// `MPI_REQUEST_NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Request_free(request: *mut MPI_Request) -> c_int {
    guard_on(|ec| {
        if request.is_null() {
            return Err(err(MPI_ERR_REQUEST, "request is a null pointer"));
        }
        // SAFETY: non-null C pointer.
        let h = unsafe { &mut *request };
        if let Some(f) = fast(*h) {
            // A handle that names no request reports on MPI_COMM_WORLD (as MPI_Wait).
            let op = fast_started(*h, f)?;
            *ec = f.comm();
            retire_fast(h);
            if !matches!(op.active, Active::Ready(_)) {
                DETACHED.lock().unwrap_or_else(|e| e.into_inner()).push(op);
            }
            reap_detached();
            return Ok(());
        }
        let (op, release) = {
            let mut t = table();
            let s = slot_mut(&mut t, *h)?;
            *ec = s.comm;
            if s.busy {
                return Err(busy_error(*h));
            }
            match (s.op.is_some(), &s.greq) {
                // An active generalized request not yet completed: kept for
                // MPI_Grequest_complete (MPI 4.1 §13.2), which then frees it.
                (true, Some(g)) if !g.is_done() => {
                    s.freed = true;
                    *h = MPI_REQUEST_NULL;
                    return Ok(());
                }
                _ => {}
            }
            let k = key_of(*h).expect("a live slot has a key");
            let mut slot = t.remove(k);
            match (slot.op.take(), slot.greq) {
                // Completed but not waited for: only free_fn is left to run.
                (Some(_), Some(g)) => (None, Some(g)),
                (op, _) => (op, None),
            }
        };
        *h = MPI_REQUEST_NULL;
        if let Some(op) = op {
            DETACHED.lock().unwrap_or_else(|e| e.into_inner()).push(op);
        }
        reap_detached();
        match release {
            Some(g) => g.release(),
            None => Ok(()),
        }
    })
}

/// Operations whose requests were freed while active: tested at later calls and
/// completed at finalize.
static DETACHED: Mutex<Vec<Started>> = Mutex::new(Vec::new());

/// Completes freed operations that are done.
pub fn reap_detached() {
    let mut g = DETACHED.lock().unwrap_or_else(|e| e.into_inner());
    let ops = std::mem::take(&mut *g);
    for op in ops {
        if let Err(op) = test_started(op) {
            g.push(op);
        }
    }
}

/// Waits for every freed operation (at `MPI_Finalize`).
///
/// A freed receive that has not matched is withdrawn (MPI 4.1 §11.2: the program must
/// have completed its communication; no message will come for it). Any other freed
/// operation gets [`DRAIN_LIMIT`] to finish; one still pending then (a freed send no
/// rank receives) is left behind with a warning, so that `MPI_Finalize` returns.
pub fn drain_detached() {
    let ops = std::mem::take(&mut *DETACHED.lock().unwrap_or_else(|e| e.into_inner()));
    let deadline = std::time::Instant::now() + DRAIN_LIMIT;
    for mut op in ops {
        // Receives only (Request::cancel withdraws no send): a freed send's receiver
        // may still be about to receive it.
        if let Active::P2p(r) = &mut op.active
            && r.cancel()
        {
            continue;
        }
        loop {
            match test_started(op) {
                Ok(_) => break,
                Err(o) if std::time::Instant::now() >= deadline => {
                    tracing::warn!(
                        "MPI_Finalize: an operation whose request was freed (MPI_Request_free) is still pending after {} s; it is abandoned (fix: complete or match every send before MPI_Finalize)",
                        DRAIN_LIMIT.as_secs()
                    );
                    std::mem::forget(o);
                    break;
                }
                Err(o) => {
                    op = o;
                    rankwire_progress_hint();
                }
            }
        }
    }
}

/// How long `MPI_Finalize` waits for operations whose requests were freed.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// `MPI_Cancel`: withdraws a receive that has not matched, also while another thread
/// waits for or tests its request (that call then returns with a cancelled status); asks
/// the receiver of a rendezvous send (above the eager limit, or synchronous) that has
/// not matched to withdraw it (its wait then returns cancelled once that rank's runtime
/// has answered, at its next MPI call; no receive is needed there;
/// `rankwire::Communicator::cancel_pending`), also one another thread waits for. An
/// eager send or a matched operation completes normally (its status then says "not
/// cancelled").
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cancel(request: *mut MPI_Request) -> c_int {
    guard_on(|ec| {
        if request.is_null() {
            return Err(err(MPI_ERR_REQUEST, "request is a null pointer"));
        }
        // SAFETY: non-null C pointer.
        let h = unsafe { *request };
        if let Some(f) = fast(h) {
            if let Fast::Raw(_, raw) = f {
                // As below; also while another thread waits for it. A handle that
                // names no request reports on MPI_COMM_WORLD (as MPI_Wait).
                let w = crate::env::world()?;
                if !w.raw_known(raw) {
                    return Err(bad_request(h));
                }
                *ec = f.comm();
                w.cancel_pending(raw.cancel_id());
            } else {
                *ec = f.comm();
            }
            return Ok(());
        }
        // One look under the table's lock, nothing taken out: another thread may be
        // waiting for, testing or starting this request meanwhile.
        let (greq, target) = {
            let mut t = table();
            let s = slot_mut(&mut t, h)?;
            *ec = s.comm;
            let greq = if s.op.is_some() || s.busy {
                s.greq.clone()
            } else {
                None
            };
            let target = if s.busy {
                s.cancel_id
            } else {
                s.op.cancel_id()
            };
            (greq, target)
        };
        if let Some(q) = greq {
            return cancel_greq(&q);
        }
        if let Some(id) = target {
            // A receive that has not matched is withdrawn, a rendezvous send that has
            // not matched is withdrawn by its receiver; the wait or test that completes
            // the request then reports a cancelled status (finish_started). Every
            // communicator shares the process's runtime: world's serves when the
            // request's communicator was freed meanwhile.
            crate::comm::lookup(*ec)
                .or_else(|_| crate::comm::lookup(MPI_COMM_WORLD))?
                .cancel_pending(id);
        }
        Ok(())
    })
}

/// `MPI_Test_cancelled`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Test_cancelled(status: *const MPI_Status, flag: *mut c_int) -> c_int {
    guard(MPI_COMM_WORLD, || {
        if status.is_null() || flag.is_null() {
            return Err(err(MPI_ERR_ARG, "status or flag is a null pointer"));
        }
        // SAFETY: non-null C pointers.
        unsafe { *flag = ((*status).MPI_internal[2] != 0) as c_int };
        Ok(())
    })
}

/// `MPI_Start`: starts an inactive persistent request.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Start(request: *mut MPI_Request) -> c_int {
    if request.is_null() {
        return guard(MPI_COMM_WORLD, || {
            Err(err(MPI_ERR_REQUEST, "request is a null pointer"))
        });
    }
    // SAFETY: non-null.
    let h = unsafe { *request };
    guard_on(|ec| start(h, ec))
}

fn not_persistent(h: MPI_Request) -> MpiErr {
    err(
        MPI_ERR_REQUEST,
        format!(
            "MPI_Start on request {h:#x}, which is not persistent; fix: create it with MPI_Send_init/MPI_Recv_init/..._init"
        ),
    )
}

/// Starts persistent request `h`; `*ec` becomes its communicator (error handler).
fn start(h: MPI_Request, ec: &mut MPI_Comm) -> R {
    if let Some(f) = fast(h) {
        *ec = f.comm();
        return Err(not_persistent(h));
    }
    let f = {
        let mut t = table();
        let s = slot_mut(&mut t, h)?;
        *ec = s.comm;
        if s.op.is_some() || s.busy {
            return Err(err(
                MPI_ERR_REQUEST,
                format!(
                    "MPI_Start on request {h:#x}, which is still active; fix: complete it (MPI_Wait/MPI_Test) before starting it again"
                ),
            ));
        }
        let Some(f) = s.start.clone() else {
            return Err(not_persistent(h));
        };
        s.busy = true;
        f
    };
    // Posting runs without the table's lock (it may create requests of its own), and
    // may use a communicator freed since the request was created.
    let r = crate::comm::with_freed_visible(|| f());
    let mut t = table();
    if let Ok(s) = slot_mut(&mut t, h) {
        s.busy = false;
        if let Ok(op) = r {
            s.op = Body::of(op);
            return Ok(());
        }
    }
    r.map(|_| ())
}

/// `MPI_Startall`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Startall(count: c_int, reqs: *mut MPI_Request) -> c_int {
    // Errors go to the handler of the failing request's communicator (as MPI_Start).
    guard_on(|ec| {
        // SAFETY: C array.
        let arr = unsafe { arrays(count, reqs)? };
        for &h in arr.iter() {
            start(h, ec)?;
        }
        Ok(())
    })
}

/// `MPI_Request_get_status`: like `MPI_Test` but leaves the request as it is. A failed
/// operation (a truncated receive) returns its error now, with its status filled, and
/// again from the wait or test that completes it; the `_all` and `_some` forms return
/// `MPI_ERR_IN_STATUS` with each status's `MPI_ERROR` set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Request_get_status(
    request: MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard_on(|ec| {
        if flag.is_null() {
            return Err(err(MPI_ERR_ARG, "flag is a null pointer"));
        }
        let p = peek(request)?;
        // SAFETY: checked.
        unsafe { *flag = p.is_some() as c_int };
        if let Some(p) = p {
            // SAFETY: caller's pointer.
            unsafe { write_status(status, &p.st, p.cancelled, MPI_SUCCESS) };
            // A failed operation's error is returned now too (as by MPICH), and again
            // by the wait or test that completes it.
            if let Some((comm, e)) = p.error {
                *ec = comm;
                return Err(e);
            }
        }
        Ok(())
    })
}

/// The status of `h` without freeing it (`MPI_Request_get_status`): `None` while it
/// is pending; the empty status (MPI 4.1 §3.7.3) for `MPI_REQUEST_NULL` or an inactive
/// persistent request. A finished operation is completed inside the request (its
/// status, or its error for the later wait/test, is kept there), so the status is the
/// real one (source, tag, count) and the later wait or test returns the same.
///
/// # Errors
/// `MPI_ERR_REQUEST` for a freed or unknown handle.
fn peek(h: MPI_Request) -> R<Option<Peeked>> {
    let empty = || Peeked {
        st: inactive_status(),
        cancelled: false,
        error: None,
    };
    if h == MPI_REQUEST_NULL {
        return Ok(Some(empty()));
    }
    // A plain point-to-point operation is looked at in place, by its id, also while
    // another thread waits for it: its outcome stays in the runtime for the call that
    // completes the request (taking the operation out would make that call fail as
    // "being completed by another thread": trial of 2026-12-07).
    let in_place = if let Some(f) = fast(h) {
        match f {
            Fast::Done(comm) => return Ok(Some(peeked(comm, Ok(send_done_status())))),
            Fast::Raw(comm, raw) => {
                crate::env::check_live()?;
                if !crate::env::world()?.raw_known(raw) {
                    return Err(bad_request(h));
                }
                Some((comm, raw.cancel_id()))
            }
        }
    } else {
        let mut t = table();
        let s = slot_mut(&mut t, h)?;
        match (&s.op, s.busy, s.cancel_id) {
            (Body::Ready(st), false, _) => return Ok(Some(peeked(s.comm, Ok(*st)))),
            (Body::Raw(raw), false, _) => Some((s.comm, raw.cancel_id())),
            (_, true, Some(id)) => Some((s.comm, id)),
            (_, true, None) => return Ok(None),
            _ => None,
        }
    };
    if let Some((comm, id)) = in_place {
        crate::env::check_live()?;
        // A communicator freed while the request lives is still its request's.
        let c = crate::comm::with_freed_visible(|| crate::comm::lookup(comm))
            .or_else(|_| crate::comm::lookup(MPI_COMM_WORLD))?;
        return Ok(c.peek_pending(id).map(|r| peeked(comm, r)));
    }
    let (comm, mut op) = match take_op(h)? {
        Taken::Inactive => return Ok(Some(empty())),
        Taken::Op(comm, op) => (comm, op),
    };
    let r = peek_op(&mut op);
    put_back(h, op);
    Ok(r?.map(|(st, cancelled, error)| Peeked {
        st,
        cancelled,
        error: error.map(|e| (comm, e)),
    }))
}

/// [`Peeked`] of a point-to-point outcome `r` of a request on `comm`.
fn peeked(comm: MPI_Comm, r: rankwire::Result<rankwire::Status>) -> Peeked {
    match r {
        Ok(st) => Peeked {
            st,
            cancelled: false,
            error: None,
        },
        Err(e) => {
            let (st, err) = failure(e);
            Peeked {
                st,
                cancelled: err.is_none(),
                error: err.map(|e| (comm, e)),
            }
        }
    }
}

/// What [`peek`] saw of a finished operation: its status, whether it was cancelled,
/// and its error with the communicator whose handler reports it (the later wait or
/// test returns the same error).
struct Peeked {
    st: rankwire::Status,
    cancelled: bool,
    error: Option<(MPI_Comm, MpiErr)>,
}

/// [`peek`] of an operation taken out of its slot: its status and whether it was
/// cancelled, once it is finished.
fn peek_op(s: &mut Started) -> R<Option<(rankwire::Status, bool, Option<MpiErr>)>> {
    let active = std::mem::replace(&mut s.active, Active::Ready(empty_status()));
    // query_fn runs once, at the completing wait or test; until then a generalized
    // request's status is the empty one (MPI 4.1 §13.2 lets MPI_Request_get_status call
    // query_fn; rankwire does not, so free_fn never precedes it).
    if let Active::Greq(g) = &active {
        let d = g.is_done();
        s.active = active;
        return Ok(d.then(|| (empty_status(), false, None)));
    }
    let r = match poll(active) {
        Ok(r) => r,
        Err(a) => {
            s.active = a;
            return Ok(None);
        }
    };
    match r {
        Ok(st) => {
            s.active = Active::Ready(st);
            Ok(Some((st, false, None)))
        }
        Err(e) => {
            // Kept for the wait or test that completes the request, which reports it as
            // finish_started does (a cancelled status; a truncation with what arrived
            // unpacked).
            let (st, err) = failure(e.clone());
            s.active = Active::Finished(Err(e));
            Ok(Some((st, err.is_none(), err)))
        }
    }
}

/// `MPI_Request_get_status_all` (MPI 4.1 §3.7.5): `*flag` true when every request is
/// complete (null and inactive ones count as complete), then every status is written;
/// the requests stay allocated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Request_get_status_all(
    count: c_int,
    reqs: *const MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    guard_on(|ec| {
        // SAFETY: C array of count handles.
        let rs = unsafe { req_array(count, reqs)? };
        if flag.is_null() {
            return Err(err(MPI_ERR_ARG, "flag is a null pointer"));
        }
        let mut all = Vec::with_capacity(rs.len());
        for &h in rs {
            match peek(h)? {
                Some(st) => all.push(st),
                None => {
                    // SAFETY: checked.
                    unsafe { *flag = 0 };
                    return Ok(());
                }
            }
        }
        // SAFETY: checked.
        unsafe { *flag = 1 };
        if !statuses.is_null() {
            for (i, p) in all.iter().enumerate() {
                // SAFETY: the caller's array of count statuses.
                unsafe { write_status(statuses.add(i), &p.st, p.cancelled, MPI_SUCCESS) };
            }
        }
        some_failed(ec, &all, statuses)
    })
}

/// `MPI_Request_get_status_any`: the index of a complete active request (`*flag`
/// true), or `*flag` false; with no active request, `*flag` true, `*index =
/// MPI_UNDEFINED` and the empty status.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Request_get_status_any(
    count: c_int,
    reqs: *const MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    guard_on(|ec| {
        // SAFETY: C array of count handles.
        let rs = unsafe { req_array(count, reqs)? };
        if flag.is_null() || index.is_null() {
            return Err(err(MPI_ERR_ARG, "flag or index is a null pointer"));
        }
        let mut any_active = false;
        for (i, &h) in rs.iter().enumerate() {
            if h == MPI_REQUEST_NULL || !is_active(h) {
                continue;
            }
            any_active = true;
            if let Some(p) = peek(h)? {
                // SAFETY: checked pointers; caller's status.
                unsafe {
                    *flag = 1;
                    *index = i as c_int;
                    write_status(status, &p.st, p.cancelled, MPI_SUCCESS);
                }
                if let Some((comm, e)) = p.error {
                    *ec = comm;
                    return Err(e);
                }
                return Ok(());
            }
        }
        // SAFETY: checked pointers; caller's status.
        unsafe {
            *flag = (!any_active) as c_int;
            *index = MPI_UNDEFINED;
            if !any_active {
                write_status(status, &inactive_status(), false, MPI_SUCCESS);
            }
        }
        Ok(())
    })
}

/// `MPI_Request_get_status_some`: the indices and statuses of the complete active
/// requests; `*outcount = MPI_UNDEFINED` when none is active.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Request_get_status_some(
    incount: c_int,
    reqs: *const MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    guard_on(|ec| {
        // SAFETY: C array of incount handles.
        let rs = unsafe { req_array(incount, reqs)? };
        if outcount.is_null() || (indices.is_null() && !rs.is_empty()) {
            return Err(err(MPI_ERR_ARG, "outcount or indices is a null pointer"));
        }
        let mut any_active = false;
        let mut seen = Vec::new();
        for (i, &h) in rs.iter().enumerate() {
            if h == MPI_REQUEST_NULL || !is_active(h) {
                continue;
            }
            any_active = true;
            if let Some(p) = peek(h)? {
                let n = seen.len();
                // SAFETY: the caller's arrays of incount entries; n <= i.
                unsafe {
                    *indices.add(n) = i as c_int;
                    if !statuses.is_null() {
                        write_status(statuses.add(n), &p.st, p.cancelled, MPI_SUCCESS);
                    }
                }
                seen.push(p);
            }
        }
        // SAFETY: checked.
        unsafe {
            *outcount = if any_active {
                seen.len() as c_int
            } else {
                MPI_UNDEFINED
            }
        };
        some_failed(ec, &seen, statuses)
    })
}

/// The outcome of a `MPI_Request_get_status_all`/`_some` whose statuses (at
/// `statuses`, entry `i` for `seen[i]`) are written: `MPI_ERR_IN_STATUS` with each
/// status's `MPI_ERROR` set (`MPI_SUCCESS` on the good ones, MPI 4.1 §3.2.5) when an
/// operation failed, its communicator's handler reporting it; else success.
fn some_failed(ec: &mut MPI_Comm, seen: &[Peeked], statuses: *mut MPI_Status) -> R {
    let failed: Vec<usize> = (0..seen.len())
        .filter(|&i| seen[i].error.is_some())
        .collect();
    let Some(&first) = failed.first() else {
        return Ok(());
    };
    let (comm, e) = seen[first].error.clone().expect("a failed entry");
    *ec = comm;
    if statuses.is_null() {
        return Err(e);
    }
    for (i, p) in seen.iter().enumerate() {
        let code = p.error.as_ref().map_or(MPI_SUCCESS, |(_, e)| e.class);
        // SAFETY: the caller's array holds an entry for each of `seen`.
        unsafe { (*statuses.add(i)).MPI_ERROR = code };
    }
    Err(err(MPI_ERR_IN_STATUS, e.msg))
}

/// `count` request handles at `p`.
///
/// # Safety
/// `p` valid for `count` reads when `count > 0`.
unsafe fn req_array<'a>(count: c_int, p: *const MPI_Request) -> R<&'a [MPI_Request]> {
    if count < 0 {
        return Err(err(MPI_ERR_COUNT, format!("count {count} is negative")));
    }
    if count == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err(MPI_ERR_ARG, "array_of_requests is a null pointer"));
    }
    // SAFETY: caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, count as usize) })
}

/// Handle of the request table, for tests.
pub fn live_requests() -> usize {
    table().len()
}

#[allow(dead_code)]
fn _assert_send() {
    fn s<T: Send>() {}
    s::<Started>();
    let _ = Arc::new(0);
}

/// `MPI_Grequest_start` (MPI 4.1 §13.2): a new active request that completes when the
/// program calls [`MPI_Grequest_complete`]; at the completing wait or test
/// `query_fn` fills the status and `free_fn` releases `extra_state`; `MPI_Cancel`
/// calls `cancel_fn`. Null function pointers are allowed (nothing is called).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Grequest_start(
    query_fn: Option<GreqQueryFn>,
    free_fn: Option<GreqFreeFn>,
    cancel_fn: Option<GreqCancelFn>,
    extra_state: *mut std::ffi::c_void,
    request: *mut MPI_Request,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let g = Arc::new(Greq {
            done: std::sync::atomic::AtomicBool::new(false),
            query: query_fn,
            free: free_fn,
            cancel: cancel_fn,
            extra: extra_state as usize,
        });
        let h = insert(MPI_COMM_SELF, Started::plain(Active::Greq(g)));
        // SAFETY: C caller's pointer.
        unsafe { crate::error::put(request, h, "request") }
    })
}

/// `MPI_Grequest_complete`: marks a generalized request complete (any thread).
///
/// # Errors
/// `MPI_ERR_REQUEST` when `request` is not an active generalized request.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Grequest_complete(request: MPI_Request) -> c_int {
    guard(MPI_COMM_SELF, || {
        let g = greq_of(request).ok_or_else(|| {
            err(
                MPI_ERR_REQUEST,
                format!(
                    "{request:#x} is not an active generalized request (from MPI_Grequest_start)"
                ),
            )
        })?;
        g.done.store(true, std::sync::atomic::Ordering::Release);
        // Freed before this completion: nobody will wait for it; free_fn runs now and
        // the slot goes.
        let freed = {
            let mut t = table();
            match slot_mut(&mut t, request) {
                Ok(s) if s.freed && !s.busy => {
                    let k = key_of(request).expect("a live slot has a key");
                    t.remove(k);
                    true
                }
                _ => false,
            }
        };
        if freed { g.release() } else { Ok(()) }
    })
}

/// The generalized request behind `h`, also when it was freed while active.
fn greq_of(h: MPI_Request) -> Option<Arc<Greq>> {
    let mut t = table();
    let s = slot_mut(&mut t, h).ok()?;
    if s.op.is_some() || s.busy {
        s.greq.clone()
    } else {
        None
    }
}

/// `MPI_Cancel` of a generalized request: `cancel_fn(extra_state, complete)`; its error
/// code is returned.
pub(crate) fn cancel_greq(g: &Greq) -> R {
    let Some(f) = g.cancel else {
        return Ok(());
    };
    // SAFETY: the program's callback and state.
    let rc = unsafe { f(g.extra as *mut std::ffi::c_void, g.is_done() as c_int) };
    if rc != MPI_SUCCESS {
        return Err(err(
            crate::error::class_of(rc),
            "a generalized request's cancel_fn returned an error",
        ));
    }
    Ok(())
}
