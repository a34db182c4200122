//! Configuration of the TCP transport and the choice of candidate addresses (B019).
//!
//! A rank publishes every address a peer might reach it on, best first; connectors try
//! them in order and the handshake rejects any that lead to the wrong process. The
//! default list leaves out interfaces that carry the same address on every node
//! (container and VM bridges) and link-local IPv6, and puts loopback last: loopback works
//! when all ranks share a host, and the handshake makes a wrong loopback hit harmless.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

/// Environment variable: comma-separated interface names to use (only these).
pub const ENV_IF: &str = "RANKWIRE_TCP_IF";
/// Environment variable: comma-separated interface names never to use.
pub const ENV_IF_EXCLUDE: &str = "RANKWIRE_TCP_IF_EXCLUDE";
/// Environment variable: `ipv4`, `ipv6` or `any`.
pub const ENV_FAMILY: &str = "RANKWIRE_TCP_FAMILY";
/// Environment variable: overall limit for setting up all connections (seconds, or with
/// an `s` / `ms` suffix).
pub const ENV_CONNECT_TIMEOUT: &str = "RANKWIRE_CONNECT_TIMEOUT";
/// Environment variable: `on-demand` (default) or `at-init` ([`ConnectMode`]).
pub const ENV_CONNECT: &str = "RANKWIRE_TCP_CONNECT";
/// Environment variable: limit for one candidate address (TCP connect plus handshake).
pub const ENV_ADDR_TIMEOUT: &str = "RANKWIRE_TCP_ADDR_TIMEOUT";
/// Environment variable: TCP congestion control of rankwire's connections: `auto`
/// (default), `system`, or an algorithm's name ([`Congestion`]).
pub const ENV_CONGESTION: &str = "RANKWIRE_TCP_CONGESTION";

/// Interfaces left out by default because every node may carry the same address on
/// them (container, VM and overlay bridges). A trailing `*` matches any suffix.
pub const DEFAULT_EXCLUDED_INTERFACES: &[&str] = &[
    "docker*", "virbr*", "br-*", "veth*", "cni*", "flannel*", "podman*", "lxcbr*", "lxdbr*",
    "vnet*", "cali*", "cilium*", "weave*", "kube-*", "tunl*", "vxlan*",
];

/// Which IP address family to publish and connect over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    /// IPv4 only.
    Ipv4,
    /// IPv6 only.
    Ipv6,
    /// Both (IPv4 candidates first).
    #[default]
    Any,
}

/// When the TCP transport makes its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectMode {
    /// At the first frame to a peer (either side may dial; simultaneous dials keep the
    /// lower rank's connection). A peer's address is read from the bootstrap then. A
    /// rank holds as many connections as peers it talks to.
    #[default]
    OnDemand,
    /// Every listed pair at init, before [`crate::TcpTransport::new`] returns (the higher
    /// rank dials).
    AtInit,
}

impl fmt::Display for ConnectMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectMode::OnDemand => "on-demand",
            ConnectMode::AtInit => "at-init",
        })
    }
}

/// The TCP congestion control algorithm of rankwire's connections (`TCP_CONGESTION`,
/// tcp(7)), set on each socket before it connects or listens (accepted sockets inherit
/// the listener's).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Congestion {
    /// Where the kernel's default is BBR (`bbr*`), `cubic` (or `reno`, which every
    /// process may set, where `cubic` is refused); otherwise the kernel's default.
    /// Why: BBR sizes its congestion window from the round-trip time it measured, a few
    /// microseconds on one host or a cluster's network, to about a megabyte in flight
    /// here (16 segments of 64 KiB on loopback); a larger message then waits for
    /// acknowledgements. Measured on loopback (2 ranks, ping-pong, 300 iterations per size):
    /// 1 MiB 179 µs with BBR, 108–122 µs with cubic or reno; 4 MiB 757–797 against
    /// 481–590 µs (`benches/results/2026-12-07s54_tcp-congestion/`).
    #[default]
    Auto,
    /// The kernel's default (`net.ipv4.tcp_congestion_control`), untouched.
    System,
    /// This algorithm (one of `net.ipv4.tcp_available_congestion_control`; a process
    /// without `CAP_NET_ADMIN` may set only those in
    /// `net.ipv4.tcp_allowed_congestion_control`: where the kernel refuses, the
    /// connection keeps the default and a warning says so).
    Named(String),
}

impl fmt::Display for Congestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Congestion::Auto => f.write_str("auto"),
            Congestion::System => f.write_str("system"),
            Congestion::Named(n) => f.write_str(n),
        }
    }
}

/// Configuration of the TCP transport. [`TcpConfig::default`] is the documented default;
/// [`TcpConfig::from_env`] applies the `RANKWIRE_*` environment variables on top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// Use only these interfaces (names; a trailing `*` matches any suffix), loopback
    /// included only if listed (e.g. `lo`). `None`: every up interface except loopback
    /// (appended last) and [`DEFAULT_EXCLUDED_INTERFACES`]. Env: `RANKWIRE_TCP_IF`.
    pub include: Option<Vec<String>>,
    /// Never use these interfaces (same syntax), in addition to the default exclusions
    /// (which apply only when `include` is `None`). Env: `RANKWIRE_TCP_IF_EXCLUDE`.
    pub exclude: Vec<String>,
    /// Address family. Env: `RANKWIRE_TCP_FAMILY`. Default [`Family::Any`].
    pub family: Family,
    /// When connections are made. Env: `RANKWIRE_TCP_CONNECT`. Default
    /// [`ConnectMode::OnDemand`].
    pub connect: ConnectMode,
    /// Limit for one candidate address: TCP connect plus hello/ack handshake. Default
    /// 5 s. Env: `RANKWIRE_TCP_ADDR_TIMEOUT`.
    pub addr_timeout: Duration,
    /// Overall limit for setting up every connection of this rank at init (connecting
    /// and accepting), or, on demand, for one peer's connection from the first frame to
    /// it. Default 60 s. Env: `RANKWIRE_CONNECT_TIMEOUT`.
    pub connect_timeout: Duration,
    /// `SO_SNDBUF` / `SO_RCVBUF` request in bytes, applied only where the kernel's
    /// `net.core.{w,r}mem_max` allows the full size (a smaller fixed buffer would turn
    /// off Linux's autotuning and be slower). `None`: leave the kernel defaults.
    /// Default 4 MiB.
    pub socket_buffer_bytes: Option<usize>,
    /// Congestion control of the connections. Env: `RANKWIRE_TCP_CONGESTION`. Default
    /// [`Congestion::Auto`].
    pub congestion: Congestion,
    /// [`crate::Transport::send`] answers `Busy` once a peer's out-queue holds at least
    /// this many bytes. Default 8 MiB.
    pub send_queue_high_water_bytes: usize,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            include: None,
            exclude: Vec::new(),
            family: Family::Any,
            connect: ConnectMode::OnDemand,
            addr_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(60),
            socket_buffer_bytes: Some(4 << 20),
            congestion: Congestion::Auto,
            send_queue_high_water_bytes: 8 << 20,
        }
    }
}

pub use crate::ConfigError;

impl TcpConfig {
    /// The default configuration with the `RANKWIRE_TCP_IF`, `RANKWIRE_TCP_IF_EXCLUDE`,
    /// `RANKWIRE_TCP_FAMILY`, `RANKWIRE_TCP_CONNECT`, `RANKWIRE_CONNECT_TIMEOUT`,
    /// `RANKWIRE_TCP_ADDR_TIMEOUT` and `RANKWIRE_TCP_CONGESTION` environment variables
    /// applied. Unset or empty variables keep the default.
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable whose value cannot be parsed, among them a
    /// congestion control that is not in `net.ipv4.tcp_available_congestion_control`.
    pub fn from_env() -> Result<Self, ConfigError> {
        crate::settings::check_names(&[
            ENV_IF,
            ENV_IF_EXCLUDE,
            ENV_FAMILY,
            ENV_CONNECT,
            ENV_CONNECT_TIMEOUT,
            ENV_ADDR_TIMEOUT,
            ENV_CONGESTION,
        ])?;
        Self::from_lookup(crate::settings::raw)
    }

    /// Like [`TcpConfig::from_env`], reading variables through `lookup`.
    pub(crate) fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = TcpConfig::default();
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        if let Some(v) = get(ENV_IF) {
            cfg.include = Some(split_list(&v));
        }
        if let Some(v) = get(ENV_IF_EXCLUDE) {
            cfg.exclude = split_list(&v);
        }
        if let Some(v) = get(ENV_FAMILY) {
            cfg.family = match v.trim().to_ascii_lowercase().as_str() {
                "ipv4" | "inet" | "4" => Family::Ipv4,
                "ipv6" | "inet6" | "6" => Family::Ipv6,
                "any" => Family::Any,
                _ => {
                    return Err(ConfigError {
                        var: ENV_FAMILY,
                        value: v,
                        expected: "ipv4, ipv6 or any",
                    });
                }
            };
        }
        if let Some(v) = get(ENV_CONNECT) {
            cfg.connect = match v.trim().to_ascii_lowercase().as_str() {
                "on-demand" => ConnectMode::OnDemand,
                "at-init" => ConnectMode::AtInit,
                _ => {
                    return Err(ConfigError {
                        var: ENV_CONNECT,
                        value: v,
                        expected: "on-demand or at-init",
                    });
                }
            };
        }
        if let Some(v) = get(ENV_CONGESTION) {
            cfg.congestion = parse_congestion(&v, available_congestion().as_deref())?;
        }
        for (var, slot) in [
            (ENV_CONNECT_TIMEOUT, &mut cfg.connect_timeout),
            (ENV_ADDR_TIMEOUT, &mut cfg.addr_timeout),
        ] {
            if let Some(v) = get(var) {
                *slot = parse_timeout(var, v)?;
            }
        }
        Ok(cfg)
    }

    /// A one-line description of the interface selection, for error messages.
    pub(crate) fn selection_hint(&self) -> String {
        let inc = match &self.include {
            Some(v) => format!("{ENV_IF}={}", v.join(",")),
            None => format!("{ENV_IF} unset"),
        };
        let exc = if self.exclude.is_empty() {
            format!("{ENV_IF_EXCLUDE} unset")
        } else {
            format!("{ENV_IF_EXCLUDE}={}", self.exclude.join(","))
        };
        format!(
            "interface selection: {inc}, {exc}, {ENV_FAMILY}={}; set {ENV_IF} to the \
             interface(s) that connect the nodes (e.g. {ENV_IF}=eth0, or {ENV_IF}=lo on one \
             host) or {ENV_IF_EXCLUDE} to skip one; {ENV_CONNECT_TIMEOUT} (overall) and \
             {ENV_ADDR_TIMEOUT} (per address) bound the wait",
            self.family
        )
    }
}

/// `net.ipv4.tcp_available_congestion_control` (the algorithms this kernel has), `None`
/// where unreadable.
fn available_congestion() -> Option<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").ok()
}

/// A `RANKWIRE_TCP_CONGESTION` value: `auto`, `system`, or a name, which must be one of
/// `available` (a space-separated list) where that is known.
fn parse_congestion(v: &str, available: Option<&str>) -> Result<Congestion, ConfigError> {
    let name = v.trim().to_ascii_lowercase();
    match name.as_str() {
        "auto" => return Ok(Congestion::Auto),
        "system" => return Ok(Congestion::System),
        _ => {}
    }
    let valid = crate::settings::is_algorithm_name(&name);
    let known = available.is_none_or(|a| a.split_whitespace().any(|x| x == name));
    if !valid || !known {
        return Err(ConfigError {
            var: ENV_CONGESTION,
            value: v.to_string(),
            expected: "auto, system, or a congestion control this kernel has \
                       (net.ipv4.tcp_available_congestion_control, e.g. cubic or reno)",
        });
    }
    Ok(Congestion::Named(name))
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
            Family::Any => "any",
        })
    }
}

/// One address of one interface, as `getifaddrs` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IfAddr {
    pub(crate) name: String,
    pub(crate) ip: IpAddr,
    /// `IFF_UP && IFF_RUNNING`.
    pub(crate) up: bool,
    /// `IFF_LOOPBACK`.
    pub(crate) loopback: bool,
}

/// Every IPv4/IPv6 address of every interface (`getifaddrs(3)`).
pub(crate) fn list_interfaces() -> Result<Vec<IfAddr>, nix::Error> {
    use nix::net::if_::InterfaceFlags;
    let mut out = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs()? {
        let Some(addr) = ifa.address else { continue };
        let ip = if let Some(v4) = addr.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        out.push(IfAddr {
            name: ifa.interface_name,
            ip,
            up: ifa.flags.contains(InterfaceFlags::IFF_UP)
                && ifa.flags.contains(InterfaceFlags::IFF_RUNNING),
            loopback: ifa.flags.contains(InterfaceFlags::IFF_LOOPBACK),
        });
    }
    Ok(out)
}

/// The candidate addresses to publish, best first (see the module doc for the rules).
pub(crate) fn select_addrs(ifaces: &[IfAddr], cfg: &TcpConfig) -> Vec<IpAddr> {
    let mut main = Vec::new();
    let mut last = Vec::new();
    for ifa in ifaces {
        let ip = ifa.ip;
        if !ifa.up || ip.is_unspecified() || ip.is_multicast() {
            continue;
        }
        match (cfg.family, ip) {
            (Family::Ipv4, IpAddr::V6(_)) | (Family::Ipv6, IpAddr::V4(_)) => continue,
            _ => {}
        }
        // Link-local IPv6 needs a scope id that only makes sense on this host.
        if let IpAddr::V6(v6) = ip
            && v6.segments()[0] & 0xffc0 == 0xfe80
        {
            continue;
        }
        if cfg.exclude.iter().any(|p| name_matches(p, &ifa.name)) {
            continue;
        }
        let loopback = ifa.loopback || ip.is_loopback();
        match &cfg.include {
            Some(list) => {
                if !list.iter().any(|p| name_matches(p, &ifa.name)) {
                    continue;
                }
            }
            None => {
                if !loopback
                    && DEFAULT_EXCLUDED_INTERFACES
                        .iter()
                        .any(|p| name_matches(p, &ifa.name))
                {
                    continue;
                }
            }
        }
        if loopback {
            last.push(ip);
        } else {
            main.push(ip);
        }
    }
    // IPv4 first within each group (stable), then dedup keeping the first occurrence.
    main.sort_by_key(|ip| ip.is_ipv6());
    last.sort_by_key(|ip| ip.is_ipv6());
    let mut seen = HashSet::new();
    main.into_iter()
        .chain(last)
        .filter(|ip| seen.insert(*ip))
        .collect()
}

/// `pattern` is an interface name, or a prefix followed by `*`.
fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

fn split_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// `60`, `2.5`, `60s`, `500ms` → a positive duration.
use crate::settings::parse_duration;

/// A timeout setting's value `v` of variable `var` (`RANKWIRE_CONNECT_TIMEOUT`,
/// `RANKWIRE_TCP_ADDR_TIMEOUT`; the RDMA transport reads the first too).
///
/// # Errors
/// [`ConfigError`] naming `var` when `v` is not a positive duration.
pub(crate) fn parse_timeout(var: &'static str, v: String) -> Result<Duration, ConfigError> {
    parse_duration(&v).ok_or(ConfigError {
        var,
        value: v,
        expected: "a positive number of seconds, e.g. 60, 2.5, 60s or 500ms",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn congestion_values_are_parsed_and_unknown_names_refused() {
        let have = Some("reno bbr cubic");
        assert_eq!(parse_congestion(" Auto ", have), Ok(Congestion::Auto));
        assert_eq!(parse_congestion("system", have), Ok(Congestion::System));
        assert_eq!(
            parse_congestion("RENO", have),
            Ok(Congestion::Named("reno".into()))
        );
        for bad in ["vegas", "", "cu bic", "cubic;reno", "a_name_far_too_long"] {
            let e = parse_congestion(bad, have).unwrap_err();
            assert_eq!(e.var, ENV_CONGESTION, "{bad:?}");
            assert!(e.expected.contains("tcp_available_congestion_control"));
        }
        // Where the kernel's list cannot be read, a well-formed name is taken (the
        // kernel refuses it later, with a warning).
        assert_eq!(
            parse_congestion("vegas", None),
            Ok(Congestion::Named("vegas".into()))
        );
        assert!(parse_congestion("cu bic", None).is_err());
        let lookup = |k: &str| (k == ENV_CONGESTION).then(|| "system".to_string());
        assert_eq!(
            TcpConfig::from_lookup(lookup).unwrap().congestion,
            Congestion::System
        );
        assert_eq!(TcpConfig::default().congestion, Congestion::Auto);
    }

    fn ifa(name: &str, ip: &str, loopback: bool) -> IfAddr {
        IfAddr {
            name: name.into(),
            ip: ip.parse().unwrap(),
            up: true,
            loopback,
        }
    }

    fn machine() -> Vec<IfAddr> {
        vec![
            ifa("lo", "127.0.0.1", true),
            ifa("lo", "::1", true),
            ifa("eth0", "fd00::2", false),
            ifa("eth0", "fe80::1", false),
            ifa("eth0", "192.0.2.2", false),
            ifa("docker0", "172.17.0.1", false),
            ifa("virbr0", "192.168.122.1", false),
            ifa("br-1234", "172.18.0.1", false),
            ifa("veth99", "10.9.9.9", false),
            IfAddr {
                up: false,
                ..ifa("eth1", "10.1.1.1", false)
            },
        ]
    }

    fn ips(v: &[&str]) -> Vec<IpAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn default_skips_bridges_link_local_and_down_and_puts_loopback_last() {
        let got = select_addrs(&machine(), &TcpConfig::default());
        assert_eq!(got, ips(&["192.0.2.2", "fd00::2", "127.0.0.1", "::1"]));
    }

    #[test]
    fn include_and_family() {
        let mut cfg = TcpConfig {
            include: Some(vec!["lo".into()]),
            family: Family::Ipv4,
            ..TcpConfig::default()
        };
        assert_eq!(select_addrs(&machine(), &cfg), ips(&["127.0.0.1"]));
        cfg.family = Family::Ipv6;
        assert_eq!(select_addrs(&machine(), &cfg), ips(&["::1"]));
        // An explicit include overrides the default bridge exclusions.
        cfg.include = Some(vec!["docker*".into()]);
        cfg.family = Family::Any;
        assert_eq!(select_addrs(&machine(), &cfg), ips(&["172.17.0.1"]));
    }

    #[test]
    fn exclude_adds_to_defaults() {
        let cfg = TcpConfig {
            exclude: vec!["eth0".into(), "lo".into()],
            ..TcpConfig::default()
        };
        assert!(select_addrs(&machine(), &cfg).is_empty());
    }

    #[test]
    fn from_env_parses_and_rejects() {
        let env: HashMap<&str, &str> = [
            (ENV_IF, "lo, eth0"),
            (ENV_FAMILY, "IPv6"),
            (ENV_CONNECT_TIMEOUT, "2.5"),
            (ENV_ADDR_TIMEOUT, "300ms"),
        ]
        .into();
        let cfg = TcpConfig::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(
            cfg.include,
            Some(vec!["lo".to_string(), "eth0".to_string()])
        );
        assert_eq!(cfg.family, Family::Ipv6);
        assert_eq!(cfg.connect_timeout, Duration::from_millis(2500));
        assert_eq!(cfg.addr_timeout, Duration::from_millis(300));

        let at_init = TcpConfig::from_lookup(|k| (k == ENV_CONNECT).then(|| "at-init".into()));
        assert_eq!(at_init.unwrap().connect, ConnectMode::AtInit);
        assert_eq!(TcpConfig::default().connect, ConnectMode::OnDemand);
        let bad = TcpConfig::from_lookup(|k| (k == ENV_CONNECT).then(|| "lazy".to_string()));
        assert_eq!(bad.unwrap_err().var, ENV_CONNECT);
        let bad = TcpConfig::from_lookup(|k| (k == ENV_FAMILY).then(|| "ipx".to_string()));
        assert_eq!(bad.unwrap_err().var, ENV_FAMILY);
        let bad = TcpConfig::from_lookup(|k| (k == ENV_CONNECT_TIMEOUT).then(|| "-1".into()));
        assert_eq!(bad.unwrap_err().var, ENV_CONNECT_TIMEOUT);
        assert_eq!(
            TcpConfig::from_lookup(|_| None).unwrap(),
            TcpConfig::default()
        );
    }
}
