//! The demos of the C, CUDA and Metal targets, which share one template
//! (`templates/c/demo.c.tera`) and one set of file readers (`runtime-c/mr_files.c`),
//! given hostile files and arguments: each is refused with exit status 1 and one line
//! naming the file and what is wrong, never misread; a Fortran-order `.npy` is read as
//! NumPy means it. And models whose input names contain `=`, or whose outputs have a
//! high rank, run through `mithrilc run` as the interpreter computes them. The CUDA and
//! Metal demos run under CPU emulation (`make emulate`).

use std::path::{Path, PathBuf};
use std::process::Command;

use mithrilc::data;
use mithrilc::ir::Dtype;
use mithrilc::tensor::Tensor;

use crate::common::{self, cases};

fn mithrilc(args: &[&str], dir: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mithrilc")).args(args).current_dir(dir).output().expect("mithrilc runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `../shared/bench`, when it and the tools `target` needs are present (else why not).
fn bench_for(target: &str) -> Option<PathBuf> {
    let Some(shared) = cases::shared() else {
        common::skip("../shared is not present");
        return None;
    };
    let tools: &[&str] = if target == "c" { &["make", "cc"] } else { &["make", "cc", "c++"] };
    if let Some(missing) = tools.iter().find(|t| !common::have(t)) {
        common::skip(&format!("{missing} is needed to build the {target} demo (apt-get install make gcc g++)"));
        return None;
    }
    Some(shared.join("bench"))
}

/// An `.npy` file (format 1.0) with the dictionary `dict`, padded as NumPy pads it, then `data`.
fn npy(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut header = dict.to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// One tensor of a safetensors file: key, dtype, shape, data offsets.
struct Entry {
    key: String,
    shape: Vec<u64>,
    offsets: (u64, u64),
}

/// A safetensors file of `entries` (all F32) and `data`, its header padded with at least
/// one space (as writers pad it to 8 bytes) and `trailing` after its last entry; the header
/// length as given (`None`: its own).
fn safetensors(entries: &[Entry], trailing: &str, data: &[u8], header_len: Option<u64>) -> Vec<u8> {
    let items: Vec<String> = entries
        .iter()
        .map(|e| {
            let shape: Vec<String> = e.shape.iter().map(u64::to_string).collect();
            format!("\"{}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", e.key, shape.join(","), e.offsets.0, e.offsets.1)
        })
        .collect();
    let mut header = format!("{{\"__metadata__\":{{\"format\":\"pt\"}},{}{trailing}}} ", items.join(","));
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut out = header_len.unwrap_or(header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// lenet's parameters as safetensors entries in order of their names, and their data.
fn lenet_entries(bench: &Path) -> (Vec<Entry>, Vec<u8>) {
    let params = data::read_arrays(&bench.join("lenet.safetensors")).unwrap();
    let (mut entries, mut bytes) = (Vec::new(), Vec::new());
    for (key, t) in &params.arrays {
        let start = bytes.len() as u64;
        bytes.extend(t.data.iter().flat_map(|v| (*v as f32).to_le_bytes()));
        entries.push(Entry { key: key.clone(), shape: t.shape.clone(), offsets: (start, bytes.len() as u64) });
    }
    (entries, bytes)
}

/// A message's path as the demo shows it: whole, or its first and last 150 bytes
/// around "..." when longer than 300.
fn shown(path: &str) -> String {
    if path.len() <= 300 { path.to_string() } else { format!("{}...{}", &path[..150], &path[path.len() - 150..]) }
}

/// lenet for `target` with its parameters read at run time (`--weights safetensors`),
/// its demo built (emulated for CUDA and Metal): the demo, and its weights blob's size.
fn lenet_demo(target: &str, bench: &Path, dir: &Path) -> (PathBuf, u64) {
    let out = dir.join("lenet");
    let (model, params) = (bench.join("lenet.json"), bench.join("lenet.safetensors"));
    let mut args = vec!["compile", model.to_str().unwrap(), "--shape", "input=1,1,28,28", "--target", target, "--params", params.to_str().unwrap()];
    args.extend(["--weights", "safetensors", "-o", out.to_str().unwrap()]);
    if target != "c" {
        args.extend(["--emit", "source"]);
    }
    let (code, _, err) = mithrilc(&args, dir);
    assert_eq!(code, 0, "{target}: {err}");
    if target != "c" {
        cases::make_emulate(&out).unwrap();
    }
    let header = std::fs::read_to_string(out.join("lenet.h")).unwrap();
    let size = header.lines().find_map(|l| l.strip_prefix("#define LENET_WEIGHTS_SIZE ")).and_then(|v| v.trim().trim_end_matches('u').parse().ok()).expect("the weights' size");
    (out.join(if target == "c" { "lenet_demo" } else { "lenet_demo_emu" }), size)
}

/// Runs the demo in `cwd` with `args`: its exit status and what it printed on stderr.
/// Under `timeout`, so a demo that takes `--repeat 10000001` fails in two minutes (exit
/// status 124) rather than running for hours.
fn demo(exe: &Path, cwd: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new("timeout").arg("120").arg(exe).args(args).current_dir(cwd).output().expect("the demo runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Every hostile file and argument refused by `target`'s demo, and well-formed files in
/// NumPy's other spellings read right.
fn hostile_files(target: &str) {
    let Some(bench) = bench_for(target) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (exe, blob_size) = lenet_demo(target, &bench, dir);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(dir.join(name), bytes).unwrap();
        path(name)
    };
    // Every mismatch is collected, so one run lists every class of file that is not
    // handled (the assertion at the end).
    let failures = std::cell::RefCell::new(Vec::<String>::new());
    let fail = |what: String| failures.borrow_mut().push(what);
    let refused = |args: &[&str], want: String| {
        let (code, got) = demo(&exe, dir, args);
        let want = format!("lenet_demo: {want}\n");
        if (code, got.as_str()) != (1, want.as_str()) {
            fail(format!("{args:?}: exit status {code} and\n    {got}wanted 1 and\n    {want}"));
        }
    };

    // The parameters: a checkpoint laid out anew, then made hostile one way at a time.
    let (entries, params) = lenet_entries(&bench);
    let good = write("good.safetensors", &safetensors(&entries, "", &params, None));
    let input = data::read_arrays(&bench.join("lenet_b1_input.npy")).unwrap().arrays.into_values().next().unwrap();
    let c_order: Vec<u8> = input.data.iter().flat_map(|v| (*v as f32).to_le_bytes()).collect();
    let c_npy = write("c.npy", &npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 28, 28), }", &c_order));
    let run_ok = |args: &[&str]| -> Vec<u8> {
        let _ = std::fs::remove_file(dir.join("output_0.npy"));
        let (code, err) = demo(&exe, dir, &[&["--safetensors", good.as_str(), "--out", dir.to_str().unwrap()], args].concat());
        if code != 0 {
            fail(format!("{args:?}: exit status {code}: {err}"));
        }
        std::fs::read(dir.join("output_0.npy")).unwrap_or_default()
    };
    let reference = run_ok(&["--input", &format!("input={c_npy}")]);
    let want = data::read_arrays(&bench.join("lenet_b1_output.npy")).unwrap().arrays.into_values().next().unwrap();
    let got = data::read_arrays(&dir.join("output_0.npy")).unwrap().arrays.into_values().next().unwrap();
    assert!(got.data.iter().zip(&want.data).all(|(g, w)| (g - w).abs() < 1e-4), "{target}: lenet's output");

    // A Fortran-order array, in NumPy's spelling and Python's others: transposed on read.
    // (The old reader looked for "'fortran_order': True" and read these as C order.)
    let fortran: Vec<u8> = (0..28 * 28).flat_map(|f| c_order[(f % 28 * 28 + f / 28) * 4..][..4].to_vec()).collect();
    for (i, dict) in ["{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1, 28, 28), }", "{\"shape\": (1, 1, 28, 28), \"fortran_order\": True, \"descr\": \"<f4\"}", "{'descr':'<f4','fortran_order':True,'shape':(1,1,28,28)}"]
        .iter()
        .enumerate()
    {
        let file = write(&format!("f{i}.npy"), &npy(dict, &fortran));
        if run_ok(&["--input", &format!("input={file}")]) != reference {
            fail(format!("{dict} was misread"));
        }
    }
    // The element type is the descr, whole; the key set is NumPy's; the data is the header's.
    let sneaky = write("sneaky.npy", &npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 28, 28), 'x': '<f4'}", &c_order));
    refused(&["--safetensors", &good, "--input", &format!("input={sneaky}")], format!("{sneaky}: the .npy header has the key 'x' (it may have only 'descr', 'fortran_order' and 'shape')"));
    let f8 = write("f8.npy", &npy("{'descr': '<f4x', 'fortran_order': False, 'shape': (1, 1, 28, 28), }", &c_order));
    refused(&["--safetensors", &good, "--input", &format!("input={f8}")], format!("{f8}: the array's element type is '<f4x'; the input 'input' wants '<f4'"));
    let long = write("long.npy", &[npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 28, 28), }", &c_order), vec![0]].concat());
    refused(&["--safetensors", &good, "--input", &format!("input={long}")], format!("{long}: the file is longer than its header says (3136 bytes of data)"));

    // safetensors: the model's shape (not a transposed one of the same size), offsets in
    // order covering the data, a header length that is the header's.
    let variant = |name: &str, edit: &dyn Fn(&mut Vec<Entry>), trailing: &str, header_len: Option<u64>| {
        let mut e: Vec<Entry> = entries.iter().map(|x| Entry { key: x.key.clone(), shape: x.shape.clone(), offsets: x.offsets }).collect();
        edit(&mut e);
        write(name, &safetensors(&e, trailing, &params, header_len))
    };
    let at = |key: &str| entries.iter().position(|e| e.key == key).unwrap();
    let file = variant("transposed.safetensors", &|e| e[at("fc1_weight")].shape = vec![400, 120], "", None);
    refused(&["--safetensors", &file], format!("{file}: the parameter 'fc1_weight' has shape [400, 120], the model's is [120, 400]"));
    let (k, (b, end)) = (&entries[1].key, entries[1].offsets);
    let file = variant("overlap.safetensors", &|e| e[1].offsets = (b - 4, end - 4), "", None);
    refused(&["--safetensors", &file], format!("{file}: the safetensors data_offsets of '{k}' begin at {}, not where the data before them ends ({b}): the tensors overlap or leave a hole", b - 4));
    let last = entries.len() - 1;
    let (k, (b, end)) = (&entries[last].key, entries[last].offsets);
    let huge = u64::MAX - (end - b) - 7;
    let file = variant("wrap.safetensors", &|e| e[last].offsets = (huge, huge + (end - b)), "", None);
    refused(&["--safetensors", &file], format!("{file}: the safetensors data_offsets of '{k}' begin at {huge}, not where the data before them ends ({b}): the tensors overlap or leave a hole"));
    let header = safetensors(&entries, "", &[], None).len() as u64 - 8;
    let file = variant("short_header.safetensors", &|_| {}, "", Some(header - 1));
    refused(&["--safetensors", &file], format!("{file}: the file is longer than its safetensors header says ({} bytes of data)", params.len()));
    let file = variant("beyond.safetensors", &|_| {}, "", Some(header + params.len() as u64 + 1));
    refused(&["--safetensors", &file], format!("{file}: the safetensors header length ({} bytes) is beyond the end of the file", header + params.len() as u64 + 1));
    let file = variant("comma.safetensors", &|_| {}, ",", None);
    let comma_at = safetensors(&entries, ",", &[], None).len() - 8 - safetensors(&entries, ",", &[], None).iter().rev().position(|&c| c == b'}').unwrap() - 1;
    refused(&["--safetensors", &file], format!("{file}: the safetensors header is not valid JSON: a string was expected at byte {comma_at} of the header"));

    // The weights blob: exactly the model's size, never read to the end of the file.
    let blob = write("short.bin", &vec![0; blob_size as usize - 1]);
    refused(&["--weights", &blob], format!("{blob}: the weights file is {} bytes, shorter than the model's {blob_size}", blob_size - 1));
    let blob = write("long.bin", &vec![0; blob_size as usize + 1]);
    refused(&["--weights", &blob], format!("{blob}: the weights file is longer than the model's {blob_size} bytes"));
    refused(&["--weights", "/dev/zero"], format!("/dev/zero: the weights file is longer than the model's {blob_size} bytes"));
    let (code, err) = demo(&exe, dir, &["--weights", &write("exact.bin", &vec![0; blob_size as usize])]);
    if code != 0 {
        fail(format!("a blob of the right size: exit status {code}: {err}"));
    }

    if target != "c" {
        if let Err(e) = library_loader_takes_exactly_the_blob(target, &exe, blob_size) {
            fail(e);
        }
    }

    // Counts and input positions.
    for bad in ["-1", "0", "abc", "3x", "10000001"] {
        refused(&["--safetensors", &good, "--repeat", bad], format!("--repeat wants a whole number from 1 to 10000000, not '{bad}'"));
    }
    if target == "c" {
        for bad in ["0", "65", "100000", "-2", "1x"] {
            refused(&["--safetensors", &good, "--threads", bad], format!("--threads wants a whole number from 1 to 64, not '{bad}'"));
        }
    }
    refused(&["--safetensors", &good, "--input-index", "1=x.npy"], "--input-index wants I=FILE.npy with I from 0 to 0 (the model's inputs), not '1=x.npy'".into());
    refused(&["--safetensors", &good, "--weights", &good], "--weights and --safetensors are two sources of the same parameters: give one".into());

    // An output path too long for the system is an error, never cut short (the old demo
    // wrote `output_0.` at 4,095 bytes).
    let mut deep = String::from("o");
    while deep.len() + 201 <= 4085 {
        deep.push('/');
        deep.push_str(&"d".repeat(200));
    }
    deep.push('/');
    deep.push_str(&"e".repeat(4085 - deep.len()));
    // (A path this long works only relative to the working directory, so mkdir and find
    // make and search it from there.)
    let made = Command::new("mkdir").args(["-p", &deep]).current_dir(dir).status().unwrap();
    assert!(made.success());
    refused(&["--safetensors", &good, "--out", &deep], format!("{}: cannot write: File name too long", shown(&format!("{deep}/output_0.npy"))));
    let found = Command::new("find").args(["o", "-type", "f"]).current_dir(dir).output().unwrap();
    if !found.stdout.is_empty() {
        fail(format!("a file was written under the long path: {}", String::from_utf8_lossy(&found.stdout)));
    }

    // Without --out, nothing is written.
    let quiet = dir.join("quiet");
    std::fs::create_dir(&quiet).unwrap();
    let (code, err) = demo(&exe, &quiet, &["--safetensors", &good, "--input", &format!("input={c_npy}")]);
    if code != 0 || std::fs::read_dir(&quiet).unwrap().next().is_some() {
        fail(format!("without --out: exit status {code} ({err}), or a file written"));
    }
    let failures = failures.into_inner();
    assert!(failures.is_empty(), "{target}: {} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// The CUDA and Metal libraries' own `<name>_load_weights` (library code, not the demo's
/// readers) takes a weights file of exactly the blob's size: a shorter or longer one, or
/// /dev/zero, is `<NAME>_ERROR_FILE`. Run through a small program against the emulated
/// library beside the demo `exe` (and the emulation's objects that make built there).
fn library_loader_takes_exactly_the_blob(target: &str, exe: &Path, blob_size: u64) -> Result<(), String> {
    let out = exe.parent().unwrap();
    let (program, build): (&str, Vec<&str>) = if target == "cuda" {
        let text = "#include <stdio.h>\n#include \"lenet.h\"\nint main(int argc, char **argv) {\n    void *dev = NULL;\n    int i;\n    \
                    if (cudaMalloc(&dev, LENET_WEIGHTS_SIZE) != cudaSuccess) { return 2; }\n    \
                    for (i = 1; i < argc; ++i) { printf(\"%d\\n\", lenet_load_weights(argv[i], dev)); }\n    return 0;\n}\n";
        std::fs::write(out.join("load.cpp"), text).unwrap();
        ("load", vec!["c++", "-std=c++17", "-w", "-DMR_CUDA_EMULATE", "-x", "c++", "lenet.cu", "load.cpp", "-x", "none", "cuda_emu.o", "simt_emu.o", "-pthread", "-o", "load"])
    } else {
        let text = "#include <stdio.h>\n#include \"lenet.h\"\nint main(int argc, char **argv) {\n    lenet_model *model = NULL;\n    void *buf;\n    int i;\n    \
                    if (lenet_open(&model, NULL, \"lenet.metallib\") != 0) { return 2; }\n    \
                    buf = mr_metal_buffer_new(lenet_runtime(model), LENET_WEIGHTS_SIZE);\n    \
                    for (i = 1; i < argc; ++i) { printf(\"%d\\n\", lenet_load_weights(argv[i], buf)); }\n    return 0;\n}\n";
        std::fs::write(out.join("load.c"), text).unwrap();
        ("load", vec!["sh", "-c", "cc -c load.c -o load.o && c++ load.o lenet_host.o lenet_emu.o mithril_metal_emu.o simt_emu.o -pthread -o load"])
    };
    let built = Command::new(build[0]).args(&build[1..]).current_dir(out).output().unwrap();
    assert!(built.status.success(), "{target}: {}", String::from_utf8_lossy(&built.stderr));
    let sized = |name: &str, n: u64| {
        std::fs::write(out.join(name), vec![0u8; n as usize]).unwrap();
        name.to_string()
    };
    let files = [sized("exact.bin", blob_size), sized("short.bin", blob_size - 1), sized("long.bin", blob_size + 1), "/dev/zero".to_string()];
    let run = Command::new(out.join(program)).args(&files).current_dir(out).output().unwrap();
    // 0, then LENET_ERROR_FILE (-4) three times.
    let got = String::from_utf8_lossy(&run.stdout);
    if got == "0\n-4\n-4\n-4\n" { Ok(()) } else { Err(format!("lenet_load_weights of exact, short, long and /dev/zero: {got:?}, wanted 0, -4, -4, -4")) }
}

#[test]
fn c_demo_refuses_hostile_files() {
    hostile_files("c");
}

#[test]
fn cuda_demo_refuses_hostile_files_under_emulation() {
    hostile_files("cuda");
}

#[test]
fn metal_demo_refuses_hostile_files_under_emulation() {
    hostile_files("metal");
}

/// A model argument named `name` (a Mithril model of one `op` on `x` and `other`).
fn model_json(op: &str, left: &str, right: Option<&str>) -> String {
    let mut connections = serde_json::json!({"left": {"key": {"name": left}}, "output": {"key": {"name": "out"}}});
    let key = if right.is_some() { "left" } else { "input" };
    if key == "input" {
        connections = serde_json::json!({"input": {"key": {"name": left}}, "output": {"key": {"name": "out"}}});
    }
    if let Some(r) = right {
        connections["right"] = serde_json::json!({"key": {"name": r}});
    }
    serde_json::json!({
        "name": "Model", "args": {}, "connections": {"m_0": connections},
        "submodels": {"m_0": {"name": op, "args": {}, "exposed_keys": ["output"], "assigned_shapes": [], "assigned_types": [],
            "assigned_differentiabilities": [], "assigned_constraints": [], "assigned_cins": [], "assigned_couts": []}},
        "exposed_keys": [], "assigned_shapes": [], "assigned_types": [], "assigned_differentiabilities": [],
        "assigned_constraints": [], "assigned_cins": [], "assigned_couts": []
    })
    .to_string()
}

/// The targets `mithrilc run` reaches here: C, and CUDA and Metal emulated (with a C++
/// compiler).
fn run_targets() -> Vec<Vec<&'static str>> {
    if !common::have("make") || !common::have("cc") {
        common::skip("make and cc are needed (apt-get install make gcc)");
        return Vec::new();
    }
    let mut targets = vec![vec!["--target", "c"]];
    if common::have("c++") {
        targets.extend([vec!["--target", "cuda", "--emulate"], vec!["--target", "metal", "--emulate"]]);
    } else {
        common::skip("c++ is needed for the CUDA and Metal emulations (apt-get install g++)");
    }
    targets
}

/// Inputs named `x` and `x=y` (legal in a model): `--input x=y=FILE` fits both, so
/// mithrilc passes inputs by position, and each target answers as the interpreter does.
#[test]
fn inputs_named_with_equals_signs_run_on_every_demo() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("eq.json"), model_json("Subtract", "x", Some("x=y"))).unwrap();
    let x = Tensor::new(Dtype::F32, vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y = Tensor::new(Dtype::F32, vec![2, 3], vec![0.5, -1.0, 8.0, 0.0, 2.5, -3.0]);
    data::write_npz(&dir.path().join("d.npz"), &[("x".to_string(), x), ("x=y".to_string(), y)]).unwrap();
    for target in run_targets() {
        let (code, stdout, stderr) = mithrilc(&[&["run", "eq.json", "--data", "d.npz", "--check"], target.as_slice()].concat(), dir.path());
        assert_eq!((code, stderr.as_str()), (0, ""), "{target:?}");
        assert!(stdout.contains("out: largest difference from the interpreter 0.000e0 (largest |interpreter| "), "{target:?}: {stdout}");
    }
}

/// An output of rank 200, whose `.npy` header (over 600 bytes) overflowed the old
/// demo's 512-byte buffer, written whole by every demo.
#[test]
fn high_rank_outputs_are_written_whole_on_every_demo() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("abs.json"), model_json("Absolute", "x", None)).unwrap();
    let mut shape = vec![1u64; 200];
    shape[199] = 3;
    let x = Tensor::new(Dtype::F32, shape, vec![-1.5, 2.0, -0.25]);
    data::write_npz(&dir.path().join("d.npz"), &[("x".to_string(), x)]).unwrap();
    for target in run_targets() {
        let (code, stdout, stderr) = mithrilc(&[&["run", "abs.json", "--data", "d.npz", "--check"], target.as_slice()].concat(), dir.path());
        assert_eq!((code, stderr.as_str()), (0, ""), "{target:?}");
        assert!(stdout.contains("out: largest difference from the interpreter 0.000e0 (largest |interpreter| "), "{target:?}: {stdout}");
    }
}
