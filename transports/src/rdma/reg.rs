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

use super::gdr::{self, GdrMode, GdrRegistrar, GpuMemory, SharedGpu};
use super::verbs::{self, IbvMr, IbvPd, Verbs};
use crate::regcache::{Lease, RegCache, RegCacheConfig, RegCacheStats, Registrar};

/// Access flags of every registration: the NIC may read and write it locally and
/// remotely (the rendezvous reads it remotely; tests write it remotely).
pub(crate) const ACCESS: i32 =
    verbs::ACCESS_LOCAL_WRITE | verbs::ACCESS_REMOTE_READ | verbs::ACCESS_REMOTE_WRITE;

/// Access flags of device (GPUDirect RDMA) registrations: the rendezvous only reads
/// them remotely (the sender's region) and writes them locally (the receiver's RDMA
/// READ lands there); no peer may write into GPU memory.
pub(crate) const DEVICE_ACCESS: i32 = verbs::ACCESS_LOCAL_WRITE | verbs::ACCESS_REMOTE_READ;

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

impl MemoryRegion {
    /// Wrap an MR returned by `ibv_reg_mr`.
    ///
    /// # Safety
    /// `mr` is non-null and returned by a registration call of the verbs library.
    pub(crate) unsafe fn from_raw(mr: *mut IbvMr) -> MemoryRegion {
        // SAFETY: the caller's contract.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        MemoryRegion { mr, lkey, rkey }
    }
}

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
        Ok(unsafe { MemoryRegion::from_raw(mr) })
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
    /// Device memory regions, once the core gave a GPU side ([`Registry::set_gpu`]).
    device: Arc<std::sync::OnceLock<DeviceRegs>>,
    verbs: Arc<Verbs>,
    pd: PdHandle,
}

#[derive(Clone, Copy)]
struct PdHandle(*mut IbvPd);
// SAFETY: a PD handle; registrations on it are serialized by the caches' locks.
unsafe impl Send for PdHandle {}
// SAFETY: as above.
unsafe impl Sync for PdHandle {}

/// The device half of a [`Registry`]: a cache keyed by CUDA buffer id, and the GPU
/// side.
struct DeviceRegs {
    cache: Mutex<RegCache<GdrRegistrar>>,
    gpu: SharedGpu,
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
    /// Whether the lease is on the device cache.
    device: bool,
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
                MrRegistrar::for_pd(verbs.clone(), pd),
                cfg,
            ))),
            device: Arc::new(std::sync::OnceLock::new()),
            verbs,
            pd: PdHandle(pd),
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
        Ok(Held {
            lease,
            device: false,
            lkey,
            rkey,
        })
    }

    /// Let device memory be registered through `gpu` (GPUDirect RDMA), cached up to
    /// `cfg`'s bounds. Only the first call counts.
    pub fn set_gpu(&self, gpu: Box<dyn GpuMemory>, cfg: RegCacheConfig) {
        let gpu: SharedGpu = Arc::new(Mutex::new(gpu));
        let cfg = RegCacheConfig {
            // Whole allocations, as the GPU side located them.
            page_bytes: 1,
            ..cfg
        };
        let _ = self.device.set(DeviceRegs {
            cache: Mutex::new(RegCache::new(
                GdrRegistrar::new(self.verbs.clone(), self.pd.0, gpu.clone()),
                cfg,
            )),
            gpu,
        });
    }

    /// Whether device memory can be registered ([`Registry::set_gpu`]).
    pub fn has_gpu(&self) -> bool {
        self.device.get().is_some()
    }

    /// How device memory is registered ([`GpuMemory::describe`]), if it can be.
    pub fn gpu_describe(&self) -> Option<String> {
        self.device.get().map(|d| gdr::lock(&d.gpu).describe())
    }

    /// Register (or find registered) the device allocation holding
    /// `[addr, addr + len_bytes)` for one operation; returns the hold and the device.
    ///
    /// # Errors
    /// No GPU side ([`Registry::set_gpu`]), the GPU side could not locate or export the
    /// memory, or the registration failed after an eviction and a retry.
    pub fn acquire_device(&self, addr: u64, len_bytes: u64) -> Result<(Held, i32), String> {
        let d = self
            .device
            .get()
            .ok_or("device memory registration is not enabled (GPUDirect RDMA off)")?;
        let a = gdr::lock(&d.gpu).locate(addr, len_bytes)?;
        let mut c = d.cache.lock().unwrap_or_else(|p| p.into_inner());
        let before = c.stats().evictions;
        // The whole allocation (one registration serves every buffer in it), unless it
        // is larger than the cache may hold: then the 2 MiB-aligned window around the
        // buffer. A whole allocation the NIC refuses (BAR space) is retried as the
        // window once.
        let window = gdr_window(a, addr, len_bytes);
        let whole = (a.base, a.len_bytes);
        let first = if a.len_bytes > c.config().max_bytes {
            window
        } else {
            whole
        };
        let lease = match c.acquire(first.0, first.1, a.buffer_id) {
            Ok(l) => l,
            Err(e) if first != window => {
                tracing::debug!(
                    "rdma: registering the whole {}-byte device allocation failed ({e}); \
                     registering the {} bytes around the buffer",
                    a.len_bytes,
                    window.1
                );
                c.acquire(window.0, window.1, a.buffer_id)
                    .map_err(|e| e.to_string())?
            }
            Err(e) => return Err(e.to_string()),
        };
        let evicted = c.stats().evictions - before;
        if evicted > 0 {
            tracing::debug!(
                "rdma: {evicted} idle device registration(s) evicted to register {} bytes \
                 (RANKWIRE_RDMA_GDR_MAX_BYTES, RANKWIRE_REGCACHE_MAX_ENTRIES)",
                first.1
            );
        }
        let h = c.handle(&lease);
        let (lkey, rkey) = (h.lkey, h.rkey);
        Ok((
            Held {
                lease,
                device: true,
                lkey,
                rkey,
            },
            a.device,
        ))
    }

    /// Flush RDMA writes into memory of `device` where the GPU side needs it; whether
    /// a flush ran.
    ///
    /// # Errors
    /// The GPU side's flush error.
    pub fn flush_device(&self, device: i32) -> Result<bool, String> {
        let Some(d) = self.device.get() else {
            return Ok(false);
        };
        let mut g = gdr::lock(&d.gpu);
        if !g.needs_flush(device) {
            return Ok(false);
        }
        g.flush(device)?;
        Ok(true)
    }

    /// End the operation that held `h`.
    pub fn release(&self, h: Held) {
        if h.device {
            if let Some(d) = self.device.get() {
                d.cache
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .release(h.lease);
            }
        } else {
            self.lock().release(h.lease);
        }
    }

    /// Host cache counters (hits, misses, evictions, invalidations).
    pub fn stats(&self) -> RegCacheStats {
        self.lock().stats()
    }

    /// Device cache counters; `None` without a GPU side.
    pub fn device_stats(&self) -> Option<RegCacheStats> {
        self.device
            .get()
            .map(|d| d.cache.lock().unwrap_or_else(|p| p.into_inner()).stats())
    }

    /// Drop every registration, in use or not (teardown: the QPs are gone, and the PD
    /// must be empty before it can be deallocated).
    pub(crate) fn clear(&self) {
        if let Some(d) = self.device.get() {
            d.cache.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        self.lock().clear();
    }
}

/// Granularity of the partial device registrations [`Registry::acquire_device`] makes
/// (2 MiB: the GPU's large page).
pub const GDR_WINDOW_BYTES: u64 = 2 << 20;

/// The part of allocation `a` registered for `[addr, addr + len_bytes)` when the whole
/// allocation is not: the buffer rounded out to [`GDR_WINDOW_BYTES`] boundaries, clipped
/// to the allocation. (start, length in bytes).
pub(crate) fn gdr_window(a: super::gdr::DeviceAlloc, addr: u64, len_bytes: u64) -> (u64, u64) {
    let end = addr.saturating_add(len_bytes.max(1));
    let start = (addr & !(GDR_WINDOW_BYTES - 1)).max(a.base);
    let stop = end
        .div_ceil(GDR_WINDOW_BYTES)
        .saturating_mul(GDR_WINDOW_BYTES)
        .min(a.base.saturating_add(a.len_bytes));
    (start, stop.saturating_sub(start))
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
    /// The test stand-in: host memory registered through the device-region path
    /// (`RANKWIRE_GDR_STANDIN`); never on a real GPU.
    StandIn,
}

/// What the GPU side can offer, as plain facts (the core fills this in from
/// `rankwire_gpu`, so this crate needs no CUDA types).
#[derive(Debug, Clone, Copy)]
pub struct GdrFacts {
    /// The CUDA driver can export DMA-BUF fds for this device
    /// (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`).
    pub cuda_dmabuf: bool,
    /// libibverbs has `ibv_reg_dmabuf_mr` and the NIC's driver supports it (probed
    /// with an invalid fd: `EOPNOTSUPP` / `EPROTONOSUPPORT` mean unsupported, as NCCL
    /// probes it).
    pub verbs_dmabuf: bool,
    /// A GPU peer-memory client is loaded ([`GdrFacts::peermem_loaded_here`]).
    pub peermem_loaded: bool,
}

impl GdrFacts {
    /// Whether a GPU peer-memory client is loaded on this machine, detected as NCCL
    /// does: `/sys/module/nvidia_peermem/version` (nvidia-peermem) or
    /// `/sys/kernel/mm/memory_peers/nv_mem*/version` (the older nv_peer_mem, MLNX_OFED).
    pub fn peermem_loaded_here() -> bool {
        peermem_loaded_in(std::path::Path::new("/"))
    }
}

/// [`GdrFacts::peermem_loaded_here`] under the root `root` (tests use a fake tree).
pub(crate) fn peermem_loaded_in(root: &std::path::Path) -> bool {
    if root.join("sys/module/nvidia_peermem/version").exists() {
        return true;
    }
    std::fs::read_dir(root.join("sys/kernel/mm/memory_peers"))
        .map(|d| {
            d.flatten().any(|e| {
                e.file_name().to_string_lossy().starts_with("nv_mem")
                    && e.path().join("version").exists()
            })
        })
        .unwrap_or(false)
}

/// Choose the registration path for GPU buffers and say why (for the debug log and
/// `--explain`).
///
/// # Errors
/// When `mode` is [`GdrMode::Require`] (`RANKWIRE_RDMA_GDR=1`) and neither direct path
/// works: the text names what is missing.
pub fn gdr_path(f: GdrFacts, mode: GdrMode) -> Result<(GdrPath, String), String> {
    if mode == GdrMode::Off {
        return Ok((
            GdrPath::HostStaged,
            "staged through host memory: RANKWIRE_RDMA_GDR=0".into(),
        ));
    }
    if f.cuda_dmabuf && f.verbs_dmabuf {
        return Ok((
            GdrPath::DmaBuf,
            "DMA-BUF: the CUDA driver exports DMA-BUF and the NIC's driver registers it \
             (ibv_reg_dmabuf_mr)"
                .into(),
        ));
    }
    let why_not_dmabuf = match (f.cuda_dmabuf, f.verbs_dmabuf) {
        (false, _) => "the CUDA driver cannot export DMA-BUF for this device",
        (true, false) => {
            "ibv_reg_dmabuf_mr is missing (rdma-core older than 34) or unsupported by the \
             NIC's driver"
        }
        (true, true) => unreachable!("handled above"),
    };
    if f.peermem_loaded {
        return Ok((
            GdrPath::PeerMem,
            format!("ibv_reg_mr on device pointers via nvidia_peermem ({why_not_dmabuf})"),
        ));
    }
    let why = format!("{why_not_dmabuf}, and nvidia_peermem is not loaded");
    if mode == GdrMode::Require {
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
    access: i32,
) -> Result<MemoryRegion, String> {
    let f = verbs
        .reg_dmabuf_mr
        .ok_or("libibverbs lacks ibv_reg_dmabuf_mr")?;
    // SAFETY: fd is a DMA-BUF owned by the caller for the duration of the call; the
    // MR keeps its own reference.
    let mr = unsafe { f(pd, offset, len_bytes, iova, fd, access) };
    if mr.is_null() {
        return Err(format!("ibv_reg_dmabuf_mr: {}", verbs::errno_text()));
    }
    // SAFETY: non-null MR.
    Ok(unsafe { MemoryRegion::from_raw(mr) })
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
        assert_eq!(gdr_path(all, GdrMode::Auto).unwrap().0, GdrPath::DmaBuf);
        assert_eq!(gdr_path(all, GdrMode::Off).unwrap().0, GdrPath::HostStaged);
        let no_verbs = GdrFacts {
            verbs_dmabuf: false,
            ..all
        };
        let (p, why) = gdr_path(no_verbs, GdrMode::Require).unwrap();
        assert_eq!(p, GdrPath::PeerMem);
        assert!(why.contains("ibv_reg_dmabuf_mr"), "{why}");
        let nothing = GdrFacts {
            cuda_dmabuf: false,
            verbs_dmabuf: true,
            peermem_loaded: false,
        };
        let (p, why) = gdr_path(nothing, GdrMode::Auto).unwrap();
        assert_eq!(p, GdrPath::HostStaged);
        assert!(why.contains("nvidia_peermem is not loaded"), "{why}");
        let e = gdr_path(nothing, GdrMode::Require).unwrap_err();
        assert!(e.contains("RANKWIRE_RDMA_GDR=1"), "{e}");
    }

    #[test]
    fn partial_device_registrations_are_2_mib_windows_inside_the_allocation() {
        let m = 1u64 << 20;
        let a = super::super::gdr::DeviceAlloc {
            base: 0x7f00_0000_0000 + m, // not 2 MiB aligned
            len_bytes: 64 * m,
            buffer_id: 5,
            device: 0,
        };
        // A buffer in the middle: its 2 MiB-aligned cover.
        assert_eq!(
            gdr_window(a, a.base + 5 * m + 100, 3 * m),
            (0x7f00_0000_0000 + 6 * m, 4 * m)
        );
        // At the start and end: clipped to the allocation.
        assert_eq!(gdr_window(a, a.base, 10), (a.base, m));
        assert_eq!(
            gdr_window(a, a.base + 63 * m, m),
            (0x7f00_0000_0000 + 64 * m, m)
        );
        // Always covers the buffer.
        for (off, len) in [(0, 1), (m - 1, 2), (17 * m + 3, 9 * m), (63 * m, m)] {
            let (s, l) = gdr_window(a, a.base + off, len);
            assert!(
                s <= a.base + off && a.base + off + len <= s + l,
                "{off} {len}"
            );
            assert!(s >= a.base && s + l <= a.base + a.len_bytes);
        }
    }

    #[test]
    fn peermem_is_detected_as_nccl_does() {
        let root = std::env::temp_dir().join(format!("rw-peermem-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        assert!(!peermem_loaded_in(&root));
        let old = root.join("sys/kernel/mm/memory_peers/nv_mem");
        std::fs::create_dir_all(&old).unwrap();
        assert!(!peermem_loaded_in(&root), "a directory without version");
        std::fs::write(old.join("version"), "1.3").unwrap();
        assert!(peermem_loaded_in(&root));
        std::fs::remove_dir_all(root.join("sys/kernel")).unwrap();
        let new = root.join("sys/module/nvidia_peermem");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(new.join("version"), "580").unwrap();
        assert!(peermem_loaded_in(&root));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
