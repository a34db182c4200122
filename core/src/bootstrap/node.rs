//! What this process learns about its node: identity (for shared memory and loopback),
//! the CPUs it may run on, and on/off switches from the environment.

/// An on/off environment switch: `1`/`on`/`true`/`yes` → on, `0`/`off`/`false`/`no` →
/// off (any case), unset or empty → `None`; anything else is refused at init.
pub(crate) fn env_switch(name: &str) -> Option<bool> {
    // Checked at init (`crate::settings`).
    crate::settings::switch_or_unset(name)
}

/// The CPUs this process may run on (`sched_getaffinity(2)`), ascending; empty if
/// unknown.
pub(crate) fn affinity_cpus() -> Vec<u32> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .map(|c| c as u32)
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// `cpus` (ascending) as a list of ranges: `0-3,8,10-11`.
pub(crate) fn cpu_list(cpus: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if i == j {
            out.push_str(&cpus[i].to_string());
        } else {
            out.push_str(&format!("{}-{}", cpus[i], cpus[j]));
        }
        i = j + 1;
    }
    out
}

/// The CPUs of a list written by [`cpu_list`]; malformed parts are skipped (a peer's
/// list only tunes the progress policy), and ranges are capped at 2^16 CPUs.
pub(crate) fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>())
            && a <= b
            && b < 1 << 16
        {
            v.extend(a..=b);
        }
    }
    v
}

/// The most ranks per CPU on any node of the job: `records` holds one `(node identity,
/// CPU list as cpu_list writes it)` per world rank, as every rank published them at
/// start-up, so every rank computes the same value (collectives pick their algorithms
/// by it, and all ranks must pick alike). A node's CPUs are the union of its ranks'
/// lists; a node whose ranks published none (affinity unknown) is left out, while on a
/// node where only some did, all its ranks count against the CPUs that were
/// published; 0.0 when no node is known. Above 1.0 some node is oversubscribed.
pub(crate) fn max_ranks_per_cpu<'a>(records: impl IntoIterator<Item = (&'a str, &'a str)>) -> f64 {
    let mut nodes: std::collections::HashMap<&str, (usize, std::collections::BTreeSet<u32>)> =
        std::collections::HashMap::new();
    for (id, cpus) in records {
        let n = nodes.entry(id).or_default();
        n.0 += 1;
        n.1.extend(parse_cpu_list(cpus));
    }
    nodes
        .values()
        .filter(|(_, cpus)| !cpus.is_empty())
        .map(|(ranks, cpus)| *ranks as f64 / cpus.len() as f64)
        .fold(0.0, f64::max)
}

/// Node identity: boot id + hostname + network namespace. Two ranks with the same
/// string share a kernel and a network stack, hence shared memory and loopback.
pub(crate) fn node_id() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{host}/{boot}/{netns}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_per_cpu_is_judged_per_node_from_the_published_records() {
        // Two nodes of 2 CPUs: 2 ranks each fit, a third on node a does not.
        let fit = [("a", "0-1"), ("a", "0-1"), ("b", "0,1"), ("b", "0-1")];
        assert_eq!(max_ranks_per_cpu(fit), 1.0);
        let over = [("a", "0-1"), ("a", "0-1"), ("a", "0-1"), ("b", "0-1")];
        assert_eq!(max_ranks_per_cpu(over), 1.5);
        // Ranks bound to one CPU each: the union counts (2 ranks on CPUs 0 and 1 fit).
        assert_eq!(max_ranks_per_cpu([("a", "0"), ("a", "1")]), 1.0);
        assert_eq!(max_ranks_per_cpu([("a", "0"), ("a", "0")]), 2.0);
        // Unknown affinity is left out.
        assert_eq!(max_ranks_per_cpu([("a", ""), ("a", ""), ("a", "")]), 0.0);
        assert_eq!(max_ranks_per_cpu([("a", ""), ("a", ""), ("b", "0")]), 1.0);
    }

    #[test]
    fn cpu_lists_round_trip_and_bad_parts_are_skipped() {
        for cpus in [vec![], vec![0], vec![0, 1], vec![0, 2, 3, 4, 7, 9, 10]] {
            assert_eq!(parse_cpu_list(&cpu_list(&cpus)), cpus);
        }
        assert_eq!(cpu_list(&[0, 2, 3, 4, 7, 9, 10]), "0,2-4,7,9-10");
        assert_eq!(parse_cpu_list("1,x,3-2,4-5,-,7-99999999"), vec![1, 4, 5]);
        assert!(!affinity_cpus().is_empty(), "this process runs somewhere");
    }
}

/// Raise this process's soft `RLIMIT_NOFILE` to its hard limit (as `rwrun` does for
/// itself): a rank keeps one descriptor per peer (a pidfd per same-node peer, a socket
/// per TCP peer), so a job of a few thousand ranks outgrows the usual soft limit of 1024.
/// Returns the (soft, hard) limits in force afterwards; `None` if they cannot be read.
pub(crate) fn raise_nofile() -> Option<(u64, u64)> {
    // SAFETY: rlimit is plain data, filled by getrlimit.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: valid pointer; raising the soft limit up to the hard one needs no
        // privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::debug!(
                "open-file limit raised from {} to {}",
                lim.rlim_cur,
                lim.rlim_max
            );
            lim = raised;
        } else {
            tracing::debug!(
                "cannot raise the open-file limit: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Some((lim.rlim_cur as u64, lim.rlim_max as u64))
}

/// Descriptors this process has open now (entries of `/proc/self/fd`; 0 if unreadable).
pub(crate) fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// Descriptors a rank of a job of `size` ranks needs beyond the `open` it has: one per
/// peer (pidfd or socket), the TCP listener and a margin of 16 for the program.
pub(crate) fn nofile_needed(size: u32, open: u64) -> u64 {
    open + u64::from(size.saturating_sub(1)) + 1 + 16
}

/// `Err` with the message a user needs when the soft limit `soft` (hard `hard`, after
/// [`raise_nofile`]) is below `need` descriptors for a job of `size` ranks.
pub(crate) fn check_nofile(size: u32, need: u64, soft: u64, hard: u64) -> Result<(), String> {
    if soft >= need {
        return Ok(());
    }
    Err(format!(
        "too few file descriptors: RLIMIT_NOFILE is {soft} (hard limit {hard}), but a rank \
         of a job of {size} ranks needs about {need} (one per peer, plus those open now); \
         fix: raise the hard limit: `ulimit -Hn {need}` as root, LimitNOFILE= for systemd, \
         `nofile` in /etc/security/limits.conf, docker --ulimit nofile={need}:{need}"
    ))
}

#[cfg(test)]
mod nofile_tests {
    use super::*;

    #[test]
    fn the_limit_check_names_the_limit_the_need_and_the_fix() {
        assert_eq!(nofile_needed(2000, 23), 23 + 1999 + 17);
        assert!(check_nofile(2000, 2039, 4096, 4096).is_ok());
        assert!(check_nofile(2000, 2039, 2039, 2039).is_ok());
        let e = check_nofile(2000, 2039, 1024, 1024).unwrap_err();
        for want in [
            "RLIMIT_NOFILE is 1024",
            "hard limit 1024",
            "2000 ranks",
            "about 2039",
            "ulimit -Hn 2039",
        ] {
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn raising_reaches_the_hard_limit() {
        let (soft, hard) = raise_nofile().expect("getrlimit");
        assert_eq!(soft, hard);
        assert!(open_fds() >= 3);
    }
}
