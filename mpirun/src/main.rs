//! `rwrun`: the rankwire launcher. Starts N ranks of a program (on this machine, as
//! `srun` steps inside a Slurm allocation ([`slurm`]), or on other hosts through a
//! launch agent ([`placement`])), runs the
//! bootstrap key-value server they use to find each other, forwards their I/O and
//! signals, and ends the whole job when any part of it fails.
//!
//! ```text
//! rwrun -n 4 ./my_app args...
//! rwrun -np 2 --tag-output hostname
//! ```
//!
//! `-n` defaults to the slot count of `--host`/`--hostfile`, else 1.
//!
//! # Lifecycle
//! 1. **Parse** the command line ([`cli`]; `-np N`, `-nN`, `-n=N` are rewritten to
//!    `-n N`); host lists are checked to be this machine ([`hosts`]).
//! 2. **Before any thread exists**: adjust signal dispositions ([`signals`]) and fork the
//!    [`reaper`], which kills the ranks' process groups if rwrun itself is SIGKILLed.
//! 3. Start the output writer thread ([`io`]) and a **current-thread** tokio runtime.
//!    Everything async runs on the main thread, and that matters: ranks get
//!    `PR_SET_PDEATHSIG`, which fires when the *thread* that forked them exits, so every
//!    rank is forked from the main thread, which lives until rwrun exits.
//! 4. The supervisor ([`job`]) starts the bootstrap server ([`server`], 127.0.0.1,
//!    ephemeral port, per-job secret), spawns the ranks ([`spawn`]), forwards output and
//!    stdin, and waits for the first of: all ranks done, a rank failed (including a
//!    rankwire rank exiting 0 without finalizing while others run, see [`job`]), a rank
//!    aborted, a signal, rwrun's own output closed (EPIPE), the timeout. Then it tears
//!    the job down (SIGTERM/forwarded signal, grace, SIGKILL), drains output, kills
//!    leftovers, and prints one line per rank that failed on its own.
//! 5. rwrun exits with the status chosen by the supervisor (see `rwrun --help`), or
//!    141 (128+SIGPIPE) when a completed job's output could not be written because the
//!    reader went away. SIGPIPE itself stays ignored (the Rust runtime's default), so
//!    rwrun never dies of it mid-teardown.
//!
//! # Environment
//! - `RANKWIRE_LOG`: tracing filter for rwrun's own logging (`debug`, `rankwire=trace`);
//!   default `warn`. Ranks inherit it.
//! - `RANKWIRE_KILL_GRACE_MS`: milliseconds between a forwarded SIGINT/SIGTERM/SIGHUP (or
//!   the `--timeout` SIGTERM) and SIGKILL; default 2000 (a second signal sends SIGKILL
//!   at once). A failed or aborting rank, or a closed output, ends the job with a fixed
//!   300 ms grace.

/// Print one line to rwrun's stderr, ignoring errors: a closed stderr must not crash
/// rwrun (which would take the whole job down).
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod cli;
mod doctor;
mod hosts;
mod io;
mod job;
mod placement;
mod reaper;
mod server;
mod signals;
mod slurm;
mod spawn;

use clap::Parser;
use std::io::{IsTerminal, Write};

fn main() {
    let argv = match cli::normalize_args(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(msg) => {
            note!("rwrun: {msg}");
            std::process::exit(2);
        }
    };
    let cli = cli::Cli::parse_from(argv);
    if cli.settings {
        print!("{}", cli::settings_table());
        std::process::exit(0);
    }
    if cli.doctor {
        std::process::exit(doctor::run(cli.np));
    }
    let config = match cli::JobConfig::from_cli(cli) {
        Ok(c) => c,
        Err(msg) => {
            note!("rwrun: {msg}");
            std::process::exit(2);
        }
    };

    let process_signals = signals::prepare_process();
    // SAFETY: no thread has been started yet (clap and the signal setup start none).
    let reaper = match unsafe { reaper::Reaper::start() } {
        Ok(r) => Some(r),
        Err(e) => {
            note!(
                "rwrun: warning: cannot start the reaper helper ({e}); children of ranks may outlive a killed rwrun"
            );
            None
        }
    };

    // An invalid filter has already been refused (`cli::JobConfig::from_cli`) unless
    // rwrun runs --doctor.
    let filter = rankwire::settings::raw("RANKWIRE_LOG")
        .and_then(|v| tracing_subscriber::EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let (out, writer, broken) = match io::start_writer() {
        Ok(w) => w,
        Err(e) => {
            note!("rwrun: cannot start the output thread: {e}");
            std::process::exit(1);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            note!("rwrun: cannot start the event loop: {e}");
            std::process::exit(1);
        }
    };
    let outcome = runtime.block_on(job::run(config, process_signals, reaper, out, broken));
    // Drop leftover tasks (bootstrap connections) without waiting for them; this also
    // drops their output senders so the writer thread can finish.
    runtime.shutdown_background();
    let broken_pipe = io::join_writer(writer, outcome.output_bound);
    let _ = std::io::stderr().flush();
    // Output lost to a closed pipe: the status of a program killed by SIGPIPE.
    let code = if outcome.code == 0 && broken_pipe {
        job::BROKEN_PIPE_STATUS
    } else {
        outcome.code
    };
    std::process::exit(code);
}
