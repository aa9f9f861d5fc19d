//! `examples/train_mlp`: the MLP trained in generated C (`<name>_train_step`), with the
//! Metal target under emulation, and in this process by the JIT (`Jit::train_step`),
//! gives the same losses as the same training run in the interpreter, and learns its
//! task.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use mithrilc::cli;
use mithrilc::ir::Dtype;
use mithrilc::passes::autodiff::{grad_name, Wrt};
use mithrilc::tensor::Tensor;

use crate::common;
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

/// A parameter's name, values and shape.
type Param = (String, Vec<f32>, Vec<u64>);

/// train.c's data and initial weights for `graph`'s parameters: the inputs, and each
/// parameter.
fn data_and_weights(graph: &mithrilc::ir::Graph) -> (BTreeMap<String, Tensor>, Vec<Param>) {
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
    let mut params = Vec::new();
    for p in graph.params() {
        let shape = graph.ty(p).shape.as_known().unwrap();
        let n = shape.iter().product::<u64>() as usize;
        let w: Vec<f32> = (0..n).map(|_| 0.5 * rng.uniform()).collect();
        params.push((graph.node(p).name.clone().unwrap(), w, shape));
    }
    (feeds, params)
}

/// The same training run in the interpreter as train.c's: same data, same initial
/// weights, same update; the loss at every step.
fn interpreter_losses(margs: &cli::ModelArgs) -> BTreeMap<usize, f64> {
    let graph = cli::load_model(margs, &[]).unwrap();
    let (mut feeds, params) = data_and_weights(&graph);
    // (name, values, velocity, shape)
    let mut params: Vec<_> = params.into_iter().map(|(n, w, s)| (n, w.clone(), vec![0.0f32; w.len()], s)).collect();
    let mut losses = BTreeMap::new();
    for step in 0..STEPS {
        for (name, w, _, shape) in &params {
            feeds.insert(name.clone(), Tensor::new(Dtype::F32, shape.clone(), w.iter().map(|&v| v as f64).collect()));
        }
        let outs: BTreeMap<String, Tensor> = mithrilc::interp::run(&graph, &feeds).unwrap().into_iter().collect();
        losses.insert(step, outs["final_cost"].data[0]);
        for (name, w, v, _) in &mut params {
            let g = &outs[&grad_name(name)].data;
            for i in 0..w.len() {
                v[i] = MOMENTUM * v[i] + g[i] as f32;
                w[i] -= LR * v[i];
            }
        }
    }
    losses
}

/// Runs the train.c built at `exe` and checks its printed losses against the
/// interpreter's, and that the loss falls at least tenfold.
fn check_training(what: &str, exe: &Path, margs: &cli::ModelArgs) {
    let run = Command::new(exe).current_dir(exe.parent().unwrap()).output().unwrap();
    assert!(run.status.success(), "{what}: {}", String::from_utf8_lossy(&run.stderr));
    let losses = printed_losses(&String::from_utf8_lossy(&run.stdout));
    assert!(losses.len() > 10, "{what}: train.c printed: {}", String::from_utf8_lossy(&run.stdout));
    let interp_losses = interpreter_losses(margs);
    let mut worst = 0.0f64;
    for (step, c) in &losses {
        let i = interp_losses[step];
        assert!((c - i).abs() <= 1e-4 + 1e-4 * i.abs(), "step {step}: {what} loss {c}, interpreter {i}");
        worst = worst.max((c - i).abs());
    }
    let (first, last) = (interp_losses[&0], interp_losses[&(STEPS - 1)]);
    println!("loss {first:.6} -> {last:.6} ({:.0}x) over {STEPS} steps; {what} and interpreter within {worst:.1e} at {} steps", first / last, losses.len());
    assert!(first / last >= 10.0, "the loss fell only {:.1}x", first / last);
}

/// The same run through the JIT's training step: the losses of every step match the
/// interpreter's, with no C compiler involved.
#[test]
fn training_in_the_jit_matches_the_interpreter_and_learns() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let margs = cli::ModelArgs { model: root.join("examples/train_mlp/train_mlp.json"), grad: Wrt::AllParams, ..Default::default() };
    let spec = mithrilc::pipeline::ModelSpec { path: margs.model.clone(), grad: Wrt::AllParams, ..Default::default() };
    let graphs = mithrilc::pipeline::load(&spec).unwrap().graphs;
    let (feeds, params) = data_and_weights(&graphs.forward);
    let values: BTreeMap<String, Tensor> = params.iter().map(|(n, w, s)| (n.clone(), Tensor::new(Dtype::F32, s.clone(), w.iter().map(|&v| f64::from(v)).collect()))).collect();
    let mut exe = mithrilc::exec::Jit::new(&graphs, &values, Default::default()).unwrap();
    let want = interpreter_losses(&margs);
    let mut worst = 0.0f64;
    for step in 0..STEPS {
        let loss = exe.train_step(&feeds, f64::from(LR), f64::from(MOMENTUM)).unwrap();
        let i = want[&step];
        assert!((loss - i).abs() <= 1e-4 + 1e-4 * i.abs(), "step {step}: jit loss {loss}, interpreter {i}");
        worst = worst.max((loss - i).abs());
    }
    let (first, last) = (want[&0], want[&(STEPS - 1)]);
    println!("loss {first:.6} -> {last:.6} over {STEPS} steps; jit and interpreter within {worst:.1e} at every step");
    assert!(first / last >= 10.0, "the loss fell only {:.1}x", first / last);
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
    check_training("C", &exe, &margs);
}

/// The Metal target's `_train_step` under emulation: train.c built against the Metal
/// header (its buffers Metal's), linked with the emulated build's objects.
#[test]
fn training_with_metal_matches_the_interpreter_under_emulation() {
    if !have("cc") || !have("c++") || !have("make") {
        common::skip("make and C and C++ compilers are needed (apt-get install make gcc g++)");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("train-mlp");
    let margs = cli::ModelArgs { model: root.join("examples/train_mlp/train_mlp.json"), grad: Wrt::AllParams, ..Default::default() };
    let target = &mithrilc::codegen::metal::backend::MetalTarget;
    let args = cli::CompileArgs { model: margs.clone(), target, out: Some(out.clone()), emit: mithrilc::cli::Emit::Source, ..Default::default() };
    cli::compile(&args).unwrap();
    let make = Command::new("make").current_dir(&out).args(["-s", "train_mlp_host.o", "train_mlp_emu.o", "mithril_metal_emu.o", "simt_emu.o"]).output().unwrap();
    assert!(make.status.success(), "{}", String::from_utf8_lossy(&make.stderr));
    let exe = out.join("train");
    let cc = Command::new("cc").args(["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-O2", "-c", "-I"]).arg(&out).arg(root.join("examples/train_mlp/train.c")).arg("-o").arg(out.join("train.o")).output().unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let link = Command::new("c++").current_dir(&out).args(["train.o", "train_mlp_host.o", "train_mlp_emu.o", "mithril_metal_emu.o", "simt_emu.o", "-pthread", "-o"]).arg(&exe).output().unwrap();
    assert!(link.status.success(), "{}", String::from_utf8_lossy(&link.stderr));
    check_training("Metal (emulated)", &exe, &margs);
}
