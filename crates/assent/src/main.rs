//! `assent`: the one binary. Thin: each subcommand calls into the libraries.
//!
//! Layout, top to bottom (each file imports only the ones below it): `dispatch` (parse, run,
//! exit status) → `serve` (the composition root) and `commands/` (one file per group of
//! subcommands) → the kit: `remote` (the gateway's `/v1` API through `assent_api::Client`, and
//! printing list answers), `args` (the clap tree), `render` (cards, time left, canonical JSON)
//! and `setup` (tracing, upstream specs, data dir), with `otel` (logs and OTLP traces), and
//! `history` (the recorded history `replay` and `suggest` read).

mod args;
mod commands;
mod dispatch;
mod history;
mod otel;
mod remote;
mod render;
mod serve;
mod setup;

/// mimalloc instead of glibc's malloc: a call's many small short-lived allocations (JSON,
/// HTTP headers, SQL values) cost less and contend less across threads (BENCHMARKS.md B2/B3).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let code = dispatch::main();
    otel::flush();
    std::process::exit(code);
}
