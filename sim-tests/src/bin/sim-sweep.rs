//! `sim-sweep`: the randomized simulation (`ledger_sim_tests::vopr`) over many seeds, a
//! few at a time; prints one line per seed and a summary table, and writes the table as
//! markdown and JSON into `--out` (default `sim-tests/results`).
//!
//! ```sh
//! RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR=target-sim cargo run --release \
//!   -p ledger-sim-tests --bin sim-sweep -- --seeds 10000 --start 1 --jobs 2
//! ```
//!
//! Every seed runs, failed or not; each failure prints the command that replays it, and
//! the exit status says whether any failed. Seeds run in worker processes of
//! [`CHUNK`](cli::CHUNK) seeds each (the same binary with `--worker`, printing one JSON
//! line per seed), because a simulated runtime does not give back all of its memory when
//! it ends: ten thousand runs in one process outgrow a 24 GiB machine.

#[cfg(madsim)]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(not(madsim))]
fn main() {
    eprintln!("sim-sweep runs under the simulator: build it with RUSTFLAGS=\"--cfg madsim\"");
    std::process::exit(2);
}

#[cfg(madsim)]
mod cli {
    use std::collections::BTreeMap;
    use std::io::{BufRead, BufReader, Write};
    use std::path::PathBuf;
    use std::process::{Command, ExitCode, Stdio};
    use std::time::Instant;

    use clap::Parser;
    use serde_json::{json, Value};

    use ledger_sim_tests::bench::driver::{machine, run_all};
    use ledger_sim_tests::seeds::{run_isolated, RunOutcome};
    use ledger_sim_tests::sweep::{self, SeedResult};
    use ledger_sim_tests::vopr::{scenario, SCENARIO};

    /// Seeds per worker process.
    pub const CHUNK: u64 = 500;

    /// The randomized simulation over many seeds, a few at a time.
    #[derive(Debug, Parser)]
    #[command(name = "sim-sweep", version)]
    struct Args {
        /// How many seeds.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 1)]
        start: u64,
        /// Worker processes at once.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Where the summary (markdown and JSON) is written.
        #[arg(long, default_value = "sim-tests/results", value_name = "DIR")]
        out: PathBuf,
        /// Run the seeds in this process, one JSON line each (what the sweep starts).
        #[arg(long, hide = true)]
        worker: bool,
    }

    pub fn main() -> ExitCode {
        let args = Args::parse();
        ledger_sim_tests::init_logging();
        if args.worker {
            worker(&args);
            return ExitCode::SUCCESS;
        }
        let started = Instant::now();
        let mut results = Vec::new();
        let end = args.start + args.seeds;
        let mut chunk_start = args.start;
        while chunk_start < end {
            let count = CHUNK.min(end - chunk_start);
            results.extend(run_chunk(chunk_start, count, args.jobs));
            chunk_start += count;
        }
        let command = format!(
            "RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target-sim cargo run --release \
             -p ledger-sim-tests --bin sim-sweep -- --seeds {} --start {} --jobs {}",
            args.seeds, args.start, args.jobs
        );
        let summary = sweep::Summary::of(&results);
        let wall_s = started.elapsed().as_secs_f64();
        let markdown = summary.markdown(&command, &machine(), wall_s, &SCENARIO);
        print!("{markdown}");
        let written = std::fs::create_dir_all(&args.out).and_then(|()| {
            std::fs::write(args.out.join("sweep.md"), &markdown)?;
            std::fs::write(
                args.out.join("sweep.json"),
                summary.json(&command, &machine(), wall_s),
            )
        });
        if let Err(e) = written {
            eprintln!("sim-sweep: writing {}: {e}", args.out.display());
            return ExitCode::FAILURE;
        }
        if summary.failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }

    /// Runs seeds `start..start + count` in a worker process and collects what it prints;
    /// a seed the worker never reported (it died) counts as failed.
    fn run_chunk(start: u64, count: u64, jobs: usize) -> Vec<SeedResult> {
        let mut reported: BTreeMap<u64, SeedResult> = BTreeMap::new();
        let spawned = std::env::current_exe().and_then(|exe| {
            Command::new(exe)
                .args(["--worker", "--seeds", &count.to_string()])
                .args(["--start", &start.to_string(), "--jobs", &jobs.to_string()])
                .stdout(Stdio::piped())
                .spawn()
        });
        let status = match spawned {
            Ok(mut child) => {
                let stdout = child.stdout.take().expect("piped stdout");
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(result) = parse_line(&line) {
                        progress(&result);
                        reported.insert(result.seed, result);
                    }
                }
                child
                    .wait()
                    .map_or_else(|e| e.to_string(), |s| s.to_string())
            }
            Err(e) => format!("could not start: {e}"),
        };
        (start..start + count)
            .map(|seed| {
                reported.remove(&seed).unwrap_or_else(|| {
                    let result = SeedResult {
                        seed,
                        wall_s: 0.0,
                        outcome: Err(format!("the worker process running it ended ({status})")),
                    };
                    progress(&result);
                    result
                })
            })
            .collect()
    }

    fn progress(result: &SeedResult) {
        match &result.outcome {
            Ok(o) => eprintln!(
                "seed={} ok wall={:.1}s {}",
                result.seed, result.wall_s, o.summary
            ),
            Err(e) => eprintln!(
                "seed={} FAILED: {e}\nreplay: {}",
                result.seed,
                SCENARIO.replay_command(result.seed)
            ),
        }
    }

    /// Runs its seeds and prints one JSON line per seed as each ends.
    fn worker(args: &Args) {
        let seeds: Vec<u64> = (args.start..args.start + args.seeds).collect();
        run_all(
            seeds,
            args.jobs,
            |seed| {
                let begun = Instant::now();
                let outcome: Result<RunOutcome, String> = run_isolated(*seed, scenario);
                let line = match &outcome {
                    Ok(o) => json!({
                        "seed": seed,
                        "wall_s": begun.elapsed().as_secs_f64(),
                        "summary": o.summary,
                        "metrics": o.metrics,
                    }),
                    Err(e) => json!({
                        "seed": seed,
                        "wall_s": begun.elapsed().as_secs_f64(),
                        "failure": e,
                    }),
                };
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            },
            |_, (), _| {},
        );
    }

    fn parse_line(line: &str) -> Option<SeedResult> {
        let value: Value = serde_json::from_str(line).ok()?;
        let seed = value["seed"].as_u64()?;
        let wall_s = value["wall_s"].as_f64().unwrap_or(0.0);
        let outcome = match value["failure"].as_str() {
            Some(failure) => Err(failure.to_owned()),
            None => Ok(RunOutcome {
                summary: value["summary"].as_str().unwrap_or_default().to_owned(),
                metrics: serde_json::from_value(value["metrics"].clone()).ok()?,
                ..RunOutcome::default()
            }),
        };
        Some(SeedResult {
            seed,
            wall_s,
            outcome,
        })
    }
}
