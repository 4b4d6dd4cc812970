//! The effect ledger node: tonic services for the ledger API, Raft transport and admin,
//! leader forwarding, the sweeper that proposes lease expiry and garbage collection, and
//! a thin binary. Not yet built.
