//! Memory registration: a [`Registrar`] over `ibv_reg_mr` for a protection domain, the
//! shared registration cache, and the GPU registration choice.
//!
//! # GPU memory (feature `cuda` in the core)
//! Device buffers are registered, in this order of preference:
//! 1. DMA-BUF: the core exports the range (`cuMemGetHandleForAddressRange`, see
//!    `rankwire_gpu::export_dmabuf`) and the fd goes to `ibv_reg_dmabuf_mr`;
//! 2. `ibv_reg_mr` on the device pointer, which works only when the `nvidia_peermem`
//!    kernel module is loaded;
//! 3. otherwise the caller stages through host memory.
//!
//! [`gdr_path`] makes that choice and returns the reason for the debug log;
//! `RANKWIRE_RDMA_GDR=1` demands a direct path (fail instead of staging).

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use super::verbs::{self, IbvMr, IbvPd, Verbs};
use crate::regcache::{Lease, RegCache, RegCacheConfig, RegCacheStats, Registrar};

/// Access flags of every registration: the NIC may read and write it locally and
/// remotely (the rendezvous reads it remotely; tests write it remotely).
const ACCESS: i32 =
    verbs::ACCESS_LOCAL_WRITE | verbs::ACCESS_REMOTE_READ | verbs::ACCESS_REMOTE_WRITE;

/// A memory region: the raw MR and its keys.
#[derive(Debug)]
pub struct MemoryRegion {
    mr: *mut IbvMr,
    /// Local key (for scatter/gather entries).
    pub lkey: u32,
    /// Remote key (for peers' RDMA read/write).
    pub rkey: u32,
}

// SAFETY: an MR is a handle; used under the registry's lock.
unsafe impl Send for MemoryRegion {}

/// Registers host memory in one protection domain with `ibv_reg_mr`.
pub(crate) struct MrRegistrar {
    verbs: Arc<Verbs>,
    pd: *mut IbvPd,
}

// SAFETY: PD handle used under the registry's lock.
unsafe impl Send for MrRegistrar {}

impl MrRegistrar {
    pub(crate) fn for_pd(verbs: Arc<Verbs>, pd: *mut IbvPd) -> Self {
        MrRegistrar { verbs, pd }
    }
}

impl Registrar for MrRegistrar {
    type Handle = MemoryRegion;
    type Error = String;
    fn register(&mut self, addr: u64, len_bytes: u64) -> Result<MemoryRegion, String> {
        // SAFETY: the cache hands page-aligned ranges covering memory that the caller
        // keeps alive while a lease is held; a bad range fails with EFAULT.
        let mr = unsafe {
            (self.verbs.reg_mr)(self.pd, addr as *mut c_void, len_bytes as usize, ACCESS)
        };
        if mr.is_null() {
            return Err(format!("ibv_reg_mr: {}", verbs::errno_text()));
        }
        // SAFETY: a non-null MR returned by ibv_reg_mr.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(MemoryRegion { mr, lkey, rkey })
    }
    fn deregister(&mut self, h: MemoryRegion) {
        // SAFETY: registered above and deregistered once (the cache owns it).
        let rc = unsafe { (self.verbs.dereg_mr)(h.mr) };
        if rc != 0 {
            tracing::warn!("rdma: ibv_dereg_mr failed (rc {rc})");
        }
    }
}

/// The registration cache of one transport, shared with the core's rendezvous offer
/// path. Locked only briefly, from the thread that drives progress.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Mutex<RegCache<MrRegistrar>>>,
    host_buffer_id: HostBufferId,
}

/// How host buffers are identified in the cache (see [`Registry::acquire_host`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HostBufferId {
    /// Every acquisition is a new buffer: registrations are reused only while an
    /// operation on the same buffer is still in flight.
    PerOperation,
    /// The application promises not to free and reallocate buffers it communicates
    /// from (`RANKWIRE_RDMA_LEAVE_PINNED=1`): registrations persist across operations.
    LeavePinned,
}

/// A registration held for one operation (give back with [`Registry::release`]).
#[derive(Debug)]
pub struct Held {
    lease: Lease,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

impl Registry {
    pub(crate) fn new(
        verbs: Arc<Verbs>,
        pd: *mut IbvPd,
        cfg: RegCacheConfig,
        leave_pinned: bool,
    ) -> Registry {
        Registry {
            inner: Arc::new(Mutex::new(RegCache::new(
                MrRegistrar::for_pd(verbs, pd),
                cfg,
            ))),
            host_buffer_id: if leave_pinned {
                HostBufferId::LeavePinned
            } else {
                HostBufferId::PerOperation
            },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RegCache<MrRegistrar>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register (or find registered) host memory `[addr, addr + len_bytes)` for one
    /// operation.
    ///
    /// Host memory has no buffer id the runtime can check, and memory freed and mapped
    /// again at the same address would leave a cached registration pointing at the old
    /// pages. So by default each operation gets a fresh identity (no reuse across
    /// operations, no stale key); with `RANKWIRE_RDMA_LEAVE_PINNED=1` the identity is
    /// the address range itself and registrations are reused (the application must not
    /// free communication buffers while the job runs; Open MPI's `leave_pinned` has the
    /// same contract).
    ///
    /// # Errors
    /// The cache's [`crate::regcache::RegCacheError`] text (`ibv_reg_mr` failed twice).
    pub fn acquire_host(&self, addr: u64, len_bytes: u64) -> Result<Held, String> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 32);
        let id = match self.host_buffer_id {
            HostBufferId::LeavePinned => 0,
            HostBufferId::PerOperation => NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        self.acquire(addr, len_bytes, id)
    }

    /// Register (or find) `[addr, addr + len_bytes)` of the buffer `buffer_id` (e.g. a
    /// CUDA buffer id) for one operation.
    ///
    /// # Errors
    /// As [`Registry::acquire_host`].
    pub fn acquire(&self, addr: u64, len_bytes: u64, buffer_id: u64) -> Result<Held, String> {
        let mut c = self.lock();
        let lease = c
            .acquire(addr, len_bytes, buffer_id)
            .map_err(|e| e.to_string())?;
        let h = c.handle(&lease);
        let (lkey, rkey) = (h.lkey, h.rkey);
        Ok(Held { lease, lkey, rkey })
    }

    /// End the operation that held `h`.
    pub fn release(&self, h: Held) {
        self.lock().release(h.lease);
    }

    /// Cache counters (hits, misses, evictions, invalidations).
    pub fn stats(&self) -> RegCacheStats {
        self.lock().stats()
    }

    /// Drop every registration, in use or not (teardown: the QPs are gone, and the PD
    /// must be empty before it can be deallocated).
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }
}

/// How a GPU buffer will reach the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GdrPath {
    /// `ibv_reg_dmabuf_mr` on a DMA-BUF exported by the CUDA driver.
    DmaBuf,
    /// `ibv_reg_mr` on the device pointer through `nvidia_peermem`.
    PeerMem,
    /// Through host memory (pipelined copies); no GPUDirect RDMA.
    HostStaged,
}

/// What the GPU side can offer, as plain facts (the core fills this in from
/// `rankwire_gpu`, so this crate needs no CUDA types).
#[derive(Debug, Clone, Copy)]
pub struct GdrFacts {
    /// The CUDA driver can export DMA-BUF fds for this device
    /// (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`).
    pub cuda_dmabuf: bool,
    /// libibverbs has `ibv_reg_dmabuf_mr`.
    pub verbs_dmabuf: bool,
    /// `/sys/module/nvidia_peermem` exists.
    pub peermem_loaded: bool,
}

impl GdrFacts {
    /// Whether the `nvidia_peermem` module is loaded on this machine.
    pub fn peermem_loaded_here() -> bool {
        std::path::Path::new("/sys/module/nvidia_peermem").exists()
    }
}

/// Choose the registration path for GPU buffers and say why (for the debug log).
///
/// # Errors
/// When `require_gdr` (`RANKWIRE_RDMA_GDR=1`) is set and neither direct path works: the
/// text names what is missing.
pub fn gdr_path(f: GdrFacts, require_gdr: bool) -> Result<(GdrPath, String), String> {
    if f.cuda_dmabuf && f.verbs_dmabuf {
        return Ok((
            GdrPath::DmaBuf,
            "DMA-BUF: the CUDA driver exports DMA-BUF and libibverbs has ibv_reg_dmabuf_mr".into(),
        ));
    }
    let why_not_dmabuf = match (f.cuda_dmabuf, f.verbs_dmabuf) {
        (false, _) => "the CUDA driver cannot export DMA-BUF for this device",
        (true, false) => "libibverbs lacks ibv_reg_dmabuf_mr (rdma-core older than 34)",
        (true, true) => unreachable!("handled above"),
    };
    if f.peermem_loaded {
        return Ok((
            GdrPath::PeerMem,
            format!("ibv_reg_mr on device pointers via nvidia_peermem ({why_not_dmabuf})"),
        ));
    }
    let why = format!("{why_not_dmabuf}, and nvidia_peermem is not loaded");
    if require_gdr {
        return Err(format!(
            "RANKWIRE_RDMA_GDR=1 demands GPUDirect RDMA, but {why}"
        ));
    }
    Ok((
        GdrPath::HostStaged,
        format!("staged through host memory: {why}"),
    ))
}

/// Register a DMA-BUF (`fd`, `offset` of the buffer inside it, `len_bytes`) in the
/// transport's protection domain: `ibv_reg_dmabuf_mr(pd, offset, len, iova = addr, fd,
/// access)`.
///
/// # Errors
/// `ibv_reg_dmabuf_mr` missing from the library, or its errno text.
pub(crate) fn reg_dmabuf(
    verbs: &Verbs,
    pd: *mut IbvPd,
    fd: i32,
    offset: u64,
    len_bytes: usize,
    iova: u64,
) -> Result<MemoryRegion, String> {
    let f = verbs
        .reg_dmabuf_mr
        .ok_or("libibverbs lacks ibv_reg_dmabuf_mr")?;
    // SAFETY: fd is a DMA-BUF owned by the caller for the duration of the call; the
    // MR keeps its own reference.
    let mr = unsafe { f(pd, offset, len_bytes, iova, fd, ACCESS) };
    if mr.is_null() {
        return Err(format!("ibv_reg_dmabuf_mr: {}", verbs::errno_text()));
    }
    // SAFETY: non-null MR.
    let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
    Ok(MemoryRegion { mr, lkey, rkey })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdr_choice_prefers_dmabuf_then_peermem_then_staging() {
        let all = GdrFacts {
            cuda_dmabuf: true,
            verbs_dmabuf: true,
            peermem_loaded: true,
        };
        assert_eq!(gdr_path(all, false).unwrap().0, GdrPath::DmaBuf);
        let no_verbs = GdrFacts {
            verbs_dmabuf: false,
            ..all
        };
        let (p, why) = gdr_path(no_verbs, true).unwrap();
        assert_eq!(p, GdrPath::PeerMem);
        assert!(why.contains("ibv_reg_dmabuf_mr"), "{why}");
        let nothing = GdrFacts {
            cuda_dmabuf: false,
            verbs_dmabuf: true,
            peermem_loaded: false,
        };
        let (p, why) = gdr_path(nothing, false).unwrap();
        assert_eq!(p, GdrPath::HostStaged);
        assert!(why.contains("nvidia_peermem is not loaded"), "{why}");
        let e = gdr_path(nothing, true).unwrap_err();
        assert!(e.contains("RANKWIRE_RDMA_GDR=1"), "{e}");
    }
}
