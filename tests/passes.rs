//! Text filetests for the passes: each `tests/passes/*.ir` holds a `// run: PASS` line
//! (for `autodiff`, a `// grad: all` or `// grad: NAME,...` line too),
//! an input graph, and the expected output after `// expect:`. The input is parsed and
//! verified. A graph pass runs on it, the graph is verified again and printed; for a
//! program pass (`c-layout`, `fuse`, `memory`) the graph is lowered for the C target's
//! library, the C target's passes and the program passes up to and including PASS run
//! (with symbolic dimensions bounded by `// max: NAME=N` lines), and the program is
//! printed. The text must match.
//! `UPDATE_EXPECT=1 cargo test --test passes` rewrites the expectations.

use std::path::Path;

use mithrilc::ir::{parse::parse, print::print, verify::verify};
use mithrilc::passes::autodiff::Wrt;
use mithrilc::passes::{Options, PIPELINE, PROGRAM_PIPELINE};

#[test]
fn pass_filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/passes");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "ir")).collect();
    files.sort();
    assert!(!files.is_empty(), "no filetests in {}", dir.display());
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let (input, expected) = text.split_once("// expect:\n").unwrap_or((&text, ""));
        let pass_name = input.lines().find_map(|l| l.strip_prefix("// run: ")).expect("a `// run: PASS` line").trim();
        let mut g = parse(input).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        verify(&g).unwrap_or_else(|e| panic!("{}: input: {e}", path.display()));
        let got = if let Some((_, pass)) = PIPELINE.iter().find(|(n, _)| *n == pass_name) {
            // `// grad: all` or `// grad: NAME,...`: the parameters autodiff differentiates.
            let grad = match input.lines().find_map(|l| l.strip_prefix("// grad: ")).map(str::trim) {
                None => Wrt::None,
                Some("all") => Wrt::AllParams,
                Some(names) => Wrt::Params(names.split(',').map(|n| n.trim().to_string()).collect()),
            };
            pass(&mut g, &Options { grad }).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            verify(&g).unwrap_or_else(|e| panic!("{}: after {pass_name}: {e}", path.display()));
            print(&g)
        } else {
            let program_passes: Vec<_> = mithrilc::codegen::c::PASSES.iter().chain(PROGRAM_PIPELINE).collect();
            let last = program_passes.iter().position(|(n, _)| *n == pass_name).unwrap_or_else(|| panic!("{}: no pass {pass_name}", path.display()));
            // `// max: B=4` lines bound symbolic dimensions.
            let max: Vec<String> = input.lines().filter_map(|l| l.strip_prefix("// max: ")).map(str::to_string).collect();
            let max = mithrilc::cli::parse_max_args(&max).unwrap();
            let opts = mithrilc::lower::Options { max, library: mithrilc::codegen::c::LIBRARY };
            let mut p = mithrilc::lower::lower(&g, &opts).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for (_, pass) in &program_passes[..=last] {
                pass(&mut p).unwrap();
            }
            mithrilc::lower::print::print(&p)
        };
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::write(path, format!("{input}// expect:\n{got}")).unwrap();
        } else if got != expected {
            failures.push(format!("{}:\n--- expected\n{expected}--- got\n{got}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The printer's output parses back to the same graph, for every snapshot model.
#[test]
fn printed_ir_parses_back() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let graph_text = &text[..text.find("\n}\n").map_or(text.len(), |i| i + 3)];
        let g = parse(graph_text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        verify(&g).unwrap();
        assert_eq!(print(&g), graph_text, "{}", path.display());
    }
}
