//! What a retention run records of the approvals its export names
//! ([`crate::Store::archived_entries`]): judged a chunk at a time, so that a run naming many
//! holds the store's connection only briefly each time.

use crate::error::StoreError;
use std::collections::BTreeMap;

/// Approvals a run judges per hold of the store's connection ([`crate::Store::archived_entries`]).
const ENTRY_CHUNK: usize = 256;

impl crate::Store {
    /// The settlement and terms seal keys a run records archived approvals' seals under.
    fn archive_seal_keys(&self) -> (crate::seal::SealKey, crate::seal::SealKey) {
        use crate::seal::Sealed;
        (
            self.seal_key(Sealed::Settlement),
            self.seal_key(Sealed::Approval),
        )
    }

    /// What a run whose export names the approvals `ids` records of them
    /// ([`crate::archived_approvals::to_record`]), [`ENTRY_CHUNK`] approvals per hold of the
    /// store's connection (found by review: a run naming 50,000 approvals held it, and so
    /// every request of this process, for the whole pass). An approval changed between
    /// chunks is caught by the deleting transaction ([`crate::archived_approvals::record`]).
    pub(crate) fn archived_entries(
        &self,
        ids: &BTreeMap<String, Option<i64>>,
    ) -> Result<Vec<crate::archived_approvals::Entry>, StoreError> {
        let keys = self.archive_seal_keys();
        let cuts = {
            let guard = self.lock();
            let conn = guard.conn();
            let cut = crate::integrity_people::takeover_cut(conn)?;
            (cut, crate::sealing_marker::position(conn)?)
        };
        let ids: Vec<_> = ids.iter().collect();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(ENTRY_CHUNK) {
            let guard = self.lock();
            let keys = (&keys.0, &keys.1);
            let entries = chunk.iter().copied();
            out.extend(crate::archived_approvals::to_record(
                guard.conn(),
                keys,
                entries,
                cuts,
            )?);
        }
        Ok(out)
    }
}
