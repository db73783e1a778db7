//! Signed audit checkpoints in the server (issue 10 §11): the timer that signs one when due
//! (`audit_checkpoints` in the config), the external sinks (the append-only JSONL file and the
//! log), and `GET /v1/audit/checkpoints`.
//!
//! The checkpoint itself — what is signed, the key, the table — is
//! [`assent_store::checkpoint`].

use crate::body::{Body, to_value};
use crate::error::ApiError;
use crate::extract::{Operator, ReadCheckpoints};
use crate::formats::rfc3339;
use crate::state::{AppState, now_ms};
use assent_api::audit::{self as api, CheckpointList};
use assent_store::checkpoint::{Checkpoint, Due, public_key_hex};
use axum::extract::{Query, State};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

/// The running checkpoint timer ([`spawn`]); [`Signer::stop`] ends it between two checkpoints.
pub struct Signer {
    stop: std::sync::Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Signer {
    /// Stops the timer and waits for a checkpoint it is signing to be published too. (Aborting
    /// it could end it after the checkpoint was stored but before it reached the checkpoint
    /// file; the shutdown checkpoint then found nothing new to sign, and the file's newest
    /// checkpoint no longer covered the chain's tail, so a truncated tail went unnoticed.)
    pub async fn stop(self) {
        self.stop.notify_one();
        let _ = self.task.await;
    }
}

/// Checks every `interval` whether a checkpoint is due, and signs and publishes it, until
/// [`Signer::stop`].
pub fn spawn(state: AppState, interval: Duration) -> Signer {
    let stop = std::sync::Arc::new(tokio::sync::Notify::new());
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        let due = Due {
            every_records: state.checkpoints.every_records.min(i64::MAX as u64) as i64,
            every_ms: state.checkpoints.every_seconds.saturating_mul(1000) as i64,
        };
        loop {
            // A superseded replica writes nothing (its store refuses): the newest sign.
            if state.generation.superseded().is_none() {
                sign_due(&state, due).await;
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stopped.notified() => return,
            }
        }
    });
    Signer { stop, task }
}

/// Signs a checkpoint if one is `due` and publishes it: stored by the store, appended to the
/// configured file, logged (`tracing::info!`), and kept as [`AppState::published`] (once the
/// file has it, when there is one). Failures are logged, never fatal: a chain that no longer
/// extends the previous checkpoint — the newest stored, or the newest this process published
/// ([`AppState::published`]: read from the file at start-up, then each one it signed) — is
/// logged as an error and nothing is signed.
pub async fn sign_due(state: &AppState, due: Due) {
    let published = state.published.lock().expect("not poisoned").clone();
    let signed = state
        .store_task(move |s| s.checkpoint_if_due_after(due, now_ms(), published.as_ref()))
        .await;
    let cp = match signed {
        Ok(Ok(Some(cp))) => cp,
        Ok(Ok(None)) | Err(_) => return,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "audit checkpoint not signed");
            return;
        }
    };
    tracing::info!(
        seq = cp.seq, head_hash = %cp.head_hash, record_count = cp.record_count,
        time = cp.time, public_key = %cp.public_key, signature = %cp.signature,
        "audit checkpoint"
    );
    let Some(file) = state.checkpoints.file.clone() else {
        // Without a file, this process still remembers what it signed: the next checkpoint
        // must extend it, whatever the stored ones say (found by review: with the stored
        // checkpoints deleted, a rewritten and re-chained chain was signed at the next tick,
        // and `audit verify --max-unsigned` passed).
        *state.published.lock().expect("not poisoned") = Some(cp);
        return;
    };
    let line = cp.clone();
    let f = file.clone();
    let res =
        tokio::task::spawn_blocking(move || assent_store::checkpoint::append_jsonl(&f, &line))
            .await;
    match res {
        Ok(Ok(())) => *state.published.lock().expect("not poisoned") = Some(cp),
        Ok(Err(e)) => {
            tracing::error!(file = %file.display(), error = %e, "audit checkpoint not written to the checkpoint file");
        }
        Err(_) => {}
    }
}

/// A checkpoint on the wire: its fields, with `time` (Unix milliseconds) also as RFC 3339
/// (`at`).
pub fn checkpoint(cp: &Checkpoint) -> api::Checkpoint {
    api::Checkpoint {
        signed: cp.clone(),
        at: rfc3339(cp.time),
    }
}

/// [`checkpoint`] as a JSON value (keys sorted), for the webhook bodies that embed it.
pub fn to_json(cp: &Checkpoint) -> Value {
    to_value(&checkpoint(cp))
}

/// `GET /v1/audit/checkpoints[?limit=N&before_seq=S]` (operators): stored checkpoints, newest
/// first (`limit` 1–1000, default 100; `before_seq`: only those covering fewer records; any
/// other parameter is `400`), with the gateway's audit public key (64 hex).
#[utoipa::path(get, path = "/v1/audit/checkpoints", operation_id = "list_checkpoints", tag = "around",
    params(("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "At most this many (default 100)"), ("before_seq" = Option<i64>, Query, description = "Only checkpoints covering fewer records")),
    responses((status = 200, description = "OK", body = assent_api::audit::CheckpointList)),
    security(("operator_key" = [])))]
pub(crate) async fn list(
    State(st): State<AppState>,
    _op: Operator<ReadCheckpoints>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Body<CheckpointList>, ApiError> {
    let (before, limit) = crate::extract::page(&q, "before_seq")?;
    let list = st
        .store_call(move |s| s.recent_checkpoints(before, limit))
        .await?;
    Ok(Body(CheckpointList {
        public_key: public_key_hex(&st.store.audit_public_key()),
        checkpoints: list.iter().map(checkpoint).collect(),
    }))
}
