-- assent store schema: quorum vote rows carry a seal, like tokens and grants (0028): an
-- HMAC-SHA256 over the row's columns under a key derived from the audit key, which the
-- database never holds. Before, whoever could write the database could plant N-1 votes under
-- approvers' names and have the next genuine vote meet the quorum; audit verify found it only
-- afterwards. On a pending approval a vote without its seal is not counted (nor shown), and
-- one with another row's seal refuses approving it. Rows from before have no seal (''): on a
-- pending approval their voters vote again.
ALTER TABLE votes ADD COLUMN seal TEXT NOT NULL DEFAULT '';
