//! Time stamps: a moment held as Unix milliseconds (`i64`, how the store keeps it and the
//! rules compare it) and written as RFC 3339 UTC text (how `/v1` shows it). [`rfc3339`] and
//! [`parse`] convert; the serde adapters [`ms_as_rfc3339`] and [`opt_ms_as_rfc3339`] let one
//! record type have both forms, so the stored row and its wire body are one type. Pure: the
//! current time is the caller's.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// `ms` (Unix milliseconds) as RFC 3339 UTC, e.g. `2026-01-01T00:00:00Z`, with the fraction
/// of a second only when it is not zero (`…:00.25Z`). Empty for a moment outside what RFC 3339
/// can write (before year 0 or after 9999): a stamp this gateway never makes.
pub fn rfc3339(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// RFC 3339 text (any offset) as Unix milliseconds, truncating below the millisecond. `None`
/// when `s` is not RFC 3339 or the moment does not fit in an `i64` of milliseconds.
pub fn parse(s: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000)).ok()
}

/// Serde adapter (`#[serde(with = "assent_core::stamp::ms_as_rfc3339")]`) for an `i64` of
/// Unix milliseconds written as RFC 3339 text. Reading text that is not RFC 3339 is an error
/// naming the text.
pub mod ms_as_rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    /// Writes `ms` with [`super::rfc3339`].
    pub fn serialize<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::rfc3339(*ms))
    }

    /// Reads RFC 3339 text with [`super::parse`].
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let text = String::deserialize(d)?;
        super::parse(&text).ok_or_else(|| D::Error::custom(format!("not RFC 3339: {text:?}")))
    }
}

/// [`ms_as_rfc3339`] for an `Option<i64>`: `None` is `null`.
pub mod opt_ms_as_rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `null` or the RFC 3339 text.
    pub fn serialize<S: Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match ms {
            Some(ms) => super::ms_as_rfc3339::serialize(ms, s),
            None => s.serialize_none(),
        }
    }

    /// Reads `null` (or an absent field, with `#[serde(default)]`) or RFC 3339 text.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        #[derive(Deserialize)]
        struct Stamp(#[serde(with = "super::ms_as_rfc3339")] i64);
        Ok(Option::<Stamp>::deserialize(d)?.map(|Stamp(ms)| ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_seconds_print_without_a_fraction_and_read_back() {
        assert_eq!(rfc3339(1_767_225_600_000), "2026-01-01T00:00:00Z");
        assert_eq!(parse("2026-01-01T00:00:00Z"), Some(1_767_225_600_000));
        assert_eq!(rfc3339(1_767_225_600_250), "2026-01-01T00:00:00.25Z");
        assert_eq!(parse("2026-01-01T00:00:00.25Z"), Some(1_767_225_600_250));
    }

    #[test]
    fn other_offsets_read_as_the_same_moment_and_garbage_is_refused() {
        assert_eq!(parse("2026-01-01T01:00:00+01:00"), Some(1_767_225_600_000));
        assert_eq!(parse("yesterday"), None);
        assert_eq!(parse("2026-01-01"), None);
        // Before 1970 is a negative number of milliseconds, not an overflow.
        assert_eq!(parse("1969-12-31T23:59:59.999Z"), Some(-1));
    }

    #[test]
    fn a_moment_rfc3339_cannot_write_is_empty_not_a_panic() {
        assert_eq!(rfc3339(i64::MAX), "");
        assert_eq!(rfc3339(i64::MIN), "");
    }
}
