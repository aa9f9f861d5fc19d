//! The CUDA runtime's own test programs, built and run by `make` in `runtime-cuda/`:
//! the emulation's checks (`test_emu.cu`, with g++ and clang++ when installed, and its
//! faulty kernels, each of which must abort with the emulation's message) and the kernel
//! library's (`test_kernels.cu`: every kernel against double-precision reference loops,
//! under emulation); and both compiled by nvcc, which must report no register spills.


use crate::common;

/// `make -f MAKEFILE TARGET` in runtime-cuda/ with its outputs in a scratch directory
/// (the nvcc checks are one job per architecture: they run side by side).
fn make(makefile: &str, target: &str, vars: &[String]) {
    let build = tempfile::tempdir().unwrap();
    let args = ["-f", makefile, target].map(String::from).into_iter().chain([format!("BUILD={}", build.path().display())]).chain(vars.iter().cloned()).collect::<Vec<_>>();
    common::make_in("runtime-cuda", &args);
}

fn have_build_tools() -> bool {
    let ok = common::have("make") && common::have("g++");
    if !ok {
        common::skip("make and g++ are needed (apt-get install make g++)");
    }
    ok
}

#[test]
fn emulation_checks() {
    if !have_build_tools() {
        return;
    }
    // clang++ too where it is installed (CI installs clang).
    make("Makefile", if common::have("clang++") { "test" } else { "test-g++" }, &[]);
}

#[test]
fn kernel_library_under_emulation() {
    if have_build_tools() {
        make("Makefile.kernels", "test", &["CXX=g++".to_string()]);
    }
}

#[test]
fn kernels_compile_with_nvcc_without_spills() {
    let nvcc = match mithrilc::build::nvcc() {
        Ok(nvcc) => nvcc,
        Err(e) => {
            common::skip(&e.to_string().replace('\n', " "));
            return;
        }
    };
    if !common::have("make") {
        common::skip("make is needed (apt-get install make)");
        return;
    }
    let nvcc = format!("NVCC={}", nvcc.display());
    make("Makefile", "nvcc-check", std::slice::from_ref(&nvcc));
    make("Makefile.kernels", "nvcc-check", &[nvcc]);
}
