-- assent store schema: reads that walked the whole history (found by review). The count of an
-- agent's recent decisions asked at every in-client approval and operator edit scanned every
-- approval (`usage.rs` `calls_since`: now by the decisions of the last minute); the
-- clarification list sorted every question ever asked; an operator's session cancel scanned
-- every question; a receipt scanned every grant.
CREATE INDEX decisions_at ON decisions(at);
CREATE INDEX clarifications_requested ON clarifications(requested_at, id);
CREATE INDEX clarifications_status_requested ON clarifications(status, requested_at, id);
CREATE INDEX clarifications_session ON clarifications(session_id);
CREATE INDEX grants_approval ON grants(approval_id);
