//! Tests of the mapping: round trips of every type and variant through encoded bytes,
//! malformed messages that must be typed errors, and generated inputs.

use prost::Message;

mod generated;
mod malformed;
mod round_trip;
mod tombstones;

/// `message` encoded and decoded again, as the peer sees it.
fn via_wire<M: Message + Default>(message: &M) -> M {
    M::decode(message.encode_to_vec().as_slice()).expect("own encoding decodes")
}
