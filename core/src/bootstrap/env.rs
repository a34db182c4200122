//! Environment variables `rwrun` sets for every rank (read by
//! [`super::client`] and `crate::universe`; set by `rwrun`).

/// World rank of this process (0-based).
pub const RANK: &str = "RANKWIRE_RANK";
/// Number of ranks in the world.
pub const SIZE: &str = "RANKWIRE_SIZE";
/// Rank among the processes of this node (0-based).
pub const LOCAL_RANK: &str = "RANKWIRE_LOCAL_RANK";
/// Number of ranks on this node.
pub const LOCAL_SIZE: &str = "RANKWIRE_LOCAL_SIZE";
/// `host:port` of the launcher's bootstrap server, or several separated by commas
/// (tried in order; rwrun lists its node's addresses when ranks run elsewhere).
pub const BOOTSTRAP_ADDR: &str = "RANKWIRE_BOOTSTRAP_ADDR";
/// Job id (also used in names of /dev/shm segments and socket files).
pub const JOB_ID: &str = "RANKWIRE_JOB_ID";
/// Per-job secret every bootstrap connection must present (hex).
pub const JOB_SECRET: &str = "RANKWIRE_JOB_SECRET";
