//! `assent-verify`'s tests, through its public interface: the attacks it refuses on tokens
//! signed with a test key (`attacks.rs`), and tokens a real gateway minted, verified against
//! the JWKS it serves (`minted.rs`).

mod attacks;
mod minted;
