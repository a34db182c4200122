//! The connection handshake and the published address record (the wire part of setup;
//! `setup.rs` runs it).
//!
//! # Wire format (all integers little-endian)
//! ```text
//! hello (connector → acceptor, 48 bytes)       ack (acceptor → connector, 80 bytes)
//!  0  magic     b"RWTCPHI\0"                     0  magic     b"RWTCPACK"
//!  8  u32 protocol version (3)                   8  u32 protocol version
//! 12  u32 connector rank                        12  u32 status (0 = accepted, 7 = yield, see AckStatus)
//! 16  u32 expected acceptor rank                16  u32 acceptor rank
//! 20  u32 world size                            20  u32 world size
//! 24  u64 job hash (FNV-1a 64 of the job id)    24  u64 job hash
//! 32  16 bytes: connector's nonce Nc            32  16 bytes: acceptor's nonce Na
//!                                               48  32 bytes: HMAC-SHA256(secret, "rankwire-tcp-ack-v2"
//!                                                   ‖ hello[8..48] ‖ status ‖ acceptor ‖ Na)
//! proof (connector → acceptor, 32 bytes, only after an accepting ack)
//!  0  32 bytes: HMAC-SHA256(secret, "rankwire-tcp-proof-v2" ‖ hello[8..48] ‖ Na)
//! ```
//! The acceptor checks magic (else closes silently: not one of us), version, job, world
//! size, that it is the rank the connector wanted, that the connector is a rank it
//! expects (a higher rank in its peer list) and that it is not a duplicate of a live
//! connection; it answers with an ack either way. The connector checks the ack, its MAC
//! first: a process that does not know the job secret cannot make it. A rejection on
//! either side makes the connector try its next candidate address (B019: an address
//! that leads to another process, another job or back to itself).
//!
//! # Authentication
//! The job id is not secret (it is part of every `/dev/shm/rankwire-<job>-*` name), so the
//! job hash only tells jobs apart. What admits a connection is the challenge-response on
//! the job secret (`RANKWIRE_JOB_SECRET` under rwrun; shared through PMI under srun):
//! each side proves knowledge of it by an HMAC-SHA256 over the other side's fresh random
//! nonce and both ranks (the mutual challenge-response of RFC 2104's HMAC, as in e.g.
//! SCRAM's client and server proofs, RFC 5802). The two MACs carry different labels, so
//! one cannot stand in for the other; a recorded handshake replayed later meets a new
//! nonce and fails. MACs are compared in constant time (`hmac`'s `verify_slice`). The
//! acceptor takes a connection only after a valid proof; a failed proof is logged as a
//! warning and the connection dropped, and setup goes on.

use std::net::SocketAddr;

use hmac::{Hmac, Mac};
use sha2::Sha256;

const HELLO_MAGIC: [u8; 8] = *b"RWTCPHI\0";
const ACK_MAGIC: [u8; 8] = *b"RWTCPACK";
/// Version of the handshake and framing, and of what the frames carry; bump on any
/// incompatible change (3: the core's wire version 5, whose short eager header an older
/// build would take for garbage, so builds that differ are refused at connection).
pub(crate) const PROTOCOL_VERSION: u32 = 3;
/// Size of the fields a hello and an ack share (magic to job hash), in bytes.
const BASE_LEN: usize = 32;
/// Size of a nonce, in bytes.
pub(crate) const NONCE_LEN: usize = 16;
/// Size of an HMAC-SHA256, in bytes.
pub(crate) const MAC_LEN: usize = 32;
/// Size of a hello, in bytes.
pub(crate) const HELLO_LEN: usize = BASE_LEN + NONCE_LEN;
/// Size of an ack, in bytes.
pub(crate) const ACK_LEN: usize = BASE_LEN + NONCE_LEN + MAC_LEN;
/// Size of the connector's proof, in bytes.
pub(crate) const PROOF_LEN: usize = MAC_LEN;
const ACK_LABEL: &[u8] = b"rankwire-tcp-ack-v2";
const PROOF_LABEL: &[u8] = b"rankwire-tcp-proof-v2";

/// Whether the first bytes read as an answer can still be an ack (its magic so far).
pub(crate) fn may_be_ack(b: &[u8]) -> bool {
    let n = b.len().min(ACK_MAGIC.len());
    b[..n] == ACK_MAGIC[..n]
}

/// A fresh random nonce (the thread-local CSPRNG of `rand`, seeded from the OS).
pub(crate) fn nonce() -> [u8; NONCE_LEN] {
    rand::random()
}
/// Prefix of the address record published under `tcp-addr-<rank>`.
const RECORD_PREFIX: &str = "rankwire-tcp/1";

/// FNV-1a 64 of the job id: both sides compare it to tell jobs apart.
pub(crate) fn job_hash(job_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in job_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The identity fields both handshake messages carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) version: u32,
    pub(crate) connector: u32,
    pub(crate) acceptor: u32,
    pub(crate) world_size: u32,
    pub(crate) job_hash: u64,
    /// The connector's nonce.
    pub(crate) nonce: [u8; NONCE_LEN],
}

/// Why an acceptor rejected a hello (or `Accepted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum AckStatus {
    Accepted = 0,
    WrongJob = 1,
    WrongRank = 2,
    UnexpectedConnector = 3,
    Duplicate = 4,
    BadVersion = 5,
    WrongSize = 6,
    /// Connections on demand, both ranks dialling each other at once: the acceptor's own
    /// dial wins (the lower rank's dial is kept), so the connector drops this attempt
    /// and waits for the acceptor's connection instead (`ondemand.rs`).
    Yield = 7,
    /// Connections on demand: the acceptor's connection to the connector failed or was
    /// closed earlier, so it takes no new one from it.
    Failed = 8,
}

/// What a valid ack tells the connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckOk {
    /// Accepted; the acceptor's nonce, for the proof.
    Accepted([u8; NONCE_LEN]),
    /// [`AckStatus::Yield`]: the acceptor is connecting to us; wait for that connection.
    Yield,
}

/// A decoded ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ack {
    pub(crate) version: u32,
    /// Raw status; unknown values are kept for the error message.
    pub(crate) status: u32,
    pub(crate) acceptor: u32,
    pub(crate) world_size: u32,
    pub(crate) job_hash: u64,
    /// The acceptor's nonce.
    pub(crate) nonce: [u8; NONCE_LEN],
    /// [`ack_mac`] of the ack.
    pub(crate) mac: [u8; MAC_LEN],
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..BASE_LEN].copy_from_slice(&encode(
            HELLO_MAGIC,
            self.version,
            [self.connector, self.acceptor, self.world_size],
            self.job_hash,
        ));
        b[BASE_LEN..].copy_from_slice(&self.nonce);
        b
    }

    /// `None` if the magic is wrong (not a rankwire TCP connector).
    pub(crate) fn decode(b: &[u8; HELLO_LEN]) -> Option<Hello> {
        let (version, [connector, acceptor, world_size], job_hash) = decode(HELLO_MAGIC, b)?;
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&b[BASE_LEN..]);
        Some(Hello {
            version,
            connector,
            acceptor,
            world_size,
            job_hash,
            nonce,
        })
    }
}

impl Ack {
    pub(crate) fn encode(&self) -> [u8; ACK_LEN] {
        let mut b = [0u8; ACK_LEN];
        b[..BASE_LEN].copy_from_slice(&encode(
            ACK_MAGIC,
            self.version,
            [self.status, self.acceptor, self.world_size],
            self.job_hash,
        ));
        b[BASE_LEN..BASE_LEN + NONCE_LEN].copy_from_slice(&self.nonce);
        b[BASE_LEN + NONCE_LEN..].copy_from_slice(&self.mac);
        b
    }

    /// `None` if the magic is wrong.
    pub(crate) fn decode(b: &[u8; ACK_LEN]) -> Option<Ack> {
        let (version, [status, acceptor, world_size], job_hash) = decode(ACK_MAGIC, b)?;
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&b[BASE_LEN..BASE_LEN + NONCE_LEN]);
        let mut mac = [0u8; MAC_LEN];
        mac.copy_from_slice(&b[BASE_LEN + NONCE_LEN..]);
        Some(Ack {
            version,
            status,
            acceptor,
            world_size,
            job_hash,
            nonce,
            mac,
        })
    }
}

fn hmac(secret: &[u8], label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes keys of any length (RFC 2104); `new_from_slice` cannot fail for it.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    m.update(label);
    for p in parts {
        m.update(p);
    }
    m
}

/// The acceptor's MAC over the hello it got (`hello[8..48]`), its answer and its nonce,
/// before finalizing: [`ack_mac`] makes it, [`check_ack`] verifies it.
fn ack_hmac(
    secret: &[u8],
    hello: &Hello,
    status: u32,
    acceptor: u32,
    nonce: &[u8; NONCE_LEN],
) -> Hmac<Sha256> {
    let h = hello.encode();
    hmac(
        secret,
        ACK_LABEL,
        &[
            &h[8..],
            &status.to_le_bytes(),
            &acceptor.to_le_bytes(),
            nonce,
        ],
    )
}

/// The connector's proof over its hello and the acceptor's nonce, before finalizing.
fn proof_hmac(secret: &[u8], hello: &Hello, ack_nonce: &[u8; NONCE_LEN]) -> Hmac<Sha256> {
    let h = hello.encode();
    hmac(secret, PROOF_LABEL, &[&h[8..], ack_nonce])
}

/// The acceptor's MAC over the hello it got, its answer and its nonce.
pub(crate) fn ack_mac(
    secret: &[u8],
    hello: &Hello,
    status: u32,
    acceptor: u32,
    nonce: &[u8; NONCE_LEN],
) -> [u8; MAC_LEN] {
    ack_hmac(secret, hello, status, acceptor, nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// The connector's proof: its MAC over its hello and the acceptor's nonce.
pub(crate) fn proof_mac(
    secret: &[u8],
    hello: &Hello,
    ack_nonce: &[u8; NONCE_LEN],
) -> [u8; MAC_LEN] {
    proof_hmac(secret, hello, ack_nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `proof` is the connector's valid proof for `hello` and our nonce (constant
/// time).
pub(crate) fn check_proof(
    secret: &[u8],
    hello: &Hello,
    ack_nonce: &[u8; NONCE_LEN],
    proof: &[u8; PROOF_LEN],
) -> bool {
    proof_hmac(secret, hello, ack_nonce)
        .verify_slice(proof)
        .is_ok()
}

fn encode(magic: [u8; 8], version: u32, mid: [u32; 3], hash: u64) -> [u8; BASE_LEN] {
    let mut b = [0u8; BASE_LEN];
    b[0..8].copy_from_slice(&magic);
    b[8..12].copy_from_slice(&version.to_le_bytes());
    for (i, v) in mid.iter().enumerate() {
        b[12 + 4 * i..16 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    b[24..32].copy_from_slice(&hash.to_le_bytes());
    b
}

fn decode(magic: [u8; 8], b: &[u8]) -> Option<(u32, [u32; 3], u64)> {
    if b.len() < BASE_LEN || b[0..8] != magic {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut hash = [0u8; 8];
    hash.copy_from_slice(&b[24..32]);
    Some((
        u32_at(8),
        [u32_at(12), u32_at(16), u32_at(20)],
        u64::from_le_bytes(hash),
    ))
}

/// The value published under `tcp-addr-<rank>`: `rankwire-tcp/1 <addr> <addr> ...`.
pub(crate) fn encode_record(addrs: &[SocketAddr]) -> String {
    let mut s = String::from(RECORD_PREFIX);
    for a in addrs {
        s.push(' ');
        s.push_str(&a.to_string());
    }
    s
}

/// Parse a peer's address record.
pub(crate) fn decode_record(v: &[u8]) -> Result<Vec<SocketAddr>, String> {
    let s = std::str::from_utf8(v).map_err(|_| "address record is not UTF-8".to_string())?;
    let mut it = s.split_whitespace();
    if it.next() != Some(RECORD_PREFIX) {
        return Err(format!(
            "address record {:?} does not start with {RECORD_PREFIX:?} (another rankwire version?)",
            s.chars().take(64).collect::<String>()
        ));
    }
    it.map(|a| {
        a.parse::<SocketAddr>()
            .map_err(|_| format!("bad address {a:?} in address record"))
    })
    .collect()
}
/// Check an ack received in answer to `hello` sent to `peer`; `Ok` says whether it accepts
/// (with the acceptor's nonce, for the proof) or yields (only ever after the MAC is
/// verified, so a process without the secret cannot make a connector wait); `Err` says
/// what was reached.
pub(crate) fn check_ack(
    buf: &[u8; ACK_LEN],
    hello: &Hello,
    peer: u32,
    secret: &[u8],
) -> Result<AckOk, String> {
    let Some(ack) = Ack::decode(buf) else {
        return Err("reached a process that is not a rankwire TCP rank (bad ack magic)".into());
    };
    if ack.version != PROTOCOL_VERSION {
        return Err(format!(
            "peer speaks protocol version {}, we speak {PROTOCOL_VERSION}",
            ack.version
        ));
    }
    if ack.job_hash != hello.job_hash {
        return Err("reached a rank of another job".into());
    }
    if ack_hmac(secret, hello, ack.status, ack.acceptor, &ack.nonce)
        .verify_slice(&ack.mac)
        .is_err()
    {
        return Err(
            "the acceptor does not know this job's secret (not a rank of this job, or one started with another RANKWIRE_JOB_SECRET)"
                .into(),
        );
    }
    if ack.acceptor == hello.connector && ack.status != AckStatus::Accepted as u32 {
        return Err(format!(
            "reached this rank ({}) itself: the address is local here too (shared bridge address?)",
            hello.connector
        ));
    }
    if ack.acceptor != peer {
        return Err(format!(
            "reached rank {} instead of rank {peer}",
            ack.acceptor
        ));
    }
    match ack.status {
        s if s == AckStatus::Accepted as u32 => Ok(AckOk::Accepted(ack.nonce)),
        s if s == AckStatus::Yield as u32 => Ok(AckOk::Yield),
        s if s == AckStatus::WrongJob as u32 => Err("rejected: another job".into()),
        s if s == AckStatus::WrongRank as u32 => Err("rejected: wrong rank".into()),
        s if s == AckStatus::UnexpectedConnector as u32 => Err(format!(
            "rank {peer} does not expect a connection from rank {} (peer lists differ?)",
            hello.connector
        )),
        s if s == AckStatus::Duplicate as u32 => Err(format!(
            "rank {peer} already has a live connection from rank {} (two processes with the same rank?)",
            hello.connector
        )),
        s if s == AckStatus::Failed as u32 => Err(format!(
            "rank {peer} takes no new connection from rank {}: its connection to rank {} failed or was closed earlier",
            hello.connector, hello.connector
        )),
        s if s == AckStatus::BadVersion as u32 => Err("rejected: protocol version".into()),
        s if s == AckStatus::WrongSize as u32 => Err(format!(
            "rejected: rank {peer} has world size {}, we have {}",
            ack.world_size, hello.world_size
        )),
        s => Err(format!("rejected with unknown status {s}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn hello_and_ack_roundtrip_and_reject_bad_magic() {
        let h = Hello {
            version: PROTOCOL_VERSION,
            connector: 3,
            acceptor: 1,
            world_size: 4,
            job_hash: job_hash("job-7"),
            nonce: [5; NONCE_LEN],
        };
        let b = h.encode();
        assert_eq!(Hello::decode(&b), Some(h));
        let a = Ack {
            version: 1,
            status: AckStatus::Duplicate as u32,
            acceptor: 1,
            world_size: 4,
            job_hash: 9,
            nonce: [6; NONCE_LEN],
            mac: [7; MAC_LEN],
        };
        let ab = a.encode();
        assert_eq!(Ack::decode(&ab), Some(a));
        let mut as_ack = [0u8; ACK_LEN];
        as_ack[..HELLO_LEN].copy_from_slice(&b);
        assert_eq!(Ack::decode(&as_ack), None);
        assert_eq!(&b[0..8], b"RWTCPHI\0");
        assert_eq!(&b[12..16], &3u32.to_le_bytes());
        assert_eq!(&b[32..48], &[5; NONCE_LEN]);
    }

    /// The challenge-response: MACs depend on the secret, both nonces, both ranks and
    /// the label; a proof made for one nonce fails for another (replay).
    #[test]
    fn macs_bind_the_secret_the_nonces_and_the_ranks() {
        let h = Hello {
            version: PROTOCOL_VERSION,
            connector: 2,
            acceptor: 0,
            world_size: 3,
            job_hash: 42,
            nonce: [1; NONCE_LEN],
        };
        let na = [9; NONCE_LEN];
        let proof = proof_mac(SECRET, &h, &na);
        assert!(check_proof(SECRET, &h, &na, &proof));
        // another secret, another acceptor nonce (a replay), another connector rank
        assert!(!check_proof(b"another secret", &h, &na, &proof));
        assert!(!check_proof(SECRET, &h, &[8; NONCE_LEN], &proof));
        assert!(!check_proof(
            SECRET,
            &Hello { connector: 1, ..h },
            &na,
            &proof
        ));
        assert!(!check_proof(
            SECRET,
            &Hello {
                nonce: [2; NONCE_LEN],
                ..h
            },
            &na,
            &proof
        ));
        // an ack's MAC is not a proof (labels differ)
        assert!(!check_proof(
            SECRET,
            &h,
            &na,
            &ack_mac(SECRET, &h, 0, 0, &na)
        ));
        assert_ne!(nonce(), nonce());
    }

    #[test]
    fn job_hash_is_fnv1a() {
        assert_eq!(job_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(job_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(job_hash("job-1"), job_hash("job-2"));
    }

    #[test]
    fn record_roundtrip_and_errors() {
        let addrs: Vec<SocketAddr> = vec![
            "10.0.0.1:5000".parse().unwrap(),
            "[::1]:5000".parse().unwrap(),
        ];
        assert_eq!(
            decode_record(encode_record(&addrs).as_bytes()).unwrap(),
            addrs
        );
        assert_eq!(decode_record(b"rankwire-tcp/1").unwrap(), vec![]);
        assert!(decode_record(b"rankwire-tcp/2 1.2.3.4:5").is_err());
        assert!(decode_record(b"rankwire-tcp/1 nonsense").is_err());
        assert!(decode_record(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn ack_checks() {
        let h = Hello {
            version: PROTOCOL_VERSION,
            connector: 2,
            acceptor: 0,
            world_size: 3,
            job_hash: 42,
            nonce: [3; NONCE_LEN],
        };
        let ack = |status: u32, acceptor: u32, job_hash: u64, secret: &[u8]| {
            let nonce = [4; NONCE_LEN];
            Ack {
                version: PROTOCOL_VERSION,
                status,
                acceptor,
                world_size: 3,
                job_hash,
                nonce,
                mac: ack_mac(secret, &h, status, acceptor, &nonce),
            }
            .encode()
        };
        assert_eq!(
            check_ack(&ack(0, 0, 42, SECRET), &h, 0, SECRET),
            Ok(AckOk::Accepted([4; NONCE_LEN]))
        );
        assert_eq!(
            check_ack(&ack(AckStatus::Yield as u32, 0, 42, SECRET), &h, 0, SECRET),
            Ok(AckOk::Yield)
        );
        let e =
            check_ack(&ack(AckStatus::Failed as u32, 0, 42, SECRET), &h, 0, SECRET).unwrap_err();
        assert!(e.contains("failed or was closed earlier"), "{e}");
        // a yield without the secret is not believed (it would make the connector wait)
        let e = check_ack(
            &ack(AckStatus::Yield as u32, 0, 42, b"not the secret"),
            &h,
            0,
            SECRET,
        )
        .unwrap_err();
        assert!(e.contains("secret"), "{e}");
        let e = check_ack(&ack(0, 0, 1, SECRET), &h, 0, SECRET).unwrap_err();
        assert!(e.contains("another job"), "{e}");
        let e = check_ack(&ack(0, 0, 42, b"not the secret"), &h, 0, SECRET).unwrap_err();
        assert!(e.contains("secret"), "{e}");
        // a valid MAC over other fields than those sent
        let mut forged = ack(AckStatus::Duplicate as u32, 0, 42, SECRET);
        forged[12..16].copy_from_slice(&0u32.to_le_bytes());
        assert!(
            check_ack(&forged, &h, 0, SECRET)
                .unwrap_err()
                .contains("secret")
        );
        let e = check_ack(&ack(0, 1, 42, SECRET), &h, 0, SECRET).unwrap_err();
        assert!(e.contains("reached rank 1 instead of rank 0"), "{e}");
        let e = check_ack(
            &ack(AckStatus::WrongRank as u32, 2, 42, SECRET),
            &h,
            0,
            SECRET,
        )
        .unwrap_err();
        assert!(e.contains("itself"), "{e}");
        assert!(check_ack(&[7; ACK_LEN], &h, 0, SECRET).is_err());
    }
}
