//! The rank variables rwrun exports for programs that read them before `MPI_Init`
//! (issue 20): torchrun's `RANK`/`LOCAL_RANK`/..., MPICH Hydra's `MPI_LOCALRANKID`,
//! Open MPI's `OMPI_COMM_WORLD_*`, MVAPICH's `MV2_COMM_WORLD_LOCAL_RANK` (read by the
//! OSU micro-benchmarks' CUDA mode to pick a GPU). Each run is `rwrun --tag-output ...
//! env`, so every rank prints its whole environment as `[RANK] NAME=VALUE` lines.

use std::collections::BTreeMap;
use std::time::Duration;

use rankwire_tests::{RunOutput, rwrun};

/// World-rank variables: value = world rank / world size.
const WORLD: [(&str, &str); 2] = [
    ("RANK", "OMPI_COMM_WORLD_RANK"),
    ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
];
/// Local-rank variables (rank among the ranks on its node).
const LOCAL_RANK: [&str; 4] = [
    "LOCAL_RANK",
    "MPI_LOCALRANKID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
];
/// Local-size variables (number of ranks on the node).
const LOCAL_SIZE: [&str; 3] = [
    "LOCAL_WORLD_SIZE",
    "MPI_LOCALNRANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
];

/// rank -> (name -> value) from `[R] NAME=VALUE` lines.
fn environments(out: &RunOutput) -> BTreeMap<u32, BTreeMap<String, String>> {
    let mut all: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    for line in out.stdout.lines() {
        let Some(rest) = line.strip_prefix('[') else {
            continue;
        };
        let Some((rank, kv)) = rest.split_once("] ") else {
            continue;
        };
        let (Ok(rank), Some((k, v))) = (rank.parse::<u32>(), kv.split_once('=')) else {
            continue;
        };
        all.entry(rank).or_default().insert(k.into(), v.into());
    }
    all
}

/// Every rank `r` of `want` (= (local rank, local size)) has exactly these values in
/// every variable, and `RANKWIRE_*` agree. Returns the number of values checked.
fn check(out: &RunOutput, want: &[(u32, u32)]) -> usize {
    out.assert_ok();
    let envs = environments(out);
    assert_eq!(envs.len(), want.len(), "ranks seen\n{}", out.stdout);
    let size = want.len().to_string();
    let mut checks = 0;
    for (r, &(lr, ln)) in want.iter().enumerate() {
        let env = &envs[&(r as u32)];
        let get = |k: &str| {
            env.get(k)
                .map(String::as_str)
                .unwrap_or_else(|| panic!("rank {r}: {k} not set\n{}", out.stdout))
        };
        let (rank, lr, ln) = (r.to_string(), lr.to_string(), ln.to_string());
        let mut expect: Vec<(&str, &str)> = vec![
            ("RANKWIRE_RANK", &rank),
            ("RANKWIRE_SIZE", &size),
            ("RANKWIRE_LOCAL_RANK", &lr),
            ("RANKWIRE_LOCAL_SIZE", &ln),
        ];
        expect.extend([(WORLD[0].0, &*rank), (WORLD[0].1, &rank)]);
        expect.extend([(WORLD[1].0, &*size), (WORLD[1].1, &size)]);
        expect.extend(LOCAL_RANK.iter().map(|k| (*k, lr.as_str())));
        expect.extend(LOCAL_SIZE.iter().map(|k| (*k, ln.as_str())));
        for (k, v) in expect {
            assert_eq!(get(k), v, "rank {r}: {k}\n{}", out.stdout);
            checks += 1;
        }
        // PMI_* belong to a PMI server (our bootstrap reads them with PMI_FD): rwrun
        // must not invent them.
        for k in ["PMI_RANK", "PMI_SIZE", "PMI_FD"] {
            if std::env::var_os(k).is_none() {
                assert!(!env.contains_key(k), "rank {r}: rwrun set {k}");
                checks += 1;
            }
        }
    }
    checks
}

#[test]
fn three_local_ranks_get_every_launchers_rank_variables() {
    // A stale value in rwrun's own environment (a nested launch) must not leak through.
    let out = rwrun(["--tag-output", "-n", "3", "env"])
        .env("LOCAL_RANK", "9")
        .env("OMPI_COMM_WORLD_RANK", "9")
        .timeout(Duration::from_secs(60))
        .run();
    let n = check(&out, &[(0, 3), (1, 3), (2, 3)]);
    assert!(n >= 3 * 15, "{n} checks");
}

#[test]
fn local_rank_counts_ranks_of_the_same_node() {
    // Two "nodes" through a launch agent that runs the rank's shell line on this
    // machine: ranks 0 and 1 on fakenode-a, rank 2 on fakenode-b.
    let out = rwrun([
        "--tag-output",
        "--host",
        "fakenode-a:2,fakenode-b:1",
        "-n",
        "3",
        "env",
    ])
    .env("RANKWIRE_LAUNCH_AGENT", "env RW_FAKE_HOST={host} sh -c")
    .timeout(Duration::from_secs(60))
    .run();
    check(&out, &[(0, 2), (1, 2), (0, 1)]);
    let envs = environments(&out);
    assert_eq!(envs[&0]["RW_FAKE_HOST"], "fakenode-a");
    assert_eq!(envs[&2]["RW_FAKE_HOST"], "fakenode-b");
}

#[test]
fn dash_x_overrides_a_compat_variable_but_not_rankwires_own() {
    let out = rwrun([
        "--tag-output",
        "-x",
        "LOCAL_RANK=7",
        "-x",
        "RANKWIRE_LOCAL_RANK=7",
        "-n",
        "2",
        "env",
    ])
    .timeout(Duration::from_secs(60))
    .run();
    out.assert_ok();
    let envs = environments(&out);
    for r in 0..2u32 {
        assert_eq!(envs[&r]["LOCAL_RANK"], "7", "rank {r}");
        assert_eq!(envs[&r]["RANKWIRE_LOCAL_RANK"], r.to_string(), "rank {r}");
        assert_eq!(envs[&r]["MPI_LOCALRANKID"], r.to_string(), "rank {r}");
    }
}
