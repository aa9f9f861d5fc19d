//! Helpers shared by the test binaries (each includes this module; not every binary
//! uses every helper).
#![allow(dead_code)]

use std::process::Command;

/// Whether `tool --version` runs: an optional toolchain is installed.
pub fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// One step of xorshift64 (shifts 13, 7, 17; the examples' C code uses the same):
/// deterministic test data. `state` must not be zero.
pub fn xorshift64(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
