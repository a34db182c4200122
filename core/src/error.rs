//! Errors: every variant names the layer that failed, the numbers involved, and the fix.
//!
//! Two kinds of failure are kept apart (STYLE §5):
//! - a *local* failure of one request, such as a truncated receive: the request ends with
//!   [`Error::Matching`], the communicator stays usable;
//! - a *fatal* failure of a peer or transport ([`Error::Connection`], [`Error::Transport`]):
//!   every pending request with that peer fails, and later ones fail at once.

use std::fmt;

/// Result alias of the rankwire API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The public error of rankwire. The variant says which layer failed.
///
/// Every message has the same three parts: the layer (`bootstrap:`, `connection to
/// rank 3:`, ...), the numbers involved (ranks, tags, bytes, milliseconds), and after
/// `fix:` what to do about it ([`Error::remedy`]). A test enumerates every variant and
/// checks all three.
///
/// `Debug` prints the same as `Display` (as `anyhow` does), so that an error returned
/// from `fn main() -> rankwire::Result<()>` shows the layer, the numbers and the fix.
#[derive(Clone, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Bootstrap (launcher/key-value server) failed: the rank could not join the job.
    /// Likely cause: the program was started with a stale or foreign environment, or
    /// `rwrun` died. Fix: start the program with `rwrun -n N prog`.
    Bootstrap(String),
    /// The connection to a peer failed or was lost. Likely cause: the peer process died
    /// (see its output) or the network path is wrong (set `RANKWIRE_TCP_IF`).
    Connection {
        /// World rank of the peer.
        peer: u32,
        /// What failed, including the transport's own message.
        detail: String,
    },
    /// A receive could not be matched correctly. The request failed; the communicator
    /// remains usable.
    Matching(#[source] MatchError),
    /// A transport reported a protocol violation by a peer (malformed frame,
    /// out-of-range offsets: a bug or memory corruption in the peer, or a foreign
    /// process), or a local OS call of the transport failed (`peer` is then
    /// [`NO_PEER`]).
    Transport {
        /// Transport name (`tcp`, `shm`, `self`, `wire`, ...).
        transport: &'static str,
        /// World rank of the peer, or [`NO_PEER`] for a local failure.
        peer: u32,
        /// What was wrong.
        detail: String,
    },
    /// Memory registration failed (RDMA memory regions, host registration for CUDA).
    /// Likely cause: the locked-memory limit (`ulimit -l`).
    Registration(String),
    /// A GPU operation failed or GPU support is missing from this build.
    Gpu(String),
    /// Ranks called a collective inconsistently (different operation, count or root).
    Collective(String),
    /// The caller passed invalid arguments (rank out of range, negative or too large
    /// tag, finalized universe). Fix the call.
    Usage(String),
}

/// The fix of a usage error that does not carry its own: the one its message is about,
/// judged by whole words (a setting's name first, then finalize, tag, rank).
fn usage_remedy(msg: &str) -> &'static str {
    let words: Vec<&str> = msg
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| words.contains(&w);
    if words.iter().any(|w| w.starts_with("RANKWIRE_")) {
        "set the variable to one of the values named above (`rwrun --settings` lists every \
         setting with its valid values)"
    } else if has("finalize") || has("finalized") {
        "make no call after finalize (finalize last, or let the Universe drop at the end)"
    } else if has("tag") {
        "pass a tag in 0..=tag_ub() (ANY_TAG only where a receive allows it)"
    } else if has("rank") {
        "pass a rank in 0..size of the communicator (ANY_SOURCE only where a receive \
         allows it)"
    } else {
        "pass a value the message allows"
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The `peer` of an [`Error::Transport`] that concerns no peer (a local OS failure).
pub const NO_PEER: u32 = u32::MAX;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // A bootstrap message that names its own fix (launch detection, a missing
            // PMIx library) ends there.
            Error::Bootstrap(d) if d.contains("Fix:") => return write!(f, "bootstrap: {d}"),
            Error::Bootstrap(d) => write!(f, "bootstrap: {d}")?,
            Error::Connection { peer, detail } => {
                write!(f, "connection to rank {peer} failed: {detail}")?
            }
            // The matching layer's own messages already end in their fix.
            Error::Matching(m) => return write!(f, "matching: {m}"),
            Error::Transport {
                transport,
                peer: NO_PEER,
                detail,
            } => write!(f, "transport {transport}: {detail}")?,
            Error::Transport {
                transport,
                peer,
                detail,
            } => write!(f, "transport {transport}: rank {peer}: {detail}")?,
            Error::Registration(d) => write!(f, "registration: {d}")?,
            // A GPU message that names its own fix ends there.
            Error::Gpu(d) if d.contains("; fix: ") => return write!(f, "gpu: {d}"),
            Error::Gpu(d) => write!(f, "gpu: {d}")?,
            Error::Collective(d) => write!(f, "collective: {d}")?,
            // A usage message that carries its own fix (a setting, --require) ends there.
            Error::Usage(d) if d.contains("; fix: ") => return write!(f, "usage: {d}"),
            Error::Usage(d) => write!(f, "usage: {d}")?,
        }
        write!(f, "; fix: {}", self.remedy())
    }
}
/// Errors of the matching layer (MPI 4.1 §3.2.4 and §3.5).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum MatchError {
    /// The message is larger than the receive buffer. The first `buffer_bytes` bytes
    /// were received, the rest was discarded, and the message is consumed. Fix: post a
    /// larger buffer (use `probe` to learn the size first).
    #[error(
        "message from rank {source_rank} with tag {tag} truncated: {message_bytes} bytes sent but buffer holds {buffer_bytes} bytes; fix: post a larger buffer (probe first to learn the size)"
    )]
    Truncated {
        /// Rank that sent the message.
        source_rank: u32,
        /// Tag of the message.
        tag: i32,
        /// Size of the message in bytes.
        message_bytes: u64,
        /// Size of the receive buffer in bytes.
        buffer_bytes: u64,
    },
    /// The received byte count is not a multiple of the element size of the buffer.
    #[error(
        "message from rank {source_rank} with tag {tag} has {message_bytes} bytes, not a whole number of {elem_bytes}-byte elements; fix: sender and receiver must use the same element type (or receive into a byte buffer)"
    )]
    ElementSize {
        /// Rank that sent the message.
        source_rank: u32,
        /// Tag of the message.
        tag: i32,
        /// Size of the message in bytes.
        message_bytes: u64,
        /// Element size of the receive buffer in bytes.
        elem_bytes: usize,
    },
    /// The operation was cancelled by [`crate::Communicator::cancel_pending`] (MPI 4.1
    /// §3.8.4) before it matched: a receive wrote nothing to its buffer, a send's
    /// message will never be received. Not a failure of the program when the cancel was
    /// meant.
    #[error(
        "operation cancelled before it matched: nothing of the message was received; fix: nothing, if the cancel was meant (MPI_Test_cancelled tells)"
    )]
    Cancelled,
    /// A request given by its id ([`crate::RawRequest::from_parts`]) that the runtime
    /// does not hold: completed already (by another call, or through a copy of its
    /// handle), or never made.
    #[error(
        "request {number} is not pending in this runtime: it was completed already (by another call, or through a copy of its handle) or never made; fix: complete each request once, and do not use a copy of its handle after that"
    )]
    UnknownRequest {
        /// The request's number among this rank's requests (1 for the first).
        number: u64,
    },
}

impl Error {
    /// The layer that failed: `bootstrap`, `connection`, `matching`, `transport`,
    /// `registration`, `gpu`, `collective` or `usage` (the first word of the message).
    pub fn layer(&self) -> &'static str {
        match self {
            Error::Bootstrap(_) => "bootstrap",
            Error::Connection { .. } => "connection",
            Error::Matching(_) => "matching",
            Error::Transport { .. } => "transport",
            Error::Registration(_) => "registration",
            Error::Gpu(_) => "gpu",
            Error::Collective(_) => "collective",
            Error::Usage(_) => "usage",
        }
    }

    /// What to do about this error (the part of the message after `fix:`).
    pub fn remedy(&self) -> String {
        match self {
            // A failure of the resource manager's PMI or PMIx server's wire-up (srun);
            // not the launch-detection errors ("... Slurm step ..."), which carry their
            // own fix.
            Error::Bootstrap(m) if m.contains("PMI") && !m.contains("Slurm step") => {
                "read the other tasks' output (srun -l labels it): one that died during \
                start-up leaves the others waiting; run with `srun -K` (kill-on-bad-exit) \
                so that such a death ends the step; if ranks are only slow to start, raise \
                RANKWIRE_BOOTSTRAP_TIMEOUT (seconds)"
                    .into()
            }
            Error::Bootstrap(_) => {
                "start the program with `rwrun -n N prog` from the same build, and \
                keep rwrun running until every rank has finalized; if ranks are only slow to \
                start, raise RANKWIRE_BOOTSTRAP_TIMEOUT (seconds)"
                    .into()
            }
            // The RDMA queue pair to a live peer could not be made (on this rank or, by
            // its Fail message, on the peer): the fix is in the set-up, not the peer.
            Error::Connection { peer, detail }
                if detail.contains(rankwire_transports::rdma::SETUP_FAILED) =>
            {
                format!(
                    "the RDMA queue pair to rank {peer} could not be made (the reason above \
                     names the rank where it failed): `Cannot allocate memory` from \
                     ibv_reg_mr or ibv_create_qp needs a higher locked-memory limit there \
                     (`ulimit -l unlimited`); an ibv_modify_qp(RTR) failure means the two \
                     ports cannot reach each other with the chosen GIDs (give every rank \
                     the same RANKWIRE_IB_HCA and RANKWIRE_IB_GID_INDEX, see `rwrun \
                     --doctor`); RANKWIRE_TRANSPORTS=shm,tcp runs the job without RDMA"
                )
            }
            // Started by srun: no rwrun line to read, and Slurm ends the step only with -K.
            Error::Connection { peer, .. }
                if crate::bootstrap::launch::under_resource_manager() =>
            {
                format!(
                    "rank {peer} has probably exited: read its output (`srun -l` labels each \
                     line with its task), and run with `srun -K` so that Slurm ends the step \
                     when a task fails; if it is still running, check the network path to it \
                     (RANKWIRE_TCP_IF, RANKWIRE_TCP_IF_EXCLUDE, RANKWIRE_CONNECT_TIMEOUT)"
                )
            }
            Error::Connection { peer, .. } => format!(
                "rank {peer} has probably exited: read its output and rwrun's line about it; \
                 if it is still running, check the network path to it (RANKWIRE_TCP_IF, \
                 RANKWIRE_TCP_IF_EXCLUDE, RANKWIRE_CONNECT_TIMEOUT)"
            ),
            Error::Matching(MatchError::Truncated { .. }) => {
                "post a larger buffer (probe first to learn the size)".into()
            }
            Error::Matching(MatchError::ElementSize { .. }) => {
                "sender and receiver must use the same element type".into()
            }
            Error::Matching(MatchError::Cancelled) => {
                "nothing, if the cancel was meant (MPI_Test_cancelled tells)".into()
            }
            Error::Matching(MatchError::UnknownRequest { .. }) => {
                "complete each request once, and do not use a copy of its handle after that".into()
            }
            Error::Transport {
                transport,
                peer: NO_PEER,
                ..
            } => format!(
                "a local {transport} call failed: check the OS limit it names (ulimit -n, \
                 /dev/shm space, ulimit -l), or leave the transport out with RANKWIRE_TRANSPORTS"
            ),
            Error::Transport { peer, .. } => format!(
                "rank {peer} sent bytes that are not a valid rankwire frame: run every rank \
                 from the same rankwire build, keep foreign processes off the job's ports, \
                 and check rank {peer} for memory corruption"
            ),
            Error::Registration(_) => "raise the locked-memory limit (`ulimit -l unlimited`, \
                or memlock in /etc/security/limits.conf) or register less memory at once"
                .into(),
            Error::Gpu(d) if d.contains("no CUDA driver") => "this process has no NVIDIA \
                driver, so device buffers and streams cannot be used here: use host buffers \
                and the host calls, or run on a machine with a GPU and its driver \
                (nvidia-smi lists them)"
                .into(),
            Error::Gpu(_) => "device buffers need the `cuda` feature (on by default, off with \
                --no-default-features) and a driver: check the \
                driver and device named above (nvidia-smi); RANKWIRE_CUDA_IPC=0 stages device \
                memory through the host instead of CUDA IPC"
                .into(),
            Error::Collective(_) => "call the same collectives in the same order on every rank \
                of the communicator, with the same root, op, element type and matching counts \
                (RANKWIRE_COLL_CHECK=1 names the ranks that differ)"
                .into(),
            Error::Usage(d) => usage_remedy(d).into(),
        }
    }

    /// Whether this error concerns only one request (the communicator stays usable).
    pub fn is_local(&self) -> bool {
        matches!(self, Error::Matching(_) | Error::Usage(_))
    }

    pub(crate) fn usage(msg: impl fmt::Display) -> Self {
        Error::Usage(msg.to_string()).noted()
    }

    /// Record this error as the last one handed out (see [`crate::abort`]: the reason a
    /// universe dropped without finalize reports), and return it.
    pub(crate) fn noted(self) -> Self {
        crate::abort::note(&self);
        self
    }
}

impl From<MatchError> for Error {
    fn from(e: MatchError) -> Self {
        Error::Matching(e).noted()
    }
}

impl From<rankwire_transports::TransportError> for Error {
    fn from(e: rankwire_transports::TransportError) -> Self {
        use rankwire_transports::TransportError as T;
        match &e {
            T::Connect { peer, .. } | T::PeerLost { peer, .. } | T::NoSuchPeer { peer, .. } => {
                Error::Connection {
                    peer: *peer,
                    detail: e.to_string(),
                }
            }
            T::Malformed {
                transport, peer, ..
            } => Error::Transport {
                transport,
                peer: *peer,
                detail: e.to_string(),
            },
            T::Unsupported { transport, .. } | T::Os { transport, .. } => Error::Transport {
                transport,
                peer: NO_PEER,
                detail: e.to_string(),
            },
        }
        .noted()
    }
}

/// GPU leaf errors become [`Error::Gpu`] (so `DeviceBuffer::alloc(..)?` works in a
/// function returning [`Result`]).
impl From<rankwire_gpu::GpuError> for Error {
    fn from(e: rankwire_gpu::GpuError) -> Error {
        Error::Gpu(e.to_string()).noted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankwire_transports::TransportError as T;

    /// One sample of every variant, built the way the runtime builds them, with the
    /// numbers its message must carry. The `match` in [`every_variant_states_layer_numbers_and_fix`]
    /// is exhaustive, so a new variant does not compile until it has a sample here.
    fn samples() -> Vec<(Error, &'static [&'static str])> {
        vec![
            (
                Error::Bootstrap(
                    crate::bootstrap::client::BootstrapError::Timeout {
                        addr: "127.0.0.1:4100".into(),
                        what: "fence",
                        timeout_ms: 1500,
                    }
                    .to_string(),
                ),
                &["127.0.0.1:4100", "1500 ms"],
            ),
            (
                Error::from(T::PeerLost {
                    transport: "tcp",
                    peer: 3,
                    reason: "closed by peer".into(),
                }),
                &["rank 3"],
            ),
            (
                Error::from(MatchError::Truncated {
                    source_rank: 2,
                    tag: 7,
                    message_bytes: 400,
                    buffer_bytes: 40,
                }),
                &["rank 2", "tag 7", "400 bytes", "40 bytes"],
            ),
            (
                Error::from(MatchError::ElementSize {
                    source_rank: 1,
                    tag: 9,
                    message_bytes: 10,
                    elem_bytes: 4,
                }),
                &["rank 1", "tag 9", "10 bytes", "4-byte"],
            ),
            (
                Error::from(T::Malformed {
                    transport: "tcp",
                    peer: 5,
                    reason: "header_len 4294967280 exceeds MAX_HEADER_BYTES 4096".into(),
                }),
                &["rank 5", "4294967280", "4096"],
            ),
            (
                Error::from(T::Os {
                    transport: "shm",
                    call: "ftruncate",
                    reason: "No space left on device (os error 28)".into(),
                }),
                &["ftruncate", "os error 28"],
            ),
            (
                Error::Registration("ibv_reg_mr of 8388608 bytes failed: ENOMEM".into()),
                &["8388608 bytes"],
            ),
            (
                Error::Gpu(
                    rankwire_gpu::GpuError::Driver {
                        call: "cuIpcOpenMemHandle",
                        code: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED".into(),
                    }
                    .to_string(),
                ),
                &["cuIpcOpenMemHandle", "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"],
            ),
            (
                Error::Collective(
                    "allreduce: count mismatch: ranks 0, 1: 4 elements (32 bytes); rank 2: 5 \
                     elements (40 bytes)"
                        .into(),
                ),
                &["rank 2", "40 bytes"],
            ),
            (
                Error::usage("rank 5 out of range for a communicator of size 2"),
                &["rank 5", "size 2"],
            ),
        ]
    }

    #[test]
    fn no_driver_gets_a_fix_that_applies_without_a_driver() {
        let e = Error::Gpu(format!(
            "allreduce_device: cannot classify the buffer: {}",
            rankwire_gpu::GpuError::NoDriver
        ));
        let t = e.to_string();
        assert!(t.contains("use host buffers"), "{t}");
        assert!(!t.contains("RANKWIRE_CUDA_IPC"), "{t}");
        let other = Error::Gpu("cuMemcpyDtoDAsync failed".into()).to_string();
        assert!(other.contains("nvidia-smi"), "{other}");
    }

    #[test]
    fn a_failed_rdma_queue_pair_set_up_gets_the_set_ups_fix_not_a_lost_peers() {
        let e = Error::from(T::Connect {
            transport: "rdma",
            peer: 1,
            reason: format!(
                "{}: rank 1 could not set up its end of the queue pair: ibv_modify_qp(RTR) \
                 failed: Invalid argument",
                rankwire_transports::rdma::SETUP_FAILED
            ),
        });
        let fix = e.remedy();
        assert!(
            fix.contains("ulimit -l") && fix.contains("RANKWIRE_IB_GID_INDEX"),
            "{fix}"
        );
        assert!(!fix.contains("probably exited"), "{fix}");
        // A lost RDMA peer keeps the lost peer's fix.
        let lost = Error::from(T::PeerLost {
            transport: "rdma",
            peer: 1,
            reason: "SEND completed with retry exceeded".into(),
        });
        assert!(
            lost.remedy().contains("probably exited"),
            "{}",
            lost.remedy()
        );
    }

    #[test]
    fn usage_errors_get_the_fix_they_are_about() {
        let own = Error::Usage("this setting is bad; fix: set it to 0".into()).to_string();
        assert_eq!(own, "usage: this setting is bad; fix: set it to 0");
        let tag = Error::Usage("tag -3 is negative".into()).to_string();
        assert!(
            tag.ends_with(
                "fix: pass a tag in 0..=tag_ub() (ANY_TAG only where a receive allows it)"
            ),
            "{tag}"
        );
        let rank = Error::Usage("rank 7 is not in a communicator of 2".into()).to_string();
        assert!(rank.contains("fix: pass a rank in 0..size"), "{rank}");
        assert!(!rank.contains("tag_ub"), "{rank}");
        let gpu = Error::Gpu("no GPU; fix: run on one".into()).to_string();
        assert_eq!(gpu, "gpu: no GPU; fix: run on one");
        let fin = Error::Usage("the universe was finalized".into()).to_string();
        assert!(fin.contains("fix: make no call after finalize"), "{fin}");
        // Whole words, a setting first: "staging" is no tag, a setting's name no rank
        // (the name is put together here: the settings table test reads the sources).
        let name = ["RANKWIRE", "NOT_A_SETTING"].join("_");
        let set = Error::Usage(format!("rank 3: {name}=1 needs staging")).to_string();
        assert!(set.contains("fix: set the variable"), "{set}");
    }

    #[test]
    fn debug_prints_what_display_prints() {
        for (e, _) in samples() {
            assert_eq!(format!("{e:?}"), format!("{e}"));
            assert_eq!(format!("{e:#?}"), format!("{e}"));
        }
        // What `fn main() -> rankwire::Result<()>` prints: layer and fix, no variant names.
        let e = Error::usage("rank 2 out of range for a communicator of size 2");
        let shown = format!("Error: {e:?}");
        assert!(shown.starts_with("Error: usage: rank 2"), "{shown}");
        assert!(shown.contains("; fix: "), "{shown}");
        assert!(!shown.contains("Usage("), "{shown}");
    }

    #[test]
    fn every_variant_states_layer_numbers_and_fix() {
        let mut seen = [false; 8];
        for (e, numbers) in samples() {
            let i = match &e {
                Error::Bootstrap(_) => 0,
                Error::Connection { .. } => 1,
                Error::Matching(_) => 2,
                Error::Transport { .. } => 3,
                Error::Registration(_) => 4,
                Error::Gpu(_) => 5,
                Error::Collective(_) => 6,
                Error::Usage(_) => 7,
            };
            seen[i] = true;
            assert_complete(&e, numbers);
            assert!(!e.remedy().is_empty());
        }
        assert!(seen.iter().all(|&x| x), "a variant has no sample: {seen:?}");
    }

    /// Every variant of the lower layers' public errors, wrapped as the runtime wraps it,
    /// with the numbers its message must carry. Exhaustive matches make a new variant fail
    /// to compile until it has a sample.
    #[test]
    fn every_lower_layer_variant_reaches_users_with_layer_numbers_and_fix() {
        use crate::bootstrap::client::BootstrapError as B;
        use crate::wire::WireError as W;
        use rankwire_gpu::GpuError as G;
        let io = || std::io::Error::from_raw_os_error(111);
        let addr = || "127.0.0.1:4100".to_string();
        let transport: Vec<(T, &[&str])> = vec![
            (
                T::Connect {
                    transport: "tcp",
                    peer: 4,
                    reason: "10.0.0.2:4711: timed out after 5000 ms".into(),
                },
                &["rank 4", "5000 ms"],
            ),
            (
                T::PeerLost {
                    transport: "shm",
                    peer: 2,
                    reason: "process exited".into(),
                },
                &["rank 2"],
            ),
            (
                T::Malformed {
                    transport: "tcp",
                    peer: 6,
                    reason: "payload_len 4194305 exceeds 4194304".into(),
                },
                &["rank 6", "4194305"],
            ),
            (
                T::Unsupported {
                    transport: "self",
                    what: "put",
                },
                &["self", "put"],
            ),
            (
                T::Os {
                    transport: "tcp",
                    call: "epoll_wait",
                    reason: "os error 4".into(),
                },
                &["epoll_wait", "os error 4"],
            ),
            (
                T::NoSuchPeer {
                    transport: "tcp",
                    peer: 9,
                },
                &["rank 9"],
            ),
        ];
        let mut seen = [false; 6];
        for (e, numbers) in transport {
            seen[match &e {
                T::Connect { .. } => 0,
                T::PeerLost { .. } => 1,
                T::Malformed { .. } => 2,
                T::Unsupported { .. } => 3,
                T::Os { .. } => 4,
                T::NoSuchPeer { .. } => 5,
            }] = true;
            assert_complete(&Error::from(e), numbers);
        }
        assert!(seen.iter().all(|&x| x));

        let bootstrap: Vec<(B, &[&str])> = vec![
            (
                B::Connect {
                    addr: addr(),
                    waited_ms: 30000,
                    source: io(),
                },
                &["127.0.0.1:4100", "30000 ms", "os error 111"],
            ),
            (
                B::Refused {
                    addr: addr(),
                    what: "hello",
                    message: "wrong job secret".into(),
                },
                &["127.0.0.1:4100", "hello"],
            ),
            (
                B::Io {
                    addr: addr(),
                    what: "fence",
                    source: io(),
                },
                &["127.0.0.1:4100", "os error 111"],
            ),
            (
                B::Timeout {
                    addr: addr(),
                    what: "get",
                    timeout_ms: 60000,
                },
                &["60000 ms"],
            ),
            (
                B::Protocol {
                    addr: addr(),
                    what: "put",
                    detail: "unexpected response Value".into(),
                },
                &["127.0.0.1:4100"],
            ),
            (B::Poisoned { addr: addr() }, &["127.0.0.1:4100"]),
            (
                B::Env {
                    var: "RANKWIRE_RANK",
                    detail: "\"x\" is not a number".into(),
                },
                &["RANKWIRE_RANK"],
            ),
        ];
        let mut seen = [false; 7];
        for (e, numbers) in bootstrap {
            seen[match &e {
                B::Connect { .. } => 0,
                B::Refused { .. } => 1,
                B::Io { .. } => 2,
                B::Timeout { .. } => 3,
                B::Protocol { .. } => 4,
                B::Poisoned { .. } => 5,
                B::Env { .. } => 6,
            }] = true;
            assert_complete(&Error::Bootstrap(e.to_string()), numbers);
        }
        assert!(seen.iter().all(|&x| x));

        let wire: Vec<(W, &[&str])> = vec![
            (W::BadMagic(0x4745), &["0x4745"]),
            (W::BadVersion(9), &["version 9"]),
            (W::BadKind(77), &["kind 77"]),
            (
                W::BadLength {
                    kind: 1,
                    declared: 3000,
                    available: 40,
                },
                &["3000", "40 bytes"],
            ),
            (W::BadMem(5), &["tag 5"]),
            (W::BadFlags(0x80), &["0x80"]),
        ];
        let mut seen = [false; 6];
        for (e, numbers) in wire {
            seen[match &e {
                W::BadMagic(_) => 0,
                W::BadVersion(_) => 1,
                W::BadKind(_) => 2,
                W::BadLength { .. } => 3,
                W::BadMem(_) => 4,
                W::BadFlags(_) => 5,
            }] = true;
            // As the protocol wraps it (Protocol::on_frame).
            let e = Error::Transport {
                transport: "wire",
                peer: 3,
                detail: format!("malformed frame: {e}"),
            };
            assert_complete(&e, numbers);
            assert!(e.to_string().contains("rank 3"));
        }
        assert!(seen.iter().all(|&x| x));

        let gpu: Vec<(G, &[&str])> = vec![
            (G::NotBuilt, &["cuda"]),
            (G::NoDriver, &["libcuda"]),
            (
                G::DriverTooOld {
                    symbol: "cuMemGetHandleForAddressRange",
                },
                &["cuMemGetHandleForAddressRange", "580"],
            ),
            (
                G::Driver {
                    call: "cuIpcOpenMemHandle",
                    code: "CUDA_ERROR_INVALID_VALUE".into(),
                },
                &["cuIpcOpenMemHandle", "CUDA_ERROR_INVALID_VALUE"],
            ),
            (
                G::Nvrtc {
                    call: "nvrtcCompileProgram",
                    code: "NVRTC_ERROR_COMPILATION".into(),
                    log: "line 3".into(),
                },
                &["nvrtcCompileProgram", "line 3"],
            ),
            (
                G::Unsupported(rankwire_gpu::Unsupported::NoDmaBuf { ordinal: 1 }),
                &["device 1"],
            ),
            (
                G::OutsideAllocation {
                    addr: 0x1000,
                    len: 64,
                    base: 0x1000,
                    alloc_len: 32,
                },
                &["64 bytes", "32 bytes"],
            ),
        ];
        let mut seen = [false; 7];
        for (e, numbers) in gpu {
            seen[match &e {
                G::NotBuilt => 0,
                G::NoDriver => 1,
                G::DriverTooOld { .. } => 2,
                G::Driver { .. } => 3,
                G::Nvrtc { .. } => 4,
                G::Unsupported(_) => 5,
                G::OutsideAllocation { .. } => 6,
            }] = true;
            // As the protocol wraps it (device copies).
            assert_complete(
                &Error::Gpu(format!("copy into the cuda:0 receive buffer: {e}")),
                numbers,
            );
        }
        assert!(seen.iter().all(|&x| x));
    }

    /// The message starts with its layer, holds `numbers`, and ends in one remedy.
    fn assert_complete(e: &Error, numbers: &[&str]) {
        let s = e.to_string();
        let layer_word = match e.layer() {
            "connection" => "connection to rank",
            l => l,
        };
        assert!(
            s.starts_with(layer_word),
            "{s:?} does not start with its layer"
        );
        for n in numbers {
            assert!(s.contains(n), "{s:?} lacks {n:?}");
        }
        let fix = s.split_once("; fix: ").map(|x| x.1).unwrap_or("");
        assert!(fix.len() > 20, "{s:?} has no remedy after `; fix: `");
        assert_eq!(s.matches("fix:").count(), 1, "{s}");
    }

    #[test]
    fn truncation_message_names_everything() {
        let e = Error::from(MatchError::Truncated {
            source_rank: 2,
            tag: 7,
            message_bytes: 400,
            buffer_bytes: 40,
        });
        let s = e.to_string();
        for needle in ["rank 2", "tag 7", "400 bytes", "40 bytes", "matching"] {
            assert!(s.contains(needle), "{s} lacks {needle}");
        }
        assert!(e.is_local());
    }

    #[test]
    fn local_transport_failure_names_no_fake_rank() {
        let e = Error::from(T::Unsupported {
            transport: "self",
            what: "put",
        });
        let s = e.to_string();
        assert!(!s.contains(&u32::MAX.to_string()), "{s}");
        assert!(s.starts_with("transport self: "), "{s}");
    }
}
