//! Reaching the cluster when some endpoints are dead: the client moves on, asks who
//! leads, and follows the answer, re-sending the same command id. And taking the largest
//! answer a node can give: a refusal travels in a header.

mod common;
mod fake;

use tonic::Status;

use common::*;
use ledger_client::effect::EffectCall;
use ledger_client::transport::HEADER_LIST_BYTES_MAX;
use ledger_client::{
    ClientError, DispatchResult, EffectOutcome, EffectRunner, LedgerClient, RetryPolicy,
};
use ledger_core::intent::differing_fields;
use ledger_core::limits::INTENT_BYTES_MAX;
use ledger_core::{IntentConflict, IntentHash, Refusal};
use ledger_proto::pb;

/// A port nothing listens on: bound, then closed.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_endpoints_are_skipped_and_the_leader_is_followed() {
    let ledger = Ledger::start().await;
    let dead = format!("127.0.0.1:{}", closed_port());
    let endpoints = vec![dead.clone(), dead, ledger.addr().to_owned()];
    // Two attempts: moving on to the next endpoint alone would spend both on dead nodes.
    let retry = RetryPolicy {
        attempts: 2,
        ..RetryPolicy::default()
    };
    let client = LedgerClient::with_retry(endpoints, TENANT_KEY, retry).unwrap();
    let c: EffectCall = call("pay/refund", "t1", r#"{"order":"o1"}"#);
    let outcome = EffectRunner::new(client.clone(), "server-a")
        .effect(c.clone())
        .run(|_| async {
            DispatchResult::Committed {
                receipt: "r-1".into(),
            }
        })
        .await
        .unwrap();
    assert_eq!(
        outcome,
        EffectOutcome::Done {
            receipt: "r-1".into()
        }
    );
    let record = client.get(c.declaration.key).await.unwrap().unwrap();
    assert_eq!(record.receipt.as_deref(), Some("r-1"));
    let (_, leader) = client.find_leader().await.unwrap();
    assert_eq!(leader, ledger.addr());
}

/// A node that refuses every declaration with `conflict`, whole, as nodes did before
/// they bounded the member names a refusal's status carries
/// (`ledger_proto::status::DIFFERING_FIELDS_BYTES_MAX`).
struct Conflicting {
    conflict: IntentConflict,
}

fn unbounded_status(refusal: &Refusal) -> Status {
    let mut metadata = tonic::metadata::MetadataMap::new();
    let json = serde_json::to_vec(refusal).expect("a refusal serialises");
    metadata.insert_bin(
        ledger_proto::status::REFUSAL_METADATA_KEY,
        tonic::metadata::MetadataValue::from_bytes(&json),
    );
    Status::with_metadata(
        ledger_proto::status::refusal_code(refusal),
        refusal.to_string(),
        metadata,
    )
}

#[tonic::async_trait]
impl fake::Handler for Conflicting {
    async fn declare(&self, _: pb::DeclareRequest) -> Result<pb::DeclareResponse, Status> {
        Err(unbounded_status(&Refusal::Conflict(self.conflict.clone())))
    }
}

/// The largest conflict a node can find for a declaration or an amend: two intents of the
/// largest size, each with long member names the other lacks, so that every name of both
/// differs.
fn largest_conflict() -> IntentConflict {
    let intent = |prefix: &str| {
        let mut members: Vec<String> = Vec::new();
        let mut len = 2;
        for i in 0.. {
            let member = format!("\"{prefix}{i:04}{}\":0", "x".repeat(1_000));
            if len + member.len() + 1 > INTENT_BYTES_MAX {
                break;
            }
            len += member.len() + 1;
            members.push(member);
        }
        format!("{{{}}}", members.join(","))
    };
    let (stored, offered) = (intent("a"), intent("b"));
    assert!(stored.len() <= INTENT_BYTES_MAX && stored.len() > INTENT_BYTES_MAX - 1_100);
    IntentConflict {
        stored_hash: IntentHash([0xab; 32]),
        offered_hash: IntentHash([0xcd; 32]),
        differing_fields: differing_fields(&stored, &offered),
    }
}

/// A conflict travels as JSON in a header; past hyper's default of 16 KiB of headers the
/// answer was a transport error, retried, and then "unavailable, may have been applied"
/// instead of the conflict. Nodes now bound what a conflict's status names; one that does
/// not (an earlier version) still reaches the client as the conflict it sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_conflict_a_node_can_refuse_with_arrives_as_a_conflict() {
    let conflict = largest_conflict();
    let status = unbounded_status(&Refusal::Conflict(conflict.clone()));
    let header_bytes = status
        .metadata()
        .get_bin(ledger_proto::status::REFUSAL_METADATA_KEY)
        .expect("the refusal header")
        .as_encoded_bytes()
        .len()
        + status.message().len() * 3;
    assert!(header_bytes > 100_000, "{header_bytes} bytes");
    assert!(
        header_bytes < HEADER_LIST_BYTES_MAX as usize / 4,
        "{header_bytes} bytes of headers against a limit of {HEADER_LIST_BYTES_MAX}"
    );
    let served = fake::serve(Conflicting {
        conflict: conflict.clone(),
    })
    .await;
    let retry = RetryPolicy {
        attempts: 2,
        ..RetryPolicy::default()
    };
    let client = LedgerClient::with_retry(vec![served.addr.clone()], TENANT_KEY, retry).unwrap();
    let declaration = call("pay/refund", "large-conflict", r#"{"order":"o1"}"#).declaration;
    match client.declare("declare-1", declaration, 1).await {
        Err(ClientError::Refused(Refusal::Conflict(c))) => assert_eq!(c, conflict),
        other => panic!("expected the conflict, got {other:?}"),
    }
}
