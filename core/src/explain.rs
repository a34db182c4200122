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
