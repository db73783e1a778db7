-- assent store schema: an SSO sign-in in progress remembers the SHA-256 of the client it was
-- started from (its address; an IPv6 address by its /48), so that one client holds at most a
-- few of them: starting one needs no key, and a flood from one address filled the table's
-- global bound and shut every operator out of SSO (review finding). Rows from before are
-- nobody's ('') and expire within 10 minutes.
ALTER TABLE oidc_logins ADD COLUMN client_sha256 TEXT NOT NULL DEFAULT '';
CREATE INDEX oidc_logins_client ON oidc_logins(client_sha256, expires_at);
