-- assent store schema: an approval's settlement carries a seal of its own (like its terms,
-- 0029): an HMAC-SHA256 under a key derived from the audit key, which the database never
-- holds, over its status, decided_at, decided scope, the edited call and its decision rows.
-- Before, whoever could write the database could turn a rejected approval into an approved
-- one (status and decision row) and the gateway signed a receipt saying so. A receipt is now
-- signed only for a settlement that holds its seal; approvals settled before have none ('')
-- and get no receipt.
ALTER TABLE approvals ADD COLUMN settlement_seal TEXT NOT NULL DEFAULT '';
