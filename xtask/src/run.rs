//! Running child commands and reporting time.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::{Error, Result};

/// `cargo` as invoked by this cargo (so toolchain overrides carry over), in `root`.
pub fn cargo(root: &Path) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(root);
    command
}

/// The command line as a user would type it (cargo by its name, not the toolchain's path).
pub fn display(command: &Command) -> String {
    let program = command.get_program();
    let program = match Path::new(program).file_name() {
        Some(name) if name == "cargo" => name,
        _ => program,
    };
    std::iter::once(program)
        .chain(command.get_args())
        .map(|part| {
            let part = part.to_string_lossy();
            if part.is_empty() || part.contains([' ', '\'', '"', '*', '$']) {
                format!("'{}'", part.replace('\'', r"'\''"))
            } else {
                part.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a command with inherited output; a non-zero exit is an error naming the command.
pub fn status(command: &mut Command) -> Result<()> {
    let shown = display(command);
    let status = command
        .status()
        .map_err(|e| Error::io(format!("starting `{shown}`"), e))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::CommandFailed {
            command: shown,
            status: status.to_string(),
        })
    }
}

/// Whether an executable of this name is in a directory of PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// `1m05s`, `42.3s`.
pub fn elapsed(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds < 60.0 {
        format!("{seconds:.1}s")
    } else {
        let whole = duration.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_displayed_as_typed() {
        let mut command = Command::new("/home/dev/.cargo/bin/cargo");
        command.args(["test", "--test", "*", "it's"]);
        assert_eq!(display(&command), r"cargo test --test '*' 'it'\''s'");
    }

    #[test]
    fn durations_are_short() {
        let cases = [
            (Duration::from_millis(4_240), "4.2s"),
            (Duration::from_secs(65), "1m05s"),
            (Duration::from_secs(600), "10m00s"),
        ];
        for (duration, expected) in cases {
            assert_eq!(elapsed(duration), expected);
        }
    }
}
