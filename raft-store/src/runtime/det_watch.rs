//! A watch channel whose wake-ups involve no randomness.
//!
//! `tokio::sync::watch` parks each waiting receiver on one of eight `Notify` shards chosen
//! by tokio's thread-local RNG, and that RNG is seeded from a process-global counter. The
//! order in which receivers wake therefore depends on how many tokio contexts the process
//! created before, so two simulated runs of one seed in one process diverge (madsim's
//! determinism check catches it). This channel keeps a single `Notify`, which wakes
//! waiters in the order they arrived. The simulation build uses it as openraft's watch.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use openraft_rt::watch::{RecvError, SendError, Watch, WatchReceiver, WatchSender};
use openraft_rt::{OptionalSend, OptionalSync};
use tokio::sync::Notify;

/// openraft's [`Watch`] implemented with one `Notify` instead of tokio's RNG-picked shards.
#[derive(Debug)]
pub struct DetWatch;

struct Shared<T> {
    value: RwLock<T>,
    /// Bumped on every change; a receiver compares it with the version it last saw.
    version: AtomicU64,
    senders: AtomicUsize,
    receivers: AtomicUsize,
    notify: Notify,
}

impl<T> Shared<T> {
    /// A panic inside `send_if_modified` leaves the lock poisoned; like tokio's watch,
    /// the channel keeps serving the value as it was left.
    fn read(&self) -> RwLockReadGuard<'_, T> {
        self.value.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn changed(&self) {
        self.version.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// The sending half of a [`DetWatch`] channel.
pub struct DetWatchSender<T>(Arc<Shared<T>>);

/// The receiving half of a [`DetWatch`] channel.
pub struct DetWatchReceiver<T> {
    shared: Arc<Shared<T>>,
    seen_version: u64,
}

impl<T> Clone for DetWatchSender<T> {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::SeqCst);
        DetWatchSender(self.0.clone())
    }
}

impl<T> Drop for DetWatchSender<T> {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::SeqCst) == 1 {
            // Waiting receivers must learn that no value will ever come.
            self.0.notify.notify_waiters();
        }
    }
}

impl<T> Clone for DetWatchReceiver<T> {
    fn clone(&self) -> Self {
        self.shared.receivers.fetch_add(1, Ordering::SeqCst);
        DetWatchReceiver {
            shared: self.shared.clone(),
            seen_version: self.seen_version,
        }
    }
}

impl<T> Drop for DetWatchReceiver<T> {
    fn drop(&mut self) {
        self.shared.receivers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Watch for DetWatch {
    type Sender<T: OptionalSend + OptionalSync> = DetWatchSender<T>;
    type Receiver<T: OptionalSend + OptionalSync> = DetWatchReceiver<T>;
    type Ref<'a, T: OptionalSend + 'a> = RwLockReadGuard<'a, T>;

    fn channel<T: OptionalSend + OptionalSync>(init: T) -> (Self::Sender<T>, Self::Receiver<T>) {
        let shared = Arc::new(Shared {
            value: RwLock::new(init),
            version: AtomicU64::new(0),
            senders: AtomicUsize::new(1),
            receivers: AtomicUsize::new(1),
            notify: Notify::new(),
        });
        let receiver = DetWatchReceiver {
            shared: shared.clone(),
            seen_version: 0,
        };
        (DetWatchSender(shared), receiver)
    }
}

impl<T: OptionalSend + OptionalSync> WatchSender<DetWatch, T> for DetWatchSender<T> {
    fn send(&self, value: T) -> Result<(), SendError<T>> {
        if self.0.receivers.load(Ordering::SeqCst) == 0 {
            return Err(SendError(value));
        }
        *self.0.value.write().unwrap_or_else(PoisonError::into_inner) = value;
        self.0.changed();
        Ok(())
    }

    fn send_if_modified<F>(&self, modify: F) -> bool
    where
        F: FnOnce(&mut T) -> bool,
    {
        let modified = {
            let mut value = self.0.value.write().unwrap_or_else(PoisonError::into_inner);
            modify(&mut value)
        };
        if modified {
            self.0.changed();
        }
        modified
    }

    fn borrow_watched(&self) -> RwLockReadGuard<'_, T> {
        self.0.read()
    }

    fn subscribe(&self) -> DetWatchReceiver<T> {
        self.0.receivers.fetch_add(1, Ordering::SeqCst);
        DetWatchReceiver {
            shared: self.0.clone(),
            seen_version: self.0.version.load(Ordering::SeqCst),
        }
    }
}

impl<T: OptionalSend + OptionalSync> WatchReceiver<DetWatch, T> for DetWatchReceiver<T> {
    async fn changed(&mut self) -> Result<(), RecvError> {
        loop {
            // Register interest before checking, so a send between the check and the
            // await still wakes this receiver.
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let version = self.shared.version.load(Ordering::SeqCst);
            if version != self.seen_version {
                self.seen_version = version;
                return Ok(());
            }
            if self.shared.senders.load(Ordering::SeqCst) == 0 {
                return Err(RecvError(()));
            }
            notified.await;
        }
    }

    fn borrow_watched(&self) -> RwLockReadGuard<'_, T> {
        self.shared.read()
    }

    fn borrow_and_update(&mut self) -> RwLockReadGuard<'_, T> {
        let value = self.shared.read();
        // A sender bumps the version only after releasing its write lock, so the version
        // read here is never newer than the value returned: at worst the next `changed`
        // wakes once for a value already seen; it never misses one.
        self.seen_version = self.shared.version.load(Ordering::SeqCst);
        value
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use openraft_rt::AsyncRuntime;

    use super::*;
    use crate::runtime::LedgerRuntime;

    #[test]
    fn receiver_sees_each_change_once() {
        LedgerRuntime::run(async {
            let (tx, mut rx) = DetWatch::channel(0u32);
            tx.send(1).expect("a receiver exists");
            rx.changed().await.expect("sender alive");
            assert_eq!(*rx.borrow_watched(), 1);
            let waiting = LedgerRuntime::timeout(Duration::from_millis(10), rx.changed());
            assert!(waiting.await.is_err(), "no second change was sent");
        });
    }

    #[test]
    fn waiting_receiver_wakes_on_send_from_another_task() {
        LedgerRuntime::run(async {
            let (tx, mut rx) = DetWatch::channel(0u32);
            let sender = LedgerRuntime::spawn(async move {
                LedgerRuntime::sleep(Duration::from_millis(1)).await;
                tx.send(5).expect("a receiver exists");
                tx
            });
            rx.changed().await.expect("sender alive");
            assert_eq!(*rx.borrow_and_update(), 5);
            drop(sender.await.expect("sender task"));
        });
    }

    #[test]
    fn dropping_last_sender_ends_waiting() {
        LedgerRuntime::run(async {
            let (tx, mut rx) = DetWatch::channel(());
            drop(tx);
            assert!(rx.changed().await.is_err());
        });
    }

    #[test]
    fn send_without_receivers_fails() {
        let (tx, rx) = DetWatch::channel(0u8);
        drop(rx);
        assert!(tx.send(1).is_err());
    }
}
