//! Host and device buffers in one collective: the agreement that keeps a legal MPI
//! program from deadlocking.
//!
//! MPI lets every rank of a collective pass its own kind of memory: rank 0 a CUDA
//! device buffer, rank 1 host memory. Five collectives of this library run on
//! rankwire's device collectives when their buffers are device memory (`MPI_Bcast`,
//! `MPI_Allgather`, `MPI_Allreduce`, `MPI_Reduce`, `MPI_Reduce_scatter_block`:
//! peer-memory kernels inside a node, device-side schedules elsewhere), and those
//! exchange other messages than the host collectives. Ranks that chose differently
//! would wait for each other (UCC's maintainers name the same deadlock and the same
//! cure, a small allreduce before the collective: openucx/ucc#1039).
//!
//! So, where a rank of the communicator could pass device memory, every rank first
//! agrees, in one host allreduce (minimum) of one byte, whether all of them can take
//! the device path; if one cannot, all take the host path (a rank with device buffers
//! stages them through host memory, as for every other collective). The agreement is
//! a blocking exchange, so only blocking calls make it: a nonblocking or persistent
//! call must not wait for the other ranks at its start (MPI 4.1 §6.12: a program may
//! post it and then wait on a point-to-point message that another rank sends before
//! its own call), and takes the host path (staged) where an agreement would be needed.
//!
//! Where it is needed (`RANKWIRE_ABI_MEMORY_AGREEMENT`, checked with the other
//! settings):
//! - `auto` (default): where some rank of the job can load the CUDA driver, decided
//!   at `MPI_Init` by one allreduce (maximum) of "this rank can load the driver"; so
//!   never in a job without a GPU driver anywhere (one load of a flag per call).
//! - `on`: on every communicator (tests of the agreement on host-only machines).
//! - `off`: never: the program promises that in each of these collectives either
//!   every rank passes device memory or none does (NCCL's model); mixing then
//!   deadlocks, as with UCC.
//!
//! MPI 4.1's memory-kind assertion (§11.4.3 and the Memory Allocation Kinds side
//! document): `mpi_assert_memory_alloc_kinds` set on a communicator with
//! `MPI_Comm_set_info` or `MPI_Comm_dup_with_info` to kinds that all take one path
//! here (only `cuda:device`, or only host kinds: `system`, `mpi`, `cuda:host`,
//! `cuda:managed`) turns the agreement off on that communicator.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rankwire::Communicator;

use crate::coll::Mode;
use crate::consts::*;
use crate::error::{R, err};

/// The info key of MPI 4.1's memory-kind assertion on communicators.
pub const ASSERT_KEY: &str = "mpi_assert_memory_alloc_kinds";

/// The setting that chooses where the agreement runs.
pub const SETTING: &str = "RANKWIRE_ABI_MEMORY_AGREEMENT";

/// The memory-kind assertion a program set on one communicator.
#[derive(Clone)]
struct Asserted {
    /// The value of [`ASSERT_KEY`].
    value: String,
    /// It names kinds of one path only.
    single_path: bool,
}

static ASSERTED: Mutex<Option<HashMap<MPI_Comm, Asserted>>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut HashMap<MPI_Comm, Asserted>) -> T) -> T {
    let mut g = ASSERTED.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// Whether collectives agree (outside communicators with a one-path assertion):
/// decided at `MPI_Init`, the same on every rank.
static AGREE: AtomicBool = AtomicBool::new(false);

/// Decides at `MPI_Init` whether this job's collectives agree first: reads
/// [`SETTING`] and, for `auto`, runs one allreduce (maximum) over `world` of whether
/// each rank can load the CUDA driver. Every rank calls it.
///
/// # Errors
/// Those of the allreduce.
pub fn at_init(world: &Communicator) -> R {
    let agree = match rankwire::settings::raw(SETTING).as_deref().map(str::trim) {
        Some("on" | "1") => true,
        Some("off" | "0") => false,
        _ => {
            let mine = [u8::from(rankwire::gpu::available())];
            let mut any = [0u8];
            world.allreduce(&mine, &mut any, rankwire::Op::Max)?;
            any[0] != 0
        }
    };
    AGREE.store(agree, Ordering::Relaxed);
    Ok(())
}

/// Whether every kind in `value` (MPI 4.1's comma-separated `kind[:restrictor]`
/// list) takes the same path here: all `cuda:device`, or all host memory.
///
/// # Errors
/// `MPI_ERR_INFO` for an empty list.
fn single_path(value: &str) -> R<bool> {
    let kinds: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .collect();
    if kinds.is_empty() {
        return Err(err(
            MPI_ERR_INFO,
            format!(
                "{ASSERT_KEY} is empty; fix: list the memory kinds the communicator's buffers use, e.g. \"cuda:device\" or \"system\""
            ),
        ));
    }
    // `cuda` without a restrictor is every CUDA kind, device memory included.
    let device = |k: &str| k == "cuda:device" || k == "cuda";
    let host = |k: &str| matches!(k, "system" | "mpi" | "cuda:host" | "cuda:managed");
    Ok(kinds.iter().all(|k| device(k) && *k != "cuda") || kinds.iter().all(|k| host(k)))
}

/// Records the memory-kind assertion of `info` on `comm` (`MPI_Comm_set_info`,
/// `MPI_Comm_dup_with_info`); an info without the key leaves `comm` as it was.
///
/// # Errors
/// `MPI_ERR_INFO` for a freed info handle or an empty kind list.
pub fn set_from_info(comm: MPI_Comm, info: MPI_Info) -> R {
    let Some(value) = crate::info::value_of(info, ASSERT_KEY)? else {
        return Ok(());
    };
    let single_path = single_path(&value)?;
    with(|m| m.insert(comm, Asserted { value, single_path }));
    Ok(())
}

/// The assertion set on `comm`, for `MPI_Comm_get_info`.
pub fn asserted(comm: MPI_Comm) -> Option<String> {
    with(|m| m.get(&comm).map(|a| a.value.clone()))
}

/// Forgets a freed communicator.
pub fn forget(comm: MPI_Comm) {
    with(|m| m.remove(&comm));
}

/// Whether this call of one of the five collectives takes the device path, given
/// that this rank's buffers allow it (`mine`). Every rank of `comm` must call it, with
/// whatever buffers it has, before either path sends anything.
///
/// # Errors
/// Those of the agreement's host allreduce (the communicator's ranks, the transport).
pub fn device_path(c: &Communicator, comm: MPI_Comm, mode: Mode, mine: bool) -> R<bool> {
    if !AGREE.load(Ordering::Relaxed) || c.size() < 2 {
        return Ok(mine);
    }
    if with(|m| m.get(&comm).is_some_and(|a| a.single_path)) {
        return Ok(mine);
    }
    if mode != Mode::Block {
        return Ok(false);
    }
    let v = [u8::from(mine)];
    let mut all = [0u8];
    c.allreduce(&v, &mut all, rankwire::Op::Min)?;
    Ok(all[0] == 1)
}

#[cfg(test)]
mod tests {
    use super::single_path;

    #[test]
    fn one_path_kind_lists() {
        assert!(single_path("cuda:device").unwrap());
        assert!(single_path("system,mpi").unwrap());
        assert!(single_path(" system , cuda:host,cuda:managed ").unwrap());
        assert!(!single_path("system,cuda:device").unwrap());
        assert!(!single_path("cuda").unwrap());
        assert!(!single_path("cuda:device,cuda").unwrap());
        assert!(!single_path("rocm:device").unwrap());
        assert!(single_path(" , ").is_err());
    }
}
