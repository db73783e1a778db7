//! The HTTP client the single sign-on provider is reached with (discovery, its keys — the
//! JWKS at whatever `jwks_uri` discovery names — and the token endpoint): it follows no
//! redirect, and every answer is bounded in size ([`MAX_ANSWER`]) and in time
//! ([`FETCH_TIMEOUT`], from connecting until the last byte of the body).
//!
//! Attack (found by review): the `openidconnect` crate's own `reqwest` client reads a whole
//! answer into memory, however large. A provider that is compromised or mis-configured, a
//! hostile network path to it, or a `jwks_uri` pointing anywhere answered with an endless (or
//! huge) body and exhausted the gateway's memory, once per sign-in. An answer larger than
//! [`MAX_ANSWER`] — said by its `Content-Length` or found while reading — is now refused
//! when it is found, before more is read: the sign-in is refused (discovery's failure is
//! remembered like any other, `crate::config::oidc::DISCOVERY_RETRY`), and the error names
//! the bound. A body dripped slowly is cut off at [`FETCH_TIMEOUT`].

use openidconnect::{AsyncHttpClient, HttpRequest, HttpResponse, http};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// The most bytes of one answer of the provider read (discovery document, JWKS, token
/// answer): far above any real one (a discovery document is a few KiB, a JWKS a few keys of
/// under 1 KiB each, a token answer a few KiB).
pub const MAX_ANSWER: usize = 1 << 20;
/// How long one request to the provider may take in all: connecting, sending, and reading
/// the whole answer.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request to the provider failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The request could not be built, sent, or its answer read.
    #[error("request failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The answer was larger than the bound.
    #[error("the provider's answer is larger than {0} bytes")]
    TooLarge(usize),
    /// The request took longer than the bound.
    #[error("the provider did not answer in full within {0:?}")]
    TimedOut(Duration),
    /// The answer could not be handed on (its status or headers).
    #[error("the provider's answer could not be read: {0}")]
    Answer(#[from] http::Error),
}

/// The client the provider is reached with: no redirects, answers bounded in size and time,
/// and — per request — direct to a loopback URL, through the environment's proxies to any
/// other.
#[derive(Debug, Clone)]
pub struct ProviderHttp {
    /// For URLs not on this machine: the environment's proxies (`HTTP_PROXY`, `ALL_PROXY`…).
    proxied: reqwest::Client,
    /// For URLs on this machine (`assent_api::loopback_host`): no proxy.
    direct: reqwest::Client,
    max: usize,
    timeout: Duration,
}

impl ProviderHttp {
    /// A client following no redirect, reading at most [`MAX_ANSWER`] bytes of an answer,
    /// within [`FETCH_TIMEOUT`] in all. Whether a request goes through the environment's
    /// proxies is decided per request from its own URL (`assent_api::loopback_host`), not
    /// once from the issuer: discovery names the token endpoint and `jwks_uri`, which may be
    /// on other hosts than the issuer.
    ///
    /// Found by review: the choice was made once from the issuer, so a loopback issuer naming
    /// a remote token endpoint sent the client secret directly (skipping a proxy that may be
    /// the only way out), and a remote issuer naming `http://127.0.0.1/token` sent the secret
    /// in clear text to the proxy.
    pub fn new() -> Result<Self, reqwest::Error> {
        Self::with_proxied(assent_api::http_builder())
    }

    /// [`ProviderHttp::new`] whose requests to hosts not on this machine go as `proxied`
    /// (before the bounds are added) sends them.
    fn with_proxied(proxied: reqwest::ClientBuilder) -> Result<Self, reqwest::Error> {
        let bounded = |b: reqwest::ClientBuilder| {
            b.redirect(reqwest::redirect::Policy::none())
                .timeout(FETCH_TIMEOUT)
                .build()
        };
        Ok(Self {
            proxied: bounded(proxied)?,
            direct: bounded(assent_api::http_builder().no_proxy())?,
            max: MAX_ANSWER,
            timeout: FETCH_TIMEOUT,
        })
    }

    /// The client for `request`: the one without proxies when its URL is on this machine.
    fn client_for(&self, request: &reqwest::Request) -> &reqwest::Client {
        if assent_api::loopback_host(request.url()) {
            &self.direct
        } else {
            &self.proxied
        }
    }

    /// Sends `request` and reads its answer, bounded ([`MAX_ANSWER`], [`FETCH_TIMEOUT`]).
    pub async fn send(&self, request: HttpRequest) -> Result<HttpResponse, FetchError> {
        let whole = self.send_unbounded_in_time(request);
        tokio::time::timeout(self.timeout, whole)
            .await
            .map_err(|_| FetchError::TimedOut(self.timeout))?
    }

    /// [`ProviderHttp::send`] without its deadline (the caller sets it).
    async fn send_unbounded_in_time(
        &self,
        request: HttpRequest,
    ) -> Result<HttpResponse, FetchError> {
        let request: reqwest::Request = request.try_into()?;
        let mut answer = self.client_for(&request).execute(request).await?;
        if answer.content_length().is_some_and(|n| n > self.max as u64) {
            return Err(FetchError::TooLarge(self.max));
        }
        let mut out = http::Response::builder()
            .status(answer.status())
            .version(answer.version());
        for (name, value) in answer.headers() {
            out = out.header(name, value);
        }
        let mut body = Vec::new();
        while let Some(chunk) = answer.chunk().await? {
            if body.len().saturating_add(chunk.len()) > self.max {
                return Err(FetchError::TooLarge(self.max));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(out.body(body)?)
    }
}

impl<'c> AsyncHttpClient<'c> for ProviderHttp {
    type Error = FetchError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, FetchError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(self.send(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};

    /// A loopback listener recording the head of every request it is sent and answering
    /// `200 OK` with an empty body; its `http://127.0.0.1:PORT` and what it saw.
    fn recorder() -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut buf = [0u8; 4096];
                let n = conn.read(&mut buf).unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                record.lock().unwrap().push(head);
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        });
        (url, seen)
    }

    fn post(url: &str) -> HttpRequest {
        http::Request::post(url)
            .header("authorization", "Basic c2VjcmV0")
            .body(b"grant_type=authorization_code".to_vec())
            .unwrap()
    }

    /// Found by review: the choice of proxy was made once from the issuer, so a remote
    /// issuer whose discovery named a token endpoint on `http://127.0.0.1` had the client
    /// secret sent in clear text to the proxy. Each request now picks by its own URL: the
    /// loopback endpoint is reached directly, a remote one still through the proxy.
    #[tokio::test]
    async fn a_loopback_token_endpoint_named_by_discovery_is_never_sent_the_secret_through_a_proxy()
    {
        let (proxy_url, via_proxy) = recorder();
        let (endpoint, direct) = recorder();
        let proxied = assent_api::http_builder().proxy(reqwest::Proxy::all(&proxy_url).unwrap());
        let http = ProviderHttp::with_proxied(proxied).unwrap();
        let answer = http.send(post(&format!("{endpoint}/token"))).await.unwrap();
        assert_eq!(answer.status(), 200);
        assert!(
            via_proxy.lock().unwrap().is_empty(),
            "the loopback token endpoint was reached through the proxy: {:?}",
            via_proxy.lock().unwrap()
        );
        let got = direct.lock().unwrap().clone();
        assert!(got.iter().any(|r| r.starts_with("POST /token ")), "{got:?}");
        // A remote endpoint still goes through the proxy.
        http.send(post("http://idp.example.invalid/token"))
            .await
            .unwrap();
        let seen = via_proxy.lock().unwrap().clone();
        assert!(
            seen.iter()
                .any(|r| r.starts_with("POST http://idp.example.invalid/token ")),
            "{seen:?}"
        );
    }
}
