//! `--host` / `--hostfile` parsing, and which hosts are this machine: a local name
//! (`localhost`, this machine's host name) or a local address (any loopback address, or
//! an address assigned to one of this machine's interfaces, from `getifaddrs`). Ranks
//! on local hosts are forked directly; others are started through the launch agent
//! ([`crate::placement`]). Also the addresses rwrun advertises to ranks on other nodes
//! ([`advertised_addresses`]).

use std::net::IpAddr;

/// One host entry and its slot count (1 when not given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostSlots {
    /// Host name or address as written.
    pub(crate) name: String,
    /// Number of ranks the host takes.
    pub(crate) slots: u32,
}

/// Parse a `--host` list: `a,b:2,[::1]:3`.
///
/// # Errors
/// A message quoting the bad entry (empty name, slot count not a positive integer).
pub(crate) fn parse_host_list(list: &str) -> Result<Vec<HostSlots>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|entry| split_slots(entry).map_err(|e| format!("--host {list:?}: {e}")))
        .collect()
}

/// Parse a hostfile: one host per line, `host`, `host:N` or `host slots=N`
/// (`max_slots=M` is accepted and ignored), `#` starts a comment.
///
/// # Errors
/// A message naming the file, the line number and the bad token.
pub(crate) fn parse_hostfile(text: &str, path: &str) -> Result<Vec<HostSlots>, String> {
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |e: String| format!("hostfile {path}, line {}: {e}", i + 1);
        let mut tokens = line.split_whitespace();
        let Some(first) = tokens.next() else { continue };
        let mut host = split_slots(first).map_err(at)?;
        for tok in tokens {
            match tok.split_once('=') {
                Some(("slots", n)) => host.slots = parse_slots(n).map_err(at)?,
                Some(("max_slots" | "max-slots", _)) => {}
                _ => return Err(at(format!("unrecognized token {tok:?} (expected slots=N)"))),
            }
        }
        hosts.push(host);
    }
    if hosts.is_empty() {
        return Err(format!("hostfile {path} lists no hosts"));
    }
    Ok(hosts)
}

/// Each host with its slot count and whether it is this machine.
pub(crate) fn classify(hosts: &[HostSlots]) -> Vec<(String, u32, bool)> {
    let own = own_hostname();
    let addrs = interface_addresses();
    hosts
        .iter()
        .map(|h| (h.name.clone(), h.slots, is_local(&h.name, &own, &addrs)))
        .collect()
}

/// Environment variable: comma-separated host names or addresses under which ranks on
/// other nodes reach rwrun's bootstrap server (default: every address of this machine's
/// up interfaces).
pub(crate) const BOOTSTRAP_HOST_ENV: &str = "RANKWIRE_BOOTSTRAP_HOST";

/// The `RANKWIRE_BOOTSTRAP_ADDR` value for ranks on other nodes: `host:port` for every
/// host in [`BOOTSTRAP_HOST_ENV`], else every non-loopback address of this machine's
/// interfaces (IPv4 first, IPv6 link-local left out), then 127.0.0.1 (for ranks on this
/// node), comma-separated. Ranks try them in order; the job secret rejects a wrong
/// server.
pub(crate) fn advertised_addresses(port: u16) -> String {
    if let Some(list) = rankwire::settings::raw(BOOTSTRAP_HOST_ENV)
        && !list.trim().is_empty()
    {
        return list
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|h| match h.parse::<IpAddr>() {
                Ok(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
                _ => format!("{h}:{port}"),
            })
            .collect::<Vec<_>>()
            .join(",");
    }
    let mut addrs: Vec<IpAddr> = interface_addresses()
        .into_iter()
        .filter(|a| match a {
            IpAddr::V4(v4) => !v4.is_loopback() && !v4.is_unspecified(),
            IpAddr::V6(v6) => {
                !v6.is_loopback() && !v6.is_unspecified() && !v6.is_unicast_link_local()
            }
        })
        .collect();
    addrs.sort_by_key(|a| a.is_ipv6());
    addrs.dedup();
    addrs.push(IpAddr::from([127, 0, 0, 1]));
    addrs
        .iter()
        .map(|a| match a {
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
            v4 => format!("{v4}:{port}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn own_hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

/// Every address assigned to a network interface of this machine (empty if
/// `getifaddrs` fails).
fn interface_addresses() -> Vec<IpAddr> {
    let Ok(ifaddrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    ifaddrs
        .filter_map(|ifa| {
            let a = ifa.address?;
            if let Some(v4) = a.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .collect()
}

fn is_local(name: &str, own_hostname: &str, own_addrs: &[IpAddr]) -> bool {
    // An address, possibly with an IPv6 zone (`fe80::1%eth0`).
    if let Ok(ip) = name.split('%').next().unwrap_or("").parse::<IpAddr>() {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        return ip.is_loopback() || own_addrs.contains(&ip);
    }
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let own = own_hostname.to_ascii_lowercase();
    let short = |s: &str| s.split('.').next().unwrap_or("").to_string();
    matches!(name.as_str(), "localhost" | "localhost.localdomain")
        || (!own.is_empty() && (name == own || short(&name) == short(&own)))
}

// `host`, `host:N`, `[v6addr]:N`; a bare IPv6 address has no slot count.
fn split_slots(entry: &str) -> Result<HostSlots, String> {
    let (name, slots) = if let Some(rest) = entry.strip_prefix('[') {
        match rest.split_once(']') {
            Some((addr, "")) => (addr, None),
            Some((addr, tail)) => match tail.strip_prefix(':') {
                Some(n) => (addr, Some(n)),
                None => return Err(format!("malformed host {entry:?}")),
            },
            None => return Err(format!("malformed host {entry:?} (missing ']')")),
        }
    } else {
        match entry.rsplit_once(':') {
            Some((h, n)) if !h.contains(':') => (h, Some(n)),
            _ => (entry, None),
        }
    };
    if name.is_empty() {
        return Err(format!("empty host name in {entry:?}"));
    }
    let slots = match slots {
        Some(n) => parse_slots(n)?,
        None => 1,
    };
    Ok(HostSlots {
        name: name.to_string(),
        slots,
    })
}

fn parse_slots(n: &str) -> Result<u32, String> {
    match n.parse::<u32>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(format!("slot count {n:?} is not a positive integer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hs(name: &str, slots: u32) -> HostSlots {
        HostSlots {
            name: name.into(),
            slots,
        }
    }

    #[test]
    fn host_lists() {
        assert_eq!(
            parse_host_list("localhost:2, 127.0.0.1,[::1]:3,::1").unwrap(),
            vec![
                hs("localhost", 2),
                hs("127.0.0.1", 1),
                hs("::1", 3),
                hs("::1", 1)
            ]
        );
        assert!(parse_host_list("a:0").unwrap_err().contains("\"0\""));
        assert!(parse_host_list("a:x").is_err());
        assert!(parse_host_list(":2").is_err());
        assert!(parse_host_list("[::1").is_err());
    }

    #[test]
    fn hostfiles() {
        let text = "# nodes\nlocalhost slots=2 max_slots=4\n\n127.0.0.1:3 # trailing\nlocalhost\n";
        assert_eq!(
            parse_hostfile(text, "f").unwrap(),
            vec![hs("localhost", 2), hs("127.0.0.1", 3), hs("localhost", 1)]
        );
        let e = parse_hostfile("localhost cpus=2\n", "f").unwrap_err();
        assert!(e.contains("line 1") && e.contains("cpus=2"), "{e}");
        assert!(parse_hostfile("# nothing\n", "f").is_err());
    }

    #[test]
    fn locality() {
        let none: &[IpAddr] = &[];
        assert!(is_local("localhost", "node7.example.org", none));
        assert!(is_local("LOCALHOST.", "node7", none));
        assert!(is_local("node7", "node7.example.org", none));
        assert!(is_local("node7.example.org", "node7", none));
        assert!(!is_local("node8", "node7", none));
        assert!(!is_local("10.0.0.1", "node7", none));
        for lo in ["127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1"] {
            assert!(is_local(lo, "node7", none), "{lo}");
        }
        let mine: &[IpAddr] = &["10.0.0.1".parse().unwrap(), "fe80::1".parse().unwrap()];
        assert!(is_local("10.0.0.1", "node7", mine));
        assert!(is_local("fe80::1%eth0", "node7", mine));
        assert!(!is_local("10.0.0.2", "node7", mine));
        assert_eq!(
            classify(&[hs("localhost", 2), hs("far-away-host-x", 1)]),
            vec![
                ("localhost".to_string(), 2, true),
                ("far-away-host-x".to_string(), 1, false)
            ]
        );
    }

    #[test]
    fn advertised_addresses_end_with_loopback() {
        let a = advertised_addresses(4242);
        assert!(a.ends_with("127.0.0.1:4242"), "{a}");
        for one in a.split(',') {
            assert!(one.parse::<std::net::SocketAddr>().is_ok(), "{one} in {a}");
        }
    }

    #[test]
    fn own_interface_addresses_are_local() {
        let addrs = interface_addresses();
        assert!(addrs.iter().any(IpAddr::is_loopback), "{addrs:?}");
        for a in addrs {
            let name = match a {
                IpAddr::V6(v6) => format!("[{v6}]:2"),
                v4 => format!("{v4}:2"),
            };
            let hosts = parse_host_list(&name).unwrap();
            assert!(classify(&hosts).iter().all(|h| h.2 && h.1 == 2), "{name}");
        }
    }
}
