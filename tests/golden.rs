//! The C target's generated sources, committed: every `../shared/bench` model at batch
//! 1, two of them with `--grad` (the backward pass and the training step), and every
//! test-data case, as `mithrilc compile --target c --emit source` writes them, under
//! `tests/out/c/bench/<model>/` and `tests/out/c/testdata/<case>/`.
//! A change to lowering or codegen shows up as a diff of these files in review. Each is
//! stored as `NAME.golden` (`mlp.c.golden`): generated code repeats itself by design,
//! and the suffix keeps it out of the tree's duplicate-code reports.
//! The runtime's files (`mithril_*`, copied verbatim from `runtime-c/`) and `weights.bin` are not
//! kept. `UPDATE_EXPECT=1 cargo test --test golden` rewrites the files.
//! The same compiles check the program's text form: printed after each program pass, it
//! parses back to the same program.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mithrilc::cli;
use mithrilc::data;
use mithrilc::lower::{parse::parse, print::print};
use mithrilc::passes::autodiff::Wrt;

mod common;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `../shared` is missing (and the test skips, saying so).
fn shared_missing() -> bool {
    let missing = !root().join("../shared/bench").exists() || !root().join("../shared/testdata").exists();
    if missing {
        common::skip("../shared is not present");
    }
    missing
}

/// One compile of the golden set: a model and the flags it is compiled with.
struct Case {
    name: String,
    model: cli::ModelArgs,
    params: Option<PathBuf>,
}

/// The generated files of one compile, by name (runtime copies and weights left out).
fn generate(case: &Case) -> Result<BTreeMap<String, String>, String> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let args = cli::CompileArgs { model: case.model.clone(), params: case.params.clone(), out: Some(out.clone()), emit: "source".into(), ..Default::default() };
    cli::compile(&args).map_err(|e| format!("{}: {e}", case.model.model.display()))?;
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&out).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("mithril_") || name == "weights.bin" || name.starts_with('.') {
            continue;
        }
        files.insert(name.clone(), std::fs::read_to_string(out.join(&name)).unwrap());
    }
    Ok(files)
}

fn case(name: String, model: &Path, shapes: Vec<String>, set: Vec<String>, params: Option<PathBuf>, grad: bool) -> Case {
    let grad = if grad { Wrt::AllParams } else { Wrt::None };
    Case { name, model: cli::ModelArgs { model: model.to_path_buf(), shapes, set, grad, ..Default::default() }, params }
}

/// A bench model at batch 1 (its parameters from its safetensors file).
fn bench(model: &str, grad: bool) -> Case {
    let bench = root().join("../shared/bench");
    let input = data::read_arrays(&bench.join(format!("{model}_b1_input.npy"))).unwrap();
    let shape = input.arrays.values().next().expect("one array").shape.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let name = format!("bench/{model}{}", if grad { "_grad" } else { "" });
    case(name, &bench.join(format!("{model}.json")), vec![format!("input={shape}")], vec![], Some(bench.join(format!("{model}.safetensors"))), grad)
}

/// Every test-data case of `../shared/testdata/manifest.json` (its first variant's
/// shapes, and the constructor values its JSON lost from `tests/conformance/latent`).
fn testdata() -> Vec<Case> {
    let dir = root().join("../shared/testdata");
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text.replace(": Infinity", ": null").replace(": NaN", ": null")).unwrap();
    let mut out = Vec::new();
    for (name, entry) in manifest.as_object().unwrap() {
        let (Some(json), Some(variant)) = (entry["json"].as_str(), entry["variants"].get(0)) else { continue };
        let mut shapes = Vec::new();
        for kind in ["inputs", "params"] {
            for (name, dims) in variant[kind].as_object().into_iter().flatten() {
                let dims: Vec<String> = dims.as_array().unwrap().iter().map(|d| d.to_string()).collect();
                shapes.push(format!("{name}={}", dims.join(",")));
            }
        }
        let latent = root().join("tests/conformance/latent").join(format!("{name}.json"));
        let set = std::fs::read_to_string(latent).map_or_else(
            |_| Vec::new(),
            |t| {
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                v["set"].as_object().unwrap().iter().map(|(k, v)| format!("{k}={v}")).collect()
            },
        );
        out.push(case(format!("testdata/{name}"), &dir.join(json), shapes, set, None, false));
    }
    out
}

/// The golden set: the bench models (two also with `--grad`), then the test data.
fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = [("mlp", false), ("lenet", false), ("cnn", false), ("gpt_block", false), ("mlp", true), ("lenet", true)].into_iter().map(|(m, g)| bench(m, g)).collect();
    cases.extend(testdata());
    cases
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
    if shared_missing() {
        return;
    }
    let mut problems = Vec::new();
    for case in cases() {
        let got = match generate(&case) {
            Ok(g) => g,
            Err(e) => {
                problems.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        let dir = root().join("tests/out/c").join(&case.name);
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

/// Every program the golden set compiles, after each program pass, prints as text that
/// parses back to the same program and prints the same again (the text is complete).
#[test]
fn printed_programs_parse_back() {
    if shared_missing() {
        return;
    }
    let mut problems = Vec::new();
    let mut programs = 0;
    for case in cases() {
        let params = case.params.as_deref().map(|p| data::read_arrays(p).unwrap());
        let graphs = cli::load_graphs(&case.model, &params.iter().collect::<Vec<_>>()).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let opts = mithrilc::lower::Options { row_major_weights: graphs.backward.is_some(), ..Default::default() };
        for g in std::iter::once(&graphs.forward).chain(&graphs.backward) {
            mithrilc::passes::compile(g, &opts, |pass, p| {
                programs += 1;
                let text = print(p);
                match parse(&text) {
                    Ok(back) if back == *p && print(&back) == text => {}
                    Ok(back) => {
                        let line = text.lines().zip(print(&back).lines()).position(|(a, b)| a != b).map_or("(the text is the same)".to_string(), |n| text.lines().nth(n).unwrap_or_default().to_string());
                        problems.push(format!("{} after {pass}: reads back differently at: {line}", case.name));
                    }
                    Err(e) => problems.push(format!("{} after {pass}: {e}", case.name)),
                }
            })
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        }
    }
    assert!(programs > 0);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
