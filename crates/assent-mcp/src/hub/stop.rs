//! Stopping a hub call its client cancelled, or left ([`stop_unless_forwarded`]): shared by
//! the call's handler, its task and the hub's record of each session's calls.

use crate::gateway::Gateway;
use crate::kit::HoldState;

/// How long a stopped call's wait may go on after its approval was withdrawn, for the
/// withdrawal (or the decision that came first) to end it; then it is aborted.
const SETTLE_AFTER_STOP: std::time::Duration = std::time::Duration::from_secs(120);

/// A call's client cancelled it: a call not forwarded yet stops (the hold set to
/// [`crate::kit::Hold::Cancelled`] (`why`) so it is never forwarded, `job` aborted, its pending
/// approval withdrawn — one its proposal makes once it lands as well, by the gateway client
/// that tracks it, `Gateway::settle_proposals`); one already forwarded ([`crate::kit::Hold::Forwarding`]) runs to its end, so that its
/// result is reported and recorded (found by review: dropped with the request, a call the
/// upstream may have carried out left no `call.result`). A call held for an approval is not
/// aborted but withdrawn, its own wait ending with that — or with the decision that came
/// first, its token redeemed: then it is reported as not run (found by review: aborted, it
/// left the approval redeemed with no word of what became of the call). `why`: the
/// withdrawal's reason.
pub(super) async fn stop_unless_forwarded(
    job: &tokio::task::AbortHandle,
    held: &HoldState,
    gw: &Gateway,
    why: &'static str,
) {
    if let Some(withdrawn) = stop_now(job, held, gw, why) {
        withdrawn.await;
    }
}

/// [`stop_unless_forwarded`] without waiting: the withdrawal (when the call was held for an
/// approval) runs on the gateway client's tracker, which [`Gateway::settle_proposals`] waits
/// for; the returned future (`None`: nothing to withdraw) ends with it. For stopping many calls
/// at once (the hub's shutdown: found by review, withdrawn one after the other, each up to the
/// gateway's busy timeout, they took the shutdown past its bound).
pub(super) fn stop_now(
    job: &tokio::task::AbortHandle,
    held: &HoldState,
    gw: &Gateway,
    why: &'static str,
) -> Option<impl Future<Output = ()> + Send + use<>> {
    let approval = halt(job, held, why)?;
    Some(withdraw(job, gw, &approval, why))
}

/// The first half of [`stop_now`], which makes no gateway call: the call is marked stopped
/// ([`crate::kit::Hold::Cancelled`] (`why`), never forwarded from now on) unless it is being
/// forwarded; one not held for an approval is aborted. `Some(approval)`: the approval it holds,
/// still to be withdrawn ([`withdraw`]).
pub(super) fn halt(
    job: &tokio::task::AbortHandle,
    held: &HoldState,
    why: &'static str,
) -> Option<String> {
    let was = crate::kit::cancel_unless_forwarded(held, why)?;
    let approval = was.approval();
    if approval.is_none() {
        job.abort();
    }
    approval
}

/// The second half of [`stop_now`]: withdraws `approval` (on the gateway client's tracker,
/// at once; the returned future ends with it), and aborts `job` if its wait has not ended
/// [`SETTLE_AFTER_STOP`] later.
pub(super) fn withdraw(
    job: &tokio::task::AbortHandle,
    gw: &Gateway,
    approval: &str,
    why: &'static str,
) -> impl Future<Output = ()> + Send + use<> {
    let withdrawn = gw.cancel(approval, why);
    let job = job.clone();
    tokio::spawn(async move {
        tokio::time::sleep(SETTLE_AFTER_STOP).await;
        job.abort();
    });
    withdrawn
}
