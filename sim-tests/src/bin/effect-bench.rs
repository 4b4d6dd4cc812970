//! `effect-bench`: the effect-safety benchmark over many seeds. Prints the markdown table
//! and writes it with CSV and JSON into `--out` (default `sim-tests/results`).
//!
//! ```sh
//! RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=target-sim cargo run --release \
//!   -p ledger-sim-tests --bin effect-bench -- --seeds 100 --start 1 --jobs 2
//! ```
//!
//! `--strategies blind-retry,ledger-explicit-key` runs a subset. A failed run prints its
//! seed, strategy and the command that replays it. The baselines are expected to apply
//! effects twice or suppress intended ones; the ledger is not: after writing the table,
//! the run fails, naming each seed and its replay command, if a ledger strategy applied an
//! effect twice or suppressed an intended one.

#[cfg(madsim)]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(not(madsim))]
fn main() {
    eprintln!("effect-bench runs under the simulator: build it with RUSTFLAGS=\"--cfg madsim\"");
    std::process::exit(2);
}

#[cfg(madsim)]
mod cli {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::process::ExitCode;
    use std::time::Instant;

    use clap::Parser;

    use ledger_sim_tests::actors::Strategy;
    use ledger_sim_tests::bench::driver::{machine, run_all};
    use ledger_sim_tests::bench::metrics::{summarise, EffectResult};
    use ledger_sim_tests::bench::report::{self, Provenance};
    use ledger_sim_tests::bench::{opcount, run_seed};

    /// The effect-safety benchmark over many seeds.
    #[derive(Debug, Parser)]
    #[command(name = "effect-bench", version)]
    struct Args {
        /// How many seeds.
        #[arg(long, default_value_t = 20)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 1)]
        start: u64,
        /// Runs at once.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// The strategies to run, comma-separated (every one by default).
        #[arg(long, value_delimiter = ',', value_parser = strategy, value_name = "NAME,...")]
        strategies: Vec<Strategy>,
        /// Where the table (markdown, CSV, JSON) is written.
        #[arg(long, default_value = "sim-tests/results", value_name = "DIR")]
        out: PathBuf,
    }

    fn strategy(name: &str) -> Result<Strategy, String> {
        Strategy::parse(name).ok_or(format!("no strategy {name}"))
    }

    fn replay(seed: u64, strategy: Strategy) -> String {
        format!(
            "RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target-sim cargo run --release \
             -p ledger-sim-tests --bin effect-bench -- --seeds 1 --start {seed} \
             --strategies {} --jobs 1 --out /tmp/effect-bench-replay",
            strategy.name()
        )
    }

    pub fn main() -> ExitCode {
        let mut args = Args::parse();
        if args.strategies.is_empty() {
            args.strategies = Strategy::ALL.to_vec();
        }
        opcount::install();
        let seeds: Vec<u64> = (args.start..args.start + args.seeds).collect();
        let jobs: Vec<(u64, Strategy)> = seeds
            .iter()
            .flat_map(|seed| args.strategies.iter().map(move |s| (*seed, *s)))
            .collect();
        let started = Instant::now();
        let outputs = run_all(
            jobs.clone(),
            args.jobs,
            |(seed, strategy)| run_seed(*seed, *strategy),
            |(seed, strategy), output, wall| match output {
                Ok(results) => eprintln!(
                    "seed={seed} strategy={} ok effects={} wall={wall:.1}s",
                    strategy.name(),
                    results.len()
                ),
                Err(e) => eprintln!(
                    "seed={seed} strategy={} FAILED: {e}\nreplay: {}",
                    strategy.name(),
                    replay(*seed, *strategy)
                ),
            },
        );
        let mut results = Vec::new();
        let mut failed = Vec::new();
        for ((seed, strategy), output) in jobs.into_iter().zip(outputs) {
            match output {
                Ok(r) => results.extend(r),
                Err(_) => failed.push(replay(seed, strategy)),
            }
        }
        if !failed.is_empty() {
            eprintln!(
                "{} runs failed; replay with:\n{}",
                failed.len(),
                failed.join("\n")
            );
            return ExitCode::FAILURE;
        }
        let provenance = Provenance {
            seeds,
            command: format!(
                "RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target-sim cargo run --release \
                 -p ledger-sim-tests --bin effect-bench -- --seeds {} --start {} --jobs {}",
                args.seeds, args.start, args.jobs
            ),
            machine: machine(),
            wall_s: started.elapsed().as_secs_f64(),
        };
        let markdown = report::markdown(&results, &provenance);
        print!("{markdown}");
        let written = std::fs::create_dir_all(&args.out).and_then(|()| {
            std::fs::write(args.out.join("bench.md"), &markdown)?;
            std::fs::write(args.out.join("bench.csv"), report::csv(&results))?;
            std::fs::write(
                args.out.join("bench.json"),
                report::json(&results, &provenance),
            )
        });
        if let Err(e) = written {
            eprintln!("effect-bench: writing {}: {e}", args.out.display());
            return ExitCode::FAILURE;
        }
        let unsafe_runs = unsafe_ledger_runs(&results);
        if !unsafe_runs.is_empty() {
            eprintln!(
                "the ledger applied an effect twice or suppressed an intended one in {} runs; \
                 replay with:\n{}",
                unsafe_runs.len(),
                unsafe_runs.join("\n")
            );
            return ExitCode::FAILURE;
        }
        ExitCode::SUCCESS
    }

    /// The replay commands of the ledger's runs (seed and strategy) that applied an effect
    /// twice or suppressed an intended one.
    fn unsafe_ledger_runs(results: &[EffectResult]) -> Vec<String> {
        let mut by_run: BTreeMap<(u64, Strategy), Vec<&EffectResult>> = BTreeMap::new();
        for r in results
            .iter()
            .filter(|r| matches!(r.strategy, Strategy::Ledger(_)))
        {
            by_run.entry((r.seed, r.strategy)).or_default().push(r);
        }
        let mut runs = Vec::new();
        for ((seed, strategy), run) in by_run {
            let summary = summarise(run);
            if summary.extra_applications > 0 || summary.false_dedup > 0 {
                eprintln!(
                    "seed={seed} strategy={}: {} extra applications, {} suppressed",
                    strategy.name(),
                    summary.extra_applications,
                    summary.false_dedup
                );
                runs.push(replay(seed, strategy));
            }
        }
        runs
    }
}
