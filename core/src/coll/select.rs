//! Algorithm selection: an α–β–γ cost model, overridable per collective by environment
//! variable.
//!
//! # Model
//! Sending `n` bytes between two ranks costs `α + n·β`; combining `n` bytes with a
//! reduction costs `n·γ`; each extra message a rank posts in the same round costs `o`
//! (software overhead; the α of concurrent messages overlaps). The formulas per
//! algorithm are those of R. Thakur, R. Rabenseifner and W. Gropp, "Optimization of
//! Collective Communication Operations in MPICH", IJHPCA 19(1), 2005, §3–4. For each
//! call the applicable algorithm of least predicted time wins, except where some node
//! of the job runs more ranks than CPUs: small barriers, broadcasts, all-to-alls and
//! (from 4 ranks per CPU) allreduces then take the linear algorithms; below 4 ranks per
//! CPU barriers on 3 to 5 ranks and small allreduces on 3 to 6 take the exchange
//! algorithms instead (`CollConfig::barrier`, "Oversubscribed"). [`CostModel::DEFAULT`] holds the
//! constants, measured on the CI machine (see its doc).
//!
//! # Overrides
//! `RANKWIRE_<COLLECTIVE>_ALGO=<name>` forces an algorithm (names in each enum's
//! doc). The variables are read when a communicator is created (for the world
//! communicator: at its first use) and must be equal on every rank (init compares
//! them: `shared_settings_field`). A forced algorithm that cannot run a call (ring
//! allreduce with a non-commutative operation, recursive doubling allgather on a
//! non-power-of-two communicator) falls back to the model's choice for that call,
//! logged at `debug`. An unknown name makes every collective of
//! that kind fail with [`Error::Usage`] naming the valid ones.

use std::fmt;

use crate::error::{Error, Result};

/// Cost model constants (microseconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Latency of one message, µs.
    pub alpha_us: f64,
    /// Transfer time per byte, µs.
    pub beta_us_per_byte: f64,
    /// Reduction time per byte, µs.
    pub gamma_us_per_byte: f64,
    /// Extra cost of each additional message posted in the same round, µs.
    pub overhead_us: f64,
    /// Local copy time per byte (memcpy), µs.
    pub copy_us_per_byte: f64,
}

impl CostModel {
    /// Fitted to release-build `rankwire-bench` runs with every algorithm forced, on an
    /// idle 16-core host over the shm transport (2, 4 and 8 ranks; the 2-core CI VM gives
    /// the same small-message figures when quiet, and too much noise for the others):
    /// - α = 1.8 µs: one dependent step (ring allgather of 8 B at 8 ranks: 13.2 µs for
    ///   7 steps; recursive-doubling allreduce of 8 B at 2 ranks: 1.7 µs);
    /// - β = 1/6000 µs/B: 6 GB/s per rank while every rank moves data (ring allgather,
    ///   1 MiB per step: 154 µs), below the 15–19 GB/s of one lone transfer;
    /// - γ = 1/8000 µs/B: f32 sum including its memory traffic (the loop alone runs at
    ///   ≈ 20 GB/s); puts the recursive doubling → Rabenseifner switch at 2 ranks near
    ///   30 KB, where the measurements cross;
    /// - o = 1.2 µs per extra message in one round (linear alltoall of 8 B at 8 ranks:
    ///   10.3 µs);
    /// - copy = 1/20000 µs/B (memcpy of 1 MiB ≈ 50 µs).
    pub const DEFAULT: CostModel = CostModel {
        alpha_us: 1.8,
        beta_us_per_byte: 1.0 / 6000.0,
        gamma_us_per_byte: 1.0 / 8000.0,
        overhead_us: 1.2,
        copy_us_per_byte: 1.0 / 20000.0,
    };

    fn msg(&self, bytes: f64) -> f64 {
        self.alpha_us + bytes * self.beta_us_per_byte
    }
}

/// Smallest `k` with `2^k ≥ p`.
pub(crate) fn ceil_log2(p: usize) -> u32 {
    p.max(1).next_power_of_two().trailing_zeros()
}

/// Largest power of two `≤ p` (1 for p = 0).
pub(crate) fn pof2_floor(p: usize) -> usize {
    if p <= 1 {
        1
    } else {
        1 << (usize::BITS - 1 - p.leading_zeros())
    }
}

/// A selectable algorithm: its names in environment variables.
pub(crate) trait Algo: Copy + PartialEq + fmt::Debug + 'static {
    /// `(name, algorithm)` pairs accepted in the environment variable.
    const NAMES: &'static [(&'static str, Self)];
    /// The environment variable.
    const VAR: &'static str;

    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, a)| *a == self)
            .map_or("?", |(n, _)| n)
    }

    /// Code carried in check descriptors.
    fn code(self) -> u32 {
        Self::NAMES
            .iter()
            .position(|(_, a)| *a == self)
            .map_or(0, |i| i as u32 + 1)
    }
}

macro_rules! algo_enum {
    (
        $(#[$m:meta])* $name:ident, $var:literal {
            $($(#[$vm:meta])* $v:ident = $s:literal),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $v),*
        }
        impl Algo for $name {
            const NAMES: &'static [(&'static str, Self)] = &[$(($s, $name::$v)),*];
            const VAR: &'static str = $var;
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

algo_enum!(
    /// Allreduce algorithms (`RANKWIRE_ALLREDUCE_ALGO`).
    AllreduceAlgo, "RANKWIRE_ALLREDUCE_ALGO" {
        /// `recursive_doubling`: lg p exchanges of the whole vector (Thakur et al. 2005
        /// §4.4). Order-preserving.
        RecursiveDoubling = "recursive_doubling",
        /// `rabenseifner`: reduce-scatter by recursive halving, allgather by recursive
        /// doubling (R. Rabenseifner, "Optimization of Collective Reduction Operations",
        /// ICCS 2004). Order-preserving.
        Rabenseifner = "rabenseifner",
        /// `ring`: ring reduce-scatter then ring allgather (P. Patarasuk, X. Yuan,
        /// "Bandwidth optimal all-reduce algorithms for clusters of workstations",
        /// JPDC 2009). Commutative operations only.
        Ring = "ring",
        /// `reduce_bcast`: binomial reduce to rank 0, then binomial broadcast.
        /// Order-preserving.
        ReduceBcast = "reduce_bcast",
        /// `linear`: every rank sends its vector to rank 0, which combines them in rank
        /// order and sends the result to every rank (MPICH's and Open MPI's basic
        /// linear reduce followed by a linear broadcast). Order-preserving. Every rank
        /// but 0 waits once; the default for small vectors where ranks share cores
        /// (docs/design.md, "Communicators and collectives"). Rank 0 holds p − 1
        /// received vectors at once in the nonblocking form: forced on large vectors it
        /// costs (p − 1) × the vector in memory there.
        Linear = "linear",
        /// `exchange`: every rank sends its vector to every other rank in one round and
        /// combines all p in rank order (`((a_0 ∘ a_1) ∘ a_2) ∘ …`, the same bits on
        /// every rank). Order-preserving. No rank waits for a combined result, so a rank
        /// whose core-mate has not run yet can finish this call and start its next one;
        /// the default for vectors up to 1 KiB on 3 to 6 ranks where some node runs
        /// more ranks than CPUs but fewer than 4 per CPU (docs/design.md,
        /// "Communicators and collectives"). Each rank sends and receives p − 1 vectors
        /// and holds p of them.
        Exchange = "exchange",
    }
);

algo_enum!(
    /// Broadcast algorithms (`RANKWIRE_BCAST_ALGO`).
    BcastAlgo, "RANKWIRE_BCAST_ALGO" {
        /// `binomial`: binomial tree (MPICH `MPIR_Bcast_intra_binomial`).
        Binomial = "binomial",
        /// `scatter_allgather`: binomial scatter then ring allgather (M. Barnett et al.,
        /// "Interprocessor collective communication library (InterCom)", SHPCC 1994;
        /// Thakur et al. 2005 §4.1).
        ScatterAllgather = "scatter_allgather",
        /// `linear`: the root sends the whole message to every other rank in turn
        /// (MPICH's and Open MPI's basic linear broadcast). Every rank waits once, for
        /// the root only; the default for small messages where ranks share cores
        /// (docs/design.md, "Communicators and collectives").
        Linear = "linear",
    }
);

algo_enum!(
    /// Barrier algorithms (`RANKWIRE_BARRIER_ALGO`).
    BarrierAlgo, "RANKWIRE_BARRIER_ALGO" {
        /// `dissemination`: ⌈lg p⌉ rounds, pairwise exchange (the butterfly) for a
        /// power-of-two size, dissemination otherwise (`barrier.rs`).
        Dissemination = "dissemination",
        /// `linear`: every rank sends to rank 0, which answers each once it has heard
        /// from all (a fan-in/fan-out barrier; Open MPI's `basic_linear`). Every rank
        /// but 0 waits once; the default where ranks share cores (except where
        /// `exchange` is)
        /// (docs/design.md, "Communicators and collectives").
        Linear = "linear",
        /// `exchange`: every rank sends a zero-byte message to every other rank and
        /// waits for all of theirs, in one round (the barrier of the exchange
        /// allreduce). No rank waits for an answer from a rank that has to hear from
        /// everyone first.
        Exchange = "exchange",
    }
);

algo_enum!(
    /// Reduce algorithms (`RANKWIRE_REDUCE_ALGO`).
    ReduceAlgo, "RANKWIRE_REDUCE_ALGO" {
        /// `binomial`: binomial tree, children combined in rank order.
        Binomial = "binomial",
    }
);

algo_enum!(
    /// Allgather algorithms (`RANKWIRE_ALLGATHER_ALGO`).
    AllgatherAlgo, "RANKWIRE_ALLGATHER_ALGO" {
        /// `ring`: p−1 steps to the right neighbour.
        Ring = "ring",
        /// `bruck`: ⌈lg p⌉ steps of doubling distance, then a local rotation (J. Bruck
        /// et al., "Efficient algorithms for all-to-all communications in multiport
        /// message-passing systems", IEEE TPDS 8(11), 1997).
        Bruck = "bruck",
        /// `recursive_doubling`: lg p exchanges with partner `rank XOR 2^k`; power-of-two
        /// sizes only.
        RecursiveDoubling = "recursive_doubling",
    }
);

algo_enum!(
    /// Alltoall algorithms (`RANKWIRE_ALLTOALL_ALGO`, also used by alltoallv).
    AlltoallAlgo, "RANKWIRE_ALLTOALL_ALGO" {
        /// `pairwise`: p−1 steps, exchanging with `rank XOR k` (power of two) or sending
        /// to `rank + k` and receiving from `rank − k` (Thakur et al. 2005 §4.5).
        Pairwise = "pairwise",
        /// `linear`: all p−1 sends and receives posted at once.
        Linear = "linear",
    }
);

algo_enum!(
    /// Gather and scatter algorithms (`RANKWIRE_GATHER_ALGO`, `RANKWIRE_SCATTER_ALGO`).
    GatherAlgo, "RANKWIRE_GATHER_ALGO" {
        /// `linear`: the root exchanges with every rank directly.
        Linear = "linear",
        /// `binomial`: binomial tree forwarding whole subtrees' blocks (MPICH
        /// `MPIR_Gather_intra_binomial`).
        Binomial = "binomial",
    }
);

algo_enum!(
    /// Reduce-scatter algorithms (`RANKWIRE_REDUCE_SCATTER_ALGO`, for reduce_scatter
    /// and reduce_scatter_block).
    ReduceScatterAlgo, "RANKWIRE_REDUCE_SCATTER_ALGO" {
        /// `ring`: p−1 steps, each block travelling once around the ring. Commutative
        /// operations only.
        Ring = "ring",
        /// `reduce_scatterv`: binomial reduce to rank 0, then linear scatterv.
        /// Order-preserving.
        ReduceScatterv = "reduce_scatterv",
    }
);

/// Environment overrides, one per collective, parsed once per communicator.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overrides {
    allreduce: Forced<AllreduceAlgo>,
    bcast: Forced<BcastAlgo>,
    barrier: Forced<BarrierAlgo>,
    reduce: Forced<ReduceAlgo>,
    allgather: Forced<AllgatherAlgo>,
    alltoall: Forced<AlltoallAlgo>,
    gather: Forced<GatherAlgo>,
    scatter: Forced<GatherAlgo>,
    reduce_scatter: Forced<ReduceScatterAlgo>,
}

/// A parsed override: none, an algorithm, or the error text for a bad value.
#[derive(Debug, Clone, Default)]
enum Forced<A> {
    #[default]
    None,
    Algo(A),
    Bad(String),
}

impl<A: Algo> Forced<A> {
    fn parse(var: &str, value: Option<String>) -> Forced<A> {
        let Some(v) = value else {
            return Forced::None;
        };
        let v = v.trim().to_ascii_lowercase();
        if v.is_empty() || v == "auto" {
            return Forced::None;
        }
        match A::NAMES.iter().find(|(n, _)| *n == v) {
            Some((_, a)) => Forced::Algo(*a),
            None => Forced::Bad(format!(
                "{var}={v:?} is not an algorithm; use one of {} or auto",
                A::NAMES
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The forced algorithm if `ok` accepts it, else the model's `best`.
    fn pick(&self, ok: impl Fn(A) -> bool, best: impl FnOnce() -> A) -> Result<A> {
        match self {
            Forced::Bad(m) => Err(Error::Usage(m.clone())),
            Forced::Algo(a) if ok(*a) => Ok(*a),
            Forced::Algo(a) => {
                let b = best();
                tracing::debug!(
                    "{}={} cannot run this call; using {}",
                    A::VAR,
                    a.name(),
                    b.name()
                );
                Ok(b)
            }
            Forced::None => Ok(best()),
        }
    }
}

impl Overrides {
    /// Read every `RANKWIRE_*_ALGO` variable through `get`.
    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Overrides {
        Overrides {
            allreduce: Forced::parse(AllreduceAlgo::VAR, get(AllreduceAlgo::VAR)),
            bcast: Forced::parse(BcastAlgo::VAR, get(BcastAlgo::VAR)),
            barrier: Forced::parse(BarrierAlgo::VAR, get(BarrierAlgo::VAR)),
            reduce: Forced::parse(ReduceAlgo::VAR, get(ReduceAlgo::VAR)),
            allgather: Forced::parse(AllgatherAlgo::VAR, get(AllgatherAlgo::VAR)),
            alltoall: Forced::parse(AlltoallAlgo::VAR, get(AlltoallAlgo::VAR)),
            gather: Forced::parse(GatherAlgo::VAR, get(GatherAlgo::VAR)),
            scatter: Forced::parse("RANKWIRE_SCATTER_ALGO", get("RANKWIRE_SCATTER_ALGO")),
            reduce_scatter: Forced::parse(ReduceScatterAlgo::VAR, get(ReduceScatterAlgo::VAR)),
        }
    }
}

/// Default of `RANKWIRE_ALLREDUCE_SINGLE_COPY`: smallest vector (bytes per rank) that
/// takes the single-copy allreduce (`single_copy.rs`), just above the direct path's
/// largest (`direct.rs`, 64 KiB; asserted in `single_copy.rs`). Up to there recursive doubling, whose
/// messages are eager or one rendezvous each, costs less than the two rounds of
/// messages of single copy; above it the schedules took 1.5–3 times as long
/// (benches/results/2026-12-05_single-copy-allreduce/).
pub(crate) const SINGLE_COPY_MIN_BYTES: usize = (64 << 10) + 1;

/// Largest communicator that takes the linear algorithms in a job where some node has
/// more ranks than CPUs (the ratio is the job's: [`CollConfig::barrier`]): rank 0 (the
/// root) handles p − 1 messages each way, one after the other.
pub(crate) const LINEAR_MAX_RANKS: usize = 16;

/// Largest communicator that takes them with at least 2 ranks per CPU, where every
/// wait in a chain costs a turn of the scheduler (OSU, 32 and 64 ranks on 2 cores,
/// forced algorithms, two launches each: barrier 107–119 against 344–419 µs and
/// 419–534 against 1017–1298 µs for dissemination, allreduce 117–281 against 297–492
/// µs (8 B – 1 KiB) and 302–558 against 1183–2024 µs (8–64 B) for recursive doubling;
/// `benches/results/2026-12-09a_oversub-linear/README.md`).
pub(crate) const LINEAR_MAX_RANKS_CROWDED: usize = 64;

/// Ranks per CPU from which small allreduces take the linear algorithm (measured on 2
/// cores, `benches/results/2026-12-09a_oversub-linear/README.md`: faster than recursive
/// doubling at 8 to 64 ranks, level at 5 and 6, slower at 3, mixed at 4).
pub(crate) const LINEAR_ALLREDUCE_RANKS_PER_CPU: f64 = 4.0;

/// Largest communicator whose small allreduces take [`AllreduceAlgo::Exchange`] where
/// ranks share cores (fewer than [`LINEAR_ALLREDUCE_RANKS_PER_CPU`] per CPU). Measured
/// on 2 cores against recursive doubling, 4 B – 1 KiB, medians of 3–4 alternated
/// launches (`benches/results/2026-12-07s57_oversub-exchange/`): 0.55–0.72 of its time
/// at 3 ranks, 0.65–0.93 at 4, 0.69–0.91 at 5, 0.71–0.94 at 6; at 7 ranks 0.77–0.98
/// up to 256 B but 1.10–1.23 above; at 8 ranks (4 per CPU) 1.2–2.0 of the linear
/// algorithm's. Where a barrier separates the calls (OSU's loop) ranks cannot run ahead,
/// and at 3 ranks exchange took 1.13–1.57 × recursive doubling's time up to 512 B,
/// depending on which went first in each round (same folder); with local work between
/// the calls it was level (0.92–1.00).
pub(crate) const EXCHANGE_MAX_RANKS: usize = 6;

/// Largest communicator whose barriers take [`BarrierAlgo::Exchange`] where ranks share
/// cores (fewer than [`LINEAR_ALLREDUCE_RANKS_PER_CPU`] per CPU; the linear barrier
/// otherwise). Measured on 2 cores, unbound, against Open MPI's barrier, medians of
/// 6–10 alternated rounds (`benches/results/2026-12-07s57_oversub-exchange/`, "The same
/// pattern for the barrier"): exchange
/// 0.65, 0.89, 1.04 of Open MPI's time at 3, 4, 5 ranks (linear 1.06, 1.07, 1.27); at
/// 6 ranks 1.43 (linear 1.10), at 8 1.33 (linear 0.91).
pub(crate) const EXCHANGE_BARRIER_MAX_RANKS: usize = 5;

/// Largest allreduce vector (bytes) that takes [`AllreduceAlgo::Exchange`] there: at 2
/// and 4 KiB it was level with recursive doubling or slower from 4 ranks (same runs).
pub(crate) const EXCHANGE_MAX_BYTES: usize = 1024;

/// Largest message (bytes: a broadcast, an all-to-all block) that takes the linear
/// algorithm in an oversubscribed job: the root sends the whole message p − 1 times,
/// or every rank has p − 1 messages in flight at once, which costs little only while
/// they are eager (the direct broadcast's limit, `direct.rs`).
pub(crate) const LINEAR_MAX_BYTES: usize = 8 << 10;

/// Every `RANKWIRE_<COLLECTIVE>_ALGO` variable (scatter shares gather's names).
pub(crate) const ALGO_VARS: [&str; 9] = [
    AllreduceAlgo::VAR,
    BcastAlgo::VAR,
    BarrierAlgo::VAR,
    ReduceAlgo::VAR,
    AllgatherAlgo::VAR,
    AlltoallAlgo::VAR,
    GatherAlgo::VAR,
    "RANKWIRE_SCATTER_ALGO",
    ReduceScatterAlgo::VAR,
];

/// The collective settings every rank must share, as it publishes them in its node
/// record (`crate::select::shared_settings_field`'s field, checked at init by
/// `crate::select::check_shared_settings`): `NAME=value` for every
/// `RANKWIRE_<COLLECTIVE>_ALGO` (`auto` when unset), `RANKWIRE_ALLREDUCE_SINGLE_COPY`
/// (bytes, or `default`) and `RANKWIRE_COLL_CHECK` (`1` or `0`), separated by spaces,
/// each value in one form so that two spellings of one choice compare equal. Ranks that
/// chose different algorithms would exchange messages of the same lengths in other
/// patterns and get wrong results without any error (then hang), so init refuses them.
pub(crate) fn shared_settings_field() -> String {
    let mut f: Vec<String> = ALGO_VARS
        .iter()
        .map(|var| {
            let v = crate::settings::raw(var)
                .map(|v| v.trim().to_ascii_lowercase())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "auto".into());
            format!("{var}={v}")
        })
        .collect();
    let single_copy = crate::settings::raw("RANKWIRE_ALLREDUCE_SINGLE_COPY")
        .and_then(|v| crate::settings::parse_bytes(&v))
        .map_or_else(|| "default".to_string(), |n| n.to_string());
    f.push(format!("RANKWIRE_ALLREDUCE_SINGLE_COPY={single_copy}"));
    let check = crate::settings::switch_or_unset("RANKWIRE_COLL_CHECK") == Some(true);
    f.push(format!("RANKWIRE_COLL_CHECK={}", u8::from(check)));
    f.join(" ")
}

/// Collective configuration of one communicator.
#[derive(Debug, Clone)]
pub(crate) struct CollConfig {
    /// `RANKWIRE_COLL_CHECK=1`: exchange descriptors before every collective.
    pub(crate) check: bool,
    pub(crate) overrides: Overrides,
    pub(crate) model: CostModel,
    /// `RANKWIRE_ALLREDUCE_SINGLE_COPY`: smallest blocking host allreduce (bytes per
    /// rank) read by single copy among the ranks of one node (`single_copy.rs`); 0: off.
    pub(crate) single_copy_min: usize,
    /// The most ranks per CPU on any node of the job (the same on every rank:
    /// `crate::select::Paths::ranks_per_cpu`; 0.0 where unknown). Above 1.0 small
    /// collectives take the linear algorithms, see "Oversubscribed" in
    /// [`CollConfig::barrier`].
    pub(crate) ranks_per_cpu: f64,
}

impl CollConfig {
    /// From the process environment; the values were checked at init
    /// ([`crate::settings`]). The runtime reads it once and keeps it
    /// (`crate::runtime::Inner::coll_config`): communicator creation is no place for
    /// environment reads.
    pub(crate) fn from_env(ranks_per_cpu: f64) -> CollConfig {
        CollConfig {
            ranks_per_cpu,
            check: crate::settings::switch_or_unset("RANKWIRE_COLL_CHECK") == Some(true),
            overrides: Overrides::from_lookup(crate::settings::raw),
            model: CostModel::DEFAULT,
            single_copy_min: crate::settings::raw("RANKWIRE_ALLREDUCE_SINGLE_COPY")
                .and_then(|v| crate::settings::parse_bytes(&v))
                .map_or(SINGLE_COPY_MIN_BYTES, |n| {
                    usize::try_from(n).unwrap_or(usize::MAX)
                }),
        }
    }

    /// Allreduce of `bytes` per rank on `p` ranks.
    pub(crate) fn allreduce(
        &self,
        p: usize,
        bytes: usize,
        commutative: bool,
    ) -> Result<AllreduceAlgo> {
        let ok = |a: AllreduceAlgo| commutative || a != AllreduceAlgo::Ring;
        self.overrides.allreduce.pick(ok, || {
            if self.small_linear(p, bytes) && self.ranks_per_cpu >= LINEAR_ALLREDUCE_RANKS_PER_CPU {
                AllreduceAlgo::Linear
            } else if self.ranks_per_cpu > 1.0
                && (3..=EXCHANGE_MAX_RANKS).contains(&p)
                && bytes <= EXCHANGE_MAX_BYTES
            {
                AllreduceAlgo::Exchange
            } else {
                self.model.best_allreduce(p, bytes, commutative)
            }
        })
    }

    /// Whether `RANKWIRE_ALLREDUCE_ALGO` names an algorithm (or a bad value): the
    /// device allreduce then runs the schedules, not its staged path.
    pub(crate) fn allreduce_forced(&self) -> bool {
        !matches!(self.overrides.allreduce, Forced::None)
    }

    /// Broadcast of `bytes` on `p` ranks: [`BcastAlgo::Linear`] for up to
    /// [`LINEAR_MAX_BYTES`] where ranks share CPUs (see [`CollConfig::barrier`]), else
    /// the cost model's choice.
    pub(crate) fn bcast(&self, p: usize, bytes: usize) -> Result<BcastAlgo> {
        self.overrides.bcast.pick(
            |_| true,
            || {
                if self.small_linear(p, bytes) {
                    BcastAlgo::Linear
                } else {
                    self.model.best_bcast(p, bytes)
                }
            },
        )
    }

    /// Barrier on `p` ranks.
    ///
    /// # Oversubscribed
    /// Where ranks share cores, a rank that waits gives its core away and runs again
    /// only after the scheduler comes back to it, several µs later, so an algorithm
    /// costs about one such turn per wait in its longest chain of waits. The
    /// dissemination barrier has ⌈lg p⌉ dependent rounds on every rank, and a binomial
    /// broadcast after it waits on a rank that may not be running. Linear algorithms
    /// have every rank wait once, on one rank. Measured through the MPI ABI with 4 ranks
    /// on 2 cores (`src/bc.c` of `benches/results/2026-12-09a_oversub-linear/`): a
    /// broadcast + barrier iteration took 13–19 µs with dissemination and binomial,
    /// against 9–10 µs with both linear. Open MPI took 6–7 µs with its defaults, and
    /// 11–15 µs, with our pattern of waits, with its recursive-doubling barrier forced.
    /// So where some node runs more ranks than CPUs ([`CollConfig::ranks_per_cpu`]
    /// above 1), communicators of 3 to
    /// [`LINEAR_MAX_RANKS`] ranks, or up to [`LINEAR_MAX_RANKS_CROWDED`] with at least
    /// 2 ranks per CPU, take [`BarrierAlgo::Linear`] (up to
    /// [`EXCHANGE_BARRIER_MAX_RANKS`] ranks below [`LINEAR_ALLREDUCE_RANKS_PER_CPU`] per
    /// CPU [`BarrierAlgo::Exchange`], the same pattern as the exchange allreduce's
    /// below), small broadcasts and all-to-alls theirs too, and small allreduces from [`LINEAR_ALLREDUCE_RANKS_PER_CPU`] ranks
    /// per CPU. Below that, allreduces up to [`EXCHANGE_MAX_BYTES`] on 3 to
    /// [`EXCHANGE_MAX_RANKS`] ranks take [`AllreduceAlgo::Exchange`]: one round in which
    /// no rank waits for a combined result, so the two ranks sharing a core each finish
    /// a call and post the next one's vector in one turn on the core instead of
    /// trading it back and forth between the rounds of recursive doubling (4 ranks on 2
    /// cores, 8 B: about 3 context switches per call instead of 4.5; 0.77–0.83 of
    /// recursive doubling's time, 0.95 of Open MPI's). Otherwise, and on 2 ranks (one
    /// exchange either way), dissemination.
    /// Only measured on 2 cores; mildly oversubscribed large nodes may do better with
    /// the logarithmic algorithms (`RANKWIRE_BARRIER_ALGO=dissemination` & co).
    pub(crate) fn barrier(&self, p: usize) -> Result<BarrierAlgo> {
        self.overrides.barrier.pick(
            |_| true,
            || {
                if self.linear_when_oversubscribed(p) {
                    if p <= EXCHANGE_BARRIER_MAX_RANKS
                        && self.ranks_per_cpu < LINEAR_ALLREDUCE_RANKS_PER_CPU
                    {
                        BarrierAlgo::Exchange
                    } else {
                        BarrierAlgo::Linear
                    }
                } else {
                    BarrierAlgo::Dissemination
                }
            },
        )
    }

    /// Whether a message of `bytes` (a broadcast, an all-to-all block, an allreduce
    /// vector) on `p` ranks takes the linear algorithm ([`CollConfig::barrier`]).
    fn small_linear(&self, p: usize, bytes: usize) -> bool {
        self.linear_when_oversubscribed(p) && bytes <= LINEAR_MAX_BYTES
    }

    /// Whether `p` ranks of this job take the linear algorithms ([`CollConfig::barrier`]).
    fn linear_when_oversubscribed(&self, p: usize) -> bool {
        let r = self.ranks_per_cpu;
        p >= 3
            && ((r > 1.0 && p <= LINEAR_MAX_RANKS) || (r >= 2.0 && p <= LINEAR_MAX_RANKS_CROWDED))
    }

    /// Reduce (one algorithm for now; the variable is still validated).
    pub(crate) fn reduce(&self, _p: usize, _bytes: usize) -> Result<ReduceAlgo> {
        self.overrides
            .reduce
            .pick(|_| true, || ReduceAlgo::Binomial)
    }

    /// Allgather of `bytes` per rank on `p` ranks.
    pub(crate) fn allgather(&self, p: usize, bytes: usize) -> Result<AllgatherAlgo> {
        let ok = |a: AllgatherAlgo| a != AllgatherAlgo::RecursiveDoubling || p.is_power_of_two();
        self.overrides
            .allgather
            .pick(ok, || self.model.best_allgather(p, bytes))
    }

    /// Alltoall of `bytes` per destination on `p` ranks.
    ///
    /// Where ranks share CPUs ([`CollConfig::barrier`]) blocks up to
    /// [`LINEAR_MAX_BYTES`] take [`AlltoallAlgo::Linear`]: every message in flight at
    /// once, so a rank waits once for all of them, where pairwise waits p − 1 times,
    /// each on one partner (4 ranks on 2 cores, `osu_alltoall` 1 B – 1 KiB, forced runs
    /// not stored: 5.7–12.6 µs against 8.8–17 µs pairwise).
    pub(crate) fn alltoall(&self, p: usize, bytes: usize) -> Result<AlltoallAlgo> {
        self.overrides.alltoall.pick(
            |_| true,
            || {
                if self.small_linear(p, bytes) {
                    AlltoallAlgo::Linear
                } else {
                    self.model.best_alltoall(p, bytes)
                }
            },
        )
    }

    /// Gather (`scatter = false`) or scatter of `bytes` per rank on `p` ranks.
    pub(crate) fn gather(&self, p: usize, bytes: usize, scatter: bool) -> Result<GatherAlgo> {
        let f = if scatter {
            &self.overrides.scatter
        } else {
            &self.overrides.gather
        };
        f.pick(|_| true, || self.model.best_gather(p, bytes))
    }

    /// Reduce-scatter of `total_bytes` (the whole vector) on `p` ranks.
    pub(crate) fn reduce_scatter(
        &self,
        p: usize,
        total_bytes: usize,
        commutative: bool,
    ) -> Result<ReduceScatterAlgo> {
        let ok = |a: ReduceScatterAlgo| commutative || a != ReduceScatterAlgo::Ring;
        self.overrides.reduce_scatter.pick(ok, || {
            self.model.best_reduce_scatter(p, total_bytes, commutative)
        })
    }
}

impl CostModel {
    /// Predicted time of an allreduce algorithm, µs.
    pub fn allreduce_us(&self, a: AllreduceAlgo, p: usize, bytes: usize) -> f64 {
        let n = bytes as f64;
        let (b, g) = (self.beta_us_per_byte, self.gamma_us_per_byte);
        let pof2 = pof2_floor(p);
        let lg = pof2.trailing_zeros() as f64;
        // Non-power-of-two: fold the extra ranks in before and out after.
        let fold = if pof2 < p {
            2.0 * self.msg(n) + n * g
        } else {
            0.0
        };
        let frac = |q: usize| (q as f64 - 1.0) / q as f64;
        match a {
            AllreduceAlgo::RecursiveDoubling => lg * (self.msg(n) + n * g) + fold,
            AllreduceAlgo::Rabenseifner => {
                2.0 * lg * self.alpha_us + frac(pof2) * n * (2.0 * b + g) + fold
            }
            AllreduceAlgo::Ring => {
                let p = p as f64;
                2.0 * (p - 1.0) * self.alpha_us + (p - 1.0) / p * n * (2.0 * b + g)
            }
            AllreduceAlgo::ReduceBcast => {
                let l = ceil_log2(p) as f64;
                2.0 * l * self.msg(n) + l * n * g
            }
            // Rank 0 takes p − 1 vectors and combines them, then sends p − 1.
            AllreduceAlgo::Linear => {
                let k = (p as f64 - 1.0).max(0.0);
                2.0 * self.msg(n)
                    + 2.0 * (k - 1.0).max(0.0) * (self.overhead_us + n * self.beta_us_per_byte)
                    + k * n * g
            }
            // Every rank sends p − 1 vectors and takes p − 1 in one round, then
            // combines them.
            AllreduceAlgo::Exchange => {
                let k = (p as f64 - 1.0).max(0.0);
                self.msg(n)
                    + 2.0 * (k - 1.0).max(0.0) * (self.overhead_us + n * self.beta_us_per_byte)
                    + k * n * g
            }
        }
    }

    fn best_allreduce(&self, p: usize, bytes: usize, commutative: bool) -> AllreduceAlgo {
        best(
            AllreduceAlgo::NAMES
                .iter()
                .map(|(_, a)| *a)
                .filter(|a| commutative || *a != AllreduceAlgo::Ring)
                // Linear and exchange only where ranks share cores
                // (CollConfig::allreduce) or forced.
                .filter(|a| !matches!(a, AllreduceAlgo::Linear | AllreduceAlgo::Exchange)),
            |a| self.allreduce_us(a, p, bytes),
        )
    }

    /// Predicted time of a broadcast algorithm, µs.
    pub fn bcast_us(&self, a: BcastAlgo, p: usize, bytes: usize) -> f64 {
        let n = bytes as f64;
        let l = ceil_log2(p) as f64;
        let pf = p as f64;
        match a {
            BcastAlgo::Binomial => l * self.msg(n),
            // The last rank gets the root's (p−1)-th send.
            BcastAlgo::Linear => {
                self.msg(n) + (pf - 2.0).max(0.0) * (self.overhead_us + n * self.beta_us_per_byte)
            }
            BcastAlgo::ScatterAllgather => {
                (l + pf - 1.0) * self.alpha_us + 2.0 * (pf - 1.0) / pf * n * self.beta_us_per_byte
            }
        }
    }

    /// The model's broadcast: binomial or scatter-allgather (linear is chosen only
    /// where ranks share cores, [`CollConfig::bcast`], or when forced).
    fn best_bcast(&self, p: usize, bytes: usize) -> BcastAlgo {
        best(
            BcastAlgo::NAMES
                .iter()
                .map(|(_, a)| *a)
                .filter(|a| *a != BcastAlgo::Linear),
            |a| self.bcast_us(a, p, bytes),
        )
    }

    /// Predicted time of an allgather algorithm for `bytes` per rank, µs.
    pub fn allgather_us(&self, a: AllgatherAlgo, p: usize, bytes: usize) -> f64 {
        let m = bytes as f64;
        let pf = p as f64;
        let moved = (pf - 1.0) * m * self.beta_us_per_byte;
        match a {
            AllgatherAlgo::Ring => (pf - 1.0) * self.alpha_us + moved,
            // Bruck's final rotation copies the whole result once more.
            AllgatherAlgo::Bruck => {
                ceil_log2(p) as f64 * self.alpha_us + moved + pf * m * self.copy_us_per_byte
            }
            AllgatherAlgo::RecursiveDoubling => ceil_log2(p) as f64 * self.alpha_us + moved,
        }
    }

    fn best_allgather(&self, p: usize, bytes: usize) -> AllgatherAlgo {
        best(
            AllgatherAlgo::NAMES
                .iter()
                .map(|(_, a)| *a)
                .filter(|a| *a != AllgatherAlgo::RecursiveDoubling || p.is_power_of_two()),
            |a| self.allgather_us(a, p, bytes),
        )
    }

    /// Predicted time of an alltoall algorithm for `bytes` per destination, µs.
    pub fn alltoall_us(&self, a: AlltoallAlgo, p: usize, bytes: usize) -> f64 {
        let m = bytes as f64;
        let k = p as f64 - 1.0;
        match a {
            AlltoallAlgo::Pairwise => k * self.msg(m),
            // All messages in flight at once: one latency, then the per-message
            // overheads and the bytes; many large messages at once also contend for
            // memory (modelled as 1.5 β from 16 KiB per message on).
            AlltoallAlgo::Linear => {
                let contention = if bytes >= 16 << 10 { 1.5 } else { 1.0 };
                self.alpha_us + k * (self.overhead_us + contention * m * self.beta_us_per_byte)
            }
        }
    }

    fn best_alltoall(&self, p: usize, bytes: usize) -> AlltoallAlgo {
        best(AlltoallAlgo::NAMES.iter().map(|(_, a)| *a), |a| {
            self.alltoall_us(a, p, bytes)
        })
    }

    /// Predicted time of a gather/scatter algorithm for `bytes` per rank, µs.
    pub fn gather_us(&self, a: GatherAlgo, p: usize, bytes: usize) -> f64 {
        let m = bytes as f64;
        let k = p as f64 - 1.0;
        match a {
            GatherAlgo::Linear => {
                self.alpha_us + k * (self.overhead_us + m * self.beta_us_per_byte)
            }
            GatherAlgo::Binomial => {
                ceil_log2(p) as f64 * self.alpha_us + k * m * self.beta_us_per_byte * 1.5
            }
        }
    }

    fn best_gather(&self, p: usize, bytes: usize) -> GatherAlgo {
        best(GatherAlgo::NAMES.iter().map(|(_, a)| *a), |a| {
            self.gather_us(a, p, bytes)
        })
    }

    /// Predicted time of a reduce-scatter algorithm for `total_bytes`, µs.
    pub fn reduce_scatter_us(&self, a: ReduceScatterAlgo, p: usize, total_bytes: usize) -> f64 {
        let n = total_bytes as f64;
        let pf = p as f64;
        match a {
            ReduceScatterAlgo::Ring => {
                (pf - 1.0)
                    * (self.alpha_us + n / pf * (self.beta_us_per_byte + self.gamma_us_per_byte))
            }
            ReduceScatterAlgo::ReduceScatterv => {
                let l = ceil_log2(p) as f64;
                l * (self.msg(n) + n * self.gamma_us_per_byte)
                    + self.gather_us(GatherAlgo::Linear, p, total_bytes / p.max(1))
            }
        }
    }

    fn best_reduce_scatter(&self, p: usize, total: usize, commutative: bool) -> ReduceScatterAlgo {
        best(
            ReduceScatterAlgo::NAMES
                .iter()
                .map(|(_, a)| *a)
                .filter(|a| commutative || *a != ReduceScatterAlgo::Ring),
            |a| self.reduce_scatter_us(a, p, total),
        )
    }
}

/// The candidate of least cost (the first on ties).
fn best<A: Copy>(cands: impl Iterator<Item = A>, cost: impl Fn(A) -> f64) -> A {
    let mut it = cands;
    let first = it
        .next()
        .expect("every collective has at least one candidate"); // invariant: NAMES non-empty and filters keep an order-preserving algorithm
    let mut b = (first, cost(first));
    for a in it {
        let c = cost(a);
        if c < b.1 {
            b = (a, c);
        }
    }
    b.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> CollConfig {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        CollConfig {
            check: false,
            overrides: Overrides::from_lookup(|k| {
                vars.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone())
            }),
            model: CostModel::DEFAULT,
            single_copy_min: 0,
            ranks_per_cpu: 0.0,
        }
    }

    #[test]
    fn oversubscribed_jobs_take_linear_barrier_small_bcast_and_exchange_allreduce_from_3_ranks() {
        let at = |ranks_per_cpu: f64| CollConfig {
            ranks_per_cpu,
            ..cfg(&[])
        };
        // (ranks per CPU, p, linear barrier/bcast/alltoall, linear allreduce, exchange
        // allreduce)
        for (r, p, linear, linear_ar, exchange_ar) in [
            (0.0, 4, false, false, false),
            (1.0, 4, false, false, false),
            (1.5, 2, false, false, false),
            (1.5, 3, true, false, true),
            (2.5, 5, true, false, true),
            (1.5, 6, true, false, true),
            (1.5, 7, true, false, false),
            (1.5, 16, true, false, false),
            (1.5, 17, false, false, false),
            (2.0, 4, true, false, true),
            (2.0, 64, true, false, false),
            (3.0, 6, true, false, true),
            (4.0, 4, true, true, false),
            (4.0, 8, true, true, false),
            (32.0, 64, true, true, false),
            (32.0, 65, false, false, false),
        ] {
            let c = at(r);
            let why = format!("ranks per CPU {r}, p={p}");
            // Up to 5 ranks below 4 per CPU the barrier takes exchange instead.
            let exchange_barrier = linear && p <= EXCHANGE_BARRIER_MAX_RANKS && r < 4.0;
            assert_eq!(
                c.barrier(p).unwrap() == BarrierAlgo::Linear,
                linear && !exchange_barrier,
                "{why}"
            );
            assert_eq!(
                c.barrier(p).unwrap() == BarrierAlgo::Exchange,
                exchange_barrier,
                "{why}"
            );
            assert_eq!(c.bcast(p, 8).unwrap() == BcastAlgo::Linear, linear, "{why}");
            assert_eq!(
                c.bcast(p, LINEAR_MAX_BYTES).unwrap() == BcastAlgo::Linear,
                linear,
                "{why}"
            );
            assert_ne!(
                c.bcast(p, LINEAR_MAX_BYTES + 1).unwrap(),
                BcastAlgo::Linear,
                "{why}"
            );
            // (The cost model picks the linear all-to-all by itself for many ranks.)
            if linear {
                assert_eq!(c.alltoall(p, 8).unwrap(), AlltoallAlgo::Linear, "{why}");
            }
            assert_eq!(
                c.allreduce(p, 8, false).unwrap() == AllreduceAlgo::Linear,
                linear_ar,
                "{why}"
            );
            assert_ne!(
                c.allreduce(p, 64 << 10, true).unwrap(),
                AllreduceAlgo::Linear
            );
            for bytes in [8, EXCHANGE_MAX_BYTES] {
                assert_eq!(
                    c.allreduce(p, bytes, false).unwrap() == AllreduceAlgo::Exchange,
                    exchange_ar,
                    "{why}, {bytes} bytes"
                );
            }
            assert_ne!(
                c.allreduce(p, EXCHANGE_MAX_BYTES + 1, true).unwrap(),
                AllreduceAlgo::Exchange,
                "{why}"
            );
        }
        // A forced algorithm wins either way.
        let forced = CollConfig {
            ranks_per_cpu: 8.0,
            ..cfg(&[
                ("RANKWIRE_BARRIER_ALGO", "dissemination"),
                ("RANKWIRE_BCAST_ALGO", "binomial"),
            ])
        };
        assert_eq!(forced.barrier(4).unwrap(), BarrierAlgo::Dissemination);
        assert_eq!(forced.bcast(4, 8).unwrap(), BcastAlgo::Binomial);
        let forced = cfg(&[
            ("RANKWIRE_BARRIER_ALGO", "linear"),
            ("RANKWIRE_BCAST_ALGO", "linear"),
        ]);
        assert_eq!(forced.barrier(2).unwrap(), BarrierAlgo::Linear);
        assert_eq!(forced.bcast(64, 1 << 20).unwrap(), BcastAlgo::Linear);
        assert!(
            cfg(&[("RANKWIRE_BARRIER_ALGO", "tree")])
                .barrier(4)
                .is_err()
        );
    }

    #[test]
    fn small_allreduce_uses_recursive_doubling_large_uses_bandwidth_algorithms() {
        let c = cfg(&[]);
        for p in [2, 3, 4, 5, 8, 16] {
            assert_eq!(
                c.allreduce(p, 8, true).unwrap(),
                AllreduceAlgo::RecursiveDoubling,
                "p={p}"
            );
            let big = c.allreduce(p, 16 << 20, true).unwrap();
            assert!(
                matches!(big, AllreduceAlgo::Rabenseifner | AllreduceAlgo::Ring),
                "p={p}: {big}"
            );
        }
        // Where the measurements cross (see CostModel::DEFAULT): 2 ranks between 8 and
        // 64 KiB, Rabenseifner from 64 KiB at 4 and 8 ranks.
        assert_eq!(
            c.allreduce(2, 8 << 10, true).unwrap(),
            AllreduceAlgo::RecursiveDoubling
        );
        assert_ne!(
            c.allreduce(2, 64 << 10, true).unwrap(),
            AllreduceAlgo::RecursiveDoubling
        );
        assert_eq!(
            c.allreduce(4, 64 << 10, true).unwrap(),
            AllreduceAlgo::Rabenseifner
        );
        assert_eq!(
            c.allreduce(8, 1 << 20, true).unwrap(),
            AllreduceAlgo::Rabenseifner
        );
        assert_eq!(
            c.allreduce(8, 1 << 10, true).unwrap(),
            AllreduceAlgo::RecursiveDoubling
        );
        // At 3 ranks the ring avoids Rabenseifner's fold of a whole vector.
        assert_eq!(c.allreduce(3, 64 << 20, true).unwrap(), AllreduceAlgo::Ring);
        // Non-commutative operations never get the ring.
        for bytes in [8, 1 << 10, 1 << 20, 64 << 20] {
            for p in 2..20 {
                assert_ne!(c.allreduce(p, bytes, false).unwrap(), AllreduceAlgo::Ring);
            }
        }
    }

    #[test]
    fn selection_is_monotone_in_a_sensible_way() {
        let c = cfg(&[]);
        assert_eq!(c.bcast(8, 8).unwrap(), BcastAlgo::Binomial);
        assert_eq!(c.bcast(8, 8 << 20).unwrap(), BcastAlgo::ScatterAllgather);
        assert_eq!(c.allgather(4, 8).unwrap(), AllgatherAlgo::RecursiveDoubling);
        assert_eq!(c.allgather(6, 8).unwrap(), AllgatherAlgo::Bruck);
        assert_eq!(c.allgather(6, 4 << 20).unwrap(), AllgatherAlgo::Ring);
        assert_eq!(c.alltoall(8, 8).unwrap(), AlltoallAlgo::Linear);
        assert_eq!(c.alltoall(8, 1 << 20).unwrap(), AlltoallAlgo::Pairwise);
        assert_eq!(c.gather(8, 8, false).unwrap(), GatherAlgo::Binomial);
        assert_eq!(c.gather(8, 1 << 20, false).unwrap(), GatherAlgo::Linear);
        assert_eq!(
            c.reduce_scatter(8, 8 << 20, true).unwrap(),
            ReduceScatterAlgo::Ring
        );
        assert_eq!(
            c.reduce_scatter(8, 8 << 20, false).unwrap(),
            ReduceScatterAlgo::ReduceScatterv
        );
    }

    #[test]
    fn overrides_force_applicable_algorithms_and_reject_bad_names() {
        let c = cfg(&[
            ("RANKWIRE_ALLREDUCE_ALGO", "Ring"),
            ("RANKWIRE_ALLGATHER_ALGO", "recursive_doubling"),
            ("RANKWIRE_BCAST_ALGO", "scatter_allgather"),
            ("RANKWIRE_ALLTOALL_ALGO", "bogus"),
            ("RANKWIRE_SCATTER_ALGO", "binomial"),
        ]);
        assert_eq!(c.allreduce(4, 8, true).unwrap(), AllreduceAlgo::Ring);
        // Ring cannot run a non-commutative operation: the model's choice instead.
        assert_eq!(
            c.allreduce(4, 8, false).unwrap(),
            AllreduceAlgo::RecursiveDoubling
        );
        assert_eq!(
            c.allgather(8, 1 << 20).unwrap(),
            AllgatherAlgo::RecursiveDoubling
        );
        assert_ne!(
            c.allgather(6, 1 << 20).unwrap(),
            AllgatherAlgo::RecursiveDoubling
        );
        assert_eq!(c.bcast(2, 1).unwrap(), BcastAlgo::ScatterAllgather);
        assert_eq!(c.gather(8, 1, true).unwrap(), GatherAlgo::Binomial);
        // The scatter override leaves gather to the model (linear for large blocks).
        assert_eq!(c.gather(8, 1 << 20, false).unwrap(), GatherAlgo::Linear);
        let e = c.alltoall(4, 8).unwrap_err().to_string();
        assert!(
            e.contains("RANKWIRE_ALLTOALL_ALGO") && e.contains("pairwise, linear"),
            "{e}"
        );
        let auto = cfg(&[("RANKWIRE_BCAST_ALGO", "auto")]);
        assert_eq!(auto.bcast(8, 8).unwrap(), BcastAlgo::Binomial);
    }

    #[test]
    fn power_of_two_helpers() {
        assert_eq!(
            (1..=9).map(pof2_floor).collect::<Vec<_>>(),
            [1, 2, 2, 4, 4, 4, 4, 8, 8]
        );
        assert_eq!(
            (1..=9).map(ceil_log2).collect::<Vec<_>>(),
            [0, 1, 2, 2, 3, 3, 3, 3, 4]
        );
    }
}
