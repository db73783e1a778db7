//! The operator commands' side of the gateway's `/v1` API: [`connect`] (the shared
//! `assent_api::Client` for `--url` and `--api-key` or `--api-key-file` ([`api_key`]),
//! refused when no key is set) and the printing every list command shares, [`print_json`] (a
//! typed body as the API's pretty JSON) and [`print_list`] (`--json`, or each item's text, or a line saying there is none). The
//! routes and the bodies are `assent_api`'s; the texts of cards and lines are the commands'
//! and `render`'s.

use crate::args::Remote;
use anyhow::{Result, anyhow};
use assent_api::{Client, ClientError};
use serde::Serialize;

/// The client of `r`'s gateway (`--url`, trailing `/` dropped) with the operator's key
/// ([`api_key`]). Errors: `ASSENT_API_KEY is not set (an operator's key)` when no key is
/// given, [`api_key`]'s for a key file that cannot be used; `cannot reach the gateway at URL
/// (builder error)`, as reqwest words it, for a URL no request can be sent to. A gateway that refuses a call is the call's
/// [`ClientError`], printed `CODE: message`; one that cannot be reached prints
/// `cannot reach the gateway at URL (cause)`; a URL in plain http to a host that is not this
/// machine (127.0.0.0/8, `::1`, `localhost`) is refused before anything is sent unless
/// `--insecure-http` is given (found by review: the operator's key went out in clear text,
/// while the gateway itself holds its webhooks and upstreams to https).
pub(crate) fn connect(r: &Remote) -> Result<Client> {
    let key = api_key(r, "an operator's key")?;
    check_transport(r)?;
    Client::new(&r.url, &key).map_err(|e| match e {
        ClientError::Config(_) => anyhow!(
            "cannot reach the gateway at {} (builder error)",
            r.url.trim_end_matches('/')
        ),
        e => e.into(),
    })
}

/// The largest key file read, in bytes: a key is a line, not a document.
const KEY_FILE_LIMIT: u64 = 4096;

/// The API key `r` names: `--api-key`/`ASSENT_API_KEY`, or the one line of
/// `--api-key-file`/`ASSENT_API_KEY_FILE` (surrounding white space dropped). `whose` words the
/// error when neither is given: `ASSENT_API_KEY is not set (WHOSE)`. Errors, each naming the
/// file: both given (which one is meant is not guessed), a file that cannot be read, is larger
/// than 4 KiB, is not UTF-8, is empty, or holds white space or a control character inside the
/// key (a second line, a pasted note: sent, it would only fail at the gateway, or be a header
/// injection attempt).
pub(crate) fn api_key(r: &Remote, whose: &str) -> Result<String> {
    let path = match (&r.api_key, &r.api_key_file) {
        (Some(_), Some(_)) => {
            return Err(anyhow!(
                "the key is given twice: --api-key (or ASSENT_API_KEY) and --api-key-file (or ASSENT_API_KEY_FILE); give one"
            ));
        }
        (Some(key), None) => return Ok(key.clone()),
        (None, None) => return Err(anyhow!("ASSENT_API_KEY is not set ({whose})")),
        (None, Some(path)) => path,
    };
    let shown = path.display();
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(
            std::fs::File::open(path).map_err(|e| anyhow!("{shown}: cannot read the key: {e}"))?,
            KEY_FILE_LIMIT + 1,
        ),
        &mut text,
    )
    .map_err(|e| anyhow!("{shown}: cannot read the key: {e}"))?;
    if text.len() as u64 > KEY_FILE_LIMIT {
        return Err(anyhow!(
            "{shown}: larger than {KEY_FILE_LIMIT} bytes; a key file holds one line"
        ));
    }
    let key = text.trim();
    if key.is_empty() {
        return Err(anyhow!("{shown}: holds no key"));
    }
    if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(anyhow!(
            "{shown}: the key holds white space or a control character (more than one line?)"
        ));
    }
    Ok(key.to_string())
}

/// Refuses `r.url` when it would carry the key in clear text to another machine: a URL whose
/// scheme is not `https` (read as the HTTP client reads it: any case, surrounding white space
/// dropped) unless its host is this machine's loopback, without `--insecure-http`. Found by
/// review: the operator key went out over plain http to any host; then `HTTP://` and a
/// leading space passed a check that compared the text; `assent mcp` sent the agent key
/// unchecked.
pub(crate) fn check_transport(r: &Remote) -> Result<()> {
    let url = r.url.trim();
    if r.insecure_http || assent_server::config::urls::private_transport(url) {
        return Ok(());
    }
    Err(anyhow!(
        "refusing to send the key to {} over plain http: anyone on the network path could read it; use https, or --insecure-http when that network is yours",
        url.trim_end_matches('/')
    ))
}

/// Prints `body` as the API gives it: pretty JSON with every object's keys in sorted order
/// (through `serde_json::Value`, whose maps are sorted), one trailing newline. C1 controls,
/// DEL, bidirectional and invisible characters, which JSON may carry raw, are written as
/// `\uXXXX` escapes ([`assent_core::template::visible_json_pretty`]): the same JSON value (a
/// receipt printed so still verifies), but nothing an agent sent acts on the terminal (found
/// by review: `--json` printed a one-byte CSI, U+009B, raw).
pub(crate) fn print_json<B: Serialize>(body: &B) -> Result<()> {
    let v = serde_json::to_value(body)?;
    println!("{}", assent_core::template::visible_json_pretty(&v));
    Ok(())
}

/// Prints a list answer and returns exit status 0: with `as_json` the whole `body`
/// ([`print_json`]); else `empty` (when given) if `items` is empty, then each item's text as
/// `show` writes it (its own line ends included), each line made [`crate::render::inert`].
pub(crate) fn print_list<B: Serialize, T>(
    body: &B,
    items: &[T],
    as_json: bool,
    empty: Option<&str>,
    show: impl Fn(&T) -> String,
) -> Result<i32> {
    if as_json {
        print_json(body)?;
        return Ok(0);
    }
    if let (true, Some(empty)) = (items.is_empty(), empty) {
        println!("{empty}");
    }
    for t in items {
        // An item's text quotes what agents and MCP servers sent (questions, tool
        // descriptions): no control character acts on the terminal.
        for line in show(t).lines() {
            println!("{}", crate::render::inert(line));
        }
    }
    Ok(0)
}
