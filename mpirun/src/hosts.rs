//! `--host` / `--hostfile` parsing. Only this machine can be launched on for now: every
//! host must be a local name, and the slot counts only set the default rank count.

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

/// Check that every host is this machine and return the total slot count.
///
/// # Errors
/// `remote launch is not supported yet; ...` naming the first remote host.
pub(crate) fn check_local(hosts: &[HostSlots]) -> Result<u32, String> {
    let own = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let mut total: u32 = 0;
    for h in hosts {
        if !is_local(&h.name, &own) {
            return Err(format!(
                "remote launch is not supported yet; host {:?} is not this machine \
                 (local names: localhost, 127.0.0.1, ::1, {own}). Run rwrun on one node, \
                 or list only local hosts",
                h.name
            ));
        }
        total = total.saturating_add(h.slots);
    }
    Ok(total)
}

fn is_local(name: &str, own_hostname: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let own = own_hostname.to_ascii_lowercase();
    let short = |s: &str| s.split('.').next().unwrap_or("").to_string();
    matches!(
        name.as_str(),
        "localhost" | "localhost.localdomain" | "127.0.0.1" | "::1"
    ) || (!own.is_empty() && (name == own || (short(&name) == short(&own) && !name.contains(':'))))
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
        assert!(is_local("localhost", "node7.example.org"));
        assert!(is_local("LOCALHOST.", "node7"));
        assert!(is_local("node7", "node7.example.org"));
        assert!(is_local("node7.example.org", "node7"));
        assert!(!is_local("node8", "node7"));
        assert!(!is_local("10.0.0.1", "node7"));
        assert_eq!(
            check_local(&[hs("localhost", 2), hs("127.0.0.1", 1)]).unwrap(),
            3
        );
        let e = check_local(&[hs("localhost", 1), hs("far-away-host-x", 1)]).unwrap_err();
        assert!(
            e.starts_with("remote launch is not supported yet;") && e.contains("far-away-host-x")
        );
    }
}
