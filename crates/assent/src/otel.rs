//! Where the binary's logs and traces go (issue 15 §1): logs to stderr (`ASSENT_LOG`
//! filter), and — when the standard OpenTelemetry variables ask for it — every span to an
//! OTLP collector over HTTP/protobuf. Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, unless `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none`; the exporter reads its other settings (headers, timeout,
//! compression) from `OTEL_EXPORTER_OTLP_*`, the batch processor from `OTEL_BSP_*`, the
//! resource from `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` (service name `assent` when
//! unset). W3C Trace Context is then the propagator (`traceparent`, `tracestate`).
//!
//! The exporter's HTTP client is built here ([`exporter_client`]): it follows no redirect,
//! and reaches a collector on this machine without the environment's proxies. Found by
//! review: the exporter's own client honoured `HTTP_PROXY`/`ALL_PROXY` for a collector at
//! `http://localhost:4318` too, so every span and `OTEL_EXPORTER_OTLP_HEADERS` (often the
//! collector's API key) went in clear text to the proxy; and it followed redirects, taking
//! those headers wherever a collector's answer pointed.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::OnceLock;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// The tracer provider while tracing is on, to flush at exit.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether the OTel variables turn trace export on (see the module doc).
fn wanted() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    let is = |k: &str, v: &str| std::env::var(k).is_ok_and(|x| x.trim().eq_ignore_ascii_case(v));
    (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        && !is("OTEL_SDK_DISABLED", "true")
        && !is("OTEL_TRACES_EXPORTER", "none")
}

/// The OTLP/HTTP tracer provider the variables describe; `Err` says why it cannot be built.
fn provider() -> Result<SdkTracerProvider, String> {
    use opentelemetry_otlp::WithHttpConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(exporter_client()?)
        .build()
        .map_err(|e| e.to_string())?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("assent");
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

/// The endpoint the exporter sends spans to, as opentelemetry-otlp 0.33 resolves it:
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT`, else
/// `http://localhost:4318` (an empty variable counts as unset).
fn traces_endpoint() -> String {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    .unwrap_or_else(|| "http://localhost:4318".into())
}

/// The exporter's timeout per request, as opentelemetry-otlp 0.33 resolves it (its own
/// client is not built when one is given): `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else
/// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else 10 s.
fn traces_timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok().and_then(|v| v.parse().ok()))
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// The exporter's blocking HTTP client: no redirects, [`traces_timeout`], and without the
/// environment's proxies when [`traces_endpoint`] is on this machine
/// (`assent_api::loopback_host`; other hosts keep them), with an empty root store on a host
/// without CA certificates (`assent_api::no_ca_roots`). Built on a thread of its own, as the
/// exporter builds its default one (a blocking client must not be built or dropped inside
/// an async runtime); `Err` says why it could not be built.
fn exporter_client() -> Result<reqwest::blocking::Client, String> {
    let loopback =
        reqwest::Url::parse(traces_endpoint().trim()).is_ok_and(|u| assent_api::loopback_host(&u));
    let timeout = traces_timeout();
    std::thread::spawn(move || {
        let b = reqwest::blocking::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout);
        // The blocking twin of `assent_api::http_builder`: on a host without CA certificates
        // an empty root store (plain http works, https fails closed), not no client at all.
        let b = if assent_api::no_ca_roots() {
            b.tls_certs_only(Vec::<reqwest::Certificate>::new())
        } else {
            b
        };
        if loopback { b.no_proxy() } else { b }.build()
    })
    .join()
    .map_err(|_| "building the OTLP HTTP client panicked".to_string())?
    .map_err(|e| format!("the OTLP HTTP client: {e}"))
}

/// Logs to stderr at `default` level unless `ASSENT_LOG` gives a filter (colour only on a
/// terminal and without `NO_COLOR`), and exports spans when the OTel variables say so (a
/// provider that cannot be built is logged and tracing stays off). A second call is a no-op.
pub(crate) fn init(default: &str) {
    // rmcp logs each notification an MCP client sends, whole, at info (found by review: an
    // agent's large `params` became as many large log lines): warnings only, unless asked.
    let filter = EnvFilter::try_from_env("ASSENT_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("{default},rmcp=warn")));
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let (otel, why) = match wanted().then(provider) {
        Some(Ok(p)) => {
            opentelemetry::global::set_text_map_propagator(
                opentelemetry_sdk::propagation::TraceContextPropagator::new(),
            );
            let tracer = p.tracer("assent");
            let _ = PROVIDER.set(p);
            // Our spans and events at info; the HTTP stack's own stay out (the exporter uses it).
            let spans = EnvFilter::new(
                "info,h2=off,hyper=off,hyper_util=off,reqwest=off,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off,rmcp=warn",
            );
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(spans);
            (Some(layer), None)
        }
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let ok = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init()
        .is_ok();
    if let (true, Some(why)) = (ok, why) {
        tracing::error!(error = %why, "OpenTelemetry export could not start; tracing is off");
    }
    if ok && PROVIDER.get().is_some() && cleartext_to_another_host(&traces_endpoint()) {
        tracing::warn!(
            endpoint = %shown(&traces_endpoint()),
            "OTLP traces go to another host over plain http: every span and OTEL_EXPORTER_OTLP_HEADERS (often the collector's key) cross the network unencrypted; use https"
        );
    }
}

/// Whether `endpoint` is a plain `http://` URL of a host other than this machine.
fn cleartext_to_another_host(endpoint: &str) -> bool {
    reqwest::Url::parse(endpoint.trim())
        .is_ok_and(|u| u.scheme() == "http" && !assent_api::loopback_host(&u))
}

/// `endpoint` as `scheme://host[:port]/…`: its path and query may carry a key.
fn shown(endpoint: &str) -> String {
    match reqwest::Url::parse(endpoint.trim()) {
        Ok(u) => format!(
            "{}://{}{}/…",
            u.scheme(),
            u.host_str().unwrap_or(""),
            u.port().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Err(_) => "(unparsable)".into(),
    }
}

/// Exports the spans still buffered (at most 5 s), when tracing is on: call before exiting.
pub(crate) fn flush() {
    if let Some(p) = PROVIDER.get() {
        let _ = p.shutdown_with_timeout(std::time::Duration::from_secs(5));
    }
}
