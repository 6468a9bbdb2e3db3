//! What the tests of the offline commands (`admit`, `explain`) share: the
//! binary, the shipped examples, one run of the binary and how to read it.

use std::process::{Command, Output};

const BINARY: &str = env!("CARGO_BIN_EXE_poolkeeper");
const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/examples");

/// The path of a file of `config/examples/`.
pub fn example(name: &str) -> String {
    format!("{EXAMPLES}/{name}")
}

pub fn run(args: &[&str]) -> Output {
    Command::new(BINARY)
        .args(args)
        .output()
        .expect("the poolkeeper binary runs")
}

pub fn admit(objects: &str, review: &str, webhook: &str) -> Output {
    run(&[
        "admit",
        "--objects",
        objects,
        "--review",
        review,
        "--webhook",
        webhook,
    ])
}

/// A run's exit status and output, for a failed assertion's message.
pub fn describe(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The standard output of a run that must succeed.
pub fn stdout_of(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(0), "{}", describe(output));
    String::from_utf8(output.stdout.clone()).expect("utf-8")
}
