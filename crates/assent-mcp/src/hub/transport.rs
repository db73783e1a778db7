//! The hub's transports: a stdio client (`assent mcp --agent ID --config …`), its lines read
//! strictly before rmcp sees them, and the streamable HTTP service mounted at `/mcp` on
//! `assent serve` (with DNS-rebinding protection). What is served is [`HubHandler`]'s.

use super::handler::HubHandler;
use super::state::Hub;
use crate::weigh::{Envelope, Id, MAX_LINE_WEIGHT, envelope, raw_weight, too_heavy};
use rmcp::ServiceExt;
use std::sync::Arc;

/// Serves one stdio client (`assent mcp --agent … --config …`) until it disconnects. Its
/// calls still under way when it closes stdin are stopped as if it had cancelled them, and
/// their withdrawals made, before this returns ([`Hub::client_gone`]; found by review: the
/// process ended with them held at the gateway until their approvals expired).
pub async fn serve_stdio(hub: Arc<Hub>, key: String, session: String) -> anyhow::Result<()> {
    let (closed, mut stdin_closed) = tokio::sync::oneshot::channel();
    let service = HubHandler::stdio(hub.clone(), key, session.clone())
        .serve(strict_stdio(closed))
        .await?;
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let ended = tokio::select! {
        _ = &mut stdin_closed => None,
        ended = &mut waiting => Some(ended),
    };
    hub.client_gone(&session).await;
    if !hub.settle_proposals(crate::kit::PROPOSALS_SETTLE).await {
        tracing::warn!("a proposal was still on its way when the client left");
    }
    let ended = match ended {
        Some(ended) => ended,
        None => waiting.await,
    };
    // Again once rmcp is done: a call its last lines asked for may have reached the handler
    // only after the first pass (found by review: it was proposed and held after the client
    // was taken as gone, and left pending when the process ended).
    hub.client_gone(&session).await;
    hub.tasks_gone().await;
    if !hub.settle_proposals(crate::kit::PROPOSALS_SETTLE).await {
        tracing::warn!("a proposal was still on its way when the hub ended");
    }
    // Its upstreams ended gracefully (EOF, then SIGTERM, then SIGKILL), not by the process's end.
    hub.close_upstreams(super::child::CLOSE_WITHIN).await;
    ended?;
    Ok(())
}

/// The longest client line the stdio hub reads (16 MiB, as the stdio proxy's); a longer one
/// is skipped to its end, never held whole, and refused under no id.
const MAX_CLIENT_LINE: usize = 16 << 20;

/// Stdin and stdout for rmcp, with every client line read within [`MAX_CLIENT_LINE`],
/// weighed ([`weigh_client`]) and read strictly ([`assent_core::json::check`]) first: a line
/// over the bound, one too heavy to parse, or one with a duplicate key or a number a double
/// would change never reaches rmcp and is answered with a JSON-RPC error
/// ([`crate::refusal`]). Found by review: lines were read whole (one with no newline grew
/// without bound) and rmcp parsed each, so one line of 16 MiB of `[0,0,…]` made the hub build
/// half a gigabyte. Lines go out whole, so an error never interleaves with rmcp's own
/// messages. `closed` is told when stdin ends (or a line is not UTF-8), before rmcp is.
fn strict_stdio(
    closed: tokio::sync::oneshot::Sender<()>,
) -> (tokio::io::DuplexStream, tokio::io::DuplexStream) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (rmcp_in, mut feed) = tokio::io::duplex(1 << 16);
    let (rmcp_out, drain) = tokio::io::duplex(1 << 16);
    let (refused, mut refusals) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let mut stdin = BufReader::new(tokio::io::stdin());
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let read = crate::relay::upstream::bounded_line(&mut stdin, &mut buf, MAX_CLIENT_LINE);
            let line = match read.await {
                Ok(Some(true)) => buf.as_slice(),
                Ok(Some(false)) => {
                    let _ = refused.send(too_long(MAX_CLIENT_LINE));
                    continue;
                }
                Ok(None) | Err(_) => break,
            };
            let Ok(text) = std::str::from_utf8(line) else {
                break;
            };
            if text.trim().is_empty() {
                continue;
            }
            let pass = match weigh_client(line) {
                Some(Heavy::Refuse(error, _)) => {
                    let _ = refused.send(error);
                    continue;
                }
                Some(Heavy::Instead(error)) => error.into_bytes(),
                Some(Heavy::Drop(_)) => continue,
                None => match assent_core::json::check(line) {
                    Ok(()) => line.to_vec(),
                    Err(e) => {
                        let _ = refused.send(crate::kit::refusal(text, &e));
                        continue;
                    }
                },
            };
            let sent = feed.write_all(&pass).await;
            if sent.is_err() || feed.write_all(b"\n").await.is_err() {
                break;
            }
        }
        let _ = closed.send(());
    });
    tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        let mut lines = BufReader::new(drain).lines();
        loop {
            let line = tokio::select! {
                l = lines.next_line() => match l { Ok(Some(l)) => l, _ => break },
                Some(e) = refusals.recv() => e,
            };
            if out.write_all(line.as_bytes()).await.is_err()
                || out.write_all(b"\n").await.is_err()
                || out.flush().await.is_err()
            {
                break;
            }
        }
    });
    (rmcp_in, rmcp_out)
}

/// The error that answers a client line over `max` bytes (skipped unread: no id to answer
/// under), as the stdio proxy's.
fn too_long(max: usize) -> String {
    tracing::warn!(max, "refused a client line over the limit");
    let why = format!("assent: a line over {} MiB was refused", max >> 20);
    serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": why}})
        .to_string()
}

/// What becomes of a client message too heavy to parse ([`weigh_client`]), never given to
/// rmcp as it is.
#[derive(Debug, PartialEq)]
enum Heavy {
    /// A request (or a message whose id cannot be read): the JSON-RPC error line that answers
    /// it, and whether it names the request's own id (not `null`).
    Refuse(String, bool),
    /// An answer to one of the hub's own requests: a JSON-RPC error under its id, given to
    /// rmcp in its place (so that nothing waits for it).
    Instead(String),
    /// A notification, or an answer under an id that cannot be read: dropped (with the error
    /// that says why, for a transport that must answer something).
    Drop(String),
}

/// `None` when client message `text` weighs at most [`MAX_LINE_WEIGHT`] parsed
/// ([`raw_weight`]); else what becomes of it, read for its `id` and `method` only
/// ([`envelope`]), never parsed whole: a request is refused `-32600` naming the bound under
/// its id (`null` when it cannot be read), an answer replaced by such an error under its id,
/// a notification dropped. Found by review: rmcp parsed every client message first, and
/// `[0,0,…]` parsed holds some 33 times its text.
fn weigh_client(text: &[u8]) -> Option<Heavy> {
    let weight = raw_weight(text);
    if weight <= MAX_LINE_WEIGHT {
        return None;
    }
    tracing::warn!(weight, "refused a client message too heavy to parse");
    let why = too_heavy(weight);
    let error = |id: &serde_json::Value| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": why}})
            .to_string()
    };
    Some(match envelope(text) {
        Some(Envelope {
            id: Id::Is(id),
            method: true,
        }) => Heavy::Refuse(error(&id), true),
        Some(Envelope {
            id: Id::Is(id),
            method: false,
        }) => Heavy::Instead(error(&id)),
        Some(Envelope {
            id: Id::Absent,
            method: true,
        })
        | Some(Envelope { method: false, .. }) => Heavy::Drop(error(&serde_json::Value::Null)),
        Some(Envelope { id: Id::Odd, .. }) | None => {
            Heavy::Refuse(error(&serde_json::Value::Null), false)
        }
    })
}

/// The sessions of the hub's streamable HTTP service ([`http_service`]), kept by rmcp's local
/// session manager; a clone is a handle to the same sessions.
#[derive(Clone, Default)]
pub struct HttpSessions(
    Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
);

impl HttpSessions {
    /// Closes session `id` (its worker, channels and handler), in the background; an unknown
    /// or closed one is left as it is. Needs a Tokio runtime.
    pub fn close(&self, id: &str) {
        use rmcp::transport::streamable_http_server::session::SessionManager;
        let (manager, id): (_, Arc<str>) = (self.0.clone(), Arc::from(id));
        tokio::spawn(async move {
            let _ = manager.close_session(&id).await;
        });
    }
}

/// The streamable HTTP service for `/mcp` (mount with `Router::nest_service`), its sessions
/// kept by `sessions` (the caller keeps a handle to close them). Only requests whose `Host`
/// is in `allowed_hosts` (loopback names when empty) are served, and, when `allowed_origins`
/// is not empty, only browser requests from those origins (DNS-rebinding protection). A
/// session whose client is gone has its calls stopped ([`HubHttpService`]): after
/// `gone_after` with no stream open (`None`: [`GONE_AFTER`], 30 s; clamped to
/// [`GONE_AFTER_BOUNDS`]).
pub fn http_service(
    hub: Arc<Hub>,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    sessions: HttpSessions,
    gone_after: Option<std::time::Duration>,
) -> HubHttpService {
    let (lo, hi) = GONE_AFTER_BOUNDS;
    let gone_after = gone_after.unwrap_or(GONE_AFTER).clamp(
        std::time::Duration::from_secs(lo),
        std::time::Duration::from_secs(hi),
    );
    let gone_hub = hub.clone();
    let streams = Arc::new(Streams {
        gone: Box::new(move |session| {
            let hub = gone_hub.clone();
            Box::pin(async move { hub.client_gone(&format!("mcp-{session}")).await })
        }),
        open: std::sync::Mutex::default(),
        gone_after,
    });
    HubHttpService {
        inner: rmcp_service(hub, allowed_hosts, allowed_origins, sessions),
        streams,
    }
}

/// rmcp's streamable HTTP service of [`http_service`].
fn rmcp_service(
    hub: Arc<Hub>,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    sessions: HttpSessions,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    HubHandler,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    // rmcp reads a body within its own bound (4 MiB by default), which refused calls a
    // larger configured `max_arguments_bytes` lets through the edge (found by review). The
    // body reaches rmcp read whole and weighed ([`weighed`]) within [`MAX_BODY_BYTES`], so
    // rmcp's bound is that: never the smaller one.
    let mut config =
        StreamableHttpServerConfig::default().with_max_request_body_bytes(MAX_BODY_BYTES);
    if !allowed_hosts.is_empty() {
        config = config.with_allowed_hosts(allowed_hosts);
    }
    if !allowed_origins.is_empty() {
        config = config.with_allowed_origins(allowed_origins);
    }
    StreamableHttpService::new(
        move || Ok(HubHandler::http(hub.clone())),
        sessions.0,
        config,
    )
}

/// How long a client may have no stream open to its MCP session (no response it still reads,
/// no standalone stream) before the hub takes it as gone: time to resume a dropped stream, as
/// the transport allows (a disconnection alone is no cancellation). The default; the
/// gateway's `mcp_client_gone_seconds` sets another (a laptop that sleeps drops its streams
/// for longer than this, and its held calls are withdrawn).
pub const GONE_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// The bounds of the time a client may have no stream open ([`http_service`]'s
/// `gone_after`), in seconds: 5 s … 24 h.
pub const GONE_AFTER_BOUNDS: (u64, u64) = (5, 24 * 3600);

/// The hub's streamable HTTP service ([`http_service`]): rmcp's, with each MCP session's open
/// response streams counted. When a session has had none for `gone_after` (30 s unless
/// configured, [`GONE_AFTER`]), its client is
/// gone without a word — its process ended, its connections dropped, and it never resumed —
/// and its calls under way are stopped as if it had cancelled them ([`Hub::client_gone`];
/// found by review: a held call waited until the session idled out, for ever while its
/// progress notifications kept the session busy).
#[derive(Clone)]
pub struct HubHttpService {
    inner: rmcp::transport::streamable_http_server::StreamableHttpService<
        HubHandler,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    >,
    streams: Arc<Streams>,
}

/// What [`Streams`] does with a session whose client is gone ([`Hub::client_gone`]).
type Gone = Box<
    dyn Fn(String) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync,
>;

/// The open response streams of each MCP session (`Mcp-Session-Id`) ([`Idle`]), and what to
/// do when a session has had none for `gone_after`.
struct Streams {
    gone: Gone,
    open: std::sync::Mutex<std::collections::HashMap<String, Idle>>,
    /// How long a session may have no stream open before its client is taken as gone.
    gone_after: std::time::Duration,
}

/// One session's open streams: how many, since when it has had none, and whether its one
/// timer ([`watch_idle`]) is running.
struct Idle {
    open: usize,
    since: tokio::time::Instant,
    timer: bool,
}

impl Streams {
    /// One more stream of `session` is open until the returned mark is dropped.
    fn open(self: &Arc<Self>, session: String) -> OpenStream {
        let mut all = self.open.lock().unwrap_or_else(|p| p.into_inner());
        all.entry(session.clone())
            .or_insert(Idle {
                open: 0,
                since: tokio::time::Instant::now(),
                timer: false,
            })
            .open += 1;
        OpenStream {
            streams: self.clone(),
            session,
        }
    }
}

/// One open response stream of a session ([`Streams::open`]).
struct OpenStream {
    streams: Arc<Streams>,
    session: String,
}

impl Drop for OpenStream {
    /// The session's last open stream closing starts its one timer ([`watch_idle`]) unless it
    /// runs. Attack (found by review): each closing started a timer of its own, sleeping the
    /// whole `gone_after`, so an agent sending cheap requests on one session (at its
    /// `rate_limits`, 1,000/s by default) kept `gone_after` × its rate sleeping tasks: 86
    /// million a day at the longest `mcp_client_gone_seconds`.
    fn drop(&mut self) {
        let mut all = self.streams.open.lock().unwrap_or_else(|p| p.into_inner());
        let Some(idle) = all.get_mut(&self.session) else {
            return;
        };
        idle.open = idle.open.saturating_sub(1);
        if idle.open > 0 {
            return;
        }
        idle.since = tokio::time::Instant::now();
        if idle.timer {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        idle.timer = true;
        drop(all);
        rt.spawn(watch_idle(self.streams.clone(), self.session.clone()));
    }
}

/// A session's one timer: once it has had no stream open for `gone_after` its client is gone
/// (taken off `streams`, and told to [`Streams::gone`]); a stream open when it looks ends it
/// (the next closing starts another), a closing since it slept makes it sleep the rest.
async fn watch_idle(streams: Arc<Streams>, session: String) {
    let mut wait = streams.gone_after;
    loop {
        tokio::time::sleep(wait).await;
        {
            let mut all = streams.open.lock().unwrap_or_else(|p| p.into_inner());
            let Some(idle) = all.get_mut(&session) else {
                return;
            };
            if idle.open > 0 {
                idle.timer = false;
                return;
            }
            let quiet = idle.since.elapsed();
            if quiet < streams.gone_after {
                wait = streams.gone_after - quiet;
                continue;
            }
            all.remove(&session);
        }
        return (streams.gone)(session).await;
    }
}

/// A response body of [`HubHttpService`]: rmcp's, holding its session's stream mark until it
/// is dropped (read to its end, or its connection gone).
pub struct CountedBody {
    body: http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>,
    _open: Option<OpenStream>,
}

impl http_body::Body for CountedBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl<B> tower::Service<http::Request<B>> for HubHttpService
where
    B: http_body::Body + Send + 'static,
    B::Error: std::fmt::Display,
    B::Data: Send + 'static,
{
    type Response = http::Response<CountedBody>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tower::Service::<http::Request<B>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let (mut inner, streams) = (self.inner.clone(), self.streams.clone());
        Box::pin(async move {
            let asked = session_of(req.headers());
            let req = match weighed(req).await {
                Ok(req) => req,
                Err(refused) => return Ok(refused.map(|body| CountedBody { body, _open: None })),
            };
            let resp = tower::Service::call(&mut inner, req).await?;
            // An `initialize` names its new session in the answer.
            let session = asked.or_else(|| session_of(resp.headers()));
            let open = session.map(|s| streams.open(s));
            Ok(resp.map(|body| CountedBody { body, _open: open }))
        })
    }
}

/// The longest `/mcp` request body the hub reads: 64 MiB and 64 KiB, the most the gateway's
/// edge ever lets through (its body bound is `max_arguments_bytes`, at most 64 MiB, plus 64 KiB
/// for the rest of a request), so that the edge's bound, set from the configuration, is the
/// one that counts; the hub's own holds where the service is mounted without the edge. A
/// longer body is answered `413` with a JSON-RPC error naming this bound (its body reader), and
/// rmcp, given only bodies within it, is told the same bound: its own
/// default (4 MiB) refused calls a larger `max_arguments_bytes` allowed, with a bare `413`.
pub const MAX_BODY_BYTES: usize = MAX_LINE_WEIGHT + (64 << 10);

/// A response body of the hub's own (not rmcp's).
type Answer =
    http::Response<http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>>;

/// `req` with its body read whole (the gateway's edge has read it already, within its bound
/// of `max_arguments_bytes` and 64 KiB; here within [`MAX_BODY_BYTES`]) and, for a `POST`, weighed before rmcp parses it
/// ([`weigh_client`]): found by review, rmcp parsed every body first, and a body of
/// `[0,0,…]` parsed holds some 33 times its text, in the gateway process that serves every
/// agent. A request too heavy is answered at once, `200` with a JSON-RPC error under its id
/// (`-32600`, naming the bound): the answer MCP clients take for that request's own (the
/// streamable HTTP transport answers a request with a JSON-RPC response; a 4xx is a transport
/// failure most clients report without the id it concerns). One whose id cannot be read, a
/// notification or an answer under no readable id are answered `413` with a JSON-RPC error
/// under `null` (a message the server does not accept is answered with an HTTP error, the
/// transport says); an answer to the hub's own request goes to rmcp as a JSON-RPC error
/// under its id in its place. `Err`: the answer, rmcp never called; a body that cannot be
/// read is a `400` naming why.
async fn weighed<B>(
    req: http::Request<B>,
) -> Result<http::Request<http_body_util::Full<bytes::Bytes>>, Answer>
where
    B: http_body::Body,
    B::Error: std::fmt::Display,
{
    let (mut parts, body) = req.into_parts();
    let bytes = match read_within(body, MAX_BODY_BYTES).await {
        Ok(Some(all)) => all,
        Ok(None) => {
            let why =
                format!("assent: a request body over {MAX_BODY_BYTES} bytes was refused unread");
            let error = serde_json::json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32600, "message": why}});
            return Err(json_answer(
                http::StatusCode::PAYLOAD_TOO_LARGE,
                error.to_string(),
            ));
        }
        Err(e) => {
            let why = serde_json::json!({"error": {"code": "BAD_REQUEST",
                "message": format!("the request body could not be read: {e}")}});
            return Err(json_answer(http::StatusCode::BAD_REQUEST, why.to_string()));
        }
    };
    let bytes = match (parts.method == http::Method::POST)
        .then(|| weigh_client(&bytes))
        .flatten()
    {
        None => bytes,
        Some(Heavy::Instead(error)) => {
            parts
                .headers
                .insert(http::header::CONTENT_LENGTH, error.len().into());
            bytes::Bytes::from(error)
        }
        Some(Heavy::Refuse(error, true)) => return Err(json_answer(http::StatusCode::OK, error)),
        Some(Heavy::Refuse(error, false) | Heavy::Drop(error)) => {
            return Err(json_answer(http::StatusCode::PAYLOAD_TOO_LARGE, error));
        }
    };
    Ok(http::Request::from_parts(
        parts,
        http_body_util::Full::new(bytes),
    ))
}

/// `body` read whole, frame by frame; `Ok(None)` once it passes `max` bytes (the rest
/// unread). Errors: the body's own, as text.
async fn read_within<B>(body: B, max: usize) -> Result<Option<bytes::Bytes>, String>
where
    B: http_body::Body,
    B::Error: std::fmt::Display,
{
    use bytes::Buf;
    use http_body_util::BodyExt;
    let mut body = std::pin::pin!(body);
    let (mut parts, mut len) = (Vec::new(), 0usize);
    while let Some(frame) = body.frame().await {
        let Ok(mut data) = frame.map_err(|e| e.to_string())?.into_data() else {
            continue;
        };
        let n = data.remaining();
        if n > max.saturating_sub(len) {
            return Ok(None);
        }
        len += n;
        // No copy for the one frame of a buffered body (the edge's).
        parts.push(data.copy_to_bytes(n));
    }
    Ok(Some(match parts.len() {
        1 => parts.remove(0),
        _ => parts.concat().into(),
    }))
}

/// A response of `status` with JSON `body`.
fn json_answer(status: http::StatusCode, body: String) -> Answer {
    use http_body_util::BodyExt;
    let mut resp = http::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The `Mcp-Session-Id` of `headers`, if any.
fn session_of(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get("mcp-session-id")
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Streams whose gone sessions are pushed on the returned list.
    fn streams(gone_after: Duration) -> (Arc<Streams>, Arc<std::sync::Mutex<Vec<String>>>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let list = seen.clone();
        let streams = Arc::new(Streams {
            gone: Box::new(move |s| {
                let list = list.clone();
                Box::pin(async move { list.lock().unwrap().push(s) })
            }),
            open: std::sync::Mutex::default(),
            gone_after,
        });
        (streams, seen)
    }

    /// Attack (found by review): every response stream of a session closing started a timer
    /// sleeping `gone_after`, so cheap requests in a loop on one session piled up sleeping
    /// tasks at the agent's request rate. Now a session has one timer, and it still takes the
    /// client as gone once, `gone_after` after its last stream closed, not while one is open.
    #[tokio::test(start_paused = true)]
    async fn a_session_closing_streams_in_a_loop_keeps_one_gone_timer() {
        let metrics = tokio::runtime::Handle::current().metrics();
        let (streams, gone) = streams(Duration::from_secs(300));
        let before = metrics.num_alive_tasks();
        for _ in 0..1_000 {
            drop(streams.open("s1".into()));
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        assert_eq!(
            metrics.num_alive_tasks(),
            before + 1,
            "one timer for the session"
        );
        // Its last stream closed 10 ms ago: not gone 299 s later, gone at 300 s.
        tokio::time::advance(Duration::from_secs(299)).await;
        tokio::task::yield_now().await;
        assert!(gone.lock().unwrap().is_empty());
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*gone.lock().unwrap(), ["s1"]);
        assert_eq!(metrics.num_alive_tasks(), before, "its timer ended");
        // A stream open for longer than `gone_after` keeps the client: gone only once it closed.
        let open = streams.open("s2".into());
        drop(streams.open("s2".into()));
        tokio::time::advance(Duration::from_secs(900)).await;
        tokio::task::yield_now().await;
        assert_eq!(gone.lock().unwrap().len(), 1);
        drop(open);
        tokio::task::yield_now().await; // its timer starts sleeping now
        tokio::time::advance(Duration::from_secs(301)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*gone.lock().unwrap(), ["s1", "s2"]);
    }
}
