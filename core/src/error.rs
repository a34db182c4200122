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
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Bootstrap (launcher/key-value server) failed: the rank could not join the job.
    /// Likely cause: the program was started with a stale or foreign environment, or
    /// `rwrun` died. Fix: start the program with `rwrun -n N prog`.
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// The connection to a peer failed or was lost. Likely cause: the peer process died
    /// (see its output) or the network path is wrong (set `RANKWIRE_TCP_IF`).
    #[error("connection to rank {peer} failed: {detail}")]
    Connection {
        /// World rank of the peer.
        peer: u32,
        /// What failed, including the transport's own message.
        detail: String,
    },
    /// A receive could not be matched correctly. The request failed; the communicator
    /// remains usable.
    #[error("matching: {0}")]
    Matching(#[from] MatchError),
    /// A transport reported a protocol violation by a peer (malformed frame,
    /// out-of-range offsets): a bug or memory corruption in the peer.
    #[error("transport {transport}: rank {peer}: {detail}")]
    Transport {
        /// Transport name (`tcp`, `shm`, `self`, ...).
        transport: &'static str,
        /// World rank of the peer.
        peer: u32,
        /// What was wrong.
        detail: String,
    },
    /// Memory registration failed (RDMA memory regions, host registration for CUDA).
    #[error("registration: {0}")]
    Registration(String),
    /// A GPU operation failed or GPU support is missing from this build.
    #[error("gpu: {0}")]
    Gpu(String),
    /// Ranks called a collective inconsistently (different operation, count or root).
    #[error("collective: {0}")]
    Collective(String),
    /// The caller passed invalid arguments (rank out of range, negative or too large
    /// tag, finalized universe). Fix the call.
    #[error("usage: {0}")]
    Usage(String),
}

/// Errors of the matching layer (MPI 4.1 §3.2.4 and §3.5).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum MatchError {
    /// The message is larger than the receive buffer. The first `buffer_bytes` bytes
    /// were received, the rest was discarded, and the message is consumed. Fix: post a
    /// larger buffer (use `probe` to learn the size first).
    #[error(
        "message from rank {source_rank} with tag {tag} truncated: {message_bytes} bytes sent but buffer holds {buffer_bytes} bytes; post a larger buffer (probe first to learn the size)"
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
        "message from rank {source_rank} with tag {tag} has {message_bytes} bytes, not a whole number of {elem_bytes}-byte elements; sender and receiver disagree on the element type"
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
}

impl Error {
    /// Whether this error concerns only one request (the communicator stays usable).
    pub fn is_local(&self) -> bool {
        matches!(self, Error::Matching(_) | Error::Usage(_))
    }

    pub(crate) fn usage(msg: impl fmt::Display) -> Self {
        Error::Usage(msg.to_string())
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
                peer: u32::MAX,
                detail: e.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
