-- assent store schema: an approval row carries a seal over the terms it was held under (see
-- crates/assent-store/src/approval_seal.rs): an approval whose seal does not hold is never
-- approved (an operator's approval is refused as damaged; its expiry rejects). Rows from
-- before have no seal (''): pending ones can still be denied, cancelled or expire (rejected).
ALTER TABLE approvals ADD COLUMN seal TEXT NOT NULL DEFAULT '';
