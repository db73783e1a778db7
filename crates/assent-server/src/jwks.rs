//! The token keys as a JWKS (issue 14 §6): `GET /v1/keys` and `GET /.well-known/jwks.json`,
//! no key needed, so any executor can verify approval tokens offline (with `assent-verify`,
//! PyJWT or any JOSE library). Each key is `{"kty": "OKP", "crv": "Ed25519", "x", "kid",
//! "alg": "EdDSA", "use": "sig"}`: the current token key and the retired ones whose tokens
//! may not have expired yet. Routes are mounted by [`crate::router`](mod@crate::router).

use crate::error::ApiError;
use crate::state::{AppState, now_ms};
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// How long a client may cache the key set (`Cache-Control: max-age`), in seconds. A
/// verifier meeting a `kid` it does not have fetches the set again.
pub const MAX_AGE_SECONDS: u32 = 60;

/// `GET /v1/keys`, `GET /.well-known/jwks.json`: `{"keys": [JWK…]}` (RFC 7517), current key
/// first; `503` when the store cannot be reached.
#[utoipa::path(get, path = "/v1/keys", tag = "redeem",
    responses((status = 200, description = "The token keys, a JWK Set (RFC 7517), current key first; also at `/.well-known/jwks.json`", body = Object)),
    security(()))]
pub(crate) async fn jwks(State(st): State<AppState>) -> Result<Response, ApiError> {
    // Beside the store executor, not on it: the key set reads no table, and the route needs no
    // key (found by review: each request took a place in the one executor's batches, ahead
    // of decisions and redemptions, so a keyless flood thinned every group commit).
    let set = st.store_call_apart(|s| Ok(s.token_jwks(now_ms()))).await?;
    Ok((
        [(
            header::CACHE_CONTROL,
            format!("public, max-age={MAX_AGE_SECONDS}"),
        )],
        Json(set.to_json()),
    )
        .into_response())
}
