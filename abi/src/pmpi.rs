//! The profiling interface (MPI 5.0 §15.2): every exported `MPI_` function also exists
//! as `PMPI_<name>`, so that a tool (a tracer, a profiler) can define `MPI_Send` itself,
//! record the call, and reach rankwire's implementation through `PMPI_Send`.
//!
//! `build.rs` generates one trampoline per name listed in `abi/exports.txt`: a naked
//! function whose only instruction jumps to the `MPI_` function, so the arguments (any
//! signature) and the return value pass untouched. The library is linked with
//! `-Bsymbolic-functions`, so that jump binds to rankwire's own definition even when a
//! program or tool interposes `MPI_<name>`. `tests/abi.rs` checks that the list and
//! the library's exports agree and runs a C program that interposes MPI functions.
//! On architectures other than x86_64 and aarch64 there are no `PMPI_` names.

include!(concat!(env!("OUT_DIR"), "/pmpi.rs"));
