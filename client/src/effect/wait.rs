//! Waiting for another attempt to end: woken by a watch of the record, decided by the
//! linearizable record.
//!
//! The wait subscribes to the record's changes (`Watch`) before it reads the record, so a
//! change between the two wakes it; each wake-up reads the record again (a watch event
//! comes from whichever node serves the watch and may lag the leader). If no node serves
//! the watch, or the watch ends, it polls the record instead. An attempt has ended when
//! the record has no open attempt: reported, or its lease ran out and the leader's
//! sweeper closed it.

use std::time::Duration;

use ledger_core::{EffectKey, EffectRecord};
use ledger_proto::WatchFilter;

use super::EffectRunner;
use crate::error::ClientError;

/// Longest wait for a watch to open before a wait for an effect to settle polls instead.
const WATCH_OPEN_MS_MAX: u64 = 1_000;

/// How a wait for another attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// No attempt is open any more; the record as it is now.
    Ended(Box<EffectRecord>),
    /// The deadline passed with an attempt still open; the record as last seen.
    TimedOut(Box<EffectRecord>),
    /// No such effect.
    Missing,
}

impl EffectRunner {
    /// Waits up to `wait_ms` until no attempt of `key` is open.
    pub async fn wait_until_settled(
        &self,
        key: &EffectKey,
        wait_ms: u64,
    ) -> Result<Settled, ClientError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
        let poll = Duration::from_millis(self.options().poll_interval_ms.max(1));
        // Bounded: when every node serves all the watches it may (or none answers), the
        // transport retries for up to its whole retry budget; this wait polls instead once
        // a second, or its own time, is up.
        let watching = self.ledger().watch(WatchFilter::effect(key));
        let open_ms = wait_ms.min(WATCH_OPEN_MS_MAX);
        let mut watch = tokio::time::timeout(Duration::from_millis(open_ms), watching)
            .await
            .ok()
            .and_then(Result::ok);
        loop {
            let Some(record) = self.ledger().get(key.clone()).await? else {
                return Ok(Settled::Missing);
            };
            if record.open_attempt().is_none() {
                return Ok(Settled::Ended(Box::new(record)));
            }
            let now = tokio::time::Instant::now();
            match watch.as_mut() {
                Some(events) if now < deadline => {
                    match tokio::time::timeout(deadline - now, events.next()).await {
                        // A change, or the deadline: read again.
                        Ok(Some(Ok(_))) | Err(_) => {}
                        // The watch ended: poll from here on.
                        Ok(Some(Err(_)) | None) => watch = None,
                    }
                }
                _ if now + poll > deadline => return Ok(Settled::TimedOut(Box::new(record))),
                _ => tokio::time::sleep(poll).await,
            }
        }
    }
}
