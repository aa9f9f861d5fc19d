//! The C runtime's own test program (`runtime-c/test_runtime.c`: every kernel against
//! double-precision reference loops at awkward sizes), built and run by `make`, plain,
//! with -march=native, for AVX2 (-march=haswell), under AddressSanitizer + UBSan, and
//! cross-compiled for AArch64 (NEON) under qemu-user.


use crate::common;

/// Runs `make target` in runtime-c and returns what it printed (None: skipped): as many
/// jobs as cores, so `test-aarch64`'s two builds run side by side.
fn make(target: &str) -> Option<String> {
    if !common::have("make") || !common::have("gcc") {
        common::skip("make and gcc are needed (apt-get install make gcc)");
        return None;
    }
    let text = common::make_in("runtime-c", &[target.to_string(), "CC=gcc".to_string()]);
    assert!(text.contains(" passed, 0 failed"), "make {target} printed no summary:\n{text}");
    Some(text)
}

#[test]
fn runtime_kernels() {
    make("test");
}

/// AArch64: the NEON kernels (and the portable ones, -DMR_NO_INTRINSICS), built with
/// Debian's cross compiler and run under qemu-user.
#[test]
fn runtime_kernels_aarch64_under_qemu() {
    if !common::have("aarch64-linux-gnu-gcc") || !common::have("qemu-aarch64") {
        common::skip("a cross compiler and qemu-user are needed (apt-get install gcc-aarch64-linux-gnu qemu-user)");
        return;
    }
    if let Some(text) = make("test-aarch64") {
        assert!(text.contains("variant neon: ") && text.contains("variant generic: "), "the NEON and portable kernels did not both run:\n{text}");
    }
}

/// With the host's vector extensions: the intrinsic paths (AVX-512 here).
#[test]
fn runtime_kernels_native() {
    make("test-native");
}

/// The AVX2 and FMA paths (an x86-64 CPU without AVX-512 runs them), on a CPU that has
/// both.
#[test]
fn runtime_kernels_avx2() {
    if !avx2_fma() {
        common::skip("this CPU has no AVX2 and FMA");
        return;
    }
    make("test-avx2");
}

#[cfg(target_arch = "x86_64")]
fn avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_fma() -> bool {
    false
}

#[test]
fn runtime_kernels_under_sanitizers() {
    make("test-asan");
}
