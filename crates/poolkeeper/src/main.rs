use std::process::ExitCode;

use clap::Parser;

// The controller allocates on every watch event and admission: glibc's
// malloc/free was 41 % of the watch path's steady state, and mimalloc runs
// an admission's allocations in a third of the instructions (docs/benchmarks-log.md).
// Built without transparent huge pages (`no_thp`), its resident memory
// stays that of glibc's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = poolkeeper::cli::Cli::parse();
    poolkeeper::cli::execute(cli)
}
