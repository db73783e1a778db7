//! The redemption rule of an approval token (seed 002 "Execution requires"): a minted token
//! runs one call only for the agent it was issued to, once, before it expires, from the client
//! device it was bound to, and only for the call hash it approved. A pure check of the token's
//! stored row and signed claims against the presented call; verifying the signature
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

/// A redemption attempt: who presents the token for which call, from which device, when.
#[derive(Debug, Clone, Copy)]
pub struct Presented<'a> {
    /// The authenticated agent presenting it.
    pub agent: &'a str,
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
    /// Redeemed already.
    Used,
    /// Expired (`now >= expires_at`).
    Expired,
    /// Bound to another client device, or the call came from none.
    DeviceMismatch,
    /// It approves another call: the stored hash it approves.
    Mismatch(String),
}

/// Checks, in this order, agent, single use, expiry, device and call hash of token `m` (with
/// its signed `claims`) against attempt `p`. `Ok` when the token may run the call.
pub fn check(m: &Minted<'_>, claims: &TokenClaims, p: &Presented<'_>) -> Result<(), Refusal> {
    if m.agent != p.agent || claims.agent != p.agent {
        return Err(Refusal::WrongAgent);
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
    if m.call_hash != p.call_hash || claims.h != p.call_hash {
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
        agent: "bot",
        call_hash: "h1",
        device_id: Some("d1"),
        now: 5,
    };

    fn claims(agent: &str, h: &str) -> TokenClaims {
        TokenClaims {
            tid: "t".into(),
            aid: "a".into(),
            agent: agent.into(),
            h: h.into(),
            exp: 10,
        }
    }

    #[test]
    fn each_condition_refuses_in_order() {
        let c = claims("bot", "h1");
        assert_eq!(check(&M, &c, &P), Ok(()));
        let other = Presented { agent: "eve", ..P };
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
