//! Messages of the bootstrap protocol, shared by the rank-side client and `rwrun`'s
//! server.
//!
//! # Framing
//! Over one TCP connection, each message is a 4-byte big-endian length `n` followed by
//! `n` bytes of JSON (serde_json) encoding a [`Request`] (client → server) or a
//! [`Response`] (server → client). `n` is at most [`MAX_MESSAGE_BYTES`]; a longer length
//! is a protocol error and the connection is closed.
//!
//! # Conversation
//! 1. The client's first message is [`Request::Hello`] carrying the job id, the job
//!    secret and its rank. The server compares the secret in constant time; on mismatch
//!    it answers [`Response::Error`], logs the refusal and closes the connection.
//! 2. Then any number of `Put`, `Get`, `GetMany`, `Fence`, `Abort`, `Finalize`, each
//!    answered by exactly one response, in order. `Get` is answered when the key exists
//!    (the server holds the answer back until some rank puts it), `GetMany` when all its
//!    keys do. `Fence` is answered when every
//!    rank of the job has sent its `Fence` of the same generation.
//! 3. [`Request::Watch`] turns the connection into a liveness watch: the server never
//!    answers it, and a rank whose watch connection hits EOF knows the launcher is gone.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// Largest encoded message, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Most keys one [`Request::GetMany`] may name (the client splits longer lists). With
/// values of up to a few hundred bytes (JSON spends up to 4 bytes per value byte), an
/// answer stays far below [`MAX_MESSAGE_BYTES`].
pub const MAX_GET_MANY_KEYS: usize = 1024;

/// Client → server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// First message of every connection.
    Hello {
        /// Job id from `RANKWIRE_JOB_ID`.
        job_id: String,
        /// Secret from `RANKWIRE_JOB_SECRET`.
        secret: String,
        /// World rank of the client.
        rank: u32,
    },
    /// Store `value` under `key` (last write wins).
    Put {
        /// Key.
        key: String,
        /// Value bytes.
        value: Vec<u8>,
    },
    /// Read `key`, waiting until it exists.
    Get {
        /// Key.
        key: String,
    },
    /// Read every key of `keys`, waiting until each exists; answered by one
    /// [`Response::Values`] in the order of `keys`. One round trip instead of
    /// `keys.len()` (a rank learns about all its peers at init without N gets, issue 21).
    GetMany {
        /// Keys, at most [`MAX_GET_MANY_KEYS`].
        keys: Vec<String>,
    },
    /// Barrier over all ranks of the job.
    Fence,
    /// Ask the launcher to abort the whole job with exit status `code`.
    Abort {
        /// Exit status for `rwrun`.
        code: i32,
        /// Why, printed by the launcher.
        message: String,
    },
    /// This rank finalized cleanly.
    Finalize,
    /// Liveness watch; never answered.
    Watch,
}

/// Server → client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The request succeeded.
    Ok,
    /// Answer to `Get`.
    Value {
        /// The stored bytes.
        value: Vec<u8>,
    },
    /// Answer to `GetMany`: the values, in the order of its keys.
    Values {
        /// The stored bytes of each key.
        values: Vec<Vec<u8>>,
    },
    /// The request failed (wrong secret, unknown job, bad rank, ...).
    Error {
        /// Human-readable reason.
        message: String,
    },
}

/// Write one framed message.
///
/// # Errors
/// I/O errors of `w`; `InvalidInput` if the encoding exceeds [`MAX_MESSAGE_BYTES`].
pub fn write_message<W: Write, T: Serialize>(w: &mut W, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "bootstrap message of {} bytes exceeds {MAX_MESSAGE_BYTES}",
                body.len()
            ),
        ));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf)?;
    w.flush()
}

/// Read one framed message.
///
/// # Errors
/// `UnexpectedEof` when the peer closed; `InvalidData` for an oversized length or bad
/// JSON.
pub fn read_message<R: Read, T: for<'de> Deserialize<'de>>(r: &mut R) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let n = u32::from_be_bytes(len) as usize;
    let body = decode_len(n)?;
    let mut body = vec![0u8; body];
    r.read_exact(&mut body)?;
    decode_body(&body)
}

/// Validate a frame length read from the wire.
///
/// # Errors
/// `InvalidData` if `n` exceeds [`MAX_MESSAGE_BYTES`].
pub fn decode_len(n: usize) -> io::Result<usize> {
    if n > MAX_MESSAGE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bootstrap message length {n} exceeds {MAX_MESSAGE_BYTES}"),
        ));
    }
    Ok(n)
}

/// Decode a frame body.
///
/// # Errors
/// `InvalidData` for bytes that are not a valid message.
pub fn decode_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> io::Result<T> {
    serde_json::from_slice(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let msgs = vec![
            Request::Hello {
                job_id: "j".into(),
                secret: "s".into(),
                rank: 3,
            },
            Request::Put {
                key: "k".into(),
                value: vec![0, 1, 255],
            },
            Request::Fence,
        ];
        let mut buf = Vec::new();
        for m in &msgs {
            write_message(&mut buf, m).unwrap();
        }
        let mut r = &buf[..];
        for m in &msgs {
            let got: Request = read_message(&mut r).unwrap();
            assert_eq!(&got, m);
        }
        assert!(read_message::<_, Request>(&mut r).is_err());
    }

    #[test]
    fn oversized_length_is_refused() {
        let mut buf = ((MAX_MESSAGE_BYTES + 1) as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(b"{}");
        let err = read_message::<_, Request>(&mut &buf[..]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
