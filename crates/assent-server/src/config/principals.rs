//! Principals of the configuration (`principals[]`): who may call the API, as an operator
//! with roles, as an agent bound to one agent id, or as an executor of some MCP servers or
//! tools (issue 14 §6: it may only redeem tokens for calls on those), and where each key
//! comes from. Declared
//! principals are checked when the file loads (`declare`); their keys are resolved from the
//! environment only when the server starts (`resolve`), so `assent check` needs no keys.
//! Authentication itself is [`crate::auth`].

use super::raw::{ConfigError, RawPrincipal, at};
use assent_core::policy::Registry;
use assent_core::template::{first_hidden, is_invisible};
use serde_saphyr::Spanned;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::Path;

/// Shortest key accepted from `key_env`, in characters (issue 10 §15).
pub const MIN_KEY_CHARS: usize = 32;

/// What a principal is allowed to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrincipalKind {
    /// A human operator with roles; may decide approvals.
    /// An operator: `roles` are matched against a rule's `approvers`.
    Operator {
        /// Role names.
        roles: Vec<String>,
    },
    /// An agent bound to one agent id; may propose calls and redeem tokens for that id only.
    /// An agent: `agent_id` is the only agent it may act for.
    Agent {
        /// `metadata.id` of the agent.
        agent_id: String,
    },
    /// An executor (issue 14 §6): it may redeem the tokens of the agents in `agents` for a
    /// call on what it executes, and nothing else. `servers` / `tools`: the MCP server aliases
    /// / tool names it executes (`None`: that list does not restrict; at least one is given,
    /// non-empty). Tool names are each agent's own, so `agents` is required (found by review:
    /// an executor redeemed another agent's token for a tool of the same name).
    Executor {
        /// The agent ids whose tokens it may redeem (non-empty).
        agents: Vec<String>,
        /// Server aliases it executes, if restricted by them.
        servers: Option<Vec<String>>,
        /// Tool names it executes, if restricted by them.
        tools: Option<Vec<String>>,
    },
}

/// An authenticated identity from the config. The key is kept only as its SHA-256.
#[derive(Debug, Clone)]
pub struct Principal {
    /// `name`, unique; recorded as the actor of decisions.
    pub name: String,
    /// Operator or agent.
    pub kind: PrincipalKind,
    /// SHA-256 of the key.
    pub key_sha256: [u8; 32],
    /// `owns`: the agent ids this principal owns; with separation of duties they may not
    /// approve those agents' calls (issue 14 §2).
    pub owns: Vec<String>,
    /// `sso`: an operator's single sign-on identity (the value of `oidc.name_claim`): a
    /// dashboard SSO session of that name acts as this principal — its name, so quorum counts
    /// the person once; its `owns` and passkeys — with the roles its groups map to.
    pub sso: Option<String>,
    /// `slack_user_id`: the Slack account (`U…`/`W…`) an operator decides from. Kept here,
    /// beside the Slack map built from the same key, so a reload that moves or removes it
    /// counts the principal as changed (its votes withdrawn), and a quorum vote cast from
    /// Slack stands only while the voter still has the account that cast it
    /// (`standing::vote_stands`). Found by review: a vote cast through a Slack account mapped by
    /// mistake survived the fix of the map, and the account's owner voted a second time.
    pub slack_user_id: Option<String>,
}

impl Principal {
    /// A principal that authenticates with `key` (kept only as its SHA-256), owning no agent:
    /// how an embedding program or a test builds the principals it hands the server, as the
    /// config's `key_env` would.
    pub fn with_key(name: &str, key: &str, kind: PrincipalKind) -> Self {
        Self {
            name: name.into(),
            kind,
            key_sha256: Sha256::digest(key.as_bytes()).into(),
            owns: Vec::new(),
            sso: None,
            slack_user_id: None,
        }
    }

    /// The binding a quorum vote cast with this principal's key keeps (64 hex: SHA-256 over a
    /// tag of its own and the key's digest; migration 0038): start-up withdraws the vote when
    /// the principal's key is another by then (a key rotated by a restart).
    pub fn vote_key_binding(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"assent/vote/key-binding/v1\0");
        h.update(self.key_sha256);
        hex::encode(h.finalize())
    }
}

/// Where a principal's key comes from, before it is resolved.
#[derive(Debug, Clone)]
enum KeySource {
    Env(String),
    Sha256([u8; 32]),
}

/// A principal as the file declares it, its key not yet resolved.
#[derive(Debug, Clone)]
pub(crate) struct Declared {
    name: String,
    kind: PrincipalKind,
    owns: Vec<String>,
    sso: Option<String>,
    slack_user_id: Option<String>,
    key: KeySource,
    line: Option<u64>,
}

/// The line of the principal `name` among `declared` (`None` when it is not there).
pub(crate) fn line_of(declared: &[Declared], name: &str) -> Option<u64> {
    declared
        .iter()
        .find(|d| d.name == name)
        .and_then(|d| d.line)
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64
        || !s
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    {
        return None;
    }
    let v = hex::decode(s).ok()?;
    v.try_into().ok()
}

/// Checks `principals[]` of `path`: unique names, a known kind (an operator has no
/// `agent_id`, an agent has one and no roles, an executor has neither and a non-empty
/// `servers` or `tools` list of names of 1 to 256 bytes; only an executor has those lists), exactly one of `key_env` / `key_sha256` (64
/// lowercase hex), `owns` agent ids of 1 to 256 bytes, an `sso` name ([`sso_of`]) on
/// operators only, each once. Errors name the principal's line.
pub(crate) fn declare(
    path: &Path,
    raw: &[Spanned<RawPrincipal>],
) -> Result<Vec<Declared>, ConfigError> {
    let mut out = Vec::new();
    let mut names = BTreeSet::new();
    let mut ssos = std::collections::BTreeMap::new();
    for p in raw {
        let line = Some(p.referenced.line());
        let r = &p.value;
        name_ok(&r.name).map_err(|m| at(path, line, m))?;
        if !names.insert(r.name.clone()) {
            return Err(at(
                path,
                line,
                format!("principal name `{}` is used twice", r.name),
            ));
        }
        let kind = kind_of(r).map_err(|m| at(path, line, m))?;
        let key = key_of(r).map_err(|m| at(path, line, m))?;
        if let Some(bad) = r.owns.iter().find(|a| a.is_empty() || a.len() > 256) {
            return Err(at(
                path,
                line,
                format!(
                    "principal `{}`: owns `{bad}` is not an agent id (1 to 256 bytes)",
                    r.name
                ),
            ));
        }
        let sso = sso_of(r).map_err(|m| at(path, line, m))?;
        // Compared without case: two values differing only in it would both be refused at
        // sign-in (`dashboard::session`), so one of them is a mistake.
        if let Some(n) = &sso
            && let Some(other) = ssos.insert(n.to_lowercase(), r.name.clone())
        {
            let why = format!("principal `{}`: sso `{n}` is also `{other}`'s", r.name);
            return Err(at(path, line, why));
        }
        // Only an operator has one (`slack:` refuses it on others when configured).
        let slack_user_id = r
            .slack_user_id
            .clone()
            .filter(|_| matches!(kind, PrincipalKind::Operator { .. }));
        out.push(Declared {
            name: r.name.clone(),
            kind,
            owns: r.owns.clone(),
            sso,
            slack_user_id,
            key,
            line,
        });
    }
    Ok(out)
}

/// The actor of a decision by an agent's own user in the MCP client, followed by the agent id
/// (`user-of:bot`): it rests on no operator, and on the agent key that sent it (its binding,
/// [`Principal::vote_key_binding`], kept with the decision; [`crate::standing`] holds it to
/// the principals in force).
pub const IN_CLIENT_USER: &str = "user-of:";

/// Starts of the actor names the gateway writes for deciders that are no principal: a
/// linked single sign-on session (`oidc:NAME`), an agent's user in the client
/// (`user-of:AGENT`), the gateway itself (`system:expiry`, `system:sighup`, …) and a grant
/// (`grant:ID`). Audit records, vote counts and consent revocation (`reload::fallen_names`)
/// go by those names, so no principal may take one (compared without ASCII case).
pub const RESERVED_NAME_PREFIXES: [&str; 4] = [
    super::oidc::NAME_PREFIX,
    IN_CLIENT_USER,
    "system:",
    "grant:",
];

/// Why `name` may not be a principal's name, if it may not: it is empty, longer than 256
/// bytes, has a control or invisible character ([`is_invisible`]: two names that look
/// the same would be two actors), or starts with one of [`RESERVED_NAME_PREFIXES`] (found by
/// review: a principal named `system:expiry` or `user-of:bot` was mixed up with those actors
/// in the audit trail and when consent is withdrawn).
fn name_ok(name: &str) -> Result<(), String> {
    let shown = name.escape_debug();
    if name.is_empty() || name.len() > 256 {
        return Err(format!(
            "principal `{shown}`: its name is not 1 to 256 bytes"
        ));
    }
    if let Some(hidden) = first_hidden(name) {
        return Err(format!(
            "principal `{shown}`: its name has a control or invisible character ({hidden})"
        ));
    }
    let reserved = RESERVED_NAME_PREFIXES.iter().find(|p| {
        name.get(..p.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(p))
    });
    if let Some(p) = reserved {
        return Err(format!(
            "principal `{shown}`: its name starts with `{p}`, kept for the gateway's own actors"
        ));
    }
    Ok(())
}

/// Whether `n` may be a single sign-on name (a configured `sso`, and the name claim's value
/// a sign-in gives, `crate::dashboard::oidc`): 1 to 200 bytes without whitespace, control or
/// invisible characters ([`is_invisible`]: bidi controls, zero-width characters…).
pub(crate) fn sso_name_ok(n: &str) -> bool {
    let odd = |c: char| c.is_control() || c.is_whitespace() || is_invisible(c);
    !n.is_empty() && n.len() <= 200 && !n.chars().any(odd)
}

/// Principal `r`'s `sso` name, or why it may not have it: operators only, 1 to 200 bytes (the
/// longest name a sign-in accepts) without whitespace, control or invisible characters
/// ([`is_invisible`]: one would never match the name the provider sends, and the link
/// would fail unseen), not
/// itself starting with `oidc:` (the name claim's value is written bare; the session is
/// `oidc:<value>`).
fn sso_of(r: &RawPrincipal) -> Result<Option<String>, String> {
    let Some(n) = &r.sso else { return Ok(None) };
    let name = &r.name;
    if r.kind != "operator" {
        return Err(format!(
            "principal `{name}`: only an operator has an sso name"
        ));
    }
    if !sso_name_ok(n) {
        return Err(format!(
            "principal `{name}`: sso `{}` is not a name claim's value (1 to 200 bytes, no whitespace, control or invisible characters)",
            n.escape_debug()
        ));
    }
    if n.starts_with(super::oidc::NAME_PREFIX) {
        return Err(format!(
            "principal `{name}`: sso `{n}` is written without the `{}` prefix",
            super::oidc::NAME_PREFIX
        ));
    }
    Ok(Some(n.clone()))
}

/// The kind of principal `r`, or why it is not one.
fn kind_of(r: &RawPrincipal) -> Result<PrincipalKind, String> {
    let lists = r.servers.is_some() || r.tools.is_some() || r.agents.is_some();
    if lists && r.kind != "executor" {
        return Err(format!(
            "principal `{}`: only an executor has servers, tools or agents",
            r.name
        ));
    }
    match r.kind.as_str() {
        "executor" => executor_of(r),
        "operator" if r.agent_id.is_some() => Err(format!(
            "principal `{}`: an operator has no agent_id",
            r.name
        )),
        "operator" => Ok(PrincipalKind::Operator {
            roles: r.roles.clone(),
        }),
        "agent" => match &r.agent_id {
            Some(_) if !r.roles.is_empty() => {
                Err(format!("principal `{}`: an agent has no roles", r.name))
            }
            Some(a) => Ok(PrincipalKind::Agent {
                agent_id: a.clone(),
            }),
            None => Err(format!("principal `{}`: kind agent needs agent_id", r.name)),
        },
        other => Err(format!(
            "principal `{}`: unknown kind `{other}` (expected operator, agent or executor)",
            r.name
        )),
    }
}

/// Executor `r`'s lists, or why they do not say what it executes.
fn executor_of(r: &RawPrincipal) -> Result<PrincipalKind, String> {
    let name = &r.name;
    if r.agent_id.is_some() || !r.roles.is_empty() {
        return Err(format!(
            "principal `{name}`: an executor has no agent_id and no roles"
        ));
    }
    for (what, list) in [
        ("servers", &r.servers),
        ("tools", &r.tools),
        ("agents", &r.agents),
    ] {
        if let Some(l) = list {
            if l.is_empty() {
                return Err(format!("principal `{name}`: {what} is empty"));
            }
            if let Some(bad) = l.iter().find(|n| n.is_empty() || n.len() > 256) {
                return Err(format!(
                    "principal `{name}`: {what} entry `{bad}` is not a name (1 to 256 bytes)"
                ));
            }
        }
    }
    if r.servers.is_none() && r.tools.is_none() {
        return Err(format!(
            "principal `{name}`: an executor names what it executes: servers [ALIAS…], tools [NAME…] or both"
        ));
    }
    let Some(agents) = r.agents.clone() else {
        return Err(format!(
            "principal `{name}`: an executor names the agents whose tokens it redeems: agents [AGENT_ID…] (tool names and server aliases are each agent's own)"
        ));
    };
    Ok(PrincipalKind::Executor {
        agents,
        servers: r.servers.clone(),
        tools: r.tools.clone(),
    })
}

/// Where principal `r`'s key comes from, or why that is unclear.
fn key_of(r: &RawPrincipal) -> Result<KeySource, String> {
    match (&r.key_env, &r.key_sha256) {
        (Some(v), None) => Ok(KeySource::Env(v.clone())),
        (None, Some(h)) => parse_hex32(h).map(KeySource::Sha256).ok_or_else(|| {
            format!(
                "principal `{}`: key_sha256 must be 64 lowercase hex characters",
                r.name
            )
        }),
        _ => Err(format!(
            "principal `{}`: give exactly one of key_env or key_sha256",
            r.name
        )),
    }
}

/// Fewest distinct characters a `key_env` key has (`aaaa…` or `abab…` is guessed at once;
/// `openssl rand -hex 32` gives 16 almost always).
pub const MIN_KEY_DISTINCT_CHARS: usize = 8;

/// What is wrong with secret `k` (a key, a webhook secret, a signing secret), if anything, as
/// the end of a sentence naming it ("the key in VAR (key_env) …"), and whether
/// `--insecure-demo-keys` may lift it (`true` for strength, never for whitespace): with
/// whitespace (a line break or space pasted with it, which no client sends back); shorter than
/// [`MIN_KEY_CHARS`]; of fewer than [`MIN_KEY_DISTINCT_CHARS`] distinct characters (found by
/// review: 32 spaces, or one character 32 times, passed the length check). The secret is
/// never part of the text. `None`: none of these (an empty secret is the caller's to name).
pub(crate) fn secret_flaw(k: &str) -> Option<(String, bool)> {
    let chars = k.chars().count();
    if k.chars().any(char::is_whitespace) {
        Some((
            "has whitespace (a pasted line break or space?); give it without".into(),
            false,
        ))
    } else if chars < MIN_KEY_CHARS {
        Some((
            format!(
                "is {chars} characters; use at least {MIN_KEY_CHARS} (e.g. `openssl rand -hex 32`)"
            ),
            true,
        ))
    } else if k.chars().collect::<BTreeSet<_>>().len() < MIN_KEY_DISTINCT_CHARS {
        Some((
            format!(
                "has fewer than {MIN_KEY_DISTINCT_CHARS} distinct characters; use a random key (e.g. `openssl rand -hex 32`)"
            ),
            true,
        ))
    } else {
        None
    }
}

/// The key in the variable `var` (a principal's `key_env`), or why it is refused (naming
/// the variable, never the key): unset or empty, or [`secret_flaw`] (its strength flaws
/// lifted when `insecure`).
fn env_key(var: &str, insecure: bool) -> Result<String, String> {
    let demo = "or `assent serve --insecure-demo-keys` on a loopback address for a demo";
    let k = std::env::var(var).unwrap_or_default();
    if k.is_empty() {
        return Err(format!(
            "environment variable {var} (key_env) is not set or empty"
        ));
    }
    match secret_flaw(&k) {
        Some((flaw, false)) => Err(format!("the key in {var} (key_env) {flaw}")),
        Some((flaw, true)) if !insecure => {
            Err(format!("the key in {var} (key_env) {flaw}, {demo}"))
        }
        _ => Ok(k),
    }
}

/// Resolves every declared principal's key: `key_env` reads the variable (the key itself),
/// which must pass [`env_key`];
/// `key_sha256` is used as is. Two principals with the same key are an error (at `file`'s
/// line of the second). Keys are never logged; an agent id no agent file declares is warned.
pub(crate) fn resolve(
    file: &Path,
    declared: &[Declared],
    insecure: bool,
    registry: &Registry,
) -> Result<Vec<Principal>, ConfigError> {
    let mut out: Vec<Principal> = Vec::new();
    for d in declared {
        let name = &d.name;
        let key_sha256 = match &d.key {
            KeySource::Sha256(h) => *h,
            KeySource::Env(var) => {
                let why = |m| at(file, d.line, format!("principal `{name}`: {m}"));
                let key = env_key(var, insecure).map_err(why)?;
                Sha256::digest(key.as_bytes()).into()
            }
        };
        if let Some(o) = out.iter().find(|p| p.key_sha256 == key_sha256) {
            return Err(at(
                file,
                d.line,
                format!("principal `{name}` has the same key as `{}`", o.name),
            ));
        }
        if let PrincipalKind::Agent { agent_id } = &d.kind
            && !registry.agents.contains_key(agent_id)
        {
            tracing::warn!(principal = ?name, agent_id = ?agent_id, "principal is bound to an agent id that no agent file declares");
        }
        // A mistyped `owns` (`treasury-bot` for `treasury_bot`) would silently leave that
        // principal free to approve its own agent's calls under separation of duties: one
        // that differs from a declared agent id only in case or `-`/`_` is refused (found by
        // review: only logged, it passed `assent check` and a reload); another undeclared id
        // is logged, not refused, for it still holds the duty on that agent's calls (an agent
        // retired with approvals pending, a replica whose files lack it).
        let norm = |a: &str| a.to_lowercase().replace('-', "_");
        for owned in d.owns.iter().filter(|a| !registry.agents.contains_key(*a)) {
            if let Some(meant) = registry.agents.keys().find(|k| norm(k) == norm(owned)) {
                return Err(at(
                    file,
                    d.line,
                    format!(
                        "principal `{name}`: owns `{owned}`, which no agent file declares; `{meant}` is declared (a typo?): separation of duties would not apply to it"
                    ),
                ));
            }
            tracing::warn!(
                file = ?file, line = ?d.line, principal = ?name, owns = ?owned,
                "`owns` names an agent id that no agent file declares (a typo?)"
            );
        }
        out.push(Principal {
            name: name.clone(),
            kind: d.kind.clone(),
            owns: d.owns.clone(),
            sso: d.sso.clone(),
            slack_user_id: d.slack_user_id.clone(),
            key_sha256,
        });
    }
    Ok(out)
}
