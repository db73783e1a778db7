//! The shared test kit at the bottom of the integration binary: the default agent and
//! governance files, gateways ([`Gw`]) served on a loopback port over a real SQLite file or a
//! PostgreSQL schema, as [`crate::backend`] chooses (`start*` over a data directory the test keeps, `serve*` over a temporary one the gateway
//! owns), and one helper per step of the approval's life cycle — propose a call (allowed, held
//! for approval or denied), decide it as an operator (approve, deny, edit), read or long-poll
//! the approval, redeem its token, cancel — plus plan submission and small JSON readers. It
//! checks nothing beyond what a helper's name promises (`held` asserts 202, `as_agent` 200);
//! the tests keep their own assertions. Test modules import from here; it imports none of them
//! (only `backend`, the kit's own bottom layer).

pub use crate::backend::{
    Param, Sql, audit_count, block_writes, database, off_runtime, on_postgres, sqlite_only,
};
use assent_core::policy::Registry;
use assent_server::config::{Principal, PrincipalKind};
use assent_server::{AppState, Loopback, Settings};
use assent_store::Store;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::path::Path;

/// The key of operator `alice` (role `finance`, the approver of `pay`).
pub const OP: &str = "alice-key";
/// The key of agent `bot`.
pub const BOT: &str = "bot-key";

/// Agent `bot`: `read`, `pay` (held over 100, with a message template), `quick`, `lenient`,
/// and MCP server `fs` with `read_file` and `write_file` (always held).
pub const AGENTS: &str = assent_testkit::fixtures::BOT_AGENT;
pub use assent_testkit::fixtures::policy;

/// A rule list: `pay` counts its `amount` argument against a cost threshold of 100 a session.
pub const COST_RULE: &str =
    "- tool: pay\n  thresholds: {cost: {argument: amount, max_per_session: 100}}\n";

/// [`GOV_RULES`]' `pay` rule with a side effect naming the card number, which `redact` masks
/// (policy `acme.test.rules-v1`).
pub fn redacting_gov() -> String {
    policy(
        "acme.test.rules-v1",
        r#"
- tool: pay
  approvers: [finance]
  side_effects: "Charges card {{tool_args.card.number}} for {{tool_args.amount}}."
  redact: [card.number]
  approval: {condition: {args_match: {card.number: {pattern: "^4"}}}}
"#,
    )
}
/// The agent file of agent `id` with one local tool, `tool` (the value of its list item:
/// `alias: wire`, `{alias: pay, approval: true}`).
pub fn one_tool_agent(id: &str, tool: &str) -> String {
    format!("metadata: {{id: {id}}}\naction_space:\n  local_tools:\n    - {tool}\n")
}
/// The kit's agent `other`: its `pay` is always held; its file accepts `bot` as its
/// orchestrator (`metadata.annotations` `assent/orchestrators`), so `bot` may declare it a
/// local delegate.
pub fn other_agent() -> String {
    let accepts = "{id: other, annotations: {assent/orchestrators: bot}}";
    one_tool_agent("other", "{alias: pay, approval: true}").replacen("{id: other}", accepts, 1)
}
/// The rules of governance [`gov`]: `pay` needs the finance role; `quick` (rejects) and
/// `lenient` (approves, R1) time out after 1 s.
pub const GOV_RULES: &str = r#"
- tool: pay
  approvers: [finance]
- tool: quick
  approval: true
  timeout_seconds: 1
- tool: lenient
  approval: true
  timeout_seconds: 1
  default_decision: approve
  risk_tier: R1
"#;
/// Governance `acme.test.rules-v1` with [`GOV_RULES`].
pub fn gov() -> String {
    policy("acme.test.rules-v1", GOV_RULES)
}

/// Operator `name` holding `roles`, whose key is `NAME-key`.
pub fn operator(name: &str, roles: &[&str]) -> Principal {
    let roles = roles.iter().map(|r| r.to_string()).collect();
    principal(
        name,
        &format!("{name}-key"),
        PrincipalKind::Operator { roles },
    )
}

fn principal(name: &str, key: &str, kind: PrincipalKind) -> Principal {
    Principal::with_key(name, key, kind)
}

/// A running gateway: its base URL, an HTTP client, and the state it serves (store, registry).
pub struct Gw {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub url: String,
    /// The client every helper sends with.
    pub http: reqwest::Client,
    served: Loopback,
    /// The served state (the tests read the store and the registry through it).
    pub state: AppState,
    /// The data directory (keys; the SQLite file or, on PostgreSQL, the key to its schema).
    pub data_dir: std::path::PathBuf,
    /// The data directory when the gateway owns it ([`serve`]), removed after it stops.
    dir: Option<tempfile::TempDir>,
}

/// The default gateway: [`AGENTS`] under [`gov`], 300 s tokens and approval timeout.
pub async fn start(dir: &Path) -> Gw {
    start_with(dir, 300_000).await
}

/// [`start_opts`] with a 300 s approval timeout; tokens live `token_ttl_ms` milliseconds.
pub async fn start_with(dir: &Path, token_ttl_ms: i64) -> Gw {
    start_opts(
        dir,
        token_ttl_ms,
        Settings {
            approval_timeout_ms: Some(300_000),
            ..Settings::default()
        },
    )
    .await
}

/// [`start_reg`] with [`AGENTS`] and [`gov`].
pub async fn start_opts(dir: &Path, token_ttl_ms: i64, settings: Settings) -> Gw {
    start_reg(dir, token_ttl_ms, settings, AGENTS, &gov()).await
}

/// A gateway whose agent `bot` is declared by `agents` (and `other`, whose `pay` is always held) under the
/// governance file `gov`.
pub async fn start_reg(
    dir: &Path,
    token_ttl_ms: i64,
    settings: Settings,
    agents: &str,
    gov: &str,
) -> Gw {
    start_custom(dir, token_ttl_ms, settings, agents, gov, |_| {}).await
}

/// A gateway with an inline policy: `agents` under `gov`, default settings, 300 s tokens.
pub async fn start_policy(dir: &Path, agents: &str, gov: &str) -> Gw {
    start_reg(dir, 300_000, Settings::default(), agents, gov).await
}

/// A gateway with the default policy and `customize` applied to its state (webhooks,
/// throttles, checkpoints) before it serves.
pub async fn start_tuned(dir: &Path, customize: impl FnOnce(&mut AppState)) -> Gw {
    start_custom(dir, 300_000, Settings::default(), AGENTS, &gov(), customize).await
}

/// [`start_reg`], with `customize` applied to the state before it serves (webhooks, links).
/// Principals: operators `alice` (finance) and `olaf` (ops), agents `bot` and `other`, each
/// with the key `NAME-key`.
pub async fn start_custom(
    dir: &Path,
    token_ttl_ms: i64,
    settings: Settings,
    agents: &str,
    gov: &str,
    customize: impl FnOnce(&mut AppState),
) -> Gw {
    let reg = Registry::load(
        &[
            ("bot.agf.yaml".into(), agents.into()),
            ("other.agf.yaml".into(), other_agent()),
        ],
        &[("gov.yaml".into(), gov.into())],
    )
    .unwrap();
    let operator = |role: &str| PrincipalKind::Operator {
        roles: vec![role.into()],
    };
    let agent = |id: &str| PrincipalKind::Agent {
        agent_id: id.into(),
    };
    let principals = vec![
        principal("alice", "alice-key", operator("finance")),
        principal("olaf", "olaf-key", operator("ops")),
        principal("bot", "bot-key", agent("bot")),
        principal("other", "other-key", agent("other")),
    ];
    let database = database(dir);
    let store = off_runtime(|| {
        Store::open_database(
            dir,
            dir,
            &database,
            token_ttl_ms,
            std::sync::Arc::new(assent_server::WireEnvelopes),
        )
    })
    .unwrap();
    let mut state = AppState::new(store, reg, principals, settings);
    customize(&mut state);
    let served = Loopback::start(state.clone()).await.unwrap();
    let http = reqwest::Client::new();
    // Start-up (its sweeps and reads of the store) is over, done or failed, before a test
    // goes on: one that took the database's lock at once raced it (found on PostgreSQL: a
    // test's `LOCK TABLE audit` stalled start-up's read of the audit chain, and so its own
    // first request). A request is served only after start-up.
    let _ = http.get(format!("{}/healthz", served.url)).send().await;
    Gw {
        url: served.url.clone(),
        http,
        served,
        state,
        data_dir: dir.to_path_buf(),
        dir: None,
    }
}

/// [`start`] over a fresh temporary data directory that the gateway owns (for tests that
/// never reopen it).
pub async fn serve() -> Gw {
    serve_in(async |dir| start(dir).await).await
}

/// [`start_opts`] with the default [`Settings`] changed by `tune` (e.g. a lower pending cap)
/// and 300 s tokens, over a data directory the gateway owns.
pub async fn serve_with(tune: impl FnOnce(&mut Settings)) -> Gw {
    let mut settings = Settings::default();
    tune(&mut settings);
    serve_in(async |dir| start_opts(dir, 300_000, settings).await).await
}

/// [`start_policy`] (`agents` under `gov`) over a data directory the gateway owns.
pub async fn serve_policy(agents: &str, gov: &str) -> Gw {
    serve_in(async |dir| start_policy(dir, agents, gov).await).await
}

/// Runs `start` over a fresh temporary data directory and hands that directory to the gateway.
async fn serve_in(start: impl AsyncFnOnce(&Path) -> Gw) -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let mut gw = start(dir.path()).await;
    gw.dir = Some(dir);
    gw
}

/// The `approval_id` of a held call's (or submitted plan's) answer; panics naming the body.
pub fn approval_id(b: &Value) -> String {
    b["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no approval_id in {b}"))
        .to_string()
}

/// The `token` of an approved approval as its agent sees it; panics naming the body.
pub fn token_of(v: &Value) -> String {
    v["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token in {v}"))
        .to_string()
}

impl Gw {
    /// Runs `f` with this gateway's store off the async runtime (its PostgreSQL session blocks
    /// on a runtime of its own): for the tests that read the store directly.
    pub fn with_store<T: Send>(&self, f: impl FnOnce(&Store) -> T + Send) -> T {
        off_runtime(|| f(&self.state.store))
    }
    /// A connection of the test's own to this gateway's database (either backend).
    pub fn sql(&self) -> Sql {
        Sql::open(&self.data_dir)
    }
    /// Sends `body` (as JSON) to `method path` with bearer `key`; the status and the JSON body
    /// (`Null` when the body is not JSON).
    pub async fn req(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut r = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.url));
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let s = resp.status();
        (s, resp.json().await.unwrap_or(Value::Null))
    }
    /// `GET path` with bearer `key`.
    pub async fn get(&self, path: &str, key: &str) -> (StatusCode, Value) {
        self.req("GET", path, Some(key), None).await
    }
    /// `POST path` with bearer `key` and a JSON `body`.
    pub async fn post(&self, path: &str, key: &str, body: Value) -> (StatusCode, Value) {
        self.req("POST", path, Some(key), Some(body)).await
    }
    /// Sends `method path` without a body, with bearer `key` when given, and hands back the
    /// raw response (status, headers, text).
    pub async fn raw(&self, method: &str, path: &str, key: Option<&str>) -> reqwest::Response {
        let url = format!("{}{path}", self.url);
        let mut r = self.http.request(method.parse().unwrap(), url);
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        r.send().await.unwrap()
    }
    /// Sends `GET path` with bearer `key` and hands back the raw response (headers, text).
    pub async fn get_raw(&self, path: &str, key: &str) -> reqwest::Response {
        self.raw("GET", path, Some(key)).await
    }
    /// The body of `GET path` with bearer `key`, as text (JSONL exports).
    pub async fn get_text(&self, path: &str, key: &str) -> String {
        self.get_raw(path, key).await.text().await.unwrap()
    }
    /// Proposes `tool(args)` as agent `bot` in session `s1` (`POST /v1/tool-calls`).
    pub async fn propose(&self, tool: &str, args: Value) -> (StatusCode, Value) {
        self.req(
            "POST",
            "/v1/tool-calls",
            Some("bot-key"),
            Some(json!({"agent": "bot", "session_id": "s1", "tool": tool, "arguments": args})),
        )
        .await
    }
    /// Proposes `tool(args)` as `bot` in `session`, with `extra`'s fields (`server`,
    /// `device_id`, `trace_id`, `plan_id`…) added to the body.
    pub async fn call(
        &self,
        session: &str,
        tool: &str,
        args: Value,
        extra: Value,
    ) -> (StatusCode, Value) {
        let mut body =
            json!({"agent": "bot", "session_id": session, "tool": tool, "arguments": args});
        if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
            b.extend(e);
        }
        self.req("POST", "/v1/tool-calls", Some("bot-key"), Some(body))
            .await
    }
    /// Proposes `tool(args)` as `bot` in `session` (no extra fields).
    pub async fn propose_in(&self, session: &str, tool: &str, args: Value) -> (StatusCode, Value) {
        self.call(session, tool, args, json!({})).await
    }
    /// Proposes a call that must be held (asserts 202) and returns its approval id.
    pub async fn held(&self, session: &str, tool: &str, args: Value) -> String {
        let (s, b) = self.propose_in(session, tool, args).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        b["approval_id"].as_str().unwrap().to_string()
    }
    /// [`Gw::propose`]s a call and returns the approval id it was held under (no status check).
    pub async fn pending(&self, tool: &str, args: Value) -> String {
        approval_id(&self.propose(tool, args).await.1)
    }
    /// Decides approval `id` as the operator with `key`: `d` is `approve` or `deny`, the
    /// reason `test`.
    pub async fn decide(&self, id: &str, key: &str, d: &str) -> (StatusCode, Value) {
        self.decide_with(id, key, json!({"decision": d, "reason": "test"}))
            .await
    }
    /// Posts the decision `body` (scope, edited arguments, reason…) on approval `id` with `key`.
    pub async fn decide_with(&self, id: &str, key: &str, body: Value) -> (StatusCode, Value) {
        self.req(
            "POST",
            &format!("/v1/approvals/{id}/decision"),
            Some(key),
            Some(body),
        )
        .await
    }
    /// Approves `id` as operator alice with the `args` edited in (approve with modifications).
    pub async fn edit(&self, id: &str, args: Value) -> (StatusCode, Value) {
        self.decide_with(id, OP, json!({"decision": "approve", "arguments": args}))
            .await
    }
    /// `GET /v1/approvals/{id}` (a `?query` may follow the id) with `key`.
    pub async fn approval(&self, id: &str, key: &str) -> (StatusCode, Value) {
        self.get(&format!("/v1/approvals/{id}"), key).await
    }
    /// The approval as its agent sees it (with the token once approved); asserts 200.
    pub async fn as_agent(&self, id: &str) -> Value {
        let (s, b) = self.approval(id, "bot-key").await;
        assert_eq!(s, StatusCode::OK, "{b}");
        b
    }
    /// Approval `id` rendered as `format` (`approval-request`, `mplp`) for operator alice.
    pub async fn view(&self, id: &str, format: &str) -> (StatusCode, Value) {
        self.approval(&format!("{id}?format={format}"), OP).await
    }
    /// Redeems `token` for `tool(args)` as `bot`, bound to `device` when given.
    pub async fn redeem(
        &self,
        token: &str,
        tool: &str,
        args: Value,
        device: Option<&str>,
    ) -> (StatusCode, Value) {
        self.req(
            "POST",
            "/v1/tokens/redeem",
            Some("bot-key"),
            Some(json!({"token": token, "tool": tool, "arguments": args, "device_id": device})),
        )
        .await
    }
    /// Redeems `token` for `tool(args)` with `key` (any principal; no device).
    pub async fn redeem_as(
        &self,
        key: &str,
        token: &Value,
        tool: &str,
        args: Value,
    ) -> (StatusCode, Value) {
        self.post(
            "/v1/tokens/redeem",
            key,
            json!({"token": token, "tool": tool, "arguments": args}),
        )
        .await
    }
    /// Creates the MPLP `plan` as agent `bot` (`POST /v1/plans`, no session).
    pub async fn create_plan(&self, plan: Value) -> (StatusCode, Value) {
        self.post("/v1/plans", BOT, json!({"agent": "bot", "plan": plan}))
            .await
    }
    /// Submits plan `pid` for approval as agent `bot` (`POST /v1/plans/{pid}/submit`).
    pub async fn submit_plan(&self, pid: &str) -> (StatusCode, Value) {
        let path = format!("/v1/plans/{pid}/submit");
        self.post(&path, BOT, json!({"agent": "bot"})).await
    }
    /// Cancels approval `id` with `key` (`POST /v1/approvals/{id}/cancel`, optional body).
    pub async fn cancel(&self, id: &str, key: &str, body: Option<Value>) -> (StatusCode, Value) {
        let path = format!("/v1/approvals/{id}/cancel");
        self.req("POST", &path, Some(key), body).await
    }
    /// Cancels everything pending in `session` with `key`.
    pub async fn cancel_session(&self, session: &str, key: &str) -> (StatusCode, Value) {
        let path = format!("/v1/sessions/{session}/cancel");
        self.req("POST", &path, Some(key), None).await
    }
    /// Sends every body to `path` at once, each from its own task, and returns the replies.
    pub async fn post_all(
        &self,
        path: &str,
        key: &'static str,
        bodies: impl Iterator<Item = Value>,
    ) -> Vec<(StatusCode, Value)> {
        let futs = bodies.map(|body| {
            let (http, url) = (self.http.clone(), format!("{}{path}", self.url));
            tokio::spawn(async move {
                let r = http
                    .post(url)
                    .bearer_auth(key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let s = r.status();
                (s, r.json::<Value>().await.unwrap())
            })
        });
        futures::future::join_all(futs)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }
    /// Signs in to the dashboard with `key` as a browser does (`GET /ui/login` for its cookie
    /// and CSRF token, then the form): the answer, redirects not followed.
    pub async fn dashboard_sign_in(&self, key: &str) -> reqwest::Response {
        self.dashboard_sign_in_with(key, &[]).await
    }
    /// [`Gw::dashboard_sign_in`] with `headers` on the sign-in's `POST`.
    pub async fn dashboard_sign_in_with(
        &self,
        key: &str,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let login = self.raw("GET", "/ui/login", None).await;
        let cookie = cookie_of(&login);
        let csrf = csrf_of(&login.text().await.unwrap());
        let no_redirects = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let mut post = no_redirects
            .post(format!("{}/ui/login", self.url))
            .header("cookie", cookie)
            .header("content-type", "application/x-www-form-urlencoded");
        for (name, value) in headers {
            post = post.header(*name, *value);
        }
        post.body(format!("csrf={csrf}&key={key}&next=/ui"))
            .send()
            .await
            .unwrap()
    }
    /// [`Gw::dashboard_sign_in`] as [`OP`], which must succeed: the session cookie.
    pub async fn dashboard_session(&self) -> String {
        let resp = self.dashboard_sign_in(OP).await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);
        cookie_of(&resp)
    }
    /// The text of dashboard page `path` as the signed-in browser with session `cookie` gets it.
    pub async fn dashboard_page(&self, path: &str, cookie: &str) -> String {
        let r = self.http.get(format!("{}{path}", self.url));
        let r = r.header("cookie", cookie).send().await.unwrap();
        r.text().await.unwrap()
    }
    /// `POST path` of the dashboard with session `cookie` and `body` labelled `content_type`.
    pub async fn dashboard_post(
        &self,
        path: &str,
        cookie: &str,
        content_type: &str,
        body: String,
    ) -> reqwest::Response {
        let r = self.http.post(format!("{}{path}", self.url));
        let r = r
            .header("cookie", cookie)
            .header("content-type", content_type);
        r.body(body).send().await.unwrap()
    }
    /// Stops serving and waits for the server task (signing the last audit checkpoint).
    pub async fn stop(mut self) {
        let dir = self.dir.take();
        self.served.stop().await.unwrap();
        drop(dir);
    }
}

/// The value of the first `name="csrf"` hidden field of a dashboard page.
pub fn csrf_of(html: &str) -> String {
    let rest = html.split(r#"name="csrf" value=""#).nth(1).unwrap();
    rest.split('"').next().unwrap().to_string()
}

/// The `name=value` of a response's `Set-Cookie`.
pub fn cookie_of(r: &reqwest::Response) -> String {
    let c = r.headers()["set-cookie"].to_str().unwrap();
    c.split(';').next().unwrap().to_string()
}

/// Seconds from an approval's `requested_at` to its `expires_at` (both RFC 3339).
pub fn wait_seconds(approval: &Value) -> i64 {
    let t = |k: &str| {
        time::OffsetDateTime::parse(
            approval[k].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    (t("expires_at") - t("requested_at")).whole_seconds()
}

/// The string `key` of every object in the JSON array `list` (event types, tool states…).
pub fn pluck<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| e[key].as_str().unwrap())
        .collect()
}

/// Asserts that an answer `(s, b)` is status `status` with the error body code `code`
/// (`b["code"]`); a failure prints the body.
#[track_caller]
pub fn assert_error(s: StatusCode, b: &Value, status: StatusCode, code: &str) {
    assert_answer(s, b, "code", status, code);
}

/// Asserts that an answer `(s, b)` is status `status` with the string `value` at `b[key]`
/// (`decision`, `status`…); a failure prints the body.
#[track_caller]
pub fn assert_answer(s: StatusCode, b: &Value, key: &str, status: StatusCode, value: &str) {
    assert_eq!((s, b[key].as_str()), (status, Some(value)), "{b}");
}

/// Asserts that the string field `key` of `b` (`message`, `reason`…) contains `text`; a
/// failure prints the body.
#[track_caller]
pub fn assert_says(b: &Value, key: &str, text: &str) {
    assert!(b[key].as_str().unwrap().contains(text), "{b}");
}

/// Asserts that less than `secs` seconds have passed since `start`; a failure prints `what`
/// and the time taken.
#[track_caller]
pub fn assert_within(start: std::time::Instant, secs: u64, what: &str) {
    let took = start.elapsed();
    assert!(
        took < std::time::Duration::from_secs(secs),
        "{what}: {took:?}"
    );
}

/// [`start_custom`] with [`AGENTS`] under the governance file `gov`, default settings and
/// 300 s tokens.
pub async fn start_gov(dir: &Path, gov: &str, customize: impl FnOnce(&mut AppState)) -> Gw {
    start_custom(dir, 300_000, Settings::default(), AGENTS, gov, customize).await
}

/// Adds the principals `extra` after those `st` serves (a `customize` step of
/// [`start_custom`]).
pub fn add_principals(st: &mut AppState, extra: impl IntoIterator<Item = Principal>) {
    let mut all = (*st.principals()).clone();
    all.extend(extra);
    st.swap_live(assent_server::Live::new((*st.registry()).clone(), all));
}

impl Gw {
    /// `POST /v1/plans/{pid}/cancel` by agent `bot` with `body` (its `reason`); asserts a
    /// `200`: the answer.
    pub async fn cancel_plan(&self, pid: &str, body: Value) -> Value {
        let (s, p) = self
            .post(&format!("/v1/plans/{pid}/cancel"), BOT, body)
            .await;
        assert_eq!(s, StatusCode::OK, "{p}");
        p
    }
}

/// [`start_gov`] serving the registry and principals of the loaded configuration `cfg`
/// (`gov` its governance), and reloading it (`POST /v1/reload`, `SIGHUP`).
pub async fn start_reloading(dir: &Path, gov: &str, cfg: &assent_server::config::Config) -> Gw {
    start_reloading_with(dir, gov, cfg, |_| {}).await
}

/// [`start_reloading`], then `customize` (a `customize` step of [`start_custom`]).
pub async fn start_reloading_with(
    dir: &Path,
    gov: &str,
    cfg: &assent_server::config::Config,
    customize: impl FnOnce(&mut AppState),
) -> Gw {
    start_gov(dir, gov, |st| {
        let live = assent_server::Live::new(cfg.registry.clone(), cfg.principals().unwrap());
        st.swap_live(live);
        let source = assent_server::config::ReloadSource::new(cfg, false);
        st.reload = Some(std::sync::Arc::new(source));
        customize(st);
    })
    .await
}

impl Gw {
    /// `GET` of dashboard page `path` with session `cookie`: the answer.
    pub async fn dashboard_get(&self, path: &str, cookie: &str) -> reqwest::Response {
        let r = self.http.get(format!("{}{path}", self.url));
        r.header("cookie", cookie).send().await.unwrap()
    }
}

/// [`start_gov`] over a data directory the gateway owns.
pub async fn serve_gov(gov: &str, customize: impl FnOnce(&mut AppState)) -> Gw {
    serve_in(async |dir| start_gov(dir, gov, customize).await).await
}

/// The long key of operator `olga` (finance), whom [`start_with_olga`] adds.
pub const OLGA: &str = "olga-0123456789abcdef0123456789abcdef";

/// [`start_tuned`] with operator `olga` (finance, key [`OLGA`]: long enough to pass an
/// address's lock-out once it has authenticated from there) added to the principals.
pub async fn start_with_olga(dir: &Path) -> Gw {
    start_tuned(dir, |st| {
        let mut all = (*st.principals()).clone();
        let roles = vec!["finance".to_string()];
        let kind = PrincipalKind::Operator { roles };
        all.push(Principal::with_key("olga", OLGA, kind));
        st.swap_live(assent_server::Live::new((*st.registry()).clone(), all));
    })
    .await
}

/// One page at `path` read as operator (it must be `200`): its body's length, the body and
/// the path of its `Link` `rel="next"` (`None` without one).
pub async fn listing_page(gw: &Gw, path: &str) -> (usize, Value, Option<String>) {
    let resp = gw.get_raw(path, OP).await;
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    let next = resp.headers().get("link").map(|l| {
        let l = l.to_str().unwrap();
        let inner = l
            .strip_prefix('<')
            .and_then(|l| l.strip_suffix(">; rel=\"next\""));
        inner.unwrap_or_else(|| panic!("{l}")).to_string()
    });
    let text = resp.text().await.unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    (text.len(), body, next)
}
