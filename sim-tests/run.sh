#!/usr/bin/env bash
# Deterministic simulation tests of the effect ledger (madsim). Run from anywhere.
#
#   sim-tests/run.sh                  every scenario on its fixed seeds plus a random batch
#                                     (LEDGER_SIM_RANDOM_SEEDS per scenario, default 2;
#                                     printed, and a failure prints its replay command):
#                                     what CI runs
#   sim-tests/run.sh check            a sample of seeds (the first 3 fixed ones of each
#                                     scenario) with MADSIM_TEST_CHECK_DETERMINISM: each seed
#                                     runs three times in one process and must draw the same
#                                     random numbers and end in the same ledger and trace;
#                                     the benchmark test runs its strategies twice and
#                                     compares every figure
#   sim-tests/run.sh sweep N [START]  every scenario on N seeds from START (default 1):
#                                     all seeds run, one line each and a summary per scenario
#   sim-tests/run.sh vopr-sweep N [START] [JOBS]
#                                     the randomized simulation on N seeds (release build,
#                                     JOBS at a time, default 2); prints and writes the
#                                     summary table to sim-tests/results/sweep.{md,json}
#   sim-tests/run.sh bench N [START] [JOBS]
#                                     the effect-safety benchmark on N seeds (release build);
#                                     prints and writes sim-tests/results/bench.{md,csv,json}
#   sim-tests/run.sh replay TEST SEED one scenario (test file name, e.g. leader_isolation or
#                                     vopr) on one seed, with its trace; RUST_LOG=info for logs
#   sim-tests/run.sh known-bugs       the regression tests of bugs not fixed yet (ignored by
#                                     default; each fails until its fix lands)
#   sim-tests/run.sh lint             rustfmt check and clippy -D warnings in the sim build
#
# The simulation build has its own target dir (CARGO_TARGET_DIR, default target-sim) so it
# never compiles RocksDB and never invalidates the normal build. Each scenario is its own
# test binary, and nextest (used when installed) runs each test in its own process, so
# process-global state cannot leak between scenarios. A failing seed prints the exact
# command that replays it. MADSIM_TEST_TIME_LIMIT=<seconds> bounds simulated time per run
# (default 900).
set -euo pipefail
cd "$(dirname "$0")/.."

export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }--cfg madsim"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target-sim}"

has_nextest() { cargo nextest --version >/dev/null 2>&1; }

run_tests() {
  if has_nextest; then
    cargo nextest run -p ledger-sim-tests --no-fail-fast "$@"
  else
    cargo test -p ledger-sim-tests --no-fail-fast -- "$@"
  fi
}

case "${1:-}" in
  "")
    LEDGER_SIM_RANDOM_SEEDS="${LEDGER_SIM_RANDOM_SEEDS:-2}" run_tests
    ;;
  check)
    MADSIM_TEST_CHECK_DETERMINISM=1 run_tests
    ;;
  sweep)
    count=${2:?usage: run.sh sweep N [START]}
    LEDGER_SIM_SEEDS="$count" LEDGER_SIM_SEED_START="${3:-1}" run_tests --no-capture
    ;;
  vopr-sweep)
    count=${2:?usage: run.sh vopr-sweep N [START] [JOBS]}
    cargo run --release -p ledger-sim-tests --bin sim-sweep -- \
      --seeds "$count" --start "${3:-1}" --jobs "${4:-2}"
    ;;
  bench)
    count=${2:?usage: run.sh bench N [START] [JOBS]}
    cargo run --release -p ledger-sim-tests --bin effect-bench -- \
      --seeds "$count" --start "${3:-1}" --jobs "${4:-2}"
    ;;
  replay)
    test=${2:?usage: run.sh replay TEST SEED}
    seed=${3:?usage: run.sh replay TEST SEED}
    MADSIM_TEST_SEED="$seed" cargo test -p ledger-sim-tests --test "$test" -- --nocapture
    ;;
  known-bugs)
    if has_nextest; then
      cargo nextest run -p ledger-sim-tests --no-fail-fast --run-ignored only
    else
      cargo test -p ledger-sim-tests --no-fail-fast -- --ignored
    fi
    ;;
  lint)
    cargo fmt -p ledger-sim-tests --check
    cargo clippy -p ledger-sim-tests --all-targets -- -D warnings
    ;;
  *)
    sed -n '2,34p' "$0"
    exit 2
    ;;
esac
