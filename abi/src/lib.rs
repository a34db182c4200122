//! rankwire's implementation of the MPI 5.0 standard ABI: `libmpi_abi.so.1` and its
//! `mpi.h` (in `include/`), so that C programs, mpi4py and rsmpi built against the
//! standard ABI run on rankwire unchanged.
//!
//! Every exported function is `extern "C"`, catches panics at the boundary (a panic
//! becomes `MPI_ERR_INTERN` through the communicator's error handler, never an unwind
//! into C), and validates its handles. Functions that are not implemented are absent
//! from the library (a link error, or "not available" in mpi4py's weak-symbol build),
//! never stubs.
#![allow(
    non_snake_case,
    non_upper_case_globals,
    non_camel_case_types,
    unreachable_pub
)]
#![allow(clippy::missing_safety_doc)]
// MPI's C signatures have as many arguments as the standard gives them.
#![allow(clippy::too_many_arguments)]

pub mod attr;
pub mod buf;
pub mod coll;
pub mod coll_api;
pub mod coll_buf;
pub mod coll_red;
pub mod comm;
#[rustfmt::skip]
pub mod consts;
pub mod datatype;
pub mod dtype_ctor;
pub mod dtype_ctor_c;
pub mod dtype_layout;
pub mod dtype_pack;
pub mod dtype_query;
pub mod env;
pub mod error;
pub mod group;
pub mod handles;
pub mod info;
pub mod memkind;
pub mod op;
pub mod p2p;
pub mod pmpi;
pub mod request;
pub mod topo;
pub mod win;
