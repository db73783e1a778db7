//! What signing and verifying one approval token costs on this machine: `cargo run --release
//! -p assent-verify --example cost`. Prints the median of 9 runs of 2,000 each, in
//! microseconds per token, for signing (`assent_core::token::TokenSigner::sign`, what the
//! gateway does when it hands a token out) and verifying (`assent_verify::verify`, what the
//! gateway and an executor do).

use assent_core::token::{TokenClaims, TokenSigner};
use assent_verify::{Expected, Jwks, verify};
use std::time::Instant;

fn median_us(mut f: impl FnMut()) -> f64 {
    let mut runs: Vec<f64> = (0..9)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..2000 {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / 2000.0
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[4]
}

fn main() {
    let signer = TokenSigner::from_seed(&[7u8; 32]);
    let jwks = Jwks {
        keys: vec![signer.public_key().clone()],
    };
    let hash = "ab".repeat(32);
    let claims = TokenClaims {
        jti: "0b6f5d1e-1f7c-4d5e-9a51-7d3c2b1a0f9e".into(),
        sub: "treasury_bot".into(),
        aid: "5c8e2a71-3b4d-4e6f-8a9b-0c1d2e3f4a5b".into(),
        call_hash: hash.clone(),
        scope: "once".into(),
        iat: 1_800_000_000,
        exp: 1_800_000_300,
    };
    let token = signer.sign(&claims);
    let expected = Expected {
        call_hash: &hash,
        agent: Some("treasury_bot"),
        approval_id: None,
        now: 1_800_000_100,
    };
    let sign = median_us(|| {
        std::hint::black_box(signer.sign(std::hint::black_box(&claims)));
    });
    let check = median_us(|| {
        verify(std::hint::black_box(&token), &jwks, &expected).unwrap();
    });
    println!(
        "token {} bytes; sign {sign:.1} µs, verify {check:.1} µs (median of 9 × 2000)",
        token.len()
    );
}
