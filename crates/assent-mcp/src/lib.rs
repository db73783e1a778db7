//! assent-mcp: an MCP stdio proxy that puts the assent gateway in front of one MCP server.
//!
//! The client speaks MCP (newline-delimited JSON-RPC 2.0) to the proxy on stdin/stdout; the
//! proxy runs the upstream server as a child process and relays every message, except as
//! below. A client line is read strictly ([`assent_core::json`]): one with a duplicate key or
//! a number a double would change is refused with a JSON-RPC error, and what goes upstream is
//! the serialisation of the value the proxy read (and gated), never the client's bytes, so an
//! upstream parser that reads JSON differently cannot run something other than what was
//! gated. Further:
//! - `tools/call` requests go to the gateway first (`POST /v1/tool-calls`). An allowed call is
//!   forwarded rebuilt from what was gated (`{name, arguments}`, plus the protocol's own
//!   entries in the protocol's shapes: `relay::gated`); a held call waits (long-polling the approval) and is forwarded only after its
//!   approval token was redeemed for the exact call; anything else — denied, rejected, expired
//!   without an approving default, cancelled, or the gateway unreachable — is answered with a
//!   tool result `isError: true` whose text starts `TOOL_DENIED:`, and never forwarded.
//! - While a call waits, the proxy sends `notifications/progress` every `progress_seconds` when
//!   the client gave a `progressToken`, so clients that reset their request timeout on
//!   progress keep waiting. A `notifications/cancelled` for a waiting call (or the client
//!   closing stdin) cancels its approval at the gateway, and the call is never forwarded.
//! - Tool-list pinning: after `initialize`, the proxy reads the upstream's `tools/list` itself
//!   and reports it (`POST /v1/tools/check`). A tool whose definition differs from its pin, or
//!   that appeared after the server was pinned, is held for an operator's review: its calls
//!   wait and are never forwarded until the new definition is accepted, and `tools/list`
//!   shows the client the pinned definition (a new tool not at all) until then.
//! - The upstream's own words — the `instructions` of its handshake answer (which clients hand
//!   the model) and its `serverInfo` (which they show) — are pinned as its tools are (the
//!   pseudo-tool `(server)`; not the server's version, which may change): the answer to
//!   `initialize` or `server/discover` waits for their check and shows only the words pinned
//!   (changed ones held for an operator's review; none when nothing is pinned or the gateway
//!   cannot be asked). The hub gives each declared upstream's pinned instructions in its own.
//! - A call cleared at the gateway (its token redeemed) that never runs — its client
//!   cancelled it first — is reported as not run, and a hub call whose upstream never
//!   answered as such (`POST /v1/tool-results` with `outcome`), so that the audit says what
//!   became of it.
//! - Every forwarded call's result is reported (`POST /v1/tool-results`: its SHA-256 and size
//!   go to the audit log, linked to the approval) before it is relayed: the client never has
//!   a result whose `call.result` record is not committed (issue 13 §4), and a result whose
//!   report fails is withheld (`TOOL_DENIED: result withheld …`). A result larger than the call's
//!   `thresholds.output_bytes` (the JSON of its `result`) is held for an operator and relayed
//!   only after the approval's token was redeemed for that exact result; otherwise the client
//!   gets `TOOL_DENIED: result withheld …`.
//! - `tools/list` results are filtered to the tools the agent file declares for the server
//!   alias when it lists `allowed_tools`.
//! - MCP eras (issue 11): a 2026-07-28 client and a handshake-era upstream (or the reverse)
//!   meet in the proxy, which translates the handshake and every message into its receiver's
//!   era ([`era`]); in-client approval asks a modern client in an `input_required` result;
//!   a call that became a task held for an approval is named after it (`approval-ID`) and can
//!   be resumed with `tasks/get` by the proxy of a later connection.
//! - JSON-RPC batches are refused (a batch could hide a `tools/call`), and so is a line that is
//!   not JSON (a more lenient upstream parser could find a `tools/call` in it), and a
//!   `tools/call` without an id is dropped.
//! - Upstream lines are read as strictly and relayed as the proxy's serialisation. An answer
//!   is relayed only under an id the proxy sent upstream and has not seen answered (once, in
//!   that id's own spelling); the upstream's own requests reach the client under ids of the
//!   proxy's, and the proxy's own questions carry random ids (`relay/ids.rs`).
//!
//! It is a client of the assent server, not a second policy engine: it holds no policy and
//! fails closed when it cannot ask. The relay is hand-written rather than built on rmcp
//! because it must pass every other message through unchanged in meaning, whatever protocol
//! version the two ends negotiate.
//!
//! Layout, top to bottom (an import only points down): [`run`] (`relay/`: the stdio proxy,
//! a `Relay` over one shared state, its handlers per direction and per message) and [`hub`]
//! (the rmcp hub), both over [`Gateway`] (`gateway.rs`: one call's way through the `/v1` API,
//! all of it over `assent_api::Client` and its typed bodies — the crate's only HTTP client of
//! the gateway), `tasks.rs` (MCP tasks shared by both), [`era`] and `ends.rs` (the MCP eras),
//! `ask.rs` (in-client approval) and `kit.rs` (the shared types, JSON-RPC lines and the words
//! for a failed gateway call).

#![warn(missing_docs)]

mod ask;
mod ends;
pub mod era;
mod gateway;
mod held;
pub mod hub;
mod kit;
mod relay;
mod tasks;
mod trace;
mod weigh;

pub use ask::{AskUser, Asker, UserAnswer, elicitation_schema, in_client_question, user_answer};
pub use gateway::Gateway;
pub use kit::{Hold, HoldState, Outcome, ProxyConfig, refusal};
pub use relay::run;
