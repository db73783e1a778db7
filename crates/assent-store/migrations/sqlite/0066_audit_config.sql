-- assent store schema: the audit records of a configuration put in force (`config.loaded` at a
-- start, `config.reloaded` at a reload), by their place in the chain. Each start reads the
-- newest to tell whether its configuration is another (`audit.rs` `config_due`); without this
-- index that read walked the chain back to the last reload, or through all of it (found by
-- review). Partial: few records are a configuration's.
CREATE INDEX audit_config ON audit(seq) WHERE kind IN ('config.loaded', 'config.reloaded');
