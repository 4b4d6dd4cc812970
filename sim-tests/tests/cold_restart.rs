//! Scenario: a refund through a keyed provider that forgets a key 30 s after it first saw
//! it. The refund is sent, its answer is lost (reported unknown), and then every ledger
//! node goes down at once for 45 s, longer than the horizon, with every wall clock a
//! little behind real time (within `clock_skew_ms_max`). The cluster comes back and
//! another tool-server instance retries the refund.
//!
//! No monotonic clock measured the outage, so ledger time resumes from the last stamp
//! and lags real time by it (`ledger_node::stamp_bound`). By ledger time the horizon is
//! still ahead and a re-send under the same provider key looks safe; in real time the
//! provider has forgotten the key and would refund a second time. The leader stamps
//! bounds on real time next to ledger time (`ledger_node::real_time`: after a cold start,
//! the wall clocks of the nodes that answered, plus the skew), and the state machine
//! judges the horizon by the upper one. So:
//! - the retry is answered `horizon_passed`, not `proceed`, and nothing is re-sent;
//! - reconciliation finds the refund at the provider and the effect commits with its
//!   receipt;
//! - the provider executed the refund once.
//!
//! With horizons judged by ledger time (or stamps that carry no bounds on real time), the
//! retry is granted, the re-send reaches a provider that forgot the key, and the refund
//! is executed twice.
//!
//! Second scenario: the same provider and horizon, a tool whose policy declares no
//! processing bound, and no outage. The refund is sent and taken in at once, its answer
//! is lost, and 20 s later, well inside the horizon by every clock, another instance
//! retries. The provider may take up to 12 s to take a request in, which the policy does
//! not say: a re-send made then would reach it after it forgot the key. With no bound
//! declared, nothing says when a re-send arrives, so the retry is answered `reconcile`,
//! and reconciliation finds the refund. With the bound counted as zero (as the ledger did
//! before), the retry is granted, the re-send arrives after the horizon, and the refund is
//! executed twice.

#![cfg(madsim)]

use std::future::Future;
use std::time::Duration;

use ledger_client::{ClientError, LedgerClient};
use ledger_core::{
    ClaimOutcome, Declaration, EffectKey, EffectState, Grant, ObservationResult, ReconcileOutcome,
    Report, ToolName, ToolPolicy, ToolRef,
};
use ledger_sim_tests::cluster::ClientNode;
use ledger_sim_tests::fixtures::{
    declaration, effect_key, ClusterSettings, ToolKind, TENANT, TENANT_KEY,
};
use ledger_sim_tests::provider::Provider;
use ledger_sim_tests::scenario::Run;
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};
use ledger_sim_tests::workload::wall_clock_ms;

const SCENARIO: Scenario = Scenario {
    test_binary: "cold_restart",
    test_name: "keyed_resend_after_a_whole_cluster_outage_longer_than_the_horizon_is_not_granted",
    default_seeds: &[1, 2, 3],
};

const UNBOUNDED: Scenario = Scenario {
    test_binary: "cold_restart",
    test_name: "a_keyed_tool_that_declares_no_processing_bound_is_reconciled_not_resent",
    default_seeds: &[1, 2, 3],
};

/// How long after the first send the second scenario's retry comes: a lease and the
/// clock skew fit before the horizon after it.
const RETRY_AFTER: Duration = Duration::from_secs(20);
/// How long the second scenario's provider takes to take in a re-send: past its horizon.
const SLOW_TRANSIT: Duration = Duration::from_secs(12);
/// How long the provider deduplicates a key, from the first time it saw it (real time).
const HORIZON_MS: u64 = 30_000;
/// How long every ledger node is down: longer than the horizon.
const OUTAGE: Duration = Duration::from_secs(45);
/// How far behind real time every node's wall clock is while it comes back (less than the
/// default `clock_skew_ms_max` of 2 s).
const CLOCKS_BEHIND_MS: i64 = 1_500;
const LEASE_MS: u64 = 5_000;
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Tries of one ledger call (same command id) while the cluster settles.
const TRIES_MAX: u32 = 20;

#[test]
fn keyed_resend_after_a_whole_cluster_outage_longer_than_the_horizon_is_not_granted() {
    seeds::run(&SCENARIO, scenario);
}

#[test]
fn a_keyed_tool_that_declares_no_processing_bound_is_reconciled_not_resent() {
    seeds::run(&UNBOUNDED, unbounded_scenario);
}

/// A refund effect through a keyed tool of its own.
#[derive(Clone)]
struct Refund {
    /// The effect's name ([`effect_key`]).
    effect: &'static str,
    tool: ToolName,
    policy: ToolPolicy,
}

impl Refund {
    /// The first scenario's: a keyed tool with a short horizon and a provider that
    /// applies a request the instant it arrives (a processing bound of zero).
    fn cold() -> Self {
        Refund {
            effect: "cold-refund",
            tool: ToolName {
                provider: "payments".into(),
                name: "refund-30s".into(),
            },
            policy: Self::policy(Some(0)),
        }
    }

    /// The second scenario's: the same horizon, no declared processing bound.
    fn unbounded() -> Self {
        Refund {
            effect: "unbounded-refund",
            tool: ToolName {
                provider: "payments".into(),
                name: "refund-unbounded".into(),
            },
            policy: Self::policy(None),
        }
    }

    fn policy(processing_ms_max: Option<u64>) -> ToolPolicy {
        ToolPolicy {
            provider_horizon_ms: HORIZON_MS,
            lease_ms: LEASE_MS,
            lease_ms_max: 2 * LEASE_MS,
            processing_ms_max,
            retention_ms: 3_600_000,
            retry_window_ms: 3_600_000,
            ..ToolKind::Keyed.policy()
        }
    }

    fn key(&self) -> EffectKey {
        effect_key(self.effect)
    }

    fn declaration(&self) -> Declaration {
        Declaration {
            tool: ToolRef {
                provider: self.tool.provider.clone(),
                name: self.tool.name.clone(),
                contract_version: "v1".into(),
            },
            ..declaration(self.effect, ToolKind::Keyed)
        }
    }

    /// Stores the tool's policy.
    async fn configure(&self, run: &Run) {
        let (name, policy) = (self.tool.clone(), self.policy.clone());
        let id = format!("setup-tool-{}", self.tool.name);
        run.cluster
            .as_operator(move |client| async move {
                client
                    .put_tool_policy(&id, TENANT, name, policy)
                    .await
                    .unwrap_or_else(|e| panic!("configuring the refund tool failed: {e}"))
            })
            .await;
    }
}

/// The provider as the tool server reaches it: it deduplicates the key only until
/// `HORIZON_MS` after it first saw it.
struct ForgetfulProvider {
    provider: Provider,
    first_seen_ms: Option<u64>,
}

impl ForgetfulProvider {
    fn send(&mut self, provider_key: &str) -> String {
        let now_ms = wall_clock_ms();
        let first_ms = *self.first_seen_ms.get_or_insert(now_ms);
        let remembers = now_ms < first_ms + HORIZON_MS;
        self.provider.send(provider_key, remembers)
    }
}

async fn scenario() -> RunOutcome {
    let mut lost = LostAnswer::begin(Refund::cold()).await;
    let (run, cluster) = (&lost.run, lost.run.cluster.clone());

    // Every node goes down for longer than the horizon; their clocks come back slow.
    let ids = cluster.ids();
    for id in &ids {
        cluster.crash(*id);
    }
    tokio::time::sleep(OUTAGE).await;
    for id in &ids {
        cluster.step_wall_clock(*id, -CLOCKS_BEHIND_MS);
        cluster.restart(*id);
    }
    let leader = run.leader(LEADER_TIMEOUT).await;
    run.trace.note(format!(
        "every node down {} s and restarted; node {leader} leads",
        OUTAGE.as_secs()
    ));

    // Another instance retries the refund.
    let second = cluster.client_node("tool-server-b");
    match claim(&second, &lost.client, &lost.refund, "b").await {
        ClaimOutcome::HorizonPassed(unsettled) => {
            assert_eq!(unsettled.dispatches, 1);
            run.trace.note("the retry was told the horizon has passed");
        }
        ClaimOutcome::Proceed(resend) => {
            // A tool server re-sends on a grant; the provider may have forgotten the key.
            lost.provider.send(&resend.provider_key);
            run.trace.note(format!(
                "a re-send was granted (stamped {} ms, real time {} ms)",
                resend.granted_at_ms,
                wall_clock_ms()
            ));
        }
        other => panic!("the retry answered {other:?}"),
    }
    lost.assert_refunded_once("a keyed re-send reached it after its horizon");
    lost.reconcile(&second).await;
    for id in &ids {
        cluster.correct_clock(*id);
    }
    lost.verify().await
}

async fn unbounded_scenario() -> RunOutcome {
    let mut lost = LostAnswer::begin(Refund::unbounded()).await;
    tokio::time::sleep(RETRY_AFTER).await;
    let second = lost.run.cluster.client_node("tool-server-b");
    match claim(&second, &lost.client, &lost.refund, "b").await {
        ClaimOutcome::Reconcile(unsettled) => {
            assert_eq!(unsettled.dispatches, 1);
            lost.run.trace.note("the retry was told to reconcile");
        }
        ClaimOutcome::Proceed(resend) => {
            // The re-send is on its way longer than the policy says nothing about.
            tokio::time::sleep(SLOW_TRANSIT).await;
            lost.provider.send(&resend.provider_key);
            lost.run.trace.note(format!(
                "a re-send was granted; it reached the provider at real time {} ms",
                wall_clock_ms()
            ));
        }
        other => panic!("the retry answered {other:?}"),
    }
    lost.assert_refunded_once(
        "a re-send with no declared processing bound reached it after its horizon",
    );
    lost.reconcile(&second).await;
    lost.verify().await
}

/// A run in which the first tool server sent a refund and lost the answer: what the
/// scenarios retry from.
struct LostAnswer {
    run: Run,
    refund: Refund,
    client: LedgerClient,
    provider: ForgetfulProvider,
    /// The first tool server's grant.
    grant: Grant,
    /// What the provider answered it.
    receipt: String,
}

impl LostAnswer {
    /// Starts a 3-node cluster with `refund`'s tool; the first tool server claims the
    /// refund and sends it, the provider takes it in, and its answer is lost (reported
    /// unknown).
    async fn begin(refund: Refund) -> Self {
        let run = Run::begin(ClusterSettings::new(3)).await;
        refund.configure(&run).await;
        let client = run.cluster.client(run.cluster.endpoints(), TENANT_KEY);
        let mut provider = ForgetfulProvider {
            provider: run.provider.clone(),
            first_seen_ms: None,
        };
        let first = run.cluster.client_node("tool-server-a");
        let grant = match claim(&first, &client, &refund, "a").await {
            ClaimOutcome::Proceed(grant) => grant,
            other => panic!("the first claim answered {other:?}"),
        };
        let receipt = provider.send(&grant.provider_key);
        let lost = Report::Unknown {
            reason: "the provider's answer was lost".into(),
        };
        let (key, token) = (refund.key(), grant.fencing_token);
        let (state, _) = on(&first, &client, "report-a", move |c| {
            let (key, lost) = (key.clone(), lost.clone());
            async move { c.report("cold-report-a", key, token, lost).await }
        })
        .await;
        assert_eq!(state, EffectState::UnknownAfterDispatch);
        run.trace.note("refund sent; its answer was lost");
        LostAnswer {
            run,
            refund,
            client,
            provider,
            grant,
            receipt,
        }
    }

    /// Asserts that the provider executed the refund once; `otherwise` says what a second
    /// execution would mean.
    fn assert_refunded_once(&self, otherwise: &str) {
        let executions = self.run.provider.effects()[&self.grant.provider_key].executions;
        assert_eq!(
            executions, 1,
            "the provider refunded {executions} times: {otherwise}"
        );
    }

    /// Settles the unknown refund from `machine` by looking at the provider.
    async fn reconcile(&self, machine: &ClientNode) {
        let provider_key = &self.grant.provider_key;
        reconcile(&self.run, machine, &self.client, &self.refund, provider_key).await;
    }

    /// Verifies the run: the record holds the receipt the provider gave the first send.
    async fn verify(self) -> RunOutcome {
        let key = self.refund.key();
        let outcome = self.run.verify(&[], std::slice::from_ref(&key), true).await;
        let record = &outcome.views[0].records[&key];
        assert_eq!(record.receipt.as_deref(), Some(self.receipt.as_str()));
        outcome.outcome
    }
}

/// Claims `refund` from `machine` as holder `tool-server-{who}`.
async fn claim(
    machine: &ClientNode,
    client: &LedgerClient,
    refund: &Refund,
    who: &str,
) -> ClaimOutcome {
    let holder = format!("tool-server-{who}");
    let command_id = format!("cold-claim-{who}");
    let declaration = refund.declaration();
    on(machine, client, "claim", move |c| {
        let (holder, command_id, declaration) =
            (holder.clone(), command_id.clone(), declaration.clone());
        async move { c.claim(&command_id, declaration, &holder, None, None).await }
    })
    .await
}

/// Settles the unknown refund by looking at the provider: it holds the refund.
async fn reconcile(
    run: &Run,
    machine: &ClientNode,
    client: &LedgerClient,
    refund: &Refund,
    provider_key: &str,
) {
    let key = refund.key();
    let observer = match on(machine, client, "begin-reconcile", move |c| {
        let key = key.clone();
        async move {
            c.begin_reconcile("cold-reconcile", key, "reconciler", None)
                .await
        }
    })
    .await
    {
        ReconcileOutcome::Observe(grant) => grant,
        other => panic!("reconciliation answered {other:?}"),
    };
    let receipt = run
        .provider
        .observe(provider_key)
        .expect("the provider holds the refund");
    let key = refund.key();
    let (state, escalated) = on(machine, client, "observe", move |c| {
        let result = ObservationResult::Committed {
            receipt: receipt.clone(),
        };
        let key = key.clone();
        async move {
            c.observe(
                "cold-observe",
                key,
                observer.fencing_token,
                result,
                "found by provider key",
            )
            .await
        }
    })
    .await;
    assert_eq!((state, escalated), (EffectState::Committed, false));
    run.trace
        .note("reconciliation found the refund; the effect committed");
}

/// Runs `call` with the tenant's client on `machine`, again (same command id, which the
/// ledger deduplicates) while the cluster is unavailable.
async fn on<T, F, Fut>(machine: &ClientNode, client: &LedgerClient, what: &str, call: F) -> T
where
    T: Send + 'static,
    F: Fn(LedgerClient) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, ClientError>> + Send + 'static,
{
    let (client, what) = (client.clone(), what.to_owned());
    machine
        .spawn(async move {
            let mut last = None;
            for _ in 0..TRIES_MAX {
                match call(client.clone()).await {
                    Ok(answer) => return answer,
                    Err(e @ ClientError::Refused(_)) => panic!("{what} was refused: {e}"),
                    Err(e) => last = Some(e),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            panic!("{what} failed {TRIES_MAX} times, last: {last:?}")
        })
        .await
        .expect("the tool-server machine runs")
}
