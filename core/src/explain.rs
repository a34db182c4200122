//! Why each path was chosen: the table behind `rwrun --explain`,
//! [`crate::Universe::explain`] and `RANKWIRE_LOG=info`, and the `RANKWIRE_REQUIRE`
//! check that turns a fallback into an error at init. Selection and the table are
//! one module, `select.rs` (the rows come from the same walk as the routes); this
//! module keeps the public paths (`rankwire::explain::*`).

pub use crate::select::{EXPLAIN_ENV, REQUIRABLE, REQUIRE_ENV, Row, render};
/// The shared-memory transport's settings: [`ShmConfig::ring_bytes_for`] and
/// [`ShmConfig::node_bytes`] say how much of `/dev/shm` a node with `n` ranks takes
/// (`rwrun --doctor` relates it to the free space).
pub use rankwire_transports::ShmConfig;
/// PCIe distance of two devices from their sysfs paths (`rwrun --doctor`), as the RDMA
/// device choice reads it.
pub use rankwire_transports::rdma::pcie_score;

pub(crate) use crate::select::Paths;

/// How the device buffer `[addr, addr + len_bytes)` would be registered for GPUDirect
/// RDMA through the DMA-BUF path (for diagnostics and the GPU machine's checks, where
/// no NIC is present): the allocation that holds it (as the registration cache keys it:
/// start, length, CUDA buffer id, device) and the DMA-BUF offset of that allocation.
///
/// # Errors
/// Not device memory, the range runs past its allocation, or the DMA-BUF export
/// failed: the text says which.
pub fn gdr_region(
    addr: u64,
    len_bytes: usize,
) -> std::result::Result<(rankwire_transports::rdma::DeviceAlloc, u64), String> {
    use rankwire_transports::rdma::{DeviceExport, GdrPath, GpuMemory};
    let mut g = crate::gdr::CudaGdr::new(GdrPath::DmaBuf, false);
    let a = g.locate(addr, len_bytes as u64)?;
    match g.export(a.base, a.len_bytes)? {
        DeviceExport::DmaBuf { offset, .. } => Ok((a, offset)),
        DeviceExport::Pointer => Err("not a DMA-BUF export".into()),
    }
}
