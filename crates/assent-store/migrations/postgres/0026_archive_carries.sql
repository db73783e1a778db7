-- assent store schema: what an audit archive run wrote again at the chain's end before it
-- deleted its records, part of the run's signed manifest. '' for runs before this migration
-- (passkey registrations only); 'tools' for runs that also carried the records of the
-- standing tool pins and reviews, so that `audit verify` need not excuse a pin or review row
-- by its own (forgeable) date once those runs cover it.
ALTER TABLE audit_archives ADD COLUMN carries TEXT NOT NULL DEFAULT '';
