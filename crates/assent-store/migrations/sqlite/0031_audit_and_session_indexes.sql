-- assent store schema: the index of audit records by approval holds only the kinds looked up
-- by approval (BENCHMARKS.md, B3 over HTTP): the MPLP Confirm's `confirm.*` records (its view
-- and learning samples), an approval's `dry_run` and a plan's `pipeline_stage` records. Every
-- other record (the request, the decision, the token's minting and redemption, the call's
-- outcome: four of a held call's six) no longer adds an entry keyed by the approval's random
-- id. Retention's look-up of pending approvals' records scans the range it archives by `seq`.
DROP INDEX audit_approval;
CREATE INDEX audit_approval ON audit(approval_id, kind)
    WHERE kind LIKE 'confirm.%' OR kind = 'dry_run' OR kind = 'pipeline_stage';
-- A session's pending approvals (cancelling a session, by an operator for every agent): found
-- by review of 0030, which left that look-up reading the whole session's history.
CREATE INDEX approvals_pending_session ON approvals(session_id) WHERE status = 'pending';
