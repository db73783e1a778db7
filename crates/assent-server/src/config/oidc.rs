//! `oidc`: single sign-on for the dashboard through an OpenID Connect provider (issue 14 §7).
//! One validation step of [`crate::config`], and the provider's client built from it
//! ([`Sso`]: discovery, cached); the sign-in itself is `crate::dashboard::oidc`.
//!
//! ```yaml
//! oidc:
//!   issuer: https://login.example.com          # discovery: ISSUER/.well-known/openid-configuration
//!   client_id: assent
//!   client_secret_env: ASSENT_OIDC_SECRET      # read at start-up, never logged
//!   roles_claim: groups                        # an ID token claim: a string or a list of strings
//!   roles: {finance: [finance-admin], sre: [oncall, security]}   # optional group -> roles
//!   name_claim: sub                            # optional (default sub): the session is `oidc:<value>`
//!   redirect_url: https://assent.example.com/ui/oidc/callback    # default: public_url + /ui/oidc/callback
//!   scopes: [groups]                           # optional scopes besides `openid`
//! ```

use super::raw::{ConfigError, RawOidc, RawPrincipal, at};
use assent_store::ui_sessions::SsoGrant;
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata,
    CoreRevocableToken, CoreRevocationErrorResponse, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, Client, ClientId, ClientSecret, EmptyExtraTokenFields, EndpointMaybeSet,
    EndpointNotSet, EndpointSet, IdTokenFields, IssuerUrl, RedirectUrl, StandardErrorResponse,
    StandardTokenResponse,
};
use serde_saphyr::Spanned;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

/// The prefix of every single sign-on operator's name (`oidc:<name_claim's value>`); no
/// configured principal may use it, so an SSO session never acts as a configured principal.
pub const NAME_PREFIX: &str = "oidc:";

/// The path the provider redirects back to.
pub const CALLBACK_PATH: &str = "/ui/oidc/callback";

/// The validated `oidc` section (the client secret not yet read: [`resolve_secret`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// The issuer URL exactly as the provider's discovery document and ID tokens give it.
    pub issuer: String,
    /// The client id registered at the provider; ID tokens must name it as their audience.
    pub client_id: String,
    /// The environment variable holding the client secret.
    pub client_secret_env: String,
    /// The ID token claim whose value(s) are the person's groups.
    pub roles_claim: String,
    /// Group → roles; `None`: the groups are used as role names directly.
    pub roles: Option<BTreeMap<String, Vec<String>>>,
    /// The claim naming the person (`sub` by default).
    pub name_claim: String,
    /// Where the provider sends the browser back (ends in [`CALLBACK_PATH`]).
    pub redirect_url: String,
    /// Scopes asked for besides `openid`.
    pub scopes: Vec<String>,
    /// The line `oidc` starts on (for errors found at start-up).
    pub line: Option<u64>,
}

/// Whether `host` is a loopback name or address (plain `http` is allowed there only).
fn loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

/// An https URL (http on loopback) without query or fragment, else why not.
fn web_url(what: &str, s: &str) -> Result<url::Url, String> {
    let u = url::Url::parse(s).map_err(|e| format!("{what} `{s}` is not a URL: {e}"))?;
    let ok_scheme = u.scheme() == "https" || (u.scheme() == "http" && loopback(&u));
    if !ok_scheme || u.query().is_some() || u.fragment().is_some() || !u.username().is_empty() {
        return Err(format!(
            "{what} `{s}` must be an https URL (http only on loopback) without credentials, query or fragment"
        ));
    }
    Ok(u)
}

/// A short identifier (claim name, client id, scope, group, role): 1 to 256 bytes of
/// visible ASCII.
fn word_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= 256 && s.bytes().all(|b| b.is_ascii_graphic())
}

/// Checks `oidc` of `path`: an https issuer (http on loopback only), a client id, a
/// `client_secret_env` variable name, a `roles_claim`, a `roles` map of groups to non-empty
/// role lists, a redirect URL (given, else `public_url` + [`CALLBACK_PATH`]) whose path is
/// [`CALLBACK_PATH`], and no principal named with [`NAME_PREFIX`]. `None` when absent.
pub(crate) fn oidc(
    path: &Path,
    raw: Option<&Spanned<RawOidc>>,
    public_url: Option<&str>,
    principals: &[Spanned<RawPrincipal>],
) -> Result<Option<OidcConfig>, ConfigError> {
    let Some(r) = raw else { return Ok(None) };
    let line = Some(r.referenced.line());
    let fail = |m: String| at(path, line, format!("oidc: {m}"));
    let v = &r.value;
    web_url("issuer", &v.issuer).map_err(fail)?;
    if !word_ok(&v.client_id) {
        return Err(fail(
            "client_id must be 1 to 256 visible ASCII characters".into(),
        ));
    }
    let env_ok = !v.client_secret_env.is_empty()
        && v.client_secret_env.len() <= 256
        && v.client_secret_env
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !env_ok {
        return Err(fail(
            "client_secret_env must name an environment variable (letters, digits, _)".into(),
        ));
    }
    let name_claim = v.name_claim.clone().unwrap_or_else(|| "sub".into());
    for (what, c) in [("roles_claim", &v.roles_claim), ("name_claim", &name_claim)] {
        if !word_ok(c) {
            return Err(fail(format!("{what} `{c}` must name a claim")));
        }
    }
    if let Some(m) = &v.roles {
        for (g, roles) in m {
            if !word_ok(g) || roles.is_empty() || roles.iter().any(|r| !word_ok(r)) {
                return Err(fail(format!(
                    "roles: group `{g}` must map to a non-empty list of role names"
                )));
            }
        }
    }
    if let Some(s) = v.scopes.iter().find(|s| !word_ok(s)) {
        return Err(fail(format!("scope `{s}` is not a scope name")));
    }
    let redirect = match (&v.redirect_url, public_url) {
        (Some(u), _) => u.clone(),
        (None, Some(p)) => format!("{}{CALLBACK_PATH}", p.trim_end_matches('/')),
        (None, None) => return Err(fail("needs `redirect_url` (or a `public_url`)".into())),
    };
    let ru = web_url("redirect_url", &redirect).map_err(fail)?;
    if ru.path() != CALLBACK_PATH {
        return Err(fail(format!(
            "redirect_url `{redirect}` must end in {CALLBACK_PATH}"
        )));
    }
    if let Some(p) = principals
        .iter()
        .find(|p| p.value.name.starts_with(NAME_PREFIX))
    {
        return Err(at(
            path,
            Some(p.referenced.line()),
            format!(
                "principal `{}`: names starting with `{NAME_PREFIX}` belong to single sign-on operators",
                p.value.name
            ),
        ));
    }
    Ok(Some(OidcConfig {
        issuer: v.issuer.clone(),
        client_id: v.client_id.clone(),
        client_secret_env: v.client_secret_env.clone(),
        roles_claim: v.roles_claim.clone(),
        roles: v.roles.clone(),
        name_claim,
        redirect_url: redirect,
        scopes: v.scopes.clone(),
        line,
    }))
}

/// The client secret of `c` read now from `client_secret_env`; unset or empty stops start-up
/// with the file, the line of `oidc` and the variable's name (never the secret).
pub fn resolve_secret(file: &Path, c: &OidcConfig) -> Result<String, ConfigError> {
    match std::env::var(&c.client_secret_env) {
        Ok(s) if !s.is_empty() => Ok(s),
        _ => Err(at(
            file,
            c.line,
            format!(
                "oidc: the client secret variable `{}` is not set (or empty)",
                c.client_secret_env
            ),
        )),
    }
}

impl OidcConfig {
    /// The roles the groups `groups` map to, sorted and without repeats: through `roles`
    /// (a group it does not list maps to nothing), or the groups themselves without a map.
    /// Empty: the person may not sign in.
    pub fn roles_for(&self, groups: &[String]) -> Vec<String> {
        let mut out: Vec<String> = match &self.roles {
            Some(m) => groups
                .iter()
                .filter_map(|g| m.get(g))
                .flatten()
                .cloned()
                .collect(),
            None => groups.iter().filter(|g| word_ok(g)).cloned().collect(),
        };
        out.sort();
        out.dedup();
        out.truncate(256);
        out
    }

    /// What a sign-in with the groups `groups` is granted: the roles they map to and the
    /// groups that map to some role (the others are not kept). No role: the person may not
    /// sign in.
    pub fn grant_for(&self, groups: &[String]) -> SsoGrant {
        SsoGrant {
            roles: self.roles_for(groups),
            groups: (groups.iter())
                .filter(|g| !g.is_empty() && g.len() <= 256)
                .filter(|g| !self.roles_for(std::slice::from_ref(g)).is_empty())
                .take(1000)
                .cloned()
                .collect(),
        }
    }

    /// The roles a single sign-on session granted `grant` holds now: those its groups map to
    /// under this (current) map that it was also granted at sign-in. Empty: it holds none and
    /// signs no one in.
    pub fn roles_now(&self, grant: &SsoGrant) -> Vec<String> {
        let mut now = self.roles_for(&grant.groups);
        now.retain(|r| grant.roles.contains(r));
        now
    }
}

/// How long discovered provider metadata (and its signing keys) is used.
const METADATA_TTL: Duration = Duration::from_secs(300);

/// The ID token's claims besides the standard ones (the groups claim is one of them).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub(crate) struct Extra(pub(crate) HashMap<String, serde_json::Value>);
impl AdditionalClaims for Extra {}

/// The ID token fields with [`Extra`] claims.
type Fields = IdTokenFields<
    Extra,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
/// The client of the configured provider.
pub(crate) type SsoClient = Client<
    Extra,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    StandardTokenResponse<Fields, CoreTokenType>,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// The configured provider: settings, the client secret, an HTTP client that follows no
/// redirect, and the discovered metadata.
pub struct Sso {
    pub(crate) config: OidcConfig,
    secret: ClientSecret,
    /// The HTTP client (no redirects, 10 s timeout) the provider is reached with.
    pub(crate) http: reqwest::Client,
    metadata: tokio::sync::Mutex<Option<(Instant, CoreProviderMetadata)>>,
}

impl Sso {
    /// The provider of `c` (from config file `file`): reads the client secret now (unset is
    /// an error naming the file, the line and the variable). Discovery happens at the first
    /// sign-in.
    pub fn new(file: &Path, c: &OidcConfig) -> Result<Sso, ConfigError> {
        Self::with_secret(c, resolve_secret(file, c)?)
    }

    /// The provider of `c` with client secret `secret` (given, not read from the
    /// environment).
    pub fn with_secret(c: &OidcConfig, secret: String) -> Result<Sso, ConfigError> {
        let secret = ClientSecret::new(secret);
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ConfigError::new(format!("oidc: HTTP client: {e}")))?;
        Ok(Sso {
            config: c.clone(),
            secret,
            http,
            metadata: tokio::sync::Mutex::new(None),
        })
    }

    /// The client, from metadata discovered at most [`METADATA_TTL`] ago; `Err` names the
    /// issuer and why it could not be discovered.
    pub(crate) async fn client(&self) -> Result<SsoClient, String> {
        let mut m = self.metadata.lock().await;
        let fresh = m.as_ref().is_some_and(|(t, _)| t.elapsed() < METADATA_TTL);
        if !fresh {
            let issuer = IssuerUrl::new(self.config.issuer.clone()).map_err(|e| e.to_string())?;
            match CoreProviderMetadata::discover_async(issuer, &self.http).await {
                Ok(md) => *m = Some((Instant::now(), md)),
                Err(e) => {
                    let why = error_chain(&e);
                    tracing::warn!(issuer = %self.config.issuer, error = %why, "OIDC discovery failed");
                    return Err(format!(
                        "The single sign-on provider `{}` could not be discovered: {why}",
                        self.config.issuer
                    ));
                }
            }
        }
        let md = m.as_ref().map(|(_, md)| md.clone()).expect("set above");
        let redirect =
            RedirectUrl::new(self.config.redirect_url.clone()).map_err(|e| e.to_string())?;
        Ok(Client::from_provider_metadata(
            md,
            ClientId::new(self.config.client_id.clone()),
            Some(self.secret.clone()),
        )
        .set_redirect_uri(redirect))
    }

    /// Forgets the discovered metadata (the provider may have rotated its keys).
    pub(crate) async fn forget(&self) {
        *self.metadata.lock().await = None;
    }
}

/// `e` and its sources, `: `-separated.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
