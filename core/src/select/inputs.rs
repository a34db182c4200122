//! Gathering the inputs of [`super::select`] that need the environment or the
//! bootstrap (called by `universe.rs` before selecting), and the GPUDirect choice
//! logged once the RDMA transport exists.

use rankwire_transports::{Caps, RdmaConfig, RdmaDevice, RdmaTransport};

use super::{EXCLUDED, TRANSPORTS_ENV};
use crate::error::{Error, Result};

/// Transports allowed by `RANKWIRE_TRANSPORTS` (comma-separated subset of
/// `shm,rdma,tcp`; default all). The self transport is always used for a rank's own
/// messages.
///
/// # Errors
/// [`Error::Usage`] naming an unknown transport.
pub(crate) fn allowed_transports() -> Result<Vec<&'static str>> {
    parse_allowed(crate::settings::raw(TRANSPORTS_ENV).as_deref())
}

/// [`allowed_transports`] of the value `v` (`None`: unset). A blank value is the
/// default, as for every setting (`rankwire_transports::settings`: rwrun's check passes
/// it as unset, so refusing it here would fail every rank at init instead).
fn parse_allowed(v: Option<&str>) -> Result<Vec<&'static str>> {
    let Some(v) = v.filter(|v| !v.trim().is_empty()) else {
        return Ok(vec!["shm", "rdma", "tcp"]);
    };
    let v = v.to_ascii_lowercase();
    let mut out = Vec::new();
    for t in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match t {
            "shm" => out.push("shm"),
            "tcp" => out.push("tcp"),
            "rdma" => out.push("rdma"),
            "self" => {}
            other => {
                return Err(Error::usage(format!(
                    "{TRANSPORTS_ENV}={v:?}: unknown transport {other:?} (known: self, shm, rdma, tcp)"
                )));
            }
        }
    }
    Ok(out)
}

/// The settings every rank must share, as it publishes them in its node record:
/// `RANKWIRE_TRANSPORTS=<list>` with the allowed transports in the fixed order
/// `shm,rdma,tcp` (`-` for none, so that two spellings of one list compare equal), and,
/// where TCP is allowed, `RANKWIRE_TCP_CONNECT=<on-demand|at-init>` (`tcp_connect`:
/// the raw value, `None` when unset), separated by a space.
pub(crate) fn shared_settings_field(allowed: &[&str], tcp_connect: Option<&str>) -> String {
    let v: Vec<&str> = ["shm", "rdma", "tcp"]
        .into_iter()
        .filter(|t| allowed.contains(t))
        .collect();
    let list = if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    };
    let mut f = format!("{TRANSPORTS_ENV}={list}");
    if allowed.contains(&"tcp") {
        let mode = tcp_connect
            .map(|m| m.trim().to_ascii_lowercase())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "on-demand".into());
        f.push_str(&format!(" RANKWIRE_TCP_CONNECT={mode}"));
    }
    f
}

/// Every rank must allow the same transports, and make TCP connections the same way:
/// each transport's set-up has job-wide steps (fences) that a rank leaving it out would
/// skip, and a rank connecting at init dials peers that connect on demand only when
/// they send, so the others would wait for a timeout and fail with a misleading error.
/// The collective settings published with them
/// (`crate::coll::select::shared_settings_field`) are compared the same way.
/// `fields[r]` is what rank `r` published ([`shared_settings_field`]; `None`: nothing,
/// taken as a mismatch too). Compared with rank 0's, so every rank names the same pair.
///
/// # Errors
/// [`Error::Usage`] naming the first setting and rank whose value differs from rank 0's,
/// and both values.
pub(crate) fn check_shared_settings(fields: &[Option<&str>]) -> Result<()> {
    let Some(first) = fields.first() else {
        return Ok(());
    };
    let pairs = |f: &Option<&str>| -> Vec<(String, String)> {
        f.unwrap_or("")
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let mine = pairs(first);
    for (r, f) in fields.iter().enumerate().skip(1) {
        if f == first {
            continue;
        }
        let theirs = pairs(f);
        let keys = mine.iter().chain(&theirs).map(|(k, _)| k.clone());
        let value = |set: &[(String, String)], k: &str| {
            set.iter()
                .find(|(key, _)| key == k)
                .map_or("(not used)".to_string(), |(_, v)| v.clone())
        };
        let key = keys
            .into_iter()
            .find(|k| value(&mine, k) != value(&theirs, k))
            .unwrap_or_else(|| TRANSPORTS_ENV.to_string());
        let (a, b) = if f.is_none() {
            (value(&mine, &key), "nothing published".to_string())
        } else {
            (value(&mine, &key), value(&theirs, &key))
        };
        return Err(Error::usage(format!(
            "ranks differ in {key}: rank 0 has {a}, rank {r} has {b}; fix: give every rank \
             the same {key} (unset means the default: shm,rdma,tcp for {TRANSPORTS_ENV}, \
             on-demand for RANKWIRE_TCP_CONNECT, auto for RANKWIRE_<COLLECTIVE>_ALGO); rwrun \
             passes its environment to every rank, under srun export it before the step"
        )));
    }
    Ok(())
}

/// What [`probe_rdma`] found, and (after [`RdmaProbe::learn`]) which ranks have a device.
pub(crate) struct RdmaProbe {
    /// The settings, when RDMA is allowed and the job has more than one rank.
    pub(crate) cfg: Option<RdmaConfig>,
    /// This process's device, if any.
    pub(crate) dev: Option<RdmaDevice>,
    /// Per world rank: whether it has a device (published in its node record).
    pub(crate) ok: Vec<bool>,
    /// Per world rank: whether it makes queue pairs on demand (`Some(true)`), at init
    /// (`Some(false)`), or does not consider RDMA (`None`), as published.
    pub(crate) on_demand: Vec<Option<bool>>,
    /// Why this process has no usable RDMA (`Ok` when it has a device).
    pub(crate) usable: std::result::Result<(), String>,
}

/// RDMA device of this process, when RDMA is allowed and the job has more than one rank
/// (`ok` is left all `false`: [`RdmaProbe::publish`] gives the flag this rank publishes
/// with its node record, and [`RdmaProbe::learn`] reads every rank's). "No RDMA here"
/// (no library, no device, `ENOSYS`) is not an error: it is said once in the debug log
/// and TCP is used. Needs no bootstrap exchange of its own: the flags travel in the node
/// records (one fence and one `GetMany` for every fact about a rank, not one `get` per
/// rank for this one).
///
/// # Errors
/// [`Error::Usage`] for a settings error (`RANKWIRE_IB_HCA`, `RANKWIRE_IB_GID_INDEX`).
pub(crate) fn probe_rdma(rank: u32, size: u32, allowed: &[&str]) -> Result<RdmaProbe> {
    if !allowed.contains(&"rdma") || size < 2 {
        return Ok(RdmaProbe {
            cfg: None,
            dev: None,
            ok: vec![false; size as usize],
            on_demand: vec![None; size as usize],
            usable: Err(if size < 2 {
                "no other rank".to_string()
            } else {
                EXCLUDED.to_string()
            }),
        });
    }
    let mut cfg = RdmaConfig::from_env()
        .map_err(|e| Error::usage(format!("RDMA transport settings: {e}")))?;
    if cfg.hca.is_none() {
        cfg.near_gpu = gpu_for_nic_choice();
    }
    let (dev, usable) = match RdmaDevice::probe(&cfg) {
        Ok(Ok(d)) => {
            tracing::debug!("rdma: rank {rank} uses {}", d.why());
            (Some(d), Ok(()))
        }
        Ok(Err(why)) => {
            tracing::debug!("rdma: no RDMA here ({why}); peers off this node use tcp");
            (None, Err(format!("no RDMA device in this process ({why})")))
        }
        Err(e) => return Err(Error::usage(format!("RDMA transport settings: {e}"))),
    };
    Ok(RdmaProbe {
        cfg: Some(cfg),
        dev,
        ok: vec![false; size as usize],
        on_demand: vec![None; size as usize],
        usable,
    })
}

/// The PCI address (`0000:3b:00.0`) of the GPU this rank will use, for choosing the
/// RDMA device nearest it — only where the node has several RDMA devices
/// (`/sys/class/infiniband`) and a GPU: no CUDA call otherwise. The GPU is the one
/// `Universe::gpu_device` picks (`RANKWIRE_GPU_DEVICE`, else local rank modulo the
/// device count), with the local rank from the launcher (`RANKWIRE_LOCAL_RANK`, Slurm's
/// `SLURM_LOCALID`); without one, `None` (the library's device order).
fn gpu_for_nic_choice() -> Option<String> {
    let nics = std::fs::read_dir("/sys/class/infiniband").ok()?.count();
    if nics < 2 || !rankwire_gpu::available() {
        return None;
    }
    let local = [crate::bootstrap::env::LOCAL_RANK, "SLURM_LOCALID"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.trim().parse::<usize>().ok())?;
    let count = rankwire_gpu::device_count().ok().filter(|&n| n > 0)?;
    let forced = crate::settings::raw("RANKWIRE_GPU_DEVICE");
    let ordinal = match forced.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        Some(v) => v.parse::<usize>().ok().filter(|&d| d < count)?,
        None => local % count,
    };
    let pci = rankwire_gpu::pci_bus_id(ordinal as i32).ok()?;
    Some(format!("{pci}.0"))
}

impl RdmaProbe {
    /// The field this rank publishes in its node record: `1` with a device, `0`
    /// without, then `d` where it would make queue pairs on demand (the setting, and
    /// `tcp` allowed to carry the set-up: `tcp`), `i` at init; `-` where RDMA is not
    /// considered (excluded, or a job of one rank).
    pub(crate) fn publish(&self, tcp: bool) -> String {
        match &self.cfg {
            None => "-".to_string(),
            Some(cfg) => format!(
                "{}{}",
                if self.dev.is_some() { '1' } else { '0' },
                if cfg.on_demand && tcp { 'd' } else { 'i' }
            ),
        }
    }

    /// Record rank `r`'s published field ([`RdmaProbe::publish`]).
    pub(crate) fn learn(&mut self, r: u32, field: Option<&str>) {
        let field = field.unwrap_or("-").as_bytes();
        if let Some(slot) = self.ok.get_mut(r as usize) {
            *slot = self.cfg.is_some() && field.first() == Some(&b'1');
        }
        if let Some(slot) = self.on_demand.get_mut(r as usize) {
            *slot = match field.get(1) {
                Some(b'd') => Some(true),
                Some(b'i') => Some(false),
                _ => None,
            };
        }
    }

    /// Every rank with a device must make its queue pairs the same way: a rank on
    /// demand carries the set-up over TCP connections that a rank at init does not
    /// serve, so the pair would wait and fail late with a misleading error.
    ///
    /// # Errors
    /// [`Error::Usage`] naming the first two device ranks that differ and the settings
    /// behind it (`RANKWIRE_RDMA_CONNECT`, `RANKWIRE_TRANSPORTS`).
    pub(crate) fn check_connect_modes(&self) -> Result<()> {
        let mut with_dev = (0..self.ok.len()).filter(|&r| self.ok[r]);
        let Some(first) = with_dev.next() else {
            return Ok(());
        };
        let mode = |r: usize| self.on_demand[r];
        let Some(other) = with_dev.find(|&r| mode(r) != mode(first)) else {
            return Ok(());
        };
        let say = |m: Option<bool>| match m {
            Some(true) => "on demand",
            Some(false) => "at init",
            None => "not at all",
        };
        Err(Error::usage(format!(
            "ranks make RDMA queue pairs differently: rank {first} {}, rank {other} {}; \
             fix: give every rank the same RANKWIRE_RDMA_CONNECT (on-demand, the default, \
             or at-init) and the same RANKWIRE_TRANSPORTS (on demand needs tcp in it to \
             carry the set-up); rwrun passes its environment to every rank, under srun \
             export them before the step",
            say(mode(first)),
            say(mode(other))
        )))
    }
}

#[cfg(test)]
mod rdma_probe_tests {
    use super::*;

    #[test]
    fn shared_settings_are_published_in_one_form_and_must_match() {
        let f = shared_settings_field;
        assert_eq!(
            f(&["tcp", "shm"], None),
            "RANKWIRE_TRANSPORTS=shm,tcp RANKWIRE_TCP_CONNECT=on-demand"
        );
        assert_eq!(
            f(&["rdma", "tcp", "shm"], Some(" AT-INIT ")),
            "RANKWIRE_TRANSPORTS=shm,rdma,tcp RANKWIRE_TCP_CONNECT=at-init"
        );
        // Without TCP its connect mode does not matter.
        assert_eq!(f(&["shm"], Some("at-init")), "RANKWIRE_TRANSPORTS=shm");
        assert_eq!(f(&[], None), "RANKWIRE_TRANSPORTS=-");
        let a = f(&["shm", "tcp"], None);
        let b = f(&["tcp"], None);
        let c = f(&["shm", "tcp"], Some("at-init"));
        assert!(check_shared_settings(&[Some(&a), Some(&a)]).is_ok());
        assert!(check_shared_settings(&[]).is_ok());
        let e = check_shared_settings(&[Some(&a), Some(&a), Some(&b)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ranks differ in RANKWIRE_TRANSPORTS: rank 0 has shm,tcp, rank 2 has tcp"),
            "{e}"
        );
        let e = check_shared_settings(&[Some(&a), Some(&c)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "ranks differ in RANKWIRE_TCP_CONNECT: rank 0 has on-demand, rank 1 has at-init"
            ),
            "{e}"
        );
        let e = check_shared_settings(&[Some(&b), None])
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 1 has nothing published"), "{e}");
        // The collective settings ride in the same field (universe.rs appends them).
        let x = format!("{a} RANKWIRE_ALLREDUCE_ALGO=auto RANKWIRE_COLL_CHECK=0");
        let y = format!("{a} RANKWIRE_ALLREDUCE_ALGO=exchange RANKWIRE_COLL_CHECK=0");
        let e = check_shared_settings(&[Some(&x), Some(&x), Some(&y)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "ranks differ in RANKWIRE_ALLREDUCE_ALGO: rank 0 has auto, rank 2 has exchange"
            ),
            "{e}"
        );
    }

    fn probe(n: usize, on_demand: bool) -> RdmaProbe {
        let cfg = RdmaConfig {
            on_demand,
            ..RdmaConfig::from_env().expect("default settings")
        };
        RdmaProbe {
            cfg: Some(cfg),
            dev: None,
            ok: vec![false; n],
            on_demand: vec![None; n],
            usable: Ok(()),
        }
    }

    #[test]
    fn published_fields_round_trip_and_mixed_connect_modes_are_refused() {
        let me = probe(4, true);
        // Without a device of its own a rank publishes 0, and the mode it would use.
        assert_eq!(me.publish(true), "0d");
        assert_eq!(
            me.publish(false),
            "0i",
            "on demand needs tcp to carry the set-up"
        );
        assert_eq!(probe(4, false).publish(true), "0i");
        let mut p = probe(4, true);
        for (r, f) in ["1d", "1d", "0i", "-"].iter().enumerate() {
            p.learn(r as u32, Some(f));
        }
        assert_eq!(p.ok, vec![true, true, false, false]);
        assert_eq!(p.on_demand, vec![Some(true), Some(true), Some(false), None]);
        // A rank without a device takes no RDMA route: its setting does not matter.
        assert!(p.check_connect_modes().is_ok());
        p.learn(3, Some("1i"));
        let e = p.check_connect_modes().unwrap_err().to_string();
        assert!(
            e.contains("rank 0 on demand, rank 3 at init") && e.contains("RANKWIRE_RDMA_CONNECT"),
            "{e}"
        );
        // An old or garbled field counts as no device.
        p.learn(3, Some("x"));
        assert!(p.check_connect_modes().is_ok());
    }
}

/// The RDMA candidate's declared caps (with the configured eager limit; 0 where RDMA
/// is not configured: then it is not usable and the limit is never used).
pub(crate) fn rdma_caps(cfg: Option<&RdmaConfig>) -> Caps {
    RdmaTransport::declared_caps(cfg.map_or(0, |c| c.eager_limit_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_parsing() {
        assert_eq!(parse_allowed(None).unwrap(), vec!["shm", "rdma", "tcp"]);
        // Blank is unset (rwrun's settings check says so too), not "self only".
        assert_eq!(
            parse_allowed(Some(" ")).unwrap(),
            vec!["shm", "rdma", "tcp"]
        );
        assert_eq!(parse_allowed(Some("")).unwrap(), vec!["shm", "rdma", "tcp"]);
        assert_eq!(
            parse_allowed(Some("TCP, self,shm")).unwrap(),
            vec!["tcp", "shm"]
        );
        let e = parse_allowed(Some("shm,warp")).unwrap_err().to_string();
        assert!(e.contains("unknown transport \"warp\""), "{e}");
    }
}
