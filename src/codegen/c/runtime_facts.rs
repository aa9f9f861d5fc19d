//! Facts the compiler and the C runtime must agree on, each written once on each side
//! and checked against each other here: the width of a weight's column panels
//! ([`PANEL`], `MR_PANEL`) and their layout ([`stored_values`] writes them,
//! `mr_sgemm_panels` reads them through `MR_PANEL_INDEX`), the Winograd slots
//! ([`WINOGRAD_SLOTS`], `MR_WINOGRAD_SLOTS`) and scratch ([`winograd`],
//! `MR_WINOGRAD_SCRATCH`), and the Winograd weight transform (G g G^T: the compiler's
//! for `weights.bin`, `mr_winograd_weights_f32` for the demo's safetensors loader), and
//! the narrow forms of `--quantize` (`codegen::weights::narrow` writes them,
//! `mr_dequantize` and `mr_sgemm_panels_q` read them), and the f16 and bf16 conversions
//! the generated code computes those types with (`mithril_ops.h`'s, `half`'s in the
//! interpreter and the weights).
//! The constants are read from the runtime's header text; the rest runs the runtime,
//! through a small C driver built with it, on the values the compiler writes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{runtime_sources, RUNTIME_FILES};
use super::layout::{stored_values, winograd, PANEL, WINOGRAD_SLOTS};
use crate::ir::{ConvAttrs, Dtype};
use crate::lower::{Layout, Stored};
use crate::tensor::{write_elements, RawTensor, Tensor};

/// The value of `#define NAME value` in the runtime's API header.
fn define(name: &str) -> u64 {
    let (_, header) = RUNTIME_FILES.iter().find(|(file, _)| *file == "mithril_runtime.h").expect("the runtime's header");
    let line = header.lines().find_map(|l| l.strip_prefix("#define ")?.strip_prefix(name)?.strip_prefix(' '));
    let value = line.unwrap_or_else(|| panic!("mithril_runtime.h defines no {name}"));
    value.trim().parse().unwrap_or_else(|_| panic!("{name} is not a number in mithril_runtime.h: {value}"))
}

#[test]
fn panel_width_and_winograd_slots_are_the_runtimes() {
    assert_eq!(PANEL, define("MR_PANEL"));
    assert_eq!(WINOGRAD_SLOTS, define("MR_WINOGRAD_SLOTS"));
}

/// Asks the driver for each of the runtime's answers (see `DRIVER`).
const DRIVER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mithril_runtime.h"
#include "mithril_ops.h"

static float *read_floats(size_t n)
{
    float *p = malloc(n * sizeof *p + 1);
    if (!p || fread(p, sizeof *p, n, stdin) != n) exit(2);
    return p;
}

static void write_floats(const float *p, size_t n)
{
    if (fwrite(p, sizeof *p, n, stdout) != n) exit(2);
}

int main(int argc, char **argv)
{
    long long a, b, c, d, e;
    if (argc == 2 && strcmp(argv[1], "scratch") == 0) {
        /* lines "N C O OH OW" in, MR_WINOGRAD_SCRATCH of each out */
        while (scanf("%lld %lld %lld %lld %lld", &a, &b, &c, &d, &e) == 5) {
            printf("%lld\n", (long long)MR_WINOGRAD_SCRATCH(a, b, c, d, e));
        }
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "i8conv_scratch") == 0) {
        /* lines "N C KH KW OH OW sh sw dh dw" in, MR_I8_CONV_SCRATCH_BYTES of each out */
        long long f, g, h, i, j;
        while (scanf("%lld %lld %lld %lld %lld %lld %lld %lld %lld %lld", &a, &b, &c, &d, &e, &f, &g, &h, &i, &j) == 10) {
            printf("%lld\n", (long long)MR_I8_CONV_SCRATCH_BYTES(a, b, c, d, e, f, g, h, i, j));
        }
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "int8") == 0) {
        /* B [K, N] stored as MR_INT8 in; out, row-major: -I_K B as mr_gemm_i8_mt computes
         * it (each row's -1 and zeros quantized to codes 0 and 255 with zero point 255, so
         * the column sums count too), then the code of each element at MR_I8_INDEX */
        const int64_t K = atoll(argv[2]), N = atoll(argv[3]), bytes = MR_I8_PANELS_BYTES(K, N);
        float *bq = read_floats((size_t)(bytes / 4));
        float *eye = calloc((size_t)(K * K), sizeof(float)), *out = malloc(sizeof(float) * (size_t)(2 * K * N));
        void *scratch = malloc((size_t)MR_I8_SCRATCH_BYTES(K, K));
        const int8_t *codes = (const int8_t *)bq + 8 * ((N + MR_PANEL - 1) / MR_PANEL * MR_PANEL);
        int64_t i, j;
        if (!eye || !out || !scratch) return 2;
        for (i = 0; i < K; ++i) eye[i * K + i] = -1.0f;
        mr_gemm_i8_mt(NULL, 1, K, N, K, 1.0f, eye, 0, K, 1, bq, 0.0f, out, 0, N, 1, scratch, NULL);
        for (i = 0; i < K; ++i) {
            for (j = 0; j < N; ++j) out[K * N + i * N + j] = (float)codes[MR_I8_INDEX(i, j, K)];
        }
        write_floats(out, (size_t)(2 * K * N));
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "winograd") == 0) {
        /* [O, C, 3, 3] in, mr_winograd_weights_f32's [36, O, C] out */
        const int64_t O = atoll(argv[2]), C = atoll(argv[3]);
        float *w = read_floats((size_t)(O * C * 9)), *u = malloc(sizeof(float) * (size_t)(36 * O * C));
        if (!u) return 2;
        mr_winograd_weights_f32(w, u, O, C);
        write_floats(u, (size_t)(36 * O * C));
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "dequantize") == 0) {
        /* n elements stored as TYPE in (MR_STORED_BYTES of them); mr_dequantize's n floats out */
        const int type = atoi(argv[2]);
        const int64_t n = atoll(argv[3]);
        const size_t bytes = (size_t)MR_STORED_BYTES(type, n);
        float *src = read_floats((bytes + 3) / 4), *dst = malloc(sizeof(float) * (size_t)n + 1);
        if (!dst) return 2;
        mr_dequantize(type, src, n, dst);
        write_floats(dst, (size_t)n);
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "panels_q") == 0) {
        /* B [K, N] in panels stored as TYPE in; out, row-major: I_K B as
         * mr_sgemm_panels_q reads it, then B row by row as its one-row product e_k B */
        const int type = atoi(argv[2]);
        const int64_t K = atoll(argv[3]), N = atoll(argv[4]);
        const size_t bytes = (size_t)MR_STORED_BYTES(type, (N + MR_PANEL - 1) / MR_PANEL * K * MR_PANEL);
        float *bp = read_floats((bytes + 3) / 4);
        float *eye = calloc((size_t)(K * K), sizeof(float)), *out = malloc(sizeof(float) * (size_t)(2 * K * N));
        int64_t i;
        if (!eye || !out) return 2;
        for (i = 0; i < K; ++i) eye[i * K + i] = 1.0f;
        mr_sgemm_panels_q(K, N, K, 1.0f, eye, K, 1, bp, type, 0.0f, out, N, 1);
        for (i = 0; i < K; ++i) mr_sgemm_panels_q(1, N, K, 1.0f, eye + i * K, K, 1, bp, type, 0.0f, out + K * N + i * N, N, 1);
        write_floats(out, (size_t)(2 * K * N));
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "halves") == 0) {
        /* n floats in; for each, its f16 and bf16 bits (mr_f32_to_f16, mr_f32_to_bf16),
         * then its value rounded to each (mr_round_f16, mr_round_bf16) out */
        const size_t n = (size_t)atoll(argv[2]);
        float *x = read_floats(n), r[2];
        uint16_t h[2];
        size_t i;
        for (i = 0; i < n; ++i) {
            h[0] = mr_f32_to_f16(x[i]);
            h[1] = mr_f32_to_bf16(x[i]);
            r[0] = mr_round_f16(x[i]);
            r[1] = mr_round_bf16(x[i]);
            if (fwrite(h, sizeof h[0], 2, stdout) != 2 || fwrite(r, sizeof r[0], 2, stdout) != 2) return 2;
        }
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "narrow") == 0) {
        /* n floats in; for each, its code in each narrow float (e4m3fn, e4m3fnuz, e5m2,
         * e5m2fnuz, e2m1), then the f32 each of the 256 codes (16 for e2m1) decodes to */
        const size_t n = (size_t)atoll(argv[2]);
        float *x = read_floats(n), v[5];
        uint8_t c[5];
        size_t i;
        for (i = 0; i < n; ++i) {
            c[0] = mr_f32_to_f8e4m3fn(x[i]);
            c[1] = mr_f32_to_f8e4m3fnuz(x[i]);
            c[2] = mr_f32_to_f8e5m2(x[i]);
            c[3] = mr_f32_to_f8e5m2fnuz(x[i]);
            c[4] = mr_f32_to_f4e2m1(x[i]);
            if (fwrite(c, 1, 5, stdout) != 5) return 2;
        }
        for (i = 0; i < 256; ++i) {
            v[0] = mr_f8e4m3fn_to_f32((uint8_t)i);
            v[1] = mr_f8e4m3fnuz_to_f32((uint8_t)i);
            v[2] = mr_f8e5m2_to_f32((uint8_t)i);
            v[3] = mr_f8e5m2fnuz_to_f32((uint8_t)i);
            v[4] = mr_f4e2m1_to_f32((uint8_t)(i & 15));
            if (fwrite(v, sizeof v[0], 5, stdout) != 5) return 2;
        }
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "panels") == 0) {
        /* B [K, N] in panels in; out, row-major: I_K B as mr_sgemm_panels reads it,
         * then B element by element through MR_PANEL_INDEX (as the demo's loader) */
        const int64_t K = atoll(argv[2]), N = atoll(argv[3]);
        float *bp = read_floats((size_t)((N + MR_PANEL - 1) / MR_PANEL * K * MR_PANEL));
        float *eye = calloc((size_t)(K * K), sizeof(float)), *out = malloc(sizeof(float) * (size_t)(2 * K * N));
        int64_t i, j;
        if (!eye || !out) return 2;
        for (i = 0; i < K; ++i) eye[i * K + i] = 1.0f;
        mr_sgemm_panels(K, N, K, 1.0f, eye, K, 1, bp, 0.0f, out, N, 1);
        for (i = 0; i < K; ++i) {
            for (j = 0; j < N; ++j) out[K * N + i * N + j] = bp[MR_PANEL_INDEX(i, j, K)];
        }
        write_floats(out, (size_t)(2 * K * N));
        return 0;
    }
    return 1;
}
"#;

/// The driver built with the runtime in `dir`, or why not (no C compiler).
fn build_driver(dir: &Path) -> Result<PathBuf, String> {
    let cc = crate::build::c_compiler();
    if !Command::new(&cc).arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Err(format!("no C compiler ({cc})"));
    }
    for (name, text) in RUNTIME_FILES {
        std::fs::write(dir.join(name), text).unwrap();
    }
    std::fs::write(dir.join("driver.c"), DRIVER).unwrap();
    let exe = dir.join("driver");
    let out = Command::new(&cc)
        .current_dir(dir)
        .args(["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "driver.c"])
        .args(runtime_sources())
        .args(["-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "the driver does not build: {}", String::from_utf8_lossy(&out.stderr));
    Ok(exe)
}

/// The driver built in `dir`, or `None` after saying why the test skips (a failure
/// under `MITHRILC_REQUIRE_TOOLS`).
fn driver_or_skip(dir: &Path) -> Option<PathBuf> {
    match build_driver(dir) {
        Ok(exe) => Some(exe),
        Err(why) => {
            let required = std::env::var("MITHRILC_REQUIRE_TOOLS").is_ok_and(|v| !v.is_empty() && v != "0");
            assert!(!required, "MITHRILC_REQUIRE_TOOLS is set, and this test cannot run: {why}");
            println!("skipped: {why}");
            None
        }
    }
}

/// Runs the driver with `args` on `input`: its standard output.
fn run(exe: &Path, args: &[String], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(exe).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "driver {args:?}: {}", out.status);
    out.stdout
}

/// Deterministic f32 values in [-1, 1), none zero (so no sign of zero can differ).
fn weights(shape: &[u64], seed: u64) -> Tensor {
    let mut s = seed;
    let n = shape.iter().product::<u64>() as usize;
    let data = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f64 + 0.5) / (1u64 << 23) as f64 - 1.0
        })
        .collect();
    Tensor::new(Dtype::F32, shape.to_vec(), data)
}

/// What `weights.bin` holds for `t` stored in `layout`.
fn blob(t: &Tensor, layout: Layout) -> Vec<u8> {
    let raw = RawTensor::from_tensor(t);
    let values = stored_values(&raw, layout);
    let mut out = vec![0; 4 * values.len()];
    write_elements(values, Dtype::F32, &mut out);
    out
}

/// Where two f32 arrays (as bytes) first differ in bits, if they do.
fn first_difference(got: &[u8], want: &[u8]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} floats against {}", got.len() / 4, want.len() / 4));
    }
    let f = |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap());
    got.chunks_exact(4).zip(want.chunks_exact(4)).position(|(a, b)| a != b).map(|i| format!("float {i}: {} against {}", f(&got[4 * i..4 * i + 4]), f(&want[4 * i..4 * i + 4])))
}

/// The scratch the compiler plans for Winograd convolutions, the weights it writes
/// Winograd-transformed and in panels: what the runtime computes and reads.
#[test]
fn the_compilers_layouts_and_scratch_are_the_runtimes() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = driver_or_skip(dir.path()) else { return };

    // Scratch, at sizes on both sides of the slot limit: one block, several, more
    // blocks than slots, images whose tiles stick out.
    let attrs = ConvAttrs { stride: vec![1, 1], padding: vec![(1, 1), (1, 1)], dilation: vec![1, 1], groups: 1 };
    let mut shapes = Vec::new();
    for n in [1, 2, 3, 8] {
        for (c, o) in [(16, 16), (17, 33), (64, 64), (256, 128)] {
            for (oh, ow) in [(16, 16), (17, 23), (32, 32), (56, 56), (100, 7)] {
                if let Some(scratch) = winograd(&attrs, &[n, c, oh, ow], &[o, c, 3, 3], &[n, o, oh, ow]) {
                    shapes.push(([n, c, o, oh, ow], scratch));
                }
            }
        }
    }
    assert!(shapes.len() > 40 && shapes.iter().any(|(s, _)| s[0] * s[3].div_ceil(4) * s[4].div_ceil(4) > 8 * PANEL), "{shapes:?}");
    let query: String = shapes.iter().map(|(s, _)| format!("{} {} {} {} {}\n", s[0], s[1], s[2], s[3], s[4])).collect();
    let answer = String::from_utf8(run(&exe, &["scratch".into()], query.as_bytes())).unwrap();
    let c_scratch: Vec<u64> = answer.lines().map(|l| l.parse().unwrap()).collect();
    let rust_scratch: Vec<u64> = shapes.iter().map(|(_, s)| *s).collect();
    assert_eq!(c_scratch, rust_scratch, "MR_WINOGRAD_SCRATCH against lower::winograd for {:?}", shapes.iter().map(|(s, _)| s).collect::<Vec<_>>());

    // The Winograd transform, bit for bit.
    for (o, c) in [(16, 16), (3, 5), (20, 17)] {
        let w = weights(&[o, c, 3, 3], 0x9e37_79b9_7f4a_7c15 ^ (o * 1000 + c));
        let args = ["winograd".to_string(), o.to_string(), c.to_string()];
        let got = run(&exe, &args, &blob(&w, Layout::RowMajor));
        if let Some(d) = first_difference(&blob(&w, Layout::Winograd), &got) {
            panic!("[{o}, {c}, 3, 3] Winograd-transformed differs from mr_winograd_weights_f32: {d}");
        }
    }

    // Panels: a matrix [N, K] kept as its transpose B = [K, N] in column panels; the
    // runtime's GEMM reads I_K B = B back exactly (products with 0 and 1 are exact), and
    // so does MR_PANEL_INDEX (at sizes on both sides of MR_SGEMV_MAX_M and of a panel).
    for (n, k) in [(70, 5), (33, 40), (32, 1), (1, 9), (100, 64)] {
        let w = weights(&[n, k], 0x2545_f491_4f6c_dd1d ^ (n * 1000 + k));
        let args = ["panels".to_string(), k.to_string(), n.to_string()];
        let got = run(&exe, &args, &blob(&w, Layout::Panels));
        if let Some(d) = first_difference(&got, &blob(&w, Layout::Transposed).repeat(2)) {
            panic!("[{n}, {k}] in panels is not what mr_sgemm_panels (the first {}) and MR_PANEL_INDEX read: {d}", n * k);
        }
    }
}

/// `t`'s elements in `layout`, stored as `stored` as `weights.bin` holds them
/// (`codegen::weights::narrow`), padded to whole floats (the driver reads floats), and
/// the f32 values the compiler says they stand for (`codegen::weights::widen`).
fn narrowed(t: &Tensor, layout: Layout, stored: Stored) -> (Vec<u8>, Vec<f32>) {
    let raw = RawTensor::from_tensor(t);
    let values = stored_values(&raw, layout);
    let n = values.len();
    let mut bytes = vec![0; stored.bytes(n as u64, Dtype::F32).unwrap() as usize];
    crate::codegen::weights::narrow(values, stored, 0, &mut bytes);
    let wide = crate::codegen::weights::widen(&bytes, stored, 0, n).unwrap().into_iter().map(|x| x as f32).collect();
    bytes.resize(bytes.len().div_ceil(4) * 4, 0);
    (bytes, wide)
}

/// The narrow forms of `--quantize`: what the compiler writes, `mr_dequantize` widens to
/// the values the compiler expects, bit for bit (lengths on both sides of a q8_0 block,
/// f16 and bf16 near their limits); and a matrix in panels stored narrow is what
/// `mr_sgemm_panels_q` reads, through its blocked product and its one-row one.
#[test]
fn the_runtime_reads_the_narrow_weights_the_compiler_writes() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = driver_or_skip(dir.path()) else { return };
    let floats = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    for stored in [Stored::F16, Stored::Bf16, Stored::Q8_0] {
        let code = (stored as u8).to_string();
        for n in [1u64, 31, 32, 33, 100] {
            let mut t = weights(&[n], 0x51_7cc1_b727_220a ^ n);
            // magnitudes f16 rounds to infinity and to subnormals, and a block's worth of zeros
            if n == 100 {
                t.data[3] = 1e5;
                t.data[4] = -3e-6;
                t.data[64..96].iter_mut().for_each(|x| *x = 0.0);
            }
            let (bytes, wide) = narrowed(&t, Layout::RowMajor, stored);
            let got = run(&exe, &["dequantize".into(), code.clone(), n.to_string()], &bytes);
            if let Some(d) = first_difference(&got, &floats(&wide)) {
                panic!("{} elements stored as {}: mr_dequantize differs from the compiler's values: {d}", n, stored.name());
            }
        }
        for (n, k) in [(70, 5), (33, 40), (1, 9), (100, 64)] {
            let w = weights(&[n, k], 0x2545_f491_4f6c_dd1d ^ (n * 1000 + k));
            let (bytes, wide) = narrowed(&w, Layout::Panels, stored);
            // B(kk, j) = the widened panels at MR_PANEL_INDEX(kk, j, K)
            let p = PANEL as usize;
            let (nn, kk) = (n as usize, k as usize);
            let b: Vec<f32> = (0..kk * nn).map(|x| (x / nn, x % nn)).map(|(r, j)| wide[j / p * kk * p + r * p + j % p]).collect();
            let got = run(&exe, &["panels_q".into(), code.clone(), k.to_string(), n.to_string()], &bytes);
            if let Some(d) = first_difference(&got, &floats(&b).repeat(2)) {
                panic!("[{n}, {k}] in panels stored as {}: mr_sgemm_panels_q reads other values than the compiler's: {d}", stored.name());
            }
        }
    }
}

/// int8 (`--quantize int8`): the scratch the compiler plans for an int8 convolution is
/// `MR_I8_CONV_SCRATCH_BYTES`; a matrix in panels stored as [`Stored::Int8`] is what
/// `mr_gemm_i8_mt` reads (its codes, scales and column sums: the product of -I and B
/// through the runtime against the same float operations on the compiler's codes, bit
/// for bit) and what `MR_I8_INDEX` addresses.
#[test]
fn the_runtime_reads_the_int8_weights_the_compiler_writes() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = driver_or_skip(dir.path()) else { return };
    let mut shapes = Vec::new();
    for n in [1u64, 2, 9] {
        for (c, k) in [(1u64, 1u64), (3, 3), (64, 3), (5, 7)] {
            for (oh, ow) in [(1u64, 1u64), (16, 16), (17, 23), (56, 56)] {
                for (stride, dilation) in [(1u64, 1u64), (2, 1), (1, 2)] {
                    shapes.push([n, c, k, k, oh, ow, stride, stride, dilation, dilation]);
                }
            }
        }
    }
    let query: String = shapes.iter().map(|s| s.map(|x| x.to_string()).join(" ") + "\n").collect();
    let answer = String::from_utf8(run(&exe, &["i8conv_scratch".into()], query.as_bytes())).unwrap();
    let c_scratch: Vec<u64> = answer.lines().map(|l| l.parse().unwrap()).collect();
    let rust_scratch: Vec<u64> = shapes.iter().map(|s| crate::lower::int8_conv_scratch_bytes(s[0], s[1], (s[2], s[3]), (s[4], s[5]), (s[6], s[7]), (s[8], s[9])).unwrap()).collect();
    assert_eq!(c_scratch, rust_scratch, "MR_I8_CONV_SCRATCH_BYTES against lower::int8_conv_scratch_bytes for {shapes:?}");

    for (n, k) in [(70u64, 5u64), (33, 40), (1, 9), (100, 64)] {
        let w = weights(&[n, k], 0x2545_f491_4f6c_dd1d ^ (n * 1000 + k));
        let raw = RawTensor::from_tensor(&w);
        let mut bytes = vec![0; crate::lower::int8_panels_bytes(k, n).unwrap() as usize];
        crate::codegen::weights::narrow(stored_values(&raw, Layout::Panels), Stored::Int8, k as usize, &mut bytes);
        // the compiler's codes and scales (widen gives scale * code in panel order)
        let wide = crate::codegen::weights::widen(&bytes, Stored::Int8, k as usize, (n.div_ceil(PANEL) * PANEL * k) as usize).unwrap();
        let p = PANEL as usize;
        let (nn, kk) = (n as usize, k as usize);
        let scale = |j: usize| f32::from_le_bytes(bytes[4 * j..4 * j + 4].try_into().unwrap());
        let code = |r: usize, j: usize| if scale(j) == 0.0 { 0.0 } else { (wide[j / p * kk * p + r * p + j % p] as f32 / scale(j)).round() };
        // C(i, j) = (alpha * s_i) * scale_j * (sum - zp * colsum), s_i = 0/255 - (-1)/255
        let s_row = 1.0f32 * (0.0f32 / 255.0 - -1.0f32 / 255.0);
        let product: Vec<f32> = (0..kk * nn).map(|x| (x / nn, x % nn)).map(|(r, j)| s_row * scale(j) * (-255 * code(r, j) as i32) as f32).collect();
        let codes: Vec<f32> = (0..kk * nn).map(|x| code(x / nn, x % nn)).collect();
        let floats = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let got = run(&exe, &["int8".into(), k.to_string(), n.to_string()], &bytes);
        if let Some(d) = first_difference(&got, &floats(&[product, codes].concat())) {
            panic!("[{n}, {k}] in int8 panels: mr_gemm_i8_mt or MR_I8_INDEX reads other values than the compiler wrote: {d}");
        }
    }
}

/// Every `mr_` symbol the runtime's objects define or call, compiled with its own names
/// (as the Makefile compiles the objects all models share), is one that `<name>.syms`
/// renames ([`super::runtime_names`]): none is left to clash with another library's.
#[test]
fn every_runtime_symbol_is_one_the_libraries_rename() {
    let dir = tempfile::tempdir().unwrap();
    let cc = crate::build::c_compiler();
    let have = |tool: &str| Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
    if !have(&cc) || !have("nm") {
        let required = std::env::var("MITHRILC_REQUIRE_TOOLS").is_ok_and(|v| !v.is_empty() && v != "0");
        assert!(!required, "MITHRILC_REQUIRE_TOOLS is set, and this test needs {cc} and nm");
        return println!("skipped: {cc} and nm are needed");
    }
    for (name, text) in RUNTIME_FILES {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let out = Command::new(&cc).current_dir(dir.path()).args(["-std=c99", "-c"]).args(runtime_sources()).output().unwrap();
    assert!(out.status.success(), "the runtime does not compile: {}", String::from_utf8_lossy(&out.stderr));
    let objects: Vec<String> = runtime_sources().map(|c| c.replace(".c", ".o")).collect();
    let out = Command::new("nm").current_dir(dir.path()).arg("-g").args(&objects).output().unwrap();
    assert!(out.status.success());
    let renamed = super::runtime_names();
    let symbols: std::collections::BTreeSet<String> =
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.split_whitespace().count() >= 2).filter_map(|l| l.split_whitespace().last()).filter(|s| s.starts_with("mr_")).map(str::to_string).collect();
    assert!(symbols.len() > 20, "nm found too few of the runtime's symbols: {symbols:?}");
    let missed: Vec<&String> = symbols.iter().filter(|s| !renamed.contains(s)).collect();
    assert!(missed.is_empty(), "symbols of the runtime that the libraries would not rename: {missed:?}");
}

/// `mithril_ops.h`'s f16 and bf16 conversions, with which generated C stores and rounds
/// those types, are `half`'s (the interpreter's and the weights'), bit for bit: every
/// 16-bit pattern widened and narrowed back, and a sweep of f32 values with their
/// halfway cases, subnormals, the overflow threshold, infinities and NaNs narrowed.
#[test]
fn the_runtimes_half_conversions_are_the_interpreters() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = driver_or_skip(dir.path()) else { return };
    let mut xs: Vec<f32> = (0..65536u32).flat_map(|h| [half::f16::from_bits(h as u16).to_f32(), half::bf16::from_bits(h as u16).to_f32()]).collect();
    // Halfway between neighbours of each type, and just either side of halfway.
    let mids: Vec<f32> = (0..65535u32)
        .flat_map(|h| {
            let f16 = (half::f16::from_bits(h as u16).to_f64() + half::f16::from_bits(h as u16 + 1).to_f64()) / 2.0;
            let bf16 = (half::bf16::from_bits(h as u16).to_f64() + half::bf16::from_bits(h as u16 + 1).to_f64()) / 2.0;
            [f16, bf16].into_iter().flat_map(|m| { let m = m as f32; [m, f32::from_bits(m.to_bits() + 1), f32::from_bits(m.to_bits().wrapping_sub(1))] })
        })
        .filter(|x| x.is_finite())
        .collect();
    xs.extend(mids);
    xs.extend((0..u32::MAX).step_by(4099).map(f32::from_bits));
    xs.extend([65504.0, 65519.99, 65520.0, 65536.0, 1e-8, 2.9802322e-8, 5.9604645e-8, f32::MIN_POSITIVE, 1e-45, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::from_bits(0x7fa0_0001), f32::from_bits(0xffc0_1234)]);
    let input: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let out = run(&exe, &["halves".into(), xs.len().to_string()], &input);
    assert_eq!(out.len(), xs.len() * 12);
    for (x, o) in xs.iter().zip(out.chunks_exact(12)) {
        let (f16, bf16) = (u16::from_le_bytes([o[0], o[1]]), u16::from_le_bytes([o[2], o[3]]));
        let (r16, rb16) = (f32::from_le_bytes([o[4], o[5], o[6], o[7]]), f32::from_le_bytes([o[8], o[9], o[10], o[11]]));
        assert_eq!(f16, half::f16::from_f32(*x).to_bits(), "mr_f32_to_f16({x:e}) ({:#010x})", x.to_bits());
        assert_eq!(bf16, half::bf16::from_f32(*x).to_bits(), "mr_f32_to_bf16({x:e}) ({:#010x})", x.to_bits());
        assert_eq!(r16.to_bits(), half::f16::from_f32(*x).to_f32().to_bits(), "mr_round_f16({x:e}) ({:#010x})", x.to_bits());
        assert_eq!(rb16.to_bits(), half::bf16::from_f32(*x).to_f32().to_bits(), "mr_round_bf16({x:e}) ({:#010x})", x.to_bits());
    }
}

/// `mithril_ops.h`'s narrow-float conversions, with which generated C stores and rounds
/// float8 and float4, are `narrow.rs`'s (the interpreter's, ONNX's reference's): every
/// code decoded, and every code's value, the halfway points between neighbours and
/// either side of them, overflow thresholds, subnormals, infinities and NaNs encoded.
#[test]
fn the_runtimes_narrow_float_conversions_are_the_interpreters() {
    const TYPES: [Dtype; 5] = [Dtype::F8E4M3Fn, Dtype::F8E4M3Fnuz, Dtype::F8E5M2, Dtype::F8E5M2Fnuz, Dtype::F4E2M1];
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = driver_or_skip(dir.path()) else { return };
    let mut xs: Vec<f32> = Vec::new();
    for d in TYPES {
        let mut values: Vec<f64> = (0..1u32 << d.bits()).map(|c| crate::narrow::decode(d, c as u8)).filter(|v| v.is_finite()).collect();
        values.sort_by(f64::total_cmp);
        for w in values.windows(2) {
            let mid = ((w[0] + w[1]) / 2.0) as f32;
            xs.extend([w[0] as f32, mid, f32::from_bits(mid.to_bits() + 1), f32::from_bits(mid.to_bits().wrapping_sub(1))]);
        }
        let max = crate::narrow::max_finite(d).unwrap() as f32;
        xs.extend([max * 1.0625, max * 1.0625 + 1.0, max * 1.125, max * 4.0, max * 2.0]);
    }
    xs.extend((0..u32::MAX).step_by(65521).map(f32::from_bits));
    xs.extend([0.0, -0.0, 1e-30, -1e-30, 1e-45, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, f32::MAX, f32::MIN]);
    let input: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let out = run(&exe, &["narrow".into(), xs.len().to_string()], &input);
    assert_eq!(out.len(), xs.len() * 5 + 256 * 20);
    let (codes, decoded) = out.split_at(xs.len() * 5);
    for (x, c) in xs.iter().zip(codes.chunks_exact(5)) {
        for (d, &code) in TYPES.iter().zip(c) {
            assert_eq!(code, crate::narrow::encode(*d, f64::from(*x)), "mr_f32_to_{d}({x:e}) ({:#010x})", x.to_bits());
        }
    }
    for (code, v) in decoded.chunks_exact(20).enumerate() {
        for (k, d) in TYPES.iter().enumerate() {
            let got = f32::from_le_bytes([v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]]);
            let want = crate::narrow::decode(*d, (code & if *d == Dtype::F4E2M1 { 15 } else { 255 }) as u8);
            assert!(got.to_bits() == (want as f32).to_bits() || got.is_nan() && want.is_nan(), "mr_{d}_to_f32({code:#x}): {got}, expected {want}");
        }
    }
}
