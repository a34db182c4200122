//! Window objects (MPI 4.1 §12.2): creation, allocation, dynamic windows with
//! attach/detach, free, and the window's group and attributes.
//!
//! Only the window objects exist: the RMA operations (put, get, accumulate, the
//! synchronization calls) are not implemented and are absent from the library. Programs
//! that create windows without communicating through them (OSU's common code does, for
//! its one-sided benchmarks) link and run; a program that calls `MPI_Put` fails to link.
//! Creation and free are collective over the window's communicator (a barrier), as the
//! standard requires.

use crate::comm::lookup;
use crate::consts::*;
use crate::error::{R, err, guard, put};
use crate::handles::{Kind, Table};
use rankwire::Communicator;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

/// How a window was made (`MPI_WIN_CREATE_FLAVOR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// `MPI_Win_create`: the user's memory.
    Create,
    /// `MPI_Win_allocate`: memory allocated here (freed with the window).
    Allocate,
    /// `MPI_Win_create_dynamic`: memory attached later.
    Dynamic,
}

/// A window.
pub struct Window {
    comm: Communicator,
    base: usize,
    disp_unit: c_int,
    flavor: Flavor,
    /// Regions attached to a dynamic window (address, bytes).
    attached: Mutex<Vec<(usize, usize)>>,
    /// Attribute values `MPI_Win_get_attr` points to (valid while the window lives).
    attr_size: MPI_Aint,
    attr_flavor: c_int,
    attr_model: c_int,
}

static WINS: Table<Window> = Table::new(Kind::Win);

fn new_window(
    comm: MPI_Comm,
    base: usize,
    size: MPI_Aint,
    disp_unit: c_int,
    flavor: Flavor,
) -> R<MPI_Win> {
    let c = lookup(comm)?;
    if size < 0 || disp_unit <= 0 {
        return Err(err(
            MPI_ERR_ARG,
            format!(
                "window of {size} bytes with displacement unit {disp_unit}: the size must be >= 0 and the unit > 0"
            ),
        ));
    }
    // A private communicator (collective, as window creation is).
    let wc = c.dup()?;
    wc.barrier()?;
    let attr_flavor = match flavor {
        Flavor::Create => MPI_WIN_FLAVOR_CREATE,
        Flavor::Allocate => MPI_WIN_FLAVOR_ALLOCATE,
        Flavor::Dynamic => MPI_WIN_FLAVOR_DYNAMIC,
    };
    Ok(WINS.insert(Window {
        comm: wc,
        base,
        disp_unit,
        flavor,
        attached: Mutex::new(Vec::new()),
        attr_size: size,
        attr_flavor,
        attr_model: MPI_WIN_UNIFIED,
    }))
}

fn lookup_win(w: MPI_Win) -> R<std::sync::Arc<Window>> {
    WINS.get(w).ok_or_else(|| {
        err(
            MPI_ERR_WIN,
            format!("window {w:#x} is not a window (MPI_WIN_NULL, freed, or unknown)"),
        )
    })
}

/// `MPI_Win_create`: a window over `size` bytes at `base` on each rank (collective).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_create(
    base: *mut c_void,
    size: MPI_Aint,
    disp_unit: c_int,
    _info: MPI_Info,
    comm: MPI_Comm,
    win: *mut MPI_Win,
) -> c_int {
    guard(comm, || {
        let w = new_window(comm, base as usize, size, disp_unit, Flavor::Create)?;
        // SAFETY: C caller's pointer.
        unsafe { put(win, w, "win") }
    })
}

/// `MPI_Win_allocate`: allocates `size` bytes (64-byte aligned) on each rank and returns
/// their address in `*(void**)baseptr`; freed by `MPI_Win_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_allocate(
    size: MPI_Aint,
    disp_unit: c_int,
    _info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    win: *mut MPI_Win,
) -> c_int {
    guard(comm, || {
        if baseptr.is_null() || size < 0 {
            return Err(err(
                MPI_ERR_ARG,
                format!(
                    "MPI_Win_allocate of {size} bytes into a null baseptr or with a negative size"
                ),
            ));
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: posix_memalign with a valid out-pointer.
        if unsafe { libc::posix_memalign(&mut p, 64, (size as usize).max(1)) } != 0 {
            return Err(err(
                MPI_ERR_NO_MEM,
                format!("MPI_Win_allocate: no memory for {size} bytes"),
            ));
        }
        let w = match new_window(comm, p as usize, size, disp_unit, Flavor::Allocate) {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: allocated above.
                unsafe { libc::free(p) };
                return Err(e);
            }
        };
        // SAFETY: baseptr is a `void**` in C; win the caller's pointer.
        unsafe {
            *(baseptr as *mut *mut c_void) = p;
            put(win, w, "win")
        }
    })
}

/// `MPI_Win_create_dynamic`: a window with no memory; regions are attached later.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_create_dynamic(
    _info: MPI_Info,
    comm: MPI_Comm,
    win: *mut MPI_Win,
) -> c_int {
    guard(comm, || {
        let w = new_window(comm, 0, 0, 1, Flavor::Dynamic)?;
        // SAFETY: C caller's pointer.
        unsafe { put(win, w, "win") }
    })
}

/// `MPI_Win_attach`: attaches `size` bytes at `base` to a dynamic window.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_attach(win: MPI_Win, base: *mut c_void, size: MPI_Aint) -> c_int {
    guard(MPI_COMM_SELF, || {
        let w = lookup_win(win)?;
        if w.flavor != Flavor::Dynamic {
            return Err(err(
                MPI_ERR_RMA_FLAVOR,
                "MPI_Win_attach on a window not made by MPI_Win_create_dynamic",
            ));
        }
        if size < 0 {
            return Err(err(MPI_ERR_ARG, format!("attach of {size} bytes")));
        }
        w.attached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((base as usize, size as usize));
        Ok(())
    })
}

/// `MPI_Win_detach`: detaches the region attached at `base`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_detach(win: MPI_Win, base: *const c_void) -> c_int {
    guard(MPI_COMM_SELF, || {
        let w = lookup_win(win)?;
        let mut a = w.attached.lock().unwrap_or_else(|e| e.into_inner());
        let i = a
            .iter()
            .position(|&(b, _)| b == base as usize)
            .ok_or_else(|| {
                err(
                    MPI_ERR_RMA_RANGE,
                    format!("no region is attached at {base:p}"),
                )
            })?;
        a.remove(i);
        Ok(())
    })
}

/// `MPI_Win_free` (collective): frees memory of `MPI_Win_allocate`; `*win` becomes
/// `MPI_WIN_NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_free(win: *mut MPI_Win) -> c_int {
    guard(MPI_COMM_WORLD, || {
        if win.is_null() {
            return Err(err(MPI_ERR_ARG, "win is a null pointer"));
        }
        // SAFETY: non-null.
        let h = unsafe { *win };
        let w = lookup_win(h)?;
        w.comm.barrier()?;
        WINS.remove(h);
        if w.flavor == Flavor::Allocate {
            // SAFETY: memory from posix_memalign in MPI_Win_allocate.
            unsafe { libc::free(w.base as *mut c_void) };
        }
        // SAFETY: non-null.
        unsafe { *win = MPI_WIN_NULL };
        Ok(())
    })
}

/// `MPI_Win_get_group`: the group of the window's communicator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_get_group(win: MPI_Win, group: *mut MPI_Group) -> c_int {
    guard(MPI_COMM_SELF, || {
        let w = lookup_win(win)?;
        // SAFETY: C caller's pointer.
        unsafe { put(group, crate::group::new_group(w.comm.group()), "group") }
    })
}

/// `MPI_Win_get_attr`: `MPI_WIN_BASE` (the address), `MPI_WIN_SIZE` (bytes, an
/// `MPI_Aint`), `MPI_WIN_DISP_UNIT`, `MPI_WIN_CREATE_FLAVOR`, `MPI_WIN_MODEL`
/// (`MPI_WIN_UNIFIED`): pointers to values kept with the window (valid while it
/// lives), per MPI 4.1 §12.2.6.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Win_get_attr(
    win: MPI_Win,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    guard(MPI_COMM_SELF, || {
        let w = lookup_win(win)?;
        if value.is_null() || flag.is_null() {
            return Err(err(MPI_ERR_ARG, "attribute_val or flag is a null pointer"));
        }
        let p = match keyval {
            MPI_WIN_BASE => Some(w.base),
            MPI_WIN_SIZE => Some(&w.attr_size as *const MPI_Aint as usize),
            MPI_WIN_DISP_UNIT => Some(&w.disp_unit as *const c_int as usize),
            MPI_WIN_CREATE_FLAVOR => Some(&w.attr_flavor as *const c_int as usize),
            MPI_WIN_MODEL => Some(&w.attr_model as *const c_int as usize),
            _ => None,
        };
        // SAFETY: checked non-null; `value` is a `void**` in C.
        unsafe {
            if let Some(p) = p {
                *(value as *mut usize) = p;
            }
            *flag = p.is_some() as c_int;
        }
        Ok(())
    })
}
