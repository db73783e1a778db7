//! The dashboard's page kit: the security headers every `/ui` response carries, template
//! rendering, the refusal and message pages, and the static script and style. It reads no
//! session and no store.

use crate::error::ApiError;
use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};

/// Headers every dashboard response carries: no caching, no framing, no referrer (a
/// single-use link must not leak), scripts and styles only from the gateway itself.
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
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
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
