//! Authenticating a request from Slack (issue 15 §4), as Slack documents it: `X-Slack-Signature`
//! is `v0=` and the hex HMAC-SHA256, with the app's signing secret, of
//! `v0:{X-Slack-Request-Timestamp}:{raw body}`, compared in constant time; the timestamp must
//! lie within [`WINDOW_S`] of the gateway's clock either way; and a signature accepted once is
//! refused again while its timestamp is in the window (remembered in the store, so every
//! replica of one database refuses the replay, for 5 minutes more than the window so that
//! replicas whose clocks differ by less than that agree). Any failure is `401` with a JSON
//! body and nothing is decided.

use crate::error::ApiError;
use crate::state::{AppState, now_ms};
use axum::http::{HeaderMap, StatusCode};
use hmac::{KeyInit, Mac};

/// How far a request's timestamp may be from the gateway's clock, either way, in seconds.
pub const WINDOW_S: i64 = 300;

/// `401` with `code` and `message`.
fn refused(code: &'static str, message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, code, message)
}

/// The header `name` as text, if present and visible ASCII.
fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Whether `signature` (`v0=` + 64 lower-case hex digits, as Slack sends it: one spelling
/// per MAC, so the replay memory, which remembers the header, cannot be dodged by changing a
/// digit's case) is the HMAC-SHA256 with `secret` of `v0:{timestamp}:{body}`; the MAC is
/// compared in constant time.
pub fn signature_ok(secret: &str, timestamp: &str, body: &[u8], signature: &str) -> bool {
    let Some(hex_sig) = signature.strip_prefix("v0=") else {
        return false;
    };
    if hex_sig.len() != 64
        || !hex_sig
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return false;
    }
    let Ok(given) = hex::decode(hex_sig) else {
        return false;
    };
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()) else {
        return false;
    };
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac.verify_slice(&given).is_ok()
}

/// Checks that `body` with `headers` came from Slack now and for the first time, with
/// `secret`: `401 SLACK_SIGNATURE_MISSING`, `SLACK_SIGNATURE_INVALID`, `SLACK_STALE` (the
/// timestamp is more than 5 minutes from now, past or future) or `SLACK_REPLAYED`; `503` when
/// the store cannot say.
pub async fn verify(
    st: &AppState,
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), ApiError> {
    let (Some(ts), Some(sig)) = (
        header(headers, "x-slack-request-timestamp"),
        header(headers, "x-slack-signature"),
    ) else {
        return Err(refused(
            "SLACK_SIGNATURE_MISSING",
            "X-Slack-Request-Timestamp and X-Slack-Signature are required",
        ));
    };
    // The timestamp is checked after the MAC, so an unsigned request learns nothing of the
    // clock; it must be plain decimal digits (no sign, at most 12 digits).
    if !signature_ok(secret, ts, body, sig) {
        return Err(refused(
            "SLACK_SIGNATURE_INVALID",
            "the request's signature does not verify with the signing secret",
        ));
    }
    let secs = (ts.len() <= 12 && !ts.is_empty() && ts.bytes().all(|b| b.is_ascii_digit()))
        .then(|| ts.parse::<i64>().ok())
        .flatten();
    let now_s = now_ms() / 1000;
    let Some(secs) = secs.filter(|s| (s - now_s).abs() <= WINDOW_S) else {
        return Err(refused(
            "SLACK_STALE",
            "the request's timestamp is more than 5 minutes from the gateway's clock",
        ));
    };
    // Remembered until the timestamp leaves the window (a second beyond, for rounding), and
    // then `assent_store::slack::SKEW_MARGIN_MS` longer: each replica prunes by its own clock.
    let until = (secs + WINDOW_S + 1) * 1000;
    let digest = assent_core::canonical::sha256_hex(sig.as_bytes());
    let first = match st
        .store_task(move |s| s.slack_first_seen(&digest, until, now_ms()))
        .await?
    {
        Ok(f) => f,
        Err(assent_store::StoreError::Invalid(_)) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "SLACK_BUSY",
                "too many Slack requests in the replay window; retry later",
            ));
        }
        Err(e) => return Err(ApiError::unavailable(e)),
    };
    if !first {
        return Err(refused(
            "SLACK_REPLAYED",
            "this signed request was received before; a Slack request is accepted once",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::signature_ok;

    /// The worked example of Slack's "Verifying requests from Slack" page.
    #[test]
    fn slacks_documented_example_verifies_and_a_changed_byte_does_not() {
        let secret = "8f742231b10e8888abcd99yyyzzz85a5";
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert!(signature_ok(secret, "1531420618", body.as_bytes(), sig));
        assert!(!signature_ok(secret, "1531420619", body.as_bytes(), sig));
        assert!(!signature_ok(secret, "1531420618", b"token=x", sig));
        assert!(!signature_ok("other", "1531420618", body.as_bytes(), sig));
        assert!(!signature_ok(
            secret,
            "1531420618",
            body.as_bytes(),
            &sig[3..]
        ));
    }
}
