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
use super::urls::web_url;
use crate::dashboard::oidc::fetch::ProviderHttp;
use crate::dashboard::oidc::places::Places;
use assent_store::ui_sessions::SsoGrant;
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata,
    CoreRevocableToken, CoreRevocationErrorResponse, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, Client, ClientId, ClientSecret, EmptyExtraTokenFields, EndpointMaybeSet,
    EndpointNotSet, EndpointSet, IdTokenFields, IssuerUrl, JsonWebKey as _, JsonWebKeySet,
    RedirectUrl, StandardErrorResponse, StandardTokenResponse,
};
use serde_saphyr::Spanned;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Single sign-on code exchanges in flight on one replica at once, at the most (handed out
/// by `dashboard/oidc/places.rs`).
pub const SSO_EXCHANGES: usize = 16;

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

    /// The binding of a single sign-on session to this provider (64 hex): SHA-256 over a tag
    /// of its own, the issuer and the client id. A session keeps the binding of its sign-in
    /// (`assent_store::ui_sessions`), and `dashboard::session::signed_in_as` compares it with
    /// the configured provider's on every request.
    ///
    /// Attack (found by review): a session was `oidc:<sub>` and its groups, whoever issued
    /// them; after a restart with another issuer (or client id), a 12-hour session of the old
    /// issuer's `sub` 123 kept working, and once a principal linked `sso: 123` for the new
    /// issuer's (different) person 123, it acted as that principal.
    pub fn session_binding(&self) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(b"assent/ui-session/sso-binding/v1\0");
        h.update(serde_json::json!([self.issuer, self.client_id]).to_string());
        hex::encode(h.finalize())
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

/// How long discovered provider metadata (and its signing keys) is used before it is
/// discovered again (`Sso::with_metadata_times` sets another, for tests).
pub const METADATA_TTL: Duration = Duration::from_secs(300);
/// How long past [`METADATA_TTL`] the last metadata discovered is still used while discovering
/// it again fails or is under way (15 minutes): a provider's blip does not stop sign-ins; one
/// down for longer does (its keys may have been rotated for a reason, and whoever can block
/// the gateway's way to the provider should not keep a revoked key trusted for long).
pub const METADATA_STALE: Duration = Duration::from_secs(900);
/// How long a failed discovery is remembered: until then sign-ins are refused without the
/// provider being asked again (`Sso::client`).
pub const DISCOVERY_RETRY: Duration = Duration::from_secs(5);
/// How often at most the provider's keys are fetched again for an ID token naming a key id
/// the known keys lack (`Sso::client_with_key`).
pub const KEYS_REFRESH: Duration = Duration::from_secs(60);

/// The ID token signature algorithms accepted (of those the provider's discovery lists):
/// asymmetric ones only, never an HMAC keyed with the client secret nor `none`.
pub const ID_TOKEN_ALGS: [CoreJwsSigningAlgorithm; 10] = {
    use CoreJwsSigningAlgorithm as A;
    [
        A::RsaSsaPkcs1V15Sha256,
        A::RsaSsaPkcs1V15Sha384,
        A::RsaSsaPkcs1V15Sha512,
        A::RsaSsaPssSha256,
        A::RsaSsaPssSha384,
        A::RsaSsaPssSha512,
        A::EcdsaP256Sha256,
        A::EcdsaP384Sha384,
        A::EcdsaP521Sha512,
        A::EdDsa,
    ]
};

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
/// redirect, what was discovered of the provider (or why not), and the places for code
/// exchanges in flight (`crate::dashboard::oidc::places`).
pub struct Sso {
    pub(crate) config: OidcConfig,
    secret: ClientSecret,
    /// The HTTP client the provider is reached with: no redirects, every answer bounded in
    /// size and time (`crate::dashboard::oidc::fetch`).
    pub(crate) http: ProviderHttp,
    /// Where the provider sends the browser back.
    redirect: RedirectUrl,
    /// What was discovered of the provider; shared with the discovery under way, which runs
    /// as a task of its own.
    discovered: Arc<Mutex<Discovered>>,
    /// How long metadata is fresh, and how long past that it is used while discovery fails
    /// ([`METADATA_TTL`], [`METADATA_STALE`]).
    times: (Duration, Duration),
    /// The places for this replica's code exchanges in flight, fair between client networks.
    pub(crate) places: Places,
}

/// What was discovered of the provider: the last metadata found (kept when discovering it
/// again fails), the last failure since, and the discovery under way.
#[derive(Default)]
struct Discovered {
    found: Option<Found>,
    /// Discovery failed at `.0`, for `.1`: not asked again before [`DISCOVERY_RETRY`].
    failed: Option<(Instant, String)>,
    /// Closed when the discovery under way ends (at most one at a time).
    under_way: Option<tokio::sync::watch::Receiver<()>>,
}

/// Metadata and keys discovered at `at`; the keys last fetched again at `keys_at`.
struct Found {
    at: Instant,
    md: Box<CoreProviderMetadata>,
    keys_at: Option<Instant>,
}

/// The discovery under way: on drop (ended, or its task cancelled) it is no longer under way
/// and those waiting for it look again.
struct UnderWay {
    discovered: Arc<Mutex<Discovered>>,
    _done: tokio::sync::watch::Sender<()>,
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        lock(&self.discovered).under_way = None;
    }
}

/// `m` locked (never held across an `await`; a panic while held cannot leave it half written).
fn lock(m: &Mutex<Discovered>) -> std::sync::MutexGuard<'_, Discovered> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why there is no client: the message for the person, and when to try again.
#[derive(Debug, Clone)]
pub(crate) struct Undiscovered {
    /// Names the issuer and what went wrong.
    pub(crate) why: String,
    /// How long this replica will not ask the provider again.
    pub(crate) retry_after: Duration,
}

impl Sso {
    /// The provider of `c` (from config file `file`): reads the client secret now (unset is
    /// an error naming the file, the line and the variable). Discovery happens at the first
    /// sign-in.
    pub fn new(file: &Path, c: &OidcConfig) -> Result<Sso, ConfigError> {
        Self::with_secret(c, resolve_secret(file, c)?)
    }

    /// Its validated `oidc` section.
    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    /// The provider of `c` with client secret `secret` (given, not read from the
    /// environment).
    pub fn with_secret(c: &OidcConfig, secret: String) -> Result<Sso, ConfigError> {
        let secret = ClientSecret::new(secret);
        let http =
            ProviderHttp::new().map_err(|e| ConfigError::new(format!("oidc: HTTP client: {e}")))?;
        let redirect = RedirectUrl::new(c.redirect_url.clone())
            .map_err(|e| ConfigError::new(format!("oidc: redirect_url: {e}")))?;
        Ok(Sso {
            config: c.clone(),
            secret,
            http,
            redirect,
            discovered: Arc::default(),
            times: (METADATA_TTL, METADATA_STALE),
            places: Places::new(SSO_EXCHANGES),
        })
    }

    /// This provider with its metadata fresh for `ttl` and used for `stale` past that while
    /// discovering it again fails (not [`METADATA_TTL`] and [`METADATA_STALE`]: for tests).
    pub fn with_metadata_times(mut self, ttl: Duration, stale: Duration) -> Self {
        self.times = (ttl, stale);
        self
    }

    /// The client, from metadata discovered at most [`METADATA_TTL`] ago; `Err` names the
    /// issuer and why it could not be discovered. A failed discovery is remembered for
    /// [`DISCOVERY_RETRY`]: meanwhile every caller gets its `Err` without the provider being
    /// asked (found by review: each sign-in start asked a dead provider again, one at a time,
    /// so its timeouts queued every start). Callers at once wait for one discovery.
    ///
    /// Found by review: discovery ran under the lock, and a failed one replaced the metadata,
    /// so one blip of the provider held every sign-in start and callback for its timeouts, then
    /// refused them. Discovery now runs as a task of its own, one at a time, and while it is
    /// under way or has failed the last metadata found is used, for up to [`METADATA_STALE`]
    /// past its [`METADATA_TTL`]; only callers with no such metadata wait for it.
    pub(crate) async fn client(&self) -> Result<SsoClient, Undiscovered> {
        let (ttl, stale) = self.times;
        loop {
            let mut wait = {
                let mut d = lock(&self.discovered);
                let age = d.found.as_ref().map(|f| f.at.elapsed());
                if let (Some(f), Some(age)) = (&d.found, age)
                    && age < ttl
                {
                    return Ok(self.client_of(&f.md));
                }
                let failed = (d.failed.as_ref()).filter(|(at, _)| at.elapsed() < DISCOVERY_RETRY);
                if d.under_way.is_none() && failed.is_none() {
                    self.discover(&mut d);
                }
                if let (Some(f), Some(age)) = (&d.found, age)
                    && age < ttl + stale
                {
                    return Ok(self.client_of(&f.md));
                }
                match (&d.under_way, &d.failed) {
                    (Some(w), _) => w.clone(),
                    (None, Some((at, why))) => {
                        return Err(Undiscovered {
                            why: why.clone(),
                            retry_after: DISCOVERY_RETRY.saturating_sub(at.elapsed()),
                        });
                    }
                    (None, None) => continue,
                }
            };
            // Closed (`Err`) when the discovery ends: look again.
            let _ = wait.changed().await;
        }
    }

    /// Starts discovering the provider, in a task of its own (`d` is not under way): its
    /// metadata replaces what was found, its failure is logged and remembered (beside what
    /// was found).
    fn discover(&self, d: &mut Discovered) {
        let (done, under_way) = tokio::sync::watch::channel(());
        d.under_way = Some(under_way);
        let guard = UnderWay {
            discovered: self.discovered.clone(),
            _done: done,
        };
        let (http, issuer) = (self.http.clone(), self.config.issuer.clone());
        tokio::spawn(async move {
            let found = match IssuerUrl::new(issuer.clone()) {
                Ok(url) => CoreProviderMetadata::discover_async(url, &http)
                    .await
                    .map_err(|e| error_chain(&e)),
                Err(e) => Err(e.to_string()),
            };
            let mut d = lock(&guard.discovered);
            match found {
                Ok(md) => {
                    d.failed = None;
                    d.found = Some(Found {
                        at: Instant::now(),
                        md: Box::new(md),
                        keys_at: None,
                    });
                }
                Err(e) => {
                    let kept = d.found.is_some();
                    tracing::warn!(issuer = %issuer, error = %e, kept_metadata = kept, "OIDC discovery failed");
                    let why = format!(
                        "The single sign-on provider `{issuer}` could not be discovered: {e}"
                    );
                    d.failed = Some((Instant::now(), why));
                }
            }
            drop(d);
            drop(guard);
        });
    }

    /// The client of metadata `md`, whose ID token verifier accepts only the signature
    /// algorithms of [`ID_TOKEN_ALGS`] that `md` lists.
    ///
    /// Attack (found by review): the allowed algorithms were the discovery document's
    /// `id_token_signing_alg_values_supported` as they stood; with a client secret the library
    /// then accepts HS256/384/512 ID tokens keyed with that secret, so a provider (or whoever
    /// writes its discovery document) listing HS256 made the client secret, which sits in the
    /// gateway's environment and is sent with every code exchange, enough to sign anyone in.
    fn client_of(&self, md: &CoreProviderMetadata) -> SsoClient {
        let algs = (md.id_token_signing_alg_values_supported().iter())
            .filter(|a| ID_TOKEN_ALGS.contains(a))
            .cloned()
            .collect();
        Client::from_provider_metadata(
            md.clone().set_id_token_signing_alg_values_supported(algs),
            ClientId::new(self.config.client_id.clone()),
            Some(self.secret.clone()),
        )
        .set_redirect_uri(self.redirect.clone())
    }

    /// A client whose keys include key id `kid`, fetching the provider's keys (its JWKS) again
    /// when the discovered ones do not, at most once per [`KEYS_REFRESH`] (the provider may
    /// have rotated them); `None` when they still do not, or were fetched again too recently.
    /// The metadata is kept whatever happens: found by review, an ID token that failed its
    /// checks forgot it, so anyone who could sign in had the gateway discover the provider
    /// again at will.
    pub(crate) async fn client_with_key(&self, kid: &str) -> Option<SsoClient> {
        let has = |md: &CoreProviderMetadata| {
            md.jwks()
                .keys()
                .iter()
                .any(|k| k.key_id().is_some_and(|id| id.as_str() == kid))
        };
        let uri = {
            let mut d = lock(&self.discovered);
            let Some(Found { md, keys_at, .. }) = &mut d.found else {
                return None;
            };
            if has(md) {
                return Some(self.client_of(md));
            }
            if keys_at.is_some_and(|t| t.elapsed() < KEYS_REFRESH) {
                return None;
            }
            *keys_at = Some(Instant::now());
            md.jwks_uri().clone()
        };
        // Fetched without holding the lock: sign-ins meanwhile use the keys known.
        let keys = match JsonWebKeySet::fetch_async(&uri, &self.http).await {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "OIDC provider keys could not be fetched again");
                return None;
            }
        };
        let mut d = lock(&self.discovered);
        let Some(Found { md, .. }) = &mut d.found else {
            return None;
        };
        **md = (**md).clone().set_jwks(keys);
        has(md).then(|| self.client_of(md))
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
