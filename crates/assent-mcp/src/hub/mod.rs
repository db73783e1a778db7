//! The MCP hub: one MCP endpoint in front of many upstream MCP servers (issue 4), built on
//! rmcp. Clients connect over streamable HTTP (`/mcp` on `assent serve`, the bearer key
//! naming the agent) or over stdio (`assent mcp --agent ID --config assent.yaml`); upstreams
//! run as child processes from `mcp_upstreams` in the gateway config.
//!
//! - `tools/list`: for each upstream alias the agent declares (`action_space.mcp_servers`), the
//!   upstream's tools (only its `allowed_tools` when it lists them), checked against their
//!   pins exactly as the stdio proxy does, named `ALIAS__TOOL`.
//! - `tools/call ALIAS__TOOL`: the pin check, then the gateway (`POST /v1/tool-calls`, waiting
//!   for a human with progress notifications when the client sent a progress token, the
//!   approval cancelled when the client cancels or its session ends — not when one response
//!   stream drops: the MCP transport spec says a disconnection is not a cancellation, and the
//!   answer can be resumed), then the upstream; the result is reported (and held over
//!   `output_bytes`) as in the stdio proxy.
//! - An upstream that fails to start, or dies, is reported (its tools are missing and its calls
//!   answer an error naming it); the others keep working.
//! - Nothing is parsed before it is weighed (`crate::weigh`): a client message (an `/mcp`
//!   body, a stdio line of at most 16 MiB) or a stdio upstream's line that would parse past
//!   64 MiB is never given to rmcp — a request is answered with a JSON-RPC error naming the
//!   bound (a stdio upstream's on its stdin), an answer replaced by such an error under its
//!   id, a notification dropped; so is an HTTP upstream's SSE event. An `/mcp` body is read
//!   within [`MAX_BODY_BYTES`], rmcp's own body bound set to it; an HTTP upstream's answer
//!   within 16 MiB, a call's answer past it refused with an error naming the bound.
//! - At the gateway's stop (and the stdio hub's end) the upstreams are closed: a stdio one gets
//!   EOF, then `SIGTERM`, then `SIGKILL`.
//!
//! Layout: `state` (the [`Hub`]: upstreams, gateway client), `owners` (who owns each task, at most
//! [`MAX_TASKS_PER_AGENT`](owners::MAX_TASKS_PER_AGENT) an agent), `upstream` (one upstream's
//! connection and its tool list), `child` (a stdio upstream's transport: its stdout weighed
//! line by line, its too-heavy requests answered on its stdin, its end stdin, `SIGTERM`,
//! `SIGKILL`), `http_weigh` (an HTTP upstream's answers bounded before rmcp parses them),
//! `call` (one `tools/call`
//! through pins, gateway, upstream and result report), `stop` (stopping a call its client cancelled
//! or left), `tasks` (calls that became MCP tasks), `held` (the bytes held for calls in flight, per
//! agent and in all), `handler` (the MCP server side, [`HubHandler`]: it gives each declared
//! upstream's instructions as pinned) and `transport` (stdio and streamable HTTP, each client
//! message weighed before rmcp parses it; a client gone without a word has its calls stopped).

mod call;
mod child;
mod handler;
mod held;
mod http_weigh;
mod owners;
mod state;
mod stop;
mod tasks;
mod transport;
mod upstream;

pub use handler::HubHandler;
pub use state::{GatewayAt, Hub, SHUTDOWN_SETTLE};
pub use transport::{
    CountedBody, GONE_AFTER, GONE_AFTER_BOUNDS, HttpSessions, HubHttpService, MAX_BODY_BYTES,
    http_service, serve_stdio,
};
pub use upstream::UpstreamSpec;
