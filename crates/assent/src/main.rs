//! `assent`: the one binary. Thin: each subcommand calls into the libraries.
//!
//! Layout, top to bottom (each file imports only the ones below it): `dispatch` (parse, run,
//! exit status) → `serve` (the composition root) and `commands/` (one file per group of
//! subcommands) → the kit: `args` (the clap tree), `client` (the gateway's HTTP API),
//! `render` (cards, time left, targets) and `setup` (tracing, upstream specs, data dir).

mod args;
mod client;
mod commands;
mod dispatch;
mod render;
mod serve;
mod setup;

fn main() {
    std::process::exit(dispatch::main());
}
