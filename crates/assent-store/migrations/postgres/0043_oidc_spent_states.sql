-- assent store schema: a single sign-on sign-in in progress is held by its browser (a cookie
-- the gateway seals under a key derived from the audit key), no longer in `oidc_logins`
-- (review finding: a start took a place in a pool capped per client network, so anyone behind
-- an office's NAT kept its people's single sign-on refused). The database keeps only which
-- sign-ins were spent: the SHA-256 of each `state` whose code a callback exchanged (recorded
-- before the exchange), until a little after its cookie expired, so that one sign-in is one
-- code exchange on every replica. Sign-ins in progress when this runs are lost: their
-- browsers start again.
CREATE TABLE oidc_spent_states (
    state_sha256 TEXT COLLATE "C" PRIMARY KEY,
    kept_until   BIGINT NOT NULL
);
CREATE INDEX oidc_spent_states_kept ON oidc_spent_states(kept_until);
DROP TABLE oidc_logins;
