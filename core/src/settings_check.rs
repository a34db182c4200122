//! The check of every `RANKWIRE_*` setting at init, on every rank, before any
//! communication (the table and the checks are [`crate::settings`]). `rwrun` makes the
//! same check before it starts any rank; this one covers ranks started another way
//! (`srun`, by hand) and variables set in a rank's own command line.

use crate::error::{Error, Result};
use crate::settings::{self, Reader};
use rankwire_transports::ConfigError;

/// Check the settings of this process.
///
/// # Errors
/// [`Error::Usage`] naming every invalid variable, its value and the valid values.
pub(crate) fn at_init() -> Result<()> {
    let vars = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v)));
    let vars: Vec<(String, String)> = vars
        .map(|(k, v)| (k, v.to_string_lossy().into_owned()))
        .collect();
    let report = settings::check_env(vars, |r| matches!(r, Reader::Rank | Reader::Both));
    let mut errors: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    if let Some(e) = log_filter_error(settings::raw("RANKWIRE_LOG").as_deref()) {
        errors.push(e.to_string());
    }
    // Under rwrun (RANKWIRE_RANK set) rwrun has warned about unknown names once; under
    // srun only the first task warns.
    let first_task = ["PMI_RANK", "SLURM_PROCID"]
        .iter()
        .all(|k| std::env::var(k).map_or(true, |v| v.trim() == "0"));
    if std::env::var_os(crate::bootstrap::env::RANK).is_none() && first_task {
        for w in &report.warnings {
            tracing::warn!("{w}");
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::usage(format!(
            "{} (checked at init, before any communication)",
            errors.join("; ")
        )))
    }
}

/// `RANKWIRE_LOG` when it is not a tracing filter.
fn log_filter_error(v: Option<&str>) -> Option<ConfigError> {
    let v = v.filter(|v| !v.trim().is_empty())?;
    tracing_subscriber::EnvFilter::try_new(v).err()?;
    Some(ConfigError {
        var: "RANKWIRE_LOG",
        value: v.to_string(),
        expected: settings::find("RANKWIRE_LOG").map_or("a tracing filter", |s| s.valid),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::select::{
        Algo, AllgatherAlgo, AllreduceAlgo, AlltoallAlgo, BarrierAlgo, BcastAlgo, GatherAlgo,
        ReduceAlgo, ReduceScatterAlgo,
    };
    use settings::algos;

    fn names<A: Algo>() -> Vec<&'static str> {
        std::iter::once("auto")
            .chain(A::NAMES.iter().map(|(n, _)| *n))
            .collect()
    }

    /// The table's algorithm names are those of the algorithm enums.
    #[test]
    fn algorithm_names_match_the_enums() {
        assert_eq!(algos::ALLREDUCE, names::<AllreduceAlgo>());
        assert_eq!(algos::BCAST, names::<BcastAlgo>());
        assert_eq!(algos::BARRIER, names::<BarrierAlgo>());
        assert_eq!(algos::REDUCE, names::<ReduceAlgo>());
        assert_eq!(algos::ALLGATHER, names::<AllgatherAlgo>());
        assert_eq!(algos::ALLTOALL, names::<AlltoallAlgo>());
        assert_eq!(algos::GATHER, names::<GatherAlgo>());
        assert_eq!(algos::REDUCE_SCATTER, names::<ReduceScatterAlgo>());
        for var in crate::coll::select::ALGO_VARS {
            assert!(settings::find(var).is_some(), "{var}");
        }
    }

    /// The defaults the table states are those of the library.
    #[test]
    fn defaults_match_the_library() {
        let d = |n: &str| settings::find(n).unwrap().default;
        let secs = crate::bootstrap::client::DEFAULT_TIMEOUT
            .as_secs()
            .to_string();
        assert_eq!(d("RANKWIRE_BOOTSTRAP_TIMEOUT"), secs);
        assert_eq!(d("RANKWIRE_PROGRESS"), "auto");
        assert!(d("RANKWIRE_WATCHDOG").starts_with('0'));
    }

    #[test]
    fn a_bad_log_filter_is_named() {
        assert!(log_filter_error(Some("debug")).is_none());
        assert!(log_filter_error(Some("rankwire=trace,warn")).is_none());
        assert!(log_filter_error(None).is_none());
        let e = log_filter_error(Some("rankwire=loud")).unwrap().to_string();
        assert!(e.contains("RANKWIRE_LOG=\"rankwire=loud\"") && e.contains("tracing filter"));
    }
}
