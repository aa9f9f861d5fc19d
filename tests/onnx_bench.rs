//! The four benchmark models of `../shared/bench` exported to ONNX by the project's own
//! `benches/onnx_export.py` (run here into a scratch directory with the Python of
//! `~/.cache/mithrilc/onnx-1.22.0`, which `.ci/run` installs with onnx and onnxruntime):
//! - each ONNX version, after the passes, is the same graph as the Mithril JSON version
//!   (values numbered in the order the outputs reach them, names of intermediates and
//!   origins left out), at batch 1 and with the batch symbolic: the two frontends make
//!   the same IR of the same model, so every target makes the same code of it;
//! - `mithrilc inspect` reads each with its batch symbolic and counts its parameters;
//! - at batch 1, through the interpreter (its weights replaced by `--params
//!   NAME.safetensors`, which must fit the initializers' names and layouts) and through
//!   the C target (its own initializers), each matches the reference output, the JSON
//!   version's output and ONNX Runtime's, within bench_models.rs's 1e-4 absolute + 1e-4
//!   relative.

use crate::common::{self, c_build};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use mithrilc::cli::{self, ModelArgs, RunArgs};
use mithrilc::data;
use mithrilc::ir::{Graph, Op, ValueId};
use mithrilc::pipeline;
use mithrilc::tensor::Tensor;

const MODELS: [&str; 4] = ["mlp", "lenet", "cnn", "gpt_block"];

fn bench_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench")
}

/// The Python of the cached onnx environment, if it imports onnx.
fn onnx_python() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let python = cache.join("mithrilc/onnx-1.22.0/bin/python");
    let ok = Command::new(&python).args(["-c", "import onnx, numpy"]).output().is_ok_and(|o| o.status.success());
    ok.then_some(python)
}

/// The models exported into a scratch folder (each test its own, removed after it);
/// `Err` says why they cannot be (the caller skips).
fn export() -> Result<tempfile::TempDir, String> {
    if !bench_dir().join("MANIFEST.json").exists() {
        return Err("../shared/bench is not present".into());
    }
    let python = onnx_python().ok_or("onnx is not installed in ~/.cache/mithrilc/onnx-1.22.0 (.ci/run installs it)")?;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a scratch directory");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/onnx_export.py");
    let out = Command::new(python).arg(script).arg(bench_dir()).arg(dir.path()).output().expect("python starts");
    assert!(out.status.success(), "benches/onnx_export.py failed:\n{}", String::from_utf8_lossy(&out.stderr));
    print!("{}", String::from_utf8_lossy(&out.stdout));
    Ok(dir)
}

/// The model's input shape at batch 1 and its parameter count, from MANIFEST.json.
fn manifest(model: &str) -> (Vec<u64>, u64) {
    let text = std::fs::read_to_string(bench_dir().join("MANIFEST.json")).unwrap();
    let m: serde_json::Value = serde_json::from_str(&text).unwrap();
    let shape = m[model]["batches"]["1"]["input_shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
    (shape, m[model]["params"].as_u64().unwrap())
}

/// `graph` printed with its values numbered in the order its outputs reach them (each
/// operand before its user, operands in order), without intermediates' names and
/// origins: the same text for two graphs that compute the same values the same way,
/// whatever order their frontends made the nodes in.
fn canonical(graph: &Graph) -> String {
    fn visit(g: &Graph, v: ValueId, seen: &mut [bool], order: &mut Vec<ValueId>) {
        if std::mem::replace(&mut seen[v.index()], true) {
            return;
        }
        for &a in &g.node(v).args {
            visit(g, a, seen, order);
        }
        order.push(v);
    }
    let (mut seen, mut order) = (vec![false; graph.nodes.len()], Vec::new());
    for o in &graph.outputs {
        visit(graph, o.value, &mut seen, &mut order);
    }
    let mut out = Graph { name: graph.name.clone(), consts: graph.consts.clone(), ..Graph::default() };
    let mut renumber = vec![ValueId(0); graph.nodes.len()];
    for v in order {
        let mut node = graph.node(v).clone();
        node.args = node.args.iter().map(|a| renumber[a.index()]).collect();
        node.origin = None;
        if !matches!(node.op, Op::Input | Op::Param) {
            node.name = None;
        }
        renumber[v.index()] = ValueId(out.nodes.len() as u32);
        out.nodes.push(node);
    }
    out.outputs = graph.outputs.iter().map(|o| mithrilc::ir::Output { value: renumber[o.value.index()], ..o.clone() }).collect();
    mithrilc::ir::print::print(&out)
}

/// The graphs of `model` after the passes, the input's shape given by `shape` (a list
/// of dimensions, `batch` a symbol) where it is given, the parameters' types known
/// from `params` where it is given.
fn load(model: &Path, shape: Option<&str>, params: Option<&Path>) -> pipeline::Loaded {
    let files = params.map(|p| data::read_raw_arrays(p).unwrap());
    let files: Vec<&data::ArrayFile<mithrilc::tensor::RawTensor>> = files.iter().collect();
    let args = ModelArgs { model: model.to_path_buf(), shapes: shape.map(|s| format!("input={s}")).into_iter().collect(), ..Default::default() };
    let spec = args.spec(cli::known_types(&files).unwrap()).unwrap();
    pipeline::load(&spec).unwrap_or_else(|e| panic!("{}: {e}", model.display()))
}

#[test]
fn onnx_versions_are_the_json_versions_graphs() {
    let dir = match export() {
        Ok(d) => d,
        Err(why) => return common::skip(&why),
    };
    let dir = dir.path();
    let bench = bench_dir();
    for model in MODELS {
        let (shape, params) = manifest(model);
        let onnx = dir.join(format!("{model}.onnx"));
        let json = bench.join(format!("{model}.json"));
        let safetensors = bench.join(format!("{model}.safetensors"));

        let report = cli::inspect(&ModelArgs { model: onnx.clone(), ..Default::default() }, None).unwrap_or_else(|e| panic!("inspect {model}.onnx: {e}"));
        let symbolic = format!("input \"input\" : f32[batch, {}]", shape[1..].iter().map(u64::to_string).collect::<Vec<_>>().join(", "));
        assert!(report.contains(&symbolic), "inspect {model}.onnx: no `{symbolic}` in\n{report}");
        let count = params.to_string().as_bytes().rchunks(3).rev().map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join(",");
        assert!(report.contains(&format!("parameter elements: {count}\n")), "inspect {model}.onnx: not {count} parameter elements in\n{report}");

        let b1 = shape.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let symbolic = format!("batch,{}", b1.split_once(',').unwrap().1);
        for (what, json_shape, onnx_shape) in [("batch 1", b1.as_str(), Some(b1.as_str())), ("the batch symbolic", symbolic.as_str(), None)] {
            let want = canonical(&load(&json, Some(json_shape), Some(&safetensors)).graphs.forward);
            let got = canonical(&load(&onnx, onnx_shape, None).graphs.forward);
            assert!(got == want, "{model} at {what}: the ONNX version's graph after the passes is not the JSON version's\n--- JSON\n{want}--- ONNX\n{got}");
        }
        println!("{model}: the ONNX version's graph is the JSON version's (batch 1 and symbolic)");
    }
}

/// Whether `got` is within 1e-4 + 1e-4 |want| of `want` everywhere: the largest error,
/// or what differs.
fn close(label: &str, got: &Tensor, want: &Tensor) -> Result<f64, String> {
    if got.shape != want.shape {
        return Err(format!("{label}: shape {:?}, expected {:?}", got.shape, want.shape));
    }
    let mut worst = 0.0f64;
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        let err = (g - w).abs();
        if !(err <= 1e-4 + 1e-4 * w.abs()) {
            return Err(format!("{label}: element {i} is {g}, expected {w}"));
        }
        worst = worst.max(err);
    }
    Ok(worst)
}

/// The one array of an `.npy` file.
fn npy(path: &Path) -> Tensor {
    data::read_arrays(path).unwrap_or_else(|e| panic!("{e}")).arrays.into_values().next().unwrap()
}

/// The model's one output through the interpreter on `input`, its parameters from
/// `params` when given (else the model file's own).
fn interpret(model: &Path, input: &Path, params: Option<&Path>) -> Result<Tensor, String> {
    let args = RunArgs {
        target: cli::RunTarget::Interp,
        check: false,
        emulate: false,
        precision: Default::default(),
        gemm: Default::default(),
        accumulate: None,
        quantize: Default::default(),
        model: ModelArgs { model: model.to_path_buf(), ..Default::default() },
        data: vec![format!("input={}", input.display())],
        params: params.map(Path::to_path_buf),
        output: None,
        triple: None,
        no_cache: false,
        threads: None,
        repeat: None,
    };
    let (mut outputs, _) = cli::run(&args).map_err(|e| format!("{}: {e}", model.display()))?;
    match outputs.pop() {
        Some((name, t)) if outputs.is_empty() && name == "output" => Ok(t),
        _ => Err(format!("{}: not the one output `output`", model.display())),
    }
}

#[test]
fn onnx_versions_match_the_reference_the_json_versions_and_onnx_runtime() {
    let dir = match export() {
        Ok(d) => d,
        Err(why) => return common::skip(&why),
    };
    let dir = dir.path();
    let Some(tc) = c_build::toolchain(&["-O2".to_string()]) else {
        return common::skip("a C compiler is needed (apt-get install gcc, or set CC)");
    };
    let python = onnx_python().expect("export() found it");
    let has_ort = Command::new(&python).args(["-c", "import onnxruntime"]).output().is_ok_and(|o| o.status.success());
    if !has_ort {
        common::skip("onnxruntime is not installed in ~/.cache/mithrilc/onnx-1.22.0 (.ci/run installs it): ONNX Runtime's outputs are not compared");
    }
    let bench = bench_dir();
    let measured = Mutex::new(Vec::new());
    let failures = common::each_case(&MODELS, |&model| {
        let (shape, _) = manifest(model);
        let onnx = dir.join(format!("{model}.onnx"));
        let input = bench.join(format!("{model}_b1_input.npy"));
        let safetensors = bench.join(format!("{model}.safetensors"));
        let reference = npy(&bench.join(format!("{model}_b1_output.npy")));
        let json_out = interpret(&bench.join(format!("{model}.json")), &input, Some(&safetensors))?;
        let interp_out = interpret(&onnx, &input, Some(&safetensors))?;

        // The C target, with the weights the ONNX file carries.
        let b1 = shape.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let loaded = load(&onnx, Some(&b1), None);
        let target = &mithrilc::codegen::c::backend::CTarget;
        let graphs = pipeline::for_target(target, &loaded.graphs, &[]).map_err(|e| format!("{model}: {e}"))?;
        let mut feeds: BTreeMap<String, Tensor> = loaded.weights.iter().map(|(n, t)| (n.clone(), t.to_tensor())).collect();
        feeds.insert("input".into(), npy(&input));
        let mut outputs = c_build::run_c(tc, &graphs, &feeds, &tc.dir.path().join(format!("{model}_onnx")))?;
        let c_out = match outputs.pop() {
            Some((name, t)) if outputs.is_empty() && name == "output" => t,
            _ => return Err(format!("{model}: the C program has not the one output `output`")),
        };

        let mut line = format!("{model} b1, largest error:");
        for (what, got) in [("interpreter", &interp_out), ("C", &c_out)] {
            let r = close(&format!("{model} b1 ONNX, {what}, against the reference"), got, &reference)?;
            let j = close(&format!("{model} b1 ONNX, {what}, against the JSON version"), got, &json_out)?;
            line += &format!(" {what} {r:.2e} (reference), {j:.2e} (JSON version);");
        }
        if has_ort {
            let out = tc.dir.path().join(format!("{model}_ort.npy"));
            let run = "import sys, numpy as np, onnxruntime as ort\n\
                       s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n\
                       np.save(sys.argv[3], s.run(None, {'input': np.load(sys.argv[2])})[0])";
            let ran = Command::new(&python).args(["-c", run]).arg(&onnx).arg(&input).arg(&out).output().map_err(|e| e.to_string())?;
            if !ran.status.success() {
                return Err(format!("{model}: ONNX Runtime failed: {}", String::from_utf8_lossy(&ran.stderr)));
            }
            let ort_out = npy(&out);
            let o = close(&format!("{model} b1 ONNX, C, against ONNX Runtime"), &c_out, &ort_out)?;
            let oi = close(&format!("{model} b1 ONNX, interpreter, against ONNX Runtime"), &interp_out, &ort_out)?;
            line += &format!(" ONNX Runtime: C {o:.2e}, interpreter {oi:.2e}");
        }
        measured.lock().unwrap().push(line);
        Ok(())
    });
    let mut measured = measured.into_inner().unwrap();
    measured.sort();
    println!("{}", measured.join("\n"));
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
    assert_eq!(measured.len(), MODELS.len());
}
