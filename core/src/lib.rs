//! rankwire: MPI-style message passing for Rust, with a GPU-aware transport.
//!
//! Programs start N ranks with the launcher `rwrun` (on one machine, inside a Slurm
//! allocation, or on hosts reached by a launch agent) or directly with
//! `srun --mpi=pmi2` (PMI-2 wire-up, [`bootstrap::pmi`]); ranks exchange messages by rank
//! and tag with MPI's matching semantics (MPI 4.1 chapter 3). Run without a launcher, a
//! program is a world of size 1.
//!
//! # Quick start
//! ```no_run
//! let universe = rankwire::init()?;
//! let world = universe.world();
//! let (rank, size) = (world.rank(), world.size());
//! if rank == 0 {
//!     for r in 1..size {
//!         world.send(&[r as u64 * 10], r, 7)?;
//!     }
//! } else {
//!     let mut v = [0u64; 1];
//!     let status = world.recv(&mut v, 0, 7)?;
//!     assert_eq!((v[0], status.source, status.len_bytes), (rank as u64 * 10, 0, 8));
//! }
//! # Ok::<(), rankwire::Error>(())
//! ```
//! Build and run: `cargo build --release && target/release/rwrun -n 4 target/release/your-program`.
//!
//! # Buffers
//! Buffers are slices of plain-old-data elements ([`Pod`]: integers, floats, and
//! `#[repr(C)]` structs of them with `#[derive(Pod, Zeroable)]` from the re-exported
//! [`bytemuck`]). Lengths in [`Status`] are bytes; [`Status::count`] converts to
//! elements. Messages of more than 2^31 bytes work.
//!
//! # Communicators and collectives
//! [`Communicator::dup`], [`Communicator::split`], [`Communicator::split_shared`] and
//! [`Communicator::create`] make communicators with their own context ([`group`]).
//! Every MPI collective is a method in blocking and nonblocking form
//! (`allreduce`/`iallreduce`, …), with built-in [`Op`]s over [`Reducible`] element
//! types (integers, f16, bf16, f32, f64, [`Loc`] pairs) or a [`UserOp`]; algorithms
//! and their reduction order are described in [`coll`].
//! ```no_run
//! # let universe = rankwire::init()?;
//! # let world = universe.world();
//! use rankwire::Op;
//! let mut sum = [0.0f64; 4];
//! world.allreduce(&[1.0, 2.0, 3.0, 4.0], &mut sum, Op::Sum)?;
//! let row = world.split(Some(world.rank() as u32 / 2), 0)?.expect("color given");
//! row.barrier()?;
//! # Ok::<(), rankwire::Error>(())
//! ```
//!
//! # Layers
//! [`matching`], [`protocol`] and [`wire`] are sans-IO (no sockets, threads or clocks);
//! the progress engine is the only code that calls transports
//! ([`rankwire_transports`]); [`bootstrap`] talks to the launcher or the PMI server.

mod abort;
pub mod bootstrap;
pub mod coll;
mod comm;
mod comm_state;
mod context_id;
mod device;
mod device_path;
mod engine;
pub mod error;
pub mod explain;
#[doc(hidden)]
pub mod fuzz_entry;
mod gdr;
pub mod gdr_standin;
pub mod group;
pub mod matching;
pub mod protocol;
mod request;
mod requests;
mod runtime;
mod select;
mod settings_check;
mod stream_p2p;
mod universe;
pub mod watchdog;
pub mod wire;

pub use bytemuck;
pub use bytemuck::{Pod, Zeroable};
pub use coll::ops::{Datatype, Loc, Op, ReduceOp, Reducible, UserOp};
pub use coll::{CollRequest, DeviceChannels, wait_all_coll};
pub use comm::{ANY_SOURCE, ANY_TAG, Communicator, Message, Source, TAG_UB, Tag};
/// cudarc, re-exported so applications use the same version as rankwire (feature
/// `cuda`).
#[cfg(feature = "cuda")]
pub use cudarc;
pub use device::{DeviceMemory, DeviceMemoryMut};
pub use error::{Error, MatchError, Result};
pub use group::{ContextId, Group, GroupRelation};
pub use half::{bf16, f16};
pub use protocol::Status;
/// The CUDA leaf crate (device buffers, pointer classification); functional with the
/// `cuda` feature, otherwise every call reports that GPU support is not built.
pub use rankwire_gpu as gpu;
pub use rankwire_transports::rdma::RdmaStats;
pub use rankwire_transports::{RegCacheStats, settings};
pub use request::{
    CancelId, Detached, RawRequest, Request, test_all, wait_all, wait_all_in_place,
    wait_all_results, wait_any, wait_complete,
};
pub use requests::RequestSet;
pub use universe::{Universe, init};
