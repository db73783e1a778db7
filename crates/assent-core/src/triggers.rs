//! Confirmation triggers beyond policy and risk tier (seed 002 "When confirmations trigger"):
//! thresholds — rate (calls per tool per session, or per agent across its sessions, per
//! window), cost (a numeric argument summed per session, or per agent across its sessions over
//! a window), output size — and scope drift — path arguments outside configured roots after
//! normalisation (`..`, symlinks), URL arguments whose host is outside the allowed domains.
//!
//! Governance rule keys (see `docs/policy.md`):
//! `thresholds: {rate: {max: N, per_seconds: S, per: session|agent}, cost: {argument: amount,
//! max_per_session: X, max_per_agent: Y, per_seconds: S}, output_bytes: N}` and `scope: {paths: {arguments: [path], roots: [/srv/data]},
//! domains: {arguments: [url], allow: ["*.example.com"]}}`.
//!
//! The agent picks its session id, so a count per session is the agent's to reset: `per: agent`
//! (rate) and `max_per_agent` (cost) count the agent's calls in all its sessions instead.
//!
//! Everything here is pure: the caller passes the session's earlier calls, the agent's calls in
//! the agent-wide windows, and a function that resolves symlinks ([`Observations`]). What the thresholds need from the history, kept small
//! by the store, is [`window`].

use crate::arg_path::lookup;
use crate::session_risk::CLEAN_SESSION;
pub use crate::session_risk::SessionRisk;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Component, Path, PathBuf};

mod scope_args;
pub mod window;

pub use scope_args::MAX_SCOPE_VALUES;
use scope_args::violations;

/// `thresholds` of a governance rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// At most `max` calls per `per_seconds` (per agent session, or per agent across its
    /// sessions with `per: agent`; of the tools the rule covers) run without confirmation.
    /// Each of the three, written with no value, is a load error ([`crate::json::written`]).
    #[serde(default, deserialize_with = "crate::json::written")]
    pub rate: Option<RateLimit>,
    /// The sum of a numeric argument over the session may reach `max_per_session`, and over the
    /// agent's calls in all its sessions in the last `per_seconds` may reach `max_per_agent`,
    /// without confirmation.
    #[serde(default, deserialize_with = "crate::json::written")]
    pub cost: Option<CostLimit>,
    /// A tool result larger than this many bytes (its JSON text) is held for an operator
    /// before it reaches the agent. Applies to results reported to `POST /v1/tool-results`:
    /// by the MCP proxy and hub for every forwarded call, by a REST agent that reports its
    /// own. The call has already run: this withholds its result, not its side effects.
    #[serde(default, deserialize_with = "crate::json::written")]
    pub output_bytes: Option<u64>,
}

/// `thresholds.rate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Calls allowed in the window without confirmation.
    pub max: u64,
    /// Window length in seconds (at least 1).
    pub per_seconds: u64,
    /// Whose calls count: the session's (the default, the meaning before `per` existed) or the
    /// agent's in all its sessions.
    #[serde(default, skip_serializing_if = "Per::is_session")]
    pub per: Per,
}

/// Whose earlier calls a rate threshold counts (`thresholds.rate.per`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    /// `session`: the calls of the call's agent session. The agent chooses its session id, so
    /// an agent that sends each call under a new one resets this count: use [`Per::Agent`]
    /// against an agent that may be hostile.
    #[default]
    Session,
    /// `agent`: the calls of the agent in all its sessions.
    Agent,
}

impl Per {
    /// Whether this is the default, [`Per::Session`] (left out when a rule is written back).
    pub fn is_session(&self) -> bool {
        *self == Per::Session
    }
}

/// `thresholds.cost`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostLimit {
    /// The argument (dotted path allowed) that holds the cost of one call.
    pub argument: String,
    /// Largest session total (this call included, over the whole session) that runs without
    /// confirmation. The agent chooses its session id, so it can start a new total at will.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::json::written"
    )]
    pub max_per_session: Option<f64>,
    /// Largest agent total (this call included, over the agent's calls in all its sessions in
    /// the last `per_seconds`) that runs without confirmation. Needs `per_seconds`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::json::written"
    )]
    pub max_per_agent: Option<f64>,
    /// The window of `max_per_agent`, in seconds (1 to [`MAX_RATE_WINDOW_SECONDS`]); only with
    /// `max_per_agent` (the session total is not windowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_seconds: Option<u64>,
}

impl CostLimit {
    /// The start of the `max_per_agent` window ending at `now_ms` (Unix ms, exclusive);
    /// `None` without an agent-wide total.
    pub fn agent_since(&self, now_ms: i64) -> Option<i64> {
        match (self.max_per_agent, self.per_seconds) {
            (Some(_), Some(s)) => Some(window_start_ms(now_ms, s)),
            _ => None,
        }
    }
}

/// Largest `thresholds.rate.max`: calls per window (issue 10 §10).
pub const MAX_RATE_COUNT: u64 = 1_000_000;
/// Longest `thresholds.rate.per_seconds` window: 7 days, in seconds (issue 10 §10).
pub const MAX_RATE_WINDOW_SECONDS: u64 = 604_800;
/// Largest `thresholds.output_bytes`: 1 GiB (issue 10 §10).
pub const MAX_OUTPUT_BYTES: u64 = 1 << 30;

/// `Err("NAME N is out of range (MIN to MAX UNIT)")` unless `min <= value <= max`: the load-time
/// bound check of every duration and count in a governance rule (issue 10 §10).
pub(crate) fn in_range(
    name: &str,
    value: u64,
    min: u64,
    max: u64,
    unit: &str,
) -> Result<(), String> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{name} {value} is out of range ({min} to {max} {unit})"
        ))
    }
}

impl Thresholds {
    /// Checks the values against the bounds of issue 10 §10; `Err` names the bad key, its value
    /// and the accepted range: `rate.max` 1 to [`MAX_RATE_COUNT`], `rate.per_seconds` 1 to
    /// [`MAX_RATE_WINDOW_SECONDS`], `cost.max_per_session` and `cost.max_per_agent` finite and
    /// ≥ 0 (at least one of them), `cost.per_seconds` 1 to [`MAX_RATE_WINDOW_SECONDS`] and
    /// given exactly when `cost.max_per_agent` is, `output_bytes` 1 to [`MAX_OUTPUT_BYTES`].
    pub fn validate(&self) -> Result<(), String> {
        if let Some(r) = &self.rate {
            in_range("thresholds.rate.max", r.max, 1, MAX_RATE_COUNT, "calls")?;
            // An agent-wide window is read up to its newest `AGENT_CALLS_CAP` calls: a limit
            // at or above it could never be counted (every call past the cap is held).
            if r.per == Per::Agent && r.max >= window::AGENT_CALLS_CAP as u64 {
                return Err(format!(
                    "thresholds.rate.max {} with per: agent is out of range (below {}: the agent's calls in the window are counted up to that many)",
                    r.max,
                    window::AGENT_CALLS_CAP
                ));
            }
            in_range(
                "thresholds.rate.per_seconds",
                r.per_seconds,
                1,
                MAX_RATE_WINDOW_SECONDS,
                "seconds",
            )?;
        }
        if let Some(c) = &self.cost {
            c.validate()?;
        }
        if let Some(n) = self.output_bytes {
            in_range("thresholds.output_bytes", n, 1, MAX_OUTPUT_BYTES, "bytes")?;
        }
        Ok(())
    }
}

impl CostLimit {
    /// The checks of [`Thresholds::validate`] on `thresholds.cost`; `Err` names the bad key.
    fn validate(&self) -> Result<(), String> {
        if self.argument.is_empty() {
            return Err("thresholds.cost.argument must name an argument".into());
        }
        for (key, max) in [
            ("max_per_session", self.max_per_session),
            ("max_per_agent", self.max_per_agent),
        ] {
            if let Some(m) = max
                && (!m.is_finite() || m < 0.0)
            {
                return Err(format!(
                    "thresholds.cost.{key} {m} is out of range (a finite number ≥ 0)"
                ));
            }
        }
        match (self.max_per_session, self.max_per_agent, self.per_seconds) {
            (None, None, _) => Err(
                "thresholds.cost needs max_per_session, max_per_agent (with per_seconds) or both"
                    .into(),
            ),
            (_, Some(_), None) => Err(format!(
                "thresholds.cost.max_per_agent needs per_seconds: the window the agent's total is summed over (1 to {MAX_RATE_WINDOW_SECONDS} seconds)"
            )),
            (_, None, Some(_)) => Err(
                "thresholds.cost.per_seconds is the window of max_per_agent and needs it (max_per_session counts the whole session, without a window)"
                    .into(),
            ),
            (_, _, Some(s)) => in_range(
                "thresholds.cost.per_seconds",
                s,
                1,
                MAX_RATE_WINDOW_SECONDS,
                "seconds",
            ),
            (_, None, None) => Ok(()),
        }
    }
}

/// `scope` of a governance rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScopeSpec {
    /// Path arguments and the roots they must stay under (either, written with no value, is
    /// a load error: [`crate::json::written`]).
    #[serde(default, deserialize_with = "crate::json::written")]
    pub paths: Option<PathScope>,
    /// URL arguments and the hosts they may name.
    #[serde(default, deserialize_with = "crate::json::written")]
    pub domains: Option<DomainScope>,
}

/// `scope.paths`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathScope {
    /// Argument names (dotted paths allowed); a string or an array of strings each.
    pub arguments: Vec<String>,
    /// Absolute directories.
    pub roots: Vec<String>,
    /// Whether every argument named must be present: `true` holds a call missing one in every
    /// spelling (the tool would use a default of its own, which no root vouches for); `false`,
    /// the default, checks only those present (a rule may name arguments only some of its
    /// tools take).
    #[serde(default)]
    pub required: bool,
}

/// `scope.domains`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainScope {
    /// Argument names (dotted paths allowed); a URL string or an array of them each.
    pub arguments: Vec<String>,
    /// Host names; `*.example.com` matches any subdomain of example.com (not example.com
    /// itself); `*` matches every host.
    pub allow: Vec<String>,
    /// Whether every argument named must be present, as [`PathScope::required`].
    #[serde(default)]
    pub required: bool,
}

impl ScopeSpec {
    /// Checks the values; `Err` names the bad key.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(p) = &self.paths {
            if p.arguments.is_empty() || p.roots.is_empty() {
                return Err("scope.paths needs arguments and roots".into());
            }
            if let Some(r) = p.roots.iter().find(|r| !Path::new(r).is_absolute()) {
                return Err(format!("scope.paths.roots: `{r}` is not an absolute path"));
            }
        }
        if let Some(d) = &self.domains {
            if d.arguments.is_empty() || d.allow.is_empty() {
                return Err("scope.domains needs arguments and allow".into());
            }
            for a in &d.allow {
                let rest = a.strip_prefix("*.").unwrap_or(a);
                if a != "*" && (rest.is_empty() || rest.contains('*')) {
                    return Err(format!(
                        "scope.domains.allow: `{a}` must be a host name, `*.` followed by one, or `*`"
                    ));
                }
            }
        }
        Ok(())
    }
}

pub use crate::escalation::{Escalation, EscalationStep};

/// An earlier call of the same agent session that counts toward thresholds: one that was
/// allowed, is pending or was approved (not one that was denied, rejected or cancelled).
#[derive(Debug, Clone, PartialEq)]
pub struct PriorCall {
    /// Tool name.
    pub tool: String,
    /// MCP server alias.
    pub server: Option<String>,
    /// Unix milliseconds of the proposal.
    pub at_ms: i64,
    /// Its arguments.
    pub arguments: Value,
}

/// What the gatekeeper may observe beyond the call: the time, the session's earlier calls,
/// the agent's earlier calls in all its sessions, what the session has taken in, and how to
/// resolve symlinks.
pub struct Observations<'a> {
    /// Unix milliseconds.
    pub now_ms: i64,
    /// Earlier calls of this agent session (see [`PriorCall`]).
    pub prior_calls: &'a [PriorCall],
    /// Earlier calls of this agent in all its sessions (this one included) that count (see
    /// [`PriorCall`]), at least those inside the longest agent-wide window of the rules
    /// ([`window::WindowNeeds::agent_since`]), with their arguments: what `rate.per: agent`
    /// and `cost.max_per_agent` count. Empty when no rule counts per agent.
    pub agent_calls: &'a [PriorCall],
    /// What the session has taken in so far (untrusted output, private data, egress, changed
    /// tool definitions): raises the risk of its later calls ([`crate::session_risk`]).
    /// [`SessionRisk::CLEAN`] for a clean session.
    pub session: &'a SessionRisk,
    /// Resolves an absolute path as the filesystem would: component by component, a symbolic
    /// link replaced by its target before a later `..` applies (so `link/..` is the parent of
    /// the link's target, not the directory holding the link), components that do not exist
    /// taken as they are. `None` when it cannot be resolved (too long, too many links, a link
    /// that cannot be read): the path is then outside every root. [`lexical_only`] resolves
    /// nothing.
    pub resolve_path: &'a dyn Fn(&Path) -> Option<PathBuf>,
}

/// A `resolve_path` without filesystem access: the path lexically normalised
/// ([`normalize_lexically`]).
pub fn lexical_only(p: &Path) -> Option<PathBuf> {
    Some(normalize_lexically(p))
}

impl Observations<'static> {
    /// No earlier calls, a clean session, lexical path checks only, at time `now_ms`.
    pub fn none(now_ms: i64) -> Self {
        Observations {
            now_ms,
            prior_calls: &[],
            agent_calls: &[],
            session: &CLEAN_SESSION,
            resolve_path: &lexical_only,
        }
    }
}

/// The start of a window of `seconds` ending at `now_ms`, in Unix milliseconds, with checked
/// arithmetic: a window too long to represent starts at `i64::MIN` (every earlier call counts,
/// which holds more calls, never fewer).
pub fn window_start_ms(now_ms: i64, seconds: u64) -> i64 {
    i64::try_from(seconds)
        .ok()
        .and_then(|s| s.checked_mul(1000))
        .and_then(|w| now_ms.checked_sub(w))
        .unwrap_or(i64::MIN)
}

/// `Some(why)` when the calls in the window reach `max` (this call would be one too many).
/// `covered` are the earlier calls of the rule's tools that `limit.per` counts: the session's
/// or the agent's ([`threshold_triggers`] picks them).
pub fn rate_exceeded<'a>(
    limit: &RateLimit,
    covered: impl Iterator<Item = &'a PriorCall>,
    now_ms: i64,
) -> Option<String> {
    let since = window_start_ms(now_ms, limit.per_seconds);
    let n = u64::try_from(covered.filter(|c| c.at_ms > since).count()).unwrap_or(u64::MAX);
    let whose = match limit.per {
        Per::Session => "",
        Per::Agent => " by this agent across its sessions",
    };
    (n >= limit.max).then(|| {
        format!(
            "rate threshold exceeded: {n} earlier call(s){whose} in the last {} s, limit {} without confirmation",
            limit.per_seconds, limit.max
        )
    })
}

fn number(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64).filter(|x| x.is_finite())
}

/// This call's cost at `limit.argument`; `Err(why)` when it is missing, not a number or
/// negative (fail closed: a negative cost would lower the totals and let the calls after it
/// through).
fn this_cost(limit: &CostLimit, args: &Value) -> Result<f64, String> {
    let a = &limit.argument;
    let Some(this) = number(lookup(args, a)) else {
        return Err(format!(
            "cost threshold: argument `{a}` is missing or not a number, so the total cannot be checked"
        ));
    };
    if this < 0.0 {
        return Err(format!(
            "cost threshold: argument `{a}` is negative ({this}); a cost below 0 would lower the total, so it is confirmed by a person"
        ));
    }
    Ok(this)
}

/// `Some(why)` when this call's value of `limit.argument` is missing, not a number or negative
/// (fail closed, whichever totals the limit has), or the session total including this call
/// exceeds `max_per_session`. `covered` are the session's earlier calls of the rule's tools;
/// they count as [`window::cost_of`] reads them (a negative one as 0).
pub fn cost_exceeded<'a>(
    limit: &CostLimit,
    covered: impl Iterator<Item = &'a PriorCall>,
    args: &Value,
) -> Option<String> {
    let this = match this_cost(limit, args) {
        Ok(v) => v,
        Err(why) => return Some(why),
    };
    let max = limit.max_per_session?;
    let a = &limit.argument;
    let before: f64 = covered
        .filter_map(|c| window::cost_of(&c.arguments, a))
        .sum();
    let total = before + this;
    if let Some(why) = uncounted(before, this, a) {
        return Some(why);
    }
    (total > max).then(|| {
        format!(
            "cost threshold exceeded: `{a}` totals {total} this session ({before} before this call), limit {max}"
        )
    })
}

/// `Some(why)` when a total of `before` cannot count a cost of `this` > 0 (the sum rounds
/// back to `before`: past 2^53 a double cannot hold an added 1, and a smaller cost is lost
/// sooner), so the call is confirmed by a person (fail closed). Found by review: a limit of
/// `1e16` (a budget in micro-units) was never reached by calls of cost 1 once the total stood
/// at it, since each sum rounded back, so the agent spent without limit.
fn uncounted(before: f64, this: f64, argument: &str) -> Option<String> {
    (this > 0.0 && before + this == before).then(|| {
        format!(
            "cost threshold: `{argument}` of {this} cannot be added to the total of {before} (too small beside it to count), so it is confirmed by a person"
        )
    })
}

/// `Some(why)` when this call's value of `limit.argument` cannot be counted (as
/// [`cost_exceeded`]), or the agent total including this call — over `covered`, the agent's
/// earlier calls of the rule's tools in all its sessions, those after the start of the last
/// `per_seconds` before `now_ms` — exceeds `max_per_agent`. `None` without `max_per_agent`.
/// A total too large to represent is infinite, so it exceeds every limit.
pub fn agent_cost_exceeded<'a>(
    limit: &CostLimit,
    covered: impl Iterator<Item = &'a PriorCall>,
    args: &Value,
    now_ms: i64,
) -> Option<String> {
    let (max, since, seconds) = match (limit.max_per_agent, limit.per_seconds) {
        (Some(m), Some(s)) => (m, window_start_ms(now_ms, s), s),
        _ => return None,
    };
    let this = match this_cost(limit, args) {
        Ok(v) => v,
        Err(why) => return Some(why),
    };
    let a = &limit.argument;
    let before: f64 = covered
        .filter(|c| c.at_ms > since)
        .filter_map(|c| window::cost_of(&c.arguments, a))
        .sum();
    let total = before + this;
    if let Some(why) = uncounted(before, this, a) {
        return Some(why);
    }
    (total > max).then(|| {
        format!(
            "cost threshold exceeded: `{a}` totals {total} for this agent across its sessions in the last {seconds} s ({before} before this call), limit {max}"
        )
    })
}

/// The rate and cost triggers of `t` that fire for a call with `args`, each as
/// `("rate" | "cost", why)`: `covers` says which earlier calls are of the rule's tools; a
/// per-session limit counts them among `obs.prior_calls`, a per-agent one among
/// `obs.agent_calls`. A cost that cannot be counted fires once; both totals may fire.
pub fn threshold_triggers(
    t: &Thresholds,
    covers: impl Fn(&PriorCall) -> bool,
    args: &Value,
    obs: &Observations<'_>,
) -> Vec<(&'static str, String)> {
    let session = || obs.prior_calls.iter().filter(|c| covers(c));
    let agent = || obs.agent_calls.iter().filter(|c| covers(c));
    // More than the cap read: the window holds calls that were not read, so an agent-wide
    // count or total that has not fired yet is unknown, and holds the call (fail closed).
    let uncounted = obs.agent_calls.len() > window::AGENT_CALLS_CAP;
    let too_many = |what: &str| {
        format!(
            "{what} threshold: this agent made more than {} calls in the window across its sessions, too many to count, so it is confirmed by a person",
            window::AGENT_CALLS_CAP
        )
    };
    let mut fired = Vec::new();
    if let Some(l) = &t.rate {
        let why = match l.per {
            Per::Session => rate_exceeded(l, session(), obs.now_ms),
            Per::Agent => rate_exceeded(l, agent(), obs.now_ms)
                .or_else(|| uncounted.then(|| too_many("rate"))),
        };
        fired.extend(why.map(|w| ("rate", w)));
    }
    if let Some(l) = &t.cost {
        fired.extend(cost_exceeded(l, session(), args).map(|w| ("cost", w)));
        if this_cost(l, args).is_ok() {
            let why = agent_cost_exceeded(l, agent(), args, obs.now_ms)
                .or_else(|| (uncounted && l.max_per_agent.is_some()).then(|| too_many("cost")));
            fired.extend(why.map(|w| ("cost", w)));
        }
    }
    fired
}

/// Normalises `p` without touching the filesystem: removes `.`, resolves `..` against the
/// components before it (never above the root). `p` must be absolute.
pub fn normalize_lexically(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Prefix(x) => out.push(x.as_os_str()),
            Component::RootDir => out.push(Component::RootDir.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(x) => out.push(x),
        }
    }
    out
}

/// Why each path argument is outside `scope.roots` (empty when all are inside). A path is
/// inside when, resolved by `obs.resolve_path` (symlinks, then `..`, as the filesystem walks
/// it), it equals a root or lies under one (roots are resolved the same way). Relative paths,
/// non-string values, paths with NUL bytes and paths that cannot be resolved are outside (fail
/// closed), and so is an argument missing under its name but present in another case, or
/// holding more than [`MAX_SCOPE_VALUES`] paths (none of them resolved).
pub fn path_violations(scope: &PathScope, args: &Value, obs: &Observations<'_>) -> Vec<String> {
    let roots: Vec<PathBuf> = scope
        .roots
        .iter()
        .map(|r| {
            let r = Path::new(r);
            (obs.resolve_path)(r).unwrap_or_else(|| normalize_lexically(r))
        })
        .collect();
    let keys = (&scope.arguments[..], scope.required);
    violations(args, keys, "path scope", "paths", |key, s| {
        let p = Path::new(s);
        if !p.is_absolute() || s.contains('\0') {
            return Some(format!(
                "path scope: `{key}` = {s:?} is not an absolute path, so it cannot be checked against the roots"
            ));
        }
        let lexical = normalize_lexically(p);
        let Some(real) = (obs.resolve_path)(p) else {
            return Some(format!(
                "path scope: `{key}` = {s:?} cannot be resolved (too long, too many symbolic links, or a link that cannot be read), so it cannot be checked against the roots"
            ));
        };
        if roots.iter().any(|r| real.starts_with(r)) {
            return None;
        }
        let via = if real != lexical {
            format!(" (resolves to {})", real.display())
        } else if lexical != p {
            format!(" (normalises to {})", lexical.display())
        } else {
            String::new()
        };
        Some(format!(
            "path scope drift: `{key}` = {s:?}{via} is outside the allowed roots ({})",
            scope.roots.join(", ")
        ))
    })
}

/// Whether `host` (lower case, no trailing dot) matches an `allow` entry.
pub fn host_allowed(host: &str, allow: &[String]) -> bool {
    allow.iter().any(|a| {
        let a = a.to_ascii_lowercase();
        a == "*"
            || match a.strip_prefix("*.") {
                Some(base) => host.len() > base.len() + 1 && host.ends_with(&format!(".{base}")),
                None => host == a.trim_end_matches('.'),
            }
    })
}

/// The start of `s` up to the end of its authority: the scheme and its `:`, the slashes (or
/// backslashes) after it, and the authority up to the first `/`, `?` or `#`.
fn through_authority(s: &str) -> &str {
    let after_scheme = s.find(':').map_or(0, |i| i + 1);
    let rest = &s[after_scheme..];
    let slashes = rest.len() - rest.trim_start_matches(['/', '\\']).len();
    let authority = &rest[slashes..];
    let end = authority.find(['/', '?', '#']).unwrap_or(authority.len());
    &s[..after_scheme + slashes + end]
}

/// Why each URL argument names a host outside `scope.allow` (empty when all are inside).
/// Unparseable URLs, URLs without a host and non-string values are outside (fail closed), and
/// so is an argument missing under its name but present in another case, or holding more than
/// [`MAX_SCOPE_VALUES`] URLs. Hosts
/// are compared as the URL parser normalises them (lower case, IDNA, IP literals). A URL that
/// parsers read differently is outside too, whatever host this one reads: one with a control
/// character anywhere, or a backslash or whitespace before the end of its authority (found by
/// review: `https://docs.example.com\@evil.net/` has the host `docs.example.com` under WHATWG
/// rules, which read `\` as `/`, and `evil.net` under RFC 3986 parsers such as Python's
/// `urlsplit`, which the tool may use).
pub fn domain_violations(scope: &DomainScope, args: &Value) -> Vec<String> {
    let keys = (&scope.arguments[..], scope.required);
    violations(args, keys, "domain scope", "URLs", |key, s| {
        if s.chars().any(char::is_control)
            || through_authority(s).contains(|c: char| c == '\\' || c.is_whitespace())
        {
            return Some(format!(
                "domain scope: `{key}` = {s:?} holds a control character, or a backslash or whitespace before its path, which URL parsers read differently, so it cannot be checked"
            ));
        }
        let url = url::Url::parse(s).ok();
        let host = url.and_then(|u| u.host_str().map(|h| h.trim_end_matches('.').to_string()));
        match host {
            None => Some(format!(
                "domain scope: `{key}` = {s:?} is not a URL with a host, so it cannot be checked"
            )),
            Some(h) if !host_allowed(&h, &scope.allow) => Some(format!(
                "domain scope drift: `{key}` names host `{h}`, outside the allowed domains ({})",
                scope.allow.join(", ")
            )),
            Some(_) => None,
        }
    })
}

#[cfg(test)]
mod tests;
