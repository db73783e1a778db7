//! `assent`: the one binary. Thin: each subcommand calls into the libraries.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
