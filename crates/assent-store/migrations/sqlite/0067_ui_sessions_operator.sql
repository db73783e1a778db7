-- assent store schema: dashboard sessions by their operator. A sign-in prunes the operator's
-- oldest sessions beyond the cap and, by single sign-on, reads the person's other sessions to
-- end those its groups no longer stand behind (`ui_sessions.rs`); both walked the whole table
-- (found by review).
CREATE INDEX ui_sessions_operator ON ui_sessions(operator);
