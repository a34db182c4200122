//! Errors at the ABI boundary: error classes, the `guard` every exported function runs
//! its body in, and the error handlers of MPI 4.1 §9.3 (`MPI_ERRORS_ARE_FATAL` by
//! default, `MPI_ERRORS_ABORT`, `MPI_ERRORS_RETURN`, user functions).

use crate::consts::*;
use std::collections::HashMap;
use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

/// An MPI error: its class (an `MPI_ERR_*` value) and rankwire's message (layer,
/// numbers, fix), printed by the fatal handler and kept for `MPI_Error_string`.
#[derive(Debug, Clone)]
pub struct MpiErr {
    /// `MPI_ERR_*` class returned to the caller.
    pub class: c_int,
    /// What failed and how to fix it.
    pub msg: String,
}

/// Result of a function body.
pub type R<T = ()> = Result<T, MpiErr>;

/// An error of `class` saying `msg`.
pub fn err(class: c_int, msg: impl Into<String>) -> MpiErr {
    MpiErr {
        class,
        msg: msg.into(),
    }
}

impl From<rankwire::Error> for MpiErr {
    fn from(e: rankwire::Error) -> Self {
        use rankwire::Error as E;
        let class = match &e {
            E::Matching(rankwire::MatchError::Truncated { .. }) => MPI_ERR_TRUNCATE,
            E::Matching(rankwire::MatchError::UnknownRequest { .. }) => MPI_ERR_REQUEST,
            E::Matching(_) => MPI_ERR_OTHER,
            E::Connection { .. } => MPI_ERR_PROC_ABORTED,
            E::Usage(m) if m.contains("rank") => MPI_ERR_RANK,
            E::Usage(m) if m.contains("tag") => MPI_ERR_TAG,
            E::Usage(_) => MPI_ERR_ARG,
            E::Registration(_) => MPI_ERR_NO_MEM,
            _ => MPI_ERR_OTHER,
        };
        MpiErr {
            class,
            msg: e.to_string(),
        }
    }
}

/// `MPI_Comm_errhandler_function`.
pub type CommErrhandlerFn = unsafe extern "C" fn(*mut MPI_Comm, *mut c_int, ...);

struct ErrState {
    /// Handler of each communicator that does not have the default (fatal).
    by_comm: HashMap<MPI_Comm, MPI_Errhandler>,
    /// User handlers: handle -> function.
    user: HashMap<MPI_Errhandler, CommErrhandlerFn>,
    next_user: usize,
}

thread_local! {
    /// Message of the last error of each class raised on this thread, for
    /// `MPI_Error_string` (codes are classes, so a code cannot name one error; another
    /// thread's errors never show here).
    static LAST_MSG: std::cell::RefCell<HashMap<c_int, String>> = std::cell::RefCell::new(HashMap::new());
}

static STATE: Mutex<Option<ErrState>> = Mutex::new(None);

fn with_state<T>(f: impl FnOnce(&mut ErrState) -> T) -> T {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let s = g.get_or_insert_with(|| ErrState {
        by_comm: HashMap::new(),
        user: HashMap::new(),
        next_user: 1,
    });
    f(s)
}

/// The error handler of `comm` (`MPI_ERRORS_ARE_FATAL` unless set).
pub fn handler_of(comm: MPI_Comm) -> MPI_Errhandler {
    with_state(|s| {
        s.by_comm
            .get(&comm)
            .copied()
            .unwrap_or(MPI_ERRORS_ARE_FATAL)
    })
}

/// Sets `comm`'s error handler (`MPI_Comm_set_errhandler`).
///
/// # Errors
/// `MPI_ERR_ARG` for a handle that is neither predefined nor created.
pub fn set_handler(comm: MPI_Comm, h: MPI_Errhandler) -> R {
    with_state(|s| {
        let known = matches!(
            h,
            MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT | MPI_ERRORS_RETURN
        ) || s.user.contains_key(&h);
        if !known {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "errhandler: {h:#x} is not an error handler; fix: pass MPI_ERRORS_RETURN, MPI_ERRORS_ARE_FATAL or one from MPI_Comm_create_errhandler"
                ),
            ));
        }
        s.by_comm.insert(comm, h);
        Ok(())
    })
}

/// Forgets `comm`'s handler (the communicator was freed).
pub fn forget_comm(comm: MPI_Comm) {
    with_state(|s| {
        s.by_comm.remove(&comm);
    });
}

/// Registers a user error handler; returns its handle (`MPI_Comm_create_errhandler`).
pub fn create_user(f: CommErrhandlerFn) -> MPI_Errhandler {
    with_state(|s| {
        let h = (s.next_user << 12) | crate::handles::Kind::Errhandler as usize;
        s.next_user += 1;
        s.user.insert(h, f);
        h
    })
}

/// Frees a user handler (`MPI_Errhandler_free`); predefined handles are ignored.
///
/// # Errors
/// `MPI_ERR_ARG` for an unknown handle.
pub fn free_user(h: MPI_Errhandler) -> R {
    if h == MPI_ERRHANDLER_NULL {
        return Err(err(
            MPI_ERR_ARG,
            "MPI_ERRHANDLER_NULL cannot be freed; fix: pass a handler from MPI_*_create_errhandler",
        ));
    }
    if matches!(
        h,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT | MPI_ERRORS_RETURN
    ) {
        return Ok(());
    }
    with_state(|s| {
        // Communicators keep using a freed handler (MPI 4.1 §9.3.5): only the handle goes.
        if s.user.contains_key(&h) && !s.by_comm.values().any(|&v| v == h) {
            s.user.remove(&h);
        }
        Ok(())
    })
}

/// Message of the last error of class `class` raised on the calling thread.
pub fn last_message(class: c_int) -> Option<String> {
    // During thread exit (an `atexit` handler, a thread-local destructor) the table
    // may be gone: no message then.
    LAST_MSG
        .try_with(|m| m.borrow().get(&class).cloned())
        .ok()
        .flatten()
}

/// Invokes `comm`'s error handler for `e` and returns the code to give the caller.
/// The fatal handlers print the message and abort the job through rankwire (every
/// rank ends, rwrun's exit status is non-zero).
pub fn raise(comm: MPI_Comm, e: MpiErr) -> c_int {
    raise_on(comm, e, false)
}

/// [`raise`], where `of_request` says that `comm` is the communicator of a request
/// being completed or started (`guard_on`): a communicator freed while that request
/// was live still has its handler (MPI 4.1 §7.4.3). For any other call a freed handle
/// is invalid, and its error goes to `MPI_COMM_SELF`.
fn raise_on(comm: MPI_Comm, e: MpiErr, of_request: bool) -> c_int {
    // An error on an invalid communicator handle (MPI_COMM_NULL, freed) has no
    // handler of its own: it is raised on MPI_COMM_SELF (MPI 4.1 §9.3).
    let comm = if comm == MPI_COMM_WORLD
        || comm == MPI_COMM_SELF
        || crate::comm::COMMS.is_created(comm)
            && (crate::comm::COMMS.get(comm).is_some()
                || of_request && crate::comm::is_freed_pending(comm))
    {
        comm
    } else {
        MPI_COMM_SELF
    };
    let h = handler_of(comm);
    // Not recorded during thread exit (the table may be destroyed already).
    let _ = LAST_MSG.try_with(|m| m.borrow_mut().insert(e.class, e.msg.clone()));
    match h {
        MPI_ERRORS_RETURN => e.class,
        MPI_ERRORS_ARE_FATAL | MPI_ERRORS_ABORT => fatal(comm, h, &e),
        user => {
            let f = with_state(|s| s.user.get(&user).copied());
            match f {
                Some(f) => {
                    let mut c = comm;
                    let mut code = e.class;
                    // SAFETY: the user registered `f` as an MPI_Comm_errhandler_function.
                    unsafe { f(&mut c, &mut code) };
                    e.class
                }
                None => fatal(comm, MPI_ERRORS_ARE_FATAL, &e),
            }
        }
    }
}

fn fatal(comm: MPI_Comm, handler: MPI_Errhandler, e: &MpiErr) -> ! {
    let what = match comm {
        MPI_COMM_WORLD => "MPI_COMM_WORLD".to_string(),
        MPI_COMM_SELF => "MPI_COMM_SELF".to_string(),
        c => format!("communicator {c:#x}"),
    };
    let text = format!(
        "rankwire (MPI ABI): error class {} ({}) on {what}, handler {}: {}",
        e.class,
        class_name(e.class),
        if handler == MPI_ERRORS_ABORT {
            "MPI_ERRORS_ABORT"
        } else {
            "MPI_ERRORS_ARE_FATAL"
        },
        e.msg
    );
    crate::env::abort_job(1, &text)
}

/// Name of an error class (`MPI_ERR_TRUNCATE`, ...).
pub fn class_name(class: c_int) -> &'static str {
    match class {
        MPI_SUCCESS => "MPI_SUCCESS",
        MPI_ERR_BUFFER => "MPI_ERR_BUFFER",
        MPI_ERR_COUNT => "MPI_ERR_COUNT",
        MPI_ERR_TYPE => "MPI_ERR_TYPE",
        MPI_ERR_TAG => "MPI_ERR_TAG",
        MPI_ERR_COMM => "MPI_ERR_COMM",
        MPI_ERR_RANK => "MPI_ERR_RANK",
        MPI_ERR_REQUEST => "MPI_ERR_REQUEST",
        MPI_ERR_ROOT => "MPI_ERR_ROOT",
        MPI_ERR_GROUP => "MPI_ERR_GROUP",
        MPI_ERR_OP => "MPI_ERR_OP",
        MPI_ERR_TOPOLOGY => "MPI_ERR_TOPOLOGY",
        MPI_ERR_DIMS => "MPI_ERR_DIMS",
        MPI_ERR_ARG => "MPI_ERR_ARG",
        MPI_ERR_UNKNOWN => "MPI_ERR_UNKNOWN",
        MPI_ERR_TRUNCATE => "MPI_ERR_TRUNCATE",
        MPI_ERR_OTHER => "MPI_ERR_OTHER",
        MPI_ERR_INTERN => "MPI_ERR_INTERN",
        MPI_ERR_PENDING => "MPI_ERR_PENDING",
        MPI_ERR_IN_STATUS => "MPI_ERR_IN_STATUS",
        MPI_ERR_ACCESS => "MPI_ERR_ACCESS",
        MPI_ERR_AMODE => "MPI_ERR_AMODE",
        MPI_ERR_ASSERT => "MPI_ERR_ASSERT",
        MPI_ERR_BAD_FILE => "MPI_ERR_BAD_FILE",
        MPI_ERR_BASE => "MPI_ERR_BASE",
        MPI_ERR_CONVERSION => "MPI_ERR_CONVERSION",
        MPI_ERR_DISP => "MPI_ERR_DISP",
        MPI_ERR_DUP_DATAREP => "MPI_ERR_DUP_DATAREP",
        MPI_ERR_FILE_EXISTS => "MPI_ERR_FILE_EXISTS",
        MPI_ERR_FILE_IN_USE => "MPI_ERR_FILE_IN_USE",
        MPI_ERR_FILE => "MPI_ERR_FILE",
        MPI_ERR_INFO_KEY => "MPI_ERR_INFO_KEY",
        MPI_ERR_INFO_NOKEY => "MPI_ERR_INFO_NOKEY",
        MPI_ERR_INFO_VALUE => "MPI_ERR_INFO_VALUE",
        MPI_ERR_INFO => "MPI_ERR_INFO",
        MPI_ERR_IO => "MPI_ERR_IO",
        MPI_ERR_KEYVAL => "MPI_ERR_KEYVAL",
        MPI_ERR_LOCKTYPE => "MPI_ERR_LOCKTYPE",
        MPI_ERR_NAME => "MPI_ERR_NAME",
        MPI_ERR_NO_MEM => "MPI_ERR_NO_MEM",
        MPI_ERR_NOT_SAME => "MPI_ERR_NOT_SAME",
        MPI_ERR_NO_SPACE => "MPI_ERR_NO_SPACE",
        MPI_ERR_NO_SUCH_FILE => "MPI_ERR_NO_SUCH_FILE",
        MPI_ERR_PORT => "MPI_ERR_PORT",
        MPI_ERR_QUOTA => "MPI_ERR_QUOTA",
        MPI_ERR_READ_ONLY => "MPI_ERR_READ_ONLY",
        MPI_ERR_RMA_ATTACH => "MPI_ERR_RMA_ATTACH",
        MPI_ERR_RMA_CONFLICT => "MPI_ERR_RMA_CONFLICT",
        MPI_ERR_RMA_RANGE => "MPI_ERR_RMA_RANGE",
        MPI_ERR_RMA_SHARED => "MPI_ERR_RMA_SHARED",
        MPI_ERR_RMA_SYNC => "MPI_ERR_RMA_SYNC",
        MPI_ERR_SERVICE => "MPI_ERR_SERVICE",
        MPI_ERR_SIZE => "MPI_ERR_SIZE",
        MPI_ERR_SPAWN => "MPI_ERR_SPAWN",
        MPI_ERR_UNSUPPORTED_DATAREP => "MPI_ERR_UNSUPPORTED_DATAREP",
        MPI_ERR_UNSUPPORTED_OPERATION => "MPI_ERR_UNSUPPORTED_OPERATION",
        MPI_ERR_WIN => "MPI_ERR_WIN",
        MPI_ERR_RMA_FLAVOR => "MPI_ERR_RMA_FLAVOR",
        MPI_ERR_PROC_ABORTED => "MPI_ERR_PROC_ABORTED",
        MPI_ERR_VALUE_TOO_LARGE => "MPI_ERR_VALUE_TOO_LARGE",
        MPI_ERR_SESSION => "MPI_ERR_SESSION",
        MPI_ERR_ERRHANDLER => "MPI_ERR_ERRHANDLER",
        MPI_ERR_ABI => "MPI_ERR_ABI",
        _ => "MPI error",
    }
}

/// Runs the body of an exported function: a panic becomes `MPI_ERR_INTERN` (never an
/// unwind into C), an error goes to `comm`'s error handler. Functions with no
/// communicator pass `MPI_COMM_SELF` (MPI 4.1 §9.3: errors not tied to a communicator
/// are raised on `MPI_COMM_SELF`).
pub fn guard(comm: MPI_Comm, f: impl FnOnce() -> R) -> c_int {
    guard_with(
        |c| {
            *c = comm;
            f()
        },
        false,
    )
}

/// As [`guard`], for a call that learns whose error handler applies while it runs
/// (the communicator of a request): `f` may set it, starting from `MPI_COMM_WORLD`.
/// A request's communicator freed while the request was live keeps its handler.
pub fn guard_on(f: impl FnOnce(&mut MPI_Comm) -> R) -> c_int {
    guard_with(f, true)
}

#[inline(always)]
fn guard_with(f: impl FnOnce(&mut MPI_Comm) -> R, of_request: bool) -> c_int {
    // Only the device path reads the count (`first_time_in_call`); without a CUDA
    // driver no call reaches it, and the thread-local access is skipped.
    if rankwire::gpu::available() {
        CALL.with(|c| c.set(c.get().wrapping_add(1)));
    }
    let mut comm = MPI_COMM_WORLD;
    match catch_unwind(AssertUnwindSafe(|| f(&mut comm))) {
        Ok(Ok(())) => MPI_SUCCESS,
        Ok(Err(e)) => raise_on(comm, e, of_request),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            raise_on(
                comm,
                err(
                    MPI_ERR_INTERN,
                    format!("internal error (a bug in rankwire, please report it): {msg}"),
                ),
                of_request,
            )
        }
    }
}

/// Writes `out` (a C pointer argument) or fails with `MPI_ERR_ARG` when it is null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub unsafe fn put<T>(out: *mut T, v: T, what: &str) -> R {
    out_arg(out, what)?;
    // SAFETY: non-null and valid by the caller's contract.
    unsafe { out.write(v) };
    Ok(())
}

/// Checks an output pointer before the call does anything (a nonblocking call must not
/// post an operation whose request it cannot return).
///
/// # Errors
/// `MPI_ERR_ARG` when `out` is null, as [`put`].
#[inline]
pub fn out_arg<T>(out: *mut T, what: &str) -> R {
    if out.is_null() {
        return Err(null_out(what));
    }
    Ok(())
}

#[cold]
fn null_out(what: &str) -> MpiErr {
    err(
        MPI_ERR_ARG,
        format!("{what} is a null pointer; fix: pass the address of a variable"),
    )
}

/// User error classes and codes (`MPI_Add_error_class` / `MPI_Add_error_code`):
/// code -> class, and strings (`MPI_Add_error_string`).
struct UserCodes {
    class_of: HashMap<c_int, c_int>,
    strings: HashMap<c_int, String>,
    next: c_int,
}

/// The value of the `MPI_LASTUSEDCODE` attribute: the largest error class or code
/// added so far (`MPI_ERR_LASTCODE` before any). User classes and codes are numbered
/// from `MPI_ERR_LASTCODE + 1`, above every predefined class.
pub static LASTUSED: std::sync::atomic::AtomicI32 =
    std::sync::atomic::AtomicI32::new(MPI_ERR_LASTCODE);

static USER_CODES: Mutex<Option<UserCodes>> = Mutex::new(None);

fn with_codes<T>(f: impl FnOnce(&mut UserCodes) -> T) -> T {
    let mut g = USER_CODES.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(|| UserCodes {
        class_of: HashMap::new(),
        strings: HashMap::new(),
        next: MPI_ERR_LASTCODE + 1,
    }))
}

/// Class of error code `code` (user codes map to their class; predefined codes are
/// their own class).
pub fn class_of(code: c_int) -> c_int {
    with_codes(|u| u.class_of.get(&code).copied()).unwrap_or(code)
}

/// Whether `code` is an error code of this library: a predefined class (the header's
/// `MPI_SUCCESS`, `MPI_ERR_*` up to `MPI_ERR_LASTCODE`, and the tools interface's
/// `MPI_T_ERR_*`, 1001..=1018), or a class or code added by `MPI_Add_error_class` /
/// `MPI_Add_error_code`. Other values (12345, −1) are not, even below
/// `MPI_LASTUSEDCODE`.
pub fn is_code(code: c_int) -> bool {
    class_name(code) != "MPI error"
        || code == MPI_ERR_LASTCODE
        || (MPI_T_ERR_CANNOT_INIT..=MPI_T_ERR_PVAR_NO_ATOMIC).contains(&code)
        || with_codes(|u| u.class_of.contains_key(&code))
}

/// Text of `MPI_Error_string` for `code`.
pub fn describe(code: c_int) -> String {
    let (set, user) = with_codes(|u| {
        (
            u.strings.get(&code).cloned(),
            u.class_of.contains_key(&code),
        )
    });
    if let Some(s) = set {
        return s;
    }
    // A user class or code without MPI_Add_error_string has the empty string (MPI 4.1
    // §9.5).
    if user {
        return String::new();
    }
    if !is_code(code) {
        // Not a code this library hands out (a typo, an uninitialized variable, another
        // MPI's value): say so rather than name a class.
        return format!(
            "{code} is not an MPI error code (the predefined classes are MPI_SUCCESS, \
             MPI_ERR_* and MPI_T_ERR_*; above {MPI_ERR_LASTCODE}, only the values \
             MPI_Add_error_class/MPI_Add_error_code returned)"
        );
    }
    let class = class_of(code);
    match last_message(class) {
        Some(m) if code == class => format!(
            "{} (the last error of this class on this thread: {m})",
            class_name(class)
        ),
        _ => class_name(class).to_string(),
    }
}

/// `MPI_Add_error_class`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Add_error_class(errorclass: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        let c = with_codes(|u| {
            let c = u.next;
            u.next += 1;
            LASTUSED.store(c, std::sync::atomic::Ordering::Relaxed);
            u.class_of.insert(c, c);
            c
        });
        // SAFETY: C caller's pointer.
        unsafe { put(errorclass, c, "errorclass") }
    })
}

/// `MPI_Add_error_code`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        if !is_code(errorclass) || class_of(errorclass) != errorclass {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "{errorclass} is not an error class (a predefined class, or one \
                     MPI_Add_error_class returned)"
                ),
            ));
        }
        let c = with_codes(|u| {
            let c = u.next;
            u.next += 1;
            LASTUSED.store(c, std::sync::atomic::Ordering::Relaxed);
            u.class_of.insert(c, errorclass);
            c
        });
        // SAFETY: C caller's pointer.
        unsafe { put(errorcode, c, "errorcode") }
    })
}

/// `MPI_Add_error_string`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Add_error_string(
    errorcode: c_int,
    string: *const std::ffi::c_char,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        if string.is_null() {
            return Err(err(MPI_ERR_ARG, "string is a null pointer"));
        }
        // SAFETY: NUL-terminated C string.
        let s = unsafe { std::ffi::CStr::from_ptr(string) }
            .to_string_lossy()
            .into_owned();
        // MPI 4.1 §9.5: only classes and codes above MPI_ERR_LASTCODE (the user's) get a
        // string; the predefined ones keep theirs.
        with_codes(|u| {
            if !u.class_of.contains_key(&errorcode) {
                return Err(err(
                    MPI_ERR_ARG,
                    format!(
                        "{errorcode} is not a user error class or code (only those \
                         MPI_Add_error_class/MPI_Add_error_code returned take a string)"
                    ),
                ));
            }
            u.strings.insert(errorcode, s);
            Ok(())
        })
    })
}

/// `MPI_Remove_error_class` (MPI 4.1 §9.5): removes a user class that has no codes
/// (other than itself) and no string left.
///
/// # Errors
/// `MPI_ERR_ARG` for a predefined or unknown class, or one that still has codes or a
/// string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Remove_error_class(errorclass: c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        with_codes(|u| {
            if u.class_of.get(&errorclass) != Some(&errorclass) {
                return Err(err(
                    MPI_ERR_ARG,
                    format!("{errorclass} is not a user error class"),
                ));
            }
            let codes = u
                .class_of
                .iter()
                .filter(|&(&c, &k)| k == errorclass && c != errorclass)
                .count();
            if codes > 0 || u.strings.contains_key(&errorclass) {
                return Err(err(
                    MPI_ERR_ARG,
                    format!(
                        "error class {errorclass} still has {codes} code(s) or a string; fix: remove them first (MPI_Remove_error_code, MPI_Remove_error_string)"
                    ),
                ));
            }
            u.class_of.remove(&errorclass);
            Ok(())
        })
    })
}

/// `MPI_Remove_error_code`: removes a user code without a string.
///
/// # Errors
/// `MPI_ERR_ARG` for a class, a predefined or unknown code, or one with a string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Remove_error_code(errorcode: c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        with_codes(|u| {
            match u.class_of.get(&errorcode) {
                Some(&k) if k != errorcode => {}
                _ => {
                    return Err(err(
                        MPI_ERR_ARG,
                        format!("{errorcode} is not a user error code"),
                    ));
                }
            }
            if u.strings.contains_key(&errorcode) {
                return Err(err(
                    MPI_ERR_ARG,
                    format!(
                        "error code {errorcode} still has a string; fix: MPI_Remove_error_string first"
                    ),
                ));
            }
            u.class_of.remove(&errorcode);
            Ok(())
        })
    })
}

/// `MPI_Remove_error_string`: removes the string of a user class or code.
///
/// # Errors
/// `MPI_ERR_ARG` for a predefined or unknown code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Remove_error_string(errorcode: c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        with_codes(|u| {
            if !u.class_of.contains_key(&errorcode) {
                return Err(err(
                    MPI_ERR_ARG,
                    format!("{errorcode} is not a user error class or code"),
                ));
            }
            u.strings.remove(&errorcode);
            Ok(())
        })
    })
}

thread_local! {
    /// Number of exported calls this thread has entered (for once-per-call work),
    /// counted only where a CUDA driver is present (its only reader is the device path).
    static CALL: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The call in which the default stream was last waited for.
    static SYNCED_IN: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
}

/// Whether the calling thread's current MPI call has not yet done its once-per-call
/// work; marks it done.
pub fn first_time_in_call() -> bool {
    let call = CALL.with(|c| c.get());
    SYNCED_IN.with(|s| {
        let first = s.get() != call;
        s.set(call);
        first
    })
}
