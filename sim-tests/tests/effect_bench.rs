//! The benchmark's claim, checked on fixed seeds: on the same episodes (every fault
//! point, every provider), the ledger, with explicit or derived keys, never applies an
//! effect beyond its declared multiplicity and never tells an agent "done" for an effect
//! that did not happen, while blind retry does apply effects twice (so the faults bite).
//! The full table comes from `effect-bench`; see `ledger_sim_tests::bench`. With
//! `MADSIM_TEST_CHECK_DETERMINISM` set, each run is made twice and every figure of every
//! effect must come out the same.

#![cfg(madsim)]

use ledger_sim_tests::actors::{KeyMode, Strategy};
use ledger_sim_tests::bench::metrics::{summarise, EffectResult};
use ledger_sim_tests::bench::run_seed;

const SEEDS: [u64; 1] = [1];

/// Runs `strategy` on `seed`, twice when determinism is checked.
fn run(seed: u64, strategy: Strategy) -> Vec<EffectResult> {
    let results = run_seed(seed, strategy)
        .unwrap_or_else(|e| panic!("{e}\nreplay: {}", replay(seed, strategy)));
    if std::env::var("MADSIM_TEST_CHECK_DETERMINISM").is_ok() {
        let again = run_seed(seed, strategy).expect("the second run");
        assert_eq!(
            format!("{results:?}"),
            format!("{again:?}"),
            "two runs of seed {seed} under {} differ",
            strategy.name()
        );
        println!("seed={seed} {}: determinism checked", strategy.name());
    }
    results
}

fn replay(seed: u64, strategy: Strategy) -> String {
    format!(
        "RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target-sim cargo run -p ledger-sim-tests \
         --bin effect-bench -- --seeds 1 --start {seed} --strategies {} --jobs 1 \
         --out /tmp/effect-bench-replay",
        strategy.name()
    )
}

#[test]
fn ledger_applies_no_effect_twice_and_fakes_no_success_where_blind_retry_duplicates() {
    ledger_sim_tests::init_logging();
    for seed in SEEDS {
        for mode in [KeyMode::Explicit, KeyMode::Derived] {
            let strategy = Strategy::Ledger(mode);
            let results = run(seed, strategy);
            let summary = summarise(&results);
            println!("seed={seed} {}: {summary:?}", strategy.name());
            assert_eq!(
                (summary.extra_applications, summary.false_dedup),
                (0, 0),
                "the ledger applied effects twice or faked success; replay: {}",
                replay(seed, strategy)
            );
            assert!(summary.effects > 0);
        }
        let blind = run(seed, Strategy::BlindRetry);
        let summary = summarise(&blind);
        assert!(
            summary.extra_applications > 0,
            "blind retry applied nothing twice: the faults did not bite; replay: {}",
            replay(seed, Strategy::BlindRetry)
        );
    }
}
