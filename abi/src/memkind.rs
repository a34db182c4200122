//! Host and device buffers in one collective: the agreement that keeps a legal MPI
//! program from deadlocking.
//!
//! MPI lets every rank of a collective pass its own kind of memory: rank 0 a CUDA
//! device buffer, rank 1 host memory. Seven collectives of this library run on
//! rankwire's device collectives when their buffers are device memory (`MPI_Bcast`,
//! `MPI_Allgather`, `MPI_Allreduce`, `MPI_Reduce`, `MPI_Reduce_scatter_block`:
//! peer-memory kernels inside a node, device-side schedules elsewhere; `MPI_Scan`,
//! `MPI_Exscan`: device-side schedules), and those
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
//! `MPI_Comm_set_info` or `MPI_Comm_dup_with_info` turns the agreement off on that
//! communicator where every rank asserted kinds that all take the same path here (only
//! `cuda:device` on every rank, or only host kinds on every rank: `system`, `mpi`,
//! `cuda:host`, `cuda:managed`). The assertion is per process, so those calls compare
//! the ranks' assertions in one allreduce; `MPI_Comm_dup` does not carry it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rankwire::Communicator;

use crate::coll::Mode;
use crate::consts::*;
use crate::error::R;

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

/// The path that every kind in `value` (MPI 4.1's comma-separated `kind[:restrictor]`
/// list) takes here: 1 = host memory only (also the empty list: no kinds at all),
/// 2 = `cuda:device` only, 0 = both or unknown kinds.
fn path_class(value: &str) -> i32 {
    let kinds: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .collect();
    // `cuda` without a restrictor is every CUDA kind, host and device memory.
    let host = |k: &&str| matches!(*k, "system" | "mpi" | "cuda:host" | "cuda:managed");
    if kinds.iter().all(host) {
        1
    } else if kinds.iter().all(|k| *k == "cuda:device") {
        2
    } else {
        0
    }
}

/// Records the memory-kind assertion of `info` on `comm` (`MPI_Comm_set_info`,
/// `MPI_Comm_dup_with_info`; collective over `c`, the communicator of `comm`). The
/// assertion is per process (MPI 4.1 §11.4.3: the kinds "the calling MPI process"
/// will use), so the ranks compare theirs in one allreduce: the agreement is skipped
/// only where every rank asserted kinds of the same one path. An info without the key
/// leaves this rank's assertion as it was.
///
/// # Errors
/// `MPI_ERR_INFO` for a freed info handle (after the allreduce, which every rank
/// joins); those of the allreduce.
pub fn set_from_info(c: &Communicator, comm: MPI_Comm, info: MPI_Info) -> R {
    let looked = crate::info::value_of(info, ASSERT_KEY);
    let effective = match &looked {
        Ok(Some(v)) => Some(v.clone()),
        _ => with(|m| m.get(&comm).map(|a| a.value.clone())),
    };
    let class = effective.as_deref().map_or(0, path_class);
    // Minimum and maximum of the classes in one allreduce.
    let mine = [class, -class];
    let mut r = [0i32; 2];
    c.allreduce(&mine, &mut r, rankwire::Op::Min)?;
    let single_path = r[0] != 0 && r[0] == -r[1];
    with(|m| match effective {
        Some(value) => m.insert(comm, Asserted { value, single_path }),
        None => m.remove(&comm),
    });
    looked.map(|_| ())
}

/// The assertion set on `comm`, for `MPI_Comm_get_info`.
pub fn asserted(comm: MPI_Comm) -> Option<String> {
    with(|m| m.get(&comm).map(|a| a.value.clone()))
}

/// Forgets a freed communicator.
pub fn forget(comm: MPI_Comm) {
    with(|m| m.remove(&comm));
}

/// Whether [`device_path`] may communicate: the job has a CUDA driver on some rank (or
/// the agreement was forced on). `false`: every rank decides from its own buffers, so a
/// call with host buffers takes the host path without asking.
pub fn agreement_needed() -> bool {
    AGREE.load(Ordering::Relaxed)
}

/// Whether this call of one of the collectives with a device form (allreduce, reduce,
/// reduce_scatter_block, allgather, bcast, scan, exscan) takes the device path, given
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
    use super::path_class;

    #[test]
    fn one_path_kind_lists() {
        assert_eq!(path_class("cuda:device"), 2);
        assert_eq!(path_class("system,mpi"), 1);
        assert_eq!(path_class(" system , cuda:host,cuda:managed "), 1);
        assert_eq!(path_class(""), 1, "no kinds at all");
        assert_eq!(path_class(" , "), 1);
        assert_eq!(path_class("system,cuda:device"), 0);
        assert_eq!(path_class("cuda"), 0);
        assert_eq!(path_class("cuda:device,cuda"), 0);
        assert_eq!(path_class("rocm:device"), 0);
    }
}
