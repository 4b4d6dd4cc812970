//! Scenario: three nodes, each admitting 16 client calls at once, and 128 clients that
//! declare effects back to back, eight times what the cluster admits. Overload must slow
//! callers down, never cost an election: no node's term changes during the run, every call
//! either succeeds or ends as the client's typed "overloaded, try later", calls are turned
//! away (admission engages), and every declare a client saw succeed is on every replica.

#![cfg(madsim)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ledger_client::transport::OverloadPolicy;
use ledger_client::{ClientError, LedgerClient};
use ledger_sim_tests::cluster::{client_retry, Cluster};
use ledger_sim_tests::fixtures::{declaration, effect_key, ClusterSettings, ToolKind, TENANT_KEY};
use ledger_sim_tests::scenario::Run;
use ledger_sim_tests::seeds::{self, RunOutcome, Scenario};

const SCENARIO: Scenario = Scenario {
    test_binary: "overload",
    test_name: "overload_is_shed_as_try_later_and_costs_no_election",
    default_seeds: &[1, 2, 3],
};

/// Client calls each node admits at once.
const ADMITTED_CALLS_MAX: usize = 16;
/// Client machines, and clients on each.
const MACHINES: usize = 4;
const CLIENTS_PER_MACHINE: usize = 32;
/// Declares each client makes, one after the other.
const CALLS_PER_CLIENT: usize = 12;

#[test]
fn overload_is_shed_as_try_later_and_costs_no_election() {
    seeds::run(&SCENARIO, scenario);
}

/// What the clients saw.
#[derive(Default)]
struct Seen {
    applied: BTreeSet<String>,
    try_later: usize,
    failures: Vec<String>,
}

/// Every node's term and leader, sampled until `stop`: any change is an election.
async fn watch_terms(cluster: Arc<Cluster>, changes: Arc<Mutex<Vec<String>>>) {
    let first: Vec<_> = cluster
        .ids()
        .into_iter()
        .filter_map(|id| cluster.node(id))
        .map(|n| (n.id, n.current_term(), n.current_leader()))
        .collect();
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        for &(id, term, leader) in &first {
            let Some(node) = cluster.node(id) else {
                continue;
            };
            let now = (node.current_term(), node.current_leader());
            if now != (term, leader) {
                changes.lock().unwrap().push(format!(
                    "node {id}: term {term} leader {leader:?} became term {} leader {:?}",
                    now.0, now.1
                ));
            }
        }
    }
}

async fn client_loop(client: LedgerClient, name: String, seen: Arc<Mutex<Seen>>) {
    for call in 0..CALLS_PER_CLIENT {
        let effect = format!("{name}-{call}");
        let result = client
            .declare(
                &format!("cmd-{effect}"),
                declaration(&effect, ToolKind::Keyed),
                1,
            )
            .await;
        let mut seen = seen.lock().unwrap();
        match result {
            Ok(_) => {
                seen.applied.insert(effect);
            }
            Err(ClientError::Overloaded { .. }) => seen.try_later += 1,
            Err(e) => seen.failures.push(format!("{effect}: {e}")),
        }
    }
}

async fn scenario() -> RunOutcome {
    let mut settings = ClusterSettings::new(3);
    settings.proposer.admitted_calls_max = ADMITTED_CALLS_MAX;
    let run = Run::begin(settings).await;
    let cluster = run.cluster.clone();
    let leader = run.leader(Duration::from_secs(10)).await;
    run.trace
        .note(format!("node {leader} leads before the load"));

    let changes = Arc::new(Mutex::new(Vec::new()));
    let watcher = tokio::spawn(watch_terms(cluster.clone(), changes.clone()));
    let seen = Arc::new(Mutex::new(Seen::default()));
    // Half the clients wait out overload answers; the other half may not wait at all, so
    // that the calls turned away show as "try later" and are counted.
    let patient = OverloadPolicy::default();
    let impatient = OverloadPolicy {
        wait_ms_max: 0,
        ..OverloadPolicy::default()
    };
    let mut clients = Vec::new();
    for m in 0..MACHINES {
        let machine = cluster.client_node(&format!("load-{m}"));
        for c in 0..CLIENTS_PER_MACHINE {
            // Each client prefers another node, so followers forward too.
            let mut endpoints = cluster.endpoints();
            let first = (m * CLIENTS_PER_MACHINE + c) % endpoints.len();
            endpoints.rotate_left(first);
            let client = LedgerClient::with_policies(
                endpoints,
                TENANT_KEY,
                client_retry(),
                if c % 2 == 0 {
                    impatient.clone()
                } else {
                    patient.clone()
                },
            )
            .expect("valid endpoints");
            let name = format!("m{m}c{c}");
            clients.push(machine.spawn(client_loop(client, name, seen.clone())));
        }
    }
    for client in clients {
        client.await.expect("client machines are never killed");
    }
    watcher.abort();

    let (applied, try_later, failures) = {
        let seen = seen.lock().unwrap();
        (seen.applied.clone(), seen.try_later, seen.failures.clone())
    };
    let calls = MACHINES * CLIENTS_PER_MACHINE * CALLS_PER_CLIENT;
    run.trace.note(format!(
        "{calls} calls: {} applied, {try_later} told to try later, {} failed",
        applied.len(),
        failures.len()
    ));
    let changes = changes.lock().unwrap().clone();
    assert!(changes.is_empty(), "overload cost an election: {changes:?}");
    assert!(
        failures.is_empty(),
        "calls failed other than as \"try later\": {failures:?}"
    );
    assert!(
        try_later > 0,
        "no call was turned away: admission never engaged"
    );
    assert!(!applied.is_empty(), "no call got through");
    assert_eq!(applied.len() + try_later, calls);

    let verified = run.verify(&[], &[], false).await;
    for view in &verified.views {
        for effect in &applied {
            assert!(
                view.records.contains_key(&effect_key(effect)),
                "node {} lacks {effect}, whose declare a client saw succeed",
                view.node
            );
        }
    }
    verified.outcome
}
