-- assent store schema: a call's reported results found by its approval. One report of an
-- outcome (`not_run`, `no_answer`) after the call's result is refused (found by review: an
-- agent recorded `not_run` for a call that ran), which needs the approval's results without
-- reading the whole audit table. Only held calls' results are in it (an allowed call's result
-- names no approval), so an allowed call's report still adds no entry keyed by a random id.
CREATE INDEX audit_results ON audit(approval_id) WHERE kind = 'call.result' AND approval_id IS NOT NULL;
