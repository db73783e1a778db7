//! Where a dashboard sign-in may come from: a page of the dashboard's own origin, by the
//! browser's own word (`Sec-Fetch-Site`, `Origin`), or a client that says nothing.

use crate::kit::{OP, serve};
use reqwest::StatusCode;

/// Attack (found by review): the sign-in form's double-submit cookie is not separated by port
/// (RFC 6265 §8.5), so over http a page on another port of the same host — a dev server an
/// agent started on `localhost:3000` — could plant the form's cookie and post a matching form
/// with an operator key of the attacker's own, signing the operator's browser in as the
/// attacker's operator (what they then approve is recorded under the wrong name). The browser
/// marks that request `Sec-Fetch-Site: same-site`, which no page can change: refused, and no
/// session is started. The dashboard's own form (`same-origin`), a typed request (`none`) and
/// a client that sends no such header sign in as before.
#[tokio::test]
async fn a_sign_in_posted_from_another_origin_of_the_site_is_refused() {
    let gw = serve().await;
    for site in ["same-site", "cross-site"] {
        let r = gw
            .dashboard_sign_in_with(OP, &[("sec-fetch-site", site)])
            .await;
        let started = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .any(|c| c.to_str().unwrap_or_default().starts_with("assent_ui="));
        assert_eq!(
            (r.status(), started),
            (StatusCode::FORBIDDEN, false),
            "{site}"
        );
        let text = r.text().await.unwrap();
        assert!(
            text.contains("did not come from this dashboard"),
            "{site}: {text}"
        );
    }
    // Over plain http to another address than `localhost` browsers send no `Sec-Fetch-Site`,
    // but send `Origin` with the form (found by review): another port's, or `null`, is refused.
    let other_port = format!(
        "http://127.0.0.1:{}",
        gw.url.rsplit(':').next().unwrap().parse::<u16>().unwrap() ^ 1
    );
    for origin in [other_port.as_str(), "null", "http://evil.example"] {
        let r = gw.dashboard_sign_in_with(OP, &[("origin", origin)]).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{origin}");
    }
    let r = gw.dashboard_sign_in_with(OP, &[("origin", &gw.url)]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    for site in [Some("same-origin"), Some("none"), None] {
        let headers: Vec<(&str, &str)> = site.map(|s| ("sec-fetch-site", s)).into_iter().collect();
        let r = gw.dashboard_sign_in_with(OP, &headers).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{site:?}");
    }
    gw.stop().await;
}
