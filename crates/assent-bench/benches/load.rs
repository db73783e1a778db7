//! The load of B3 over HTTP (issue 13 item 6): `bench/replicas.py` starts the gateways and runs
//! this program for each cell; it drives them and prints what it measured.
//!
//! Each of `--agents N` agents runs cycles against its gateway (`--ports P1[,P2]`, agent `i` on
//! `P[i mod n]`): propose a call that must be approved (`POST /v1/tool-calls`, 202), hand its id
//! to its operator, and long-poll it (`GET /v1/approvals/{id}?wait=30`) until it is approved.
//! The operator decides it (`POST /v1/approvals/{id}/decision`) on the *next* gateway
//! (`P[(i+1) mod n]`: the other replica when there are two). Latency is the decision sent →
//! the agent's long-poll answered, both instants taken in this process (`Instant`), so no
//! client-side scheduling but tokio's is in it. With `--redeem` the agent then redeems the
//! token the long-poll answered with (`POST /v1/tokens/redeem`, 200) before its next cycle:
//! the whole four-request cycle of issue 13 §4 (propose, decide, read the token, redeem).
//!
//! Why not Python (what `replicas.py` used before): its 2·N client threads share one
//! interpreter lock that switches every 5 ms, so a woken agent thread could wait milliseconds
//! for the lock after its answer arrived — the client's delay, measured as the gateway's. This
//! client runs on one tokio worker thread (`--threads`), one keep-alive connection per agent
//! and per operator.
//!
//! With `--flood N` (`bench/neighbour.py`), one more principal — key `bench-flood-key-0123456789`
//! — holds `N` requests in flight meanwhile on `N` connections to the first gateway, each
//! proposing an allowed call (`tool: read`, 200; `429` over its rate) as soon as the last was answered: a noisy
//! neighbour of the agents measured; the output then also has `"flood_calls"`.
//!
//! Keys: the operator's is `--op-key`; agent `i`'s is `bench-agent-key-{i:03}-0123456789`
//! (the scheme `replicas.py` writes into the config). Output: one JSON line
//! `{"cycles": C, "seconds": S, "wake_p50_ms": …, "wake_p90_ms": …, "wake_p99_ms": …,
//! "wake_p999_ms": …, "propose_p50_ms": …, "propose_p99_ms": …, "decide_p50_ms": …,
//! "decide_p99_ms": …, "redeem_p50_ms": …}` (NaN without `--redeem`); the decision's own round
//! trip beside the wake-up says how much of the wake-up is the decision's request. Any answer other than the expected one stops the run with its body.

use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The value after `flag` in the arguments, if any.
fn arg(flag: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Agent `i`'s key, as `bench/replicas.py` writes it into the config.
fn agent_key(i: usize) -> String {
    format!("bench-agent-key-{i:03}-0123456789")
}

/// One keep-alive connection's client (reqwest keeps one idle connection per host).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("a reqwest client")
}

/// Sends one request and returns its status and JSON body; a transport failure stops the run.
async fn call(req: reqwest::RequestBuilder) -> (reqwest::StatusCode, serde_json::Value) {
    let r = req.send().await.expect("a request reached the gateway");
    let status = r.status();
    let body = r.json().await.unwrap_or(serde_json::Value::Null);
    (status, body)
}

/// What one agent measured: cycles, wake-up latencies, propose and decide round trips (ms).
#[derive(Default)]
struct Measured {
    cycles: usize,
    wake: Vec<f64>,
    propose: Vec<f64>,
    decide: Vec<f64>,
    redeem: Vec<f64>,
}

/// The operator of agent `i`: decides every id it is handed on `url`, telling the agent when
/// it sent each decision; returns its decide round trips.
async fn operator(
    url: String,
    key: String,
    mut ids: mpsc::UnboundedReceiver<String>,
    sent: mpsc::UnboundedSender<Instant>,
) -> Vec<f64> {
    let c = client();
    let mut took = Vec::new();
    while let Some(id) = ids.recv().await {
        let at = Instant::now();
        let _ = sent.send(at);
        let req = c
            .post(format!("{url}/v1/approvals/{id}/decision"))
            .bearer_auth(&key)
            .json(&serde_json::json!({"decision": "approve"}));
        let (s, v) = call(req).await;
        assert!(s.is_success(), "decision answered {s}: {v}");
        took.push(at.elapsed().as_secs_f64() * 1000.0);
    }
    took
}

/// What agents run against: agent `i`'s gateway is `ports[i mod n]`, its operator's the next.
#[derive(Clone)]
struct Plan {
    ports: Vec<String>,
    op_key: String,
    stop: Instant,
    redeem: bool,
}

/// Agent `i` runs cycles until `plan.stop`.
async fn agent(i: usize, plan: Plan) -> Measured {
    let mine = plan.ports[i % plan.ports.len()].clone();
    let other = plan.ports[(i + 1) % plan.ports.len()].clone();
    let (op_key, stop) = (plan.op_key, plan.stop);
    let (ids_tx, ids_rx) = mpsc::unbounded_channel();
    let (sent_tx, mut sent_rx) = mpsc::unbounded_channel();
    let op = tokio::spawn(operator(other, op_key, ids_rx, sent_tx));
    let (c, key) = (client(), agent_key(i));
    let mut m = Measured::default();
    let mut n = 0usize;
    while Instant::now() < stop {
        n += 1;
        let t0 = Instant::now();
        let body = serde_json::json!({"agent": "bench", "session_id": format!("s{i}-{}", n / 50),
                                      "tool": "pay", "arguments": {"n": n}});
        let req = c
            .post(format!("{mine}/v1/tool-calls"))
            .bearer_auth(&key)
            .json(&body);
        let (s, v) = call(req).await;
        assert_eq!(s.as_u16(), 202, "propose answered {s}: {v}");
        m.propose.push(t0.elapsed().as_secs_f64() * 1000.0);
        let id = v["approval_id"]
            .as_str()
            .expect("an approval_id")
            .to_string();
        ids_tx.send(id.clone()).expect("the operator runs");
        let req = c
            .get(format!("{mine}/v1/approvals/{id}?wait=30"))
            .bearer_auth(&key);
        let (s, v) = call(req).await;
        let woke = Instant::now();
        assert_eq!(v["status"], "approved", "long-poll answered {s}: {v}");
        let sent = sent_rx.recv().await.expect("the operator sent it");
        m.wake
            .push(woke.saturating_duration_since(sent).as_secs_f64() * 1000.0);
        if plan.redeem {
            let t0 = Instant::now();
            let body =
                serde_json::json!({"token": v["token"], "tool": "pay", "arguments": {"n": n}});
            let req = c
                .post(format!("{mine}/v1/tokens/redeem"))
                .bearer_auth(&key)
                .json(&body);
            let (s, v) = call(req).await;
            assert_eq!(s.as_u16(), 200, "redeem answered {s}: {v}");
            m.redeem.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        m.cycles += 1;
    }
    drop(ids_tx);
    m.decide = op.await.expect("the operator ended");
    m
}

/// One connection of the flooding principal (`--flood`): proposes allowed calls on `url` one
/// after the other until `stop` (again at once after a `429`); returns how many were
/// answered 200.
async fn flood(url: String, k: usize, stop: Instant) -> usize {
    let c = client();
    let mut n = 0usize;
    while Instant::now() < stop {
        let body = serde_json::json!({"agent": "bench", "session_id": format!("flood-{k}-{}", n / 50),
                                      "tool": "read", "arguments": {"n": n}});
        let req = c
            .post(format!("{url}/v1/tool-calls"))
            .bearer_auth("bench-flood-key-0123456789")
            .json(&body);
        let (s, v) = call(req).await;
        match s.as_u16() {
            200 => n += 1,
            // Over its `rate_limits`: it asks again at once, as a flood would.
            429 => {}
            _ => panic!("a flood proposal answered {s}: {v}"),
        }
    }
    n
}

/// The `p` quantile (0..1) of sorted `xs`, NaN when empty.
fn pct(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs[((xs.len() as f64 * p) as usize).min(xs.len() - 1)]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench` lists benches this way; there is nothing to list
    }
    let ports: Vec<String> = arg("--ports")
        .expect("--ports P1[,P2]")
        .split(',')
        .map(|p| format!("http://127.0.0.1:{}", p.trim()))
        .collect();
    let agents: usize = arg("--agents").map_or(1, |a| a.parse().expect("--agents: a number"));
    let seconds: f64 = arg("--seconds").map_or(6.0, |s| s.parse().expect("--seconds: a number"));
    let threads: usize = arg("--threads").map_or(1, |t| t.parse().expect("--threads: a number"));
    let op_key = arg("--op-key").expect("--op-key KEY");
    let redeem = std::env::args().any(|a| a == "--redeem");
    let floods: usize = arg("--flood").map_or(0, |n| n.parse().expect("--flood: a number"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let started = Instant::now();
    let plan = Plan {
        ports,
        op_key,
        stop: started + Duration::from_secs_f64(seconds),
        redeem,
    };
    let (all, flood_calls): (Vec<Measured>, usize) = rt.block_on(async {
        let flooding: Vec<_> = (0..floods)
            .map(|k| tokio::spawn(flood(plan.ports[0].clone(), k, plan.stop)))
            .collect();
        let tasks: Vec<_> = (0..agents)
            .map(|i| tokio::spawn(agent(i, plan.clone())))
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("an agent ended"));
        }
        let mut flooded = 0;
        for f in flooding {
            flooded += f.await.expect("a flood connection ended");
        }
        (out, flooded)
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut m = Measured::default();
    for a in all {
        m.cycles += a.cycles;
        m.wake.extend(a.wake);
        m.propose.extend(a.propose);
        m.decide.extend(a.decide);
        m.redeem.extend(a.redeem);
    }
    for v in [&mut m.wake, &mut m.propose, &mut m.decide, &mut m.redeem] {
        v.sort_by(f64::total_cmp);
    }
    println!(
        "{}",
        serde_json::json!({
            "cycles": m.cycles, "seconds": elapsed,
            "wake_p50_ms": pct(&m.wake, 0.5), "wake_p90_ms": pct(&m.wake, 0.9),
            "wake_p99_ms": pct(&m.wake, 0.99), "wake_p999_ms": pct(&m.wake, 0.999),
            "propose_p50_ms": pct(&m.propose, 0.5), "propose_p99_ms": pct(&m.propose, 0.99),
            "decide_p50_ms": pct(&m.decide, 0.5), "decide_p99_ms": pct(&m.decide, 0.99),
            "redeem_p50_ms": pct(&m.redeem, 0.5), "flood_calls": flood_calls,
        })
    );
}
