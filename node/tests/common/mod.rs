//! The shared process-cluster harness (`test-cluster/`, `ledger-test-cluster`).

#![allow(unused_imports)]

pub use ledger_test_cluster::*;
