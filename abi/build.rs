//! Gives the shared library the standard ABI's soname, `libmpi_abi.so.1` (MPI 5.0,
//! chapter "Application Binary Interface": the library name programs link against), and
//! writes `$OUT_DIR/pmpi.rs`, the profiling interface (MPI 5.0 §15.2): for every `MPI_`
//! function listed in `exports.txt`, a `PMPI_<name>` that jumps to it (see
//! `src/pmpi.rs`).
use std::fmt::Write as _;

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi_abi.so.1");
    // References from inside the library to its own exported functions (the PMPI_
    // trampolines' jumps) bind to its own definitions: a tool library that defines
    // MPI_Send and calls PMPI_Send reaches rankwire's MPI_Send, not itself again.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=exports.txt");
    let list = std::fs::read_to_string("exports.txt").expect("read abi/exports.txt");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let jump = match arch.as_str() {
        "x86_64" => "jmp",
        "aarch64" => "b",
        // Elsewhere: no PMPI_ names (the C declarations in mpi.h stay unresolved).
        _ => "",
    };
    let mut out = String::new();
    for name in list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        assert!(
            name.starts_with("MPI_") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "abi/exports.txt: `{name}` is not an MPI_ function name"
        );
        if jump.is_empty() {
            continue;
        }
        writeln!(
            out,
            "/// `P{name}`: the profiling-interface name of [`{name}`](https://www.mpi-forum.org/docs/) (jumps to it).\n\
             #[unsafe(naked)]\n#[unsafe(no_mangle)]\n\
             pub unsafe extern \"C\" fn P{name}() {{\n    core::arch::naked_asm!(\"{jump} {name}\");\n}}"
        )
        .unwrap();
    }
    let dst = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("pmpi.rs");
    std::fs::write(dst, out).expect("write pmpi.rs");
}
