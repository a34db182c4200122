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

/// Compiles `abi/tests/c/<name>.c` with the wrapper `mpicc` into `exe`; panics with
/// the compiler's output when it fails.
fn compile_c(mpicc: &Path, name: &str, exe: &Path) {
    let src_path = repo().join("abi/tests/c").join(format!("{name}.c"));
    let o = Command::new(mpicc)
        .args(["-O1", "-Wall", "-o"])
        .arg(exe)
        .arg(&src_path)
        .arg("-lm")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", mpicc.display()));
    assert!(
        o.status.success(),
        "{} {name}.c failed:\n{}{}",
        mpicc.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The rank counts of `abi/tests/c/<name>.c` (its first line).
fn ranks_of_c(name: &str) -> Vec<usize> {
    let src_path = repo().join("abi/tests/c").join(format!("{name}.c"));
    ranks_of(&std::fs::read_to_string(&src_path).expect("read C test"))
}

/// Asserts that one run of C test `name` at `n` ranks exited 0 with its `ok` line.
fn assert_c_ok(name: &str, n: usize, how: &str, out: &rankwire_tests::RunOutput) {
    assert_eq!(
        out.code(),
        0,
        "{name} at {n} ranks ({how}) failed\n--- stdout\n{}\n--- stderr\n{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout.contains(&format!("{name}: ok")),
        "{name} at {n} ranks ({how}): no ok line\n{}",
        out.stdout
    );
}

/// A directory under the target directory for compiled C tests.
fn out_dir(sub: &str) -> PathBuf {
    let d = bin_dir().parent().unwrap().join(sub);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles `abi/tests/c/<name>.c` with our mpicc and runs it at each of its rank
/// counts; asserts exit 0 and the `ok` line.
fn run_c(name: &str) {
    let p = prefix();
    let exe = out_dir("abi-tests").join(name);
    compile_c(&p.join("bin/mpicc"), name, &exe);
    for n in ranks_of_c(name) {
        let out = rwrun(["-n".to_string(), n.to_string(), exe.display().to_string()])
            .timeout(Duration::from_secs(120))
            .run();
        assert_c_ok(name, n, "our mpicc, rwrun", &out);
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
    requests,
    pmpi,
    null_noncontig,
    request_errhandler,
    request_free,
    aliased_allreduce,
    coll_memkind,
    status_error,
    cancel_thread,
    cancel_send,
    coll_revoke,
    comm_free_pending,
    comm_threads,
    request_errors,
    shm_stress,
);

/// The memory-kind agreement forced on (`RANKWIRE_ABI_MEMORY_AGREEMENT=on`, as on a
/// job with a GPU driver): every blocking bcast, allgather, allreduce, reduce,
/// reduce_scatter_block, scan and exscan first runs the agreement's allreduce
/// (abi/src/memkind.rs);
/// the collective programs still give their right results, at every rank count.
/// (Mixed host and device buffers need a GPU: scripts/gpu-abi.sh, mixed_buffers.c.)
#[test]
fn collectives_with_the_memory_kind_agreement_forced_on() {
    let p = prefix();
    for name in ["coll_memkind", "coll_basic", "coll_nb", "coll_ops"] {
        let exe = out_dir("abi-tests-agree").join(name);
        compile_c(&p.join("bin/mpicc"), name, &exe);
        for n in ranks_of_c(name) {
            let out = rwrun(["-n".to_string(), n.to_string(), exe.display().to_string()])
                .env("RANKWIRE_ABI_MEMORY_AGREEMENT", "on")
                .timeout(Duration::from_secs(120))
                .run();
            assert_c_ok(name, n, "agreement on", &out);
        }
    }
}

/// Every C program in abi/tests/c has a test above.
#[test]
fn install_takes_a_relative_prefix_from_the_callers_directory() {
    // The library is built by `prefix()`; `--no-build` then only copies it.
    let _ = prefix();
    let dir = out_dir("relative-prefix");
    let _ = std::fs::remove_dir_all(dir.join("rel"));
    // Under the lock `prefix()` takes, so that no build replaces the library meanwhile.
    let lock = bin_dir().parent().unwrap().join("abi-prefix.lock");
    let st = Command::new("flock")
        .arg(&lock)
        .arg(repo().join("scripts/install.sh"))
        .args(["--debug", "--no-build", "--prefix", "rel"])
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run flock + scripts/install.sh");
    assert!(st.success(), "scripts/install.sh --prefix rel failed");
    assert!(
        dir.join("rel/lib/libmpi_abi.so.1").is_file() && dir.join("rel/bin/mpicc").is_file(),
        "a relative --prefix must install under the caller's directory {}",
        dir.display()
    );
    assert!(
        !repo().join("rel").exists(),
        "a relative --prefix must not install under the repository"
    );
}

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

/// `abi/exports.txt` (the list build.rs makes the `PMPI_` names from) is exactly the
/// set of `MPI_` functions the library exports, and each has its `PMPI_` twin at the
/// same code (MPI 5.0 §15.2).
#[test]
fn every_mpi_function_has_its_pmpi_name() {
    let lib = prefix().join("lib/libmpi_abi.so.1");
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("run nm (binutils)");
    assert!(o.status.success(), "nm -D {}", lib.display());
    let text = String::from_utf8_lossy(&o.stdout);
    let mut addr = std::collections::BTreeMap::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let [a, _, name] = f[..] {
            addr.insert(name.to_string(), a.to_string());
        }
    }
    let exported: std::collections::BTreeSet<&str> = addr
        .keys()
        .map(String::as_str)
        .filter(|n| n.starts_with("MPI_"))
        .collect();
    let listed_text = std::fs::read_to_string(repo().join("abi/exports.txt")).unwrap();
    let listed: std::collections::BTreeSet<&str> = listed_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let unlisted: Vec<_> = exported.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&exported).collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "abi/exports.txt is out of date (regenerate it as its header says): exported but not \
         listed {unlisted:?}; listed but not exported {gone:?}"
    );
    let missing: Vec<_> = exported
        .iter()
        .filter(|n| !addr.contains_key(&format!("P{n}")))
        .collect();
    assert!(missing.is_empty(), "no PMPI_ twin for {missing:?}");
}

/// The C programs of `abi/tests/c/` (names without `.c`), sorted.
fn c_programs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(repo().join("abi/tests/c"))
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "c").then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    v.sort();
    v
}

/// MPICH 5.0.2's standard-ABI build (the `data` folder of PyPI's `mpich` wheel: bin/
/// mpicc_abi, bin/mpiexec, lib/libmpi_abi.so.1), fetched once by scripts/abi-env.sh's
/// `abi_mpich_dir` into target/mpich-ref (the cache the outside suites use; `flock`
/// keeps parallel tests from fetching twice). `None`, with the reason printed, where the
/// wheel cannot be had (no pip, PyPI unreachable, not Linux x86_64).
fn mpich_abi_dir() -> Option<PathBuf> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        eprintln!("SKIP: the mpich 5.0.2 wheel is for Linux x86_64 only");
        return None;
    }
    let lock = bin_dir().parent().unwrap().join("mpich-ref.lock");
    let o = Command::new("flock")
        .arg(&lock)
        .args([
            "bash",
            "-c",
            ". scripts/abi-env.sh; ABI_SUITE=tests/abi.rs; abi_mpich_dir",
        ])
        .current_dir(repo())
        .output()
        .expect("run flock + bash");
    if !o.status.success() {
        eprintln!(
            "SKIP: MPICH 5.0.2's standard-ABI build cannot be had (PyPI unreachable or pip \
             missing? fix: apt-get install python3-pip and allow access to PyPI, or set \
             MPICH_ABI_DIR): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
        return None;
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    assert!(
        dir.join("bin/mpicc_abi").exists() && dir.join("lib/libmpi_abi.so.1").exists(),
        "abi_mpich_dir printed {}, which lacks bin/mpicc_abi or lib/libmpi_abi.so.1",
        dir.display()
    );
    Some(dir)
}

/// Asserts that the dynamic loader resolves `exe`'s libmpi_abi.so.1 to `libdir`'s,
/// with `LD_LIBRARY_PATH=libdir` when `via_path`, else with no LD_LIBRARY_PATH (the
/// program's own run path).
fn assert_loads_from(exe: &Path, libdir: &Path, via_path: bool) {
    let mut c = Command::new("ldd");
    c.arg(exe).env_remove("LD_LIBRARY_PATH");
    if via_path {
        c.env("LD_LIBRARY_PATH", libdir);
    }
    let o = c.output().expect("run ldd");
    let text = String::from_utf8_lossy(&o.stdout);
    let want = format!("libmpi_abi.so.1 => {}/libmpi_abi.so.1", libdir.display());
    assert!(
        text.contains(&want),
        "ldd {} (LD_LIBRARY_PATH {}): want `{want}`, got\n{text}",
        exe.display(),
        if via_path { "set" } else { "unset" }
    );
}

/// Binary compatibility, MPICH to rankwire: every C test compiled once with MPICH
/// 5.0.2's `mpicc_abi` (MPICH's `mpi_abi.h`, linked to MPICH's library) runs on our
/// library (LD_LIBRARY_PATH swapped to it) under rwrun.
#[test]
fn mpich_compiled_c_tests_run_on_ours() {
    let Some(mpich) = mpich_abi_dir() else {
        return;
    };
    let lib = prefix().join("lib");
    let dir = out_dir("abi-tests-mpich-built");
    for name in c_programs() {
        let exe = dir.join(&name);
        compile_c(&mpich.join("bin/mpicc_abi"), &name, &exe);
        assert_loads_from(&exe, &mpich.join("lib"), false);
        assert_loads_from(&exe, &lib, true);
        for n in ranks_of_c(&name) {
            let out = rwrun(["-n".to_string(), n.to_string(), exe.display().to_string()])
                .env("LD_LIBRARY_PATH", &lib.display().to_string())
                .timeout(Duration::from_secs(120))
                .run();
            assert_c_ok(&name, n, "MPICH's mpicc_abi, our library, rwrun", &out);
        }
    }
}

/// C tests that check what the standard leaves to the implementation, where MPICH
/// 5.0.2 answers otherwise than rankwire: compiled but not run on MPICH's library.
const NOT_ON_MPICH: &[(&str, &str)] = &[
    (
        "request_errors",
        "checks that MPI_Waitall raises a truncated receive on its own communicator's \
         handler (MPI_ERRORS_RETURN) when request 0's communicator has the fatal one; \
         MPICH 5.0.2 aborts the job (trial of 2026-12-07)",
    ),
    (
        "comm_group",
        "checks that a call whose user error handler returned gives the error code; \
         MPICH 5.0.2 returns MPI_SUCCESS",
    ),
    (
        "edge_cases",
        "checks MPI_Isendrecv's status (the receive's source and tag); MPICH 5.0.2 \
         reports another",
    ),
    (
        "mpi4_extras",
        "calls MPI_Comm_create_from_group, which MPICH 5.0.2 does through its process \
         manager: under the wheel's hydra mpiexec the job dies with \"unable to parse PMI \
         command\" (same with a 4-line program)",
    ),
    (
        "requests",
        "passes a value that is not a request to MPI_Waitall under MPI_ERRORS_RETURN \
         (erroneous; rankwire reports MPI_ERR_IN_STATUS, MPICH does not check handles)",
    ),
    (
        "p2p_modes",
        "checks that MPI_Error_string names the class (MPI_ERR_TAG); MPICH 5.0.2 says \
         \"Invalid tag\"",
    ),
    (
        "aliased_allreduce",
        "passes the same buffer as sendbuf and recvbuf of MPI_Allreduce (erroneous; \
         rankwire treats it as MPI_IN_PLACE, MPICH 5.0.2 returns MPI_ERR_BUFFER)",
    ),
    (
        "request_errhandler",
        "checks that MPI_Waitany/Testany/Waitsome/Testsome/Testall and MPI_Startall raise a \
         request's error on the request's communicator (as MPI_Wait does); MPICH 5.0.2 \
         raises them on MPI_COMM_WORLD (fatal)",
    ),
    (
        "cancel_send",
        "cancels sends nobody receives and waits for them (MPI 4.1 §3.8.4: the wait must \
         return); with MPICH 5.0.2's library the first MPI_Wait does not return (its ch4 \
         device does not cancel sends)",
    ),
    (
        "coll_revoke",
        "calls MPI_Bcast with counts that disagree (erroneous) under MPI_ERRORS_RETURN and \
         expects every rank to return and later collectives on that communicator to fail \
         (rankwire revokes the communicator's collectives); with MPICH 5.0.2's library the \
         4-rank run does not return (killed after 30 s), and at 2 ranks the check of the \
         later collective's error fails",
    ),
    (
        "status_error",
        "checks that a successful MPI_Waitall leaves MPI_ERROR alone (MPI 4.1 §3.2.5: it \
         is updated only when the call returns MPI_ERR_IN_STATUS); MPICH 5.0.2 writes \
         MPI_SUCCESS there, and on MPI_ERR_IN_STATUS marks a request it did not wait for \
         MPI_ERR_PENDING (allowed) where rankwire completes it",
    ),
];

/// Binary compatibility, rankwire to MPICH: every C test compiled once with our
/// `mpicc` (our `mpi.h`, linked to our library) runs on MPICH 5.0.2's libmpi_abi.so.1
/// (LD_LIBRARY_PATH swapped to it) under MPICH's `mpiexec`, but those of
/// [`NOT_ON_MPICH`] (compiled and linked only).
#[test]
fn our_compiled_c_tests_run_on_mpich() {
    let Some(mpich) = mpich_abi_dir() else {
        return;
    };
    let p = prefix();
    let mlib = mpich.join("lib");
    let dir = out_dir("abi-tests-ours-built");
    for name in c_programs() {
        let exe = dir.join(&name);
        compile_c(&p.join("bin/mpicc"), &name, &exe);
        assert_loads_from(&exe, &p.join("lib"), false);
        assert_loads_from(&exe, &mlib, true);
        if let Some((_, why)) = NOT_ON_MPICH.iter().find(|(n, _)| *n == name) {
            eprintln!("SKIP on MPICH's library: {name}: {why}");
            continue;
        }
        for n in ranks_of_c(&name) {
            let out = rankwire_tests::command(
                mpich.join("bin/mpiexec"),
                ["-n".to_string(), n.to_string(), exe.display().to_string()],
            )
            .env("LD_LIBRARY_PATH", &mlib.display().to_string())
            .timeout(Duration::from_secs(120))
            .run();
            assert_c_ok(&name, n, "our mpicc, MPICH's library and mpiexec", &out);
        }
    }
}
