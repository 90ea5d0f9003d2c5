//! The `--help` texts, rendered from the command table in `catalog.rs`:
//! the program's overview and one page per command and subcommand.
//!
//! It only formats what the table says (and asks the configuration which
//! switches this build refuses), so the help can never offer an option the
//! parser does not take. It never prints: the caller writes the text.

use super::catalog::{COMMAND_TABLE, CommandSpec, HELP, OptionSpec};
use super::{PROGRAM as NAME, VERSION};
use crate::config::unavailable_feature;

/// Lines are wrapped to this width.
const WIDTH: usize = 79;
/// How wide the label column of a table is.
#[derive(Clone, Copy)]
struct Labels {
    /// At least this wide.
    min: usize,
    /// A label wider than this puts its description on the next line.
    max: usize,
}

/// Options, arguments, subcommands.
const LABELS: Labels = Labels { min: 0, max: 28 };
/// Command names: one column width whatever commands a build has, so the
/// list keeps its layout as commands are added.
const COMMAND_LABELS: Labels = Labels { min: 10, max: 28 };
/// Examples, which carry the program name.
const EXAMPLE_LABELS: Labels = Labels { min: 0, max: 36 };

/// The usage line every usage error repeats.
pub const USAGE_LINE: &str =
    "Usage: autogpt-shim [GLOBAL OPTIONS] <COMMAND> [COMMAND OPTIONS] [ARGS]";

/// The help of `spec`: the program's overview for [`COMMAND_TABLE`], else the
/// command's page.
pub fn render(spec: &CommandSpec) -> String {
    if spec.name.is_empty() {
        program()
    } else {
        command(spec)
    }
}

fn program() -> String {
    let mut text = format!(
        "{NAME} {VERSION}: {}\n\n{USAGE_LINE}\n",
        COMMAND_TABLE.summary
    );
    examples(&mut text, &COMMAND_TABLE, "Typical use");
    let rows: Vec<(String, &str)> = COMMAND_TABLE
        .subcommands
        .iter()
        .map(|c| (c.name.to_owned(), c.summary))
        .collect();
    table(&mut text, "Commands", &rows, COMMAND_LABELS);
    options(
        &mut text,
        "Global options (before the command)",
        &COMMAND_TABLE,
    );
    text.push_str(&format!(
        "\nRun '{NAME} <COMMAND> --help' for a command's options and exit codes.\n"
    ));
    notes(&mut text, &COMMAND_TABLE);
    text
}

fn command(spec: &CommandSpec) -> String {
    let mut text = format!(
        "Usage: {NAME} [GLOBAL OPTIONS] {}\n\n{}\n",
        synopsis(spec, true),
        sentence(spec.summary)
    );
    if !spec.subcommands.is_empty() {
        let rows: Vec<(String, &str)> = spec
            .subcommands
            .iter()
            .map(|c| (synopsis(c, false), c.summary))
            .collect();
        table(&mut text, "Subcommands", &rows, LABELS);
    }
    let args: Vec<(String, &str)> = spec
        .args
        .iter()
        .map(|a| (a.name.to_owned(), a.help))
        .collect();
    table(&mut text, "Arguments", &args, LABELS);
    options(&mut text, "Options", spec);
    examples(&mut text, spec, "Examples");
    notes(&mut text, spec);
    if !spec.subcommands.is_empty() {
        text.push_str(&format!(
            "\nRun '{NAME} {} <SUBCOMMAND> --help' for a subcommand's details.\n",
            spec.name
        ));
    }
    text
}

/// The command with its arguments, for the usage line (`full`: with
/// `[OPTIONS]` standing for many options) or a subcommand row.
fn synopsis(spec: &CommandSpec, full: bool) -> String {
    let mut words = vec![if full { spec.name } else { spec.word() }.to_owned()];
    if !spec.subcommands.is_empty() {
        words.push("<SUBCOMMAND>".into());
    }
    let built: Vec<&OptionSpec> = spec.options.iter().filter(|o| is_built(o)).collect();
    let inline: Vec<String> = built
        .iter()
        .map(|o| match o.value {
            Some(value) => format!("[{} {value}]", o.long),
            None => format!("[{}]", o.long),
        })
        .collect();
    if inline.len() > 2 {
        words.push("[OPTIONS]".into());
    } else {
        words.extend(inline);
    }
    words.extend(spec.args.iter().map(|a| a.name.to_owned()));
    words.join(" ")
}

/// The options of `spec` that this build serves, then `--help`, then those
/// it refuses under their own heading.
fn options(text: &mut String, heading: &str, spec: &CommandSpec) {
    let rows: Vec<(String, &str)> = spec
        .options
        .iter()
        .filter(|o| is_built(o))
        .chain(std::iter::once(&HELP))
        .map(|o| (label(o), o.help))
        .collect();
    table(text, heading, &rows, LABELS);
    let refused: Vec<(String, &str)> = spec
        .options
        .iter()
        .filter(|o| !is_built(o))
        .map(|o| (label(o), o.help))
        .collect();
    table(
        text,
        "Not available in this build (refused with exit 78 until they are)",
        &refused,
        LABELS,
    );
}

/// Whether the option's setting is one this build serves.
pub(super) fn is_built(option: &OptionSpec) -> bool {
    option.key.and_then(unavailable_feature).is_none()
}

/// `-V, --version`, `    --config PATH`: long names line up behind the
/// short ones.
fn label(option: &OptionSpec) -> String {
    let short = match option.short {
        Some(short) => format!("-{short}, "),
        None => "    ".into(),
    };
    match option.value {
        Some(value) => format!("{short}{} {value}", option.long),
        None => format!("{short}{}", option.long),
    }
}

fn examples(text: &mut String, spec: &CommandSpec, heading: &str) {
    let rows: Vec<(String, &str)> = spec
        .examples
        .iter()
        .map(|e| (format!("{NAME} {}", e.args), e.help))
        .collect();
    table(text, heading, &rows, EXAMPLE_LABELS);
}

fn notes(text: &mut String, spec: &CommandSpec) {
    for note in spec.notes {
        text.push('\n');
        for line in wrap(note, WIDTH) {
            text.push_str(&line);
            text.push('\n');
        }
    }
}

/// A heading and two columns; nothing when there are no rows.
fn table(text: &mut String, heading: &str, rows: &[(String, &str)], labels: Labels) {
    if rows.is_empty() {
        return;
    }
    text.push_str(&format!("\n{heading}:\n"));
    let column = rows
        .iter()
        .map(|(label, _)| label.chars().count())
        .filter(|&n| n <= labels.max)
        .max()
        .unwrap_or(0)
        .max(labels.min);
    let indent = 2 + column + 2;
    for (label, help) in rows {
        let width = label.chars().count();
        let mut lines = wrap(help, WIDTH.saturating_sub(indent).max(20)).into_iter();
        let first = if width <= column {
            lines.next().unwrap_or_default()
        } else {
            String::new()
        };
        let padding = column.saturating_sub(width);
        let line = format!("  {label}{:padding$}  {first}", "");
        text.push_str(line.trim_end());
        text.push('\n');
        for line in lines {
            text.push_str(&format!("{:indent$}{line}\n", ""));
        }
    }
}

/// `text` with a capital first letter and a final full stop.
pub(super) fn sentence(text: &str) -> String {
    let mut chars = text.chars();
    let mut out: String = chars
        .next()
        .map(|c| c.to_uppercase().collect())
        .unwrap_or_default();
    out.push_str(chars.as_str());
    if !out.ends_with('.') {
        out.push('.');
    }
    out
}

/// Greedy word wrap; a word longer than `width` gets a line of its own.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(spec: &'static CommandSpec, out: &mut Vec<&'static CommandSpec>) {
        out.push(spec);
        for sub in spec.subcommands {
            all(sub, out);
        }
    }

    #[test]
    fn no_help_line_is_wider_than_the_terminal_it_is_written_for() {
        let mut specs = Vec::new();
        all(&COMMAND_TABLE, &mut specs);
        for spec in specs {
            for line in render(spec).lines() {
                assert!(
                    line.chars().count() <= WIDTH,
                    "{:?} in the help of {:?}",
                    line,
                    spec.name
                );
            }
        }
    }

    #[test]
    fn words_wrap_at_the_width_and_keep_their_order() {
        assert_eq!(
            wrap("one two three four", 9),
            vec!["one two", "three", "four"]
        );
        assert_eq!(
            wrap("averyverylongword x", 5),
            vec!["averyverylongword", "x"]
        );
        assert!(wrap("   ", 10).is_empty());
    }

    #[test]
    fn a_summary_becomes_a_sentence() {
        assert_eq!(sentence("run it"), "Run it.");
        assert_eq!(sentence("Done."), "Done.");
    }
}
