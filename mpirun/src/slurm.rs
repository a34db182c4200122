//! `rwrun` inside a Slurm allocation: read the allocation from the environment, place
//! ranks on its nodes, and start each rank with `srun` as a one-task step on its node.
//!
//! # When
//! `SLURM_JOB_ID` set and `SLURM_STEP_ID` not set: a batch script or an `salloc` shell,
//! where `srun` can start steps (inside a step, rwrun would start ranks locally). No
//! `--host`/`--hostfile` given. `RANKWIRE_SLURM_LAUNCH=0` turns it off.
//!
//! # Placement
//! `SLURM_JOB_NODELIST` (hostlist syntax, [`parse_hostlist`]) and
//! `SLURM_TASKS_PER_NODE` (`2(x3),1`, [`parse_tasks_per_node`]) give each node's task
//! slots. `-n` defaults to `SLURM_NTASKS` (else the slot total). Ranks fill the nodes in
//! order, as many per node as it has slots (Slurm's block distribution). More ranks
//! than slots is an error unless `--oversubscribe`, which then deals the rest round
//! robin.
//!
//! # Launch
//! Rank r runs as `srun --nodes=1 --ntasks=1 --nodelist=<node> --overlap --mpi=none
//! --quiet --quit-on-interrupt --job-name=<rwrun job> PROGRAM ARGS` with the
//! `RANKWIRE_*` variables in its environment (srun exports rwrun's environment): one
//! step per rank, so rwrun keeps a process, an exit status and output pipes per rank, and
//! its supervision (exit-status rules, abort, signal forwarding to srun, which passes
//! them on, output tagging) stays as without Slurm. `--overlap` lets the one-task steps
//! share the allocation's CPUs, so no step waits for another. Ranks on other nodes
//! reach rwrun's bootstrap server through this node's address (see
//! [`crate::hosts::advertised_addresses`]).

/// Expand a Slurm hostlist: `n`, `node[1-3]`, `node[01-03,07]` (zero padding kept),
/// `rack[1-2]-n[1-2]` (several ranges: every combination, leftmost varying slowest),
/// `n,n[1-2],x-y` (comma-separated at the top level). Names may contain letters,
/// digits, `-`, `_` and `.`, and need not end in a digit.
///
/// # Errors
/// A message quoting the bad token (unbalanced brackets, a range that is empty, not
/// numeric or descending, an empty name, or more than 1,000,000 names).
pub(crate) fn parse_hostlist(list: &str) -> Result<Vec<String>, String> {
    const MAX: usize = 1_000_000;
    let mut out = Vec::new();
    for item in split_top_level(list).map_err(|e| format!("hostlist {list:?}: {e}"))? {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("hostlist {list:?}: empty host name"));
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('[') {
                let end = after
                    .find(']')
                    .ok_or_else(|| format!("hostlist {list:?}: missing ']' in {item:?}"))?;
                let values = expand_ranges(&after[..end])
                    .map_err(|e| format!("hostlist {list:?}: {e} in {item:?}"))?;
                if names.len().saturating_mul(values.len()) > MAX {
                    return Err(format!("hostlist {list:?}: more than {MAX} names"));
                }
                names = names
                    .iter()
                    .flat_map(|n| values.iter().map(move |v| format!("{n}{v}")))
                    .collect();
                rest = &after[end + 1..];
            } else {
                let end = rest.find('[').unwrap_or(rest.len());
                let lit = &rest[..end];
                if let Some(bad) = lit
                    .chars()
                    .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
                {
                    return Err(format!(
                        "hostlist {list:?}: character {bad:?} in {item:?} is not allowed in a host name"
                    ));
                }
                for n in &mut names {
                    n.push_str(lit);
                }
                rest = &rest[end..];
            }
        }
        out.extend(names);
        if out.len() > MAX {
            return Err(format!("hostlist {list:?}: more than {MAX} names"));
        }
    }
    if out.is_empty() {
        return Err(format!("hostlist {list:?} names no host"));
    }
    Ok(out)
}

/// Expand Slurm's compressed tasks-per-node form: `2(x3),1` → `[2, 2, 2, 1]`, `4` →
/// `[4]`.
///
/// # Errors
/// A message quoting the bad token.
pub(crate) fn parse_tasks_per_node(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for tok in s.split(',').map(str::trim) {
        let bad = || format!("tasks per node {s:?}: bad token {tok:?}");
        let (n, rep) = match tok.split_once('(') {
            Some((n, r)) => {
                let r = r
                    .strip_prefix('x')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(bad)?;
                (n, r.parse::<u32>().map_err(|_| bad())?)
            }
            None => (tok, 1),
        };
        let n: u32 = n.parse().map_err(|_| bad())?;
        if rep == 0 || out.len() + rep as usize > 1_000_000 {
            return Err(bad());
        }
        out.extend(std::iter::repeat_n(n, rep as usize));
    }
    Ok(out)
}

/// A Slurm allocation rwrun runs inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Allocation {
    /// `SLURM_JOB_ID`.
    pub(crate) job_id: String,
    /// Nodes in order, each with its task slots.
    pub(crate) nodes: Vec<(String, u32)>,
    /// `SLURM_NTASKS`, if set.
    pub(crate) ntasks: Option<u32>,
}

impl Allocation {
    /// Read the allocation from the environment (through `var`); `Ok(None)` when not
    /// inside one (see the module doc for the rule).
    ///
    /// # Errors
    /// A message naming the variable that is missing or malformed.
    pub(crate) fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        let Some(job_id) = var("SLURM_JOB_ID") else {
            return Ok(None);
        };
        if var("SLURM_STEP_ID").is_some()
            || var("SLURM_STEPID").is_some()
            || var("RANKWIRE_SLURM_LAUNCH").and_then(|v| rankwire::settings::parse_switch(&v))
                == Some(false)
        {
            return Ok(None);
        }
        let list = var("SLURM_JOB_NODELIST")
            .or_else(|| var("SLURM_NODELIST"))
            .ok_or_else(|| {
                format!("inside Slurm job {job_id} but SLURM_JOB_NODELIST is not set")
            })?;
        let names = parse_hostlist(&list)?;
        let slots = match var("SLURM_TASKS_PER_NODE") {
            Some(t) => parse_tasks_per_node(&t)?,
            None => match var("SLURM_JOB_CPUS_PER_NODE") {
                Some(c) => parse_tasks_per_node(&c)?,
                None => vec![1; names.len()],
            },
        };
        if slots.len() != names.len() {
            return Err(format!(
                "SLURM_JOB_NODELIST={list:?} names {} nodes but the tasks per node give {}",
                names.len(),
                slots.len()
            ));
        }
        let ntasks = match var("SLURM_NTASKS") {
            Some(n) => Some(
                n.trim()
                    .parse()
                    .map_err(|_| format!("SLURM_NTASKS={n:?} is not a number"))?,
            ),
            None => None,
        };
        Ok(Some(Allocation {
            job_id,
            nodes: names.into_iter().zip(slots).collect(),
            ntasks,
        }))
    }

    /// Total task slots.
    pub(crate) fn slots(&self) -> u64 {
        self.nodes.iter().map(|(_, s)| *s as u64).sum()
    }

    /// Node index of every rank `0..size` (see the module doc).
    ///
    /// # Errors
    /// More ranks than slots without `oversubscribe`.
    pub(crate) fn place(&self, size: u32, oversubscribe: bool) -> Result<Vec<usize>, String> {
        let slots = self.slots();
        if size as u64 > slots && !oversubscribe {
            return Err(format!(
                "-n {size} exceeds the {slots} task slot(s) of Slurm job {} ({}); ask sbatch/salloc \
                 for more tasks (-n), or pass --oversubscribe to place the extra ranks round robin",
                self.job_id,
                self.nodes
                    .iter()
                    .map(|(n, s)| format!("{n}:{s}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        let mut out = Vec::with_capacity(size as usize);
        'fill: for (i, (_, s)) in self.nodes.iter().enumerate() {
            for _ in 0..*s {
                if out.len() == size as usize {
                    break 'fill;
                }
                out.push(i);
            }
        }
        let mut i = 0;
        while out.len() < size as usize {
            out.push(i % self.nodes.len());
            i += 1;
        }
        Ok(out)
    }
}

/// The srun arguments (before the program) that start one rank on `node`.
pub(crate) fn srun_args(node: &str, job_name: &str) -> Vec<String> {
    vec![
        "--nodes=1".into(),
        "--ntasks=1".into(),
        format!("--nodelist={node}"),
        "--overlap".into(),
        "--mpi=none".into(),
        "--quiet".into(),
        "--quit-on-interrupt".into(),
        format!("--job-name={job_name}"),
    ]
}

// Split at commas outside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err("nested '['".into()),
            ']' if depth == 1 => depth = 0,
            ']' => return Err("']' without '['".into()),
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("missing ']'".into());
    }
    out.push(&list[start..]);
    Ok(out)
}

// `1-3,07` → ["1","2","3","07"]; the lower bound's width sets the zero padding.
fn expand_ranges(spec: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim) {
        let bad = || format!("bad range {part:?}");
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| bad())?,
            hi.parse().map_err(|_| bad())?,
        );
        if b < a || b - a >= 1_000_000 {
            return Err(bad());
        }
        let width = lo.len();
        out.extend((a..=b).map(|v| format!("{v:0width$}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    // B018: expected lists precomputed by hand from Slurm's hostlist rules.
    #[test]
    fn hostlists() {
        let long = "a".repeat(63);
        let cases: Vec<(&str, Vec<&str>)> = vec![
            ("n", vec!["n"]),
            ("login", vec!["login"]),
            ("gpu-a", vec!["gpu-a"]),
            ("node-01", vec!["node-01"]),
            ("node[1-3]", vec!["node1", "node2", "node3"]),
            (
                "node[01-03,07]",
                vec!["node01", "node02", "node03", "node07"],
            ),
            (
                "rack1-node[001-002]",
                vec!["rack1-node001", "rack1-node002"],
            ),
            (
                "rack[1-2]-n[1-2]",
                vec!["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"],
            ),
            ("NODE7", vec!["NODE7"]),
            ("compute_1", vec!["compute_1"]),
            ("n,n[1-2],x-y", vec!["n", "n1", "n2", "x-y"]),
            ("nn[1-2]", vec!["nn1", "nn2"]),
            (
                "a.b.example.org,c[9-11].d",
                vec!["a.b.example.org", "c9.d", "c10.d", "c11.d"],
            ),
            (&long, vec![&long]),
        ];
        for (list, want) in cases {
            assert_eq!(parse_hostlist(list).unwrap(), want, "{list}");
        }
    }

    #[test]
    fn malformed_hostlists_quote_the_bad_token() {
        for (list, want) in [
            ("node[1-3", "missing ']'"),
            ("node1-3]", "']' without '['"),
            ("node[[1]]", "nested"),
            ("node[3-1]", "\"3-1\""),
            ("node[a-b]", "\"a-b\""),
            ("node[]", "\"\""),
            ("node[1-]", "\"1-\""),
            ("a,,b", "empty host name"),
            ("", "empty host name"),
            ("no de", "' '"),
            ("node[1-9999999]", "\"1-9999999\""),
        ] {
            let e = parse_hostlist(list).unwrap_err();
            assert!(e.contains(want), "{list:?}: {e}");
        }
    }

    #[test]
    fn tasks_per_node() {
        assert_eq!(parse_tasks_per_node("2(x3),1").unwrap(), vec![2, 2, 2, 1]);
        assert_eq!(parse_tasks_per_node("4").unwrap(), vec![4]);
        assert_eq!(parse_tasks_per_node("1(x2)").unwrap(), vec![1, 1]);
        for bad in ["", "x", "2(3)", "2(x)", "2(x0)", "-1", "2(x3"] {
            let e = parse_tasks_per_node(bad).unwrap_err();
            assert!(e.contains("bad token"), "{bad:?}: {e}");
        }
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn allocation_from_env() {
        assert_eq!(Allocation::from_env(env(&[])).unwrap(), None);
        // Inside a step: not an allocation to launch into.
        let step = [
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_NODELIST", "n"),
        ];
        assert_eq!(Allocation::from_env(env(&step)).unwrap(), None);
        let off = [("SLURM_JOB_ID", "7"), ("RANKWIRE_SLURM_LAUNCH", "0")];
        assert_eq!(Allocation::from_env(env(&off)).unwrap(), None);
        let a = Allocation::from_env(env(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_NODELIST", "gpu-a,nn[1-2]"),
            ("SLURM_TASKS_PER_NODE", "1,2(x2)"),
            ("SLURM_NTASKS", "5"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            a.nodes,
            vec![("gpu-a".into(), 1), ("nn1".into(), 2), ("nn2".into(), 2)]
        );
        assert_eq!((a.ntasks, a.slots()), (Some(5), 5));
        assert_eq!(a.place(5, false).unwrap(), vec![0, 1, 1, 2, 2]);
        assert_eq!(a.place(2, false).unwrap(), vec![0, 1]);
        let e = a.place(6, false).unwrap_err();
        assert!(
            e.contains("-n 6 exceeds the 5 task slot(s)") && e.contains("--oversubscribe"),
            "{e}"
        );
        assert_eq!(a.place(8, true).unwrap(), vec![0, 1, 1, 2, 2, 0, 1, 2]);
        let e = Allocation::from_env(env(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_NODELIST", "n[1-3]"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
        ]))
        .unwrap_err();
        assert!(e.contains("names 3 nodes") && e.contains("give 2"), "{e}");
        let e = Allocation::from_env(env(&[("SLURM_JOB_ID", "7"), ("SLURM_JOB_NODELIST", "n[1")]))
            .unwrap_err();
        assert!(e.contains("missing ']'"), "{e}");
    }
}
