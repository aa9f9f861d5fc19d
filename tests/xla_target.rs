//! The XLA target on the real toolchain (jax and jaxlib 0.10.2's PJRT CPU client):
//! every conformance case (forward and gradients) and every bench model at each batch
//! is written as HLO, every module parsed, verified and compiled by XLA, run, and
//! compared with the interpreter within 1e-4 absolute + 1e-4 relative. Skipped, with
//! the reason, where no Python with the pinned jax is found (unless
//! MITHRILC_REQUIRE_TOOLS=1).

use std::path::Path;
use std::sync::Mutex;

use mithrilc::backend::{check_supported, Backend, BuildConfig, EmitOptions};
use mithrilc::cli;
use mithrilc::codegen::xla::backend::XlaTarget;
use mithrilc::ir::parse::parse;

use crate::common::{self, cases};
use cases::{cases, matches_interpreter, shared, Worst};
use common::each_case;

/// `../shared`, when it and a Python with the pinned jax are present; otherwise says
/// why the test is skipped.
fn ready() -> Option<std::path::PathBuf> {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return None;
    };
    if let Err(e) = mithrilc::codegen::xla::toolchain::python() {
        common::skip(&e.to_string().replace('\n', " "));
        return None;
    }
    Some(dir)
}

#[test]
fn every_model_matches_the_interpreter_through_pjrt() {
    let Some(dir) = ready() else { return };
    let started = std::time::Instant::now();
    let all = cases(&dir);
    let worst = Worst::default();
    let build = BuildConfig::default();
    let failures = each_case(&all, |case| matches_interpreter(&XlaTarget, case, &case.graphs, &build, &worst));
    let (err, label) = worst.get();
    println!(
        "{} of {} models run through PJRT match the interpreter; worst abs error {err:.2e} ({label}); {:.0} s",
        all.len() - failures.len(),
        all.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// Every node the target cannot write is reported at once, one line each, before
/// anything is written.
#[test]
fn nodes_the_target_lacks_are_listed_together() {
    let g = parse(
        "graph g {\n  %0 = input \"p\" : bool[2]\n  %1 = input \"q\" : bool[2]\n  %2 = add %0, %1 : bool[2]\n  %3 = and %2, %1 : bool[2]\n  %4 = mul %3, %0 : bool[2]\n  output \"z\" = %4\n}\n",
    )
    .unwrap();
    let e = check_supported(&XlaTarget, &g).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the xla target cannot compile 2 nodes of the model:\n  add bool[2] (%2): no add of bool values in HLO\n  mul bool[2] (%4): no mul of bool values in HLO\n  note: ops it cannot compile here: add, mul"
    );
    let sym = parse("graph g {\n  %0 = input \"x\" : f32[B,3]\n  %1 = relu %0 : f32[B,3]\n  output \"y\" = %1\n}\n").unwrap();
    let e = check_supported(&XlaTarget, &sym).unwrap_err();
    assert!(e.to_string().contains("input f32[B, 3] `x` (%0): HLO shapes are static: give dimension B a size (--shape)"), "{e}");
}

/// The artifact's files: the same bytes from the same model, every instruction naming
/// the model op it came from, the weights under the model's parameter names.
#[test]
fn the_artifact_is_deterministic_and_names_the_model_ops() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = root.join("examples/mlp/mlp.json");
    let params = mithrilc::data::read_arrays(&root.join("examples/mlp/data.npz")).unwrap();
    let margs = cli::ModelArgs { model: model.clone(), grad: mithrilc::passes::autodiff::Wrt::AllParams, ..Default::default() };
    let graphs = cli::load_graphs(&margs, &[&params]).unwrap();
    let weights = mithrilc::exec::param_weights(&graphs.forward, &cli::feeds(&graphs.forward, &[&params]).unwrap());
    let opts = EmitOptions { source: "mlp.json".into(), weights: Some(weights), ..Default::default() };
    let a = XlaTarget.emit(&graphs, &opts).unwrap();
    let b = XlaTarget.emit(&graphs, &opts).unwrap();
    assert_eq!(a.files, b.files);
    let names: Vec<&str> = a.files.iter().map(|(n, _)| n.as_str()).collect();
    let stem = a.entry.name.clone();
    assert_eq!(names, [format!("{stem}.hlo"), format!("{stem}_backward.hlo"), "manifest.json".into(), format!("{stem}.safetensors"), "run_hlo.py".into()]);
    let hlo = String::from_utf8(a.files[0].1.clone()).unwrap();
    let body: Vec<&str> = hlo.lines().filter(|l| l.contains(" = ") && !l.contains("ROOT outputs") && !l.contains("parameter(")).filter(|l| l.starts_with("  v")).collect();
    assert!(!body.is_empty());
    for l in &body {
        assert!(l.contains("metadata={op_name=\"%") && l.contains("source_file=\"mlp.json\""), "{l}");
    }
    let st = a.files.iter().find(|(n, _)| n.ends_with(".safetensors")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("w.safetensors"), &st.1).unwrap();
    let read = mithrilc::data::read_arrays(&tmp.path().join("w.safetensors")).unwrap();
    let want: Vec<String> = graphs.forward.params().map(|v| graphs.forward.node(v).name.clone().unwrap()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    assert_eq!(read.arrays.keys().cloned().collect::<Vec<_>>(), want);
}

/// Without a Python that has the pinned jax, `run --target xla` stops with a toolchain
/// error (exit 3) that gives the install command.
#[test]
fn a_missing_jax_is_a_toolchain_error() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mithrilc"))
        .args(["run", "--target", "xla", "--data"])
        .arg(root.join("examples/mlp/data.npz"))
        .arg("--params")
        .arg(root.join("examples/mlp/data.npz"))
        .arg(root.join("examples/mlp/mlp.json"))
        .env("MITHRILC_PYTHON", "/nonexistent/python3")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("MITHRILC_PYTHON=/nonexistent/python3: cannot run it") && err.contains("pip install jax==0.10.2 jaxlib==0.10.2 safetensors==0.8.0 numpy==2.4.6"), "{err}");
}

/// A Python with the pinned jax but no safetensors (whose reader the runner reads
/// weights with) is refused as the toolchain's error (exit 3) naming what it lacks and
/// giving the install command, before anything runs.
#[test]
fn a_python_without_safetensors_is_a_toolchain_error() {
    use std::os::unix::fs::PermissionsExt;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    // Answers the version query as a Python with jax and jaxlib 0.10.2 and no safetensors.
    let python = tmp.path().join("python3");
    std::fs::write(&python, "#!/bin/sh\nprintf '0.10.2\\n0.10.2\\nnone\\n'\n").unwrap();
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mithrilc"))
        .args(["run", "--target", "xla", "--data"])
        .arg(root.join("examples/mlp/data.npz"))
        .arg(root.join("examples/mlp/mlp.json"))
        .env("MITHRILC_PYTHON", &python)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(
        err,
        format!(
            "error: MITHRILC_PYTHON={}: it has no safetensors\n  note: install it: python3 -m venv {cache}/mithrilc/jax-0.10.2 && {cache}/mithrilc/jax-0.10.2/bin/pip install jax==0.10.2 jaxlib==0.10.2 safetensors==0.8.0 numpy==2.4.6 (or set MITHRILC_PYTHON to a Python that has them)\n",
            python.display(),
            cache = std::env::var("XDG_CACHE_HOME").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| format!("{}/.cache", std::env::var("HOME").unwrap())),
        )
    );
}

/// The ops whose meaning HLO spells differently from the interpreter, on awkward
/// values: floor division of negative integers and by zero, arg-max ties and NaNs,
/// negative gather indices, negative slice steps, casts of NaN and negatives, shifts
/// out of range, reductions of integers and bools, a rank-1 batched product, padded
/// and dilated pooling. One module with an output each, run once.
#[test]
fn awkward_values_match_the_interpreter() {
    if ready().is_none() {
        return;
    }
    let g = parse(
        "graph awkward {
  %0 = input \"x\" : f32[2, 4]
  %1 = input \"a\" : i64[6]
  %2 = input \"b\" : i64[6]
  %3 = input \"k\" : i64[3]
  %4 = input \"v\" : f32[4]
  %5 = input \"m\" : f32[3, 4, 2]
  %6 = floordiv %1, %2 : i64[6]
  %7 = argmax %0 {axis = 1, keepdim = false} : i64[2]
  %8 = argmin %0 {axis = none, keepdim = true} : i64[1, 1]
  %9 = gather %0, %3 {axis = 1} : f32[2, 3]
  %10 = slice %0 {ranges = [::-1, 3:0:-2]} : f32[2, 2]
  %11 = cast %0 {to = i32} : i32[2, 4]
  %12 = cast %0 {to = bool} : bool[2, 4]
  %13 = shl %1, %2 : i64[6]
  %14 = shr %1, %2 : i64[6]
  %15 = isnan %0 : bool[2, 4]
  %16 = where %15, %11, %0 : f32[2, 4]
  %17 = gelu %0 : f32[2, 4]
  %18 = gelu_tanh %0 : f32[2, 4]
  %19 = softplus %0 : f32[2, 4]
  %20 = sign %1 : i64[6]
  %21 = reduce_max %1 {axes = [0], keepdim = false} : i64[]
  %22 = reduce_sum %12 {axes = [1], keepdim = true} : bool[2, 1]
  %23 = variance %0 {axes = [1], keepdim = false, correction = 1} : f32[2]
  %24 = matmul %4, %5 : f32[3, 2]
  %25 = div %1, %2 : f32[6]
  %26 = pad %0 {pads = [(1, 0), (0, 2)], value = -1.5} : f32[3, 6]
  %27 = avg_pool %0 {kernel = [2], stride = [1], padding = [(1, 1)], dilation = [2]} : f32[2, 4]
  %28 = max_pool %0 {kernel = [3], stride = [2], padding = [(1, 1)], dilation = [1]} : f32[2, 2]
  %29 = reduce_mean %1 {axes = [0], keepdim = true} : f32[1]
  %30 = floor %1 : i64[6]
  %31 = relu %1 : i64[6]
  output \"floordiv\" = %6
  output \"argmax\" = %7
  output \"argmin\" = %8
  output \"gather\" = %9
  output \"slice\" = %10
  output \"cast_i32\" = %11
  output \"cast_bool\" = %12
  output \"shl\" = %13
  output \"shr\" = %14
  output \"where\" = %16
  output \"gelu\" = %17
  output \"gelu_tanh\" = %18
  output \"softplus\" = %19
  output \"sign\" = %20
  output \"max_int\" = %21
  output \"any\" = %22
  output \"variance\" = %23
  output \"matvec\" = %24
  output \"div\" = %25
  output \"pad\" = %26
  output \"avg_pool\" = %27
  output \"max_pool\" = %28
  output \"mean_int\" = %29
  output \"floor_int\" = %30
  output \"relu_int\" = %31
}
",
    )
    .unwrap();
    mithrilc::ir::verify::verify(&g).unwrap();
    use mithrilc::ir::Dtype;
    use mithrilc::tensor::Tensor;
    let t = |d: Dtype, shape: &[u64], data: &[f64]| Tensor::new(d, shape.to_vec(), data.to_vec());
    let feeds = [
        ("x", t(Dtype::F32, &[2, 4], &[1.0, 3.0, 3.0, f64::NAN, 5.0, -2.0, 5.0, -2.75])),
        ("a", t(Dtype::I64, &[6], &[7.0, -7.0, 7.0, -7.0, 5.0, 1.0])),
        ("b", t(Dtype::I64, &[6], &[2.0, 2.0, -2.0, -2.0, 0.0, 70.0])),
        ("k", t(Dtype::I64, &[3], &[-1.0, 0.0, -4.0])),
        ("v", t(Dtype::F32, &[4], &[0.5, -1.0, 2.0, 0.25])),
        ("m", t(Dtype::F32, &[3, 4, 2], &(0..24).map(|i| f64::from(i) / 8.0 - 1.0).collect::<Vec<_>>())),
    ]
    .into_iter()
    .map(|(n, t)| (n.to_string(), t))
    .collect();
    let want = mithrilc::interp::run(&g, &feeds).unwrap();
    let graphs = mithrilc::pipeline::Graphs { forward: g, backward: None };
    let got = mithrilc::exec::run_once(&XlaTarget, &graphs, &feeds, Path::new("awkward.json"), &BuildConfig::default(), Default::default()).unwrap();
    let (bad, _) = cases::compare("awkward", &got, &want, 1e-6);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The writer's golden module (`src/codegen/xla/testdata/tiny.hlo`, checked byte for
/// byte by the writer's unit test) is HLO that XLA parses and verifies.
#[test]
fn the_golden_module_is_valid_hlo() {
    if ready().is_none() {
        return;
    }
    let python = mithrilc::codegen::xla::toolchain::python().unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/codegen/xla/testdata/tiny.hlo");
    let script = "import sys\nfrom jax._src.lib import xla_client\nm = xla_client.hlo.hlo_module_from_text(open(sys.argv[1]).read())\nprint(m.name)";
    let out = std::process::Command::new(python).args(["-c", script]).arg(&golden).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "tiny");
}

/// `compile --mesh`: bench models partitioned over 4 virtual CPU devices, data
/// parallel (`data=4`) and data and tensor parallel (`data=2,model=2`, the Linear
/// weights split by output features), give the interpreter's outputs within 1e-4 and
/// the unpartitioned module's within 1e-5; the module XLA compiled holds collectives,
/// so it really was partitioned.
#[test]
fn a_mesh_partitions_the_module_and_computes_the_same() {
    let Some(dir) = ready() else { return };
    let python = mithrilc::codegen::xla::toolchain::python().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let runs: Vec<(&str, u64, Option<&str>)> = vec![
        ("mlp", 32, None),
        ("mlp", 32, Some("data=4")),
        ("mlp", 32, Some("data=2,model=2")),
        ("lenet", 32, None),
        ("lenet", 32, Some("data=4")),
        ("gpt_block", 8, None),
        ("gpt_block", 8, Some("data=2,model=2")),
    ];
    let outputs = Mutex::new(std::collections::BTreeMap::new());
    let failures = each_case(&runs, |&(model, batch, mesh)| {
        let label = format!("{model} b{batch} mesh {}", mesh.unwrap_or("none"));
        let input = dir.join(format!("bench/{model}_b{batch}_input.npy"));
        let big = mithrilc::data::read_arrays(&input).unwrap();
        let shape: Vec<String> = big.arrays.values().next().unwrap().shape.iter().map(|d| d.to_string()).collect();
        let out = tmp.path().join(label.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
        let args = cli::CompileArgs {
            model: cli::ModelArgs { model: dir.join(format!("bench/{model}.json")), shapes: vec![format!("input={}", shape.join(","))], ..Default::default() },
            target: &XlaTarget,
            params: Some(dir.join(format!("bench/{model}.safetensors"))),
            out: Some(out.clone()),
            mesh: mesh.map(str::to_string),
            ..Default::default()
        };
        cli::compile(&args).map_err(|e| format!("{label}: {e}"))?;
        let run = std::process::Command::new(&python)
            .arg(out.join("run_hlo.py"))
            .arg("--input")
            .arg(format!("input={}", input.display()))
            .arg("--out")
            .arg(&out)
            .arg("--print-compiled")
            .output()
            .unwrap();
        if !run.status.success() {
            return Err(format!("{label}: {}", String::from_utf8_lossy(&run.stderr)));
        }
        let compiled = String::from_utf8_lossy(&run.stdout);
        let collectives = ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"];
        let partitioned = collectives.iter().any(|c| compiled.contains(&format!(" {c}(")));
        if partitioned != mesh.is_some() {
            return Err(format!("{label}: the compiled module {} collectives", if partitioned { "has" } else { "has no" }));
        }
        let got = mithrilc::data::read_arrays(&out.join("output_0.npy")).unwrap().arrays.into_values().next().unwrap();
        let files = [&mithrilc::data::read_arrays(&dir.join(format!("bench/{model}.safetensors"))).unwrap(), &{
            let mut f = big.clone();
            f.arrays = [("input".to_string(), f.arrays.values().next().unwrap().clone())].into_iter().collect();
            f
        }];
        let case = cases::load(&dir.join(format!("bench/{model}.json")), &files, vec![], mithrilc::passes::autodiff::Wrt::None, label.clone());
        let want = mithrilc::interp::run(case.graph(), &case.feeds).unwrap();
        let got = vec![("output".to_string(), got)];
        let (bad, _) = cases::compare(&label, &got, &want, 1e-4);
        outputs.lock().unwrap().insert((model, mesh.is_some(), mesh.unwrap_or("")), got);
        if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
    });
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
    let outputs = outputs.into_inner().unwrap();
    for ((model, sharded, mesh), got) in &outputs {
        if *sharded {
            let plain = &outputs[&(*model, false, "")];
            let (bad, err) = cases::compare(&format!("{model} {mesh} vs one device"), got, plain, 1e-5);
            assert!(bad.is_empty(), "{}", bad.join("\n"));
            println!("{model} over {mesh}: largest difference from one device {err:.1e}");
        }
    }
}

/// The training step (`<name>_train_step.hlo`, a model with a loss compiled with
/// `--grad`): examples/train_mlp trained for 30 steps by the runner gives the losses and
/// weights of the same SGD-with-momentum run in the interpreter, and the same losses
/// partitioned over 4 devices (`--mesh data=2,model=2`).
#[test]
fn the_training_step_trains_as_the_interpreter_does() {
    if ready().is_none() {
        return;
    }
    use mithrilc::ir::Dtype;
    use mithrilc::passes::autodiff::{grad_name, Wrt};
    use mithrilc::tensor::Tensor;
    const STEPS: usize = 30;
    let (lr, momentum) = (0.02f64, 0.9f64);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let margs = cli::ModelArgs { model: root.join("examples/train_mlp/train_mlp.json"), grad: Wrt::AllParams, ..Default::default() };
    let graphs = cli::load_graphs(&margs, &[]).unwrap();
    let graph = graphs.main().clone();
    let mut state = 0x2545F4914F6CDD1Du64;
    let mut uniform = || (common::xorshift64(&mut state) >> 40) as f64 / 8388608.0 - 1.0;
    let mut feeds = std::collections::BTreeMap::new();
    let x: Vec<f64> = (0..96 * 2).map(|_| 2.0 * uniform()).collect();
    feeds.insert("input".to_string(), Tensor::new(Dtype::F32, vec![96, 2], x));
    feeds.insert("target".to_string(), Tensor::new(Dtype::I32, vec![96], (0..96).map(|i| f64::from(i % 3)).collect()));
    let mut weights = std::collections::BTreeMap::new();
    for p in graph.params() {
        let shape = graph.ty(p).shape.as_known().unwrap();
        let data = (0..shape.iter().product::<u64>()).map(|_| 0.5 * uniform()).collect();
        weights.insert(graph.node(p).name.clone().unwrap(), Tensor::new(Dtype::F32, shape, data));
    }
    let tmp = tempfile::tempdir().unwrap();
    // Trains on one device, or partitioned over `mesh`, in `dir`; returns the losses.
    let train = |mesh: Vec<(String, u64)>, dir: &Path| {
        let opts = EmitOptions { source: "train_mlp.json".into(), weights: Some(mithrilc::exec::param_weights(&graph, &weights)), mesh, ..Default::default() };
        let emitted = XlaTarget.emit(&graphs, &opts).unwrap();
        std::fs::create_dir_all(dir).unwrap();
        for (name, bytes) in &emitted.files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        let mut cmd = std::process::Command::new(mithrilc::codegen::xla::toolchain::python().unwrap());
        cmd.arg(dir.join("run_hlo.py")).args(["--module", "train_step", "--steps", &STEPS.to_string(), "--lr", &lr.to_string(), "--momentum", &momentum.to_string(), "--out"]).arg(dir);
        for name in ["input", "target"] {
            let path = dir.join(format!("{name}.npy"));
            mithrilc::data::write_npy(&path, &feeds[name]).unwrap();
            cmd.arg("--input").arg(format!("{name}={}", path.display()));
        }
        let run = cmd.output().unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        (emitted.entry, mithrilc::data::read_arrays(&dir.join("losses.npy")).unwrap().arrays.into_values().next().unwrap())
    };
    let (entry, losses) = train(Vec::new(), tmp.path());
    // Data and tensor parallel over 4 devices: the same losses.
    let (_, sharded) = train(mithrilc::codegen::xla::mesh::parse("data=2,model=2").unwrap(), &tmp.path().join("mesh"));
    let (bad, _) = cases::compare("sharded training", &[("losses".into(), sharded)], &[("losses".into(), losses.clone())], 1e-5);
    assert!(bad.is_empty(), "{}", bad.join("\n"));

    // The same run in the interpreter, in f32 as the step computes.
    let mut velocity: std::collections::BTreeMap<String, Vec<f64>> = weights.iter().map(|(n, t)| (n.clone(), vec![0.0; t.data.len()])).collect();
    let mut want = Vec::new();
    for _ in 0..STEPS {
        feeds.extend(weights.clone());
        let outs: std::collections::BTreeMap<String, Tensor> = mithrilc::interp::run(&graph, &feeds).unwrap().into_iter().collect();
        want.push(outs[&graph.outputs.iter().find(|o| o.loss).unwrap().name].data[0]);
        for (name, w) in weights.iter_mut() {
            let g = &outs[&grad_name(name)].data;
            let v = velocity.get_mut(name).unwrap();
            for i in 0..w.data.len() {
                v[i] = f64::from((momentum as f32) * v[i] as f32 + g[i] as f32);
                w.data[i] = f64::from(w.data[i] as f32 - (lr as f32) * v[i] as f32);
            }
        }
    }
    assert_eq!(losses.data.len(), STEPS);
    for (step, (got, want)) in losses.data.iter().zip(&want).enumerate() {
        assert!((got - want).abs() <= 1e-4 + 1e-4 * want.abs(), "step {step}: XLA loss {got}, interpreter {want}");
    }
    assert!(want[STEPS - 1] < want[0], "the loss did not fall: {want:?}");
    // The last step's new weights are outputs 1..: the interpreter's after STEPS steps.
    let stem = &entry.name;
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(tmp.path().join("manifest.json")).unwrap()).unwrap();
    let outputs = manifest["modules"]["train_step"]["outputs"].as_array().unwrap();
    assert!(std::fs::read_to_string(tmp.path().join(format!("{stem}_train_step.hlo"))).unwrap().contains("op_name=\"sgd step\""));
    for (i, name) in outputs.iter().enumerate().skip(1).take(weights.len()) {
        let got = mithrilc::data::read_arrays(&tmp.path().join(format!("output_{i}.npy"))).unwrap().arrays.into_values().next().unwrap();
        let name = name.as_str().unwrap().to_string();
        let (bad, _) = cases::compare(&name, &[(name.clone(), got)], &[(name.clone(), weights[&name].clone())], 1e-4);
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
}

/// `--mesh` is the XLA target's: another target, or a malformed mesh, is a usage error.
#[test]
fn a_mesh_for_another_target_or_malformed_is_a_usage_error() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let args = |target: &'static dyn Backend, mesh: &str| cli::CompileArgs {
        model: cli::ModelArgs { model: root.join("examples/mlp/mlp.json"), ..Default::default() },
        target,
        params: Some(root.join("examples/mlp/data.npz")),
        out: Some(tmp.path().join("out")),
        emit: mithrilc::cli::Emit::Source,
        mesh: Some(mesh.into()),
        ..Default::default()
    };
    let e = cli::compile(&args(&mithrilc::codegen::c::backend::CTarget, "data=2")).unwrap_err();
    assert_eq!((e.kind, e.to_string()), (mithrilc::error::ErrorKind::Usage, "--mesh partitions over several devices: the c target runs on one (give --target xla)".to_string()));
    let e = cli::compile(&args(&XlaTarget, "data=2,pipe=2")).unwrap_err();
    assert_eq!(e.kind, mithrilc::error::ErrorKind::Usage);
    assert!(e.to_string().starts_with("--mesh data=2,pipe=2: no axis `pipe`"), "{e}");
    assert!(!tmp.path().join("out").exists());
}

/// A model whose two inputs are named `x=y` and `x` (legal names, and `--input
/// x=y=FILE` fits both), with token ids `k` that gather rows of the weight `w`.
const HOSTILE: &str = "graph hostile {
  %0 = input \"x=y\" : f32[2, 3]
  %1 = input \"x\" : f32[2, 3]
  %2 = input \"k\" : i64[2]
  %3 = param \"w\" : f32[4, 3]
  %4 = gather %3, %2 {axis = 0} : f32[2, 3]
  %5 = sub %0, %1 : f32[2, 3]
  %6 = add %5, %4 : f32[2, 3]
  output \"y\" = %6
}
";

/// The values of [`HOSTILE`]'s inputs and weight.
fn hostile_feeds() -> std::collections::BTreeMap<String, mithrilc::tensor::Tensor> {
    use mithrilc::ir::Dtype;
    use mithrilc::tensor::Tensor;
    let f32s = |shape: Vec<u64>, from: f64| Tensor::new(Dtype::F32, shape.clone(), (0..shape.iter().product::<u64>()).map(|i| from + i as f64 * 0.5).collect());
    [("x=y", f32s(vec![2, 3], 1.0)), ("x", f32s(vec![2, 3], -4.0)), ("k", Tensor::new(Dtype::I64, vec![2], vec![3.0, -4.0])), ("w", f32s(vec![4, 3], 10.0))]
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect()
}

/// Writes the artifact of `text` (weights from `feeds`, partitioned over `mesh`) to
/// `dir`; returns its entry.
fn write_artifact(text: &str, feeds: &std::collections::BTreeMap<String, mithrilc::tensor::Tensor>, mesh: &str, dir: &Path) -> mithrilc::backend::Entry {
    let g = parse(text).unwrap();
    let mesh = if mesh.is_empty() { Vec::new() } else { mithrilc::codegen::xla::mesh::parse(mesh).unwrap() };
    let opts = EmitOptions { source: "m.json".into(), weights: Some(mithrilc::exec::param_weights(&g, feeds)), mesh, ..Default::default() };
    let emitted = XlaTarget.emit(&mithrilc::pipeline::Graphs { forward: g, backward: None }, &opts).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    for (name, bytes) in &emitted.files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    emitted.entry
}

/// `run --target xla` of a model with inputs named `x=y` and `x` gives each its own
/// value (mithrilc passes inputs by index), as the interpreter does.
#[test]
fn an_input_named_with_equals_runs_as_the_interpreter_does() {
    if ready().is_none() {
        return;
    }
    let g = parse(HOSTILE).unwrap();
    let feeds = hostile_feeds();
    let want = mithrilc::interp::run(&g, &feeds).unwrap();
    let graphs = mithrilc::pipeline::Graphs { forward: g, backward: None };
    let got = mithrilc::exec::run_once(&XlaTarget, &graphs, &feeds, Path::new("hostile.json"), &BuildConfig::default(), Default::default()).unwrap();
    let (bad, _) = cases::compare("x=y", &got, &want, 0.0);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The bytes of a safetensors file: the 8-byte header length (`length`, or the
/// header's own), the header, the body.
fn safetensors_file(header: &str, length: Option<u64>, body: &[u8]) -> Vec<u8> {
    let mut bytes = length.unwrap_or(header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// A `.npy` file (version 1.0) of `descr`, `shape` and the raw `body`.
fn npy_file(descr: &str, shape: &str, body: &[u8]) -> Vec<u8> {
    common::npy_file(&format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"), body)
}

/// The runner refuses hostile weights, inputs, arguments and output directories with
/// one line on stderr and its documented exit status, before it starts XLA: weights
/// mislabelled, overlapping, with a short or overlong header, or not the model's; token
/// ids that are floats, NaN, bools or strings (never truncated to integers), of the
/// wrong shape, pickled or missing; an `--input` that fits two names; an `--out` that
/// is a file, under a file, or so long that no file fits in it. It writes nowhere
/// without `--out`, and takes `--input-index` and `--input NAME=FILE` for a run.
#[test]
fn the_runner_refuses_hostile_files_in_one_line() {
    if ready().is_none() {
        return;
    }
    let python = mithrilc::codegen::xla::toolchain::python().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, t) = (tmp.path().join("artifact"), tmp.path());
    let feeds = hostile_feeds();
    write_artifact(HOSTILE, &feeds, "", &dir);
    let file = |name: &str, bytes: &[u8]| {
        std::fs::write(t.join(name), bytes).unwrap();
        t.join(name).display().to_string()
    };
    let f32s: Vec<u8> = (0..12).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let i64s = |v: &[i64]| v.iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<u8>>();
    let w = |dtype: &str, shape: &str| format!("{{\"w\":{{\"dtype\":\"{dtype}\",\"shape\":{shape},\"data_offsets\":[0,48]}}}}");
    let i32_labelled = file("i32.safetensors", &safetensors_file(&w("I32", "[4,3]"), None, &f32s));
    let transposed = file("t.safetensors", &safetensors_file(&w("F32", "[3,4]"), None, &f32s));
    let overlapping = "{\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"w\":{\"dtype\":\"F32\",\"shape\":[4,3],\"data_offsets\":[0,48]}}";
    let overlapping = file("overlap.safetensors", &safetensors_file(overlapping, None, &f32s));
    let short = file("short.safetensors", &safetensors_file(&w("F32", "[4,3]"), Some(20), &f32s));
    let overlong = file("long.safetensors", &safetensors_file(&w("F32", "[4,3]"), Some(1 << 40), &f32s));
    let extra = "{\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[48,56]},\"w\":{\"dtype\":\"F32\",\"shape\":[4,3],\"data_offsets\":[0,48]}}";
    let extra = file("extra.safetensors", &safetensors_file(extra, None, &[f32s.clone(), vec![0; 8]].concat()));
    let empty = file("empty.safetensors", b"");
    let npy = |name: &str, feed: &str| {
        mithrilc::data::write_npy(&t.join(name), &feeds[feed]).unwrap();
        t.join(name).display().to_string()
    };
    let (xy, x, k) = (npy("xy.npy", "x=y"), npy("x.npy", "x"), npy("k.npy", "k"));
    let floats = file("kf.npy", &npy_file("<f8", "(2,)", &[1.0f64.to_le_bytes(), 2.5f64.to_le_bytes()].concat()));
    let nan = file("knan.npy", &npy_file("<f8", "(2,)", &[1.0f64.to_le_bytes(), f64::NAN.to_le_bytes()].concat()));
    let bools = file("kb.npy", &npy_file("|b1", "(2,)", &[1, 0]));
    let strings = file("ks.npy", &npy_file("<U1", "(2,)", &[b'a', 0, 0, 0, b'b', 0, 0, 0]));
    let f32_ids = file("k32.npy", &npy_file("<f4", "(2,)", &f32s[..8]));
    let three = file("k3.npy", &npy_file("<i8", "(3,)", &i64s(&[0, 1, 2])));
    let big = file("kbig.npy", &npy_file("<i8", "(2,)", &i64s(&[0, 4])));
    let pickled = file("kobj.npy", &npy_file("|O", "(2,)", b"\x80\x04N."));
    let missing = t.join("nope.npy").display().to_string();
    let a_file = file("a_file", b"");
    // A directory whose path leaves no room for `/output_0.npy` under PATH_MAX (4096).
    let mut long = t.join("long");
    while long.as_os_str().len() < 4090 {
        long.push("d".repeat((4089 - long.as_os_str().len()).clamp(1, 200)));
    }
    std::fs::create_dir_all(&long).unwrap();
    let long = long.display().to_string();
    let good = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["--input-index", &format!("0={xy}"), "--input", &format!("x={x}"), "--input", &format!("k={k}"), "--out", &t.join("out").display().to_string()].map(String::from).to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let with_k = |k: &str| -> Vec<String> { ["--input-index".into(), format!("0={xy}"), "--input".into(), format!("x={x}"), "--input".into(), format!("k={k}"), "--out".into(), t.join("out").display().to_string()].to_vec() };
    let weights = |w: &str| good(&["--weights", w]);
    let out = |o: &str| -> Vec<String> { ["--input-index".into(), format!("0={xy}"), "--input-index".into(), format!("1={x}"), "--input-index".into(), format!("2={k}"), "--out".into(), o.to_string()].to_vec() };
    let inputs = "(inputs: 0 `x=y`, 1 `x`, 2 `k`)";
    let runs: Vec<(Vec<String>, i32, String)> = vec![
        (weights(&i32_labelled), 1, format!("weight `w` is f32[4, 3]: {i32_labelled} holds i32[4, 3]")),
        (weights(&transposed), 1, format!("weight `w` is f32[4, 3]: {transposed} holds f32[3, 4]")),
        (weights(&overlapping), 1, format!("cannot read the weights {overlapping}: Error while deserializing header: invalid offset for tensor `w`")),
        (weights(&short), 1, format!("cannot read the weights {short}: Error while deserializing header: invalid JSON in header: EOF while parsing a value at line 1 column 20")),
        (weights(&overlong), 1, format!("cannot read the weights {overlong}: Error while deserializing header: header too large")),
        (weights(&extra), 1, format!("{extra}: tensor `v` is not a weight of the model (its weights: w)")),
        (weights(&empty), 1, format!("cannot read the weights {empty}: Error while deserializing header: header too small")),
        (with_k(&floats), 1, format!("input `k` is i64[2]: {floats} holds f64[2]")),
        (with_k(&nan), 1, format!("input `k` is i64[2]: {nan} holds f64[2]")),
        (with_k(&bools), 1, format!("input `k` is i64[2]: {bools} holds bool[2]")),
        (with_k(&strings), 1, format!("input `k` is i64[2]: {strings} holds <U1[2]")),
        (with_k(&f32_ids), 1, format!("input `k` is i64[2]: {f32_ids} holds f32[2]")),
        (with_k(&three), 1, format!("input `k` is i64[2]: {three} holds i64[3]")),
        (with_k(&pickled), 1, format!("cannot read {pickled}: Object arrays cannot be loaded when allow_pickle=False")),
        (with_k(&missing), 1, format!("cannot read {missing}: No such file or directory")),
        (with_k(&big), 4, "index 4 at [1] of input `k` is out of range for 4 rows (valid: -4 to 3)".into()),
        (vec!["--input".into(), format!("x=y={xy}"), "--out".into(), "o".into()], 2, format!("--input x=y={xy}: fits the names `x=y` and `x`: give --input-index I=FILE {inputs}")),
        (vec!["--input-index".into(), format!("3={xy}"), "--out".into(), "o".into()], 2, format!("--input-index 3={xy}: no input 3 {inputs}")),
        (vec!["--input-index".into(), format!("x={xy}"), "--out".into(), "o".into()], 2, format!("--input-index x={xy}: expected I=FILE with I the input's index {inputs}")),
        (vec!["--input".into(), format!("z={xy}"), "--out".into(), "o".into()], 2, format!("--input z={xy}: expected NAME=FILE with NAME an input or weight of the module {inputs}")),
        (good(&[]).into_iter().take(6).collect(), 2, "give --out DIR, the directory output_<i>.npy are written to".into()),
        (out(&a_file), 1, format!("--out {a_file}: not a directory")),
        (out(&format!("{a_file}/sub")), 1, format!("--out {a_file}/sub: cannot create it: Not a directory")),
        (out(&long), 1, format!("cannot write {long}/output_0.npy: File name too long")),
        (good(&[]), 0, String::new()),
    ];
    let failures = each_case(&runs, |(args, status, message)| {
        let run = std::process::Command::new(&python).arg(dir.join("run_hlo.py")).args(args).current_dir(t).output().unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        let want = if message.is_empty() { String::new() } else { format!("run_hlo.py: {message}\n") };
        let last = stderr.lines().last().map(|l| format!("{l}\n")).unwrap_or_default();
        // The refusals come before XLA starts, so they are all stderr holds.
        let got = if *status == 0 || args.contains(&long) { last } else { stderr.to_string() };
        if run.status.code() == Some(*status) && got == want {
            Ok(())
        } else {
            Err(format!("{args:?}: exit {:?}, stderr:\n{stderr}\nwanted exit {status}: {want}", run.status.code()))
        }
    });
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
    assert!(!t.join("output_0.npy").exists(), "written without --out");
    let got = mithrilc::data::read_arrays(&t.join("out/output_0.npy")).unwrap().arrays.into_values().next().unwrap();
    let want = mithrilc::interp::run(&parse(HOSTILE).unwrap(), &feeds).unwrap();
    let (bad, _) = cases::compare("hostile", &[("y".into(), got)], &want, 0.0);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// `run --target xla` reads the runner's refusals as mithrilc's errors with its
/// message: data the runner refuses (float token ids, malformed weights) and an index
/// out of range are the user's (exit 1).
#[test]
fn the_runners_refusals_are_errors_in_the_users_data() {
    if ready().is_none() {
        return;
    }
    use mithrilc::error::ErrorKind;
    use mithrilc::ir::Dtype;
    use mithrilc::tensor::Tensor;
    let tmp = tempfile::tempdir().unwrap();
    let feeds = hostile_feeds();
    let run = |feeds: &std::collections::BTreeMap<String, Tensor>, dir: &Path| {
        let entry = write_artifact(HOSTILE, &hostile_feeds(), "", dir);
        XlaTarget.toolchain().run(dir, &BuildConfig::default(), &entry, feeds).unwrap_err()
    };
    let mut floats = feeds.clone();
    floats.insert("k".into(), Tensor::new(Dtype::F64, vec![2], vec![1.0, 2.5]));
    let mut big = feeds.clone();
    big.insert("k".into(), Tensor::new(Dtype::I64, vec![2], vec![9.0, 0.0]));
    let corrupt = tmp.path().join("corrupt");
    write_artifact(HOSTILE, &feeds, "", &corrupt);
    let cases: Vec<(&str, std::collections::BTreeMap<String, Tensor>, String)> = vec![
        ("floats", floats, format!("the compiled model: input `k` is i64[2]: {}/input_2.npy holds f64[2]", tmp.path().join("floats").display())),
        ("big", big, "the compiled model: index 9 at [0] of input `k` is out of range for 4 rows (valid: -4 to 3)".into()),
        ("corrupt", feeds.clone(), format!("the compiled model: cannot read the weights {}/hostile.safetensors: Error while deserializing header: incomplete metadata, file not fully covered", tmp.path().join("corrupt").display())),
    ];
    let failures = each_case(&cases, |(name, feeds, want)| {
        let dir = tmp.path().join(name);
        let e = if *name == "corrupt" {
            let entry = write_artifact(HOSTILE, feeds, "", &dir);
            let weights = dir.join("hostile.safetensors");
            let mut bytes = std::fs::read(&weights).unwrap();
            bytes.extend_from_slice(b"tail");
            std::fs::write(&weights, bytes).unwrap();
            XlaTarget.toolchain().run(&dir, &BuildConfig::default(), &entry, feeds).unwrap_err()
        } else {
            run(feeds, &dir)
        };
        if (e.kind, e.kind.exit_code(), e.to_string()) == (ErrorKind::User, 1, want.clone()) { Ok(()) } else { Err(format!("{name}: {:?} {e}", e.kind)) }
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--mesh` asks for at most 256 devices in all: more is a usage error naming the
/// limit, and the largest meshes, 16 x 16 and 256 on one axis, compile and run a
/// Linear as the interpreter does.
#[test]
fn the_mesh_is_bounded_and_its_largest_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let args = cli::CompileArgs {
        model: cli::ModelArgs { model: root.join("examples/mlp/mlp.json"), ..Default::default() },
        target: &XlaTarget,
        params: Some(root.join("examples/mlp/data.npz")),
        out: Some(tmp.path().join("out")),
        mesh: Some("data=4096,model=4096".into()),
        ..Default::default()
    };
    let e = cli::compile(&args).unwrap_err();
    assert_eq!(
        (e.kind, e.to_string()),
        (
            mithrilc::error::ErrorKind::Usage,
            "--mesh data=4096,model=4096: `4096` is not a device count from 1 to 256 (expected AXIS=N,..., axes data and model, e.g. data=2,model=2)".to_string()
        )
    );
    let e = cli::compile(&cli::CompileArgs { mesh: Some("data=32,model=16".into()), ..args }).unwrap_err();
    assert_eq!(e.to_string(), "--mesh data=32,model=16: 512 devices, more than the 256 the runner builds (expected AXIS=N,..., axes data and model, e.g. data=2,model=2)");
    assert!(!tmp.path().join("out").exists());
    if ready().is_none() {
        return;
    }
    use mithrilc::ir::Dtype;
    use mithrilc::tensor::Tensor;
    let linear = "graph linear {\n  %0 = input \"x\" : f32[256, 32]\n  %1 = param \"w\" : f32[32, 32]\n  %2 = transpose %1 {perm = [1, 0]} : f32[32, 32]\n  %3 = matmul %0, %2 : f32[256, 32]\n  output \"y\" = %3\n}\n";
    let feeds: std::collections::BTreeMap<String, Tensor> = [
        ("x".to_string(), Tensor::new(Dtype::F32, vec![256, 32], (0..256 * 32).map(|i| f64::from(i % 7) - 3.0).collect())),
        ("w".to_string(), Tensor::new(Dtype::F32, vec![32, 32], (0..32 * 32).map(|i| f64::from(i % 5) * 0.25).collect())),
    ]
    .into_iter()
    .collect();
    let want = mithrilc::interp::run(&parse(linear).unwrap(), &feeds).unwrap();
    let failures = each_case(&["data=16,model=16", "data=256"], |mesh| {
        let dir = tmp.path().join(mesh.replace([',', '='], "_"));
        let entry = write_artifact(linear, &feeds, mesh, &dir);
        let got = XlaTarget.toolchain().run(&dir, &BuildConfig::default(), &entry, &feeds).map_err(|e| format!("{mesh}: {e}"))?;
        let (bad, _) = cases::compare(mesh, &got, &want, 1e-5);
        if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
