//! Admission control: a node serves a bounded number of client calls, and bytes, at once.
//!
//! A call (a command or a read, from a client or forwarded by a follower) is admitted or
//! turned away at once; it never waits in a queue of unbounded length. A call turned away
//! is answered `RESOURCE_EXHAUSTED` with a suggested wait (`retry-after-ms`) before
//! anything of it is proposed, so the caller may send the same call again, with the same
//! command id, and the ledger holds nothing of the first try. Bounding what a node works
//! on keeps its runtime free for Raft: a leader that accepted every call would spend its
//! cores on them while its heartbeats and appends wait, and lose its leadership to
//! followers that stopped hearing from it.
//!
//! The leader's own sweeps are not client calls and are never turned away.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::ProposerSettings;
use crate::error::NodeError;

/// The calls and bytes a node is serving, against its limits.
#[derive(Clone)]
pub struct Admission {
    calls: Arc<Semaphore>,
    calls_max: u32,
    bytes: Arc<Semaphore>,
    bytes_max: u32,
    retry_after_ms: u64,
}

/// A call's place among those admitted; released when dropped, once the call is answered.
#[must_use = "the call is admitted only while this is held"]
pub struct Admitted {
    _calls: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

impl Admission {
    /// Limits from `settings` (validated by the configuration: positive, bytes in `u32`).
    pub fn new(settings: &ProposerSettings) -> Self {
        let bytes_max = u32::try_from(settings.admitted_bytes_max).unwrap_or(u32::MAX);
        let calls_max = u32::try_from(settings.admitted_calls_max).unwrap_or(u32::MAX);
        Admission {
            calls: Arc::new(Semaphore::new(calls_max as usize)),
            calls_max,
            bytes: Arc::new(Semaphore::new(bytes_max as usize)),
            bytes_max,
            retry_after_ms: settings.overloaded_retry_after_ms,
        }
    }

    /// Admits a call of about `bytes`, or fails with [`NodeError::Overloaded`] when the
    /// node already serves as many calls or bytes as it admits. A call larger than the
    /// byte limit counts as the limit, so that it can still be served alone.
    pub fn admit(&self, bytes: usize) -> Result<Admitted, NodeError> {
        self.admit_many(1, bytes)
    }

    /// Admits `calls` calls of about `bytes` together (the commands of a group a follower
    /// forwarded), all or none, as [`Admission::admit`] admits one. More calls than the
    /// limit count as the limit, as more bytes do.
    pub fn admit_many(&self, calls: usize, bytes: usize) -> Result<Admitted, NodeError> {
        let overloaded = |what: &str| NodeError::Overloaded {
            what: what.to_owned(),
            retry_after_ms: self.retry_after_ms,
        };
        let calls = u32::try_from(calls.max(1))
            .unwrap_or(u32::MAX)
            .min(self.calls_max);
        let calls = self
            .calls
            .clone()
            .try_acquire_many_owned(calls)
            .map_err(|_| overloaded("calls in flight at the limit"))?;
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX).min(self.bytes_max);
        let bytes = self
            .bytes
            .clone()
            .try_acquire_many_owned(bytes)
            .map_err(|_| overloaded("bytes in flight at the limit"))?;
        Ok(Admitted {
            _calls: calls,
            _bytes: bytes,
        })
    }

    /// The wait suggested to a caller turned away.
    pub fn retry_after_ms(&self) -> u64 {
        self.retry_after_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(calls: usize, bytes: usize) -> Admission {
        Admission::new(&ProposerSettings {
            admitted_calls_max: calls,
            admitted_bytes_max: bytes,
            overloaded_retry_after_ms: 70,
            ..ProposerSettings::default()
        })
    }

    fn retry_after(result: Result<Admitted, NodeError>) -> u64 {
        match result {
            Err(NodeError::Overloaded { retry_after_ms, .. }) => retry_after_ms,
            Err(other) => panic!("expected overloaded, got {other}"),
            Ok(_) => panic!("expected overloaded, got admitted"),
        }
    }

    #[test]
    fn calls_beyond_the_limit_are_turned_away_until_one_finishes() {
        let a = admission(2, 1 << 20);
        let first = a.admit(10).unwrap();
        let _second = a.admit(10).unwrap();
        assert_eq!(retry_after(a.admit(10)), 70);
        drop(first);
        assert!(a.admit(10).is_ok());
    }

    #[test]
    fn bytes_beyond_the_limit_are_turned_away_and_a_huge_call_fits_alone() {
        let a = admission(100, 1_000);
        let half = a.admit(600).unwrap();
        assert_eq!(retry_after(a.admit(600)), 70);
        // The failed byte admission must not keep the call slot it took.
        drop(half);
        let huge = a.admit(usize::MAX).unwrap();
        assert_eq!(retry_after(a.admit(1)), 70);
        drop(huge);
        let _small: Vec<Admitted> = (0..100).map(|_| a.admit(10).unwrap()).collect();
        assert_eq!(retry_after(a.admit(1)), 70);
    }

    #[test]
    fn a_group_counts_each_of_its_calls_and_a_huge_group_fits_alone() {
        let a = admission(4, 1 << 20);
        let three = a.admit_many(3, 30).unwrap();
        let _one = a.admit(10).unwrap();
        assert_eq!(retry_after(a.admit(10)), 70);
        assert_eq!(retry_after(a.admit_many(2, 20)), 70);
        drop(three);
        assert_eq!(retry_after(a.admit_many(4, 40)), 70);
        let _three_more = a.admit_many(3, 30).unwrap();
        let b = admission(4, 1 << 20);
        let huge = b.admit_many(1_000, 10_000).unwrap();
        assert_eq!(retry_after(b.admit(1)), 70);
        drop(huge);
        assert!(b.admit_many(4, 40).is_ok());
    }
}
