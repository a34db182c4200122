//! RC queue pairs and the connection data two ranks exchange to connect them.
//!
//! Each side has one RC QP per peer. It sends the peer its [`ConnInfo`] (QPN, PSN, GID,
//! LID, MTU, and where its credit words live), reads the peer's, and moves its QP
//! INIT → RTR → RTS (IB spec vol. 1 §10.3; `ibv_modify_qp(3)`).
//!
//! Two ways to carry the [`ConnInfo`]s:
//! - **on demand** (the default): at the first frame to a peer, as `Wireup` messages
//!   that the core carries over the TCP transport's authenticated connection to that
//!   peer (made on demand too). This is what NCCL's `net_ib` does over its own sockets.
//!   The handshake is `Request` (initiator's info) → `Reply` (acceptor's info, sent once
//!   its QP is RTS with receives posted) → `Ack` (initiator's QP is RTS with receives
//!   posted); each side sends frames only after the message that proves the peer's
//!   receives are posted (Reply, resp. Ack). Both ranks starting at once is the same
//!   exchange run twice on the one QP pair: each answers the other's Request. A side
//!   that cannot make or connect its QP (a verbs call failed, a message out of order)
//!   answers `Fail` with the reason, so the other side fails the pair at once instead of
//!   waiting; a frame that arrives from the peer proves its receives are posted as an
//!   `Ack` does (the peer posts them before it sends anything).
//! - **at init** (`RANKWIRE_RDMA_CONNECT=at-init`): every pair, through the bootstrap,
//!   under `rdma-qp-<from>-<to>`, between two job-wide fences.

#![allow(unsafe_code)]

use super::device::{Device, gid_text};
use super::verbs::{self, Gid, IbvCq, IbvPd, IbvQp, IbvQpAttr, IbvQpCap, IbvQpInitAttr};

/// What a peer needs to connect to one of our QPs. Encoded as 52 little-endian bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnInfo {
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) gid: Gid,
    pub(crate) lid: u16,
    pub(crate) mtu: u32,
    /// Address of the word the peer writes its consumed-message count into.
    pub(crate) credit_addr: u64,
    /// rkey covering `credit_addr`.
    pub(crate) credit_rkey: u32,
}

const CONN_BYTES: usize = 4 + 4 + 16 + 2 + 4 + 8 + 4;

impl ConnInfo {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(CONN_BYTES);
        v.extend_from_slice(&self.qpn.to_le_bytes());
        v.extend_from_slice(&self.psn.to_le_bytes());
        v.extend_from_slice(&self.gid.0);
        v.extend_from_slice(&self.lid.to_le_bytes());
        v.extend_from_slice(&self.mtu.to_le_bytes());
        v.extend_from_slice(&self.credit_addr.to_le_bytes());
        v.extend_from_slice(&self.credit_rkey.to_le_bytes());
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Option<ConnInfo> {
        if b.len() != CONN_BYTES {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default());
        let mut gid = Gid::default();
        gid.0.copy_from_slice(&b[8..24]);
        Some(ConnInfo {
            qpn: u32_at(0),
            psn: u32_at(4),
            gid,
            lid: u16::from_le_bytes([b[24], b[25]]),
            mtu: u32_at(26),
            credit_addr: u64::from_le_bytes(b[30..38].try_into().unwrap_or_default()),
            credit_rkey: u32_at(38),
        })
    }
}

/// Create an RC QP on `cq` with room for `send_wr` / `recv_wr` work requests.
///
/// # Errors
/// `ibv_create_qp` failed: text with errno.
pub(crate) fn create_qp(
    dev: &Device,
    pd: *mut IbvPd,
    cq: *mut IbvCq,
    send_wr: u32,
    recv_wr: u32,
) -> Result<*mut IbvQp, String> {
    let mut init = IbvQpInitAttr {
        qp_context: std::ptr::null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: std::ptr::null_mut(),
        cap: IbvQpCap {
            max_send_wr: send_wr,
            max_recv_wr: recv_wr,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: verbs::QPT_RC,
        sq_sig_all: 0,
    };
    // SAFETY: pd and cq are live objects of this device's context.
    let qp = unsafe { (dev.verbs.create_qp)(pd, &mut init) };
    if qp.is_null() {
        return Err(format!("ibv_create_qp: {}", verbs::errno_text()));
    }
    Ok(qp)
}

/// Move `qp` to RTS, connected to `remote`.
///
/// # Errors
/// The failing `ibv_modify_qp` step (INIT, RTR or RTS) with the errno text; at RTR
/// a wrong GID (index, or a peer address not reachable from this port) is the usual
/// cause.
pub(crate) fn connect_qp(
    dev: &Device,
    qp: *mut IbvQp,
    local_psn: u32,
    remote: &ConnInfo,
) -> Result<(), String> {
    let modify = |attr: &mut IbvQpAttr, mask: i32, step: &str| -> Result<(), String> {
        // SAFETY: qp is live; attr is a full struct ibv_qp_attr.
        let rc = unsafe { (dev.verbs.modify_qp)(qp, attr, mask) };
        if rc != 0 {
            return Err(format!(
                "ibv_modify_qp({step}) failed: {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(())
    };
    let mut a = IbvQpAttr {
        qp_state: verbs::QPS_INIT,
        pkey_index: 0,
        port_num: dev.port,
        qp_access_flags: verbs::ACCESS_LOCAL_WRITE
            | verbs::ACCESS_REMOTE_READ
            | verbs::ACCESS_REMOTE_WRITE,
        ..Default::default()
    };
    modify(
        &mut a,
        verbs::QP_STATE | verbs::QP_PKEY_INDEX | verbs::QP_PORT | verbs::QP_ACCESS_FLAGS,
        "INIT",
    )?;
    let mut a = IbvQpAttr {
        qp_state: verbs::QPS_RTR,
        path_mtu: dev.mtu.min(remote.mtu),
        dest_qp_num: remote.qpn,
        rq_psn: remote.psn,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        ..Default::default()
    };
    a.ah_attr.port_num = dev.port;
    a.ah_attr.dlid = remote.lid;
    if dev.roce || remote.gid != Gid::default() {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = remote.gid;
        a.ah_attr.grh.sgid_index = dev.gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    modify(
        &mut a,
        verbs::QP_STATE
            | verbs::QP_AV
            | verbs::QP_PATH_MTU
            | verbs::QP_DEST_QPN
            | verbs::QP_RQ_PSN
            | verbs::QP_MAX_DEST_RD_ATOMIC
            | verbs::QP_MIN_RNR_TIMER,
        &format!(
            "RTR to QPN {} at GID {} from local GID index {}",
            remote.qpn,
            gid_text(&remote.gid),
            dev.gid_index
        ),
    )?;
    let mut a = IbvQpAttr {
        qp_state: verbs::QPS_RTS,
        sq_psn: local_psn,
        timeout: 18,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
        ..Default::default()
    };
    modify(
        &mut a,
        verbs::QP_STATE
            | verbs::QP_TIMEOUT
            | verbs::QP_RETRY_CNT
            | verbs::QP_RNR_RETRY
            | verbs::QP_SQ_PSN
            | verbs::QP_MAX_QP_RD_ATOMIC,
        "RTS",
    )
}

/// First two bytes of every `Wireup` message. The core's frames begin with its magic
/// `0x5752` (`b"RW"` in memory), or `b"Re"` for its short eager header, so the two cannot
/// be confused.
pub const WIREUP_MAGIC: [u8; 2] = *b"RQ";

/// Whether a frame header is an RDMA wireup message ([`WIREUP_MAGIC`]).
#[inline]
pub fn is_wireup(header: &[u8]) -> bool {
    header.len() >= 3 && header[..2] == WIREUP_MAGIC
}

/// A message of the on-demand connection handshake (module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wireup {
    /// The sender created its QP and wants to connect: its data.
    Request(ConnInfo),
    /// The sender connected its QP to the requester's and posted its receives: its data.
    Reply(ConnInfo),
    /// The requester connected and posted its receives.
    Ack,
    /// The sender failed the pair: `setup` when a verbs call making or connecting its
    /// end of the queue pair failed, else it refused a wireup message (out of order,
    /// or the pair failed earlier); the reason (UTF-8, at most [`FAIL_REASON_BYTES`]
    /// bytes). The pair is failed on both sides.
    Fail {
        /// A verbs call failed (kind byte 4), not the handshake (kind byte 5).
        setup: bool,
        /// The sender's error text.
        reason: String,
    },
}

/// Longest reason a `Fail` wireup message carries, in bytes (longer ones are cut at a
/// character boundary).
pub(crate) const FAIL_REASON_BYTES: usize = 1024;

impl Wireup {
    /// `WIREUP_MAGIC`, a kind byte (1 Request, 2 Reply, 3 Ack, 4 Fail of a verbs call,
    /// 5 Fail of the handshake), then the `ConnInfo` (Request, Reply) or the reason's
    /// UTF-8 bytes (Fail).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = WIREUP_MAGIC.to_vec();
        match self {
            Wireup::Request(c) => {
                v.push(1);
                v.extend_from_slice(&c.encode());
            }
            Wireup::Reply(c) => {
                v.push(2);
                v.extend_from_slice(&c.encode());
            }
            Wireup::Ack => v.push(3),
            Wireup::Fail { setup, reason } => {
                v.push(if *setup { 4 } else { 5 });
                let mut end = reason.len().min(FAIL_REASON_BYTES);
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                v.extend_from_slice(&reason.as_bytes()[..end]);
            }
        }
        v
    }

    /// The message in `b`, or `None` for anything else.
    pub(crate) fn decode(b: &[u8]) -> Option<Wireup> {
        if !is_wireup(b) {
            return None;
        }
        match (b[2], &b[3..]) {
            (1, rest) => ConnInfo::decode(rest).map(Wireup::Request),
            (2, rest) => ConnInfo::decode(rest).map(Wireup::Reply),
            (3, []) => Some(Wireup::Ack),
            (k @ (4 | 5), rest) if rest.len() <= FAIL_REASON_BYTES => {
                std::str::from_utf8(rest).ok().map(|r| Wireup::Fail {
                    setup: k == 4,
                    reason: r.to_string(),
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wireup_messages_round_trip_and_reject_others() {
        let c = ConnInfo {
            qpn: 5,
            psn: 6,
            gid: Gid::default(),
            lid: 1,
            mtu: 4,
            credit_addr: 0x1000,
            credit_rkey: 9,
        };
        for m in [Wireup::Request(c), Wireup::Reply(c), Wireup::Ack] {
            let b = m.encode();
            assert!(is_wireup(&b));
            assert_eq!(Wireup::decode(&b), Some(m.clone()));
            assert_eq!(Wireup::decode(&b[..b.len() - 1]), None, "{m:?} truncated");
        }
        for setup in [true, false] {
            let f = Wireup::Fail {
                setup,
                reason: "ibv_create_qp: Cannot allocate memory".into(),
            };
            assert_eq!(Wireup::decode(&f.encode()), Some(f));
        }
        // A long reason is cut on a character boundary, and still decodes.
        let long = Wireup::Fail {
            setup: true,
            reason: "é".repeat(FAIL_REASON_BYTES),
        };
        let b = long.encode();
        assert_eq!(b.len(), 3 + FAIL_REASON_BYTES);
        assert!(
            matches!(Wireup::decode(&b), Some(Wireup::Fail { reason: r, .. }) if r.len() == FAIL_REASON_BYTES)
        );
        // Not UTF-8, or longer than the bound: not a wireup message.
        assert_eq!(Wireup::decode(b"RQ\x04\xff\xfe"), None);
        let mut over = b"RQ\x04".to_vec();
        over.extend(std::iter::repeat_n(b'a', FAIL_REASON_BYTES + 1));
        assert_eq!(Wireup::decode(&over), None);
        // A core frame header (magic 0x5752 little-endian) is not one.
        assert!(!is_wireup(&[0x52, 0x57, 2, 0]));
        assert!(!is_wireup(b"Re\x05\0ctx_tag_seq_"), "a short eager header");
        assert_eq!(Wireup::decode(b"RQ\x09"), None);
        let mut ack = Wireup::Ack.encode();
        ack.push(0);
        assert_eq!(Wireup::decode(&ack), None, "trailing bytes");
    }

    #[test]
    fn conn_info_round_trips_and_rejects_wrong_lengths() {
        let mut gid = Gid::default();
        gid.0[15] = 7;
        let c = ConnInfo {
            qpn: 0x11_2233,
            psn: 0xab_cdef,
            gid,
            lid: 9,
            mtu: 3,
            credit_addr: 0xdead_beef_0000,
            credit_rkey: 0x55,
        };
        let b = c.encode();
        assert_eq!(b.len(), CONN_BYTES);
        assert_eq!(ConnInfo::decode(&b), Some(c));
        assert_eq!(ConnInfo::decode(&b[1..]), None);
    }
}
