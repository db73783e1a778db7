//! The one HTTP client of the `/v1` API (the CLI's and the MCP proxy's), async on reqwest:
//! [`Client`] with a typed method per route (in [`crate::routes`]) and a raw-JSON escape hatch,
//! and [`ClientError`], which keeps apart "the gateway could not be reached" (transport), "the
//! gateway said no" (a non-2xx status with its `{"code", "message"}` body) and "the gateway
//! answered something else" (a body that is not the expected JSON). No retry and no logging
//! here: those are the caller's policy.

use crate::error::ApiErrorBody;
use crate::gate::GateAnswer;
use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Duration;

/// Why a call to the gateway failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The request did not get an answer: connection refused, DNS, TLS, timeout, or the
    /// connection dropped while the body was read. Nothing is known of the gateway's state
    /// (the MCP proxy treats it as "forward nothing" and keeps waiting).
    #[error("cannot reach the gateway at {base} ({}){}", causes(.cause), https_hint(.base))]
    Transport {
        /// The gateway's base URL (no trailing `/`).
        base: String,
        /// The HTTP client's error (its URL removed). Shown in the message with the errors
        /// under it ([`causes`]) and deliberately not a `source()`, so `{:#}` chains print the
        /// message once, as the CLI does.
        cause: reqwest::Error,
    },
    /// The gateway answered a non-2xx status; `error` is its `{"code", "message"}` body, or
    /// `None` when the body was not one (a proxy's HTML page, an empty body). Displays as
    /// `CODE: MESSAGE` (`ERROR: ` when there was no body), as the CLI prints it.
    #[error("{}: {}", .error.as_ref().map_or("ERROR", |e| e.code.as_str()), .error.as_ref().map_or("", |e| e.message.as_str()))]
    Status {
        /// The HTTP status.
        status: u16,
        /// The parsed error body (boxed: it is large and errors are rare).
        error: Option<Box<ApiErrorBody>>,
    },
    /// A 2xx answer whose body is not the expected JSON.
    #[error("the gateway answered {status} with an unexpected body: {detail}")]
    Body {
        /// The HTTP status.
        status: u16,
        /// What did not parse (serde's message).
        detail: String,
    },
    /// The client could not be built or the URL not formed: a base URL that cannot take a
    /// path, an id that is empty, `.` or `..`, or the HTTP client's own build error.
    #[error("{0}")]
    Config(String),
}

/// The most characters of a transport error's text ([`causes`]).
const MAX_CAUSE_CHARS: usize = 500;

/// `e`'s text followed by each error under it (`source()`), joined with `: `, a text already
/// shown not repeated, control characters as spaces, at most [`MAX_CAUSE_CHARS`] characters:
/// `error sending request: client error (Connect): tcp connect error: Connection refused (os
/// error 111)`. reqwest's own text alone says only `error sending request` (seen in CI: a
/// dropped keep-alive connection and a refused one read the same).
fn causes(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut next = std::error::Error::source(e);
    while let Some(cause) = next {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = cause.source();
    }
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_CAUSE_CHARS)
        .collect()
}

/// What a transport error to the gateway at `base` adds: on a host without CA certificates
/// ([`no_ca_roots`]), for an https gateway, why no https connection can be verified.
fn https_hint(base: &str) -> String {
    let https = Url::parse(base).is_ok_and(|u| u.scheme() == "https");
    if https && no_ca_roots() {
        format!(": {NO_CA_ROOTS}")
    } else {
        String::new()
    }
}

impl ClientError {
    /// Whether the gateway could not be reached (nothing was answered).
    pub fn is_transport(&self) -> bool {
        matches!(self, Self::Transport { .. })
    }
    /// The HTTP status, when the gateway answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } | Self::Body { status, .. } => Some(*status),
            _ => None,
        }
    }
    /// The error body of a non-2xx answer, when it had one.
    pub fn api_error(&self) -> Option<&ApiErrorBody> {
        match self {
            Self::Status { error, .. } => error.as_deref(),
            _ => None,
        }
    }
    /// The error body's `code` (e.g. `TOKEN_USED`), when there is one.
    pub fn code(&self) -> Option<&str> {
        self.api_error().map(|e| e.code.as_str())
    }
    /// The error body's `message`, when there is one.
    pub fn message(&self) -> Option<&str> {
        self.api_error().map(|e| e.message.as_str())
    }
}

/// A gateway answer read but not interpreted: the status and the body as JSON (`null` when
/// empty or not JSON). See [`Client::raw`].
#[derive(Debug, Clone, PartialEq)]
pub struct RawResponse {
    /// The HTTP status.
    pub status: u16,
    /// The body; `null` when empty or not JSON.
    pub body: Value,
}

/// A client of one gateway with one bearer key. Cheap to clone (the connection pool is
/// shared). Every method sends `Authorization: Bearer KEY`.
/// `b` without the environment's proxies (`HTTP_PROXY`, `ALL_PROXY`…) when `url` is on a
/// loopback host ([`loopback_host`]): a service on this machine is reached directly; other
/// hosts keep the environment's proxies. The one rule for every client assent builds to a
/// URL it was configured with (this API client, the gateway's webhooks, Slack's Web API and
/// the SSO provider). Found by review: reqwest sends through the environment's proxy even to
/// loopback, so `http://127.0.0.1` — allowed in plain http because no packet leaves the
/// machine — carried keys, signatures and bodies in clear text to a corporate proxy.
pub fn direct_to_loopback(b: reqwest::ClientBuilder, url: &str) -> reqwest::ClientBuilder {
    let loopback = Url::parse(url.trim()).is_ok_and(|u| loopback_host(&u));
    if loopback { b.no_proxy() } else { b }
}

/// Whether this host gives reqwest's platform verifier no CA certificate to trust (none in the
/// system store, `SSL_CERT_FILE` or `SSL_CERT_DIR`, as `rustls-native-certs` reads them), so
/// that no client built with it can be made at all — not even one for plain http to this
/// machine ([`no_ca_roots_error`]).
pub fn no_ca_roots() -> bool {
    no_ca_roots_error().is_some()
}

/// On a host without CA certificates ([`no_ca_roots`]), why reqwest's default client could not
/// be built (its error's text); `None` on a host with them. Found once per process by building
/// reqwest's default client, and a client with an empty root store if that fails (the one
/// difference: a failure there is the platform verifier's). Nothing is logged here: the first
/// call may come before the process's log subscriber is installed (the OTel exporter's
/// client is built first), and a warning then would go nowhere, never to come again (found
/// by review); `assent serve` logs [`NO_CA_ROOTS`] with this text once it logs.
pub fn no_ca_roots_error() -> Option<&'static str> {
    static MISSING: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    MISSING
        .get_or_init(|| {
            let e = reqwest::Client::builder().build().err()?;
            let missing = reqwest::Client::builder()
                .tls_certs_only(Vec::<reqwest::Certificate>::new())
                .build()
                .is_ok();
            missing.then(|| format!("{e:#}"))
        })
        .as_deref()
}

/// Why every https connection fails on a host without CA certificates ([`no_ca_roots`]).
pub const NO_CA_ROOTS: &str = "this host has no CA certificates (none in the system store, SSL_CERT_FILE or SSL_CERT_DIR): plain http to this machine works, but every https connection fails, no certificate verifiable, until a CA bundle is installed (e.g. the ca-certificates package, or one SSL_CERT_FILE names) and the gateway restarted";

/// `reqwest::Client::builder()`, the one every HTTP client of assent is built from (this API
/// client, the MCP hub's upstreams, webhooks, Slack, single sign-on): with the system's roots
/// through reqwest's platform verifier, or, on a host with none ([`no_ca_roots`]), with an
/// empty root store (`tls_certs_only` of nothing), so that plain http (the CLI to its own
/// gateway, a loopback webhook) still works and https fails closed, every certificate
/// refused as of an unknown issuer — never "accept any certificate". Found by review: with
/// reqwest 0.13 a host without CA certificates could build no client at all, and the CLI
/// could not reach its own gateway on `http://127.0.0.1` ("builder error").
pub fn http_builder() -> reqwest::ClientBuilder {
    let b = reqwest::Client::builder();
    if no_ca_roots() {
        b.tls_certs_only(Vec::<reqwest::Certificate>::new())
    } else {
        b
    }
}

/// Whether URL `u` names a host of this machine: `localhost` (any case) or a loopback
/// address (`127.0.0.0/8`, `::1`), to which no packet leaves the machine. The one rule for
/// plain http allowed (the gateway's `config::urls`) and proxies skipped (this client).
pub fn loopback_host(u: &Url) -> bool {
    let host = u.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_loopback())
}

/// The largest answer body this client reads, in bytes (32 MiB; a page of a paged list:
/// [`MAX_PAGE_BYTES`]): a longer one is [`ClientError::Body`], the rest unread. Found by
/// review: a hostile or broken gateway could send an endless body and have the CLI read it
/// all into memory. A page of `GET /v1/approvals` holds about 1 MiB of call text.
pub const MAX_ANSWER_BYTES: usize = 32 << 20;

/// The largest page of a paged list or NDJSON export this client reads (64 MiB): the gateway
/// ends a page after about 8 MiB of text, which JSON escaping may make several times longer.
pub const MAX_PAGE_BYTES: usize = 64 << 20;

/// The shortest time between two long-poll requests of one wait (100 ms): a gateway that
/// answers "still pending" at once, ignoring `?wait`, is asked at most ten times a second
/// (found by review: the CLI's `wait_decided` and the MCP proxy's waits asked again at once,
/// a busy loop). A long poll that waited costs nothing.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Sleeps out what is left of [`MIN_POLL_INTERVAL`] since a long-poll request was sent at
/// `asked` (nothing when that long ago already). For every wait that polls again on "pending".
pub async fn pace_poll(asked: std::time::Instant) {
    if let Some(left) = MIN_POLL_INTERVAL.checked_sub(asked.elapsed()) {
        tokio::time::sleep(left).await;
    }
}

/// The most bytes of pages one listing read whole takes (256 MiB): a longer walk ends with
/// [`ClientError::Body`]. Found by review: only each page and the page count were bounded,
/// so a hostile gateway's 10,000 pages of 64 MiB each, each with a new cursor, were all kept.
pub const MAX_LISTING_BYTES: usize = 256 << 20;

/// The code of the [`ClientError::Status`] a redirect (a `3xx` answer) is: this client follows
/// none, so that a decision's body is never sent on to another address (found by review).
pub const REDIRECT_NOT_FOLLOWED: &str = "REDIRECT_NOT_FOLLOWED";

/// How long [`Client::new`]'s client waits for a connection to the gateway.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Client::new`]'s client waits for a whole answer (a long-poll: its `wait` more),
/// unless [`Client::with_request_timeout`] says otherwise.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the MCP side's clients ([`Client::with_timeouts`], [`Client::over_unix_socket`])
/// keep an idle connection for reuse: less than the gateway's shortest idle keep-alive wait
/// (`header_read_timeout_seconds`, at least 1 s), so a request never goes out on a connection
/// the gateway is closing for idleness (a request written as the server closes is lost, not
/// retried). Seen in CI, this the likely cause: the hub's result report, after an upstream call
/// of about 30 s (the gateway's default wait) on the connection its proposal had used, failed
/// "error sending request" and the result was withheld.
pub const POOL_IDLE: Duration = Duration::from_millis(500);

/// Its `Debug` leaves the key out (found by review: derived, any `?client` in a log would
/// have printed it).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    base_text: String,
    key: String,
    /// Each request's deadline, from sending to the end of the answer's body (a long-poll's
    /// `wait` added); `None`: the reqwest client's own (see [`Client::with_timeouts`]).
    request_timeout: Option<Duration>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base_text)
            .field("key", &"<withheld>")
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the gateway at `base_url` (e.g. `http://127.0.0.1:7878`; a path prefix is
    /// kept), the CLI's: it gives up connecting after [`CONNECT_TIMEOUT`] and on a request
    /// after [`REQUEST_TIMEOUT`] (a long-poll's `wait` more). Found by review: with no
    /// timeout, a connection that died silently froze `assent watch` for good, in raw mode,
    /// where `q` and Ctrl-C are keys it no longer read.
    pub fn new(base_url: &str, api_key: &str) -> Result<Self, ClientError> {
        let http = direct_to_loopback(http_builder(), base_url)
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ClientError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self::with_http(http, base_url, api_key)?.with_request_timeout(REQUEST_TIMEOUT))
    }

    /// The same client with each request's deadline `timeout` (from sending to the end of
    /// the answer's body; a long-poll's `wait` is added to it).
    pub fn with_request_timeout(&self, timeout: Duration) -> Self {
        Self {
            request_timeout: Some(timeout),
            ..self.clone()
        }
    }

    /// A client that gives up connecting after `connect` and on any request after `total`
    /// (the MCP proxy's: 5 s, and the long-poll plus 30 s). `total` must exceed the longest
    /// `?wait=` used.
    pub fn with_timeouts(
        base_url: &str,
        api_key: &str,
        connect: Duration,
        total: Duration,
    ) -> Result<Self, ClientError> {
        let http = direct_to_loopback(http_builder(), base_url)
            .connect_timeout(connect)
            .timeout(total)
            .pool_idle_timeout(POOL_IDLE)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ClientError::Config(format!("cannot build the HTTP client: {e}")))?;
        Self::with_http(http, base_url, api_key)
    }

    /// A client of the gateway serving on the Unix socket `path` (the MCP hub inside `assent
    /// serve` reaches its own gateway so: its connections are not a client address's, and no
    /// other user can open them), with the timeouts of [`Client::with_timeouts`]. Requests
    /// name the host `localhost`.
    #[cfg(unix)]
    pub fn over_unix_socket(
        path: &std::path::Path,
        api_key: &str,
        connect: Duration,
        total: Duration,
    ) -> Result<Self, ClientError> {
        let http = http_builder()
            .unix_socket(path)
            .connect_timeout(connect)
            .timeout(total)
            .pool_idle_timeout(POOL_IDLE)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ClientError::Config(format!("cannot build the HTTP client: {e}")))?;
        Self::with_http(http, "http://localhost", api_key)
    }

    /// A client on an existing reqwest client (sharing its pool and timeouts, e.g. the MCP
    /// hub's one client for many agent keys); no deadline of its own per request.
    pub fn with_http(
        http: reqwest::Client,
        base_url: &str,
        api_key: &str,
    ) -> Result<Self, ClientError> {
        let base_text = base_url.trim_end_matches('/').to_string();
        let base = Url::parse(&base_text)
            .ok()
            .filter(|u| !u.cannot_be_a_base())
            .ok_or_else(|| ClientError::Config(format!("`{base_url}` is not a gateway URL")))?;
        Ok(Self {
            http,
            base,
            base_text,
            key: api_key.to_string(),
            request_timeout: None,
        })
    }

    /// The gateway's base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base_text
    }

    /// The same gateway and HTTP client with another bearer key.
    pub fn with_key(&self, api_key: &str) -> Self {
        Self {
            key: api_key.to_string(),
            ..self.clone()
        }
    }

    /// The URL of `segments` (each percent-encoded, `/` included) under the base, with
    /// `query` pairs. An empty, `.` or `..` segment is refused (it would name another route).
    pub(crate) fn url(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<Url, ClientError> {
        if let Some(s) = segments.iter().find(|s| matches!(**s, "" | "." | "..")) {
            return Err(ClientError::Config(format!(
                "`{s}` cannot be used as an id in a gateway URL"
            )));
        }
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| ClientError::Config("the gateway URL cannot take a path".into()))?
            .pop_if_empty()
            .extend(segments);
        if !query.is_empty() {
            let mut q = url.query_pairs_mut();
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        Ok(url)
    }

    fn transport(&self, e: reqwest::Error) -> ClientError {
        ClientError::Transport {
            base: self.base_text.clone(),
            cause: e.without_url(),
        }
    }

    /// Sends one request: the answer, its body not yet read.
    async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<reqwest::Response, ClientError> {
        let mut req = self.http.request(method, url).bearer_auth(&self.key);
        if let Some(t) = self.request_timeout {
            req = req.timeout(t);
        }
        // The caller's span continues in the gateway's trace (issue 15 §1); none when off.
        if let Some(tp) = crate::trace::traceparent(&tracing::Span::current()) {
            req = req.header("traceparent", tp);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        req.send().await.map_err(|e| self.transport(e))
    }

    /// `resp`'s body, at most `max` bytes: a longer one, declared or read, is
    /// [`ClientError::Body`] ([`MAX_ANSWER_BYTES`]).
    async fn body(&self, mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, ClientError> {
        let status = resp.status().as_u16();
        let too_long = || ClientError::Body {
            status,
            detail: format!(
                "longer than {} MiB, the most this client reads: refused",
                max >> 20
            ),
        };
        if resp.content_length().is_some_and(|n| n > max as u64) {
            return Err(too_long());
        }
        let mut out = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.transport(e))? {
            if out.len() + chunk.len() > max {
                return Err(too_long());
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// Sends one request and reads the whole answer: `(status, body bytes)`.
    async fn exchange<B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let resp = self.send(method, url, body).await?;
        let status = resp.status().as_u16();
        Ok((status, self.body(resp, MAX_ANSWER_BYTES).await?))
    }

    /// Sends a request and parses a 2xx body as `T`; a non-2xx is [`ClientError::Status`].
    pub(crate) async fn call<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let url = self.url(segments, query)?;
        let (status, bytes) = self.exchange(method, url, body).await?;
        if !(200..300).contains(&status) {
            return Err(status_error(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Body {
            status,
            detail: e.to_string(),
        })
    }

    /// `GET` of `segments` with `query`, its 2xx body parsed as `T` (see [`Client::call`]).
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<T, ClientError> {
        self.call(Method::GET, segments, query, None::<&()>).await
    }

    /// `GET` of `segments` with `query`, its 2xx body parsed as `T` (see [`Client::call`]),
    /// and the `before` cursor its `Link: <…&before=CURSOR>; rel="next"` header names for the
    /// next page (`None` on the last page).
    pub(crate) async fn get_page<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<(T, Option<String>, usize), ClientError> {
        let url = self.url(segments, query)?;
        let resp = self.send(Method::GET, url, None::<&()>).await?;
        let status = resp.status().as_u16();
        let next = resp
            .headers()
            .get(reqwest::header::LINK)
            .and_then(|v| v.to_str().ok())
            .and_then(|link| self.next_cursor(link));
        let bytes = self.body(resp, MAX_PAGE_BYTES).await?;
        if !(200..300).contains(&status) {
            return Err(status_error(status, &bytes));
        }
        let body = serde_json::from_slice(&bytes).map_err(|e| ClientError::Body {
            status,
            detail: e.to_string(),
        })?;
        Ok((body, next, bytes.len()))
    }

    /// The `before` query value of a `Link` header's `rel="next"` target (one link, as the
    /// gateway writes it: `<PATH?QUERY>; rel="next"`).
    fn next_cursor(&self, link: &str) -> Option<String> {
        let (target, params) = link.trim().strip_prefix('<')?.split_once('>')?;
        if !params.split(';').any(|p| p.trim() == "rel=\"next\"") {
            return None;
        }
        let url = self.base.join(target).ok()?;
        url.query_pairs()
            .find(|(k, _)| k == "before")
            .map(|(_, v)| v.into_owned())
    }

    /// A read that may long-poll: `GET` of `segments` with `?wait=S` (at most 60 on the
    /// server); `wait_seconds` 0 sends no `wait` and is answered at once, as the server reads
    /// an absent `wait`.
    pub(crate) async fn get_waiting<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        wait_seconds: u64,
    ) -> Result<T, ClientError> {
        let query: &[(&str, String)] = match wait_seconds {
            0 => &[],
            w => &[("wait", w.to_string())],
        };
        // The gateway answers after the wait at the latest: the deadline is that much later.
        let waiting = Self {
            request_timeout: self
                .request_timeout
                .map(|t| t + Duration::from_secs(wait_seconds)),
            ..self.clone()
        };
        waiting.get(segments, query).await
    }

    /// `POST` of the JSON `body` to `segments`, its 2xx body parsed as `T`.
    pub(crate) async fn post<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        segments: &[&str],
        body: &B,
    ) -> Result<T, ClientError> {
        self.call(Method::POST, segments, &[], Some(body)).await
    }

    /// Sends a request whose 2xx answer has no body to read (`204`).
    pub(crate) async fn call_empty<B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&B>,
    ) -> Result<(), ClientError> {
        let url = self.url(segments, &[])?;
        match self.exchange(method, url, body).await? {
            (status, _) if (200..300).contains(&status) => Ok(()),
            (status, bytes) => Err(status_error(status, &bytes)),
        }
    }

    /// `GET` of `segments` with `query`, a 2xx text body (NDJSON): the text and the answer's
    /// `Link` header (RFC 8288, as sent; `None` without one). A non-2xx answer is
    /// [`ClientError::Status`]; a body that is not UTF-8, [`ClientError::Body`].
    pub(crate) async fn call_text(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<(String, Option<String>), ClientError> {
        let url = self.url(segments, query)?;
        let resp = self.send(Method::GET, url, None::<&()>).await?;
        let status = resp.status().as_u16();
        let link = resp
            .headers()
            .get(reqwest::header::LINK)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = self.body(resp, MAX_PAGE_BYTES).await?;
        if !(200..300).contains(&status) {
            return Err(status_error(status, &bytes));
        }
        let text = String::from_utf8(bytes).map_err(|e| ClientError::Body {
            status,
            detail: e.to_string(),
        })?;
        Ok((text, link))
    }

    /// Sends a submission and reads the gate's answer: `200` allow, `202` pending and `403`
    /// deny are answers; any other status (or a `403` that is an error body, `FORBIDDEN`) is
    /// [`ClientError::Status`].
    pub(crate) async fn gate<B: Serialize + ?Sized>(
        &self,
        segments: &[&str],
        body: &B,
    ) -> Result<GateAnswer, ClientError> {
        let url = self.url(segments, &[])?;
        let (status, bytes) = self.exchange(Method::POST, url, Some(body)).await?;
        let parsed = serde_json::from_slice::<GateAnswer>(&bytes);
        match (status, parsed) {
            (200 | 202 | 403, Ok(a)) if a.http_status() == status => Ok(a),
            (200..=299, Ok(_)) => Err(ClientError::Body {
                status,
                detail: "the decision does not match the status".into(),
            }),
            (200..=299, Err(e)) => Err(ClientError::Body {
                status,
                detail: e.to_string(),
            }),
            _ => Err(status_error(status, &bytes)),
        }
    }

    /// The escape hatch: `method` on `path_and_query` (e.g.
    /// `/v1/approvals?status=pending`, appended to the base URL as given, not encoded) with an
    /// optional JSON body; the answer whatever its status. Only a transport failure is an
    /// error, and a path that does not start with `/` or leaves the gateway's origin
    /// ([`ClientError::Config`]): found by review, `@evil.example/` appended to the base made
    /// its host the user name and sent the bearer key to `evil.example`.
    pub async fn raw(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> Result<RawResponse, ClientError> {
        let bad = |why: String| ClientError::Config(format!("bad path `{path_and_query}`: {why}"));
        if !path_and_query.starts_with('/') || path_and_query.starts_with("//") {
            return Err(bad("it must start with one `/`".into()));
        }
        let url = Url::parse(&format!("{}{path_and_query}", self.base_text))
            .map_err(|e| bad(e.to_string()))?;
        if url.origin() != self.base.origin() || !url.username().is_empty() {
            return Err(bad("it leaves the gateway's origin".into()));
        }
        let (status, bytes) = self.exchange(method, url, body).await?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(RawResponse { status, body })
    }

    /// [`Client::raw`], with a non-2xx answer as [`ClientError::Status`]: the JSON body of a
    /// 2xx answer (`null` when empty or not JSON), as the CLI's `get`/`post` return it today.
    pub async fn raw_ok(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let r = self.raw(method, path_and_query, body).await?;
        if (200..300).contains(&r.status) {
            Ok(r.body)
        } else if (300..400).contains(&r.status) {
            Err(status_error(r.status, &[]))
        } else {
            Err(ClientError::Status {
                status: r.status,
                error: serde_json::from_value(r.body).ok(),
            })
        }
    }
}

/// The error of a non-2xx answer, with its body when it is `{"code", "message", …}`; a
/// redirect's is [`REDIRECT_NOT_FOLLOWED`], whatever its body.
fn status_error(status: u16, bytes: &[u8]) -> ClientError {
    if (300..400).contains(&status) {
        let message = format!(
            "the gateway answered {status}, a redirect, which this client does not follow (a \
             request is never sent on to another address): use the gateway's own URL"
        );
        return ClientError::Status {
            status,
            error: Some(Box::new(ApiErrorBody::new(REDIRECT_NOT_FOLLOWED, message))),
        };
    }
    ClientError::Status {
        status,
        error: serde_json::from_slice(bytes).ok(),
    }
}
