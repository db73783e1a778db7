-- assent store schema: the `settlement.sealing` record (`sealing_marker.rs`), the audit
-- chain's word that the gateway seals every settlement from there on, read at every start
-- and by every `audit verify`, and by retention under the writer's lock: through this
-- partial index rather than a scan of the whole audit table.
CREATE INDEX audit_settlement_sealing ON audit(seq) WHERE kind = 'settlement.sealing';
