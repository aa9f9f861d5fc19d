//! The Metal runtime's own test programs, built and run by `make` in `runtime-metal/`:
//! the emulation's checks (`test_emu.metal` through `mithril_metal.h`'s emulated API,
//! with g++ and clang++ when installed, and its faulty kernels, each of which must abort
//! with the emulation's message) and the kernel library's (`test_kernels.metal`: every
//! kernel against double-precision reference loops, in every precision, under
//! emulation).


use crate::common;

/// `make -f MAKEFILE test` in runtime-metal/ with its outputs in a scratch directory.
fn make_test(makefile: &str) {
    if !common::have("make") || !common::have("g++") {
        common::skip("make and g++ are needed (apt-get install make g++)");
        return;
    }
    let build = tempfile::tempdir().unwrap();
    common::make_in("runtime-metal", &["-f".to_string(), makefile.to_string(), "test".to_string(), format!("BUILD={}", build.path().display())]);
}

#[test]
fn emulation_checks() {
    make_test("Makefile");
}

#[test]
fn kernel_library_checks() {
    make_test("Makefile.kernels");
}
