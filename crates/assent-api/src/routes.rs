//! One typed [`Client`] method per `/v1` route, in the order of an approval's life: gate,
//! approvals (read, wait, decide, cancel), tokens and grants, clarifications, plans, tools,
//! audit. Each sends the route's request type and parses its response type; errors are
//! [`ClientError`]s. The plumbing (URLs, status handling) is in [`crate::client`].

use crate::approvals::{
    Approval, ApprovalGroup, ApprovalGroups, ApprovalList, ApprovalRequestDoc,
    BatchDecisionRequest, BatchDecisionResponse, CancelRequest, DecisionRequest, Receipt,
    SessionCancelled, UserDecisionRequest,
};
use crate::audit::{CheckpointList, DeadLetterList, LearningSamplePage};
use crate::clarify::{AnswerRequest, AskRequest, Clarification, ClarificationList};
use crate::client::{Client, ClientError};
use crate::gate::{DelegationRequest, GateAnswer, ToolCallRequest, ToolResultRequest};
use crate::identity::{Health, WhoAmI};
use crate::kit::ApprovalStatus;
use crate::plans::{
    ConfirmRequest, CreatePlanRequest, PipelineEvents, SubmitPlanRequest, UpdatePlanRequest,
};
use crate::reload::Reloaded;
use crate::tokens::{GrantList, RedeemRequest, Redeemed};
use crate::tools::{
    DeclaredTools, ReviewStatus, ToolCheckRequest, ToolCheckResponse, ToolPinList, ToolReview,
    ToolReviewList,
};
use reqwest::Method;
use serde_json::Value;

/// At most this many pages of one listing are followed ([`Client::approvals`],
/// [`Client::approval_groups`], [`Client::grants`], [`Client::tool_reviews`]).
const MAX_PAGES: usize = 10_000;

/// The `limit` asked of each page of a listing read whole ([`Client::grants`],
/// [`Client::tool_reviews`]): the gateway's maximum, so the fewest round trips.
const PAGE_LIMIT: u32 = 1000;

/// The query of a list filtered by `status` and `limit`.
fn list_query(status: Option<&str>, limit: Option<u32>) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    if let Some(s) = status {
        q.push(("status", s.to_string()));
    }
    if let Some(l) = limit {
        q.push(("limit", l.to_string()));
    }
    q
}

impl Client {
    /// `GET /healthz`.
    pub async fn health(&self) -> Result<Health, ClientError> {
        self.get(&["healthz"], &[]).await
    }

    /// `GET /v1/whoami`: the principal of this client's key.
    pub async fn whoami(&self) -> Result<WhoAmI, ClientError> {
        self.get(&["v1", "whoami"], &[]).await
    }

    /// `POST /v1/reload` (operator): the gateway re-reads its configuration file. A refused
    /// file is [`ClientError::Status`] `422` whose body's `errors` name each problem
    /// ([`crate::ApiErrorBody::errors`]); the old set stays in force.
    pub async fn reload(&self) -> Result<Reloaded, ClientError> {
        let none: Option<&()> = None;
        self.call(Method::POST, &["v1", "reload"], &[], none).await
    }

    /// `POST /v1/tool-calls`: gates one tool call.
    pub async fn propose(&self, req: &ToolCallRequest) -> Result<GateAnswer, ClientError> {
        self.gate(&["v1", "tool-calls"], req).await
    }

    /// `POST /v1/delegations`: gates a delegation to a sub-agent.
    pub async fn delegate(&self, req: &DelegationRequest) -> Result<GateAnswer, ClientError> {
        self.gate(&["v1", "delegations"], req).await
    }

    /// `POST /v1/tool-results`: reports a forwarded call's result; held when over the
    /// `output_bytes` threshold.
    pub async fn report_result(&self, req: &ToolResultRequest) -> Result<GateAnswer, ClientError> {
        self.gate(&["v1", "tool-results"], req).await
    }

    /// `GET /v1/approvals[?status=S&limit=N]` (operator); `status` `None` is `all`. The
    /// gateway ends a page early after about 1 MiB of call text, naming the next in a `Link`
    /// `rel="next"`; the pages are followed until `limit` approvals (500, the gateway's
    /// default, when `None`) or the last page, so an agent's big calls cannot hide the older
    /// ones from an operator's list (`assent pending`, `assent watch`).
    pub async fn approvals(
        &self,
        status: Option<ApprovalStatus>,
        limit: Option<u32>,
    ) -> Result<ApprovalList, ClientError> {
        let want = limit.unwrap_or(500) as usize;
        let q = list_query(status.map(ApprovalStatus::as_str), limit);
        let mut all = Vec::new();
        self.follow_pages(&["v1", "approvals"], q, |page: ApprovalList| {
            all.extend(page.approvals);
            want.saturating_sub(all.len())
        })
        .await?;
        all.truncate(want);
        Ok(ApprovalList { approvals: all })
    }

    /// `GET /v1/approvals?group=similar[&status=S&limit=N]` (operator): the groups of similar
    /// approvals among the newest `limit` (500 when `None`), oldest group first, each group's
    /// approvals oldest first. The gateway groups each page on its own; the pages are followed
    /// (as [`Client::approvals`] does) and a group that spans pages is made one again (same
    /// agent, server, tool and rules, as the gateway groups).
    pub async fn approval_groups(
        &self,
        status: Option<ApprovalStatus>,
        limit: Option<u32>,
    ) -> Result<ApprovalGroups, ClientError> {
        let want = limit.unwrap_or(500) as usize;
        let mut q = list_query(status.map(ApprovalStatus::as_str), limit);
        q.push(("group", "similar".into()));
        let mut pages: Vec<Vec<ApprovalGroup>> = Vec::new();
        let mut have = 0usize;
        self.follow_pages(&["v1", "approvals"], q, |page: ApprovalGroups| {
            have += page.groups.iter().map(|g| g.approvals.len()).sum::<usize>();
            pages.push(page.groups);
            want.saturating_sub(have)
        })
        .await?;
        Ok(ApprovalGroups {
            groups: merge_groups(pages),
        })
    }

    /// `GET /v1/approvals/{id}`: the approval now (an agent sees only its own, with its
    /// `token` once minted).
    pub async fn approval(&self, id: &str) -> Result<Approval, ClientError> {
        self.get(&["v1", "approvals", id], &[]).await
    }

    /// `GET /v1/approvals/{id}/receipt`: the approval's receipt, signed now by the gateway's
    /// audit key (issue 14 §5; [`crate::approvals::Receipt`]).
    pub async fn receipt(&self, id: &str) -> Result<Receipt, ClientError> {
        self.get(&["v1", "approvals", id, "receipt"], &[]).await
    }

    /// `GET /v1/approvals/{id}?wait=S`: one long-poll, answered as soon as the approval leaves
    /// `pending` or after `wait_seconds` (at most 60) with it still pending; 0 sends no `wait`
    /// and answers at once (the server reads an absent `wait` as 0).
    pub async fn approval_wait(
        &self,
        id: &str,
        wait_seconds: u64,
    ) -> Result<Approval, ClientError> {
        self.get_waiting(&["v1", "approvals", id], wait_seconds)
            .await
    }

    /// Long-polls approval `id` (`poll_seconds` per request) until it leaves `pending`. The
    /// first error ends it; a caller that outlives gateway restarts retries
    /// [`ClientError::is_transport`] errors itself (the approval is durable).
    /// Requests are at least [`crate::client::MIN_POLL_INTERVAL`] apart
    /// ([`crate::client::pace_poll`]).
    pub async fn wait_decided(&self, id: &str, poll_seconds: u64) -> Result<Approval, ClientError> {
        loop {
            let asked = std::time::Instant::now();
            let a = self.approval_wait(id, poll_seconds).await?;
            if a.status != ApprovalStatus::Pending {
                return Ok(a);
            }
            crate::client::pace_poll(asked).await;
        }
    }

    /// `GET /v1/approvals/{id}?format=approval-request`: seed 002 ApprovalRequest.
    pub async fn approval_request_doc(&self, id: &str) -> Result<ApprovalRequestDoc, ClientError> {
        let q = [("format", "approval-request".to_string())];
        self.get(&["v1", "approvals", id], &q).await
    }

    /// `GET /v1/approvals/{id}?format=mplp`: the MPLP Confirm object, as JSON.
    pub async fn approval_mplp(&self, id: &str) -> Result<Value, ClientError> {
        let q = [("format", "mplp".to_string())];
        self.get(&["v1", "approvals", id], &q).await
    }

    /// `POST /v1/approvals/{id}/decision` (operator).
    pub async fn decide(&self, id: &str, req: &DecisionRequest) -> Result<Approval, ClientError> {
        self.post(&["v1", "approvals", id, "decision"], req).await
    }

    /// `POST /v1/approvals/decisions` (operator): one result per id, `200` even when some
    /// failed.
    pub async fn decide_batch(
        &self,
        req: &BatchDecisionRequest,
    ) -> Result<BatchDecisionResponse, ClientError> {
        self.post(&["v1", "approvals", "decisions"], req).await
    }

    /// `POST /v1/approvals/{id}/cancel` (the requesting agent or an operator).
    pub async fn cancel(&self, id: &str, req: &CancelRequest) -> Result<Approval, ClientError> {
        self.post(&["v1", "approvals", id, "cancel"], req).await
    }

    /// `POST /v1/approvals/{id}/user-decision` (the agent that asked): its user's decision.
    pub async fn user_decision(
        &self,
        id: &str,
        req: &UserDecisionRequest,
    ) -> Result<Approval, ClientError> {
        self.post(&["v1", "approvals", id, "user-decision"], req)
            .await
    }

    /// `POST /v1/sessions/{id}/cancel`: the session's pending approvals and clarifications.
    pub async fn cancel_session(
        &self,
        session_id: &str,
        req: &CancelRequest,
    ) -> Result<SessionCancelled, ClientError> {
        self.post(&["v1", "sessions", session_id, "cancel"], req)
            .await
    }

    /// `POST /v1/tokens/redeem` (an agent key): redeems a token for the exact call.
    pub async fn redeem(&self, req: &RedeemRequest) -> Result<Redeemed, ClientError> {
        self.post(&["v1", "tokens", "redeem"], req).await
    }

    /// `GET /v1/grants?all=B` (operator): active grants, or all of them, newest first; every
    /// page the gateway links to is followed ([`MAX_PAGES`] at most, stopping at a cursor
    /// given twice), so none is left out however many grants history holds.
    pub async fn grants(&self, all: bool) -> Result<GrantList, ClientError> {
        let mut q = list_query(None, Some(PAGE_LIMIT));
        q.push(("all", all.to_string()));
        let mut grants = Vec::new();
        self.follow_pages(&["v1", "grants"], q, |page: GrantList| {
            grants.extend(page.grants);
            usize::MAX
        })
        .await?;
        Ok(GrantList { grants })
    }

    /// `DELETE /v1/grants/{id}` (operator): `204`; `404` when unknown or revoked already.
    pub async fn revoke_grant(&self, id: &str) -> Result<(), ClientError> {
        self.call_empty(Method::DELETE, &["v1", "grants", id], None::<&()>)
            .await
    }

    /// `GET /v1/learning-samples[?limit=N&after=CURSOR]` (operator): one page of the MPLP
    /// learning samples ([`LearningSamplePage`]: the NDJSON lines parsed, and the next page's
    /// cursor from the `Link` header). `limit` `None` is the server's default (1,000; at most
    /// 10,000, else `400`); `after` `None` is the first page, else a previous page's `next`
    /// (a cursor not in the form the gateway writes is `400`). Read every page by passing each `next` until it is `None`.
    pub async fn learning_samples(
        &self,
        limit: Option<u32>,
        after: Option<&str>,
    ) -> Result<LearningSamplePage, ClientError> {
        let mut q = list_query(None, limit);
        if let Some(a) = after {
            q.push(("after", a.to_string()));
        }
        let (text, link) = self.call_text(&["v1", "learning-samples"], &q).await?;
        let samples = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).map_err(|e| ClientError::Body {
                    status: 200,
                    detail: e.to_string(),
                })
            })
            .collect::<Result<_, _>>()?;
        let next = link.as_deref().and_then(crate::audit::next_cursor);
        Ok(LearningSamplePage { samples, next })
    }

    /// `POST /v1/clarifications` (an agent key): asks a question; `202` with it pending.
    pub async fn ask(&self, req: &AskRequest) -> Result<Clarification, ClientError> {
        self.post(&["v1", "clarifications"], req).await
    }

    /// `GET /v1/clarifications[?status=S]` (operator); `None` is `all`.
    pub async fn clarifications(
        &self,
        status: Option<&str>,
    ) -> Result<ClarificationList, ClientError> {
        let q = list_query(status, None);
        self.get(&["v1", "clarifications"], &q).await
    }

    /// `GET /v1/clarifications/{id}[?wait=S]` (its agent or an operator); `wait_seconds` 0
    /// answers at once.
    pub async fn clarification(
        &self,
        id: &str,
        wait_seconds: u64,
    ) -> Result<Clarification, ClientError> {
        self.get_waiting(&["v1", "clarifications", id], wait_seconds)
            .await
    }

    /// `POST /v1/clarifications/{id}/answer` (operator).
    pub async fn answer(
        &self,
        id: &str,
        req: &AnswerRequest,
    ) -> Result<Clarification, ClientError> {
        self.post(&["v1", "clarifications", id, "answer"], req)
            .await
    }

    /// `POST /v1/plans` (an agent key): the stored MPLP plan (`201`).
    pub async fn create_plan(&self, req: &CreatePlanRequest) -> Result<Value, ClientError> {
        self.post(&["v1", "plans"], req).await
    }

    /// `PUT /v1/plans/{id}` (an agent key): the revised MPLP plan.
    pub async fn update_plan(
        &self,
        id: &str,
        req: &UpdatePlanRequest,
    ) -> Result<Value, ClientError> {
        self.call(Method::PUT, &["v1", "plans", id], &[], Some(req))
            .await
    }

    /// `GET /v1/plans/{id}` (its agent or an operator): the MPLP plan with its status.
    pub async fn plan(&self, id: &str) -> Result<Value, ClientError> {
        self.get(&["v1", "plans", id], &[]).await
    }

    /// `POST /v1/plans/{id}/submit` (an agent key): holds a Confirm on the plan.
    pub async fn submit_plan(
        &self,
        id: &str,
        req: &SubmitPlanRequest,
    ) -> Result<GateAnswer, ClientError> {
        self.gate(&["v1", "plans", id, "submit"], req).await
    }

    /// `POST /v1/plans/{id}/cancel` (its agent or an operator): the cancelled MPLP plan.
    pub async fn cancel_plan(&self, id: &str, req: &CancelRequest) -> Result<Value, ClientError> {
        self.post(&["v1", "plans", id, "cancel"], req).await
    }

    /// `GET /v1/plans/{id}/pipeline-events`.
    pub async fn pipeline_events(&self, id: &str) -> Result<PipelineEvents, ClientError> {
        self.get(&["v1", "plans", id, "pipeline-events"], &[]).await
    }

    /// `POST /v1/confirms` (an agent key): a Confirm on another MPLP target.
    pub async fn confirm(&self, req: &ConfirmRequest) -> Result<GateAnswer, ClientError> {
        self.gate(&["v1", "confirms"], req).await
    }

    /// `GET /v1/agents/{agent}/mcp-servers/{alias}/tools`: the tools the agent declares.
    pub async fn declared_tools(
        &self,
        agent: &str,
        alias: &str,
    ) -> Result<DeclaredTools, ClientError> {
        self.get(&["v1", "agents", agent, "mcp-servers", alias, "tools"], &[])
            .await
    }

    /// `POST /v1/tools/check` (an agent key): the gateway's word on each upstream tool.
    pub async fn check_tools(
        &self,
        req: &ToolCheckRequest,
    ) -> Result<ToolCheckResponse, ClientError> {
        self.post(&["v1", "tools", "check"], req).await
    }

    /// `GET /v1/tools/reviews?status=S` (operator); `None` is `all`. Newest first; every page
    /// the gateway links to is followed (as [`Client::grants`] does).
    pub async fn tool_reviews(
        &self,
        status: Option<ReviewStatus>,
    ) -> Result<ToolReviewList, ClientError> {
        let status = status.map_or("all", ReviewStatus::as_str);
        let q = list_query(Some(status), Some(PAGE_LIMIT));
        let mut reviews = Vec::new();
        self.follow_pages(&["v1", "tools", "reviews"], q, |page: ToolReviewList| {
            reviews.extend(page.reviews);
            usize::MAX
        })
        .await?;
        Ok(ToolReviewList { reviews })
    }

    /// `GET /v1/tools/reviews/{id}[?wait=S]`: one review; `wait_seconds` long-polls while it
    /// is pending (0 answers at once).
    pub async fn tool_review(
        &self,
        id: &str,
        wait_seconds: u64,
    ) -> Result<ToolReview, ClientError> {
        self.get_waiting(&["v1", "tools", "reviews", id], wait_seconds)
            .await
    }

    /// `POST /v1/tools/reviews/{id}/accept` or `…/reject` (operator), as `accept` says.
    pub async fn decide_review(&self, id: &str, accept: bool) -> Result<ToolReview, ClientError> {
        let verb = if accept { "accept" } else { "reject" };
        self.post(
            &["v1", "tools", "reviews", id, verb],
            &serde_json::json!({}),
        )
        .await
    }

    /// `GET /v1/tools/pins` (operator).
    pub async fn tool_pins(&self) -> Result<ToolPinList, ClientError> {
        self.get(&["v1", "tools", "pins"], &[]).await
    }

    /// `GET /v1/audit/checkpoints[?limit=N&before_seq=S]` (operator).
    pub async fn checkpoints(
        &self,
        limit: Option<u32>,
        before_seq: Option<i64>,
    ) -> Result<CheckpointList, ClientError> {
        let mut q = list_query(None, limit);
        if let Some(s) = before_seq {
            q.push(("before_seq", s.to_string()));
        }
        self.get(&["v1", "audit", "checkpoints"], &q).await
    }

    /// `GET /v1/webhooks/dead-letters[?limit=N&before_id=I]` (operator): newest first, at
    /// most `limit` (1–1000, default 100) and about 1 MiB of bodies and errors, so a page may
    /// hold fewer than `limit` with more below it (a short page is not the last); only ids
    /// below `before_id` when given. More follow while the answer has `Link:
    /// </v1/webhooks/dead-letters?limit=N&before_id=I>; rel="next"` (not read here): pass
    /// that `before_id` — or this page's last id, until a page comes back empty.
    pub async fn dead_letters(
        &self,
        limit: Option<u32>,
        before_id: Option<i64>,
    ) -> Result<DeadLetterList, ClientError> {
        let mut q = list_query(None, limit);
        if let Some(i) = before_id {
            q.push(("before_id", i.to_string()));
        }
        self.get(&["v1", "webhooks", "dead-letters"], &q).await
    }
}

impl Client {
    /// `GET`s the pages of a listing at `segments` from query `q` on: each page is handed to
    /// `take`, which answers how many more items are wanted; while any are, the page its
    /// `Link` `rel="next"` names is read next, asking no more than that (`limit`, at most the
    /// one asked before, else [`PAGE_LIMIT`]). A page may come back empty with more to follow (rows that cannot be read are
    /// left out, and the cursor still moves on), so the walk is bounded by a page count
    /// ([`MAX_PAGES`]) and by the bytes read ([`crate::client::MAX_LISTING_BYTES`]), not by
    /// what came; a cursor given twice would read the same pages again, so it ends the walk.
    /// The first error ends it too.
    async fn follow_pages<T: serde::de::DeserializeOwned>(
        &self,
        segments: &[&str],
        mut q: Vec<(&'static str, String)>,
        mut take: impl FnMut(T) -> usize,
    ) -> Result<(), ClientError> {
        let mut seen = std::collections::HashSet::new();
        let mut read = 0usize;
        for _ in 0..MAX_PAGES {
            let (page, next, bytes): (T, _, _) = self.get_page(segments, &q).await?;
            read = read.saturating_add(bytes);
            if read > crate::client::MAX_LISTING_BYTES {
                return Err(ClientError::Body {
                    status: 200,
                    detail: format!(
                        "the listing's pages passed {} MiB; not read further",
                        crate::client::MAX_LISTING_BYTES >> 20
                    ),
                });
            }
            let left = take(page);
            match next {
                Some(cursor) if left > 0 && seen.insert(cursor.clone()) => {
                    let asked = q.iter().find(|(k, _)| *k == "limit");
                    let asked = asked.and_then(|(_, v)| v.parse().ok());
                    let limit = left.min(asked.unwrap_or(PAGE_LIMIT as usize));
                    q.retain(|(k, _)| *k != "before" && *k != "limit");
                    q.push(("limit", limit.to_string()));
                    q.push(("before", cursor));
                }
                _ => break,
            }
        }
        Ok(())
    }
}

/// The key the gateway groups similar approvals by: agent, server, tool and the sorted rules
/// (file and rule of each reason).
type GroupKey = (String, Option<String>, String, Vec<(String, String)>);

/// [`GroupKey`] of group `g`.
fn group_key(g: &ApprovalGroup) -> GroupKey {
    let mut rules: Vec<_> = g
        .reasons
        .iter()
        .map(|r| (r.file.clone(), r.rule.clone()))
        .collect();
    rules.sort();
    (g.agent.clone(), g.server.clone(), g.tool.clone(), rules)
}

/// The groups of `pages` (as the gateway wrote them, newest page first; each page's groups
/// oldest first, each group's approvals oldest first) as one list in that order: a group on
/// several pages is one group ([`GroupKey`]), with its `count` made right.
fn merge_groups(pages: Vec<Vec<ApprovalGroup>>) -> Vec<ApprovalGroup> {
    let mut out: Vec<(GroupKey, ApprovalGroup)> = Vec::new();
    // Oldest page first: a group takes its place by its oldest approval.
    for page in pages.into_iter().rev() {
        for g in page {
            let k = group_key(&g);
            match out.iter_mut().find(|(o, _)| *o == k) {
                Some((_, o)) => o.approvals.extend(g.approvals),
                None => out.push((k, g)),
            }
        }
    }
    out.into_iter()
        .map(|(_, mut g)| {
            g.count = g.approvals.len();
            g
        })
        .collect()
}
