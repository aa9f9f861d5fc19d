//! The Python package (`python/`): its wheel is built with maturin as `pip install
//! ./python` builds it, but as a debug build with mithrilc and the extension module
//! unoptimised: the suite tests what the package does, not how fast a release build
//! runs it. The wheel is installed into the test environment
//! (`~/.cache/mithrilc/python-test`, which `.ci/run` makes with the pinned maturin, NumPy
//! and pytest), and its pytest suite runs there (`python/tests`). Then the wheel
//! goes into a fresh virtual environment with nothing but its dependencies, the
//! example of `docs/python.md` runs there as written, and a model loads and runs there
//! with no C compiler on `PATH`. The wheel's size and the fresh
//! install's time are printed (the closing notes quote them).
//!
//! The wheel is built in the build directory this suite was built in, with the profile it
//! was built with (`dev`, which `test` inherits; cargo holds the directory's lock only
//! while it builds, not while the tests run): its dependencies are the ones the suite's
//! build compiled (Cargo.toml's `syn3` and `once_cell` keep their features alike), so
//! only PyO3, mithrilc without the LLVM tier (its build script compiling the C runtime
//! again) and the extension module are compiled: about 100 CPU s on a 2-core Xeon, half
//! of a build of its own. The test fails if the build compiled anything else, which
//! would mean the feature sets have drifted apart. A suite built with `--release` builds
//! the wheel from cold, and checks nothing of the kind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::common;

/// The test environment's Python, made by `.ci/run`.
fn test_python() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
    let python = cache.join("mithrilc/python-test/bin/python");
    python.exists().then_some(python)
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed ({}):\n{text}", out.status);
    text
}

/// The example of docs/python.md: its ```python blocks, in order, as one program.
fn docs_example(root: &Path) -> String {
    let text = std::fs::read_to_string(root.join("docs/python.md")).unwrap();
    let mut program = String::new();
    let mut inside = false;
    for line in text.lines() {
        match (inside, line.trim_end()) {
            (false, "```python") => inside = true,
            (true, "```") => inside = false,
            (true, l) => {
                program.push_str(l);
                program.push('\n');
            }
            _ => {}
        }
    }
    program
}

#[test]
fn the_wheel_installs_and_passes_its_tests_and_the_docs_example_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Some(python) = test_python() else {
        common::skip("no Python test environment in ~/.cache/mithrilc/python-test (.ci/run makes it: python3 -m venv, then pip install maturin==1.16.0 numpy==2.4.6 pytest==9.2.0)");
        return;
    };
    if !root.join("../shared/testdata/manifest.json").exists() {
        common::skip("../shared is not present");
        return;
    }
    let bin = python.parent().unwrap();
    // This binary is DIR/debug/deps/suite-HASH when the suite was built with the dev
    // profile: the wheel's build shares DIR.
    let exe = std::env::current_exe().unwrap();
    let shared = exe.ancestors().nth(2).filter(|d| d.file_name().is_some_and(|n| n == "debug")).and_then(Path::parent).map(Path::to_path_buf);
    let wheels = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let mut maturin = Command::new(bin.join("maturin"));
    maturin
        .args(["build", "--profile", "dev", "-m"])
        .arg(root.join("python/Cargo.toml"))
        .arg("-i")
        .arg(&python)
        .arg("-o")
        .arg(wheels.path())
        // The workspace's own crates unoptimised; the profile's `"*"` override keeps the
        // dependencies as the suite's build compiled them.
        .env("CARGO_PROFILE_DEV_OPT_LEVEL", "0");
    if let Some(dir) = &shared {
        maturin.env("CARGO_TARGET_DIR", dir);
    }
    let log = run(&mut maturin, "maturin build");
    let built = start.elapsed();
    let compiled: Vec<&str> = log.lines().filter_map(|l| l.trim_start().strip_prefix("Compiling ")).map(|c| c.split(' ').next().unwrap_or(c)).collect();
    println!("the wheel's build compiled {} crates: {}", compiled.len(), compiled.join(" "));
    if shared.is_some() {
        let own = |c: &&str| c.starts_with("pyo3") || *c == "mithrilc" || *c == "mithrilc-python";
        let others: Vec<&str> = compiled.iter().copied().filter(|c| !own(c)).collect();
        assert!(others.is_empty(), "the wheel's build compiled {others:?} again: their features differ between the suite's build and the wheel's (`cargo tree -e features -i CRATE` in both; Cargo.toml's syn3 and once_cell align them)");
    }
    let wheel = std::fs::read_dir(wheels.path()).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|e| e == "whl")).expect("a wheel");
    let size = std::fs::metadata(&wheel).unwrap().len();
    println!("wheel {} ({:.1} MB), built in {:.0} s", wheel.file_name().unwrap().to_string_lossy(), size as f64 / 1e6, built.as_secs_f64());

    // The suite, in the test environment.
    run(Command::new(&python).args(["-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps"]).arg(&wheel), "pip install into the test environment");
    let suite = run(Command::new(&python).args(["-m", "pytest", "-q", "-p", "no:cacheprovider"]).current_dir(root.join("python/tests")), "pytest python/tests");
    println!("{}", suite.lines().last().unwrap_or_default());

    // A fresh environment: the wheel and what it depends on (NumPy, from the package
    // index or pip's cache), then the docs' example, run where the docs say (the
    // repository root) from a scratch copy so that what it writes stays out of the tree.
    let scratch = tempfile::tempdir().unwrap();
    let venv = scratch.path().join("venv");
    let system_python = std::env::var("MITHRILC_TEST_PYTHON3").unwrap_or_else(|_| "python3".to_string());
    run(Command::new(system_python).args(["-m", "venv"]).arg(&venv), "python3 -m venv");
    let start = Instant::now();
    run(Command::new(venv.join("bin/pip")).args(["install", "--quiet"]).arg(&wheel), "pip install the wheel into a fresh environment");
    println!("pip install into a fresh environment: {:.1} s", start.elapsed().as_secs_f64());
    let work = scratch.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::os::unix::fs::symlink(root.join("examples"), work.join("examples")).unwrap();
    std::fs::write(work.join("example.py"), docs_example(root)).unwrap();
    let out = run(Command::new(venv.join("bin/python")).arg("example.py").current_dir(&work), "the example of docs/python.md");
    print!("{out}");
    assert!(work.join("trained.npz").is_file(), "the example writes its trained parameters");
    let version = run(Command::new(venv.join("bin/mithrilc")).arg("--version"), "the wheel's mithrilc command");
    assert!(version.starts_with("mithrilc "), "{version}");

    // What runs in-process needs no C compiler: the same model, loaded and run with no
    // compiler to be found (PATH holds the environment's bin alone, CC names nothing).
    let alone = "import mithrilc, numpy as np\n\
        m = mithrilc.load('examples/mlp/mlp.json', params='examples/mlp/data.npz', shapes={'input': (2, 5)})\n\
        print(m(np.ones((2, 5), np.float32))['output'].shape)\n";
    let out = run(Command::new(venv.join("bin/python")).args(["-c", alone]).current_dir(&work).env("PATH", venv.join("bin")).env("CC", "/nonexistent/cc"), "load() without a C compiler");
    assert_eq!(out.trim(), "(2, 3)");
}
