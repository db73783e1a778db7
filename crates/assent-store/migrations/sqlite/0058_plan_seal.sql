-- assent store schema: a plan's row carries a seal (HMAC-SHA256 under a key derived from the
-- audit key, which the database never holds) over its columns, written by the gateway with
-- every change it makes to the plan. A plan whose row does not hold its seal (its status set
-- back to `approved` after its stop, its agent or body edited, the row planted) reads as
-- `damaged`: it runs no calls, its calls' tokens and grants stand for nothing, and it takes no
-- transition. Rows from before this migration have no seal and read as damaged too: their
-- agents create their plans again. The plan ids recorded with a held call
-- (`confirm_context.plan_id`, `step_id`, `plan_owner`) are covered by the approval's own seal
-- from this migration on.
ALTER TABLE plans ADD COLUMN seal TEXT;
