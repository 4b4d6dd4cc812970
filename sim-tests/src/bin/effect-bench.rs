//! `effect-bench`: the effect-safety benchmark over many seeds. Prints the markdown table
//! and writes it with CSV and JSON into `--out` (default `sim-tests/results`).
//!
//! ```sh
//! RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=target-sim cargo run --release \
//!   -p ledger-sim-tests --bin effect-bench -- --seeds 100 --start 1 --jobs 2
//! ```
//!
//! `--strategies blind-retry,ledger-explicit-key` runs a subset. A failed run prints its
//! seed, strategy and the command that replays it.

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
    use std::path::PathBuf;
    use std::process::ExitCode;
    use std::time::Instant;

    use ledger_sim_tests::actors::Strategy;
    use ledger_sim_tests::bench::driver::{machine, run_all};
    use ledger_sim_tests::bench::report::{self, Provenance};
    use ledger_sim_tests::bench::{opcount, run_seed};

    struct Args {
        seeds: u64,
        start: u64,
        jobs: usize,
        strategies: Vec<Strategy>,
        out: PathBuf,
    }

    fn parse() -> Result<Args, String> {
        let mut args = Args {
            seeds: 20,
            start: 1,
            jobs: 2,
            strategies: Strategy::ALL.to_vec(),
            out: PathBuf::from("sim-tests/results"),
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let mut value = || it.next().ok_or(format!("{flag} needs a value"));
            let number = |v: String| v.parse::<u64>().map_err(|e| format!("{v}: {e}"));
            match flag.as_str() {
                "--seeds" => args.seeds = number(value()?)?,
                "--start" => args.start = number(value()?)?,
                "--jobs" => args.jobs = number(value()?)? as usize,
                "--out" => args.out = PathBuf::from(value()?),
                "--strategies" => {
                    args.strategies = value()?
                        .split(',')
                        .map(|s| Strategy::parse(s).ok_or(format!("no strategy {s}")))
                        .collect::<Result<_, _>>()?;
                }
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(args)
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
        let args = match parse() {
            Ok(args) => args,
            Err(e) => {
                eprintln!("effect-bench: {e}");
                return ExitCode::from(2);
            }
        };
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
        ExitCode::SUCCESS
    }
}
