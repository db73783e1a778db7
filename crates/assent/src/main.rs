//! `assent`: the one binary. Thin: each subcommand calls into the libraries.

mod cli;
mod watch;

fn main() {
    std::process::exit(cli::main());
}
