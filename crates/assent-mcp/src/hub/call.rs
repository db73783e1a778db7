//! One `tools/call` through the hub ([`Call`]): the pin check of the tool as the upstream
//! defines it now (waiting for the review of a changed one), the gateway (waiting for a human
//! when held, or asking a modern client in an `input_required` result), the upstream, and the
//! result report (holding a result over `output_bytes`). Progress, cancellation and tasks are
//! the handler's.

use super::state::Hub;
use super::upstream::{CALL_TIMEOUT, Upstream, told, tool_json};
use crate::ask::{Asker, UserAnswer};
use crate::era;
use crate::gateway::Gateway;
use crate::kit::{Hold, HoldState, Outcome};
use assent_api::gate::CallOutcome;
use assent_api::tools::PinState;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;
use std::sync::Arc;

/// The `TOOL_DENIED: why` error result of a call that is not forwarded.
pub(super) fn denied_result(why: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("TOOL_DENIED: {why}"))])
}

/// An error result that is not a denial (the call could not be completed).
pub(super) fn failed(why: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(why.to_string())])
}

/// One `tools/call` on its way through the hub, owning what it needs so that it can outlive
/// the request when it becomes a task.
pub(super) struct Call {
    pub(super) hub: Arc<Hub>,
    pub(super) gw: Gateway,
    /// The caller's agent key and the agent it names (the hub's pin reports are made with
    /// them, [`Hub::check_pins`]).
    pub(super) key: String,
    pub(super) agent: String,
    pub(super) alias: String,
    pub(super) tool: String,
    pub(super) args: Value,
    /// What the call waits for, for progress, status and cancellation.
    pub(super) held: Arc<HoldState>,
    /// For a call made as an MCP task: its place in the budgets for task results, where it
    /// sets aside room for its result before it is forwarded ([`Call::run`]).
    pub(super) result_slot: Option<Arc<crate::tasks::ResultSlot>>,
    /// For a client that keeps no MCP session: the call's mark in its agent's stateless
    /// session, held until the call ends ([`Hub::stateless_session`]).
    pub(super) _stateless: Option<super::state::InFlight>,
    /// The weight of its arguments, counted for its agent and in all until the call ends
    /// ([`super::held::HeldCalls`]).
    pub(super) weight: super::held::CallWeight,
}

impl Call {
    /// The pin check of the tool as the upstream defines it now, the gateway (waiting for a
    /// human when held), the upstream, and the result report (holding a result over
    /// `output_bytes`). A denial is a `TOOL_DENIED:` error result; the call is then never
    /// forwarded. A modern client that may approve in the client gets an `input_required`
    /// question instead ([`era::input_required`]); its retry comes back as `resume` (the
    /// approval it names and the user's answer) and goes through [`Gateway::resume`].
    ///
    /// `Err` (JSON-RPC `-32000`, naming the bound): the call as approved, with an operator's
    /// edited arguments, would take its agent's held bytes or the hub's past their bound
    /// beside other calls ([`super::held::CallWeight::resize`]); it is not run, and reported
    /// as not run.
    pub(super) async fn run(
        mut self,
        ask: Asker,
        resume: Option<(String, Option<UserAnswer>)>,
    ) -> Result<CallToolResponse, McpError> {
        let hub = self.hub.clone();
        let Some(up) = hub.upstreams.get(&self.alias) else {
            return Ok(failed(&format!("no MCP upstream `{}`", self.alias)).into());
        };
        let Some(peer) = &up.peer else {
            return Ok(failed(&format!("upstream `{}` is unavailable", self.alias)).into());
        };
        if let Err(denied) = self.pin_check(up).await {
            return Ok(denied.into());
        }
        let (gw, tool, args, held) = (&self.gw, &self.tool, &self.args, &self.held);
        let outcome = match resume {
            Some((id, answer)) => {
                gw.resume(&id, Some((tool, args)), answer.as_ref(), held)
                    .await
                    .0
            }
            None => gw.gate_asking(tool, args, held, ask).await,
        };
        let (edited, approval_id) = match outcome {
            Outcome::Denied(why) => return Ok(denied_result(&why).into()),
            Outcome::AskClient {
                approval_id,
                question,
            } => {
                return Ok(
                    match serde_json::from_value(era::input_required(&question, &approval_id)) {
                        Ok(ir) => CallToolResponse::InputRequired(ir),
                        Err(e) => failed(&format!("the in-client question failed: {e}")).into(),
                    },
                );
            }
            Outcome::Forward {
                edited,
                approval_id,
                ..
            } => (edited, approval_id),
        };
        // What the call keeps from here is what it runs with: its own arguments, or the
        // operator's edit in their place, weighed again (found by review: the edit was held
        // uncounted beside the agent's arguments).
        let run_with = match edited {
            None => std::mem::take(&mut self.args),
            Some(edit) => {
                self.args = Value::Null;
                self.reweigh_edit(&edit, approval_id.as_deref()).await?;
                edit
            }
        };
        let (gw, tool, held) = (&self.gw, &self.tool, &self.held);
        // A task's call sets aside room for its result first, and is not run when there is
        // none (found by review: it ran, and what it returned was dropped). Reported as not
        // run; the client may retry later.
        if let Some(Err(why)) = self.result_slot.as_ref().map(|s| s.reserve()) {
            let id = approval_id.as_deref();
            gw.report_no_result(tool, &run_with, id, CallOutcome::NotRun)
                .await;
            return Ok(denied_result(&why).into());
        }
        // Not once its client cancelled it (found by review: the cancel read the hold, then
        // aborted, and the step to Forwarding could fall in between).
        let cleared = held.send_if_modified(|h| {
            let go = !matches!(h, Hold::Cancelled(_));
            if go {
                *h = Hold::Forwarding;
            }
            go
        });
        if !cleared {
            // Cleared (its token redeemed, when it was held) but never run: the gateway is
            // told so (found by review: the audit ended at the redeemed token).
            let id = approval_id.as_deref();
            gw.report_no_result(tool, &run_with, id, CallOutcome::NotRun)
                .await;
            return Ok(failed("cancelled by the client").into());
        }
        Ok(self.forward(peer, run_with, approval_id).await)
    }

    /// Counts the operator's `edit` in place of the call's own arguments
    /// ([`super::held::CallWeight::resize`]); past its agent's bound or the hub's beside other
    /// calls it is not run: reported as not run (`approval_id` its approval) and `Err` is the
    /// `-32000` error naming the bound that answers it, as the stdio relay answers such an
    /// edit.
    async fn reweigh_edit(
        &mut self,
        edit: &Value,
        approval_id: Option<&str>,
    ) -> Result<(), McpError> {
        let Err(why) = self.weight.resize(crate::kit::json_weight(edit)) else {
            return Ok(());
        };
        tracing::warn!(tool = %self.tool, reason = %why, "a cleared call was not run");
        self.gw
            .report_no_result(&self.tool, edit, approval_id, CallOutcome::NotRun)
            .await;
        Err(McpError::new(
            rmcp::model::ErrorCode(super::held::BUSY),
            why,
            None,
        ))
    }

    /// The pin check: first the upstream's whole list, once (as `tools/list` does): a server
    /// first seen through a call is pinned whole, so its other tools do not count as new
    /// later. Then the tool, waiting for the review of a changed definition. `Err` is the
    /// denial to answer.
    async fn pin_check(&self, up: &Upstream) -> Result<(), CallToolResult> {
        let (gw, alias, tool) = (&self.gw, &self.alias, &self.tool);
        let check = |tools: Vec<Value>| async move {
            let hub = &self.hub;
            hub.check_pins(&self.key, &self.agent, alias, &tools).await
        };
        let list = match up.tools(false).await {
            Ok(list) => list,
            Err(e) => {
                return Err(denied_result(&format!(
                    "upstream `{alias}` tools/list failed: {e}"
                )));
            }
        };
        // The cached list is shared, not copied, and only the called tool is made JSON (the
        // whole list only for its one check): a call's cost no longer grows with the size of
        // the upstream's list (each call copied and converted every tool's definition).
        let Some(def) = list.iter().find(|t| t.name == tool.as_str()).map(tool_json) else {
            return Err(denied_result(&format!(
                "`{tool}` is not a tool of upstream `{alias}`"
            )));
        };
        let whole = up
            .whole_checked
            .get_or_try_init(|| async {
                check(list.iter().map(tool_json).collect())
                    .await
                    .map(|_| ())
            })
            .await;
        if let Err(e) = whole {
            return Err(denied_result(&format!(
                "the tool list could not be verified: {e}"
            )));
        }
        match check(vec![def]).await {
            Ok(states) => match states.get(tool) {
                Some(s) if s.state == PinState::Held => {
                    let review = s.review_id.clone().unwrap_or_default();
                    if !crate::kit::hold_unless_cancelled(&self.held, Hold::Review(review.clone()))
                    {
                        return Err(failed("cancelled by the client"));
                    }
                    gw.await_review(&review)
                        .await
                        .map_err(|why| denied_result(&why))
                }
                Some(_) => Ok(()),
                None => Err(denied_result(&format!("`{tool}` could not be verified"))),
            },
            Err(e) => Err(denied_result(&format!(
                "the tool list could not be verified: {e}"
            ))),
        }
    }

    /// Runs the cleared call upstream with `run_with` and reports its result before relaying
    /// it: its `call.result` record is committed first, and one over the call's output
    /// limit reaches the client only once released.
    async fn forward(
        &self,
        peer: &Peer<RoleClient>,
        run_with: Value,
        approval_id: Option<String>,
    ) -> CallToolResponse {
        let (gw, tool) = (self.gw.clone(), self.tool.clone());
        // Under way for the settling until its result (or no answer) is reported: a stdio hub
        // whose client left waits for it, within its bound, before its process ends (found
        // by review: a call still running upstream when rmcp had stopped lost its
        // `call.result`).
        let _settling = gw.settling_token();
        let mut params = CallToolRequestParams::new(tool.clone());
        // Spelt as the hash reads it, so the upstream gets the numbers the approver saw.
        if let Value::Object(m) = assent_core::canonical::as_hashed(&run_with) {
            params = params.with_arguments(m);
        }
        let span = crate::trace::upstream_span(&tool, approval_id.as_deref());
        let mut meta = serde_json::json!({});
        if crate::trace::stamp(&mut meta, &span)
            && let Ok(m) = serde_json::from_value(meta["_meta"].take())
        {
            params.meta = Some(m);
        }
        let called = tracing::Instrument::instrument(peer.call_tool(params), span);
        let mut result = match tokio::time::timeout(CALL_TIMEOUT, called).await {
            Ok(Ok(r)) => r,
            // The upstream's error message reaches the model as the tool's output: reported
            // and held as a result is (found by review: it went past `output_bytes` unmeasured
            // and unrecorded, of any size).
            Ok(Err(e @ rmcp::ServiceError::McpError(_))) => {
                failed(&format!("upstream `{}` failed: {}", self.alias, told(&e)))
            }
            // No answer came (the connection failed, or the upstream did not answer in time):
            // the call may or may not have run, and none of it reached the agent. Reported as
            // such, not as a result (found by review: reported through `release`, it was
            // recorded as the tool's result, and its session took in what the tool's output
            // brings, although nothing came back).
            Ok(Err(e)) => {
                let why = format!("upstream `{}` failed: {}", self.alias, told(&e));
                return self.no_answer(&run_with, approval_id, &why).await;
            }
            Err(_) => {
                let why = format!(
                    "upstream `{}` did not answer within {} s",
                    self.alias,
                    CALL_TIMEOUT.as_secs()
                );
                return self.no_answer(&run_with, approval_id, &why).await;
            }
        };
        // Reported before it is relayed (issue 13 §4: its `call.result` record is durable
        // first; one over its output limit also waits for an operator); withheld when that fails.
        let text = serde_json::to_string(&result).unwrap_or_default();
        if let Err(why) = gw
            .release(&tool, &run_with, &text, approval_id.as_deref())
            .await
        {
            return denied_result(&format!("result withheld: {why}")).into();
        }
        // Relayed in the client's era: tagged `complete` here (a legacy upstream sends no
        // tag); rmcp removes the tag again for a legacy client.
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        result.into()
    }
}

impl Call {
    /// The forwarded call got no answer (`why`): reported as such ([`CallOutcome::NoAnswer`]:
    /// it may have run), and the client told why.
    async fn no_answer(
        &self,
        run_with: &Value,
        approval_id: Option<String>,
        why: &str,
    ) -> CallToolResponse {
        let id = approval_id.as_deref();
        self.gw
            .report_no_result(&self.tool, run_with, id, CallOutcome::NoAnswer)
            .await;
        failed(why).into()
    }
}
