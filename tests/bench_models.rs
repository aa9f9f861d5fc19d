//! The four benchmark models of `../shared/bench` (the same models and weights the ONNX
//! peers run) through the frontend and the interpreter, at every batch size they ship,
//! compared with the reference outputs within 1e-4 absolute + 1e-4 relative.

use std::path::{Path, PathBuf};

use mithrilc::cli::{self, ModelArgs, RunArgs};
use mithrilc::data;

use crate::common;

fn bench_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench");
    dir.join("MANIFEST.json").exists().then_some(dir)
}

fn check(model: &str, batches: &[u32]) {
    let Some(dir) = bench_dir() else {
        common::skip("../shared/bench is not present");
        return;
    };
    for b in batches {
        let input = dir.join(format!("{model}_b{b}_input.npy"));
        let args = RunArgs {
            target: cli::RunTarget::Interp,
            check: false,
            emulate: false,
            precision: Default::default(),
            gemm: Default::default(),
            accumulate: None,
            quantize: Default::default(),
            model: ModelArgs { model: dir.join(format!("{model}.json")), ..Default::default() },
            data: vec![format!("input={}", input.display())],
            params: Some(dir.join(format!("{model}.safetensors"))),
            output: None,
            triple: None,
            no_cache: false,
            threads: None,
            repeat: None,
        };
        let (outputs, _) = cli::run(&args).unwrap_or_else(|e| panic!("{model} b{b}: {e}"));
        let want = data::read_arrays(&dir.join(format!("{model}_b{b}_output.npy"))).unwrap();
        let want = want.arrays.values().next().unwrap();
        assert_eq!(outputs.len(), 1, "{model} has one output");
        let (name, got) = &outputs[0];
        assert_eq!(name, "output");
        assert_eq!(got.shape, want.shape, "{model} b{b}: output shape");
        let mut worst = 0.0f64;
        for (g, w) in got.data.iter().zip(&want.data) {
            let err = (g - w).abs();
            assert!(err <= 1e-4 + 1e-4 * w.abs(), "{model} b{b}: got {g}, reference {w}");
            worst = worst.max(err);
        }
        println!("{model} b{b}: max abs error {worst:.2e}");
    }
}

#[test]
fn mlp_matches_reference() {
    check("mlp", &[1, 32]);
}

#[test]
fn lenet_matches_reference() {
    check("lenet", &[1, 32]);
}

#[test]
fn cnn_matches_reference() {
    check("cnn", &[1, 32]);
}

#[test]
fn gpt_block_matches_reference() {
    check("gpt_block", &[1, 8]);
}
