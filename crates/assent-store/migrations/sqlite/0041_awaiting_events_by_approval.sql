-- assent store schema: the AAEP confirmation event (`aaep:agent.awaiting.confirmation`) of each
-- approval, found by the approval. A stream resuming past the resume window is sent the
-- confirmations still pending from the part of the log it skipped (found by review: enough
-- events after a confirmation — an agent proposing and cancelling in a loop — pushed it out of
-- a reconnecting subscriber's window, and its approving default then ran unseen).
CREATE INDEX aaep_events_awaiting ON aaep_events(approval_id) WHERE type = 'aaep:agent.awaiting.confirmation';
