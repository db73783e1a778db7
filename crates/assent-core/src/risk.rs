//! The seed 002 risk tier of a call ([`RiskTier`], R0–R4), its AAEP `risk_level` and the
//! approval wait it implies when no rule names one. A leaf: it imports nothing from the rest
//! of the crate, so the approval state machine, the policy model and the gatekeeper can all
//! use it without importing one another. It does not decide what a tier requires (the
//! gatekeeper does: R3/R4 always need confirmation).

use serde::{Deserialize, Serialize};
use std::fmt;

/// seed 002 risk tier. R0–R1 map to AAEP `low`, R2 to `medium`, R3–R4 to `high`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum RiskTier {
    /// Negligible risk (AAEP low).
    R0,
    /// Low risk (AAEP low).
    R1,
    /// Medium risk (AAEP medium); the default tier.
    R2,
    /// High risk (AAEP high); always requires confirmation.
    R3,
    /// Critical risk (AAEP high); always requires confirmation.
    R4,
}

impl RiskTier {
    /// `"R0"` … `"R4"`.
    pub fn as_str(self) -> &'static str {
        ["R0", "R1", "R2", "R3", "R4"][self as usize]
    }
    /// Parses `"R0"` … `"R4"`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "R0" => Self::R0,
            "R1" => Self::R1,
            "R2" => Self::R2,
            "R3" => Self::R3,
            "R4" => Self::R4,
            _ => return None,
        })
    }
    /// AAEP `risk_level`: `low`, `medium` or `high`.
    pub fn risk_level(self) -> &'static str {
        match self {
            Self::R0 | Self::R1 => "low",
            Self::R2 => "medium",
            Self::R3 | Self::R4 => "high",
        }
    }
}

impl fmt::Display for RiskTier {
    /// [`RiskTier::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The approval wait by risk when no rule names `timeout_seconds` (issue 3; AAEP §6.4.2):
/// high 300 s, medium 120 s, low 60 s.
pub fn default_timeout_seconds(tier: RiskTier) -> u64 {
    match tier.risk_level() {
        "high" => 300,
        "medium" => 120,
        _ => 60,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_print_parse_and_map_to_aaep_levels_and_waits() {
        for t in [
            RiskTier::R0,
            RiskTier::R1,
            RiskTier::R2,
            RiskTier::R3,
            RiskTier::R4,
        ] {
            assert_eq!(RiskTier::parse(t.as_str()), Some(t));
            assert_eq!(t.to_string(), t.as_str());
        }
        assert_eq!(RiskTier::parse("R5"), None);
        assert_eq!(RiskTier::R1.risk_level(), "low");
        assert_eq!(RiskTier::R2.risk_level(), "medium");
        assert_eq!(RiskTier::R3.risk_level(), "high");
        assert_eq!(default_timeout_seconds(RiskTier::R0), 60);
        assert_eq!(default_timeout_seconds(RiskTier::R2), 120);
        assert_eq!(default_timeout_seconds(RiskTier::R4), 300);
    }
}
