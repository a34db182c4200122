//! RC queue pairs and the connection data exchanged through the bootstrap.
//!
//! Each side creates one RC QP per peer, publishes [`ConnInfo`] (QPN, PSN, GID, LID,
//! MTU, and where its credit words live) under `rdma-qp-<from>-<to>`, reads the peer's,
//! and moves its QP INIT → RTR → RTS (IB spec vol. 1 §10.3; `ibv_modify_qp(3)`).

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

#[cfg(test)]
mod tests {
    use super::*;

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
