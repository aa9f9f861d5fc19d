//! The `mithrilc` binary end to end: exit codes, the whole text of every error message,
//! `--help`/`--version`, and the happy paths of `inspect` and `run`.
//!
//! Each command runs in the directory of its files and names them relatively, so the
//! paths in messages are short and stable. The models and data come from `../shared`;
//! without it each test prints one line saying it skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use mithrilc::data;
use mithrilc::ir::Dtype;
use mithrilc::tensor::Tensor;

use crate::common;

/// `../shared`, or `None` after printing why the test skips.
fn shared() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    if dir.join("testdata").is_dir() && dir.join("bench").is_dir() {
        Some(dir)
    } else {
        common::skip(&format!("{} (the shared test data) is missing", dir.display()));
        None
    }
}

/// Runs `mithrilc ARGS` in `cwd`; returns the exit code (-1 if killed by a signal),
/// stdout and stderr.
fn mithrilc(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mithrilc")).args(args).current_dir(cwd).output().expect("mithrilc starts");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("mithrilc writes UTF-8");
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

/// A temporary directory holding `files` (name, contents).
fn tempdir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write test file");
    }
    dir
}

/// An f32 array of `shape` whose elements are 0.5.
fn halves(shape: &[u64]) -> Tensor {
    let n = shape.iter().product::<u64>() as usize;
    Tensor::new(Dtype::F32, shape.to_vec(), vec![0.5; n])
}

// ---------------------------------------------------------------------------
// ../shared/testdata/bad: one failing file per validation rule.

/// Every file in `testdata/bad/` and the whole stderr of `mithrilc inspect FILE`.
const BAD: &[(&str, &str)] = &[
    (
        "connections_submodels_mismatch.json",
        "error: connections_submodels_mismatch.json: connections.m_1: 'connections' has key m_1 that 'submodels' lacks \
         (the two must list the same children)\n",
    ),
    (
        "dangling_connect.json",
        "error: dangling_connect.json: top-level Model: connections.m_0.input: connects to m_7.output, \
         but there is no submodel m_7 (children: m_0)\n",
    ),
    ("malformed.json", "error: malformed.json:28:8: malformed JSON: EOF while parsing a string\n"),
    (
        "shape_mismatch_add.json",
        "error: shape_mismatch_add.json: submodels.m_0 (Add): shapes [3, 4] and [5, 6] cannot be broadcast together \
         (dimension 0 of the result)\n  \
         note: add of left = `left` f32[3, 4] and right = `right` f32[5, 6]\n",
    ),
    (
        "shape_mismatch_matmul.json",
        "error: shape_mismatch_matmul.json: submodels.m_0 (MatrixMultiply): matmul of [2, 3] and [4, 5]: \
         inner dimensions differ (3 and 4)\n  \
         note: matmul of left = `left` f32[2, 3] and right = `right` f32[4, 5]\n",
    ),
    (
        "unknown_op.json",
        "error: unknown_op.json: submodels.m_0 (FusedMagicOp): unknown model class 'FusedMagicOp'\n  \
         note: a user-defined Model subclass is written under its class name and cannot be rebuilt without its Python code\n",
    ),
];

#[test]
fn bad_files_fail_with_their_messages() {
    let Some(shared) = shared() else { return };
    let bad = shared.join("testdata/bad");
    for (file, want) in BAD {
        let (code, stdout, stderr) = mithrilc(&["inspect", file], &bad);
        assert_eq!((code, stdout.as_str(), stderr.as_str()), (1, "", *want), "mithrilc inspect {file}");
    }
}

#[test]
fn every_bad_file_has_an_expected_message() {
    let Some(shared) = shared() else { return };
    let mut untested = Vec::new();
    for entry in std::fs::read_dir(shared.join("testdata/bad")).expect("read testdata/bad") {
        let name = entry.expect("directory entry").file_name().to_string_lossy().into_owned();
        if !BAD.iter().any(|(file, _)| *file == name) {
            untested.push(name);
        }
    }
    untested.sort();
    assert!(untested.is_empty(), "testdata/bad files without an expected message in BAD: {untested:?}");
}

// ---------------------------------------------------------------------------
// More error paths, each with a tiny model of its own.

/// A Relu whose input the JSON fixes to [3, 4].
const FIXED_RELU: &str = r#"{"name": "Model", "args": {},
 "connections": {"m_0": {"input": {"key": {"name": "input"}}, "output": {"key": {"name": "output"}}}},
 "submodels": {"m_0": {"name": "Relu", "args": {}}},
 "assigned_shapes": [[["input", [3, 4]]]]}"#;

#[test]
fn missing_model_file() {
    let dir = tempdir_with(&[]);
    let (code, stdout, stderr) = mithrilc(&["inspect", "nope.json"], dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (1, "", "error: cannot read nope.json: No such file or directory\n")
    );
}

/// A file in no format mithrilc reads (here a PNG image) is refused by the frontend
/// boundary, naming the formats it reads, before any parser sees it.
#[test]
fn model_in_no_format_mithrilc_reads() {
    let dir = tempdir_with(&[]);
    std::fs::write(dir.path().join("model.png"), b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR").unwrap();
    let (code, stdout, stderr) = mithrilc(&["inspect", "model.png"], dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (1, "", "error: model.png: not a model mithrilc reads (it reads ONNX, Mithril model JSON)\n")
    );
}

/// A truncated ONNX file (the start of an exported model) is refused by the protobuf
/// decoder, as the user's error.
#[test]
fn truncated_onnx_model() {
    let dir = tempdir_with(&[]);
    std::fs::write(dir.path().join("model.onnx"), b"\x08\x07\x12\x07pytorch\x1a\x032.1:\x00\xff").unwrap();
    let (code, stdout, stderr) = mithrilc(&["inspect", "model.onnx"], dir.path());
    assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
    assert!(stderr.starts_with("error: model.onnx: not a valid ONNX model: "), "{stderr}");
    assert!(stderr.contains("note: the file is truncated or corrupt"), "{stderr}");
}

#[test]
fn unknown_class_with_a_close_spelling() {
    let dir = tempdir_with(&[("lineer.json", r#"{"name": "Lineer", "args": {"dimension": 5, "use_bias": true}}"#)]);
    let (code, stdout, stderr) = mithrilc(&["inspect", "lineer.json"], dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            1,
            "",
            "error: lineer.json: top-level Lineer: unknown model class 'Lineer' (did you mean 'Linear'?)\n  \
             note: a user-defined Model subclass is written under its class name and cannot be rebuilt without its Python code\n"
        )
    );
}

#[test]
fn two_unknown_classes_in_one_error() {
    let model = r#"{"name": "Model", "args": {},
 "connections": {"m_0": {"input": {"key": {"name": "input"}}},
                 "m_1": {"input": {"key": {"connect": [["m_0", "output"]]}}, "output": {"key": {"name": "output"}}}},
 "submodels": {"m_0": {"name": "Rellu", "args": {}}, "m_1": {"name": "Frobnicate", "args": {}}}}"#;
    let dir = tempdir_with(&[("two_unknown.json", model)]);
    let (code, stdout, stderr) = mithrilc(&["inspect", "two_unknown.json"], dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            1,
            "",
            "error: two_unknown.json: 2 model classes cannot be compiled:\n  \
             submodels.m_0 (Rellu): unknown model class 'Rellu' (did you mean 'Relu' or 'Gelu'?)\n  \
             submodels.m_1 (Frobnicate): unknown model class 'Frobnicate'\n  \
             note: a user-defined Model subclass is written under its class name and cannot be rebuilt without its Python code\n"
        )
    );
}

#[test]
fn run_with_parameters_missing_from_the_data() {
    let Some(shared) = shared() else { return };
    let dir = tempdir_with(&[]);
    std::fs::copy(shared.join("testdata/linear.json"), dir.path().join("linear.json")).expect("copy linear.json");
    data::write_npz(&dir.path().join("in.npz"), &[("input".to_string(), halves(&[3, 4]))]).expect("write in.npz");
    let args = ["run", "linear.json", "--data", "in.npz", "--shape", "weight=5,4", "--shape", "bias=5"];
    let (code, stdout, stderr) = mithrilc(&args, dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            1,
            "",
            "error: linear.json: 2 of the model's inputs and parameters are not in the data: \
             `weight` f32[5, 4] (parameter), `bias` f32[5] (parameter)\n  \
             note: looked for NAME, input/NAME and param/NAME in in.npz\n"
        )
    );
}

#[test]
fn run_with_a_named_npy_and_parameters_missing() {
    let Some(shared) = shared() else { return };
    let dir = tempdir_with(&[]);
    std::fs::copy(shared.join("testdata/linear.json"), dir.path().join("linear.json")).expect("copy linear.json");
    data::write_npy(&dir.path().join("x.npy"), &halves(&[3, 4])).expect("write x.npy");
    let args = ["run", "linear.json", "--data", "input=x.npy", "--shape", "weight=5,4", "--shape", "bias=5"];
    let (code, stdout, stderr) = mithrilc(&args, dir.path());
    // What SHOULD happen: the .npy was already given as NAME=FILE and named `input`, so the
    // note "give it as --data NAME=FILE.npy" does not apply (src/cli.rs `feeds` adds it
    // whenever any data file is a .npy; it should only for a .npy given without NAME=).
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            1,
            "",
            "error: linear.json: 2 of the model's inputs and parameters are not in the data: \
             `weight` f32[5, 4] (parameter), `bias` f32[5] (parameter)\n  \
             note: looked for NAME, input/NAME and param/NAME in x.npy\n"
        )
    );
}

#[test]
fn run_with_data_contradicting_the_assigned_shape() {
    let dir = tempdir_with(&[("relu.json", FIXED_RELU)]);
    data::write_npy(&dir.path().join("x.npy"), &halves(&[2, 2])).expect("write x.npy");
    let (code, stdout, stderr) = mithrilc(&["run", "relu.json", "--data", "input=x.npy"], dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            1,
            "",
            "error: relu.json: top-level Model: assigned_shapes: `input` has shape [2, 2], which does not match [3, 4] \
             (needs 3 where it has 2)\n  note: the shape of `input` comes from the data\n"
        )
    );
}

#[test]
fn inspect_with_the_input_shape_unknown() {
    let Some(shared) = shared() else { return };
    let want = "error: linear.json: the shape of input `input` (used by top-level Linear) is unknown\n  \
                note: give it with --shape input=D0,D1,... (a dimension may be a symbol, e.g. B), or in a data file\n";
    // With the weight and bias given, only the input's shape is missing.
    let args = ["inspect", "linear.json", "--shape", "weight=5,4", "--shape", "bias=5"];
    let (code, stdout, stderr) = mithrilc(&args, &shared.join("testdata"));
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (1, "", want), "mithrilc {args:?}");
    // What SHOULD happen with nothing given: the same message. The weight's shape follows
    // from the input's, so the input is what the user must supply; today mithrilc names
    // `weight`, the first input it meets, and --shape weight=... would only lead to this.
    let (code, stdout, stderr) = mithrilc(&["inspect", "linear.json"], &shared.join("testdata"));
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (1, "", want), "mithrilc inspect linear.json");
}

#[test]
fn shape_arg_with_a_bad_dimension_is_a_usage_error() {
    let dir = tempdir_with(&[("relu.json", FIXED_RELU)]);
    let (code, stdout, stderr) = mithrilc(&["inspect", "relu.json", "--shape", "input=1,x-y"], dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (2, "", "error: --shape input=1,x-y: `x-y` is neither a size nor a symbol name\n")
    );
}

#[test]
fn set_arg_without_a_value_is_a_usage_error() {
    let dir = tempdir_with(&[("relu.json", FIXED_RELU)]);
    let (code, stdout, stderr) = mithrilc(&["inspect", "relu.json", "--set", "bogus"], dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (2, "", "error: --set bogus: expected PATH.KEY=VALUE, e.g. submodels.m_2.index=0\n")
    );
}

#[test]
fn unknown_weight_layout_is_a_usage_error() {
    let dir = tempdir_with(&[("relu.json", FIXED_RELU)]);
    let (code, stdout, stderr) = mithrilc(&["compile", "relu.json", "--target", "c", "--weight-layout", "packed", "-o", "out"], dir.path());
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty() && stderr.contains("invalid value 'packed' for '--weight-layout <LAYOUT>'") && stderr.contains("[possible values: fast, plain]"), "{stderr}");
    assert!(!dir.path().join("out").exists());
}

#[test]
fn run_without_data_is_a_usage_error() {
    let dir = tempdir_with(&[("relu.json", FIXED_RELU)]);
    let (code, stdout, stderr) = mithrilc(&["run", "relu.json"], dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            2,
            "",
            "error: the following required arguments were not provided:\n  --data <FILE>\n\n\
             Usage: mithrilc run --data <FILE> <MODEL>\n\n\
             For more information, try '--help'.\n"
        )
    );
}

#[test]
fn unknown_subcommand_is_a_usage_error() {
    let dir = tempdir_with(&[]);
    let (code, stdout, stderr) = mithrilc(&["frobnicate", "model.json"], dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            2,
            "",
            "error: unrecognized subcommand 'frobnicate'\n\n\
             Usage: mithrilc [OPTIONS] <COMMAND>\n\n\
             For more information, try '--help'.\n"
        )
    );
}

#[test]
fn gpt_tiny_without_its_lost_constructor_values() {
    let Some(shared) = shared() else { return };
    let (code, stdout, stderr) = mithrilc(&["inspect", "gpt_tiny.json", "--params", "gpt_tiny.npz"], &shared.join("testdata"));
    // The message names the first lost value, its node's path (once) and the --set to give.
    let path = "submodels.m_0.submodels.m_5.submodels.m_0.submodels.m_1.submodels.m_1";
    let want = format!(
        "error: gpt_tiny.json: {path} (Split): the value of `split_size` was set in Python but Mithril did not write it \
         to the JSON; give it with --set '{path}.split_size=VALUE'\n"
    );
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (1, "", want.as_str()));
}

#[test]
fn gpt_tiny_with_its_lost_constructor_values() {
    let Some(shared) = shared() else { return };
    let latent = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/latent/gpt_tiny.json");
    let latent: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(latent).expect("read latent/gpt_tiny.json")).expect("JSON");
    let sets: Vec<String> = latent["set"].as_object().expect("`set` object").iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec!["inspect", "gpt_tiny.json", "--params", "gpt_tiny.npz"];
    for s in &sets {
        args.extend(["--set", s.as_str()]);
    }
    let (code, stdout, stderr) = mithrilc(&args, &shared.join("testdata"));
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(stdout.contains("\nparameter elements: 1,128\n"), "stdout:\n{stdout}");
}

#[test]
fn set_to_a_path_that_does_not_exist() {
    let dir = tempdir_with(&[("relu.json", FIXED_RELU)]);
    let (code, stdout, stderr) = mithrilc(&["inspect", "relu.json", "--set", "submodels.m_9.axis=0"], dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (1, "", "error: relu.json: --set submodels.m_9.axis: there is no model node at `submodels.m_9`\n")
    );
}

// ---------------------------------------------------------------------------
// --version and --help.

#[test]
fn version() {
    let (code, stdout, stderr) = mithrilc(&["--version"], Path::new(env!("CARGO_MANIFEST_DIR")));
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "mithrilc 0.1.0\n", ""));
}

#[test]
fn help_lists_commands_and_options() {
    let cwd = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cases: &[(&[&str], &[&str])] = &[
        (&["--help"], &["inspect", "run", "compile", "export-weights", "targets", "completions", "--version", "--message-format <FORMAT>"]),
        (&["inspect", "--help"], &["--shape <NAME=DIMS>", "--set <PATH.KEY=VALUE>", "--params <FILE>"]),
        (
            &["run", "--help"],
            &["--shape <NAME=DIMS>", "--set <PATH.KEY=VALUE>", "--params <FILE>", "--data <FILE>", "-o, --output <FILE>", "--quantize <TYPE>"],
        ),
        (
            &["compile", "--help"],
            &["--target <TARGET>", "--emit <WHAT>", "--weights <MODE>", "--weight-layout <LAYOUT>", "--max <NAME=N>", "--report[=<FORMAT>]"],
        ),
        // Every choice shows its values.
        (&["compile", "--help"], &["- source:", "Write the files only", "- llvm-ir:", "- json:", "[possible values: shape, autodiff, simplify, decompose, c-layout, fuse", "- bf16: As bfloat16"]),
        (&["export-weights", "--help"], &["--weights <WEIGHTS.bin>", "-o, --output <FILE>", "--weight-layout <LAYOUT>", "- plain:", "--quantize <TYPE>"]),
        (&["completions", "--help"], &["[possible values: bash, elvish, fish, powershell, zsh]"]),
    ];
    for (args, options) in cases {
        let (code, stdout, stderr) = mithrilc(args, cwd);
        assert_eq!((code, stderr.as_str()), (0, ""), "mithrilc {args:?}");
        for option in *options {
            assert!(stdout.contains(option), "mithrilc {args:?} does not mention {option}:\n{stdout}");
        }
    }
}

/// A choice flag given a value it does not have is a usage error listing the values.
#[test]
fn choice_flags_list_their_values() {
    let dir = tempdir_with(&[("relu.json", FIXED_RELU)]);
    let (code, stdout, stderr) = mithrilc(&["compile", "relu.json", "--target", "c", "--emit", "asm", "-o", "out"], dir.path());
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.starts_with("error: invalid value 'asm' for '--emit <WHAT>'\n  [possible values: build, source, ir, llvm-ir, obj]\n"), "{stderr}");
    let (code, _, stderr) = mithrilc(&["inspect", "relu.json", "--print-after", "fusion"], dir.path());
    assert_eq!(code, 2);
    assert!(stderr.contains("[possible values: shape, autodiff, simplify, decompose, c-layout, fuse, attention, rows, memory]"), "{stderr}");
}

/// `--message-format json`: every error is one JSON object on stderr, with its kind, exit
/// code, message and notes, and the file (line and column) the message names; clap's
/// own usage errors too. The human form is unchanged without it.
#[test]
fn errors_as_json() {
    let dir = tempdir_with(&[("relu.json", FIXED_RELU), ("broken.json", "{\"name\": ")]);
    let json = |args: &[&str]| {
        let (code, stdout, stderr) = mithrilc(&[args, &["--message-format", "json"]].concat(), dir.path());
        assert_eq!(stdout, "", "{args:?}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        let v: serde_json::Value = serde_json::from_str(&stderr).unwrap_or_else(|e| panic!("{e}: {stderr}"));
        assert_eq!(v["exit_code"], code, "{stderr}");
        v
    };
    let v = json(&["inspect", "nope.json"]);
    assert_eq!(
        v,
        serde_json::json!({"kind": "user", "exit_code": 1, "message": "cannot read nope.json: No such file or directory", "notes": [], "file": "nope.json"})
    );
    let v = json(&["inspect", "broken.json"]);
    assert_eq!((v["kind"].as_str(), v["file"].as_str(), v["line"].as_u64(), v["column"].as_u64()), (Some("user"), Some("broken.json"), Some(1), Some(9)), "{v}");
    let v = json(&["compile", "relu.json", "--target", "c", "--max", "B=0", "-o", "out"]);
    assert_eq!(v["kind"], "usage");
    assert_eq!(v["message"], "--max B=0: expected NAME=N with N >= 1 (e.g. --max B=64)");
    assert!(v.get("file").is_none(), "{v}");
    let v = json(&["run", "relu.json", "--data", "x.npz", "-o", "y.csv"]);
    assert_eq!((v["kind"].as_str(), v["file"].as_str()), (Some("user"), Some("x.npz")), "{v}");
    let v = json(&["frobnicate"]);
    assert_eq!((v["kind"].as_str(), v["exit_code"].as_i64()), (Some("usage"), Some(2)));
    assert!(v["message"].as_str().unwrap_or_default().starts_with("unrecognized subcommand 'frobnicate'"), "{v}");
    let v = json(&["inspect", "relu.json", "--shape", "input=1,x-y"]);
    assert_eq!(v["notes"], serde_json::json!([]));
    assert_eq!(v["kind"], "usage");
    // An argument that is not UTF-8 (a path) is looked at, not panicked on.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let args = [b"inspect".as_slice(), b"\xff.json", b"--message-format", b"json"].map(std::ffi::OsStr::from_bytes);
        let out = Command::new(env!("CARGO_BIN_EXE_mithrilc")).args(args).current_dir(dir.path()).output().expect("mithrilc starts");
        let v: serde_json::Value = serde_json::from_slice(&out.stderr).expect("one JSON object");
        assert_eq!((out.status.code(), v["kind"].as_str()), (Some(1), Some("user")), "{v}");
    }
}

/// `compile --report=json` prints the sizes the human report prints, as one object.
#[test]
fn report_as_json() {
    let Some(shared) = shared() else { return };
    let dir = linear_dir(&shared);
    let compile = |out: &str, report: &[&str]| {
        let (code, stdout, stderr) = compile_linear_source(dir.path(), out, report);
        assert_eq!((code, stderr.as_str()), (0, ""), "{report:?}");
        stdout
    };
    let human = compile("a", &["--report"]);
    // A bare --report never takes the next argument (here the model) as its format.
    let (code, before_model, stderr) =
        mithrilc(&["compile", "--report", "linear.json", "--target", "c", "--params", "linear.npz", "--emit", "source", "-o", "c"], dir.path());
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(before_model.replace("wrote c ", "wrote a "), human);
    let v: serde_json::Value = serde_json::from_str(&compile("b", &["--report=json"])).expect("one JSON object");
    assert_eq!((v["output"].as_str(), v["target"].as_str(), v["built"].as_bool()), (Some("b"), Some("c"), Some(false)), "{v}");
    let sizes = &v["sizes"];
    let number = |key: &str| sizes[key].as_u64().unwrap_or_else(|| panic!("sizes.{key} in {v}"));
    let bytes = |n: u64| {
        let digits = n.to_string();
        digits.chars().enumerate().flat_map(|(i, c)| (i > 0 && (digits.len() - i) % 3 == 0).then_some(',').into_iter().chain([c])).collect::<String>()
    };
    let want = format!(
        "kernels: {}\nweights: {} bytes\narena: {} bytes (peak live {} bytes",
        number("kernels"),
        bytes(number("weights_bytes")),
        bytes(number("arena_bytes")),
        bytes(number("peak_live_bytes"))
    );
    assert!(human.contains(&want), "the human report:\n{human}\ndoes not say what the JSON does:\n{want}");
    assert!(number("kernels") > 0 && number("weights_bytes") >= 4 * (5 * 4 + 5), "{v}");
    let files = v["files"].as_u64().unwrap_or_else(|| panic!("files in {v}"));
    assert_eq!(human.lines().next(), Some(format!("wrote a ({files} files)").as_str()));
}

/// `mithrilc targets` lists each target with what it builds and needs; `--ops` the
/// op-support table, from the targets' own checks.
#[test]
fn targets_and_op_support() {
    let cwd = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (code, stdout, stderr) = mithrilc(&["targets"], cwd);
    assert_eq!((code, stderr.as_str()), (0, ""));
    for b in mithrilc::codegen::TARGETS {
        assert!(stdout.contains(&format!("{}\n  builds: {}\n  needs:  {}\n", b.name(), b.about(), b.toolchain().needs())), "{}:\n{stdout}", b.name());
    }
    assert!(stdout.starts_with("c\n  builds: portable C99"), "{stdout}");

    let (code, stdout, stderr) = mithrilc(&["targets", "--ops"], cwd);
    assert_eq!((code, stderr.as_str()), (0, ""));
    let row = |op: &str| -> Vec<String> {
        let line = stdout.lines().find(|l| l.split("  ").next() == Some(op)).unwrap_or_else(|| panic!("no row {op}:\n{stdout}"));
        // Columns are separated by at least two spaces.
        line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(str::to_string).collect()
    };
    let header = row("op");
    let mut want = vec!["op", "c", "cuda", "metal", "ggml", "xla", "jit"];
    if cfg!(feature = "llvm") {
        want.push("jit-llvm");
    }
    want.push("takes");
    assert_eq!(header, want);
    let takes = want.len() - 1;
    // What the targets' checks say: runtime-c convolves floats only; ggml has no shifts;
    // the JIT has no arithmetic in the 8-bit floats yet.
    assert_eq!(row("conv")[1], "f32 f64 f16 bf16 f8e4m3fn f8e4m3fnuz f8e5m2 f8e5m2fnuz f4e2m1");
    assert_eq!(row("conv")[6], "f32 f64 f16 bf16");
    assert_eq!(row("shl")[4], "-");
    assert_eq!(row("shl")[takes], "i32 i64 i8 u8 i16 u16 u32 u64 i4 u4 i2 u2");
    assert_eq!(row("add")[5], "f32 f64 f16 bf16 i32 i64");
    // Logical on bools, bitwise on integers; ggml computes in f32, so bools only.
    assert_eq!(row("and")[takes], "i32 i64 bool i8 u8 i16 u16 u32 u64 i4 u4 i2 u2");
    assert_eq!(row("and")[6], "not i4 u4 i2 u2");
    assert_eq!(row("not")[4], "bool");
    assert_eq!(row("atan")[1], "all");
    for op in ["matmul", "gather", "softmax", "reduce_sum", "where"] {
        assert_eq!(row(op).len(), want.len(), "{op}");
    }
}

/// `mithrilc completions SHELL` prints a script naming the commands, for every shell.
#[test]
fn completions_for_every_shell() {
    let cwd = Path::new(env!("CARGO_MANIFEST_DIR"));
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let (code, stdout, stderr) = mithrilc(&["completions", shell], cwd);
        assert_eq!((code, stderr.as_str()), (0, ""), "{shell}");
        assert!(stdout.contains("export-weights") && stdout.contains("--weight-layout"), "{shell}:\n{stdout}");
    }
    let (code, _, stderr) = mithrilc(&["completions", "tcsh"], cwd);
    assert_eq!(code, 2, "{stderr}");
}

// ---------------------------------------------------------------------------
// Happy paths.

#[test]
fn inspect_gpt_block_summary() {
    let Some(shared) = shared() else { return };
    let (code, stdout, stderr) = mithrilc(&["inspect", "gpt_block.json", "--shape", "input=1,128,768"], &shared.join("bench"));
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(
        stdout.ends_with("\nparameter elements: 7,087,872\nFLOPs (2 per multiply-add of matmul/conv): 1,862,270,976\n"),
        "stdout:\n{stdout}"
    );
}

#[test]
fn inspect_infers_parameter_shapes_from_the_input() {
    let Some(shared) = shared() else { return };
    // Mithril infers Linear's weight [dimension, d_in] and bias [dimension] from the input.
    let (code, stdout, stderr) = mithrilc(&["inspect", "linear.json", "--shape", "input=3,4"], &shared.join("testdata"));
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(
        stdout.ends_with("\nparameter elements: 25\nFLOPs (2 per multiply-add of matmul/conv): 120\n"),
        "stdout:\n{stdout}"
    );
}

#[test]
fn inspect_symbolic_batch() {
    let Some(shared) = shared() else { return };
    // No --shape: the JSON assigns the input [batch, 4]; the parameters follow from it.
    let (code, stdout, stderr) = mithrilc(&["inspect", "symbolic_batch_mlp.json"], &shared.join("testdata"));
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(stdout.contains(r#"input "input" : f32[batch, 4]"#), "stdout:\n{stdout}");
    assert!(
        stdout.ends_with("\nparameter elements: 51\nFLOPs (2 per multiply-add of matmul/conv): 84 × batch\n"),
        "stdout:\n{stdout}"
    );
}

#[test]
fn run_linear_writes_its_output() {
    let Some(shared) = shared() else { return };
    let testdata = shared.join("testdata");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("OUT.npz");
    let out_arg = out.to_str().expect("UTF-8 temp path");
    let (code, stdout, stderr) = mithrilc(&["run", "linear.json", "--data", "linear.npz", "-o", out_arg], &testdata);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (0, format!("wrote 1 output(s) to {out_arg}\n").as_str(), "")
    );
    let got = data::read_arrays(&out).expect("read OUT.npz");
    let names: Vec<&str> = got.arrays.keys().map(String::as_str).collect();
    assert_eq!(names, ["output"]);
    let want = data::read_arrays(&testdata.join("linear.npz")).expect("read linear.npz");
    let (got, want) = (&got.arrays["output"], &want.arrays["output/output"]);
    assert_eq!(got.shape, want.shape);
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        assert!((g - w).abs() <= 1e-5, "output[{i}]: {g}, Mithril has {w}");
    }

    let (code, stdout, stderr) = mithrilc(&["run", "linear.json", "--data", "linear.npz"], &testdata);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(stdout.starts_with("output: f32[3, 5]"), "stdout:\n{stdout}");
    assert_eq!(stdout.lines().count(), 1, "stdout:\n{stdout}");
}

/// `run -o` writes by the file's extension: .npy and .safetensors hold the same values
/// as .npz; a .npy for several outputs, or an unknown extension, is a usage error that
/// says what to give instead, before anything runs (no file is written).
#[test]
fn run_writes_outputs_by_extension() {
    let Some(shared) = shared() else { return };
    let dir = linear_dir(&shared);
    let run = |out: &str, extra: &[&str]| mithrilc(&[&["run", "linear.json", "--data", "linear.npz", "-o", out][..], extra].concat(), dir.path());
    let mut written = Vec::new();
    for out in ["y.npz", "y.npy", "y.safetensors"] {
        let (code, stdout, stderr) = run(out, &[]);
        assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, format!("wrote 1 output(s) to {out}\n").as_str(), ""), "-o {out}");
        let file = data::read_arrays(&dir.path().join(out)).expect("read the output back");
        // A .npy's one array is named after the file.
        let t = file.arrays.get("output").or_else(|| file.arrays.get("y")).expect("the output array");
        written.push(t.clone());
    }
    assert_eq!(written[0].shape, [3, 5]);
    assert!(written.iter().all(|t| *t == written[0]), "the formats hold different values");

    // With --grad the run has three outputs: a .npy cannot hold them.
    let (code, stdout, stderr) = run("g.npy", &["--grad"]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            2,
            "",
            "error: cannot write g.npy: a .npy file holds one array, and there are 3 (output, grad/weight, grad/bias)\n  \
             note: write them to a .npz or .safetensors file, which hold each array under its name\n"
        )
    );
    let (code, _, stderr) = run("g.safetensors", &["--grad"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    let grads = data::read_arrays(&dir.path().join("g.safetensors")).expect("read g.safetensors");
    assert_eq!(grads.arrays.keys().collect::<Vec<_>>(), ["grad/bias", "grad/weight", "output"]);

    let (code, stdout, stderr) = run("y.csv", &[]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (2, "", "error: cannot write y.csv: unknown data file extension (accepted: .npz, .npy, .safetensors)\n")
    );
    assert!(!dir.path().join("g.npy").exists() && !dir.path().join("y.csv").exists());
}

/// `export-weights` reads a compiled model's weights.bin back into the parameters it
/// was compiled from, exactly, whatever layout compile chose where that layout only
/// moves values (mlp's and lenet's transposed and panelled matrices); a Winograd-
/// transformed weight (cnn's, unless --weight-layout plain), a blob of another size and
/// a target that writes no weights.bin are clear errors.
#[test]
fn export_weights_gives_back_the_compiled_parameters() {
    let Some(shared) = shared() else { return };
    let bench = shared.join("bench");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = |name: &str| dir.path().join(name).to_str().expect("UTF-8 temp path").to_string();
    for (model, shape, layout) in [("mlp", "input=1,784", "fast"), ("lenet", "input=1,1,28,28", "fast"), ("cnn", "input=3,3,32,32", "plain")] {
        let (json, params, built) = (format!("{model}.json"), format!("{model}.safetensors"), out(model));
        let flags = ["--shape", shape, "--weight-layout", layout];
        let compile = [&["compile", &json, "--target", "c", "--params", &params, "--emit", "source", "-o", &built][..], &flags].concat();
        let (code, _, stderr) = mithrilc(&compile, &bench);
        assert_eq!((code, stderr.as_str()), (0, ""), "{model}");
        for file in [format!("{model}.safetensors"), format!("{model}.npz")] {
            let (blob, to) = (format!("{built}/weights.bin"), out(&file));
            let (code, stdout, stderr) = mithrilc(&[&["export-weights", &json, "--weights", &blob, "-o", &to][..], &flags].concat(), &bench);
            assert_eq!((code, stderr.as_str()), (0, ""), "{model} to {file}");
            assert!(stdout.starts_with("wrote "), "{stdout}");
            let (got, want) = (data::read_arrays(Path::new(&to)).expect("read back"), data::read_arrays(&bench.join(&params)).expect("read params"));
            assert_eq!(got.arrays.len(), want.arrays.len(), "{model} to {file}");
            for (name, t) in &want.arrays {
                assert!(got.arrays.get(name) == Some(t), "{model} to {file}: `{name}` differs");
            }
        }
    }

    let cnn = ["compile", "cnn.json", "--shape", "input=1,3,32,32", "--target", "c", "--params", "cnn.safetensors", "--emit", "source", "-o"];
    let cnn_fast = out("cnn_fast");
    assert_eq!(mithrilc(&[&cnn[..], &[cnn_fast.as_str()]].concat(), &bench).0, 0);
    let export = |model: &str, shape: &str, blob: &str, to: &str| {
        mithrilc(&["export-weights", model, "--shape", shape, "--weights", &format!("{blob}/weights.bin"), "-o", &out(to)], &bench)
    };
    let (code, stdout, stderr) = export("cnn.json", "input=1,3,32,32", &cnn_fast, "w.npz");
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            1,
            "",
            format!(
                "error: {cnn_fast}/weights.bin: parameter `block1_conv1_weight` is stored in the Winograd layout, which mixes its values: \
                 they cannot be read back exactly\n  note: compile with --weight-layout plain for a weights.bin that exports (with --grad it always is)\n"
            )
            .as_str()
        )
    );
    let (code, stdout, stderr) = export("lenet.json", "input=1,1,28,28", &out("mlp"), "w.npz");
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            1,
            "",
            format!(
                "error: {}/weights.bin: the blob holds 2723904 bytes, and the model's weights take 272960\n  \
                 note: give the model and the flags it was compiled with (--shape, --grad, --target, --weight-layout, --max, --quantize)\n",
                out("mlp")
            )
            .as_str()
        )
    );
    // gpt_block's matrices take as many bytes plain as in panels (their sizes are
    // multiples of the panel width): only the header's layout fingerprint tells them apart.
    let gpt = ["gpt_block.json", "--shape", "input=1,128,768"];
    let built = out("gpt");
    let compile = [&["compile"][..], &gpt, &["--target", "c", "--params", "gpt_block.safetensors", "--emit", "source", "-o", &built]].concat();
    assert_eq!(mithrilc(&compile, &bench).0, 0);
    let (blob, to) = (format!("{built}/weights.bin"), out("w.npz"));
    let export_gpt = |extra: &[&str]| mithrilc(&[&["export-weights"][..], &gpt, &["-o", &to], extra].concat(), &bench);
    let plain = ["--weight-layout", "plain"];
    let (code, stdout, stderr) = export_gpt(&[&["--weights", &blob][..], &plain].concat());
    assert_eq!(code, 1, "{stdout}");
    assert!(stderr.starts_with(&format!("error: {blob}: the blob was laid out by another build of gpt_block than these flags give (")), "{stderr}");
    assert!(stderr.ends_with("note: give the flags the model was compiled with (--shape, --grad, --target, --weight-layout, --max, --quantize)\n"), "{stderr}");
    assert_eq!(export_gpt(&["--weights", &blob]).0, 0);
    // Away from its header the blob exports with a note, or is checked against --header.
    let moved = out("moved.bin");
    std::fs::copy(&blob, &moved).expect("copy the blob");
    let (code, stdout, _) = export_gpt(&["--weights", &moved]);
    assert_eq!(code, 0);
    assert!(stdout.ends_with("note: the layout was not checked: no gpt_block.h beside the blob (give --header gpt_block.h)\n"), "{stdout}");
    let header = format!("{built}/gpt_block.h");
    assert_eq!(export_gpt(&[&["--weights", &moved, "--header", &header][..], &plain].concat()).0, 1);
    let (code, stdout, _) = export_gpt(&["--weights", &moved, "--header", &header]);
    assert_eq!((code, stdout.contains("note:")), (0, false), "{stdout}");
    let (code, _, stderr) = export("mlp.json", "input=1,784", &out("mlp"), "w.npy");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.starts_with("error: cannot write "), "{stderr}");
    let ggml = ["export-weights", "mlp.json", "--shape", "input=1,784", "--target", "ggml", "--weights", "x.bin", "-o", "w.npz"];
    let (code, _, stderr) = mithrilc(&ggml, &bench);
    assert_eq!((code, stderr.as_str()), (2, "error: the ggml target writes no weights.bin (export-weights reads the c, cuda and metal targets' blobs)\n"));
}

#[test]
fn run_mlp_with_npy_input_and_safetensors_params() {
    let Some(shared) = shared() else { return };
    let args = ["run", "mlp.json", "--data", "input=mlp_b1_input.npy", "--params", "mlp.safetensors"];
    let (code, stdout, stderr) = mithrilc(&args, &shared.join("bench"));
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(stdout.starts_with("output: f32[1, 10]"), "stdout:\n{stdout}");
}

/// `compile` errors: a symbolic shape without --max, or one compiled code does not take
/// (a parameter's), is the model's (1); a missing -o or a bad --max is usage (2); a failing C
/// compiler is a toolchain error (3) and leaves no output directory.
#[test]
fn compile_error_exit_codes() {
    let Some(shared) = shared() else { return };
    let testdata = shared.join("testdata");
    let (code, _, stderr) = mithrilc(&["compile", "symbolic_batch_mlp.json", "--target", "c", "-o", "/nonexistent/x"], &testdata);
    assert_eq!(
        (code, stderr.as_str()),
        (
            1,
            "error: symbolic_batch_mlp.json: `input` has the symbolic shape [batch, 4]: compiled code takes batch at run time, up to a \
             maximum given at compile time\n  note: give it with --max batch=N (or a static size with --shape)\n"
        )
    );
    let (code, _, stderr) = mithrilc(&["compile", "symbolic_batch_mlp.json", "--target", "c", "--max", "batch=0", "-o", "x"], &testdata);
    assert_eq!((code, stderr.as_str()), (2, "error: --max batch=0: expected NAME=N with N >= 1 (e.g. --max B=64)\n"));
    // A symbol inside another dimension compiles, but this one reaches the weight.
    let (code, _, stderr) =
        mithrilc(&["compile", "linear.json", "--target", "c", "--shape", "input=3,T", "--max", "T=8", "-o", "/nonexistent/x"], &testdata);
    assert_eq!(
        (code, stderr.as_str()),
        (
            1,
            "error: linear.json: `weight` (shape [5, T]): compiled code does not support a parameter with a symbolic dimension yet\n  \
             note: give the dimension a static size with --shape\n"
        )
    );
    let (code, _, stderr) = mithrilc(&["compile", "linear.json", "--target", "c", "--shape", "input=3,4"], &testdata);
    assert_eq!((code, stderr.as_str()), (2, "error: compile needs -o OUTDIR\n"));
    let (code, _, stderr) = mithrilc(&["compile", "linear.json", "--target", "tpu", "--shape", "input=3,4", "-o", "x"], &testdata);
    // Targets come from the backend table: an unknown one is a usage error listing them.
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("invalid value 'tpu' for '--target <TARGET>'") && stderr.contains(&format!("[possible values: {}]", mithrilc::codegen::target_names())), "{stderr}");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_mithrilc"))
        .current_dir(&testdata)
        .env("CC", "false")
        .args(["compile", "linear.json", "--target", "c", "--shape", "input=3,4", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(3), "{}", String::from_utf8_lossy(&status.stderr));
    assert!(String::from_utf8_lossy(&status.stderr).starts_with("error: make failed"));
    assert!(!out.exists(), "a failed build leaves no output directory");
}

#[test]
fn run_grad_writes_gradients_and_defaults_cotangents_to_ones() {
    let Some(shared) = shared() else { return };
    let dir = tempdir_with(&[]);
    std::fs::copy(shared.join("testdata/linear.json"), dir.path().join("linear.json")).expect("copy linear.json");
    let w = halves(&[5, 4]);
    let arrays = [("input".to_string(), halves(&[3, 4])), ("weight".to_string(), w.clone()), ("bias".to_string(), halves(&[5]))];
    data::write_npz(&dir.path().join("in.npz"), &arrays).expect("write in.npz");
    let (code, stdout, stderr) = mithrilc(&["run", "linear.json", "--data", "in.npz", "--grad", "-o", "out.npz"], dir.path());
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "wrote 3 output(s) to out.npz\n", ""));
    let out = data::read_arrays(&dir.path().join("out.npz")).expect("read out.npz");
    let names: Vec<&str> = out.arrays.keys().map(String::as_str).collect();
    assert_eq!(names, ["output", "grad/weight", "grad/bias"]);
    // With ones as the output's cotangent, d bias = the batch size, d weight[o, i] = sum of input[:, i].
    assert_eq!(out.arrays["grad/bias"].data, vec![3.0; 5]);
    let x = halves(&[3, 4]);
    let col: Vec<f64> = (0..4).map(|i| (0..3).map(|n| x.data[n * 4 + i]).sum()).collect();
    let want: Vec<f64> = (0..5).flat_map(|_| col.clone()).collect();
    assert_eq!(out.arrays["grad/weight"].data, want);
}

#[test]
fn run_grad_of_an_unknown_parameter() {
    let Some(shared) = shared() else { return };
    let dir = tempdir_with(&[]);
    std::fs::copy(shared.join("testdata/linear.json"), dir.path().join("linear.json")).expect("copy linear.json");
    data::write_npz(&dir.path().join("in.npz"), &[("input".to_string(), halves(&[3, 4]))]).expect("write in.npz");
    let args = ["run", "linear.json", "--data", "in.npz", "--shape", "weight=5,4", "--shape", "bias=5", "--grad", "weights"];
    let (code, stdout, stderr) = mithrilc(&args, dir.path());
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (1, "", "error: --grad weights: the model has no parameter `weights`\n  note: its parameters: weight, bias\n")
    );
}

/// A TrainModel: squared error on a Linear layer's output, mean-reduced, scaled by 2.
const TRAIN_LINEAR: &str = r#"{"is_train_model": true,
 "model": {"name": "Linear", "args": {"dimension": 2}},
 "losses": [{"model": {"name": "SquaredError"}, "reduce_steps": [{"name": "Mean"}],
             "args": {"input": "output", "target": "target"}, "coef": 2.0}],
 "regularizations": []}"#;

#[test]
fn run_grad_of_a_train_model_differentiates_its_loss() {
    let dir = tempdir_with(&[("train.json", TRAIN_LINEAR)]);
    // input [1, 1] = 1, weight [2, 1] = [1, 2], bias 0, target [3, 3]:
    // output [1, 2], loss = 2 * mean((output - target)^2) = 2 * (4 + 1) / 2 = 5.
    let arrays = [
        ("input".to_string(), Tensor::new(Dtype::F32, vec![1, 1], vec![1.0])),
        ("weight".to_string(), Tensor::new(Dtype::F32, vec![2, 1], vec![1.0, 2.0])),
        ("bias".to_string(), Tensor::new(Dtype::F32, vec![2], vec![0.0, 0.0])),
        ("target".to_string(), Tensor::new(Dtype::F32, vec![1, 2], vec![3.0, 3.0])),
    ];
    data::write_npz(&dir.path().join("in.npz"), &arrays).expect("write in.npz");
    let (code, stdout, stderr) = mithrilc(&["run", "train.json", "--data", "in.npz", "--grad", "-o", "out.npz"], dir.path());
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "wrote 4 output(s) to out.npz\n", ""));
    let out = data::read_arrays(&dir.path().join("out.npz")).expect("read out.npz");
    let names: Vec<&str> = out.arrays.keys().map(String::as_str).collect();
    assert_eq!(names, ["output", "final_cost", "grad/weight", "grad/bias"]);
    assert_eq!(out.arrays["final_cost"].data, vec![5.0]);
    // d loss / d output = 2 * 2 (output - target) / 2 = [-4, -2]; input is 1.
    assert_eq!(out.arrays["grad/bias"].data, vec![-4.0, -2.0]);
    assert_eq!(out.arrays["grad/weight"].data, vec![-4.0, -2.0]);
}

#[test]
fn compile_grad_emits_backward_and_a_train_step_only_with_a_loss() {
    if Command::new("cc").arg("--version").output().is_err() {
        common::skip("cc is not installed (apt-get install gcc)");
        return;
    }
    let Some(shared) = shared() else { return };
    let dir = tempdir_with(&[("train.json", TRAIN_LINEAR)]);
    std::fs::copy(shared.join("testdata/linear.json"), dir.path().join("linear.json")).expect("copy linear.json");
    let shapes = ["--shape", "input=4,3", "--shape", "target=4,2"];
    let (code, _, stderr) = mithrilc(&[&["compile", "train.json", "--target", "c", "--grad", "-o", "train"][..], &shapes].concat(), dir.path());
    assert_eq!(code, 0, "{stderr}");
    let header = std::fs::read_to_string(dir.path().join("train/train.h")).unwrap();
    for decl in ["int train_backward(", "float train_train_step(", "#define TRAIN_TRAIN_STATE_SIZE 128u", "#define TRAIN_LOSS_OUTPUT 1"] {
        assert!(header.contains(decl), "train.h lacks {decl}");
    }
    let (code, _, stderr) = mithrilc(&["compile", "linear.json", "--target", "c", "--grad", "--shape", "input=4,3", "-o", "lin"], dir.path());
    assert_eq!(code, 0, "{stderr}");
    let header = std::fs::read_to_string(dir.path().join("lin/linear.h")).unwrap();
    assert!(header.contains("int linear_backward(") && !header.contains("train_step"));
    assert!(header.contains("/* backward input 1: \"output_grad/output\", float, shape [4, 5] */"), "{header}");
}

/// A driver for TRAIN_LINEAR compiled in f64: one step at lr 0.1 (inexact in binary, so
/// an f32 step would show), then the loss and the updated weight and bias, each to 17 digits (exactly).
const TRAIN_STEP_F64: &str = r#"#include <stdio.h>
#include <string.h>
#include "train.h"
int main(void)
{
    static double weights[TRAIN_WEIGHTS_SIZE / 8], arena[TRAIN_ARENA_SIZE / 8], state[TRAIN_TRAIN_STATE_SIZE / 8 + 1];
    const double input[1] = {1.0}, target[2] = {3.0, 3.0}, w[2] = {1.0, 2.0}, b[2] = {0.0, 0.0};
    const void *inputs[2];
    double *p = weights, loss;
    FILE *f;
    inputs[0] = input;
    inputs[1] = target;
    memcpy((char *)weights + TRAIN_WEIGHT_0_OFFSET, w, sizeof w);
    memcpy((char *)weights + TRAIN_WEIGHT_1_OFFSET, b, sizeof b);
    loss = train_train_step(weights, inputs, 0.1, 0.0, state, arena);
    printf("%.17g\n", loss);
    p = (double *)(void *)((char *)weights + TRAIN_WEIGHT_0_OFFSET);
    printf("%.17g %.17g\n", p[0], p[1]);
    p = (double *)(void *)((char *)weights + TRAIN_WEIGHT_1_OFFSET);
    printf("%.17g %.17g\n", p[0], p[1]);
    f = fopen("trained.bin", "wb");
    if (!f || fwrite(weights, 1, TRAIN_WEIGHTS_SIZE, f) != TRAIN_WEIGHTS_SIZE || fclose(f) != 0)
        return 1;
    return 0;
}
"#;

#[test]
fn an_f64_train_step_updates_in_f64() {
    if Command::new("cc").arg("--version").output().is_err() {
        common::skip("cc is not installed (apt-get install gcc)");
        return;
    }
    let dir = tempdir_with(&[("train.json", TRAIN_LINEAR), ("step.c", TRAIN_STEP_F64)]);
    let f64s = |shape: &[u64], v: &[f64]| Tensor::new(Dtype::F64, shape.to_vec(), v.to_vec());
    let arrays = [
        ("input".to_string(), f64s(&[1, 1], &[1.0])),
        ("weight".to_string(), f64s(&[2, 1], &[1.0, 2.0])),
        ("bias".to_string(), f64s(&[2], &[0.0, 0.0])),
        ("target".to_string(), f64s(&[1, 2], &[3.0, 3.0])),
    ];
    data::write_npz(&dir.path().join("p.npz"), &arrays).expect("write p.npz");
    let (code, _, stderr) = mithrilc(&["compile", "train.json", "--target", "c", "--grad", "--params", "p.npz", "-o", "train"], dir.path());
    assert_eq!(code, 0, "{stderr}");
    let header = std::fs::read_to_string(dir.path().join("train/train.h")).unwrap();
    assert!(header.contains("double train_train_step(void *weights, const void *const inputs[], double lr, double momentum,"), "{header}");
    let t = dir.path().join("train");
    let cc = Command::new("cc")
        .current_dir(&t)
        .args(["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-I.", "../step.c", "train.c"])
        .args(mithrilc::codegen::c::runtime_sources())
        .args(["-lm", "-o", "step"])
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let run = Command::new(t.join("step")).current_dir(&t).output().unwrap();
    assert!(run.status.success(), "step failed: {}", String::from_utf8_lossy(&run.stderr));
    let got: Vec<f64> = String::from_utf8_lossy(&run.stdout).split_whitespace().map(|w| w.parse().unwrap_or(f64::NAN)).collect();
    // The gradients are [-4, -2] for both (run_grad_of_a_train_model_differentiates_its_loss).
    let want = [5.0, 1.0 - 0.1 * -4.0, 2.0 - 0.1 * -2.0, 0.0 - 0.1 * -4.0, 0.0 - 0.1 * -2.0];
    assert_eq!(got, want);

    // The trained blob, back under the parameters' names.
    let export = ["export-weights", "train.json", "--grad", "--params", "p.npz", "--weights", "train/trained.bin", "-o", "trained.safetensors"];
    let (code, stdout, stderr) = mithrilc(&export, dir.path());
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "wrote 2 parameter(s) from train/trained.bin to trained.safetensors\n", ""));
    let trained = data::read_arrays(&dir.path().join("trained.safetensors")).expect("read trained.safetensors");
    assert_eq!(trained.arrays["weight"], f64s(&[2, 1], &want[1..3]));
    assert_eq!(trained.arrays["bias"], f64s(&[2], &want[3..5]));
}

#[test]
fn train_model_errors() {
    let reg = |r: &str| TRAIN_LINEAR.replace(r#""regularizations": []"#, &format!(r#""regularizations": [{r}]"#));
    let regs = reg(r#"{"model": {"name": "L2"}, "args": {"input": "weight"}}"#);
    let reg_key = reg(r#"{"model": "l2", "coef": 0.1, "args": {"x": "weight"}}"#);
    let reg_pattern = reg(r#"{"model": "QuadraticFormRegularizer", "coef": 0.1, "args": {"input": {"pattern": "w"}, "kernel": "k"}}"#);
    let no_losses = r#"{"is_train_model": true, "model": {"name": "Linear", "args": {"dimension": 2}}, "losses": []}"#;
    let bad_key = TRAIN_LINEAR.replace(r#""target": "target""#, r#""label": "target""#);
    let unknown = TRAIN_LINEAR.replace(r#""name": "Linear""#, r#""name": "Lineer""#);
    let dir = tempdir_with(&[("regs.json", &regs), ("reg_key.json", &reg_key), ("reg_pattern.json", &reg_pattern), ("none.json", no_losses), ("key.json", &bad_key), ("unknown.json", &unknown)]);
    let cases = [
        ("regs.json", "error: regs.json: regularizations[0].coef: is missing: a regularization needs a coefficient\n"),
        ("reg_key.json", "error: reg_key.json: regularizations[0].args.x: regularizations[0].model (L2) has no key `x` (its keys: input, output)\n"),
        ("reg_pattern.json", "error: reg_pattern.json: regularizations[0].args: a pattern is only allowed as a regularizer's single argument\n"),
        ("none.json", "error: none.json: losses: must be a non-empty array: a TrainModel needs at least one loss\n"),
        // The model's unknown class, not a consequence of it (no outputs), is reported.
        ("unknown.json", "error: unknown.json: model (Lineer): unknown model class 'Lineer' (did you mean 'Linear'?)\n  note: a user-defined Model subclass is written under its class name and cannot be rebuilt without its Python code\n"),
        ("key.json", "error: key.json: losses[0].args.label: losses[0].model (SquaredError) has no key `label` (its keys: input, target, output)\n"),
    ];
    for (file, want) in cases {
        let (code, stdout, stderr) = mithrilc(&["inspect", file, "--shape", "input=1,3"], dir.path());
        assert_eq!((code, stdout.as_str(), stderr.as_str()), (1, "", want), "{file}");
    }
}

// ---------------------------------------------------------------------------
// Careless and hostile inputs: nothing of the user's is lost, nothing is guessed.

/// The names in `dir` that mithrilc's temporary directories take.
fn scratch_left_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".mithrilc-"))
        .collect()
}

/// A directory holding a copy of `linear.json` and `linear.npz` from the test data.
fn linear_dir(shared: &Path) -> tempfile::TempDir {
    let dir = tempdir_with(&[]);
    for f in ["linear.json", "linear.npz"] {
        std::fs::copy(shared.join("testdata").join(f), dir.path().join(f)).expect("copy test data");
    }
    dir
}

/// `mithrilc compile linear.json --target c --params linear.npz --emit source -o OUT
/// EXTRA...` in `dir` (a [`linear_dir`]).
fn compile_linear_source(dir: &Path, out: &str, extra: &[&str]) -> (i32, String, String) {
    mithrilc(&[&["compile", "linear.json", "--target", "c", "--params", "linear.npz", "--emit", "source", "-o", out][..], extra].concat(), dir)
}

/// `run -o` and `export-weights -o` never write over one of the command's own inputs,
/// however the output is spelled (another path, a hard link): the model, parameters and
/// data stay as they were, and nothing runs.
#[test]
fn outputs_never_replace_inputs() {
    let Some(shared) = shared() else { return };
    let dir = linear_dir(&shared);
    let before = std::fs::read(dir.path().join("linear.npz")).unwrap();
    std::fs::hard_link(dir.path().join("linear.npz"), dir.path().join("link.npz")).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    for (args, input) in [
        (&["--data", "linear.npz", "-o", "linear.npz"][..], "linear.npz"),
        (&["--data", "linear.npz", "-o", "sub/../linear.npz"], "linear.npz"),
        (&["--data", "linear.npz", "-o", "link.npz"], "linear.npz"),
        (&["--params", "linear.npz", "--data", "input=x.npy", "-o", "./linear.npz"], "linear.npz"),
        (&["--data", "input=x.npy", "--params", "linear.npz", "-o", "x.npy"], "x.npy"),
    ] {
        data::write_npy(&dir.path().join("x.npy"), &halves(&[3, 4])).unwrap();
        let x = std::fs::read(dir.path().join("x.npy")).unwrap();
        let out = args[args.len() - 1];
        let (code, stdout, stderr) = mithrilc(&[&["run", "linear.json"][..], args].concat(), dir.path());
        assert_eq!(
            (code, stdout.as_str(), stderr),
            (1, "", format!("error: -o {out}: is {input}, an input of this command; writing it would destroy it\n  note: name another file for the output\n")),
            "{args:?}"
        );
        assert_eq!(std::fs::read(dir.path().join("linear.npz")).unwrap(), before, "{args:?}");
        assert_eq!(std::fs::read(dir.path().join("x.npy")).unwrap(), x, "{args:?}");
    }
    let (code, _, stderr) = compile_linear_source(dir.path(), "out", &[]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    let export = |weights: &str, out: &str| mithrilc(&["export-weights", "linear.json", "--params", "linear.npz", "--weights", weights, "-o", out], dir.path());
    let (code, _, stderr) = export("out/weights.bin", "link.npz");
    assert_eq!(
        (code, stderr.as_str()),
        (1, "error: -o link.npz: is linear.npz, an input of this command; writing it would destroy it\n  note: name another file for the output\n")
    );
    assert_eq!(std::fs::read(dir.path().join("linear.npz")).unwrap(), before);
    // A blob is read up to the model's size, never to its end: /dev/zero is too long.
    let (code, _, stderr) = export("/dev/zero", "w.npz");
    assert_eq!(
        (code, stderr.as_str()),
        (
            1,
            "error: /dev/zero: the blob holds more than 576 bytes, and the model's weights take 576\n  \
             note: give the model and the flags it was compiled with (--shape, --grad, --target, --weight-layout, --max, --quantize)\n"
        )
    );
    assert_eq!(export("out/weights.bin", "w.npz").0, 0);
    assert_eq!(scratch_left_in(dir.path()), Vec::<String>::new());
}

/// `run --check` counts the positions where one run has a NaN or an infinity and the
/// other not the same one: a largest difference of the finite values alone would hide
/// exactly the mismatch the check is for.
#[test]
fn check_counts_differing_nans_and_infinities() {
    let t = |v: &[f64]| Tensor::new(Dtype::F32, vec![v.len() as u64], v.to_vec());
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    let cases = [
        (t(&[1.0, nan, inf, -inf]), t(&[1.0, nan, inf, -inf]), 0.0, 0),
        (t(&[1.0, 2.0, 3.0]), t(&[1.0, nan, 3.5]), 0.5, 1),
        (t(&[nan, inf, 0.0]), t(&[0.0, -inf, nan]), 0.0, 3),
    ];
    for (a, b, largest, non_finite) in cases {
        let got = mithrilc::cli::compare(&[("y".into(), a)], &[("y".into(), b)]);
        assert_eq!(got, [("y".to_string(), mithrilc::cli::Difference { largest, non_finite })]);
    }
    let got = mithrilc::cli::compare(&[("y".into(), t(&[1.0]))], &[("y".into(), t(&[1.0, 2.0]))]);
    assert_eq!(got[0].1.largest, f64::INFINITY);
}

/// `-o` never replaces what mithrilc did not write: a directory of the user's, a file,
/// the current directory or its parents, or the directory holding the model. Its own
/// output it rewrites, unless its files were edited (then only with --force).
#[test]
fn compile_never_replaces_what_it_did_not_write() {
    let Some(shared) = shared() else { return };
    let dir = linear_dir(&shared);
    let compile = |out: &str, extra: &[&str]| compile_linear_source(dir.path(), out, extra);
    std::fs::create_dir(dir.path().join("mine")).unwrap();
    std::fs::write(dir.path().join("mine/thesis.tex"), "years of work").unwrap();
    assert_eq!(
        compile("mine", &[]),
        (
            1,
            String::new(),
            "error: -o mine: is not empty and was not written by mithrilc (it has no .mithrilc-output); it would be replaced as a whole\n  \
             note: give a new or empty directory, or remove this one first\n"
                .into()
        )
    );
    assert_eq!(std::fs::read_to_string(dir.path().join("mine/thesis.tex")).unwrap(), "years of work");
    assert_eq!(compile("linear.npz", &[]).2, "error: -o linear.npz: is an input of this command\n  note: name a new directory, e.g. -o out\n");
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    assert_eq!(compile("notes.txt", &[]).2, "error: -o notes.txt: is a file, not a directory; mithrilc writes a directory of files there\n");
    assert_eq!(std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(), "mine");
    for parent in [".", "..", "/"] {
        let (code, _, stderr) = compile(parent, &[]);
        assert_eq!(
            (code, stderr),
            (
                1,
                format!(
                    "error: -o {parent}: the current directory and its parents cannot be an output directory (it is replaced as a whole)\n  \
                     note: name a new directory, e.g. -o out\n"
                )
            )
        );
    }
    // The model's own directory, named from outside it.
    std::fs::create_dir(dir.path().join("proj")).unwrap();
    std::fs::copy(dir.path().join("linear.json"), dir.path().join("proj/model.json")).unwrap();
    let (code, _, stderr) = mithrilc(&["compile", "proj/model.json", "--target", "c", "--params", "linear.npz", "-o", "proj"], dir.path());
    assert_eq!(
        (code, stderr.as_str()),
        (
            1,
            "error: -o proj: holds proj/model.json, an input of this command; the output directory is replaced as a whole\n  \
             note: name a new directory, e.g. -o out\n"
        )
    );

    assert_eq!(compile("out", &[]).0, 0);
    assert_eq!(compile("out", &[]), (0, "wrote out (25 files)\n".into(), String::new()), "its own output is rewritten");
    std::fs::write(dir.path().join("out/linear.c"), "/* edited */").unwrap();
    let (code, _, stderr) = compile("out", &[]);
    assert_eq!((code, stderr.as_str()), (1, "error: -o out: 1 file(s) were changed since mithrilc wrote them: linear.c\n  note: --force replaces them\n"));
    assert_eq!(compile("out", &["--force"]).0, 0);
    std::fs::write(dir.path().join("out/keep.txt"), "mine").unwrap();
    let (code, _, stderr) = compile("out", &["--force"]);
    assert_eq!(
        (code, stderr.as_str()),
        (1, "error: -o out: holds 1 file(s) mithrilc did not write: keep.txt\n  note: move them elsewhere, or give another directory\n"),
        "--force never replaces a user's file"
    );
    assert!(dir.path().join("out/keep.txt").exists());
    assert_eq!(scratch_left_in(dir.path()), Vec::<String>::new());
}

/// SIGTERM during a build removes the temporary directory and exits 130.
#[test]
fn a_signal_during_the_build_leaves_nothing_behind() {
    let Some(shared) = shared() else { return };
    if !cfg!(unix) || !common::have("make") {
        common::skip("needs a Unix shell and make");
        return;
    }
    let dir = linear_dir(&shared);
    let slow_cc = dir.path().join("slow-cc");
    std::fs::write(&slow_cc, "#!/bin/sh\nsleep 5\nexit 1\n").unwrap();
    std::fs::set_permissions(&slow_cc, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_mithrilc"))
        .current_dir(dir.path())
        .env("CC", &slow_cc)
        .args(["compile", "linear.json", "--target", "c", "--params", "linear.npz", "-o", "out"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while scratch_left_in(dir.path()).is_empty() && start.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!scratch_left_in(dir.path()).is_empty(), "the build started");
    std::thread::sleep(std::time::Duration::from_millis(200)); // make is running the compiler
    Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "error: interrupted; temporary files removed\n");
    assert_eq!(scratch_left_in(dir.path()), Vec::<String>::new());
    assert!(!dir.path().join("out").exists());
}

/// An array given by two files is refused, naming both; `--data NAME=FILE` says which
/// one is NAME and wins.
#[test]
fn run_takes_each_array_from_one_place() {
    let Some(shared) = shared() else { return };
    let dir = linear_dir(&shared);
    let params = data::read_arrays(&dir.path().join("linear.npz")).unwrap();
    let zeros = Tensor::new(Dtype::F32, vec![3, 4], vec![0.0; 12]);
    data::write_npy(&dir.path().join("x.npy"), &zeros).unwrap();
    data::write_npz(&dir.path().join("other.npz"), &[("input".to_string(), zeros)]).unwrap();

    let (code, _, stderr) = mithrilc(&["run", "linear.json", "--data", "other.npz", "--params", "linear.npz"], dir.path());
    assert_eq!(
        (code, stderr.as_str()),
        (
            1,
            "error: `input` is given twice: in linear.npz (as input/input) and in other.npz\n  \
             note: give each array once, or say which one is `input` with --data input=FILE (a file holding that one array)\n"
        )
    );
    // The binding wins over the parameters file's input/input: with a zero input, each
    // output row is the bias.
    let (code, _, stderr) = mithrilc(&["run", "linear.json", "--data", "input=x.npy", "--params", "linear.npz", "-o", "y.npz"], dir.path());
    assert_eq!((code, stderr.as_str()), (0, ""));
    let y = data::read_arrays(&dir.path().join("y.npz")).unwrap();
    let bias = &params.arrays["param/bias"].data;
    assert_eq!(y.arrays["output"].data, [bias.as_slice(), bias, bias].concat());
    let (code, _, stderr) = mithrilc(&["run", "linear.json", "--data", "input=x.npy", "--data", "input=x.npy", "--params", "linear.npz"], dir.path());
    assert_eq!((code, stderr.as_str()), (2, "error: --data input=x.npy: input input is already given by --data input=x.npy\n"));
    // The same file twice is one source.
    assert_eq!(mithrilc(&["run", "linear.json", "--data", "linear.npz", "--params", "linear.npz"], dir.path()).0, 0);
}

/// Arguments and attributes that used to be accepted and quietly mean something else.
#[test]
fn strict_arguments_and_attributes() {
    let Some(shared) = shared() else { return };
    let dir = linear_dir(&shared);
    let sum = std::fs::read_to_string(shared.join("testdata/sum_axis1.json")).unwrap();
    std::fs::write(dir.path().join("dup_axes.json"), sum.replace("\"axis\": 1", "\"axis\": [1, 1, -1]")).unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["inspect", "linear.json", "--shape", "input=3,,4"],
            2,
            "error: --shape input=3,,4: a dimension is empty (expected sizes or symbols separated by single commas)\n",
        ),
        (
            &["run", "linear.json", "--data", "linear.npz", "--grad", ",,,"],
            2,
            "error: --grad ,,,: a parameter name is empty (give NAME,NAME,... or a bare --grad for every parameter)\n",
        ),
        (
            &["compile", "linear.json", "--target", "c", "--params", "linear.npz", "--max", "C=5", "-o", "out"],
            2,
            "error: --max C=5: the model has no symbolic dimension C (it has none; make one with --shape, e.g. --shape input=B,784)\n",
        ),
        (
            &["inspect", "dup_axes.json", "--shape", "input=2,3,4"],
            1,
            "error: dup_axes.json: submodels.m_0 (Sum): `axis` (1, 1, -1) names axis 1 more than once (rank 3)\n  \
             note: inputs: input = `input` f32[2, 3, 4]\n",
        ),
    ];
    for (args, code, stderr) in cases {
        assert_eq!(mithrilc(args, dir.path()), (*code, String::new(), stderr.to_string()), "{args:?}");
    }
    // A triple becomes a word of the Makefile and a program's name: one word, for C.
    let compile = |triple: &str, target: &str| mithrilc(&["compile", "linear.json", "--target", target, "--params", "linear.npz", "--triple", triple, "-o", "out"], dir.path());
    let not_a_word = "error: --triple wants a target triple such as aarch64-linux-gnu or arm-none-eabi (letters, digits and . _ -), not \"arm-none;rm\"\n";
    assert_eq!(compile("arm-none;rm", "c"), (2, String::new(), not_a_word.to_string()));
    assert_eq!(compile("gnu", "c").2, not_a_word.replace("arm-none;rm", "gnu"));
    let ggml = "error: --triple is for the C target; the ggml target builds for the host\n";
    assert_eq!(compile("aarch64-linux-gnu", "ggml"), (2, String::new(), ggml.to_string()));
    // Each option is asked of the target's capabilities, never its name, and refused
    // as a usage error before anything is written.
    let with = |target: &str, extra: &[&str]| {
        let args = [&["compile", "linear.json", "--target", target, "--params", "linear.npz", "-o", "out"][..], extra].concat();
        mithrilc(&args, dir.path())
    };
    for (target, extra, refusal) in [
        ("xla", &["--weights", "embed"][..], "--weights embed: the xla target writes its weights as file"),
        ("ggml", &["--weights", "safetensors"], "--weights safetensors: the ggml target writes its weights as file"),
        ("cuda", &["--weights", "embed-c"], "--weights embed-c: the cuda target writes its weights as file, safetensors"),
        ("metal", &["--cpu", "native"], "--cpu is for the C target; the metal target's code does not depend on the host CPU's vector extensions"),
        ("ggml", &["--precision", "bf16"], "--precision bf16: the ggml target computes in f32"),
        ("c", &["--gemm", "cublaslt"], "--gemm cublaslt: the c target's matrix products run on builtin"),
        ("c", &["--accumulate", "f32"], "--accumulate f32: the c target accumulates in f64"),
        ("metal", &["--accumulate", "f64"], "--accumulate f64: the metal target accumulates in f32"),
        ("c", &["--gpu", "h100"], "--gpu names the GPU of --target cuda's launch report; the c target has none"),
        ("cuda", &["--gpu", "v100"], "--gpu v100: unknown GPU; known: h100, h200, a100, l4, rtx4090"),
    ] {
        assert_eq!(with(target, extra), (2, String::new(), format!("error: {refusal}\n")), "{target} {extra:?}");
        assert!(!dir.path().join("out").exists());
    }
    // run runs here: a triple this machine cannot run is refused, saying what to do.
    let (code, stdout, stderr) = mithrilc(&["run", "linear.json", "--data", "linear.npz", "--target", "c", "--triple", "riscv64-linux-gnu"], dir.path());
    let host = format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS);
    let refusal = format!(
        "error: run builds and runs the model on this machine ({host}), which cannot run code for riscv64-linux-gnu\n  \
         note: cross-build it with `mithrilc compile --target c --triple riscv64-linux-gnu` and run its demo there (or under an emulator such as qemu-user)\n"
    );
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (2, "", refusal.as_str()));
    // A flags value that starts with `-` and holds a space is the flags, not an option.
    let (code, stdout, stderr) =
        mithrilc(&["compile", "linear.json", "--target", "c", "--params", "linear.npz", "--emit", "source", "--cflags", "-O1 -g", "-o", "out"], dir.path());
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "wrote out (25 files)\n", ""));
}

/// A gather index out of range is an error in compiled code as in the interpreter,
/// never clamped; indices in [-n, n) (negative ones count from the end) agree.
#[test]
fn compiled_code_reports_an_out_of_range_index() {
    if !common::have("cc") || !common::have("make") {
        common::skip("cc and make are needed (apt-get install gcc make)");
        return;
    }
    let model = r#"{"name": "Model", "args": {},
        "connections": {"m_0": {"input": {"key": {"name": "input"}}, "weight": {"key": {"name": "weight"}}, "output": {"key": {"name": "output"}}}},
        "submodels": {"m_0": {"name": "Embedding", "args": {}, "exposed_keys": ["output"], "assigned_shapes": [], "assigned_types": [],
            "assigned_differentiabilities": [], "assigned_constraints": [], "assigned_cins": [], "assigned_couts": []}},
        "exposed_keys": [], "assigned_shapes": [], "assigned_types": [], "assigned_differentiabilities": [], "assigned_constraints": [],
        "assigned_cins": [], "assigned_couts": []}"#;
    let dir = tempdir_with(&[("emb.json", model)]);
    let weight = Tensor::new(Dtype::F32, vec![11, 4], (0..44).map(f64::from).collect());
    for (file, index) in [("ok.npz", [0, 1, 10, -11, -1, 4]), ("high.npz", [0, 1, 11, 2, 3, 4]), ("low.npz", [0, -12, 1, 2, 3, 4])] {
        let index = Tensor::new(Dtype::I32, vec![2, 3], index.iter().map(|&i| f64::from(i)).collect());
        data::write_npz(&dir.path().join(file), &[("input".into(), index), ("weight".into(), weight.clone())]).unwrap();
    }
    // The C target, and the CUDA and Metal targets' kernels under emulation.
    let targets: &[&[&str]] =
        if common::have("c++") { &[&["--target", "c"], &["--target", "cuda", "--emulate"], &["--target", "metal", "--emulate"]] } else { &[&["--target", "c"]] };
    for target in targets {
        let (code, stdout, stderr) = mithrilc(&[&["run", "emb.json", "--data", "ok.npz", "--check"], *target].concat(), dir.path());
        assert_eq!((code, stderr.as_str()), (0, ""), "{target:?}");
        assert!(stdout.starts_with("check output: largest difference from the interpreter 0.000e0 (largest |interpreter| "), "{stdout}");
    }
    for (file, index) in [("high.npz", 11), ("low.npz", -12)] {
        for target in targets {
            let (code, _, stderr) = mithrilc(&[&["run", "emb.json", "--data", file], *target].concat(), dir.path());
            assert_eq!(
                (code, stderr.as_str()),
                (1, "error: the compiled model: a gather or embedding index is out of range (outside [-n, n) for an axis of size n)\n"),
                "{target:?}"
            );
        }
        let (code, _, stderr) = mithrilc(&["run", "emb.json", "--data", file], dir.path());
        assert_eq!(
            (code, stderr),
            (1, format!("error: emb.json: %2 = gather (submodels.m_0 (Embedding)): gather index {index} is out of range for axis 0 of size 11\n"))
        );
    }
    // The graph targets, whose libraries do not check indices (XLA clamps them, ggml
    // aborts): their artifacts check the inputs a gather reads before computing.
    let graph_targets: Vec<(&str, &str)> = [
        ("ggml", mithrilc::build::ggml().err().map(|e| e.to_string())),
        ("xla", mithrilc::codegen::xla::toolchain::python().err().map(|e| e.to_string())),
    ]
    .into_iter()
    .filter_map(|(t, missing)| match missing {
        None => Some((t, if t == "xla" { "index 11 at [0, 2] of input `input` is out of range for 11 rows (valid: -11 to 10)" } else { "a gather or embedding index is out of range (outside [-n, n) for an axis of size n)" })),
        Some(why) => {
            common::skip(&why.replace('\n', " "));
            None
        }
    })
    .collect();
    for (target, high) in graph_targets {
        let (code, stdout, stderr) = mithrilc(&["run", "emb.json", "--data", "ok.npz", "--check", "--target", target], dir.path());
        assert_eq!((code, stderr.as_str()), (0, ""), "{target}");
        assert!(stdout.starts_with("check output: largest difference from the interpreter 0.000e0 (largest |interpreter| "), "{target}: {stdout}");
        let (code, _, stderr) = mithrilc(&["run", "emb.json", "--data", "high.npz", "--target", target], dir.path());
        assert_eq!((code, stderr), (1, format!("error: the compiled model: {high}\n")), "{target}");
        let (code, _, stderr) = mithrilc(&["run", "emb.json", "--data", "low.npz", "--target", target], dir.path());
        assert_eq!(code, 1, "{target}: {stderr}");
        assert!(stderr.starts_with("error: the compiled model: ") && stderr.contains("out of range"), "{target}: {stderr}");
    }
    let (code, _, stderr) = mithrilc(&["compile", "emb.json", "--target", "c", "--shape", "input=2,3", "--shape", "weight=11,4", "--emit", "source", "-o", "out"], dir.path());
    assert_eq!((code, stderr.as_str()), (0, ""));
    let header = std::fs::read_to_string(dir.path().join("out/emb.h")).unwrap();
    assert!(header.contains("#define EMB_ERROR_INDEX (-2)\n") && header.contains("int emb_forward("), "{header}");
}

/// Names that used to make generated C that does not compile (blamed on the
/// toolchain), or files that collide with the runtime's: comment openers and closers,
/// trigraphs, backslashes, very long names, and models named like the runtime.
#[test]
fn hostile_names_make_code_that_compiles() {
    if !common::have("cc") || !common::have("make") {
        common::skip("cc and make are needed (apt-get install gcc make)");
        return;
    }
    let long = "n".repeat(5000);
    let cases: &[(&str, &str, &str)] = &[
        ("comments", "in/*put", "out*/put"),
        ("trigraphs", "in??/put", "out??=put\\"),
        ("long", &long, "y"),
        ("mithril_runtime", "x", "y"),
        ("MITHRIL_RUNTIME", "x", "y"),
        ("mithril_ops", "x", "y"),
        ("mr", "x", "mr_run"),
        ("mr_gemm", "x", "y"),
    ];
    for (model, input, output) in cases {
        let json = serde_json::json!({
            "name": "Model", "args": {},
            "connections": {"m_0": {"input": {"key": {"name": input}}, "output": {"key": {"name": output}}}},
            "submodels": {"m_0": {"name": "Absolute", "args": {}, "exposed_keys": ["output"], "assigned_shapes": [],
                "assigned_types": [], "assigned_differentiabilities": [], "assigned_constraints": [], "assigned_cins": [], "assigned_couts": []}},
            "exposed_keys": [], "assigned_shapes": [], "assigned_types": [], "assigned_differentiabilities": [],
            "assigned_constraints": [], "assigned_cins": [], "assigned_couts": []
        });
        let dir = tempdir_with(&[]);
        let file = format!("{model}.json");
        std::fs::write(dir.path().join(&file), json.to_string()).unwrap();
        let x = Tensor::new(Dtype::F32, vec![2, 3], vec![-1.5, 2.0, -0.25, 0.0, 3.0, -7.0]);
        data::write_npz(&dir.path().join("d.npz"), &[(format!("input/{input}"), x)]).unwrap();
        let (code, stdout, stderr) = mithrilc(&["run", &file, "--data", "d.npz", "--target", "c", "--check"], dir.path());
        assert_eq!((code, stderr.as_str()), (0, ""), "{model}");
        assert!(stdout.contains(": largest difference from the interpreter 0.000e0 (largest |interpreter| "), "{model}: {stdout}");
        let (code, _, stderr) = mithrilc(&["compile", &file, "--target", "c", "--shape", &format!("{input}=2,3"), "--emit", "source", "-o", "out"], dir.path());
        assert_eq!((code, stderr.as_str()), (0, ""), "{model}");
        let mut files: Vec<String> =
            std::fs::read_dir(dir.path().join("out")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        files.sort();
        // the model's header, source and demo, the Makefile, its install templates, the
        // runtime's renaming list, the marker and the runtime, and the demo's file readers
        let copied = mithrilc::codegen::c::RUNTIME_FILES.len() + mithrilc::codegen::c::DEMO_FILES.len();
        assert_eq!(files.len(), 8 + copied, "{model}: no file replaced another: {files:?}");
        assert!(files.iter().all(|f| f.len() <= 64), "{model}: {files:?}");
    }
}

/// Where mithrilc deliberately differs from Mithril, it says so, naming the node: max
/// pooling's padding always; `Clamp`'s tie-splitting gradient only with `--grad`.
#[test]
fn deliberate_differences_are_warned_about_with_the_node() {
    let model = r#"{"name": "Model", "submodels": {"m_0": {"name": "Clamp"}, "m_1": {"name": "MaxPool2D", "args": {"kernel_size": 2, "padding": 1}}},
        "connections": {"m_0": {"input": {"key": {"name": "x"}}, "min_val": {"key": {"name": "lo", "value": -1.0}}, "max_val": {"key": {"name": "hi", "value": 1.0}}, "output": {"key": {"name": "c"}}},
                        "m_1": {"input": {"key": {"name": "y"}}, "output": {"key": {"name": "p"}}}},
        "exposed_keys": ["c", "p"]}"#;
    let dir = tempdir_with(&[("m.json", model)]);
    let (code, _, err) = mithrilc(&["inspect", "m.json", "--shape", "x=2,3", "--shape", "y=1,1,4,4"], dir.path());
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: m.json: submodels.m_1 (MaxPool2D): max pooling pads with -inf"), "{err}");
    assert!(!err.contains("Clamp"), "a gradient-only warning without --grad: {err}");
    let (code, _, err) = mithrilc(&["inspect", "m.json", "--shape", "x=2,3", "--shape", "y=1,1,4,4", "--grad"], dir.path());
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: m.json: submodels.m_0 (Clamp): its gradient splits a tie evenly"), "{err}");
}

/// `--list NAME=N`: a key that is a list of tensors (Concat's input) becomes inputs
/// NAME_0 .. NAME_{N-1}; a bad spec is a usage error, a key the model lacks a user error.
#[test]
fn list_inputs_become_numbered_inputs() {
    let dir = tempdir_with(&[("cat.json", r#"{"name": "Concat", "args": {"axis": 0}}"#)]);
    let parts = [halves(&[2, 3]), Tensor::new(Dtype::F32, vec![1, 3], vec![1.0, 2.0, 3.0])];
    let arrays: Vec<(String, Tensor)> = parts.iter().enumerate().map(|(i, t)| (format!("input_{i}"), t.clone())).collect();
    data::write_npz(&dir.path().join("in.npz"), &arrays).expect("write in.npz");
    let (code, out, err) = mithrilc(&["run", "cat.json", "--list", "input=2", "--data", "in.npz"], dir.path());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("output: f32[3, 3]"), "{out}");
    let (code, _, err) = mithrilc(&["run", "cat.json", "--list", "input", "--data", "in.npz"], dir.path());
    assert_eq!((code, err.trim()), (2, "error: --list input: expected NAME=N, e.g. input=3"));
    let (code, _, err) = mithrilc(&["run", "cat.json", "--list", "x=2", "--data", "in.npz"], dir.path());
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--list x=2: the model has no key `x`"), "{err}");
}

/// `--const NAME=VALUE` fixes an input at compile time (Mithril's constant_keys); a key
/// the model computes, or lacks, is refused with the key named.
#[test]
fn const_fixes_an_input_and_refuses_others() {
    let dir = tempdir_with(&[("add.json", r#"{"name": "Add"}"#)]);
    data::write_npz(&dir.path().join("in.npz"), &[("left".to_string(), halves(&[2, 2]))]).expect("write in.npz");
    let (code, out, err) = mithrilc(&["run", "add.json", "--data", "in.npz", "--const", "right=[[1.0,2.0],[3.0,4.0]]"], dir.path());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("output: f32[2, 2]  min 1.500000  max 4.500000"), "{out}");
    let (code, _, err) = mithrilc(&["run", "add.json", "--data", "in.npz", "--const", "output=1.0"], dir.path());
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--const output: `output` is computed by the model, not one of its inputs"), "{err}");
    let (code, _, err) = mithrilc(&["run", "add.json", "--data", "in.npz", "--const", "nope=1"], dir.path());
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--const nope: the model has no key `nope`"), "{err}");
    let (code, _, err) = mithrilc(&["run", "add.json", "--data", "in.npz", "--const", "right=[1,"], dir.path());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--const right=[1,: the value is not JSON"), "{err}");
}

/// A target that cannot compile some nodes names every one of them, grouped by op and
/// reason, with its place in the model JSON, in one error (exit 1) and writes nothing.
#[test]
fn unsupported_nodes_are_listed_all_at_once() {
    let Some(testdata) = shared().map(|s| s.join("testdata")) else { return };
    let dir = tempfile::tempdir().unwrap();
    let half = |shape: &[u64]| Tensor::new(Dtype::F16, shape.to_vec(), vec![0.5; shape.iter().product::<u64>() as usize]);
    // An f16 input makes the model f16 (an f16 checkpoint alone would be converted to f32).
    let arrays = [("input".to_string(), half(&[3, 4])), ("weight".to_string(), half(&[5, 4])), ("bias".to_string(), half(&[5]))];
    data::write_npz(&dir.path().join("p.npz"), &arrays).unwrap();
    let model = testdata.join("linear.json");
    let args = ["compile", model.to_str().unwrap(), "--target", "cuda", "--params", "p.npz", "-o", "out"];
    let (code, stdout, stderr) = mithrilc(&args, dir.path());
    let want = "error: linear.json: the cuda target cannot compile 6 nodes of the model:
  param f16[5, 4] `weight` (%0): no f16 arithmetic
  transpose f16[4, 5] at top-level Linear (%1): no f16 arithmetic
  input f16[3, 4] `input` (%2): no f16 arithmetic
  matmul f16[3, 5] at top-level Linear (%3): no f16 arithmetic
  param f16[5] `bias` (%4): no f16 arithmetic
  add f16[3, 5] at top-level Linear (%5): no f16 arithmetic
  note: ops it cannot compile here: param, transpose, input, matmul, add
";
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (1, "", want));
    assert!(!dir.path().join("out").exists());
}

/// `--emulate` is for a GPU target: with the interpreter or the C target it is a usage
/// error (2) saying so; `--gemm` with the interpreter too.
#[test]
fn emulate_needs_a_gpu_target() {
    let Some(shared) = shared() else { return };
    let testdata = shared.join("testdata");
    let run = |target: &str| mithrilc(&["run", "linear.json", "--data", "linear.npz", "--params", "linear.npz", "--target", target, "--emulate"], &testdata);
    let (code, _, stderr) = run("interp");
    assert_eq!((code, stderr.as_str()), (2, "error: --emulate runs a GPU target's kernels on the CPU: give --target cuda or metal\n"));
    let (code, _, stderr) = run("c");
    assert_eq!((code, stderr.as_str()), (2, "error: --emulate is for GPU targets; the c target runs natively\n"));
    // So is --gemm, which chooses a compiled target's kernels.
    let (code, _, stderr) = mithrilc(&["run", "linear.json", "--data", "linear.npz", "--params", "linear.npz", "--gemm", "cublaslt"], &testdata);
    assert_eq!((code, stderr.as_str()), (2, "error: --gemm is for a compiled target (--target cuda): the interpreter has no kernels to choose\n"));
}

/// The README's ONNX example: `run` reads the model's initializers as its parameters
/// and matches ONNX Runtime's output (committed beside it); a parameters file
/// overrides an initializer by name.
#[test]
fn the_onnx_example_runs_and_params_override_its_initializers() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/onnx");
    let dir = tempdir_with(&[]);
    for f in ["tiny_cnn.onnx", "input.npy", "output_ort.npy"] {
        std::fs::copy(example.join(f), dir.path().join(f)).unwrap();
    }
    let (code, _, stderr) = mithrilc(&["run", "tiny_cnn.onnx", "--data", "input=input.npy", "-o", "out.npz"], dir.path());
    assert_eq!(code, 0, "{stderr}");
    let got = data::read_arrays(&dir.path().join("out.npz")).unwrap().arrays.shift_remove("logits").unwrap();
    let ort = data::read_arrays(&dir.path().join("output_ort.npy")).unwrap().arrays.into_values().next().unwrap();
    assert_eq!(got.shape, ort.shape);
    let worst = got.data.iter().zip(&ort.data).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-5, "differs from ONNX Runtime by {worst}");

    // fc.bias replaced by zeros: every logit drops by the model's own bias.
    let zeros = Tensor::new(Dtype::F32, vec![10], vec![0.0; 10]);
    data::write_arrays(&dir.path().join("bias.safetensors"), &[("fc.bias".to_string(), zeros)]).unwrap();
    let (code, _, stderr) = mithrilc(&["run", "tiny_cnn.onnx", "--data", "input=input.npy", "--params", "bias.safetensors", "-o", "zero.npz"], dir.path());
    assert_eq!(code, 0, "{stderr}");
    let zero = data::read_arrays(&dir.path().join("zero.npz")).unwrap().arrays.shift_remove("logits").unwrap();
    let model = mithrilc::frontend::load(&dir.path().join("tiny_cnn.onnx"), &Default::default()).unwrap();
    let bias: Vec<f64> = model.weights["fc.bias"].values().collect();
    for (i, (a, b)) in got.data.iter().zip(&zero.data).enumerate() {
        assert!((a - b - bias[i % 10]).abs() < 1e-5, "logit {i}: {a} - {b} is not the bias {}", bias[i % 10]);
    }

    // --grad differentiates an ONNX graph through the same autodiff: with cotangents of
    // ones, each logit's bias gets the batch size; the C target's gradients are the
    // interpreter's.
    let (code, _, stderr) = mithrilc(&["run", "tiny_cnn.onnx", "--data", "input=input.npy", "--grad", "-o", "grad.npz"], dir.path());
    assert_eq!(code, 0, "{stderr}");
    let grads = data::read_arrays(&dir.path().join("grad.npz")).unwrap().arrays;
    let batch = got.shape[0] as f64;
    assert!(grads["grad/fc.bias"].data.iter().all(|&g| (g - batch).abs() < 1e-9), "{:?}", grads["grad/fc.bias"].data);
    if common::have("cc") && common::have("make") {
        let (code, _, stderr) = mithrilc(&["run", "tiny_cnn.onnx", "--data", "input=input.npy", "--grad", "--target", "c", "-o", "grad_c.npz"], dir.path());
        assert_eq!(code, 0, "{stderr}");
        let on_c = data::read_arrays(&dir.path().join("grad_c.npz")).unwrap().arrays;
        for (name, want) in &grads {
            let worst = on_c[name].data.iter().zip(&want.data).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0.0, f64::max);
            assert!(worst < 1e-5, "{name} on the C target differs from the interpreter by {worst}");
        }
    }
}
