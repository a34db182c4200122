//! Gives the shared library the standard ABI's soname, `libmpi_abi.so.1` (MPI 5.0,
//! chapter "Application Binary Interface": the library name programs link against).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi_abi.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
