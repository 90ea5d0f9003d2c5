//! Shell completion scripts for bash, zsh and fish, generated from the
//! command table in `catalog.rs` (`autogpt-shim completions SHELL`).
//!
//! Every command, subcommand and option a script offers comes from the same
//! table the parser checks and the help is printed from, so a script cannot
//! offer what the binary refuses. Option values are completed by their
//! placeholder: file names for `PATH`, the log levels for `LEVEL`, the audit
//! operation names for `OP`; [`values`] knows every placeholder of the table
//! and a unit test fails when a new one appears without a decision.
//!
//! It only produces text: it never reads the environment or a file, and the
//! scripts it writes run nothing but the shell's own completion builtins.

use std::fmt::Write as _;

use super::catalog::{COMMAND_TABLE, CommandSpec, HELP, OptionSpec};
use super::help::is_built;
use super::{PROGRAM, VERSION};
use crate::audit::view::OPS;
use crate::config::LogLevel;

/// The shells a script can be printed for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    /// GNU bash 4 or newer (`complete -F`).
    Bash,
    /// zsh with its completion system (`compinit`).
    Zsh,
    /// fish 3 or newer.
    Fish,
}

impl Shell {
    /// Every shell, in the order the help names them.
    pub const ALL: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

    /// The name typed after `completions`.
    pub fn name(self) -> &'static str {
        match self {
            Shell::Bash => "bash",
            Shell::Zsh => "zsh",
            Shell::Fish => "fish",
        }
    }

    /// The shell typed as `name` (exactly, lower case).
    pub fn named(name: &str) -> Option<Shell> {
        Shell::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// The completion script for `shell`.
pub fn script(shell: Shell) -> String {
    // The program first (its name, the command path, is ""), parents
    // before their subcommands.
    let nodes = COMMAND_TABLE.walk();
    match shell {
        Shell::Bash => bash(&nodes),
        Shell::Zsh => zsh(&nodes),
        Shell::Fish => fish(&nodes),
    }
}

/// What the value of an option or a positional argument is completed with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Values {
    /// File and folder names.
    Files,
    /// One of these words.
    Words(Vec<&'static str>),
    /// Anything: nothing is offered.
    Free,
    /// A command of the table, then its subcommand (`help`'s topics).
    Commands,
}

/// How the value a placeholder stands for is completed; `None` for a
/// placeholder this module does not know yet.
pub(crate) fn values(placeholder: &str) -> Option<Values> {
    Some(match placeholder {
        "PATH" => Values::Files,
        "LEVEL" => Values::Words(LogLevel::ALL.iter().map(|l| l.as_str()).collect()),
        "OP" => Values::Words(OPS.to_vec()),
        "MODE" => Values::Words(
            crate::exec::SandboxMode::ALL
                .iter()
                .map(|m| m.as_str())
                .collect(),
        ),
        "NETWORK" => Values::Words(
            crate::exec::NetworkMode::ALL
                .iter()
                .map(|m| m.as_str())
                .collect(),
        ),
        "<SHELL>" => Values::Words(Shell::ALL.iter().map(|s| s.name()).collect()),
        "URL" | "HEX,..." | "ID" | "DUR" | "<seq>" | "[ID]" | "<ARGV>..." => Values::Free,
        "[COMMAND]" | "[SUBCOMMAND]" => Values::Commands,
        _ => return None,
    })
}

/// The options a script offers for `spec`: those this build serves,
/// `--help` everywhere.
fn offered(spec: &'static CommandSpec) -> impl Iterator<Item = &'static OptionSpec> {
    spec.options
        .iter()
        .filter(|o| is_built(o))
        .chain(std::iter::once(&HELP))
}

/// The offered options of `spec` that take a value, with how it is
/// completed.
fn valued_options(
    spec: &'static CommandSpec,
) -> impl Iterator<Item = (&'static OptionSpec, Values)> {
    offered(spec).filter_map(|o| o.value.map(|v| (o, value_kind(v))))
}

/// The positional arguments of `spec` with how each is completed, leaving
/// out the command topics of `help` (completed from the tree itself).
fn arguments(spec: &'static CommandSpec) -> impl Iterator<Item = (usize, Values)> {
    spec.args
        .iter()
        .map(|a| value_kind(a.name))
        .enumerate()
        .filter(|(_, v)| *v != Values::Commands)
}

/// Whether the arguments of `spec` name a command, as `help`'s do.
fn takes_topics(spec: &CommandSpec) -> bool {
    spec.args
        .iter()
        .any(|a| value_kind(a.name) == Values::Commands)
}

/// [`values`] of a placeholder of the table; the unit test below proves
/// every placeholder is known, so the fallback is never reached.
fn value_kind(placeholder: &str) -> Values {
    values(placeholder).unwrap_or(Values::Free)
}

/// The spellings of an option: `-V`, `--version`.
fn spellings(option: &OptionSpec) -> Vec<String> {
    let mut out: Vec<String> = option.short.map(|c| format!("-{c}")).into_iter().collect();
    out.push(option.long.to_owned());
    out
}

/// `text` in single quotes for bash and zsh.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// `text` in single quotes for fish, where `\` and `'` are escaped inside.
fn fish_quote(text: &str) -> String {
    format!("'{}'", text.replace('\\', r"\\").replace('\'', r"\'"))
}

/// The shell words of a value kind for the `_value`/`_argument` helpers of
/// bash and zsh: `files`, `words A B C`, `free`.
fn kind_words(values: &Values) -> String {
    match values {
        Values::Files => "files".into(),
        Values::Words(words) => format!("words {}", words.join(" ")),
        Values::Free | Values::Commands => "free".into(),
    }
}

fn header(text: &mut String, shell: Shell, how: &str) {
    let name = shell.name();
    let _ = writeln!(
        text,
        "# {name} completion for {PROGRAM} {VERSION}, printed by \
         `{PROGRAM} completions {name}`"
    );
    let _ = writeln!(
        text,
        "# from the command table its --help is made of. {how}"
    );
}

/// The `case` helpers bash and zsh share: the subcommand words of a path,
/// the value kind of an option, the kind of a positional argument and the
/// paths whose arguments are help topics. They set `REPLY`.
fn shared_helpers(text: &mut String, nodes: &[&'static CommandSpec]) {
    reply_case(
        text,
        "The subcommands of a command path ('' for the program).",
        "_autogpt_shim_subwords",
        "$1",
        nodes
            .iter()
            .filter(|n| !n.subcommands.is_empty())
            .map(|node| {
                let words: Vec<&str> = node.subcommands.iter().map(|c| c.word()).collect();
                (sh_quote(node.name), words.join(" "))
            }),
    );
    reply_case(
        text,
        "How the value of option $2 of command path $1 is completed: files,\n\
         # 'words ...' or free; empty for a flag or an unknown option.",
        "_autogpt_shim_value",
        "\"$1|$2\"",
        nodes.iter().flat_map(|node| {
            valued_options(node).map(|(option, kind)| {
                let cases: Vec<String> = spellings(option)
                    .iter()
                    .map(|s| sh_quote(&format!("{}|{s}", node.name)))
                    .collect();
                (cases.join(" | "), kind_words(&kind))
            })
        }),
    );
    reply_case(
        text,
        "How positional argument $2 (from 0) of command path $1 is completed.",
        "_autogpt_shim_argument",
        "\"$1|$2\"",
        nodes.iter().flat_map(|node| {
            arguments(node).map(|(index, kind)| {
                (
                    sh_quote(&format!("{}|{index}", node.name)),
                    kind_words(&kind),
                )
            })
        }),
    );

    text.push_str("\n# Whether the arguments of command path $1 name a command (help).\n");
    text.push_str("_autogpt_shim_topics() {\n    case $1 in\n");
    let topics: Vec<String> = nodes
        .iter()
        .filter(|n| takes_topics(n))
        .map(|n| sh_quote(n.name))
        .collect();
    if !topics.is_empty() {
        let _ = writeln!(text, "    {}) return 0 ;;", topics.join(" | "));
    }
    text.push_str("    esac\n    return 1\n}\n");
}

/// A shell function `name` that sets `REPLY` by a `case` on `subject`: one
/// row per `(pattern, value)` (the pattern already quoted, the value quoted
/// here), and empty for anything else; `comment` goes above it.
fn reply_case(
    text: &mut String,
    comment: &str,
    name: &str,
    subject: &str,
    rows: impl Iterator<Item = (String, String)>,
) {
    let _ = write!(text, "\n# {comment}\n{name}() {{\n    case {subject} in\n");
    for (pattern, value) in rows {
        let _ = writeln!(text, "    {pattern}) REPLY={} ;;", sh_quote(&value));
    }
    text.push_str("    *) REPLY='' ;;\n    esac\n}\n");
}

/// The loop bash and zsh share: it walks the words before the cursor and
/// leaves the command path, the help topic, the number of positional
/// arguments and an option still waiting for its value. `indexing` is
/// the loop's head, `word_at` reads word `i`.
fn scan_loop(text: &mut String, indexing: &str, word_at: &str) {
    let _ = write!(
        text,
        r#"    for (({indexing})); do
        word={word_at}
        if [[ -n $pending ]]; then
            # The option's value; bash splits --option=value at the '='.
            [[ $word == '=' ]] || pending=''
            continue
        fi
        case $word in
        -*=*) ;;
        -*)
            _autogpt_shim_value "$cmdpath" "$word"
            [[ -z $REPLY ]] || pending=$word
            ;;
        *)
            if _autogpt_shim_topics "$cmdpath"; then
                _autogpt_shim_subwords "$topic"
                if [[ " $REPLY " == *" $word "* ]]; then
                    topic=${{topic:+$topic }}$word
                else
                    nargs=$((nargs + 1))
                fi
            else
                _autogpt_shim_subwords "$cmdpath"
                if [[ " $REPLY " == *" $word "* ]]; then
                    cmdpath=${{cmdpath:+$cmdpath }}$word
                else
                    nargs=$((nargs + 1))
                fi
            fi
            ;;
        esac
    done
"#
    );
}

fn bash(nodes: &[&'static CommandSpec]) -> String {
    let mut text = String::new();
    header(
        &mut text,
        Shell::Bash,
        "Load it with\n# `source <(autogpt-shim completions bash)` or save it in the \
         bash-completion folder.",
    );
    shared_helpers(&mut text, nodes);

    reply_case(
        &mut text,
        "The options of a command path.",
        "_autogpt_shim_options",
        "$1",
        nodes.iter().map(|node| {
            let words: Vec<String> = offered(node).flat_map(spellings).collect();
            (sh_quote(node.name), words.join(" "))
        }),
    );

    text.push_str(
        r#"
# Fills COMPREPLY for a value kind ($1) and the typed part ($2), each
# candidate after the prefix $3.
_autogpt_shim_reply() {
    local prefix=${3-}
    case $1 in
    files)
        [[ -n $prefix ]] || compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -P "$prefix" -f -- "$2")
        ;;
    words\ *)
        mapfile -t COMPREPLY < <(compgen -P "$prefix" -W "${1#words }" -- "$2")
        ;;
    esac
}

_autogpt_shim() {
    local cur=${COMP_WORDS[COMP_CWORD]} cmdpath='' topic='' pending='' word REPLY
    local -i i nargs=0
    COMPREPLY=()
"#,
    );
    scan_loop(&mut text, "i = 1; i < COMP_CWORD; i++", "${COMP_WORDS[i]}");
    text.push_str(
        r#"    if [[ -n $pending ]]; then
        [[ $cur == '=' ]] && cur=''
        _autogpt_shim_value "$cmdpath" "$pending"
        _autogpt_shim_reply "$REPLY" "$cur"
        return 0
    fi
    if [[ $cur == -*=* ]]; then
        _autogpt_shim_value "$cmdpath" "${cur%%=*}"
        _autogpt_shim_reply "$REPLY" "${cur#*=}" "${cur%%=*}="
        return 0
    fi
    if [[ $cur != -* ]]; then
        if _autogpt_shim_topics "$cmdpath"; then
            ((nargs > 0)) && return 0
            _autogpt_shim_subwords "$topic"
            _autogpt_shim_reply "words $REPLY" "$cur"
            return 0
        fi
        _autogpt_shim_subwords "$cmdpath"
        if [[ -n $REPLY ]]; then
            _autogpt_shim_reply "words $REPLY" "$cur"
            return 0
        fi
        _autogpt_shim_argument "$cmdpath" "$nargs"
        if [[ -n $REPLY ]]; then
            _autogpt_shim_reply "$REPLY" "$cur"
            return 0
        fi
    fi
    _autogpt_shim_options "$cmdpath"
    _autogpt_shim_reply "words $REPLY" "$cur"
    return 0
}

complete -F _autogpt_shim autogpt-shim
"#,
    );
    text
}

/// `word:description` entries for zsh's `_describe`, colons in the word
/// escaped.
fn described(word: &str, help: &str) -> String {
    sh_quote(&format!("{}:{help}", word.replace(':', r"\:")))
}

fn zsh(nodes: &[&'static CommandSpec]) -> String {
    let mut text = String::from("#compdef autogpt-shim\n");
    header(
        &mut text,
        Shell::Zsh,
        "Save it as _autogpt-shim in a\n# folder of $fpath, or load it with \
         `source <(autogpt-shim completions zsh)` after compinit.",
    );
    shared_helpers(&mut text, nodes);

    text.push_str("\n# The subcommands of a command path, as word:description.\n");
    text.push_str("_autogpt_shim_subcommands() {\n    case $1 in\n");
    for node in nodes.iter().filter(|n| !n.subcommands.is_empty()) {
        let entries: Vec<String> = node
            .subcommands
            .iter()
            .map(|c| described(c.word(), c.summary))
            .collect();
        let _ = writeln!(
            text,
            "    {}) reply=(\n        {}\n    ) ;;",
            sh_quote(node.name),
            entries.join("\n        ")
        );
    }
    text.push_str("    *) reply=() ;;\n    esac\n}\n");

    text.push_str("\n# The options of a command path, as option:description.\n");
    text.push_str("_autogpt_shim_options() {\n    case $1 in\n");
    for node in nodes {
        let entries: Vec<String> = offered(node)
            .flat_map(|o| {
                spellings(o)
                    .into_iter()
                    .map(|s| described(&s, o.help))
                    .collect::<Vec<_>>()
            })
            .collect();
        let _ = writeln!(
            text,
            "    {}) reply=(\n        {}\n    ) ;;",
            sh_quote(node.name),
            entries.join("\n        ")
        );
    }
    text.push_str("    *) reply=() ;;\n    esac\n}\n");

    text.push_str(
        r#"
# Completes a value kind ($1: files, 'words ...' or free).
_autogpt_shim_complete_value() {
    local -a candidates
    case $1 in
    files) _files ;;
    words\ *)
        candidates=(${=${1#words }})
        compadd -a candidates
        ;;
    esac
}

_autogpt-shim() {
    local cur=${words[CURRENT]} cmdpath='' topic='' pending='' word REPLY
    local -a reply
    local -i i nargs=0
"#,
    );
    scan_loop(&mut text, "i = 2; i < CURRENT; i++", "${words[i]}");
    text.push_str(
        r#"    if [[ -z $pending && $cur == -*=* ]]; then
        pending=${cur%%=*}
        compset -P '*='
    fi
    if [[ -n $pending ]]; then
        _autogpt_shim_value "$cmdpath" "$pending"
        _autogpt_shim_complete_value "$REPLY"
        return
    fi
    if [[ $cur != -* ]]; then
        if _autogpt_shim_topics "$cmdpath"; then
            ((nargs > 0)) && return 1
            _autogpt_shim_subcommands "$topic"
            _describe -t commands command reply
            return
        fi
        _autogpt_shim_subcommands "$cmdpath"
        if ((${#reply})); then
            _describe -t commands command reply
            return
        fi
        _autogpt_shim_argument "$cmdpath" "$nargs"
        if [[ -n $REPLY ]]; then
            _autogpt_shim_complete_value "$REPLY"
            return
        fi
    fi
    _autogpt_shim_options "$cmdpath"
    _describe -t options option reply
}

if [[ ${funcstack[1]} == _autogpt-shim ]]; then
    _autogpt-shim "$@"
else
    compdef _autogpt-shim autogpt-shim
fi
"#,
    );
    text
}

fn fish(nodes: &[&'static CommandSpec]) -> String {
    let mut text = String::new();
    header(
        &mut text,
        Shell::Fish,
        "Save it as\n# ~/.config/fish/completions/autogpt-shim.fish.",
    );

    text.push_str("\n# The subcommands of a command path ('' for the program).\n");
    text.push_str("function __autogpt_shim_subwords --argument-names cmdpath\n");
    text.push_str("    switch \"$cmdpath\"\n");
    for node in nodes.iter().filter(|n| !n.subcommands.is_empty()) {
        let words: Vec<String> = node
            .subcommands
            .iter()
            .map(|c| fish_quote(c.word()))
            .collect();
        let _ = writeln!(
            text,
            "        case {}\n            printf '%s\\n' {}",
            fish_quote(node.name),
            words.join(" ")
        );
    }
    text.push_str("    end\nend\n");

    text.push_str("\n# Whether option $option of command path $cmdpath takes a value.\n");
    text.push_str("function __autogpt_shim_takes_value --argument-names cmdpath option\n");
    text.push_str("    switch \"$cmdpath|$option\"\n");
    let cases: Vec<String> = nodes
        .iter()
        .flat_map(|n| {
            valued_options(n)
                .flat_map(|(o, _)| spellings(o))
                .map(|s| fish_quote(&format!("{}|{s}", n.name)))
                .collect::<Vec<_>>()
        })
        .collect();
    if !cases.is_empty() {
        let _ = writeln!(
            text,
            "        case {}\n            return 0",
            cases.join(" ")
        );
    }
    text.push_str("    end\n    return 1\nend\n");

    text.push_str("\n# Whether the arguments of command path $cmdpath name a command (help).\n");
    text.push_str("function __autogpt_shim_topics --argument-names cmdpath\n");
    text.push_str("    switch \"$cmdpath\"\n");
    let topics: Vec<String> = nodes
        .iter()
        .filter(|n| takes_topics(n))
        .map(|n| fish_quote(n.name))
        .collect();
    if !topics.is_empty() {
        let _ = writeln!(
            text,
            "        case {}\n            return 0",
            topics.join(" ")
        );
    }
    text.push_str("    end\n    return 1\nend\n");

    text.push_str(
        r#"
# Walks the words before the cursor: the command path, the help topic, the
# number of positional arguments, and whether an option waits for its value.
function __autogpt_shim_scan
    set -g __autogpt_shim_path ''
    set -g __autogpt_shim_topic ''
    set -g __autogpt_shim_nargs 0
    set -g __autogpt_shim_pending 0
    set -l tokens (commandline -opc)
    set -e tokens[1]
    for word in $tokens
        if test $__autogpt_shim_pending = 1
            set __autogpt_shim_pending 0
            continue
        end
        switch $word
            case '-*=*'
            case '-*'
                if __autogpt_shim_takes_value "$__autogpt_shim_path" $word
                    set __autogpt_shim_pending 1
                end
            case '*'
                if __autogpt_shim_topics "$__autogpt_shim_path"
                    if contains -- $word (__autogpt_shim_subwords "$__autogpt_shim_topic")
                        set __autogpt_shim_topic (string trim -- "$__autogpt_shim_topic $word")
                    else
                        set __autogpt_shim_nargs (math $__autogpt_shim_nargs + 1)
                    end
                else if contains -- $word (__autogpt_shim_subwords "$__autogpt_shim_path")
                    set __autogpt_shim_path (string trim -- "$__autogpt_shim_path $word")
                else
                    set __autogpt_shim_nargs (math $__autogpt_shim_nargs + 1)
                end
        end
    end
end

# The command path is $want (for its options).
function __autogpt_shim_in --argument-names want
    __autogpt_shim_scan
    test "$__autogpt_shim_path" = "$want"
end

# The command path is $want and no option waits for its value.
function __autogpt_shim_at --argument-names want
    __autogpt_shim_in "$want"; and test $__autogpt_shim_pending = 0
end

# Positional argument $n (from 0) of command path $want.
function __autogpt_shim_argument --argument-names want n
    __autogpt_shim_at "$want"; and test $__autogpt_shim_nargs = $n
end

# A help topic after $topic.
function __autogpt_shim_topic --argument-names topic
    __autogpt_shim_scan
    __autogpt_shim_topics "$__autogpt_shim_path"
    and test "$__autogpt_shim_topic" = "$topic"
    and test $__autogpt_shim_pending = 0
    and test $__autogpt_shim_nargs = 0
end

complete -c autogpt-shim -f
"#,
    );
    let _ = writeln!(
        text,
        "complete -c autogpt-shim -s {} -l {} -d {}",
        HELP.short.unwrap_or('h'),
        HELP.long.trim_start_matches('-'),
        fish_quote(HELP.help)
    );
    let has_topics = nodes.iter().any(|n| takes_topics(n));
    for node in nodes {
        let at = fish_quote(&format!("__autogpt_shim_at {}", fish_quote(node.name)));
        for sub in node.subcommands {
            let _ = writeln!(
                text,
                "complete -c autogpt-shim -n {at} -a {} -d {}",
                fish_quote(sub.word()),
                fish_quote(sub.summary)
            );
        }
        if has_topics {
            let topic = fish_quote(&format!("__autogpt_shim_topic {}", fish_quote(node.name)));
            for sub in node.subcommands {
                let _ = writeln!(
                    text,
                    "complete -c autogpt-shim -n {topic} -a {} -d {}",
                    fish_quote(sub.word()),
                    fish_quote(sub.summary)
                );
            }
        }
        let within = fish_quote(&format!("__autogpt_shim_in {}", fish_quote(node.name)));
        for option in node.options.iter().filter(|o| is_built(o)) {
            let mut line = format!("complete -c autogpt-shim -n {within}");
            if let Some(short) = option.short {
                let _ = write!(line, " -s {short}");
            }
            let _ = write!(line, " -l {}", option.long.trim_start_matches('-'));
            match option.value.map(value_kind) {
                None => {}
                Some(Values::Files) => line.push_str(" -r -F"),
                Some(Values::Words(words)) => {
                    let _ = write!(line, " -x -a {}", fish_quote(&words.join(" ")));
                }
                Some(Values::Free | Values::Commands) => line.push_str(" -x"),
            }
            let _ = writeln!(line, " -d {}", fish_quote(option.help));
            text.push_str(&line);
        }
        for (index, kind) in arguments(node) {
            let condition = fish_quote(&format!(
                "__autogpt_shim_argument {} {index}",
                fish_quote(node.name)
            ));
            match kind {
                Values::Words(words) => {
                    let _ = writeln!(
                        text,
                        "complete -c autogpt-shim -n {condition} -a {}",
                        fish_quote(&words.join(" "))
                    );
                }
                Values::Files => {
                    let _ = writeln!(text, "complete -c autogpt-shim -n {condition} -F");
                }
                Values::Free | Values::Commands => {}
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placeholders(spec: &'static CommandSpec, out: &mut Vec<&'static str>) {
        out.extend(spec.options.iter().filter_map(|o| o.value));
        out.extend(spec.args.iter().map(|a| a.name));
        for sub in spec.subcommands {
            placeholders(sub, out);
        }
    }

    #[test]
    fn every_placeholder_of_the_table_has_a_way_to_be_completed() {
        let mut all = Vec::new();
        placeholders(&COMMAND_TABLE, &mut all);
        assert!(!all.is_empty());
        for placeholder in all {
            assert!(
                values(placeholder).is_some(),
                "decide in values() how {placeholder} is completed"
            );
        }
    }

    #[test]
    fn shells_are_named_as_typed() {
        for shell in Shell::ALL {
            assert_eq!(Shell::named(shell.name()), Some(shell));
        }
        assert_eq!(Shell::named("Bash"), None);
        assert_eq!(Shell::named("powershell"), None);
    }

    #[test]
    fn quoting_keeps_quotes_and_backslashes_literal() {
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(fish_quote(r"it's a \ b"), r"'it\'s a \\ b'");
    }

    #[test]
    fn every_script_names_every_command_and_built_option() {
        for shell in Shell::ALL {
            let text = script(shell);
            for node in COMMAND_TABLE.walk() {
                for sub in node.subcommands {
                    assert!(text.contains(sub.word()), "{shell:?}: {}", sub.name);
                }
                for option in node.options.iter().filter(|o| is_built(o)) {
                    let long = option.long.trim_start_matches('-');
                    assert!(text.contains(long), "{shell:?}: {}", option.long);
                }
            }
        }
    }
}
