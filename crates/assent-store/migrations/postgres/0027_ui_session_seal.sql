-- assent store schema: each dashboard session row carries a seal, an HMAC-SHA256 under a key
-- derived from the audit key (which every replica reads from keys_dir and the database never
-- holds) over the row's columns. A session row planted or edited by whoever can write the
-- database, without the key, does not sign anyone in (before, a planted row was a
-- dashboard session as any operator, whose approvals then carried that operator's name in
-- genuine audit records). Rows from before have no seal (''): their operators sign in again.
ALTER TABLE ui_sessions ADD COLUMN seal TEXT NOT NULL DEFAULT '';
