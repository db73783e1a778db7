//! The webhook tests' receiver: a local HTTP server that records what it is sent and answers
//! with the failures a test asks for (500s, 503 with `Retry-After`, 422s).

use axum::http::HeaderMap;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Default)]
pub(crate) struct Receiver {
    /// (path, headers, body) of every request answered 2xx.
    pub(crate) got: Arc<Mutex<Vec<(String, HeaderMap, String)>>>,
    /// How many more requests to /hook get a 500.
    pub(crate) fail: Arc<Mutex<u32>>,
    pub(crate) failed: Arc<Mutex<u32>>,
    /// How many more requests to /hook get a 503 with `Retry-After: 2`.
    pub(crate) busy: Arc<Mutex<u32>>,
    /// How many more requests to /hook get a 422.
    pub(crate) refuse: Arc<Mutex<u32>>,
    /// When each request to /hook came.
    pub(crate) tried: Arc<Mutex<Vec<std::time::Instant>>>,
    /// How many more requests to /hook are answered only after [`SLOW`].
    pub(crate) slow: Arc<Mutex<u32>>,
}

/// How long a slow answer ([`Receiver::slow`]) takes.
pub(crate) const SLOW: Duration = Duration::from_millis(1500);

impl Receiver {
    /// The bodies received on `path`, once there are `n` of them (within 30 s).
    pub(crate) async fn bodies(&self, path: &str, n: usize) -> Vec<Value> {
        let start = std::time::Instant::now();
        loop {
            let got: Vec<Value> = self
                .got
                .lock()
                .unwrap()
                .iter()
                .filter(|(p, _, _)| p == path)
                .map(|(_, _, b)| serde_json::from_str(b).unwrap())
                .collect();
            if got.len() >= n {
                return got;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "{path}: {got:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn receive(
    axum::extract::State(r): axum::extract::State<Receiver>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if uri.path() == "/hook" {
        r.tried.lock().unwrap().push(std::time::Instant::now());
        let slow = {
            let mut slow = r.slow.lock().unwrap();
            let now = *slow > 0;
            *slow = slow.saturating_sub(1);
            now
        };
        if slow {
            tokio::time::sleep(SLOW).await;
        }
        let mut busy = r.busy.lock().unwrap();
        if *busy > 0 {
            *busy -= 1;
            let h = [(axum::http::header::RETRY_AFTER, "2")];
            return (axum::http::StatusCode::SERVICE_UNAVAILABLE, h).into_response();
        }
        let mut refuse = r.refuse.lock().unwrap();
        if *refuse > 0 {
            *refuse -= 1;
            return axum::http::StatusCode::UNPROCESSABLE_ENTITY.into_response();
        }
        let mut fail = r.fail.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            *r.failed.lock().unwrap() += 1;
            return axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    }
    r.got
        .lock()
        .unwrap()
        .push((uri.path().to_string(), headers, body));
    axum::http::StatusCode::NO_CONTENT.into_response()
}

/// Serves `recv` on `port` of `127.0.0.1` (`0`: a free one): the port.
pub(crate) async fn serve_receiver(recv: &Receiver, port: u16) -> u16 {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new()
        .fallback(axum::routing::post(receive))
        .with_state(recv.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}
