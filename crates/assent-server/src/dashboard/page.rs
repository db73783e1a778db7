//! The dashboard's page kit: the security headers every `/ui` response carries, template
//! rendering, the refusal and message pages, and the static script and style. It reads no
//! session and no store.

use crate::error::ApiError;
use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};

/// Headers every dashboard response carries: no caching, no framing, no referrer to another
/// origin (a single-use link must not leak), scripts and styles only from the gateway itself.
/// `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null` with
/// the dashboard's own form `POST`s, and the sign-in refuses a `null` origin
/// (`session::from_this_origin`, which a page of another origin cannot pass by choosing
/// `no-referrer` for itself).
pub(crate) fn secured(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// A `200` page that moves the browser on to `next` (a dashboard path) by itself, saying
/// `text` (plain: escaped here) on a link to it, so that the `SameSite=Strict` session cookie
/// is sent: a navigation from another site (a provider's redirect, a link in chat or mail)
/// comes without it, a redirect would still be part of that navigation, and this page's own
/// navigation is the gateway's.
pub(crate) fn moving_on(next: &str, text: &str) -> Response {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('"', "&quot;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let (next, text) = (esc(next), esc(text));
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>assent</title>\
         <meta http-equiv=\"refresh\" content=\"0;url={next}\"></head>\
         <body><p><a href=\"{next}\">{text}</a>.</p></body></html>"
    );
    secured((StatusCode::OK, Html(html)).into_response())
}

/// Template `t` rendered as a `200` page, with the [`secured`] headers.
pub(crate) fn page(t: &impl Template) -> Response {
    page_with(StatusCode::OK, t)
}

/// Template `t` rendered with `status` and the [`secured`] headers; a template that fails is `503`.
pub(crate) fn page_with(status: StatusCode, t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => secured((status, Html(html)).into_response()),
        Err(e) => {
            tracing::error!(error = %e, "dashboard template failed");
            secured(ApiError::unavailable("the page could not be rendered").into_response())
        }
    }
}

/// A redirect to the sign-in page.
pub(crate) fn to_login() -> Response {
    secured(Redirect::to("/ui/login").into_response())
}

/// A refused form: `403` with a page that says why; nothing was changed.
pub(crate) fn forbidden(why: &str) -> Response {
    let t = Message {
        title: "Refused".into(),
        text: why.into(),
        who: String::new(),
        csrf: String::new(),
    };
    page_with(StatusCode::FORBIDDEN, &t)
}

/// `GET /ui/static/app.js`: the dashboard's one small script.
pub(crate) async fn script() -> Response {
    secured(
        (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            include_str!("../../static/app.js"),
        )
            .into_response(),
    )
}

/// `GET /ui/static/app.css`: the dashboard's style sheet.
pub(crate) async fn style() -> Response {
    secured(
        (
            [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
            include_str!("../../static/app.css"),
        )
            .into_response(),
    )
}

/// A page with a title and a message (refusals, outcomes), for the signed-in `who`.
#[derive(Template)]
#[template(path = "message.html")]
pub(crate) struct Message {
    pub(crate) title: String,
    pub(crate) text: String,
    pub(crate) who: String,
    pub(crate) csrf: String,
}
