//! Text filetests for the passes: each `tests/passes/*.ir` or `*.prog` holds a
//! `// run: PASS` line (for `autodiff`, a `// grad: all` or `// grad: NAME,...` line
//! too), an input, and the expected output after `// expect:`.
//!
//! - `*.ir` starts from a graph, which is parsed and verified. A graph pass runs on it,
//!   the graph is verified again and printed (`decompose` with the composites a
//!   `// target: NAME` line's target claims, none without one); for a program pass (`c-layout`, `fuse`, `memory`)
//!   the graph is lowered for the target's library (the C target's unless a
//!   `// library: cuda` line says otherwise), the target's passes and the
//!   program passes up to and including PASS run (with symbolic
//!   dimensions bounded by `// max: NAME=N` lines, and weights stored as a
//!   `// quantize: TYPE` line says), each followed by the program
//!   verifier, and the program is printed.
//! - A `// library: cuda` line runs the program passes for that target (what
//!   `attention` forms depends on its library).
//! - `*.prog` starts from a program in its printed form (`lower::print`), which is
//!   parsed and verified (its arena as planned when the text gives an arena size); the
//!   one program pass PASS runs on it, the program is verified again and printed.
//!
//! The text must match. An error (from parsing, a pass or a verifier) prints as
//! `error: MESSAGE`, so an expectation can also be the whole message of a verifier
//! failure. `UPDATE_EXPECT=1 cargo test --test suite passes::` rewrites the expectations.

use std::path::Path;

use mithrilc::error::Result;
use mithrilc::ir::{parse::parse, print::print, verify::verify};
use mithrilc::lower::Program;
use mithrilc::passes::autodiff::Wrt;
use mithrilc::lower::Library;
use mithrilc::passes::{run_program_pass, Options, ProgramPass, DECOMPOSE, PIPELINE, PROGRAM_PIPELINE};

#[test]
fn pass_filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/passes");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "ir" || e == "prog")).collect();
    files.sort();
    assert!(!files.is_empty(), "no filetests in {}", dir.display());
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let (input, expected) = text.split_once("// expect:\n").unwrap_or((&text, ""));
        let pass_name = input.lines().find_map(|l| l.strip_prefix("// run: ")).expect("a `// run: PASS` line").trim();
        let got = if path.extension().is_some_and(|e| e == "prog") {
            program_filetest(input, pass_name).map_or_else(|e| format!("error: {e}\n"), |p| mithrilc::lower::print::print(&p))
        } else {
            graph_filetest(input, pass_name).unwrap_or_else(|e| format!("error: {e}\n"))
        };
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::write(path, format!("{input}// expect:\n{got}")).unwrap();
        } else if got != expected {
            failures.push(format!("{}:\n--- expected\n{expected}--- got\n{got}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The printed graph or program after running `pass_name` on the graph in `input`.
fn graph_filetest(input: &str, pass_name: &str) -> Result<String> {
    let mut g = parse(input)?;
    verify(&g)?;
    if let Some((_, pass)) = PIPELINE.iter().find(|(n, _)| *n == pass_name) {
        // `// grad: all` or `// grad: NAME,...`: the parameters autodiff differentiates.
        let grad = match input.lines().find_map(|l| l.strip_prefix("// grad: ")).map(str::trim) {
            None => Wrt::None,
            Some("all") => Wrt::AllParams,
            Some(names) => Wrt::Params(names.split(',').map(|n| n.trim().to_string()).collect()),
        };
        pass(&mut g, &Options { grad })?;
        verify(&g)?;
        return Ok(print(&g));
    }
    if pass_name == DECOMPOSE {
        // `// target: NAME`: the composites that target claims stay (none without it).
        let target = input.lines().find_map(|l| l.strip_prefix("// target: ")).map(|n| mithrilc::codegen::find(n.trim()).unwrap_or_else(|| panic!("no target {n}")));
        mithrilc::passes::decompose::run(&mut g, |c| target.is_some_and(|t| t.claims(c)))?;
        verify(&g)?;
        return Ok(print(&g));
    }
    let (library, target_passes) = target(input);
    let program_passes: Vec<_> = target_passes.iter().chain(PROGRAM_PIPELINE).collect();
    let last = program_passes.iter().position(|(n, _)| *n == pass_name).unwrap_or_else(|| panic!("no pass {pass_name}"));
    // `// max: B=4` lines bound symbolic dimensions.
    let max: Vec<String> = input.lines().filter_map(|l| l.strip_prefix("// max: ")).map(str::to_string).collect();
    let max = mithrilc::cli::parse_max_args(&max)?;
    let opts = mithrilc::lower::Options { max, library, quantize: quantize(input) };
    let mut p = mithrilc::lower::lower(&g, &opts)?;
    mithrilc::lower::verify::verify(&p, false)?;
    let mut planned = false;
    for &&pass in &program_passes[..=last] {
        run_program_pass(&mut p, pass, &opts, &mut planned)?;
    }
    Ok(mithrilc::lower::print::print(&p))
}

/// The program in `input` after the one program pass `pass_name`.
fn program_filetest(input: &str, pass_name: &str) -> Result<Program> {
    let (library, target_passes) = target(input);
    let pass = *target_passes.iter().chain(PROGRAM_PIPELINE).find(|(n, _)| *n == pass_name).unwrap_or_else(|| panic!("no program pass {pass_name}"));
    let mut p = mithrilc::lower::parse::parse(input)?;
    let mut planned = p.arena_size > 0;
    mithrilc::lower::verify::verify(&p, planned)?;
    let opts = mithrilc::lower::Options { library, quantize: quantize(input), ..Default::default() };
    run_program_pass(&mut p, pass, &opts, &mut planned)?;
    Ok(p)
}

/// How a filetest's target pass stores the weights of products and convolutions: f32,
/// or what its `// quantize: TYPE` line says (`q8_0`).
fn quantize(input: &str) -> mithrilc::lower::Stored {
    let name = input.lines().find_map(|l| l.strip_prefix("// quantize: ")).map(str::trim);
    name.map_or(mithrilc::lower::Stored::F32, |n| mithrilc::lower::Stored::ALL.into_iter().find(|s| s.name() == n).unwrap_or_else(|| panic!("no stored form {n}")))
}

/// The target a filetest's program passes are for, as its library and its own
/// program passes: the C target's, or the one its `// library: TARGET` line names
/// (`cuda`).
fn target(input: &str) -> (Library, &'static [ProgramPass]) {
    match input.lines().find_map(|l| l.strip_prefix("// library: ")).map(str::trim) {
        None | Some("c") => (mithrilc::codegen::c::LIBRARY, mithrilc::codegen::c::PASSES),
        Some("cuda") => (mithrilc::codegen::cuda::LIBRARY, &[]),
        Some(other) => panic!("no library {other}"),
    }
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

/// Every prefix of a program's text, and the text with each line left out, parses to a
/// program or an error, and the verifier then accepts or rejects it: neither panics.
#[test]
fn damaged_program_text_is_an_error_not_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/passes");
    for name in ["fuse_epilogue_gemm.prog", "memory_in_place.prog", "fuse_not_through_broadcast.prog", "attention_fused.prog", "rows_rmsnorm_two_maps.prog"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let without_line = (0..lines.len()).map(|skip| lines.iter().enumerate().filter(|&(i, _)| i != skip).map(|(_, l)| format!("{l}\n")).collect::<String>());
        let prefixes = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).map(|i| text[..i].to_string());
        for damaged in prefixes.chain(without_line) {
            if let Ok(p) = mithrilc::lower::parse::parse(&damaged) {
                let _ = mithrilc::lower::verify::verify(&p, true);
            }
        }
    }
}
