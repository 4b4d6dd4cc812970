//! Reaching the cluster when some endpoints are dead: the client moves on, asks who
//! leads, and follows the answer, re-sending the same command id.

mod common;

use common::*;
use ledger_client::effect::EffectCall;
use ledger_client::{DispatchResult, EffectOutcome, EffectRunner, LedgerClient, RetryPolicy};

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
