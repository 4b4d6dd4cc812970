//! Read-only queries over the ledger: pages of records for operators and reconcilers,
//! counts, tombstones and per-tenant usage, and what the leader's sweeper must do next.
//!
//! Nothing here changes state; every answer is a function of the replicated state, so a
//! linearizable read on any replica gives the same one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::index;
use crate::key::EffectKey;
use crate::keycode;
use crate::ledger::Ledger;
use crate::record::{EffectRecord, EffectState};
use crate::store::{decode_value, Store, StoreExt, Table};
use crate::tombstone::Tombstone;
use crate::usage::{TenantUsage, Usage};

/// A page of records for operators and reconcilers (also sent between nodes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListQuery {
    /// Only this tenant's records.
    pub tenant: String,
    /// Only escalated records, waiting for an operator's decision.
    pub escalated: bool,
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

/// The escalations waiting for an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escalations {
    /// How many.
    pub open: u64,
    /// When the oldest was escalated (ledger time, ms), if any is open.
    pub oldest_at_ms: Option<u64>,
}

/// A page of records and where the listing goes on.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ListPage {
    /// The records found, in key order.
    pub records: Vec<EffectRecord>,
    /// Set when the listing goes on: the key to ask again `after`. The page ended at its
    /// limit, or it visited as many entries as one page may without finding that many
    /// records (a filter few records match), and more entries follow (which may match
    /// nothing); `None` when the page reached the end of the listing.
    pub continue_after: Option<EffectKey>,
}

impl ListPage {
    /// A page as nodes before `continue_after` serve it, ending only at its `limit`: a
    /// full one goes on after its last record.
    pub fn ended_at_limit(records: Vec<EffectRecord>, limit: usize) -> ListPage {
        let continue_after = match records.last() {
            Some(last) if records.len() >= limit => Some(last.key.clone()),
            _ => None,
        };
        ListPage {
            records,
            continue_after,
        }
    }
}

impl<S: Store> Ledger<S> {
    /// A page of records matching `query`, in key order, walking as far as it takes.
    pub fn list(&self, query: &ListQuery) -> Vec<EffectRecord> {
        self.list_page(query, usize::MAX).records
    }

    /// A page of records matching `query`, in key order, having visited at most `visits`
    /// entries of the table it walks (at least one), so that a filter few records match
    /// costs a bounded read per page however many records the tenant keeps.
    pub fn list_page(&self, query: &ListQuery, visits: usize) -> ListPage {
        let keep = |rec: &EffectRecord| {
            (!query.escalated || rec.escalation.is_some())
                && query.state.is_none_or(|s| rec.state == s)
                && query
                    .updated_at_or_before_ms
                    .is_none_or(|t| rec.updated_at_ms <= t)
                && query
                    .workflow_id
                    .as_ref()
                    .is_none_or(|w| rec.workflow_id == *w)
        };
        // The table walked, the prefix every entry of the tenant has there, and the bytes
        // in front of an effect key in an entry.
        let (table, prefix, key_prefix) = match (&query.workflow_id, query.state) {
            // Escalations are few: walk them and filter the rest.
            _ if query.escalated => (
                Table::Escalations,
                keycode::string(&query.tenant),
                Vec::new(),
            ),
            (Some(workflow), _) => {
                let mut head = keycode::string(&query.tenant);
                keycode::put_str(&mut head, workflow);
                (Table::ByWorkflow, head.clone(), head)
            }
            (None, Some(state)) => {
                let head = vec![keycode::state(state)];
                let mut prefix = head.clone();
                keycode::put_str(&mut prefix, &query.tenant);
                (Table::ByState, prefix, head)
            }
            (None, None) => (Table::Records, keycode::string(&query.tenant), Vec::new()),
        };
        let from = match &query.after {
            Some(after) => {
                let mut from = key_prefix.clone();
                keycode::put_key(&mut from, after);
                from.push(0);
                from.max(prefix.clone())
            }
            None => prefix.clone(),
        };
        let mut to = prefix;
        to.push(0xFF);
        let mut page = ListPage::default();
        if query.limit == 0 {
            return page;
        }
        let mut visited = 0;
        let mut last_visited = None;
        let mut stopped = false;
        self.store.walk(table, from, Some(&to), |entry, value| {
            if page.records.len() >= query.limit || visited >= visits {
                // Another entry follows the page: the listing goes on after the last one
                // read (a page that ends with the range says so by naming no key).
                stopped = true;
                return false;
            }
            visited += 1;
            let key = entry.get(key_prefix.len()..).and_then(keycode::read_key);
            let rec = if table == Table::Records {
                decode_value::<EffectRecord>(value).or_else(|| {
                    self.store.corrupt(table, entry, "effect record");
                    None
                })
            } else {
                key.as_ref().and_then(|key| self.get(key))
            };
            if key.is_some() {
                last_visited = key;
            }
            if let Some(rec) = rec.filter(keep) {
                page.records.push(rec);
            }
            true
        });
        if stopped {
            page.continue_after = last_visited;
        }
        page
    }

    /// How many records are in each state.
    pub fn counts(&self) -> BTreeMap<EffectState, usize> {
        EffectState::ALL
            .iter()
            .map(|s| (*s, self.counter(&index::state_counter(*s)) as usize))
            .collect()
    }

    /// The escalations waiting for an operator: how many, and when the oldest was
    /// escalated (ledger time, ms). Reads every open escalation.
    pub fn escalations(&self) -> Escalations {
        let mut oldest_at_ms: Option<u64> = None;
        self.store
            .walk(Table::Escalations, Vec::new(), None, |entry, value| {
                match decode_value::<u64>(value) {
                    Some(at_ms) => {
                        oldest_at_ms = Some(oldest_at_ms.map_or(at_ms, |o| o.min(at_ms)))
                    }
                    None => self
                        .store
                        .corrupt(Table::Escalations, entry, "escalation time"),
                }
                true
            });
        Escalations {
            open: self.counter(index::ESCALATION_COUNTER),
            oldest_at_ms,
        }
    }

    /// The tombstone of `key`: kept when its record was collected, until the tenant's
    /// tombstone window has passed.
    pub fn tombstone(&self, key: &EffectKey) -> Option<Tombstone> {
        self.store
            .load(Table::Tombstones, &keycode::key(key), "tombstone")
    }

    /// `tenant`'s tombstones, in key order.
    pub fn tombstones(&self, tenant: &str) -> Vec<Tombstone> {
        let prefix = keycode::string(tenant);
        let mut to = prefix.clone();
        to.push(0xFF);
        let mut out = Vec::new();
        self.store
            .walk(Table::Tombstones, prefix, Some(&to), |key, value| {
                match decode_value(value) {
                    Some(tombstone) => out.push(tombstone),
                    None => self.store.corrupt(Table::Tombstones, key, "tombstone"),
                }
                true
            });
        out
    }

    /// Number of tombstones of all tenants.
    pub fn tombstone_count(&self) -> usize {
        self.counter(index::TOMBSTONE_COUNTER) as usize
    }

    /// What `tenant` keeps: records, tombstones and their approximate bytes.
    pub fn usage(&self, tenant: &str) -> TenantUsage {
        Usage::of(&self.store, tenant)
    }

    /// The earliest time at which a lease runs out, if any attempt is open.
    pub fn next_lease_expiry_ms(&self) -> Option<u64> {
        self.first_deadline(Table::Leases)
    }

    /// The earliest time at which a `CollectGarbage` sweep has something to do: a record
    /// (or a whole slot group) past retention, a tombstone past its window, or a command
    /// id past its retention.
    pub fn next_collection_ms(&self) -> Option<u64> {
        [
            Table::Retention,
            Table::TombstoneExpiry,
            Table::CommandExpiry,
        ]
        .into_iter()
        .filter_map(|t| self.first_deadline(t))
        .min()
    }

    /// The deadline of the first entry of a table keyed by a leading deadline.
    fn first_deadline(&self, table: Table) -> Option<u64> {
        let (first, _) = self.store.scan(table, &[], None, 1).into_iter().next()?;
        keycode::Reader::new(&first).u64()
    }
}
