//! The in-process JIT (`--target jit`, cranelift): every benchmark model and every
//! test-data case (forward, and backward with the gradients of all parameters) is
//! compiled and run through `mithrilc::exec::Jit` and compared with the interpreter at
//! the C target's tolerance (1e-4 absolute + 1e-4 relative); symbolic batches run at
//! every size; bad sizes and indices are errors, not crashes (the training step is
//! checked in tests/train_example.rs). Nothing here needs a C compiler: runtime-c is
//! inside mithrilc.

use std::collections::BTreeMap;

use mithrilc::backend::{EmitOptions, JitTier};
use mithrilc::data;
use mithrilc::exec::{Executable, Jit};
use mithrilc::tensor::Tensor;

use crate::common::{self, c_build, cases};
use cases::{cases, shared, Case};

/// The JIT's code generators this build has: cranelift, and LLVM with the `llvm`
/// feature.
fn tiers() -> Vec<JitTier> {
    let mut t = vec![JitTier::Cranelift];
    if cfg!(feature = "llvm") {
        t.push(JitTier::Llvm);
    }
    t
}

/// Runs `case` through the JIT's `tier`.
fn jit(case: &Case, tier: JitTier, opts: EmitOptions) -> Result<Vec<(String, Tensor)>, String> {
    let exe = Jit::with_tier(tier, &case.graphs, &case.feeds, opts).map_err(|e| format!("{} ({tier:?}): {e}", case.label))?;
    exe.run(&case.feeds).map_err(|e| format!("{} ({tier:?}): {e}", case.label))
}

#[test]
fn every_case_matches_the_interpreter() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    let all = cases(&dir);
    let worst = cases::Worst::default();
    let failures = common::each_case(&all, |case| {
        let want = mithrilc::interp::run(case.graph(), &case.feeds).map_err(|e| format!("{}: interpreter: {e}", case.label))?;
        let mut bad = Vec::new();
        for tier in tiers() {
            let got = jit(case, tier, EmitOptions::default())?;
            let label = format!("{} ({tier:?})", case.label);
            let (b, err) = cases::compare(&label, &got, &want, 1e-4);
            worst.note(err, &label);
            bad.extend(b);
        }
        if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
    });
    let (err, label) = worst.get();
    println!("jit: {} of {} cases match the interpreter; worst abs error {err:.2e} ({label})", all.len() - failures.len(), all.len());
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The JIT computes what the C target computes, bit for bit: the same lowering, the
/// same runtime-c kernels, and its loop kernels the C's operations in the C's order
/// (mithril_ops.h's helpers written out, no contraction). Every bench model and the
/// test-data cases with transcendentals and long sums, forward and backward, built with
/// the C compiler at -O3 for this CPU alone (the vector paths of this machine).
#[test]
fn the_jit_computes_the_c_targets_bits() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    let Some(tc) = c_build::toolchain(&c_build::for_this_cpu("-O3")) else {
        common::skip("a C compiler is needed (apt-get install gcc, or set CC)");
        return;
    };
    let wanted = ["gelu", "softmax", "layernorm", "attention_block", "gpt_tiny", "sigmoid", "tanh", "exp", "conv_relu_pool"];
    let all: Vec<Case> = cases(&dir).into_iter().filter(|c| !c.label.ends_with(".npz") || wanted.iter().any(|w| c.label.starts_with(&format!("{w}.")) || c.label == format!("{w}.npz"))).collect();
    let failures = common::each_case(&all, |case| {
        let c = c_build::run_c(tc, &case.graphs, &case.feeds, &tc.dir.path().join(case.label.replace(' ', "_"))).map_err(|e| format!("{}: C: {e}", case.label))?;
        let mut differ = Vec::new();
        for tier in tiers() {
            let got = jit(case, tier, EmitOptions::default())?;
            differ.extend(
                got.iter()
                    .zip(&c)
                    .filter(|((_, a), (_, b))| a.data.iter().zip(&b.data).any(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan())))
                    .map(|((name, a), (_, b))| {
                        let worst = a.data.iter().zip(&b.data).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
                        format!("{} ({tier:?}): output {name} differs from the C target's by up to {worst:.3e}", case.label)
                    }),
            );
        }
        if differ.is_empty() { Ok(()) } else { Err(differ.join("\n")) }
    });
    println!("jit: {} of {} cases give the C target's bits", all.len() - failures.len(), all.len());
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// Each bench model with a symbolic batch `B` (`--max B=N`) runs at batch 1, 3 and N
/// from one compile and matches the interpreter at that batch; N + 1 is refused.
#[test]
fn symbolic_batch_runs_at_every_size() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    for (model, max) in [("mlp", 32u64), ("lenet", 32), ("cnn", 32), ("gpt_block", 8)] {
        let params = data::read_arrays(&dir.join(format!("bench/{model}.safetensors"))).unwrap();
        let big = data::read_arrays(&dir.join(format!("bench/{model}_b{max}_input.npy"))).unwrap();
        let big = big.arrays.values().next().unwrap().clone();
        let row: Vec<String> = big.shape[1..].iter().map(|d| d.to_string()).collect();
        let (name, shape) = mithrilc::cli::parse_shape_arg(&format!("input=B,{}", row.join(","))).unwrap();
        let spec = mithrilc::pipeline::ModelSpec {
            path: dir.join(format!("bench/{model}.json")),
            frontend: mithrilc::frontend::Options { shapes: [(name, shape)].into(), ..Default::default() },
            ..Default::default()
        };
        let graphs = mithrilc::pipeline::load(&spec).unwrap().graphs;
        let feeds: BTreeMap<String, Tensor> = params.arrays.iter().map(|(k, t)| (k.clone(), t.clone())).collect();
        for tier in tiers() {
        let opts = EmitOptions { max: [("B".to_string(), max)].into(), ..Default::default() };
        let exe = Jit::with_tier(tier, &graphs, &feeds, opts).unwrap_or_else(|e| panic!("{model}: {e}"));
        let per: usize = big.shape[1..].iter().product::<u64>() as usize;
        for n in [1, 3, max] {
            let mut shape = big.shape.clone();
            shape[0] = n;
            let input = Tensor { dtype: big.dtype, shape: shape.clone(), data: big.data[..per * n as usize].to_vec() };
            let mut fixed = mithrilc::pipeline::ModelSpec { ..spec.clone() };
            fixed.frontend.shapes = [("input".to_string(), mithrilc::ir::Shape::known(&shape))].into();
            let static_graphs = mithrilc::pipeline::load(&fixed).unwrap().graphs;
            let mut all = feeds.clone();
            all.insert("input".into(), input.clone());
            let want = mithrilc::interp::run(static_graphs.main(), &all).unwrap();
            let got = exe.run(&[("input".to_string(), input)].into()).unwrap_or_else(|e| panic!("{model} ({tier:?}) at batch {n}: {e}"));
            let (bad, _) = cases::compare(&format!("{model} ({tier:?}) at batch {n}"), &got, &want, 1e-4);
            assert!(bad.is_empty(), "{}", bad.join("\n"));
        }
        let mut shape = big.shape.clone();
        shape[0] = max + 1;
        let mut data = big.data.clone();
        data.extend_from_slice(&big.data[..per]);
        let err = exe.run(&[("input".to_string(), Tensor { dtype: big.dtype, shape, data })].into()).unwrap_err();
        assert_eq!(err.to_string(), format!("input `input`: dimension 0 (B) is {}, outside 1 to its maximum {max} (--max B=N)", max + 1), "{model}");
        }
    }
}

/// One compiled model called from several threads at once: every run gets its own
/// answer (each takes the kept arena or makes its own; the pool serves one range at a
/// time).
#[test]
fn one_model_runs_on_several_threads_at_once() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Jit>();
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    let case = cases(&dir).into_iter().find(|c| c.label == "mlp b32").unwrap();
    let exe = Jit::new(&case.graphs, &case.feeds, EmitOptions::default()).unwrap();
    let input = case.feeds["input"].clone();
    let case = &case;
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (exe, input, graph) = (&exe, input.clone(), case.graph());
            s.spawn(move || {
                for round in 0..20 {
                    // Each thread its own input: a scaled copy.
                    let scale = 1.0 + f64::from(t) / 4.0;
                    let x = Tensor { data: input.data.iter().map(|v| v * scale).collect(), ..input.clone() };
                    let got = exe.run(&[("input".to_string(), x.clone())].into()).unwrap();
                    if round == 0 {
                        let mut feeds = case.feeds.clone();
                        feeds.insert("input".into(), x);
                        let want = mithrilc::interp::run(graph, &feeds).unwrap();
                        let (bad, _) = cases::compare(&format!("thread {t}"), &got, &want, 1e-4);
                        assert!(bad.is_empty(), "{}", bad.join("\n"));
                    }
                }
            });
        }
    });
}

/// A model whose arena is larger than this machine's memory is refused before anything
/// is compiled or allocated.
#[test]
fn a_model_too_large_for_memory_is_refused() {
    let Some(total) = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| m.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse::<u64>().ok())
    else {
        common::skip("no /proc/meminfo");
        return;
    };
    // The exponential lives in the arena (a product has no prologue to fuse it into):
    // n * n * 4 bytes, twice the memory.
    let n = ((total * 1024 * 2 / 4) as f64).sqrt() as u64 + 1;
    let text = format!("graph g {{\n  %0 = input \"x\" : f32[{n}, {n}]\n  %1 = exp %0 : f32[{n}, {n}]\n  %2 = matmul %1, %0 : f32[{n}, {n}]\n  output \"y\" = %2\n}}\n");
    let graphs = mithrilc::pipeline::Graphs::new(mithrilc::ir::parse::parse(&text).unwrap(), &Default::default(), |_, _| {}).unwrap();
    let err = Jit::new(&graphs, &BTreeMap::new(), EmitOptions::default()).err().expect("refused");
    assert_eq!(err.kind, mithrilc::ErrorKind::User);
    assert!(err.message.starts_with("the model needs ") && err.message.contains("more than this machine has"), "{err}");
}

/// A gather index out of range is refused before the kernel runs (the C target's
/// ERROR_INDEX), and an input of the wrong shape or type is refused before anything
/// runs: errors, never reads outside a buffer.
#[test]
fn bad_indices_and_inputs_are_errors() {
    let text = "graph g {\n  %0 = input \"table\" : f32[4, 3]\n  %1 = input \"ids\" : i64[5]\n  %2 = gather %0, %1 {axis = 0} : f32[5, 3]\n  output \"y\" = %2\n}\n";
    let graphs = mithrilc::pipeline::Graphs::new(mithrilc::ir::parse::parse(text).unwrap(), &Default::default(), |_, _| {}).unwrap();
    let mut exe = Jit::new(&graphs, &BTreeMap::new(), EmitOptions::default()).unwrap();
    let table = Tensor::new(mithrilc::ir::Dtype::F32, vec![4, 3], (0..12).map(f64::from).collect());
    let run = |ids: &[f64]| {
        let feeds: BTreeMap<String, Tensor> = [("table".to_string(), table.clone()), ("ids".to_string(), Tensor::new(mithrilc::ir::Dtype::I64, vec![5], ids.to_vec()))].into();
        exe.run(&feeds)
    };
    // Negative indices count from the end.
    let got = run(&[0.0, 3.0, -1.0, -4.0, 2.0]).unwrap();
    assert_eq!(got[0].1.data[..6], [0.0, 1.0, 2.0, 9.0, 10.0, 11.0]);
    assert_eq!(got[0].1.data[6..9], [9.0, 10.0, 11.0]);
    for ids in [[0.0, 4.0, 0.0, 0.0, 0.0], [0.0, 0.0, -5.0, 0.0, 0.0], [1e12, 0.0, 0.0, 0.0, 0.0]] {
        let err = run(&ids).unwrap_err();
        assert_eq!(err.to_string(), "a gather or embedding index is out of range (outside [-n, n) for an axis of size n)", "{ids:?}");
    }
    let feeds: BTreeMap<String, Tensor> = [("table".to_string(), Tensor::new(mithrilc::ir::Dtype::F32, vec![3, 4], vec![0.0; 12])), ("ids".to_string(), Tensor::new(mithrilc::ir::Dtype::I64, vec![5], vec![0.0; 5]))].into();
    assert_eq!(exe.run(&feeds).unwrap_err().to_string(), "input `table` has shape [3, 4], the model takes [4, 3]");
    let feeds: BTreeMap<String, Tensor> = [("table".to_string(), table.clone()), ("ids".to_string(), Tensor::new(mithrilc::ir::Dtype::I32, vec![5], vec![0.0; 5]))].into();
    assert_eq!(exe.run(&feeds).unwrap_err().to_string(), "input `ids` is i32, the model takes i64");
    // No loss, no training step.
    let feeds: BTreeMap<String, Tensor> = [("table".to_string(), table.clone()), ("ids".to_string(), Tensor::new(mithrilc::ir::Dtype::I64, vec![5], vec![0.0; 5]))].into();
    let err = exe.train_step(&feeds, 0.1, 0.0).unwrap_err();
    assert_eq!((err.kind, err.to_string()), (mithrilc::ErrorKind::Usage, "a training step needs a model compiled with the gradients of a loss (--grad of a model with a loss)".to_string()));
}

/// `compile --target jit-llvm --emit llvm-ir` writes the optimized module alone, for the
/// CPU `--cpu` names; `--emit obj` an object file; a target without an LLVM module
/// refuses them.
#[test]
fn compile_emits_the_llvm_module() {
    use mithrilc::cli::{self, CompileArgs, Emit, ModelArgs};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let args = |target: &'static str, emit: Emit, cpu: Option<&str>, out: &str| CompileArgs {
        model: ModelArgs { model: root.join("examples/mlp/mlp.json"), ..Default::default() },
        target: mithrilc::codegen::find(target).unwrap_or(&mithrilc::codegen::jit::backend::JIT),
        params: Some(root.join("examples/mlp/data.npz")),
        out: Some(tmp.path().join(out)),
        emit,
        cpu: cpu.map(str::to_string),
        ..Default::default()
    };
    let err = cli::compile(&args("jit", Emit::LlvmIr, None, "a")).unwrap_err();
    assert_eq!((err.kind, err.message.as_str()), (mithrilc::ErrorKind::Usage, "--emit llvm-ir: the jit target writes no LLVM module (give --target jit-llvm)"));
    if !cfg!(feature = "llvm") {
        common::skip("mithrilc is built without the llvm feature (no jit-llvm target)");
        return;
    }
    cli::compile(&args("jit-llvm", Emit::LlvmIr, Some("x86-64-v3"), "ir")).unwrap();
    let files: Vec<String> = std::fs::read_dir(tmp.path().join("ir")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| !n.starts_with('.')).collect();
    assert_eq!(files, ["mlp.ll"]);
    let ir = std::fs::read_to_string(tmp.path().join("ir/mlp.ll")).unwrap();
    assert!(ir.contains("define void @e0(") && ir.contains("\"target-cpu\"=\"x86-64-v3\""), "{ir}");
    cli::compile(&args("jit-llvm", Emit::Obj, None, "obj")).unwrap();
    let obj = std::fs::read(tmp.path().join("obj/mlp.o")).unwrap();
    assert_eq!(&obj[..4], b"\x7fELF");
}
