-- assent store schema: an approval's `token.redeemed` record found by the approval, as a
-- result report naming it reads it (the call hash the token was redeemed for, in the
-- transaction that links the report): found by review, that look-up read the whole audit log
-- under the write lock, once per report (1M records: 0.3-1.5 s each). One index entry per
-- redemption; migration 0031's narrowing of `audit_approval` stands for every other kind.
CREATE INDEX audit_redeemed ON audit(approval_id) WHERE kind = 'token.redeemed';
