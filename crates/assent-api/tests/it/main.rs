//! The `/v1` contract checked two ways: real bodies (copied from the gateway's handlers and
//! tests) deserialised into the typed bodies and serialised back to the same JSON
//! (`bodies.rs`), and the typed [`assent_api::Client`] against a real gateway on a loopback
//! port with a real SQLite store — propose, approve, long-poll, redeem and the rest, every
//! answer also read raw and compared with its typed round trip (`live.rs`, `live_more.rs`).

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

mod bodies;
mod live;
mod live_more;

/// Deserialises `v` as `T`, checks it serialises back to exactly `v` (same keys, same
/// `null`s, same omissions) and returns it.
#[track_caller]
fn round_trip<T: Serialize + DeserializeOwned>(v: &Value) -> T {
    let t: T = serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("{} does not read {v}: {e}", std::any::type_name::<T>()));
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(
        back,
        *v,
        "{} does not write back what it read",
        std::any::type_name::<T>()
    );
    t
}
