//! How this process was started, decided from its environment once at `init`.
//!
//! | environment | launch | wire-up |
//! |---|---|---|
//! | `RANKWIRE_RANK` set | [`Launch::Rwrun`] | `rwrun`'s key-value server ([`super::client`]) |
//! | `PMI_FD` set | [`Launch::Pmi`] | the PMI server on that descriptor ([`super::pmi`]) |
//! | `PMIX_NAMESPACE`, `PMIX_RANK` and a `PMIX_SERVER_URI*` set | [`Launch::Pmix`] | the PMIx server, through libpmix ([`super::pmix`]) |
//! | a Slurm step of more than one task (`SLURM_STEP_ID` set, `SLURM_STEP_NUM_TASKS` or `SLURM_NTASKS` > 1) without either | error | none: `srun --mpi=none` (Slurm's default) |
//! | none of these | [`Launch::Singleton`] | none: a world of 1 |
//!
//! `rwrun` inside an allocation starts its ranks with `srun`; they carry both the Slurm
//! and the `RANKWIRE_*` variables, and `RANKWIRE_RANK` wins. A batch script itself (Slurm
//! sets `SLURM_JOB_ID` but no `SLURM_STEP_ID` there) is not a step: a program run
//! directly from it is a singleton, as without Slurm.

/// Set at `init` when a resource manager's PMI or PMIx server started this process
/// (`srun`), so that error remedies name srun's tools instead of rwrun's.
static UNDER_RESOURCE_MANAGER: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Record how this process was started (called once by `init`).
pub(crate) fn note_launch(l: &Launch) {
    UNDER_RESOURCE_MANAGER.store(
        matches!(l, Launch::Pmi | Launch::Pmix),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Whether `init` found this process started by `srun` (PMI or PMIx), not by rwrun.
pub(crate) fn under_resource_manager() -> bool {
    UNDER_RESOURCE_MANAGER.load(std::sync::atomic::Ordering::Relaxed)
}

/// The wire-up this process must use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// Started by `rwrun` (or by `srun` on `rwrun`'s behalf).
    Rwrun,
    /// Started by a PMI server (`srun --mpi=pmi2`).
    Pmi,
    /// Started by a PMIx server (`srun --mpi=pmix`).
    Pmix,
    /// Started alone: a world of size 1.
    Singleton,
}

/// Decide the launch from the environment, read through `var`.
///
/// # Errors
/// A message for [`crate::Error::Bootstrap`] when the process is one task of a
/// multi-task Slurm step that offers no usable PMI: it names the task count and the fix
/// (`srun --mpi=pmi2` or `--mpi=pmix`, or `rwrun` inside the allocation), so that N tasks
/// never run as N
/// silent singletons.
pub fn detect(var: impl Fn(&str) -> Option<String>) -> Result<Launch, String> {
    if var(super::env::RANK).is_some() {
        return Ok(Launch::Rwrun);
    }
    if var(super::pmi::env::PMI_FD).is_some() {
        return Ok(Launch::Pmi);
    }
    if super::pmix::offered(&var) {
        return Ok(Launch::Pmix);
    }
    let step = var("SLURM_STEP_ID").or_else(|| var("SLURM_STEPID"));
    let tasks = ["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"]
        .iter()
        .find_map(|v| var(v).map(|s| (*v, s)));
    let (Some(step), Some((tasks_var, tasks_s))) = (step, tasks) else {
        return Ok(Launch::Singleton);
    };
    let Ok(tasks) = tasks_s.trim().parse::<u64>() else {
        return Err(format!(
            "this process runs in Slurm step {step} but {tasks_var}={tasks_s:?} is not a task count; \
             start the program with `srun --mpi=pmi2` or with `rwrun -n N` inside the allocation"
        ));
    };
    if tasks <= 1 {
        return Ok(Launch::Singleton);
    }
    let job = var("SLURM_JOB_ID").unwrap_or_else(|| "?".into());
    let task = var("SLURM_PROCID").unwrap_or_else(|| "?".into());
    let what = match var("SLURM_MPI_TYPE").as_deref() {
        Some(t) if t.starts_with("pmix") || var("PMIX_RANK").is_some() => format!(
            "srun's MPI plugin {t:?} set no complete PMIx environment (PMIX_NAMESPACE, \
             PMIX_RANK and PMIX_SERVER_URI* are needed)"
        ),
        Some(t) if t != "none" => {
            format!("srun's MPI plugin {t:?} gave it no PMI connection (PMI_FD is not set)")
        }
        _ => "srun gave it no PMI connection (PMI_FD is not set: srun ran with --mpi=none, \
              Slurm's default)"
            .to_string(),
    };
    Err(format!(
        "this process is task {task} of a {tasks}-task Slurm step (job {job}, step {step}) but \
         {what}; without a wire-up the tasks would run as {tasks} separate singletons. \
         Fix: start it with `srun --mpi=pmi2 ...` or `srun --mpi=pmix ...` (or set \
         MpiDefault=pmi2 in slurm.conf, or SLURM_MPI_TYPE=pmi2), or run `rwrun -n {tasks} \
         PROGRAM` inside the allocation"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> Result<Launch, String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        detect(|k| m.get(k).cloned())
    }

    const STEP4: &[(&str, &str)] = &[
        ("SLURM_JOB_ID", "18"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_PROCID", "2"),
    ];

    #[test]
    fn plain_process_is_a_singleton() {
        assert_eq!(with(&[]), Ok(Launch::Singleton));
    }

    #[test]
    fn rwrun_wins_over_slurm() {
        let mut v = STEP4.to_vec();
        v.push(("RANKWIRE_RANK", "2"));
        assert_eq!(with(&v), Ok(Launch::Rwrun));
        v.push(("PMI_FD", "11"));
        assert_eq!(with(&v), Ok(Launch::Rwrun));
    }

    #[test]
    fn pmi_fd_means_pmi() {
        let mut v = STEP4.to_vec();
        v.push(("PMI_FD", "11"));
        assert_eq!(with(&v), Ok(Launch::Pmi));
    }

    #[test]
    fn step_without_pmi_is_an_error_naming_the_fix() {
        let e = with(STEP4).unwrap_err();
        for want in [
            "task 2 of a 4-task Slurm step",
            "job 18",
            "--mpi=none",
            "4 separate singletons",
            "srun --mpi=pmi2",
            "rwrun -n 4",
        ] {
            assert!(e.contains(want), "{want:?} missing from: {e}");
        }
    }

    #[test]
    fn pmix_environment_means_pmix() {
        let mut v = STEP4.to_vec();
        v.extend([
            ("SLURM_MPI_TYPE", "pmix_v4"),
            ("PMIX_RANK", "2"),
            ("PMIX_NAMESPACE", "slurm.pmix.18.0"),
            ("PMIX_SERVER_URI41", "pmix-server.7;tcp4://127.0.0.1:4000"),
        ]);
        assert_eq!(with(&v), Ok(Launch::Pmix));
        // PMI_FD and rwrun win, as before.
        v.push(("PMI_FD", "11"));
        assert_eq!(with(&v), Ok(Launch::Pmi));
    }

    #[test]
    fn incomplete_pmix_environment_is_an_error_naming_what_is_missing() {
        let mut v = STEP4.to_vec();
        v.extend([("SLURM_MPI_TYPE", "pmix_v4"), ("PMIX_RANK", "2")]);
        let e = with(&v).unwrap_err();
        assert!(
            e.contains("\"pmix_v4\"")
                && e.contains("PMIX_SERVER_URI")
                && e.contains("srun --mpi=pmix"),
            "{e}"
        );
    }

    #[test]
    fn one_task_steps_and_batch_scripts_are_singletons() {
        let one = [
            ("SLURM_JOB_ID", "5"),
            ("SLURM_STEP_ID", "1"),
            ("SLURM_NTASKS", "1"),
        ];
        assert_eq!(with(&one), Ok(Launch::Singleton));
        // A batch script: a job of 4 tasks, but no step.
        let batch = [
            ("SLURM_JOB_ID", "5"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_PROCID", "0"),
        ];
        assert_eq!(with(&batch), Ok(Launch::Singleton));
        // Old spelling of the step variable, and only SLURM_NPROCS.
        let old = [("SLURM_STEPID", "0"), ("SLURM_NPROCS", "3")];
        assert!(with(&old).unwrap_err().contains("3-task Slurm step"));
    }

    #[test]
    fn malformed_task_count_is_an_error() {
        let v = [("SLURM_STEP_ID", "0"), ("SLURM_NTASKS", "four")];
        assert!(with(&v).unwrap_err().contains("SLURM_NTASKS=\"four\""));
    }
}
