//! `--quantize` on the C target (weights of matrix products and convolutions stored as
//! f16, bf16 or q8_0 in `weights.bin`, computed in f32; or int8, whose products
//! multiply in int8, their inputs quantized as they run):
//! - every bench model at batch 1, built once per type (the runtime compiled once for
//!   all: `common::c_build`), against the f32 interpreter within a tolerance per type,
//!   relative to each output's largest magnitude; the measured errors are printed; and
//!   the same through the JIT (`--target jit`, the C target's program in this process);
//! - the blob: about half the f32 size in f16 and bf16, about 0.28 in q8_0 and at most
//!   that in int8, and the same bytes from two compiles;
//! - `export-weights` of a narrow blob gives back the values it stores, with a note;
//! - the usage errors: a type the target does not take, `--grad`, `--weights
//!   safetensors`, the interpreter; and `run --check`'s line with the relative error.

use crate::common::{self, c_build, cases};

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use cases::Case;
use mithrilc::backend::{Backend, EmitOptions, Quantize};
use mithrilc::codegen::c::backend::CTarget;
use mithrilc::data;
use mithrilc::lower::Stored;
use mithrilc::passes::autodiff::Wrt;

/// The bench models, each at batch 1 with its reference input.
fn bench_cases() -> Option<Vec<Case>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench");
    if !dir.join("MANIFEST.json").exists() {
        common::skip("../shared/bench is not present");
        return None;
    }
    let load = |model: &str| {
        let params = data::read_arrays(&dir.join(format!("{model}.safetensors"))).unwrap();
        let input = data::read_arrays(&dir.join(format!("{model}_b1_input.npy"))).unwrap();
        let input = data::ArrayFile { path: input.path.clone(), arrays: [("input".to_string(), input.arrays.into_values().next().unwrap())].into_iter().collect() };
        cases::load(&dir.join(format!("{model}.json")), &[&params, &input], vec![], Wrt::None, format!("{model} b1"))
    };
    Some(["mlp", "lenet", "cnn", "gpt_block"].into_iter().map(load).collect())
}

/// The largest error each type may make, as a fraction of an output's largest
/// magnitude: measured on the bench models at batch 1 (the largest of the four, as this
/// test prints: f16 4.8e-4, bf16 4.4e-3, q8_0 1.22e-2, each mlp's; int8 2.31e-2, mlp's,
/// its products' inputs quantized too) with 1.6-2x headroom.
const TOLERANCES: [(Stored, f64); 4] = [(Stored::F16, 1e-3), (Stored::Bf16, 8e-3), (Stored::Q8_0, 2e-2), (Stored::Int8, 4e-2)];

#[test]
fn bench_models_with_narrow_weights_stay_within_their_tolerance() {
    let Some(all) = bench_cases() else { return };
    let Some(tc) = c_build::toolchain(&["-O2".to_string()]) else {
        common::skip("a C compiler is needed (apt-get install gcc, or set CC)");
        return;
    };
    let runs: Vec<(Stored, f64, &Case)> = TOLERANCES.iter().flat_map(|&(s, tol)| all.iter().map(move |c| (s, tol, c))).collect();
    let measured = Mutex::new(Vec::new());
    let failures = common::each_case(&runs, |&(stored, tol, case)| {
        let label = format!("{} in {}", case.label, stored.name());
        let want = mithrilc::interp::run(case.graph(), &case.feeds).map_err(|e| format!("{label}: interpreter: {e}"))?;
        let dir = tc.dir.path().join(label.replace(' ', "_"));
        let opts = mithrilc::lower::Options { library: mithrilc::codegen::c::LIBRARY, quantize: stored, ..Default::default() };
        let got = c_build::run_c_lowered(tc, &case.graphs, &case.feeds, &dir, &opts).map_err(|e| format!("{label}: {e}"))?;
        let (mut bad, err) = cases::compare_scaled(&label, &got, &want, tol);
        let quantize = match stored {
            Stored::F16 => Quantize::F16,
            Stored::Bf16 => Quantize::Bf16,
            Stored::Int8 => Quantize::Int8,
            _ => Quantize::Q8_0,
        };
        let jit = {
            use mithrilc::exec::Executable;
            let mut exe = mithrilc::exec::Jit::new(&case.graphs, &case.feeds, EmitOptions { quantize, ..Default::default() }).map_err(|e| format!("{label}: jit: {e}"))?;
            exe.set_threads(1);
            exe.run(&case.feeds).map_err(|e| format!("{label}: jit: {e}"))?
        };
        let (jit_bad, jit_err) = cases::compare_scaled(&format!("{label} (jit)"), &jit, &want, tol);
        bad.extend(jit_bad);
        measured.lock().unwrap().push(format!("{label}: largest error {err:.2e} of the output's largest magnitude, jit {jit_err:.2e} (tolerance {tol:.0e})"));
        if bad.is_empty() { Ok(()) } else { Err(bad.join("\n")) }
    });
    let mut measured = measured.into_inner().unwrap();
    measured.sort();
    println!("{}", measured.join("\n"));
    assert_eq!(measured.len(), 16, "every bench model in every type");
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// `weights.bin` of `case` compiled with `quantize` (no build), and the sizes `--report`
/// gives.
fn blob(case: &Case, quantize: Quantize) -> (Vec<u8>, serde_json::Value) {
    let opts = EmitOptions { source: "model.json".into(), weights: Some(mithrilc::exec::param_weights(&case.graphs.forward, &case.feeds)), quantize, ..Default::default() };
    let emitted = CTarget.emit(&case.graphs, &opts).unwrap_or_else(|e| panic!("{}: {e}", case.label));
    let blob = emitted.files.into_iter().find(|(n, _)| n == "weights.bin").expect("weights.bin").1;
    (blob, emitted.sizes)
}

/// f16 and bf16 take half the bytes of f32, q8_0 4 per block of 32 and 1 per element
/// (0.28125 of f32), int8 1 per element and 8 per column (a scale and a sum) of the
/// products' weights, q8_0's for the others: the whole blob a little more (biases,
/// norms stay f32; alignment). cnn's int8 blob is smaller still: its f32 one holds four
/// convolutions' weights as Winograd's transform (36 elements for every 9), its int8
/// one their 9 codes (about 0.065 of f32).
/// Two compiles write the same bytes, and each type other ones.
#[test]
fn narrow_blobs_are_smaller_and_deterministic() {
    let Some(all) = bench_cases() else { return };
    for case in &all {
        let (wide, sizes) = blob(case, Quantize::F32);
        assert_eq!(sizes.get("weights_f32_bytes"), None, "{}", case.label);
        let mut seen = vec![wide.clone()];
        for (quantize, lo, hi) in [(Quantize::F16, 0.5, 0.505), (Quantize::Bf16, 0.5, 0.505), (Quantize::Q8_0, 0.28125, 0.2875), (Quantize::Int8, 0.25, 0.2875)] {
            let (narrow, sizes) = blob(case, quantize);
            let ratio = narrow.len() as f64 / wide.len() as f64;
            let (lo, hi) = if quantize == Quantize::Int8 && case.label == "cnn b1" { (0.0625, 0.07) } else { (lo, hi) };
            println!("{} in {}: {} bytes, {ratio:.4} of f32's {}", case.label, quantize.name(), narrow.len(), wide.len());
            assert!((lo..=hi).contains(&ratio), "{} in {}: {ratio}", case.label, quantize.name());
            assert_eq!(sizes["weights_bytes"], narrow.len() as u64, "{}", case.label);
            if lo < 0.25 {
                // (what the same layouts take in f32: cnn's int8 convolutions' panels, not
                // Winograd's transform)
                assert!(sizes["weights_f32_bytes"].as_u64() < Some(wide.len() as u64), "{}", case.label);
            } else {
                assert_eq!(sizes["weights_f32_bytes"], wide.len() as u64, "{}", case.label);
            }
            assert!(blob(case, quantize).0 == narrow, "{} in {}: two compiles differ", case.label, quantize.name());
            assert!(!seen.contains(&narrow), "{} in {}: the same bytes as another type", case.label, quantize.name());
            seen.push(narrow);
        }
    }
}

/// Runs `mithrilc ARGS` in `cwd`: exit code, stdout, stderr.
fn mithrilc(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mithrilc")).args(args).current_dir(cwd).output().expect("mithrilc starts");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn example(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mlp").join(file).display().to_string()
}

/// Every refusal is a usage error (exit 2) that says why and what to do instead.
#[test]
fn quantize_usage_errors_say_why() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, data) = (example("mlp.json"), example("data.npz"));
    let compile = |extra: &[&str]| mithrilc(&[&["compile", &model, "--params", &data, "-o", "out", "--emit", "source"], extra].concat(), tmp.path());
    let cases: [(&[&str], &str); 4] = [
        (&["--target", "c", "--quantize", "q4_0"], "error: --quantize q4_0: the c target stores its weights as f32, f16, bf16, q8_0, int8\n"),
        (&["--target", "metal", "--quantize", "f16"], "error: --quantize f16: the metal target stores its weights as f32\n"),
        (
            &["--target", "c", "--quantize", "q8_0", "--grad"],
            "error: --quantize q8_0 with --grad: gradients are taken of the f32 weights, which a training step updates in place\n  note: compile the trained model without --grad to store its weights narrow\n",
        ),
        (
            &["--target", "c", "--quantize", "bf16", "--weights", "safetensors"],
            "error: --quantize bf16 with --weights safetensors: the demo reads the parameters from the safetensors file at run time and does not narrow them\n  note: give --weights file (the default), embed or embed-c for a library with narrowed weights\n",
        ),
    ];
    for (extra, want) in cases {
        let (code, _, stderr) = compile(extra);
        assert_eq!((code, stderr.as_str()), (2, want), "{extra:?}");
    }
    assert!(!tmp.path().join("out").exists(), "nothing is written");
    let (code, _, stderr) = mithrilc(&["run", &model, "--data", &data, "--params", &data, "--quantize", "f16"], tmp.path());
    assert_eq!((code, stderr.as_str()), (2, "error: --quantize is for a compiled target (--target c or ggml): the interpreter reads the parameters as given\n"));
}

/// `run --target c --quantize q8_0 --check` builds the narrow library and prints, per
/// output, its largest difference from the f32 interpreter, the largest |reference| and
/// the ratio; the same run in f32 differs by rounding only.
#[test]
fn run_check_prints_the_narrowing_error_beside_the_reference_scale() {
    if !common::have("make") || !common::have(&mithrilc::build::c_compiler()) {
        common::skip("make and a C compiler are needed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (model, data) = (example("mlp.json"), example("data.npz"));
    let (code, stdout, stderr) = mithrilc(&["run", &model, "--data", &data, "--params", &data, "--target", "c", "--quantize", "q8_0", "--check"], tmp.path());
    assert_eq!((code, stderr.as_str()), (0, ""));
    let line = stdout.lines().next().unwrap();
    println!("{line}");
    let rest = line.strip_prefix("check output: largest difference from the interpreter ").unwrap_or_else(|| panic!("{stdout}"));
    let numbers: Vec<f64> = rest.split([' ', ',', '(', ')']).filter_map(|w| w.parse().ok()).collect();
    let [diff, scale, relative] = numbers[..] else { panic!("{line}") };
    assert!(rest.contains(" (largest |interpreter| ") && rest.ends_with(" of it)"), "{line}");
    assert!(diff > 1e-4 && relative < 2e-2 && (diff / scale - relative).abs() <= 1e-3 * relative, "{line}");
}

/// `export-weights --quantize q8_0` reads a narrow blob back as the values it stores
/// (each within half a q8_0 step of the parameter), noting which were narrow; without
/// the flag the blob is another size, and the error says which flags to give.
#[test]
fn export_weights_of_a_narrow_blob_gives_its_stored_values() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, data) = (example("mlp.json"), example("data.npz"));
    let (code, _, stderr) = mithrilc(&["compile", &model, "--params", &data, "--target", "c", "--quantize", "q8_0", "-o", "out", "--emit", "source"], tmp.path());
    assert_eq!((code, stderr.as_str()), (0, ""));
    let (code, stdout, stderr) = mithrilc(&["export-weights", &model, "--params", &data, "--quantize", "q8_0", "--weights", "out/weights.bin", "-o", "back.safetensors"], tmp.path());
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(
        stdout.ends_with("note: 3 parameter(s) were stored narrow and are written as the f32 values they store, the approximations the library computes with: weight0 (q8_0), weight1 (q8_0), weight2 (q8_0)\n"),
        "{stdout}"
    );
    let back = data::read_arrays(&tmp.path().join("back.safetensors")).unwrap();
    let original = data::read_arrays(Path::new(&data)).unwrap();
    let mut narrowed = 0;
    for (name, got) in &back.arrays {
        let want = original.arrays.get(name).or_else(|| original.arrays.get(&format!("param/{name}"))).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(got.shape, want.shape, "{name}");
        let scale = want.data.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let worst = got.data.iter().zip(&want.data).map(|(g, w)| (g - w).abs()).fold(0.0, f64::max);
        // a block's step is at most max|x| / 127; rounding is to the nearest step
        assert!(worst <= scale / 127.0 / 2.0 * 1.001, "{name}: {worst} against a scale of {scale}");
        narrowed += usize::from(worst > 0.0);
    }
    assert!(narrowed >= 1, "some parameter was narrowed");
    let (code, _, stderr) = mithrilc(&["export-weights", &model, "--params", &data, "--weights", "out/weights.bin", "-o", "f32.safetensors"], tmp.path());
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("give the model and the flags it was compiled with"), "{stderr}");
}
