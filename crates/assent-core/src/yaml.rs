//! The one YAML reading of policy and agent files (Agent Format 1.0 §"Serialization" is YAML
//! 1.2): [`from_str`] parses with YAML 1.2 Core booleans only, so a bare `off`, `no`, `on` or
//! `yes` is the string it reads as, never a boolean.
//!
//! Found by review: `serde_saphyr`'s default reads YAML 1.1 booleans, so `in: [off,
//! disabled]` in a `deny` loaded as `[false, "disabled"]`, the string argument `"off"` never
//! matched it, and the deny let the call through. A typed `bool` field spelled `yes` is now a
//! load error naming its line, not a silent `true`.

use serde::de::DeserializeOwned;

/// Parses YAML `text` into `T` with duplicate keys refused (the library default) and strict
/// YAML 1.2 booleans (`true`/`false` in three casings). Errors are `serde_saphyr`'s, with
/// line and column, for [`crate::policy`]'s `yaml_err` to render.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, serde_saphyr::options! { strict_booleans: true })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn yaml_1_1_boolean_words_stay_strings() {
        let v: Value = from_str("in: [off, no, on, yes, true, False]").unwrap();
        assert_eq!(v, json!({"in": ["off", "no", "on", "yes", true, false]}));
    }

    #[test]
    fn a_typed_boolean_spelled_yes_is_refused_with_its_line() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct S {
            a: u8,
            b: bool,
        }
        let e = from_str::<S>("a: 1\nb: yes\n").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }
}
