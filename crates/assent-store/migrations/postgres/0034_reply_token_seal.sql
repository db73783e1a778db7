-- assent store schema: an approval's seal (0029, 0033) also covers its AAEP reply token. An
-- operator's confirmation.reply names the approval by that token alone; before, whoever could
-- write the database could move a pending call's token onto another pending call, and the
-- operator's accept approved that one. Seals written before are voided here: those approvals
-- can be denied or expire (rejected), not be approved.
UPDATE approvals SET seal = '' WHERE status = 'pending';
