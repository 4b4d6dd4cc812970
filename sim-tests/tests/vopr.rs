//! Randomized runs: each seed decides the cluster (3 or 5 nodes, a spare or not), the
//! workload (contending ledger clients; agents with retry policies on stateless
//! `EffectRunner` tool servers, against strong and weak providers, meeting boundary
//! faults) and the schedule of cluster faults (partitions of every shape, loss and
//! delay, crashes and power failures, clock jumps, a membership change under load), and
//! every checker runs at the end. See `ledger_sim_tests::vopr`.
//!
//! CI runs the fixed seeds and a random batch (`LEDGER_SIM_RANDOM_SEEDS`); the long sweep
//! is `sim-tests/run.sh vopr-sweep N`.

#![cfg(madsim)]

use ledger_sim_tests::seeds;
use ledger_sim_tests::vopr::{scenario, SCENARIO};

#[test]
fn random_faults_and_workloads_keep_every_invariant() {
    seeds::run(&SCENARIO, scenario);
}
