-- assent store schema: escalation chains (issue 14 §3). The approval's escalation as its rules
-- gave it (JSON), its schedule fixed when it was raised (JSON: steps with Unix-ms times and the
-- roles they add, and the deadline of the default decision), and how many steps were taken.
-- Rows written before keep `escalate_to`/`escalate_after_ms`, read as one `on_timeout` step.
ALTER TABLE approvals ADD COLUMN escalation TEXT;
ALTER TABLE approvals ADD COLUMN escalation_schedule TEXT;
ALTER TABLE approvals ADD COLUMN escalation_steps BIGINT NOT NULL DEFAULT 0;
