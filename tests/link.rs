//! Generated C libraries drop into other builds: two models' libraries (mlp and lenet
//! from ../shared/bench, each with its own copy of the runtime) link into one C program,
//! statically and as shared libraries, and into the same program compiled as C++
//! (both headers in one translation unit), which runs both against their reference
//! outputs; every global symbol of a library is its model's (`<name>_*`); and
//! `make install` gives a tree that pkg-config and CMake's find_package consume.

use std::path::{Path, PathBuf};
use std::process::Command;

use mithrilc::cli;
use mithrilc::data;

use crate::common;

/// The two models (bench name, input shape at batch 1).
const MODELS: [(&str, &str); 2] = [("mlp", "input=1,784"), ("lenet", "input=1,1,28,28")];

/// Both models compiled and built into `tmp` (`<tmp>/<name>`), with their batch-1
/// inputs as raw f32 (`<tmp>/<name>_in.bin`); `None` (after saying why) where the tools
/// or ../shared are missing.
fn built(tmp: &Path) -> Option<PathBuf> {
    let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench");
    if !bench.join("lenet.json").exists() {
        common::skip("../shared/bench is not present");
        return None;
    }
    if !common::have("make") || !common::have("gcc") || !common::have("nm") {
        common::skip("make, gcc and nm are needed (apt-get install make gcc binutils)");
        return None;
    }
    for (model, shape) in MODELS {
        let args = cli::CompileArgs {
            model: cli::ModelArgs { model: bench.join(format!("{model}.json")), shapes: vec![shape.into()], ..Default::default() },
            params: Some(bench.join(format!("{model}.safetensors"))),
            out: Some(tmp.join(model)),
            ..Default::default()
        };
        cli::compile(&args).unwrap_or_else(|e| panic!("{model}: {e}"));
        std::fs::write(tmp.join(format!("{model}_in.bin")), f32_bytes(&reference(&bench, model, "input"))).unwrap();
    }
    Some(bench)
}

/// A bench model's batch-1 reference input or output.
fn reference(bench: &Path, model: &str, which: &str) -> mithrilc::tensor::Tensor {
    let file = data::read_arrays(&bench.join(format!("{model}_b1_{which}.npy"))).unwrap();
    file.arrays.into_values().next().unwrap()
}

fn f32_bytes(t: &mithrilc::tensor::Tensor) -> Vec<u8> {
    t.data.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect()
}

/// Runs the two-model program `exe` (with `env`), weights from `weights(model)`; checks
/// both outputs against the references.
fn runs_both(exe: &Path, tmp: &Path, bench: &Path, env: &[(&str, &Path)], weights: impl Fn(&str) -> PathBuf) {
    let mut cmd = Command::new(exe);
    for (model, _) in MODELS {
        cmd.arg(weights(model)).arg(tmp.join(format!("{model}_in.bin"))).arg(tmp.join(format!("{model}_out.bin")));
    }
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_os_str())));
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}: {}", exe.display(), String::from_utf8_lossy(&out.stderr));
    for (model, _) in MODELS {
        let want = reference(bench, model, "output");
        let got = std::fs::read(tmp.join(format!("{model}_out.bin"))).unwrap();
        let got: Vec<f32> = got.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        assert_eq!(got.len(), want.data.len(), "{model}: output size");
        let worst = got.iter().zip(&want.data).map(|(&g, &w)| (g as f64 - w).abs() / (1.0 + w.abs())).fold(0.0, f64::max);
        assert!(worst <= 1e-4, "{model} in {}: relative error {worst:.2e} against the reference output", exe.display());
    }
}

/// Compiles `tests/link/two_models.c` in `dir` with `compiler`, `args` before the
/// source and `libs` after it, into `dir/exe`.
fn build_program(dir: &Path, compiler: &str, args: &[&str], libs: &[&str], exe: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/link/two_models.c");
    let out = Command::new(compiler).current_dir(dir).args(args).arg(&source).args(libs).args(["-lm", "-o", exe]).output().unwrap();
    assert!(out.status.success(), "{compiler} {args:?} {libs:?}: {}", String::from_utf8_lossy(&out.stderr));
    dir.join(exe)
}

/// The global symbols a static library defines.
fn global_symbols(lib: &Path) -> Vec<String> {
    let out = Command::new("nm").args(["--defined-only", "--extern-only"]).arg(lib).output().unwrap();
    assert!(out.status.success(), "nm {}: {}", lib.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().filter_map(|l| l.split_whitespace().nth(2).map(str::to_string)).collect()
}

#[test]
fn two_models_link_into_one_program() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bench) = built(tmp.path()) else { return };
    let t = tmp.path();
    for (model, _) in MODELS {
        let symbols = global_symbols(&t.join(format!("{model}/lib{model}.a")));
        let foreign: Vec<&String> = symbols.iter().filter(|s| !s.starts_with(&format!("{model}_"))).collect();
        assert!(foreign.is_empty(), "lib{model}.a defines symbols outside {model}_*: {foreign:?}");
        let runtime = format!("{model}_mr_sgemm");
        assert!(symbols.contains(&runtime), "lib{model}.a has its runtime as {runtime} and the rest: {symbols:?}");
    }
    let c99 = ["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-Imlp", "-Ilenet"];
    let weights = |model: &str| t.join(model).join("weights.bin");
    // Static: the two archives; shared: the two .so, found through their SONAMEs.
    let exe = build_program(t, "gcc", &c99, &["mlp/libmlp.a", "lenet/liblenet.a"], "static");
    runs_both(&exe, t, &bench, &[], weights);
    let exe = build_program(t, "gcc", &c99, &["-Lmlp", "-Llenet", "-lmlp", "-llenet"], "shared");
    let path = std::env::join_paths([t.join("mlp"), t.join("lenet")]).unwrap();
    runs_both(&exe, t, &bench, &[("LD_LIBRARY_PATH", Path::new(&path))], weights);
    let ldd = Command::new("ldd").arg(&exe).env("LD_LIBRARY_PATH", &path).output().unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(ldd.contains("libmlp.so.1 =>") && ldd.contains("liblenet.so.1 =>"), "the program needs the SONAMEs: {ldd}");
    // Both headers in one C++ translation unit.
    if !common::have("g++") {
        common::skip("g++ is not installed (apt-get install g++): the headers are not checked as C++");
        return;
    }
    let cpp = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-Imlp", "-Ilenet", "-x", "c++"];
    let exe = build_program(t, "g++", &cpp, &["-x", "none", "mlp/libmlp.a", "lenet/liblenet.a"], "cpp");
    runs_both(&exe, t, &bench, &[], weights);
}

#[test]
fn installed_libraries_are_found_by_pkg_config_and_cmake() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bench) = built(tmp.path()) else { return };
    let t = tmp.path();
    let stage = t.join("stage");
    for (model, _) in MODELS {
        let destdir = format!("DESTDIR={}", stage.display());
        let make = Command::new("make").current_dir(t.join(model)).args(["-s", "install", &destdir, "PREFIX=/usr"]).output().unwrap();
        assert!(make.status.success(), "{model}: make install: {}", String::from_utf8_lossy(&make.stderr));
    }
    let usr = stage.join("usr");
    let mut installed: Vec<String> = Vec::new();
    for dir in ["lib", "lib/pkgconfig", "lib/cmake/mlp", "include/mlp", "share/mlp"] {
        for e in std::fs::read_dir(usr.join(dir)).unwrap() {
            installed.push(format!("{dir}/{}", e.unwrap().file_name().to_string_lossy()));
        }
    }
    installed.sort();
    let want = [
        "include/mlp/mithril_runtime.h", "include/mlp/mlp.h", "lib/cmake/mlp/mlpConfig.cmake", "lib/libmlp.a", "lib/libmlp.so",
        "lib/libmlp.so.1", "lib/pkgconfig/mlp.pc", "share/mlp/weights.bin",
    ];
    for file in want {
        assert!(installed.iter().any(|f| f == file), "make install put no {file} under DESTDIR/usr: {installed:?}");
    }
    // The installed weights, where pkg-config says they are (under the sysroot).
    let weights = |model: &str| usr.join(format!("share/{model}/weights.bin"));
    let libs = usr.join("lib");
    if common::have("pkg-config") {
        let pc = Command::new("pkg-config")
            .args(["--cflags", "--libs", "mlp", "lenet"])
            .env("PKG_CONFIG_PATH", usr.join("lib/pkgconfig"))
            .env("PKG_CONFIG_SYSROOT_DIR", &stage)
            .output()
            .unwrap();
        assert!(pc.status.success(), "pkg-config: {}", String::from_utf8_lossy(&pc.stderr));
        let flags = String::from_utf8_lossy(&pc.stdout).into_owned();
        let flags: Vec<&str> = flags.split_whitespace().collect();
        assert!(flags.contains(&format!("-I{}", usr.join("include/mlp").display()).as_str()), "{flags:?}");
        let exe = build_program(t, "gcc", &["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror"], &flags, "pkg_config");
        runs_both(&exe, t, &bench, &[("LD_LIBRARY_PATH", &libs)], weights);
        let variable = Command::new("pkg-config").args(["--variable=weights", "mlp"]).env("PKG_CONFIG_PATH", usr.join("lib/pkgconfig")).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&variable.stdout).trim(), "/usr/share/mlp/weights.bin");
    } else {
        common::skip("pkg-config is not installed (apt-get install pkg-config)");
    }
    if !common::have("cmake") {
        common::skip("cmake is not installed (apt-get install cmake): the CMake package is not checked");
        return;
    }
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/link");
    let build = t.join("cmake-build");
    let configure = Command::new("cmake").arg("-S").arg(&source).arg("-B").arg(&build).arg(format!("-DCMAKE_PREFIX_PATH={}", usr.display())).output().unwrap();
    assert!(configure.status.success(), "cmake: {}{}", String::from_utf8_lossy(&configure.stdout), String::from_utf8_lossy(&configure.stderr));
    let make = Command::new("cmake").arg("--build").arg(&build).output().unwrap();
    assert!(make.status.success(), "cmake --build: {}{}", String::from_utf8_lossy(&make.stdout), String::from_utf8_lossy(&make.stderr));
    runs_both(&build.join("two_models"), t, &bench, &[("LD_LIBRARY_PATH", &libs)], weights);
}
