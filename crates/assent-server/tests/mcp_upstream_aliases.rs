//! `mcp_upstreams` aliases the hub's `ALIAS__TOOL` names cannot mistake: the hub splits a tool
//! name at its first `__`, so an alias with `__` in it (`a__b`: `a__b__t` would name upstream
//! `a`'s tool `b__t`) or ending in `_` (`a_`: `a___t` would name upstream `a`'s tool `_t`) is
//! refused when the config is loaded, naming the file, the line and why.

use assent_server::config::Config;

/// Loads a config of `listen` and `mcp_upstreams` with the one upstream `alias` (on line 3).
fn load(alias: &str) -> Result<Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("assent.yaml");
    std::fs::write(
        &p,
        format!("listen: 127.0.0.1:0\nmcp_upstreams:\n  {alias}: {{command: [x]}}\n"),
    )
    .unwrap();
    Config::load(&p).map_err(|e| e.to_string())
}

#[test]
fn an_alias_that_would_make_alias_tool_names_ambiguous_is_refused_at_load() {
    for alias in ["a__b", "a_", "__a", "a___b", "_"] {
        let err = load(alias).err().unwrap_or_default();
        assert!(
            err.contains("assent.yaml:3:")
                && err.contains(&format!("alias `{alias}`"))
                && err.contains("must not contain `__` nor end in `_`"),
            "{alias}: {err}"
        );
    }
    for alias in ["a", "a_b", "_a", "a1_b2"] {
        assert!(load(alias).is_ok(), "{alias}: {:?}", load(alias).err());
    }
}
