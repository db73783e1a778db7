//! A streamable HTTP upstream's answers bounded before rmcp parses them ([`WeighedClient`]):
//! the HTTP client of rmcp's streamable HTTP transport for the hub, which lets rmcp's reqwest
//! client do the work and judges what it hands back. rmcp reads at most 16 MiB of one SSE
//! event ([`MAX_ANSWER_BYTES`]) and, here, at most 1 MiB of a JSON body ([`MAX_JSON_BYTES`]),
//! 64 KiB of one answering a POST that carried no request ([`MAX_UNASKED_JSON_BYTES`]), and
//! fails past that; a request whose answer passed that bound, or came as an HTTP failure rmcp
//! gives as its status alone (429, or a 5xx whose JSON body passed the bound), is answered
//! with a JSON-RPC error naming the bound or the status (found by review: the call failed as
//! if the connection had, "the gateway's log says why", or, over SSE, as a stream closed
//! before its answer), and each SSE event is weighed ([`crate::weigh::raw_weight`]) before
//! rmcp parses it, one heavier than [`MAX_LINE_WEIGHT`] refused unparsed as the hub refuses a
//! stdio upstream's line ([`super::child`]): `[0,0,…]` parsed holds some 33 times its text,
//! so 16 MiB of it made rmcp build half a gigabyte for one event. A JSON body is parsed by
//! rmcp inside its reqwest client, before any hook this side, so it cannot be weighed first:
//! its bytes are bounded instead ([`MAX_JSON_BYTES`]: parsing takes some 64 times the text at
//! its peak); only an answer in it is passed on ([`json_answer`]: a request or notification
//! in its place is refused). An SSE event within the weight is judged as a
//! stdio upstream's line is ([`crate::weigh::upstream_line`], [`judged`]): a request under an
//! id over 1 KiB, or text that is no JSON object read whole, never reaches rmcp, and at most
//! [`MAX_REQUESTS`] of the upstream's requests are in rmcp's hands at once.
use crate::weigh::{Line, MAX_LINE_WEIGHT, answerable, raw_weight, too_heavy, upstream_line};
use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorData, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most bytes of one SSE event of an upstream's read over HTTP (its lines as sent): rmcp's
/// default, 16 MiB, as a stdio upstream's line (`rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH`).
pub(super) const MAX_ANSWER_BYTES: usize = 16 << 20;

/// The most bytes of a POST's JSON body read over HTTP (a success's answer, or a failure's
/// JSON-RPC error): 1 MiB, where rmcp's default is 16 MiB. rmcp parses the body inside its
/// reqwest client, so it cannot be weighed before; and it parses it twice over, into serde's
/// intermediate tree (its messages are untagged and flattened) and then into the message, so
/// `[0,0,…]`, the heaviest text, takes some 64 bytes a byte at the peak of its parsing (found
/// by review: 1 MiB of zeros took the gateway up by 64 MiB, 2 MiB by 128 MiB), about
/// [`MAX_LINE_WEIGHT`] here. Found by review before that: 16 MiB of `[0,0,…]` in answer to
/// one call made the gateway build some 1 GiB. Doing the POST here instead, to weigh the body
/// first, would copy rmcp's whole POST (its status, authentication and discovery handling and
/// its bounded SSE reader are private to it). An answer past it is refused ([`over_bytes`]);
/// a larger answer can come as an SSE event, which is weighed.
pub(super) const MAX_JSON_BYTES: usize = 1 << 20;

/// The most bytes of the JSON body answering a POST that carried no request (the hub's answer
/// to a request of the upstream's, or a notification): 64 KiB. Nothing in it is needed (rmcp
/// awaits no answer there), so a body past it is taken as `202 Accepted`, unparsed, with a
/// warning. Found by review: an upstream could answer each of the hub's answer POSTs with
/// [`MAX_JSON_BYTES`] of zeros, each parsed (some 64 MiB) and passed on to rmcp for nothing.
/// (rmcp POSTs the hub's answers one at a time, each given 5 s,
/// `StreamableHttpClientTransportConfig::control_request_timeout`, so they are not held
/// open side by side.)
const MAX_UNASKED_JSON_BYTES: usize = 64 << 10;

/// What rmcp's SSE reader says of an event past its bound (its error, private to it, is known
/// only by its words; rmcp is pinned to one version, and the hub's test of an SSE answer past
/// the bound, `an_http_upstream_flooding_a_calls_answer_is_cut_off_at_16_mib`, holds them).
const EVENT_TOO_LARGE: &str = "SSE event exceeded the maximum size of";

/// How many of the upstream's requests (`ping`, sampling, roots…) may be in rmcp's hands at
/// once, from the event that carried one to the end of the POST of its answer: 64, as many as
/// a stdio upstream's answers may wait (`MAX_REPLIES` in [`super::child`]). Past it, a request
/// is dropped with a warning, unanswered: answering it here would take a POST of the hub's
/// own. Found by review: rmcp runs a handler and an answer task for each request, unbounded.
/// They are kept by id ([`Requests`]).
const MAX_REQUESTS: usize = 64;

/// How long an upstream's request in rmcp's hands may wait for the POST of its answer to begin
/// before its place is given up ([`Requests::take`]): 30 s. rmcp's handlers of the
/// upstream's requests (a ping, roots, sampling and elicitation refused) answer at once, but
/// rmcp never answers one the upstream cancelled, one it cannot parse, or the second of two
/// under one id (it keeps one answer an id). Found by review: such a request was counted for
/// ever, so after 64 of them every later request of the upstream's was dropped.
const REQUEST_LIFE: Duration = Duration::from_secs(30);

/// An SSE event stream as rmcp's client reads it.
type Events = BoxStream<'static, Result<Sse, SseError>>;

/// The hub's HTTP client of a streamable HTTP upstream: rmcp's reqwest client (`http`), its
/// answers bounded as this module says. Errors are reqwest's, as rmcp's own client gives them.
#[derive(Clone)]
pub(super) struct WeighedClient {
    http: reqwest::Client,
    /// The upstream's requests passed on to rmcp and not yet answered ([`MAX_REQUESTS`]).
    requests: Arc<Requests>,
}

impl WeighedClient {
    /// rmcp's reqwest client `http`, its answers bounded as this module says.
    pub(super) fn new(http: reqwest::Client) -> Self {
        Self {
            http,
            requests: Arc::default(),
        }
    }
}

/// An upstream's requests in rmcp's hands ([`MAX_REQUESTS`]), at most 64, by id (its JSON
/// text, at most 1 KiB: [`crate::weigh::answerable_id`]): when each was taken, or `None` once
/// the POST of its answer began.
#[derive(Default)]
struct Requests(Mutex<HashMap<String, Option<Instant>>>);

/// What [`Requests::take`] made of a request.
#[derive(Debug, PartialEq)]
enum Taken {
    /// Taken: rmcp may have it.
    Yes,
    /// Another request under its id is in rmcp's hands (rmcp would answer one of the two).
    Open,
    /// [`MAX_REQUESTS`] are in rmcp's hands.
    Full,
}

impl Requests {
    /// Takes the request under `id` at `now`, unless one under that id is open or
    /// [`MAX_REQUESTS`] are (those whose answer's POST has not begun within [`REQUEST_LIFE`]
    /// given up first).
    fn take(&self, id: &serde_json::Value, now: Instant) -> Taken {
        let mut open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let id = id.to_string();
        if open.contains_key(&id) {
            return Taken::Open;
        }
        if open.len() >= MAX_REQUESTS {
            let fresh = |taken: &Option<Instant>| {
                taken.is_none_or(|t| now.saturating_duration_since(t) < REQUEST_LIFE)
            };
            open.retain(|_, taken| fresh(taken));
        }
        if open.len() >= MAX_REQUESTS {
            return Taken::Full;
        }
        open.insert(id, Some(now));
        Taken::Yes
    }

    /// The POST of rmcp's answer under `id` begun: its request's place kept until it ends
    /// (the guard dropped); `None` when no request is open under `id`, or its answer's POST
    /// has begun already.
    fn answering(&self, id: &RequestId) -> Option<Answering<'_>> {
        let id = serde_json::to_string(id).ok()?;
        let mut open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        open.get_mut(&id)?.take()?;
        Some(Answering(self, id))
    }
}

/// The POST of an answer to an upstream's request (its id as JSON) under way: the request's
/// place given up when it ends.
struct Answering<'a>(&'a Requests, String);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        let mut open = (self.0).0.lock().unwrap_or_else(|p| p.into_inner());
        open.remove(&self.1);
    }
}

impl StreamableHttpClient for WeighedClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    /// rmcp's POST, its answer judged: a JSON body is read within [`MAX_JSON_BYTES`] (the
    /// lesser of it and `limits`), [`MAX_UNASKED_JSON_BYTES`] when the POST carries no request
    /// (a body past it taken as `Accepted`); a
    /// request's past it, or failed with an HTTP status alone, is answered with an error under
    /// the request's id ([`refusal`]); an SSE answer is read through [`weighed`]. The POST of
    /// an answer to the upstream's request gives up its place ([`Requests`]) when it ends,
    /// however it ends.
    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        mut limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let id = match &message {
            ClientJsonRpcMessage::Request(r) => Some(r.id.clone()),
            _ => None,
        };
        // Start-up keeps rmcp's own handling of an HTTP failure (a fallback, or a failed start).
        let starting = matches!(&message, ClientJsonRpcMessage::Request(r)
            if matches!(r.request, ClientRequest::InitializeRequest(_) | ClientRequest::DiscoverRequest(_)));
        let bound = if id.is_some() {
            MAX_JSON_BYTES
        } else {
            MAX_UNASKED_JSON_BYTES
        };
        limits.max_json_response_size = limits.max_json_response_size.min(bound);
        let _answering = match &message {
            ClientJsonRpcMessage::Response(r) => self.requests.answering(&r.id),
            ClientJsonRpcMessage::Error(e) => {
                e.id.as_ref().and_then(|i| self.requests.answering(i))
            }
            _ => None,
        };
        let sent = self.http.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        );
        match (sent.await.map_err(no_url), id) {
            (Err(StreamableHttpError::ResponseBodyTooLarge { max_size }), None) => {
                tracing::warn!(
                    max_size,
                    "took an HTTP upstream's answer to a POST of no request as accepted, unread: past its bytes bound"
                );
                Ok(StreamableHttpPostResponse::Accepted)
            }
            (Err(e), Some(id)) if !starting => match refusal(&e) {
                Some(why) => {
                    tracing::warn!(error = %e, "refused an HTTP upstream's answer to a call");
                    let error = ErrorData::internal_error(why, None);
                    let answer = ServerJsonRpcMessage::error(error, Some(id));
                    Ok(StreamableHttpPostResponse::Json(answer, None))
                }
                None => Err(e),
            },
            (Ok(StreamableHttpPostResponse::Sse(events, session)), id) => {
                let events = weighed(events, id, self.requests.clone());
                Ok(StreamableHttpPostResponse::Sse(events, session))
            }
            (Ok(StreamableHttpPostResponse::Json(message, session)), id) => {
                Ok(json_answer(message, session, id))
            }
            (other, _) => other,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.http
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
            .map_err(no_url)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, StreamableHttpError<Self::Error>> {
        let limit = StreamableHttpResponseLimits::default().max_sse_event_size;
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            limit,
        )
        .await
    }

    /// rmcp's GET of the upstream's event stream, read through [`weighed`].
    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Events, StreamableHttpError<Self::Error>> {
        let events = self.http.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        );
        Ok(weighed(
            events.await.map_err(no_url)?,
            None,
            self.requests.clone(),
        ))
    }
}

/// What a POST's JSON body passes on to rmcp: an answer only (a response or an error), under
/// the POSTed request's `id` when there is one. A request or a notification in its place —
/// rmcp takes any message there, outside the judging of SSE events and the count of the
/// upstream's requests — is refused: for a POSTed request, an error under its id saying so;
/// for a POSTed answer or notification, nothing (`Accepted`, what the upstream should have
/// said). Found by review: the upstream answered each of the hub's answer POSTs with a `ping`
/// under a 14 MiB id, which rmcp answered with another POST, and so on, past
/// [`MAX_REQUESTS`]. An answer under another id than the POSTed request's (or none) is
/// refused the same way, under the POSTed id (found by review: it passed on, so the call was
/// left waiting for its answer, or another call of the hub's took it).
fn json_answer(
    message: ServerJsonRpcMessage,
    session: Option<String>,
    id: Option<RequestId>,
) -> StreamableHttpPostResponse {
    let answered = match &message {
        ServerJsonRpcMessage::Response(r) => Some(Some(&r.id)),
        ServerJsonRpcMessage::Error(e) => Some(e.id.as_ref()),
        _ => None,
    };
    let why = match (answered, &id) {
        (Some(_), None) => return StreamableHttpPostResponse::Json(message, session),
        (Some(under), Some(id)) if under == Some(id) => {
            return StreamableHttpPostResponse::Json(message, session);
        }
        (Some(_), Some(_)) => "assent: the upstream answered the call under another id, or none",
        (None, Some(_)) => {
            "assent: the upstream answered the call with a request or a notification, not an answer"
        }
        (None, None) => {
            tracing::warn!(
                "dropped an HTTP upstream's request or notification sent as a POST's answer"
            );
            return StreamableHttpPostResponse::Accepted;
        }
    };
    tracing::warn!(why, "refused an HTTP upstream's JSON answer to a call");
    let error = ErrorData::internal_error(why, None);
    StreamableHttpPostResponse::Json(ServerJsonRpcMessage::error(error, id), session)
}

/// The words of the error answering a request whose POST failed with `e`, when the upstream
/// answered it: its JSON body past its bytes bound ([`over_bytes`]), or an HTTP failure rmcp
/// gives as its status alone (429, or a 5xx with no JSON-RPC error rmcp could read: none, or
/// one past [`MAX_JSON_BYTES`], which rmcp reports as the status, not the bound). `None` for
/// any other failure (the connection's, the session's…), which rmcp reports itself.
/// `e` without the URL reqwest puts in its errors' text (found by review: an upstream URL's
/// query token, `?token=…`, was logged at a failed start and at each refused answer).
fn no_url(e: StreamableHttpError<reqwest::Error>) -> StreamableHttpError<reqwest::Error> {
    match e {
        StreamableHttpError::Client(c) => StreamableHttpError::Client(c.without_url()),
        e => e,
    }
}

fn refusal(e: &StreamableHttpError<reqwest::Error>) -> Option<String> {
    match e {
        StreamableHttpError::ResponseBodyTooLarge { max_size } => Some(over_bytes(*max_size)),
        StreamableHttpError::HttpStatus(status) => Some(format!(
            "assent: the upstream answered HTTP {} with no JSON-RPC error within {MAX_JSON_BYTES} bytes",
            status.status
        )),
        _ => None,
    }
}

/// The words of the error answering a request whose answer passed `max_size` bytes.
fn over_bytes(max_size: usize) -> String {
    format!(
        "assent: the upstream's answer was over {max_size} bytes ({} MiB) and was refused unread",
        max_size >> 20
    )
}

/// `events` judged one by one before rmcp parses them: an event heavier than
/// [`MAX_LINE_WEIGHT`] is refused, one within it judged ([`refused`]; `requests`, the
/// upstream's requests in rmcp's hands); and when rmcp's reader fails on an event past
/// its bytes bound in the answer to request `id` (`None`: the upstream's own event stream), an
/// error answering `id` that names the bound ([`over_bytes`]) ends the stream in its place (rmcp
/// would end it as closed before its answer, unsaid why).
fn weighed(events: Events, id: Option<RequestId>, requests: Arc<Requests>) -> Events {
    let mut id = id;
    events
        .filter_map(move |event| std::future::ready(refused(event, &requests)))
        .map(move |event| match (event, id.take()) {
            (Err(e), Some(id)) if e.to_string().contains(EVENT_TOO_LARGE) => {
                tracing::warn!(error = %e, "refused an HTTP upstream's answer past its bytes bound");
                let error = ErrorData::internal_error(over_bytes(MAX_ANSWER_BYTES), None);
                let answer = ServerJsonRpcMessage::error(error, Some(id));
                Ok(message_event(&serde_json::to_string(&answer).unwrap_or_default()))
            }
            (event, taken) => {
                id = taken;
                event
            }
        })
        .boxed()
}

/// `event` as rmcp may read it: when its data weighs at most [`MAX_LINE_WEIGHT`], as
/// [`judged`] gives it (`requests`: the upstream's requests in rmcp's hands); past it, an
/// answer is replaced by an error under its id (as the hub refuses a stdio upstream's line,
/// [`too_heavy`]), anything else dropped (`None`), all logged. A request of the upstream's is
/// dropped, not answered (its answer would be a POST of its own).
fn refused(event: Result<Sse, SseError>, requests: &Requests) -> Option<Result<Sse, SseError>> {
    let Ok(sse) = event else { return Some(event) };
    let weight = sse.data.as_deref().map_or(0, |d| raw_weight(d.as_bytes()));
    if weight <= MAX_LINE_WEIGHT {
        return Some(Ok(judged(sse, requests)));
    }
    tracing::warn!(
        weight,
        "refused an HTTP upstream's event too heavy to parse"
    );
    let data = sse.data.as_deref().unwrap_or_default();
    let Some((id, false)) = answerable(data.as_bytes(), true) else {
        tracing::warn!("dropped an HTTP upstream's event too heavy to parse: no answer");
        return None;
    };
    let why = too_heavy(weight);
    let error = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603,
        "message": format!("assent: the upstream's answer was refused: {why}")}});
    Some(Ok(message_event(&error.to_string())))
}

/// An SSE event within the weight, judged as the hub judges a stdio upstream's line
/// ([`upstream_line`], as `passes` in [`super::child`] does): a message event (no `event`
/// field, or `message`) whose data is a request under an id rmcp's answer could not repeat
/// cheaply (a string over 1 KiB, a fraction, an array…), or text [`crate::weigh::envelope`]
/// cannot read (no JSON object, a key named twice, a byte order mark), or a request
/// [`Requests::take`] refuses (`requests`: one under its id is open, or [`MAX_REQUESTS`]
/// are), is given with no data, which rmcp skips
/// (its `id` and `retry`, which rmcp keeps for resuming the stream, kept): dropped, logged,
/// never answered, since answering would take a POST of the hub's own. Found by review: such
/// events reached rmcp unjudged, and an upstream streaming pings under 14 MiB ids had rmcp
/// hold a handler and an answer repeating the id for each, until the gateway ran out of
/// memory. Anything else — an answer, a notification, a request taken, blank data (which rmcp
/// skips), a control event — is given as it came.
fn judged(sse: Sse, requests: &Requests) -> Sse {
    let message = matches!(sse.event.as_deref(), None | Some("" | "message"));
    let data = sse.data.as_deref().unwrap_or_default();
    if !message || data.trim().is_empty() {
        return sse;
    }
    match upstream_line(data.as_bytes()) {
        Line::Other => return sse,
        Line::Request(id) => match requests.take(&id, Instant::now()) {
            Taken::Yes => return sse,
            Taken::Open => tracing::warn!(
                %id,
                "dropped an HTTP upstream's request: one under its id waits for its answer"
            ),
            Taken::Full => tracing::warn!(
                max = MAX_REQUESTS,
                "dropped an HTTP upstream's request: too many of its requests wait for their answers"
            ),
        },
        Line::Unanswerable => {}
    }
    Sse { data: None, ..sse }
}

/// An SSE `message` event carrying `data`.
fn message_event(data: &str) -> Sse {
    Sse {
        data: Some(data.to_string()),
        ..Sse::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer too heavy to parse is refused under its id; a notification is dropped.
    #[test]
    fn a_heavy_event_is_refused_under_its_id_or_dropped() {
        let zeros = "0,".repeat(1 << 20);
        let answer = format!(r#"{{"jsonrpc":"2.0","id":3,"result":{{"z":[{zeros}0]}}}}"#);
        let got = refused(Ok(message_event(&answer)), &Requests::default())
            .unwrap()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(got.data.as_deref().unwrap()).unwrap();
        assert_eq!(v["id"], 3);
        assert!(v["error"]["message"].as_str().unwrap().contains("64 MiB"));
        let note = format!(r#"{{"jsonrpc":"2.0","method":"x","params":{{"z":[{zeros}0]}}}}"#);
        assert!(refused(Ok(message_event(&note)), &Requests::default()).is_none());
        let light = message_event(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert_eq!(
            refused(Ok(light.clone()), &Requests::default())
                .unwrap()
                .unwrap(),
            light
        );
    }

    /// Attack (memory): a request under an id over 1 KiB, or text no JSON object, loses its
    /// data (its event id kept); at most [`MAX_REQUESTS`] requests pass until an answer's
    /// POST ends, which frees its id; answers, notifications, blank data and control events
    /// pass as they came.
    #[test]
    fn an_event_within_the_weight_is_judged_as_a_stdio_line() {
        let requests = Requests::default();
        let event = |data: &str| Sse {
            id: Some("e1".into()),
            ..message_event(data)
        };
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":"{}","method":"ping"}}"#,
            "p".repeat(2048)
        );
        for bad in [long.as_str(), "nope", r#"{"id":1,"id":2,"method":"m"}"#] {
            let got = judged(event(bad), &requests);
            assert_eq!(
                (got.data, got.id.as_deref()),
                (None, Some("e1")),
                "{bad:.40}"
            );
        }
        let ping = |id: usize| event(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        for id in 0..MAX_REQUESTS {
            assert_eq!(judged(ping(id), &requests), ping(id));
        }
        assert_eq!(judged(ping(MAX_REQUESTS), &requests).data, None);
        drop(requests.answering(&RequestId::Number(3)));
        assert_eq!(judged(ping(3), &requests), ping(3));
        let control = Sse {
            event: Some("endpoint".into()),
            ..message_event("/x")
        };
        for same in [
            event(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            event(r#"{"jsonrpc":"2.0","method":"notifications/x"}"#),
            event(" "),
            control,
        ] {
            assert_eq!(judged(same.clone(), &requests), same);
        }
    }

    /// A POST's JSON body passes an answer under the POSTed id on, and refuses a request or
    /// notification in its place, or an answer under another id: an error under the POSTed
    /// request's id, or nothing for a POSTed answer.
    #[test]
    fn a_posts_json_body_passes_only_an_answer() {
        let msg = |v: serde_json::Value| serde_json::from_value::<ServerJsonRpcMessage>(v).unwrap();
        let ping =
            || msg(serde_json::json!({"jsonrpc": "2.0", "id": "x".repeat(2048), "method": "ping"}));
        let answer = msg(serde_json::json!({"jsonrpc": "2.0", "id": 7, "result": {}}));
        let asked = Some(RequestId::Number(7));
        let passed = json_answer(answer.clone(), None, asked.clone());
        let as_json = |m: &ServerJsonRpcMessage| serde_json::to_value(m).unwrap();
        assert!(
            matches!(&passed, StreamableHttpPostResponse::Json(m, _) if as_json(m) == as_json(&answer)),
            "{passed:?}"
        );
        let refused = json_answer(ping(), None, asked);
        let StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(e), _) = refused else {
            panic!("{refused:?}");
        };
        assert_eq!(e.id, Some(RequestId::Number(7)));
        assert!(e.error.message.contains("not an answer"), "{e:?}");
        let other = msg(serde_json::json!({"jsonrpc": "2.0", "id": 8, "result": {}}));
        let unnamed = msg(serde_json::json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32700, "message": "parse error"}}));
        for wrong in [other, unnamed] {
            let refused = json_answer(wrong, None, Some(RequestId::Number(7)));
            let StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(e), _) = refused
            else {
                panic!("{refused:?}");
            };
            assert_eq!(e.id, Some(RequestId::Number(7)));
            assert!(e.error.message.contains("under another id"), "{e:?}");
        }
        let dropped = json_answer(ping(), None, None);
        assert!(
            matches!(dropped, StreamableHttpPostResponse::Accepted),
            "{dropped:?}"
        );
    }

    /// Attack (denial of service): an upstream's requests rmcp never answers (cancelled,
    /// unparsed, a second under one id) held their places for ever, so after 64 every later
    /// request was dropped. One under an open id is refused; one whose answer's POST has not
    /// begun within [`REQUEST_LIFE`] gives up its place when all are taken; one whose
    /// answer's POST is under way keeps it until the POST ends.
    #[test]
    fn a_request_never_answered_gives_up_its_place() {
        let requests = Requests::default();
        let t0 = Instant::now();
        let id = |n: usize| serde_json::json!(n);
        assert_eq!(requests.take(&id(0), t0), Taken::Yes);
        assert_eq!(requests.take(&id(0), t0), Taken::Open);
        let answering = requests.answering(&RequestId::Number(0)).unwrap();
        assert!(requests.answering(&RequestId::Number(0)).is_none());
        for n in 1..MAX_REQUESTS {
            assert_eq!(requests.take(&id(n), t0), Taken::Yes);
        }
        let later = t0 + REQUEST_LIFE - Duration::from_millis(1);
        assert_eq!(requests.take(&id(MAX_REQUESTS), later), Taken::Full);
        let past = t0 + REQUEST_LIFE;
        assert_eq!(requests.take(&id(MAX_REQUESTS), past), Taken::Yes);
        assert_eq!(
            requests.take(&id(0), past),
            Taken::Open,
            "its answer is being POSTed"
        );
        drop(answering);
        assert_eq!(requests.take(&id(0), past), Taken::Yes);
        assert_eq!(requests.take(&serde_json::json!("0"), past), Taken::Yes);
    }
}
