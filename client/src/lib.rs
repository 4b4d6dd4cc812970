//! The client library stateless tool servers use: connect to ledger nodes, find the
//! leader, claim and report effects with retries that never mint a second grant, derive
//! effect keys, and load tool policies. Not yet built.
