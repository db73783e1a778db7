-- assent store schema: a session is over for its agent once a cancellation of it begins, not
-- only once `aaep:agent.session.cancelled` is announced (which waits until nothing of the
-- agent is left pending in it). A `cancelled_sessions` row is written first, `announced` 0,
-- then marked 1 when announced, or deleted when the cancellation leaves a call of the agent
-- pending; a row from before this migration was announced. Calls of the agent in a session
-- with a row are refused (`call.refused`, 409 SESSION_CANCELLED). Found by review: calls held
-- while the cancellation was cancelling the pending ones kept the session from being
-- announced, and so from ever being over.
ALTER TABLE cancelled_sessions ADD COLUMN announced INTEGER NOT NULL DEFAULT 1;
