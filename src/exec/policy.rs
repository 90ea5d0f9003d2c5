//! The local command rules (`[[command_rule]]` in `config.toml`): which
//! rule decides a command, and whether it is allowed, refused or asked
//! about.
//!
//! A rule matches the program (its word as written: a name looked up on
//! `PATH`, or a path), the arguments (in order, any of them, none of
//! them) and the working directory, with glob patterns; the first rule
//! that matches decides, and `command_default_action` decides when none
//! does. A shell string is split into words the way a POSIX shell would
//! split it; a string whose meaning is more than its words (pipes, lists,
//! redirections, expansions, substitutions, keywords, assignments), or a
//! request whose environment changes what runs or how the line is read,
//! is decided by `command_shell_syntax_action` instead, because matching
//! its words would not match what the shell runs.
//!
//! This module only decides; it never runs, waits or audits anything.
//! Matching is bounded: a decision that would take more than
//! [`MATCH_BUDGET`] steps refuses the command rather than let a crafted
//! request spin the shim (or slip past a rule it could not finish).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::protocol::Shell;

/// The name `details.rule` and the audit record carry when no rule
/// matched.
pub const DEFAULT_RULE: &str = "default";
/// The name they carry for a request decided by its shell syntax.
pub const SHELL_SYNTAX_RULE: &str = "shell_syntax";
/// The name they carry for a request too costly to match.
pub const MATCH_LIMIT_RULE: &str = "match_limit";

/// Glob steps one decision may take.
pub const MATCH_BUDGET: u64 = 20_000_000;

/// The most rules a configuration may hold, and the longest pattern.
const MAX_RULES: usize = 1000;
const MAX_PATTERN_CHARS: usize = 1024;
const MAX_NAME_CHARS: usize = 64;

/// The only variables a request may set without its command being decided
/// as shell syntax: any other can change which program runs or what it
/// loads (`PATH`, `BASH_ENV`, `HOME` with a shell's or git's startup files,
/// `LD_*`, `GCONV_PATH`, `GIT_SSH_COMMAND`, `PAGER`, …), and no list of
/// those could be complete. `LC_*` are allowed too.
const PLAIN_VARS: [&str; 8] = [
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "NO_COLOR",
    "COLUMNS",
    "LINES",
    "PYTHONIOENCODING",
];

/// What a rule, the default or the shell-syntax setting says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Run it.
    Allow,
    /// Refuse it; it never spawns.
    Deny,
    /// Ask the user at this machine, and run it only if they approve.
    Ask,
}

impl Action {
    /// Every action, in the order messages list them.
    pub const ALL: [Action; 3] = [Action::Allow, Action::Deny, Action::Ask];

    /// The config spelling.
    pub fn parse(value: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == value)
    }

    /// The spelling `parse` accepts, also used in audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::Ask => "ask",
        }
    }
}

/// A command as the platform sent it.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// `argv` mode: the words are given.
    Argv(&'a [String]),
    /// `command` mode: a string for `shell`.
    Shell {
        /// The requested shell.
        shell: Shell,
        /// The command line.
        command: &'a str,
    },
}

/// What the user at this machine is asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The session the command belongs to.
    pub session_id: String,
    /// The command as sent: the shell string, or the argv quoted for a
    /// POSIX shell.
    pub command: String,
    /// The resolved working directory.
    pub cwd: String,
    /// The rule that said `ask`.
    pub rule: String,
}

/// The user's answer, or the lack of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Approved: the command runs.
    Approved,
    /// Denied: it never spawns.
    Denied,
    /// Nobody answered in time: it never spawns.
    TimedOut,
    /// The connection or the shim went away while waiting.
    Cancelled,
}

impl Answer {
    /// The spelling in audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Approved => "approved",
            Answer::Denied => "denied",
            Answer::TimedOut => "timeout",
            Answer::Cancelled => "cancelled",
        }
    }
}

/// Whoever can ask the user (the daemon's approval socket).
pub trait Approver: Send + Sync {
    /// Asks `question` and waits at most `wait` for the answer, or until
    /// `cancel` trips.
    fn ask(&self, question: &Question, wait: std::time::Duration, cancel: &super::Cancel)
    -> Answer;
}

/// `argv` as one line a POSIX shell would split back into it, for people
/// to read.
pub fn quote_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|word| {
            let plain = !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Which rule decided, and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The decision.
    pub action: Action,
    /// For a shell string that is only words, those words: with rules in
    /// force they are run as they are, without a shell, so that what the
    /// rules matched is exactly what runs (a shell would still give
    /// builtins such as `printf -v` or zsh's `repeat` their own meaning).
    pub words: Option<Vec<String>>,
    /// The deciding rule's name, or [`DEFAULT_RULE`], [`SHELL_SYNTAX_RULE`]
    /// or [`MATCH_LIMIT_RULE`].
    pub rule: String,
}

/// The rules in force; empty when none are configured, which allows
/// everything without looking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
    default: Action,
    shell_syntax: Action,
}

/// No rules: every command is allowed and nothing is recorded.
pub static NO_RULES: Policy = Policy {
    rules: Vec::new(),
    default: Action::Allow,
    shell_syntax: Action::Allow,
};

impl Default for Policy {
    fn default() -> Self {
        NO_RULES.clone()
    }
}

/// One `[[command_rule]]` table, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleTable {
    name: String,
    action: String,
    program: Option<String>,
    args: Option<Vec<String>>,
    any_arg: Option<Vec<String>>,
    no_arg: Option<Vec<String>>,
    cwd: Option<String>,
}

/// One rule, its patterns compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    name: String,
    action: Action,
    program: Option<Glob>,
    /// The arguments in order; a final `**` takes any number of the rest.
    args: Option<(Vec<Glob>, bool)>,
    any_arg: Vec<Glob>,
    no_arg: Vec<Glob>,
    cwd: Option<Glob>,
}

impl Policy {
    /// Builds the policy from the settings: `rules` is the value of
    /// `command_rule` (an array of tables, or absent), `default` and
    /// `shell_syntax` the two actions when set. `Err` is one line naming
    /// the rule and the field at fault.
    pub fn from_settings(
        rules: Option<&Value>,
        default: Option<&str>,
        shell_syntax: Option<&str>,
    ) -> Result<Policy, String> {
        let tables: Vec<Value> = match rules {
            None => Vec::new(),
            Some(Value::Array(tables)) => tables.clone(),
            Some(_) => return Err("must be an array of tables ([[command_rule]])".into()),
        };
        if tables.len() > MAX_RULES {
            return Err(format!("at most {MAX_RULES} rules are allowed"));
        }
        let mut compiled: Vec<Rule> = Vec::with_capacity(tables.len());
        for (index, table) in tables.into_iter().enumerate() {
            let at = || format!("rule {}", index + 1);
            let table: RuleTable =
                serde_json::from_value(table).map_err(|e| format!("{}: {e}", at()))?;
            let rule = Rule::compile(table).map_err(|e| format!("{}: {e}", at()))?;
            if compiled.iter().any(|r| r.name == rule.name) {
                return Err(format!(
                    "{}: the name \"{}\" is used twice",
                    at(),
                    rule.name
                ));
            }
            compiled.push(rule);
        }
        let action = |value: Option<&str>, fallback: Action, key: &str| match value {
            None => Ok(fallback),
            Some(v) => Action::parse(v)
                .ok_or_else(|| format!("{key} must be \"allow\", \"deny\" or \"ask\"")),
        };
        let default = action(default, Action::Allow, "command_default_action")?;
        // With no rule at all nothing is looked at, so the syntax setting
        // only matters once there is one; then an unreadable line is asked
        // about unless the user says otherwise.
        let shell_syntax = action(shell_syntax, Action::Ask, "command_shell_syntax_action")?;
        Ok(Policy {
            rules: compiled,
            default,
            shell_syntax,
        })
    }

    /// Whether any rule or non-default action is configured; without one,
    /// every command is allowed and nothing is recorded.
    pub fn is_active(&self) -> bool {
        !self.rules.is_empty() || self.default != Action::Allow
    }

    /// One line for `status`: how many rules, and the two defaults.
    pub fn describe(&self) -> String {
        if !self.is_active() {
            return "none (every command is allowed)".to_owned();
        }
        format!(
            "{} rule(s); no match: {}; shell syntax: {}",
            self.rules.len(),
            self.default.as_str(),
            self.shell_syntax.as_str()
        )
    }

    /// Whether some decision can be `ask` (so the approval socket is
    /// needed).
    pub fn can_ask(&self) -> bool {
        self.is_active()
            && (self.default == Action::Ask
                || self.shell_syntax == Action::Ask
                || self.rules.iter().any(|r| r.action == Action::Ask))
    }

    /// Decides `request`, run in the resolved directory `cwd` with the
    /// request's `env`.
    pub fn decide(
        &self,
        request: Request<'_>,
        env: &BTreeMap<String, String>,
        cwd: &str,
    ) -> Verdict {
        if !self.is_active() {
            return Verdict {
                action: Action::Allow,
                rule: DEFAULT_RULE.to_owned(),
                words: None,
            };
        }
        let syntax = || Verdict {
            action: self.shell_syntax,
            rule: SHELL_SYNTAX_RULE.to_owned(),
            words: None,
        };
        if env.keys().any(|name| steers(name)) {
            return syntax();
        }
        let (words, split) = match request {
            Request::Argv(argv) => (argv.to_vec(), false),
            Request::Shell { shell, command } => match shell {
                Shell::Auto | Shell::Bash | Shell::Sh | Shell::Zsh => match split_words(command) {
                    Some(words) if !words.is_empty() => (words, true),
                    _ => return syntax(),
                },
                // Other shells' syntax is not read here at all.
                Shell::Pwsh | Shell::Powershell | Shell::Cmd => return syntax(),
            },
        };
        let Some((program, args)) = words.split_first() else {
            return syntax();
        };
        // A path with `.`, `..` or empty components names its file in more
        // than one way; patterns could not tell which file it is.
        if program.contains('/') && !is_plain_path(program) {
            return syntax();
        }
        let mut budget = Budget(MATCH_BUDGET);
        let mut decided = None;
        for rule in &self.rules {
            match rule.matches(program, args, cwd, &mut budget) {
                Some(true) => {
                    decided = Some((rule.action, rule.name.clone()));
                    break;
                }
                Some(false) => {}
                None => {
                    return Verdict {
                        action: Action::Deny,
                        rule: MATCH_LIMIT_RULE.to_owned(),
                        words: None,
                    };
                }
            }
        }
        let (action, rule) = decided.unwrap_or((self.default, DEFAULT_RULE.to_owned()));
        Verdict {
            action,
            rule,
            words: split.then_some(words),
        }
    }
}

/// Whether `path` has no `.`, `..` or empty component (a leading `/` or
/// `./` aside).
fn is_plain_path(path: &str) -> bool {
    let relative = path.strip_prefix("./").unwrap_or(path);
    relative
        .strip_prefix('/')
        .unwrap_or(relative)
        .split('/')
        .all(|part| !part.is_empty() && part != "." && part != "..")
}

/// Whether a request setting `name` may change which program runs or what
/// it loads (anything but [`PLAIN_VARS`] and `LC_*`).
fn steers(name: &str) -> bool {
    !(PLAIN_VARS.contains(&name) || name.starts_with("LC_"))
}

impl Rule {
    fn compile(table: RuleTable) -> Result<Rule, String> {
        let name = table.name;
        if name.is_empty()
            || name.chars().count() > MAX_NAME_CHARS
            || name.chars().any(char::is_control)
        {
            return Err(format!(
                "name must be 1 to {MAX_NAME_CHARS} printable characters"
            ));
        }
        if [DEFAULT_RULE, SHELL_SYNTAX_RULE, MATCH_LIMIT_RULE].contains(&name.as_str()) {
            return Err(format!("the name \"{name}\" is reserved"));
        }
        let action =
            Action::parse(&table.action).ok_or("action must be \"allow\", \"deny\" or \"ask\"")?;
        let compile = |field: &str, pattern: &str, slashes: bool| {
            Glob::compile(pattern, slashes).map_err(|e| format!("{field} \"{pattern}\": {e}"))
        };
        let many = |field: &str, patterns: Option<Vec<String>>| -> Result<Vec<Glob>, String> {
            patterns
                .unwrap_or_default()
                .iter()
                .map(|p| compile(field, p, false))
                .collect()
        };
        let program = match table.program {
            Some(p) if p.is_empty() => return Err("program must not be empty".into()),
            Some(p) => Some(compile("program", &p, true)?),
            None => None,
        };
        let args = match table.args {
            None => None,
            Some(mut patterns) => {
                let rest = patterns.last().is_some_and(|p| p == "**");
                if rest {
                    patterns.pop();
                }
                Some((many("args", Some(patterns))?, rest))
            }
        };
        let cwd = match table.cwd {
            Some(c) if !c.starts_with('/') => return Err("cwd must be an absolute pattern".into()),
            Some(c) => Some(compile("cwd", &c, true)?),
            None => None,
        };
        Ok(Rule {
            name,
            action,
            program,
            args,
            any_arg: many("any_arg", table.any_arg)?,
            no_arg: many("no_arg", table.no_arg)?,
            cwd,
        })
    }

    /// `None`: the budget ran out.
    fn matches(
        &self,
        program: &str,
        args: &[String],
        cwd: &str,
        budget: &mut Budget,
    ) -> Option<bool> {
        if let Some(pattern) = &self.program {
            let fits = match (pattern.has_slash, program.rsplit_once('/')) {
                (true, Some(_)) => pattern.matches(program, budget)?,
                (false, None) => pattern.matches(program, budget)?,
                // A name pattern never allows a path: an allow rule for
                // `git` says nothing about `./git`. But a rule that refuses
                // or asks about `git` also holds for `/usr/bin/git` and
                // `./git`, so a path does not dodge it.
                (false, Some((_, name))) => {
                    self.action != Action::Allow && pattern.matches(name, budget)?
                }
                (true, None) => false,
            };
            if !fits {
                return Some(false);
            }
        }
        if let Some((patterns, rest)) = &self.args {
            let fits = if *rest {
                args.len() >= patterns.len()
            } else {
                args.len() == patterns.len()
            };
            if !fits {
                return Some(false);
            }
            for (pattern, arg) in patterns.iter().zip(args) {
                if !pattern.matches(arg, budget)? {
                    return Some(false);
                }
            }
        }
        if !self.any_arg.is_empty() && !any_matches(&self.any_arg, args, budget)? {
            return Some(false);
        }
        if !self.no_arg.is_empty() && any_matches(&self.no_arg, args, budget)? {
            return Some(false);
        }
        if let Some(pattern) = &self.cwd {
            if !pattern.matches(cwd, budget)? {
                return Some(false);
            }
        }
        Some(true)
    }
}

fn any_matches(patterns: &[Glob], args: &[String], budget: &mut Budget) -> Option<bool> {
    for arg in args {
        for pattern in patterns {
            if pattern.matches(arg, budget)? {
                return Some(true);
            }
        }
    }
    Some(false)
}

/// Steps left for one decision.
struct Budget(u64);

impl Budget {
    fn spend(&mut self, steps: u64) -> Option<()> {
        self.0 = self.0.checked_sub(steps)?;
        Some(())
    }
}

/// A compiled glob: `*` any run of characters (not `/` in a path
/// pattern), `**` any run including `/` (path patterns), `?` one
/// character, `[...]` a class (`[!...]` negated, `a-z` ranges), `\` takes
/// the next character literally.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Glob {
    tokens: Vec<Token>,
    /// Whether `/` is special (program paths and `cwd`).
    slashes: bool,
    /// Whether the pattern names a path (has a literal `/`).
    has_slash: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Char(char),
    One,
    Star,
    DoubleStar,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Glob {
    fn compile(pattern: &str, slashes: bool) -> Result<Glob, String> {
        if pattern.chars().count() > MAX_PATTERN_CHARS {
            return Err(format!("longer than {MAX_PATTERN_CHARS} characters"));
        }
        let mut tokens = Vec::new();
        let mut chars = pattern.chars().peekable();
        let mut has_slash = false;
        while let Some(c) = chars.next() {
            let token = match c {
                '\\' => match chars.next().ok_or("ends with a lone backslash")? {
                    '/' => return Err("escapes a /, which is always literal".into()),
                    c => Token::Char(c),
                },
                '?' => Token::One,
                '*' if slashes && chars.peek() == Some(&'*') => {
                    chars.next();
                    Token::DoubleStar
                }
                '*' => Token::Star,
                '[' => {
                    let negated = chars.peek() == Some(&'!');
                    if negated {
                        chars.next();
                    }
                    let mut ranges = Vec::new();
                    let mut first = true;
                    loop {
                        let c = chars.next().ok_or("has an unclosed [")?;
                        if c == ']' && !first {
                            break;
                        }
                        first = false;
                        let low = if c == '\\' {
                            chars.next().ok_or("has an unclosed [")?
                        } else {
                            c
                        };
                        let mut lookahead = chars.clone();
                        if lookahead.next() == Some('-')
                            && lookahead.peek().is_some_and(|n| *n != ']')
                        {
                            chars.next();
                            let high = chars.next().ok_or("has an unclosed [")?;
                            if high < low {
                                return Err(format!("has the backwards range {low}-{high}"));
                            }
                            ranges.push((low, high));
                        } else {
                            ranges.push((low, low));
                        }
                    }
                    Token::Class { negated, ranges }
                }
                c => {
                    if c == '/' {
                        has_slash = true;
                    }
                    Token::Char(c)
                }
            };
            // Consecutive stars of one kind are one star.
            if token == Token::Star && tokens.last() == Some(&Token::Star) {
                continue;
            }
            tokens.push(token);
        }
        Ok(Glob {
            tokens,
            slashes,
            has_slash,
        })
    }

    /// `None`: the budget ran out.
    fn matches(&self, text: &str, budget: &mut Budget) -> Option<bool> {
        let text: Vec<char> = text.chars().collect();
        budget.spend(text.len() as u64 + 1)?;
        self.match_from(0, &text, 0, budget)
    }

    /// Backtracking over the stars, each step paid from `budget`.
    fn match_from(
        &self,
        mut t: usize,
        text: &[char],
        mut i: usize,
        budget: &mut Budget,
    ) -> Option<bool> {
        while t < self.tokens.len() {
            budget.spend(1)?;
            // A final `/**` also matches the directory itself (`/w/**`
            // matches `/w`).
            if i == text.len() && matches!(&self.tokens[t..], [Token::Char('/'), Token::DoubleStar])
            {
                return Some(true);
            }
            match &self.tokens[t] {
                Token::Star | Token::DoubleStar => {
                    let crosses = self.tokens[t] == Token::DoubleStar || !self.slashes;
                    // Try every length, shortest first, stopping at a `/`
                    // a single star may not cross.
                    let mut end = i;
                    loop {
                        if self.match_from(t + 1, text, end, budget)? {
                            return Some(true);
                        }
                        if end == text.len() || (!crosses && text[end] == '/') {
                            return Some(false);
                        }
                        end += 1;
                    }
                }
                token => {
                    let Some(&c) = text.get(i) else {
                        return Some(false);
                    };
                    let fits = match token {
                        Token::Char(expected) => c == *expected,
                        Token::One => !(self.slashes && c == '/'),
                        Token::Class { negated, ranges } => {
                            let inside =
                                ranges.iter().any(|(low, high)| (*low..=*high).contains(&c));
                            inside != *negated && !(self.slashes && c == '/')
                        }
                        Token::Star | Token::DoubleStar => false,
                    };
                    if !fits {
                        return Some(false);
                    }
                    t += 1;
                    i += 1;
                }
            }
        }
        Some(i == text.len())
    }
}

/// Reserved words and builtins that make a line more than a program and
/// its arguments (they run other lines, change the shell, or are syntax).
const SHELL_WORDS: [&str; 30] = [
    "!", "{", "}", "[[", "]]", "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for",
    "function", "if", "in", "select", "then", "time", "until", "while", ".", "builtin", "command",
    "eval", "exec", "source", "alias", "trap",
];

/// The words a POSIX shell would pass to the program for `line`, or
/// `None` when the line is more than one simple command of literal words:
/// an unquoted operator (`|`, `&`, `;`, `<`, `>`, `(`, `)`), newline,
/// `$` or backquote (in or out of double quotes), glob character, `~` or
/// `=` or `#` at the start of a word, brace (other than a word that is
/// exactly `{}`), an assignment before the program, or a reserved word or
/// line-running builtin as the program.
pub fn split_words(line: &str) -> Option<Vec<String>> {
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    // Whether the current word has started (an empty quoted word counts).
    let mut started = false;
    // Whether any part of the current word was quoted, and whether it
    // holds an unquoted `{` or `}`.
    let mut braces = false;
    let mut chars = line.chars();
    let finish = |words: &mut Vec<String>, word: &mut String, braces: bool| -> Option<()> {
        if braces && word != "{}" {
            return None;
        }
        words.push(std::mem::take(word));
        Some(())
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if started {
                    finish(&mut words, &mut word, braces)?;
                    started = false;
                    braces = false;
                }
            }
            '\'' => {
                started = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                started = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '$' | '`' => return None,
                        '\\' => match chars.next()? {
                            c @ ('$' | '`' | '"' | '\\') => word.push(c),
                            // A quoted newline after a backslash joins lines.
                            '\n' => return None,
                            other => {
                                word.push('\\');
                                word.push(other);
                            }
                        },
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                started = true;
                match chars.next()? {
                    '\n' => return None,
                    c => word.push(c),
                }
            }
            '|' | '&' | ';' | '<' | '>' | '(' | ')' | '\n' | '\r' | '$' | '`' | '*' | '?' | '['
            | ']' => return None,
            // `~` expands at the start of a word and after `=` or `:`.
            '~' => return None,
            '#' | '=' if !started => return None,
            '{' | '}' => {
                started = true;
                braces = true;
                word.push(c);
            }
            c => {
                started = true;
                word.push(c);
            }
        }
    }
    if started {
        finish(&mut words, &mut word, braces)?;
    }
    let program = words.first()?;
    if SHELL_WORDS.contains(&program.as_str()) {
        return None;
    }
    if is_assignment(program) {
        return None;
    }
    Some(words)
}

/// `NAME=...`: an assignment before the program, not a program.
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    fn policy(rules: Value, default: Option<&str>, syntax: Option<&str>) -> Policy {
        Policy::from_settings(Some(&rules), default, syntax).unwrap()
    }

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    fn decide_argv(policy: &Policy, words: &[&str]) -> (Action, String) {
        let words = argv(words);
        let v = policy.decide(Request::Argv(&words), &BTreeMap::new(), "/work/ws");
        (v.action, v.rule)
    }

    fn decide_line(policy: &Policy, line: &str) -> (Action, String) {
        let v = policy.decide(
            Request::Shell {
                shell: Shell::Auto,
                command: line,
            },
            &BTreeMap::new(),
            "/work/ws",
        );
        (v.action, v.rule)
    }

    #[test]
    fn no_rules_allows_everything_without_looking() {
        let p = Policy::from_settings(None, None, None).unwrap();
        assert!(!p.is_active());
        assert_eq!(decide_line(&p, "rm -rf / | tee x").0, Action::Allow);
    }

    #[test]
    fn the_first_matching_rule_wins_and_the_default_applies_after_the_last() {
        let p = policy(
            json!([
                {"name": "no force push", "program": "git", "args": ["push", "**"], "any_arg": ["--force", "-f"], "action": "deny"},
                {"name": "git", "program": "git", "action": "allow"},
            ]),
            Some("deny"),
            None,
        );
        assert_eq!(
            decide_argv(&p, &["git", "push", "origin", "--force"]),
            (Action::Deny, "no force push".into())
        );
        assert_eq!(
            decide_argv(&p, &["git", "push", "origin"]),
            (Action::Allow, "git".into())
        );
        assert_eq!(
            decide_argv(&p, &["ls"]),
            (Action::Deny, DEFAULT_RULE.into())
        );
    }

    #[test]
    fn exact_and_glob_arguments_match_in_order_and_count() {
        let p = policy(
            json!([{"name": "status", "program": "git", "args": ["status"], "action": "allow"},
                   {"name": "log", "program": "git", "args": ["log", "-n", "[0-9]*"], "action": "allow"}]),
            Some("deny"),
            None,
        );
        assert_eq!(decide_argv(&p, &["git", "status"]).1, "status");
        assert_eq!(decide_argv(&p, &["git", "status", "-s"]).1, DEFAULT_RULE);
        assert_eq!(decide_argv(&p, &["git", "log", "-n", "20"]).1, "log");
        assert_eq!(decide_argv(&p, &["git", "log", "-n", "x"]).1, DEFAULT_RULE);
    }

    #[test]
    fn any_and_no_argument_patterns() {
        let p = policy(
            json!([{"name": "safe rm", "program": "rm", "no_arg": ["-*r*", "--recursive", "/"], "action": "allow"},
                   {"name": "secrets", "any_arg": ["*.pem", "*id_rsa*"], "action": "deny"}]),
            Some("ask"),
            None,
        );
        assert_eq!(decide_argv(&p, &["rm", "a.txt"]).1, "safe rm");
        assert_eq!(decide_argv(&p, &["rm", "-fr", "dir"]).1, DEFAULT_RULE);
        assert_eq!(decide_argv(&p, &["rm", "/"]).1, DEFAULT_RULE);
        assert_eq!(decide_argv(&p, &["cat", "keys/server.pem"]).1, "secrets");
        assert_eq!(decide_argv(&p, &["cat", "notes"]).0, Action::Ask);
    }

    #[test]
    fn a_name_pattern_never_matches_a_path_and_a_path_pattern_only_paths() {
        let p = policy(
            json!([{"name": "git", "program": "git", "action": "allow"},
                   {"name": "usr bin", "program": "/usr/bin/*", "action": "allow"}]),
            Some("deny"),
            None,
        );
        assert_eq!(decide_argv(&p, &["./git"]).1, DEFAULT_RULE);
        assert_eq!(decide_argv(&p, &["/tmp/git"]).1, DEFAULT_RULE);
        assert_eq!(decide_argv(&p, &["/usr/bin/ls"]).1, "usr bin");
        // A single star does not cross a directory.
        assert_eq!(decide_argv(&p, &["/usr/bin/x/y"]).1, DEFAULT_RULE);
        // A path that names its file in more than one way is shell syntax.
        for path in [
            "/usr/bin/../../tmp/evil",
            "/usr//bin/ls",
            "/usr/./bin/ls",
            "././x",
        ] {
            assert_eq!(decide_argv(&p, &[path]).1, SHELL_SYNTAX_RULE, "{path}");
        }
    }

    #[test]
    fn a_rule_that_refuses_a_name_also_holds_for_its_paths() {
        let p = policy(
            json!([{"name": "no rm", "program": "rm", "action": "deny"},
                   {"name": "ask git", "program": "git", "action": "ask"}]),
            None,
            None,
        );
        assert_eq!(decide_argv(&p, &["/bin/rm", "x"]).1, "no rm");
        assert_eq!(decide_argv(&p, &["tools/rm", "x"]).1, "no rm");
        assert_eq!(decide_argv(&p, &["/usr/bin/git"]).0, Action::Ask);
        assert_eq!(decide_argv(&p, &["/usr/bin/rmdir"]).1, DEFAULT_RULE);
    }

    #[test]
    fn the_working_directory_pattern_is_a_path_glob() {
        let p = policy(
            json!([{"name": "in ws", "cwd": "/work/**", "action": "allow"}]),
            Some("deny"),
            None,
        );
        assert_eq!(decide_argv(&p, &["ls"]).1, "in ws");
        let words = argv(&["ls"]);
        let v = p.decide(Request::Argv(&words), &BTreeMap::new(), "/home/u");
        assert_eq!(v.rule, DEFAULT_RULE);
    }

    #[test]
    fn shell_strings_split_into_words_are_matched_like_argv() {
        let p = policy(
            json!([{"name": "echo", "program": "echo", "args": ["a b", "c"], "action": "deny"}]),
            None,
            None,
        );
        assert_eq!(decide_line(&p, "echo 'a b' c").1, "echo");
        assert_eq!(decide_line(&p, "echo \"a b\" \\c").1, "echo");
        assert_eq!(decide_line(&p, "  echo   a\\ b c  ").1, "echo");
    }

    #[test]
    fn shell_syntax_is_decided_by_its_own_action() {
        let p = policy(
            json!([{"name": "ls", "program": "ls", "action": "allow"}]),
            None,
            None,
        );
        for line in [
            "ls | sh",
            "ls; rm -rf x",
            "ls && rm x",
            "ls > f",
            "ls $(rm x)",
            "ls `rm x`",
            "ls \"$HOME\"",
            "ls *",
            "ls ~",
            "dd if=~/x",
            "ls a:~/b",
            "ls {a,b}",
            "X=1 ls",
            "ls\nrm x",
            "ls &",
            "eval ls",
            "command rm x",
            "if ls; then :; fi",
            "ls #comment",
            "'unclosed",
            "",
        ] {
            assert_eq!(
                decide_line(&p, line),
                (Action::Ask, SHELL_SYNTAX_RULE.to_owned()),
                "{line:?}"
            );
        }
        // `{}` alone is a literal word (as in find -exec).
        assert_eq!(split_words("find . -exec echo {} +").unwrap().len(), 6);
        assert_eq!(split_words("ls a=b").unwrap(), ["ls", "a=b"]);
    }

    #[test]
    fn an_environment_that_steers_the_shell_is_shell_syntax() {
        let p = policy(
            json!([{"name": "ls", "program": "ls", "action": "allow"}]),
            None,
            Some("deny"),
        );
        for name in [
            "PATH",
            "BASH_ENV",
            "LD_PRELOAD",
            "BASH_FUNC_ls%%",
            "IFS",
            "HOME",
            "GCONV_PATH",
            "GIT_SSH_COMMAND",
            "PAGER",
            "ZDOTDIR",
        ] {
            let env = BTreeMap::from([(name.to_owned(), "x".to_owned())]);
            let words = argv(&["ls"]);
            let v = p.decide(Request::Argv(&words), &env, "/work/ws");
            assert_eq!(
                (v.action, v.rule.as_str()),
                (Action::Deny, SHELL_SYNTAX_RULE),
                "{name}"
            );
        }
        let env = BTreeMap::from([
            ("LANG".to_owned(), "C".to_owned()),
            ("LC_ALL".to_owned(), "C".to_owned()),
            ("TZ".to_owned(), "UTC".to_owned()),
        ]);
        let words = argv(&["ls"]);
        assert_eq!(p.decide(Request::Argv(&words), &env, "/w").rule, "ls");
    }

    #[test]
    fn a_shell_string_of_words_comes_back_as_the_words_to_run_without_a_shell() {
        let p = policy(
            json!([{"name": "printf", "program": "printf", "action": "allow"}]),
            None,
            None,
        );
        let v = p.decide(
            Request::Shell {
                shell: Shell::Bash,
                command: "printf -v 'a[x]' y",
            },
            &BTreeMap::new(),
            "/w",
        );
        assert_eq!(v.rule, "printf");
        assert_eq!(v.words, Some(argv(&["printf", "-v", "a[x]", "y"])));
        let words = argv(&["printf", "x"]);
        assert_eq!(
            p.decide(Request::Argv(&words), &BTreeMap::new(), "/w")
                .words,
            None
        );
    }

    #[test]
    fn other_shells_are_always_shell_syntax() {
        let p = policy(
            json!([{"name": "ls", "program": "ls", "action": "allow"}]),
            None,
            None,
        );
        let v = p.decide(
            Request::Shell {
                shell: Shell::Pwsh,
                command: "ls",
            },
            &BTreeMap::new(),
            "/w",
        );
        assert_eq!(v.rule, SHELL_SYNTAX_RULE);
    }

    #[test]
    fn a_costly_match_refuses_instead_of_spinning() {
        let p = policy(
            json!([{"name": "stars", "any_arg": ["*a*a*a*a*a*a*a*a*a*a*a*b"], "action": "allow"}]),
            None,
            None,
        );
        let long = "a".repeat(200_000);
        let words = vec!["x".to_owned(), long];
        let v = p.decide(Request::Argv(&words), &BTreeMap::new(), "/w");
        assert_eq!(
            (v.action, v.rule.as_str()),
            (Action::Deny, MATCH_LIMIT_RULE)
        );
    }

    #[test]
    fn bad_rules_are_refused_naming_the_rule_and_field() {
        let bad = |rules: Value| Policy::from_settings(Some(&rules), None, None).unwrap_err();
        assert!(bad(json!([{"name": "x", "action": "maybe"}])).contains("rule 1: action"));
        assert!(bad(json!([{"name": "x", "action": "allow", "prog": "ls"}])).contains("rule 1"));
        assert!(
            bad(json!([{"name": "x", "action": "allow", "args": ["[a"]}])).contains("unclosed")
        );
        assert!(
            bad(json!([{"name": "a", "action": "allow"}, {"name": "a", "action": "deny"}]))
                .contains("rule 2: the name \"a\" is used twice")
        );
        assert!(bad(json!([{"name": "default", "action": "allow"}])).contains("reserved"));
        assert!(bad(json!([{"name": "x", "action": "allow", "cwd": "ws"}])).contains("absolute"));
        assert!(
            bad(json!([{"name": "x", "action": "allow", "program": "a\\/b"}]))
                .contains("escapes a /")
        );
        assert!(bad(json!({"name": "x"})).contains("array of tables"));
        assert!(
            Policy::from_settings(None, Some("never"), None)
                .unwrap_err()
                .contains("command_default_action")
        );
    }

    #[test]
    fn globs_follow_their_documented_meaning() {
        let mut budget = Budget(u64::MAX);
        let mut m = |p: &str, slashes: bool, t: &str| {
            Glob::compile(p, slashes)
                .unwrap()
                .matches(t, &mut budget)
                .unwrap()
        };
        assert!(m("a?c", false, "abc"));
        assert!(m("[!x]*", false, "abc"));
        assert!(!m("[!a]*", false, "abc"));
        assert!(m("\\*", false, "*"));
        assert!(!m("\\*", false, "x"));
        assert!(m("*", false, "a/b"));
        assert!(!m("/a/*", true, "/a/b/c"));
        assert!(m("/a/**", true, "/a/b/c"));
        assert!(m("/a/**/c", true, "/a/b/c"));
        assert!(m("/a/**", true, "/a"));
        assert!(!m("/a/**", true, "/ab"));
        assert!(m("[a-c-]", false, "-"));
    }
}
