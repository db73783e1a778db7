-- assent store schema: where the audit chain's word that every settlement is sealed stands
-- (`settlement.sealing`, migration 0054), as an archive run's signed manifest says it: the
-- least place a sealing record it archived names, or the previous anchor's, whichever is
-- earlier; NULL for runs before this migration and for runs that saw none. `audit verify`
-- holds every later settlement to its seal by it even when no sealing record is left in the
-- live chain (one deleted with the checkpoint over it, or never written because a record
-- put back behind the gateway's back stood in for it).
ALTER TABLE audit_archives ADD COLUMN sealing_since INTEGER;
