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

use crate::claim::close_if_expired;
use crate::index::Collectable;
use crate::key::{EffectKey, FieldError};
use crate::ledger::Ledger;
use crate::limits::SWEEP_LIMIT_MAX;
use crate::outcome::Outcome;
use crate::policy::TenantSettings;
use crate::stamp::Stamp;
use crate::tombstone::Tombstone;

impl Ledger {
    pub(crate) fn expire_leases(&mut self, limit: u32, at: Stamp) -> Outcome {
        let now = at.ledger_ms;
        if let Err(e) = check_limit(limit) {
            return e.into();
        }
        let mut due: Vec<EffectKey> = self
            .index
            .leases
            .iter()
            .take_while(|(until, _)| *until <= now)
            .take(limit as usize + 1)
            .map(|(_, key)| key.clone())
            .collect();
        let more = due.len() > limit as usize;
        due.truncate(limit as usize);
        let mut expired = 0;
        for key in &due {
            if self.update(key, |rec, _| close_if_expired(rec, at)) {
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
            .index
            .tombstone_expiry
            .iter()
            .take_while(|(expires_at, _)| *expires_at <= now)
            .take(limit + 1)
            .map(|(_, key)| key.clone())
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
        let mut commands: Vec<_> = self
            .index
            .command_expiry
            .iter()
            .take_while(|(deadline, _, _)| *deadline <= now)
            .take(limit + 1)
            .cloned()
            .collect();
        let more_commands = commands.len() > limit;
        commands.truncate(limit);
        for entry in &commands {
            self.index.command_expiry.remove(entry);
            let (_, caller, id) = entry;
            self.state.commands.remove(&(caller.clone(), id.clone()));
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
        for (deadline, collectable) in &self.index.retention {
            if *deadline > now {
                break;
            }
            if records >= limit {
                return (due, records, true);
            }
            records += collectable.len();
            due.push(collectable.clone());
        }
        (due, records, false)
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
