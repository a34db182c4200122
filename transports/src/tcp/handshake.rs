//! The connection handshake and the published address record (the wire part of setup;
//! `setup.rs` runs it).
//!
//! # Wire format (all integers little-endian)
//! ```text
//! hello (connector → acceptor, 32 bytes)       ack (acceptor → connector, 32 bytes)
//!  0  magic     b"RWTCPHI\0"                     0  magic     b"RWTCPACK"
//!  8  u32 protocol version (1)                   8  u32 protocol version
//! 12  u32 connector rank                        12  u32 status (0 = accepted, see AckStatus)
//! 16  u32 expected acceptor rank                16  u32 acceptor rank
//! 20  u32 world size                            20  u32 world size
//! 24  u64 job hash (FNV-1a 64 of the job id)    24  u64 job hash
//! ```
//! The acceptor checks magic (else closes silently: not one of us), version, job, world
//! size, that it is the rank the connector wanted, that the connector is a rank it
//! expects (a higher rank in its peer list) and that it is not a duplicate of a live
//! connection; it answers with an ack either way. The connector checks the ack. A
//! rejection on either side makes the connector try its next candidate address (B019:
//! an address that leads to another process, another job or back to itself).

use std::net::SocketAddr;

const HELLO_MAGIC: [u8; 8] = *b"RWTCPHI\0";
const ACK_MAGIC: [u8; 8] = *b"RWTCPACK";
/// Version of the handshake and framing; bump on any incompatible change.
pub(crate) const PROTOCOL_VERSION: u32 = 1;
/// Size of a hello and of an ack, in bytes.
pub(crate) const HANDSHAKE_LEN: usize = 32;
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
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; HANDSHAKE_LEN] {
        encode(
            HELLO_MAGIC,
            self.version,
            [self.connector, self.acceptor, self.world_size],
            self.job_hash,
        )
    }

    /// `None` if the magic is wrong (not a rankwire TCP connector).
    pub(crate) fn decode(b: &[u8; HANDSHAKE_LEN]) -> Option<Hello> {
        let (version, [connector, acceptor, world_size], job_hash) = decode(HELLO_MAGIC, b)?;
        Some(Hello {
            version,
            connector,
            acceptor,
            world_size,
            job_hash,
        })
    }
}

impl Ack {
    pub(crate) fn encode(&self) -> [u8; HANDSHAKE_LEN] {
        encode(
            ACK_MAGIC,
            self.version,
            [self.status, self.acceptor, self.world_size],
            self.job_hash,
        )
    }

    /// `None` if the magic is wrong.
    pub(crate) fn decode(b: &[u8; HANDSHAKE_LEN]) -> Option<Ack> {
        let (version, [status, acceptor, world_size], job_hash) = decode(ACK_MAGIC, b)?;
        Some(Ack {
            version,
            status,
            acceptor,
            world_size,
            job_hash,
        })
    }
}

fn encode(magic: [u8; 8], version: u32, mid: [u32; 3], hash: u64) -> [u8; HANDSHAKE_LEN] {
    let mut b = [0u8; HANDSHAKE_LEN];
    b[0..8].copy_from_slice(&magic);
    b[8..12].copy_from_slice(&version.to_le_bytes());
    for (i, v) in mid.iter().enumerate() {
        b[12 + 4 * i..16 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    b[24..32].copy_from_slice(&hash.to_le_bytes());
    b
}

fn decode(magic: [u8; 8], b: &[u8; HANDSHAKE_LEN]) -> Option<(u32, [u32; 3], u64)> {
    if b[0..8] != magic {
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
/// Check an ack received in answer to `hello` sent to `peer`; `Err` says what was reached.
pub(crate) fn check_ack(buf: &[u8; HANDSHAKE_LEN], hello: &Hello, peer: u32) -> Result<(), String> {
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
        s if s == AckStatus::Accepted as u32 => Ok(()),
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

    #[test]
    fn hello_and_ack_roundtrip_and_reject_bad_magic() {
        let h = Hello {
            version: PROTOCOL_VERSION,
            connector: 3,
            acceptor: 1,
            world_size: 4,
            job_hash: job_hash("job-7"),
        };
        let b = h.encode();
        assert_eq!(Hello::decode(&b), Some(h));
        assert_eq!(Ack::decode(&b), None);
        let a = Ack {
            version: 1,
            status: AckStatus::Duplicate as u32,
            acceptor: 1,
            world_size: 4,
            job_hash: 9,
        };
        assert_eq!(Ack::decode(&a.encode()), Some(a));
        assert_eq!(&b[0..8], b"RWTCPHI\0");
        assert_eq!(&b[12..16], &3u32.to_le_bytes());
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
        };
        let ok = Ack {
            version: PROTOCOL_VERSION,
            status: 0,
            acceptor: 0,
            world_size: 3,
            job_hash: 42,
        };
        assert!(check_ack(&ok.encode(), &h, 0).is_ok());
        let e = check_ack(&Ack { job_hash: 1, ..ok }.encode(), &h, 0).unwrap_err();
        assert!(e.contains("another job"), "{e}");
        let e = check_ack(&Ack { acceptor: 1, ..ok }.encode(), &h, 0).unwrap_err();
        assert!(e.contains("reached rank 1 instead of rank 0"), "{e}");
        let e = check_ack(
            &Ack {
                acceptor: 2,
                status: AckStatus::WrongRank as u32,
                ..ok
            }
            .encode(),
            &h,
            0,
        )
        .unwrap_err();
        assert!(e.contains("itself"), "{e}");
        assert!(check_ack(&[7; HANDSHAKE_LEN], &h, 0).is_err());
    }
}
