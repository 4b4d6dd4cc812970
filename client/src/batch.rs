//! Claims and reports made at the same time by one client travel together, in `Batch`
//! calls.
//!
//! A call is queued, and a batch takes what is queued when it leaves: there is no timer, so
//! a call made alone leaves at once, in a batch of one, and calls made while batches are on
//! their way leave together in the next. At most [`FLIGHTS_MAX`] batches are on their way
//! at once, each of at most [`ITEMS_MAX`] items and about [`BYTES_MAX`] bytes; a call
//! larger than [`ALONE_BYTES`] is sent alone.
//!
//! Each item is the request its own call would send, command id included, and the node
//! serves it as that call, so batching changes how calls travel, never what they do:
//!
//! - A batch is sent by [`Transport::call_after_overload`]: the same retries, redirects and
//!   overload waits as a single call, and when the retries are spent every item fails as
//!   its call would have. Re-sending a batch re-sends each item's command id, so an item
//!   applied before an answer was lost returns its first outcome. The batch's overload
//!   waits count against each item's overload budget, which the batch spends from the item
//!   that waited most; once that one's is spent, each item is judged by its own.
//! - The items of a batch turned away as overloaded wait what the node suggested (once,
//!   together; capped, with jitter, as a single call waits) and are queued again together
//!   for a later batch; an item whose waits would pass the overload budget fails with
//!   `Overloaded`, as a single call does. Under overload, items keep travelling in
//!   batches, not as one call each.
//! - An item that failed in another way that may be retried (no leader, a timeout) is
//!   sent again on its own, with the single call's retries and waits; any other failure
//!   (a refusal, a bad request) is the call's answer.
//! - A node that answers `Batch` with `UNIMPLEMENTED` predates it: from then on this
//!   client sends every call on its own.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use prost::Message;
use tokio::sync::oneshot;
use tonic::Code;

use ledger_proto::pb;
use ledger_proto::pb::batch_item::Command as Item;
use ledger_proto::pb::batch_result::Result as Answer;

use crate::error::ClientError;
use crate::ledger::LedgerClient;
use crate::transport::{overload_hint, retryable, Transport};

/// Most batches on their way at once.
pub const FLIGHTS_MAX: usize = 16;
/// Most items in one batch (a node takes up to 256).
pub const ITEMS_MAX: usize = 64;
/// About the most bytes of items in one batch.
pub const BYTES_MAX: usize = 1 << 20;
/// Calls larger than this are sent on their own.
pub const ALONE_BYTES: usize = 256 << 10;

/// The queue of one client's calls, and the batches that carry them.
#[derive(Clone)]
pub(crate) struct Batcher {
    shared: Arc<Shared>,
}

struct Shared {
    transport: Transport,
    /// False once a node answered `Batch` with `UNIMPLEMENTED`.
    supported: AtomicBool,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    /// Batches on their way (tasks sending them).
    flights: usize,
}

/// A queued call and where its answer goes.
struct Waiting {
    item: Item,
    bytes: usize,
    answer: oneshot::Sender<Result<Answer, ClientError>>,
    /// How long it already waited on overload answers (its share of the budget).
    overload_waited_ms: u64,
}

impl Batcher {
    pub(crate) fn new(transport: Transport) -> Self {
        Batcher {
            shared: Arc::new(Shared {
                transport,
                supported: AtomicBool::new(true),
                queue: Mutex::new(Queue::default()),
            }),
        }
    }

    /// The answer to `item`, sent in a batch with the calls made meanwhile, or alone.
    pub(crate) async fn call(&self, item: Item) -> Result<Answer, ClientError> {
        let bytes = encoded_len(&item);
        if bytes > ALONE_BYTES || !self.shared.supported.load(Ordering::Relaxed) {
            return self.shared.alone(item, 0).await;
        }
        let (answer, answered) = oneshot::channel();
        self.shared.enqueue([Waiting {
            item,
            bytes,
            answer,
            overload_waited_ms: 0,
        }]);
        answered.await.unwrap_or_else(|_| {
            Err(ClientError::Unavailable {
                attempts: 0,
                last: "the client's batch task ended without an answer".into(),
            })
        })
    }
}

impl Shared {
    fn locked(&self) -> std::sync::MutexGuard<'_, Queue> {
        // The queue's state is valid after every statement; a panic elsewhere with the
        // lock held leaves nothing half-done.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues the calls of `waiting` together (so that they leave in one batch), and starts
    /// a batch on its way unless [`FLIGHTS_MAX`] are.
    fn enqueue(self: &Arc<Self>, waiting: impl IntoIterator<Item = Waiting>) {
        let fly = {
            let mut queue = self.locked();
            queue.waiting.extend(waiting);
            let fly = queue.flights < FLIGHTS_MAX;
            if fly {
                queue.flights += 1;
            }
            fly
        };
        if fly {
            tokio::spawn(self.clone().fly());
        }
    }

    /// Sends batches while calls are queued; one of at most [`FLIGHTS_MAX`] such tasks.
    async fn fly(self: Arc<Self>) {
        let mut landing = Landing {
            shared: &self,
            landed: false,
        };
        loop {
            let batch = {
                let mut queue = self.locked();
                if queue.waiting.is_empty() {
                    // Under the lock: a call queued after this finds one flight fewer.
                    queue.flights -= 1;
                    landing.landed = true;
                    return;
                }
                take_batch(&mut queue.waiting)
            };
            // Empty when every call left was an abandoned claim: the queue is empty now.
            if !batch.is_empty() {
                self.send(batch).await;
            }
        }
    }

    /// Sends `batch` and answers its calls.
    async fn send(self: &Arc<Self>, batch: Vec<Waiting>) {
        if !self.supported.load(Ordering::Relaxed) {
            for waiting in batch {
                self.resend(waiting.item, waiting.answer, waiting.overload_waited_ms);
            }
            return;
        }
        let (items, answers): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .map(|w| {
                let item = pb::BatchItem {
                    command: Some(w.item),
                };
                (item, (w.answer, w.bytes, w.overload_waited_ms))
            })
            .unzip();
        let message = pb::BatchRequest { items };
        let t = &self.transport;
        // The batch's own overload waits count against every item's budget, from the
        // item that waited most: no item waits longer in all than a single call may.
        let waited_before_ms = answers.iter().map(|(.., w)| *w).max().unwrap_or(0);
        let (sent, batch_waited_ms) = t
            .call_after_overload(waited_before_ms, |ch| {
                let request = t.request(message.clone());
                async move { LedgerClient::grpc(ch).batch(request).await }
            })
            .await;
        let items = message.items.into_iter().filter_map(|i| i.command);
        let results = match sent {
            Ok(response) => response.into_inner().results,
            Err(ClientError::Status {
                code: Code::Unimplemented,
                ..
            }) => {
                tracing::info!("the ledger node has no Batch call; sending calls one by one");
                self.supported.store(false, Ordering::Relaxed);
                for (item, (answer, _, waited_ms)) in items.zip(answers) {
                    self.resend(item, answer, waited_ms + batch_waited_ms);
                }
                return;
            }
            // Turned away until the item that waited most ran out of budget: each item is
            // judged by its own, and those with budget left wait and come back together.
            Err(ClientError::Overloaded { retry_after_ms, .. }) => {
                let shed = items
                    .zip(answers)
                    .map(|(item, (answer, bytes, waited_ms))| Waiting {
                        item,
                        bytes,
                        answer,
                        overload_waited_ms: waited_ms + batch_waited_ms,
                    })
                    .collect();
                self.requeue_after_overload(shed, Some(retry_after_ms));
                return;
            }
            Err(error) => {
                for (answer, ..) in answers {
                    let _ = answer.send(Err(error.clone()));
                }
                return;
            }
        };
        if results.len() != answers.len() {
            let error = ClientError::Malformed(format!(
                "{} answers to a batch of {}",
                results.len(),
                answers.len()
            ));
            for (answer, ..) in answers {
                let _ = answer.send(Err(error.clone()));
            }
            return;
        }
        let mut shed = Vec::new();
        let mut hint = None;
        for ((item, (answer, bytes, waited_ms)), result) in items.zip(answers).zip(results) {
            let waited_ms = waited_ms + batch_waited_ms;
            match result.result {
                Some(Answer::Error(error)) => {
                    let status = ledger_proto::item_error_to_status(error);
                    if let Some(item_hint) = overload_hint(&status) {
                        hint = hint.max(item_hint);
                        shed.push(Waiting {
                            item,
                            bytes,
                            answer,
                            overload_waited_ms: waited_ms,
                        });
                    } else if retryable(&status) {
                        self.resend(item, answer, waited_ms);
                    } else {
                        let _ = answer.send(Err(ClientError::from_status(status)));
                    }
                }
                Some(result) => {
                    let _ = answer.send(Ok(result));
                }
                None => {
                    let _ = answer.send(Err(ClientError::Malformed(
                        "a batch result without a result".into(),
                    )));
                }
            }
        }
        if !shed.is_empty() {
            self.requeue_after_overload(shed, hint);
        }
    }

    /// Queues the calls of `shed` (turned away together) again, together, once they have
    /// waited what the node suggested (`hint`; one wait for all of them, in a task of its
    /// own), so that they leave in one batch again; answers `Overloaded` instead each call
    /// whose waits would pass its overload budget.
    fn requeue_after_overload(self: &Arc<Self>, shed: Vec<Waiting>, hint: Option<u64>) {
        let (hint_ms, wait_ms) = self.transport.draw_overload_wait(hint);
        let mut again = Vec::new();
        for mut waiting in shed {
            let budget =
                self.transport
                    .within_overload_budget(hint_ms, wait_ms, waiting.overload_waited_ms);
            match budget {
                Ok(()) => {
                    waiting.overload_waited_ms += wait_ms;
                    again.push(waiting);
                }
                Err(overloaded) => {
                    let _ = waiting.answer.send(Err(overloaded));
                }
            }
        }
        if again.is_empty() {
            return;
        }
        let shared = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
            shared.enqueue(again);
        });
    }

    /// Sends `item`, which already waited `waited_ms` on overload answers, on its own, in a
    /// task of its own (its retries and overload waits must not hold up the batches), and
    /// answers it.
    fn resend(
        self: &Arc<Self>,
        item: Item,
        answer: oneshot::Sender<Result<Answer, ClientError>>,
        waited_ms: u64,
    ) {
        let shared = self.clone();
        tokio::spawn(async move {
            let _ = answer.send(shared.alone(item, waited_ms).await);
        });
    }

    /// The answer to `item` sent as its own call, after `waited_ms` of overload waits.
    async fn alone(&self, item: Item, waited_ms: u64) -> Result<Answer, ClientError> {
        let t = &self.transport;
        match item {
            Item::Claim(message) => t
                .call_after_overload(waited_ms, |ch| {
                    let request = t.request(message.clone());
                    async move { LedgerClient::grpc(ch).claim(request).await }
                })
                .await
                .0
                .map(|r| Answer::Claim(r.into_inner())),
            Item::Report(message) => t
                .call_after_overload(waited_ms, |ch| {
                    let request = t.request(message.clone());
                    async move { LedgerClient::grpc(ch).report(request).await }
                })
                .await
                .0
                .map(|r| Answer::Report(r.into_inner())),
        }
    }
}

/// Gives a flight back when its task ends without having done so itself (it panicked,
/// or the runtime dropped it), so that later calls can still start flights.
struct Landing<'a> {
    shared: &'a Shared,
    landed: bool,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        if !self.landed {
            self.shared.locked().flights -= 1;
        }
    }
}

/// The calls at the front of `waiting` that fit one batch (at least one, unless every
/// call left is an abandoned claim). A claim whose caller stopped waiting (it timed out or
/// was cancelled while queued) is dropped, not sent: granted, it would hold its effect's
/// lease with nobody to use it, and run out into an unknown outcome to reconcile although
/// nothing was sent. A report is sent whoever waits for it.
fn take_batch(waiting: &mut VecDeque<Waiting>) -> Vec<Waiting> {
    let mut batch = Vec::new();
    let mut bytes = 0;
    while let Some(next) = waiting.front() {
        if matches!(next.item, Item::Claim(_)) && next.answer.is_closed() {
            waiting.pop_front();
            continue;
        }
        if !batch.is_empty() && (batch.len() == ITEMS_MAX || bytes + next.bytes > BYTES_MAX) {
            break;
        }
        bytes += next.bytes;
        batch.extend(waiting.pop_front());
    }
    batch
}

/// The size of `item` on the wire.
fn encoded_len(item: &Item) -> usize {
    match item {
        Item::Claim(m) => m.encoded_len(),
        Item::Report(m) => m.encoded_len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(bytes: usize) -> Waiting {
        Waiting {
            item: Item::Report(pb::ReportRequest::default()),
            bytes,
            answer: oneshot::channel().0,
            overload_waited_ms: 0,
        }
    }

    fn sizes(waiting: &mut VecDeque<Waiting>) -> Vec<usize> {
        take_batch(waiting).iter().map(|w| w.bytes).collect()
    }

    #[test]
    fn a_batch_takes_calls_in_order_up_to_its_item_and_byte_limits() {
        let mut queue: VecDeque<_> = (0..ITEMS_MAX + 3).map(|_| waiting(10)).collect();
        assert_eq!(sizes(&mut queue).len(), ITEMS_MAX);
        assert_eq!(sizes(&mut queue).len(), 3);
        assert!(sizes(&mut queue).is_empty());

        let half = BYTES_MAX / 2;
        let mut queue: VecDeque<_> = [half, half - 1, 2, BYTES_MAX - 1, 5, 6]
            .into_iter()
            .map(waiting)
            .collect();
        assert_eq!(sizes(&mut queue), vec![half, half - 1]);
        assert_eq!(sizes(&mut queue), vec![2]);
        assert_eq!(sizes(&mut queue), vec![BYTES_MAX - 1]);
        assert_eq!(sizes(&mut queue), vec![5, 6]);
    }

    #[tokio::test]
    async fn a_flight_dropped_on_its_way_gives_its_place_back() {
        // A node that takes connections and never answers: the batch stays on its way.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap().to_string();
        let transport = Transport::new(vec![addr], "key", Default::default()).unwrap();
        let shared = Batcher::new(transport).shared;
        let (answer, answered) = oneshot::channel();
        {
            let mut queue = shared.locked();
            queue.waiting.push_back(Waiting {
                item: Item::Report(pb::ReportRequest::default()),
                bytes: 0,
                answer,
                overload_waited_ms: 0,
            });
            queue.flights = 1;
        }
        let flight = tokio::spawn(shared.clone().fly());
        while !shared.locked().waiting.is_empty() {
            tokio::task::yield_now().await;
        }
        // Dropped on its way, as a panic or a runtime shutting down would end it.
        flight.abort();
        assert!(flight.await.unwrap_err().is_cancelled());
        assert_eq!(shared.locked().flights, 0);
        assert!(answered.await.is_err(), "the call learns its batch is gone");
        drop(silent);
    }

    #[test]
    fn a_claim_nobody_waits_for_is_not_sent_and_a_report_always_is() {
        let claim = |bytes: usize| {
            let (answer, answered) = oneshot::channel();
            let w = Waiting {
                item: Item::Claim(pb::ClaimRequest::default()),
                bytes,
                answer,
                overload_waited_ms: 0,
            };
            (w, answered)
        };
        let (abandoned, gone) = claim(1);
        drop(gone);
        let (kept, _waits) = claim(2);
        // `waiting` builds reports whose callers are gone.
        let mut queue: VecDeque<_> = [abandoned, waiting(3), kept].into_iter().collect();
        assert_eq!(sizes(&mut queue), vec![3, 2]);
        let (abandoned, gone) = claim(4);
        drop(gone);
        let mut queue: VecDeque<_> = [abandoned].into_iter().collect();
        assert!(sizes(&mut queue).is_empty());
        assert!(queue.is_empty());
    }

    #[test]
    fn a_call_larger_than_a_batch_still_leaves_in_one_of_its_own() {
        let mut queue: VecDeque<_> = [1, BYTES_MAX * 2, 1].into_iter().map(waiting).collect();
        assert_eq!(sizes(&mut queue), vec![1]);
        assert_eq!(sizes(&mut queue), vec![BYTES_MAX * 2]);
        assert_eq!(sizes(&mut queue), vec![1]);
    }
}
