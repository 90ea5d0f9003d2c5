//! The `autogpt-shim` executable: parses nothing itself, hands the process
//! arguments to the library and exits with the code it returns.
#![forbid(unsafe_code)]

/// Large blocks get huge pages where the kernel allows (see the type).
#[global_allocator]
static ALLOCATOR: autogpt_shim::LargePages = autogpt_shim::LargePages;

fn main() -> std::process::ExitCode {
    autogpt_shim::cli::main()
}
