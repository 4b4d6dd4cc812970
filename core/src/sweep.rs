//! Sweeps: lease expiry and garbage collection, proposed by the leader as replicated
//! commands so that every replica expires and forgets the same things at the same
//! ledger time.
//!
//! Each sweep touches at most `limit` records (and `limit` tombstones and `limit` command
//! ids), so one Raft entry stays small however much is due; `more` tells the sweeper to
//! go again. The slots of one declaration are collected together, in one sweep, so a
//! collection may take up to `SLOTS_MAX - 1` records more than its limit.
//!
//! Garbage collection never forgets a key outright: every collected record leaves a
//! [`Tombstone`] for the tenant's `tombstone_retention_ms`, and only a later collection,
//! past that window, removes the tombstone.

use crate::index::{self, Collectable};
use crate::key::{EffectKey, FieldError};
use crate::keycode;
use crate::ledger::Ledger;
use crate::limits::SWEEP_LIMIT_MAX;
use crate::outcome::Outcome;
use crate::policy::TenantSettings;
use crate::stamp::Stamp;
use crate::store::{Store, StoreExt, Table};
use crate::tombstone::Tombstone;
use crate::transition::close_if_expired;

impl<S: Store> Ledger<S> {
    pub(crate) fn expire_leases(&mut self, limit: u32, at: Stamp) -> Outcome {
        let now = at.ledger_ms;
        if let Err(e) = check_limit(limit) {
            return e.into();
        }
        let mut due: Vec<EffectKey> = self
            .due_entries(Table::Leases, now, limit as usize + 1)
            .iter()
            .filter_map(|entry| self.deadline_key(Table::Leases, entry))
            .collect();
        let more = due.len() > limit as usize;
        due.truncate(limit as usize);
        let mut expired = 0;
        for key in &due {
            let rec = self.get(key).expect("a lease entry has its record");
            if self.update(rec, |rec, _| close_if_expired(rec, at)) {
                expired += 1;
            }
        }
        Outcome::Swept {
            expired,
            collected: 0,
            more,
        }
    }

    pub(crate) fn collect_garbage(&mut self, limit: u32, now: u64) -> Outcome {
        if let Err(e) = check_limit(limit) {
            return e.into();
        }
        let limit = limit as usize;
        // Tombstones first: the ones this sweep leaves are never due in the same sweep.
        let mut tombstones: Vec<EffectKey> = self
            .due_entries(Table::TombstoneExpiry, now, limit + 1)
            .iter()
            .filter_map(|entry| self.deadline_key(Table::TombstoneExpiry, entry))
            .collect();
        let more_tombstones = tombstones.len() > limit;
        tombstones.truncate(limit);
        for key in &tombstones {
            self.remove_tombstone(key);
        }
        let (due, records, more_records) = self.due_records(limit, now);
        for collectable in &due {
            self.collect(collectable, now);
        }
        let mut commands = self.due_entries(Table::CommandExpiry, now, limit + 1);
        let more_commands = commands.len() > limit;
        commands.truncate(limit);
        for entry in &commands {
            self.store.delete(Table::CommandExpiry, entry);
            // The entry is the deadline, then the command's own key.
            self.store.delete(Table::Commands, &entry[8..]);
            index::count(&mut self.store, index::COMMAND_COUNTER, -1);
        }
        Outcome::Swept {
            expired: 0,
            collected: (records + tombstones.len() + commands.len()) as u32,
            more: more_tombstones || more_records || more_commands,
        }
    }

    /// Records and slot groups past retention at `now`, whole groups only, until `limit`
    /// records are taken; with how many records that is and whether more are due.
    fn due_records(&self, limit: usize, now: u64) -> (Vec<Collectable>, usize, bool) {
        let mut due = Vec::new();
        let mut records = 0;
        // A group counts as many records as it has slots, so at most `limit + 1` entries
        // are ever needed to fill `limit` records and see whether more are due.
        for entry in self.due_entries(Table::Retention, now, limit + 1) {
            let Some((_, collectable)) = Collectable::read_entry(&entry) else {
                self.store
                    .corrupt(Table::Retention, &entry, "retention entry");
                continue;
            };
            if records >= limit {
                return (due, records, true);
            }
            records += collectable.len();
            due.push(collectable);
        }
        (due, records, false)
    }

    /// The keys of at most `limit` entries of a deadline-keyed table due at `now`.
    fn due_entries(&self, table: Table, now: u64, limit: usize) -> Vec<Vec<u8>> {
        self.store
            .keys(table, &[], keycode::after(now).as_deref(), limit)
    }

    /// The effect key of a `(deadline, key)` entry.
    fn deadline_key(&self, table: Table, entry: &[u8]) -> Option<EffectKey> {
        let mut r = keycode::Reader::new(entry);
        let key = r.u64().and_then(|_| r.key()).and_then(|key| r.done(key));
        if key.is_none() {
            self.store.corrupt(table, entry, "deadline entry");
        }
        key
    }

    /// Removes the records of `collectable`, each leaving a tombstone.
    fn collect(&mut self, collectable: &Collectable, now: u64) {
        for key in collectable.keys() {
            let rec = self
                .remove_record(&key)
                .unwrap_or_else(|| panic!("{key}: due for collection but not stored"));
            assert!(
                rec.retention_deadline_ms.is_some_and(|d| d <= now),
                "{key}: collected before its retention deadline"
            );
            let window_ms = self
                .tenant(&key.tenant)
                .map_or(TenantSettings::TOMBSTONE_RETENTION_MS_DEFAULT, |t| {
                    t.settings.tombstone_retention_ms
                });
            self.insert_tombstone(Tombstone::of(&rec, now, window_ms));
        }
    }
}

fn check_limit(limit: u32) -> Result<(), FieldError> {
    if limit == 0 || limit > SWEEP_LIMIT_MAX {
        return Err(FieldError::OutOfRange {
            field: "limit".into(),
            detail: format!("{limit} is not in 1..={SWEEP_LIMIT_MAX}"),
        });
    }
    Ok(())
}
