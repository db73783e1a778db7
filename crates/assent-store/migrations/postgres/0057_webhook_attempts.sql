-- assent store schema: a webhook's cursor keeps how many times the event after it was tried
-- (`attempts`, of the audit record `attempt_seq`), so that a restart, a lease taken over by
-- another replica or a failed renewal during the backoff goes on counting towards
-- `max_attempts`, with the backoff that count gives, instead of starting the event again at its
-- first attempt. 0 for a cursor from before this migration: its event counts from 1.
ALTER TABLE webhook_cursors ADD COLUMN attempt_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE webhook_cursors ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
