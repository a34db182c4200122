//! `MPI_Comm`: the predefined `MPI_COMM_WORLD` / `MPI_COMM_SELF` and communicators
//! created by dup, split, create (MPI 4.1 chapter 7), on rankwire's [`Communicator`].

use crate::consts::*;
use crate::error::{MpiErr, R, err};
use crate::handles::{Kind, Table};
use rankwire::Communicator;

/// Created communicators.
pub static COMMS: Table<Communicator> = Table::new(Kind::Comm);

/// The communicator of handle `c`.
///
/// # Errors
/// `MPI_ERR_COMM` for `MPI_COMM_NULL`, a freed or unknown handle; `MPI_ERR_OTHER`
/// before `MPI_Init` / after `MPI_Finalize`.
#[inline]
pub fn lookup(c: MPI_Comm) -> R<CommRef> {
    match c {
        MPI_COMM_WORLD => crate::env::world().map(CommRef::Predefined),
        MPI_COMM_SELF => crate::env::self_comm().map(CommRef::Predefined),
        _ => lookup_created(c),
    }
}

/// [`lookup`] of a created communicator (a table lookup), or the error for a handle
/// that is none.
fn lookup_created(c: MPI_Comm) -> R<CommRef> {
    if let Some(x) = COMMS.get(c) {
        return Ok(CommRef::Created(x));
    }
    if FREED_VISIBLE.get()
        && let Some(x) = freed_pending(c)
    {
        return Ok(CommRef::Created(x));
    }
    Err(lookup_error(c))
}

/// [`lookup_created`]'s error (out of line).
#[cold]
fn lookup_error(c: MPI_Comm) -> MpiErr {
    {
        err(
            MPI_ERR_COMM,
            format!(
                "communicator {c:#x} is not a communicator (MPI_COMM_NULL, freed, or not a handle of this library); fix: pass MPI_COMM_WORLD, MPI_COMM_SELF or one from MPI_Comm_dup/split/create"
            ),
        )
    }
}

thread_local! {
    /// Set while `MPI_Start` posts a persistent request's operation: its communicator
    /// may have been freed since (the request keeps it, MPI 4.1 §7.4.3).
    static FREED_VISIBLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with communicators freed while requests on them were live still found by
/// [`lookup`] (for `MPI_Start` of a persistent request created on one).
pub fn with_freed_visible<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            FREED_VISIBLE.set(self.0);
        }
    }
    let _reset = Reset(FREED_VISIBLE.replace(true));
    f()
}

/// The communicator behind a handle, borrowed for a call: `MPI_COMM_WORLD` and
/// `MPI_COMM_SELF` without a lock or reference count, created ones by their table
/// entry. Dereferences to the [`Communicator`].
#[derive(Clone)]
pub enum CommRef {
    /// `MPI_COMM_WORLD` or `MPI_COMM_SELF`.
    Predefined(&'static Communicator),
    /// A communicator from `MPI_Comm_dup`/`split`/`create`/...
    Created(std::sync::Arc<Communicator>),
}

impl std::ops::Deref for CommRef {
    type Target = Communicator;
    fn deref(&self) -> &Communicator {
        match self {
            CommRef::Predefined(c) => c,
            CommRef::Created(c) => c,
        }
    }
}

/// A rank argument of `comm` as `usize` (`MPI_PROC_NULL` is handled by the caller).
///
/// # Errors
/// `MPI_ERR_RANK` when out of `0..size`.
#[inline]
pub fn rank_arg(comm: &Communicator, r: i32, what: &str) -> R<usize> {
    if r < 0 || r as usize >= comm.size() {
        return Err(bad_rank(comm, r, what));
    }
    Ok(r as usize)
}

/// [`rank_arg`]'s error (out of line: the hot path stays small).
#[cold]
fn bad_rank(comm: &Communicator, r: i32, what: &str) -> MpiErr {
    err(
        MPI_ERR_RANK,
        format!(
            "{what} rank {r} is out of range for a communicator of size {}; fix: pass a rank in 0..{} (or MPI_PROC_NULL)",
            comm.size(),
            comm.size()
        ),
    )
}

use crate::error::{guard, put};
use std::ffi::c_int;

/// `MPI_Comm_rank`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_rank(comm: MPI_Comm, rank: *mut c_int) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        // SAFETY: C caller's pointer.
        unsafe { put(rank, c.rank() as c_int, "rank") }
    })
}

/// `MPI_Comm_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_size(comm: MPI_Comm, size: *mut c_int) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        // SAFETY: C caller's pointer.
        unsafe { put(size, c.size() as c_int, "size") }
    })
}

use crate::attr;
use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::Mutex;

/// Names set by `MPI_Comm_set_name`.
static NAMES: Mutex<Option<HashMap<MPI_Comm, String>>> = Mutex::new(None);

/// Communicators freed by `MPI_Comm_free` while requests on them were still live
/// (active, or persistent and not yet freed): their handles are hidden in [`COMMS`],
/// not reusable, and keep their error handlers until [`release_freed`] finds no
/// request left on them.
#[allow(clippy::type_complexity)]
static FREED_PENDING: Mutex<Vec<(MPI_Comm, std::sync::Arc<Communicator>)>> = Mutex::new(Vec::new());

/// The communicator of `c` if it was freed while requests on it were live and still
/// has some.
fn freed_pending(c: MPI_Comm) -> Option<std::sync::Arc<Communicator>> {
    FREED_PENDING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(h, _)| *h == c)
        .map(|(_, x)| x.clone())
}

/// Whether `c` is a communicator freed while requests on it were live, and still has
/// some: errors of those requests are raised on its error handler (MPI 4.1 §7.4.3).
pub fn is_freed_pending(c: MPI_Comm) -> bool {
    FREED_PENDING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(h, _)| *h == c)
}

/// Releases the handles of freed communicators whose requests have all completed
/// and been freed (their slots reusable, their error handlers forgotten). Runs before
/// a new communicator takes a handle and at each `MPI_Comm_free`, so a handle
/// whose last request completed can be reused by the next communicator; the error
/// of that request has by then been raised, except where one thread completes the
/// request while another creates a communicator at the same moment (the error may
/// then meet the new communicator's handler).
pub fn release_freed() {
    let mut f = FREED_PENDING.lock().unwrap_or_else(|e| e.into_inner());
    if f.is_empty() {
        return;
    }
    f.retain(|&(c, _)| {
        if referenced(c) {
            return true;
        }
        // Forget first: once released, the handle may be given to a new communicator
        // by another thread, whose state must not be forgotten.
        forget_state(c);
        COMMS.release(c);
        false
    });
}

/// Forgets what the library keeps per communicator handle beside the table entry:
/// its error handler, topology, attached buffer (`MPI_Comm_attach_buffer`) and
/// memory-kind setting. For a communicator freed with live requests this waits for
/// [`release_freed`]: a persistent request started after the free still uses them.
fn forget_state(c: MPI_Comm) {
    crate::error::forget_comm(c);
    crate::topo::forget(c);
    crate::p2p::forget_comm_buffer(c);
    crate::memkind::forget(c);
}

/// Whether a live request or a matched message (`MPI_Mprobe`) still refers to `c`.
fn referenced(c: MPI_Comm) -> bool {
    crate::request::references(c) || crate::p2p::messages_reference(c)
}

/// A handle for the new communicator `c` (after [`release_freed`]).
pub fn insert_comm(c: Communicator) -> MPI_Comm {
    release_freed();
    COMMS.insert(c)
}

/// Registers a new communicator from `parent`: a handle, the parent's error handler
/// (inherited, MPI 4.1 §9.3), and, for dup, its attributes through their copy callbacks.
fn register(parent: MPI_Comm, c: Communicator, copy_attrs: bool) -> R<MPI_Comm> {
    let h = insert_comm(c);
    let eh = crate::error::handler_of(parent);
    if eh != MPI_ERRORS_ARE_FATAL {
        crate::error::set_handler(h, eh)?;
    }
    if copy_attrs {
        attr::copy_all(parent, h)?;
    }
    Ok(h)
}

/// `MPI_Comm_dup`: collective; attributes are copied through their keyvals' copy
/// callbacks, the error handler is inherited.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        let n = c.dup()?;
        let h = register(comm, n, true)?;
        crate::topo::copy_topology(comm, h)?;
        // SAFETY: C caller's pointer.
        unsafe { put(newcomm, h, "newcomm") }
    })
}

/// `MPI_Comm_dup_with_info`: `MPI_Comm_dup` with `info`'s memory-kind assertion
/// `mpi_assert_memory_alloc_kinds` on the new communicator (`memkind.rs`); other keys
/// are ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_dup_with_info(
    comm: MPI_Comm,
    info: MPI_Info,
    newcomm: *mut MPI_Comm,
) -> c_int {
    // A bad info handle is reported before the communicator is made.
    let rc = guard(comm, || crate::info::value_of(info, "").map(|_| ()));
    if rc != MPI_SUCCESS {
        return rc;
    }
    // SAFETY: forwarded.
    let rc = unsafe { MPI_Comm_dup(comm, newcomm) };
    if rc != MPI_SUCCESS {
        return rc;
    }
    // The new communicator's hints are `info`'s (MPI 4.1 §7.4.2), not `comm`'s.
    guard(comm, || {
        // SAFETY: MPI_Comm_dup wrote the new handle.
        let h = unsafe { *newcomm };
        crate::memkind::forget(h);
        let c = lookup(h)?;
        crate::memkind::set_from_info(&c, h, info)
    })
}

/// `MPI_Comm_idup`: performed at the call (blocking dup), the request is complete.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_idup(
    comm: MPI_Comm,
    newcomm: *mut MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: forwarded.
    let rc = unsafe { MPI_Comm_dup(comm, newcomm) };
    if rc != MPI_SUCCESS {
        return rc;
    }
    guard(comm, || {
        let s = crate::request::Started::plain(crate::request::Active::Ready(
            crate::request::empty_status(),
        ));
        // SAFETY: C caller's pointer.
        unsafe { put(request, crate::request::insert(comm, s), "request") }
    })
}

/// `MPI_Comm_split`: `color == MPI_UNDEFINED` gives `MPI_COMM_NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_split(
    comm: MPI_Comm,
    color: c_int,
    key: c_int,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        let col = if color == MPI_UNDEFINED {
            None
        } else if color < 0 {
            return Err(err(
                MPI_ERR_ARG,
                format!("color {color} is negative; fix: pass a color >= 0 or MPI_UNDEFINED"),
            ));
        } else {
            Some(color as u32)
        };
        let h = match c.split(col, key)? {
            Some(n) => register(comm, n, false)?,
            None => MPI_COMM_NULL,
        };
        // SAFETY: C caller's pointer.
        unsafe { put(newcomm, h, "newcomm") }
    })
}

/// `MPI_Comm_split_type`: `MPI_COMM_TYPE_SHARED` (ranks on this node, ordered by
/// `key` then rank) and `MPI_UNDEFINED`; other types give `MPI_COMM_NULL`? No: other
/// split types are not supported and are an `MPI_ERR_ARG` error naming them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_split_type(
    comm: MPI_Comm,
    split_type: c_int,
    key: c_int,
    info: MPI_Info,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        // Every split type is the node split underneath (the only level of the
        // hardware hierarchy rankwire tells apart), so ranks passing different split
        // types (MPI_UNDEFINED among them) run the same collective.
        const RES: &str = "mpi_hw_resource_type";
        const SHMEM: &str = "mpi_shared_memory";
        let h = match split_type {
            MPI_UNDEFINED => {
                let _ = c.split_shared_keyed(false, key)?;
                MPI_COMM_NULL
            }
            MPI_COMM_TYPE_SHARED => node(comm, &c, true, key)?,
            // MPI 4.1 §7.4.2: the resource named by the info key "mpi_hw_resource_type";
            // "mpi_shared_memory" is the one rankwire knows; any other value (or none)
            // gives MPI_COMM_NULL.
            MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_RESOURCE_GUIDED => {
                let shm = crate::info::value_of(info, RES)?.as_deref() == Some(SHMEM);
                node(comm, &c, shm, key)?
            }
            // A subset strictly smaller than `comm` (the node), or MPI_COMM_NULL when the
            // node is all of `comm`; the info gets the resource type of the result.
            MPI_COMM_TYPE_HW_UNGUIDED => {
                let n = c.split_shared_keyed(true, key)?.expect("member");
                if n.size() < c.size() {
                    crate::info::set_value(info, RES, SHMEM)?;
                    register(comm, n, false)?
                } else {
                    MPI_COMM_NULL
                }
            }
            t => {
                return Err(err(
                    MPI_ERR_ARG,
                    format!(
                        "split type {t} is not a split type (MPI_COMM_TYPE_SHARED, MPI_COMM_TYPE_HW_GUIDED, MPI_COMM_TYPE_HW_UNGUIDED, MPI_COMM_TYPE_RESOURCE_GUIDED or MPI_UNDEFINED)"
                    ),
                ));
            }
        };
        // SAFETY: C caller's pointer.
        unsafe { put(newcomm, h, "newcomm") }
    })
}

/// The node communicator of `c` ordered by `key` (`member == false`: take part, get
/// `MPI_COMM_NULL`).
fn node(parent: MPI_Comm, c: &Communicator, member: bool, key: c_int) -> R<MPI_Comm> {
    match c.split_shared_keyed(member, key)? {
        Some(n) => register(parent, n, false),
        None => Ok(MPI_COMM_NULL),
    }
}

/// `MPI_Comm_create_group` (MPI 4.1 §7.4.2): collective over the members of `group`
/// only; `tag` tells concurrent calls apart. A caller outside `group` gets
/// `MPI_COMM_NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_create_group(
    comm: MPI_Comm,
    group: MPI_Group,
    tag: c_int,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        let g = crate::group::lookup_group(group)?;
        if !(0..=c.tag_ub()).contains(&tag) {
            return Err(err(
                MPI_ERR_TAG,
                format!("tag {tag} is outside 0..=MPI_TAG_UB ({})", c.tag_ub()),
            ));
        }
        let h = match c.create_group(&g, tag)? {
            Some(n) => register(comm, n, false)?,
            None => MPI_COMM_NULL,
        };
        // SAFETY: C caller's pointer.
        unsafe { put(newcomm, h, "newcomm") }
    })
}

/// `MPI_Comm_create_from_group` (MPI 4.1 §7.4.2): collective over the members of
/// `group` only, without a parent communicator. Every group of this library is a
/// group of `MPI_COMM_WORLD`'s processes, so the members agree through it, with a tag
/// hashed from `stringtag` (concurrent calls with different string tags that hash
/// alike are serialized by MPI's ordering rule for the same members, never mixed).
/// The new communicator gets `errhandler` (`MPI_ERRHANDLER_NULL`: fatal).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_create_from_group(
    group: MPI_Group,
    stringtag: *const std::ffi::c_char,
    _info: MPI_Info,
    errhandler: MPI_Errhandler,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        if stringtag.is_null() {
            return Err(err(MPI_ERR_ARG, "stringtag is a null pointer"));
        }
        // SAFETY: NUL-terminated C string.
        let tag = unsafe { std::ffi::CStr::from_ptr(stringtag) }.to_bytes();
        // FNV-1a, folded into 0..=TAG_UB (the standard's minimum bound 32767 is
        // far below rankwire's).
        let h = tag.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        });
        let w = crate::env::world()?;
        let tag = (h % (w.tag_ub() as u64 + 1)) as c_int;
        let g = crate::group::lookup_group(group)?;
        let out = match w.create_group(&g, tag)? {
            Some(n) => {
                let h = insert_comm(n);
                if errhandler != MPI_ERRHANDLER_NULL && errhandler != MPI_ERRORS_ARE_FATAL {
                    crate::error::set_handler(h, errhandler)?;
                }
                h
            }
            None => MPI_COMM_NULL,
        };
        // SAFETY: C caller's pointer.
        unsafe { put(newcomm, out, "newcomm") }
    })
}

/// `MPI_Comm_remote_size`: rankwire has no intercommunicators, so every valid
/// communicator is an intracommunicator and this is an `MPI_ERR_COMM` error (MPI 4.1
/// §7.6.1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_remote_size(comm: MPI_Comm, _size: *mut c_int) -> c_int {
    guard(comm, || {
        lookup(comm)?;
        Err(not_inter())
    })
}

/// `MPI_Comm_remote_group`: as [`MPI_Comm_remote_size`], an `MPI_ERR_COMM` error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_remote_group(comm: MPI_Comm, _group: *mut MPI_Group) -> c_int {
    guard(comm, || {
        lookup(comm)?;
        Err(not_inter())
    })
}

/// `MPI_Intercomm_merge`: as [`MPI_Comm_remote_size`], an `MPI_ERR_COMM` error (no
/// communicator of this library is an intercommunicator).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Intercomm_merge(
    intercomm: MPI_Comm,
    _high: c_int,
    _newintracomm: *mut MPI_Comm,
) -> c_int {
    guard(intercomm, || {
        lookup(intercomm)?;
        Err(not_inter())
    })
}

fn not_inter() -> crate::error::MpiErr {
    err(
        MPI_ERR_COMM,
        "the communicator is an intracommunicator (rankwire has no intercommunicators); the remote group exists only for intercommunicators",
    )
}

/// `MPI_Comm_create`: collective over `comm`; ranks outside `group` get `MPI_COMM_NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_create(
    comm: MPI_Comm,
    group: MPI_Group,
    newcomm: *mut MPI_Comm,
) -> c_int {
    guard(comm, || {
        let c = lookup(comm)?;
        let g = crate::group::lookup_group(group)?;
        let h = match c.create(&g)? {
            Some(n) => register(comm, n, false)?,
            None => MPI_COMM_NULL,
        };
        // SAFETY: C caller's pointer.
        unsafe { put(newcomm, h, "newcomm") }
    })
}

/// `MPI_Comm_get_parent`: always `MPI_COMM_NULL`, the answer for a process not started
/// by `MPI_Comm_spawn` (MPI 4.1, the dynamic process model); rankwire has no dynamic
/// processes, so no process has a parent.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_get_parent(parent: *mut MPI_Comm) -> c_int {
    guard(MPI_COMM_WORLD, || {
        crate::env::world()?;
        // SAFETY: C caller's pointer.
        unsafe { put(parent, MPI_COMM_NULL, "parent") }
    })
}

/// `MPI_Comm_free`: deletes the attributes (delete callbacks) and the handle; pending
/// operations on the communicator complete normally, and their errors are raised on
/// its error handler (the handle is not reused until they have completed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_free(comm: *mut MPI_Comm) -> c_int {
    // Errors go to the communicator's handler; for an invalid handle (MPI_COMM_NULL,
    // freed) `raise` takes MPI_COMM_SELF's (MPI 4.1 §9.3).
    // SAFETY: read only when non-null.
    let on = if comm.is_null() {
        MPI_COMM_WORLD
    } else {
        unsafe { *comm }
    };
    guard(on, || {
        if comm.is_null() {
            return Err(err(MPI_ERR_ARG, "comm is a null pointer"));
        }
        // SAFETY: non-null.
        let h = unsafe { *comm };
        if h == MPI_COMM_WORLD || h == MPI_COMM_SELF || h == MPI_COMM_NULL {
            return Err(err(
                MPI_ERR_COMM,
                "MPI_Comm_free of a predefined communicator or MPI_COMM_NULL; fix: free only communicators you created",
            ));
        }
        lookup(h)?;
        attr::delete_all(h)?;
        if let Some(m) = NAMES.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            m.remove(&h);
        }
        release_freed();
        if referenced(h) {
            // MPI 4.1 §7.4.3: pending operations complete first. The handle is no
            // longer valid for calls, but keeps its error handler (the operations'
            // errors are raised on it) and is not given to a new communicator until
            // they have completed (release_freed).
            if let Some(x) = COMMS.hide(h) {
                FREED_PENDING
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((h, x));
            }
        } else {
            // Forget first (see release_freed).
            forget_state(h);
            COMMS.remove(h);
        }
        // SAFETY: non-null.
        unsafe { *comm = MPI_COMM_NULL };
        Ok(())
    })
}

/// `MPI_Comm_disconnect`: as `MPI_Comm_free` (no dynamic processes here).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_disconnect(comm: *mut MPI_Comm) -> c_int {
    // SAFETY: forwarded.
    unsafe { MPI_Comm_free(comm) }
}

/// `MPI_Comm_compare`: `MPI_IDENT` (same handle), `MPI_CONGRUENT` (same ranks in the
/// same order), `MPI_SIMILAR` (same ranks), `MPI_UNEQUAL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_compare(c1: MPI_Comm, c2: MPI_Comm, result: *mut c_int) -> c_int {
    guard(c1, || {
        let a = lookup(c1)?;
        let b = lookup(c2)?;
        let v = if c1 == c2 || a.context_id() == b.context_id() {
            MPI_IDENT
        } else {
            match a.group().compare(&b.group()) {
                rankwire::GroupRelation::Identical => MPI_CONGRUENT,
                rankwire::GroupRelation::Similar => MPI_SIMILAR,
                rankwire::GroupRelation::Unequal => MPI_UNEQUAL,
            }
        };
        // SAFETY: C caller's pointer.
        unsafe { put(result, v, "result") }
    })
}

/// `MPI_Comm_test_inter`: always false (no intercommunicators).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_test_inter(comm: MPI_Comm, flag: *mut c_int) -> c_int {
    guard(comm, || {
        lookup(comm)?;
        // SAFETY: C caller's pointer.
        unsafe { put(flag, 0, "flag") }
    })
}

/// `MPI_Comm_set_name` (truncated to `MPI_MAX_OBJECT_NAME - 1` bytes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_set_name(comm: MPI_Comm, name: *const c_char) -> c_int {
    guard(comm, || {
        lookup(comm)?;
        if name.is_null() {
            return Err(err(MPI_ERR_ARG, "name is a null pointer"));
        }
        // SAFETY: NUL-terminated C string.
        let s = unsafe { std::ffi::CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        NAMES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(comm, s);
        Ok(())
    })
}

/// `MPI_Comm_get_name`: `MPI_COMM_WORLD` / `MPI_COMM_SELF` by default, else "" .
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_get_name(
    comm: MPI_Comm,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    guard(comm, || {
        // MPICH and Open MPI name the null handle too (mpi4py's tests expect it).
        if comm != MPI_COMM_NULL {
            lookup(comm)?;
        }
        let set = NAMES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|m| m.get(&comm).cloned());
        let s = set.unwrap_or_else(|| match comm {
            MPI_COMM_WORLD => "MPI_COMM_WORLD".into(),
            MPI_COMM_SELF => "MPI_COMM_SELF".into(),
            MPI_COMM_NULL => "MPI_COMM_NULL".into(),
            _ => String::new(),
        });
        // SAFETY: C caller's buffers of MPI_MAX_OBJECT_NAME bytes.
        unsafe { crate::env::put_str(name, MPI_MAX_OBJECT_NAME as usize, resultlen, &s) }
    })
}

// ---- error handlers ----------------------------------------------------------------

/// `MPI_Comm_set_errhandler`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_set_errhandler(
    comm: MPI_Comm,
    errhandler: MPI_Errhandler,
) -> c_int {
    guard(comm, || {
        lookup(comm)?;
        crate::error::set_handler(comm, errhandler)
    })
}

/// `MPI_Comm_get_errhandler`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_get_errhandler(
    comm: MPI_Comm,
    errhandler: *mut MPI_Errhandler,
) -> c_int {
    guard(comm, || {
        lookup(comm)?;
        // SAFETY: C caller's pointer.
        unsafe { put(errhandler, crate::error::handler_of(comm), "errhandler") }
    })
}

/// `MPI_Comm_create_errhandler`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_create_errhandler(
    f: Option<crate::error::CommErrhandlerFn>,
    errhandler: *mut MPI_Errhandler,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let f = f.ok_or_else(|| err(MPI_ERR_ARG, "error handler function is a null pointer"))?;
        // SAFETY: C caller's pointer.
        unsafe { put(errhandler, crate::error::create_user(f), "errhandler") }
    })
}

/// `MPI_Errhandler_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Errhandler_free(errhandler: *mut MPI_Errhandler) -> c_int {
    guard(MPI_COMM_SELF, || {
        if errhandler.is_null() {
            return Err(err(MPI_ERR_ARG, "errhandler is a null pointer"));
        }
        // SAFETY: non-null.
        crate::error::free_user(unsafe { *errhandler })?;
        // SAFETY: non-null.
        unsafe { *errhandler = MPI_ERRHANDLER_NULL };
        Ok(())
    })
}

/// `MPI_Comm_call_errhandler`: invokes `comm`'s handler with `errorcode`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_call_errhandler(comm: MPI_Comm, errorcode: c_int) -> c_int {
    crate::error::raise(
        comm,
        err(
            errorcode,
            format!("MPI_Comm_call_errhandler with error code {errorcode}"),
        ),
    );
    MPI_SUCCESS
}

/// `MPI_Error_class`: codes are classes here (plus those of `MPI_Add_error_code`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        if !crate::error::is_code(errorcode) {
            return Err(err(MPI_ERR_ARG, crate::error::describe(errorcode)));
        }
        // SAFETY: C caller's pointer.
        unsafe { put(errorclass, crate::error::class_of(errorcode), "errorclass") }
    })
}

/// `MPI_Error_string`: the class name and, when the calling thread raised an error of
/// that class, the message of the last such error (layer, numbers, fix), labelled as
/// such (a returned code is its class, so it cannot name one error). A value that is no
/// error code ([`crate::error::is_code`]) is an `MPI_ERR_ARG` error, as in
/// [`MPI_Error_class`], raised on `MPI_COMM_SELF` after `string` is filled with a text
/// saying so (so a caller with `MPI_ERRORS_RETURN` still gets it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Error_string(
    errorcode: c_int,
    string: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let s = crate::error::describe(errorcode);
        // SAFETY: C caller's buffer of MPI_MAX_ERROR_STRING bytes.
        unsafe { crate::env::put_str(string, MPI_MAX_ERROR_STRING as usize, resultlen, &s)? };
        if crate::error::is_code(errorcode) {
            Ok(())
        } else {
            Err(err(MPI_ERR_ARG, s))
        }
    })
}
