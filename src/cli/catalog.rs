//! The command line as data: every command, subcommand, option and
//! argument of the binary with its one-line description (CLI.md §1, §4).
//!
//! This table is the single source of what the command line accepts. The
//! parser looks every option and command name up here before it interprets
//! it, so nothing outside the table is ever accepted; the `--help` texts are
//! rendered from it, and so can a manual page or shell completions be. A unit
//! test in `args.rs` parses every entry, so nothing in the table is left
//! unhandled. Adding a command means adding one [`CommandSpec`] to
//! [`COMMANDS`] and its arm in the parser.
//!
//! It holds text and names only: no parsing, no printing, no I/O. Which
//! configuration switches this build refuses is the configuration's
//! knowledge ([`crate::config::unavailable_feature`]); an option only names
//! the key it sets.

/// One option of a command, or a global option.
#[derive(Debug, PartialEq, Eq)]
pub struct OptionSpec {
    /// The long name with its dashes, e.g. `--output`.
    pub long: &'static str,
    /// The short letter, e.g. `V` for `-V`.
    pub short: Option<char>,
    /// The value's placeholder, e.g. `PATH`; `None` for a flag.
    pub value: Option<&'static str>,
    /// What it does, one line.
    pub help: &'static str,
    /// The configuration key (CLI.md §5.2) the option sets, if any.
    pub key: Option<&'static str>,
}

/// A positional argument.
#[derive(Debug, PartialEq, Eq)]
pub struct ArgSpec {
    /// Its placeholder as usage shows it, e.g. `<seq>` or `[COMMAND]`.
    pub name: &'static str,
    /// What it is, one line.
    pub help: &'static str,
}

/// An example invocation for the help text.
#[derive(Debug, PartialEq, Eq)]
pub struct Example {
    /// The arguments after the program name.
    pub args: &'static str,
    /// What it does, one line.
    pub help: &'static str,
}

/// A command, a subcommand, or (as [`COMMAND_TABLE`]) the program itself.
#[derive(Debug, PartialEq, Eq)]
pub struct CommandSpec {
    /// The full name as typed after the global options, e.g. `audit show`;
    /// empty for the program itself.
    pub name: &'static str,
    /// What it does, one line.
    pub summary: &'static str,
    /// Its options, in the order the help lists them. `-h`/`--help` is
    /// accepted everywhere and not listed here.
    pub options: &'static [OptionSpec],
    /// Its positional arguments.
    pub args: &'static [ArgSpec],
    /// Its subcommands; a command with subcommands needs one.
    pub subcommands: &'static [CommandSpec],
    /// Typical invocations.
    pub examples: &'static [Example],
    /// Paragraphs after the options, each one wrapped sentence or more.
    pub notes: &'static [&'static str],
}

impl CommandSpec {
    /// The last word of the name, as typed (`show` for `audit show`).
    pub fn word(&self) -> &'static str {
        self.name.rsplit(' ').next().unwrap_or(self.name)
    }

    /// The subcommand typed as `word`.
    pub fn subcommand(&self, word: &str) -> Option<&'static CommandSpec> {
        self.subcommands.iter().find(|c| c.word() == word)
    }

    /// The option spelled `--long` (`long` without its dashes).
    pub fn long_option(&self, long: &str) -> Option<&'static OptionSpec> {
        self.options
            .iter()
            .find(|o| o.long.strip_prefix("--") == Some(long))
    }

    /// The option spelled `-short`.
    pub fn short_option(&self, short: char) -> Option<&'static OptionSpec> {
        self.options.iter().find(|o| o.short == Some(short))
    }

    /// This command and every command below it, each parent before its
    /// subcommands, in the table's order: what the manual page and the
    /// completion scripts go through.
    pub fn walk(&'static self) -> Vec<&'static CommandSpec> {
        let mut out = vec![self];
        for sub in self.subcommands {
            out.extend(sub.walk());
        }
        out
    }
}

/// `-h`/`--help`, accepted by the program and by every command.
pub const HELP: OptionSpec = OptionSpec {
    long: "--help",
    short: Some('h'),
    value: None,
    help: "print this help and exit",
    key: None,
};

/// The global options (CLI.md §1.1): before the command.
const GLOBAL_OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        long: "--config",
        short: None,
        value: Some("PATH"),
        help: "read this config file instead of the per-OS default",
        key: None,
    },
    OptionSpec {
        long: "--platform-url",
        short: None,
        value: Some("URL"),
        help: "the platform's base URL",
        key: Some("platform_url"),
    },
    OptionSpec {
        long: "--ca-file",
        short: None,
        value: Some("PATH"),
        help: "extra PEM trust anchors for TLS",
        key: Some("tls_ca_file"),
    },
    OptionSpec {
        long: "--tls-pin-sha256",
        short: None,
        value: Some("HEX,..."),
        help: "pin the server's SPKI SHA-256 digest(s); empty keeps a pin from config.toml",
        key: Some("tls_pin_sha256"),
    },
    OptionSpec {
        long: "--log-level",
        short: None,
        value: Some("LEVEL"),
        help: "DEBUG, INFO (default), WARNING, ERROR or CRITICAL",
        key: None,
    },
    OptionSpec {
        long: "--session-id",
        short: None,
        value: Some("ID"),
        help: "legacy: serve one direct session instead of machine control",
        key: Some("session_id"),
    },
    OptionSpec {
        long: "--allowed-root",
        short: None,
        value: Some("PATH"),
        help: "legacy: the folder a --session-id session is confined to",
        key: Some("allowed_root"),
    },
    OptionSpec {
        long: "--version",
        short: Some('V'),
        value: None,
        help: "print the version and exit",
        key: None,
    },
];

/// The commands of this build (CLI.md §1.2), in the order the help lists
/// them.
const COMMANDS: &[CommandSpec] = &[
    AUTH,
    START,
    STATUS,
    REVOKE,
    DOCTOR,
    INSTALL,
    UNINSTALL,
    AUDIT,
    RULES,
    APPROVE,
    DENY,
    COMPLETIONS,
    MANPAGE,
    HELP_COMMAND,
];

/// The program itself, the root of the table: the global options and the
/// commands.
pub static COMMAND_TABLE: CommandSpec = CommandSpec {
    name: "",
    summary: "local executor for the AutoGPT platform",
    options: GLOBAL_OPTIONS,
    args: &[],
    subcommands: COMMANDS,
    examples: &[
        Example {
            args: "auth",
            help: "authorize this machine once",
        },
        Example {
            args: "start [--enable-shell]",
            help: "serve: each chat picks its own folder",
        },
        Example {
            args: "status",
            help: "settings, tokens and daemon state",
        },
        Example {
            args: "start --session-id ID",
            help: "legacy: one session in allowed_root",
        },
    ],
    notes: &[
        "Options take their value as the next argument or as --option=value. \
         Settings come from flags, then config.toml, then AUTOGPT_SHIM_* environment \
         variables, then built-in defaults. Read SECURITY.md before use.",
    ],
};

const AUTH: CommandSpec = CommandSpec {
    name: "auth",
    summary: "authorize this machine in the browser and store the tokens",
    options: &[OptionSpec {
        long: "--no-browser",
        short: None,
        value: None,
        help: "open no browser here: open the URL elsewhere and paste the final address back",
        key: None,
    }],
    args: &[],
    subcommands: &[],
    examples: &[],
    notes: &[
        "Opens the platform's authorization page (or prints its URL when no browser can be \
         opened) and waits up to five minutes for the browser to return to 127.0.0.1. On a \
         remote machine, use --no-browser, or forward the callback port with ssh -L. The \
         tokens go to the OS keychain, or to the encrypted token file when the keychain is \
         unavailable; on a terminal its passphrase is asked for when none is given.",
    ],
};

const START: CommandSpec = CommandSpec {
    name: "start",
    summary: "run the daemon in the foreground until Ctrl+C or SIGTERM",
    options: &[
        OptionSpec {
            long: "--enable-shell",
            short: None,
            value: None,
            help: "let the platform run shell commands, with all the rights of your user account",
            key: Some("enable_shell"),
        },
        OptionSpec {
            long: "--command-sandbox",
            short: None,
            value: Some("MODE"),
            help: "workspace: run commands under Landlock, writing only in the root and a private TMPDIR",
            key: Some("command_sandbox"),
        },
        OptionSpec {
            long: "--command-network",
            short: None,
            value: Some("NETWORK"),
            help: "none: run commands in their own network namespace, with only their own loopback",
            key: Some("command_network"),
        },
        OptionSpec {
            long: "--session-id",
            short: None,
            value: Some("ID"),
            help: "legacy: serve one direct session, confined to allowed_root",
            key: Some("session_id"),
        },
        OptionSpec {
            long: "--enable-recording",
            short: None,
            value: None,
            help: "workflow recording, a design preview: start refuses to run with it (exit 78)",
            key: Some("enable_recording"),
        },
        OptionSpec {
            long: "--enable-computer-use",
            short: None,
            value: None,
            help: "let the platform see the screen and use mouse and keyboard",
            key: Some("enable_computer_use"),
        },
        OptionSpec {
            long: "--enable-clipboard",
            short: None,
            value: None,
            help: "let the platform use the clipboard",
            key: Some("enable_clipboard"),
        },
        OptionSpec {
            long: "--enable-clipboard-read-foreign",
            short: None,
            value: None,
            help: "with --enable-clipboard, read content the shim did not write",
            key: Some("enable_clipboard_read_foreign"),
        },
    ],
    args: &[],
    subcommands: &[],
    examples: &[
        Example {
            args: "start",
            help: "machine control: chats pick folders",
        },
        Example {
            args: "start --enable-shell",
            help: "the same, with shell commands allowed",
        },
        Example {
            args: "start --session-id ID",
            help: "legacy: one session in allowed_root",
        },
    ],
    notes: &[
        "Without a session id the shim runs persistent machine control: the platform \
         browses this machine's folders and each chat works in the one its user picked. \
         Shell commands are not confined to that folder.",
        "Flags only switch settings on: a setting enabled in config.toml or the environment \
         cannot be switched off here. Exit 0 after Ctrl+C or SIGTERM, 77 when the platform \
         refuses the credentials for good, 78 when the configuration, a start-up check or the \
         audit log fails.",
    ],
};

const STATUS: CommandSpec = CommandSpec {
    name: "status",
    summary: "show the settings, where the tokens are, the daemon and autostart",
    options: &[],
    args: &[],
    subcommands: &[],
    examples: &[],
    notes: &["Reports presence only: no token, key or passphrase is printed. Exit 0."],
};

const REVOKE: CommandSpec = CommandSpec {
    name: "revoke",
    summary: "revoke the tokens on the platform, then delete them here",
    options: &[],
    args: &[],
    subcommands: &[],
    examples: &[],
    notes: &[
        "Exit 0 when the platform confirmed every revocation and the tokens were deleted. \
         Exit 1 when no tokens are stored, or when a revocation failed: the tokens are then \
         kept, so it can be tried again.",
    ],
};

const DOCTOR: CommandSpec = CommandSpec {
    name: "doctor",
    summary: "check the setup and prove the connection, one line per check",
    options: &[],
    args: &[],
    subcommands: &[],
    examples: &[],
    notes: &[
        "Local checks first (folders, identity, keychain, tokens, audit log and its chain, \
         command containment, autostart), then DNS, TCP, TLS with the configured CA file and \
         pins, and the WebSocket upgrade with the stored access token; nothing is sent after \
         the upgrade. It creates nothing, writes no audit record and never prints a secret. \
         Exit 0 when no check fails, 78 when one does.",
    ],
};

const INSTALL: CommandSpec = CommandSpec {
    name: "install",
    summary: "write the autostart entry that runs `start` at login",
    options: &[OptionSpec {
        long: "--at-login",
        short: None,
        value: None,
        help: "start at login (the default and only trigger)",
        key: None,
    }],
    args: &[],
    subcommands: &[],
    examples: &[Example {
        args: "install",
        help: "write the entry for this user",
    }],
    notes: &[
        "A systemd user unit on Linux and WSL2, a launchd agent on macOS, a Task Scheduler \
         XML file on Windows. It runs `start` with the --config given here and nothing else, \
         so other settings belong in config.toml. Nothing is started or enabled: the commands \
         that do it are printed.",
    ],
};

const UNINSTALL: CommandSpec = CommandSpec {
    name: "uninstall",
    summary: "remove the autostart entry",
    options: &[],
    args: &[],
    subcommands: &[],
    examples: &[],
    notes: &["Removing an entry that is not there is not an error."],
};

const AUDIT: CommandSpec = CommandSpec {
    name: "audit",
    summary: "audit log tools: show, follow, verify, export, rotate and prune",
    options: &[],
    args: &[],
    subcommands: &[
        AUDIT_TAIL,
        AUDIT_SHOW,
        AUDIT_VERIFY,
        AUDIT_VERIFY_ALL,
        AUDIT_EXPORT,
        AUDIT_ROTATE,
        AUDIT_PRUNE,
    ],
    examples: &[],
    notes: &[
        "All of them use the configured audit_log_path and none needs the network. verify, \
         verify-all, export and rotate read the audit key and never create one (exit 2 \
         without it).",
    ],
};

const AUDIT_TAIL: CommandSpec = CommandSpec {
    name: "audit tail",
    summary: "print the records, one line each",
    options: &[
        OptionSpec {
            long: "--follow",
            short: None,
            value: None,
            help: "keep printing new records, across rotations, until Ctrl+C",
            key: None,
        },
        OptionSpec {
            long: "--session",
            short: None,
            value: Some("ID"),
            help: "only the records of this session (- for records of no session)",
            key: None,
        },
        OptionSpec {
            long: "--op",
            short: None,
            value: Some("OP"),
            help: "only the records of this operation, e.g. EXECUTE_COMMAND",
            key: None,
        },
        OptionSpec {
            long: "--json",
            short: None,
            value: None,
            help: "print the record lines themselves, one JSON object per line",
            key: None,
        },
    ],
    args: &[],
    subcommands: &[],
    examples: &[Example {
        args: "audit tail --follow --op EXECUTE_COMMAND",
        help: "watch the commands as they run",
    }],
    notes: &[
        "Each line shows the local time with its UTC offset, seq, session, op, duration, \
         result and the path or command. Text from the records is escaped, so \
         nothing in them can control the terminal. Exit 1 when the current audit log does \
         not exist.",
    ],
};

const AUDIT_SHOW: CommandSpec = CommandSpec {
    name: "audit show",
    summary: "print one record, pretty, looking in the current file first",
    options: &[],
    args: &[ArgSpec {
        name: "<seq>",
        help: "the record's seq (an integer)",
    }],
    subcommands: &[],
    examples: &[],
    notes: &["Exit 1 when no file holds a record with that seq."],
};

const AUDIT_VERIFY: CommandSpec = CommandSpec {
    name: "audit verify",
    summary: "check the current log's chain and tail anchor",
    options: &[],
    args: &[],
    subcommands: &[],
    examples: &[],
    notes: &["Exit 1 when it finds violations or the log does not exist."],
};

const AUDIT_VERIFY_ALL: CommandSpec = CommandSpec {
    name: "audit verify-all",
    summary: "check the current and every rotated file, and the links between them",
    options: &[],
    args: &[],
    subcommands: &[],
    examples: &[],
    notes: &["Exit 1 when it finds violations."],
};

const AUDIT_EXPORT: CommandSpec = CommandSpec {
    name: "audit export",
    summary: "write a ZIP of all logs with a manifest signed by the audit key",
    options: &[OptionSpec {
        long: "--output",
        short: None,
        value: Some("PATH"),
        help: "the ZIP to create (default ./audit-export-<local time>.zip)",
        key: None,
    }],
    args: &[],
    subcommands: &[],
    examples: &[],
    notes: &[
        "An existing file is never replaced (exit 73). Exit 1 when there is nothing to export.",
    ],
};

const AUDIT_ROTATE: CommandSpec = CommandSpec {
    name: "audit rotate",
    summary: "start a new log file now",
    options: &[],
    args: &[],
    subcommands: &[],
    examples: &[],
    notes: &["Exit 75 while a running daemon owns the log."],
};

const AUDIT_PRUNE: CommandSpec = CommandSpec {
    name: "audit prune",
    summary: "delete rotated files whose newest record is older than a duration",
    options: &[OptionSpec {
        long: "--older-than",
        short: None,
        value: Some("DUR"),
        help: "digits and one unit d, h, m or s, e.g. 30d (default 90d)",
        key: None,
    }],
    args: &[],
    subcommands: &[],
    examples: &[],
    notes: &["The current file is never deleted."],
};

const RULES: CommandSpec = CommandSpec {
    name: "rules",
    summary: "the local command rules ([[command_rule]] in config.toml)",
    options: &[],
    args: &[],
    subcommands: &[RULES_TEST],
    examples: &[],
    notes: &[],
};

const RULES_TEST: CommandSpec = CommandSpec {
    name: "rules test",
    summary: "show which rule would decide a command, and what it says",
    options: &[OptionSpec {
        long: "--cwd",
        short: None,
        value: Some("PATH"),
        help: "the directory the command would run in (default: the current one)",
        key: None,
    }],
    args: &[ArgSpec {
        name: "<ARGV>...",
        help: "the program and its arguments, after --",
    }],
    subcommands: &[],
    examples: &[Example {
        args: "rules test -- git push --force",
        help: "which rule decides a force push",
    }],
    notes: &[
        "Reads the configuration only: it needs no running daemon, runs nothing and writes \
         no audit record. The words are matched as the daemon matches an argv request; a \
         shell string the daemon receives is first split into words the same way, or decided \
         by command_shell_syntax_action when it holds shell syntax. Exit 0.",
    ],
};

const APPROVE: CommandSpec = CommandSpec {
    name: "approve",
    summary: "approve a command the running daemon is asking about",
    options: &[],
    args: &[ArgSpec {
        name: "[ID]",
        help: "the number the list shows; without it, list the waiting commands and ask",
    }],
    subcommands: &[],
    examples: &[Example {
        args: "approve",
        help: "list the waiting commands and pick one",
    }],
    notes: &[
        "A command a rule says to ask about waits, holding its slot, until it is approved \
         or denied here or approval_timeout_seconds pass (then it is refused). The list \
         shows each command in full with its directory, session and rule. Exit 0; 1 when the \
         command is no longer waiting; 69 when no running daemon asks for approvals.",
    ],
};

const DENY: CommandSpec = CommandSpec {
    name: "deny",
    summary: "refuse a command the running daemon is asking about",
    options: &[],
    args: &[ArgSpec {
        name: "[ID]",
        help: "the number the list shows; without it, list the waiting commands and ask",
    }],
    subcommands: &[],
    examples: &[],
    notes: &[
        "The platform is told local_confirmation_denied; the command never starts. Exit 0; 1 \
         when the command is no longer waiting; 69 when no running daemon asks for approvals.",
    ],
};

const COMPLETIONS: CommandSpec = CommandSpec {
    name: "completions",
    summary: "print the shell completion script for bash, zsh or fish",
    options: &[],
    args: &[ArgSpec {
        name: "<SHELL>",
        help: "bash, zsh or fish",
    }],
    subcommands: &[],
    examples: &[Example {
        args: "completions bash",
        help: "print the bash script",
    }],
    notes: &[
        "The script completes commands, subcommands and options, file names for PATH \
         values, the log levels and the audit operation names. To load it in the running \
         shell: source <(autogpt-shim completions bash). For every new shell of one user, \
         save it as ~/.local/share/bash-completion/completions/autogpt-shim (bash), as \
         _autogpt-shim in a folder listed in $fpath (zsh) or as \
         ~/.config/fish/completions/autogpt-shim.fish (fish). Exit 0.",
    ],
};

const MANPAGE: CommandSpec = CommandSpec {
    name: "manpage",
    summary: "print the manual page autogpt-shim(1) in roff",
    options: &[],
    args: &[],
    subcommands: &[],
    examples: &[Example {
        args: "manpage | man -l -",
        help: "read it without installing it",
    }],
    notes: &[
        "The page is made from the same table as this help, so the two list the same \
         commands and options. Its date is the day of SOURCE_DATE_EPOCH (UTC) when that \
         variable is set; without it the page carries no date, so a binary always prints \
         the same page. Exit 0; 78 when SOURCE_DATE_EPOCH is not a whole number of seconds.",
    ],
};

const HELP_COMMAND: CommandSpec = CommandSpec {
    name: "help",
    summary: "print the help of a command",
    options: &[],
    args: &[
        ArgSpec {
            name: "[COMMAND]",
            help: "the command; without one, the program's help",
        },
        ArgSpec {
            name: "[SUBCOMMAND]",
            help: "its subcommand, e.g. help audit show",
        },
    ],
    subcommands: &[],
    examples: &[],
    notes: &[],
};
