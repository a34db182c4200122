//! Command line: the flags MPI users type, parsed with clap, then resolved into a
//! [`JobConfig`].
//!
//! clap cannot express a few spellings MPI users type, and with a trailing program
//! argument that may start with `-` it would take an attached short-option value
//! (`-n2`) for the program. [`normalize_args`] therefore rewrites rwrun's own options
//! before parsing, looking only at them (never at the program's arguments):
//! `-np N`, `-np=N`, `-npN`, `-n=N`, `-nN` become `-n N`, and `-H`/`-x` with an attached
//! value (`-Hlocalhost:2`, `-H=...`, `-xVAR=1`) are split the same way. An unknown
//! option before the program is a usage error.

use crate::hosts;
use crate::placement::{self, Placement, Via};
use crate::slurm;
use clap::Parser;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

/// Environment variable: grace in milliseconds between the forwarded signal (or the
/// `--timeout` SIGTERM) and SIGKILL.
pub(crate) const KILL_GRACE_ENV: &str = "RANKWIRE_KILL_GRACE_MS";
/// Default for [`KILL_GRACE_ENV`].
pub(crate) const DEFAULT_KILL_GRACE: Duration = Duration::from_millis(2000);
/// Grace between SIGTERM and SIGKILL when rwrun ends the job itself because a rank failed
/// or aborted, or rwrun's output was closed.
pub(crate) const FAILURE_GRACE: Duration = Duration::from_millis(300);
/// When a rank fails, how long rwrun waits for other ranks failing on their own (or
/// still starting up) before it sends SIGTERM to the rest.
pub(crate) const FAILURE_SETTLE: Duration = Duration::from_millis(200);
/// Largest `--timeout`: larger values (up to infinity) are clamped to this (10 years).
pub(crate) const MAX_TIMEOUT_SECS: f64 = 10.0 * 365.0 * 24.0 * 3600.0;

const AFTER_HELP: &str = "\
Each rank runs PROGRAM with these variables set:
  RANKWIRE_RANK, RANKWIRE_SIZE            world rank (0-based) and number of ranks
  RANKWIRE_LOCAL_RANK, RANKWIRE_LOCAL_SIZE  the same among ranks on this node
  RANKWIRE_BOOTSTRAP_ADDR                 127.0.0.1:PORT of rwrun's bootstrap server
  RANKWIRE_JOB_ID, RANKWIRE_JOB_SECRET    job id and the secret the server checks
and, for programs that pick a GPU before MPI_Init, other launchers' names:
  RANK, WORLD_SIZE, OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE  world rank and size
  LOCAL_RANK, MPI_LOCALRANKID, OMPI_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK
                                          rank among the ranks on this node
  LOCAL_WORLD_SIZE, MPI_LOCALNRANKS, OMPI_COMM_WORLD_LOCAL_SIZE  ranks on this node
Ranks inherit rwrun's environment; -x adds or overrides variables.

I/O: stdin goes to rank 0 only (other ranks read /dev/null); stdout and stderr of
every rank are forwarded line by line (with --tag-output as \"[RANK] line\").

Output: a rank's last line without a trailing newline is forwarded with a newline
added. If rwrun's stdout or stderr is closed (EPIPE, as in `rwrun ... | head -1`),
rwrun ends the job like a failure and exits with 141 (128+SIGPIPE).

A rank fails when it exits non-zero or is killed by a signal, and also when it exits
0 but leaves the others waiting: a rank that joined the bootstrap (called
rankwire::init) and exits 0 without having finalized rankwire while other ranks still
run, or a rank that exits 0 without ever joining while another rank that joined still
runs. Programs that never use rankwire (hostname, sh) may exit 0 at any time.

Exit status: 0 if every rank exits 0; else the status of the first rank that failed
(128+N for signal N; 1 for a rank that exited 0 but failed as above); 128+N when rwrun
gets signal N (SIGINT, SIGTERM, SIGHUP are forwarded to every rank, SIGKILL follows
after RANKWIRE_KILL_GRACE_MS, default 2000, or at once on a second signal); 124 on
--timeout; the code given to abort by a rank; 141 if rwrun's output was closed
(also when the job itself completed); 127/126 if PROGRAM cannot be found/executed; 2
for usage errors. When a rank fails, rwrun waits up to 200 ms for other ranks failing
on their own (or still starting); then, and at once when a rank aborts, the other
ranks get SIGTERM and, 300 ms later, SIGKILL. Every rank that failed on its own gets a
line on stderr; those ended by rwrun's signals are only counted.

Inside a Slurm allocation (SLURM_JOB_ID set, no SLURM_STEP_ID: a batch script or an
salloc shell) and without --host, every rank is started as a one-task `srun` step on
the allocation's nodes (filled in order by SLURM_TASKS_PER_NODE; -n defaults to
SLURM_NTASKS). RANKWIRE_SLURM_LAUNCH=0 starts them here instead. With --host naming
other machines, their ranks start through RANKWIRE_LAUNCH_AGENT ({host} is replaced,
and one /bin/sh command line is appended; default `ssh -x -o BatchMode=yes {host}`),
and reach rwrun at every address of this machine (or RANKWIRE_BOOTSTRAP_HOST).

Environment: RANKWIRE_LOG=debug (rwrun and rank logging), RANKWIRE_KILL_GRACE_MS,
RANKWIRE_BOOTSTRAP_TIMEOUT (seconds, rank side); `rwrun --settings` lists every
RANKWIRE_* setting with its default and valid values. rwrun checks them all (and
--require) before it starts any rank; an invalid value ends it with status 2.

Examples:
  rwrun -n 4 ./my_app --size 1024
  rwrun -np 2 --tag-output hostname
  rwrun -n 3 -x OMP_NUM_THREADS=2 -x HOME --timeout 600 ./solver < input.dat";

/// rwrun: start N ranks of a program (on this machine, on the nodes of a Slurm
/// allocation, or on hosts reached by a launch agent) and run the bootstrap server they
/// use to find each other.
#[derive(Debug, Parser)]
#[command(
    name = "rwrun",
    version,
    about = "Launch N ranks of a program here, inside a Slurm allocation, or on --host nodes (the rankwire launcher)",
    after_help = AFTER_HELP,
    override_usage = "rwrun [OPTIONS] PROGRAM [ARGS]..."
)]
pub(crate) struct Cli {
    /// Number of ranks to start (also written -np N, -nN, -n=N). Default: the slot
    /// count of --host/--hostfile, else 1.
    #[arg(short = 'n', long = "np", value_name = "N")]
    pub(crate) np: Option<u32>,

    /// Comma-separated hosts, each optionally with a slot count (`localhost:4`).
    /// Repeatable. Ranks fill the hosts in order; hosts other than this machine are
    /// reached with the launch agent (RANKWIRE_LAUNCH_AGENT, default
    /// `ssh -x -o BatchMode=yes {host}`).
    #[arg(short = 'H', long = "host", value_name = "LIST")]
    pub(crate) host: Vec<String>,

    /// File with one host per line (`host`, `host:N` or `host slots=N`; `#` comments).
    /// Hosts other than this machine are reached with the launch agent (see --host).
    #[arg(long, value_name = "FILE")]
    pub(crate) hostfile: Option<PathBuf>,

    /// Export VAR from rwrun's environment, or set VAR=VALUE, in every rank. Repeatable.
    #[arg(short = 'x', value_name = "VAR[=VALUE]")]
    pub(crate) export: Vec<OsString>,

    /// Prefix every forwarded output line with "[RANK] ".
    #[arg(long)]
    pub(crate) tag_output: bool,

    /// Each rank prints its node, local rank and GPU (`local_rank % device_count`, or
    /// `RANKWIRE_GPU_DEVICE`) to stderr at init (sets RANKWIRE_REPORT_BINDINGS=1).
    #[arg(long)]
    pub(crate) report_bindings: bool,

    /// Kill the job after SECONDS (fractions allowed; at most 10 years, larger values
    /// are clamped); rwrun then exits with 124.
    #[arg(long, value_name = "SECONDS", value_parser = parse_timeout)]
    pub(crate) timeout: Option<f64>,

    /// Let ranks outnumber the slots of --host/--hostfile or of a Slurm allocation
    /// (dealt round robin); on one machine ranks may always outnumber cores. Ranks are
    /// never bound to cores.
    #[arg(long)]
    pub(crate) oversubscribe: bool,

    /// Every rank prints, at init, its path table: per peer and memory kind (host,
    /// device, managed) the transport, eager/rendezvous thresholds, and why faster
    /// paths were not taken (sets RANKWIRE_EXPLAIN=1).
    #[arg(long)]
    pub(crate) explain: bool,

    /// Comma-separated paths that must be used where they apply (shm, cma, ipc, rdma,
    /// gdr); a fallback then fails init (sets RANKWIRE_REQUIRE).
    #[arg(long, value_name = "LIST")]
    pub(crate) require: Option<String>,

    /// Check this node for running GPU/RDMA jobs (GPUs, MPS, RDMA devices, limits,
    /// /dev/shm, ptrace scope, ...) and print pass/warn/fail with a fix for each; runs no
    /// program. With -n N, the GPU sharing (MPS) check is for N ranks on this node.
    #[arg(long)]
    pub(crate) doctor: bool,

    /// Print every RANKWIRE_* setting (name, default, valid values, who reads it, what
    /// it does) and exit; runs no program.
    #[arg(long)]
    pub(crate) settings: bool,

    /// The program to run as every rank, and its arguments.
    #[arg(
        required_unless_present_any = ["doctor", "settings"],
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM [ARGS]"
    )]
    pub(crate) command: Vec<OsString>,
}

/// Everything the job needs, resolved and validated.
#[derive(Debug, Clone)]
pub(crate) struct JobConfig {
    /// Number of ranks.
    pub(crate) size: u32,
    /// Program to execute (looked up in PATH like execvp).
    pub(crate) program: OsString,
    /// Its arguments.
    pub(crate) args: Vec<OsString>,
    /// Variables to set in every rank, from `-x`.
    pub(crate) env: Vec<(OsString, OsString)>,
    /// `--tag-output`.
    pub(crate) tag_output: bool,
    /// `--timeout`, with the user's number for messages.
    pub(crate) timeout: Option<(Duration, f64)>,
    /// Grace between a forwarded signal (or the timeout's SIGTERM) and SIGKILL.
    pub(crate) kill_grace: Duration,
    /// Where every rank runs and how it is started.
    pub(crate) placement: Placement,
}

/// Rewrite rwrun's own options into forms clap parses (see the module doc). Stops at
/// `--` or at the first argument that is not an option (the program), and skips option
/// values.
///
/// # Errors
/// An unknown option before the program (a message without the `rwrun: ` prefix).
pub(crate) fn normalize_args(args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    // Options of rwrun that take a separate value.
    const TAKES_VALUE: &[&str] = &[
        "-n",
        "--np",
        "-H",
        "--host",
        "--hostfile",
        "-x",
        "--timeout",
        "--require",
    ];
    // Options without a value.
    const FLAGS: &[&str] = &[
        "--tag-output",
        "--report-bindings",
        "--oversubscribe",
        "--explain",
        "--doctor",
        "--settings",
        "-h",
        "--help",
        "-V",
        "--version",
    ];
    // Short options whose value may be attached (`-n4`, `-n=4`).
    const SHORT_WITH_VALUE: &[&str] = &["-n", "-H", "-x"];
    let mut out = Vec::with_capacity(args.len());
    let mut iter = args.into_iter();
    if let Some(argv0) = iter.next() {
        out.push(argv0);
    }
    let mut skip_value = false;
    let mut done = false;
    for arg in iter {
        if done || skip_value {
            skip_value = false;
            out.push(arg);
            continue;
        }
        let Some(s) = arg.to_str() else {
            done = true;
            out.push(arg);
            continue;
        };
        if s == "--" || !s.starts_with('-') || s == "-" {
            done = true;
            out.push(arg);
        } else if s == "-np" {
            skip_value = true;
            out.push("-n".into());
        } else if let Some(v) = s.strip_prefix("-np")
            && (v.starts_with('=') || v.starts_with(|c: char| c.is_ascii_digit()))
        {
            out.push("-n".into());
            out.push(v.strip_prefix('=').unwrap_or(v).into());
        } else if TAKES_VALUE.contains(&s) {
            skip_value = true;
            out.push(arg);
        } else if FLAGS.contains(&s) {
            out.push(arg);
        } else if let Some((name, _)) = s.split_once('=')
            && name.starts_with("--")
            && TAKES_VALUE.contains(&name)
        {
            // `--np=4`: clap splits it itself.
            out.push(arg);
        } else if let Some(opt) = SHORT_WITH_VALUE.iter().find(|o| s.starts_with(**o)) {
            let v = &s[2..];
            out.push(OsString::from(*opt));
            out.push(v.strip_prefix('=').unwrap_or(v).into());
        } else {
            return Err(format!(
                "unknown option {s:?} (see rwrun --help; put `--` before a program whose name starts with '-')"
            ));
        }
    }
    Ok(out)
}

impl JobConfig {
    /// Resolve the parsed command line: host lists, rank count, `-x` exports, timeout
    /// and the kill grace from the environment.
    ///
    /// # Errors
    /// A message for the user (without the `rwrun: ` prefix) for a remote or malformed
    /// host list, an unreadable hostfile, a bad `-x`, a zero rank count, or an invalid
    /// `RANKWIRE_*` setting ([`check_settings`]).
    pub(crate) fn from_cli(cli: Cli) -> Result<JobConfig, String> {
        check_settings(&cli)?;
        let mut hosts = Vec::new();
        for list in &cli.host {
            hosts.extend(hosts::parse_host_list(list)?);
        }
        if let Some(path) = &cli.hostfile {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read hostfile {}: {e}", path.display()))?;
            hosts.extend(hosts::parse_hostfile(&text, &path.display().to_string())?);
        }
        let classified = hosts::classify(&hosts);
        let all_local = classified.iter().all(|h| h.2);
        // Inside a Slurm allocation (and no host list): ranks start as srun steps.
        let alloc = if hosts.is_empty() {
            slurm::Allocation::from_env(|k| std::env::var(k).ok())?
        } else {
            None
        };
        let default_size = match &alloc {
            Some(a) => Some(
                a.ntasks
                    .unwrap_or_else(|| a.slots().min(u32::MAX as u64) as u32),
            ),
            None if hosts.is_empty() => None,
            None => Some(
                classified
                    .iter()
                    .fold(0u32, |acc, h| acc.saturating_add(h.1)),
            ),
        };
        let size = match (cli.np, default_size) {
            (Some(0), _) => return Err("-n must be at least 1".into()),
            (Some(n), _) => n,
            (None, Some(s)) => s.max(1),
            (None, None) => 1,
        };
        let placement = if let Some(a) = alloc {
            let node_of_rank = a.place(size, cli.oversubscribe)?;
            let this = std::env::var("SLURMD_NODENAME").ok();
            Placement {
                nodes: a
                    .nodes
                    .iter()
                    .map(|(name, _)| placement::Node {
                        name: name.clone(),
                        local: this.as_deref() == Some(name.as_str()),
                    })
                    .collect(),
                node_of_rank,
                via: Via::Srun {
                    job_name: format!("rwrun-{}", std::process::id()),
                },
            }
        } else if all_local {
            // Only this machine (or no hosts): every rank forked here, any count.
            Placement::local(size)
        } else {
            let template = rankwire::settings::raw(placement::AGENT_ENV)
                .filter(|t| !t.trim().is_empty())
                .unwrap_or_else(|| placement::DEFAULT_AGENT.to_string());
            let (nodes, node_of_rank) = placement::fill(&classified, size, cli.oversubscribe)?;
            Placement {
                nodes,
                node_of_rank,
                via: Via::Agent {
                    template: placement::parse_agent(&template)?,
                },
            }
        };
        let mut env = Vec::new();
        if matches!(placement.via, Via::Agent { .. }) {
            // Ranks started through the launch agent do not inherit rwrun's environment:
            // give them its RANKWIRE_* settings (local ranks inherit the same ones), so
            // every rank runs with the settings the job was checked with. `-x` and the
            // options below come after and win.
            env.extend(forwarded_settings(std::env::vars_os()));
        }
        if cli.explain {
            env.push((rankwire::explain::EXPLAIN_ENV.into(), "1".into()));
        }
        if let Some(list) = &cli.require {
            env.push(("RANKWIRE_REQUIRE".into(), list.into()));
        }
        for x in &cli.export {
            if let Some(pair) = parse_export(x)? {
                env.push(pair);
            }
        }
        if cli.report_bindings {
            env.push(("RANKWIRE_REPORT_BINDINGS".into(), "1".into()));
        }
        let mut command = cli.command.into_iter();
        let program = command.next().ok_or("no program given")?;
        if program.is_empty() {
            return Err("the program name is empty".into());
        }
        Ok(JobConfig {
            size,
            program,
            args: command.collect(),
            env,
            tag_output: cli.tag_output,
            timeout: cli.timeout.map(|s| (Duration::from_secs_f64(s), s)),
            kill_grace: kill_grace_from_env(),
            placement,
        })
    }
}

// `-x VAR=value` sets; `-x VAR` copies rwrun's value (a no-op locally, since ranks
// inherit rwrun's environment, but it must exist to mean anything).
fn parse_export(x: &OsStr) -> Result<Option<(OsString, OsString)>, String> {
    let bytes = x.as_bytes();
    let (name, value) = match bytes.iter().position(|&b| b == b'=') {
        Some(i) => (
            OsStr::from_bytes(&bytes[..i]).to_os_string(),
            Some(OsStr::from_bytes(&bytes[i + 1..]).to_os_string()),
        ),
        None => (x.to_os_string(), None),
    };
    if name.is_empty() {
        return Err(format!("-x {}: not a variable name", x.to_string_lossy()));
    }
    match value {
        Some(v) => Ok(Some((name, v))),
        None => match std::env::var_os(&name) {
            Some(v) => Ok(Some((name, v))),
            None => {
                note!(
                    "rwrun: warning: -x {}: not set in rwrun's environment; not exported",
                    name.to_string_lossy()
                );
                Ok(None)
            }
        },
    }
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|e| format!("{s:?} is not a number of seconds: {e}"))?;
    if v.is_nan() || v <= 0.0 {
        return Err(format!(
            "{s:?}: the timeout must be a positive number of seconds"
        ));
    }
    // Anything longer than 10 years (infinity included) means "no practical limit".
    Ok(v.min(MAX_TIMEOUT_SECS))
}

// Checked by `check_settings` before this is read.
fn kill_grace_from_env() -> Duration {
    rankwire::settings::raw(KILL_GRACE_ENV)
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(DEFAULT_KILL_GRACE, Duration::from_millis)
}

/// The settings table for `rwrun --settings`: one block per setting.
pub(crate) fn settings_table() -> String {
    use rankwire::settings::{Reader, SETTINGS};
    let mut out = String::new();
    for s in SETTINGS {
        let who = match s.reader {
            Reader::Rank => "ranks (checked by rwrun and at init)",
            Reader::Rwrun => "rwrun",
            Reader::Both => "rwrun and ranks",
            Reader::Launcher => "set by rwrun for every rank",
            Reader::Tools => "mpicc/mpicxx (compile time)",
        };
        out.push_str(&format!(
            "{}\n    {}\n    default: {}\n    valid: {}\n    read by: {who}\n",
            s.name, s.doc, s.default, s.valid
        ));
    }
    out
}

/// The `RANKWIRE_*` variables of `vars` (rwrun's environment) that ranks started through
/// the launch agent are given: every one except those rwrun sets per rank or per job
/// itself (rank, size, local rank and size, bootstrap address, job id and secret).
fn forwarded_settings(
    vars: impl Iterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    use rankwire::bootstrap::env as e;
    let own = [
        e::RANK,
        e::SIZE,
        e::LOCAL_RANK,
        e::LOCAL_SIZE,
        e::BOOTSTRAP_ADDR,
        e::JOB_ID,
        e::JOB_SECRET,
    ];
    let mut v: Vec<(OsString, OsString)> = vars
        .filter(|(k, _)| {
            k.to_str()
                .is_some_and(|k| k.starts_with("RANKWIRE_") && !own.contains(&k))
        })
        .collect();
    v.sort();
    v
}

/// The `RANKWIRE_*` settings of the job, checked before any rank starts: rwrun's
/// environment (which the ranks inherit or are given) with the variables of `--require`
/// and `-x VAR=VALUE` on top, through the one table of `rankwire::settings`. Unknown
/// `RANKWIRE_*` names are warned about (with the closest known name).
///
/// # Errors
/// Every invalid value, naming the variable, the value and the valid values.
fn check_settings(cli: &Cli) -> Result<(), String> {
    use rankwire::explain::REQUIRE_ENV;
    use rankwire::settings::{self, Reader};
    let mut vars: std::collections::BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .collect();
    if let Some(list) = &cli.require {
        vars.insert(REQUIRE_ENV.into(), list.clone());
    }
    for x in &cli.export {
        if let Some((k, v)) = x.to_str().and_then(|x| x.split_once('=')) {
            vars.insert(k.into(), v.into());
        }
    }
    let report = settings::check_env(&vars, |r| r != Reader::Launcher);
    for w in &report.warnings {
        note!("rwrun: warning: {w}");
    }
    let mut errors: Vec<String> = report
        .errors
        .iter()
        .map(|e| match &cli.require {
            // The option's spelling, for the option's value.
            Some(list) if e.var == REQUIRE_ENV && *list == e.value => format!(
                "--require {:?} (RANKWIRE_REQUIRE) is not valid: expected {}",
                e.value, e.expected
            ),
            _ => e.to_string(),
        })
        .collect();
    if let Some(v) = vars.get("RANKWIRE_LOG").filter(|v| !v.trim().is_empty())
        && tracing_subscriber::EnvFilter::try_new(v).is_err()
    {
        errors.push(format!(
            "RANKWIRE_LOG={v:?} is not valid: expected {}",
            settings::find("RANKWIRE_LOG").map_or("a tracing filter", |s| s.valid)
        ));
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(format!(
        "usage: {} (no rank was started)",
        errors.join("; ")
    ))
}

#[cfg(test)]
mod tests {

    #[test]
    fn agent_ranks_get_rwruns_settings_but_not_its_per_rank_variables() {
        let v = |k: &str, val: &str| (OsString::from(k), OsString::from(val));
        let got = forwarded_settings(
            vec![
                v("RANKWIRE_TRANSPORTS", "rdma,tcp"),
                v("PATH", "/bin"),
                v("RANKWIRE_RANK", "3"),
                v("RANKWIRE_JOB_SECRET", "s"),
                v("RANKWIRE_BOOTSTRAP_ADDR", "x:1"),
                v("RANKWIRE_GDR_STANDIN", "1"),
                v("RDMA_EXPECT", "rdma"),
            ]
            .into_iter(),
        );
        assert_eq!(
            got,
            vec![
                v("RANKWIRE_GDR_STANDIN", "1"),
                v("RANKWIRE_TRANSPORTS", "rdma,tcp")
            ]
        );
    }
    use super::*;

    #[test]
    fn settings_table_states_rwrun_defaults() {
        let d = |n: &str| rankwire::settings::find(n).unwrap().default;
        assert_eq!(
            d(KILL_GRACE_ENV),
            DEFAULT_KILL_GRACE.as_millis().to_string()
        );
        assert_eq!(d(placement::AGENT_ENV), placement::DEFAULT_AGENT);
        assert!(rankwire::settings::find(hosts::BOOTSTRAP_HOST_ENV).is_some());
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn parse(v: &[&str]) -> Result<JobConfig, String> {
        let cli = Cli::try_parse_from(normalize_args(os(v))?).map_err(|e| e.to_string())?;
        JobConfig::from_cli(cli)
    }

    #[test]
    fn np_is_rewritten_only_before_the_program() {
        let n = |v: &[&str]| normalize_args(os(v)).unwrap();
        assert_eq!(
            n(&["rwrun", "-np", "4", "prog", "-np", "3"]),
            os(&["rwrun", "-n", "4", "prog", "-np", "3"])
        );
        for spelling in ["-np=2", "-np2", "-n=2", "-n2"] {
            assert_eq!(
                n(&["rwrun", spelling, "prog", "-n=3"]),
                os(&["rwrun", "-n", "2", "prog", "-n=3"]),
                "{spelling}"
            );
            assert_eq!(parse(&["rwrun", spelling, "true"]).unwrap().size, 2);
        }
        assert_eq!(
            n(&["rwrun", "-Hlocalhost:2", "-H=localhost", "-xA=1", "p"]),
            os(&[
                "rwrun",
                "-H",
                "localhost:2",
                "-H",
                "localhost",
                "-x",
                "A=1",
                "p"
            ])
        );
        assert_eq!(
            n(&["rwrun", "--np=2", "--host=localhost", "p"]),
            os(&["rwrun", "--np=2", "--host=localhost", "p"])
        );
        // A value that looks like -np is left alone.
        assert_eq!(
            n(&["rwrun", "-x", "-np", "-n", "1", "p"]),
            os(&["rwrun", "-x", "-np", "-n", "1", "p"])
        );
        assert_eq!(
            n(&["rwrun", "--", "-np", "2"]),
            os(&["rwrun", "--", "-np", "2"])
        );
        let e = normalize_args(os(&["rwrun", "--bind-to", "core", "p"])).unwrap_err();
        assert!(e.contains("unknown option \"--bind-to\""), "{e}");
        let c = parse(&["rwrun", "-n3", "-xA=b", "-Hlocalhost", "true"]).unwrap();
        assert_eq!((c.size, &c.env[0].1), (3, &OsString::from("b")));
    }

    #[test]
    fn program_arguments_are_not_options() {
        let c = parse(&["rwrun", "-np", "3", "sh", "-c", "exit 3", "-n", "9"]).unwrap();
        assert_eq!(c.size, 3);
        assert_eq!(c.program, "sh");
        assert_eq!(c.args, os(&["-c", "exit 3", "-n", "9"]));
        let c = parse(&[
            "rwrun",
            "--np",
            "2",
            "--tag-output",
            "--",
            "prog",
            "--tag-output",
        ])
        .unwrap();
        assert_eq!(c.size, 2);
        assert!(c.tag_output);
        assert_eq!(c.args, os(&["--tag-output"]));
    }

    #[test]
    fn defaults_and_errors() {
        assert_eq!(parse(&["rwrun", "true"]).unwrap().size, 1);
        assert!(parse(&["rwrun", "-n", "0", "true"]).is_err());
        assert!(parse(&["rwrun", "-n", "2"]).is_err());
        assert!(parse(&["rwrun", "--timeout", "0", "true"]).is_err());
        assert!(parse(&["rwrun", "--timeout", "abc", "true"]).is_err());
        assert!(parse(&["rwrun", "--timeout", "-1", "true"]).is_err());
        assert!(parse(&["rwrun", "--timeout", "nan", "true"]).is_err());
        let c = parse(&["rwrun", "--timeout", "1.5", "--oversubscribe", "true"]).unwrap();
        assert_eq!(c.timeout.unwrap().0, Duration::from_millis(1500));
        // Huge timeouts are clamped to 10 years.
        for big in ["1e20", "inf", "315360001"] {
            let c = parse(&["rwrun", "--timeout", big, "true"]).unwrap();
            assert_eq!(
                c.timeout.unwrap().0,
                Duration::from_secs(315_360_000),
                "{big}"
            );
        }
    }

    #[test]
    fn exports() {
        let c = parse(&["rwrun", "-x", "A=b=c", "-x", "PATH", "-x", "E=", "true"]).unwrap();
        assert_eq!(c.env[0], (OsString::from("A"), OsString::from("b=c")));
        assert_eq!(c.env[1].0, "PATH");
        assert_eq!(c.env[2], (OsString::from("E"), OsString::new()));
        assert!(parse(&["rwrun", "-x", "=v", "true"]).is_err());
    }

    #[test]
    fn host_slots_set_the_size() {
        let c = parse(&["rwrun", "--host", "localhost:2,127.0.0.1", "true"]).unwrap();
        assert_eq!(c.size, 3);
        let c = parse(&["rwrun", "-H", "localhost:2", "-n", "5", "true"]).unwrap();
        assert_eq!(c.size, 5);
        // A remote host: placed by slots through the launch agent.
        let c = parse(&["rwrun", "--host", "localhost,elsewhere-x9:2", "true"]).unwrap();
        assert_eq!(c.size, 3);
        assert_eq!(c.placement.node_of_rank, vec![0, 1, 1]);
        assert!(c.placement.needs_network());
        assert!(matches!(c.placement.via, Via::Agent { .. }));
        let e = parse(&[
            "rwrun",
            "--host",
            "localhost,elsewhere-x9",
            "-n",
            "3",
            "true",
        ])
        .unwrap_err();
        assert!(e.contains("-n 3 exceeds the 2 slot(s)"), "{e}");
    }
}
