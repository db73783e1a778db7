//! The relay's pin check of the upstream's tools: the check's shared result ([`Pins`], set
//! from the proxy's own `tools/list`) and the gate every call passes first ([`pin_gate`]),
//! which waits for the review of a changed tool. Reading and reporting the list is the
//! upstream reader's job.

use crate::gateway::Gateway;
use crate::kit::{Hold, HoldState};
use assent_api::tools::{PinState, ToolState};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::watch;

/// The pin check of the upstream's tools: `None` until the first check finished.
pub(super) type Pins = watch::Sender<Option<Result<HashMap<String, ToolState>, String>>>;

/// The id prefix of the proxy's own `tools/list` requests (`assent-pins-N`, N the tools read so far).
pub(super) const PIN_ID_PREFIX: &str = "assent-pins-";

/// Waits for the pin check and returns whether `tool` may be called now: `Ok` when pinned or
/// accepted after review, `Err(why)` otherwise. Waits for a pending review.
pub(super) async fn pin_gate(
    gw: &Gateway,
    pins: &Pins,
    tool: &str,
    held: &HoldState,
) -> Result<(), String> {
    let mut rx = pins.subscribe();
    let checked = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(Option::is_some))
        .await
        .map_err(|_| "the upstream's tool list could not be verified in time".to_string())?
        .map_err(|_| "the proxy is shutting down".to_string())?
        .clone()
        .expect("checked");
    let state = match checked {
        Err(e) => {
            return Err(format!(
                "the upstream's tool list could not be verified: {e}"
            ));
        }
        Ok(map) => map.get(tool).cloned(),
    };
    match state {
        None => Err(format!(
            "`{tool}` is not in the upstream's verified tool list"
        )),
        Some(s) if s.state != PinState::Held => Ok(()),
        Some(s) => {
            let id = s.review_id.unwrap_or_default();
            tracing::info!(tool, review_id = %id, "call waits for the review of a changed tool");
            held.send_replace(Hold::Review(id.clone()));
            gw.await_review(&id).await?;
            // Only the entry this review was about: a check made since (the upstream changed
            // the tool again) holds it under a newer review, which stays held (found by
            // review: accepting the older review marked the newer definition pinned).
            pins.send_modify(|p| {
                if let Some(Ok(map)) = p
                    && let Some(t) = map.get_mut(tool)
                    && t.review_id.as_deref() == Some(id.as_str())
                {
                    t.state = PinState::Pinned;
                }
            });
            Ok(())
        }
    }
}
