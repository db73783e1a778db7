-- assent store schema: an approval's settlement carries a seal of its own (like its terms,
-- 0029): an HMAC-SHA256 under a key derived from the audit key, which the database never
-- holds, over its status, decided_at, decided scope, the edited call, its decision rows and
-- the seals of its votes. Before, whoever could write the database could turn a rejected
-- approval into an approved one (status and decision row), drop an operator's edit or rename
-- a voter, and the gateway signed a receipt saying so. The terms' seal written from now on
-- also covers the governance recorded when the call was held (confirm_context: the policies
-- a receipt names). A receipt is signed only when both hold in today's form: approvals held
-- or settled before this migration get none (those pending now can still be decided).
ALTER TABLE approvals ADD COLUMN settlement_seal TEXT NOT NULL DEFAULT '';
