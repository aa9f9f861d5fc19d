//! `examples/train_mlp`: the MLP trained in generated C (`<name>_train_step`) gives the
//! same losses as the same training run in the interpreter, and learns its task.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use mithrilc::cli;
use mithrilc::ir::Dtype;
use mithrilc::passes::autodiff::{grad_name, Wrt};
use mithrilc::tensor::Tensor;

mod common;
use common::have;

// As in train.c.
const POINTS: usize = 96;
const STEPS: usize = 300;
const LR: f32 = 0.02;
const MOMENTUM: f32 = 0.9;
const CENTERS: [[f32; 2]; 3] = [[2.0, 0.0], [-1.0, 1.75], [-1.0, -1.75]];

/// train.c's generator: xorshift64, uniform in [-1, 1) as an exact float.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        (common::xorshift64(&mut self.0) >> 40) as f32 / 8388608.0 - 1.0
    }
}

/// `step K  loss L` lines of train.c's output.
fn printed_losses(stdout: &str) -> BTreeMap<usize, f64> {
    stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next(), w.next(), w.next()) {
                (Some("step"), Some(k), Some("loss"), Some(v)) => Some((k.parse().ok()?, v.parse().ok()?)),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn training_in_c_matches_the_interpreter_and_learns() {
    if !have("gcc") || !have("make") {
        common::skip("gcc and make are needed (apt-get install gcc make)");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = root.join("examples/train_mlp/train_mlp.json");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train-mlp");
    let margs = cli::ModelArgs { model: model.clone(), grad: Wrt::AllParams, ..Default::default() };
    let args = cli::CompileArgs {
        model: margs.clone(),
        out: Some(out.clone()),
        cflags: Some("-O2".into()),
        ..Default::default()
    };
    cli::compile(&args).unwrap();
    let exe = out.join("train");
    let cc = Command::new("gcc")
        .args(["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-O2", "-I"])
        .arg(&out)
        .arg(root.join("examples/train_mlp/train.c"))
        .arg(out.join("libtrain_mlp.a"))
        .args(["-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let c_losses = printed_losses(&String::from_utf8_lossy(&run.stdout));
    assert!(c_losses.len() > 10, "train.c printed: {}", String::from_utf8_lossy(&run.stdout));

    // The same run in the interpreter: same data, same initial weights, same update.
    let graph = cli::load_model(&margs, &[]).unwrap();
    let mut rng = Rng(0x2545F4914F6CDD1D);
    let mut x = Vec::new();
    let mut labels = Vec::new();
    for i in 0..POINTS {
        labels.push((i % 3) as f64);
        for c in CENTERS[i % 3] {
            x.push((c + 1.25 * rng.uniform()) as f64);
        }
    }
    let mut feeds: BTreeMap<String, Tensor> = BTreeMap::new();
    feeds.insert("input".into(), Tensor::new(Dtype::F32, vec![POINTS as u64, 2], x));
    feeds.insert("target".into(), Tensor::new(Dtype::I32, vec![POINTS as u64], labels));
    let mut params: Vec<(String, Vec<f32>, Vec<f32>, Vec<u64>)> = Vec::new(); // name, w, velocity, shape
    for p in graph.params() {
        let shape = graph.ty(p).shape.as_known().unwrap();
        let n = shape.iter().product::<u64>() as usize;
        let w: Vec<f32> = (0..n).map(|_| 0.5 * rng.uniform()).collect();
        params.push((graph.node(p).name.clone().unwrap(), w, vec![0.0; n], shape));
    }
    let mut interp_losses = BTreeMap::new();
    for step in 0..STEPS {
        for (name, w, _, shape) in &params {
            feeds.insert(name.clone(), Tensor::new(Dtype::F32, shape.clone(), w.iter().map(|&v| v as f64).collect()));
        }
        let outs: BTreeMap<String, Tensor> = mithrilc::interp::run(&graph, &feeds).unwrap().into_iter().collect();
        interp_losses.insert(step, outs["final_cost"].data[0]);
        for (name, w, v, _) in &mut params {
            let g = &outs[&grad_name(name)].data;
            for i in 0..w.len() {
                v[i] = MOMENTUM * v[i] + g[i] as f32;
                w[i] -= LR * v[i];
            }
        }
    }
    let mut worst = 0.0f64;
    for (step, c) in &c_losses {
        let i = interp_losses[step];
        assert!((c - i).abs() <= 1e-4 + 1e-4 * i.abs(), "step {step}: C loss {c}, interpreter {i}");
        worst = worst.max((c - i).abs());
    }
    let (first, last) = (interp_losses[&0], interp_losses[&(STEPS - 1)]);
    println!("loss {first:.6} -> {last:.6} ({:.0}x) over {STEPS} steps; C and interpreter within {worst:.1e} at {} steps", first / last, c_losses.len());
    assert!(first / last >= 10.0, "the loss fell only {:.1}x", first / last);
}
