//! `assent watch` in a real terminal: tmux runs it, `send-keys` works the queue and
//! `capture-pane` reads the screen.

use super::{BIN, OP_KEY, Served, get_op, held, served};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux is installed (scripts/test.sh installs it)")
    }
    fn screen(&self, escapes: bool) -> String {
        let mut args = vec!["capture-pane", "-p", "-t", "w"];
        if escapes {
            args.push("-e");
        }
        String::from_utf8_lossy(&self.run(&args).stdout).into_owned()
    }
    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.run(&["send-keys", "-t", "w", k]);
            std::thread::sleep(Duration::from_millis(150));
        }
    }
    /// Waits until the screen shows `text`.
    fn wait_for(&self, text: &str) -> String {
        self.wait_for_all(&[text])
    }

    /// Waits until one capture of the screen shows every one of `texts`.
    fn wait_for_all(&self, texts: &[&str]) -> String {
        let text = texts.join("`, `");
        let start = Instant::now();
        loop {
            let s = self.screen(false);
            if texts.iter().all(|t| s.contains(t)) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "`{text}` never appeared on screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Tmux {
    /// Opens the selected approval's card, approves it (`a`, `y`), and waits for `then`.
    fn approve_open(&self, then: &str) {
        self.keys(&["Enter", "a"]);
        self.wait_for("y to confirm");
        self.answer();
        self.wait_for(then);
    }

    /// Answers the question on screen with `y`, no sooner than the watcher takes one as an
    /// answer (200 ms after it appeared).
    fn answer(&self) {
        std::thread::sleep(Duration::from_millis(300));
        self.keys(&["y"]);
    }

    /// `assent watch` against `url` as operator alice, without colour, in a new detached
    /// 140×40 tmux session `w` on a server of its own (`socket` and this process's id).
    fn watch(url: &str, socket: &str) -> Tmux {
        let tmux = Tmux {
            socket: format!("{socket}{}", std::process::id()),
        };
        let cmd = format!(
            "ASSENT_URL={url} ASSENT_API_KEY={OP_KEY} NO_COLOR=1 TERM=xterm-256color {BIN} watch"
        );
        let out = tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "w",
            "-x",
            "140",
            "-y",
            "40",
            &cmd,
        ]);
        assert!(out.status.success(), "{out:?}");
        tmux
    }
}

/// A gateway ([`served`]) with two calls held, of 5000 and then of 7000, and `assent watch`
/// on it in tmux ([`Tmux::watch`] on socket `socket`): the gateway, its URL, the two approval
/// ids and the terminal.
fn watching_two(socket: &str) -> (Served, String, (String, String), Tmux) {
    let gw = served("");
    let url = gw.server.url.clone();
    let first = held(&url, 5000);
    let second = held(&url, 7000);
    let tmux = Tmux::watch(&url, socket);
    (gw, url, (first, second), tmux)
}

/// Waits for both of [`watching_two`]'s approvals to be listed, opens the selected one's card
/// and asks to approve it (`Enter`, `a`): the ids (on the card, the other) once the watcher
/// asks for `y`.
fn asked_to_confirm(tmux: &Tmux, first: String, second: String) -> (String, String) {
    tmux.wait_for("2 pending");
    tmux.keys(&["Enter", "a"]);
    let screen = tmux.wait_for("y to confirm");
    match screen.contains(&first) {
        true => (first, second),
        false => (second, first),
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Approval `id` as the operator reads it.
fn status(url: &str, id: &str) -> Value {
    get_op(url, &format!("/v1/approvals/{id}"))
}

#[test]
fn assent_watch_approves_and_denies_from_the_keyboard_under_tmux() {
    let (mut gw, url, (first, second), tmux) = watching_two("assent-test-");

    // The list, with the keys in the footer; the first (oldest) is selected.
    // The whole first frame: the footer is drawn last (found by a test run: the screen was
    // read while the frame was half drawn, the list there, the footer not yet).
    let footer = "↑/↓ select  enter open  a approve  d deny  q quit";
    let screen = tmux.wait_for_all(&["2 pending", footer]);
    assert!(screen.contains("treasury_bot → transfer_funds"), "{screen}");
    assert!(
        screen.contains("> "),
        "the selection is marked without colour:\n{screen}"
    );
    // NO_COLOR: no colour escape codes at all (bold and reverse video only).
    let raw = tmux.screen(true);
    for code in ["\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[38;", "\x1b[91m"] {
        assert!(
            !raw.contains(code),
            "colour code {code:?} with NO_COLOR set:\n{raw:?}"
        );
    }

    // Open the card of the selected approval.
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("why:");
    assert!(
        screen.contains("arguments:") && screen.contains("risk:"),
        "{screen}"
    );
    let selected = if screen.contains(&first) {
        first.clone()
    } else {
        second.clone()
    };
    let other = if selected == first {
        second.clone()
    } else {
        first.clone()
    };

    // a, then anything but y: nothing is decided.
    tmux.keys(&["a"]);
    tmux.wait_for("y to confirm");
    tmux.keys(&["n"]);
    tmux.wait_for("cancelled: nothing was decided");
    assert_eq!(status(&url, &selected)["status"], "pending");

    // a, y: approved.
    tmux.approve_open("approved");
    assert_eq!(status(&url, &selected)["status"], "approved");
    assert_eq!(status(&url, &selected)["decisions"][0]["by"], "alice");

    // The other one: d, a reason, enter, y: denied with that reason.
    tmux.wait_for("1 pending");
    tmux.keys(&["d"]);
    tmux.wait_for("Reason for denying");
    tmux.run(&["send-keys", "-t", "w", "-l", "over the daily limit"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("with reason \"over the daily limit\"");
    tmux.answer();
    tmux.wait_for("0 pending");
    let v = status(&url, &other);
    assert_eq!(v["status"], "rejected", "{v}");
    assert_eq!(v["decisions"][0]["reason"], "over the daily limit");

    // q quits and gives the terminal back.
    tmux.keys(&["q"]);
    let start = Instant::now();
    while tmux.run(&["has-session", "-t", "w"]).status.success() {
        assert!(start.elapsed() < Duration::from_secs(10), "q did not quit");
        std::thread::sleep(Duration::from_millis(100));
    }
    gw.server.kill9();
}

/// Attack (found by review): the watcher confirmed whatever approval was selected when `y`
/// came, and the selection fell back to the same place in the list when the approval on the
/// card left the queue, so an agent that withdrew a harmless call the operator had opened
/// and was about to approve had its harmful one, next in the list, approved instead. And a
/// card taller than the terminal was cut with no sign, so an agent could pad its arguments
/// until the one that matters fell off the pane and still be approved with `a`, `y`.
#[test]
fn assent_watch_confirms_only_the_approval_on_screen_and_only_when_all_of_it_fits() {
    let (mut gw, url, (first, second), tmux) = watching_two("assent-test-fit-");
    let (shown, other) = asked_to_confirm(&tmux, first, second);
    // The agent withdraws the call on the card: the question goes, nothing moves to `other`.
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/approvals/{shown}/cancel"))
        .bearer_auth(super::BOT_KEY)
        .json(&serde_json::json!({}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text());
    tmux.wait_for("left the queue");
    tmux.keys(&["y"]);
    tmux.wait_for("1 pending");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(status(&url, &other)["status"], "pending");

    // A terminal too small for the card: approving is refused, denying is not needed to test.
    tmux.run(&["resize-window", "-t", "w", "-x", "40", "-y", "10"]);
    tmux.keys(&["Enter", "a"]);
    tmux.wait_for("(cut");
    tmux.answer();
    tmux.run(&["resize-window", "-t", "w", "-x", "140", "-y", "40"]);
    tmux.wait_for("not approved: the card did not fit");
    assert_eq!(status(&url, &other)["status"], "pending");
    // Whole on screen again: approved.
    tmux.approve_open("0 pending");
    assert_eq!(status(&url, &other)["status"], "approved");
    tmux.keys(&["q"]);
    gw.server.kill9();
}

/// Attack (found by review): an agent's text on the watcher's card. A CSI (one-byte U+009B and
/// ESC `[`) or a right-to-left override U+202E in an argument must show as text, not act; and
/// a recipient padded with 300 spaces before `  approvers: nobody, auto-approved` had the
/// pane's wrapping start a line that read as the card's own `approvers:` field. The run is now
/// shown as `␠×N`, and a card line too wide for the pane goes on in lines starting with `↳`.
#[test]
fn assent_watch_shows_an_agents_escapes_and_padding_as_text_never_as_a_card_field() {
    let gw = served("");
    let url = gw.server.url.clone();
    let fake = "  approvers: nobody, auto-approved as R0 (low)";
    for recipient in [
        format!("ACME\u{9b}2K\u{1b}[1A\u{202e}xyz{}{fake}", " ".repeat(300)),
        // Visible padding that ends the message line where the pane wraps (138 columns
        // inside), so that the fake field would start the next.
        format!("ACME{}{fake}", "x".repeat(100)),
    ] {
        let b = super::propose_to(&url, 5000, &recipient);
        assert_eq!(b["decision"], "pending", "{b}");
    }
    let tmux = Tmux::watch(&url, "assent-test-hostile-");
    tmux.wait_for("2 pending");
    for down in [false, true] {
        if down {
            tmux.keys(&["Escape", "Down"]);
        }
        tmux.keys(&["Enter"]);
        let screen = tmux.wait_for("why:");
        for acting in ['\u{9b}', '\u{1b}', '\u{202e}'] {
            assert!(!screen.contains(acting), "{acting:?} raw:\n{screen}");
        }
        for line in screen.lines() {
            let inside = line.trim_start_matches('│');
            assert!(
                !inside.trim_start().starts_with("approvers: nobody"),
                "a line reads as a card field:\n{screen}"
            );
        }
        if screen.contains("xyz") {
            assert!(
                screen.contains(r"\u009b2K\u001b[1A\u202exyz␠×302"),
                "{screen}"
            );
        }
    }
    tmux.keys(&["q"]);
}

/// Attack: a held call's payee edited in the database was listed and shown by `assent watch`
/// as the agent's request. Its row is marked `!!` and its card opens with the warning that
/// the record is not as assent sealed it (`call`); the intact one beside it is not marked.
#[test]
fn assent_watch_marks_a_call_edited_in_the_database() {
    let (gw, _url, (first, second), tmux) = watching_two("assent-test-edited-");
    tmux.wait_for("2 pending");
    super::terminal::pay_mallory(&gw, &second, 7000);
    // The list is read again each second: wait for the edited row's mark.
    let screen = tmux.wait_for("!! ");
    let marked: Vec<&str> = screen.lines().filter(|l| l.contains("!! ")).collect();
    assert_eq!(marked.len(), 1, "{screen}");
    // Each card, the selected one first (the next waited for by its id, which only a card
    // shows): the edited one (paying mallory) opens with the warning, the intact one has none.
    // Each screen is waited for by its footer too, which is drawn after what it waits for.
    let card_keys = "esc back  q quit";
    tmux.keys(&["Enter"]);
    let one = tmux.wait_for_all(&["why:", card_keys]);
    let other = if one.contains(&first) {
        &second
    } else {
        &first
    };
    tmux.keys(&["Escape", "Down", "Enter"]);
    let two = tmux.wait_for_all(&[other, "why:", card_keys]);
    let warning = "!! NOT AS ASSENT SEALED IT: call";
    for card in [&one, &two] {
        let warned = card.contains(warning);
        assert_eq!(warned, card.contains("mallory"), "{card}");
        assert_eq!(warned, card.contains(&second), "{card}");
        assert!(card.contains(&first) != warned, "{card}");
    }
    // Back in the list, the selected row (the card just seen) is marked only if it was the
    // edited one: the mark is on the edited call's row.
    tmux.keys(&["Escape"]);
    let list = tmux.wait_for_all(&["> ", "↑/↓ select"]);
    let selected = list.lines().find(|l| l.contains("> ")).unwrap();
    assert_eq!(selected.contains("!! "), two.contains(warning), "{list}");
    tmux.keys(&["q"]);
}

/// Attack (found by review): a gateway (or a connection) that accepts and never answers
/// froze `assent watch` for good: the client had no timeout, and the watcher waits for the
/// gateway's answers on its UI thread, in raw mode, `q` and Ctrl-C unread. Its requests now
/// end after 10 s: here the first read, before the terminal is taken, fails so.
#[test]
fn assent_watch_gives_up_on_a_gateway_that_never_answers() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    std::thread::spawn(move || {
        let held: Vec<_> = silent.incoming().collect();
        drop(held);
    });
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .arg("watch")
        .env("ASSENT_URL", &url)
        .env("ASSENT_API_KEY", OP_KEY)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            panic!("assent watch still waits for a gateway that never answers");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains("cannot reach the gateway"), "{err}");
    assert!(start.elapsed() >= Duration::from_secs(9), "{err}");
}

/// Attack (found by review): keys typed ahead after the watcher's own decision. `y` approved
/// the approval on the card; the re-read that followed found it gone but, as this watcher had
/// decided it, kept the keys typed meanwhile, so a buffered `a` `y` approved the approval
/// that slid into its place. Keys are now dropped whenever a re-read selects another one.
#[test]
fn assent_watch_drops_keys_typed_ahead_after_its_own_decision() {
    let (mut gw, url, (first, second), tmux) = watching_two("assent-test-ahead-");
    let (shown, other) = asked_to_confirm(&tmux, first, second);
    // `y`, then `a` `y` typed ahead, all in the terminal before the watcher reads the first.
    std::thread::sleep(Duration::from_millis(300));
    tmux.run(&["send-keys", "-t", "w", "y", "a", "y"]);
    tmux.wait_for("1 pending");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(status(&url, &shown)["status"], "approved");
    assert_eq!(status(&url, &other)["status"], "pending");
    tmux.keys(&["q"]);
    gw.server.kill9();
}

/// Attack (found by review): a paste reached the watcher as keys, so a reason pasted with a
/// line break and a `y` after it (`no` `\n` `y`) answered the question it raised and denied the
/// call. Now the watcher asks for bracketed paste, and a paste into a reason is text, its line
/// break a space; and where the terminal sends a paste as keys anyway, the keys already waiting
/// when the question appears are dropped: nothing is decided either way.
#[test]
fn assent_watch_takes_a_paste_as_text_never_as_an_answer() {
    let (mut gw, url, (first, second), tmux) = watching_two("assent-test-paste-");
    tmux.wait_for("2 pending");
    tmux.keys(&["Enter", "d"]);
    tmux.wait_for("Reason for denying");
    // Bracketed, as a terminal pastes for a program that asked (tmux `paste-buffer -p`).
    tmux.run(&["set-buffer", "not this one\ny"]);
    tmux.run(&["paste-buffer", "-p", "-t", "w"]);
    tmux.wait_for("not this one y");
    // As keys, as a terminal without bracketed paste sends it: the line break is `Enter`.
    tmux.keys(&["Escape", "Enter", "d"]);
    tmux.wait_for("Reason for denying");
    tmux.run(&["set-buffer", "spam\ny"]);
    tmux.run(&["paste-buffer", "-t", "w"]);
    tmux.wait_for("with reason \"spam\"");
    std::thread::sleep(Duration::from_millis(1500));
    for id in [&first, &second] {
        assert_eq!(status(&url, id)["status"], "pending", "{id}");
    }
    tmux.keys(&["n"]);
    tmux.wait_for("cancelled: nothing was decided");
    tmux.keys(&["q"]);
    gw.server.kill9();
}

/// Found by review: where a paste arrives as keys in two pieces (a slow link), its `y` could
/// come after the watcher dropped what was waiting when the question appeared. A `y` sooner
/// than 200 ms after the question is not an answer: the question stays, nothing is decided,
/// and a `y` after that still answers it.
#[test]
fn assent_watch_takes_no_y_as_an_answer_the_moment_its_question_appears() {
    let (mut gw, url, (first, second), tmux) = watching_two("assent-test-soon-");
    tmux.wait_for("2 pending");
    tmux.keys(&["Enter"]);
    // `a`, and `y` 30 ms later: after the watcher read `a` (and dropped what was waiting).
    tmux.run(&["send-keys", "-t", "w", "a"]);
    std::thread::sleep(Duration::from_millis(30));
    tmux.run(&["send-keys", "-t", "w", "y"]);
    tmux.wait_for("y to confirm");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        tmux.screen(false).contains("y to confirm"),
        "the question stays"
    );
    for id in [&first, &second] {
        assert_eq!(status(&url, id)["status"], "pending", "{id}");
    }
    tmux.answer();
    tmux.wait_for("1 pending");
    tmux.keys(&["q"]);
    gw.server.kill9();
}
