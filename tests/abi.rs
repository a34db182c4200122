//! The MPI standard ABI (`abi/`, issue 20): C programs under `abi/tests/c/` compiled
//! with our `mpicc` (our `mpi.h`, linked to our `libmpi_abi.so.1`) and run under rwrun.
//!
//! Each program's first line says at which rank counts it runs
//! (`/* rankwire-test: ranks=2,4 */`); it checks its own results, exits 0 only when
//! all passed, and rank 0 prints `<name>: ok, K checks`. The install prefix is
//! `target/abi-prefix` (`scripts/install.sh --debug`).

use rankwire_tests::{bin_dir, rwrun};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The install prefix with bin/mpicc, include/mpi.h, lib/libmpi_abi.so.1, refreshed
/// from the current build (`scripts/install.sh --debug`, an up-to-date cargo build
/// then copies) under a lock, so that a test never runs a stale library.
fn prefix() -> PathBuf {
    let target = bin_dir().parent().unwrap().to_path_buf();
    let p = target.join("abi-prefix");
    let lock = target.join("abi-prefix.lock");
    // `flock` serializes the tests (nextest runs each in its own process).
    let st = Command::new("flock")
        .arg(&lock)
        .arg("sh")
        .arg("-c")
        .arg(format!(
            "'{r}/scripts/install.sh' --debug --prefix '{p}' >/dev/null",
            p = p.display(),
            r = repo().display()
        ))
        .status()
        .expect("run flock + scripts/install.sh");
    assert!(
        st.success(),
        "scripts/install.sh --debug --prefix {} failed",
        p.display()
    );
    p
}

/// Ranks line of a C test program.
fn ranks_of(src: &str) -> Vec<usize> {
    let first = src.lines().next().unwrap_or("");
    let spec = first
        .split("ranks=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| {
            panic!("first line must be /* rankwire-test: ranks=... */, is {first:?}")
        });
    spec.split(',')
        .map(|x| x.parse().expect("rank count"))
        .collect()
}

/// Compiles `abi/tests/c/<name>.c` with our mpicc and runs it at each of its rank
/// counts; asserts exit 0 and the `ok` line.
fn run_c(name: &str) {
    let src_path = repo().join("abi/tests/c").join(format!("{name}.c"));
    let src = std::fs::read_to_string(&src_path).expect("read C test");
    let p = prefix();
    let out_dir = bin_dir().parent().unwrap().join("abi-tests");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(name);
    let o = Command::new(p.join("bin/mpicc"))
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src_path)
        .arg("-lm")
        .output()
        .expect("run mpicc");
    assert!(
        o.status.success(),
        "mpicc {name}.c failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    for n in ranks_of(&src) {
        let out = rwrun(["-n".to_string(), n.to_string(), exe.display().to_string()])
            .timeout(Duration::from_secs(120))
            .run();
        assert_eq!(
            out.code(),
            0,
            "{name} at {n} ranks failed\n--- stdout\n{}\n--- stderr\n{}",
            out.stdout,
            out.stderr
        );
        assert!(
            out.stdout.contains(&format!("{name}: ok")),
            "{name} at {n} ranks: no ok line\n{}",
            out.stdout
        );
    }
}

macro_rules! c_tests {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            run_c(stringify!($name));
        }
    )*};
}

c_tests!(
    hello,
    p2p_basic,
    p2p_modes,
    comm_group,
    comm_create_group,
    topo,
    datatype,
    coll_basic,
    coll_ops,
    coll_nb,
    coll_derived,
    edge_cases,
    mpi4_extras,
);

/// Every C program in abi/tests/c has a test above.
#[test]
fn every_c_program_is_listed() {
    let me = std::fs::read_to_string(repo().join("tests/abi.rs")).unwrap();
    let list = me
        .split("c_tests!(")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or("")
        .to_string();
    for e in std::fs::read_dir(repo().join("abi/tests/c")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "c") {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            assert!(
                list.split(',').any(|x| x.trim() == stem),
                "abi/tests/c/{stem}.c has no test: add it to c_tests! in tests/abi.rs"
            );
        }
    }
}
