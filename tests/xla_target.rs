//! The XLA target on the real toolchain (jax and jaxlib 0.10.2's PJRT CPU client):
//! every conformance case (forward and gradients) and every bench model at each batch
//! is written as HLO, parsed, verified and compiled by XLA (the build), run, and
//! compared with the interpreter within 1e-4 absolute + 1e-4 relative. Skipped, with
//! the reason, where no Python with the pinned jax is found (unless
//! MITHRILC_REQUIRE_TOOLS=1).

use std::path::Path;
use std::sync::Mutex;

use mithrilc::backend::{check_supported, Backend, BuildConfig, EmitOptions};
use mithrilc::cli;
use mithrilc::codegen::xla::backend::XlaTarget;
use mithrilc::ir::parse::parse;

mod common;
#[path = "common/cases.rs"]
mod cases;
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
    let weights = cli::param_weights(&graphs.forward, &cli::feeds(&graphs.forward, &[&params]).unwrap());
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
    assert!(err.contains("MITHRILC_PYTHON=/nonexistent/python3: cannot run it") && err.contains("pip install jax==0.10.2 jaxlib==0.10.2"), "{err}");
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
    let graphs = cli::Graphs { forward: g, backward: None };
    let got = cli::run_target(&XlaTarget, &graphs, &feeds, Path::new("awkward.json"), &BuildConfig::default(), Default::default()).unwrap();
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
        let opts = EmitOptions { source: "train_mlp.json".into(), weights: Some(cli::param_weights(&graph, &weights)), mesh, ..Default::default() };
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
