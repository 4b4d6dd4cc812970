//! The benchmark's claim, checked on fixed seeds: on the same episodes (every fault
//! point, every provider), the ledger, with explicit or derived keys, never applies a
//! declared effect twice (a model repair in the same step is the same effect, answered
//! with a conflict) and never suppresses one (an intended new effect, made with an
//! explicit transition, is applied; no agent is told "done" for an effect that did not
//! happen), while blind retry does apply effects twice, repairs included, and the
//! provider-token-or-never baseline does suppress intended new effects (so the faults
//! bite). The full table comes from `effect-bench`; see `ledger_sim_tests::bench`. With
//! `MADSIM_TEST_CHECK_DETERMINISM` set, each run is made twice and every figure of every
//! effect must come out the same.

#![cfg(madsim)]

use ledger_sim_tests::actors::{KeyMode, Strategy};
use ledger_sim_tests::bench::metrics::{summarise, EffectResult, Summary};
use ledger_sim_tests::bench::plan::FaultPoint;
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

/// The sums of `results` at fault point `point`.
fn at(results: &[EffectResult], point: FaultPoint) -> Summary {
    summarise(results.iter().filter(|r| r.point == point))
}

#[test]
fn ledger_applies_no_effect_twice_and_suppresses_none_where_baselines_do() {
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
                "the ledger applied effects twice or suppressed one; replay: {}",
                replay(seed, strategy)
            );
            assert!(summary.effects > 0);
            let repair = at(&results, FaultPoint::ModelRepair);
            assert!(repair.effects > 0, "no model repair was judged");
            let unapplied: Vec<&str> = results
                .iter()
                .filter(|r| r.new_action && r.applied != 1)
                .map(|r| r.effect_id.as_str())
                .collect();
            assert!(
                unapplied.is_empty(),
                "intended new effects not applied exactly once: {unapplied:?}; replay: {}",
                replay(seed, strategy)
            );
            assert!(results.iter().any(|r| r.new_action));
        }
        let blind = run(seed, Strategy::BlindRetry);
        assert!(
            summarise(&blind).extra_applications > 0,
            "blind retry applied nothing twice: the faults did not bite; replay: {}",
            replay(seed, Strategy::BlindRetry)
        );
        assert!(
            at(&blind, FaultPoint::ModelRepair).extra_applications > 0,
            "blind retry applied no repair beside its original; replay: {}",
            replay(seed, Strategy::BlindRetry)
        );
        let baseline = run(seed, Strategy::TokenOrNever);
        assert!(
            at(&baseline, FaultPoint::IntendedNewEffect).false_dedup > 0,
            "provider tokens suppressed no intended new effect; replay: {}",
            replay(seed, Strategy::TokenOrNever)
        );
    }
}
