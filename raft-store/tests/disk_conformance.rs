//! Both disks against the one conformance suite, one test per property.

mod common;

#[cfg(not(madsim))]
use common::RocksHarness;
use common::{SimHarness, TornSimHarness};
use ledger_raft_store::disk::conformance;

macro_rules! conformance_tests {
    ($module:ident, $harness:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn put_get_delete() {
                conformance::put_get_delete(&mut $harness);
            }

            #[test]
            fn get_many_answers_as_get_does() {
                conformance::get_many_answers_as_get_does(&mut $harness);
            }

            #[test]
            fn keyspaces_are_separate() {
                conformance::keyspaces_are_separate(&mut $harness);
            }

            #[test]
            fn range_respects_bounds_and_limit() {
                conformance::range_respects_bounds_and_limit(&mut $harness);
            }

            #[test]
            fn delete_range_removes_half_open_interval() {
                conformance::delete_range_removes_half_open_interval(&mut $harness);
            }

            #[test]
            fn batch_applies_in_order() {
                conformance::batch_applies_in_order(&mut $harness);
            }

            #[test]
            fn last_returns_largest_key() {
                conformance::last_returns_largest_key(&mut $harness);
            }

            #[test]
            fn synced_writes_survive_restart() {
                conformance::synced_writes_survive_restart(&mut $harness);
            }

            #[test]
            fn view_is_a_point_in_time() {
                conformance::view_is_a_point_in_time(&mut $harness);
            }

            #[test]
            fn unsynced_writes_survive_as_a_prefix() {
                conformance::unsynced_writes_survive_as_a_prefix(&mut $harness);
            }

            #[test]
            fn run_all_passes() {
                conformance::run_all(&mut $harness);
            }
        }
    };
}

conformance_tests!(sim_disk, SimHarness::default());

#[cfg(not(madsim))]
conformance_tests!(rocks_disk, RocksHarness::default());

/// The simulated disk whose power failures tear the last write: every check but the
/// whole-batch guarantee.
mod torn_sim_disk {
    use super::*;

    #[test]
    fn unsynced_writes_survive_as_a_prefix() {
        conformance::unsynced_writes_survive_as_a_prefix(&mut TornSimHarness::default());
    }

    #[test]
    fn run_all_torn_passes() {
        conformance::run_all_torn(&mut TornSimHarness::default());
    }
}
