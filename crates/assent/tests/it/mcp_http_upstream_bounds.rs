//! What the MCP hub reads of a streamable HTTP upstream's answer: at most 1 MiB of a JSON body
//! (which rmcp's parsing cannot take much past 64 MiB), 64 KiB of one answering the hub's own
//! answer, and 16 MiB of one SSE event (rmcp's bound), and no SSE event that would parse past
//! 64 MiB (the bound on a stdio upstream's line); a call whose answer passes either is
//! answered with an error naming the bound, and the upstream, like every other, keeps
//! serving. A request of the upstream's under an id over 1 KiB on an SSE stream is dropped
//! unanswered, as a stdio upstream's is.

use crate::hub_kit::{Notes, memory, notes_upstream};
use crate::{free_port, serve, write_agent_config};
use axum::response::IntoResponse;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

const KEY: &str = "http-upstream-bounds-agent-key-0123456789";

/// A 64 KiB chunk of `a`s, what the flooding upstream sends without end.
static CHUNK: [u8; 1 << 16] = [b'a'; 1 << 16];

/// How many [`CHUNK`]s a flood sends at most: 1 GiB.
const FLOOD_CHUNKS: usize = 1 << 14;

/// The ids of the answers (POSTs with no `method`) [`flooding_upstream`] was sent, as JSON.
static ANSWERED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// The id of the short `ping` [`flooding_upstream`] sends on `ping_sse`'s stream.
const SHORT_PING: &str = "short-ping";

/// `notes` served as [`notes_upstream`] does, but a `tools/call` of `read` with `text` set to
/// one of [`ATTACKS`] answered by this upstream itself: `flood`, a JSON body of a text result
/// that never ends (1 GiB); `flood_sse`, the same as one SSE event; `heavy_sse`, one SSE event
/// of 3 MiB of zeros (some 100 MiB parsed); `ping_sse`, an SSE stream of two `ping`s (under a
/// 2 MiB id and under [`SHORT_PING`]) then the call's answer; `json_heavy`, a JSON body of
/// 15 MiB of zeros (some 1 GiB parsed), `json_heavy_chunked` the same streamed (no
/// Content-Length), `json_500_heavy` the same as an HTTP 500's body, `json_zeros_2mib` a
/// streamed JSON body of zeros just under 2 MiB; `json_ok`, a JSON body of
/// a text result of 1 MiB less 1 KiB; `json_zeros`, a JSON body of zeros just under 1 MiB;
/// `heavy_answers_sse`, an SSE stream of [`HEAVY_PINGS`] `ping`s, each sent once the answer to
/// the one before was POSTed, then the call's answer, the POST of each answer but the last
/// answered with a streamed JSON body of zeros just under 1 MiB; `late_ping_sse`, an SSE
/// stream of a `ping` under `"late-ping"` then the call's answer;
/// `json_ping`, a JSON body of a `ping` request; `json_other_id`, a JSON body of a text result
/// under another id than the call's; `dup_sse`, an SSE stream of [`DUPLICATES`] `ping`s all
/// under the id `"dup"`, a `ping` under `"probe"`, then the call's answer — the POST of an
/// answer under `"dup"` held until one under `"probe"` comes (or 10 s pass). Answers sent to it are recorded
/// ([`ANSWERED`]) and taken (202). Everything else goes to `notes`. Its port.
fn flooding_upstream(rt: &tokio::runtime::Runtime, notes: Notes) -> u16 {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    rt.spawn(async move {
        let svc = StreamableHttpService::new(
            move || Ok(notes.clone()),
            std::sync::Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let router = axum::Router::new()
            .nest_service("/mcp", svc)
            .layer(axum::middleware::from_fn(flood_or_pass));
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        axum::serve(listener, router).await.unwrap();
    });
    port
}

/// [`flooding_upstream`]'s own answers, or the request passed on.
async fn flood_or_pass(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::body::{Body, Bytes};
    use futures::StreamExt;
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20).await.unwrap();
    let m: Value = serde_json::from_slice(&body).unwrap_or_default();
    if m.get("method").is_none() && m.get("id").is_some() {
        let id = m["id"].to_string();
        ANSWERED.lock().unwrap().push(id.clone());
        if let Some(k) = id
            .strip_prefix("\"heavy-")
            .and_then(|k| k.trim_end_matches('"').parse::<usize>().ok())
        {
            HEAVY_ANSWERED.send_modify(|n| *n = (*n).max(k + 1));
            if k + 1 < HEAVY_PINGS {
                let body = futures::stream::iter(zeros_body("null", (1 << 20) - 256).into_bytes())
                    .chunks(1 << 16)
                    .map(|c| Ok::<_, std::convert::Infallible>(Bytes::from(c)));
                let body = Body::from_stream(body);
                return ([("content-type", "application/json")], body).into_response();
            }
        }
        match id.as_str() {
            r#""probe""# => PROBED.notify_one(),
            r#""dup""# => {
                let probed = PROBED.notified();
                let _ = tokio::time::timeout(std::time::Duration::from_secs(10), probed).await;
            }
            _ => {}
        }
        return axum::http::StatusCode::ACCEPTED.into_response();
    }
    let attack = m["params"]["arguments"]["text"].as_str().unwrap_or("");
    if m["method"] != "tools/call" || !ATTACKS.contains(&attack) {
        return next
            .run(axum::extract::Request::from_parts(parts, Body::from(body)))
            .await;
    }
    let id = &m["id"];
    let head =
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#);
    if let Some(body) = json_answer(attack, id, &head) {
        return ([("content-type", "application/json")], body).into_response();
    }
    if let Some(response) = json_streamed(attack, id) {
        return response;
    }
    if attack == "heavy_answers_sse" {
        return heavy_answers_sse(head);
    }
    if attack == "late_ping_sse" {
        let body = format!(
            "data: {{\"jsonrpc\":\"2.0\",\"id\":\"late-ping\",\"method\":\"ping\"}}\n\ndata: {head}read late_ping_sse: done\"}}]}}}}\n\n"
        );
        return ([("content-type", "text/event-stream")], Body::from(body)).into_response();
    }
    if attack == "dup_sse" {
        let ping = |id: &str| format!(r#"data: {{"jsonrpc":"2.0","id":"{id}","method":"ping"}}"#);
        let mut body = format!("{}\n\n", ping("dup")).repeat(DUPLICATES);
        body += &format!(
            "{}\n\ndata: {head}read dup_sse: done\"}}]}}}}\n\n",
            ping("probe")
        );
        return ([("content-type", "text/event-stream")], Body::from(body)).into_response();
    }
    if attack == "ping_sse" {
        let long = "p".repeat(2 << 20);
        let ping = |id: &str| format!(r#"data: {{"jsonrpc":"2.0","id":"{id}","method":"ping"}}"#);
        let answer = format!(r#"data: {head}read ping_sse: done"}}]}}}}"#);
        let body = format!("{}\n\n{}\n\n{answer}\n\n", ping(&long), ping(SHORT_PING));
        return ([("content-type", "text/event-stream")], Body::from(body)).into_response();
    }
    let (kind, first) = match attack {
        "flood" => ("application/json", head),
        "flood_sse" => ("text/event-stream", format!("data: {head}")),
        _ => {
            let zeros = "0,".repeat(3 << 19);
            let heavy = format!(
                r#"data: {{"jsonrpc":"2.0","id":{id},"result":{{"content":[],"structuredContent":{{"z":[{zeros}0]}}}}}}"#
            );
            let body = Body::from(format!("{heavy}\n\n"));
            return ([("content-type", "text/event-stream")], body).into_response();
        }
    };
    let rest = futures::stream::iter(0..FLOOD_CHUNKS).map(|_| Bytes::from_static(&CHUNK));
    let stream = futures::stream::once(async move { Bytes::from(first) })
        .chain(rest)
        .map(Ok::<_, std::convert::Infallible>);
    ([("content-type", kind)], Body::from_stream(stream)).into_response()
}

/// What [`flooding_upstream`] answers a `tools/call` of `read` with `text`.
const ATTACKS: [&str; 15] = [
    "flood",
    "flood_sse",
    "heavy_sse",
    "ping_sse",
    "json_heavy",
    "json_heavy_chunked",
    "json_500_heavy",
    "json_zeros_2mib",
    "json_ok",
    "json_zeros",
    "json_ping",
    "json_other_id",
    "dup_sse",
    "heavy_answers_sse",
    "late_ping_sse",
];

/// How many `ping`s `heavy_answers_sse` sends: 8.
const HEAVY_PINGS: usize = 8;

/// How many of `heavy_answers_sse`'s `ping`s have had their answer's POST begun (the highest
/// `k` + 1 of an answer under `"heavy-k"`).
static HEAVY_ANSWERED: std::sync::LazyLock<tokio::sync::watch::Sender<usize>> =
    std::sync::LazyLock::new(|| tokio::sync::watch::Sender::new(0));

/// A JSON-RPC message under `id` (JSON text) whose text is `len` bytes, nearly all of them
/// `0,` of an array: a result's `structuredContent` when `id` is not `null`, else an error's
/// `data`.
fn zeros_body(id: &str, len: usize) -> String {
    let (head, tail) = if id == "null" {
        (
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"zeros","data":["#
                .to_string(),
            "0]}}",
        )
    } else {
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"zeros"}}],"structuredContent":{{"z":["#
            ),
            "0]}}}",
        )
    };
    let zeros = "0,".repeat((len - head.len() - tail.len()) / 2);
    format!("{head}{zeros}{tail}")
}

/// `json_heavy_chunked`'s, `json_zeros_2mib`'s and `json_500_heavy`'s answers to the call
/// under `id`: 15 MiB of zeros as a streamed JSON body (no Content-Length), the same of just
/// under 2 MiB, or 15 MiB as an HTTP 500's body; `None` for any other `attack`.
fn json_streamed(attack: &str, id: &Value) -> Option<axum::response::Response> {
    use axum::body::{Body, Bytes};
    use futures::StreamExt;
    let len = if attack == "json_zeros_2mib" {
        (2 << 20) - 64
    } else {
        15 << 20
    };
    let body = zeros_body(&id.to_string(), len).into_bytes();
    let json = [("content-type", "application/json")];
    match attack {
        "json_heavy_chunked" | "json_zeros_2mib" => {
            let chunks = futures::stream::iter(body)
                .chunks(1 << 16)
                .map(|c| Ok::<_, std::convert::Infallible>(Bytes::from(c)));
            Some((json, Body::from_stream(chunks)).into_response())
        }
        "json_500_heavy" => {
            let status = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
            Some((status, json, body).into_response())
        }
        _ => None,
    }
}

/// `heavy_answers_sse`'s SSE stream, `head` the head of the call's text result: `ping`s under
/// `"heavy-0"`… each sent once the answer to the one before has reached [`flood_or_pass`]
/// (or 10 s passed), then the call's answer. The hub POSTs its answers one at a time (rmcp's
/// queue of answers), so when the last `ping`'s answer arrives every body before it was read.
fn heavy_answers_sse(head: String) -> axum::response::Response {
    use axum::body::{Body, Bytes};
    use futures::StreamExt;
    let events = futures::stream::iter(0..=HEAVY_PINGS).then(move |k| {
        let head = head.clone();
        async move {
            let mut answered = HEAVY_ANSWERED.subscribe();
            let waited = answered.wait_for(|n| *n >= k);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), waited).await;
            let event = if k < HEAVY_PINGS {
                format!(
                    "data: {{\"jsonrpc\":\"2.0\",\"id\":\"heavy-{k}\",\"method\":\"ping\"}}\n\n"
                )
            } else {
                format!("data: {head}read heavy_answers_sse: done\"}}]}}}}\n\n")
            };
            Ok::<_, std::convert::Infallible>(Bytes::from(event))
        }
    });
    let body = Body::from_stream(events);
    ([("content-type", "text/event-stream")], body).into_response()
}

/// How many `ping`s under one id `dup_sse` sends: 64, as many requests of an upstream's as
/// the hub lets rmcp hold at once.
const DUPLICATES: usize = 64;

/// Told when an answer under `"probe"` is POSTed to [`flooding_upstream`].
static PROBED: std::sync::LazyLock<tokio::sync::Notify> =
    std::sync::LazyLock::new(tokio::sync::Notify::new);

/// The JSON body [`flood_or_pass`] answers `attack` with, the call's id `id` and the head of
/// its text result `head` given; `None` for an attack not answered so.
fn json_answer(attack: &str, id: &Value, head: &str) -> Option<String> {
    match attack {
        "json_heavy" => {
            let zeros = "0,".repeat(15 << 19);
            Some(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[],"structuredContent":{{"z":[{zeros}0]}}}}}}"#
            ))
        }
        "json_ok" => Some(format!(r#"{head}{}"}}]}}}}"#, "a".repeat((1 << 20) - 1024))),
        "json_zeros" => Some(zeros_body(&id.to_string(), (1 << 20) - 64)),
        "json_ping" => Some(r#"{"jsonrpc":"2.0","id":"json-ping","method":"ping"}"#.into()),
        "json_other_id" => {
            let other = head.replacen(&format!(r#""id":{id}"#), r#""id":"not-the-call""#, 1);
            Some(format!(r#"{other}read json_other_id: done"}}]}}}}"#))
        }
        _ => None,
    }
}

/// `read` with `text` on upstream `alias` through a fresh client of the hub at `url`, within
/// A gateway whose agent `helper` (key [`KEY`]) may call `read` on one streamable HTTP
/// upstream, `web`, a [`flooding_upstream`]; its data directory (kept while the gateway runs).
fn web_gateway(rt: &tokio::runtime::Runtime) -> (tempfile::TempDir, crate::Server) {
    let web_port = flooding_upstream(rt, Notes::default());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let agent = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: web\n      allowed_tools: [read]\n";
    let upstreams =
        format!("mcp_upstreams:\n  web: {{url: \"http://127.0.0.1:{web_port}/mcp\"}}\n");
    let cfg = write_agent_config(dir.path(), port, (agent, KEY), &upstreams);
    let server = serve(&cfg, port);
    (dir, server)
}

/// 60 s: the result as JSON, or the error's words.
fn read(rt: &tokio::runtime::Runtime, url: &str, alias: &str, text: &str) -> String {
    rt.block_on(async {
        let client = crate::hub_kit::hub_client(url, KEY).await;
        let call = CallToolRequestParams::new(format!("{alias}__read"))
            .with_arguments(json!({"text": text}).as_object().unwrap().clone());
        let timeout = std::time::Duration::from_secs(60);
        let said = tokio::time::timeout(timeout, client.peer().call_tool(call))
            .await
            .expect("the hub answers within 60 s");
        let _ = client.cancel().await;
        match said {
            Ok(r) => serde_json::to_value(r).unwrap().to_string(),
            Err(e) => e.to_string(),
        }
    })
}

/// Attack (memory): a streamable HTTP upstream answers a `tools/call` with a body that does not
/// end — 1 GiB of one JSON text, or of one SSE event — or with one SSE event of 3 MiB of
/// zeros, which parsed would take some 100 MiB. The hub reads at most 1 MiB of the first,
/// 16 MiB of the second, and refuses the third unparsed (its weight past 64 MiB): each call is answered with an
/// error naming the bound (found by review: the first two said only that the connection
/// failed, or that the stream closed before its answer, and the third was parsed whole), the
/// gateway's memory stays far below a gigabyte, and the upstream and another one serve the
/// next call.
#[test]
fn an_http_upstream_flooding_a_calls_answer_is_cut_off_at_16_mib() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let web_port = flooding_upstream(&rt, Notes::default());
    let (notes_port, _) = notes_upstream(&rt, Notes::default());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let agent = "metadata: {id: helper}\naction_space:\n  mcp_servers:\n    - alias: web\n      allowed_tools: [read]\n    - alias: notes\n      allowed_tools: [read]\n";
    let upstreams = format!(
        "mcp_upstreams:\n  web: {{url: \"http://127.0.0.1:{web_port}/mcp\"}}\n  notes: {{url: \"http://127.0.0.1:{notes_port}/mcp\"}}\n"
    );
    let cfg = write_agent_config(dir.path(), port, (agent, KEY), &upstreams);
    let server = serve(&cfg, port);
    let pid = server.child.id();
    assert!(read(&rt, &server.url, "web", "warm").contains("read warm: done"));
    let (before, _) = memory(pid);

    for (attack, bound) in [
        ("flood", "over 1048576 bytes (1 MiB)"),
        ("flood_sse", "over 16777216 bytes (16 MiB)"),
    ] {
        let said = read(&rt, &server.url, "web", attack);
        assert!(
            said.contains(bound) && said.contains("refused"),
            "{attack}: {said}"
        );
    }
    let said = read(&rt, &server.url, "web", "heavy_sse");
    assert!(
        said.contains("was refused") && said.contains("64 MiB"),
        "heavy_sse: {said}"
    );

    let (_, peak) = crate::hub_kit::gateway_memory(pid, before);
    assert!(
        peak < before + (256 << 20),
        "the gateway's memory grew by {} MiB",
        (peak - before) >> 20
    );
    assert!(read(&rt, &server.url, "web", "again").contains("read again: done"));
    assert!(read(&rt, &server.url, "notes", "other").contains("read other: done"));
}

/// Attack (memory): a streamable HTTP upstream sends, on a call's SSE answer, a `ping` under a
/// 2 MiB id (within the event's bytes and weight bounds) before the call's answer. The hub
/// drops it unanswered, as it drops a stdio upstream's request under an id over 1 KiB (found
/// by review: an SSE event under the weight went to rmcp unjudged, so pings under 14 MiB ids
/// had rmcp hold a handler and an answer repeating the id for each, until the gateway ran out
/// of memory); a `ping` under a short id is still answered, and the call gets its answer.
#[test]
fn an_http_upstreams_ping_under_a_2_mib_id_is_dropped_unanswered() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_dir, server) = web_gateway(&rt);

    let said = read(&rt, &server.url, "web", "ping_sse");
    assert!(said.contains("read ping_sse: done"), "{said}");
    let short = format!("\"{SHORT_PING}\"");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ANSWERED.lock().unwrap().contains(&short) {
        assert!(
            std::time::Instant::now() < deadline,
            "the short ping was never answered"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The long ping came first on the stream: its answer, were there one, would be under way.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let answered = ANSWERED.lock().unwrap();
    let long = answered.iter().filter(|id| id.len() > 1 << 20).count();
    assert_eq!(long, 0, "the hub answered the ping under a 2 MiB id");
}

/// Attack (memory): a streamable HTTP upstream answers a `tools/call` with a JSON body (not
/// SSE) of 15 MiB of `[0,0,…]`, within rmcp's 16 MiB bound on a JSON body, which parsed would
/// take some 1 GiB (16 such calls at once, 16 GiB): with a Content-Length, streamed without
/// one, or as an HTTP 500's body; or one of just under 2 MiB, streamed. Found by review: rmcp
/// parsed the first in its reqwest client, where no SSE event's weighing reaches; the 500's
/// was refused as a bare "HTTP 500" transport failure; and the last, within the bound of
/// 2 MiB that followed, took 128 MiB to parse. The hub reads at most 1 MiB of a JSON body (rmcp's parsing of it takes some 64
/// bytes a byte, about 64 MiB, the bound on a line): the call is answered with an error
/// naming the bound, or the status, the gateway's memory stays far below what parsing would
/// take, and a JSON answer just under 1 MiB still passes, text or zeros.
#[test]
fn an_http_upstreams_heavy_json_answer_is_refused_unparsed() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_dir, server) = web_gateway(&rt);
    let pid = server.child.id();
    assert!(read(&rt, &server.url, "web", "warm").contains("read warm: done"));
    let (before, _) = memory(pid);

    for (attack, why) in [
        ("json_heavy", "over 1048576 bytes (1 MiB)"),
        ("json_heavy_chunked", "over 1048576 bytes (1 MiB)"),
        ("json_zeros_2mib", "over 1048576 bytes (1 MiB)"),
        ("json_500_heavy", "answered HTTP 500"),
    ] {
        let said = read(&rt, &server.url, "web", attack);
        assert!(said.contains(why), "{attack}: {said:.400}");
    }
    let (_, peak) = crate::hub_kit::gateway_memory(pid, before);
    assert!(
        peak < before + (128 << 20),
        "the gateway's memory grew by {} MiB",
        (peak - before) >> 20
    );
    let said: Value = serde_json::from_str(&read(&rt, &server.url, "web", "json_ok")).unwrap();
    let text = said["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("aaaa") && text.len() == (1 << 20) - 1024,
        "{said:.400}"
    );
}

/// A streamable HTTP upstream answers a `tools/call` with a JSON body of `[0,0,…]` just under
/// the hub's 1 MiB bound: it is parsed and passed on whole, and the gateway's memory grows by
/// what parsing it takes (found by review: some 64 bytes a byte, not the 33 the bound was set
/// by, so the 2 MiB bound let one body take 128 MiB), well within 200 MiB.
#[test]
fn an_http_upstreams_json_answer_of_zeros_under_the_bound_passes_within_its_memory() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_dir, server) = web_gateway(&rt);
    let pid = server.child.id();
    assert!(read(&rt, &server.url, "web", "warm").contains("read warm: done"));
    let (before, _) = memory(pid);

    let said: Value = serde_json::from_str(&read(&rt, &server.url, "web", "json_zeros")).unwrap();
    let (_, peak) = crate::hub_kit::gateway_memory(pid, before);
    let zeros = said["structuredContent"]["z"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(zeros > 500_000, "{said:.400}");
    assert!(
        peak < before + (200 << 20),
        "the gateway's memory grew by {} MiB",
        (peak - before) >> 20
    );
}

/// Attack (memory): a streamable HTTP upstream sends [`HEAVY_PINGS`] `ping`s on a call's SSE
/// answer and answers each POST of the hub's answer with a JSON body of `[0,0,…]` just under
/// 1 MiB, streamed. Found by review: nothing in such a body is needed, yet each was read
/// within the bound of a call's answer and parsed (some 64 MiB apiece) and passed on to rmcp;
/// held and released at once, many of them took gigabytes. The hub reads at most 64 KiB of a
/// body answering a POST of no request and takes a larger one as accepted, unparsed: the
/// gateway's memory stays within 32 MiB of where it was, every `ping` is answered, and the
/// call gets its answer.
#[test]
fn an_http_upstreams_heavy_answers_to_the_hubs_answers_are_not_read() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_dir, server) = web_gateway(&rt);
    let pid = server.child.id();
    assert!(read(&rt, &server.url, "web", "warm").contains("read warm: done"));
    let (before, _) = memory(pid);

    let said = read(&rt, &server.url, "web", "heavy_answers_sse");
    assert!(said.contains("read heavy_answers_sse: done"), "{said}");
    assert_eq!(
        *HEAVY_ANSWERED.borrow(),
        HEAVY_PINGS,
        "not every ping was answered"
    );
    let (_, peak) = crate::hub_kit::gateway_memory(pid, before);
    assert!(
        peak < before + (32 << 20),
        "the gateway's memory grew by {} MiB",
        (peak - before) >> 20
    );
    assert!(read(&rt, &server.url, "web", "again").contains("read again: done"));
}

/// Attack (protocol): a streamable HTTP upstream answers a `tools/call` POST with a JSON body
/// that is no answer to it — a `ping` request, or a result under another id than the call's.
/// Found by review: rmcp took any message there (a request outside the count and judging of
/// the upstream's requests, which rmcp answered with a POST of its own), and an answer under
/// another id left the call waiting for its own. The hub answers the call at once with an
/// error saying why, never answers the ping, and the upstream serves the next call.
#[test]
fn an_http_upstreams_json_body_that_is_no_answer_to_the_call_is_refused() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_dir, server) = web_gateway(&rt);

    for (attack, why) in [
        (
            "json_ping",
            "with a request or a notification, not an answer",
        ),
        ("json_other_id", "under another id"),
    ] {
        let asked = std::time::Instant::now();
        let said = read(&rt, &server.url, "web", attack);
        assert!(said.contains(why), "{attack}: {said}");
        let took = asked.elapsed();
        assert!(
            took < std::time::Duration::from_secs(20),
            "{attack} took {took:?}"
        );
    }
    // A ping handed to rmcp later is answered: one handed to it earlier would have been by
    // then (rmcp answers a ping at once, and POSTs its answers one at a time, in turn).
    let said = read(&rt, &server.url, "web", "late_ping_sse");
    assert!(said.contains("read late_ping_sse: done"), "{said}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ANSWERED
        .lock()
        .unwrap()
        .contains(&r#""late-ping""#.to_string())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the late ping was never answered"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let answered = ANSWERED.lock().unwrap();
    assert!(
        !answered.contains(&"\"json-ping\"".to_string()),
        "{answered:?}"
    );
}

/// Attack (denial of service): a streamable HTTP upstream sends, on a call's SSE answer, 64
/// `ping`s under one id, then a `ping` under another. rmcp keeps one answer an id and never
/// answers the others, so each took one of the 64 places of the upstream's requests in rmcp's
/// hands for ever (found by review: the count went down only when an answer's POST ended;
/// after 64 such, every later request of the upstream's was dropped). The hub passes on only
/// the first under an open id, and the `ping` after them is answered while the answer under
/// the first is still being POSTed (the upstream holds that POST until then).
#[test]
fn an_http_upstreams_requests_under_one_id_take_one_place() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_dir, server) = web_gateway(&rt);

    let said = read(&rt, &server.url, "web", "dup_sse");
    assert!(said.contains("read dup_sse: done"), "{said}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ANSWERED.lock().unwrap().contains(&r#""probe""#.to_string()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the ping after 64 under one id was never answered"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let answered = ANSWERED.lock().unwrap();
    let dups = answered.iter().filter(|id| *id == r#""dup""#).count();
    assert_eq!(dups, 1, "{answered:?}");
}
