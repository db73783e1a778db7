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

/// The client the provider is reached with: no redirects, answers bounded in size and time.
#[derive(Debug, Clone)]
pub struct ProviderHttp {
    client: reqwest::Client,
    max: usize,
    timeout: Duration,
}

impl ProviderHttp {
    /// A client following no redirect, reading at most [`MAX_ANSWER`] bytes of an answer,
    /// within [`FETCH_TIMEOUT`] in all; for a provider whose `issuer` is on this machine, not
    /// through the environment's proxies (`assent_api::direct_to_loopback`: its client secret,
    /// codes and tokens would cross the network in clear text to the proxy).
    pub fn new(issuer: &str) -> Result<Self, reqwest::Error> {
        let client = assent_api::direct_to_loopback(reqwest::Client::builder(), issuer)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(FETCH_TIMEOUT)
            .build()?;
        Ok(Self {
            client,
            max: MAX_ANSWER,
            timeout: FETCH_TIMEOUT,
        })
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
        let mut answer = self.client.execute(request.try_into()?).await?;
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
