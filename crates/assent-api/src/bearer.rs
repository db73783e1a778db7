//! The `Authorization` header's bearer credential, read one way by every surface that takes
//! a principal's key (the gateway's edge, the MCP hub's handler).

/// The credential of an `Authorization` header value `Bearer KEY` (RFC 6750 §2.1; the scheme
/// in any case, RFC 9110 §11.1), surrounding spaces trimmed; `None` for another scheme or an
/// empty key. One reading for every surface that takes an agent's or operator's key (the
/// gateway's edge and the MCP hub's handler: found by review, the hub read only `Bearer `, so
/// a client the edge let in with `bearer ` was refused every call).
pub fn bearer_credential(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_at_checked(7)?;
    let key = rest.trim();
    (scheme.eq_ignore_ascii_case("bearer ") && !key.is_empty()).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::bearer_credential;

    /// The scheme in any case, spaces around the key trimmed; another scheme, no key or a
    /// value too short for the scheme is none (and never a panic on a multi-byte character).
    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        for v in [
            "Bearer k1",
            "bearer k1",
            "BEARER k1",
            "Bearer   k1  ",
            "bEaReR k1",
        ] {
            assert_eq!(bearer_credential(v), Some("k1"), "{v}");
        }
        for v in [
            "Basic k1",
            "Bearer ",
            "Bearer    ",
            "Bearerk1",
            "",
            "Bear",
            "Beare\u{e9}k1",
        ] {
            assert_eq!(bearer_credential(v), None, "{v}");
        }
    }
}
