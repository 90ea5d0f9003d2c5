//! A platform emulator for `autogpt-shim`: the platform's side of the
//! local-executor wire protocol (`PROTOCOL.md`), for integration tests and
//! for people trying a shim by hand.
//!
//! The emulator is a test oracle. It is written from the specification
//! alone and must never depend on the `autogpt-shim` crate or reuse its
//! codec: it speaks JSON through [`serde_json::Value`] and the small functions
//! in [`wire`], so a misreading of the specification in the shim cannot
//! agree with itself here.

pub mod hello;
pub mod wire;

pub use hello::{ConnKind, HelloAck, HelloError, hello_problems};
