-- assent store schema: single sign-on for the dashboard (issue 14 §7). A sign-in through the
-- OpenID Connect provider in progress is kept here, by the SHA-256 of its `state`, so that any
-- replica finishes it: the nonce, the PKCE verifier, the SHA-256 of the browser cookie it is
-- bound to, where to go afterwards; taken once, until expires_at. A dashboard session says
-- whether a key or SSO started it, and an SSO session carries its own roles (JSON array).
CREATE TABLE oidc_logins (
    state_sha256   TEXT COLLATE "C" PRIMARY KEY,
    browser_sha256 TEXT COLLATE "C" NOT NULL,
    nonce          TEXT COLLATE "C" NOT NULL,
    pkce_verifier  TEXT COLLATE "C" NOT NULL,
    next           TEXT NOT NULL,
    expires_at     BIGINT NOT NULL
);
CREATE INDEX oidc_logins_expiry ON oidc_logins(expires_at);
ALTER TABLE ui_sessions ADD COLUMN kind TEXT NOT NULL DEFAULT 'key' CHECK (kind IN ('key', 'oidc'));
ALTER TABLE ui_sessions ADD COLUMN roles TEXT NOT NULL DEFAULT '[]';
