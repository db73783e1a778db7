-- assent store schema: separation of duties (issue 14 §2). Whom a held call acts for (the
-- agent's `on_behalf_of`, a principal name) and whether its terms forbid that person and the
-- agent's owners from approving it.
ALTER TABLE approvals ADD COLUMN on_behalf_of TEXT COLLATE "C";
ALTER TABLE approvals ADD COLUMN separation_of_duties BOOLEAN NOT NULL DEFAULT false;
