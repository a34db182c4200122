//! Shared helpers of the example programs.

/// Print `msg` to stderr and exit with status 2 (bad command line).
pub fn usage_exit(msg: &str) -> ! {
    eprintln!("{msg}");
    std::process::exit(2)
}

/// Parse positional argument `i` (1-based) as `T`, or exit with a usage message.
pub fn arg<T: std::str::FromStr>(i: usize, default: T, usage: &str) -> T {
    match std::env::args().nth(i) {
        None => default,
        Some(s) => s
            .parse()
            .unwrap_or_else(|_| usage_exit(&format!("bad argument {s:?}\n{usage}"))),
    }
}
