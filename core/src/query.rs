//! Read-only queries over the ledger: pages of records for operators and reconcilers,
//! counts, tombstones and per-tenant usage, and what the leader's sweeper must do next.
//!
//! Nothing here changes state; every answer is a function of the replicated state, so a
//! linearizable read on any replica gives the same one.

use std::collections::BTreeMap;
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::key::EffectKey;
use crate::ledger::Ledger;
use crate::record::{EffectRecord, EffectState};
use crate::tombstone::Tombstone;
use crate::usage::TenantUsage;

/// A page of records for operators and reconcilers (also sent between nodes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListQuery {
    /// Only this tenant's records.
    pub tenant: String,
    /// Only records in this state.
    pub state: Option<EffectState>,
    /// Only records of this workflow.
    pub workflow_id: Option<String>,
    /// Only records last changed at or before this time (ms): "stuck for a while".
    pub updated_at_or_before_ms: Option<u64>,
    /// Start after this key (the last key of the previous page).
    pub after: Option<EffectKey>,
    /// At most this many records.
    pub limit: usize,
}

impl Ledger {
    /// A page of records matching `query`, in key order.
    pub fn list(&self, query: &ListQuery) -> Vec<&EffectRecord> {
        let start = query.after.clone().map_or_else(
            || Bound::Included(EffectKey::new(&query.tenant, "", "")),
            Bound::Excluded,
        );
        let in_tenant = |k: &EffectKey| k.tenant == query.tenant;
        let keep = |rec: &&EffectRecord| {
            query.state.is_none_or(|s| rec.state == s)
                && query
                    .updated_at_or_before_ms
                    .is_none_or(|t| rec.updated_at_ms <= t)
                && query
                    .workflow_id
                    .as_ref()
                    .is_none_or(|w| rec.workflow_id == *w)
        };
        let keys: Box<dyn Iterator<Item = &EffectKey>> = match (&query.workflow_id, query.state) {
            (Some(workflow), _) => Box::new(
                self.index
                    .by_workflow
                    .range((
                        bound_map(&start, |k| {
                            (query.tenant.clone(), workflow.clone(), k.clone())
                        }),
                        Bound::Unbounded,
                    ))
                    .take_while(move |(t, w, _)| *t == query.tenant && w == workflow)
                    .map(|(_, _, k)| k),
            ),
            (None, Some(state)) => Box::new(
                self.index
                    .by_state
                    .range((bound_map(&start, |k| (state, k.clone())), Bound::Unbounded))
                    .take_while(move |(s, k)| *s == state && in_tenant(k))
                    .map(|(_, k)| k),
            ),
            (None, None) => Box::new(
                self.state
                    .effects
                    .range((start, Bound::Unbounded))
                    .map(|(k, _)| k)
                    .take_while(move |k| in_tenant(k)),
            ),
        };
        keys.filter_map(|k| self.state.effects.get(k))
            .filter(keep)
            .take(query.limit)
            .collect()
    }

    /// How many records are in each state.
    pub fn counts(&self) -> BTreeMap<EffectState, usize> {
        let mut counts: BTreeMap<EffectState, usize> =
            EffectState::ALL.iter().map(|s| (*s, 0)).collect();
        for (state, _) in &self.index.by_state {
            *counts.entry(*state).or_default() += 1;
        }
        counts
    }

    /// The tombstone of `key`: kept when its record was collected, until the tenant's
    /// tombstone window has passed.
    pub fn tombstone(&self, key: &EffectKey) -> Option<&Tombstone> {
        self.state.tombstones.get(key)
    }

    /// `tenant`'s tombstones, in key order.
    pub fn tombstones<'a>(&'a self, tenant: &'a str) -> impl Iterator<Item = &'a Tombstone> {
        self.state
            .tombstones
            .range(EffectKey::new(tenant, "", "")..)
            .take_while(move |(k, _)| k.tenant == tenant)
            .map(|(_, t)| t)
    }

    /// Number of tombstones of all tenants.
    pub fn tombstone_count(&self) -> usize {
        self.state.tombstones.len()
    }

    /// What `tenant` keeps: records, tombstones and their approximate bytes.
    pub fn usage(&self, tenant: &str) -> TenantUsage {
        self.usage.of(tenant)
    }

    /// The earliest time at which a lease runs out, if any attempt is open.
    pub fn next_lease_expiry_ms(&self) -> Option<u64> {
        self.index.leases.first().map(|(t, _)| *t)
    }

    /// The earliest time at which a `CollectGarbage` sweep has something to do: a record
    /// (or a whole slot group) past retention, a tombstone past its window, or a command
    /// id past its retention.
    pub fn next_collection_ms(&self) -> Option<u64> {
        let records = self.index.retention.first().map(|(t, _)| *t);
        let tombstones = self.index.tombstone_expiry.first().map(|(t, _)| *t);
        let commands = self.index.command_expiry.first().map(|(t, _, _)| *t);
        [records, tombstones, commands].into_iter().flatten().min()
    }
}

fn bound_map<T>(b: &Bound<EffectKey>, f: impl Fn(&EffectKey) -> T) -> Bound<T> {
    match b {
        Bound::Included(k) => Bound::Included(f(k)),
        Bound::Excluded(k) => Bound::Excluded(f(k)),
        Bound::Unbounded => Bound::Unbounded,
    }
}
