//! Deterministic simulation of the effect ledger under madsim: the real node and client
//! code on a simulated network, disk and clock, with partitions, crashes, power failures
//! and clock jumps, every run decided and replayable by one seed.
//!
//! The crate is empty unless built with `RUSTFLAGS="--cfg madsim"` (use its own target
//! dir, e.g. `CARGO_TARGET_DIR=target-sim`, so the simulation build never compiles
//! RocksDB and never invalidates the normal one). Scenarios are the integration tests
//! under `tests/`, one per file so each runs in its own process; `run.sh` has the exact
//! commands (fixed seeds and a random batch, determinism check, seed sweeps, benchmark).
//!
//! Map of the modules:
//! - [`cluster`]: the harness: ledger nodes as simulated machines with disks and clocks of
//!   their own that survive them, client machines, faults (crash, power failure,
//!   isolation, partitions both ways and one way, a wall clock stepped or drifting) and
//!   membership change.
//! - [`fixtures`]: addresses, keys, the tenant, tools and node configuration.
//! - [`workload`]: clients that drive the ledger call by call (claim, dispatch, report,
//!   reconcile, vanish mid-dispatch), recorded for the linearizability checker.
//! - [`runner`]: tool-server instances built on the client library's `EffectRunner`.
//! - [`provider`]: the simulated provider of the workload clients, their ground truth.
//! - [`world`]: providers with strong and weak contracts (keyed within a horizon, append,
//!   send, create without a key), each keeping its state as the ground truth.
//! - [`actors`]: agents with retry policies, stateless tool-server instances (the ledger
//!   through `EffectRunner`, or a baseline strategy), and boundary faults; [`fleet`]:
//!   agents on `EffectRunner` a scenario runs beside its workload, judged at its end.
//! - [`history`]: every answer clients received (the acknowledged transitions), and the
//!   operation log; [`linearize`]: the per-effect linearizability checker.
//! - [`replica`]: one node's applied ledger read directly.
//! - [`check`]: the oracle's checkers; [`sampler`]: properties over time;
//!   [`retention`]: what garbage collection did, index by index.
//! - [`scenario`]: the common skeleton of a run and its final verification.
//! - [`vopr`]: the randomized runs: one seed decides cluster, workload and faults.
//! - [`bench`]: the effect-safety benchmark: fault points, strategies, metrics, report.
//! - [`seeds`]: the seed driver: fixed and random seeds, replay, sweep, determinism check;
//!   [`sweep`]: the summary table of a long sweep.
//! - [`trace`], [`wait`]: the run's timestamped trace; bounded waiting.
#![cfg(madsim)]

pub mod actors;
pub mod bench;
pub mod check;
pub mod cluster;
pub mod fixtures;
pub mod fleet;
pub mod history;
pub mod linearize;
pub mod provider;
pub mod replica;
pub mod retention;
pub mod runner;
pub mod sampler;
pub mod scenario;
pub mod seeds;
pub mod sweep;
pub mod trace;
pub mod vopr;
pub mod wait;
pub mod workload;
pub mod world;

use std::time::Duration;

/// Simulated time since the current run started (clock jumps included).
pub fn sim_elapsed() -> Duration {
    madsim::time::TimeHandle::current().elapsed()
}

/// FNV-1a, 64 bits: a stable hash for fingerprints and snapshot comparison (std's hasher
/// is not guaranteed stable across releases).
pub fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Logs to the test output with `RUST_LOG`'s filter (errors only by default). Safe to
/// call more than once.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}
