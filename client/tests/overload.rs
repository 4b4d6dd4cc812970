//! Back-off on overload: a node that answers `RESOURCE_EXHAUSTED` with `retry-after-ms` is
//! waited out as it suggests, within the client's budget, and a quota refusal with the same
//! code is not retried; a wait for an effect to settle stays within its own time when the
//! node turns its watch away. The node here is a fake ledger service in process that turns away
//! the first calls and records when each call arrived.

mod fake;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tonic::Status;

use ledger_client::transport::{OverloadPolicy, RETRY_AFTER_MS_METADATA};
use ledger_client::{ClientError, LedgerClient, RetryPolicy};
use ledger_core::{EffectKey, Quota, Refusal};
use ledger_proto::pb;

use fake::Handler;

/// How the fake node answers `get`: the first `overloaded` calls are turned away with
/// `hint_ms` (or refused for quota when `quota`), later ones find no such effect.
struct FakeNode {
    overloaded: usize,
    hint_ms: u64,
    quota: bool,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl FakeNode {
    fn answer(&self, key: EffectKey) -> Status {
        let mut arrivals = self.arrivals.lock().unwrap();
        arrivals.push(Instant::now());
        if self.quota {
            return ledger_proto::refusal_to_status(&Refusal::QuotaExceeded {
                what: Quota::LiveRecords,
                used: 10,
                requested: 1,
                limit: 10,
            });
        }
        if arrivals.len() <= self.overloaded {
            let mut status = Status::resource_exhausted("overloaded");
            status.metadata_mut().insert(
                RETRY_AFTER_MS_METADATA,
                self.hint_ms.to_string().parse().unwrap(),
            );
            return status;
        }
        ledger_proto::refusal_to_status(&Refusal::UnknownEffect(key))
    }
}

#[tonic::async_trait]
impl Handler for FakeNode {
    async fn get(&self, request: pb::GetRequest) -> Result<pb::GetResponse, Status> {
        let key = EffectKey::try_from(request).map_err(|_| Status::invalid_argument("key"))?;
        Err(self.answer(key))
    }

    /// Every watch is turned away as a node that serves all it may answers.
    async fn watch(&self, _: pb::WatchRequest) -> Result<(), Status> {
        let mut status = Status::unavailable(
            "this node serves 1024 watches already: watch through another node, or poll with Get",
        );
        status.metadata_mut().insert(
            ledger_proto::WATCHES_FULL_METADATA,
            tonic::metadata::MetadataValue::from(1),
        );
        Err(status)
    }
}

/// A node with room for a watch, which it answers so that the test can tell it was
/// reached (a fake serves no stream).
struct Roomy;

#[tonic::async_trait]
impl Handler for Roomy {
    async fn watch(&self, _: pb::WatchRequest) -> Result<(), Status> {
        Err(Status::permission_denied("reached the node with room"))
    }
}

type Served = fake::Served<FakeNode>;

async fn serve(overloaded: usize, hint_ms: u64, quota: bool) -> Served {
    fake::serve(FakeNode {
        overloaded,
        hint_ms,
        quota,
        arrivals: Default::default(),
    })
    .await
}

fn client(served: &Served, overload: OverloadPolicy) -> LedgerClient {
    let retry = RetryPolicy {
        attempts: 1,
        ..RetryPolicy::default()
    };
    LedgerClient::with_policies(
        vec![served.addr.clone()],
        "any-key-0000000001",
        retry,
        overload,
    )
    .unwrap()
}

fn key() -> EffectKey {
    EffectKey::new("acme", "tests", "k1")
}

/// Gaps (ms) between consecutive arrivals.
fn gaps_ms(served: &Served) -> Vec<u128> {
    let arrivals = served.handler.arrivals.lock().unwrap();
    arrivals
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_calls_wait_the_hint_and_are_retried_without_spending_attempts() {
    let served = serve(3, 150, false).await;
    // One attempt only: overload answers must not spend it.
    let client = client(&served, OverloadPolicy::default());
    assert_eq!(client.get(key()).await.unwrap(), None);
    let gaps = gaps_ms(&served);
    assert_eq!(gaps.len(), 3, "three overload answers, then the answer");
    for gap in gaps {
        // The hint, plus at most half of it again; the upper bound is loose for slow hosts.
        assert!(
            (150..2_000).contains(&gap),
            "waited {gap} ms after a 150 ms hint"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_hint_is_capped_by_the_policy() {
    let served = serve(1, 60_000, false).await;
    let overload = OverloadPolicy {
        hint_ms_max: 100,
        ..OverloadPolicy::default()
    };
    assert_eq!(client(&served, overload).get(key()).await.unwrap(), None);
    let gaps = gaps_ms(&served);
    assert_eq!(gaps.len(), 1);
    assert!((100..10_000).contains(&gaps[0]), "waited {} ms", gaps[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_overload_budget_is_a_typed_try_later() {
    let served = serve(usize::MAX, 100, false).await;
    let overload = OverloadPolicy {
        wait_ms_max: 400,
        ..OverloadPolicy::default()
    };
    match client(&served, overload).get(key()).await {
        Err(ClientError::Overloaded {
            retry_after_ms,
            waited_ms,
        }) => {
            assert_eq!(retry_after_ms, 100);
            assert!((200..=400).contains(&waited_ms), "waited {waited_ms} ms");
        }
        other => panic!("expected overloaded, got {other:?}"),
    }
    // Waits of 100-150 ms within 400 ms: two to four waits, so three to five tries.
    let tries = served.handler.arrivals.lock().unwrap().len();
    assert!((3..=5).contains(&tries), "{tries} tries");

    let served = serve(usize::MAX, 100, false).await;
    let no_wait = OverloadPolicy {
        wait_ms_max: 0,
        ..OverloadPolicy::default()
    };
    assert!(matches!(
        client(&served, no_wait).get(key()).await,
        Err(ClientError::Overloaded { waited_ms: 0, .. })
    ));
    assert_eq!(served.handler.arrivals.lock().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_refusal_is_final_not_overload() {
    let served = serve(0, 100, true).await;
    match client(&served, OverloadPolicy::default()).get(key()).await {
        Err(ClientError::Refused(Refusal::QuotaExceeded { limit: 10, .. })) => {}
        other => panic!("expected a quota refusal, got {other:?}"),
    }
    assert_eq!(served.handler.arrivals.lock().unwrap().len(), 1);
}

/// A watch turned away by a node that serves all it may goes to the next node at once,
/// within the same attempt: the transport's own retry would follow the leader back to the
/// full node (here, with one attempt, it would not retry at all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_turned_away_for_a_full_table_is_asked_of_the_next_node() {
    let full = serve(0, 0, false).await;
    let roomy = fake::serve(Roomy).await;
    let retry = RetryPolicy {
        attempts: 1,
        ..RetryPolicy::default()
    };
    let client = LedgerClient::with_policies(
        vec![full.addr.clone(), roomy.addr.clone()],
        "any-key-0000000001",
        retry,
        OverloadPolicy::default(),
    )
    .unwrap();
    match client
        .watch(ledger_proto::WatchFilter::effect(&key()))
        .await
    {
        Err(ClientError::Status {
            code: tonic::Code::PermissionDenied,
            message,
        }) => assert_eq!(message, "reached the node with room"),
        Err(other) => panic!("the next node was not asked: {other}"),
        Ok(_) => panic!("a fake serves no watch"),
    }
}

/// A node serving all the watches it may turns the next away (UNAVAILABLE), which the
/// transport retries, on the other nodes and with back-off, for up to its retry budget
/// (about 5 s by default). A wait for an effect to settle does not spend that budget on
/// its watch: it reads the record when its own, shorter, wait is up (here the effect is
/// unknown: `Missing`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_turned_away_does_not_hold_a_wait_past_its_own_time() {
    let served = serve(0, 0, false).await;
    let client = LedgerClient::with_policies(
        vec![served.addr.clone()],
        "any-key-0000000001",
        RetryPolicy::default(),
        OverloadPolicy::default(),
    )
    .unwrap();
    let runner = ledger_client::effect::EffectRunner::new(client, "holder");
    let started = Instant::now();
    let settled = runner.wait_until_settled(&key(), 300).await.unwrap();
    assert!(
        matches!(settled, ledger_client::effect::Settled::Missing),
        "{settled:?}"
    );
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(3),
        "the wait took {took:?}"
    );
}
