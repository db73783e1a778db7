-- assent store schema: an approval's seal (0029) covers who may decide it and when as well as
-- its terms: the approvers, expires_at and the escalation columns, which only the gateway's
-- escalation steps change (sealing the row again). Before, whoever could write the database
-- could add a role of their own to a pending call's approvers, for an operator without the
-- call's role to approve it, or move its deadline. Seals written before cover the terms only
-- and are voided here: those approvals can be denied or expire (rejected), not be approved.
-- The migration also keeps binaries older than this one (which would escalate without
-- sealing) from serving the database beside newer replicas.
UPDATE approvals SET seal = '' WHERE status = 'pending';
