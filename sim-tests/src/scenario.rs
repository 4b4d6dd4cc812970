//! The common skeleton of a scenario: start and form a cluster, watch it, drive clients,
//! then converge and verify everything the oracle knows.
//!
//! A scenario creates a [`Run`], starts its workload, injects its faults with bounded
//! waits for what must follow (a new leader, answers resuming, a replica catching up),
//! and ends with [`Run::verify`], which waits for all replicas to converge and applies
//! every checker of [`crate::check`] and [`crate::sampler`]. A scenario that starts
//! agents on the shipped `EffectRunner` beside its workload ([`Run::start_agents`]) has
//! them finish and their providers judged in the same verification.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use madsim::rand::{thread_rng, Rng};

use ledger_core::EffectKey;

use crate::check::{
    check_acks, check_all_committed, check_grants, check_provider, check_records, Verdict,
};
use crate::cluster::Cluster;
use crate::fixtures::{effect_key, ClusterSettings, ToolKind};
use crate::fleet::{register_world_tools, AgentSpec, Fleet};
use crate::history::{Ack, History};
use crate::linearize::{check_linearizable, ClockSlack, LAG_MS_MAX};
use crate::provider::Provider;
use crate::replica::ReplicaView;
use crate::sampler::{Sampler, StateLog};
use crate::seeds::RunOutcome;
use crate::trace::Trace;
use crate::wait;
use crate::workload::{ClientPlan, ClientStats};

/// How many agents on `EffectRunner` a named scenario starts beside its workload.
pub const AGENTS: usize = 3;
/// How long a scenario waits, before a fault, for an agent to be mid-episode.
pub const AGENTS_WAIT: Duration = Duration::from_secs(3);

/// How long replicas may take to converge once faults are healed.
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);

/// One simulated run: the cluster and everything the oracle records about it.
pub struct Run {
    /// The cluster.
    pub cluster: Arc<Cluster>,
    /// Every answer clients received.
    pub history: History,
    /// The provider's ground truth.
    pub provider: Provider,
    /// Notable events.
    pub trace: Trace,
    sampler: Sampler,
    clock_slack: ClockSlack,
    fleet: Option<Fleet>,
    world_tools: bool,
}

/// What a run's final verification found, for scenario-specific assertions.
pub struct Verified {
    /// The converged replicas.
    pub views: Vec<ReplicaView>,
    /// The sampler's log of the whole run.
    pub log: StateLog,
    /// The outcome to report.
    pub outcome: RunOutcome,
}

impl Run {
    /// Starts a cluster with `settings`, forms it, and starts watching its replicas.
    pub async fn begin(settings: ClusterSettings) -> Run {
        let trace = Trace::new();
        trace.note(format!(
            "seed {}",
            madsim::runtime::Handle::current().seed()
        ));
        let clock_slack = ClockSlack {
            lag_ms: LAG_MS_MAX,
            lead_ms: settings.ledger_time_lead_ms_max,
            real_max_lead_ms: settings
                .wall_clock_lead_ms_max
                .max(settings.ledger_time_lead_ms_max)
                .saturating_add(settings.clock_skew_ms_max),
        };
        let cluster = Cluster::start(settings, trace.clone());
        let sampler = Sampler::start(cluster.clone());
        cluster.form().await;
        Run {
            cluster,
            history: History::new(),
            provider: Provider::new(),
            trace,
            sampler,
            clock_slack,
            fleet: None,
            world_tools: false,
        }
    }

    /// Starts one agent per spec on the shipped `EffectRunner` (see
    /// [`crate::fleet`]); [`Run::verify`] waits for them and judges their
    /// providers. `seed` draws the episodes.
    pub async fn start_agents(&mut self, specs: &[AgentSpec], seed: u64) {
        assert!(self.fleet.is_none(), "agents are started once per run");
        self.register_world_tools().await;
        self.trace
            .note(format!("agents on EffectRunner: {specs:?}"));
        self.fleet = Some(Fleet::start(&self.cluster, specs, seed));
    }

    /// Registers the agents' providers' tools with the cluster, once per run
    /// ([`Run::start_agents`] does it first if nothing has): a scenario that must have it
    /// done at a given point of its schedule calls it there.
    pub async fn register_world_tools(&mut self) {
        if !self.world_tools {
            register_world_tools(&self.cluster).await;
            self.world_tools = true;
        }
    }

    /// Waits up to `timeout` until one of the run's agents is mid-episode, then notes in
    /// the trace how many are: a scenario about to strike calls it so that on most seeds
    /// its fault meets the runner, not only the workload, and the trace says whether it
    /// did.
    pub async fn await_agents(&self, when: &str, timeout: Duration) {
        let Some(fleet) = &self.fleet else { return };
        // Not finding one is no failure: the note says so.
        let _ = wait::until("an agent mid-episode", timeout, || match fleet.running() {
            0 => Err("none".into()),
            n => Ok(n),
        })
        .await;
        self.trace
            .note(format!("{} agents mid-episode {when}", fleet.running()));
    }

    /// Starts `count` agents drawn from the run's RNG (any boundary fault, provider and
    /// key mode), as [`Run::start_agents`] does.
    pub async fn start_drawn_agents(&mut self, count: usize) {
        let mut rng = thread_rng();
        let specs = AgentSpec::draw(&mut rng, count);
        let seed = rng.gen();
        self.start_agents(&specs, seed).await;
    }

    /// The current leader, as all running nodes agree.
    pub async fn leader(&self, timeout: Duration) -> u64 {
        self.cluster
            .wait_for_leader(&self.cluster.ids(), timeout)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits until clients other than `except` received `count` answers since `since`.
    pub async fn answers_since(
        &self,
        count: usize,
        since: Duration,
        except: Option<&str>,
        timeout: Duration,
    ) {
        let what = format!("{count} answers to clients since {since:?}");
        wait::until(&what, timeout, || {
            let n = self.history.count_since(since, except);
            if n >= count {
                Ok(())
            } else {
                Err(format!("{n} answers"))
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Waits for the agents (if any) to finish, then for convergence, and checks every
    /// property; panics listing all violations. `effects` must all be committed when
    /// `settled` (the workload finished them).
    pub async fn verify(
        self,
        stats: &[ClientStats],
        effects: &[EffectKey],
        settled: bool,
    ) -> Verified {
        if let Some(fleet) = &self.fleet {
            fleet.settle().await;
        }
        let converged = self.cluster.wait_converged(CONVERGE_TIMEOUT).await;
        let Ok(views) = converged else {
            // Say why, if the samples know: replicas that diverged never converge.
            let log = self.sampler.stop(&self.cluster);
            let mut verdict = Verdict::new();
            verdict.add("replicas converge", converged.err().into_iter().collect());
            verdict.add(
                "same state at the same log index, valid records",
                log.violations(),
            );
            verdict.assert_holds();
            unreachable!("a failed convergence is a violation");
        };
        self.trace.note(format!(
            "converged at log index {} with {} records",
            views[0].applied_index,
            views[0].records.len()
        ));
        let mut verdict = Verdict::new();
        verdict.add(
            "public status matches each replica",
            self.cross_check_status(&views).await,
        );
        let log = self.sampler.stop(&self.cluster);
        judge(
            &mut verdict,
            &views,
            &log,
            &self.history.acks(),
            &self.provider,
            settled,
        );
        judge_clients(&mut verdict, stats, effects, &views[0], settled);
        let (violations, linearized) =
            check_linearizable(&self.history.ops().ops(), &views[0], self.clock_slack);
        verdict.add("ledger operations are linearizable per effect", violations);
        if let Some(fleet) = &self.fleet {
            fleet.check(views[0].records.values(), &mut verdict);
        }
        let properties = verdict.assert_holds();
        let mut outcome = summarise(&views, &log, &self.history, &self.trace, stats, properties);
        for (name, value) in [
            ("linearizable_effects", linearized.linearizable),
            ("linearizable_ops", linearized.operations),
            ("linearizability_skipped", linearized.skipped),
            ("linearizability_undecided", linearized.undecided),
        ] {
            outcome.metrics.insert(name.into(), value as u64);
        }
        outcome.summary.push_str(&format!(
            " linearizable={}/{}ops skipped={} undecided={}",
            linearized.linearizable,
            linearized.operations,
            linearized.skipped,
            linearized.undecided
        ));
        if let Some(fleet) = &self.fleet {
            fleet.tell(&mut outcome);
        }
        Verified {
            views,
            log,
            outcome,
        }
    }

    /// Compares each node's public status (applied index, records per state) with the
    /// harness's view of it. Both are read again if an entry was applied in between.
    async fn cross_check_status(&self, views: &[ReplicaView]) -> Vec<String> {
        let mut mismatches = Vec::new();
        for node in views.iter().map(|v| v.node) {
            let what = format!("node {node}'s status matching its replica");
            let matched = wait::until_async(&what, Duration::from_secs(10), || async move {
                let status = self.cluster.status(node).await?;
                let view = self.cluster.view(node).ok_or("the node is down")?;
                let counts: BTreeMap<String, u64> = view
                    .counts()
                    .into_iter()
                    .map(|(s, n)| (s.as_str().to_owned(), n))
                    .collect();
                let reported: BTreeMap<String, u64> =
                    status.records_by_state.clone().into_iter().collect();
                if status.applied_index == Some(view.applied_index) && reported == counts {
                    Ok(())
                } else {
                    Err(format!(
                        "status says index {:?} and {reported:?}, replica has index {} and \
                         {counts:?}",
                        status.applied_index, view.applied_index
                    ))
                }
            })
            .await;
            if let Err(e) = matched {
                mismatches.push(e);
            }
        }
        mismatches
    }
}

/// Adds the replica, history and provider properties to `verdict`.
fn judge(
    verdict: &mut Verdict,
    views: &[ReplicaView],
    log: &StateLog,
    acks: &[Ack],
    provider: &Provider,
    settled: bool,
) {
    // Byte-identical replicas are what convergence waits for (`check_identical` in
    // `Cluster::wait_converged`); a run that never converges fails there.
    for view in views {
        let node = view.node;
        verdict.add(
            &format!("record invariants on node {node}"),
            check_records(view),
        );
        verdict.add(
            &format!("acknowledged transitions present on node {node}"),
            check_acks(acks, view),
        );
    }
    verdict.add("one attempt per fencing token", check_grants(acks));
    verdict.add(
        "same state at the same log index, valid records",
        log.violations(),
    );
    verdict.add(
        "committed never reverts",
        log.check_committed_never_reverts(),
    );
    verdict.add(
        "provider ground truth agrees with the ledger",
        check_provider(&provider.effects(), &views[0], settled),
    );
}

/// Adds what the clients saw to `verdict`: no anomaly, and when `settled`, every effect
/// committed: those named and those the clients worked on.
fn judge_clients(
    verdict: &mut Verdict,
    stats: &[ClientStats],
    effects: &[EffectKey],
    view: &ReplicaView,
    settled: bool,
) {
    let anomalies = stats.iter().flat_map(|s| s.anomalies.clone()).collect();
    verdict.add("clients got only answers the contract allows", anomalies);
    if settled {
        let worked_on: BTreeSet<EffectKey> = stats
            .iter()
            .flat_map(|s| s.effects.iter().map(|name| effect_key(name)))
            .chain(effects.iter().cloned())
            .collect();
        let unsettled = stats
            .iter()
            .flat_map(|s| {
                s.unsettled
                    .iter()
                    .map(move |e| format!("{} gave up on {e}", s.name))
            })
            .chain(check_all_committed(&worked_on, view))
            .collect();
        verdict.add("every effect settled and committed", unsettled);
    }
}

/// The one-line summary and fingerprint of a passing run.
fn summarise(
    views: &[ReplicaView],
    log: &StateLog,
    history: &History,
    trace: &Trace,
    stats: &[ClientStats],
    properties: usize,
) -> RunOutcome {
    let (samples, indexes) = log.coverage();
    let resends: usize = stats.iter().map(|s| s.resends).sum();
    let decided: usize = stats.iter().map(|s| s.decided).sum();
    let lines = trace.lines();
    let fingerprint =
        crate::fnv64(&views[0].snapshot) ^ crate::fnv64(lines.join("\n").as_bytes()).rotate_left(1);
    let tally: Vec<String> = history
        .tally()
        .into_iter()
        .map(|(kind, n)| format!("{kind}:{n}"))
        .collect();
    let (answers, records) = (history.len() as u64, views[0].records.len() as u64);
    let metrics = [
        ("answers", answers),
        ("records", records),
        ("properties", properties as u64),
        ("resends", resends as u64),
        ("escalations_decided", decided as u64),
        ("sim_ms", crate::sim_elapsed().as_millis() as u64),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    RunOutcome {
        metrics,
        summary: format!(
            "answers={} [{}] resends={resends} decided={decided} index={} records={} \
             samples={samples} indexes={indexes} properties={properties} sim={:.1}s",
            history.len(),
            tally.join(" "),
            views[0].applied_index,
            views[0].records.len(),
            crate::sim_elapsed().as_secs_f64(),
        ),
        fingerprint,
        trace: lines,
    }
}

/// `count` effect names alternating between the two tools, named `prefix-i`.
pub fn effects(prefix: &str, count: usize) -> Vec<(String, ToolKind)> {
    (0..count)
        .map(|i| {
            (
                format!("{prefix}-{i}"),
                ToolKind::ALL[i % ToolKind::ALL.len()],
            )
        })
        .collect()
}

/// The keys of `effects`.
pub fn keys(effects: &[(String, ToolKind)]) -> Vec<EffectKey> {
    effects.iter().map(|(name, _)| effect_key(name)).collect()
}

/// How long a workload client keeps trying before it gives up on what is left.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(300);

/// `clients` open-ended plans over the same `effects` (so they contend), named
/// `client-i`, with 5 % of holders vanishing and up to 400 ms between effects.
pub fn contending_clients(
    endpoints: &[String],
    clients: usize,
    effects: &[(String, ToolKind)],
) -> Vec<ClientPlan> {
    (0..clients)
        .map(|i| ClientPlan {
            name: format!("client-{i}"),
            endpoints: endpoints.to_vec(),
            effects: effects.to_vec(),
            vanish_percent: 5,
            give_up_after: GIVE_UP_AFTER,
            think_ms_max: 400,
            open_ended: true,
        })
        .collect()
}
