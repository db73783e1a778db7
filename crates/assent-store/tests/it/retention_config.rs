//! Retention keeps the configuration last put in force in the live chain
//! ([`assent_store::Store::record_config_loaded`] reads the newest `config.loaded` or
//! `config.reloaded` record), on SQLite and on Postgres.

use super::pgkit::both;
use super::retention::verify;
use super::{approved, open};
use assent_store::retention::ARCHIVE_DIR;
use serde_json::json;

const DAY: i64 = 86_400_000;

/// The data a start records: policy set `p`, configuration digest `d`.
fn config(p: &str, d: &str) -> serde_json::Value {
    json!({"policy_set_sha256": p, "config_digest": d})
}

/// Attack (found by review): the record of the configuration in force is as old as the last
/// change, so a retention run archives and deletes it once the rules stood longer than the
/// retention window. The next restart then found no configuration recorded and wrote its
/// own as the chain's baseline (`changed: false`): whoever changed the files and restarted
/// hid the change from the chain. The record is carried to the chain's end instead, so the
/// same configuration still records nothing and another is recorded as changed from it.
#[test]
fn retention_keeps_the_configuration_in_force_so_a_restart_with_other_rules_is_recorded() {
    both(|db| {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path(), db);
        approved(&s, 1, 5_000, false);
        let baseline = s
            .record_config_loaded(config("a", "1"), "system:start", 6_000)
            .unwrap()
            .expect("a chain with records and no configuration records its baseline");
        assert_eq!(baseline["changed"], false);
        approved(&s, 2, 5_000, false);
        s.append_audit("note", None, "test", &json!({}), 10 * DAY)
            .unwrap();
        let arch = dir.path().join(ARCHIVE_DIR);
        let a = s
            .archive_audit(&arch, 5 * DAY, 1_000, 10 * DAY, None, None)
            .unwrap()
            .expect("records were due");
        assert!(a.manifest.record_count > 0, "{a:?}");
        assert_eq!(verify(&s, db).problem, None);

        let same = s.record_config_loaded(config("a", "1"), "system:start", 11 * DAY);
        assert_eq!(
            same.unwrap(),
            None,
            "the same configuration is still the one in force"
        );
        let other = s
            .record_config_loaded(config("b", "1"), "system:start", 11 * DAY)
            .unwrap()
            .expect("other rules are recorded");
        assert_eq!(other["changed"], true, "{other}");
        assert_eq!(other["previous_policy_set_sha256"], "a", "{other}");
        assert_eq!(other["previous_config_digest"], "1", "{other}");
        assert_eq!(verify(&s, db).problem, None);

        // Carried again by a later run, the newest record (now `b`) is what a start compares.
        s.append_audit("note", None, "test", &json!({}), 30 * DAY)
            .unwrap();
        s.archive_audit(&arch, 25 * DAY, 1_000, 30 * DAY, None, None)
            .unwrap()
            .expect("records were due");
        let back = s
            .record_config_loaded(config("a", "1"), "system:start", 31 * DAY)
            .unwrap()
            .expect("a change back is a change");
        assert_eq!(back["previous_policy_set_sha256"], "b", "{back}");
        assert_eq!(back["changed"], true, "{back}");
        assert_eq!(verify(&s, db).problem, None);
    });
}
