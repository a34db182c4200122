//! The standard-ABI header `include/mpi.h` and the Rust constants `src/consts.rs`:
//!
//! - both are what `gen/gen_abi.py` generates (when pympistandard 0.2.0 can be had);
//! - every constant has the same value in C (our header), in Rust, and in MPICH 5.0.2's
//!   `mpi_abi.h` (the reference implementation; its wheel is fetched once into
//!   `target/abi-ref/`), and our prototypes agree with MPICH's;
//! - `MPI_Status` is 32 bytes and handles are 8 bytes in C and in Rust;
//! - the header compiles as C89, C99, C11 and C++.
//!
//! Tests that need a tool this machine lacks (a C compiler, Python, pip, PyPI) print
//! why and how to get it, and pass without checking.
//!
//! Source: MPI 5.0, chapter "Application Binary Interface" (the fixed values and the
//! `MPI_Status` layout).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use mpi_abi::consts::{MPI_Comm, MPI_Datatype, MPI_Status};

include!("header/table.rs");

/// `abi/`.
fn abi_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The cargo target directory (this test runs as `<target>/<profile>/deps/header-*`).
fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("the test knows its own path");
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| abi_dir().join("../target"))
}

/// A scratch directory for this test's files.
fn scratch(test: &str) -> PathBuf {
    let dir = target_dir()
        .join("abi-header-tests")
        .join(format!("{test}-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("create the scratch directory under target/");
    dir
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Runs `cmd`, panics with its output unless it succeeds; returns stdout.
fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {cmd:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tool output is UTF-8")
}

/// Compiles `tests/header/consts.c` (our header, or MPICH's with `reference`) and
/// returns its output as name -> value.
fn print_constants(dir: &Path, include: &Path, reference: bool) -> BTreeMap<String, String> {
    let exe = dir.join(if reference {
        "consts-ref"
    } else {
        "consts-ours"
    });
    let mut cc = Command::new("cc");
    cc.args(["-std=c99", "-Wall", "-Werror", "-I"])
        .arg(include)
        .arg(abi_dir().join("tests/header/consts.c"))
        .arg("-o")
        .arg(&exe);
    if reference {
        cc.arg("-DRW_REFERENCE_HEADER");
    }
    run(&mut cc, "compiling tests/header/consts.c");
    let text = run(&mut Command::new(&exe), "running the constant printer");
    text.lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("printer lines are NAME VALUE");
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// Fetches `pip download` artifacts once into `target/abi-ref/<name>/` (a wheel unpacked);
/// `None` (with the reason printed) where pip or PyPI cannot be had.
fn fetch_wheel(requirement: &str, name: &str) -> Option<PathBuf> {
    // Tests of this process fetch one at a time (other processes: see below).
    static FETCH: Mutex<()> = Mutex::new(());
    let _one = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let base = target_dir().join("abi-ref");
    let dest = base.join(name);
    if dest.join(".complete").exists() {
        return Some(dest);
    }
    if !have("python3") {
        eprintln!("SKIP part: python3 is missing (fix: apt-get install python3 python3-pip)");
        return None;
    }
    // Parallel tests may fetch at the same time: each unpacks into its own directory
    // and renames it into place; the loser's copy is removed.
    let tmp = base.join(format!("{name}.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).expect("create target/abi-ref/");
    let dl = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
        .arg(&tmp)
        .arg(requirement)
        .output();
    let ok = matches!(&dl, Ok(o) if o.status.success());
    if !ok {
        let why = match dl {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        eprintln!(
            "SKIP part: `python3 -m pip download --no-deps {requirement}` failed ({why}); \
             fix: apt-get install python3-pip and allow access to PyPI"
        );
        let _ = fs::remove_dir_all(&tmp);
        return None;
    }
    let wheel = fs::read_dir(&tmp)
        .expect("read the download directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("pip download left a wheel");
    run(
        Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(tmp.join("unpacked")),
        "unpacking the wheel",
    );
    fs::write(tmp.join("unpacked/.complete"), "").expect("mark the wheel unpacked");
    if fs::rename(tmp.join("unpacked"), &dest).is_err() && !dest.join(".complete").exists() {
        panic!("cannot move the unpacked wheel to {}", dest.display());
    }
    let _ = fs::remove_dir_all(&tmp);
    Some(dest)
}

/// MPICH 5.0.2's standard-ABI tree (`include/mpi_abi.h`, `lib/libmpi_abi.so.1`,
/// `bin/mpiexec`), or `None` where it cannot be had.
fn mpich_reference() -> Option<PathBuf> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        eprintln!("SKIP part: the mpich 5.0.2 wheel is for Linux x86_64 only");
        return None;
    }
    let dir = fetch_wheel("mpich==5.0.2", "mpich-5.0.2")?.join("mpich-5.0.2.data/data");
    assert!(
        dir.join("include/mpi_abi.h").exists(),
        "the mpich wheel has no include/mpi_abi.h under {}",
        dir.display()
    );
    // Wheels do not keep file modes: the launcher and its proxy must be executable.
    for exe in ["bin/mpiexec", "bin/mpiexec.hydra", "bin/hydra_pmi_proxy"] {
        let _ = Command::new("chmod").arg("+x").arg(dir.join(exe)).status();
    }
    Some(dir)
}

/// One C++ function per ABI type: its mangled name spells the type's tag.
const MANGLE_SOURCE: &str = "#ifdef RW_REFERENCE_HEADER\n#include <mpi_abi.h>\n#else\n\
     #include <mpi.h>\n#endif\n\
     void rw_probe(MPI_Comm, MPI_Datatype, MPI_Op, MPI_Group, MPI_Win, MPI_File) {}\n\
     void rw_probe(MPI_Session, MPI_Message, MPI_Info, MPI_Errhandler, MPI_Request) {}\n\
     void rw_probe(MPI_T_enum, MPI_T_cvar_handle, MPI_T_pvar_handle, MPI_T_pvar_session) {}\n\
     void rw_probe(MPI_T_event_registration, MPI_T_event_instance, MPI_T_cb_safety,\n\
                   MPI_T_source_order) {}\n\
     void rw_probe(MPI_Aint, MPI_Offset, MPI_Count, MPI_Status *) {}\n\
     void rw_probe(MPI_User_function *, MPI_Comm_copy_attr_function *,\n\
                   MPI_Comm_errhandler_function *) {}\n";

#[test]
fn generated_files_are_current() {
    if !have("python3") {
        eprintln!(
            "SKIP: python3 is missing, so abi/gen/gen_abi.py cannot be run \
             (fix: apt-get install python3 python3-pip; pip install pympistandard==0.2.0)"
        );
        return;
    }
    let importable = Command::new("python3")
        .args([
            "-c",
            "import pympistandard as s; assert s.__version__ == '0.2.0'",
        ])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    // Another installed release is shadowed by the fetched 0.2.0 (PYTHONPATH first).
    let pythonpath = if importable {
        None
    } else {
        match fetch_wheel("pympistandard==0.2.0", "pympistandard-0.2.0") {
            Some(dir) => Some(dir),
            None => {
                eprintln!(
                    "SKIP: pympistandard is not importable and cannot be downloaded \
                     (fix: pip install pympistandard==0.2.0)"
                );
                return;
            }
        }
    };
    let mut cmd = Command::new("python3");
    cmd.arg(abi_dir().join("gen/gen_abi.py")).arg("--check");
    if let Some(dir) = pythonpath {
        cmd.env("PYTHONPATH", dir);
    }
    run(
        &mut cmd,
        "gen_abi.py --check (the committed files against the generator)",
    );
}

#[test]
fn constants_equal_in_c_and_rust() {
    if !have("cc") {
        eprintln!("SKIP: no C compiler `cc` (fix: apt-get install gcc)");
        return;
    }
    let dir = scratch("rust");
    let ours = print_constants(&dir, &abi_dir().join("include"), false);
    let mut checked = 0;
    for (name, value) in RUST_CONSTANTS {
        let c = ours
            .get(*name)
            .unwrap_or_else(|| panic!("{name} is in the Rust table but not printed by C"));
        // Handles and addresses print unsigned, integers signed: both as i128.
        let c: i128 = c.parse().expect("printed values are integers");
        assert_eq!(c, *value, "{name}: C header {c}, Rust consts.rs {value}");
        checked += 1;
    }
    assert!(checked > 300, "only {checked} constants compared");
    eprintln!("{checked} constants equal in C and Rust");
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn type_sizes_in_c_and_rust() {
    assert_eq!(std::mem::size_of::<MPI_Status>(), 32);
    assert_eq!(std::mem::offset_of!(MPI_Status, MPI_SOURCE), 0);
    assert_eq!(std::mem::offset_of!(MPI_Status, MPI_TAG), 4);
    assert_eq!(std::mem::offset_of!(MPI_Status, MPI_ERROR), 8);
    assert_eq!(std::mem::offset_of!(MPI_Status, MPI_internal), 12);
    assert_eq!(std::mem::size_of::<MPI_Comm>(), 8);
    assert_eq!(std::mem::size_of::<MPI_Datatype>(), 8);
    assert_eq!(std::mem::size_of::<mpi_abi::consts::MPI_Aint>(), 8);
    assert_eq!(std::mem::size_of::<mpi_abi::consts::MPI_Count>(), 8);
    if !have("cc") {
        eprintln!("SKIP C part: no C compiler `cc` (fix: apt-get install gcc)");
        return;
    }
    let dir = scratch("sizes");
    let c = print_constants(&dir, &abi_dir().join("include"), false);
    let expect = [
        ("sizeof(MPI_Status)", "32"),
        ("offsetof(MPI_Status, MPI_SOURCE)", "0"),
        ("offsetof(MPI_Status, MPI_TAG)", "4"),
        ("offsetof(MPI_Status, MPI_ERROR)", "8"),
        ("offsetof(MPI_Status, MPI_internal)", "12"),
        ("sizeof(MPI_Aint)", "8"),
        ("sizeof(MPI_Offset)", "8"),
        ("sizeof(MPI_Count)", "8"),
    ];
    for (k, v) in expect {
        assert_eq!(c.get(k).map(String::as_str), Some(v), "{k} in C");
    }
    let handles: Vec<_> = c
        .iter()
        .filter(|(k, _)| k.starts_with("sizeof(MPI_") && !k.contains("Status"))
        .filter(|(k, _)| !k.contains("cb_safety") && !k.contains("source_order"))
        .filter(|(k, _)| !k.contains("Aint") && !k.contains("Offset") && !k.contains("Count"))
        .collect();
    assert!(handles.len() >= 17, "handle types printed: {handles:?}");
    for (k, v) in &handles {
        assert_eq!(v.as_str(), "8", "{k} in C (handles are pointers)");
    }
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn header_compiles_as_c_and_cxx() {
    if !have("cc") {
        eprintln!("SKIP: no C compiler `cc` (fix: apt-get install gcc)");
        return;
    }
    let dir = scratch("compile");
    let src = dir.join("use.c");
    // Every kind of declaration in use, including the MPI 4.1 conversion names.
    fs::write(
        &src,
        "#include <mpi.h>\n\
         static int f(MPI_Comm c, MPI_Datatype t, MPI_Status *s) {\n\
           MPI_Fint fc = MPI_Comm_c2f(c);\n\
           MPI_User_function *uf = 0; MPI_Comm_copy_attr_function *cf = MPI_COMM_DUP_FN;\n\
           (void)uf; (void)cf; (void)t;\n\
           return s->MPI_SOURCE + (int)fc + MPI_ANY_TAG + MPI_MAX_PROCESSOR_NAME;\n\
         }\n\
         int main(void) { MPI_Status s; s.MPI_SOURCE = 0;\n\
           return f(MPI_COMM_WORLD, MPI_INT, &s) == 0 ? 0 : MPI_IN_PLACE == MPI_BOTTOM; }\n",
    )
    .expect("write the test source");
    let inc = abi_dir().join("include");
    for std in ["c89", "c99", "c11", "c17"] {
        run(
            Command::new("cc")
                .arg(format!("-std={std}"))
                .args([
                    "-pedantic",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-fsyntax-only",
                    "-I",
                ])
                .arg(&inc)
                .arg(&src),
            &format!("compiling mpi.h as {std}"),
        );
    }
    if have("c++") {
        for std in ["c++11", "c++17"] {
            run(
                Command::new("c++")
                    .arg(format!("-std={std}"))
                    .args(["-Wall", "-Werror", "-fsyntax-only", "-x", "c++", "-I"])
                    .arg(&inc)
                    .arg(&src),
                &format!("compiling mpi.h as {std}"),
            );
        }
    } else {
        eprintln!("SKIP C++ part: no `c++` (fix: apt-get install g++)");
    }
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn constants_and_prototypes_equal_mpich() {
    if !have("cc") {
        eprintln!("SKIP: no C compiler `cc` (fix: apt-get install gcc)");
        return;
    }
    let Some(mpich) = mpich_reference() else {
        eprintln!("SKIP: MPICH 5.0.2's mpi_abi.h cannot be had (see above)");
        return;
    };
    let dir = scratch("mpich");
    let ours = print_constants(&dir, &abi_dir().join("include"), false);
    let theirs = print_constants(&dir, &mpich.join("include"), true);
    assert_eq!(ours.len(), theirs.len());
    let differ: Vec<_> = ours
        .iter()
        .filter(|(k, v)| theirs.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: ours {v}, MPICH {:?}", theirs.get(k)))
        .collect();
    assert!(
        differ.is_empty(),
        "constants differ from MPICH 5.0.2:\n{}",
        differ.join("\n")
    );
    eprintln!("{} constants and sizes equal to MPICH 5.0.2's", ours.len());

    // Our prototypes and callback types redeclared after MPICH's header: a C compiler
    // rejects any that is not compatible with MPICH's declaration.
    let header = fs::read_to_string(abi_dir().join("include/mpi.h")).expect("read mpi.h");
    let decls: Vec<&str> = header
        .lines()
        .filter(|l| l.ends_with(");") && !l.starts_with('#') && !l.starts_with(' '))
        .collect();
    assert!(
        decls.len() > 1300,
        "only {} declarations found",
        decls.len()
    );
    let src = dir.join("protos.c");
    fs::write(
        &src,
        format!("#include <mpi_abi.h>\n{}\n", decls.join("\n")),
    )
    .expect("write");
    run(
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-Werror", "-fsyntax-only", "-I"])
            .arg(mpich.join("include"))
            .arg(&src),
        "our declarations after MPICH's mpi_abi.h",
    );
    eprintln!("{} declarations compatible with MPICH 5.0.2's", decls.len());

    // C++ programs mangle the types into their own symbols: the struct and enum tags
    // must be MPICH's too, or a C++ library built with one header does not link with
    // a program built with the other.
    if have("c++") {
        let src = dir.join("mangle.cc");
        fs::write(&src, MANGLE_SOURCE).expect("write the C++ source");
        let symbols = |reference: bool, include: &Path| {
            let obj = dir.join(if reference { "ref.o" } else { "ours.o" });
            let mut cxx = Command::new("c++");
            cxx.args(["-c", "-I"])
                .arg(include)
                .arg(&src)
                .arg("-o")
                .arg(&obj);
            if reference {
                cxx.arg("-DRW_REFERENCE_HEADER");
            }
            run(&mut cxx, "compiling the C++ mangling probe");
            run(
                Command::new("nm").args(["--defined-only", "-P"]).arg(&obj),
                "nm",
            )
        };
        let ours = symbols(false, &abi_dir().join("include"));
        let theirs = symbols(true, &mpich.join("include"));
        assert!(ours.contains("rw_probe"), "{ours}");
        assert_eq!(ours, theirs, "C++ mangled names differ from MPICH's");
    } else {
        eprintln!("SKIP C++ mangling part: no `c++` (fix: apt-get install g++)");
    }
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn mpicc_program_runs_on_mpich_library() {
    // Our header and wrapper, MPICH's library and launcher: the header is ABI-compatible
    // whatever rankwire's library implements.
    if !have("cc") {
        eprintln!("SKIP: no C compiler `cc` (fix: apt-get install gcc)");
        return;
    }
    let Some(mpich) = mpich_reference() else {
        eprintln!("SKIP: MPICH 5.0.2's libmpi_abi.so.1 cannot be had (see above)");
        return;
    };
    let dir = scratch("hello");
    let exe = dir.join("hello");
    let mpicc = abi_dir().join("bin/mpicc");
    let show = run(
        Command::new(&mpicc)
            .env("RANKWIRE_ABI_LIBDIR", mpich.join("lib"))
            .args(["-show", "x.c"]),
        "mpicc -show",
    );
    assert!(
        show.contains(&format!("-I{}", abi_dir().join("include").display())),
        "{show}"
    );
    assert!(
        show.contains("-lmpi_abi") && show.contains("-Wl,-rpath,"),
        "{show}"
    );
    run(
        Command::new(&mpicc)
            .env("RANKWIRE_ABI_LIBDIR", mpich.join("lib"))
            .args(["-Wall", "-Werror"])
            .arg(abi_dir().join("tests/c/hello.c"))
            .arg("-o")
            .arg(&exe),
        "mpicc hello.c against MPICH's library",
    );
    // cargo's LD_LIBRARY_PATH has target/debug, where abi/bin/mpicc links
    // libmpi_abi.so.1 to rankwire's library: it would win over the program's RUNPATH.
    let out = run(
        Command::new("timeout")
            .env_remove("LD_LIBRARY_PATH")
            .arg("60")
            .arg(mpich.join("bin/mpiexec"))
            .args(["-n", "2"])
            .arg(&exe),
        "MPICH's mpiexec -n 2 hello",
    );
    assert!(out.contains("hello: ok, 11 checks"), "{out}");
    assert!(out.contains("hello from rank 1 of 2"), "{out}");
    let _ = fs::remove_dir_all(dir);
}
