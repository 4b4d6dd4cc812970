//! Sweeps: lease expiry and garbage collection, proposed by the leader as replicated
//! commands so that every replica expires and forgets the same things at the same
//! ledger time.
//!
//! Each sweep touches at most `limit` records (and `limit` command ids), so one Raft entry
//! stays small however much is due; `more` tells the sweeper to go again.

use crate::claim::close_if_expired;
use crate::key::{EffectKey, FieldError};
use crate::ledger::Ledger;
use crate::limits::SWEEP_LIMIT_MAX;
use crate::outcome::Outcome;

impl Ledger {
    pub(crate) fn expire_leases(&mut self, limit: u32, now: u64) -> Outcome {
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
            if self.update(key, |rec, _| close_if_expired(rec, now)) {
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
        let mut records: Vec<EffectKey> = self
            .index
            .retention
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .take(limit as usize + 1)
            .map(|(_, key)| key.clone())
            .collect();
        let mut commands: Vec<_> = self
            .index
            .command_expiry
            .iter()
            .take_while(|(deadline, _, _)| *deadline <= now)
            .take(limit as usize + 1)
            .cloned()
            .collect();
        let more = records.len() > limit as usize || commands.len() > limit as usize;
        records.truncate(limit as usize);
        commands.truncate(limit as usize);
        for key in &records {
            self.remove_record(key);
        }
        for entry in &commands {
            self.index.command_expiry.remove(entry);
            let (_, caller, id) = entry;
            self.state.commands.remove(&(caller.clone(), id.clone()));
        }
        Outcome::Swept {
            expired: 0,
            collected: (records.len() + commands.len()) as u32,
            more,
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
