//! `MPI_Comm`: the predefined `MPI_COMM_WORLD` / `MPI_COMM_SELF` and communicators
//! created by dup, split, create (MPI 4.1 chapter 7), on rankwire's [`Communicator`].

use crate::consts::*;
use crate::error::{R, err};
use crate::handles::{Kind, Table};
use rankwire::Communicator;

/// Created communicators.
pub static COMMS: Table<Communicator> = Table::new(Kind::Comm);

/// The communicator of handle `c`.
///
/// # Errors
/// `MPI_ERR_COMM` for `MPI_COMM_NULL`, a freed or unknown handle; `MPI_ERR_OTHER`
/// before `MPI_Init` / after `MPI_Finalize`.
pub fn lookup(c: MPI_Comm) -> R<Communicator> {
    match c {
        MPI_COMM_WORLD => crate::env::world(),
        MPI_COMM_SELF => crate::env::self_comm(),
        _ => COMMS.get(c).map(|x| (*x).clone()).ok_or_else(|| {
            err(
                MPI_ERR_COMM,
                format!(
                    "communicator {c:#x} is not a communicator (MPI_COMM_NULL, freed, or not a handle of this library); fix: pass MPI_COMM_WORLD, MPI_COMM_SELF or one from MPI_Comm_dup/split/create"
                ),
            )
        }),
    }
}

/// A rank argument of `comm` as `usize` (`MPI_PROC_NULL` is handled by the caller).
///
/// # Errors
/// `MPI_ERR_RANK` when out of `0..size`.
pub fn rank_arg(comm: &Communicator, r: i32, what: &str) -> R<usize> {
    if r < 0 || r as usize >= comm.size() {
        return Err(err(
            MPI_ERR_RANK,
            format!(
                "{what} rank {r} is out of range for a communicator of size {}; fix: pass a rank in 0..{} (or MPI_PROC_NULL)",
                comm.size(),
                comm.size()
            ),
        ));
    }
    Ok(r as usize)
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
