//! libibverbs loaded at run time (`dlopen("libibverbs.so.1")`), so one binary starts on
//! machines with and without an RDMA stack.
//!
//! Only the calls the transport uses are bound. Struct layouts follow
//! `<infiniband/verbs.h>` of rdma-core (stable ABI since libibverbs 1.1); the tests at
//! the bottom pin the sizes and field offsets measured with the C compiler against
//! rdma-core 44 headers. `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are inline
//! functions in C that call through `context->ops`; [`Verbs::post_send`] and friends do
//! the same.

#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};

/// Opaque `struct ibv_device`.
#[repr(C)]
pub(crate) struct IbvDevice {
    _private: [u8; 0],
}
/// `struct ibv_context`: only the pointer is used; `ops` sits at offset 8.
#[repr(C)]
pub(crate) struct IbvContext {
    _private: [u8; 0],
}
/// Opaque `struct ibv_pd`.
#[repr(C)]
pub(crate) struct IbvPd {
    _private: [u8; 0],
}
/// `struct ibv_cq` (first field: `context`).
#[repr(C)]
pub(crate) struct IbvCq {
    pub(crate) context: *mut IbvContext,
}
/// `struct ibv_qp`, the prefix up to `qp_num`.
#[repr(C)]
pub(crate) struct IbvQp {
    pub(crate) context: *mut IbvContext,
    pub(crate) qp_context: *mut c_void,
    pub(crate) pd: *mut IbvPd,
    pub(crate) send_cq: *mut IbvCq,
    pub(crate) recv_cq: *mut IbvCq,
    pub(crate) srq: *mut c_void,
    pub(crate) handle: u32,
    pub(crate) qp_num: u32,
}
/// `struct ibv_mr`.
#[repr(C)]
pub(crate) struct IbvMr {
    pub(crate) context: *mut IbvContext,
    pub(crate) pd: *mut IbvPd,
    pub(crate) addr: *mut c_void,
    pub(crate) length: usize,
    pub(crate) handle: u32,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

/// `union ibv_gid`: 16 bytes, 8-byte aligned.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Gid(pub(crate) [u8; 16]);

/// `struct ibv_port_attr`, read through a zeroed buffer large enough for any version.
#[repr(C, align(8))]
pub(crate) struct IbvPortAttr(pub(crate) [u8; 96]);

impl IbvPortAttr {
    fn u32_at(&self, off: usize) -> u32 {
        u32::from_ne_bytes([
            self.0[off],
            self.0[off + 1],
            self.0[off + 2],
            self.0[off + 3],
        ])
    }
    /// `state` (`IBV_PORT_ACTIVE` = 4).
    pub(crate) fn state(&self) -> u32 {
        self.u32_at(0)
    }
    /// `active_mtu` (enum ibv_mtu: 1 = 256 ... 5 = 4096).
    pub(crate) fn active_mtu(&self) -> u32 {
        self.u32_at(8)
    }
    /// `gid_tbl_len`.
    pub(crate) fn gid_tbl_len(&self) -> u32 {
        self.u32_at(12)
    }
    /// `lid`.
    pub(crate) fn lid(&self) -> u16 {
        u16::from_ne_bytes([self.0[34], self.0[35]])
    }
    /// `link_layer` (1 = InfiniBand, 2 = Ethernet).
    pub(crate) fn link_layer(&self) -> u8 {
        self.0[46]
    }
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvQpCap {
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub(crate) struct IbvQpInitAttr {
    pub(crate) qp_context: *mut c_void,
    pub(crate) send_cq: *mut IbvCq,
    pub(crate) recv_cq: *mut IbvCq,
    pub(crate) srq: *mut c_void,
    pub(crate) cap: IbvQpCap,
    pub(crate) qp_type: u32,
    pub(crate) sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvGlobalRoute {
    pub(crate) dgid: Gid,
    pub(crate) flow_label: u32,
    pub(crate) sgid_index: u8,
    pub(crate) hop_limit: u8,
    pub(crate) traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvAhAttr {
    pub(crate) grh: IbvGlobalRoute,
    pub(crate) dlid: u16,
    pub(crate) sl: u8,
    pub(crate) src_path_bits: u8,
    pub(crate) static_rate: u8,
    pub(crate) is_global: u8,
    pub(crate) port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvQpAttr {
    pub(crate) qp_state: u32,
    pub(crate) cur_qp_state: u32,
    pub(crate) path_mtu: u32,
    pub(crate) path_mig_state: u32,
    pub(crate) qkey: u32,
    pub(crate) rq_psn: u32,
    pub(crate) sq_psn: u32,
    pub(crate) dest_qp_num: u32,
    pub(crate) qp_access_flags: c_int,
    pub(crate) cap: IbvQpCap,
    pub(crate) ah_attr: IbvAhAttr,
    pub(crate) alt_ah_attr: IbvAhAttr,
    pub(crate) pkey_index: u16,
    pub(crate) alt_pkey_index: u16,
    pub(crate) en_sqd_async_notify: u8,
    pub(crate) sq_draining: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) port_num: u8,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) alt_port_num: u8,
    pub(crate) alt_timeout: u8,
    pub(crate) rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvSge {
    pub(crate) addr: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
}

/// `struct ibv_send_wr`, with the `wr.rdma` arm of the union spelled out.
#[repr(C)]
pub(crate) struct IbvSendWr {
    pub(crate) wr_id: u64,
    pub(crate) next: *mut IbvSendWr,
    pub(crate) sg_list: *mut IbvSge,
    pub(crate) num_sge: c_int,
    pub(crate) opcode: u32,
    pub(crate) send_flags: u32,
    pub(crate) imm_data: u32,
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
    _wr_rest: [u8; 20],
    _qp_type: u32,
    _pad: u32,
    _tail: [u64; 6],
}

impl IbvSendWr {
    pub(crate) fn new(wr_id: u64, sge: *mut IbvSge, opcode: u32, signaled: bool) -> Self {
        IbvSendWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sge,
            num_sge: 1,
            opcode,
            send_flags: if signaled { SEND_SIGNALED } else { 0 },
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            _wr_rest: [0; 20],
            _qp_type: 0,
            _pad: 0,
            _tail: [0; 6],
        }
    }
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub(crate) struct IbvRecvWr {
    pub(crate) wr_id: u64,
    pub(crate) next: *mut IbvRecvWr,
    pub(crate) sg_list: *mut IbvSge,
    pub(crate) num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvWc {
    pub(crate) wr_id: u64,
    pub(crate) status: u32,
    pub(crate) opcode: u32,
    pub(crate) vendor_err: u32,
    pub(crate) byte_len: u32,
    pub(crate) imm_data: u32,
    pub(crate) qp_num: u32,
    pub(crate) src_qp: u32,
    pub(crate) wc_flags: u32,
    pub(crate) pkey_index: u16,
    pub(crate) slid: u16,
    pub(crate) sl: u8,
    pub(crate) dlid_path_bits: u8,
}

// Constants from <infiniband/verbs.h>.
pub(crate) const WR_RDMA_WRITE: u32 = 0;
pub(crate) const WR_SEND: u32 = 2;
pub(crate) const WR_RDMA_READ: u32 = 4;
pub(crate) const SEND_SIGNALED: u32 = 2;
pub(crate) const QPT_RC: u32 = 2;
pub(crate) const QPS_INIT: u32 = 1;
pub(crate) const QPS_RTR: u32 = 2;
pub(crate) const QPS_RTS: u32 = 3;
pub(crate) const QP_STATE: c_int = 1;
pub(crate) const QP_ACCESS_FLAGS: c_int = 8;
pub(crate) const QP_PKEY_INDEX: c_int = 16;
pub(crate) const QP_PORT: c_int = 32;
pub(crate) const QP_AV: c_int = 128;
pub(crate) const QP_PATH_MTU: c_int = 256;
pub(crate) const QP_TIMEOUT: c_int = 512;
pub(crate) const QP_RETRY_CNT: c_int = 1024;
pub(crate) const QP_RNR_RETRY: c_int = 2048;
pub(crate) const QP_RQ_PSN: c_int = 4096;
pub(crate) const QP_MAX_QP_RD_ATOMIC: c_int = 8192;
pub(crate) const QP_MIN_RNR_TIMER: c_int = 32768;
pub(crate) const QP_SQ_PSN: c_int = 65536;
pub(crate) const QP_MAX_DEST_RD_ATOMIC: c_int = 131072;
pub(crate) const QP_DEST_QPN: c_int = 1048576;
pub(crate) const ACCESS_LOCAL_WRITE: c_int = 1;
pub(crate) const ACCESS_REMOTE_WRITE: c_int = 2;
pub(crate) const ACCESS_REMOTE_READ: c_int = 4;
pub(crate) const PORT_ACTIVE: u32 = 4;
pub(crate) const LINK_LAYER_ETHERNET: u8 = 2;
pub(crate) const WC_SUCCESS: u32 = 0;
/// `IBV_WC_RDMA_READ` opcode of a work completion.
pub(crate) const WC_RDMA_READ: u32 = 2;

// Offsets inside `struct ibv_context`: `ops` at 8; in `struct ibv_context_ops`,
// `poll_cq` at 88, `post_send` at 200, `post_recv` at 208.
const OPS_POLL_CQ: usize = 8 + 88;
/// `req_notify_cq` follows `poll_cq` in `struct ibv_context_ops`.
const OPS_REQ_NOTIFY_CQ: usize = 8 + 96;
const OPS_POST_SEND: usize = 8 + 200;
const OPS_POST_RECV: usize = 8 + 208;

type PollCqFn = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
type ReqNotifyCqFn = unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int;

/// `struct ibv_comp_channel`: `context` (a pointer), then the event file descriptor.
#[repr(C)]
pub(crate) struct IbvCompChannel {
    _context: *mut IbvContext,
    pub(crate) fd: c_int,
    _refcnt: c_int,
}
type PostSendFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
type PostRecvFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;

/// The bound entry points of libibverbs. Cheap to share by reference; lives as long as
/// the transport.
pub(crate) struct Verbs {
    _lib: libloading::Library,
    pub(crate) get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDevice,
    pub(crate) free_device_list: unsafe extern "C" fn(*mut *mut IbvDevice),
    pub(crate) get_device_name: unsafe extern "C" fn(*mut IbvDevice) -> *const c_char,
    pub(crate) open_device: unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext,
    pub(crate) close_device: unsafe extern "C" fn(*mut IbvContext) -> c_int,
    pub(crate) query_port: unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr) -> c_int,
    pub(crate) query_gid: unsafe extern "C" fn(*mut IbvContext, u8, c_int, *mut Gid) -> c_int,
    pub(crate) alloc_pd: unsafe extern "C" fn(*mut IbvContext) -> *mut IbvPd,
    pub(crate) dealloc_pd: unsafe extern "C" fn(*mut IbvPd) -> c_int,
    pub(crate) create_cq:
        unsafe extern "C" fn(*mut IbvContext, c_int, *mut c_void, *mut c_void, c_int) -> *mut IbvCq,
    pub(crate) destroy_cq: unsafe extern "C" fn(*mut IbvCq) -> c_int,
    /// `ibv_resize_cq(cq, cqe)`: 0 or an errno.
    pub(crate) resize_cq: unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int,
    pub(crate) create_qp: unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp,
    pub(crate) modify_qp: unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int,
    pub(crate) destroy_qp: unsafe extern "C" fn(*mut IbvQp) -> c_int,
    pub(crate) reg_mr: unsafe extern "C" fn(*mut IbvPd, *mut c_void, usize, c_int) -> *mut IbvMr,
    pub(crate) dereg_mr: unsafe extern "C" fn(*mut IbvMr) -> c_int,
    /// `ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access)`, rdma-core 34+.
    pub(crate) reg_dmabuf_mr:
        Option<unsafe extern "C" fn(*mut IbvPd, u64, usize, u64, c_int, c_int) -> *mut IbvMr>,
    wc_status_str: unsafe extern "C" fn(u32) -> *const c_char,
    /// `ibv_create_comp_channel(context)`.
    pub(crate) create_comp_channel: unsafe extern "C" fn(*mut IbvContext) -> *mut IbvCompChannel,
    /// `ibv_destroy_comp_channel(channel)`.
    pub(crate) destroy_comp_channel: unsafe extern "C" fn(*mut IbvCompChannel) -> c_int,
    /// `ibv_get_cq_event(channel, &cq, &cq_context)`: 0, or -1 (EAGAIN when the fd is
    /// nonblocking and no event is there).
    pub(crate) get_cq_event:
        unsafe extern "C" fn(*mut IbvCompChannel, *mut *mut IbvCq, *mut *mut c_void) -> c_int,
    /// `ibv_ack_cq_events(cq, nevents)`.
    pub(crate) ack_cq_events: unsafe extern "C" fn(*mut IbvCq, u32),
}

// SAFETY: function pointers into a loaded library; the library stays loaded while
// `Verbs` lives.
unsafe impl Send for Verbs {}
unsafe impl Sync for Verbs {}

impl Verbs {
    /// Load `libibverbs.so.1` and bind the calls.
    ///
    /// # Errors
    /// The loader's message when the library or a symbol is missing.
    pub(crate) fn load() -> Result<Verbs, String> {
        // SAFETY: loading libibverbs runs its constructors, which only read its
        // configuration directory.
        let lib = unsafe { libloading::Library::new("libibverbs.so.1") }
            .map_err(|e| format!("libibverbs.so.1 not loadable ({e}); install libibverbs1 and the provider (ibverbs-providers)"))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol has the C signature declared in verbs.h, which the
                // field type spells out.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("libibverbs.so.1 lacks {}: {e}", $name))?
            };
        }
        Ok(Verbs {
            get_device_list: sym!("ibv_get_device_list"),
            free_device_list: sym!("ibv_free_device_list"),
            get_device_name: sym!("ibv_get_device_name"),
            open_device: sym!("ibv_open_device"),
            close_device: sym!("ibv_close_device"),
            query_port: sym!("ibv_query_port"),
            query_gid: sym!("ibv_query_gid"),
            alloc_pd: sym!("ibv_alloc_pd"),
            dealloc_pd: sym!("ibv_dealloc_pd"),
            create_cq: sym!("ibv_create_cq"),
            destroy_cq: sym!("ibv_destroy_cq"),
            resize_cq: sym!("ibv_resize_cq"),
            create_qp: sym!("ibv_create_qp"),
            modify_qp: sym!("ibv_modify_qp"),
            destroy_qp: sym!("ibv_destroy_qp"),
            reg_mr: sym!("ibv_reg_mr"),
            dereg_mr: sym!("ibv_dereg_mr"),
            // SAFETY: as above; optional because older libraries lack it.
            reg_dmabuf_mr: unsafe { lib.get(b"ibv_reg_dmabuf_mr\0") }.ok().map(|s| *s),
            wc_status_str: sym!("ibv_wc_status_str"),
            create_comp_channel: sym!("ibv_create_comp_channel"),
            destroy_comp_channel: sym!("ibv_destroy_comp_channel"),
            get_cq_event: sym!("ibv_get_cq_event"),
            ack_cq_events: sym!("ibv_ack_cq_events"),
            _lib: lib,
        })
    }

    /// `ibv_wc_status_str`.
    pub(crate) fn status_str(&self, status: u32) -> String {
        // SAFETY: returns a static string for any value.
        let p = unsafe { (self.wc_status_str)(status) };
        if p.is_null() {
            return format!("status {status}");
        }
        // SAFETY: NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// `ibv_poll_cq`: up to `wc.len()` completions.
    ///
    /// # Safety
    /// `cq` is a live CQ of a context opened through these verbs.
    pub(crate) unsafe fn poll_cq(&self, cq: *mut IbvCq, wc: &mut [IbvWc]) -> c_int {
        // SAFETY: caller guarantees `cq`; the ops table is part of the live context.
        unsafe {
            let ctx = (*cq).context as *const u8;
            let f: PollCqFn = *(ctx.add(OPS_POLL_CQ) as *const PollCqFn);
            f(cq, wc.len() as c_int, wc.as_mut_ptr())
        }
    }

    /// `ibv_req_notify_cq(cq, 0)`: the next completion on `cq` raises an event on its
    /// completion channel. Returns 0 or an errno value.
    ///
    /// # Safety
    /// `cq` is a live CQ of a context opened through these verbs.
    pub(crate) unsafe fn req_notify_cq(&self, cq: *mut IbvCq) -> c_int {
        // SAFETY: caller guarantees `cq`; the ops table is part of the live context.
        unsafe {
            let ctx = (*cq).context as *const u8;
            let f: ReqNotifyCqFn = *(ctx.add(OPS_REQ_NOTIFY_CQ) as *const ReqNotifyCqFn);
            f(cq, 0)
        }
    }

    /// `ibv_post_send`; returns the errno value (0 on success).
    ///
    /// # Safety
    /// `qp` is live; `wr` and its scatter list are valid for the call; the memory the
    /// work request names stays registered and alive until its completion.
    pub(crate) unsafe fn post_send(&self, qp: *mut IbvQp, wr: &mut IbvSendWr) -> c_int {
        let mut bad = std::ptr::null_mut();
        // SAFETY: see above.
        unsafe {
            let ctx = (*qp).context as *const u8;
            let f: PostSendFn = *(ctx.add(OPS_POST_SEND) as *const PostSendFn);
            f(qp, wr, &mut bad)
        }
    }

    /// `ibv_post_recv`; returns the errno value (0 on success).
    ///
    /// # Safety
    /// As [`Verbs::post_send`].
    pub(crate) unsafe fn post_recv(&self, qp: *mut IbvQp, wr: &mut IbvRecvWr) -> c_int {
        let mut bad = std::ptr::null_mut();
        // SAFETY: see above.
        unsafe {
            let ctx = (*qp).context as *const u8;
            let f: PostRecvFn = *(ctx.add(OPS_POST_RECV) as *const PostRecvFn);
            f(qp, wr, &mut bad)
        }
    }
}

/// The calling thread's `errno` as text (after a verbs call returned NULL or -1).
pub(crate) fn errno_text() -> String {
    std::io::Error::last_os_error().to_string()
}

/// Whether the last error was `ENOSYS` (the kernel has no RDMA support).
pub(crate) fn errno_is(code: i32) -> bool {
    std::io::Error::last_os_error().raw_os_error() == Some(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // Sizes and offsets printed by a C program compiled against rdma-core 44's
    // <infiniband/verbs.h> on x86_64 (Debian 12 libibverbs-dev).
    #[test]
    fn layouts_match_verbs_h() {
        assert_eq!(size_of::<IbvQpInitAttr>(), 64);
        assert_eq!(offset_of!(IbvQpInitAttr, cap), 32);
        assert_eq!(offset_of!(IbvQpInitAttr, qp_type), 52);
        assert_eq!(offset_of!(IbvQpInitAttr, sq_sig_all), 56);
        assert_eq!(size_of::<IbvQpCap>(), 20);
        assert_eq!(size_of::<IbvQpAttr>(), 144);
        assert_eq!(offset_of!(IbvQpAttr, path_mtu), 8);
        assert_eq!(offset_of!(IbvQpAttr, rq_psn), 20);
        assert_eq!(offset_of!(IbvQpAttr, sq_psn), 24);
        assert_eq!(offset_of!(IbvQpAttr, dest_qp_num), 28);
        assert_eq!(offset_of!(IbvQpAttr, qp_access_flags), 32);
        assert_eq!(offset_of!(IbvQpAttr, cap), 36);
        assert_eq!(offset_of!(IbvQpAttr, ah_attr), 56);
        assert_eq!(offset_of!(IbvQpAttr, alt_ah_attr), 88);
        assert_eq!(offset_of!(IbvQpAttr, pkey_index), 120);
        assert_eq!(offset_of!(IbvQpAttr, max_rd_atomic), 126);
        assert_eq!(offset_of!(IbvQpAttr, max_dest_rd_atomic), 127);
        assert_eq!(offset_of!(IbvQpAttr, min_rnr_timer), 128);
        assert_eq!(offset_of!(IbvQpAttr, port_num), 129);
        assert_eq!(offset_of!(IbvQpAttr, timeout), 130);
        assert_eq!(offset_of!(IbvQpAttr, retry_cnt), 131);
        assert_eq!(offset_of!(IbvQpAttr, rnr_retry), 132);
        assert_eq!(offset_of!(IbvQpAttr, rate_limit), 136);
        assert_eq!(size_of::<IbvAhAttr>(), 32);
        assert_eq!(offset_of!(IbvAhAttr, dlid), 24);
        assert_eq!(offset_of!(IbvAhAttr, is_global), 29);
        assert_eq!(offset_of!(IbvAhAttr, port_num), 30);
        assert_eq!(size_of::<IbvGlobalRoute>(), 24);
        assert_eq!(offset_of!(IbvGlobalRoute, flow_label), 16);
        assert_eq!(offset_of!(IbvGlobalRoute, sgid_index), 20);
        assert_eq!(offset_of!(IbvGlobalRoute, hop_limit), 21);
        assert_eq!(size_of::<IbvSendWr>(), 128);
        assert_eq!(offset_of!(IbvSendWr, num_sge), 24);
        assert_eq!(offset_of!(IbvSendWr, opcode), 28);
        assert_eq!(offset_of!(IbvSendWr, send_flags), 32);
        assert_eq!(offset_of!(IbvSendWr, remote_addr), 40);
        assert_eq!(offset_of!(IbvSendWr, rkey), 48);
        assert_eq!(offset_of!(IbvSendWr, _qp_type), 72);
        assert_eq!(size_of::<IbvRecvWr>(), 32);
        assert_eq!(size_of::<IbvSge>(), 16);
        assert_eq!(size_of::<IbvWc>(), 48);
        assert_eq!(offset_of!(IbvWc, status), 8);
        assert_eq!(offset_of!(IbvWc, byte_len), 20);
        assert_eq!(offset_of!(IbvWc, qp_num), 28);
        assert_eq!(size_of::<IbvMr>(), 48);
        assert_eq!(offset_of!(IbvMr, addr), 16);
        assert_eq!(offset_of!(IbvMr, length), 24);
        assert_eq!(offset_of!(IbvMr, lkey), 36);
        assert_eq!(offset_of!(IbvMr, rkey), 40);
        assert_eq!(offset_of!(IbvQp, qp_num), 52);
        assert!(size_of::<IbvPortAttr>() >= 52);
    }
}
