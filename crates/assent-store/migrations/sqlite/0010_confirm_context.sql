-- assent store schema: what governed a held call when it was held (issue 10, MPLP Confirm
-- fidelity): the governance policies behind its verdict, the SHA-256 of the policy set then
-- loaded, and the MPLP plan and step the call named. One row per approval that has any.
CREATE TABLE confirm_context (
    approval_id        TEXT PRIMARY KEY REFERENCES approvals(id),
    policies           TEXT NOT NULL DEFAULT '[]', -- JSON array of governance policy ids
    policy_set_sha256  TEXT,                       -- hex; NULL when none was given
    plan_id            TEXT,                       -- UUID v4, when the call named a plan
    step_id            TEXT                        -- UUID v4, when the call named a step
);
