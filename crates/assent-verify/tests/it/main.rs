//! `assent-verify`'s tests, through its public interface: the attacks it refuses on tokens
//! signed with a test key (`attacks.rs`); tokens a real gateway minted, verified against the
//! JWKS it serves, in Rust and with the Python recipe (`minted.rs`); the same attacks sent to
//! the gateway's `POST /v1/tokens/redeem` with tokens forged under its real key
//! (`redeem_attacks.rs`); executors redeeming (`executors.rs`); and token key rotation
//! (`rotation.rs`). The gateway is `gateway.rs`.

mod attacks;
mod executors;
mod gateway;
mod minted;
mod redeem_attacks;
mod rotation;
