//! The integration tests, as one test binary (`autotests = false` in Cargo.toml): a
//! module per area, the helpers (`common`) compiled once, one link, and libtest keeps
//! the cores busy across all the tests rather than running forty binaries one after
//! another. `cargo test --test suite MODULE::` runs one area (`mithril_suite::`...).
//!
//! The tests run side by side in one process, so none may change what the process
//! shares (its environment, its working directory): docs/architecture.md, "Tests".

mod common;

mod bench_models;
mod build_cache;
mod c_target;
mod checkpoints;
mod cli;
mod composites;
mod conformance;
mod cuda_target;
mod demo_files;
mod differential;
mod docs;
mod firmware;
mod from_python;
// The fuzz targets (tests/fuzz/, with their corpus); its allocator is the binary's.
#[path = "fuzz/main.rs"]
mod fuzz;
mod fuzz_readers;
mod ggml_target;
mod golden;
mod gradients;
mod ir_snapshots;
mod jit_target;
mod large_models;
mod link;
mod metal_target;
mod mithril_library;
mod mithril_semantics;
mod mithril_suite;
mod onnx_bench;
mod onnx_node;
mod onnx_real;
mod ops;
mod passes;
mod portable;
mod primitives;
mod python_package;
mod quantize;
mod runtime_c;
mod runtime_cuda;
mod runtime_metal;
mod train_example;
mod xla_target;
