//! How one client's concurrent calls travel: together in `Batch` calls, each answered as
//! its own; an item turned away as overloaded back in a later batch after the node's hint;
//! an item that failed in another retryable way sent again alone; and every call on its
//! own once a node answers `Batch` with UNIMPLEMENTED, as a node from before `Batch` does.
//! The node is a fake ledger service in process, because an older node cannot be run
//! here: it answers a report with the report's command id as the receipt, so each caller
//! can tell its own answer, and records which calls arrived.

mod fake;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::Status;

use ledger_client::batch::{FLIGHTS_MAX, ITEMS_MAX};
use ledger_client::{ClientError, LedgerClient, OverloadPolicy, RetryPolicy};
use ledger_core::{Authority, Declaration, EffectKey, EffectState, Refusal, Report, ToolRef};
use ledger_proto::pb;
use ledger_proto::pb::batch_item::Command as Item;
use ledger_proto::pb::batch_result::Result as Answer;

use fake::Handler;

/// How the fake answers a batch.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Answers every item, after a pause that lets calls pile up meanwhile.
    Serve,
    /// Answers items whose command id ends in `!` with UNAVAILABLE, others as `Serve`.
    FailMarked,
    /// Has no `Batch` (UNIMPLEMENTED), like a node from before it.
    Old,
    /// Turns the whole batch away: PERMISSION_DENIED.
    Deny,
    /// Answers items whose command id ends in `!` RESOURCE_EXHAUSTED with a retry-after
    /// hint of [`SHED_HINT_MS`] the first time each arrives (always, with `always`),
    /// others as `Serve`.
    ShedMarked { always: bool },
    /// Sheds every item of its first `sheds` batches as `ShedMarked` does, then turns
    /// every batch away whole: RESOURCE_EXHAUSTED with the same hint.
    ShedThenTurnAway { sheds: usize },
}

/// The retry-after hint of a shed item.
const SHED_HINT_MS: u64 = 200;

struct FakeNode {
    mode: Mode,
    /// Items per `Batch` call, in arrival order.
    batches: Arc<Mutex<Vec<usize>>>,
    /// Command ids of reports that came on their own.
    alone: Arc<Mutex<Vec<String>>>,
    /// Command ids of reports that came in batches, with when they came and in which
    /// batch (its place in `batches`).
    batched: Arc<Mutex<Vec<(String, tokio::time::Instant, usize)>>>,
}

/// A node's answer that it admits no more calls: RESOURCE_EXHAUSTED, [`SHED_HINT_MS`].
fn overloaded() -> Status {
    let mut status = Status::resource_exhausted("admission queue full");
    status.metadata_mut().insert(
        ledger_proto::RETRY_AFTER_MS_METADATA,
        SHED_HINT_MS.to_string().parse().unwrap(),
    );
    status
}

/// The answer the fake gives a report served: committed, its command id as receipt.
fn answer(report: &pb::ReportRequest) -> pb::ReportResponse {
    pb::ReportResponse {
        state: pb::EffectState::Committed as i32,
        receipt: Some(report.command_id.clone()),
    }
}

#[tonic::async_trait]
impl Handler for FakeNode {
    async fn batch(&self, request: pb::BatchRequest) -> Result<pb::BatchResponse, Status> {
        let items = request.items;
        let number = {
            let mut batches = self.batches.lock().unwrap();
            batches.push(items.len());
            batches.len() - 1
        };
        match self.mode {
            Mode::Old => return Err(fake::unimplemented()),
            Mode::Deny => return Err(Status::permission_denied("not for you")),
            Mode::ShedThenTurnAway { sheds } if number >= sheds => return Err(overloaded()),
            Mode::Serve
            | Mode::FailMarked
            | Mode::ShedMarked { .. }
            | Mode::ShedThenTurnAway { .. } => {}
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        let results = items
            .into_iter()
            .map(|item| {
                if let Some(Item::Report(r)) = &item.command {
                    let mut batched = self.batched.lock().unwrap();
                    let seen = batched.iter().any(|(id, ..)| *id == r.command_id);
                    batched.push((r.command_id.clone(), tokio::time::Instant::now(), number));
                    let shed = match self.mode {
                        Mode::ShedMarked { always } => always || !seen,
                        Mode::ShedThenTurnAway { .. } => true,
                        _ => false,
                    };
                    if shed && r.command_id.ends_with('!') {
                        let error = ledger_proto::status_to_item_error(&overloaded());
                        return pb::BatchResult {
                            result: Some(Answer::Error(error)),
                        };
                    }
                }
                let result = match item.command {
                    Some(Item::Report(r))
                        if self.mode == Mode::FailMarked && r.command_id.ends_with('!') =>
                    {
                        let status = Status::unavailable("no leader");
                        Answer::Error(ledger_proto::status_to_item_error(&status))
                    }
                    Some(Item::Report(r)) => Answer::Report(answer(&r)),
                    Some(Item::Claim(_)) | None => {
                        let status = ledger_proto::refusal_to_status(&Refusal::ProofRequired);
                        Answer::Error(ledger_proto::status_to_item_error(&status))
                    }
                };
                pb::BatchResult {
                    result: Some(result),
                }
            })
            .collect();
        Ok(pb::BatchResponse { results })
    }

    async fn report(&self, report: pb::ReportRequest) -> Result<pb::ReportResponse, Status> {
        self.alone.lock().unwrap().push(report.command_id.clone());
        Ok(answer(&report))
    }

    async fn claim(&self, _: pb::ClaimRequest) -> Result<pb::ClaimResponse, Status> {
        Err(ledger_proto::refusal_to_status(&Refusal::ProofRequired))
    }
}

/// A fake node served on loopback until dropped, and a client of it.
struct Served {
    node: Arc<FakeNode>,
    client: LedgerClient,
    _fake: fake::Served<FakeNode>,
}

async fn serve(mode: Mode) -> Served {
    serve_with(mode, OverloadPolicy::default()).await
}

async fn serve_with(mode: Mode, overload: OverloadPolicy) -> Served {
    let served = fake::serve(FakeNode {
        mode,
        batches: Default::default(),
        alone: Default::default(),
        batched: Default::default(),
    })
    .await;
    let retry = RetryPolicy {
        attempts: 2,
        backoff_ms: 10,
        ..RetryPolicy::default()
    };
    let client = LedgerClient::with_policies(
        vec![served.addr.clone()],
        "any-key-0000000001",
        retry,
        overload,
    )
    .unwrap();
    Served {
        node: served.handler.clone(),
        client,
        _fake: served,
    }
}

/// `n` reports made at once through `client`, with command ids `report-i` (and `!` at the
/// end for those `marked` picks); their answers in the same order.
async fn reports(
    client: &LedgerClient,
    n: usize,
    marked: impl Fn(usize) -> bool,
) -> Vec<(String, Result<(EffectState, Option<String>), ClientError>)> {
    let calls = (0..n).map(|i| {
        let client = client.clone();
        let id = format!("report-{i}{}", if marked(i) { "!" } else { "" });
        tokio::spawn(async move {
            let key = EffectKey::new("acme", "tests", format!("k{i}"));
            let report = Report::Committed {
                receipt: "r".into(),
            };
            let answer = client.report(&id, key, 1, report).await;
            (id, answer)
        })
    });
    let mut answers = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        answers.push(call.await.unwrap());
    }
    answers
}

#[tokio::test]
async fn calls_made_together_travel_in_batches_and_each_gets_its_own_answer() {
    let served = serve(Mode::Serve).await;
    let n = 300;
    for (id, answer) in reports(&served.client, n, |_| false).await {
        assert_eq!(answer.unwrap(), (EffectState::Committed, Some(id)));
    }
    let batches = served.node.batches.lock().unwrap().clone();
    assert_eq!(batches.iter().sum::<usize>(), n, "{batches:?}");
    assert!(batches.iter().all(|&b| b <= ITEMS_MAX), "{batches:?}");
    // The first batches leave with the first calls; the others wait for them and leave
    // full, so far fewer calls than reports reach the node.
    assert!(batches.len() <= n / 10, "{batches:?}");
    assert!(served.node.alone.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_item_that_failed_retryably_is_sent_again_alone_and_a_refusal_is_final() {
    let served = serve(Mode::FailMarked).await;
    let answers = reports(&served.client, 40, |i| i % 4 == 0).await;
    for (id, answer) in &answers {
        assert_eq!(
            answer.as_ref().unwrap(),
            &(EffectState::Committed, Some(id.clone()))
        );
    }
    let mut alone = served.node.alone.lock().unwrap().clone();
    alone.sort();
    let mut marked: Vec<_> = answers
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| id.ends_with('!'))
        .collect();
    marked.sort();
    assert_eq!(alone, marked);

    // A refusal inside a batch is the call's answer: not sent again.
    let declaration = Declaration {
        key: EffectKey::new("acme", "tests", "k"),
        workflow_id: "w".into(),
        tool: ToolRef {
            provider: "payments".into(),
            name: "refund".into(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: "user:test".into(),
            policy_generation: 1,
        },
        target: "order:1".into(),
        intent_json: "{}".into(),
    };
    let claimed = served
        .client
        .claim("claim-1", declaration, "holder", None, None)
        .await;
    assert!(
        matches!(claimed, Err(ClientError::Refused(Refusal::ProofRequired))),
        "{claimed:?}"
    );
}

/// Items a node turned away as overloaded wait its hint and come back in a later batch,
/// never as one call each (which is more work for a node that is already full).
#[tokio::test]
async fn an_item_turned_away_as_overloaded_waits_the_hint_and_returns_in_a_batch() {
    let served = serve(Mode::ShedMarked { always: false }).await;
    let answers = reports(&served.client, 40, |i| i % 4 == 0).await;
    for (id, answer) in &answers {
        assert_eq!(
            answer.as_ref().unwrap(),
            &(EffectState::Committed, Some(id.clone()))
        );
    }
    assert!(served.node.alone.lock().unwrap().is_empty());
    let batched = served.node.batched.lock().unwrap().clone();
    let (mut shed_in, mut back_in) = (Vec::new(), Vec::new());
    for (id, _) in answers.iter().filter(|(id, _)| id.ends_with('!')) {
        let arrivals: Vec<_> = batched
            .iter()
            .filter(|(b, ..)| b == id)
            .map(|(_, at, number)| (*at, *number))
            .collect();
        assert_eq!(arrivals.len(), 2, "{id}: {arrivals:?}");
        let waited = arrivals[1].0 - arrivals[0].0;
        assert!(
            waited >= Duration::from_millis(SHED_HINT_MS),
            "{id} came back after {waited:?}"
        );
        shed_in.push(arrivals[0].1);
        back_in.push(arrivals[1].1);
    }
    // Turned away together, they come back together: in no more batches than they were
    // shed from (not one batch each).
    for batches in [&mut shed_in, &mut back_in] {
        batches.sort();
        batches.dedup();
    }
    assert!(
        back_in.len() <= shed_in.len(),
        "shed in {shed_in:?}, back in {back_in:?}"
    );
}

/// An item turned away again and again fails as a single call would once its waits pass
/// the overload budget: `Overloaded`, a clear "try later"; the others are served.
#[tokio::test]
async fn an_item_overloaded_past_its_budget_fails_as_overloaded() {
    let overload = OverloadPolicy {
        wait_ms_max: 1_000,
        ..OverloadPolicy::default()
    };
    let served = serve_with(Mode::ShedMarked { always: true }, overload).await;
    for (id, answer) in reports(&served.client, 8, |i| i % 4 == 0).await {
        if id.ends_with('!') {
            assert!(
                matches!(answer, Err(ClientError::Overloaded { .. })),
                "{id}: {answer:?}"
            );
        } else {
            assert_eq!(answer.unwrap(), (EffectState::Committed, Some(id)));
        }
    }
    assert!(served.node.alone.lock().unwrap().is_empty());
    let batched = served.node.batched.lock().unwrap().clone();
    let tries = batched.iter().filter(|(id, ..)| id == "report-0!").count();
    // Waits of 200 to 300 ms, at most 1 s of them: three to five waits, so four to six
    // tries in all.
    assert!((4..=6).contains(&tries), "{tries}");
}

/// An item's overload waits in batches turned away whole count against the budget it
/// already spent when shed from earlier batches: it fails `Overloaded` once its waits in
/// all would pass one budget, not after the whole call has spent a budget of its own.
#[tokio::test]
async fn an_item_shed_and_then_turned_away_with_its_batch_waits_one_budget_in_all() {
    const BUDGET_MS: u64 = 2_000;
    let overload = OverloadPolicy {
        wait_ms_max: BUDGET_MS,
        ..OverloadPolicy::default()
    };
    // Shed five times (waits of 200 to 300 ms: 1 to 1.5 s of the budget), then turned
    // away whole.
    let served = serve_with(Mode::ShedThenTurnAway { sheds: 5 }, overload).await;
    let answers = reports(&served.client, 1, |_| true).await;
    let Err(ClientError::Overloaded { waited_ms, .. }) = answers[0].1 else {
        panic!("expected Overloaded, got {:?}", answers[0].1);
    };
    assert!(waited_ms <= BUDGET_MS, "waited {waited_ms} ms");
    // Every turn-away but the last of each call was waited out, and a call after the first
    // followed a wait in the queue: five waits when shed and one per whole turn-away less
    // one, each of at least the hint. The item's answer counts them all; a whole call that
    // spent a budget of its own would count only its own, and take more than one budget.
    let turned_away = served.node.batches.lock().unwrap().len() - 5;
    assert!(turned_away > 0, "never turned away whole");
    assert!(
        waited_ms >= SHED_HINT_MS * (turned_away as u64 + 4),
        "waited {waited_ms} ms over 5 sheds and {turned_away} whole turn-aways"
    );
}

#[tokio::test]
async fn a_node_without_batch_gets_every_call_on_its_own_from_then_on() {
    let served = serve(Mode::Old).await;
    for (id, answer) in reports(&served.client, 20, |_| false).await {
        assert_eq!(answer.unwrap(), (EffectState::Committed, Some(id)));
    }
    assert_eq!(served.node.alone.lock().unwrap().len(), 20);
    let tried = served.node.batches.lock().unwrap().len();
    assert!((1..=FLIGHTS_MAX).contains(&tried), "{tried}");
    for (id, answer) in reports(&served.client, 5, |_| false).await {
        assert_eq!(answer.unwrap(), (EffectState::Committed, Some(id)));
    }
    assert_eq!(served.node.alone.lock().unwrap().len(), 25);
    assert_eq!(served.node.batches.lock().unwrap().len(), tried);
}

#[tokio::test]
async fn a_batch_turned_away_is_every_item_s_answer() {
    let served = serve(Mode::Deny).await;
    for (_, answer) in reports(&served.client, 10, |_| false).await {
        assert!(
            matches!(
                answer,
                Err(ClientError::Status {
                    code: tonic::Code::PermissionDenied,
                    ..
                })
            ),
            "{answer:?}"
        );
    }
    assert!(served.node.alone.lock().unwrap().is_empty());
}
