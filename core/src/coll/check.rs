//! Collective mismatch detection (`RANKWIRE_COLL_CHECK=1`).
//!
//! MPI leaves a collective that the ranks call inconsistently (different operation,
//! root, count or datatype) undefined: it usually hangs or corrupts memory. With the
//! check on, every collective first runs small exchanges on its own tags, before the
//! algorithm sends any data:
//!
//! 1. *Descriptors*: every rank sends every other rank a fixed 80-byte descriptor
//!    (collective, root, count, element size, operation, datatype, algorithm, hash of
//!    the count vector, flags), all posted at once, so the pattern does not depend on
//!    anything the ranks might disagree on. Every rank evaluates the same descriptors
//!    with the same rules.
//! 2. *Pairs* (gatherv, scatterv, alltoallv only, once the root is agreed): each rank
//!    sends every partner the count it will send to or expects from it (one `u64` per
//!    pair) and compares what it receives with its own side; then every rank sends its
//!    finding (or "none") to every other rank, so all learn of any disagreement.
//!
//! So either all ranks go on, or all return [`Error::Collective`] naming the ranks and
//! the difference. A rank whose arguments failed local validation takes part with an
//! "invalid" flag, so the others fail too instead of waiting for it.
//!
//! Costs: 2(p−1) extra messages per rank per exchange and a round trip each; meant for
//! debugging.

use bytemuck::{Pod, Zeroable};

use crate::coll::ops::{dtype_name, op_name};
use crate::coll::sched::{Builder, Phase, Slice};
use crate::error::{Error, Result};

/// Which collective a call is (carried in check descriptors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CollKind {
    Barrier = 1,
    Bcast,
    Reduce,
    Allreduce,
    Gather,
    Gatherv,
    Scatter,
    Scatterv,
    Allgather,
    Allgatherv,
    Alltoall,
    Alltoallv,
    ReduceScatter,
    ReduceScatterBlock,
    Scan,
    Exscan,
}

impl CollKind {
    const ALL: [CollKind; 16] = [
        CollKind::Barrier,
        CollKind::Bcast,
        CollKind::Reduce,
        CollKind::Allreduce,
        CollKind::Gather,
        CollKind::Gatherv,
        CollKind::Scatter,
        CollKind::Scatterv,
        CollKind::Allgather,
        CollKind::Allgatherv,
        CollKind::Alltoall,
        CollKind::Alltoallv,
        CollKind::ReduceScatter,
        CollKind::ReduceScatterBlock,
        CollKind::Scan,
        CollKind::Exscan,
    ];

    /// Lower-case name, as in the API.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CollKind::Barrier => "barrier",
            CollKind::Bcast => "bcast",
            CollKind::Reduce => "reduce",
            CollKind::Allreduce => "allreduce",
            CollKind::Gather => "gather",
            CollKind::Gatherv => "gatherv",
            CollKind::Scatter => "scatter",
            CollKind::Scatterv => "scatterv",
            CollKind::Allgather => "allgather",
            CollKind::Allgatherv => "allgatherv",
            CollKind::Alltoall => "alltoall",
            CollKind::Alltoallv => "alltoallv",
            CollKind::ReduceScatter => "reduce_scatter",
            CollKind::ReduceScatterBlock => "reduce_scatter_block",
            CollKind::Scan => "scan",
            CollKind::Exscan => "exscan",
        }
    }

    pub(crate) fn from_code(c: u64) -> Option<CollKind> {
        CollKind::ALL.iter().copied().find(|k| *k as u64 == c)
    }
}

/// What one rank passed to a collective, as far as the ranks must agree on it.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) kind: CollKind,
    pub(crate) root: Option<usize>,
    /// Elements: the count all ranks must pass (`uniform`), or this rank's own
    /// contribution (v-collectives).
    pub(crate) count: u64,
    pub(crate) uniform: bool,
    pub(crate) elem_bytes: usize,
    pub(crate) op_code: u32,
    pub(crate) dtype_code: u32,
    pub(crate) algo: u32,
    /// A count vector every rank holds and that must be equal everywhere
    /// (allgatherv's recvcounts, reduce_scatter's recvcounts).
    pub(crate) shared_counts: Option<Vec<u64>>,
    /// Whether rank `i`'s own `count` must equal `shared_counts[i]` (allgatherv).
    pub(crate) own_in_shared: bool,
    /// Pairwise exchange: `(peer, value sent)` and `(peer, value expected)`.
    pub(crate) pairs: Option<Pairs>,
    /// This rank's arguments are invalid (the error it returns).
    pub(crate) invalid: Option<Error>,
}

/// Values exchanged in the pairs phase.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pairs {
    pub(crate) send: Vec<(usize, u64)>,
    pub(crate) expect: Vec<(usize, u64)>,
}

impl Spec {
    /// A collective all ranks call with the same `count`.
    pub(crate) fn uniform(
        kind: CollKind,
        root: Option<usize>,
        count: usize,
        elem_bytes: usize,
    ) -> Spec {
        Spec {
            kind,
            root,
            count: count as u64,
            uniform: true,
            elem_bytes,
            op_code: 0,
            dtype_code: 0,
            algo: 0,
            shared_counts: None,
            own_in_shared: false,
            pairs: None,
            invalid: None,
        }
    }

    /// A collective where each rank contributes its own `count`.
    pub(crate) fn own(
        kind: CollKind,
        root: Option<usize>,
        count: usize,
        elem_bytes: usize,
    ) -> Spec {
        Spec {
            uniform: false,
            ..Spec::uniform(kind, root, count, elem_bytes)
        }
    }
}

const F_INVALID: u64 = 1;
const F_UNIFORM: u64 = 2;
const F_SHARED: u64 = 4;
const F_ROOT: u64 = 16;

/// The descriptor every rank sends (all fields little-endian-native `u64`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub(crate) struct Desc {
    kind: u64,
    root: u64,
    count: u64,
    elem_bytes: u64,
    op: u64,
    dtype: u64,
    algo: u64,
    counts_hash: u64,
    flags: u64,
    reserved: u64,
}

/// A rank's finding of the pairs phase.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
struct Finding {
    /// 1 if a partner disagreed.
    bad: u64,
    /// The partner, this rank's value, the partner's value.
    peer: u64,
    mine: u64,
    theirs: u64,
}

const FINDING_BYTES: usize = std::mem::size_of::<Finding>();

const DESC_BYTES: usize = std::mem::size_of::<Desc>();

impl Desc {
    fn of(spec: &Spec) -> Desc {
        let mut flags = 0;
        if spec.invalid.is_some() {
            flags |= F_INVALID;
        }
        if spec.uniform {
            flags |= F_UNIFORM;
        }
        if spec.shared_counts.is_some() {
            flags |= F_SHARED;
        }
        if spec.root.is_some() {
            flags |= F_ROOT;
        }
        Desc {
            kind: spec.kind as u64,
            root: spec.root.map_or(0, |r| r as u64),
            count: spec.count,
            elem_bytes: spec.elem_bytes as u64,
            op: spec.op_code as u64,
            dtype: spec.dtype_code as u64,
            algo: spec.algo as u64,
            counts_hash: spec.shared_counts.as_deref().map_or(0, hash_counts),
            flags,
            reserved: 0,
        }
    }
}

/// FNV-1a over the counts (with the length).
fn hash_counts(v: &[u64]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for x in std::iter::once(v.len() as u64).chain(v.iter().copied()) {
        for b in x.to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Append the check phases for `spec` to `b`; the algorithm's rounds follow. A failed
/// check ends the collective with the error before any data moves.
pub(crate) fn build(b: &mut Builder, spec: &Spec) {
    let (me, p) = (b.rank, b.size);
    let desc = Desc::of(spec);
    let own = b.tmp(DESC_BYTES);
    let all = b.tmp(p * DESC_BYTES);
    let at = |r: usize| Slice::new(all, r * DESC_BYTES, DESC_BYTES);
    let own_slice = Slice::new(own, 0, DESC_BYTES);
    b.set_phase(Phase::CheckDesc);
    b.call(Box::new(move |bufs| {
        bufs.write(own_slice, bytemuck::bytes_of(&desc))
    }));
    b.copy(own_slice, at(me));
    for r in (0..p).filter(|&r| r != me) {
        b.recv(r, at(r));
    }
    for r in (0..p).filter(|&r| r != me) {
        b.send(r, own_slice);
    }
    let invalid = spec.invalid.clone();
    let shared = spec.shared_counts.clone();
    let own_in_shared = spec.own_in_shared;
    let all_slice = Slice::new(all, 0, p * DESC_BYTES);
    b.call(Box::new(move |bufs| {
        let descs: Vec<Desc> = bytemuck::pod_collect_to_vec(bufs.bytes(all_slice)?);
        verdict(
            me,
            &descs,
            invalid.as_ref(),
            shared.as_deref(),
            own_in_shared,
        )
    }));
    if let Some(pairs) = spec.pairs.clone() {
        build_pairs(b, spec.kind, pairs);
    }
    b.set_phase(Phase::Main);
}

/// The pairs phase and the exchange of its findings.
fn build_pairs(b: &mut Builder, kind: CollKind, pairs: Pairs) {
    let (me, p) = (b.rank, b.size);
    b.set_phase(Phase::CheckPairs);
    let sent = b.tmp(8 * pairs.send.len());
    let got = b.tmp(8 * pairs.expect.len());
    let values: Vec<u64> = pairs.send.iter().map(|(_, v)| *v).collect();
    let sent_all = Slice::new(sent, 0, 8 * values.len());
    b.call(Box::new(move |bufs| {
        bufs.write(sent_all, bytemuck::cast_slice(&values))
    }));
    for (i, (peer, _)) in pairs.expect.iter().enumerate() {
        b.recv(*peer, Slice::new(got, 8 * i, 8));
    }
    for (i, (peer, _)) in pairs.send.iter().enumerate() {
        b.send(*peer, Slice::new(sent, 8 * i, 8));
    }
    let findings = b.tmp(p * FINDING_BYTES);
    let at = |r: usize| Slice::new(findings, r * FINDING_BYTES, FINDING_BYTES);
    let expect = pairs.expect;
    let got_all = Slice::new(got, 0, 8 * expect.len());
    let mine_at = at(me);
    b.call(Box::new(move |bufs| {
        let theirs: Vec<u64> = bytemuck::pod_collect_to_vec(bufs.bytes(got_all)?);
        let bad = expect
            .iter()
            .zip(&theirs)
            .find(|((_, mine), t)| *mine != **t);
        let f = match bad {
            Some(((peer, mine), t)) => Finding {
                bad: 1,
                peer: *peer as u64,
                mine: *mine,
                theirs: *t,
            },
            None => Finding::zeroed(),
        };
        bufs.write(mine_at, bytemuck::bytes_of(&f))
    }));
    for r in (0..p).filter(|&r| r != me) {
        b.recv(r, at(r));
    }
    for r in (0..p).filter(|&r| r != me) {
        b.send(r, mine_at);
    }
    let all = Slice::new(findings, 0, p * FINDING_BYTES);
    b.call(Box::new(move |bufs| {
        let f: Vec<Finding> = bytemuck::pod_collect_to_vec(bufs.bytes(all)?);
        pairs_verdict(kind, &f)
    }));
}

/// The first disagreement any rank found in the pairs phase.
fn pairs_verdict(kind: CollKind, f: &[Finding]) -> Result<()> {
    let Some(i) = f.iter().position(|x| x.bad != 0) else {
        return Ok(());
    };
    let Finding {
        peer, mine, theirs, ..
    } = f[i];
    let name = kind.name();
    Err(collective(match kind {
        CollKind::Gatherv => format!(
            "{name}: rank {i} sends {mine} elements but root {peer} expects recvcounts[{i}] = {theirs}"
        ),
        CollKind::Scatterv => format!(
            "{name}: root {peer} sends sendcounts[{i}] = {theirs} elements but rank {i} receives {mine}"
        ),
        _ => {
            format!("{name}: rank {peer} sends {theirs} elements to rank {i}, which expects {mine}")
        }
    }))
}

/// Evaluate everyone's descriptors (identical on every rank, so every rank reaches the
/// same verdict). `shared` is this rank's shared count vector.
fn verdict(
    me: usize,
    d: &[Desc],
    own_invalid: Option<&Error>,
    shared: Option<&[u64]>,
    own_in_shared: bool,
) -> Result<()> {
    let name = CollKind::from_code(d[me].kind).map_or("collective", CollKind::name);
    let fail = |msg: String| Err(collective(format!("{name}: {msg}")));
    // Invalid arguments somewhere: the offending ranks report their own error.
    let invalid: Vec<usize> = ranks_where(d, |x| x.flags & F_INVALID != 0);
    if !invalid.is_empty() {
        if let Some(e) = own_invalid {
            // The same error as without the check (usually `Usage`), so that checking
            // mode does not change what a program sees for its own bad arguments.
            return Err(e.clone());
        }
        return fail(format!(
            "{} passed invalid arguments (see the error on {}); this rank's arguments are valid",
            list(&invalid),
            if invalid.len() == 1 {
                "that rank"
            } else {
                "those ranks"
            }
        ));
    }
    if let Some(m) = differ(
        d,
        |x| x.kind,
        |v| CollKind::from_code(v).map_or("an unknown collective".into(), |k| k.name().to_string()),
    ) {
        return Err(collective(format!(
            "ranks called different collectives on one communicator: {m}"
        )));
    }
    if d[me].flags & F_ROOT != 0
        && let Some(m) = differ(d, |x| x.root, |v| format!("root {v}"))
    {
        return fail(format!("root mismatch: {m}"));
    }
    if let Some(m) = differ(d, |x| x.elem_bytes, |v| format!("{v}-byte elements")) {
        return fail(format!("datatype size mismatch: {m}"));
    }
    if let Some(m) = differ(d, |x| x.dtype, |v| dtype_name(v as u32)) {
        return fail(format!("datatype mismatch: {m}"));
    }
    if let Some(m) = differ(d, |x| x.op, |v| op_name(v as u32).to_string()) {
        return fail(format!("reduction operation mismatch: {m}"));
    }
    if d[me].flags & F_UNIFORM != 0 {
        let eb = d[me].elem_bytes;
        if let Some(m) = differ(
            d,
            |x| x.count,
            |v| format!("{v} elements ({} bytes)", v * eb),
        ) {
            return fail(format!("count mismatch: {m}"));
        }
    }
    if d[me].flags & F_SHARED != 0 {
        if let Some(m) = differ(
            d,
            |x| x.counts_hash,
            |v| format!("count vector #{:08x}", v as u32),
        ) {
            return fail(format!(
                "the count vectors (recvcounts) differ between ranks: {m}"
            ));
        }
        if own_in_shared && let Some(v) = shared {
            for (i, x) in d.iter().enumerate() {
                if v.get(i) != Some(&x.count) {
                    return fail(format!(
                        "rank {i} contributes {} elements but recvcounts[{i}] = {}",
                        x.count,
                        v.get(i).map_or("missing".into(), |c| c.to_string())
                    ));
                }
            }
        }
    }
    if let Some(m) = differ(d, |x| x.algo, |v| format!("algorithm #{v}")) {
        return fail(format!(
            "ranks chose different algorithms (RANKWIRE_*_ALGO differs between ranks?): {m}"
        ));
    }
    Ok(())
}

fn ranks_where(d: &[Desc], f: impl Fn(&Desc) -> bool) -> Vec<usize> {
    d.iter()
        .enumerate()
        .filter(|(_, x)| f(x))
        .map(|(i, _)| i)
        .collect()
}

/// If `field` differs between ranks: "ranks 0, 2: <describe(a)>; rank 1: <describe(b)>".
fn differ(
    d: &[Desc],
    field: impl Fn(&Desc) -> u64,
    describe: impl Fn(u64) -> String,
) -> Option<String> {
    let mut groups: Vec<(u64, Vec<usize>)> = Vec::new();
    for (i, x) in d.iter().enumerate() {
        let v = field(x);
        match groups.iter_mut().find(|(g, _)| *g == v) {
            Some((_, rs)) => rs.push(i),
            None => groups.push((v, vec![i])),
        }
    }
    (groups.len() > 1).then(|| {
        groups
            .iter()
            .map(|(v, rs)| format!("{}: {}", list(rs), describe(*v)))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// "rank 3" or "ranks 0, 1, 2" (at most 8 listed).
fn list(rs: &[usize]) -> String {
    let shown: Vec<String> = rs.iter().take(8).map(|r| r.to_string()).collect();
    let more = if rs.len() > 8 {
        format!(" and {} more", rs.len() - 8)
    } else {
        String::new()
    };
    if rs.len() == 1 {
        format!("rank {}", shown[0])
    } else {
        format!("ranks {}{more}", shown.join(", "))
    }
}

/// A collective mismatch found by the check, recorded as the last error (the reason a
/// rank that leaves with it reports, see `crate::abort`).
#[cold]
fn collective(msg: String) -> Error {
    Error::Collective(msg).noted()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descs(specs: &[Spec]) -> Vec<Desc> {
        specs.iter().map(Desc::of).collect()
    }

    #[test]
    fn count_mismatch_names_both_groups() {
        let mut s = vec![Spec::uniform(CollKind::Allreduce, None, 4, 4); 3];
        s[1].count = 5;
        let e = verdict(0, &descs(&s), None, None, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("allreduce"), "{e}");
        assert!(e.contains("ranks 0, 2: 4 elements (16 bytes)"), "{e}");
        assert!(e.contains("rank 1: 5 elements (20 bytes)"), "{e}");
        let e1 = verdict(1, &descs(&s), None, None, false).unwrap_err();
        assert_eq!(e1.to_string(), e);
    }

    #[test]
    fn root_kind_and_invalid_mismatches() {
        let mut s = vec![Spec::uniform(CollKind::Bcast, Some(0), 4, 8); 4];
        s[3].root = Some(2);
        let e = verdict(0, &descs(&s), None, None, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("root mismatch") && e.contains("rank 3: root 2"),
            "{e}"
        );
        s[3] = Spec::uniform(CollKind::Reduce, Some(0), 4, 8);
        let e = verdict(2, &descs(&s), None, None, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 3: reduce"), "{e}");
        let mut s = vec![Spec::uniform(CollKind::Gather, Some(0), 4, 8); 2];
        let bad = Error::usage("receive buffer too small");
        s[1].invalid = Some(bad.clone());
        let e0 = verdict(0, &descs(&s), None, None, false)
            .unwrap_err()
            .to_string();
        assert!(e0.contains("rank 1 passed invalid arguments"), "{e0}");
        let e1 = verdict(1, &descs(&s), Some(&bad), None, false)
            .unwrap_err()
            .to_string();
        assert!(e1.contains("receive buffer too small"), "{e1}");
    }

    #[test]
    fn shared_vectors_and_pairs() {
        let v = vec![1u64, 2, 3];
        let mut s: Vec<Spec> = (0..3)
            .map(|r| {
                let mut x = Spec::own(CollKind::Allgatherv, None, v[r] as usize, 4);
                x.shared_counts = Some(v.clone());
                x.own_in_shared = true;
                x
            })
            .collect();
        assert!(verdict(0, &descs(&s), None, Some(&v), true).is_ok());
        s[2].count = 4;
        let e = verdict(0, &descs(&s), None, Some(&v), true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rank 2 contributes 4 elements but recvcounts[2] = 3"),
            "{e}"
        );
        s[2].count = 3;
        s[1].shared_counts = Some(vec![1, 2, 4]);
        let e = verdict(0, &descs(&s), None, Some(&v), true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("count vectors"), "{e}");
        let mut f = vec![Finding::zeroed(); 3];
        assert!(pairs_verdict(CollKind::Alltoallv, &f).is_ok());
        f[1] = Finding {
            bad: 1,
            peer: 2,
            mine: 5,
            theirs: 6,
        };
        let e = pairs_verdict(CollKind::Alltoallv, &f)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rank 2 sends 6 elements to rank 1, which expects 5"),
            "{e}"
        );
        let e = pairs_verdict(CollKind::Gatherv, &f)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rank 1 sends 5 elements but root 2 expects recvcounts[1] = 6"),
            "{e}"
        );
    }
}
