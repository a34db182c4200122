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
    fn cpu_lists_round_trip_and_bad_parts_are_skipped() {
        for cpus in [vec![], vec![0], vec![0, 1], vec![0, 2, 3, 4, 7, 9, 10]] {
            assert_eq!(parse_cpu_list(&cpu_list(&cpus)), cpus);
        }
        assert_eq!(cpu_list(&[0, 2, 3, 4, 7, 9, 10]), "0,2-4,7,9-10");
        assert_eq!(parse_cpu_list("1,x,3-2,4-5,-,7-99999999"), vec![1, 4, 5]);
        assert!(!affinity_cpus().is_empty(), "this process runs somewhere");
    }
}
