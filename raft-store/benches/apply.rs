//! What a node spends applying claims and reports, alone: the shipped state machine
//! (`LedgerStateMachine` on RocksDB, through openraft's `RaftStateMachine::apply`) fed
//! the entries a loaded cluster commits, with no network, Raft log or gRPC around it.
//! Beside it, the same commands on the core ledger in memory (`Ledger<MemStore>`): the
//! ledger's own logic, without storage. A whole-cluster benchmark on a 2-core machine
//! varies by 10 to 20% from run to run; this one runs on one core and resolves changes
//! to the apply path of a few percent.
//!
//! ```sh
//! cargo bench -p ledger-raft-store --bench apply
//! cargo bench -p ledger-raft-store --bench apply -- --effects 200000 --retained 0,1000000
//! ```
//!
//! Each entry carries the claims of new effects and the reports of the previous entry's
//! claims (`--per-entry` commands in all, 64 by default: what batches averaged in the
//! cluster benchmark), every effect of tool `pay/refund` (keyed idempotent) of tenant
//! `acme` as `ledger-load` makes them, keyed as its 256 clients key them
//! (`--key-streams`: where an effect's keys fall in the memtable weighs on what its
//! writes cost). For each `--retained` size the ledger is first
//! filled with that many committed effects, then `--effects` more are applied in
//! `--rounds` rounds, each timed alone. CPU time is the whole process's (RocksDB's flush
//! and compaction threads included), from `getrusage`. The run fails if any effect does
//! not end committed, so a refused command cannot pass for a fast one.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use futures::stream;
use ledger_core::{
    Authority, Caller, ClaimOutcome, Command, CommandBody, Declaration, EffectKey, EffectState,
    Ledger, Outcome, ReplayClass, Report, Stamp, TenantSettings, ToolName, ToolPolicy, ToolRef,
};
use ledger_raft_store::types::{Entry, LogId};
use ledger_raft_store::{
    DiskRef, LedgerRequest, LedgerStateMachine, RocksDisk, RocksOptions, TypeConfig,
};
use openraft::entry::RaftEntry;
use openraft::storage::RaftStateMachine;
use openraft::vote::RaftLeaderIdExt;
use openraft::RaftTypeConfig;

const TENANT: &str = "acme";
/// Ledger time of the first entry; each entry is 1 ms later.
const START_MS: u64 = 1_700_000_000_000;

/// Largest `--*-mib` accepted: 1 TiB, the node's own limit on either budget.
const MIB_MAX: u64 = 1 << 20;

/// Apply claims and reports on the shipped state machine (RocksDB) and on the core ledger
/// in memory; print a table of the time per effect.
#[derive(Debug, Parser)]
struct Options {
    /// Effects measured for each size of `--retained`.
    #[arg(long, default_value_t = 100_000)]
    effects: u64,
    /// Commands per entry (claims of new effects and reports of the entry before's).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(2..))]
    per_entry: u64,
    /// Rounds the effects are measured in, each timed alone.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Effects are keyed as this many `ledger-load` clients key them, each client its
    /// own numbered sequence (see [`Keys`]); 1 makes every key follow the one before.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    key_streams: u64,
    /// Committed effects applied first, untimed: one row per size.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    retained: Vec<u64>,
    /// RocksDB's memtables, all column families together, in MiB (`[rocksdb]
    /// write_buffer_bytes`); the node's default when absent.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MIB_MAX))]
    write_buffer_mib: Option<u64>,
    /// RocksDB's block cache in MiB (`[rocksdb] block_cache_bytes`); the node's default
    /// when absent.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MIB_MAX))]
    block_cache_mib: Option<u64>,
    /// Passed by `cargo bench` to every benchmark binary.
    #[arg(long, hide = true)]
    bench: bool,
}

fn operator(id: String, body: CommandBody) -> Command {
    Command {
        command_id: id,
        caller: Caller::Operator,
        body,
    }
}

fn tenant(id: String, body: CommandBody) -> Command {
    Command {
        command_id: id,
        caller: Caller::Tenant(TENANT.into()),
        body,
    }
}

/// The tenant and the tool, as `deploy/cluster.sh` configures them.
fn setup() -> Vec<Command> {
    let policy = ToolPolicy {
        provider_horizon_ms: 86_400_000,
        ..ToolPolicy::for_class(ReplayClass::KeyedIdempotent)
    };
    vec![
        operator(
            "setup-tenant".into(),
            CommandBody::PutTenant {
                tenant: TENANT.into(),
                // The default quotas (a million records, 1 GiB) would refuse the larger
                // `--retained` sizes.
                settings: TenantSettings {
                    live_records_max: 1 << 40,
                    stored_bytes_max: 1 << 50,
                    ..TenantSettings::default()
                },
            },
        ),
        operator(
            "setup-tool".into(),
            CommandBody::PutToolPolicy {
                tenant: TENANT.into(),
                tool: ToolName {
                    provider: "pay".into(),
                    name: "refund".into(),
                },
                policy,
            },
        ),
    ]
}

/// How effect keys are made: as `ledger-load`'s clients make them, each client its own
/// numbered sequence, so that the records, command ids and indexes are written where a
/// loaded cluster writes them. With one stream every key follows the one before it;
/// with 256 (`ledger-load`'s clients in the benchmark table) consecutive effects land
/// far apart in every table keyed by effect, as they do on a cluster.
#[derive(Debug, Clone, Copy)]
struct Keys {
    streams: u64,
}

impl Keys {
    /// The name of effect `n`: the `n / streams`th effect of stream `n % streams`.
    fn name(self, n: u64) -> String {
        format!("bench-{}-{}", n % self.streams, n / self.streams)
    }

    fn key(self, n: u64) -> EffectKey {
        EffectKey::new(TENANT, "bench", self.name(n))
    }

    fn claim(self, n: u64) -> Command {
        let name = self.name(n);
        let declaration = Declaration {
            workflow_id: format!("workflow-{}", n % self.streams),
            tool: ToolRef {
                provider: "pay".into(),
                name: "refund".into(),
                contract_version: "v1".into(),
            },
            authority: Authority {
                principal: "load".into(),
                policy_generation: 1,
            },
            target: format!("load/{name}"),
            intent_json: format!(r#"{{"amount":{n},"client":{}}}"#, n % self.streams),
            key: self.key(n),
        };
        tenant(
            format!("{name}/claim"),
            CommandBody::Claim {
                declaration,
                holder: "bench".into(),
                lease_ms: None,
                confirmation: None,
            },
        )
    }

    fn report(self, n: u64, fencing_token: u64) -> Command {
        let name = self.name(n);
        tenant(
            format!("{name}/report"),
            CommandBody::Report {
                key: self.key(n),
                fencing_token,
                report: Report::Committed {
                    receipt: format!("r-{name}"),
                },
            },
        )
    }
}

/// The entries of effects `from..to`: each claims the next effects and reports the ones
/// the entry before it claimed; the last one only reports. Claims are granted fencing
/// tokens in order from `first_token`.
fn entries(keys: Keys, from: u64, to: u64, per_entry: u64, first_token: u64) -> Vec<Vec<Command>> {
    let claims = per_entry / 2;
    let token = |n: u64| first_token + (n - from);
    let mut out = Vec::new();
    let mut reported = from;
    let mut next = from;
    while reported < to {
        let mut commands: Vec<Command> =
            (reported..next).map(|n| keys.report(n, token(n))).collect();
        reported = next;
        let claimed = to.min(next + claims);
        commands.extend((next..claimed).map(|n| keys.claim(n)));
        next = claimed;
        out.push(commands);
    }
    out
}

/// The shipped state machine on a RocksDB disk, and the log index and time of the next
/// entry.
struct Machine {
    sm: LedgerStateMachine,
    keys: Keys,
    index: u64,
    fencing_token: u64,
}

impl Machine {
    async fn open(path: &Path, budget: RocksOptions, keys: Keys) -> Machine {
        let disk: DiskRef = Arc::new(RocksDisk::open_with(path, budget).expect("open RocksDB"));
        let sm = LedgerStateMachine::open(disk)
            .await
            .expect("open the state machine");
        let mut machine = Machine {
            sm,
            keys,
            index: 0,
            fencing_token: 0,
        };
        machine.apply(setup()).await;
        // One effect claimed alone tells the first fencing token; later claims are
        // granted the next ones in order.
        let probe = u64::MAX / 2;
        machine.apply(vec![keys.claim(probe)]).await;
        let record = machine
            .sm
            .reader()
            .read(|ledger| ledger.get(&keys.key(probe)))
            .expect("read the ledger")
            .expect("the probe effect was claimed");
        let token = record
            .open_attempt()
            .expect("the probe effect has an open attempt")
            .fencing_token;
        machine.apply(vec![keys.report(probe, token)]).await;
        machine.fencing_token = token + 1;
        machine
    }

    async fn apply(&mut self, commands: Vec<Command>) {
        self.index += 1;
        let log_id = LogId::new(
            <TypeConfig as RaftTypeConfig>::LeaderId::new_committed(1, 1),
            self.index,
        );
        let request = LedgerRequest::at(START_MS + self.index, commands);
        let entry: Entry = Entry::new_normal(log_id, request);
        self.sm
            .apply(stream::iter([Ok((entry, None))]))
            .await
            .expect("apply");
    }

    /// Applies effects `from..to`; returns the time it took.
    async fn run(&mut self, from: u64, to: u64, per_entry: u64) -> Duration {
        let entries = entries(self.keys, from, to, per_entry, self.fencing_token);
        self.fencing_token += to - from;
        let started = Instant::now();
        for commands in entries {
            self.apply(commands).await;
        }
        started.elapsed()
    }

    fn committed(&self) -> usize {
        self.sm
            .reader()
            .read(|ledger| ledger.counts()[&EffectState::Committed])
            .expect("read the ledger")
    }
}

/// The same entries on the core ledger in memory, after the probe effect that tells the
/// first fencing token; returns how many commands were applied.
fn run_in_memory(
    keys: Keys,
    effects: u64,
    per_entry: u64,
    ledger: &mut Ledger,
    at: &mut u64,
) -> u64 {
    let probe = u64::MAX / 2;
    let token = match ledger.apply(&keys.claim(probe), *at) {
        Outcome::Claim(ClaimOutcome::Proceed(grant)) => grant.fencing_token,
        other => panic!("the probe effect was not granted: {other:?}"),
    };
    ledger.apply(&keys.report(probe, token), *at);
    let mut applied = 0;
    for commands in entries(keys, 0, effects, per_entry, token + 1) {
        *at += 1;
        for command in &commands {
            ledger.apply_stamped(command, Stamp::at(*at));
            applied += 1;
        }
    }
    applied
}

/// Process CPU time, user and system, of every thread.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

fn micros_per(d: Duration, n: u64) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let o = Options::parse();
    if o.effects < o.rounds {
        Options::command()
            .error(
                ErrorKind::ValueValidation,
                "--effects must be at least --rounds",
            )
            .exit();
    }
    let keys = Keys {
        streams: o.key_streams,
    };
    let defaults = RocksOptions::default();
    let budget = RocksOptions {
        block_cache_bytes: o
            .block_cache_mib
            .map_or(defaults.block_cache_bytes, |m| (m << 20) as usize),
        write_buffer_bytes: o
            .write_buffer_mib
            .map_or(defaults.write_buffer_bytes, |m| (m << 20) as usize),
    };
    println!(
        "| store | retained before | effects | commands/entry | key streams | wall us/effect: median (min-max) of {} rounds | CPU us/effect (all threads) | effects/s on one core |",
        o.rounds
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &retained in &o.retained {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut machine = Machine::open(dir.path(), budget, keys).await;
        machine.run(0, retained, o.per_entry).await;
        let per_round = o.effects / o.rounds;
        let mut walls = Vec::new();
        let cpu_before = cpu_time();
        let mut wall_total = Duration::ZERO;
        for round in 0..o.rounds {
            let from = retained + round * per_round;
            let wall = machine.run(from, from + per_round, o.per_entry).await;
            walls.push(micros_per(wall, per_round));
            wall_total += wall;
        }
        let cpu = cpu_time() - cpu_before;
        let measured = per_round * o.rounds;
        let expected = (retained + measured + 1) as usize;
        let committed = machine.committed();
        assert_eq!(
            committed, expected,
            "every effect must end committed; a refused claim or report would be measured as a fast one"
        );
        let min = walls.iter().copied().fold(f64::INFINITY, f64::min);
        let max = walls.iter().copied().fold(0.0, f64::max);
        println!(
            "| RocksDB (LedgerStateMachine) | {retained} | {measured} | {} | {} | {:.1} ({min:.1}-{max:.1}) | {:.1} | {:.0} |",
            o.per_entry,
            o.key_streams,
            median(walls),
            micros_per(cpu, measured),
            measured as f64 / wall_total.as_secs_f64(),
        );
    }
    // The reference: the ledger's logic alone, in memory, on the same commands.
    let mut ledger = Ledger::new();
    let mut at = START_MS;
    for command in setup() {
        ledger.apply(&command, at);
    }
    let cpu_before = cpu_time();
    let started = Instant::now();
    let commands = run_in_memory(keys, o.effects, o.per_entry, &mut ledger, &mut at);
    let wall = started.elapsed();
    let cpu = cpu_time() - cpu_before;
    assert_eq!(commands, 2 * o.effects);
    assert_eq!(
        ledger.counts()[&EffectState::Committed] as u64,
        o.effects + 1,
        "every effect must end committed in memory too"
    );
    println!(
        "| memory (Ledger<MemStore>) | 0 | {} | {} | {} | {:.1} | {:.1} | {:.0} |",
        o.effects,
        o.per_entry,
        o.key_streams,
        micros_per(wall, o.effects),
        micros_per(cpu, o.effects),
        o.effects as f64 / wall.as_secs_f64(),
    );
}
