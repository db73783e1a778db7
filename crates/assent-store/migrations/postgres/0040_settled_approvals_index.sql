-- assent store schema: the learning-sample export reads settled approvals in pages, in the
-- order `(COALESCE(decided_at, -1), id)` after a cursor (keyset paging). Without an index in
-- that order every page scanned the whole approvals table, so reading an export of N settled
-- approvals cost N pages' worth of scans (found by review). A decision adds one entry at the
-- index's newest end; a pending approval holds none.
CREATE INDEX approvals_settled ON approvals((COALESCE(decided_at, -1)), id) WHERE status != 'pending';
