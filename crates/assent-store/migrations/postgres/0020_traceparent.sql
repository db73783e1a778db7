-- assent store schema: the W3C trace context of the span that raised an approval (issue 15 §1),
-- `00-<trace-id>-<span-id>-<flags>`, so that the steps of its life cycle taken later (a person's
-- decision, expiry, the redemption) join the same trace. NULL when tracing was off or the row
-- predates it.
ALTER TABLE approvals ADD COLUMN traceparent TEXT;
