//! Configuration of the shared-memory transport.

use std::fmt;
use std::time::Duration;

/// Environment variable: bytes of each inbound ring (one per local peer), as a plain
/// number or with a binary suffix (`K`, `KiB`, `M`, `MiB`, `G`, `GiB`; case-insensitive).
pub const ENV_RING_BYTES: &str = "RANKWIRE_SHM_RING_BYTES";

/// Default bytes of one ring: 1 MiB.
pub const DEFAULT_RING_BYTES: usize = 1 << 20;
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
    /// rank's segment). Rounded up to a power of two and clamped to
    /// [`MIN_RING_BYTES`]..=[`MAX_RING_BYTES`] ([`ShmConfig::effective_ring_bytes`]).
    /// The largest frame payload is a quarter of the smallest ring of the node.
    /// Default [`DEFAULT_RING_BYTES`]. Env: `RANKWIRE_SHM_RING_BYTES`.
    pub ring_bytes: usize,
    /// How often `poll` checks that local peers are still alive (at most once per this
    /// interval; the check is one `poll(2)` over the peers' pidfds). Default 100 ms.
    pub liveness_interval: Duration,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            ring_bytes: DEFAULT_RING_BYTES,
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
            cfg.ring_bytes = parse_bytes(&v)
                .filter(|b| (MIN_RING_BYTES..=MAX_RING_BYTES).contains(b))
                .ok_or(ConfigError {
                    var: ENV_RING_BYTES,
                    value: v,
                    expected: "a byte count from 16K to 1G (suffix K, M or G optional)",
                })?;
        }
        Ok(cfg)
    }

    /// The ring size actually used: `ring_bytes` rounded up to a power of two, clamped
    /// to [`MIN_RING_BYTES`]..=[`MAX_RING_BYTES`].
    pub fn effective_ring_bytes(&self) -> usize {
        self.ring_bytes
            .clamp(MIN_RING_BYTES, MAX_RING_BYTES)
            .next_power_of_two()
    }
}

impl fmt::Display for ShmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ring {} bytes, liveness every {:?}",
            self.effective_ring_bytes(),
            self.liveness_interval
        )
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
        assert_eq!(cfg.ring_bytes, 256 << 10);
        let cfg = ShmConfig::from_lookup(|_| Some("  ".into())).unwrap();
        assert_eq!(cfg, ShmConfig::default());
        let err = ShmConfig::from_lookup(|_| Some("1K".into())).unwrap_err();
        assert_eq!(err.var, ENV_RING_BYTES);
        assert!(ShmConfig::from_lookup(|_| Some("lots".into())).is_err());
    }

    #[test]
    fn effective_size_is_a_clamped_power_of_two() {
        let eff = |b| {
            ShmConfig {
                ring_bytes: b,
                ..ShmConfig::default()
            }
            .effective_ring_bytes()
        };
        assert_eq!(eff(0), MIN_RING_BYTES);
        assert_eq!(eff(1 << 20), 1 << 20);
        assert_eq!(eff((1 << 20) + 1), 2 << 20);
        assert_eq!(eff(usize::MAX), MAX_RING_BYTES);
    }
}
