//! Checkpoints in another float type than the model's: each bench model's weights
//! rounded to f16 and to bf16 (to nearest, ties to even) and saved as safetensors, as
//! most published checkpoints are, compile for the f32 C target and run. The library
//! gives the interpreter's outputs on the same rounded weights (it converts them on load
//! exactly as the compiler does), and both say how many parameters they converted.
//! Compiling a model takes about its weights file in memory, not the f64 copy it took.

use std::process::Command;

use mithrilc::cli::{self, CompileArgs, ModelArgs, RunArgs};
use mithrilc::data;
use mithrilc::ir::Dtype;
use mithrilc::tensor::Tensor;

use crate::common::{self, cases};

/// The peak resident set of `cmd` (run here, which must succeed). Measured by a small
/// Python parent from its child's rusage: a process's own `ru_maxrss` starts at its
/// parent's resident set (Linux counts the pages it was spawned with, at exec), and this
/// test process holds the models of the tests running beside it.
#[cfg(target_os = "linux")]
fn peak_resident(cmd: &Command, what: &str) -> u64 {
    const MEASURE: &str = "import resource, subprocess, sys\n\
                           code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n\
                           print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n\
                           sys.exit(code)";
    let mut python = Command::new("python3");
    python.args(["-c", MEASURE]).arg(cmd.get_program()).args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        python.current_dir(dir);
    }
    let out = python.output().expect("python3 runs");
    assert!(out.status.success(), "{what} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    // ru_maxrss is in kilobytes on Linux.
    String::from_utf8_lossy(&out.stdout).trim().parse::<u64>().expect("a size from python3") * 1024
}

/// `params` with every float array rounded to `dtype`, as safetensors bytes.
fn rounded_checkpoint(params: &data::ArrayFile, dtype: Dtype) -> Vec<u8> {
    let arrays: Vec<(String, Tensor)> =
        params.arrays.iter().map(|(name, t)| (name.clone(), Tensor::new(dtype, t.shape.clone(), t.data.clone()))).collect();
    data::safetensors_bytes(&arrays).unwrap()
}

#[test]
fn half_precision_checkpoints_of_every_bench_model_compile_and_run() {
    let Some(dir) = cases::shared_with_build() else { return };
    let bench = dir.join("bench");
    for model in ["mlp", "lenet", "cnn", "gpt_block"] {
        let params = data::read_arrays(&bench.join(format!("{model}.safetensors"))).unwrap();
        let input_path = bench.join(format!("{model}_b1_input.npy"));
        let input = data::read_arrays(&input_path).unwrap();
        let shape: Vec<String> = input.arrays[0].shape.iter().map(u64::to_string).collect();
        for (dtype, name) in [(Dtype::F16, "f16"), (Dtype::Bf16, "bf16")] {
            let label = format!("{model} {name}");
            let tmp = tempfile::tempdir().unwrap();
            let checkpoint = tmp.path().join(format!("{model}_{name}.safetensors"));
            std::fs::write(&checkpoint, rounded_checkpoint(&params, dtype)).unwrap();
            let note = format!("note: converted {} parameters from {name} to f32 on load\n", params.arrays.len());
            let model_args = ModelArgs { model: bench.join(format!("{model}.json")), shapes: vec![format!("input={}", shape.join(","))], ..Default::default() };

            let out = tmp.path().join("out");
            let args = CompileArgs { model: model_args.clone(), params: Some(checkpoint.clone()), out: Some(out.clone()), cflags: Some("-O2".into()), ..Default::default() };
            let report = cli::compile(&args).unwrap_or_else(|e| panic!("{label}: {e}"));
            assert!(report.contains(&note), "{label}: the compile report should say `{note}`: {report}");

            let run = RunArgs {
                model: model_args,
                target: cli::RunTarget::Interp,
                check: false,
                emulate: false,
                precision: Default::default(),
                gemm: Default::default(),
                accumulate: None,
                quantize: Default::default(),
                data: vec![format!("input={}", input_path.display())],
                params: Some(checkpoint),
                output: None,
                triple: None,
                no_cache: false,
                threads: None,
                repeat: None,
            };
            let (want, report) = cli::run(&run).unwrap_or_else(|e| panic!("{label}: {e}"));
            assert!(report.starts_with(&note), "{label}: the run report should start with `{note}`: {report}");

            let demo = Command::new(out.join(format!("{model}_demo")))
                .current_dir(&out)
                .arg("--input")
                .arg(format!("input={}", input_path.display()))
                .arg("--out")
                .arg(&out)
                .output()
                .unwrap();
            assert!(demo.status.success(), "{label}: {}", String::from_utf8_lossy(&demo.stderr));
            let got = data::read_arrays(&out.join("output_0.npy")).unwrap();
            let got = got.arrays.values().next().unwrap();
            assert_eq!((got.dtype, &got.shape), (Dtype::F32, &want[0].1.shape), "{label}");
            let mut worst = 0.0f64;
            for (x, y) in got.data.iter().zip(&want[0].1.data) {
                assert!((x - y).abs() <= 1e-4 + 1e-4 * y.abs(), "{label}: got {x}, interpreter {y}");
                worst = worst.max((x - y).abs());
            }
            println!("{label}: largest difference from the interpreter {worst:.2e}");
        }
    }
}

/// Integer or boolean arrays for a trained parameter are refused (exit 1, naming the
/// parameter and its type), not converted: they are a wrong file or key, and the model
/// would run on truncated weights. mlp's weights as i32, and one as bool.
#[test]
fn integer_parameters_are_refused() {
    let Some(dir) = cases::shared() else {
        common::skip("../shared is not present");
        return;
    };
    let bench = dir.join("bench");
    let params = data::read_arrays(&bench.join("mlp.safetensors")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for dtype in [Dtype::I32, Dtype::Bool] {
        let mut arrays: Vec<(String, Tensor)> = params.arrays.iter().map(|(n, t)| (n.clone(), t.clone())).collect();
        let (name, t) = &mut arrays[0];
        let name = name.clone();
        *t = Tensor::new(dtype, t.shape.clone(), t.data.iter().map(|x| if dtype == Dtype::Bool { (*x != 0.0) as u8 as f64 } else { x.trunc() }).collect());
        let file = tmp.path().join(format!("mlp_{dtype}.safetensors"));
        std::fs::write(&file, data::safetensors_bytes(&arrays).unwrap()).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_mithrilc"))
            .args(["compile", "mlp.json", "--target", "c", "--shape", "input=1,784", "--emit", "source", "--params"])
            .arg(&file)
            .arg("-o")
            .arg(tmp.path().join("out"))
            .current_dir(&bench)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{dtype}: {stderr}");
        let want = format!("parameter `{name}` is {dtype} in the data, but a trained parameter is floating point");
        assert!(stderr.contains(&want), "{dtype}: expected `{want}` in: {stderr}");
        assert!(!tmp.path().join("out").exists(), "{dtype}: nothing is written on failure");
    }
}

/// Compiling gpt_block (28 MB of f32 weights) for the C target, XLA and ggml peaks at
/// no more than twice its weights file in memory beyond what mithrilc takes to start
/// (`mithrilc --version`'s peak: 5 MB, or 54 MB in a build with the LLVM tier, whose
/// libLLVM is relocated at load): the weights go from the mapped file into the blob
/// (C), the safetensors file (XLA) or the GGUF file (ggml) with no f64 copy and no
/// second copy of the output, and each parameter's pages are let go once written (the
/// child's peak resident set).
#[cfg(target_os = "linux")]
#[test]
fn compiling_gpt_block_takes_at_most_twice_its_weights_file_in_memory() {
    let Some(dir) = cases::shared() else {
        common::skip("../shared is not present");
        return;
    };
    let bench = dir.join("bench");
    let size = std::fs::metadata(bench.join("gpt_block.safetensors")).unwrap().len();
    let tmp = tempfile::tempdir().unwrap();
    let idle = peak_resident(Command::new(env!("CARGO_BIN_EXE_mithrilc")).arg("--version"), "mithrilc --version");
    for target in ["c", "xla", "ggml"] {
        let mut compile = Command::new(env!("CARGO_BIN_EXE_mithrilc"));
        compile
            .args(["compile", "gpt_block.json", "--target", target, "--shape", "input=1,128,768", "--params", "gpt_block.safetensors", "--emit", "source", "-o"])
            .arg(tmp.path().join(target))
            .current_dir(&bench);
        let peak = peak_resident(&compile, &format!("mithrilc compile --target {target}"));
        println!("gpt_block for {target}: peak resident {:.1} MB ({:.1} MB at start) for a {:.1} MB weights file", peak as f64 / 1e6, idle as f64 / 1e6, size as f64 / 1e6);
        assert!(peak.saturating_sub(idle) <= 2 * size, "{target}: peak resident {peak} bytes, {idle} at start, is more than twice the weights file ({size} bytes) beyond that");
    }
}

/// An ONNX model whose 2 GiB weight is external data (a sparse file: no disk taken
/// until written) is read through a mapping: `inspect` takes a few megabytes more than
/// mithrilc takes to start. Compiling
/// it takes what the C target's writer takes for any model: the blob it builds and
/// the one parameter being written (here the whole model), as the gpt_block test above
/// bounds it.
#[cfg(target_os = "linux")]
#[test]
fn an_onnx_model_with_2_gib_of_external_data_is_mapped_not_read() {
    use mithrilc::frontend::onnx::proto::{tensor_proto, type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto};
    use prost::Message;
    let (k, n) = (16384i64, 32768i64);
    let size = (k * n * 4) as u64;
    let dir = tempfile::tempdir().unwrap();
    std::fs::File::create(dir.path().join("weights.bin")).unwrap().set_len(size).unwrap();
    let info = |name: &str, dims: &[i64]| {
        let dim = dims.iter().map(|&d| type_proto_dim(d)).collect();
        let t = type_proto::Tensor { elem_type: Some(tensor_proto::DataType::Float as i32), shape: Some(TensorShapeProto { dim }) };
        ValueInfoProto { name: Some(name.into()), r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(t)), ..Default::default() }), ..Default::default() }
    };
    let entry = |k: &str, v: &str| StringStringEntryProto { key: Some(k.into()), value: Some(v.into()) };
    let weight = TensorProto {
        name: Some("w".into()),
        dims: vec![k, n],
        data_type: Some(tensor_proto::DataType::Float as i32),
        data_location: Some(tensor_proto::DataLocation::External as i32),
        external_data: vec![entry("location", "weights.bin"), entry("offset", "0"), entry("length", &size.to_string())],
        ..Default::default()
    };
    let node = NodeProto { op_type: Some("MatMul".into()), input: vec!["x".into(), "w".into()], output: vec!["y".into()], ..Default::default() };
    let graph = GraphProto { name: Some("big".into()), node: vec![node], input: vec![info("x", &[1, k])], output: vec![info("y", &[1, n])], initializer: vec![weight], ..Default::default() };
    let model = ModelProto { ir_version: Some(8), opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }], graph: Some(graph), ..Default::default() };
    std::fs::write(dir.path().join("big.onnx"), model.encode_to_vec()).unwrap();
    let mithrilc = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mithrilc"));
        cmd.args(args).current_dir(dir.path());
        cmd
    };
    // Beyond what mithrilc takes to start (54 MB with the LLVM tier's libLLVM).
    let idle = peak_resident(&mithrilc(&["--version"]), "mithrilc --version");
    let inspect = peak_resident(&mithrilc(&["inspect", "big.onnx"]), "mithrilc inspect big.onnx");
    println!("inspect of a model with {:.1} GB of external data: peak resident {:.1} MB ({:.1} MB at start)", size as f64 / 1e9, inspect as f64 / 1e6, idle as f64 / 1e6);
    assert!(inspect.saturating_sub(idle) < 32 << 20, "inspect took {inspect} bytes, {idle} at start");
    let compile = peak_resident(&mithrilc(&["compile", "big.onnx", "--target", "c", "--emit", "source", "-o", "out"]), "mithrilc compile big.onnx");
    println!("compile --emit source: peak resident {:.1} MB", compile as f64 / 1e6);
    assert!(compile <= 2 * size + (256 << 20), "compile took {compile} bytes for a {size}-byte weight");
    assert_eq!(std::fs::metadata(dir.path().join("out/weights.bin")).unwrap().len(), size);
}

/// A static dimension of an ONNX type.
fn type_proto_dim(d: i64) -> mithrilc::frontend::onnx::proto::tensor_shape_proto::Dimension {
    use mithrilc::frontend::onnx::proto::tensor_shape_proto::{dimension, Dimension};
    Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() }
}
