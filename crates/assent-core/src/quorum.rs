//! Quorum approvals (issue 14 §1): a rule's `approvers` may ask for several distinct people —
//! `{roles: [finance-admin], count: 2}`, or groups that must all be satisfied
//! (`[{role: finance-admin, count: 1}, {role: security, count: 1}]`). Pure rules: reading the
//! `approvers` key ([`parse_approvers`]), merging the quorums of the covering rules
//! ([`merge`]), who may vote ([`Quorum::qualifies`]) and whether the votes cast meet it
//! ([`tally`]: each principal fills at most one place, whatever roles they hold). The store
//! records the votes; the gatekeeper puts the quorum in the verdict's terms.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most people one group may require.
pub const MAX_COUNT: u32 = 16;
/// Most groups one `approvers` key may name.
pub const MAX_GROUPS: usize = 8;

/// One group of a quorum: `count` distinct principals, each holding one of `roles` (empty:
/// any operator).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuorumGroup {
    /// Roles whose holders may fill this group; empty: any operator.
    pub roles: Vec<String>,
    /// How many distinct principals it needs, 1 to [`MAX_COUNT`].
    pub count: u32,
    /// The roles escalation steps may add to this group: those of the escalation of the
    /// rule(s) it came from ([`merge`]; `[]`: none, the rule escalates nothing). Absent
    /// (`None`): every role a step adds, as for quorums stored before the field existed, and
    /// wherever it would allow every role the approval's escalation names ([`Quorum::scoped`]).
    /// Found by review: one rule's `escalate_to: [intern]` opened another rule's
    /// `{roles: [finance], count: 2}` to interns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Vec<String>>,
}

/// What a deny vote does on an approval that needs a quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DenyRule {
    /// One deny by a qualified approver rejects (the default: saying no is the safe side).
    #[default]
    Any,
    /// A deny needs the same quorum as an approval (`deny: quorum`).
    Quorum,
}

/// Several distinct people must approve: every group filled, no principal counted twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Quorum {
    /// The groups, all of which must be filled.
    pub groups: Vec<QuorumGroup>,
    /// What a deny vote does.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub deny: DenyRule,
}

/// A rule's `approvers` key read: the roles that may decide (the union over every group) and
/// the quorum when it asks for more than one approval.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Approvers {
    /// Every role named; empty: any operator.
    pub roles: Vec<String>,
    /// `Some` when more than one distinct approval is needed (or denials need a quorum).
    pub quorum: Option<Quorum>,
}

/// One vote, as the tally sees it.
#[derive(Debug, Clone, Copy)]
pub struct Ballot<'a> {
    /// The principal who cast it.
    pub principal: &'a str,
    /// Their roles when they cast it.
    pub roles: &'a [String],
}

/// One group's state in a [`Tally`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupTally {
    /// The group's roles (empty: any operator).
    pub roles: Vec<String>,
    /// How many it needs.
    pub count: u32,
    /// The principals counted in it, in voting order.
    pub counted: Vec<String>,
}

/// Whether the votes cast meet a quorum, and who counted where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Tally {
    /// Every group is filled.
    pub met: bool,
    /// Each group with the principals counted in it.
    pub groups: Vec<GroupTally>,
}

impl QuorumGroup {
    fn admits(&self, roles: &[String]) -> bool {
        self.roles.is_empty() || self.roles.iter().any(|r| roles.contains(r))
    }
}

impl Quorum {
    /// Whether a principal holding `roles` may vote: they fit at least one group.
    pub fn qualifies(&self, roles: &[String]) -> bool {
        self.groups.iter().any(|g| g.admits(roles))
    }

    /// The quorum after escalation steps: the roles they added join every group that
    /// names roles and allows them ([`QuorumGroup::escalation`]; a group open to any
    /// operator stays so); the counts do not change.
    pub fn widened(&self, escalate_to: &[String]) -> Quorum {
        let mut q = self.clone();
        for g in q.groups.iter_mut().filter(|g| !g.roles.is_empty()) {
            for r in escalate_to {
                let allowed = g.escalation.as_ref().is_none_or(|a| a.contains(r));
                if allowed && !g.roles.contains(r) {
                    g.roles.push(r.clone());
                }
            }
        }
        q
    }

    /// Total places to fill.
    pub fn required(&self) -> u32 {
        self.groups.iter().map(|g| g.count).sum()
    }

    /// The quorum of an approval whose escalation names the roles `escalates` (every step's,
    /// once): each group's [`QuorumGroup::escalation`] kept to those roles, and left out
    /// (`None`) where it narrows nothing — every role of `escalates` allowed, no escalation at
    /// all, or a group open to any operator — so a quorum that escalation cannot widen
    /// unevenly reads (and is sealed) as before the field existed. Only sound for the
    /// approval whose own escalation `escalates` lists (no other roles ever widen it).
    pub fn scoped(mut self, escalates: &[String]) -> Quorum {
        for g in &mut self.groups {
            let Some(allowed) = g.escalation.take() else {
                continue;
            };
            if g.roles.is_empty() || escalates.iter().all(|r| allowed.contains(r)) {
                continue;
            }
            g.escalation = Some(
                escalates
                    .iter()
                    .filter(|r| allowed.contains(r))
                    .cloned()
                    .collect(),
            );
        }
        self
    }
}

/// The roles escalation may add to a group two rules ask for: those both allow (`None`:
/// every role). Fails closed: neither rule's group is opened to a role its own escalation
/// does not name.
fn both_allow(a: Option<&[String]>, b: Option<&[String]>) -> Option<Vec<String>> {
    match (a, b) {
        (None, None) => None,
        (Some(x), None) | (None, Some(x)) => Some(x.to_vec()),
        (Some(x), Some(y)) => Some(x.iter().filter(|r| y.contains(r)).cloned().collect()),
    }
}

/// The quorum in force on an approval: its own, widened by the roles its escalation steps
/// done so far added ([`Quorum::widened`]; `added` is [`crate::escalation::Schedule::added`]).
/// `None`: one approval decides.
pub fn in_force(quorum: Option<&Quorum>, added: &[String]) -> Option<Quorum> {
    let q = quorum?;
    Some(if added.is_empty() {
        q.clone()
    } else {
        q.widened(added)
    })
}

impl Tally {
    /// Places filled, over all groups.
    pub fn counted(&self) -> usize {
        self.groups.iter().map(|g| g.counted.len()).sum()
    }

    /// One line for people: `1 of 2 approvals (finance 1 of 2: alice)`, each group with who
    /// counted in it, `any operator` for a group without roles.
    pub fn describe(&self) -> String {
        let required: u32 = self.groups.iter().map(|g| g.count).sum();
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                let who = if g.roles.is_empty() {
                    "any operator".to_string()
                } else {
                    g.roles.join("/")
                };
                let by = if g.counted.is_empty() {
                    String::new()
                } else {
                    format!(": {}", g.counted.join(", "))
                };
                format!("{who} {} of {}{by}", g.counted.len(), g.count)
            })
            .collect();
        format!(
            "{} of {required} approvals ({})",
            self.counted(),
            groups.join("; ")
        )
    }
}

/// Why an explicit empty list of approvers is refused (found by review: `approvers: []`, or a
/// group's `roles: []`, meant "any operator" — a list emptied by a template or an edit
/// silently let every operator decide what only named roles should).
pub const EMPTY_APPROVERS: &str = "an empty approvers list would let any operator decide; \
    remove the key to mean any operator, or name roles";

/// Why a group naming neither roles nor a count is refused (found by review: `approvers: {}`,
/// `approvers: [{}]` or `{deny: quorum}` alone meant "any operator", as an emptied list did
/// before [`EMPTY_APPROVERS`]). A group with a `count` and no roles (`{count: 2}`) still means
/// any N operators, as documented.
pub const EMPTY_GROUP: &str = "approvers group names neither `roles` (or `role`) nor `count`, \
    so it would let any operator decide; name roles (`{roles: [finance]}`), write `{count: N}` \
    for any N operators, or remove the `approvers` key to mean any operator";

/// Reads a rule's `approvers`: `Null` for a rule without the key (any operator, one approval;
/// the governance loader refuses an explicit `approvers: null`); a list of role names (any
/// one of them, one approval: the form before quorums); one group
/// `{roles: [..] | role: R, count: N, deny: any|quorum}` (without `roles` or `role` but with
/// `count`: any operator fills it, as in `{count: 2}`); a list of groups
/// `[{role: R, count: N}, …]`; or `{groups: [..], deny: …}`. `Err` names what is wrong: among
/// others an empty list of roles, `[]` or a group's `roles: []` ([`EMPTY_APPROVERS`]), and a
/// group with neither roles nor `count`, `{}` ([`EMPTY_GROUP`]). A single group of count 1
/// with `deny: any` is the plain form (no quorum).
pub fn parse_approvers(v: &Value) -> Result<Approvers, String> {
    let (groups, deny) = match v {
        Value::Null => return Ok(Approvers::default()),
        Value::Array(items) if items.is_empty() => return Err(EMPTY_APPROVERS.into()),
        Value::Array(items) if items.iter().all(Value::is_string) => {
            let roles = items
                .iter()
                .map(|i| role(i, "approvers[]"))
                .collect::<Result<Vec<_>, _>>();
            return Ok(Approvers {
                roles: dedup(roles?),
                quorum: None,
            });
        }
        Value::Array(items) => (groups_of(items)?, DenyRule::Any),
        Value::Object(m) if m.contains_key("groups") => {
            check_keys(m, &["groups", "deny"], "approvers")?;
            let items = m["groups"]
                .as_array()
                .ok_or("approvers.groups must be a list of groups")?;
            (groups_of(items)?, deny_rule(m.get("deny"))?)
        }
        Value::Object(m) => (vec![group(v)?], deny_rule(m.get("deny"))?),
        _ => return Err("approvers must be a list of roles, a group or a list of groups".into()),
    };
    let roles = dedup(groups.iter().flat_map(|g| g.roles.clone()).collect());
    let any_operator = groups.iter().any(|g| g.roles.is_empty());
    let plain = groups.len() == 1 && groups[0].count == 1 && deny == DenyRule::Any;
    Ok(Approvers {
        // A group open to any operator makes the approval open to any operator.
        roles: if any_operator { Vec::new() } else { roles },
        quorum: (!plain).then_some(Quorum { groups, deny }),
    })
}

fn groups_of(items: &[Value]) -> Result<Vec<QuorumGroup>, String> {
    if items.is_empty() || items.len() > MAX_GROUPS {
        return Err(format!("approvers: 1 to {MAX_GROUPS} groups"));
    }
    if items.iter().any(Value::is_string) {
        return Err("approvers: a list is either role names or groups, not both".into());
    }
    let groups: Vec<QuorumGroup> = items.iter().map(group).collect::<Result<_, _>>()?;
    // Found by review: two groups of the same roles in one rule were taken, by the merge of
    // covering rules' quorums (`merge`), as one group of the larger count, so one person met
    // `[{role: finance}, {role: finance}]`. Refused: the rule says what it means in one group.
    for (i, g) in groups.iter().enumerate() {
        let same = |h: &QuorumGroup| {
            let (mut a, mut b) = (g.roles.clone(), h.roles.clone());
            a.sort();
            b.sort();
            a == b
        };
        if let Some(j) = groups[..i].iter().position(same) {
            let both = groups[j].count.saturating_add(g.count);
            return Err(format!(
                "approvers: groups {} and {} name the same roles ({}): write one group with `count: {both}`",
                j + 1,
                i + 1,
                if g.roles.is_empty() {
                    "any operator".to_string()
                } else {
                    g.roles.join(", ")
                }
            ));
        }
    }
    Ok(groups)
}

fn group(v: &Value) -> Result<QuorumGroup, String> {
    let m = v
        .as_object()
        .ok_or("approvers: each group is {roles: [..], count: N}")?;
    check_keys(m, &["roles", "role", "count", "deny"], "approvers group")?;
    let roles = match (m.get("roles"), m.get("role")) {
        (Some(_), Some(_)) => {
            return Err("approvers group: give `roles` or `role`, not both".into());
        }
        (Some(Value::Array(rs)), None) if rs.is_empty() => {
            return Err(format!("approvers group: roles: []: {EMPTY_APPROVERS}"));
        }
        (Some(Value::Array(rs)), None) => rs
            .iter()
            .map(|r| role(r, "approvers group roles[]"))
            .collect::<Result<_, _>>()?,
        (Some(_), None) => {
            return Err("approvers group: `roles` must be a list of role names".into());
        }
        (None, Some(r)) => vec![role(r, "approvers group role")?],
        (None, None) if !m.contains_key("count") => return Err(EMPTY_GROUP.into()),
        (None, None) => Vec::new(),
    };
    let count = match m.get("count") {
        None => 1,
        Some(c) => c
            .as_u64()
            .filter(|n| (1..=u64::from(MAX_COUNT)).contains(n))
            .ok_or(format!("approvers group: count must be 1 to {MAX_COUNT}"))?
            as u32,
    };
    Ok(QuorumGroup {
        roles: dedup(roles),
        count,
        escalation: None,
    })
}

fn role(v: &Value, at: &str) -> Result<String, String> {
    match v.as_str() {
        Some(s) if !s.is_empty() && s.len() <= 128 => Ok(s.to_string()),
        _ => Err(format!("{at}: a role is a name of 1 to 128 bytes")),
    }
}

fn deny_rule(v: Option<&Value>) -> Result<DenyRule, String> {
    match v.map(|d| d.as_str()) {
        None | Some(Some("any")) => Ok(DenyRule::Any),
        Some(Some("quorum")) => Ok(DenyRule::Quorum),
        _ => Err("approvers: deny must be `any` or `quorum`".into()),
    }
}

fn check_keys(m: &serde_json::Map<String, Value>, known: &[&str], at: &str) -> Result<(), String> {
    match m.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "{at}: unknown key `{k}` (expected {})",
            known.join(", ")
        )),
        None => Ok(()),
    }
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(v.len());
    for s in v {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The quorum of a call from its covering rules: `None` when no rule asks for one (one
/// approval by any of the union of roles, as before quorums). Otherwise every rule's groups
/// must be filled; groups naming the same roles keep the larger count and the escalation
/// roles both allow ([`QuorumGroup::escalation`]); the roles of rules without a quorum
/// (`plain_roles`) form one more group of one, which escalation may widen by
/// `plain_escalation` (the roles those rules' escalations name; `None`: every role), or
/// narrow the escalation of the group naming the same roles. A deny needs a quorum only
/// when every quorum says `deny: quorum`.
pub fn merge<'a>(
    quorums: impl IntoIterator<Item = &'a Quorum>,
    plain_roles: &[String],
    plain_escalation: Option<&[String]>,
) -> Option<Quorum> {
    let mut out: Option<Quorum> = None;
    for q in quorums {
        let m = out.get_or_insert(Quorum {
            groups: Vec::new(),
            deny: DenyRule::Quorum,
        });
        if q.deny == DenyRule::Any {
            m.deny = DenyRule::Any;
        }
        for g in &q.groups {
            let key = sorted(&g.roles);
            let same = m.groups.iter_mut().find(|h| sorted(&h.roles) == key);
            match same {
                Some(h) => {
                    h.count = h.count.max(g.count);
                    h.escalation = both_allow(h.escalation.as_deref(), g.escalation.as_deref());
                }
                None => m.groups.push(g.clone()),
            }
        }
    }
    if let Some(m) = out.as_mut()
        && !plain_roles.is_empty()
    {
        // As sets, as the groups above are matched (found by review: `[b, a]` beside a
        // quorum of `[a, b]` made a group of its own, asking one more person).
        let key = sorted(plain_roles);
        match m.groups.iter_mut().find(|g| sorted(&g.roles) == key) {
            Some(g) => g.escalation = both_allow(g.escalation.as_deref(), plain_escalation),
            None => m.groups.push(QuorumGroup {
                roles: plain_roles.to_vec(),
                count: 1,
                escalation: plain_escalation.map(<[String]>::to_vec),
            }),
        }
    }
    out
}

/// `roles` sorted: a group's roles as a set.
fn sorted(roles: &[String]) -> Vec<String> {
    let mut k = roles.to_vec();
    k.sort();
    k
}

/// Counts `ballots` (the votes of one kind, in voting order) against `q`: a principal counts
/// once (their first ballot), in one group they qualify for; places are assigned so that as
/// many as possible are filled (a maximum bipartite matching, so a voter holding two roles is
/// placed where they are needed).
pub fn tally(q: &Quorum, ballots: &[Ballot<'_>]) -> Tally {
    let mut voters: Vec<Ballot<'_>> = Vec::new();
    for b in ballots {
        if !voters.iter().any(|v| v.principal == b.principal) {
            voters.push(*b);
        }
    }
    // One place per required approval: places[i] is its group.
    let places: Vec<usize> = q
        .groups
        .iter()
        .enumerate()
        .flat_map(|(i, g)| std::iter::repeat_n(i, g.count as usize))
        .collect();
    let mut holder: Vec<Option<usize>> = vec![None; places.len()];
    for v in 0..voters.len() {
        let mut seen = vec![false; places.len()];
        place(v, &voters, q, &places, &mut holder, &mut seen);
    }
    let mut groups: Vec<GroupTally> = q
        .groups
        .iter()
        .map(|g| GroupTally {
            roles: g.roles.clone(),
            count: g.count,
            counted: Vec::new(),
        })
        .collect();
    let mut placed: Vec<(usize, usize)> = holder
        .iter()
        .enumerate()
        .filter_map(|(p, h)| h.map(|v| (v, places[p])))
        .collect();
    placed.sort();
    for (v, g) in placed {
        groups[g].counted.push(voters[v].principal.to_string());
    }
    Tally {
        met: holder.iter().all(Option::is_some),
        groups,
    }
}

/// Kuhn's augmenting path: places voter `v`, moving earlier voters to other places they
/// qualify for when that frees one.
fn place(
    v: usize,
    voters: &[Ballot<'_>],
    q: &Quorum,
    places: &[usize],
    holder: &mut [Option<usize>],
    seen: &mut [bool],
) -> bool {
    for p in 0..places.len() {
        if seen[p] || !q.groups[places[p]].admits(voters[v].roles) {
            continue;
        }
        seen[p] = true;
        let free = match holder[p] {
            None => true,
            Some(w) => place(w, voters, q, places, holder, seen),
        };
        if free {
            holder[p] = Some(v);
            return true;
        }
    }
    false
}
