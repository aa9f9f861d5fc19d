//! The ggml target against a real ggml (the pinned `libggml-python` wheel that
//! `.ci/run` installs, found by `mithrilc::build::ggml`):
//! - every conformance case (forward) and every bench model at each batch is built
//!   (C compiled with -Wall -Wextra -Werror against ggml), run by its demo, and compared
//!   with the interpreter within 1e-4 absolute + 1e-4 relative (every case: none needs
//!   an op the target refuses; `unsupported_ops_are_all_listed` checks the refusal);
//! - the GGUF file mithrilc writes is read back with ggml's own `gguf_*` functions by a
//!   small C program: names, types, shapes, metadata and values (dequantized by ggml
//!   for the quantized types);
//! - `--quantize f16|bf16|q8_0|q4_0` runs each bench model within a tolerance stated per type;
//! - an unsupported model is refused with every node listed.
//!
//! Cases run two at a time (the machines have two cores).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use mithrilc::backend::{check_supported, Backend, EmitOptions};
use mithrilc::cli::{self, BuildConfig};
use mithrilc::codegen::ggml::backend::GgmlTarget;
use mithrilc::backend::Quantize;

use crate::common::{self, cases, random_model};
use cases::{cases, matches_interpreter, Case, Worst};
use common::each_case as each;

/// `../shared`, make, cc and ggml, or why the test is skipped.
fn ggml_ready() -> Option<(PathBuf, mithrilc::build::Ggml)> {
    let dir = cases::shared_with_build()?;
    match mithrilc::build::ggml() {
        Ok(g) => Some((dir, g)),
        Err(e) => {
            common::skip(&e.to_string().replace('\n', " "));
            None
        }
    }
}

/// The case's forward graph alone (the conformance cases load with gradients).
fn forward(case: &Case) -> mithrilc::pipeline::Graphs {
    mithrilc::pipeline::Graphs { forward: case.graphs.forward.clone(), backward: None }
}

#[test]
fn every_model_matches_the_interpreter() {
    let Some((dir, _)) = ggml_ready() else { return };
    let all = cases(&dir);
    let worst = Worst::default();
    let start = std::time::Instant::now();
    let failures = each(&all, |case| matches_interpreter(&GgmlTarget, case, &forward(case), &BuildConfig::default(), &worst));
    let (err, label) = worst.get();
    println!(
        "{} of {} models match the interpreter through ggml; worst abs error {err:.2e} ({label}); {:.0} s",
        all.len() - failures.len(),
        all.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The cases whose backward graphs need what ggml cannot do, with the op the refusal
/// must name: grouped convolutions' gradients transpose rank-5 tensors (beyond ggml's 4
/// dimensions, other than by merging leading axes), and padded max pooling's pads with
/// -inf.
const GRADIENTS_LACKING: &[(&str, &str)] = &[("grouped_conv_pools (gradients)", "transpose")];

/// With `--grad` the backward graph autodiff appends is ordinary ops, which the target
/// writes like any others: every conformance case's gradients (of all its parameters)
/// match the interpreter's within 1e-4 too, but for [`GRADIENTS_LACKING`], refused with
/// the op named.
#[test]
fn gradients_match_the_interpreter() {
    let Some((dir, _)) = ggml_ready() else { return };
    let all: Vec<Case> = cases(&dir).into_iter().filter(|c| c.graphs.backward.is_some()).collect();
    for (label, _) in GRADIENTS_LACKING {
        assert!(all.iter().any(|c| c.label == *label), "{label} is no longer a case");
    }
    let worst = Worst::default();
    let failures = each(&all, |case| {
        if let Some((_, op)) = GRADIENTS_LACKING.iter().find(|(label, _)| *label == case.label) {
            let e = check_supported(&GgmlTarget, case.graph()).err().ok_or_else(|| format!("{}: listed as lacking, but the ggml target accepts it", case.label))?;
            let text = e.to_string();
            let named = text.lines().any(|l| l.starts_with(&format!("  {op} ")));
            return if named { Ok(()) } else { Err(format!("{}: the refusal does not name {op}:\n{text}", case.label)) };
        }
        matches_interpreter(&GgmlTarget, case, &case.graphs, &BuildConfig::default(), &worst)
    });
    let (err, label) = worst.get();
    println!(
        "{} of {} cases' gradients match through ggml ({} refused as listed); worst abs error {err:.2e} ({label})",
        all.len() - failures.len() - GRADIENTS_LACKING.len(),
        all.len(),
        GRADIENTS_LACKING.len()
    );
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The quantized weights of matrix products: each bench model within the tolerance of
/// its type, relative to each output's largest magnitude. ggml's quantized products
/// also quantize their activations (to q8_0 for q8_0 and q4_0 weights), so the errors
/// are those of both roundings.
#[test]
fn quantized_weights_stay_within_their_tolerance() {
    let Some((dir, _)) = ggml_ready() else { return };
    let all = cases(&dir);
    let bench = |c: &&Case| matches!(c.label.as_str(), "mlp b32" | "lenet b1" | "cnn b1" | "gpt_block b1");
    let runs: Vec<(Quantize, f64, &Case)> =
        [(Quantize::F16, 2e-3), (Quantize::Bf16, 1e-2), (Quantize::Q8_0, 2e-2), (Quantize::Q4_0, 1.5e-1)].into_iter().flat_map(|(q, tol)| all.iter().filter(bench).map(move |c| (q, tol, c))).collect();
    assert_eq!(runs.len(), 16, "every bench model in every type");
    let worst = Mutex::new(Vec::new());
    let failures = each(&runs, |&(quantize, tol, case)| {
        let label = format!("{} at {quantize:?}", case.label);
        let graphs = forward(case);
        let want = mithrilc::interp::run(&graphs.forward, &case.feeds).map_err(|e| format!("{label}: interpreter: {e}"))?;
        let opts = EmitOptions { quantize, ..Default::default() };
        let got = mithrilc::exec::run_once(&GgmlTarget, &graphs, &case.feeds, &case.source, &BuildConfig::default(), opts).map_err(|e| format!("{label}: {e}"))?;
        let (bad, err) = cases::compare_scaled(&label, &got, &want, tol);
        worst.lock().unwrap().push((format!("{quantize:?}"), err, label));
        if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
    });
    for q in ["F16", "Bf16", "Q8_0", "Q4_0"] {
        let w = worst.lock().unwrap();
        for (_, err, label) in w.iter().filter(|(n, _, _)| n == q) {
            println!("{label}: error {err:.2e} of the output's scale");
        }
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// A C program that prints a GGUF file as ggml's `gguf_*` functions read it: its
/// metadata strings, then each tensor's name, type name, dimensions and values
/// (dequantized by ggml's own type traits).
const GGUF_READER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include "ggml.h"
#include "gguf.h"
int main(int argc, char **argv) {
    struct ggml_context *ctx = NULL;
    struct gguf_init_params p = { false, &ctx };
    struct gguf_context *g;
    int64_t i, j;
    if (argc != 2) { return 2; }
    g = gguf_init_from_file(argv[1], p);
    if (!g) { fprintf(stderr, "gguf_init_from_file failed\n"); return 1; }
    printf("version %u alignment %zu\n", gguf_get_version(g), gguf_get_alignment(g));
    for (i = 0; i < gguf_get_n_kv(g); ++i) {
        if (gguf_get_kv_type(g, i) == GGUF_TYPE_STRING) { printf("kv %s = %s\n", gguf_get_key(g, i), gguf_get_val_str(g, i)); }
        if (gguf_get_kv_type(g, i) == GGUF_TYPE_ARRAY) {
            printf("kv %s = [", gguf_get_key(g, i));
            for (j = 0; j < (int64_t)gguf_get_arr_n(g, i); ++j) { printf("%s%s", j ? "," : "", gguf_get_arr_str(g, i, j)); }
            printf("]\n");
        }
    }
    for (i = 0; i < gguf_get_n_tensors(g); ++i) {
        const char *name = gguf_get_tensor_name(g, i);
        struct ggml_tensor *t = ggml_get_tensor(ctx, name);
        int64_t n = ggml_nelements(t);
        float *v = (float *)malloc(sizeof(float) * (size_t)n);
        if (t->type == GGML_TYPE_F32) { for (j = 0; j < n; ++j) { v[j] = ((float *)t->data)[j]; } }
        else { ggml_get_type_traits(t->type)->to_float(t->data, v, n); }
        printf("tensor %s %s %d %lld %lld %lld %lld", name, ggml_type_name(gguf_get_tensor_type(g, i)), ggml_n_dims(t), (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
        for (j = 0; j < n; ++j) { printf(" %.9g", v[j]); }
        printf("\n");
        free(v);
    }
    gguf_free(g);
    ggml_free(ctx);
    return 0;
}
"#;

/// Builds [`GGUF_READER`] in `dir` against `ggml`.
fn build_reader(dir: &Path, ggml: &mithrilc::build::Ggml) -> PathBuf {
    std::fs::write(dir.join("reader.c"), GGUF_READER).unwrap();
    let exe = dir.join("reader");
    let lib = ggml.lib.display().to_string();
    let cc = Command::new("cc")
        .current_dir(dir)
        .args(["-Wall", "-Wextra", "-Werror", "reader.c", "-o"])
        .arg(&exe)
        .arg(format!("-I{}", ggml.include.display()))
        .args([format!("-L{lib}"), "-lggml".into(), "-lggml-base".into(), format!("-Wl,-rpath,{lib}")])
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    exe
}

#[test]
fn ggml_reads_back_the_gguf_file() {
    let Some((dir, ggml)) = ggml_ready() else { return };
    let all = cases(&dir);
    let case = all.iter().find(|c| c.label == "mlp b1").expect("the mlp bench model");
    let tmp = tempfile::tempdir().unwrap();
    let reader = build_reader(tmp.path(), &ggml);
    let graph = &case.graphs.forward;
    let weights: BTreeMap<String, mithrilc::tensor::Tensor> = graph.params().filter_map(|v| graph.node(v).name.clone()).map(|n| (n.clone(), case.feeds[&n].clone())).collect();
    for (quantize, tol) in [(Quantize::F32, 0.0), (Quantize::F16, 1e-3), (Quantize::Bf16, 4e-3), (Quantize::Q8_0, 1e-2), (Quantize::Q4_0, 1.5e-1)] {
        let opts = EmitOptions { source: "mlp.json".into(), weights: Some(mithrilc::exec::param_weights(graph, &weights)), quantize, ..Default::default() };
        let emitted = GgmlTarget.emit(&mithrilc::pipeline::Graphs { forward: graph.clone(), backward: None }, &opts).unwrap();
        let (name, bytes) = emitted.files.iter().find(|(n, _)| n.ends_with(".gguf")).unwrap();
        let path = tmp.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = Command::new(&reader).arg(&path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.starts_with("version 3 alignment 32\n"), "{text}");
        assert!(text.contains("kv general.architecture = mithrilc\n"), "{text}");
        assert!(text.contains(&format!("kv mithrilc.model = {}\n", emitted.entry.name)), "{text}");
        assert!(text.contains("kv mithrilc.source = mlp.json\n"), "{text}");
        let mut seen = 0;
        for line in text.lines().filter_map(|l| l.strip_prefix("tensor ")) {
            let fields: Vec<&str> = line.split(' ').collect();
            let Some((pname, t)) = weights.iter().find(|(n, _)| mithrilc::codegen::ggml::gguf_name(n) == fields[0]) else {
                assert!(fields[0].starts_with("mithrilc.const."), "an unknown tensor {}", fields[0]);
                continue;
            };
            seen += 1;
            // ggml's dimensions are the reversed shape.
            let n_dims: usize = fields[2].parse().unwrap();
            let ne: Vec<u64> = fields[3..7].iter().map(|d| d.parse().unwrap()).collect();
            let mut want = t.shape.clone();
            want.reverse();
            assert_eq!(&ne[..want.len()], &want[..], "{pname}");
            assert!(ne[want.len()..].iter().all(|&d| d == 1), "{pname}");
            assert_eq!(n_dims, want.len().max(1), "{pname}");
            let quantized = fields[1] != "f32";
            if quantized {
                assert_eq!(fields[1], format!("{quantize:?}").to_lowercase(), "{pname}");
                assert_eq!(t.shape.len(), 2, "only matrix-product weights are quantized ({pname})");
            }
            let values: Vec<f64> = fields[7..].iter().map(|v| v.parse().unwrap()).collect();
            assert_eq!(values.len(), t.data.len(), "{pname}");
            let scale = t.data.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            for (got, want) in values.iter().zip(&t.data) {
                let bound = if quantized { tol * scale } else { 0.0 };
                // (%.9g prints an f32 exactly)
                assert!(((*got as f32) as f64 - (*want as f32) as f64).abs() <= bound, "{pname} at {quantize:?}: ggml reads {got}, the model has {want}");
            }
        }
        assert_eq!(seen, weights.len(), "every parameter is in the file");
        if quantize != Quantize::F32 {
            assert!(text.lines().any(|l| l.split(' ').nth(2) == Some(&format!("{quantize:?}").to_lowercase())), "{quantize:?}: some weight is quantized");
        }
    }
}

/// A model with ops ggml has no translation for is refused before anything is written,
/// with every such node listed.
#[test]
fn unsupported_ops_are_all_listed() {
    let g = mithrilc::ir::parse::parse(
        "graph g {\n  %0 = input \"x\" : f32[3, 2]\n  %1 = input \"i\" : i64[2]\n  %2 = gather %0, %1 {axis = 1} : f32[3, 2]\n  %3 = reduce_prod %0 {axes = [0], keepdim = false} : f32[2]\n  %4 = argmax %0 {axis = 0, keepdim = false} : i64[2]\n  %5 = erf %0 : f32[3, 2]\n  output \"a\" = %2\n  output \"b\" = %3\n  output \"c\" = %4\n  output \"d\" = %5\n}\n",
    )
    .unwrap();
    let e = check_supported(&GgmlTarget, &g).unwrap_err();
    assert_eq!(e.kind, mithrilc::error::ErrorKind::User);
    assert_eq!(
        e.to_string(),
        "the ggml target cannot compile 3 nodes of the model:
  gather f32[3, 2] (%2): a gather along axis 1 (ggml_get_rows takes rows, axis 0)
  reduce_prod f32[2] (%3): ggml has no product reduction
  argmax i64[2] (%4): i64 values (the ggml target computes in f32, with booleans as 0 and 1)
  note: ops it cannot compile here: gather, reduce_prod, argmax"
    );
}

/// `examples/mlp` compiled for ggml into `out`: the arguments, and the example's data.
fn compile_example_mlp(out: &Path) -> (cli::CompileArgs, mithrilc::data::ArrayFile) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let args = cli::CompileArgs {
        model: cli::ModelArgs { model: root.join("examples/mlp/mlp.json"), ..Default::default() },
        params: Some(root.join("examples/mlp/data.npz")),
        out: Some(out.to_path_buf()),
        target: &GgmlTarget,
        ..Default::default()
    };
    cli::compile(&args).unwrap();
    (args, mithrilc::data::read_arrays(&root.join("examples/mlp/data.npz")).unwrap())
}

/// `docs/ggml.md`'s example of calling the library compiles warning-free against the
/// header of the example MLP and runs on it; the output matches the interpreter's, and
/// emitting the model twice gives the same bytes.
#[test]
fn the_documented_api_runs_and_output_is_deterministic() {
    let Some(_) = ggml_ready() else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/ggml.md")).unwrap();
    let start = doc.find("```c\n#include \"mlp.h\"").expect("docs/ggml.md has the calling example") + 5;
    let code = &doc[start..start + doc[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mlp-ggml");
    let (args, data) = compile_example_mlp(&out);
    // The example with a main around it that fills the input from the example's data
    // and prints the output.
    let x: Vec<String> = data.arrays["input/input"].data.iter().map(|v| format!("{v:?}f")).collect();
    let main = format!(
        "#include <stdio.h>\n{}\nint main(void) {{\n{}\n    return 0;\n}}\n",
        code.lines().next().unwrap(),
        code.lines()
            .skip(1)
            .map(|l| if l.starts_with("float input") { format!("{l}\nstatic const float x[] = {{ {} }};\nfor (size_t i = 0; i < MLP_INPUT_0_SIZE; ++i) input[i] = x[i];", x.join(", ")) } else { l.to_string() })
            .chain(["for (size_t i = 0; i < MLP_OUTPUT_0_SIZE; ++i) printf(\"%.9g\\n\", output[i]);".to_string()])
            .collect::<Vec<_>>()
            .join("\n")
            .replace("mlp_free(model);\n", "")
            + "\nmlp_free(model);"
    );
    std::fs::write(out.join("main.c"), main).unwrap();
    let cc = Command::new("cc").current_dir(&out).args(["-std=c11", "-Wall", "-Wextra", "-Werror", "main.c", "-L.", "-lmlp", "-Wl,-rpath,$ORIGIN", "-o", "main"]).output().unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let run = Command::new(out.join("main")).current_dir(&out).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let got: Vec<f64> = String::from_utf8(run.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    let want = &data.arrays["output/output"].data;
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5, "got {g}, the reference output {w}");
    }
    let again = dir.path().join("again");
    cli::compile(&cli::CompileArgs { out: Some(again.clone()), emit: mithrilc::cli::Emit::Source, ..args }).unwrap();
    for name in ["mlp.h", "mlp.c", "mlp_demo.c", "Makefile", "mlp.gguf"] {
        assert!(std::fs::read(out.join(name)).unwrap() == std::fs::read(again.join(name)).unwrap(), "{name} differs between two compiles");
    }
}

/// `run --target ggml` without a ggml is the toolchain's error (exit 3) with the install
/// command, and a `--quantize` the target does not take is a usage error (exit 2)
/// naming those it does.
#[test]
fn missing_ggml_and_misplaced_quantize_are_clear_errors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mithrilc = env!("CARGO_BIN_EXE_mithrilc");
    let model = root.join("examples/mlp/mlp.json");
    let data = root.join("examples/mlp/data.npz");
    let empty = tempfile::tempdir().unwrap();
    let run = Command::new(mithrilc)
        .args(["run", "--target", "ggml", "--data"])
        .arg(&data)
        .arg(&model)
        .env_remove("MITHRILC_GGML")
        .env("HOME", empty.path())
        .env("XDG_CACHE_HOME", empty.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("pip install {}", mithrilc::build::GGML_WHEEL)), "{stderr}");
    let out = empty.path().join("out");
    for (target, quantize, offered) in [("c", "q4_0", "f32, f16, bf16, q8_0, int8"), ("cuda", "q8_0", "f32")] {
        let compile = Command::new(mithrilc).args(["compile", "--target", target, "--quantize", quantize, "--params"]).arg(&data).arg(&model).arg("-o").arg(&out).output().unwrap();
        let stderr = String::from_utf8_lossy(&compile.stderr);
        assert_eq!(compile.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr, format!("error: --quantize {quantize}: the {target} target stores its weights as {offered}\n"));
    }
}

/// Random small models (`tests/common/random_model.rs`: convolutions with strides,
/// padding and dilation, pooling, linear layers, residuals, reshapes, at awkward
/// sizes), forward, against the interpreter within 1e-4: the target compiles every one.
#[test]
fn random_models_match_the_interpreter() {
    let Some(_) = ggml_ready() else { return };
    let dir = tempfile::tempdir().unwrap();
    let models: Vec<(u64, random_model::RandomModel)> = (1..=64).map(|seed| (seed, random_model::generate(seed, 6))).collect();
    let failures = each(&models, |(seed, m)| {
        let json = dir.path().join(format!("random_{seed}.json"));
        std::fs::write(&json, &m.json).unwrap();
        let shapes: Vec<(&str, &[u64])> = m.shapes.iter().map(|(n, s)| (n.as_str(), s.as_slice())).collect();
        let case = cases::own_case(&json, &shapes, &format!("random model {seed} ({})", m.summary));
        let graphs = forward(&case);
        let want = mithrilc::interp::run(&graphs.forward, &case.feeds).map_err(|e| format!("{}: interpreter: {e}", case.label))?;
        let got = mithrilc::exec::run_once(&GgmlTarget, &graphs, &case.feeds, &case.source, &BuildConfig::default(), Default::default()).map_err(|e| format!("{}: {e}", case.label))?;
        let (bad, _) = cases::compare(&case.label, &got, &want, 1e-4);
        if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
    });
    println!("{} of {} random models match through ggml", models.len() - failures.len(), models.len());
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The library checks the GGUF file it is given: another model's file, a file whose
/// tensor has another shape, and a truncated file are each refused by `_init` with the
/// reason (the demo exits with 4, which `run --target ggml` reports as the user's
/// error); the right file gives the same outputs with 1 and 2 threads.
#[test]
fn the_loader_refuses_a_gguf_file_of_another_model() {
    let Some(_) = ggml_ready() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mlp");
    let (args, data) = compile_example_mlp(&out);
    mithrilc::data::write_npy(&out.join("x.npy"), &data.arrays["input/input"]).unwrap();
    let demo = |gguf: &Path, threads: &str| Command::new(out.join("mlp_demo")).current_dir(&out).arg("--gguf").arg(gguf).args(["--input", "input=x.npy", "--threads", threads, "--out", "."]).output().unwrap();
    let mut outputs = Vec::new();
    for threads in ["1", "2"] {
        let run = demo(&out.join("mlp.gguf"), threads);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        outputs.push(std::fs::read(out.join("output_0.npy")).unwrap());
    }
    assert_eq!(outputs[0], outputs[1], "1 and 2 threads differ");
    // Another model's file (the same graph under the name `linear`), and the model's own
    // with a parameter of another shape.
    let gguf = std::fs::read(out.join("mlp.gguf")).unwrap();
    let other = |name: &str, graph: &mithrilc::ir::Graph, weights: BTreeMap<String, mithrilc::tensor::Tensor>| {
        let opts = EmitOptions { weights: Some(mithrilc::exec::param_weights(graph, &weights)), ..Default::default() };
        let files = GgmlTarget.emit(&mithrilc::pipeline::Graphs { forward: graph.clone(), backward: None }, &opts).unwrap().files;
        let path = dir.path().join(name);
        std::fs::write(&path, &files.iter().find(|(n, _)| n.ends_with(".gguf")).unwrap().1).unwrap();
        path
    };
    let mlp_graph = cli::load_graphs(&args.model, &[&data]).unwrap().forward;
    let weights: BTreeMap<String, mithrilc::tensor::Tensor> = mlp_graph.params().map(|v| mlp_graph.node(v).name.clone().unwrap()).map(|n| (n.clone(), data.arrays[&format!("param/{n}")].clone())).collect();
    let wrong_shape = {
        let mut w = weights.clone();
        let b = w.get_mut("bias0").unwrap();
        b.shape = vec![b.data.len() as u64 - 1];
        b.data.pop();
        let mut g = mlp_graph.clone();
        let v = g.params().find(|&v| g.node(v).name.as_deref() == Some("bias0")).unwrap();
        g.nodes[v.index()].ty.shape = mithrilc::ir::Shape::known(&b.shape);
        other("short_bias.gguf", &g, w)
    };
    let mut renamed = mlp_graph.clone();
    renamed.name = "linear".into();
    let foreign = other("linear.gguf", &renamed, weights);
    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &gguf[..gguf.len() / 2]).unwrap();
    for (file, want) in [
        (&foreign, "the GGUF file was not written by mithrilc for the model mlp"),
        (&wrong_shape, "a tensor of the GGUF file has the wrong shape: bias0"),
        (&truncated, "cannot read the GGUF file"),
    ] {
        let run = demo(file, "1");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(4), "{stderr}");
        assert!(stderr.contains(want), "{}: {stderr}", file.display());
    }
}

/// `graph` (IR text) run through the ggml target on `feeds` and through the interpreter:
/// (ggml's outputs or its error, the interpreter's outputs).
type Outputs = Vec<(String, mithrilc::tensor::Tensor)>;
fn ggml_and_interpreter(ir: &str, feeds: &[(&str, mithrilc::tensor::Tensor)]) -> (Result<Outputs, String>, Result<Outputs, String>) {
    let graph = mithrilc::ir::parse::parse(ir).unwrap();
    let feeds: BTreeMap<String, mithrilc::tensor::Tensor> = feeds.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
    let want = mithrilc::interp::run(&graph, &feeds).map_err(|e| e.to_string());
    let graphs = mithrilc::pipeline::Graphs { forward: graph, backward: None };
    let got = mithrilc::exec::run_once(&GgmlTarget, &graphs, &feeds, Path::new("model.ir"), &BuildConfig::default(), Default::default()).map_err(|e| e.to_string());
    (got, want)
}

/// Where `got` and `want` differ (exactly: NaN where the other is NaN, infinities of
/// the same sign), an output a line.
fn differences(got: &Outputs, want: &Outputs) -> Vec<String> {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .filter_map(|((name, g), (_, w))| {
            let same = g.shape == w.shape && g.data.iter().zip(&w.data).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()));
            (!same).then(|| format!("{name}: got {:?} {:?}, the interpreter {:?} {:?}", g.shape, g.data, w.shape, w.data))
        })
        .collect()
}

fn f32s(shape: &[u64], data: &[f64]) -> mithrilc::tensor::Tensor {
    mithrilc::tensor::Tensor::new(mithrilc::ir::Dtype::F32, shape.to_vec(), data.to_vec())
}

/// A gather index is range-checked in the type the model declares before anything
/// narrows it to ggml's int32 rows: token 2^32 + 3 (as i64) is refused, not run as row 3,
/// as are 2^31 and -2^32 + 1; indices in range, negative ones too, match the interpreter.
#[test]
fn an_index_beyond_int32_is_refused() {
    let Some(_) = ggml_ready() else { return };
    let ir = "graph emb {\n  %0 = input \"tokens\" : i64[2, 3]\n  %1 = param \"table\" : f32[5, 2]\n  %2 = gather %1, %0 {axis = 0} : f32[2, 3, 2]\n  output \"y\" = %2\n}\n";
    let table = f32s(&[5, 2], &(0..10).map(f64::from).collect::<Vec<_>>());
    let tokens = |t: [f64; 6]| mithrilc::tensor::Tensor::new(mithrilc::ir::Dtype::I64, vec![2, 3], t.to_vec());
    let (got, want) = ggml_and_interpreter(ir, &[("tokens", tokens([0.0, 4.0, -5.0, -1.0, 2.0, 3.0])), ("table", table.clone())]);
    let bad = differences(&got.unwrap(), &want.unwrap());
    assert!(bad.is_empty(), "{bad:?}");
    for t in [4294967299.0, 2147483648.0, -4294967295.0] {
        let (got, _) = ggml_and_interpreter(ir, &[("tokens", tokens([0.0, 1.0, t, 2.0, 3.0, 4.0])), ("table", table.clone())]);
        assert_eq!(got.err().as_deref(), Some("the compiled model: a gather or embedding index is out of range (outside [-n, n) for an axis of size n)"), "token {t}");
    }
}

/// Inputs and outputs in their declared types: an i64 input read as a number (and
/// given back), a bool input negated, match the interpreter; an integer beyond ±2^24,
/// which ggml's f32 cannot hold exactly, is refused rather than rounded.
#[test]
fn integers_and_booleans_keep_their_types() {
    let Some(_) = ggml_ready() else { return };
    let ir = "graph ints {\n  %0 = input \"n\" : i64[3]\n  %1 = cast %0 {to = f32} : f32[3]\n  %2 = input \"b\" : bool[3]\n  %3 = not %2 : bool[3]\n  output \"x\" = %1\n  output \"same\" = %0\n  output \"not\" = %3\n}\n";
    let ints = |v: [f64; 3]| mithrilc::tensor::Tensor::new(mithrilc::ir::Dtype::I64, vec![3], v.to_vec());
    let bools = mithrilc::tensor::Tensor::new(mithrilc::ir::Dtype::Bool, vec![3], vec![1.0, 0.0, 1.0]);
    let (got, want) = ggml_and_interpreter(ir, &[("n", ints([3.0, -16777216.0, 16777216.0])), ("b", bools.clone())]);
    let (got, want) = (got.unwrap(), want.unwrap());
    assert_eq!(got.iter().map(|(_, t)| t.dtype).collect::<Vec<_>>(), [mithrilc::ir::Dtype::F32, mithrilc::ir::Dtype::I64, mithrilc::ir::Dtype::Bool]);
    let bad = differences(&got, &want);
    assert!(bad.is_empty(), "{bad:?}");
    for n in [16777217.0, -16777217.0, 4294967299.0] {
        let (got, _) = ggml_and_interpreter(ir, &[("n", ints([0.0, n, 1.0])), ("b", bools.clone())]);
        assert_eq!(got.err().as_deref(), Some("the compiled model: an integer input is beyond +-2^24, where ggml's f32 holds every integer"), "{n}");
    }
}

/// NaN and infinities through relu, maximum, minimum, max and min reductions, max
/// pooling (plain, padded, dilated, over a row of `-inf`), comparisons, sign and a cast
/// to bool: the same as the interpreter's (which propagates NaN as NumPy does), NaN
/// positions included.
#[test]
fn nan_propagates_like_the_interpreter() {
    let Some(_) = ggml_ready() else { return };
    let ir = "graph nans {
  %0 = input \"x\" : f32[1, 2, 4, 4]
  %1 = input \"y\" : f32[1, 2, 4, 4]
  %2 = relu %0 : f32[1, 2, 4, 4]
  %3 = max %0, %1 : f32[1, 2, 4, 4]
  %4 = min %0, %1 : f32[1, 2, 4, 4]
  %5 = reduce_max %0 {axes = [3], keepdim = false} : f32[1, 2, 4]
  %6 = reduce_min %0 {axes = [1, 3], keepdim = false} : f32[1, 4]
  %7 = max_pool %0 {kernel = [2, 2], stride = [2, 2], padding = [(0, 0), (0, 0)], dilation = [1, 1]} : f32[1, 2, 2, 2]
  %8 = max_pool %0 {kernel = [3, 3], stride = [1, 1], padding = [(1, 1), (1, 1)], dilation = [1, 1]} : f32[1, 2, 4, 4]
  %9 = max_pool %0 {kernel = [2, 2], stride = [1, 1], padding = [(0, 1), (1, 0)], dilation = [2, 1]} : f32[1, 2, 3, 4]
  %10 = eq %0, %1 : bool[1, 2, 4, 4]
  %11 = ne %0, %1 : bool[1, 2, 4, 4]
  %12 = lt %0, %1 : bool[1, 2, 4, 4]
  %13 = le %0, %1 : bool[1, 2, 4, 4]
  %14 = gt %0, %1 : bool[1, 2, 4, 4]
  %15 = ge %0, %1 : bool[1, 2, 4, 4]
  %16 = sign %0 : f32[1, 2, 4, 4]
  %17 = cast %0 {to = bool} : bool[1, 2, 4, 4]
  %18 = max_pool %0 {kernel = [1, 2], stride = [1, 2], padding = [(0, 0), (0, 0)], dilation = [1, 1]} : f32[1, 2, 4, 2]
  output \"relu\" = %2
  output \"maximum\" = %3
  output \"minimum\" = %4
  output \"max\" = %5
  output \"min\" = %6
  output \"pool\" = %7
  output \"padded_pool\" = %8
  output \"dilated_pool\" = %9
  output \"eq\" = %10
  output \"ne\" = %11
  output \"lt\" = %12
  output \"le\" = %13
  output \"gt\" = %14
  output \"ge\" = %15
  output \"sign\" = %16
  output \"nonzero\" = %17
  output \"row_pool\" = %18
}
";
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    let x = [nan, -1.0, 2.0, -inf, 0.5, -2.0, nan, 3.0, -inf, -inf, -inf, -inf, 1.0, inf, -3.0, 0.0, -1.0, -2.0, -3.0, -4.0, nan, nan, 1.0, 2.0, inf, -inf, 0.0, 0.0, 5.0, 6.0, 7.0, nan];
    let y = [1.0, nan, 2.0, -inf, -inf, 3.0, nan, -1.0, 0.0, inf, -inf, 2.0, nan, inf, -3.0, 1.0, -2.0, -1.0, nan, 4.0, 0.0, nan, -1.0, 3.0, inf, -inf, nan, 1.0, 5.0, 7.0, 6.0, 1.0];
    let (got, want) = ggml_and_interpreter(ir, &[("x", f32s(&[1, 2, 4, 4], &x)), ("y", f32s(&[1, 2, 4, 4], &y))]);
    let (got, want) = (got.unwrap(), want.unwrap());
    for (name, t) in want.iter().filter(|(_, t)| t.dtype.is_float()) {
        assert!(t.data.iter().any(|v| v.is_nan()), "the interpreter's {name} holds no NaN");
    }
    let bad = differences(&got, &want);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// A batch of 0 runs, as on the other targets, giving an empty output (ggml itself
/// cannot allocate a tensor of no elements: the library never asks it to): the example
/// MLP through `mithrilc run --target ggml`, and a graph whose outputs are empty (a
/// product, an embedding of no tokens) and not (a parameter).
#[test]
fn a_batch_of_zero_gives_an_empty_output() {
    let Some(_) = ggml_ready() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = mithrilc::data::read_arrays(&root.join("examples/mlp/data.npz")).unwrap();
    let mut arrays: Vec<(String, mithrilc::tensor::Tensor)> = example.arrays.iter().filter_map(|(k, t)| k.strip_prefix("param/").map(|n| (n.to_string(), t.clone()))).collect();
    arrays.push(("input".into(), f32s(&[0, 5], &[])));
    mithrilc::data::write_npz(&dir.path().join("b0.npz"), &arrays).unwrap();
    let model = root.join("examples/mlp/mlp.json").display().to_string();
    for (target, out) in [("ggml", "g.npz"), ("interp", "i.npz")] {
        let (code, _, stderr) = mithrilc_in(dir.path(), &["run", &model, "--data", "b0.npz", "--target", target, "-o", out]);
        assert_eq!((code, stderr.as_str()), (0, ""), "{target}");
    }
    let read = |f: &str| mithrilc::data::read_arrays(&dir.path().join(f)).unwrap().arrays;
    assert_eq!(read("g.npz"), read("i.npz"));
    assert_eq!(read("g.npz").values().next().unwrap().shape, vec![0, 3]);
    let ir = "graph b0 {
  %0 = input \"x\" : f32[0, 5]
  %1 = param \"w\" : f32[3, 5]
  %2 = transpose %1 {perm = [1, 0]} : f32[5, 3]
  %3 = matmul %0, %2 : f32[0, 3]
  %4 = relu %3 : f32[0, 3]
  %5 = input \"tokens\" : i64[0]
  %6 = gather %1, %5 {axis = 0} : f32[0, 5]
  output \"y\" = %4
  output \"rows\" = %6
  output \"w\" = %1
}
";
    let w = f32s(&[3, 5], &(0..15).map(f64::from).collect::<Vec<_>>());
    let tokens = mithrilc::tensor::Tensor::new(mithrilc::ir::Dtype::I64, vec![0], vec![]);
    let (got, want) = ggml_and_interpreter(ir, &[("x", f32s(&[0, 5], &[])), ("w", w), ("tokens", tokens)]);
    let (got, want) = (got.unwrap(), want.unwrap());
    assert_eq!(got.iter().map(|(_, t)| t.shape.clone()).collect::<Vec<_>>(), vec![vec![0, 3], vec![0, 5], vec![3, 5]]);
    let bad = differences(&got, &want);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // A result with elements read from one of none (the interpreter's sum of nothing is
    // 0) is refused when compiling, not left to ggml.
    let g = mithrilc::ir::parse::parse("graph sum0 {\n  %0 = input \"x\" : f32[0, 3]\n  %1 = reduce_sum %0 {axes = [0], keepdim = false} : f32[3]\n  output \"y\" = %1\n}\n").unwrap();
    assert_eq!(
        check_supported(&GgmlTarget, &g).unwrap_err().to_string(),
        "the ggml target cannot compile 1 node of the model:
  reduce_sum f32[3] (%1): an operand of no elements in a result with some (ggml cannot allocate a tensor of no elements)
  note: ops it cannot compile here: reduce_sum"
    );
}

/// The mithrilc binary run in `dir`: (exit status, stdout, stderr).
fn mithrilc_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mithrilc")).current_dir(dir).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A Mithril model of one `submodel` (`Relu`, `Add`) whose ports are named as `ports`
/// says (its key, then the name the model gives it).
fn one_op_model(submodel: &str, ports: &[(&str, &str)]) -> String {
    let connections: Vec<String> = ports.iter().map(|(k, n)| format!("\"{k}\": {{\"key\": {{\"name\": \"{n}\"}}}}")).collect();
    format!(
        r#"{{"name": "Model", "args": {{}},
        "connections": {{"m_0": {{{}}}}},
        "submodels": {{"m_0": {{"name": "{submodel}", "args": {{}}, "exposed_keys": ["output"], "assigned_shapes": [], "assigned_types": [],
            "assigned_differentiabilities": [], "assigned_constraints": [], "assigned_cins": [], "assigned_couts": []}}}},
        "exposed_keys": [], "assigned_shapes": [], "assigned_types": [], "assigned_differentiabilities": [], "assigned_constraints": [],
        "assigned_cins": [], "assigned_couts": []}}"#,
        connections.join(", ")
    )
}

/// Input names may hold `=` (a model may name its ports so): `mithrilc run --target
/// ggml` passes its inputs to the demo by index, and matches the interpreter on a model
/// with inputs `a` and `a=b`.
#[test]
fn an_input_named_with_equals_runs() {
    let Some(_) = ggml_ready() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("add.json"), one_op_model("Add", &[("left", "a"), ("right", "a=b"), ("output", "output")])).unwrap();
    let (a, b) = (f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), f32s(&[2, 3], &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]));
    mithrilc::data::write_npz(&dir.path().join("d.npz"), &[("a".into(), a), ("a=b".into(), b)]).unwrap();
    for (target, out) in [("ggml", "g.npz"), ("interp", "i.npz")] {
        let (code, _, stderr) = mithrilc_in(dir.path(), &["run", "add.json", "--data", "d.npz", "--target", target, "-o", out]);
        assert_eq!((code, stderr.as_str()), (0, ""), "{target}");
    }
    let read = |f: &str| mithrilc::data::read_arrays(&dir.path().join(f)).unwrap().arrays;
    let (got, want) = (read("g.npz"), read("i.npz"));
    assert_eq!(got, want);
    assert_eq!(got.values().next().unwrap().data, vec![11.0, 22.0, 33.0, 44.0, 55.0, 66.0]);
}

/// The demo writes files only under `--out` (run without it, in an empty directory, it
/// leaves the directory empty); its command line is mr_files.c's (`mr_cli_parse`, as
/// the C target's demo's): `--threads` and `--repeat` refuse what is not a whole number
/// within their bounds (1 to 64 threads, 1 to 10000000 calls), `--gguf` wants a value
/// and is given once, and `--input` names an input exactly, refusing a name that fits
/// two inputs (`a=b=FILE`: `a` or `a=b`) in favour of `--input-index I=FILE`.
#[test]
fn the_demo_checks_its_arguments_and_writes_only_under_out() {
    let Some(_) = ggml_ready() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mlp");
    let (_, data) = compile_example_mlp(&out);
    mithrilc::data::write_npy(&out.join("x.npy"), &data.arrays["input/input"]).unwrap();
    let cwd = dir.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let demo = |args: &[&str]| {
        let run = Command::new(out.join("mlp_demo")).current_dir(&cwd).arg("--gguf").arg(out.join("mlp.gguf")).args(args).output().unwrap();
        (run.status.code().unwrap_or(-1), String::from_utf8_lossy(&run.stderr).into_owned())
    };
    let x = out.join("x.npy").display().to_string();
    let input = format!("input={x}");
    let (code, stderr) = demo(&["--input", &input, "--threads", "2", "--repeat", "3"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0, "the demo wrote into its working directory without --out");
    let outputs = dir.path().join("outputs");
    std::fs::create_dir(&outputs).unwrap();
    let (code, stderr) = demo(&["--input-index", &format!("0={x}"), "--out", outputs.to_str().unwrap()]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    let got = mithrilc::data::read_arrays(&outputs.join("output_0.npy")).unwrap();
    let want = &data.arrays["output/output"];
    assert!(got.arrays.values().next().unwrap().data.iter().zip(&want.data).all(|(g, w)| (g - w).abs() <= 1e-5));
    for (flag, value, bound) in [
        ("--threads", "abc", "1 to 64"),
        ("--threads", "2x", "1 to 64"),
        ("--threads", "", "1 to 64"),
        ("--threads", "0", "1 to 64"),
        ("--threads", "-1", "1 to 64"),
        ("--threads", "+2", "1 to 64"),
        ("--threads", "65", "1 to 64"),
        ("--threads", "100000", "1 to 64"),
        ("--threads", "99999999999999999999999", "1 to 64"),
        ("--repeat", "0", "1 to 10000000"),
        ("--repeat", "-1", "1 to 10000000"),
        ("--repeat", "abc", "1 to 10000000"),
        ("--repeat", "10000001", "1 to 10000000"),
        ("--repeat", " 1", "1 to 10000000"),
    ] {
        let (code, stderr) = demo(&["--input", &input, flag, value]);
        assert_eq!((code, stderr), (1, format!("mlp_demo: {flag} wants a whole number from {bound}, not '{value}'\n")));
    }
    for (args, want) in [
        (vec!["--input".to_string(), format!("nothing={x}")], format!("mlp_demo: --input 'nothing={x}' names no input of the model (its inputs: 'input')\n")),
        (vec!["--input-index".to_string(), format!("1={x}")], format!("mlp_demo: --input-index wants I=FILE.npy with I from 0 to 0 (the model's inputs), not '1={x}'\n")),
        (vec!["--input-index".to_string(), format!("-0={x}")], format!("mlp_demo: --input-index wants I=FILE.npy with I from 0 to 0 (the model's inputs), not '-0={x}'\n")),
        (vec!["--input-index".to_string(), x.clone()], format!("mlp_demo: --input-index wants I=FILE.npy with I from 0 to 0 (the model's inputs), not '{x}'\n")),
        (vec!["--threads".to_string()], "mlp_demo: --threads wants a value\n".to_string()),
        (vec!["--gguf".to_string()], "mlp_demo: --gguf wants a value\n".to_string()),
        (vec!["--gguf".to_string(), out.join("mlp.gguf").display().to_string()], "mlp_demo: --gguf is given twice\n".to_string()),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(demo(&args), (1, want));
    }
    assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0);
    // A model whose inputs are `a` and `a=b`.
    let add = dir.path().join("add");
    let graph = mithrilc::ir::parse::parse("graph add {\n  %0 = input \"a\" : f32[2]\n  %1 = input \"a=b\" : f32[2]\n  %2 = add %0, %1 : f32[2]\n  output \"y\" = %2\n}\n").unwrap();
    let files = GgmlTarget.emit(&mithrilc::pipeline::Graphs { forward: graph, backward: None }, &EmitOptions { weights: Some(BTreeMap::new()), ..Default::default() }).unwrap().files;
    std::fs::create_dir(&add).unwrap();
    for (name, bytes) in &files {
        std::fs::write(add.join(name), bytes).unwrap();
    }
    GgmlTarget.toolchain().build(&add, &BuildConfig::default()).unwrap();
    mithrilc::data::write_npy(&add.join("one.npy"), &f32s(&[2], &[1.0, 2.0])).unwrap();
    mithrilc::data::write_npy(&add.join("ten.npy"), &f32s(&[2], &[10.0, 20.0])).unwrap();
    std::fs::write(add.join("b=ten.npy"), std::fs::read(add.join("ten.npy")).unwrap()).unwrap();
    let run = |args: &[&str]| {
        let run = Command::new(add.join("add_demo")).current_dir(&add).args(args).output().unwrap();
        (run.status.code().unwrap_or(-1), String::from_utf8_lossy(&run.stderr).into_owned())
    };
    assert_eq!(
        run(&["--input", "a=b=ten.npy"]),
        (1, "add_demo: --input 'a=b=ten.npy' is ambiguous: it fits the inputs 'a' and 'a=b' (names may contain '='); use --input-index I=FILE, I the input's position from 0\n".to_string())
    );
    assert_eq!(run(&["--input-index", "0=one.npy", "--input-index", "1=ten.npy", "--out", "."]), (0, String::new()));
    let y = mithrilc::data::read_arrays(&add.join("output_0.npy")).unwrap();
    assert_eq!(y.arrays.values().next().unwrap().data, vec![11.0, 22.0]);
}

/// The demo reads a `.npy` header as the dictionary it is (mr_files.c): a Fortran-order
/// array (in spellings NumPy reads) is transposed to C order, never read as C order, so
/// the outputs match the interpreter's on the same values; the element type is the
/// whole `descr`, not a substring found anywhere in the header; a header NumPy would not
/// write (an unknown key, a key twice) is refused. The same header in double quotes, as
/// NumPy also reads, is read. An output of rank 200 (a header far beyond 512 bytes) is
/// written whole and matches the interpreter.
#[test]
fn the_demo_reads_npy_headers_strictly_and_writes_any_rank() {
    let Some(_) = ggml_ready() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mlp");
    let (_, data) = compile_example_mlp(&out);
    let x = &data.arrays["input/input"];
    let le: Vec<u8> = x.data.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect();
    // The same values in Fortran order: element (i, j) of [4, 5] at j * 4 + i.
    assert_eq!(x.shape, [4, 5]);
    let fortran: Vec<u8> = (0..5).flat_map(|j| (0..4).map(move |i| i * 5 + j)).flat_map(|k| (x.data[k] as f32).to_le_bytes()).collect();
    assert_ne!(fortran, le, "the input is its own transpose: the test could not tell the orders apart");
    let demo = |dict: &str, data: &[u8]| {
        std::fs::write(out.join("x.npy"), common::npy_file(dict, data)).unwrap();
        let run = Command::new(out.join("mlp_demo")).current_dir(&out).args(["--input", "input=x.npy", "--out", "."]).output().unwrap();
        (run.status.code().unwrap_or(-1), String::from_utf8_lossy(&run.stderr).into_owned())
    };
    for (dict, want) in [
        ("{'descr': '>f4', 'fortran_order': False, 'shape': (4, 5), 'note': '<f4'}", "mlp_demo: x.npy: the .npy header has the key 'note' (it may have only 'descr', 'fortran_order' and 'shape')\n"),
        ("{'descr': '>f4', 'fortran_order': False, 'shape': (4, 5), }", "mlp_demo: x.npy: the array's element type is '>f4'; the input 'input' wants '<f4'\n"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 5), 'descr': '<f4'}", "mlp_demo: x.npy: the .npy header has the key 'descr' twice\n"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (5, 4), }", "mlp_demo: x.npy: dimension 0 of the array is 5; the input 'input' wants 4\n"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 5, 1), }", "mlp_demo: x.npy: the array has 3 dimension(s); the input 'input' has 2\n"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 5), } x", "mlp_demo: x.npy: the .npy header has text after its dictionary\n"),
        ("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (4, 5), }", "mlp_demo: x.npy: the .npy header's fortran_order is not True or False\n"),
    ] {
        assert_eq!(demo(dict, &le), (1, want.to_string()), "{dict}");
    }
    let c_order = ["{'descr': '<f4', 'fortran_order': False, 'shape': (4, 5), }", "{\"shape\": (4,5,), \"descr\": \"<f4\", \"fortran_order\": False}"];
    let fortran_order =
        ["{'descr': '<f4', 'fortran_order': True, 'shape': (4, 5), }", "{'descr':'<f4','fortran_order':True,'shape':(4,5)}", "{\"shape\": (4, 5), \"fortran_order\": True, \"descr\": \"<f4\"}"];
    for (dict, bytes) in c_order.iter().map(|d| (d, &le)).chain(fortran_order.iter().map(|d| (d, &fortran))) {
        assert_eq!(demo(dict, bytes), (0, String::new()), "{dict}");
        let got = mithrilc::data::read_arrays(&out.join("output_0.npy")).unwrap();
        let want = &data.arrays["output/output"];
        assert!(got.arrays.values().next().unwrap().data.iter().zip(&want.data).all(|(g, w)| (g - w).abs() <= 1e-5), "{dict}");
    }
    // rank 200: [1, ..., 1, 2, 3]
    let shape: Vec<String> = std::iter::repeat_n("1".to_string(), 198).chain(["2".into(), "3".into()]).collect();
    let ir = format!("graph tall {{\n  %0 = input \"x\" : f32[2, 3]\n  %1 = reshape %0 : f32[{}]\n  output \"y\" = %1\n}}\n", shape.join(", "));
    let (got, want) = ggml_and_interpreter(&ir, &[("x", f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))]);
    let (got, want) = (got.unwrap(), want.unwrap());
    assert_eq!(got[0].1.shape.len(), 200);
    assert!(differences(&got, &want).is_empty());
}
