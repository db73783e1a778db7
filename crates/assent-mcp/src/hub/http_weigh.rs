//! A streamable HTTP upstream's answers bounded before rmcp parses them ([`WeighedClient`]):
//! the HTTP client of rmcp's streamable HTTP transport for the hub, which lets rmcp's reqwest
//! client do the work and judges what it hands back. rmcp reads at most 16 MiB of a JSON body
//! ([`MAX_ANSWER_BYTES`]) or of one SSE event and fails past that; here a request whose answer
//! passed that bound is answered with a JSON-RPC error naming it (found by review: the call
//! failed as if the connection had, "the gateway's log says why", or, over SSE, as a stream
//! closed before its answer), and each SSE event is weighed ([`crate::weigh::raw_weight`])
//! before rmcp parses it, one heavier than [`MAX_LINE_WEIGHT`] refused unparsed as the hub
//! refuses a stdio upstream's line ([`super::child`]): `[0,0,…]` parsed holds some 33 times
//! its text, so 16 MiB of it made rmcp build half a gigabyte for one event. A JSON body
//! (not SSE) within 16 MiB is still parsed by rmcp unweighed: rmcp parses it inside its
//! reqwest client, before any hook this side.

use crate::weigh::{MAX_LINE_WEIGHT, answerable, raw_weight, too_heavy};
use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ErrorData, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;
use std::collections::HashMap;
use std::sync::Arc;

/// The most bytes of an upstream's answer read over HTTP: a JSON body, or one SSE event (its
/// lines as sent). rmcp's defaults, both 16 MiB, as a stdio upstream's line
/// (`rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH`).
pub(super) const MAX_ANSWER_BYTES: usize = 16 << 20;

/// What rmcp's SSE reader says of an event past its bound (its error, private to it, is known
/// only by its words; rmcp is pinned to one version, and the hub's test of an SSE answer past
/// the bound, `an_http_upstream_flooding_a_calls_answer_is_cut_off_at_16_mib`, holds them).
const EVENT_TOO_LARGE: &str = "SSE event exceeded the maximum size of";

/// An SSE event stream as rmcp's client reads it.
type Events = BoxStream<'static, Result<Sse, SseError>>;

/// The hub's HTTP client of a streamable HTTP upstream: rmcp's reqwest client (`0`), its
/// answers bounded as this module says. Errors are reqwest's, as rmcp's own client gives them.
#[derive(Clone)]
pub(super) struct WeighedClient(pub(super) reqwest::Client);

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

    /// rmcp's POST, its answer judged: a request's JSON body past the byte bound is answered
    /// with an error under the request's id ([`over_bytes`]); an SSE answer is read through
    /// [`weighed`].
    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let id = match &message {
            ClientJsonRpcMessage::Request(r) => Some(r.id.clone()),
            _ => None,
        };
        let sent = self.0.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        );
        match (sent.await, id) {
            (Err(StreamableHttpError::ResponseBodyTooLarge { max_size }), Some(id)) => {
                tracing::warn!(
                    max_size,
                    "refused an HTTP upstream's answer past its bytes bound"
                );
                let error = ErrorData::internal_error(over_bytes(max_size), None);
                let answer = ServerJsonRpcMessage::error(error, Some(id));
                Ok(StreamableHttpPostResponse::Json(answer, None))
            }
            (Ok(StreamableHttpPostResponse::Sse(events, session)), id) => Ok(
                StreamableHttpPostResponse::Sse(weighed(events, id), session),
            ),
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
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
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
        let events = self.0.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        );
        Ok(weighed(events.await?, None))
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
/// [`MAX_LINE_WEIGHT`] is refused ([`refused`]); and when rmcp's reader fails on an event past
/// its bytes bound in the answer to request `id` (`None`: the upstream's own event stream), an
/// error answering `id` that names the bound ([`over_bytes`]) ends the stream in its place (rmcp
/// would end it as closed before its answer, unsaid why).
fn weighed(events: Events, id: Option<RequestId>) -> Events {
    let mut id = id;
    events
        .filter_map(|event| std::future::ready(refused(event)))
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

/// `event` as rmcp may read it: as it came when its data weighs at most [`MAX_LINE_WEIGHT`];
/// past it, an answer is replaced by an error under its id (as the hub refuses a stdio
/// upstream's line, [`too_heavy`]), anything else dropped (`None`), all logged. A request of
/// the upstream's is dropped, not answered (its answer would be a POST of its own).
fn refused(event: Result<Sse, SseError>) -> Option<Result<Sse, SseError>> {
    let Ok(sse) = &event else { return Some(event) };
    let weight = sse.data.as_deref().map_or(0, |d| raw_weight(d.as_bytes()));
    if weight <= MAX_LINE_WEIGHT {
        return Some(event);
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
        let got = refused(Ok(message_event(&answer))).unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_str(got.data.as_deref().unwrap()).unwrap();
        assert_eq!(v["id"], 3);
        assert!(v["error"]["message"].as_str().unwrap().contains("64 MiB"));
        let note = format!(r#"{{"jsonrpc":"2.0","method":"x","params":{{"z":[{zeros}0]}}}}"#);
        assert!(refused(Ok(message_event(&note))).is_none());
        let light = message_event(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert_eq!(refused(Ok(light.clone())).unwrap().unwrap(), light);
    }
}
