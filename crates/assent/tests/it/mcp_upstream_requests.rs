//! An MCP upstream's own requests (`ping` here) as the hub and the stdio proxy take them in:
//! only under an id of at most 1 KiB (an integer, a string or `null`) — a line behind a UTF-8
//! byte order mark judged as rmcp parses it — with the hub answering "busy" to an upstream's
//! requests while 64 of its answers wait for its stdin (its stdout read on), and the
//! proxy queueing its client's answers for an upstream only while that queue has room (at
//! most 64 answers, 16 MiB, owed meanwhile, its client read on) — so that an upstream that
//! writes requests faster than it reads its answers cannot drive the gateway (which serves
//! every agent) or the agent's proxy out of memory, nor keep the proxy from seeing its client
//! leave.

use crate::hub_kit::{hub_gateway, hub_post, hub_session, memory, within};
use crate::mcp_held_settle::{KEY, answer, approvals, stdio_proxy};
use serde_json::{Value, json};
use std::io::Write;
use std::time::Duration;

/// What a process's memory may peak at in these tests: 300 MiB (the attacks took it to
/// some 800 MiB and more).
const PEAK: usize = 300 << 20;

/// A stdio upstream with tools `flood` and `seen`, writing its stdout on a thread of its own
/// (so that its reading never waits on its writing). `flood` is answered at once, then `FLOOD`
/// (Python lines indented four spaces, queueing lines with `w`, all behind `B`) runs on
/// a thread of its own, and after it — once the flood is written whole (or the pause is over),
/// and a second more — a `ping` under a 2 KiB id and one under `"short"`. Its stdin is read
/// `CHUNK` bytes at a time, `SLEEP` s apart, and not at all from `flood`'s call until the
/// flood is written whole or `PAUSE` s have passed.
/// `seen` answers what it got answers under: `short` and `long` (an id over 1 KiB) as seen,
/// and `drained` when the flood was all written (taken off its stdout) before the pause ended,
/// `late` when not.
const UPSTREAM: &str = r#"import json,sys,threading,time,os
import queue
out=queue.Queue()
drained=[0]
def writer():
    while True:
        s=out.get()
        if s is None:
            drained[0]=time.time(); continue
        sys.stdout.buffer.write((s+"\n").encode()); sys.stdout.flush()
threading.Thread(target=writer,daemon=True).start()
B=BOM
def w(s): out.put(B+s)
got=set()
pause=[0]
def flood():
FLOOD
    out.put(None)
    while pause[0]>time.time() and not drained[0]: time.sleep(0.05)
    time.sleep(1)
    w('{"jsonrpc":"2.0","id":"'+'y'*2048+'","method":"ping"}')
    w('{"jsonrpc":"2.0","id":"short","method":"ping"}')
def lines():
    buf=b""
    while True:
        if pause[0]>time.time() and not drained[0]:
            time.sleep(0.05); continue
        c=os.read(0,CHUNK)
        if not c: return
        parts=(buf+c).split(b"\n")
        buf=parts.pop()
        yield from parts
        time.sleep(SLEEP)
def text(t): return {"content":[{"type":"text","text":t}]}
for line in lines():
    m=json.loads(line)
    i=m.get("id"); meth=m.get("method")
    if meth is None:
        s=str(i); got.add(s if len(s)<=1024 else "long"); continue
    if i is None: continue
    if meth=="initialize":
        r={"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}
    elif meth=="tools/list":
        r={"tools":[{"name":n,"description":n+".","inputSchema":{"type":"object"}} for n in ("flood","seen")]}
    elif meth=="tools/call" and m["params"]["name"]=="flood":
        w(json.dumps({"jsonrpc":"2.0","id":i,"result":text("started")}))
        pause[0]=time.time()+PAUSE
        threading.Thread(target=flood,daemon=True).start()
        continue
    elif meth=="tools/call":
        d="drained" if 0<drained[0]<pause[0] else "late"
        r=text(" ".join([x for x in sorted(got) if x in ("short","long")]+[d]))
    else:
        r={}
    w(json.dumps({"jsonrpc":"2.0","id":i,"result":r}))
"#;

/// [`UPSTREAM`] with its flood, reading pace and pause filled in, each line written behind a
/// UTF-8 byte order mark when `bom`.
fn upstream(flood: &str, chunk: usize, sleep: f64, pause: u32, bom: bool) -> String {
    let bom = if bom { r#""\ufeff""# } else { r#""""# };
    UPSTREAM
        .replace("FLOOD", flood)
        .replace("B=BOM", &format!("B={bom}"))
        .replace("CHUNK", &chunk.to_string())
        .replace("SLEEP", &sleep.to_string())
        .replace("PAUSE", &pause.to_string())
}

/// A hub gateway in front of `source`, `flood` called through it, then `seen` called until
/// the upstream got an answer to its `"short"` ping (within 120 s), the gateway's peak memory
/// checked against [`PEAK`] all along; what `seen` answered last.
fn flood_the_hub(source: &str) -> String {
    let (_dir, server) = hub_gateway(KEY, &[("up", Some("[flood, seen]"), source)]);
    let (url, pid) = (server.url.clone(), server.child.id());
    let session = hub_session(&url, KEY);
    let call = |name: &str, id: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": format!("up__{name}"), "arguments": {}}})
    };
    let body = hub_post(&url, KEY, Some(&session), call("flood", 1));
    assert!(body.text().unwrap().contains("started"));
    let mut n = 1;
    let seen = within(120, "the upstream's short ping was never answered", || {
        let (_, peak) = memory(pid);
        assert!(peak < PEAK, "the gateway peaked at {} MiB", peak >> 20);
        n += 1;
        let body = hub_post(&url, KEY, Some(&session), call("seen", n))
            .text()
            .ok()?;
        body.contains("short").then_some(body)
    });
    let (_, peak) = memory(pid);
    eprintln!("gateway peak {} MiB", peak >> 20);
    assert!(peak < PEAK, "the gateway peaked at {} MiB", peak >> 20);
    seen
}

/// 100 pings under distinct 8 MiB ids, written as fast as the upstream can.
const HUGE_IDS: &str = "    for k in range(100): w('{\"jsonrpc\":\"2.0\",\"id\":\"'+str(k)+'x'*(8<<20)+'\",\"method\":\"ping\"}')";

/// 200,000 pings under 1000-byte ids, written as fast as the upstream can, 1000 to a write.
const MANY_PINGS: &str = "    for b in range(200):\n        w(('\\n'+B).join('{\"jsonrpc\":\"2.0\",\"id\":\"%07d%s\",\"method\":\"ping\"}' % (b*1000+k,'z'*993) for k in range(1000)))";

/// Attack (memory, found by review): a stdio upstream of the hub writes 100 pings under
/// distinct 8 MiB ids (within the line weight, so parsed by rmcp), reading its stdin at some
/// 1.3 MB/s (never slowly enough for the 30 s stall clock). rmcp answered each in a task of
/// its own, each answer repeating its 8 MiB id, all waiting for the upstream's stdin: the
/// gateway ran out of memory. Now a request under an id over 1 KiB is dropped unanswered:
/// the gateway stays small, the ping under a 2 KiB id gets no answer, the one under
/// `"short"` does.
#[test]
fn an_upstreams_pings_under_huge_ids_leave_the_hub_small_and_unanswered() {
    let seen = flood_the_hub(&upstream(HUGE_IDS, 65536, 0.05, 0, false));
    assert!(!seen.contains("long"), "{seen:.300}");
}

/// Attack (memory, found by review): as above, every line of the upstream's behind a UTF-8
/// byte order mark. The hub read each line's id with serde_json, which refuses a BOM, took
/// it for no request and passed it on whole to rmcp, which strips the BOM and answered each
/// ping under its 8 MiB id: the id bound did not hold. Now the BOM is taken off before the
/// line is judged (and rmcp gets it without), and a line the hub cannot read is dropped, not
/// passed on: the gateway stays small, the 2 KiB ping unanswered, the short one answered.
#[test]
fn an_upstreams_pings_under_huge_ids_behind_a_byte_order_mark_leave_the_hub_small() {
    let seen = flood_the_hub(&upstream(HUGE_IDS, 65536, 0.05, 0, true));
    assert!(!seen.contains("long"), "{seen:.300}");
}

/// Attack (memory, found by review): a stdio upstream of the hub writes 200,000 pings under
/// 1000-byte ids as fast as it can while reading nothing of its stdin for 12 s. rmcp answered
/// each in a task of its own, not awaited, so the gateway held an answer for every one (some
/// 400 MiB). (Here it reads nothing until its whole flood is written, within 90 s.) Now, while
/// 64 of rmcp's answers wait for the upstream's stdin, its further
/// requests are answered "busy" through the hub's bounded refusals (or dropped once those are
/// full), and its stdout is read on all along (found by review: stopping to read it there
/// could deadlock a single-threaded upstream): the gateway stays small, the flood is taken
/// off the upstream's stdout before it reads again (not so when the hub stops reading at 64),
/// and its short ping is answered.
fn flood_of_pings_while_reading_nothing(bom: bool) {
    let seen = flood_the_hub(&upstream(MANY_PINGS, 1 << 20, 0.0, 90, bom));
    assert!(!seen.contains("long"), "{seen:.300}");
    assert!(seen.contains("drained"), "{seen:.300}");
}

/// [`flood_of_pings_while_reading_nothing`].
#[test]
fn an_upstream_flooding_pings_while_reading_nothing_is_answered_busy_and_read_on() {
    flood_of_pings_while_reading_nothing(false);
}

/// [`flood_of_pings_while_reading_nothing`], every line behind a UTF-8 byte order mark
/// (which let each ping past the hub's bounds to rmcp, found by review).
#[test]
fn an_upstream_flooding_pings_behind_a_byte_order_mark_is_answered_busy_and_read_on() {
    flood_of_pings_while_reading_nothing(true);
}

/// A stdio upstream for the proxy with one tool `ask` which, called, is answered at once;
/// then it writes `FLOOD` (a Python expression: the lines to write) and a ping under id
/// `{"a":1}` tagged `obj`, then one under `"short"` tagged `short`, and reads nothing more.
const STDIO_UPSTREAM: &str = r#"import json,sys
def w(s):
    sys.stdout.write(s+"\n"); sys.stdout.flush()
for line in sys.stdin:
    m=json.loads(line)
    if "method" not in m or "id" not in m: continue
    i=m["id"]; meth=m["method"]
    if meth=="initialize":
        r={"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}
    elif meth=="tools/list":
        r={"tools":[{"name":"ask","description":"ask.","inputSchema":{"type":"object"}}]}
    elif meth=="tools/call":
        w(json.dumps({"jsonrpc":"2.0","id":i,"result":{"content":[{"type":"text","text":"started"}]}}))
        for l in FLOOD: w(l)
        w('{"jsonrpc":"2.0","id":{"a":1},"method":"ping","params":{"_meta":{"tag":"obj"}}}')
        w('{"jsonrpc":"2.0","id":"short","method":"ping","params":{"_meta":{"tag":"short"}}}')
        break
    else:
        r={}
    w(json.dumps({"jsonrpc":"2.0","id":i,"result":r}))
import time
time.sleep(600)
"#;

/// The stdio proxy in front of [`STDIO_UPSTREAM`] with `flood`: `ask` called, then every
/// upstream request it relays answered with `result` (until the `short` one), the proxy's
/// peak memory checked against [`PEAK`]; the tags of the requests relayed.
fn flood_the_proxy(flood: &str, result: &Value) -> Vec<String> {
    let source = STDIO_UPSTREAM.replace("FLOOD", flood);
    let (_gw, server) = hub_gateway(KEY, &[("up", Some("[ask]"), &source)]);
    let (mut proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let call = json!({"jsonrpc": "2.0", "id": "ask", "method": "tools/call",
                      "params": {"name": "ask", "arguments": {}}});
    writeln!(stdin, "{call}").unwrap();
    // Written on a thread of its own, so that a write to the proxy's stdin waiting for it to
    // read never holds up the reading of its output here.
    let (answers, to_write) = std::sync::mpsc::channel::<String>();
    let writer = std::thread::spawn(move || {
        for line in to_write {
            if writeln!(stdin, "{line}").is_err() {
                break;
            }
        }
    });
    let mut tags = Vec::new();
    let mut asked = false;
    while !tags.iter().any(|t| t == "short") {
        let line = lines.recv_timeout(Duration::from_secs(120));
        let line = line
            .ok()
            .flatten()
            .expect("the proxy relays the short ping");
        let m: Value = serde_json::from_str(&line).unwrap();
        asked |= m["id"] == "ask";
        let Some(id) = m["id"]
            .as_str()
            .filter(|i| i.starts_with("assent-upstream-"))
        else {
            continue;
        };
        let tag = m["params"]["_meta"]["tag"].as_str().unwrap_or("flood");
        tags.push(tag.to_string());
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
        answers.send(answer.to_string()).unwrap();
        let (_, peak) = memory(proxy.id());
        assert!(peak < PEAK, "the proxy peaked at {} MiB", peak >> 20);
    }
    assert!(asked || answer(&lines, &json!("ask"))["result"].is_object());
    std::thread::sleep(Duration::from_secs(2));
    let (_, peak) = memory(proxy.id());
    eprintln!("proxy peak {} MiB", peak >> 20);
    assert!(peak < PEAK, "the proxy peaked at {} MiB", peak >> 20);
    drop(answers);
    let _ = proxy.kill();
    let _ = proxy.wait();
    writer.join().unwrap();
    tags
}

/// Attack (memory, found by review): an upstream behind the stdio proxy (on the agent's
/// host) sends 50 pings under distinct 8 MiB ids and reads nothing; the client answers each.
/// The proxy kept each id for its open request and queued each answer, repeating it, for the
/// upstream's stdin: the proxy ran out of memory. Now a request under an id that is no
/// integer, `null` or string of at most 1 KiB is dropped unrelayed: none of the 50 reaches
/// the client, nor the ping under id `{"a":1}`; the short one does, and the proxy stays small.
#[test]
fn an_upstreams_pings_under_huge_or_object_ids_never_reach_the_proxys_client() {
    let flood =
        r#"('{"jsonrpc":"2.0","id":"'+str(k)+'x'*(8<<20)+'","method":"ping"}' for k in range(50))"#;
    let tags = flood_the_proxy(flood, &json!({}));
    assert_eq!(tags, ["short"]);
}

/// Attack (memory, found by review): an upstream behind the stdio proxy sends 400 pings
/// under short ids and reads nothing; the client answers each with 1 MiB. The answers were
/// queued for the upstream's stdin without any bound (some 400 MiB). Now an answer finding
/// that queue full (64 MiB) is owed to it, sent once it has room, and past 64 answers or
/// 16 MiB owed dropped with a warning, the proxy reading its client on all along: the proxy
/// stays small, and every request is still relayed to the client.
#[test]
fn a_clients_answers_to_an_upstream_reading_nothing_are_not_queued_without_bound() {
    let flood = r#"('{"jsonrpc":"2.0","id":%d,"method":"ping"}' % k for k in range(400))"#;
    let tags = flood_the_proxy(flood, &json!({"pad": "p".repeat(1 << 20)}));
    assert_eq!(
        tags.len(),
        401,
        "{:?}",
        &tags[tags.len().saturating_sub(3)..]
    );
    assert_eq!(tags.last().map(String::as_str), Some("short"));
}

/// A stdio upstream for the proxy with tools `hold` (answered `held ran`) and `ask`, which,
/// called, sends a `sampling/createMessage` request under id `"s1"` and reads nothing until
/// file `MARK` exists or `PAUSE` s have passed; then it answers the call with
/// `sampled TEXT after N` (the text of the client's answer to `s1`, the client notifications
/// it read before it).
const SAMPLING_UPSTREAM: &str = r#"import json,os,sys,time
def w(s):
    sys.stdout.write(s+"\n"); sys.stdout.flush()
call=None; seen=0
for line in sys.stdin:
    m=json.loads(line)
    i=m.get("id"); meth=m.get("method")
    if meth is None:
        if i=="s1" and call is not None:
            t="sampled "+m["result"]["content"]["text"]+" after "+str(seen)
            w(json.dumps({"jsonrpc":"2.0","id":call,"result":{"content":[{"type":"text","text":t}]}}))
        continue
    if i is None:
        seen+=1; continue
    if meth=="initialize":
        r={"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}
    elif meth=="tools/list":
        r={"tools":[{"name":n,"description":n+".","inputSchema":{"type":"object"}} for n in ("ask","hold")]}
    elif meth=="tools/call" and m["params"]["name"]=="ask":
        call=i
        w('{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}')
        end=time.time()+PAUSE
        while time.time()<end and not os.path.exists(MARK): time.sleep(0.05)
        continue
    elif meth=="tools/call":
        r={"content":[{"type":"text","text":"held ran"}]}
    else:
        r={}
    w(json.dumps({"jsonrpc":"2.0","id":i,"result":r}))
"#;

/// [`SAMPLING_UPSTREAM`] pausing until `mark` exists or `pause` s have passed.
fn sampling_upstream(mark: &std::path::Path, pause: u32) -> String {
    let mark = serde_json::to_string(&mark.to_string_lossy()).unwrap();
    SAMPLING_UPSTREAM
        .replace("MARK", &mark)
        .replace("PAUSE", &pause.to_string())
}

/// How many client notifications [`a_clients_answer_finding_the_upstreams_queue_full_still_reaches_it`]
/// sends ahead of its answer: well past the 1,024 lines the proxy queues for the upstream
/// (and what the pipe and the upstream's own buffer take in).
const NOTIFICATIONS: usize = 3000;

/// Calls `ask` through the proxy (stdin `stdin`, output `lines`), then sends
/// [`NOTIFICATIONS`] client notifications of 1 KiB and the client's answer (`hello`) to the
/// sampling request the upstream sent, relayed to it: the proxy's id of that request.
fn ask_then_flood(
    stdin: &mut impl Write,
    lines: &std::sync::mpsc::Receiver<Option<String>>,
) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": "ask", "method": "tools/call",
                      "params": {"name": "ask", "arguments": {}}});
    writeln!(stdin, "{call}").unwrap();
    let asked = loop {
        let line = lines.recv_timeout(Duration::from_secs(60));
        let line = line.ok().flatten().expect("the proxy relays the sampling");
        let m: Value = serde_json::from_str(&line).unwrap();
        if m["method"] == "sampling/createMessage" {
            break m["id"].clone();
        }
    };
    let pad = "n".repeat(1000);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed",
                      "params": {"_meta": {"pad": pad}}});
    let mut flood = format!("{note}\n").repeat(NOTIFICATIONS);
    let answer = json!({"jsonrpc": "2.0", "id": asked, "result": {
        "role": "assistant", "model": "m", "content": {"type": "text", "text": "hello"}}});
    flood.push_str(&format!("{answer}\n"));
    stdin.write_all(flood.as_bytes()).unwrap();
    stdin.flush().unwrap();
    asked
}

/// Found by review (liveness): the stdio proxy dropped the client's answer to one of the
/// upstream's own requests (sampling, elicitation, roots) when the upstream's queue was full
/// — an upstream reading its stdin slowly while the client sent notifications — so the
/// upstream waited for that answer for ever, and with it the call that asked. Here the
/// upstream asks for a sampling and reads nothing until told to (a file made, or 60 s), and
/// the client sends 3,000 notifications (most of them dropped: the queue is full), its answer,
/// then a `ping`: the ping is answered busy (the answer is owed, and goes before it) while
/// the upstream still reads nothing — so the answer certainly found the queue full. Once the
/// upstream reads again it gets the answer, in order, and the call is answered.
#[test]
fn a_clients_answer_finding_the_upstreams_queue_full_still_reaches_it() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("read-on");
    let source = sampling_upstream(&mark, 60);
    let (_gw, server) = hub_gateway(KEY, &[("up", Some("[ask]"), &source)]);
    let (mut proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    ask_then_flood(&mut stdin, &lines);
    let ping = json!({"jsonrpc": "2.0", "id": "probe", "method": "ping"});
    writeln!(stdin, "{ping}").unwrap();
    let probe = answer_to(&lines, &json!("probe"));
    assert_eq!(probe["error"]["code"], -32000, "{probe}");
    std::fs::write(&mark, "").unwrap();
    let done = answer_to(&lines, &json!("ask"));
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let seen: usize = text
        .strip_prefix("sampled hello after ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not the sampled answer: {done}"));
    assert!(
        seen < NOTIFICATIONS,
        "the upstream's queue was never full ({seen} notifications passed)"
    );
    drop(stdin);
    let _ = proxy.kill();
    let _ = proxy.wait();
}

/// Attack (an approval outliving its client, found by review): the client's answer to an
/// upstream's sampling request finding the upstream's queue full (an upstream reading
/// nothing, the client sending 3,000 notifications first) was held until there was room, and
/// the proxy read nothing of its client meanwhile: a client that then cancelled its call held
/// for approval (`cancel`), or closed its stdin, left that approval pending — and the proxy
/// running — so an operator approving it later had the call run for a client that had
/// cancelled it or gone. Now the answer is owed while the proxy reads on: the held approval
/// is withdrawn within seconds (read through the gateway's API), and a client that left has
/// the proxy exit (once the call forwarded to the stalled upstream has settled, within 30 s).
fn an_answer_owed_to_a_stalled_upstream_leaves_the_client_its_say(cancel: bool) {
    let dir = tempfile::tempdir().unwrap();
    let source = sampling_upstream(&dir.path().join("never"), 600);
    let tools = "[ask, {name: hold, approval: true}]";
    let (_gw, server) = hub_gateway(KEY, &[("up", Some(tools), &source)]);
    let (mut proxy, mut stdin, lines) = stdio_proxy(&server.url, &source);
    let hold = json!({"jsonrpc": "2.0", "id": "hold", "method": "tools/call",
                      "params": {"name": "hold", "arguments": {}}});
    writeln!(stdin, "{hold}").unwrap();
    within(60, "the call was never held", || {
        (approvals(&server.url, "pending") == 1).then_some(())
    });
    ask_then_flood(&mut stdin, &lines);
    if cancel {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": "hold", "reason": "gave up"}});
        writeln!(stdin, "{cancel}").unwrap();
        stdin.flush().unwrap();
    } else {
        drop(stdin);
    }
    within(10, "the held approval was never withdrawn", || {
        (approvals(&server.url, "cancelled") == 1).then_some(())
    });
    assert_eq!(approvals(&server.url, "pending"), 0);
    if !cancel {
        // Within 60 s: the proxy gives the call forwarded to the stalled upstream (`ask`) up
        // to 30 s to settle its report at the gateway before it ends.
        within(60, "the proxy never exited", || proxy.try_wait().unwrap());
    }
    let _ = proxy.kill();
    let _ = proxy.wait();
}

/// [`an_answer_owed_to_a_stalled_upstream_leaves_the_client_its_say`], the client closing
/// its stdin.
#[test]
fn a_client_leaving_while_its_answer_waits_for_a_stalled_upstream_has_its_held_call_withdrawn() {
    an_answer_owed_to_a_stalled_upstream_leaves_the_client_its_say(false);
}

/// [`an_answer_owed_to_a_stalled_upstream_leaves_the_client_its_say`], the client
/// cancelling its held call.
#[test]
fn a_client_cancelling_while_its_answer_waits_for_a_stalled_upstream_has_its_held_call_withdrawn() {
    an_answer_owed_to_a_stalled_upstream_leaves_the_client_its_say(true);
}

/// The next message of `lines` with id `id` (within 60 s), skipping every other.
#[track_caller]
fn answer_to(lines: &std::sync::mpsc::Receiver<Option<String>>, id: &Value) -> Value {
    crate::mcp_held_settle::message_with_id(lines, id, false)
}
