//! **Test stand-in for GPU memory** in the GPUDirect RDMA path, for machines with an
//! RDMA device and no GPU (the Soft-RoCE VM of CI). Not a GPU, not for applications.
//!
//! With `RANKWIRE_GDR_STANDIN=1` set for every rank, a [`StandInDeviceBuffer`] is host
//! memory that the runtime treats as device memory of device 0: point-to-point calls
//! on it (`send_device`, `recv_device`, ...) take the device paths, and to peers over
//! RDMA the device-region path of GPUDirect RDMA: the allocation is registered through
//! the same registrar, cache (keyed by a buffer id that changes when the buffer is
//! "freed and allocated again" at the same address, [`StandInDeviceBuffer::reallocate`]),
//! `Rts`/RDMA READ/`Fin` frames and flush step (counted in
//! `Universe::rdma_stats`) as CUDA memory, with `ibv_reg_mr` on the host pages standing
//! in for the GPU driver's DMA-BUF export. Copies that would be `cuMemcpy` (eager
//! messages, the staged fallback) are `memcpy`.
//!
//! `RANKWIRE_GDR_STANDIN=refuse` makes every device registration fail, as a driver
//! without DMA-BUF or peermem support for a buffer would: sends then stage through host
//! memory and receives fall back to `Cts` and `Data` frames.
//!
//! Only point-to-point is covered (collectives on stand-in buffers would take the GPU
//! kernels: they fail with [`crate::Error::Gpu`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use rankwire_transports::MemoryKind;
use rankwire_transports::rdma::{DeviceAlloc, DeviceExport, GpuMemory};

/// Environment variable that turns the stand-in on (`1`) or on with registrations
/// refused (`refuse`).
pub const STANDIN_ENV: &str = "RANKWIRE_GDR_STANDIN";

/// What `RANKWIRE_GDR_STANDIN` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandInMode {
    /// Register stand-in buffers through the device-region path (`1`).
    Register,
    /// Refuse every device registration (`refuse`): the staged fallbacks run.
    Refuse,
}

/// The stand-in mode of this process (`RANKWIRE_GDR_STANDIN`, read once); `None`
/// when off (unset, empty or `0`). Invalid values are rejected at init by the settings
/// check.
pub fn mode() -> Option<StandInMode> {
    static MODE: OnceLock<Option<StandInMode>> = OnceLock::new();
    *MODE.get_or_init(|| {
        match crate::settings::raw(STANDIN_ENV)
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            Some("1") => Some(StandInMode::Register),
            Some("refuse") => Some(StandInMode::Refuse),
            _ => None,
        }
    })
}

/// One live stand-in allocation: start, length in bytes, buffer id.
#[derive(Clone, Copy)]
struct Alloc {
    base: u64,
    len: u64,
    id: u64,
}

fn allocs() -> std::sync::MutexGuard<'static, Vec<Alloc>> {
    static ALLOCS: Mutex<Vec<Alloc>> = Mutex::new(Vec::new());
    ALLOCS.lock().unwrap_or_else(|p| p.into_inner())
}

fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The memory kind of `[addr, addr + len)` if it lies in a stand-in allocation and
/// the stand-in is on.
pub(crate) fn kind_of(addr: u64, len: usize) -> Option<MemoryKind> {
    mode()?;
    find(addr, len as u64).map(|_| MemoryKind::Cuda { device: 0 })
}

fn find(addr: u64, len: u64) -> Option<Alloc> {
    let end = addr.checked_add(len)?;
    allocs()
        .iter()
        .find(|a| addr >= a.base && end <= a.base + a.len)
        .copied()
}

/// Host memory that the runtime treats as device memory of device 0 while
/// `RANKWIRE_GDR_STANDIN` is set (see the module doc). `len` bytes, zeroed.
pub struct StandInDeviceBuffer {
    mem: Box<[u8]>,
    len: usize,
    id: u64,
}

impl StandInDeviceBuffer {
    /// A zeroed buffer of `len_bytes` bytes (at least 1 byte is allocated).
    pub fn new(len_bytes: usize) -> StandInDeviceBuffer {
        let mem = vec![0u8; len_bytes.max(1)].into_boxed_slice();
        let id = next_id();
        allocs().push(Alloc {
            base: mem.as_ptr() as u64,
            len: len_bytes as u64,
            id,
        });
        StandInDeviceBuffer {
            mem,
            len: len_bytes,
            id,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes (it is host memory: tests check results directly).
    pub fn as_slice(&self) -> &[u8] {
        &self.mem[..self.len()]
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let n = self.len();
        &mut self.mem[..n]
    }

    /// Start address of the buffer.
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    /// The buffer id, as `CU_POINTER_ATTRIBUTE_BUFFER_ID` would give it.
    pub fn buffer_id(&self) -> u64 {
        self.id
    }

    /// Act as if the buffer were freed and a new one allocated at the same address
    /// (what `cudaFree` then `cudaMalloc` often does): same memory, new buffer id, so a
    /// cached registration of the old one must not be used.
    pub fn reallocate(&mut self) {
        let id = next_id();
        for a in allocs().iter_mut().filter(|a| a.id == self.id) {
            a.id = id;
        }
        self.id = id;
    }
}

impl Drop for StandInDeviceBuffer {
    fn drop(&mut self) {
        allocs().retain(|a| a.id != self.id);
    }
}

/// The GPU side of device memory regions for stand-in buffers.
pub(crate) struct StandInGpu {
    pub(crate) refuse: bool,
}

impl GpuMemory for StandInGpu {
    fn locate(&mut self, addr: u64, len_bytes: u64) -> std::result::Result<DeviceAlloc, String> {
        let a = find(addr, len_bytes).ok_or_else(|| {
            format!("{len_bytes} bytes at {addr:#x} are not in a stand-in device buffer")
        })?;
        Ok(DeviceAlloc {
            base: a.base,
            len_bytes: a.len.max(1),
            buffer_id: a.id,
            device: 0,
        })
    }

    fn export(&mut self, _base: u64, _len_bytes: u64) -> std::result::Result<DeviceExport, String> {
        if self.refuse {
            Err("stand-in: registration refused (RANKWIRE_GDR_STANDIN=refuse)".into())
        } else {
            Ok(DeviceExport::Pointer)
        }
    }

    fn needs_flush(&self, _device: i32) -> bool {
        // Exercise the flush step on every receive (a real GPU skips it on 9.0+).
        true
    }

    fn flush(&mut self, _device: i32) -> std::result::Result<(), String> {
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    fn describe(&self) -> String {
        "stand-in (host memory)".into()
    }
}
