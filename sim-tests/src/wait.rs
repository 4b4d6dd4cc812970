//! Bounded waiting for a condition in simulated time.
//!
//! Scenarios never sleep for a fixed time and hope: they poll a condition until it holds
//! or a deadline passes, and a missed deadline is a failure that says what was awaited
//! and what was seen last.

use std::future::Future;
use std::time::Duration;

/// How often conditions are polled.
pub const POLL: Duration = Duration::from_millis(20);

/// Polls `check` every [`POLL`] until it returns `Ok`, or fails after `timeout` with the
/// last `Err` it returned (which should describe what is still missing).
pub async fn until<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return Ok(value),
            Err(last) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("{what}: not within {timeout:?}; last seen: {last}"));
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Like [`until`], for a check that must itself wait (a network call).
pub async fn until_async<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return Ok(value),
            Err(last) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("{what}: not within {timeout:?}; last seen: {last}"));
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}
