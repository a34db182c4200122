//! Shared skeleton of the scenario programs (included with `#[path]` by each of them).

use rankwire::{Communicator, Result, Universe};

/// `<app> <scenario> [args]`: init, run `f(universe, world, scenario, args)`, finalize,
/// print `rank R: <scenario> OK`; any error ends the process with [`fail`].
pub fn run_scenario(f: impl FnOnce(&Universe, &Communicator, &str, &[String]) -> Result<()>) {
    let args: Vec<String> = std::env::args().collect();
    let scenario = args.get(1).map(String::as_str).unwrap_or("");
    let universe = match rankwire::init() {
        Ok(u) => u,
        Err(e) => fail(&format!("init: {e}")),
    };
    let world = universe.world();
    if let Err(e) = f(&universe, &world, scenario, &args) {
        fail(&format!("rank {}: {scenario}: {e}", world.rank()));
    }
    if let Err(e) = universe.finalize() {
        fail(&format!("finalize: {e}"));
    }
    println!("rank {}: {scenario} OK", world.rank());
}

/// Argument `i` parsed, or `default`.
#[allow(dead_code)]
pub fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Print `<app>: FAILED: msg` and exit 1.
pub fn fail(msg: &str) -> ! {
    eprintln!("{}: FAILED: {msg}", env!("CARGO_BIN_NAME"));
    std::process::exit(1)
}

/// This process's resident set size in KiB (`VmRSS` of `/proc/self/status`; 0 if unreadable).
#[allow(dead_code)]
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
