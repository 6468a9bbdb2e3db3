use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = poolkeeper::cli::Cli::parse();
    poolkeeper::cli::execute(cli)
}
