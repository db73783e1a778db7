//! Which URLs may carry what the gateway sends ([`private_transport`], [`web_url`]): https, or
//! plain http to this machine only (127.0.0.0/8, `::1`, `localhost`) — webhooks, MCP
//! upstreams, the SSO provider, the Slack Web API, and the operator commands' gateway. A leaf:
//! it imports nothing else of the config.

/// Whether the http(s) URL `u` keeps what is sent to it from the network between: https, or
/// http to a loopback host (`127.0.0.0/8`, `::1`, `localhost`), which no packet leaves the
/// machine for. Plain http elsewhere hands a webhook's body (one-time links, arguments) or an
/// upstream's bearer token, tools and results to anyone on the path, free to read and change.
pub fn private_transport(u: &str) -> bool {
    url::Url::parse(u)
        .is_ok_and(|x| x.scheme() == "https" || (x.scheme() == "http" && loopback(&x)))
}

/// Whether `url`'s host is this machine ([`assent_api::loopback_host`]).
fn loopback(url: &url::Url) -> bool {
    assent_api::loopback_host(url)
}

/// `s` parsed when it is an https URL ([`private_transport`]: http on loopback) without
/// credentials, query or fragment — the provider and Slack endpoints (`oidc.issuer`,
/// `oidc.redirect_url`, `slack.api_url`); else why not, naming the setting `what`. A URL with
/// credentials is not repeated in the error (found by review: `https://:SECRET@host`, a
/// password without a user name, passed, and a refused one was echoed into the log).
pub(crate) fn web_url(what: &str, s: &str) -> Result<url::Url, String> {
    let u = url::Url::parse(s).map_err(|e| format!("{what} `{s}` is not a URL: {e}"))?;
    let ok_scheme = u.scheme() == "https" || (u.scheme() == "http" && loopback(&u));
    let credentials = !u.username().is_empty() || u.password().is_some();
    if !ok_scheme || u.query().is_some() || u.fragment().is_some() || credentials {
        let shown = match credentials {
            true => "(not shown: it holds credentials)".to_string(),
            false => format!("`{s}`"),
        };
        return Err(format!(
            "{what} {shown} must be an https URL (http only on loopback) without credentials, query or fragment"
        ));
    }
    Ok(u)
}
