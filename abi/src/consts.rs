//! Types and constants of the MPI 5.0 standard ABI. PLACEHOLDER: a subset written by
#![allow(missing_docs)]
//! hand; `gen/gen_abi.py` replaces it with the generated file (same names and types).
use std::ffi::c_int;

/// `MPI_Comm` (a pointer-sized handle).
pub type MPI_Comm = usize;
/// `MPI_Datatype`.
pub type MPI_Datatype = usize;
/// `MPI_Op`.
pub type MPI_Op = usize;
/// `MPI_Request`.
pub type MPI_Request = usize;
/// `MPI_Group`.
pub type MPI_Group = usize;
/// `MPI_Errhandler`.
pub type MPI_Errhandler = usize;
/// `MPI_Message`.
pub type MPI_Message = usize;
/// `MPI_Info`.
pub type MPI_Info = usize;
/// `MPI_Aint` (intptr_t).
pub type MPI_Aint = isize;
/// `MPI_Count` (int64_t).
pub type MPI_Count = i64;
/// `MPI_Offset` (int64_t).
pub type MPI_Offset = i64;

/// `MPI_Status`: 8 ints, the three public fields then 5 for the implementation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MPI_Status {
    /// Source rank.
    pub MPI_SOURCE: c_int,
    /// Tag.
    pub MPI_TAG: c_int,
    /// Error class.
    pub MPI_ERROR: c_int,
    /// Implementation slots (rankwire: see `status.rs`).
    pub MPI_internal: [c_int; 5],
}

pub const MPI_COMM_NULL: MPI_Comm = 0x100;
pub const MPI_COMM_WORLD: MPI_Comm = 0x101;
pub const MPI_COMM_SELF: MPI_Comm = 0x102;
pub const MPI_ERRHANDLER_NULL: MPI_Errhandler = 0x140;
pub const MPI_ERRORS_ARE_FATAL: MPI_Errhandler = 0x141;
pub const MPI_ERRORS_ABORT: MPI_Errhandler = 0x142;
pub const MPI_ERRORS_RETURN: MPI_Errhandler = 0x143;
pub const MPI_REQUEST_NULL: MPI_Request = 0x180;
pub const MPI_DATATYPE_NULL: MPI_Datatype = 0x200;

pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_REQUEST: c_int = 7;
pub const MPI_ERR_ROOT: c_int = 8;
pub const MPI_ERR_GROUP: c_int = 9;
pub const MPI_ERR_OP: c_int = 10;
pub const MPI_ERR_ARG: c_int = 13;
pub const MPI_ERR_UNKNOWN: c_int = 14;
pub const MPI_ERR_TRUNCATE: c_int = 15;
pub const MPI_ERR_OTHER: c_int = 16;
pub const MPI_ERR_INTERN: c_int = 17;
pub const MPI_ERR_PENDING: c_int = 18;
pub const MPI_ERR_IN_STATUS: c_int = 19;
pub const MPI_ERR_NO_MEM: c_int = 39;
pub const MPI_ERR_PROC_ABORTED: c_int = 58;
pub const MPI_ERR_ERRHANDLER: c_int = 61;
pub const MPI_ERR_LASTCODE: c_int = 0x3fff;
pub const MPI_UNDEFINED: c_int = -32766;
pub const MPI_ANY_SOURCE: c_int = -1;
pub const MPI_ANY_TAG: c_int = -2;
pub const MPI_PROC_NULL: c_int = -3;
pub const MPI_ROOT: c_int = -4;
pub const MPI_IN_PLACE: usize = 1;
pub const MPI_BOTTOM: usize = 0;
pub const MPI_MAX_ERROR_STRING: c_int = 512;
pub const MPI_VERSION: c_int = 5;
pub const MPI_SUBVERSION: c_int = 0;
pub const MPI_ABI_VERSION: c_int = 1;
pub const MPI_ABI_SUBVERSION: c_int = 0;
pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1024;
pub const MPI_THREAD_SERIALIZED: c_int = 2048;
pub const MPI_THREAD_MULTIPLE: c_int = 4096;
pub const MPI_MAX_PROCESSOR_NAME: c_int = 256;
pub const MPI_MAX_LIBRARY_VERSION_STRING: c_int = 8192;

// added by dt
pub const MPI_MAX_OBJECT_NAME: c_int = 128;
pub const MPI_ORDER_C: c_int = 0xC;
pub const MPI_ORDER_FORTRAN: c_int = 0xF;
pub const MPI_COMBINER_NAMED: c_int = 101;
pub const MPI_COMBINER_DUP: c_int = 102;
pub const MPI_COMBINER_CONTIGUOUS: c_int = 103;
pub const MPI_COMBINER_VECTOR: c_int = 104;
pub const MPI_COMBINER_HVECTOR: c_int = 105;
pub const MPI_COMBINER_INDEXED: c_int = 106;
pub const MPI_COMBINER_HINDEXED: c_int = 107;
pub const MPI_COMBINER_INDEXED_BLOCK: c_int = 108;
pub const MPI_COMBINER_HINDEXED_BLOCK: c_int = 109;
pub const MPI_COMBINER_STRUCT: c_int = 110;
pub const MPI_COMBINER_SUBARRAY: c_int = 111;
pub const MPI_COMBINER_RESIZED: c_int = 116;
pub const MPI_TYPECLASS_INTEGER: c_int = 192;
pub const MPI_TYPECLASS_REAL: c_int = 193;
pub const MPI_TYPECLASS_COMPLEX: c_int = 194;
pub const MPI_INTEGER1: MPI_Datatype = 0x2c1;
pub const MPI_INTEGER2: MPI_Datatype = 0x2c9;
pub const MPI_INTEGER4: MPI_Datatype = 0x2d1;
pub const MPI_INTEGER8: MPI_Datatype = 0x2d9;
pub const MPI_REAL4: MPI_Datatype = 0x2d2;
pub const MPI_REAL8: MPI_Datatype = 0x2da;
pub const MPI_REAL16: MPI_Datatype = 0x2e2;
pub const MPI_COMPLEX8: MPI_Datatype = 0x2db;
pub const MPI_COMPLEX16: MPI_Datatype = 0x2e3;
pub const MPI_COMPLEX32: MPI_Datatype = 0x2eb;
pub const MPI_COMBINER_DARRAY: c_int = 112;
pub const MPI_DISTRIBUTE_NONE: c_int = 16;
pub const MPI_DISTRIBUTE_BLOCK: c_int = 17;
pub const MPI_DISTRIBUTE_CYCLIC: c_int = 18;
pub const MPI_DISTRIBUTE_DFLT_DARG: c_int = 19;
