-- assent store schema: a question's AAEP event names its clarification (found by review: a
-- stream resuming past the resume window was sent the confirmations still pending from the
-- part of the log it skipped, but not the questions still pending there, which then expired
-- unanswered on that channel). Indexed for the questions' events only.
ALTER TABLE aaep_events ADD COLUMN clarification_id TEXT;
CREATE INDEX aaep_events_asking ON aaep_events(clarification_id) WHERE clarification_id IS NOT NULL;
-- The questions pending while this runs get theirs too, found by their reply token (unique;
-- the event's compact JSON holds it once, as "reply_token":"rpl_…").
UPDATE aaep_events SET clarification_id = (
    SELECT c.id FROM clarifications c
    WHERE c.status = 'pending' AND aaep_events.data LIKE ('%"reply_token":"' || c.reply_token || '"%')
    LIMIT 1)
WHERE type = 'aaep:agent.awaiting.clarification' AND subscription_id IS NULL;
