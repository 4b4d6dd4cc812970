//! Fixtures shared by the integration tests: ledger commands that do real work, and
//! Raft entries, log ids and votes built from plain numbers; and disk harnesses that
//! restart a disk the way each implementation can lose power.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use ledger_core::{
    Authority, Caller, Command, CommandBody, Declaration, EffectKey, ReplayClass, TenantSettings,
    ToolName, ToolPolicy, ToolRef,
};
use ledger_raft_store::disk::conformance::DiskHarness;
use ledger_raft_store::disk::{
    Disk, DiskError, DiskRef, DiskView, KeyValue, Keyspace, SimDisk, WriteBatch,
};
use ledger_raft_store::types::{Entry, LogId, Vote};
use ledger_raft_store::{LedgerRequest, TypeConfig};
use openraft::entry::RaftEntry;
use openraft::vote::RaftLeaderIdExt;
use openraft::{Membership, RaftTypeConfig};

pub const TENANT: &str = "acme";
pub const NODE_ID: u64 = 1;
/// A wall time the leader could have stamped (ms since the epoch).
pub const STAMPED_AT_MS: u64 = 1_700_000_000_000;

/// Registers the tenant and a keyed refund tool (operator commands).
pub fn setup_commands() -> Vec<Command> {
    vec![
        Command {
            command_id: "setup-tenant".into(),
            caller: Caller::Operator,
            body: CommandBody::PutTenant {
                tenant: TENANT.into(),
                settings: TenantSettings::default(),
            },
        },
        Command {
            command_id: "setup-refund".into(),
            caller: Caller::Operator,
            body: CommandBody::PutToolPolicy {
                tenant: TENANT.into(),
                tool: ToolName {
                    provider: "pay".into(),
                    name: "refund".into(),
                },
                policy: ToolPolicy::for_class(ReplayClass::KeyedIdempotent),
            },
        },
    ]
}

/// The refund effect under `key`.
pub fn refund(key: &str) -> Declaration {
    Declaration {
        key: EffectKey::new(TENANT, "agent-runtime", key),
        workflow_id: "wf-1".into(),
        tool: ToolRef {
            provider: "pay".into(),
            name: "refund".into(),
            contract_version: "v1".into(),
        },
        authority: Authority {
            principal: "user:42".into(),
            policy_generation: 1,
        },
        target: format!("pay:{key}"),
        intent_json: r#"{"order":"o-1","amount":500,"currency":"EUR"}"#.into(),
    }
}

/// A tenant's claim on the refund under `key`.
pub fn claim(command_id: &str, key: &str) -> Command {
    Command {
        command_id: command_id.into(),
        caller: Caller::Tenant(TENANT.into()),
        body: CommandBody::Claim {
            declaration: refund(key),
            holder: "server-a".into(),
            lease_ms: None,
            confirmation: None,
        },
    }
}

/// A log id of a leader in `term` (node [`NODE_ID`]).
pub fn log_id(term: u64, index: u64) -> LogId {
    let leader = <TypeConfig as RaftTypeConfig>::LeaderId::new_committed(term, NODE_ID);
    LogId::new(leader, index)
}

/// A vote for node [`NODE_ID`] in `term`.
pub fn vote(term: u64) -> Vote {
    Vote::new(term, NODE_ID)
}

/// A normal entry carrying `commands` stamped at `stamped_at_ms`.
pub fn normal_entry(term: u64, index: u64, stamped_at_ms: u64, commands: Vec<Command>) -> Entry {
    let request = LedgerRequest::at(stamped_at_ms, commands);
    Entry::new_normal(log_id(term, index), request)
}

/// A membership entry with `voters`.
pub fn membership_entry(term: u64, index: u64, voters: &[u64]) -> Entry {
    let voters: BTreeSet<u64> = voters.iter().copied().collect();
    let membership = Membership::new_with_defaults(vec![voters], []);
    Entry::new_membership(log_id(term, index), membership)
}

/// A blank entry.
pub fn blank_entry(term: u64, index: u64) -> Entry {
    Entry::new_blank(log_id(term, index))
}

/// Restarts a `SimDisk` with a power failure, a different seed each time.
#[derive(Default)]
pub struct SimHarness {
    disk: Arc<SimDisk>,
    seed: u64,
}

impl DiskHarness for SimHarness {
    fn fresh(&mut self) -> DiskRef {
        self.disk = Arc::new(SimDisk::new());
        self.disk.clone()
    }

    fn restart(&mut self, disk: DiskRef) -> DiskRef {
        drop(disk);
        self.seed += 1;
        self.disk.power_fail(self.seed).expect("power failure");
        self.disk.clone()
    }
}

/// Restarts a `SimDisk` with a power failure that may tear the last write, a different
/// seed each time.
#[derive(Default)]
pub struct TornSimHarness {
    disk: Arc<SimDisk>,
    seed: u64,
}

impl DiskHarness for TornSimHarness {
    fn fresh(&mut self) -> DiskRef {
        self.disk = Arc::new(SimDisk::new());
        self.disk.clone()
    }

    fn restart(&mut self, disk: DiskRef) -> DiskRef {
        drop(disk);
        self.seed += 1;
        self.disk.power_fail_torn(self.seed).expect("power failure");
        self.disk.clone()
    }
}

/// Restarts a `RocksDisk` by closing and reopening its directory.
#[cfg(not(madsim))]
pub struct RocksHarness {
    dir: tempfile::TempDir,
    opened: usize,
}

#[cfg(not(madsim))]
impl Default for RocksHarness {
    fn default() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        RocksHarness { dir, opened: 0 }
    }
}

#[cfg(not(madsim))]
impl RocksHarness {
    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join(format!("db-{}", self.opened))
    }
}

#[cfg(not(madsim))]
impl DiskHarness for RocksHarness {
    fn fresh(&mut self) -> DiskRef {
        self.opened += 1;
        Arc::new(ledger_raft_store::RocksDisk::open(self.path()).expect("open"))
    }

    fn restart(&mut self, disk: DiskRef) -> DiskRef {
        assert_eq!(
            Arc::strong_count(&disk),
            1,
            "nothing else holds the database open"
        );
        drop(disk);
        Arc::new(ledger_raft_store::RocksDisk::open(self.path()).expect("reopen"))
    }
}

/// A [`SimDisk`] behind four switches a test turns: writes fail, as if the power went,
/// once `writes_left` reaches zero (and so do syncs then); syncs return without syncing
/// while `syncs` is off; syncs fail (an I/O error) while writes go on when `syncs_fail`
/// is on; syncs wait while `syncs_held` is on. `syncs_started` counts the syncs begun.
/// Reads go straight through.
pub struct GatedDisk {
    pub disk: Arc<SimDisk>,
    pub writes_left: AtomicUsize,
    pub syncs: AtomicBool,
    pub syncs_fail: AtomicBool,
    pub syncs_held: AtomicBool,
    pub syncs_started: AtomicUsize,
}

impl GatedDisk {
    /// Every write allowed, syncs on.
    pub fn new(disk: Arc<SimDisk>) -> Arc<GatedDisk> {
        Arc::new(GatedDisk {
            disk,
            writes_left: AtomicUsize::new(usize::MAX),
            syncs: AtomicBool::new(true),
            syncs_fail: AtomicBool::new(false),
            syncs_held: AtomicBool::new(false),
            syncs_started: AtomicUsize::new(0),
        })
    }

    /// Allows `writes` more writes; the power goes at the next one.
    pub fn cut_after(&self, writes: usize) {
        self.writes_left.store(writes, Ordering::SeqCst);
    }

    fn power_cut() -> DiskError {
        DiskError::Engine("power cut".into())
    }
}

impl Disk for GatedDisk {
    fn write(&self, batch: WriteBatch) -> Result<(), DiskError> {
        let cut = self
            .writes_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_err();
        if cut {
            return Err(Self::power_cut());
        }
        self.disk.write(batch)
    }

    fn sync(&self) -> Result<(), DiskError> {
        self.syncs_started.fetch_add(1, Ordering::SeqCst);
        while self.syncs_held.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if self.writes_left.load(Ordering::SeqCst) == 0 {
            return Err(Self::power_cut());
        }
        if self.syncs_fail.load(Ordering::SeqCst) {
            return Err(DiskError::Engine("sync: input/output error".into()));
        }
        if self.syncs.load(Ordering::SeqCst) {
            self.disk.sync()
        } else {
            Ok(())
        }
    }

    fn get(&self, space: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, DiskError> {
        self.disk.get(space, key)
    }

    fn range(
        &self,
        space: Keyspace,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, DiskError> {
        self.disk.range(space, from, to, limit)
    }

    fn last(&self, space: Keyspace) -> Result<Option<KeyValue>, DiskError> {
        self.disk.last(space)
    }

    fn view(&self, space: Keyspace) -> Result<Box<dyn DiskView>, DiskError> {
        self.disk.view(space)
    }
}
