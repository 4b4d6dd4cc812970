//! The async runtime openraft runs on, identical in production and in simulation.
//!
//! Everything here is written against the `tokio` name, which is the `madsim-tokio`
//! package: real tokio in a normal build, madsim's simulated tasks and clock under
//! `RUSTFLAGS="--cfg madsim"`. So [`LedgerRuntime`] is one type with one behaviour, and
//! the handful of places where the two worlds differ are this module's `cfg(madsim)`
//! items:
//! - the watch channel: tokio's spreads waiters over notify shards picked by a
//!   process-global RNG, which makes a second simulated run in one process diverge, so the
//!   simulation uses a single-queue watch (`det_watch`);
//! - blocking work: madsim refuses to start threads, so [`blocking`] runs the closure
//!   inline there and on tokio's blocking pool otherwise;
//! - the random source: seeded from madsim's seeded RNG in simulation.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use openraft_rt::{AsyncRuntime, OptionalSend};
use openraft_rt_tokio::{TokioMpsc, TokioMutex, TokioOneshot};
use rand::SeedableRng;

mod det_watch;

pub use det_watch::{DetWatch, DetWatchReceiver, DetWatchSender};

/// openraft's [`AsyncRuntime`] over `madsim-tokio`.
pub struct LedgerRuntime {
    #[cfg(not(madsim))]
    runtime: tokio::runtime::Runtime,
    #[cfg(madsim)]
    runtime: madsim::runtime::Runtime,
}

impl fmt::Debug for LedgerRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LedgerRuntime").finish_non_exhaustive()
    }
}

/// A [`Timeout`] ran out before its future finished.
///
/// tokio's `Elapsed` has no public constructor and madsim's is another type, so the
/// runtime brings its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline has elapsed")]
pub struct Elapsed;

/// A future with a deadline.
///
/// madsim's `timeout` returns an unnameable `impl Future`, and openraft needs a named
/// type. Both halves are boxed so the type is `Unpin` without unsafe pin projection; one
/// allocation per timeout is noise next to the RPC or disk write it guards.
pub struct Timeout<F> {
    future: Pin<Box<F>>,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The future goes first so that one finishing exactly at the deadline still wins.
        if let Poll::Ready(output) = self.future.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        self.sleep.as_mut().poll(cx).map(|()| Err(Elapsed))
    }
}

#[cfg(not(madsim))]
fn to_runtime_instant(instant: Instant) -> tokio::time::Instant {
    tokio::time::Instant::from_std(instant)
}

/// madsim intercepts the process clock, so its instants are `std::time::Instant`.
#[cfg(madsim)]
fn to_runtime_instant(instant: Instant) -> Instant {
    instant
}

#[cfg(not(madsim))]
fn random_seed() -> u64 {
    rand::random()
}

#[cfg(madsim)]
fn random_seed() -> u64 {
    madsim::rand::random()
}

/// Runs blocking disk work without stalling the async workers, and returns its result.
///
/// Normally the closure runs on tokio's blocking pool; under madsim, which forbids
/// threads, it runs inline, which keeps a simulated run deterministic. A panic in the
/// closure resumes in the caller.
#[cfg(not(madsim))]
pub async fn blocking<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => value,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // Only a runtime that is shutting down cancels a blocking task before it starts,
        // and then the awaiting task is being torn down too.
        Err(error) => panic!("blocking task did not run: {error}"),
    }
}

/// Runs blocking disk work inline: madsim forbids threads, and inline keeps a simulated
/// run deterministic.
#[cfg(madsim)]
pub async fn blocking<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    f()
}

impl AsyncRuntime for LedgerRuntime {
    type JoinError = tokio::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = tokio::task::JoinHandle<T>;
    type Sleep = tokio::time::Sleep;
    type Instant = Instant;
    type TimeoutError = Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = Timeout<T>;
    type ThreadLocalRng = rand::rngs::SmallRng;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        tokio::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        tokio::time::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        tokio::time::sleep_until(to_runtime_instant(deadline))
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        Timeout {
            future: Box::pin(future),
            sleep: Box::pin(tokio::time::sleep(duration)),
        }
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        Timeout {
            future: Box::pin(future),
            sleep: Box::pin(tokio::time::sleep_until(to_runtime_instant(deadline))),
        }
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        join_error.is_panic()
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        rand::rngs::SmallRng::seed_from_u64(random_seed())
    }

    type Mpsc = TokioMpsc;
    #[cfg(not(madsim))]
    type Watch = openraft_rt_tokio::TokioWatch;
    #[cfg(madsim)]
    type Watch = DetWatch;
    type Oneshot = TokioOneshot;
    type Mutex<T: OptionalSend + 'static> = TokioMutex<T>;

    #[cfg(not(madsim))]
    fn new(threads: usize) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .expect("a tokio runtime can be built");
        LedgerRuntime { runtime }
    }

    #[cfg(madsim)]
    fn new(_threads: usize) -> Self {
        LedgerRuntime {
            runtime: madsim::runtime::Runtime::new(),
        }
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.runtime.block_on(future)
    }

    #[cfg(not(madsim))]
    fn spawn_blocking<F, T>(f: F) -> impl Future<Output = Result<T, std::io::Error>> + Send
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let handle = tokio::task::spawn_blocking(f);
        async move { handle.await.map_err(std::io::Error::other) }
    }

    #[cfg(madsim)]
    async fn spawn_blocking<F, T>(f: F) -> Result<T, std::io::Error>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        Ok(f())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_passes_openraft_conformance_suite() {
        openraft_rt::testing::Suite::<LedgerRuntime>::test_all();
    }

    #[test]
    fn timeout_reports_elapsed_and_passes_through_ready_futures() {
        LedgerRuntime::run(async {
            let slow =
                LedgerRuntime::timeout(Duration::from_millis(5), std::future::pending::<()>());
            assert_eq!(slow.await, Err(Elapsed));
            let fast = LedgerRuntime::timeout(Duration::from_millis(5), async { 7 });
            assert_eq!(fast.await, Ok(7));
        });
    }

    #[test]
    fn blocking_returns_the_closure_result() {
        LedgerRuntime::run(async {
            assert_eq!(blocking(|| 6 * 7).await, 42);
        });
    }
}
