//! Watching records change: a stream of the records a filter follows, read from this
//! node's applied state each time an applied entry (or an installed snapshot) touches
//! them.
//!
//! An event is a wake-up, not a decision: it carries the record as this node holds it
//! after the change, which may lag the leader. A caller that acts on it reads the record
//! again (a linearizable `Get`), as `EffectRunner` does while it waits for another
//! attempt. A watch of one effect starts with the record as it is, so subscribing and
//! then reading cannot miss a change in between. A watcher that falls more than the
//! state machine keeps behind, or whose node installs a snapshot while it follows a
//! whole tenant, is ended with `ABORTED` and reads again before watching again; a
//! stopping node ends its watches with `UNAVAILABLE` ([`ending_at`]).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;
use tonic::Status;

use ledger_core::{keycode, EffectKey, EffectRecord};
use ledger_proto::{pb, WatchFilter, WATCHES_FULL_METADATA};
use ledger_raft_store::{Change, LedgerReader};

/// Watches one node serves at once; more are answered `RESOURCE_EXHAUSTED`.
pub const WATCHES_MAX: usize = 1_024;

/// The events of one watch.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

/// `events` until `stopping` turns true (or its sender is gone), then `UNAVAILABLE`: a
/// watch lasts as long as its caller keeps it, and a stopping node's graceful shutdown
/// waits for every open stream, so the node ends its watches itself and the callers
/// watch through another node.
pub fn ending_at(events: EventStream, stopping: watch::Receiver<bool>) -> EventStream {
    Box::pin(futures::stream::unfold(
        Some((events, stopping)),
        |state| async move {
            let (mut events, mut stopping) = state?;
            let stopped = tokio::select! {
                event = events.next() => Ok(event),
                _ = stopping.wait_for(|stopping| *stopping) => Err(()),
            };
            match stopped {
                Ok(event) => event.map(|event| (event, Some((events, stopping)))),
                Err(()) => Some((
                    Err(Status::unavailable(
                        "this node is stopping: watch through another node",
                    )),
                    None,
                )),
            }
        },
    ))
}

/// The watches a node serves, counted against [`WATCHES_MAX`].
#[derive(Debug, Clone, Default)]
pub struct Watches(Arc<AtomicUsize>);

/// One watch's place in [`Watches`], given back when its stream is dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Watches {
    /// The events `filter` follows on `reader`'s state, from now on.
    pub fn start(&self, reader: LedgerReader, filter: WatchFilter) -> Result<EventStream, Status> {
        let open = self.0.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(self.0.clone());
        if open >= WATCHES_MAX {
            // UNAVAILABLE, marked, not RESOURCE_EXHAUSTED: the other nodes may well have
            // room, and a client tries them where it would wait out an overload here.
            let mut status = Status::unavailable(format!(
                "this node serves {WATCHES_MAX} watches already: watch through another \
                 node, or poll with Get"
            ));
            status.metadata_mut().insert(
                WATCHES_FULL_METADATA,
                tonic::metadata::MetadataValue::from(1),
            );
            return Err(status);
        }
        // Subscribed before the first read: nothing applied after it is missed.
        let changes = reader.changes();
        let mut watch = Watch {
            reader,
            filter,
            changes,
            queue: VecDeque::new(),
            ended: false,
            _slot: slot,
        };
        if let Some(key) = watch.filter.key.clone() {
            watch.read(&key)?;
        }
        Ok(Box::pin(futures::stream::unfold(
            watch,
            |mut watch| async move {
                let next = watch.next().await?;
                Some((next, watch))
            },
        )))
    }
}

struct Watch {
    reader: LedgerReader,
    filter: WatchFilter,
    changes: tokio::sync::broadcast::Receiver<Arc<Change>>,
    queue: VecDeque<pb::WatchEvent>,
    ended: bool,
    _slot: Slot,
}

impl Watch {
    /// The next event or the error that ends the watch; `None` once ended.
    async fn next(&mut self) -> Option<Result<pb::WatchEvent, Status>> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(Ok(event));
            }
            if self.ended {
                return None;
            }
            let outcome = match self.changes.recv().await {
                Ok(change) => self.follow(&change),
                Err(RecvError::Lagged(missed)) => Err(Status::aborted(format!(
                    "this watch fell {missed} changes behind: read again, then watch again"
                ))),
                // The node is shutting down.
                Err(RecvError::Closed) => return None,
            };
            if let Err(status) = outcome {
                self.ended = true;
                return Some(Err(status));
            }
        }
    }

    /// Queues the events of one change.
    fn follow(&mut self, change: &Change) -> Result<(), Status> {
        match change {
            Change::Records { keys, .. } => {
                for stored in keys {
                    let Some(key) = keycode::read_key(stored) else {
                        continue;
                    };
                    if key.tenant == self.filter.tenant
                        && self.filter.key.as_ref().is_none_or(|k| *k == key)
                    {
                        self.read(&key)?;
                    }
                }
                Ok(())
            }
            Change::Replaced { .. } => match self.filter.key.clone() {
                Some(key) => self.read(&key),
                None => Err(Status::aborted(
                    "this node's state was replaced by a snapshot: list again, then watch again",
                )),
            },
        }
    }

    /// Queues an event for `key` if the filter follows it as it is now.
    fn read(&mut self, key: &EffectKey) -> Result<(), Status> {
        let (record, applied): (Option<EffectRecord>, Option<u64>) = self
            .reader
            .read_at(|ledger, applied| (ledger.get(key), applied))
            .map_err(|e| Status::unavailable(format!("ledger state unreadable: {e}")))?;
        if self.filter.matches(key, record.as_ref()) {
            self.queue.push_back(pb::WatchEvent {
                key: Some(key.clone().into()),
                record: record.map(Into::into),
                applied_index: applied.unwrap_or(0),
            });
        }
        Ok(())
    }
}
