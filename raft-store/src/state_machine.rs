//! The replicated state machine: the effect ledger in the disk's tables.
//!
//! Committed entries are applied to a [`Ledger`] over a [`DiskStore`]; each normal
//! entry's commands run in order at the stamp the leader put on the entry, never at a
//! local clock. An entry's writes are committed as one atomic batch together with the
//! entry's log id, so the state on disk always matches its applied position. Applies are
//! not synced one by one: the Raft log is durable, and after a power failure openraft
//! re-applies the committed entries after the applied position that survived. Before a
//! snapshot is reported built (which lets openraft purge the log) the disk is synced, so
//! the state up to the snapshot is durable.
//!
//! Memory holds only what is being applied: a restart reads the applied position from
//! the disk and serves from there (see `snapshot` for snapshots and installs).
//!
//! The ledger sits behind an `RwLock` shared with any number of [`LedgerReader`]s, so the
//! node can serve reads while the state machine belongs to openraft. Readers can also
//! follow what each applied entry changed ([`LedgerReader::changes`]): the records it
//! wrote, or that a snapshot replaced everything.

use std::io;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use std::time::Instant;
use tokio::sync::broadcast;

use futures::{Stream, TryStreamExt};
use ledger_core::Ledger;
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use crate::disk::{DiskRef, Keyspace, WriteBatch};
use crate::error::StoreError;
use crate::ledger_store::{DiskStore, ViewStore};
use crate::metrics::{APPLY_COMMANDS, APPLY_SECONDS};
use crate::runtime::blocking;
use crate::snapshot::{
    clear_other_generations, install, put_applied, read_applied, read_generation, SnapshotReceiver,
    Standby,
};
use crate::types::{
    Entry, LedgerResponse, LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership,
    TypeConfig,
};

/// The ledger as the state machine keeps it.
pub type StoredLedger = Ledger<DiskStore>;

/// The ledger and the Raft position it reflects, always changed together.
#[derive(Debug)]
struct Applied {
    ledger: StoredLedger,
    last_applied: Option<LogId>,
    membership: StoredMembership,
}

impl Applied {
    /// Applies one entry and commits its writes with its log id in one batch; returns
    /// its response and the keys of the records it wrote.
    fn apply(&mut self, entry: Entry) -> Result<(LedgerResponse, Vec<Vec<u8>>), StoreError> {
        let log_id = entry.log_id();
        if let Some(last) = &self.last_applied {
            if last.index() >= log_id.index() {
                return Err(StoreError::Inconsistent(format!(
                    "entry {log_id} applied after {last}"
                )));
            }
        }
        let mut membership = None;
        let ledger = &mut self.ledger;
        ledger.store_mut().begin_entry();
        // A damaged value reads as absent, which can lead the ledger's own invariant
        // checks to panic; with a fault latched, that panic only means "stop here".
        let applied =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match entry.payload {
                EntryPayload::Blank => LedgerResponse::default(),
                EntryPayload::Normal(request) => {
                    ledger.prefetch(&request.commands);
                    LedgerResponse {
                        outcomes: request
                            .commands
                            .iter()
                            .map(|command| ledger.apply_stamped(command, request.stamp))
                            .collect(),
                    }
                }
                EntryPayload::Membership(m) => {
                    membership = Some(StoredMembership::new(Some(log_id), m));
                    LedgerResponse::default()
                }
            }));
        let response = match applied {
            Ok(response) => response,
            Err(panic) => match self.ledger.store().fault() {
                Some(fault) => {
                    self.ledger.store_mut().discard();
                    return Err(fault);
                }
                None => std::panic::resume_unwind(panic),
            },
        };
        let store = self.ledger.store_mut();
        if let Some(fault) = store.fault() {
            store.discard();
            return Err(fault);
        }
        let mut batch = WriteBatch::new();
        let written = store.take_writes(&mut batch);
        let membership = membership.unwrap_or_else(|| self.membership.clone());
        put_applied(&mut batch, store.generation(), &Some(log_id), &membership)?;
        store.disk().write(batch)?;
        self.last_applied = Some(log_id);
        self.membership = membership;
        Ok((response, written))
    }
}

/// `ledger` with the derived tables this version keeps and an older one did not
/// ([`Ledger::upgrade_indexes`]), written to the disk. They are a function of the state
/// at the applied position, so they need no log id of their own; if a crash loses them,
/// the next open adds them again. Damage met on the way is latched in the store as on any
/// read: nothing is written, and the node serves nothing from that state.
fn upgraded(mut ledger: StoredLedger) -> Result<StoredLedger, StoreError> {
    let added = ledger.upgrade_indexes();
    let store = ledger.store_mut();
    if let Some(fault) = store.fault() {
        tracing::error!(%fault, "indexing the open escalations met damaged state");
        store.discard();
        return Ok(ledger);
    }
    if store.pending_writes() > 0 {
        let mut batch = WriteBatch::new();
        store.take_writes(&mut batch);
        store.disk().write(batch)?;
    }
    if added > 0 {
        tracing::info!(added, "indexed the open escalations of an older store");
    }
    Ok(ledger)
}

/// What the state machine changed, as told to watchers ([`LedgerReader::changes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The entry at `index` wrote these records (created, changed or removed; keys as
    /// stored, `ledger_core::keycode::key`).
    Records {
        /// The entry's log index.
        index: u64,
        /// The records' keys.
        keys: Vec<Vec<u8>>,
    },
    /// A snapshot up to `index` replaced the whole state.
    Replaced {
        /// The last log index the snapshot covers.
        index: u64,
    },
}

/// Changes kept for watchers that fall behind; one that falls further is told so and
/// reads again.
const CHANGES_KEPT: usize = 1_024;

/// openraft's state machine and snapshot builder for the ledger. Cheap to clone: clones
/// share the state and the disk (openraft uses a clone as the snapshot builder).
#[derive(Clone)]
pub struct LedgerStateMachine {
    applied: Arc<RwLock<Applied>>,
    disk: DiskRef,
    /// Where received snapshots are restored.
    standby: Arc<Standby>,
    changes: broadcast::Sender<Arc<Change>>,
}

impl std::fmt::Debug for LedgerStateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerStateMachine").finish_non_exhaustive()
    }
}

/// A read-only handle on the applied ledger, for serving queries, which also receives
/// snapshot streams beside the state. Cheap to clone.
#[derive(Clone)]
pub struct LedgerReader {
    applied: Arc<RwLock<Applied>>,
    standby: Arc<Standby>,
    changes: broadcast::Sender<Arc<Change>>,
}

impl std::fmt::Debug for LedgerReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerReader").finish_non_exhaustive()
    }
}

impl LedgerReader {
    /// Every change applied from now on, in order. A receiver that falls more than
    /// [`CHANGES_KEPT`] changes behind gets `Lagged` and must read the state again.
    pub fn changes(&self) -> broadcast::Receiver<Arc<Change>> {
        self.changes.subscribe()
    }

    fn lock(&self) -> Result<RwLockReadGuard<'_, Applied>, StoreError> {
        // Poisoned only if applying an entry panicked (a ledger invariant assertion):
        // openraft has then stopped the node, and no decision may rest on that state.
        self.applied.read().map_err(|_| StoreError::Poisoned)
    }

    /// Runs `f` on the ledger as of the last applied entry. Holds a read lock for the
    /// duration of `f`, which delays applying; keep `f` short. An error when the state
    /// could not be read (`f`'s answer is then not to be trusted) or an apply panicked.
    pub fn read<R>(&self, f: impl FnOnce(&StoredLedger) -> R) -> Result<R, StoreError> {
        self.read_at(|ledger, _| f(ledger))
    }

    /// Runs `f` on the ledger and the index of the last entry applied to it, read together
    /// so that they describe one moment.
    pub fn read_at<R>(
        &self,
        f: impl FnOnce(&StoredLedger, Option<u64>) -> R,
    ) -> Result<R, StoreError> {
        let applied = self.lock()?;
        let answer = f(
            &applied.ledger,
            applied.last_applied.as_ref().map(|l| l.index()),
        );
        match applied.ledger.store().fault() {
            Some(fault) => Err(fault),
            None => Ok(answer),
        }
    }

    /// The log id of the last applied entry.
    pub fn last_applied(&self) -> Option<LogId> {
        self.lock().ok().and_then(|a| a.last_applied)
    }

    /// The index of the last applied entry.
    pub fn last_applied_index(&self) -> Option<u64> {
        self.last_applied().map(|log_id| log_id.index())
    }

    /// The state digest ([`Ledger::state_digest`]) and the index of the last entry it
    /// reflects, computed from a point-in-time view without holding applies back
    /// (blocking: reads the whole state).
    pub fn state_digest(&self) -> Result<([u8; 32], Option<u64>), StoreError> {
        let (view, generation, applied) = {
            let applied = self.lock()?;
            let store = applied.ledger.store();
            (
                store.disk().view(Keyspace::State)?,
                store.generation(),
                applied.last_applied.as_ref().map(|l| l.index()),
            )
        };
        let ledger = Ledger::on(ViewStore::new(view, generation));
        let digest = ledger.state_digest();
        match ledger.store().fault() {
            Some(fault) => Err(fault),
            None => Ok((digest, applied)),
        }
    }

    /// The state as it is now, as a snapshot; `None` before anything was applied.
    pub(crate) fn snapshot_now(&self) -> Result<Option<Snapshot>, StoreError> {
        snapshot_of(&*self.lock()?)
    }

    /// Begins receiving a snapshot stream into the generation that is not live; a stream
    /// begun earlier and not installed yet can write nothing more (blocking: clears that
    /// generation).
    pub fn receive_snapshot(&self) -> Result<SnapshotReceiver, StoreError> {
        self.standby.receive()
    }
}

impl LedgerStateMachine {
    /// Opens the state machine on `disk`: the live generation and its applied position,
    /// nothing loaded.
    pub async fn open(disk: DiskRef) -> Result<LedgerStateMachine, StoreError> {
        let reading = disk.clone();
        let (ledger, last_applied, membership, standby) = blocking(move || {
            // First, so that a state machine left over on this disk writes nothing more.
            let standby = Standby::open(reading.clone())?;
            let generation = read_generation(&reading)?;
            clear_other_generations(&reading, generation)?;
            let (last_applied, membership) = read_applied(&reading, generation)?;
            let ledger = upgraded(Ledger::on(DiskStore::new(reading, generation)))?;
            Ok::<_, StoreError>((ledger, last_applied, membership, standby))
        })
        .await?;
        let applied = Applied {
            ledger,
            last_applied,
            membership,
        };
        Ok(LedgerStateMachine {
            applied: Arc::new(RwLock::new(applied)),
            standby,
            disk,
            changes: broadcast::channel(CHANGES_KEPT).0,
        })
    }

    /// A read handle that stays valid after the state machine moves into `Raft::new`.
    pub fn reader(&self) -> LedgerReader {
        LedgerReader {
            applied: self.applied.clone(),
            standby: self.standby.clone(),
            changes: self.changes.clone(),
        }
    }

    /// The state as it is now, as a snapshot: a view taken while no apply commits, with
    /// the position it shows. `None` before anything was applied.
    fn current(&self) -> Result<Option<Snapshot>, StoreError> {
        snapshot_of(&*self.applied.read().map_err(|_| StoreError::Poisoned)?)
    }
}

/// `applied` as a snapshot: a view of its state taken now (while no apply commits, as
/// the caller holds the lock), with the position it shows. `None` before anything was
/// applied.
fn snapshot_of(applied: &Applied) -> Result<Option<Snapshot>, StoreError> {
    if applied.last_applied.is_none() {
        return Ok(None);
    }
    let store = applied.ledger.store();
    let view = store.disk().view(Keyspace::State)?;
    let meta = SnapshotMeta {
        last_log_id: applied.last_applied,
        last_membership: applied.membership.clone(),
    };
    let data = SnapshotData::view(view, store.generation(), meta.clone());
    Ok(Some(Snapshot {
        meta,
        snapshot: data,
    }))
}

impl RaftSnapshotBuilder<TypeConfig> for LedgerStateMachine {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let this = self.clone();
        let snapshot = blocking(move || {
            let snapshot = this.current()?.unwrap_or_else(|| Snapshot {
                meta: SnapshotMeta::default(),
                snapshot: SnapshotData::from_bytes(Vec::new()),
            });
            // Everything applied up to the snapshot becomes durable before openraft may
            // purge the log it came from.
            this.disk.sync()?;
            Ok::<_, StoreError>(snapshot)
        })
        .await?;
        Ok(snapshot)
    }
}

impl RaftStateMachine<TypeConfig> for LedgerStateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let applied = self.applied.read().map_err(|_| StoreError::Poisoned)?;
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let started = Instant::now();
            let commands = match &entry.payload {
                EntryPayload::Normal(request) => request.commands.len(),
                _ => 0,
            };
            let index = entry.index();
            let (response, written) = {
                let mut applied = self.applied.write().map_err(|_| StoreError::Poisoned)?;
                applied.apply(entry)?
            };
            if !written.is_empty() {
                // No watcher is not an error.
                let _ = self.changes.send(Arc::new(Change::Records {
                    index,
                    keys: written,
                }));
            }
            metrics::histogram!(APPLY_SECONDS).record(started.elapsed());
            metrics::histogram!(APPLY_COMMANDS).record(commands as f64);
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let (standby, applied, disk) = (
            self.standby.clone(),
            self.applied.clone(),
            self.disk.clone(),
        );
        let installing = meta.clone();
        blocking(move || {
            install(&standby, &installing, &snapshot, |generation| {
                // Readers move to the new generation before the old one can go.
                let mut applied = applied.write().map_err(|_| StoreError::Poisoned)?;
                *applied = Applied {
                    ledger: Ledger::on(DiskStore::new(disk, generation)),
                    last_applied: installing.last_log_id,
                    membership: installing.last_membership.clone(),
                };
                Ok(())
            })
        })
        .await?;
        if let Some(last) = meta.last_log_id {
            let _ = self.changes.send(Arc::new(Change::Replaced {
                index: last.index(),
            }));
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let this = self.clone();
        Ok(blocking(move || this.current()).await?)
    }
}

#[cfg(test)]
mod tests {
    use ledger_core::{Caller, Command, CommandBody, Outcome, TenantSettings};
    use openraft::vote::RaftLeaderIdExt;
    use openraft::RaftTypeConfig;

    use super::*;
    use crate::types::LedgerRequest;

    fn log_id(index: u64) -> LogId {
        LogId::new(
            <TypeConfig as RaftTypeConfig>::LeaderId::new_committed(1, 1),
            index,
        )
    }

    fn put_tenant(command_id: &str) -> Command {
        Command {
            command_id: command_id.into(),
            caller: Caller::Operator,
            body: CommandBody::PutTenant {
                tenant: "acme".into(),
                settings: TenantSettings::default(),
            },
        }
    }

    fn applied() -> Applied {
        let disk: DiskRef = std::sync::Arc::new(crate::disk::SimDisk::new());
        Applied {
            ledger: Ledger::on(DiskStore::new(disk, 0)),
            last_applied: None,
            membership: StoredMembership::default(),
        }
    }

    #[test]
    fn normal_entry_answers_one_outcome_per_command_at_stamped_time() {
        let mut applied = applied();
        let request = LedgerRequest::at(5_000, vec![put_tenant("a"), put_tenant("b")]);
        let (response, written) = applied
            .apply(Entry::new_normal(log_id(1), request))
            .expect("apply");
        assert!(written.is_empty(), "tenants are not records");
        assert_eq!(
            response.outcomes,
            vec![Outcome::Configured, Outcome::Configured]
        );
        assert_eq!(applied.ledger.clock_ms(), 5_000);
        assert_eq!(applied.last_applied, Some(log_id(1)));
    }

    #[test]
    fn blank_entry_answers_nothing_and_advances() {
        let mut applied = applied();
        let (response, written) = applied.apply(Entry::new_blank(log_id(1))).expect("apply");
        assert!(response.outcomes.is_empty());
        assert!(written.is_empty());
        assert_eq!(applied.last_applied, Some(log_id(1)));
    }

    #[test]
    fn entry_at_or_before_last_applied_is_refused() {
        let mut applied = applied();
        applied.apply(Entry::new_blank(log_id(2))).expect("apply");
        let again = applied.apply(Entry::new_blank(log_id(2)));
        assert!(matches!(again, Err(StoreError::Inconsistent(_))));
        let earlier = applied.apply(Entry::new_blank(log_id(1)));
        assert!(matches!(earlier, Err(StoreError::Inconsistent(_))));
        assert_eq!(applied.last_applied, Some(log_id(2)));
    }
}
