//! Where each rank runs and how it is started there.
//!
//! | situation | [`Via`] | a rank is started as |
//! |---|---|---|
//! | no hosts, or only local hosts | `Local` | `PROGRAM ARGS` (forked here) |
//! | inside a Slurm allocation ([`crate::slurm`]) | `Srun` | `srun --nodes=1 --ntasks=1 --nodelist=NODE … PROGRAM ARGS` |
//! | `--host`/`--hostfile` naming other machines | `Agent` | local hosts: forked here; others: the launch agent template with `{host}` replaced, plus one shell command line |
//!
//! Ranks fill the nodes in order, as many per node as it has slots. The launch agent
//! (`RANKWIRE_LAUNCH_AGENT`, default `ssh -x -o BatchMode=yes {host}`) is split at
//! whitespace; `{host}` is replaced by the host name (appended after the first word if
//! absent), and one last argument is added: a `/bin/sh` command line `cd DIR && exec env
//! VAR=VALUE… PROGRAM ARGS…` (every word single-quoted), which ssh hands to the remote
//! shell. A custom agent must run that line with `sh -c`.
//!
//! `RANKWIRE_LOCAL_RANK`/`RANKWIRE_LOCAL_SIZE` count the ranks placed on the same node.
//! Which ranks share memory is still decided by the ranks themselves, from the host's
//! identity (hostname, boot id, network namespace), not from this placement.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// One node of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    /// Host or Slurm node name.
    pub(crate) name: String,
    /// It is this machine (ranks there can be forked directly).
    pub(crate) local: bool,
}

/// How ranks on nodes are started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Via {
    /// Every rank forked on this machine.
    Local,
    /// One `srun` step per rank inside a Slurm allocation.
    Srun {
        /// `--job-name` of the steps.
        job_name: String,
    },
    /// Remote hosts through a launch agent command template (local hosts forked).
    Agent {
        /// The template, split at whitespace.
        template: Vec<String>,
    },
}

/// Default launch agent.
pub(crate) const DEFAULT_AGENT: &str = "ssh -x -o BatchMode=yes {host}";

/// Environment variable holding the launch agent template.
pub(crate) const AGENT_ENV: &str = "RANKWIRE_LAUNCH_AGENT";

/// The placement of every rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The nodes, in order.
    pub(crate) nodes: Vec<Node>,
    /// Node index of every rank.
    pub(crate) node_of_rank: Vec<usize>,
    /// How ranks are started.
    pub(crate) via: Via,
}

impl Placement {
    /// Every rank on this machine.
    pub(crate) fn local(size: u32) -> Self {
        Placement {
            nodes: vec![Node {
                name: "localhost".into(),
                local: true,
            }],
            node_of_rank: vec![0; size as usize],
            via: Via::Local,
        }
    }

    /// `(local rank, local size)` of `rank`: its index among the ranks of its node, and
    /// their number.
    pub(crate) fn local_rank(&self, rank: u32) -> (u32, u32) {
        let node = self.node_of_rank[rank as usize];
        let before = self.node_of_rank[..rank as usize]
            .iter()
            .filter(|&&n| n == node)
            .count();
        let all = self.node_of_rank.iter().filter(|&&n| n == node).count();
        (before as u32, all as u32)
    }

    /// Some rank runs on another machine (the bootstrap server must then listen on the
    /// network, not only on loopback).
    pub(crate) fn needs_network(&self) -> bool {
        self.node_of_rank.iter().any(|&n| !self.nodes[n].local)
    }

    /// The launcher that starts `rank` (`srun`, the agent's program) with a hint for
    /// when it cannot be run; `None` for a rank forked directly.
    pub(crate) fn launcher_of(&self, rank: u32) -> Option<(String, &'static str)> {
        let node = &self.nodes[self.node_of_rank[rank as usize]];
        match &self.via {
            Via::Local => None,
            Via::Agent { .. } if node.local => None,
            Via::Srun { .. } => Some((
                "srun".into(),
                "rwrun runs inside a Slurm allocation (SLURM_JOB_ID is set); set RANKWIRE_SLURM_LAUNCH=0 to start ranks here instead",
            )),
            Via::Agent { template } => Some((
                template.first().cloned().unwrap_or_default(),
                "hosts other than this machine start through RANKWIRE_LAUNCH_AGENT",
            )),
        }
    }

    /// The program and arguments that start `rank`, given the program, its arguments,
    /// and the variables the rank needs (`env`, also set on the local process).
    /// `cwd` is where remote ranks `cd` to first.
    pub(crate) fn command_line(
        &self,
        rank: u32,
        program: &OsStr,
        args: &[OsString],
        env: &[(OsString, OsString)],
        cwd: &OsStr,
    ) -> (OsString, Vec<OsString>) {
        let node = &self.nodes[self.node_of_rank[rank as usize]];
        match &self.via {
            Via::Local => (program.to_os_string(), args.to_vec()),
            Via::Agent { .. } if node.local => (program.to_os_string(), args.to_vec()),
            Via::Srun { job_name } => {
                let mut v: Vec<OsString> = crate::slurm::srun_args(&node.name, job_name)
                    .into_iter()
                    .map(OsString::from)
                    .collect();
                v.push(program.to_os_string());
                v.extend(args.iter().cloned());
                ("srun".into(), v)
            }
            Via::Agent { template } => {
                let mut words: Vec<OsString> = Vec::new();
                let mut has_host = false;
                for w in template {
                    if w.contains("{host}") {
                        has_host = true;
                    }
                    words.push(w.replace("{host}", &node.name).into());
                }
                if !has_host {
                    words.insert(1.min(words.len()), node.name.clone().into());
                }
                words.push(remote_shell_line(program, args, env, cwd));
                let program = words.remove(0);
                (program, words)
            }
        }
    }
}

/// Split a launch agent template into words; an empty one is an error.
///
/// # Errors
/// A message naming [`AGENT_ENV`].
pub(crate) fn parse_agent(template: &str) -> Result<Vec<String>, String> {
    let words: Vec<String> = template.split_whitespace().map(str::to_string).collect();
    if words.is_empty() {
        return Err(format!("{AGENT_ENV} is empty (default: {DEFAULT_AGENT:?})"));
    }
    Ok(words)
}

/// Place `size` ranks on `hosts` (name, slots, is-local), filling hosts in order;
/// beyond the slot total, round robin if `oversubscribe`.
///
/// # Errors
/// More ranks than slots without `oversubscribe`.
pub(crate) fn fill(
    hosts: &[(String, u32, bool)],
    size: u32,
    oversubscribe: bool,
) -> Result<(Vec<Node>, Vec<usize>), String> {
    // Merge repeated names into one node (slots add up), keeping first-seen order.
    let mut nodes: Vec<Node> = Vec::new();
    let mut slots: Vec<u64> = Vec::new();
    for (name, s, local) in hosts {
        match nodes.iter().position(|n| &n.name == name) {
            Some(i) => slots[i] += *s as u64,
            None => {
                nodes.push(Node {
                    name: name.clone(),
                    local: *local,
                });
                slots.push(*s as u64);
            }
        }
    }
    let total: u64 = slots.iter().sum();
    if size as u64 > total && !oversubscribe {
        return Err(format!(
            "-n {size} exceeds the {total} slot(s) of the host list; add slots (host:N) or pass --oversubscribe"
        ));
    }
    let mut of_rank = Vec::with_capacity(size as usize);
    'fill: for (i, s) in slots.iter().enumerate() {
        for _ in 0..*s {
            if of_rank.len() == size as usize {
                break 'fill;
            }
            of_rank.push(i);
        }
    }
    let mut i = 0;
    while of_rank.len() < size as usize {
        of_rank.push(i % nodes.len());
        i += 1;
    }
    Ok((nodes, of_rank))
}

// `cd 'DIR' && exec env 'K=V'… 'PROGRAM' 'ARG'…` for /bin/sh.
fn remote_shell_line(
    program: &OsStr,
    args: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &OsStr,
) -> OsString {
    let mut line = Vec::new();
    line.extend_from_slice(b"cd ");
    quote_into(&mut line, cwd.as_bytes());
    line.extend_from_slice(b" && exec env");
    for (k, v) in env {
        line.push(b' ');
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        quote_into(&mut line, &kv);
    }
    for w in std::iter::once(program).chain(args.iter().map(OsString::as_os_str)) {
        line.push(b' ');
        quote_into(&mut line, w.as_bytes());
    }
    OsStr::from_bytes(&line).to_os_string()
}

// POSIX shell single quoting: 'a'\''b'.
fn quote_into(out: &mut Vec<u8>, word: &[u8]) {
    out.push(b'\'');
    for &b in word {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn fill_in_order_and_local_ranks() {
        let hosts = vec![
            ("a".to_string(), 2, true),
            ("b".to_string(), 2, false),
            ("a".to_string(), 1, true),
        ];
        let (nodes, of) = fill(&hosts, 5, false).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(of, vec![0, 0, 0, 1, 1]);
        let p = Placement {
            nodes,
            node_of_rank: of,
            via: Via::Agent {
                template: parse_agent(DEFAULT_AGENT).unwrap(),
            },
        };
        assert!(p.needs_network());
        assert_eq!(p.local_rank(0), (0, 3));
        assert_eq!(p.local_rank(2), (2, 3));
        assert_eq!(p.local_rank(4), (1, 2));
        let e = fill(&hosts, 6, false).unwrap_err();
        assert!(e.contains("-n 6 exceeds the 5 slot(s)"), "{e}");
        assert_eq!(fill(&hosts, 7, true).unwrap().1, vec![0, 0, 0, 1, 1, 0, 1]);
        assert!(!Placement::local(3).needs_network());
        assert_eq!(Placement::local(3).local_rank(2), (2, 3));
    }

    #[test]
    fn agent_command_lines() {
        let (nodes, of) = fill(
            &[("here".into(), 1, true), ("far-1.x".into(), 1, false)],
            2,
            false,
        )
        .unwrap();
        let p = Placement {
            nodes,
            node_of_rank: of,
            via: Via::Agent {
                template: parse_agent("ssh -x -o BatchMode=yes {host}").unwrap(),
            },
        };
        let env = vec![(OsString::from("RANKWIRE_RANK"), OsString::from("1"))];
        let args = os(&["a b", "it's"]);
        // The local host's rank is forked directly.
        let (prog, a) = p.command_line(0, OsStr::new("/bin/app"), &args, &env, OsStr::new("/w"));
        assert_eq!((prog, a), (OsString::from("/bin/app"), args.clone()));
        let (prog, a) = p.command_line(1, OsStr::new("/bin/app"), &args, &env, OsStr::new("/w d"));
        assert_eq!(prog, "ssh");
        assert_eq!(
            a,
            os(&[
                "-x",
                "-o",
                "BatchMode=yes",
                "far-1.x",
                "cd '/w d' && exec env 'RANKWIRE_RANK=1' '/bin/app' 'a b' 'it'\\''s'"
            ])
        );
        // A template without {host} gets the host after its first word.
        let p2 = Placement {
            via: Via::Agent {
                template: parse_agent("my-agent --fast").unwrap(),
            },
            ..p
        };
        let (prog, a) = p2.command_line(1, OsStr::new("x"), &[], &[], OsStr::new("/"));
        assert_eq!(prog, "my-agent");
        assert_eq!(a, os(&["far-1.x", "--fast", "cd '/' && exec env 'x'"]));
        assert!(parse_agent("  ").unwrap_err().contains(AGENT_ENV));
    }

    #[test]
    fn srun_command_line() {
        let p = Placement {
            nodes: vec![
                Node {
                    name: "nn1".into(),
                    local: true,
                },
                Node {
                    name: "nn2".into(),
                    local: false,
                },
            ],
            node_of_rank: vec![0, 1],
            via: Via::Srun {
                job_name: "rwrun-x".into(),
            },
        };
        let (prog, a) = p.command_line(1, OsStr::new("app"), &os(&["-v"]), &[], OsStr::new("/"));
        assert_eq!(prog, "srun");
        let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert!(a.contains(&"--nodelist=nn2".to_string()), "{a:?}");
        assert!(a.contains(&"--mpi=none".to_string()), "{a:?}");
        assert_eq!(&a[a.len() - 2..], ["app", "-v"]);
    }
}
