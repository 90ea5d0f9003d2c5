//! Process exit codes (CLI.md §3).
//!
//! Owns the numeric contract between the binary and whatever runs it
//! (shell scripts, systemd's `RestartPreventExitStatus=77 78`, launchd,
//! acceptance tests). Every exit path of the binary uses one of these names;
//! nothing else in the crate may invent a number. This module must never grow
//! logic: deciding *which* code a failure deserves belongs to the layer that
//! understands the failure.
//!
//! Codes 0, 1, 2, 77 and 78 are the reference implementation's; the others
//! are this shim's refinements of cases where the reference exits 1 with a
//! traceback. Names follow `sysexits.h` where one exists.

/// The command did what was asked.
pub const SUCCESS: u8 = 0;

/// A reference-compatible "negative result": `audit verify`/`verify-all`
/// found violations; the current audit log is missing (`tail`, `verify`,
/// `rotate`); `audit show` found no record; `audit export` had nothing to
/// export; `revoke` did not complete or found no stored token; `approve` or
/// `deny` named a command that is not waiting (any more). Also the
/// exit of a second stop signal during shutdown when `SHIM_STOP` could not
/// be written.
pub const NEGATIVE_RESULT: u8 = 1;

/// Usage error: missing or unknown command, unknown option, missing option
/// value, invalid argument. Also: the audit key could not be loaded (audit
/// commands) and an unparseable `--older-than`. The reference's parser uses 2,
/// so this shim keeps it instead of `EX_USAGE` (64).
pub const USAGE: u8 = 2;

/// `EX_UNAVAILABLE`: `auth` could not reach the token endpoint or got a 5xx;
/// `install`/`uninstall` on a platform without autostart support; `approve`
/// or `deny` found no running daemon that asks for approvals.
pub const EX_UNAVAILABLE: u8 = 69;

/// `EX_SOFTWARE`: an internal error, i.e. a bug in this program.
pub const EX_SOFTWARE: u8 = 70;

/// `EX_CANTCREAT`: `install` cannot write the autostart file (or it is still
/// present after `uninstall`); `audit export` cannot create its output or the
/// output already exists.
pub const EX_CANTCREAT: u8 = 73;

/// `EX_TEMPFAIL`: `auth` found no free callback port or received no callback
/// within 300 s; `audit rotate` found the writer lock held by a running
/// daemon. Trying again later may succeed.
pub const EX_TEMPFAIL: u8 = 75;

/// `EX_PROTOCOL`: `auth` received an unusable token response.
pub const EX_PROTOCOL: u8 = 76;

/// `EX_NOPERM`: terminal authentication failure of `start` (token refresh
/// refused definitively, no tokens stored, a `HELLO_ACK` bound to another
/// session, a control connection bound to a session), or the platform
/// refusing this machine on every attempt (upgrade 403, close 4403 before
/// the `HELLO_ACK`); `auth` denied, state mismatch or token endpoint 4xx.
/// Needs the user to re-authenticate or rebind, so autostart units must not
/// restart on it.
pub const EX_NOPERM: u8 = 77;

/// `EX_CONFIG`: invalid configuration file or values (any command); any
/// `start` preflight failure, including an unusable audit key or secret
/// store and a `HELLO` value the platform does not accept; the platform
/// refusing the `HELLO` on every attempt (close 4400); an audit write
/// failure after start; a blocking `doctor` check.
/// Needs the user to fix something, so autostart units must not restart on it.
pub const EX_CONFIG: u8 = 78;
