//! The C target's generated sources, committed: every `../shared/bench` model at batch
//! 1, two of them with `--grad` (the backward pass and the training step), and every
//! test-data case, as `mithrilc compile --target c --emit source` writes them, under
//! `tests/out/c/bench/<model>/` and `tests/out/c/testdata/<case>/`.
//! A change to lowering or codegen shows up as a diff of these files in review. Each is
//! stored as `NAME.golden` (`mlp.c.golden`): generated code repeats itself by design,
//! and the suffix keeps it out of the tree's duplicate-code reports.
//! The runtime's files (`codegen::c::RUNTIME_FILES`, copied verbatim from `runtime-c/`) and
//! `weights.bin` are not kept. `UPDATE_EXPECT=1 cargo test --test golden` rewrites the files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mithrilc::cli;
use mithrilc::data;
use mithrilc::passes::autodiff::Wrt;

mod common;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The generated files of one compile, by name (runtime copies and weights left out).
fn generate(model: &Path, shapes: Vec<String>, set: Vec<String>, params: Option<PathBuf>, grad: bool) -> Result<BTreeMap<String, String>, String> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let args = cli::CompileArgs {
        model: cli::ModelArgs { model: model.to_path_buf(), shapes, set, grad: if grad { Wrt::AllParams } else { Wrt::None }, ..Default::default() },
        params,
        out: Some(out.clone()),
        emit: "source".into(),
        ..Default::default()
    };
    cli::compile(&args).map_err(|e| format!("{}: {e}", model.display()))?;
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if mithrilc::codegen::c::RUNTIME_FILES.iter().any(|(file, _)| *file == name) || name == "weights.bin" || name.starts_with('.') {
            continue;
        }
        files.insert(name.clone(), std::fs::read_to_string(out.join(&name)).unwrap());
    }
    Ok(files)
}

/// A bench model at batch 1 (its parameters from its safetensors file).
fn bench(model: &str, grad: bool) -> Result<BTreeMap<String, String>, String> {
    let bench = root().join("../shared/bench");
    let input = data::read_arrays(&bench.join(format!("{model}_b1_input.npy"))).map_err(|e| e.to_string())?;
    let shape = input.arrays.values().next().expect("one array").shape.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    generate(&bench.join(format!("{model}.json")), vec![format!("input={shape}")], vec![], Some(bench.join(format!("{model}.safetensors"))), grad)
}

/// Every test-data case of `../shared/testdata/manifest.json` (its first variant's
/// shapes, and the constructor values its JSON lost from `tests/conformance/latent`).
fn testdata() -> Vec<(String, Result<BTreeMap<String, String>, String>)> {
    let dir = root().join("../shared/testdata");
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text.replace(": Infinity", ": null").replace(": NaN", ": null")).unwrap();
    let mut out = Vec::new();
    for (case, entry) in manifest.as_object().unwrap() {
        let (Some(json), Some(variant)) = (entry["json"].as_str(), entry["variants"].get(0)) else { continue };
        let mut shapes = Vec::new();
        for kind in ["inputs", "params"] {
            for (name, dims) in variant[kind].as_object().into_iter().flatten() {
                let dims: Vec<String> = dims.as_array().unwrap().iter().map(|d| d.to_string()).collect();
                shapes.push(format!("{name}={}", dims.join(",")));
            }
        }
        let latent = root().join("tests/conformance/latent").join(format!("{case}.json"));
        let set = std::fs::read_to_string(latent).map_or_else(
            |_| Vec::new(),
            |t| {
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                v["set"].as_object().unwrap().iter().map(|(k, v)| format!("{k}={v}")).collect()
            },
        );
        out.push((format!("testdata/{case}"), generate(&dir.join(json), shapes, set, None, false)));
    }
    out
}

/// Where generated file `name` is kept.
fn golden(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.golden"))
}

/// Where `got` and the committed files in `dir` differ: one line per file.
fn compare(dir: &Path, got: &BTreeMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    let committed: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".golden").to_string()).collect())
        .unwrap_or_default();
    for name in committed.iter().filter(|n| !got.contains_key(*n)) {
        problems.push(format!("{}: no longer generated", golden(dir, name).display()));
    }
    for (name, text) in got {
        let want = std::fs::read_to_string(golden(dir, name)).unwrap_or_default();
        if *text != want {
            let line = text.lines().zip(want.lines()).position(|(a, b)| a != b).unwrap_or_else(|| text.lines().count().min(want.lines().count()));
            let show = |s: &str| s.lines().nth(line).unwrap_or("(end of file)").to_string();
            problems.push(format!("{}: line {}\n    now: {}\n    was: {}", golden(dir, name).display(), line + 1, show(text), show(&want)));
        }
    }
    problems
}

#[test]
fn generated_c_matches_the_committed_files() {
    if !root().join("../shared/bench").exists() || !root().join("../shared/testdata").exists() {
        common::skip("../shared is not present");
        return;
    }
    let mut cases: Vec<(String, Result<BTreeMap<String, String>, String>)> = Vec::new();
    for (model, grad) in [("mlp", false), ("lenet", false), ("cnn", false), ("gpt_block", false), ("mlp", true), ("lenet", true)] {
        cases.push((format!("bench/{model}{}", if grad { "_grad" } else { "" }), bench(model, grad)));
    }
    cases.extend(testdata());
    let mut problems = Vec::new();
    for (case, got) in cases {
        let got = match got {
            Ok(g) => g,
            Err(e) => {
                problems.push(format!("{case}: {e}"));
                continue;
            }
        };
        let dir = root().join("tests/out/c").join(&case);
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, text) in &got {
                std::fs::write(golden(&dir, name), text).unwrap();
            }
            continue;
        }
        problems.extend(compare(&dir, &got));
    }
    assert!(
        problems.is_empty(),
        "the generated C differs from tests/out/c:\n{}\nrun `UPDATE_EXPECT=1 cargo test --test golden` if intended, and review `git diff tests/out`",
        problems.join("\n")
    );
}
