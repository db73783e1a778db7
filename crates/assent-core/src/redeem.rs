//! The redemption rule of an approval token (seed 002 "Execution requires"; issue 14 §6): a
//! minted token runs one call only when presented by the agent it was issued to or by an
//! executor of that call's server or tool, once, before it expires, from the client device it
//! was bound to, and only for the call hash it approved. A pure check of the token's stored row
//! and signed claims against the presented call; verifying the signature
//! ([`crate::token::verify`]) and marking the token used atomically are the store's job.

use crate::token::TokenClaims;

/// A minted token as stored.
#[derive(Debug, Clone, Copy)]
pub struct Minted<'a> {
    /// The agent it was issued to.
    pub agent: &'a str,
    /// The call hash it approves.
    pub call_hash: &'a str,
    /// Unix milliseconds from which it is expired.
    pub expires_at: i64,
    /// Whether it was redeemed already.
    pub used: bool,
    /// The client device it is bound to, when the agent sent one.
    pub device_id: Option<&'a str>,
}

/// Who presents a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presenter<'a> {
    /// The authenticated agent (its agent id): it may redeem the tokens issued to it.
    Agent(&'a str),
    /// An authenticated executor (principal kind `executor`): it may redeem the tokens of the
    /// agents it executes for (`agents`) for a call on what it executes. `servers` / `tools`:
    /// the MCP server aliases / tool names it executes (`None`: not restricted by that list;
    /// the config refuses an executor with neither). `tool` / `server`: those of the
    /// presented call, bound to the token by its `call_hash`. Tool names and server aliases
    /// are each agent's own (its Agent Format file names them), so they say nothing across
    /// agents: without `agents`, an executor of `transfer_funds` redeemed a token another
    /// agent had got for its own `transfer_funds` under a rule it could approve in-client
    /// (found by review).
    Executor {
        /// The executor's principal name.
        name: &'a str,
        /// The agent ids whose tokens it may redeem.
        agents: &'a [String],
        /// Server aliases it executes, if restricted.
        servers: Option<&'a [String]>,
        /// Tool names it executes, if restricted.
        tools: Option<&'a [String]>,
        /// The presented call's tool.
        tool: &'a str,
        /// The presented call's server alias (`None`: a local tool).
        server: Option<&'a str>,
    },
}

/// The prefixes of the gateway's derived calls: `result.TOOL` (a held result's release),
/// `delegate.ALIAS` (a delegation), `mplp.TYPE` (an MPLP plan or target). Their tokens are the
/// agent's (or its relay's) to redeem; no executor runs them.
pub const DERIVED_PREFIXES: [&str; 3] = ["result.", "delegate.", "mplp."];

/// Whether `tool` names a derived call ([`DERIVED_PREFIXES`]).
pub fn is_derived(tool: &str) -> bool {
    DERIVED_PREFIXES.iter().any(|p| tool.starts_with(p))
}

impl Presenter<'_> {
    /// Whether an executor executes the presented call of agent `agent` (an agent: always
    /// `true`, its own tokens are checked by agent id): `agent` is in `agents`, the server is
    /// in `servers` and the tool in `tools`, for each list given. A local tool (no server) is
    /// never covered by a `servers` list, and a derived call ([`is_derived`]: `result.read`
    /// keeps its call's server) only by a `tools` list naming it exactly (found by review: an
    /// executor of server `fs` redeemed the token releasing a held result of `fs`, so the
    /// agent's own redemption failed `TOKEN_USED` and the result never reached it).
    pub fn executes(&self, agent: &str) -> bool {
        match self {
            Presenter::Agent(_) => true,
            Presenter::Executor {
                agents,
                servers,
                tools,
                tool,
                server,
                ..
            } => {
                let by_server =
                    servers.is_none_or(|s| server.is_some_and(|x| s.iter().any(|a| a == x)));
                let by_tool = match tools {
                    Some(t) => t.iter().any(|n| n == tool),
                    None => !is_derived(tool),
                };
                let by_agent = agents.iter().any(|a| a == agent);
                (servers.is_some() || tools.is_some()) && by_server && by_tool && by_agent
            }
        }
    }
}

/// A redemption attempt: who presents the token for which call, from which device, when.
#[derive(Debug, Clone, Copy)]
pub struct Presented<'a> {
    /// The authenticated principal presenting it.
    pub by: Presenter<'a>,
    /// The `call_hash` of the call it is presented with.
    pub call_hash: &'a str,
    /// The client device id sent with the call, if any.
    pub device_id: Option<&'a str>,
    /// Unix milliseconds.
    pub now: i64,
}

/// Why a token may not run the presented call (the store's `RedeemError` of the same name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Issued to another agent (by the stored row or the signed claims).
    WrongAgent,
    /// Presented by an executor that does not execute the call's server or tool, or not for
    /// the token's agent: its name.
    NotExecutor(String),
    /// Redeemed already.
    Used,
    /// Expired (`now >= expires_at`).
    Expired,
    /// Bound to another client device, or the call came from none.
    DeviceMismatch,
    /// It approves another call: the stored hash it approves.
    Mismatch(String),
}

/// Checks, in this order, presenter (the agent it was issued to, or an executor of the call),
/// single use, expiry, device and call hash of token `m` (with its signed `claims`) against
/// attempt `p`. `Ok` when the token may run the call.
pub fn check(m: &Minted<'_>, claims: &TokenClaims, p: &Presented<'_>) -> Result<(), Refusal> {
    if m.agent != claims.sub {
        return Err(Refusal::WrongAgent);
    }
    match p.by {
        Presenter::Agent(agent) if agent != m.agent => return Err(Refusal::WrongAgent),
        Presenter::Executor { name, .. } if !p.by.executes(m.agent) => {
            return Err(Refusal::NotExecutor(name.to_string()));
        }
        _ => {}
    }
    if m.used {
        return Err(Refusal::Used);
    }
    if p.now >= m.expires_at {
        return Err(Refusal::Expired);
    }
    if m.device_id.is_some() && m.device_id != p.device_id {
        return Err(Refusal::DeviceMismatch);
    }
    if m.call_hash != p.call_hash || claims.call_hash != p.call_hash {
        return Err(Refusal::Mismatch(m.call_hash.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Minted<'static> = Minted {
        agent: "bot",
        call_hash: "h1",
        expires_at: 10,
        used: false,
        device_id: Some("d1"),
    };
    const P: Presented<'static> = Presented {
        by: Presenter::Agent("bot"),
        call_hash: "h1",
        device_id: Some("d1"),
        now: 5,
    };

    fn claims(agent: &str, h: &str) -> TokenClaims {
        TokenClaims {
            jti: "t".into(),
            sub: agent.into(),
            aid: "a".into(),
            call_hash: h.into(),
            scope: "once".into(),
            iat: 0,
            exp: 10,
        }
    }

    #[test]
    fn an_executor_redeems_only_for_what_it_executes() {
        let c = claims("bot", "h1");
        let fs = ["fs".to_string()];
        let pay = ["pay".to_string()];
        let bot = ["bot".to_string()];
        let exec = |servers, tools, tool, server| Presented {
            by: Presenter::Executor {
                name: "runner",
                agents: &bot,
                servers,
                tools,
                tool,
                server,
            },
            ..P
        };
        let s: Option<&[String]> = Some(&fs);
        let t: Option<&[String]> = Some(&pay);
        assert_eq!(check(&M, &c, &exec(s, None, "read", Some("fs"))), Ok(()));
        let refused = Err(Refusal::NotExecutor("runner".into()));
        assert_eq!(check(&M, &c, &exec(s, None, "read", Some("db"))), refused);
        assert_eq!(check(&M, &c, &exec(s, None, "read", None)), refused);
        assert_eq!(check(&M, &c, &exec(None, t, "pay", None)), Ok(()));
        assert_eq!(check(&M, &c, &exec(None, t, "read", None)), refused);
        assert_eq!(check(&M, &c, &exec(s, t, "pay", Some("fs"))), Ok(()));
        assert_eq!(check(&M, &c, &exec(s, t, "read", Some("fs"))), refused);
        assert_eq!(check(&M, &c, &exec(None, None, "pay", None)), refused);
        // A derived call keeps its server, but no server executor runs it.
        for derived in ["result.read", "delegate.helper", "mplp.plan"] {
            let by_server = exec(s, None, derived, Some("fs"));
            assert_eq!(check(&M, &c, &by_server), refused, "{derived}");
        }
        let named = ["result.read".to_string()];
        let n: Option<&[String]> = Some(&named);
        assert_eq!(
            check(&M, &c, &exec(s, n, "result.read", Some("fs"))),
            Ok(())
        );
    }

    /// Found by review: tool names are each agent's own, so an executor of `pay` redeemed a
    /// token another agent had got for its own `pay` under a weaker rule. An executor
    /// redeems only for the agents it names.
    #[test]
    fn an_executor_redeems_only_the_tokens_of_the_agents_it_executes_for() {
        let pay = ["pay".to_string()];
        let presented = |agents| Presented {
            by: Presenter::Executor {
                name: "runner",
                agents,
                servers: None,
                tools: Some(&pay),
                tool: "pay",
                server: None,
            },
            ..P
        };
        let (bot, sim) = (["bot".to_string()], ["sim".to_string()]);
        let c = claims("bot", "h1");
        assert_eq!(check(&M, &c, &presented(&bot)), Ok(()));
        let refused = Err(Refusal::NotExecutor("runner".into()));
        assert_eq!(check(&M, &c, &presented(&sim)), refused);
        assert_eq!(check(&M, &c, &presented(&[])), refused);
    }

    #[test]
    fn each_condition_refuses_in_order() {
        let c = claims("bot", "h1");
        assert_eq!(check(&M, &c, &P), Ok(()));
        let other = Presented {
            by: Presenter::Agent("eve"),
            ..P
        };
        assert_eq!(check(&M, &c, &other), Err(Refusal::WrongAgent));
        assert_eq!(
            check(&M, &claims("eve", "h1"), &P),
            Err(Refusal::WrongAgent)
        );
        let used = Minted { used: true, ..M };
        assert_eq!(check(&used, &c, &P), Err(Refusal::Used));
        // Used is reported before expiry.
        assert_eq!(
            check(&used, &c, &Presented { now: 99, ..P }),
            Err(Refusal::Used)
        );
        assert_eq!(
            check(&M, &c, &Presented { now: 10, ..P }),
            Err(Refusal::Expired)
        );
        for device in [None, Some("d2")] {
            let p = Presented {
                device_id: device,
                ..P
            };
            assert_eq!(check(&M, &c, &p), Err(Refusal::DeviceMismatch));
        }
        let unbound = Minted {
            device_id: None,
            ..M
        };
        assert_eq!(
            check(
                &unbound,
                &c,
                &Presented {
                    device_id: None,
                    ..P
                }
            ),
            Ok(())
        );
        assert_eq!(check(&unbound, &c, &P), Ok(()));
        let p = Presented {
            call_hash: "h2",
            ..P
        };
        assert_eq!(check(&M, &c, &p), Err(Refusal::Mismatch("h1".into())));
        assert_eq!(
            check(&M, &claims("bot", "h2"), &P),
            Err(Refusal::Mismatch("h1".into()))
        );
    }
}
