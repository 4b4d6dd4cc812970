//! Waiting for another attempt to end, by polling the linearizable record.
//!
//! The ledger has no watch call; polling the record is what a stateless tool server can
//! do between two requests anyway. An attempt has ended when the record has no open
//! attempt: reported, or its lease ran out and the leader's sweeper closed it.

use std::time::Duration;

use ledger_core::{EffectKey, EffectRecord};

use super::EffectRunner;
use crate::error::ClientError;

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
        loop {
            let Some(record) = self.ledger().get(key.clone()).await? else {
                return Ok(Settled::Missing);
            };
            if record.open_attempt().is_none() {
                return Ok(Settled::Ended(Box::new(record)));
            }
            if tokio::time::Instant::now() + poll > deadline {
                return Ok(Settled::TimedOut(Box::new(record)));
            }
            tokio::time::sleep(poll).await;
        }
    }
}
