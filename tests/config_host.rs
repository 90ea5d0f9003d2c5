//! Facts about this machine: platform and architecture (CLI.md §7.1,
//! PROTOCOL.md §4.2.2–§4.2.3) and the machine id (PROTOCOL.md §4.2.1).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use autogpt_shim::config::{
    Arch, ConfigError, Host, Platform, format_linux_machine_id, linux_flavour, linux_machine_id,
    new_uuid_v4, normalize_arch, parse_ioreg_output, parse_reg_query_output,
};

// --- platform and architecture -------------------------------------------------

#[test]
fn proc_version_mentioning_microsoft_means_wsl2() {
    assert_eq!(
        linux_flavour("Linux version 5.15.167.4-microsoft-standard-WSL2 (root@x) #1 SMP"),
        Platform::Wsl2
    );
    assert_eq!(
        linux_flavour("Linux version 4.4.0-19041-Microsoft"),
        Platform::Wsl2
    );
    assert_eq!(linux_flavour("... MICROSOFT ..."), Platform::Wsl2);
}

#[test]
fn other_proc_version_text_means_linux() {
    assert_eq!(
        linux_flavour("Linux version 6.8.0-45-generic (buildd@lcy02) gcc 13.2.0"),
        Platform::Linux
    );
    assert_eq!(linux_flavour(""), Platform::Linux);
}

#[test]
fn platform_names_are_the_wire_spellings() {
    assert_eq!(Platform::Linux.as_str(), "linux");
    assert_eq!(Platform::Wsl2.as_str(), "wsl2");
    assert_eq!(Platform::Darwin.as_str(), "darwin");
    assert_eq!(Platform::Windows.to_string(), "windows");
}

#[test]
fn machine_strings_normalise_to_two_architectures() {
    for machine in ["x86_64", "X86_64", "amd64", "AMD64"] {
        assert_eq!(normalize_arch(machine), Some(Arch::X86_64), "{machine}");
    }
    for machine in ["arm64", "ARM64", "aarch64", "AArch64"] {
        assert_eq!(normalize_arch(machine), Some(Arch::Arm64), "{machine}");
    }
    for machine in ["i686", "riscv64", "armv7l", "", "x86-64"] {
        assert_eq!(normalize_arch(machine), None, "{machine}");
    }
    assert_eq!(Arch::X86_64.as_str(), "x86_64");
    assert_eq!(Arch::Arm64.to_string(), "arm64");
}

#[test]
fn unsupported_host_is_an_error_with_the_machine_named() {
    let host = Host {
        platform: None,
        os_name: "freebsd".into(),
        machine: "riscv64".into(),
        hostname: "h".into(),
    };
    let error = host.arch().unwrap_err();
    assert!(matches!(error, ConfigError::UnsupportedArch { .. }));
    assert!(error.to_string().contains("riscv64"));
    assert!(matches!(
        host.platform(),
        Err(ConfigError::UnsupportedPlatform { .. })
    ));
}

#[cfg(target_os = "linux")]
#[test]
fn detected_host_on_linux_is_linux_or_wsl2() {
    let host = Host::detect();
    assert!(matches!(
        host.platform,
        Some(Platform::Linux | Platform::Wsl2)
    ));
    assert!(!host.machine.is_empty());
}

// --- machine id: pure formatting ---------------------------------------------------

#[test]
fn machine_id_32_hex_is_formatted_as_uuid() {
    assert_eq!(
        format_linux_machine_id("0123456789abcdef0123456789ABCDEF\n").as_deref(),
        Some("01234567-89ab-cdef-0123-456789abcdef")
    );
}

#[test]
fn machine_id_already_in_uuid_form_is_normalised() {
    assert_eq!(
        format_linux_machine_id("  0123-4567-89AB-CDEF-0123-4567-89ab-cdef ").as_deref(),
        Some("01234567-89ab-cdef-0123-456789abcdef")
    );
}

#[test]
fn machine_id_that_is_not_32_hex_is_used_trimmed_as_is() {
    assert_eq!(
        format_linux_machine_id(" Custom-ID\n").as_deref(),
        Some("Custom-ID")
    );
    assert_eq!(
        format_linux_machine_id("0123456789abcdef0123456789abcdeg").as_deref(),
        Some("0123456789abcdef0123456789abcdeg")
    );
    assert_eq!(
        format_linux_machine_id("0123456789abcdef0123456789abcdef0").as_deref(),
        Some("0123456789abcdef0123456789abcdef0")
    );
}

#[test]
fn blank_machine_id_content_yields_nothing() {
    assert_eq!(format_linux_machine_id(""), None);
    assert_eq!(format_linux_machine_id(" \n\t\u{1c}"), None);
}

#[test]
fn ioreg_output_yields_the_lowercased_platform_uuid() {
    let output = "+-o Mac  <class IOPlatformExpertDevice>\n    {\n      \"IOPlatformSerialNumber\" = \"C02X\"\n      \"IOPlatformUUID\" = \"1A2B3C4D-AAAA-BBBB-CCCC-0123456789EF\"\n    }\n";
    assert_eq!(
        parse_ioreg_output(output).as_deref(),
        Some("1a2b3c4d-aaaa-bbbb-cccc-0123456789ef")
    );
    assert_eq!(parse_ioreg_output("no uuid here\n"), None);
    assert_eq!(parse_ioreg_output("\"IOPlatformUUID\" = \"\"\n"), None);
}

#[test]
fn reg_query_output_yields_the_lowercased_machine_guid() {
    let output = "\r\nHKEY_LOCAL_MACHINE\\SOFTWARE\\Microsoft\\Cryptography\r\n    MachineGuid    REG_SZ    5B3C1D2E-AAAA-BBBB-CCCC-0123456789EF\r\n\r\n";
    assert_eq!(
        parse_reg_query_output(output).as_deref(),
        Some("5b3c1d2e-aaaa-bbbb-cccc-0123456789ef")
    );
    assert_eq!(parse_reg_query_output("ERROR: not found\r\n"), None);
}

#[test]
fn generated_uuid_v4_has_version_and_variant_bits() {
    // The formatting itself is pinned in the protocol module's tests.
    let id = new_uuid_v4().unwrap();
    assert_eq!(id.len(), 36);
    assert_eq!(&id[14..15], "4");
    assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
    assert!(
        id.chars()
            .all(|c| c == '-' || c.is_ascii_digit() || c.is_ascii_lowercase())
    );
    assert_ne!(id, new_uuid_v4().unwrap());
}

// --- machine id: sources ------------------------------------------------------------

#[cfg(target_os = "linux")]
fn sources(dir: &std::path::Path, files: &[&str]) -> autogpt_shim::config::MachineIdSources {
    autogpt_shim::config::MachineIdSources {
        linux_files: files.iter().map(|f| dir.join(f)).collect(),
        fallback_file: dir.join("home/.autogpt-local-executor-machine-id"),
        hostname: "alice-laptop".into(),
    }
}

#[test]
fn first_non_empty_linux_id_file_wins() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("etc"), "  \n").unwrap();
    std::fs::write(
        dir.path().join("dbus"),
        "ABCDEFABCDEFABCDEFABCDEFABCDEFAB\n",
    )
    .unwrap();
    let files: Vec<PathBuf> = ["missing", "etc", "dbus"]
        .iter()
        .map(|f| dir.path().join(f))
        .collect();
    assert_eq!(
        linux_machine_id(&files).as_deref(),
        Some("abcdefab-cdef-abcd-efab-cdefabcdefab")
    );
}

#[cfg(target_os = "linux")]
#[test]
fn fallback_file_is_read_when_no_os_id_exists() {
    let dir = tempfile::tempdir().unwrap();
    let src = sources(dir.path(), &["missing"]);
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    std::fs::write(&src.fallback_file, "  saved-id\n").unwrap();
    assert_eq!(detect(&src), "saved-id");
}

#[cfg(target_os = "linux")]
#[test]
fn missing_fallback_file_is_created_with_hostname_and_uuid() {
    let dir = tempfile::tempdir().unwrap();
    let src = sources(dir.path(), &["missing"]);
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    let id = detect(&src);
    let uuid = id.strip_prefix("alice-laptop-").unwrap();
    assert_eq!(uuid.len(), 36);
    let written = std::fs::read_to_string(&src.fallback_file).unwrap();
    assert_eq!(written, id, "written without a trailing newline");
    assert_eq!(detect(&src), id, "stable on the next start");
}

#[cfg(target_os = "linux")]
#[test]
fn the_existing_id_is_found_without_creating_the_fallback_file() {
    use autogpt_shim::config::existing_machine_id;
    let dir = tempfile::tempdir().unwrap();
    let src = sources(dir.path(), &["missing"]);
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    assert_eq!(existing_machine_id(&src), None);
    assert!(!src.fallback_file.exists());
    std::fs::write(&src.fallback_file, "\n").unwrap();
    assert_eq!(existing_machine_id(&src), None);
    assert_eq!(std::fs::read_to_string(&src.fallback_file).unwrap(), "\n");
    std::fs::write(&src.fallback_file, " saved-id\n").unwrap();
    assert_eq!(existing_machine_id(&src).as_deref(), Some("saved-id"));
    std::fs::write(dir.path().join("etc"), "ABCDEFABCDEFABCDEFABCDEFABCDEFAB\n").unwrap();
    let with_os_id = sources(dir.path(), &["etc"]);
    assert_eq!(
        existing_machine_id(&with_os_id).as_deref(),
        Some("abcdefab-cdef-abcd-efab-cdefabcdefab")
    );
}

#[cfg(target_os = "linux")]
#[test]
fn generated_id_is_used_even_when_it_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    // No `home` directory: the fallback file cannot be created.
    let src = sources(dir.path(), &["missing"]);
    let first = detect(&src);
    assert!(first.starts_with("alice-laptop-"));
    assert!(!src.fallback_file.exists());
    assert_ne!(detect(&src), first);
}

#[cfg(target_os = "linux")]
#[test]
fn empty_fallback_file_is_filled() {
    let dir = tempfile::tempdir().unwrap();
    let src = sources(dir.path(), &["missing"]);
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    std::fs::write(&src.fallback_file, "\n").unwrap();
    let id = detect(&src);
    assert!(id.starts_with("alice-laptop-"));
    assert_eq!(std::fs::read_to_string(&src.fallback_file).unwrap(), id);
}

#[cfg(target_os = "linux")]
#[test]
fn os_id_file_wins_over_the_fallback_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("etc"), "host-specific\n").unwrap();
    let src = sources(dir.path(), &["etc"]);
    assert_eq!(detect(&src), "host-specific");
    assert!(!src.fallback_file.exists());
}

#[cfg(target_os = "linux")]
fn detect(src: &autogpt_shim::config::MachineIdSources) -> String {
    autogpt_shim::config::detect_machine_id(src).unwrap()
}
