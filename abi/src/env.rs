//! The environment: `MPI_Init`/`MPI_Finalize` on a rankwire [`Universe`], thread
//! levels, `MPI_Abort`, `MPI_Wtime`, versions and names (MPI 4.1 chapter 11).
//!
//! Lifecycle: `MPI_Init` calls [`rankwire::init`] once and keeps the `Universe` here;
//! `MPI_Finalize` calls [`Universe::finalize`] (the job's clean end). A process that
//! exits without `MPI_Finalize` drops nothing: rwrun reports the rank as ended without
//! finalize, as for a Rust program.

use crate::consts::*;
use crate::error::{R, err, guard, put};
use rankwire::{Communicator, Universe};
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// 0 = never initialized, 1 = initialized, 2 = finalized.
static PHASE: AtomicU8 = AtomicU8::new(0);

struct Env {
    universe: Option<Universe>,
    thread_level: c_int,
    main_thread: std::thread::ThreadId,
}

static ENV: Mutex<Option<Env>> = Mutex::new(None);

/// Thread level rankwire provides: the runtime is thread-safe (every call goes
/// through the runtime's lock), so `MPI_THREAD_MULTIPLE` is granted when asked.
const PROVIDED_MAX: c_int = MPI_THREAD_MULTIPLE;

fn env<T>(f: impl FnOnce(&Env) -> T) -> R<T> {
    let g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    match (&*g, PHASE.load(Ordering::SeqCst)) {
        (Some(e), 1) => Ok(f(e)),
        (_, phase) => Err(not_live(phase)),
    }
}

/// `Ok` between `MPI_Init` and `MPI_Finalize`.
///
/// # Errors
/// `MPI_ERR_OTHER` before `MPI_Init` or after `MPI_Finalize`.
#[inline]
pub fn check_live() -> R<()> {
    match PHASE.load(Ordering::Acquire) {
        1 => Ok(()),
        phase => Err(not_live(phase)),
    }
}

/// The error of a call outside `MPI_Init` .. `MPI_Finalize` (`phase` as in `PHASE`).
#[cold]
fn not_live(phase: u8) -> crate::error::MpiErr {
    if phase == 2 {
        err(
            MPI_ERR_OTHER,
            "MPI called after MPI_Finalize; fix: make every MPI call before MPI_Finalize",
        )
    } else {
        err(
            MPI_ERR_OTHER,
            "MPI called before MPI_Init; fix: call MPI_Init (or MPI_Init_thread) first",
        )
    }
}

/// `MPI_COMM_WORLD` and `MPI_COMM_SELF`, set once by `MPI_Init` (MPI cannot be
/// initialized twice), so that every call on them reaches them without a lock or a
/// reference count.
static PREDEFINED_COMMS: OnceLock<(Communicator, Communicator)> = OnceLock::new();

#[inline]
fn predefined_comms() -> R<&'static (Communicator, Communicator)> {
    match (PREDEFINED_COMMS.get(), PHASE.load(Ordering::Acquire)) {
        (Some(c), 1) => Ok(c),
        (_, phase) => Err(not_live(phase)),
    }
}

/// The world communicator.
///
/// # Errors
/// `MPI_ERR_OTHER` before `MPI_Init` or after `MPI_Finalize`.
#[inline]
pub fn world() -> R<&'static Communicator> {
    predefined_comms().map(|c| &c.0)
}

/// The communicator of `MPI_COMM_SELF` (this rank alone).
///
/// # Errors
/// As [`world`].
#[inline]
pub fn self_comm() -> R<&'static Communicator> {
    predefined_comms().map(|c| &c.1)
}

/// Whether `MPI_Init` has completed and `MPI_Finalize` has not.
pub fn is_live() -> bool {
    PHASE.load(Ordering::SeqCst) == 1
}

/// Ends the job: every rank exits with `code` (through rwrun when initialized),
/// printing `message` first.
pub fn abort_job(code: c_int, message: &str) -> ! {
    flush_stdio();
    let g = ENV.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(Env {
        universe: Some(u), ..
    }) = &*g
    {
        u.abort(code, message)
    }
    eprintln!("{message}");
    std::process::exit(if code == 0 { 1 } else { code })
}

/// Flushes the C program's `stdout` and `stderr` (what it printed before an abort): rwrun
/// ends every rank as soon as it hears of the abort, before `exit` would flush stdio.
/// A stream another thread holds locked (a thread blocked in a read or write on it) is
/// skipped rather than waited for, so an abort never hangs here; `fflush(NULL)` would
/// lock every open stream, input streams included.
fn flush_stdio() {
    unsafe extern "C" {
        static mut stdout: *mut libc::FILE;
        static mut stderr: *mut libc::FILE;
        fn ftrylockfile(f: *mut libc::FILE) -> c_int;
        fn funlockfile(f: *mut libc::FILE);
        fn fflush_unlocked(f: *mut libc::FILE) -> c_int;
    }
    // SAFETY: glibc's `stdout`/`stderr` are the C library's own streams, valid for the
    // life of the process; each is flushed only while this thread holds its lock.
    unsafe {
        for f in [stdout, stderr] {
            if !f.is_null() && ftrylockfile(f) == 0 {
                fflush_unlocked(f);
                funlockfile(f);
            }
        }
    }
}

fn do_init(required: c_int) -> R<c_int> {
    if PHASE.load(Ordering::SeqCst) != 0 {
        return Err(err(
            MPI_ERR_OTHER,
            "MPI_Init called twice (or after MPI_Finalize); fix: initialize MPI once per process",
        ));
    }
    let u = rankwire::init()?;
    let world = u.world();
    // The collective steps after the runtime started (MPI_COMM_SELF's split, the
    // memory-kind setup). A failure there (a peer died, or faster ranks already revoked
    // the world over an erroneous collective) ends the job with its own message: as an
    // error returned from here, the runtime would be dropped unfinalized, and rwrun would
    // report that instead of the cause.
    let setup = || -> R<rankwire::Communicator> {
        let selfc = world.split(Some(world.rank() as u32), 0)?.ok_or_else(|| {
            err(
                MPI_ERR_INTERN,
                "MPI_COMM_SELF's split gave this rank no communicator",
            )
        })?;
        crate::memkind::at_init(&world)?;
        Ok(selfc)
    };
    let selfc = match setup() {
        Ok(c) => c,
        Err(e) => {
            flush_stdio();
            u.abort(
                1,
                &format!(
                    "rankwire (MPI ABI): MPI_Init failed after the runtime started: {} ({})",
                    e.msg,
                    crate::error::class_name(e.class)
                ),
            )
        }
    };
    let provided = required.clamp(MPI_THREAD_SINGLE, PROVIDED_MAX);
    WTIME_T0.get_or_init(Instant::now);
    let _ = PREDEFINED_COMMS.set((world, selfc));
    *ENV.lock().unwrap_or_else(|e| e.into_inner()) = Some(Env {
        universe: Some(u),
        thread_level: provided,
        main_thread: std::thread::current().id(),
    });
    PHASE.store(1, Ordering::SeqCst);
    Ok(provided)
}

/// `MPI_Init`: joins the job (rwrun, Slurm, or a singleton when started alone).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    guard(MPI_COMM_WORLD, || do_init(MPI_THREAD_SINGLE).map(|_| ()))
}

/// `MPI_Init_thread`: as `MPI_Init`; `*provided` = `required` up to
/// `MPI_THREAD_MULTIPLE` (rankwire's runtime is thread-safe).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    guard(MPI_COMM_WORLD, || {
        let p = do_init(required)?;
        // SAFETY: C caller's pointer.
        unsafe { put(provided, p, "provided") }
    })
}

/// `MPI_Finalize`: the clean end of this rank (collective over the world).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    guard(MPI_COMM_WORLD, || {
        env(|_| ())?;
        crate::request::drain_detached();
        crate::request::finalize_check();
        let u = {
            let mut g = ENV.lock().unwrap_or_else(|e| e.into_inner());
            g.as_mut().and_then(|e| e.universe.take())
        };
        PHASE.store(2, Ordering::SeqCst);
        if let Some(u) = u {
            u.finalize()?;
        }
        Ok(())
    })
}

/// `MPI_Initialized`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Initialized(flag: *mut c_int) -> c_int {
    // SAFETY: C caller's pointer.
    guard(MPI_COMM_SELF, || unsafe {
        put(flag, (PHASE.load(Ordering::SeqCst) >= 1) as c_int, "flag")
    })
}

/// `MPI_Finalized`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Finalized(flag: *mut c_int) -> c_int {
    // SAFETY: C caller's pointer.
    guard(MPI_COMM_SELF, || unsafe {
        put(flag, (PHASE.load(Ordering::SeqCst) == 2) as c_int, "flag")
    })
}

/// `MPI_Query_thread`: the level granted at init.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        let l = env(|e| e.thread_level)?;
        // SAFETY: C caller's pointer.
        unsafe { put(provided, l, "provided") }
    })
}

/// `MPI_Is_thread_main`: whether the caller is the thread that called `MPI_Init`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Is_thread_main(flag: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        let m = env(|e| e.main_thread == std::thread::current().id())?;
        // SAFETY: C caller's pointer.
        unsafe { put(flag, m as c_int, "flag") }
    })
}

/// `MPI_Abort`: ends every rank of the job with `errorcode` (rwrun exits with it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Abort(_comm: MPI_Comm, errorcode: c_int) -> c_int {
    abort_job(
        errorcode,
        &format!("MPI_Abort called with error code {errorcode}"),
    )
}

/// The origin of [`MPI_Wtime`]: set by `MPI_Init`, or by an earlier `MPI_Wtime`.
static WTIME_T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// `MPI_Wtime`: seconds since `MPI_Init` (or since the first call, when called before
/// it; one origin for the whole process). The monotonic clock, read without a lock (OSU
/// times each collective call between two of these); not synchronized across ranks, so
/// `MPI_WTIME_IS_GLOBAL` is false.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Wtime() -> f64 {
    WTIME_T0.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// `MPI_Wtick`: resolution of `MPI_Wtime` in seconds (the monotonic clock's, 1 ns).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Wtick() -> f64 {
    1e-9
}

/// Copies `s` into the C buffer `buf` of `cap` bytes (NUL-terminated, truncated to
/// `cap - 1`) and sets `*len` to the bytes written without the NUL.
///
/// # Safety
/// `buf` valid for `cap` bytes, `len` for an int.
pub unsafe fn put_str(buf: *mut c_char, cap: usize, len: *mut c_int, s: &str) -> R {
    if buf.is_null() || len.is_null() {
        return Err(err(
            MPI_ERR_ARG,
            "string buffer or length is a null pointer",
        ));
    }
    let n = s.len().min(cap.saturating_sub(1));
    // SAFETY: caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
        *len = n as c_int;
    }
    Ok(())
}

/// `MPI_Get_processor_name`: the host name (at most `MPI_MAX_PROCESSOR_NAME - 1`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        let mut b = [0u8; 256];
        // SAFETY: b is 256 bytes.
        let h = unsafe {
            if libc::gethostname(b.as_mut_ptr() as *mut c_char, b.len()) == 0 {
                let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                String::from_utf8_lossy(&b[..n]).into_owned()
            } else {
                "localhost".into()
            }
        };
        // SAFETY: C caller's buffers.
        unsafe { put_str(name, MPI_MAX_PROCESSOR_NAME as usize, resultlen, &h) }
    })
}

/// `MPI_Get_version`: 5.0 (the standard this ABI is of).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        // SAFETY: C caller's pointers.
        unsafe {
            put(version, MPI_VERSION, "version")?;
            put(subversion, MPI_SUBVERSION, "subversion")
        }
    })
}

/// `MPI_Get_library_version`: "rankwire <version> (MPI standard ABI 1.0)".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_library_version(
    version: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let s = format!(
            "rankwire {} (MPI {}.{}, standard ABI {}.{}, GPU-aware: CUDA)",
            env!("CARGO_PKG_VERSION"),
            MPI_VERSION,
            MPI_SUBVERSION,
            MPI_ABI_VERSION,
            MPI_ABI_SUBVERSION
        );
        // SAFETY: C caller's buffers.
        unsafe {
            put_str(
                version,
                MPI_MAX_LIBRARY_VERSION_STRING as usize,
                resultlen,
                &s,
            )
        }
    })
}

/// `MPI_Abi_get_version`: the ABI version this library implements (1.0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Abi_get_version(major: *mut c_int, minor: *mut c_int) -> c_int {
    guard(MPI_COMM_SELF, || {
        // SAFETY: C caller's pointers.
        unsafe {
            put(major, MPI_ABI_VERSION, "abi_major")?;
            put(minor, MPI_ABI_SUBVERSION, "abi_minor")
        }
    })
}

/// `MPIX_Query_cuda_support`: 1 when this build has CUDA support and a CUDA driver
/// loads (device buffers are then accepted by every call), else 0.
#[unsafe(no_mangle)]
pub extern "C" fn MPIX_Query_cuda_support() -> c_int {
    rankwire::gpu::device_count()
        .map(|n| n > 0)
        .unwrap_or(false) as c_int
}

/// `MPI_Pcontrol` (MPI 4.1 §15.2.4): rankwire has no profiling layer of its own, and
/// the standard gives the call no effect without one; `level` is accepted and ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Pcontrol(_level: c_int) -> c_int {
    MPI_SUCCESS
}
