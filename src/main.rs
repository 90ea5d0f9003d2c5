//! The `autogpt-shim` executable: parses nothing itself, hands the process
//! arguments to the library and exits with the code it returns.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    autogpt_shim::cli::main()
}
