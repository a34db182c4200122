//! PMI client: bootstrap of ranks started directly by a resource manager
//! (`srun --mpi=pmi2 -n 4 ./app`), without `rwrun`.
//!
//! The resource manager (Slurm's slurmstepd with its `pmi2` plugin) hands every task an
//! inherited socket in `PMI_FD` and serves a small key-value store on it. This module
//! speaks that protocol itself (no `libpmi`): [`wire`] encodes and decodes the frames
//! (sans-IO), [`PmiClient`] drives one blocking conversation over the descriptor.
//!
//! # Conversation (PMI-2, as Slurm 22.05 serves it)
//! 1. Handshake, one PMI-1 style line each way: `cmd=init pmi_version=2
//!    pmi_subversion=0` → `cmd=response_to_init rc=0 pmi_version=2 …`. slurmstepd reads
//!    this first message with a single `read`, so nothing else is sent before the reply.
//! 2. `fullinit` (`pmijobid` = `PMI_JOBID`, `pmirank` = `PMI_RANK`) → rank, size, appnum.
//! 3. `job-getid` → the job id used by `kvs-get`; `info-getjobattr
//!    key=PMI_process_mapping` → the node of every rank (see [`PmiClient::node_of_rank`]).
//! 4. Any number of `kvs-put` (buffered by the server), `kvs-fence` (collective over
//!    every rank of the step; makes earlier puts visible), `kvs-get` (only keys put
//!    before the last fence exist).
//! 5. `finalize` (the server then closes the descriptor), or `abort isworld=TRUE`
//!    (Slurm kills the step; no answer).
//!
//! # PMI-1 fallback
//! Where only PMI-1 is offered (a server answering the init with `pmi_version=1`), or
//! when `RANKWIRE_PMI=1` asks for it, the client speaks PMI-1 ("simple PMI") on the
//! same descriptor: `get_maxes`, `get_my_kvsname`, `put`, `barrier_in`/`barrier_out`,
//! `get`, `finalize`/`finalize_ack`; rank and size come from `PMI_RANK`/`PMI_SIZE`.
//!
//! # Values
//! The [`rankwire_transports::Exchange`] contract is arbitrary bytes under a key. PMI
//! values are text without separators and at most `vallen_max` bytes (1024 in Slurm),
//! so every value is escaped ([`wire::escape_value`]) and, when longer, split over
//! several keys: `key` holds `<pieces>:<first piece>`, `key~1`, `key~2`, … the rest.
//!
//! # Timeouts
//! Every answer is awaited with `poll(2)` for at most the bootstrap timeout
//! ([`super::client::default_timeout`], `RANKWIRE_BOOTSTRAP_TIMEOUT`); a fence that
//! never completes (a rank died before reaching it) fails instead of hanging.
//!
//! Sources: MPICH's PMI-2 API and wire protocol (`src/pmi/pmi2/`), Slurm
//! `src/plugins/mpi/pmi2/`, and frames captured from Slurm 22.05.8.

pub mod wire;

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use wire::{Message, WireError};

/// Environment variables of the PMI contract (set by `srun --mpi=pmi2` for every task).
pub mod env {
    /// Number of the inherited socket to the PMI server.
    pub const PMI_FD: &str = "PMI_FD";
    /// This task's rank.
    pub const PMI_RANK: &str = "PMI_RANK";
    /// Number of tasks of the step.
    pub const PMI_SIZE: &str = "PMI_SIZE";
    /// `<jobid>.<stepid>`; the PMI-2 `pmijobid` of `fullinit`.
    pub const PMI_JOBID: &str = "PMI_JOBID";
    /// rankwire's choice of PMI version: `2` (default: PMI-2, PMI-1 if the server only
    /// offers that) or `1` (PMI-1 only).
    pub const RANKWIRE_PMI: &str = "RANKWIRE_PMI";
}

/// Longest key the server accepts (PMI-1 `keylen_max` in Slurm), in bytes.
pub const MAX_KEY_BYTES: usize = 64;

/// `vallen_max` assumed where the server does not say (PMI-2), in bytes.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 1024;

/// The PMI protocol version in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmiVersion {
    /// PMI-1 ("simple PMI"), line framing.
    V1,
    /// PMI-2, length-prefixed framing.
    V2,
}

impl PmiVersion {
    /// `"PMI-1"` or `"PMI-2"`.
    pub fn name(self) -> &'static str {
        match self {
            PmiVersion::V1 => "PMI-1",
            PmiVersion::V2 => "PMI-2",
        }
    }
}

/// Why a PMI operation failed. The `Display` text names the protocol, the operation and
/// the fix where there is one.
#[derive(Debug, thiserror::Error)]
pub enum PmiError {
    /// A PMI environment variable is missing or malformed. Likely cause: the program
    /// was not started by `srun --mpi=pmi2` (or the variables were copied from one).
    #[error("environment variable {var}: {detail}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// Reading or writing `PMI_FD` failed; `UnexpectedEof` means the server closed it
    /// (slurmstepd is gone or refused the conversation).
    #[error("{version} {what} on PMI_FD failed: {source}")]
    Io {
        /// Protocol in use.
        version: &'static str,
        /// The command in progress.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// No answer within the bootstrap timeout. For `kvs-fence`/`barrier_in`: another
    /// rank never reached it (crashed or hangs). Raise `RANKWIRE_BOOTSTRAP_TIMEOUT`
    /// (seconds) if the job is only slow.
    #[error(
        "{version} {what}: no answer from the PMI server within {timeout_ms} ms (another rank may have died before it; raise RANKWIRE_BOOTSTRAP_TIMEOUT if it is only slow)"
    )]
    Timeout {
        /// Protocol in use.
        version: &'static str,
        /// The command in progress.
        what: &'static str,
        /// The bound that expired, in milliseconds.
        timeout_ms: u128,
    },
    /// The server sent bytes that are not PMI, or an answer that does not fit the
    /// request: the server misbehaved or `PMI_FD` is not a PMI connection.
    #[error("{version} {what}: malformed answer from the PMI server: {detail}")]
    Malformed {
        /// Protocol in use.
        version: &'static str,
        /// The command in progress.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The server answered with a non-zero `rc`.
    #[error("{version} {what}: the PMI server refused (rc={rc}){msg}")]
    Refused {
        /// Protocol in use.
        version: &'static str,
        /// The command refused.
        what: &'static str,
        /// The server's return code.
        rc: i64,
        /// The server's message, if any, with a leading `": "`.
        msg: String,
    },
    /// `get` of a key nobody put before the last fence (a bug in the calling layer: PMI
    /// makes puts visible only through a fence).
    #[error("{version}: key {key:?} not found (was it put before the last fence?)")]
    NotFound {
        /// Protocol in use.
        version: &'static str,
        /// The key.
        key: String,
    },
    /// A key this client cannot send (empty, longer than [`MAX_KEY_BYTES`], or with
    /// characters other than ASCII letters, digits, `-`, `_`, `.`).
    #[error("PMI key {key:?} is not valid: {why}")]
    BadKey {
        /// The key.
        key: String,
        /// Why.
        why: &'static str,
    },
    /// An earlier operation failed mid-conversation (timeout, I/O error, malformed
    /// answer), so the descriptor can no longer be trusted.
    #[error("the PMI connection is unusable after an earlier failure")]
    Poisoned,
}

/// One rank's conversation with the PMI server on `PMI_FD`.
///
/// Operations are blocking request/response pairs in order, each bounded by
/// [`PmiClient::set_timeout`]. Not thread-safe by itself (`&mut self`); the universe
/// keeps it behind a mutex.
#[derive(Debug)]
pub struct PmiClient {
    fd: File,
    version: PmiVersion,
    rank: u32,
    size: u32,
    /// PMI-2 job id (`job-getid`) or PMI-1 kvsname.
    kvs: String,
    max_value: usize,
    node_of_rank: Option<Vec<u32>>,
    buf: Vec<u8>,
    timeout: Duration,
    poisoned: bool,
    finalized: bool,
}

impl PmiClient {
    /// Take over the descriptor in `PMI_FD` and run the handshake: PMI-2 unless
    /// `RANKWIRE_PMI=1`, falling back to PMI-1 if the server only offers that.
    ///
    /// # Errors
    /// [`PmiError::Env`] for a missing, malformed or closed `PMI_FD` (or a bad
    /// `PMI_RANK`/`PMI_SIZE`/`RANKWIRE_PMI`); otherwise as [`PmiClient::handshake`].
    pub fn from_env(timeout: Duration) -> Result<Self, PmiError> {
        let fd_s = std::env::var(env::PMI_FD).map_err(|e| PmiError::Env {
            var: env::PMI_FD,
            detail: e.to_string(),
        })?;
        let raw: i32 = fd_s
            .trim()
            .parse()
            .ok()
            .filter(|&n: &i32| n >= 0)
            .ok_or_else(|| PmiError::Env {
                var: env::PMI_FD,
                detail: format!("{fd_s:?} is not a file descriptor number"),
            })?;
        // SAFETY: fcntl(F_GETFD) on any integer is safe; it only reports whether the
        // descriptor is open.
        if unsafe { libc::fcntl(raw, libc::F_GETFD) } < 0 {
            return Err(PmiError::Env {
                var: env::PMI_FD,
                detail: format!(
                    "descriptor {raw} is not open in this process ({}); was the program started by a wrapper that closes inherited descriptors?",
                    io::Error::last_os_error()
                ),
            });
        }
        // Ranks must not pass the PMI socket on to their own children.
        // SAFETY: as above, on a descriptor just checked to be open.
        unsafe { libc::fcntl(raw, libc::F_SETFD, libc::FD_CLOEXEC) };
        // SAFETY: the descriptor is open, and the PMI contract hands it to this process
        // alone: nothing else in the process uses PMI_FD (rankwire::init runs once).
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let want_s = crate::settings::raw(env::RANKWIRE_PMI).map(|v| v.trim().to_ascii_lowercase());
        let want = match want_s.as_deref() {
            None | Some("2" | "pmi2" | "") => PmiVersion::V2,
            Some("1" | "pmi1") => PmiVersion::V1,
            Some(other) => {
                return Err(PmiError::Env {
                    var: env::RANKWIRE_PMI,
                    detail: format!("{other:?}: expected 1 or 2"),
                });
            }
        };
        let env_rank = env_u32(env::PMI_RANK);
        let env_size = env_u32(env::PMI_SIZE);
        let jobid = std::env::var(env::PMI_JOBID).ok();
        Self::handshake(fd, want, env_rank, env_size, jobid, timeout)
    }

    /// Run the init handshake and the first queries on `fd` (see the module doc):
    /// `want` is the version asked for first; `env_rank`/`env_size`/`jobid` are
    /// `PMI_RANK`, `PMI_SIZE` and `PMI_JOBID` (PMI-1 takes rank and size from them;
    /// PMI-2 sends them in `fullinit`).
    ///
    /// # Errors
    /// [`PmiError::Io`], [`PmiError::Timeout`], [`PmiError::Malformed`] or
    /// [`PmiError::Refused`] from the exchange; [`PmiError::Env`] if PMI-1 is in use and
    /// `PMI_RANK`/`PMI_SIZE` are missing or inconsistent.
    pub fn handshake(
        fd: OwnedFd,
        want: PmiVersion,
        env_rank: Option<u32>,
        env_size: Option<u32>,
        jobid: Option<String>,
        timeout: Duration,
    ) -> Result<Self, PmiError> {
        let mut c = PmiClient {
            fd: File::from(fd),
            version: want,
            rank: 0,
            size: 0,
            kvs: String::new(),
            max_value: DEFAULT_MAX_VALUE_BYTES,
            node_of_rank: None,
            buf: Vec::new(),
            timeout,
            poisoned: false,
            finalized: false,
        };
        if want == PmiVersion::V2 {
            let r = c.init_line(2, 0)?;
            match r.get("pmi_version") {
                Some("2") if r.rc() == Some(0) => {
                    c.init_v2(env_rank, jobid)?;
                    return Ok(c);
                }
                Some("1") => {
                    tracing::debug!("PMI: the server offers only PMI-1 ({r}); falling back");
                    c.version = PmiVersion::V1;
                }
                _ => return Err(c.refused("init", &r)),
            }
        }
        let r = c.init_line(1, 1)?;
        if r.rc() != Some(0) {
            return Err(c.refused("init", &r));
        }
        c.init_v1(env_rank, env_size)?;
        Ok(c)
    }

    /// The protocol version in use.
    pub fn version(&self) -> PmiVersion {
        self.version
    }

    /// This task's rank (0-based), from `fullinit` (PMI-2) or `PMI_RANK` (PMI-1).
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of tasks in the step.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The node index (0-based, as the resource manager numbers them) of every rank,
    /// from the PMI-2 job attribute `PMI_process_mapping`; `None` under PMI-1 or when
    /// the server did not give a usable mapping.
    pub fn node_of_rank(&self) -> Option<&[u32]> {
        self.node_of_rank.as_deref()
    }

    /// Bound every later answer by `timeout`.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Publish `value` (any bytes, any length) under `key` for every rank; visible to
    /// others after the next [`PmiClient::fence`]. Long values take several PMI keys
    /// (see the module doc).
    ///
    /// # Errors
    /// [`PmiError::BadKey`]; otherwise as the exchange ([`PmiError::Refused`], ...).
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), PmiError> {
        check_key(key)?;
        let esc = wire::escape_value(value);
        // Room for the "<pieces>:" prefix of the first piece.
        let piece = self.max_value.saturating_sub(12).max(16);
        let mut pieces: Vec<&str> = Vec::new();
        let mut rest = esc.as_str();
        while !rest.is_empty() || pieces.is_empty() {
            // Escaped text is ASCII, so any byte index is a char boundary.
            let n = rest.len().min(piece);
            pieces.push(&rest[..n]);
            rest = &rest[n..];
        }
        let count = pieces.len();
        for (i, p) in pieces.into_iter().enumerate() {
            if i == 0 {
                self.put_raw(key, &format!("{count}:{p}"))?;
            } else {
                self.put_raw(&format!("{key}~{i}"), p)?;
            }
        }
        Ok(())
    }

    /// Read the value another rank put under `key` before the last fence.
    ///
    /// # Errors
    /// [`PmiError::NotFound`] if nobody did; [`PmiError::Malformed`] if the stored
    /// value is not in this client's encoding; otherwise as the exchange.
    pub fn get(&mut self, key: &str) -> Result<Vec<u8>, PmiError> {
        check_key(key)?;
        let first = self.get_raw(key)?;
        let bad = |detail: String| PmiError::Malformed {
            version: self.version.name(),
            what: "get",
            detail,
        };
        let (count, head) = first
            .split_once(':')
            .ok_or_else(|| bad(format!("value of {key:?} lacks the piece count")))?;
        let count: usize = count
            .parse()
            .ok()
            .filter(|&c| (1..=100_000).contains(&c))
            .ok_or_else(|| bad(format!("value of {key:?} has a bad piece count {count:?}")))?;
        let mut esc = head.to_string();
        for i in 1..count {
            esc.push_str(&self.get_raw(&format!("{key}~{i}"))?);
        }
        wire::unescape_value(&esc).map_err(|e| PmiError::Malformed {
            version: self.version.name(),
            what: "get",
            detail: e.to_string(),
        })
    }

    /// Collective over every task of the step: returns once all have called it, and
    /// makes every earlier put visible (PMI-2 `kvs-fence`, PMI-1 `barrier_in`).
    ///
    /// # Errors
    /// [`PmiError::Timeout`] if some task never arrives; otherwise as the exchange.
    pub fn fence(&mut self) -> Result<(), PmiError> {
        let r = match self.version {
            PmiVersion::V2 => self.call("kvs-fence", &[], "kvs-fence-response")?,
            PmiVersion::V1 => self.call("barrier_in", &[], "barrier_out")?,
        };
        self.check_rc("fence", &r)
    }

    /// End the conversation (PMI-2 `finalize`, PMI-1 `finalize`/`finalize_ack`).
    /// Calling it again does nothing.
    ///
    /// # Errors
    /// As the exchange.
    pub fn finalize(&mut self) -> Result<(), PmiError> {
        if self.finalized {
            return Ok(());
        }
        let r = match self.version {
            PmiVersion::V2 => self.call("finalize", &[], "finalize-response")?,
            PmiVersion::V1 => self.call("finalize", &[], "finalize_ack")?,
        };
        self.finalized = true;
        self.check_rc("finalize", &r)
    }

    /// Ask the server to kill every task of the step (PMI-2 `abort isworld=TRUE`,
    /// PMI-1 `abort exitcode=`). The server does not answer; the caller should exit.
    ///
    /// # Errors
    /// [`PmiError::Io`] if the request could not be written.
    pub fn abort(&mut self, code: i32, message: &str) -> Result<(), PmiError> {
        // The message travels escaped: no separators of either framing.
        let msg = wire::escape_value(message.as_bytes());
        let code_s = code.to_string();
        let m = match self.version {
            PmiVersion::V2 => Message::new(
                "abort",
                &[("isworld", "TRUE"), ("msg", &msg), ("exitcode", &code_s)],
            ),
            PmiVersion::V1 => Message::new("abort", &[("exitcode", &code_s)]),
        };
        self.send("abort", &m)
    }

    fn init_line(&mut self, v: u32, sub: u32) -> Result<Message, PmiError> {
        let (v, sub) = (v.to_string(), sub.to_string());
        let m = Message::new("init", &[("pmi_version", &v), ("pmi_subversion", &sub)]);
        let bytes = wire::encode_pmi1(&m).map_err(|e| self.malformed("init", e))?;
        self.write("init", &bytes)?;
        // The handshake answer is always a PMI-1 line, whatever the version.
        let r = self.read_framed("init", PmiVersion::V1)?;
        if r.cmd != "response_to_init" {
            return Err(self.unexpected("init", "response_to_init", &r));
        }
        Ok(r)
    }

    fn init_v2(&mut self, env_rank: Option<u32>, jobid: Option<String>) -> Result<(), PmiError> {
        let rank_s = env_rank
            .map(|r| r.to_string())
            .unwrap_or_else(|| "-1".into());
        let jobid = jobid.unwrap_or_default();
        let r = self.call(
            "fullinit",
            &[
                ("pmijobid", &jobid),
                ("pmirank", &rank_s),
                ("threaded", "FALSE"),
            ],
            "fullinit-response",
        )?;
        self.check_rc("fullinit", &r)?;
        let num = |c: &Self, k: &str| -> Result<u32, PmiError> {
            r.get(k)
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| c.malformed_msg("fullinit", format!("no valid {k} in {r}")))
        };
        self.rank = num(self, "rank")?;
        self.size = num(self, "size")?;
        if self.size == 0 || self.rank >= self.size {
            return Err(self.malformed_msg(
                "fullinit",
                format!("rank {} is not below size {}", self.rank, self.size),
            ));
        }
        let r = self.call("job-getid", &[], "job-getid-response")?;
        self.check_rc("job-getid", &r)?;
        self.kvs = r
            .get("jobid")
            .filter(|j| !j.is_empty())
            .ok_or_else(|| self.malformed_msg("job-getid", format!("no jobid in {r}")))?
            .to_string();
        // Optional: a server without the attribute answers found=FALSE.
        let r = self.call(
            "info-getjobattr",
            &[("key", "PMI_process_mapping")],
            "info-getjobattr-response",
        )?;
        if r.rc() == Some(0) && r.get("found") == Some("TRUE") {
            let text = r.get("value").unwrap_or("");
            self.node_of_rank = wire::parse_process_mapping(text, self.size);
            if self.node_of_rank.is_none() {
                tracing::debug!("PMI-2: ignoring unusable PMI_process_mapping {text:?}");
            }
        }
        Ok(())
    }

    fn init_v1(&mut self, env_rank: Option<u32>, env_size: Option<u32>) -> Result<(), PmiError> {
        let r = self.call("get_maxes", &[], "maxes")?;
        self.check_rc("get_maxes", &r)?;
        if let Some(v) = r.get("vallen_max").and_then(|v| v.parse::<usize>().ok()) {
            self.max_value = v.clamp(64, 1 << 20);
        }
        let r = self.call("get_my_kvsname", &[], "my_kvsname")?;
        self.check_rc("get_my_kvsname", &r)?;
        self.kvs = r
            .get("kvsname")
            .filter(|k| !k.is_empty())
            .ok_or_else(|| self.malformed_msg("get_my_kvsname", format!("no kvsname in {r}")))?
            .to_string();
        let missing = |var: &'static str| PmiError::Env {
            var,
            detail: "missing or not a number (PMI-1 takes rank and size from it)".into(),
        };
        self.rank = env_rank.ok_or_else(|| missing(env::PMI_RANK))?;
        self.size = env_size.ok_or_else(|| missing(env::PMI_SIZE))?;
        if self.size == 0 || self.rank >= self.size {
            return Err(PmiError::Env {
                var: env::PMI_RANK,
                detail: format!("{} is not below PMI_SIZE={}", self.rank, self.size),
            });
        }
        Ok(())
    }

    fn put_raw(&mut self, key: &str, value: &str) -> Result<(), PmiError> {
        let r = match self.version {
            PmiVersion::V2 => self.call(
                "kvs-put",
                &[("key", key), ("value", value)],
                "kvs-put-response",
            )?,
            PmiVersion::V1 => {
                let kvs = self.kvs.clone();
                self.call(
                    "put",
                    &[("kvsname", &kvs), ("key", key), ("value", value)],
                    "put_result",
                )?
            }
        };
        self.check_rc("put", &r)
    }

    fn get_raw(&mut self, key: &str) -> Result<String, PmiError> {
        let kvs = self.kvs.clone();
        let r = match self.version {
            PmiVersion::V2 => self.call(
                "kvs-get",
                &[("jobid", &kvs), ("srcid", "-1"), ("key", key)],
                "kvs-get-response",
            )?,
            PmiVersion::V1 => self.call("get", &[("kvsname", &kvs), ("key", key)], "get_result")?,
        };
        let found = match self.version {
            PmiVersion::V2 => {
                self.check_rc("get", &r)?;
                r.get("found") == Some("TRUE")
            }
            // PMI-1 reports a missing key as a non-zero rc.
            PmiVersion::V1 => r.rc() == Some(0),
        };
        match (found, r.get("value")) {
            (true, Some(v)) => Ok(v.to_string()),
            (true, None) => Err(self.malformed_msg("get", format!("no value in {r}"))),
            (false, _) => Err(PmiError::NotFound {
                version: self.version.name(),
                key: key.to_string(),
            }),
        }
    }

    // Send one request and read its one answer, which must be `expect`.
    fn call(
        &mut self,
        what: &'static str,
        attrs: &[(&str, &str)],
        expect: &str,
    ) -> Result<Message, PmiError> {
        self.send(what, &Message::new(what, attrs))?;
        let r = self.read_message(what)?;
        if r.cmd != expect {
            return Err(self.unexpected(what, expect, &r));
        }
        Ok(r)
    }

    fn send(&mut self, what: &'static str, m: &Message) -> Result<(), PmiError> {
        let bytes = match self.version {
            PmiVersion::V2 => wire::encode_pmi2(m),
            PmiVersion::V1 => wire::encode_pmi1(m),
        }
        .map_err(|e| self.malformed(what, e))?;
        self.write(what, &bytes)
    }

    fn write(&mut self, what: &'static str, bytes: &[u8]) -> Result<(), PmiError> {
        if self.poisoned {
            return Err(PmiError::Poisoned);
        }
        let r = self.fd.write_all(bytes);
        r.map_err(|source| {
            self.fail(PmiError::Io {
                version: self.version.name(),
                what,
                source,
            })
        })
    }

    // Read until one whole message is buffered, bounded by the timeout.
    fn read_message(&mut self, what: &'static str) -> Result<Message, PmiError> {
        self.read_framed(what, self.version)
    }

    fn read_framed(
        &mut self,
        what: &'static str,
        framing: PmiVersion,
    ) -> Result<Message, PmiError> {
        if self.poisoned {
            return Err(PmiError::Poisoned);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let decoded = match framing {
                PmiVersion::V2 => wire::decode_pmi2(&self.buf),
                PmiVersion::V1 => wire::decode_pmi1(&self.buf),
            };
            match decoded {
                Ok(Some((m, used))) => {
                    self.buf.drain(..used);
                    tracing::trace!("{} << {m}", self.version.name());
                    return Ok(m);
                }
                Ok(None) => {}
                Err(e) => {
                    let e = self.malformed(what, e);
                    return Err(self.fail(e));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.wait_readable(left, what)? {
                let e = PmiError::Timeout {
                    version: self.version.name(),
                    what,
                    timeout_ms: self.timeout.as_millis(),
                };
                return Err(self.fail(e));
            }
            let mut chunk = [0u8; 4096];
            match self.fd.read(&mut chunk) {
                Ok(0) => {
                    let e = PmiError::Io {
                        version: self.version.name(),
                        what,
                        source: io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the PMI server closed the connection",
                        ),
                    };
                    return Err(self.fail(e));
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    let e = PmiError::Io {
                        version: self.version.name(),
                        what,
                        source,
                    };
                    return Err(self.fail(e));
                }
            }
        }
    }

    // poll(2) for readability; Ok(false) on timeout.
    fn wait_readable(&mut self, left: Duration, what: &'static str) -> Result<bool, PmiError> {
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n >= 0 {
                return Ok(n > 0);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                let e = PmiError::Io {
                    version: self.version.name(),
                    what,
                    source: e,
                };
                return Err(self.fail(e));
            }
        }
    }

    fn check_rc(&self, what: &'static str, r: &Message) -> Result<(), PmiError> {
        match r.rc() {
            Some(0) => Ok(()),
            _ => Err(self.refused(what, r)),
        }
    }

    fn refused(&self, what: &'static str, r: &Message) -> PmiError {
        match r.rc() {
            Some(rc) => PmiError::Refused {
                version: self.version.name(),
                what,
                rc,
                msg: r
                    .get("msg")
                    .or_else(|| r.get("errmsg"))
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default(),
            },
            None => self.malformed_msg(what, format!("no valid rc in {r}")),
        }
    }

    fn unexpected(&mut self, what: &'static str, expect: &str, r: &Message) -> PmiError {
        let e = self.malformed_msg(what, format!("expected {expect}, got {r}"));
        self.fail(e)
    }

    fn malformed(&self, what: &'static str, e: WireError) -> PmiError {
        self.malformed_msg(what, e.to_string())
    }

    fn malformed_msg(&self, what: &'static str, detail: String) -> PmiError {
        PmiError::Malformed {
            version: self.version.name(),
            what,
            detail,
        }
    }

    fn fail(&mut self, e: PmiError) -> PmiError {
        self.poisoned = true;
        e
    }
}

impl rankwire_transports::Exchange for PmiClient {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        PmiClient::put(self, key, value).map_err(|e| e.to_string())
    }

    fn get(&mut self, _owner: u32, key: &str) -> Result<Vec<u8>, String> {
        PmiClient::get(self, key).map_err(|e| e.to_string())
    }

    fn fence(&mut self) -> Result<(), String> {
        PmiClient::fence(self).map_err(|e| e.to_string())
    }
}

fn env_u32(var: &str) -> Option<u32> {
    std::env::var(var).ok()?.trim().parse().ok()
}

fn check_key(key: &str) -> Result<(), PmiError> {
    let bad = |why| PmiError::BadKey {
        key: key.to_string(),
        why,
    };
    if key.is_empty() {
        return Err(bad("empty"));
    }
    // Room for the "~<piece>" suffix of long values.
    if key.len() > MAX_KEY_BYTES - 8 {
        return Err(bad("longer than 56 bytes"));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(bad(
            "only ASCII letters, digits, '-', '_' and '.' are allowed",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
