//! A proposal run to its end whatever becomes of its caller
//! ([`Gateway::propose_to_the_end`]): a call held by then is withdrawn, one cleared is
//! reported as not run, each on a task of the gateway client's tracker, so that a stdio front
//! end can wait for them before its process ends ([`Gateway::settle_proposals`]).

use super::Gateway;
use crate::kit::{Hold, HoldState, Outcome};
use assent_api::gate::{CallOutcome, Pending};
use serde_json::Value;
use tokio::sync::{oneshot, watch};
use tokio_util::task::task_tracker::TaskTrackerToken;

/// Why a call is withdrawn when its hold does not say: its caller was dropped without a
/// cancel (the MCP client's request went away).
const CANCELLED: &str = "the MCP client cancelled the request";

/// A proposal's answer, with a token of the tracker that keeps it counted as under way until
/// whoever reads it has settled it (between the proposing task's end and that, the tracker
/// would otherwise be empty, and [`Gateway::settle_proposals`] return with a withdrawal still to make).
type Answer = (Result<Pending, Outcome>, TaskTrackerToken);

impl Gateway {
    /// [`Gateway::propose`], run to its end even when the caller is dropped on the way (the
    /// client cancelled, or went away, while the proposal was being made): a call held by then
    /// is withdrawn at once (found by review: its approval stayed pending, counted against the
    /// agent's cap and open to an operator's approval, for a call nobody waited for), with the
    /// why of `held`'s [`Hold::Cancelled`] (`the MCP client disconnected`), and a call it
    /// cleared is reported as not run. A held call's `held` steps to [`Hold::Approval`] as the
    /// answer is read, unless it was cancelled first: then the approval is withdrawn and the
    /// outcome is a denial (`cancelled by the client`).
    pub(super) async fn propose_to_the_end(
        &self,
        tool: &str,
        arguments: &Value,
        held: &HoldState,
    ) -> Result<Pending, Outcome> {
        // Counted as under way from before the hold is read, so that a front end that
        // cancels the call and then waits for what is under way either finds this proposal
        // in its wait or stops it here.
        let under_way = self.settling.token();
        if matches!(*held.borrow(), Hold::Cancelled(_)) {
            return Err(Outcome::Denied("cancelled by the client".into()));
        }
        let call = (tool.to_string(), arguments.clone());
        let (this, tool, arguments) = (self.clone(), tool.to_string(), arguments.clone());
        let (tx, rx) = oneshot::channel::<Answer>();
        let hold = held.subscribe();
        // In the caller's span: the proposal carries the client's trace (`traceparent`).
        let proposing = async move {
            tracing::debug!(tool, "proposing the call to the gateway");
            let proposed = this.propose(&tool, &arguments).await;
            let token = this.settling.token();
            // The caller is gone: nobody waits for this call.
            if let Err((answer, _token)) = tx.send((proposed, token)) {
                this.settle_unread(answer, &hold, (tool, arguments)).await;
            }
        };
        self.settling
            .spawn(tracing::Instrument::in_current_span(proposing));
        drop(under_way);
        // Dropped before it read the answer, the guard settles one already sent.
        let mut guard = Proposing {
            rx: Some(rx),
            gw: self.clone(),
            call,
            hold: held.subscribe(),
        };
        let answer = guard.rx.as_mut().expect("set above").await;
        guard.rx = None;
        let Ok((answer, _token)) = answer else {
            return Err(Outcome::Denied(
                "the gateway could not be asked (the proposal failed)".into(),
            ));
        };
        let p = answer?;
        if crate::kit::hold_unless_cancelled(held, Hold::Approval(p.approval_id.clone())) {
            return Ok(p);
        }
        // Cancelled while it was proposed: no one waits for this approval. Withdrawn on a
        // tracked task of its own, as this call's own may be being aborted (found by review).
        let why = why_cancelled(&held.borrow());
        let _withdrawing = self.cancel(&p.approval_id, why);
        Err(Outcome::Denied("cancelled by the client".into()))
    }

    /// Settles a proposal's `answer` nobody read: a held call withdrawn (why: `hold`'s), a
    /// cleared one reported as not run (`call`: its tool and arguments).
    async fn settle_unread(
        &self,
        answer: Result<Pending, Outcome>,
        hold: &watch::Receiver<Hold>,
        (tool, arguments): (String, Value),
    ) {
        match answer {
            Ok(p) => {
                let why = why_cancelled(&hold.borrow());
                self.cancel(&p.approval_id, why).await
            }
            Err(Outcome::Forward { approval_id, .. }) => {
                let id = approval_id.as_deref();
                self.report_no_result(&tool, &arguments, id, CallOutcome::NotRun)
                    .await
            }
            Err(_) => {}
        }
    }
}

/// The reason a call's approval is withdrawn: its hold's, or [`CANCELLED`].
fn why_cancelled(hold: &Hold) -> &'static str {
    match hold {
        Hold::Cancelled(why) => why,
        _ => CANCELLED,
    }
}

/// The answer of a proposal still to be read ([`Gateway::propose_to_the_end`]): dropped unread
/// (its caller went away), an approval it holds is withdrawn, and a call it cleared is
/// reported as not run.
struct Proposing {
    rx: Option<oneshot::Receiver<Answer>>,
    gw: Gateway,
    /// The call proposed: its tool and arguments.
    call: (String, Value),
    /// The call's hold, for the why of a withdrawal.
    hold: watch::Receiver<Hold>,
}

impl Drop for Proposing {
    fn drop(&mut self) {
        // Closed first, so that the proposing task either sent its answer already (read
        // here) or finds nobody to send it to (and settles it itself).
        let Some(Ok((answer, token))) = self.rx.take().map(|mut rx| {
            rx.close();
            rx.try_recv()
        }) else {
            return;
        };
        let (gw, hold, call) = (
            self.gw.clone(),
            self.hold.clone(),
            std::mem::take(&mut self.call),
        );
        self.gw.settling.spawn(async move {
            gw.settle_unread(answer, &hold, call).await;
            drop(token);
        });
    }
}
