//! The audit page's verification of the audit chain (`GET /ui/audit`, [`super::views`]):
//! beside the writer and one at a time in this process ([`verified`]).

use assent_store::audit::VerifyReport;
use assent_store::{Store, StoreError};
use std::sync::Weak;
use std::time::Instant;

/// The newest audit-chain verification of the audit page in this process: its store, when
/// it began, its report.
type LastVerified = Option<(Weak<Store>, Instant, VerifyReport)>;

/// One audit page's verification at a time in this process ([`verified`]).
static VERIFIED: std::sync::Mutex<LastVerified> = std::sync::Mutex::new(None);

/// The audit chain's verification for a page asked for at `asked` of `store` (`s`), beside
/// the writer ([`Store::verify_audit`]) and one at a time (single flight, on the blocking
/// pool, so a client hanging up does not end its turn early): a page asked for while another
/// verification ran waits for it, then takes the report of one that began after it was asked,
/// or runs its own. Found by review: every refresh of `/ui/audit` scanned the whole chain, on
/// the writer's connection, side by side with every other refresh.
pub(crate) fn verified(
    s: &Store,
    store: Weak<Store>,
    asked: Instant,
) -> Result<VerifyReport, StoreError> {
    let mut last = VERIFIED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((of, began, report)) = &*last
        && Weak::ptr_eq(of, &store)
        && *began >= asked
    {
        return Ok(report.clone());
    }
    let began = Instant::now();
    let report = s.verify_audit()?;
    *last = Some((store, began, report.clone()));
    Ok(report)
}
