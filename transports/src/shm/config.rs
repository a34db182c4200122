//! Configuration of the shared-memory transport.

use std::fmt;
use std::time::Duration;

/// Environment variable: bytes of each inbound ring (one per local peer), as a plain
/// number or with a binary suffix (`K`, `KiB`, `M`, `MiB`, `G`, `GiB`; case-insensitive).
pub const ENV_RING_BYTES: &str = "RANKWIRE_SHM_RING_BYTES";

/// Largest ring the derived size picks, in bytes: 1 MiB (the size of every ring before
/// the size was derived from the local rank count).
pub const DEFAULT_RING_BYTES: usize = 1 << 20;
/// Ring bytes (data and control blocks) of one rank's segment that the derived ring size
/// aims at: 4 MiB. With `n` local ranks a segment holds `n - 1` rings, so the node's
/// shared memory stays below about `n × 4.3 MB` while the rings fit the budget above
/// [`MIN_RING_BYTES`] (up to 256 local ranks); see [`ShmConfig::ring_bytes_for`].
pub const SEGMENT_BUDGET_BYTES: usize = 4 << 20;
/// Smallest ring, in bytes (its largest frame payload is then 4 KiB; a frame record of a
/// full [`crate::MAX_HEADER_BYTES`] header and that payload still fits).
pub const MIN_RING_BYTES: usize = 16 << 10;
/// Largest ring, in bytes.
pub const MAX_RING_BYTES: usize = 1 << 30;

/// Configuration of the shared-memory transport. [`ShmConfig::default`] is the
/// documented default; [`ShmConfig::from_env`] applies `RANKWIRE_SHM_RING_BYTES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmConfig {
    /// Bytes of each inbound ring this rank offers (one ring per local peer, in this
    /// rank's segment). `None` (the default): derived from the number of ranks on the
    /// node, so that the node's shared memory grows linearly with it
    /// ([`ShmConfig::ring_bytes_for`]). `Some(b)`: `b` rounded up to a power of two and
    /// clamped to [`MIN_RING_BYTES`]..=[`MAX_RING_BYTES`], whatever the rank count.
    /// The largest frame payload is a quarter of the smallest ring of the node.
    /// Env: `RANKWIRE_SHM_RING_BYTES`.
    pub ring_bytes: Option<usize>,
    /// How often `poll` checks that local peers are still alive (at most once per this
    /// interval; the check is one `poll(2)` over the peers' pidfds). Default 100 ms.
    pub liveness_interval: Duration,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            ring_bytes: None,
            liveness_interval: Duration::from_millis(100),
        }
    }
}

pub use crate::ConfigError;

impl ShmConfig {
    /// The default configuration with `RANKWIRE_SHM_RING_BYTES` applied. Unset or empty
    /// keeps the default.
    ///
    /// # Errors
    /// [`ConfigError`] if the value is not a byte count or lies outside
    /// [`MIN_RING_BYTES`]..=[`MAX_RING_BYTES`].
    pub fn from_env() -> Result<Self, ConfigError> {
        crate::settings::check_names(&[ENV_RING_BYTES])?;
        Self::from_lookup(crate::settings::raw)
    }

    /// Like [`ShmConfig::from_env`], reading variables through `lookup`.
    pub(crate) fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = ShmConfig::default();
        if let Some(v) = lookup(ENV_RING_BYTES).filter(|v| !v.trim().is_empty()) {
            cfg.ring_bytes = Some(
                parse_bytes(&v)
                    .filter(|b| (MIN_RING_BYTES..=MAX_RING_BYTES).contains(b))
                    .ok_or(ConfigError {
                        var: ENV_RING_BYTES,
                        value: v,
                        expected: "a byte count from 16K to 1G (suffix K, M or G optional)",
                    })?,
            );
        }
        Ok(cfg)
    }

    /// Bytes of each inbound ring of a rank whose node runs `local_ranks` ranks of the
    /// job (itself included).
    ///
    /// - [`ShmConfig::ring_bytes`] set: that size, rounded up to a power of two and
    ///   clamped to [`MIN_RING_BYTES`]..=[`MAX_RING_BYTES`].
    /// - Unset: the largest power of two `r` with `(local_ranks - 1) × (r + 256)` ≤
    ///   [`SEGMENT_BUDGET_BYTES`] (256 bytes: a ring's control block), clamped to
    ///   [`MIN_RING_BYTES`]..=[`DEFAULT_RING_BYTES`]. With 4 MiB that is 1 MiB up to 4
    ///   local ranks, 512 KiB up to 8, 128 KiB up to 32 (the eager limit, a quarter of
    ///   the ring up to 32 KiB, is unchanged so far), 32 KiB at 128 and 16 KiB from 129
    ///   on. The node's rings then take `local_ranks × (local_ranks - 1) × (r + 256)`
    ///   bytes: about 537 MB at 128 ranks, 1.09 GB at 256 and 4.4 GB at 512 (from 257
    ///   local ranks on, the 16 KiB floor makes it grow as the square again).
    ///
    /// The idea of sizing per-pair buffers from the local rank count is the one of
    /// Open MPI's vader BTL (its fast boxes are limited to the first peers); the budget
    /// is ours, chosen for "/dev/shm at 128 ranks ≤ 1 GiB" (issue 21).
    pub fn ring_bytes_for(&self, local_ranks: usize) -> usize {
        if let Some(b) = self.ring_bytes {
            return b.clamp(MIN_RING_BYTES, MAX_RING_BYTES).next_power_of_two();
        }
        let peers = local_ranks.saturating_sub(1).max(1);
        let per_ring = (SEGMENT_BUDGET_BYTES / peers).saturating_sub(super::ring::CTRL_BYTES);
        // largest power of two <= per_ring (0 stays below the floor)
        let pow2 = if per_ring == 0 {
            0
        } else {
            1usize << (usize::BITS - 1 - per_ring.leading_zeros())
        };
        pow2.clamp(MIN_RING_BYTES, DEFAULT_RING_BYTES)
    }

    /// Bytes of shared memory the rings of a node with `local_ranks` ranks take in all
    /// (every rank's segment: one page of header plus `local_ranks - 1` rings of
    /// [`ShmConfig::ring_bytes_for`] and their 256-byte control blocks). 0 for one rank;
    /// `u64::MAX` beyond what a segment supports (4096 peers).
    pub fn node_bytes(&self, local_ranks: usize) -> u64 {
        if local_ranks < 2 {
            return 0;
        }
        let peers = local_ranks - 1;
        super::segment::Layout::new(peers, self.ring_bytes_for(local_ranks))
            .map(|l| l.total as u64)
            .unwrap_or(u64::MAX)
            .saturating_mul(local_ranks as u64)
    }
}

impl fmt::Display for ShmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ring_bytes {
            Some(_) => write!(f, "ring {} bytes", self.ring_bytes_for(2))?,
            None => write!(f, "ring size from the local rank count")?,
        }
        write!(f, ", liveness every {:?}", self.liveness_interval)
    }
}

/// `123`, `64K`, `64KiB`, `1M`, `1 MiB`, `2g` → bytes (the settings table's parser).
fn parse_bytes(s: &str) -> Option<usize> {
    crate::settings::parse_bytes(s).and_then(|n| usize::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("65536"), Some(65536));
        assert_eq!(parse_bytes("64K"), Some(65536));
        assert_eq!(parse_bytes(" 1 MiB "), Some(1 << 20));
        assert_eq!(parse_bytes("2g"), Some(2 << 30));
        assert_eq!(parse_bytes("1.5M"), None);
        assert_eq!(parse_bytes("M"), None);
        assert_eq!(parse_bytes("99999999999999999999G"), None);
    }

    #[test]
    fn env_overrides_and_rejects() {
        let cfg = ShmConfig::from_lookup(|_| Some("256K".into())).unwrap();
        assert_eq!(cfg.ring_bytes, Some(256 << 10));
        let cfg = ShmConfig::from_lookup(|_| Some("  ".into())).unwrap();
        assert_eq!(cfg, ShmConfig::default());
        let err = ShmConfig::from_lookup(|_| Some("1K".into())).unwrap_err();
        assert_eq!(err.var, ENV_RING_BYTES);
        assert!(ShmConfig::from_lookup(|_| Some("lots".into())).is_err());
    }

    #[test]
    fn a_set_size_is_a_clamped_power_of_two_whatever_the_rank_count() {
        let eff = |b, n| {
            ShmConfig {
                ring_bytes: Some(b),
                ..ShmConfig::default()
            }
            .ring_bytes_for(n)
        };
        assert_eq!(eff(0, 2), MIN_RING_BYTES);
        assert_eq!(eff(1 << 20, 2), 1 << 20);
        assert_eq!(eff(1 << 20, 512), 1 << 20);
        assert_eq!(eff((1 << 20) + 1, 2), 2 << 20);
        assert_eq!(eff(usize::MAX, 2), MAX_RING_BYTES);
    }

    #[test]
    fn the_derived_size_keeps_a_segment_within_the_budget() {
        let cfg = ShmConfig::default();
        let r = |n| cfg.ring_bytes_for(n);
        // The figures the doc comment gives.
        assert_eq!((r(1), r(2), r(4)), (1 << 20, 1 << 20, 1 << 20));
        assert_eq!((r(5), r(8)), (512 << 10, 512 << 10));
        assert_eq!((r(32), r(33)), (128 << 10, 64 << 10));
        assert_eq!(
            (r(128), r(129), r(256), r(4096)),
            (32 << 10, 16 << 10, 16 << 10, 16 << 10)
        );
        for n in 2..=256usize {
            let ring = r(n);
            assert!(ring.is_power_of_two());
            assert!(
                (n - 1) * (ring + 256) <= SEGMENT_BUDGET_BYTES || ring == MIN_RING_BYTES,
                "{n} ranks: ring {ring}"
            );
            // and it is the largest such power of two (below the 1 MiB cap)
            if ring < DEFAULT_RING_BYTES {
                assert!((n - 1) * (2 * ring + 256) > SEGMENT_BUDGET_BYTES, "{n}");
            }
        }
        // Issue 21's target: /dev/shm at 128 ranks at most 1 GiB.
        assert!(cfg.node_bytes(128) <= 1 << 30, "{}", cfg.node_bytes(128));
        assert_eq!(cfg.node_bytes(1), 0);
        // 2 ranks: two segments of one page of header and one 1 MiB ring.
        assert_eq!(cfg.node_bytes(2), 2 * (4096 + (1 << 20) + 256));
    }
}
