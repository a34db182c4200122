//! Bootstrap: how ranks find each other through the launcher's key-value server.
//!
//! `rwrun` runs a rendezvous server (put, get, fence, abort) on an ephemeral TCP port and
//! starts every rank with the environment variables in [`env`]. Each rank opens a small
//! blocking `std::net` client ([`client::BootstrapClient`]) against it; transports use it
//! through the [`rankwire_transports::Exchange`] trait to publish and learn addresses.
//! [`proto`] defines the messages both sides use.

pub mod client;
pub mod proto;

/// Environment variables `rwrun` sets for every rank.
pub mod env {
    /// World rank of this process (0-based).
    pub const RANK: &str = "RANKWIRE_RANK";
    /// Number of ranks in the world.
    pub const SIZE: &str = "RANKWIRE_SIZE";
    /// Rank among the processes of this node (0-based).
    pub const LOCAL_RANK: &str = "RANKWIRE_LOCAL_RANK";
    /// Number of ranks on this node.
    pub const LOCAL_SIZE: &str = "RANKWIRE_LOCAL_SIZE";
    /// `host:port` of the launcher's bootstrap server.
    pub const BOOTSTRAP_ADDR: &str = "RANKWIRE_BOOTSTRAP_ADDR";
    /// Job id (also used in names of /dev/shm segments and socket files).
    pub const JOB_ID: &str = "RANKWIRE_JOB_ID";
    /// Per-job secret every bootstrap connection must present (hex).
    pub const JOB_SECRET: &str = "RANKWIRE_JOB_SECRET";
}
