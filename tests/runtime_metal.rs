//! The Metal runtime's own test programs, built and run by `make` in `runtime-metal/`:
//! the emulation's checks (`test_emu.metal` through `mithril_metal.h`'s emulated API,
//! with g++ and clang++ when installed, and its faulty kernels, each of which must abort
//! with the emulation's message) and the kernel library's (`test_kernels.metal`: every
//! kernel against double-precision reference loops, in every precision, under
//! emulation).

use std::path::Path;
use std::process::Command;

mod common;

/// `make -f MAKEFILE test` in runtime-metal/ with its outputs in a scratch directory.
fn make_test(makefile: &str) {
    if !common::have("make") || !common::have("g++") {
        common::skip("make and g++ are needed (apt-get install make g++)");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime-metal");
    let build = tempfile::tempdir().unwrap();
    let out = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&dir)
        .args(["-f", makefile, "test"])
        .arg(format!("BUILD={}", build.path().display()))
        .output()
        .expect("make runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "make -f {makefile} test failed:\n{text}");
}

#[test]
fn emulation_checks() {
    make_test("Makefile");
}

#[test]
fn kernel_library_checks() {
    make_test("Makefile.kernels");
}
