//! Writes `src/frontend/onnx/proto/onnx.rs`: prost's types for the vendored
//! `onnx.proto`, compiled without protoc.

use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("src/frontend/onnx/proto");
    let fds = protox::compile([dir.join("onnx.proto")], [&dir]).expect("onnx.proto compiles");
    let mut config = prost_build::Config::new();
    // Tensor payloads are views of the mapped model file, not copies (bytes::Bytes).
    config.bytes([".onnx.TensorProto.raw_data"]);
    config.out_dir(&dir);
    config.compile_fds(fds).expect("prost-build writes onnx.rs");
}
