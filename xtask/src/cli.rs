//! What every task's command line shares: [`parse`] runs a task's clap
//! parser (help printed: `Ok(None)`; a mistake: an error naming the task),
//! [`HelpFlag`] makes `-h` and `--help` both print the full help, and
//! [`TEMPLATE`] lays it out usage first.
//!
//! Conventions of the tasks' parsers: an option's value is the next word
//! whatever it starts with (`allow_hyphen_values`: `--timeout -1` is a bad
//! number of seconds, not an unknown option `-1`), and a repeated option
//! replaces its earlier value (`args_override_self`).

use clap::error::ErrorKind;

use crate::Result;

/// Help layout of every task: usage, description, options, notes.
pub(crate) const TEMPLATE: &str = "\
{usage-heading} {usage}

{about-with-newline}
{all-args}{after-help}";

/// `-h` / `--help`, both printing the long help (the per-option
/// descriptions); a task's parser flattens this and sets
/// `disable_help_flag = true`.
#[derive(Debug, clap::Args)]
pub(crate) struct HelpFlag {
    /// print this help
    #[arg(short = 'h', long = "help", action = clap::ArgAction::HelpLong)]
    help: Option<bool>,
}

/// Parses `args` (the words after `cargo xtask <task>`) with `T`'s clap
/// parser. `Ok(None)` when they asked for help (printed to stdout);
/// anything clap rejects becomes an error starting with `<task>: `.
pub(crate) fn parse<T: clap::Parser>(task: &str, args: &[String]) -> Result<Option<T>> {
    let argv = std::iter::once(format!("cargo xtask {task}")).chain(args.iter().cloned());
    match T::try_parse_from(argv) {
        Ok(parsed) => Ok(Some(parsed)),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            // `print!`, not `e.print()`: the test harness captures it.
            print!("{}", e.render());
            Ok(None)
        }
        Err(e) => {
            let text = e.render().to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text).trim_end();
            Err(format!("{task}: {text}").into())
        }
    }
}

/// A command line as the tests write it: words, owned.
#[cfg(test)]
pub(crate) fn words(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}
