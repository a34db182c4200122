//! Nonblocking collectives progress while a rank waits on anything else (MPI 4.1 §2.9,
//! §6.12), through rwrun (rw-progressapp). Every run has a hard timeout (a missing
//! progress path shows as a hang) and checks that no process of the job is left.

use std::time::Duration;

use rankwire_tests::{binary, run_scenario};

fn app() -> String {
    binary("rw-progressapp").to_string_lossy().into_owned()
}

/// Default selection (shm) and TCP only.
const CONFIGS: &[&[(&str, &str)]] = &[&[], &[("RANKWIRE_TRANSPORTS", "tcp")]];

/// Rank 0 waits with `wait()` for a message rank 2 sends only after its `ibarrier`.
#[test]
fn ibarrier_then_wait_on_irecv_completes_at_4_ranks() {
    for env in CONFIGS {
        run_scenario(
            &app(),
            4,
            env,
            &["deadlock", "wait"],
            Duration::from_secs(60),
        );
    }
}

/// The same with a `test()` loop instead of `wait()`.
#[test]
fn ibarrier_then_test_loop_on_irecv_completes_at_4_ranks() {
    for env in CONFIGS {
        run_scenario(
            &app(),
            4,
            env,
            &["deadlock", "test"],
            Duration::from_secs(60),
        );
    }
}

/// ibarrier, iallreduce and ibcast mixed with point-to-point requests, completed in
/// every order through every completion call, at powers of two and other sizes.
#[test]
fn nonblocking_collectives_mixed_with_p2p_at_sizes_2_to_8() {
    for n in [2, 3, 4, 5, 8] {
        run_scenario(&app(), n, &[], &["mix"], Duration::from_secs(120));
    }
}

/// The mix over TCP (waits run full progress rounds there, not ring looks).
#[test]
fn nonblocking_collectives_mixed_with_p2p_over_tcp() {
    for n in [3, 4] {
        run_scenario(&app(), n, CONFIGS[1], &["mix"], Duration::from_secs(120));
    }
}
