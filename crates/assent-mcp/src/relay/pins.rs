//! The relay's pin check of the upstream's tools ([`PinCheck`]): the proxy's own `tools/list`,
//! read page by page within the hub's bounds (at most [`MAX_PAGES`] pages and [`MAX_TOOLS`]
//! tools within [`LIST_TIMEOUT`], no cursor twice), reported to the gateway, its result shared
//! with every call, and run again when the upstream says its tools changed; and the gate every
//! call passes first ([`pin_gate`]), which waits for the review of a changed tool. The
//! upstream reader hands it the pages ([`PinCheck::page`]).

use crate::gateway::Gateway;
use crate::kit::{Hold, HoldState, hold_unless_cancelled};
use assent_api::tools::{PinState, ToolState};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The pin check's result: `None` while a check runs (and before the first one finished).
pub(super) type Pins = watch::Sender<Option<Result<HashMap<String, ToolState>, String>>>;

/// The id prefix of the proxy's own `tools/list` requests: `assent-pins-C-P`, page P (from 0)
/// of check C (from 1).
pub(super) const PIN_ID_PREFIX: &str = "assent-pins-";

// The bounds of one check are the hub's (`crate::kit`): a list past MAX_TOOLS or MAX_PAGES,
// a cursor seen before, or LIST_TIMEOUT from the check's first request fails the check, and
// no page more is asked for.
use crate::kit::{LIST_TIMEOUT, MAX_LIST_BYTES, MAX_PAGES, MAX_TOOLS, json_weight, too_many_bytes};

/// The least time between the starts of two checks again, when the upstream says its tools
/// changed (found by review: an upstream sending `notifications/tools/list_changed` after
/// every answer drove `POST /v1/tools/check` under the agent's key as fast as it could answer,
/// spending the agent's rate limit). The first check again starts at once (an upstream may say
/// so once as it starts: its calls wait for no timer).
const RECHECK_EVERY: Duration = Duration::from_secs(2);

/// The pin check of the upstream's tools, for the life of one proxy process. One check runs at
/// a time; a page of a check that ended (failed, timed out) is dropped.
pub(super) struct PinCheck {
    /// What the last check found (`None` while one runs).
    pub(super) result: Pins,
    /// Whether the first check was asked for (after `initialized`, or at the first call).
    asked: AtomicBool,
    /// Whether the upstream said its tools changed while a check ran: it runs again once
    /// that one ends.
    stale: AtomicBool,
    /// When the last check again ([`PinCheck::again`]) started, or is to start.
    rechecked_at: Mutex<Option<Instant>>,
    /// The check under way, page by page.
    paging: Mutex<Paging>,
}

/// The pages of the check under way.
#[derive(Default)]
struct Paging {
    /// The check's number (its requests' ids carry it): 0 before the first.
    check: u64,
    phase: Phase,
    /// When its reading fails.
    deadline: Option<Instant>,
    /// The tools read so far.
    tools: Vec<Value>,
    /// The cursors it was given so far.
    cursors: HashSet<String>,
    /// The pages read so far.
    pages: usize,
    /// The bytes of the tools read so far (compact JSON).
    bytes: usize,
}

/// Where a check is.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Phase {
    /// None runs.
    #[default]
    Idle,
    /// Its pages are being read.
    Reading,
    /// Read whole: the gateway checks it.
    Checking,
}

/// What one page makes of a check.
enum Step {
    /// The next page is asked for (the request's line).
    Next(String),
    /// The list was read whole: its tools, for the gateway.
    Read(Vec<Value>),
    /// The check failed: why.
    Failed(String),
}

impl PinCheck {
    pub(super) fn new() -> Self {
        Self {
            result: watch::channel(None).0,
            asked: AtomicBool::new(false),
            stale: AtomicBool::new(false),
            rechecked_at: Mutex::default(),
            paging: Mutex::default(),
        }
    }

    fn paging(&self) -> MutexGuard<'_, Paging> {
        self.paging.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the first check over `tu`, once.
    pub(super) fn ask_once(self: &Arc<Self>, tu: &super::lines::Lines) {
        if !self.asked.swap(true, Ordering::SeqCst) {
            self.start(tu);
        }
    }

    /// The upstream says its tools changed: the check runs again (over `tu`, `None` once the
    /// client left), and calls wait for it (found by review: the pins were read once, so a
    /// definition changed mid-session was called unreviewed unless the client listed the
    /// tools again). When a check is under way it runs again once that one ends; before the
    /// first one, that one reads the new list.
    pub(super) fn changed(self: &Arc<Self>, tu: Option<super::lines::Lines>) {
        if !self.asked.load(Ordering::SeqCst) {
            return;
        }
        if self.result.borrow().is_none() {
            self.stale.store(true, Ordering::SeqCst);
            return;
        }
        if let Some(tu) = tu {
            self.result.send_replace(None);
            self.again(tu);
        }
    }

    /// Starts a check again: at once, or [`RECHECK_EVERY`] after the last check again
    /// started.
    fn again(self: &Arc<Self>, tu: super::lines::Lines) {
        let now = Instant::now();
        let mut last = self.rechecked_at.lock().unwrap_or_else(|p| p.into_inner());
        let start = last.map_or(now, |t| (t + RECHECK_EVERY).max(now));
        *last = Some(start);
        drop(last);
        let wait = start.saturating_duration_since(now);
        if wait.is_zero() {
            self.start(&tu);
        } else {
            let this = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                this.start(&tu);
            });
        }
    }

    /// Starts a check: its first page asked for over `tu`, and its reading failed at
    /// [`LIST_TIMEOUT`] if it has not ended by then (found by review: an upstream paging
    /// without end, or slowly, was paged for ever, and the calls waiting for the check each
    /// failed only at their own timeout).
    fn start(self: &Arc<Self>, tu: &super::lines::Lines) {
        let check = {
            let mut p = self.paging();
            *p = Paging {
                check: p.check + 1,
                phase: Phase::Reading,
                deadline: Some(Instant::now() + LIST_TIMEOUT),
                ..Paging::default()
            };
            p.check
        };
        let _ = tu.send(page_request(check, 0, None));
        let (this, tu) = (self.clone(), tu.downgrade());
        tokio::spawn(async move {
            tokio::time::sleep(LIST_TIMEOUT).await;
            if this.end(check, Phase::Reading) {
                // The page still awaited is cancelled at the upstream, which gives up its id
                // (`super::ids::OpenIds`: reserved, no longer in flight; found by review).
                let page = this.paging().pages;
                let tu = tu.upgrade();
                if let Some(tu) = &tu {
                    let _ = tu.send(cancel_page(check, page));
                }
                this.publish(Err(timed_out()), tu);
            }
        });
    }

    /// The upstream's answer `v` to one of the check's `tools/list` requests: the next page
    /// is asked for over `tu` (`None`: the client left, nothing more is asked), or the check
    /// ends — the whole list reported to `gw` — and is published. A page of a check that
    /// ended already is dropped.
    pub(super) async fn page(
        self: &Arc<Self>,
        v: &Value,
        gw: &Gateway,
        tu: Option<super::lines::Lines>,
    ) {
        let Some(check) = check_of(&v["id"]) else {
            return;
        };
        let step = self.paging().step(check, v);
        let checked = match step {
            None => {
                tracing::warn!("dropped a page of a tool list check that ended");
                return;
            }
            Some(Step::Next(line)) => {
                if let Some(tu) = tu {
                    let _ = tu.send(line);
                }
                return;
            }
            Some(Step::Failed(why)) => Err(why),
            Some(Step::Read(tools)) => {
                let checked = gw.check_tools(&tools).await;
                if !self.end(check, Phase::Checking) {
                    return;
                }
                checked
            }
        };
        self.publish(checked, tu);
    }

    /// Ends check `check` when it is in `phase`: whether it did.
    fn end(&self, check: u64, phase: Phase) -> bool {
        let mut p = self.paging();
        let ends = p.check == check && p.phase == phase;
        if ends {
            p.phase = Phase::Idle;
            p.tools = Vec::new();
            p.cursors = HashSet::new();
        }
        ends
    }

    /// A check ended with `checked`: published, or, when the upstream said its tools changed
    /// meanwhile, run again over `tu`.
    fn publish(
        self: &Arc<Self>,
        checked: Result<HashMap<String, ToolState>, String>,
        tu: Option<super::lines::Lines>,
    ) {
        if let Err(e) = &checked {
            tracing::warn!(error = %e, "tool list not verified: every call is refused");
        }
        let again = self.stale.swap(false, Ordering::SeqCst);
        match tu.filter(|_| again) {
            Some(tu) => self.again(tu),
            None => {
                self.result.send_replace(Some(checked));
            }
        }
    }
}

impl Paging {
    /// Reads page `v` of check `check`: `None` when that check is not reading (it ended, or
    /// a newer one started).
    fn step(&mut self, check: u64, v: &Value) -> Option<Step> {
        if check != self.check || self.phase != Phase::Reading {
            return None;
        }
        let step = self.read(v);
        match step {
            Step::Next(_) => {}
            Step::Read(_) => self.phase = Phase::Checking,
            Step::Failed(_) => {
                self.phase = Phase::Idle;
                self.tools = Vec::new();
            }
        }
        Some(step)
    }

    /// Page `v` read into the check: the next page's request, the whole list, or why it
    /// failed — an error answer, more than [`MAX_TOOLS`] tools, [`MAX_LIST_BYTES`] of them or
    /// [`MAX_PAGES`] pages, a
    /// cursor given twice, or the deadline passed.
    fn read(&mut self, v: &Value) -> Step {
        if v.get("error").is_some() {
            return Step::Failed(format!("the upstream's tools/list failed: {}", v["error"]));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Step::Failed(timed_out());
        }
        self.pages += 1;
        let tools = v["result"]["tools"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        if self.tools.len() + tools.len() > MAX_TOOLS {
            return Step::Failed(format!("tools/list lists more than {MAX_TOOLS} tools"));
        }
        self.bytes += tools.iter().map(json_weight).sum::<usize>();
        self.bytes += json_weight(&v["result"]["nextCursor"]);
        if self.bytes > MAX_LIST_BYTES {
            return Step::Failed(too_many_bytes());
        }
        self.tools.extend(tools.iter().cloned());
        match v["result"]["nextCursor"].as_str() {
            None => Step::Read(std::mem::take(&mut self.tools)),
            Some(c) if !self.cursors.insert(c.to_string()) => {
                Step::Failed("tools/list repeats a cursor".into())
            }
            Some(_) if self.pages >= MAX_PAGES => {
                Step::Failed(format!("tools/list has more than {MAX_PAGES} pages"))
            }
            Some(c) => Step::Next(page_request(self.check, self.pages, Some(c))),
        }
    }
}

/// Why a check failed at its deadline.
fn timed_out() -> String {
    format!("tools/list did not end within {} s", LIST_TIMEOUT.as_secs())
}

/// The proxy's own `tools/list` for page `page` of check `check`, after `cursor`.
fn page_request(check: u64, page: usize, cursor: Option<&str>) -> String {
    let id = format!("{PIN_ID_PREFIX}{check}-{page}");
    match cursor {
        Some(c) => json!({"jsonrpc": "2.0", "id": id, "method": "tools/list",
                          "params": {"cursor": c}}),
        None => json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
    }
    .to_string()
}

/// The cancellation of page `page` of check `check` (given up at its deadline).
fn cancel_page(check: u64, page: usize) -> String {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
           "params": {"requestId": format!("{PIN_ID_PREFIX}{check}-{page}"),
                      "reason": timed_out()}})
    .to_string()
}

/// The check a page's id (`assent-pins-C-P`) belongs to.
fn check_of(id: &Value) -> Option<u64> {
    let rest = id.as_str()?.strip_prefix(PIN_ID_PREFIX)?;
    rest.split_once('-')?.0.parse().ok()
}

/// Waits for the pin check and returns whether `tool` may be called now: `Ok` when pinned or
/// accepted after review, `Err(why)` otherwise. Waits for a pending review (unless the call
/// was cancelled, [`Hold::Cancelled`]).
pub(super) async fn pin_gate(
    gw: &Gateway,
    pins: &PinCheck,
    tool: &str,
    held: &HoldState,
) -> Result<(), String> {
    let mut rx = pins.result.subscribe();
    // Only this tool's state and review are copied out, and the borrow ends before any await
    // (the list holds every tool's pinned definition: copying it was about 8 % of the proxy's
    // CPU per call against a 13-tool upstream, more with more tools).
    let state = {
        let checked = tokio::time::timeout(LIST_TIMEOUT, rx.wait_for(Option::is_some))
            .await
            .map_err(|_| "the upstream's tool list could not be verified in time".to_string())?
            .map_err(|_| "the proxy is shutting down".to_string())?;
        match checked.as_ref().expect("checked") {
            Err(e) => {
                return Err(format!(
                    "the upstream's tool list could not be verified: {e}"
                ));
            }
            Ok(map) => map.get(tool).map(|s| (s.state, s.review_id.clone())),
        }
    };
    match state {
        None => Err(format!(
            "`{tool}` is not in the upstream's verified tool list"
        )),
        Some((state, _)) if state != PinState::Held => Ok(()),
        Some((_, review_id)) => {
            let id = review_id.unwrap_or_default();
            if !hold_unless_cancelled(held, Hold::Review(id.clone())) {
                return Err("cancelled by the client".into());
            }
            tracing::info!(tool, review_id = %id, "call waits for the review of a changed tool");
            gw.await_review(&id).await?;
            // Only the entry this review was about: a check made since (the upstream changed
            // the tool again) holds it under a newer review, which stays held (found by
            // review: accepting the older review marked the newer definition pinned).
            pins.result.send_modify(|p| {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Page `n` of check `check` naming `cursor` next (none: the last), with one tool.
    fn page(check: u64, n: usize, cursor: Option<&str>) -> Value {
        json!({"jsonrpc": "2.0", "id": format!("{PIN_ID_PREFIX}{check}-{n}"),
               "result": {"tools": [{"name": format!("t{n}")}], "nextCursor": cursor}})
    }

    fn reading(check: u64) -> Paging {
        Paging {
            check,
            phase: Phase::Reading,
            deadline: Some(Instant::now() + LIST_TIMEOUT),
            ..Paging::default()
        }
    }

    fn failed(step: Option<Step>) -> String {
        match step {
            Some(Step::Failed(why)) => why,
            _ => panic!("the check went on"),
        }
    }

    #[test]
    fn a_list_is_paged_to_its_end_and_only_for_the_check_under_way() {
        let mut p = reading(2);
        assert!(
            p.step(1, &page(1, 0, Some("a"))).is_none(),
            "an older check's page"
        );
        match p.step(2, &page(2, 0, Some("a"))) {
            Some(Step::Next(line)) => {
                let next: Value = serde_json::from_str(&line).unwrap();
                assert_eq!(next["id"], "assent-pins-2-1");
                assert_eq!(next["params"]["cursor"], "a");
            }
            _ => panic!("no next page"),
        }
        match p.step(2, &page(2, 1, None)) {
            Some(Step::Read(tools)) => assert_eq!(tools.len(), 2),
            _ => panic!("not read whole"),
        }
        assert!(p.step(2, &page(2, 2, None)).is_none(), "read whole already");
        assert_eq!(check_of(&json!("assent-pins-12-7")), Some(12));
        assert_eq!(check_of(&json!("assent-pins-x")), None);
    }

    /// An upstream that gives a cursor twice, pages without end, lists too many tools or
    /// pages past the deadline fails the check, and no page more is read.
    #[test]
    fn a_check_fails_on_a_repeated_cursor_too_many_pages_or_tools_or_at_its_deadline() {
        let mut p = reading(1);
        assert!(matches!(
            p.step(1, &page(1, 0, Some("a"))),
            Some(Step::Next(_))
        ));
        assert!(failed(p.step(1, &page(1, 1, Some("a")))).contains("repeats a cursor"));
        assert!(
            p.step(1, &page(1, 2, None)).is_none(),
            "paged after it failed"
        );

        let mut p = reading(1);
        for n in 0..MAX_PAGES - 1 {
            let c = n.to_string();
            assert!(matches!(
                p.step(1, &page(1, n, Some(&c))),
                Some(Step::Next(_))
            ));
        }
        let why = failed(p.step(1, &page(1, MAX_PAGES, Some("last"))));
        assert!(why.contains("more than 1000 pages"), "{why}");

        let mut p = reading(1);
        let many: Vec<Value> = (0..=MAX_TOOLS).map(|n| json!({"name": n})).collect();
        let big = json!({"id": "assent-pins-1-0", "result": {"tools": many}});
        assert!(failed(p.step(1, &big)).contains("more than 100000 tools"));

        let mut p = reading(1);
        p.deadline = Some(Instant::now());
        assert!(failed(p.step(1, &page(1, 0, None))).contains("did not end within 30 s"));

        let mut p = reading(1);
        let error = json!({"id": "assent-pins-1-0", "error": {"code": -1, "message": "no"}});
        assert!(failed(p.step(1, &error)).contains("tools/list failed"));
    }
}
