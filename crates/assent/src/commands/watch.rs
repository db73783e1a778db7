//! `assent watch`: a terminal UI for the approval queue (issue 5), usable over SSH and
//! readable without colour.
//!
//! The list of pending approvals is re-read every second (`GET /v1/approvals?status=pending`)
//! with each one's time left. Keys, shown in the footer: `↑`/`↓` (or `k`/`j`) select, `enter`
//! opens the card (the same fields as `assent show`), `a` approves and `d` denies (asking for a
//! reason), each confirmed with `y` (any other key cancels), `esc` goes back, `q` quits.
//! Selection is shown by a `>` marker and reverse video, so it reads the same with
//! `NO_COLOR` set (then no colour is used at all).
//!
//! What is confirmed is the approval that was on the screen, or nothing: a card, a reason or a
//! question to confirm is bound to its approval's id, and when that approval leaves the queue
//! (decided elsewhere, withdrawn by its agent, expired) the watcher goes back to the list and
//! says so, instead of moving to the approval that took its place; whenever a re-read
//! selects another approval (that one left, or this watcher just decided it), keys typed
//! meanwhile are dropped, so `a` `y` typed ahead cannot land on the next one. `y` approves
//! only when the whole card and its question fitted the terminal in the frame last drawn (an
//! agent can pad its arguments so that the one that matters falls below the pane, as on a
//! Slack card); otherwise the terminal must be enlarged, or `assent show` and `assent
//! approve` used. A paste is never taken as keys: in a reason its line breaks are spaces,
//! elsewhere it is ignored (bracketed paste); and keys already waiting when a question to
//! confirm appears are dropped, so a paste into a terminal without bracketed paste cannot
//! answer it (found by review: `no\ny` pasted as a reason denied the call).

use crate::render::{card, shown, time_left};
use anyhow::Result;
use assent_api::approvals::{Approval, DecisionRequest};
use assent_api::{ApprovalStatus, Client, DecisionKind, RiskLevel};
use crossterm::event::{
    self, DisableBracketedPaste, EnableBracketedPaste, Event, KeyCode, KeyEventKind, KeyModifiers,
};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Borders, List, ListItem, ListState, Paragraph, Wrap};
use std::time::{Duration, Instant};

/// What the screen shows.
enum Mode {
    List,
    Card,
    /// Typing the reason for a denial.
    Reason(String),
    /// Waiting for `y`: approve (`None`) or deny with this reason.
    Confirm(Option<String>),
}

impl Mode {
    /// Whether this mode is about one approval (the card, a reason, a question to confirm).
    fn opened(&self) -> bool {
        !matches!(self, Mode::List)
    }
}

/// The watcher's state: the pending approvals as last read, the selection, what the screen
/// shows, the status line, and when the list was last read.
struct App {
    approvals: Vec<Approval>,
    state: ListState,
    mode: Mode,
    status: String,
    error: bool,
    color: bool,
    /// When the list was last read; `None` to re-read it at once (found by review: set ten
    /// seconds in the past, `Instant - Duration` panicked on a machine up for less than that).
    refreshed: Option<Instant>,
    /// Whether the last frame drawn showed the whole card with its question.
    shown_whole: bool,
    /// Whether the last re-read selected another approval than before (the one selected left
    /// the queue, or was decided here).
    moved: bool,
    /// The approval this watcher just decided: its leaving the queue is no surprise.
    decided: Option<String>,
    /// When the question to confirm was first drawn (`None` while it is not yet on screen): a
    /// `y` before that, or sooner than [`ANSWER_AFTER`] after it, is not an answer to it.
    asked: Option<Instant>,
}

/// How soon after a question to confirm appears a `y` may answer it: 200 ms, less than anyone
/// takes to read it, more than the pieces of a paste sent as keys arrive apart (found by
/// review: a paste without bracketed paste could arrive in two chunks, its `y` after the
/// drain of what was waiting).
const ANSWER_AFTER: Duration = Duration::from_millis(200);

/// The longest reason kept (the API's bound, 4,096 bytes): a longer paste or typing is cut.
const MAX_REASON_BYTES: usize = 4096;

/// Appends `c` to reason `r` unless that would pass [`MAX_REASON_BYTES`].
fn push_reason(r: &mut String, c: char) {
    if r.len() + c.len_utf8() <= MAX_REASON_BYTES {
        r.push(c);
    }
}

impl App {
    fn selected(&self) -> Option<&Approval> {
        self.state.selected().and_then(|i| self.approvals.get(i))
    }

    fn set(&mut self, approvals: Vec<Approval>) {
        let keep = self.selected().map(|a| a.id.clone());
        let before = keep.clone();
        self.approvals = approvals;
        let kept = keep
            .as_ref()
            .and_then(|id| self.approvals.iter().position(|a| &a.id == id));
        let gone = keep.filter(|_| kept.is_none());
        let i = kept
            .or_else(|| {
                self.state
                    .selected()
                    .map(|i| i.min(self.approvals.len().saturating_sub(1)))
            })
            .or(Some(0))
            .filter(|_| !self.approvals.is_empty());
        self.state.select(i);
        // The card, reason or question stays with its approval, or closes: never moves to the
        // approval that took its place in the list.
        let decided = self.decided.take();
        if let Some(id) = gone.filter(|id| decided.as_ref() != Some(id)) {
            self.status = format!("{id} left the queue (decided, withdrawn or expired)");
            self.error = false;
            self.mode = Mode::List;
        }
        // Whatever moved the selection (the approval left, was decided here, or the list was
        // empty), keys typed meanwhile were meant for what was selected before.
        self.moved = self.selected().map(|a| &a.id) != before.as_ref();
    }

    fn style(&self, color: Color) -> Style {
        if self.color {
            Style::default().fg(color)
        } else {
            Style::default()
        }
    }

    /// Re-reads the pending list when a second has passed since the last read.
    fn refresh(&mut self, c: &Client, rt: &tokio::runtime::Handle) {
        if self
            .refreshed
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.refreshed = Some(Instant::now());
        match rt.block_on(c.approvals(Some(ApprovalStatus::Pending), None)) {
            Ok(list) => {
                self.set(list.approvals);
                if self.status == "loading…" {
                    self.status.clear();
                }
            }
            Err(e) => {
                self.status = format!("{e}");
                self.error = true;
            }
        }
    }

    /// Handles a paste: into a reason being typed, with every control character (line breaks
    /// included) a space; anywhere else ignored, and the status line says so.
    fn paste(&mut self, text: &str) {
        match &mut self.mode {
            Mode::Reason(r) => {
                for c in text.chars() {
                    push_reason(r, if c.is_control() { ' ' } else { c });
                }
            }
            _ => {
                self.status = "a paste is taken into a reason only: nothing was done".into();
                self.error = true;
            }
        }
    }

    /// Handles one key press; true when it quits.
    fn key(&mut self, code: KeyCode, c: &Client, rt: &tokio::runtime::Handle) -> bool {
        let mode = std::mem::replace(&mut self.mode, Mode::List);
        self.mode = match (mode, code) {
            (Mode::Reason(mut r), KeyCode::Char(ch)) => {
                push_reason(&mut r, ch);
                Mode::Reason(r)
            }
            (Mode::Reason(mut r), KeyCode::Backspace) => {
                r.pop();
                Mode::Reason(r)
            }
            (Mode::Reason(r), KeyCode::Enter) if !r.trim().is_empty() => {
                Mode::Confirm(Some(r.trim().to_string()))
            }
            (Mode::Reason(r), KeyCode::Enter) => {
                self.status = "a denial needs a reason: the agent is told".into();
                self.error = true;
                Mode::Reason(r)
            }
            (Mode::Reason(_), KeyCode::Esc) => Mode::List,
            (m @ Mode::Reason(_), _) => m,
            // Too soon to be an answer: ignored, the question stays.
            (m @ Mode::Confirm(_), KeyCode::Char('y'))
                if self.asked.is_none_or(|t| t.elapsed() < ANSWER_AFTER) =>
            {
                m
            }
            (Mode::Confirm(None), KeyCode::Char('y')) if !self.shown_whole => {
                self.status = "not approved: the card did not fit this terminal; enlarge it, or \
                               use assent show and assent approve"
                    .into();
                self.error = true;
                Mode::List
            }
            (Mode::Confirm(deny), KeyCode::Char('y')) => {
                self.decide(deny, c, rt);
                Mode::List
            }
            (Mode::Confirm(_), _) => {
                self.status = "cancelled: nothing was decided".into();
                self.error = false;
                Mode::List
            }
            (_, KeyCode::Char('q')) => return true,
            (m, KeyCode::Up | KeyCode::Char('k')) => {
                if let Some(i) = self.state.selected() {
                    self.state.select(Some(i.saturating_sub(1)));
                }
                m
            }
            (m, KeyCode::Down | KeyCode::Char('j')) => {
                if let Some(i) = self.state.selected() {
                    self.state
                        .select(Some((i + 1).min(self.approvals.len().saturating_sub(1))));
                }
                m
            }
            (_, KeyCode::Enter) if self.selected().is_some() => Mode::Card,
            (_, KeyCode::Esc) => Mode::List,
            (_, KeyCode::Char('a')) if self.selected().is_some() => Mode::Confirm(None),
            (_, KeyCode::Char('d')) if self.selected().is_some() => Mode::Reason(String::new()),
            (m, _) => m,
        };
        false
    }

    /// Approves (`deny` is `None`) or denies with the reason the selected approval, this call
    /// only, puts the outcome on the status line and has the list re-read at once.
    fn decide(&mut self, deny: Option<String>, c: &Client, rt: &tokio::runtime::Handle) {
        let Some(a) = self.selected().cloned() else {
            return;
        };
        let req = match deny {
            None => DecisionRequest::new(DecisionKind::Approve),
            Some(r) => DecisionRequest {
                reason: Some(r),
                ..DecisionRequest::new(DecisionKind::Deny)
            },
        };
        match rt.block_on(c.decide(&a.id, &req)) {
            Ok(v) => {
                self.decided = Some(a.id.clone());
                self.status = format!("{} {}: {}", v.status.as_str(), a.target(), a.id);
                self.error = false;
            }
            Err(e) => {
                self.status = format!("not decided: {e}");
                self.error = true;
            }
        }
        self.refreshed = None;
    }
}

/// How long the watcher waits for any answer of the gateway: the screen is frozen meanwhile
/// (its reads and decisions are made on the UI thread), so not long. Found by review: a
/// connection that died silently froze it for good, `q` and Ctrl-C unread.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the watcher until `q` (or Ctrl-C). Needs an operator key.
pub(crate) async fn run(c: Client) -> Result<i32> {
    let c = c.with_request_timeout(ANSWER_TIMEOUT);
    // Fail before taking over the terminal when the gateway or the key is wrong.
    c.approvals(Some(ApprovalStatus::Pending), None).await?;
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || ui(c, handle)).await?
}

/// Asks the terminal for bracketed paste, so that a paste arrives as one event, not as keys
/// ([`App::paste`]), and has a panic turn it off again before ratatui's hook restores the rest
/// (found by review: a panic left the user's shell in bracketed-paste mode).
fn pasting_on() {
    let _ = crossterm::execute!(std::io::stdout(), EnableBracketedPaste);
    let restore = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        pasting_off();
        restore(info);
    }));
}

/// Drops every input event already waiting.
fn drain_input() {
    while event::poll(Duration::ZERO).unwrap_or(false) {
        let _ = event::read();
    }
}

/// Turns bracketed paste off ([`pasting_on`]).
fn pasting_off() {
    let _ = crossterm::execute!(std::io::stdout(), DisableBracketedPaste);
}

/// The terminal loop: re-read, draw, wait up to 250 ms for a key, handle it.
fn ui(c: Client, rt: tokio::runtime::Handle) -> Result<i32> {
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let mut terminal = ratatui::init();
    pasting_on();
    let mut app = App {
        approvals: Vec::new(),
        state: ListState::default(),
        mode: Mode::List,
        status: "loading…".into(),
        error: false,
        color,
        refreshed: None,
        shown_whole: false,
        moved: false,
        decided: None,
        asked: None,
    };
    let res = loop {
        app.refresh(&c, &rt);
        // Keys typed while the re-read moved the selection were meant for the approval selected
        // before: dropped, so `a` `y` typed ahead cannot land on the next one (found by
        // review; and after this watcher's own decision, found by a later review).
        if std::mem::take(&mut app.moved) {
            drain_input();
        }
        if let Err(e) = terminal.draw(|f| draw(f, &mut app)) {
            break Err(e.into());
        }
        // The question to confirm is on screen from this frame: what came before is dropped,
        // and its time to answer counts from now (found by review: counted from the key that
        // asked it, a re-read slower than the window let a paste's `y` answer a question never
        // drawn).
        if matches!(app.mode, Mode::Confirm(_)) && app.asked.is_none() {
            drain_input();
            app.asked = Some(Instant::now());
        }
        match event::poll(Duration::from_millis(250)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => break Err(e.into()),
        }
        let k = match event::read() {
            Ok(Event::Key(k)) => k,
            Ok(Event::Paste(text)) => {
                app.paste(&text);
                continue;
            }
            _ => continue,
        };
        if k.kind != KeyEventKind::Press {
            continue;
        }
        if k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL) {
            break Ok(0);
        }
        let asked = matches!(app.mode, Mode::Confirm(_));
        if app.key(k.code, &c, &rt) {
            break Ok(0);
        }
        // A question to confirm just appeared: what is already waiting was not typed in
        // answer to it (a paste without bracketed paste, keys typed ahead), and is dropped.
        if !asked && matches!(app.mode, Mode::Confirm(_)) {
            drain_input();
            app.asked = None;
        }
    };
    pasting_off();
    ratatui::restore();
    res
}

/// One frame: header, the list or the card, the status line, the keys.
fn draw(f: &mut ratatui::Frame, app: &mut App) {
    let [head, body, status, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(format!(
            "assent watch: {} pending (refreshed every second)",
            app.approvals.len()
        ))
        .style(Style::default().add_modifier(Modifier::BOLD)),
        head,
    );
    if app.mode.opened() && app.selected().is_some() {
        draw_card(f, app, body)
    } else {
        draw_list(f, app, body)
    }
    let st = if app.error {
        app.style(Color::Red)
    } else {
        app.style(Color::Green)
    };
    // The status line quotes the gateway (its errors, an approval's target): made inert.
    f.render_widget(Paragraph::new(shown(&app.status)).style(st), status);
    let keys = match app.mode {
        Mode::Reason(_) => "type the reason  enter done  esc cancel",
        Mode::Confirm(_) => "y confirm  any other key cancels",
        Mode::Card => "a approve  d deny  esc back  q quit",
        Mode::List => "↑/↓ select  enter open  a approve  d deny  q quit",
    };
    f.render_widget(
        Paragraph::new(keys).style(Style::default().add_modifier(Modifier::REVERSED)),
        footer,
    );
}

/// The selected approval's card, with the reason being typed or the question to confirm;
/// records whether all of it fitted the pane ([`App::shown_whole`]).
fn draw_card(f: &mut ratatui::Frame, app: &mut App, body: ratatui::layout::Rect) {
    let Some(a) = app.selected() else {
        return;
    };
    let mut text = card(a);
    match &app.mode {
        Mode::Reason(r) => text.push_str(&format!("\nReason for denying: {}_\n", shown(r))),
        Mode::Confirm(None) => text.push_str(&format!(
            "\nApprove {} for {} (this call only)? y to confirm, any other key cancels\n",
            shown(&a.target()),
            shown(&a.agent)
        )),
        Mode::Confirm(Some(r)) => text.push_str(&format!(
            "\nDeny {} with reason \"{}\"? y to confirm, any other key cancels\n",
            shown(&a.target()),
            shown(r)
        )),
        _ => {}
    }
    let inner = body.width.saturating_sub(2);
    let card = Paragraph::new(hang(&text, usize::from(inner))).wrap(Wrap { trim: false });
    app.shown_whole = inner > 0
        && body.height > 2
        && card.line_count(inner) <= usize::from(body.height.saturating_sub(2));
    let title = if app.shown_whole {
        " approval "
    } else {
        " approval (cut: enlarge the terminal to approve) "
    };
    f.render_widget(
        card.block(Block::default().borders(Borders::ALL).title(title)),
        body,
    );
}

/// The pending list (tier, time left, agent → target, message), or a line saying it is empty.
fn draw_list(f: &mut ratatui::Frame, app: &mut App, body: ratatui::layout::Rect) {
    let items: Vec<ListItem> = app
        .approvals
        .iter()
        .map(|a| {
            let tier = a.terms.risk_tier.as_str();
            let high = a.risk_level == RiskLevel::High;
            // A record not as assent sealed it is marked in the list too (its card says what).
            let damaged = if a.damaged.is_empty() { "" } else { "!! " };
            ListItem::new(Line::from(vec![
                Span::styled(damaged, app.style(Color::Red)),
                Span::styled(
                    format!("{tier:<3} "),
                    app.style(if high { Color::Red } else { Color::Yellow }),
                ),
                Span::raw(format!("{:<14} ", time_left(&a.expires_at))),
                Span::styled(
                    format!("{} → {}  ", shown(&a.agent), shown(&a.target())),
                    Style::default().add_modifier(Modifier::BOLD),
                ),
                Span::raw(shown(&a.terms.message)),
            ]))
        })
        .collect();
    let empty = items.is_empty();
    let list = List::new(items)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" pending approvals "),
        )
        .highlight_symbol("> ")
        .highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    if empty {
        f.render_widget(
            Paragraph::new("nothing is waiting for a decision").block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" pending approvals "),
            ),
            body,
        );
    } else {
        f.render_stateful_widget(list, body, &mut app.state);
    }
}

/// `text` as lines of at most `width` columns ([`crate::render::hang_lines`]).
fn hang(text: &str, width: usize) -> Text<'static> {
    let lines: Vec<Line> = crate::render::hang_lines(text, width)
        .into_iter()
        .map(Line::from)
        .collect();
    Text::from(lines)
}
