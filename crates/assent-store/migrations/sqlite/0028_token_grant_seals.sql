-- assent store schema: token and grant rows carry a seal, like dashboard sessions (0027): an
-- HMAC-SHA256 over the row's columns under a key derived from the audit key, which the
-- database never holds. A token row without its seal gives no token and redeems nothing; a
-- grant row without one covers no call. Before, whoever could write the database could plant
-- a token row (the gateway signed it for the agent) or a grant row (the gateway approved calls
-- by it) and have any call run; audit verify found it only afterwards. Rows from before have
-- no seal (''): tokens not yet redeemed must be approved again, grants given again.
ALTER TABLE tokens ADD COLUMN seal TEXT NOT NULL DEFAULT '';
ALTER TABLE grants ADD COLUMN seal TEXT NOT NULL DEFAULT '';
