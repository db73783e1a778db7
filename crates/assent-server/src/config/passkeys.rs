//! `passkeys`: the WebAuthn relying party passkey-signed approvals use (issue 14 §4). One
//! validation step of [`crate::config`].
//!
//! ```yaml
//! passkeys:
//!   origin: https://assent.example.com   # where operators open the dashboard (default: public_url)
//!   rp_id: assent.example.com            # the relying party id (default: the origin's host)
//! ```

use super::raw::{ConfigError, RawPasskeys, at};
use serde_saphyr::Spanned;
use std::path::Path;

/// The relying party: the dashboard's origin and the RP id passkeys are scoped to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasskeysConfig {
    /// `https://host[:port]` (or `http://localhost:port`, which browsers treat as secure).
    pub origin: String,
    /// A host name: the origin's host or a registrable suffix of it.
    pub rp_id: String,
}

/// Checks `passkeys` of `path`: an origin (given, else `public_url`) that is an http(s) URL
/// without a path, and an RP id the origin's host is or ends with (`webauthn-rs` decides);
/// `None` when absent.
pub(crate) fn passkeys(
    path: &Path,
    raw: Option<&Spanned<RawPasskeys>>,
    public_url: Option<&str>,
) -> Result<Option<PasskeysConfig>, ConfigError> {
    let Some(r) = raw else { return Ok(None) };
    let line = Some(r.referenced.line());
    let fail = |m: String| at(path, line, format!("passkeys: {m}"));
    let origin = r
        .value
        .origin
        .as_deref()
        .or(public_url)
        .ok_or_else(|| fail("needs `origin` (or a `public_url`)".into()))?;
    let url = url::Url::parse(origin).map_err(|e| fail(format!("origin `{origin}`: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.path() != "/" || url.query().is_some() {
        return Err(fail(format!(
            "origin `{origin}` must be http(s)://host[:port] with no path"
        )));
    }
    let host = url.host_str().unwrap_or_default().to_string();
    let rp_id = r.value.rp_id.clone().unwrap_or(host);
    // Held to what each assertion is checked against (found by review: any `http` origin was
    // taken here, and every passkey approval made at it was then refused).
    assent_core::passkey::origin_fits(&url, &rp_id).map_err(|why| {
        fail(format!(
            "origin `{origin}` for rp_id `{rp_id}`: {why} (https, or http on localhost)"
        ))
    })?;
    webauthn_rs::WebauthnBuilder::new(&rp_id, &url)
        .and_then(|b| b.build())
        .map_err(|e| {
            fail(format!(
                "rp_id `{rp_id}` does not fit origin `{origin}`: {e}"
            ))
        })?;
    Ok(Some(PasskeysConfig {
        origin: url.origin().ascii_serialization(),
        rp_id,
    }))
}

/// The relying party of a gateway with `passkeys` configured.
pub struct Relying {
    webauthn: webauthn_rs::Webauthn,
    rp_id: String,
}

impl Relying {
    /// The relying party of `c` (checked when the config was loaded).
    pub fn new(c: &PasskeysConfig) -> Result<Relying, String> {
        let origin = url::Url::parse(&c.origin).map_err(|e| e.to_string())?;
        let webauthn = webauthn_rs::WebauthnBuilder::new(&c.rp_id, &origin)
            .and_then(|b| b.rp_name("assent").build())
            .map_err(|e| e.to_string())?;
        Ok(Relying {
            webauthn,
            rp_id: c.rp_id.clone(),
        })
    }

    /// The `webauthn-rs` relying party.
    pub fn webauthn(&self) -> &webauthn_rs::Webauthn {
        &self.webauthn
    }

    /// The RP id passkeys are scoped to.
    pub fn rp_id(&self) -> &str {
        &self.rp_id
    }
}
