//! The C target on real toolchains: every conformance case and every benchmark model is
//! compiled, built with gcc (and clang when installed) under
//! `-std=c99 -pedantic -Wall -Wextra -Werror`, run, and compared with the interpreter
//! within 1e-4 absolute + 1e-4 relative; once more under AddressSanitizer and UBSan.
//! They build through `run` (`mithrilc::exec::run_once`): the generated Makefile, with the
//! runtime's objects compiled once per compiler and flags and shared between models.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use mithrilc::cli::{self, BuildConfig};
use mithrilc::codegen::c::backend::CTarget;
use mithrilc::data::{self, ArrayFile};
use mithrilc::frontend::mithril;
use mithrilc::ir::{Graph, Shape, TensorType};
use mithrilc::passes;
use mithrilc::passes::autodiff::Wrt;
use mithrilc::tensor::Tensor;

use crate::common::{self, cases, onnx_build};
use cases::{cases, check_demo_at_batch, load, shared, shared_with_build, Case};
use common::have;

/// Builds and runs every case with `build`; compares with the interpreter.
fn check_all(build: &BuildConfig, filter: impl Fn(&Case) -> bool) {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    let all: Vec<Case> = cases(&dir).into_iter().filter(|c| filter(c)).collect();
    let worst = std::sync::Mutex::new((0.0f64, String::new()));
    let failures = common::each_case(&all, |case| {
        let want = mithrilc::interp::run(case.graph(), &case.feeds).unwrap();
        let got = mithrilc::exec::run_once(&CTarget, &case.graphs, &case.feeds, &case.source, build, Default::default()).map_err(|e| format!("{}: {e}", case.label))?;
        let (bad, err) = cases::compare(&case.label, &got, &want, 1e-4);
        let mut worst = worst.lock().unwrap();
        if err > worst.0 {
            *worst = (err, case.label.clone());
        }
        if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
    });
    let worst = worst.into_inner().unwrap();
    println!("{} with {}: {} models match the interpreter; worst abs error {:.2e} ({})", build.cc, build.cflags, all.len() - failures.len(), worst.0, worst.1);
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// Every model built by `cc` at -O2 and `flags`, when it is installed.
fn every_model_with(cc: &str, flags: &str) {
    if !have(cc) {
        common::skip(&format!("{cc} is not installed (apt-get install {cc})"));
        return;
    }
    check_all(&BuildConfig { cc: cc.into(), cflags: format!("-O2 {flags}").trim().to_string(), emulate: false, ..Default::default() }, |_| true);
}

/// Portable, as `compile` builds by default: the runtime's kernels dispatched at run
/// time (`tests/portable.rs` runs each kernel set).
#[test]
fn every_model_with_gcc() {
    every_model_with("gcc", "");
}

/// Without the dispatched kernel sets (`MR_NO_DISPATCH`), which the runtime's own tests
/// build with clang (`runtime-c/Makefile`): the models' code is what this checks, and
/// the sets would triple every build.
#[test]
fn every_model_with_clang() {
    every_model_with("clang", "-DMR_NO_DISPATCH");
}

#[test]
fn every_conformance_case_under_sanitizers() {
    if !have("gcc") {
        common::skip("gcc is not installed (apt-get install gcc)");
        return;
    }
    // Without the dispatched kernel sets, as with clang: the runtime's own tests run them
    // under the sanitizers.
    let flags = "-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -DMR_NO_DISPATCH";
    // The bench models at small batch sizes too; the large ones take long under ASan.
    check_all(&BuildConfig { cc: "gcc".into(), cflags: flags.into(), emulate: false, ..Default::default() }, |c| !c.label.ends_with("b32") && !c.label.ends_with("b8"));
}

/// The demo's file readers and writers for every element type, which the tests that run
/// many models no longer reach (they load each model into tests/common/c_runner.c, not
/// its demo) and the bench models' demos, all f32, do not: each type read from its
/// `.npy` file (bf16 from float32, the narrow floats as their codes, the 4- and 2-bit
/// integers from int8 or uint8) and written back as it is, and as f32.
#[test]
fn the_demo_reads_and_writes_every_element_type() {
    use mithrilc::ir::Dtype;
    use std::fmt::Write;
    let float = [1.5, -0.5, 0.0, 6.0];
    let types: Vec<(Dtype, [f64; 4])> = vec![
        (Dtype::F32, [1.25, -3.5, 0.0, 1e30]),
        (Dtype::F64, [1.0 / 3.0, -2.5e-300, 0.0, 1e300]),
        (Dtype::F16, [1.5, -65504.0, 0.0, 0.000_061_035_156_25]),
        (Dtype::Bf16, [1.5, -3.0e38, 0.0, 0.007_812_5]),
        (Dtype::I8, [127.0, -128.0, 0.0, -1.0]),
        (Dtype::U8, [255.0, 1.0, 0.0, 128.0]),
        (Dtype::I16, [32767.0, -32768.0, 0.0, -1.0]),
        (Dtype::U16, [65535.0, 1.0, 0.0, 32768.0]),
        (Dtype::I32, [2_147_483_647.0, -2_147_483_648.0, 0.0, -1.0]),
        (Dtype::U32, [4_294_967_295.0, 1.0, 0.0, 2_147_483_648.0]),
        (Dtype::I64, [9_007_199_254_740_992.0, -9_007_199_254_740_992.0, 0.0, -1.0]),
        (Dtype::U64, [9_007_199_254_740_992.0, 1.0, 0.0, 4_294_967_296.0]),
        (Dtype::Bool, [1.0, 0.0, 0.0, 1.0]),
        (Dtype::F8E4M3Fn, [448.0, -0.5, 0.0, 1.5]),
        (Dtype::F8E4M3Fnuz, float),
        (Dtype::F8E5M2, [57344.0, -0.5, 0.0, 1.5]),
        (Dtype::F8E5M2Fnuz, float),
        (Dtype::F4E2M1, float),
        (Dtype::I4, [7.0, -8.0, 0.0, -1.0]),
        (Dtype::U4, [15.0, 1.0, 0.0, 8.0]),
        (Dtype::I2, [1.0, -1.0, 0.0, -2.0]),
        (Dtype::U2, [3.0, 1.0, 0.0, 2.0]),
    ];
    let n = types.len();
    let mut text = String::from("graph every_type {\n");
    for (i, (d, _)) in types.iter().enumerate() {
        writeln!(text, "  %{i} = input \"x_{d}\" : {d}[4]").unwrap();
    }
    for (i, _) in types.iter().enumerate() {
        writeln!(text, "  %{} = cast %{i} {{to = f32}} : f32[4]", n + i).unwrap();
    }
    for (i, (d, _)) in types.iter().enumerate() {
        writeln!(text, "  output \"same_{d}\" = %{i}\n  output \"f32_{d}\" = %{}", n + i).unwrap();
    }
    text.push_str("}\n");
    let g = mithrilc::ir::parse::parse(&text).unwrap();
    mithrilc::ir::verify::verify(&g).unwrap();
    let feeds: BTreeMap<String, Tensor> = types.iter().map(|(d, v)| (format!("x_{d}"), Tensor::new(*d, vec![4], v.to_vec()))).collect();
    let want = mithrilc::interp::run(&g, &feeds).unwrap();
    let graphs = mithrilc::pipeline::Graphs { forward: g, backward: None };
    let got = mithrilc::exec::run_once(&CTarget, &graphs, &feeds, Path::new("every_type.json"), &BuildConfig::default(), Default::default()).unwrap();
    assert_eq!(got.len(), want.len());
    let bad: Vec<String> = got
        .iter()
        .zip(&want)
        .filter(|((_, g), (_, w))| g.dtype != w.dtype || g.shape != w.shape || g.data.iter().zip(&w.data).any(|(x, y)| x != y))
        .map(|((name, g), (_, w))| format!("{name}: {} {:?}, the interpreter's {} {:?}", g.dtype, g.data, w.dtype, w.data))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn generated_files_are_deterministic() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    let json = dir.join("bench/gpt_block.json");
    let params = data::read_arrays(&dir.join("bench/gpt_block.safetensors")).unwrap();
    let emit = || {
        let mut opts = mithril::Options::default();
        opts.shapes.insert("input".into(), Shape::known(&[1, 128, 768]));
        let mut g = mithril::load(&json, &opts).unwrap();
        passes::run_pipeline(&mut g, passes::PIPELINE, &Default::default(), |_, _| {}).unwrap();
        let p = mithrilc::passes::compile(&g, &mithrilc::lower::Options { library: mithrilc::codegen::c::LIBRARY, ..Default::default() }, mithrilc::codegen::c::PASSES, |_, _| {}).unwrap();
        let weights = params.arrays.iter().map(|(k, t)| (k.clone(), mithrilc::tensor::RawTensor::from_tensor(t))).collect();
        mithrilc::codegen::c::emit(&p, None, &mithrilc::codegen::c::Options { source: "gpt_block.json".into(), weights: Some(weights), ..Default::default() }).unwrap()
    };
    assert_eq!(emit(), emit());
}

/// The README's embedding example compiles against the example model's library and runs.
#[test]
fn readme_embedding_example_runs() {
    if !have("gcc") || !have("make") {
        common::skip("gcc and make are needed (apt-get install gcc make)");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme.find("```c\n#include <stdio.h>").expect("README has the embedding example") + 5;
    let code = &readme[start..start + readme[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mlp-c");
    let args = cli::CompileArgs {
        model: cli::ModelArgs { model: root.join("examples/mlp/mlp.json"), ..Default::default() },
        params: Some(root.join("examples/mlp/data.npz")),
        out: Some(out.clone()),
        ..Default::default()
    };
    cli::compile(&args).unwrap();
    std::fs::write(out.join("main.c"), code).unwrap();
    let cc = Command::new("gcc").current_dir(&out).args(["-std=gnu99", "-Wall", "-Wextra", "-Werror", "main.c", "libmlp.a", "-lm", "-o", "main"]).output().unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let run = Command::new(out.join("main")).current_dir(&out).output().unwrap();
    assert!(run.status.success());
    let y: f64 = String::from_utf8_lossy(&run.stdout).trim().parse().unwrap();
    assert!(y.is_finite() && y > 0.0 && y < 1.0, "a sigmoid output, got {y}");
}

/// The four ways to give the weights (a file, embedded with .incbin or as C arrays (cnn's
/// in three files), a safetensors file read by the demo), in either weight layout, compute the same outputs as the
/// interpreter: for lenet, and for cnn, whose 3x3 convolution weights the demo's
/// safetensors loader transforms for Winograd in the fast layout. In the plain layout
/// weights.bin holds every parameter's values unchanged, at the offsets model.h gives.
#[test]
fn every_weights_mode_and_layout_runs_lenet_and_cnn() {
    let Some(dir) = shared() else {
        common::skip("../shared is not present");
        return;
    };
    if !have("gcc") || !have("make") {
        common::skip("gcc and make are needed (apt-get install gcc make)");
        return;
    }
    for (model, shape) in [("lenet", "input=1,1,28,28"), ("cnn", "input=1,3,32,32")] {
        let params_path = dir.join(format!("bench/{model}.safetensors"));
        let input_path = dir.join(format!("bench/{model}_b1_input.npy"));
        let params = data::read_arrays(&params_path).unwrap();
        let input = data::read_arrays(&input_path).unwrap();
        let input = ArrayFile { path: input.path, arrays: [("input".to_string(), input.arrays[0].clone())].into_iter().collect() };
        let json = dir.join(format!("bench/{model}.json"));
        let case = load(&json, &[&params, &input], vec![], Wrt::None, format!("{model} b1"));
        let want = mithrilc::interp::run(case.graph(), &case.feeds).unwrap();
        use mithrilc::backend::{WeightLayout::*, WeightsMode::*};
        let modes = [(File, Fast), (Embed, Fast), (EmbedC, Fast), (Safetensors, Fast), (File, Plain), (Safetensors, Plain)];
        for (mode, layout) in modes {
            let tmp = tempfile::tempdir().unwrap();
            let out = tmp.path().join(format!("{model}-c"));
            let args = cli::CompileArgs {
                model: cli::ModelArgs { model: json.clone(), shapes: vec![shape.into()], ..Default::default() },
                params: Some(params_path.clone()),
                out: Some(out.clone()),
                weights: mode,
                layout,
                cflags: Some("-O2".into()),
                ..Default::default()
            };
            cli::compile(&args).unwrap_or_else(|e| panic!("{model} {mode:?} {layout:?}: {e}"));
            if (mode, layout) == (File, Plain) {
                plain_blob_holds_the_parameters(&out, model, &params);
            }
            let mut demo = Command::new(out.join(format!("{model}_demo")));
            demo.current_dir(&out).arg("--input").arg(format!("input={}", input_path.display())).arg("--out").arg(&out);
            match mode {
                File => demo.arg("--weights").arg(out.join("weights.bin")),
                Safetensors => demo.arg("--safetensors").arg(&params_path),
                Embed | EmbedC => &mut demo,
            };
            let run = demo.output().unwrap();
            assert!(run.status.success(), "{model} {mode:?} {layout:?}: {}", String::from_utf8_lossy(&run.stderr));
            let got = data::read_arrays(&out.join("output_0.npy")).unwrap();
            let got = got.arrays.values().next().unwrap();
            for (x, y) in got.data.iter().zip(&want[0].1.data) {
                assert!((x - y).abs() <= 1e-4 + 1e-4 * y.abs(), "{model} {mode:?} {layout:?}: got {x}, interpreter {y}");
            }
            if mode == Safetensors {
                half_checkpoints_load_at_run_time(&out, model, &params, &input, &json, &input_path, layout);
            }
        }
    }
}

/// The demo's run-time safetensors loader takes an f16 or bf16 checkpoint of the f32
/// model (converting each parameter on load, as mithrilc does at compile time): its
/// outputs are the interpreter's on the same rounded weights.
fn half_checkpoints_load_at_run_time(out: &Path, model: &str, params: &ArrayFile, input: &ArrayFile, json: &Path, input_path: &Path, layout: mithrilc::backend::WeightLayout) {
    for dtype in [mithrilc::ir::Dtype::F16, mithrilc::ir::Dtype::Bf16] {
        let label = format!("{model} {layout:?} {dtype} checkpoint");
        let arrays: Vec<(String, Tensor)> = params.arrays.iter().map(|(n, t)| (n.clone(), Tensor::new(dtype, t.shape.clone(), t.data.clone()))).collect();
        let file = out.join(format!("{model}_{dtype}.safetensors"));
        std::fs::write(&file, data::safetensors_bytes(&arrays).unwrap()).unwrap();
        let rounded = data::read_arrays(&file).unwrap();
        let case = load(json, &[&rounded, input], vec![], Wrt::None, label.clone());
        let want = mithrilc::interp::run(case.graph(), &case.feeds).unwrap();
        let run = Command::new(out.join(format!("{model}_demo")))
            .current_dir(out)
            .arg("--input")
            .arg(format!("input={}", input_path.display()))
            .arg("--out")
            .arg(out)
            .arg("--safetensors")
            .arg(&file)
            .output()
            .unwrap();
        assert!(run.status.success(), "{label}: {}", String::from_utf8_lossy(&run.stderr));
        let got = data::read_arrays(&out.join("output_0.npy")).unwrap();
        let got = got.arrays.values().next().unwrap();
        for (x, y) in got.data.iter().zip(&want[0].1.data) {
            assert!((x - y).abs() <= 1e-4 + 1e-4 * y.abs(), "{label}: got {x}, interpreter {y}");
        }
    }
}

/// Every parameter's little-endian f32 values lie unchanged in `out`/weights.bin at the
/// offset that model.h's comment and macro give (`/* weight I: "NAME", ... */` then
/// `#define <MODEL>_WEIGHT_I_OFFSET Nu`).
fn plain_blob_holds_the_parameters(out: &Path, model: &str, params: &ArrayFile) {
    let header = std::fs::read_to_string(out.join(format!("{model}.h"))).unwrap();
    let blob = std::fs::read(out.join("weights.bin")).unwrap();
    let mut lines = header.lines();
    let mut seen = 0;
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("/* weight ") else { continue };
        let name = rest.split('"').nth(1).unwrap();
        let offset: usize = lines.next().unwrap().rsplit(' ').next().unwrap().trim_end_matches('u').parse().unwrap();
        let want: Vec<u8> = params.arrays[name].data.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect();
        assert_eq!(&blob[offset..offset + want.len()], &want[..], "{model}: parameter {name} at {offset}");
        seen += 1;
    }
    assert_eq!(seen, params.arrays.len(), "{model}: parameters listed in {model}.h");
}

/// Two compiles of the same model (with the build) give byte-identical directories.
#[test]
fn output_directories_are_byte_identical() {
    let Some(dir) = shared_with_build() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let compile = |out: &Path| {
        let args = cli::CompileArgs {
            model: cli::ModelArgs { model: dir.join("bench/lenet.json"), shapes: vec!["input=1,1,28,28".into()], ..Default::default() },
            params: Some(dir.join("bench/lenet.safetensors")),
            out: Some(out.to_path_buf()),
            weights: mithrilc::codegen::c::WeightsMode::Embed,
            layout: cli::WeightLayout::Fast,
            cflags: Some("-O2".into()),
            ..Default::default()
        };
        cli::compile(&args).unwrap();
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(out)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
            })
            .collect();
        files.sort();
        files
    };
    let (a, b) = (compile(&tmp.path().join("a")), compile(&tmp.path().join("b")));
    let names: Vec<&String> = a.iter().map(|(n, _)| n).collect();
    assert_eq!(names, b.iter().map(|(n, _)| n).collect::<Vec<_>>());
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert!(x == y, "{name} differs between two compiles");
    }
}

/// A symbolic batch size: each bench model compiled once with `--shape input=B,...
/// --max B=N` runs at batch 1, 3 and N through its demo (which takes B from the input
/// file) and matches the interpreter run at that static batch.
#[test]
fn symbolic_batch_runs_at_every_size() {
    let Some(dir) = shared_with_build() else { return };
    let tmp = tempfile::tempdir().unwrap();
    for (model, max) in [("mlp", 32u64), ("lenet", 32), ("cnn", 32), ("gpt_block", 8)] {
        let params_path = dir.join(format!("bench/{model}.safetensors"));
        let params = data::read_arrays(&params_path).unwrap();
        let big = data::read_arrays(&dir.join(format!("bench/{model}_b{max}_input.npy"))).unwrap();
        let big = big.arrays.values().next().unwrap().clone();
        let row: Vec<String> = big.shape[1..].iter().map(|d| d.to_string()).collect();
        let out = tmp.path().join(model);
        let args = cli::CompileArgs {
            model: cli::ModelArgs {
                model: dir.join(format!("bench/{model}.json")),
                shapes: vec![format!("input=B,{}", row.join(","))],
                ..Default::default()
            },
            params: Some(params_path.clone()),
            out: Some(out.clone()),
            weights: mithrilc::codegen::c::WeightsMode::File,
            layout: cli::WeightLayout::Fast,
            cflags: Some("-O2".into()),
            max: vec![format!("B={max}")],
            ..Default::default()
        };
        cli::compile(&args).unwrap_or_else(|e| panic!("{model}: {e}"));
        for n in [1, 3, max] {
            check_demo_at_batch(&dir, model, &params, &big, n, &out.join(format!("{model}_demo")), &["--threads", "2"], &[]).unwrap();
        }
        // Past the maximum, the demo (and the library) refuse.
        let mut shape = big.shape.clone();
        shape[0] = max + 1;
        let per: usize = big.shape[1..].iter().product::<u64>() as usize;
        let mut too_big = big.data.clone();
        too_big.extend_from_slice(&big.data[..per]);
        let path = tmp.path().join(format!("{model}_too_big.npy"));
        data::write_npy(&path, &Tensor { dtype: big.dtype, shape, data: too_big }).unwrap();
        let run = Command::new(out.join(format!("{model}_demo"))).current_dir(&out).arg("--input").arg(format!("input={}", path.display())).output().unwrap();
        let want = format!("{model}_demo: {}: dimension 0 of the array is {}; the input 'input' takes 1 to {max} there\n", path.display(), max + 1);
        assert_eq!((run.status.code(), String::from_utf8_lossy(&run.stderr).into_owned()), (Some(1), want), "{model}: batch {} past --max {max}", max + 1);
    }
}

/// Pooling's gradients on the C target at input sizes its stride does not divide,
/// against the interpreter, built at `run --target c`'s -O3 with `compile --cpu native`'s
/// flags (this CPU's vector ISA for the whole program, `-march=native -DMR_NO_DISPATCH`). Each case is convolution, ReLU and pooling, as in a CNN: the rows
/// and columns past the last window get their zero gradient from a pad that fuses with
/// ReLU's gradient, a `where`, which GCC 12 miscompiled at -O3 with AVX2 or AVX-512
/// while the `where` left its loads conditional. Tiling windows (stride = kernel) and
/// overlapping, strided, padded and dilated ones, in 1-d and 2-d, max and average.
#[test]
fn pooling_gradients_at_sizes_the_stride_does_not_divide() {
    use mithrilc::ir::{ConvAttrs, Dtype, Op, Output, PoolAttrs, PoolKind, UnaryOp};
    if !have("make") || !have("cc") {
        common::skip("make and cc are needed (apt-get install make gcc)");
        return;
    }
    // (kind, input shape, kernel, stride, padding, dilation)
    type Config = (PoolKind, &'static [u64], &'static [u64], &'static [u64], &'static [(u64, u64)], &'static [u64]);
    let configs: &[Config] = &[
        (PoolKind::Max, &[2, 3, 5, 5], &[2, 2], &[2, 2], &[(0, 0); 2], &[1, 1]),
        (PoolKind::Max, &[1, 2, 7, 5], &[2, 2], &[2, 2], &[(0, 0); 2], &[1, 1]),
        (PoolKind::Max, &[1, 2, 9, 7], &[3, 3], &[3, 3], &[(0, 0); 2], &[1, 1]),
        (PoolKind::Max, &[1, 2, 5, 7], &[3, 2], &[3, 2], &[(0, 0); 2], &[1, 1]),
        (PoolKind::Max, &[2, 2, 7, 7], &[3, 3], &[2, 2], &[(0, 0); 2], &[1, 1]),
        (PoolKind::Max, &[1, 2, 9, 9], &[2, 2], &[3, 3], &[(0, 0); 2], &[1, 1]),
        (PoolKind::Max, &[1, 2, 6, 8], &[3, 3], &[3, 3], &[(1, 1); 2], &[1, 1]),
        (PoolKind::Max, &[1, 2, 9, 9], &[2, 2], &[2, 2], &[(0, 0); 2], &[2, 2]),
        (PoolKind::Max, &[2, 3, 7], &[2], &[2], &[(0, 0)], &[1]),
        (PoolKind::Max, &[2, 3, 9], &[3], &[2], &[(1, 1)], &[1]),
        (PoolKind::Avg, &[2, 3, 5, 5], &[2, 2], &[2, 2], &[(0, 0); 2], &[1, 1]),
        (PoolKind::Avg, &[1, 2, 7, 9], &[3, 3], &[2, 2], &[(1, 1); 2], &[1, 1]),
        (PoolKind::Avg, &[2, 3, 7], &[2], &[2], &[(0, 0)], &[1]),
    ];
    // At -O3 for this CPU alone (`compile --cpu native`'s flags): one build of each kernel
    // in this CPU's ISA, not the portable build's three clones (AVX-512, AVX2, baseline),
    // of which this machine runs one. The miscompile is GCC's at -O3 with AVX2 or AVX-512,
    // which -march=native gives on every CPU CI has had (SELECT_PROBE reproduces it so).
    let build = BuildConfig { cflags: common::c_build::for_this_cpu(mithrilc::cli::HOST_CFLAGS).join(" "), ..Default::default() };
    let failures = common::each_case(configs, |&(kind, xs, kernel, stride, padding, dilation)| {
        let attrs = PoolAttrs { kind, kernel: kernel.to_vec(), stride: stride.to_vec(), padding: padding.to_vec(), dilation: dilation.to_vec() };
        let label = format!("pool {xs:?} {attrs:?}");
        let mut g = Graph::new("pool");
        let param = |g: &mut Graph, name: &str, shape: &[u64]| {
            let v = g.push(Op::Param, vec![], TensorType::new(Dtype::F32, Shape::known(shape)));
            g.nodes[v.index()].name = Some(name.into());
            v
        };
        let node = |g: &mut Graph, op: Op, args: Vec<_>| {
            let tys: Vec<&TensorType> = args.iter().map(|&a| g.ty(a)).collect();
            let ty = passes::shape::infer(&op, &tys, &TensorType::new(Dtype::F32, Shape::scalar()), &g.consts).unwrap_or_else(|e| panic!("{label}: {e}"));
            g.push(op, args, ty)
        };
        // The convolution keeps the size (3 wide, padded by 1).
        let n = kernel.len();
        let x = param(&mut g, "x", xs);
        let w = param(&mut g, "w", &[&[xs[1], xs[1]][..], &vec![3; n]].concat());
        let conv = ConvAttrs { stride: vec![1; n], padding: vec![(1, 1); n], dilation: vec![1; n], groups: 1 };
        let c = node(&mut g, Op::Conv(conv), vec![x, w]);
        let r = node(&mut g, Op::Unary(UnaryOp::Relu), vec![c]);
        let y = node(&mut g, Op::Pool(attrs), vec![r]);
        g.outputs.push(Output { name: "y".into(), value: y, loss: false });
        let graphs = mithrilc::pipeline::Graphs::new(g, &Wrt::AllParams, |_, _| {}).unwrap_or_else(|e| panic!("{label}: {e}"));
        // Values on a 1/64 grid: the convolution is exact in f32, so the C code sees the
        // interpreter's ties.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || (common::xorshift64(&mut state) % 129) as f64 / 64.0 - 1.0;
        let main = graphs.main();
        let feeds: BTreeMap<String, Tensor> = main
            .inputs()
            .chain(main.params())
            .map(|v| {
                let ty = &main.node(v).ty;
                let shape = ty.shape.as_known().unwrap();
                let data = (0..shape.iter().product::<u64>()).map(|_| next()).collect();
                (main.node(v).name.clone().unwrap(), Tensor::new(ty.dtype, shape, data))
            })
            .collect();
        let want = mithrilc::interp::run(main, &feeds).unwrap_or_else(|e| panic!("{label}: {e}"));
        let got = mithrilc::exec::run_once(&CTarget, &graphs, &feeds, Path::new("pool.json"), &build, Default::default()).map_err(|e| format!("{label}: {e}"))?;
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            if g.shape != w.shape {
                return Err(format!("{label}: {name}: shape {:?}, interpreter {:?}", g.shape, w.shape));
            } else if let Some((i, (a, b))) = g.data.iter().zip(&w.data).enumerate().find(|(_, (a, b))| !((*a - *b).abs() <= 1e-4 + 1e-4 * b.abs())) {
                return Err(format!("{label}: {name}[{i}]: got {a}, interpreter {b}"));
            }
        }
        Ok(())
    });
    println!("{} with {}: {} pooling configurations checked", build.cc, build.cflags, configs.len());
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// Loop extents that are expressions of a symbol: an ONNX model reshapes `[B, 4, 8]` to
/// `[4*B, 8]` (its own `Shape` for the way back) for a product, a row sum and a
/// broadcast add. Compiled once with `--max B=5`, its demo computes at B = 1, 3 and 5
/// what the same arithmetic written out here gives.
/// Two symbols, one inside the other's dimension: an ONNX model of `x: [B, S, 4]`
/// reshapes it to rows `[B*S, 4]` for a product and back (`Shape` of x), adds position
/// vectors sliced to the sequence's length (`Slice` to `Shape(x)[1]`), and takes a
/// softmax and a mean over S. Compiled once with `--max B=3 S=6`, whose buffers are laid
/// out for the maxima, its demo reads and writes row-major arrays at every (B, S), and
/// computes what the interpreter computes at those sizes.
#[test]
fn symbols_inside_other_dimensions_run_at_every_size() {
    use onnx_build::{floats, info, ints, node, node_with, D};
    if !have("make") || !have("cc") {
        common::skip("make and cc are needed (apt-get install make gcc)");
        return;
    }
    let xs = [D::S("B"), D::S("S"), D::N(4)];
    let w: Vec<f32> = (0..16).map(|i| ((i * 37 % 19) as f32 - 9.0) / 8.0).collect();
    let pos: Vec<f32> = (0..24).map(|i| ((i * 11 % 13) as f32 - 6.0) / 4.0).collect();
    let nodes = vec![
        node("Shape", &["x"], "shape"),
        node("Slice", &["shape", "one", "two"], "length"),
        node("Slice", &["pos", "zero", "length", "one"], "p"),
        node("Reshape", &["x", "rows"], "r"),
        node("MatMul", &["r", "w"], "m"),
        node("Reshape", &["m", "shape"], "y0"),
        node("Add", &["y0", "p"], "y1"),
        node_with("Softmax", &["y1"], "sm", &[], &[("axis", 1)]),
        node_with("ReduceMean", &["sm"], "mean", &[("axes", &[1])], &[("keepdims", 1)]),
        node("Add", &["sm", "mean"], "y"),
    ];
    let inits = vec![floats("w", &[4, 4], &w), floats("pos", &[1, 6, 4], &pos), ints("rows", &[-1, 4]), ints("zero", &[0]), ints("one", &[1]), ints("two", &[2])];
    let dir = tempfile::tempdir().unwrap();
    let path = onnx_build::write(dir.path(), "inner", 13, nodes, vec![info("x", &xs)], vec![info("y", &xs)], inits);
    let out = dir.path().join("out");
    let args = cli::CompileArgs {
        model: cli::ModelArgs { model: path.clone(), ..Default::default() },
        out: Some(out.clone()),
        cflags: Some("-O2".into()),
        max: vec!["B=3".into(), "S=6".into()],
        ..Default::default()
    };
    cli::compile(&args).unwrap();
    let source = std::fs::read_to_string(out.join("inner.c")).unwrap();
    assert!(source.contains("input \"x\" laid out for its maxima"), "the input copied into the layout for the maxima:\n{source}");
    for (b, s) in [(1u64, 1u64), (2, 5), (3, 6), (3, 2)] {
        let x: Vec<f64> = (0..b * s * 4).map(|i| ((i * 13 % 23) as f64 - 11.0) / 7.0).collect();
        let x = Tensor::new(mithrilc::ir::Dtype::F32, vec![b, s, 4], x);
        let input = out.join(format!("x_{b}_{s}.npy"));
        data::write_npy(&input, &x).unwrap();
        let run = Command::new(out.join("inner_demo")).current_dir(&out).arg("--input").arg(format!("x={}", input.display())).arg("--out").arg(&out).output().unwrap();
        assert!(run.status.success(), "B={b}, S={s}: {}", String::from_utf8_lossy(&run.stderr));
        let got = data::read_arrays(&out.join("output_0.npy")).unwrap().arrays.into_values().next().unwrap();
        // The interpreter, with the sizes known.
        let known = [("x".to_string(), TensorType::new(mithrilc::ir::Dtype::F32, Shape::known(&[b, s, 4])))].into_iter().collect();
        let spec = mithrilc::pipeline::ModelSpec { path: path.clone(), frontend: mithrilc::frontend::Options { known_types: known, ..Default::default() }, ..Default::default() };
        let loaded = mithrilc::pipeline::load(&spec).unwrap();
        let mut feeds: BTreeMap<String, Tensor> = loaded.weights.iter().map(|(n, t)| (n.clone(), t.to_tensor())).collect();
        feeds.insert("x".into(), x);
        let want = mithrilc::interp::run(loaded.graphs.main(), &feeds).unwrap().remove(0).1;
        assert_eq!(got.shape, want.shape, "B={b}, S={s}");
        for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
            assert!((g - w).abs() <= 1e-5 + 1e-4 * w.abs(), "B={b}, S={s}, element {i}: {g} against the interpreter's {w}");
        }
    }
}

#[test]
fn expression_extents_run_at_every_size() {
    use onnx_build::{floats, info, ints, node, node_with, D};
    if !have("make") || !have("cc") {
        common::skip("make and cc are needed (apt-get install make gcc)");
        return;
    }
    let xs = [D::S("B"), D::N(4), D::N(8)];
    let w: Vec<f32> = (0..64).map(|i| ((i * 37 % 19) as f32 - 9.0) / 8.0).collect();
    let nodes = vec![
        node("Shape", &["x"], "shape"),
        node("Reshape", &["x", "rows"], "r"),
        node("MatMul", &["r", "w"], "m"),
        node("Relu", &["m"], "q"),
        node_with("ReduceSum", &["q"], "rs", &[("axes", &[1])], &[("keepdims", 1)]),
        node("Add", &["q", "rs"], "q2"),
        node("Reshape", &["q2", "shape"], "y"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = onnx_build::write(dir.path(), "rows", 12, nodes, vec![info("x", &xs)], vec![info("y", &xs)], vec![floats("w", &[8, 8], &w), ints("rows", &[-1, 8])]);
    let out = dir.path().join("out");
    let args = cli::CompileArgs {
        model: cli::ModelArgs { model: path, ..Default::default() },
        out: Some(out.clone()),
        cflags: Some("-O2".into()),
        max: vec!["B=5".into()],
        ..Default::default()
    };
    cli::compile(&args).unwrap();
    let source = std::fs::read_to_string(out.join("rows.c")).unwrap();
    assert!(source.contains("(4 * ctx.dims[0])"), "the extent 4*B at run time:\n{source}");
    for b in [1u64, 3, 5] {
        let x: Vec<f64> = (0..b * 32).map(|i| ((i * 13 % 23) as f64 - 11.0) / 7.0).collect();
        let input = out.join(format!("x_{b}.npy"));
        data::write_npy(&input, &Tensor::new(mithrilc::ir::Dtype::F32, vec![b, 4, 8], x.clone())).unwrap();
        let run = Command::new(out.join("rows_demo")).current_dir(&out).arg("--input").arg(format!("x={}", input.display())).arg("--out").arg(&out).output().unwrap();
        assert!(run.status.success(), "B={b}: {}", String::from_utf8_lossy(&run.stderr));
        let got = data::read_arrays(&out.join("output_0.npy")).unwrap().arrays.into_values().next().unwrap();
        assert_eq!(got.shape, [b, 4, 8]);
        for row in 0..(b * 4) as usize {
            let q: Vec<f64> = (0..8).map(|j| (0..8).map(|k| x[row * 8 + k] * w[k * 8 + j] as f64).sum::<f64>().max(0.0)).collect();
            let total: f64 = q.iter().sum();
            for j in 0..8 {
                let (g, want) = (got.data[row * 8 + j], q[j] + total);
                assert!((g - want).abs() <= 1e-4 + 1e-4 * want.abs(), "B={b}, row {row}, column {j}: {g} against {want}");
            }
        }
    }
}
