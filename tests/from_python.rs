//! docs/from-python.md's commands, after the Python step (which needs Mithril): the
//! parameters `inspect` names are the ones in the file, `compile` builds the library,
//! examples/from_python/main.c links against it, and its outputs are Mithril's.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common;

fn mithrilc(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mithrilc")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap();
    assert!(out.status.success(), "mithrilc {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn python_export_compiles_and_runs_from_c() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = mithrilc::data::read_arrays(&root.join("examples/mlp/data.npz")).unwrap();

    // The script is valid Python (running it needs Mithril).
    if common::have("python3") {
        let check = Command::new("python3").args(["-m", "py_compile", "examples/from_python/export.py"]).current_dir(root).output().unwrap();
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    } else {
        common::skip("python3 is not installed: export.py is not syntax-checked");
    }

    // Every parameter in the file is one `inspect` names, with the file's shape.
    let ir = mithrilc(&["inspect", "examples/mlp/mlp.json", "--shape", "input=4,5"]);
    let params: Vec<_> = data.arrays.iter().filter_map(|(k, t)| Some((k.strip_prefix("param/")?, t))).collect();
    assert_eq!(params.len(), 6);
    for (name, t) in &params {
        let dims: Vec<String> = t.shape.iter().map(u64::to_string).collect();
        let line = format!("param \"{name}\" : f32[{}]", dims.join(", "));
        assert!(ir.contains(&line), "inspect does not print `{line}`:\n{ir}");
    }

    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("mlp-c");
    mithrilc(&[
        "compile", "examples/mlp/mlp.json", "--target", "c", "--shape", "input=4,5", "--params", "examples/mlp/data.npz",
        "--weights", "embed", "-o", lib.to_str().unwrap(),
    ]);
    let exe = tmp.path().join("mlp_main");
    let cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-O2", "-I"])
        .arg(&lib)
        .arg(root.join("examples/from_python/main.c"))
        .arg(lib.join("libmlp.a"))
        .args(["-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(cc.status.success(), "main.c: {}", String::from_utf8_lossy(&cc.stderr));

    let input = &data.arrays["input/input"];
    let text: Vec<String> = input.data.iter().map(|x| format!("{x:e}")).collect();
    let mut child = Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(text.join(" ").as_bytes()).unwrap();
    let run = child.wait_with_output().unwrap();
    assert!(run.status.success());
    let got: Vec<f64> = String::from_utf8(run.stdout).unwrap().split_whitespace().map(|v| v.parse().unwrap()).collect();
    let want = &data.arrays["output/output"].data;
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 + 1e-4 * w.abs(), "main.c printed {got:?}, Mithril's output is {want:?}");
    }

    // A short input is refused, not read past.
    let short = Command::new(&exe).stdin(Stdio::null()).output().unwrap();
    assert!(!short.status.success());
}
