//! Snapshots of `mithrilc inspect` (the IR after shape inference, and the summary) for
//! a few models, so that a frontend change that alters a graph shows up as a diff.
//! `UPDATE_EXPECT=1 cargo test --test suite ir_snapshots::` rewrites the snapshots.

use std::path::{Path, PathBuf};

use mithrilc::cli::{self, ModelArgs};

use crate::common;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `--set` arguments from a conformance latent-values file.
fn latent_sets(case: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join("tests/conformance/latent").join(format!("{case}.json"))).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["set"].as_object().unwrap().iter().map(|(k, v)| format!("{k}={v}")).collect()
}

fn check(snapshot: &str, model: &Path, shapes: &[&str], set: Vec<String>) {
    if !model.exists() {
        common::skip(&format!("{} is not present", model.display()));
        return;
    }
    let args = ModelArgs { model: model.to_path_buf(), shapes: shapes.iter().map(|s| s.to_string()).collect(), set, ..Default::default() };
    let got = cli::inspect(&args, None).unwrap_or_else(|e| panic!("{snapshot}: {e}"));
    // The model path differs between checkouts; the graph name is the file stem.
    let path = root().join("tests/snapshots").join(snapshot);
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    if got != want {
        let first = got.lines().zip(want.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "{snapshot} changed (first difference at line {}):\n  now:  {}\n  was:  {}\nrun `UPDATE_EXPECT=1 cargo test --test suite ir_snapshots::` if intended",
            first + 1,
            got.lines().nth(first).unwrap_or("<end>"),
            want.lines().nth(first).unwrap_or("<end>")
        );
    }
}

#[test]
fn example_mlp_with_a_symbolic_batch() {
    check("mlp_symbolic.ir", &root().join("examples/mlp/mlp.json"), &["input=B,5"], vec![]);
}

#[test]
fn lenet() {
    check("lenet.ir", &root().join("../shared/bench/lenet.json"), &["input=1,1,28,28"], vec![]);
}

#[test]
fn gpt_block_with_a_symbolic_batch() {
    check("gpt_block.ir", &root().join("../shared/bench/gpt_block.json"), &["input=B,128,768"], vec![]);
}

#[test]
fn attention_block_with_latent_values() {
    let sets = latent_sets("attention_block");
    check("attention_block.ir", &root().join("../shared/testdata/attention_block.json"), &["input=2,4,8"], sets);
}

#[test]
fn conv2d_stride_pad() {
    check("conv2d_stride_pad.ir", &root().join("../shared/testdata/conv2d_stride_pad.json"), &["input=1,2,7,7"], vec![]);
}
