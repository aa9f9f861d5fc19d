//! Tests of the data-file layer: round trips through every dtype, the shared real data
//! files, NumPy's variants (Fortran order, big-endian, narrow integers) and hostile or
//! broken files, which must give whole, file-naming error messages and never panic.

use std::path::{Path, PathBuf};

use npyz::{WriteOptions, WriterBuilder};

use super::{npz_key, read_arrays, write_npy, write_npz};
use crate::ir::Dtype;
use crate::tensor::Tensor;

/// The shared test data, or `None` (after printing why) when it is not on this machine.
fn shared_file(path: &str) -> Option<PathBuf> {
    let p = PathBuf::from(path);
    if p.is_file() {
        Some(p)
    } else {
        println!("skipped: {path} is not present on this machine");
        None
    }
}

/// The rendered message of the error `read_arrays` gives for `path`.
fn read_error(path: &Path) -> String {
    match read_arrays(path) {
        Ok(f) => panic!("reading {} succeeded with arrays {:?}", path.display(), f.arrays.keys()),
        Err(e) => {
            assert_eq!(e.kind, crate::ErrorKind::User, "{e}");
            e.to_string()
        }
    }
}

/// A `.npy` file of the given header dict text (padded as NumPy pads it) and data bytes:
/// format version 1 when the header fits its 16-bit length, else version 2.
fn npy_bytes(dict: &str, data: &[u8]) -> Vec<u8> {
    let v1 = dict.len() < 60000;
    let prefix = if v1 { 10 } else { 12 };
    let mut text = dict.to_string();
    while !(prefix + text.len() + 1).is_multiple_of(64) {
        text.push(' ');
    }
    text.push('\n');
    let mut out = if v1 { b"\x93NUMPY\x01\x00".to_vec() } else { b"\x93NUMPY\x02\x00".to_vec() };
    match u16::try_from(text.len()) {
        Ok(len) if v1 => out.extend_from_slice(&len.to_le_bytes()),
        Ok(_) | Err(_) => out.extend_from_slice(&(text.len() as u32).to_le_bytes()),
    }
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Writes `values` with npyz as dtype `descr` (e.g. `>f4`) into `path`.
fn write_raw<T: npyz::Serialize>(
    path: &Path,
    descr: &str,
    shape: &[u64],
    order: npyz::Order,
    values: Vec<T>,
) {
    let ts: npyz::TypeStr = descr.parse().expect("valid type string");
    let mut bytes = Vec::new();
    let mut w = WriteOptions::<T>::new()
        .dtype(npyz::DType::Plain(ts))
        .shape(shape)
        .order(order)
        .writer(&mut bytes)
        .begin_nd()
        .expect("begin");
    w.extend(values).expect("write");
    w.finish().expect("finish");
    std::fs::write(path, bytes).expect("write file");
}

/// The type a .npy holds `dtype`'s values as (itself where NumPy has it).
fn npy_stand_in(dtype: Dtype) -> Dtype {
    match dtype {
        Dtype::Bf16 => Dtype::F32,
        Dtype::I4 | Dtype::I2 => Dtype::I8,
        d if d.is_narrow_float() || d.bits() < 8 => Dtype::U8,
        d => d,
    }
}

fn sample(dtype: Dtype, shape: Vec<u64>) -> Tensor {
    let n: u64 = shape.iter().product();
    let data = (0..n)
        .map(|i| match dtype {
            Dtype::Bool => (i % 2) as f64,
            Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64 => i as f64 * 37.0 - 100.0,
            Dtype::U8 | Dtype::U16 | Dtype::U32 | Dtype::U64 => i as f64 * 37.0 + 3.0,
            Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::Bf16 => i as f64 * 0.3 - 1.7,
            Dtype::F8E4M3Fn | Dtype::F8E4M3Fnuz | Dtype::F8E5M2 | Dtype::F8E5M2Fnuz | Dtype::F4E2M1 => i as f64 * 0.3 - 1.7,
            Dtype::I4 | Dtype::I2 => (i % 3) as f64 - 2.0,
            Dtype::U4 | Dtype::U2 => (i % 4) as f64,
        })
        .collect();
    Tensor::new(dtype, shape, data)
}

#[test]
fn npz_round_trip_every_dtype() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("all.npz");
    let mut arrays: Vec<(String, Tensor)> =
        Dtype::ALL.iter().map(|&d| (format!("output/{}", d.name()), sample(d, vec![2, 3]))).collect();
    arrays.push(("scalar".to_string(), Tensor::scalar(Dtype::F64, -2.5)));
    arrays.push(("empty".to_string(), sample(Dtype::F32, vec![0, 3])));
    arrays
        .push(("big_i64".to_string(), Tensor::new(Dtype::I64, vec![2], vec![-((1u64 << 53) as f64), 1e15])));
    write_npz(&path, &arrays).expect("write_npz");

    let file = read_arrays(&path).expect("read_arrays");
    assert_eq!(file.path, path);
    let names: Vec<&str> = file.arrays.keys().map(String::as_str).collect();
    let expected: Vec<&str> = arrays.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, expected, "file order is kept");
    for (name, t) in &arrays {
        let got = &file.arrays[name];
        // bf16 has no NumPy dtype: it comes back as f32 holding the same values; the
        // narrow floats as their codes (u8), the 4- and 2-bit integers as i8 or u8.
        assert_eq!(got.dtype, npy_stand_in(t.dtype), "array {name}");
        let back = if got.dtype == t.dtype { got.clone() } else { super::from_stand_in(got, t.dtype).expect("the stand-in's values") };
        assert_eq!(&back, t, "array {name}");
    }
    assert_eq!(file.arrays["scalar"].shape, Vec::<u64>::new());
    assert_eq!(file.arrays["empty"].numel(), 0);
}

#[test]
fn npy_round_trip_named_by_stem() {
    let dir = tempfile::tempdir().expect("tempdir");
    for dtype in Dtype::ALL {
        let path = dir.path().join(format!("x_{}.npy", dtype.name()));
        let t = sample(dtype, vec![3, 1, 2]);
        write_npy(&path, &t).expect("write_npy");
        let file = read_arrays(&path).expect("read_arrays");
        let name = format!("x_{}", dtype.name());
        assert_eq!(file.arrays.len(), 1);
        let got = &file.arrays[&name];
        assert_eq!(got.dtype, npy_stand_in(dtype), "{dtype}");
        let back = if got.dtype == dtype { got.clone() } else { super::from_stand_in(got, dtype).expect("the stand-in's values") };
        assert_eq!(back, t);
    }
}

#[test]
fn writes_the_numpy_dtypes() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (dtype, descr) in [
        (Dtype::F32, "'<f4'"),
        (Dtype::F64, "'<f8'"),
        (Dtype::F16, "'<f2'"),
        (Dtype::Bf16, "'<f4'"),
        (Dtype::I32, "'<i4'"),
        (Dtype::I64, "'<i8'"),
        (Dtype::Bool, "'|b1'"),
    ] {
        let path = dir.path().join("t.npy");
        write_npy(&path, &sample(dtype, vec![2])).expect("write_npy");
        let bytes = std::fs::read(&path).expect("read");
        let header = npyz::NpyHeader::from_reader(&bytes[..]).expect("header");
        assert_eq!(header.dtype().descr(), descr, "{dtype}");
        assert_eq!(header.order(), npyz::Order::C);
    }
}

#[test]
fn reads_gpt_tiny_npz() {
    let Some(path) = shared_file("/work/shared/testdata/gpt_tiny.npz") else { return };
    let file = read_arrays(&path).expect("read gpt_tiny.npz");
    assert_eq!(file.arrays.keys().next().map(String::as_str), Some("input/input"));
    let input = &file.arrays["input/input"];
    assert_eq!((input.dtype, input.shape.as_slice()), (Dtype::I32, &[1u64, 5][..]));
    assert!(input.data.iter().all(|x| x.fract() == 0.0 && *x >= 0.0));
    let w = &file.arrays["param/weight_0"];
    assert_eq!((w.dtype, w.shape.as_slice()), (Dtype::F32, &[8u64, 8][..]));
    assert!(w.data.iter().all(|x| x.is_finite()));
    assert!(w.data.iter().any(|&x| x != 0.0));
    let out = &file.arrays["output/output"];
    assert_eq!((out.dtype, out.shape.as_slice()), (Dtype::F32, &[1u64, 5, 11][..]));
    assert!(out.data.iter().all(|x| x.is_finite()));
}

#[test]
fn reads_mlp_safetensors_and_npy() {
    let Some(st) = shared_file("/work/shared/bench/mlp.safetensors") else { return };
    let Some(npy) = shared_file("/work/shared/bench/mlp_b1_input.npy") else { return };
    let file = read_arrays(&st).expect("read mlp.safetensors");
    let names: Vec<&String> = file.arrays.keys().collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "safetensors arrays are sorted by name");
    let w = &file.arrays["fc1_weight"];
    assert_eq!((w.dtype, w.shape.as_slice()), (Dtype::F32, &[512u64, 784][..]));
    assert!(w.data.iter().all(|x| x.is_finite()));
    let b = &file.arrays["fc1_bias"];
    assert_eq!((b.dtype, b.shape.as_slice()), (Dtype::F32, &[512u64][..]));
    assert!(b.data[0].is_finite() && b.data[511].is_finite());

    let file = read_arrays(&npy).expect("read mlp_b1_input.npy");
    let x = &file.arrays["mlp_b1_input"];
    assert_eq!((x.dtype, x.shape.as_slice()), (Dtype::F32, &[1u64, 784][..]));
    assert!(x.data.iter().all(|v| v.is_finite()));
}

#[test]
fn truncated_npz_is_an_error() {
    let Some(real) = shared_file("/work/shared/testdata/gpt_tiny.npz") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cut.npz");
    let bytes = std::fs::read(&real).expect("read");
    std::fs::write(&path, &bytes[..100]).expect("write");
    let msg = read_error(&path);
    assert!(
        msg.starts_with(&format!("cannot read {}: not a valid .npz (zip) archive: ", path.display())),
        "{msg}"
    );
}

#[test]
fn corrupt_entry_in_npz_is_an_error() {
    // A stored (uncompressed) archive whose array data is then cut short.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.npz");
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("x.npy", options).expect("start");
    let npy = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", &[0u8; 8]);
    std::io::Write::write_all(&mut zip, &npy).expect("write");
    let bytes = zip.finish().expect("finish").into_inner();
    std::fs::write(&path, bytes).expect("write");
    assert_eq!(
        read_error(&path),
        format!(
            "cannot read {}: array 'x': shape [4] of '<f4' needs 16 bytes of data but the file has 8",
            path.display()
        )
    );
}

/// A stored (uncompressed) npz member is read in place from the mapped archive, and
/// read as raw it keeps the file's dtype: the same values as the deflated member.
#[test]
fn stored_and_deflated_npz_members_read_alike() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("both.npz");
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let values: Vec<u8> = [1.5f32, -2.0, 0.25].iter().flat_map(|x| x.to_le_bytes()).collect();
    let npy = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", &values);
    for (name, method) in [("stored.npy", zip::CompressionMethod::Stored), ("deflated.npy", zip::CompressionMethod::Deflated)] {
        zip.start_file(name, zip::write::SimpleFileOptions::default().compression_method(method)).expect("start");
        std::io::Write::write_all(&mut zip, &npy).expect("write");
    }
    std::fs::write(&path, zip.finish().expect("finish").into_inner()).expect("write");
    let raw = super::read_raw_arrays(&path).expect("read");
    for name in ["stored", "deflated"] {
        let t = &raw.arrays[name];
        assert_eq!((t.dtype, t.bytes()), (Dtype::F32, &values[..]), "{name}");
        assert_eq!(t.to_tensor(), Tensor::new(Dtype::F32, vec![3], vec![1.5, -2.0, 0.25]), "{name}");
    }
}

#[test]
fn missing_file_and_unknown_extension() {
    let dir = tempfile::tempdir().expect("tempdir");
    for ext in ["npz", "npy", "safetensors"] {
        let path = dir.path().join(format!("absent.{ext}"));
        assert_eq!(read_error(&path), format!("cannot read {}: No such file or directory", path.display()));
    }
    let path = dir.path().join("data.csv");
    assert_eq!(
        read_error(&path),
        format!(
            "cannot read {}: unknown data file extension (expected .npz, .npy, .safetensors or .pb)",
            path.display()
        )
    );
}

#[test]
fn fortran_order_is_transposed_to_row_major() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f.npy");
    // The 2x3 array [[0, 1, 2], [10, 11, 12]] stored column by column.
    write_raw(&path, "<f8", &[2, 3], npyz::Order::Fortran, vec![0.0f64, 10.0, 1.0, 11.0, 2.0, 12.0]);
    let t = &read_arrays(&path).expect("read").arrays["f"];
    assert_eq!(t.shape, vec![2, 3]);
    assert_eq!(t.data, vec![0.0, 1.0, 2.0, 10.0, 11.0, 12.0]);

    // Rank 3: element (i, j, k) = 100i + 10j + k, stored with i fastest.
    let shape = [2u64, 3, 4];
    let mut fdata: Vec<i32> = Vec::new();
    for k in 0..4 {
        for j in 0..3 {
            for i in 0..2 {
                fdata.push(100 * i + 10 * j + k);
            }
        }
    }
    write_raw(&path, "<i4", &shape, npyz::Order::Fortran, fdata);
    let t = &read_arrays(&path).expect("read").arrays["f"];
    let expected: Vec<f64> = (0..2)
        .flat_map(|i| (0..3).flat_map(move |j| (0..4).map(move |k| (100 * i + 10 * j + k) as f64)))
        .collect();
    assert_eq!((t.dtype, &t.shape, &t.data), (Dtype::I32, &shape.to_vec(), &expected));
}

#[test]
fn big_endian_and_narrow_integers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v.npy");
    let c = npyz::Order::C;
    write_raw(&path, ">f4", &[3], c, vec![1.5f32, -2.25, 3e10]);
    assert_eq!(
        read_arrays(&path).expect("read").arrays["v"],
        Tensor::new(Dtype::F32, vec![3], vec![1.5, -2.25, 3e10])
    );
    write_raw(&path, ">i8", &[2], c, vec![-5i64, 1 << 40]);
    assert_eq!(read_arrays(&path).expect("read").arrays["v"].data, vec![-5.0, (1u64 << 40) as f64]);

    // Each integer type is read as itself (no widening), big-endian ones too, and
    // written back as the same NumPy dtype.
    let cases: [(&str, Dtype, Vec<f64>); 8] = [
        ("|u1", Dtype::U8, vec![0.0, 255.0]),
        ("|i1", Dtype::I8, vec![-128.0, 127.0]),
        (">i2", Dtype::I16, vec![-32768.0, 32767.0]),
        ("<u2", Dtype::U16, vec![0.0, 65535.0]),
        ("<u4", Dtype::U32, vec![0.0, 4294967295.0]),
        (">u4", Dtype::U32, vec![0.0, 4294967295.0]),
        ("<u8", Dtype::U64, vec![0.0, 9007199254740992.0]),
        (">u8", Dtype::U64, vec![0.0, 9007199254740992.0]),
    ];
    for (descr, dtype, values) in cases {
        match descr {
            "|u1" => write_raw(&path, descr, &[2], c, vec![0u8, 255]),
            "|i1" => write_raw(&path, descr, &[2], c, vec![-128i8, 127]),
            ">i2" => write_raw(&path, descr, &[2], c, vec![i16::MIN, i16::MAX]),
            "<u2" => write_raw(&path, descr, &[2], c, vec![0u16, u16::MAX]),
            "<u8" | ">u8" => write_raw(&path, descr, &[2], c, vec![0u64, 1 << 53]),
            _ => write_raw(&path, descr, &[2], c, vec![0u32, u32::MAX]),
        }
        let t = &read_arrays(&path).expect("read").arrays["v"];
        assert_eq!((t.dtype, &t.data), (dtype, &values), "{descr}");
        let back = dir.path().join("back.npy");
        write_npy(&back, t).expect("write");
        let little = descr.replace('>', "<");
        assert!(String::from_utf8_lossy(&std::fs::read(&back).expect("read back")).contains(&format!("'descr': '{little}'")), "{descr}");
        assert_eq!(&read_arrays(&back).expect("read back").arrays["back"], t, "{descr}");
    }
}

#[test]
fn sixty_four_bit_integers_stay_exact_in_raw_arrays() {
    // Beyond 2^53 an f64 cannot hold them; the file's own bytes (a view, or converted
    // from big-endian) keep them, as the weights blob and the C target see them.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v.npy");
    let big = [u64::MAX, (1 << 53) + 1];
    let signed = [i64::MIN + 1, (1 << 53) + 1];
    for descr in ["<u8", ">u8", "<i8", ">i8"] {
        if descr.ends_with("u8") {
            write_raw(&path, descr, &[2], npyz::Order::C, big.to_vec());
        } else {
            write_raw(&path, descr, &[2], npyz::Order::C, signed.to_vec());
        }
        let raw = &super::read_raw_arrays(&path).expect("read").arrays["v"];
        let want: Vec<u8> = if descr.ends_with("u8") { big.iter().flat_map(|x| x.to_le_bytes()).collect() } else { signed.iter().flat_map(|x| x.to_le_bytes()).collect() };
        assert_eq!(raw.bytes(), want.as_slice(), "{descr}");
    }
}

#[test]
fn unsupported_npy_dtypes_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("u.npy");
    std::fs::write(&path, npy_bytes("{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }", &[0; 16])).expect("write");
    let supported = "(supported: float16/32/64, int8/16/32/64, uint8/16/32/64, bool)";
    assert_eq!(
        read_error(&path),
        format!("cannot read {}: array 'u': unsupported dtype '<f16' {supported}", path.display())
    );
    std::fs::write(&path, npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", &[0; 8]))
        .expect("write");
    assert_eq!(
        read_error(&path),
        format!("cannot read {}: array 'u': unsupported dtype '<c8' {supported}", path.display())
    );
    let record = "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (1,), }";
    std::fs::write(&path, npy_bytes(record, &[0; 8])).expect("write");
    assert_eq!(
        read_error(&path),
        format!(
            "cannot read {}: array 'u': unsupported dtype [('a', '<f4'), ('b', '<i4'), ] {supported}",
            path.display()
        )
    );
}

#[test]
fn hostile_npy_headers_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("h.npy");
    let at = |msg: &str| format!("cannot read {}: array 'h': {msg}", path.display());

    // An element count that overflows u64 (npyz would multiply it unchecked).
    let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2), }";
    std::fs::write(&path, npy_bytes(dict, &[])).expect("write");
    assert_eq!(
        read_error(&path),
        at("invalid .npy data: the element count of shape (4294967296, 4294967296, 2) overflows")
    );
    // The same with a zero dimension: npyz's prefix products would still overflow.
    let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296), }";
    std::fs::write(&path, npy_bytes(dict, &[])).expect("write");
    assert!(read_error(&path).contains("overflows"));

    // A count that fits but whose byte size does not.
    let dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 1073741824), }";
    std::fs::write(&path, npy_bytes(dict, &[])).expect("write");
    assert_eq!(read_error(&path), at("shape [4294967296, 1073741824] is too large"));

    // More elements than data, and more data than elements.
    let dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (1000000,), }";
    std::fs::write(&path, npy_bytes(dict, &[1, 2, 3, 4])).expect("write");
    assert_eq!(
        read_error(&path),
        at("shape [1000000] of '<i4' needs 4000000 bytes of data but the file has 4")
    );
    let dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (), }";
    std::fs::write(&path, npy_bytes(dict, &[0; 8])).expect("write");
    assert_eq!(read_error(&path), at("shape [] of '<i4' needs 4 bytes of data but the file has 8"));

    // A header longer than the file, a file too short for the magic, garbage.
    let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&path, &bytes).expect("write");
    assert_eq!(
        read_error(&path),
        at("invalid .npy data: the header claims 4294967295 bytes but the file ends first")
    );
    std::fs::write(&path, b"\x93NU").expect("write");
    assert_eq!(read_error(&path), at("invalid .npy data: magic not found for NPY file"));
    std::fs::write(&path, npy_bytes("{'descr': '<f4', 'shape': (1,), }", &[0; 4])).expect("write");
    assert_eq!(read_error(&path), at("invalid .npy data: dict is missing key 'fortran_order'"));

    // Deep nesting: the parser's error is clipped, not echoed whole.
    let deep = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': {}1{}, }}",
        "(".repeat(30000),
        ",)".repeat(30000)
    );
    std::fs::write(&path, npy_bytes(&deep, &[])).expect("write");
    let msg = read_error(&path);
    assert!(msg.starts_with(&at("invalid .npy data: ")) && msg.len() < 1000, "{msg}");

    // A bool array holding a byte other than 0 or 1.
    let dict = "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }";
    std::fs::write(&path, npy_bytes(dict, &[1, 7])).expect("write");
    assert_eq!(read_error(&path), at("invalid .npy data: invalid value for bool: 7"));
}

#[test]
fn safetensors_dtypes_and_order() {
    use ::safetensors::{tensor::TensorView, Dtype as St};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.safetensors");
    let bf16: Vec<u8> = [1.5f32, -3.0].iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect();
    let i8s: Vec<u8> = [-3i8, 100].iter().flat_map(|x| x.to_le_bytes()).collect();
    let u32s: Vec<u8> = [7u32, u32::MAX].iter().flat_map(|x| x.to_le_bytes()).collect();
    let bools = vec![0u8, 1, 1];
    let f64s: Vec<u8> = [0.1f64].iter().flat_map(|x| x.to_le_bytes()).collect();
    let views = vec![
        ("zeta", TensorView::new(St::BF16, vec![2], &bf16).expect("view")),
        ("alpha", TensorView::new(St::I8, vec![1, 2], &i8s).expect("view")),
        ("mid", TensorView::new(St::U32, vec![2], &u32s).expect("view")),
        ("flags", TensorView::new(St::BOOL, vec![3], &bools).expect("view")),
        ("s", TensorView::new(St::F64, vec![], &f64s).expect("view")),
    ];
    std::fs::write(&path, ::safetensors::serialize(views, None).expect("serialize")).expect("write");
    let file = read_arrays(&path).expect("read");
    let names: Vec<&str> = file.arrays.keys().map(String::as_str).collect();
    assert_eq!(names, ["alpha", "flags", "mid", "s", "zeta"]);
    assert_eq!(file.arrays["zeta"], Tensor::new(Dtype::Bf16, vec![2], vec![1.5, -3.0]));
    assert_eq!(file.arrays["alpha"], Tensor::new(Dtype::I8, vec![1, 2], vec![-3.0, 100.0]));
    assert_eq!(file.arrays["mid"], Tensor::new(Dtype::U32, vec![2], vec![7.0, 4294967295.0]));
    assert_eq!(file.arrays["flags"], Tensor::new(Dtype::Bool, vec![3], vec![0.0, 1.0, 1.0]));
    assert_eq!(file.arrays["s"], Tensor::scalar(Dtype::F64, 0.1));

    // Every integer type is a view of the file in its own dtype, u64 beyond 2^53
    // exactly, and is written back as itself.
    let u64s: Vec<u8> = [u64::MAX, 5].iter().flat_map(|x| x.to_le_bytes()).collect();
    let i16s: Vec<u8> = [i16::MIN, 7].iter().flat_map(|x| x.to_le_bytes()).collect();
    let views = vec![("big", TensorView::new(St::U64, vec![2], &u64s).expect("view")), ("short", TensorView::new(St::I16, vec![2], &i16s).expect("view"))];
    std::fs::write(&path, ::safetensors::serialize(views, None).expect("serialize")).expect("write");
    let raw = super::read_raw_arrays(&path).expect("read");
    assert_eq!((raw.arrays["big"].dtype, raw.arrays["big"].bytes()), (Dtype::U64, u64s.as_slice()));
    assert_eq!((raw.arrays["short"].dtype, raw.arrays["short"].bytes()), (Dtype::I16, i16s.as_slice()));
    let arrays: Vec<(String, crate::tensor::RawTensor)> = raw.arrays.into_iter().collect();
    let back = super::raw_safetensors_bytes(&arrays).expect("write");
    let st = ::safetensors::SafeTensors::deserialize(&back).expect("read back");
    assert_eq!((st.tensor("big").expect("big").dtype(), st.tensor("big").expect("big").data()), (St::U64, u64s.as_slice()));
    assert_eq!((st.tensor("short").expect("short").dtype(), st.tensor("short").expect("short").data()), (St::I16, i16s.as_slice()));

    let c64s = [0u8; 16];
    let views = vec![("big", TensorView::new(St::C64, vec![2], &c64s).expect("view"))];
    std::fs::write(&path, ::safetensors::serialize(views, None).expect("serialize")).expect("write");
    assert_eq!(
        read_error(&path),
        format!(
            "cannot read {}: tensor 'big': unsupported dtype C64 (supported: F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL, F8_E4M3, F8_E4M3FNUZ, F8_E5M2, F8_E5M2FNUZ)",
            path.display()
        )
    );

    std::fs::write(&path, b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": 1}").expect("write");
    let msg = read_error(&path);
    assert!(
        msg.starts_with(&format!("cannot read {}: not a valid .safetensors file: ", path.display())),
        "{msg}"
    );
}

#[test]
fn npz_entries_must_be_npy_arrays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("odd.npz");
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file("notes.txt", zip::write::SimpleFileOptions::default()).expect("start");
    std::io::Write::write_all(&mut zip, b"hello").expect("write");
    std::fs::write(&path, zip.finish().expect("finish").into_inner()).expect("write");
    assert_eq!(
        read_error(&path),
        format!("cannot read {}: entry 'notes.txt' is not a .npy array", path.display())
    );
}

#[test]
fn npz_members_never_leave_the_unzip_directory() {
    let cases = [
        ("output", "output"),
        ("grad/w", "grad/w"),
        ("../../x", "__/__/x"),
        ("/etc/passwd", "_/etc/passwd"),
        ("a//b/./c", "a/_/b/_/c"),
        ("C:\\evil\nname", "C__evil_name"),
        ("..hidden", "..hidden"),
    ];
    for (name, key) in cases {
        assert_eq!(npz_key(name), key, "{name:?}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("out.npz");
    let arrays: Vec<(String, Tensor)> =
        cases.iter().enumerate().map(|(i, (name, _))| (name.to_string(), Tensor::scalar(Dtype::F32, i as f64))).collect();
    write_npz(&path, &arrays).expect("write_npz");
    let back = read_arrays(&path).expect("read back");
    let keys: Vec<&str> = back.arrays.keys().map(String::as_str).collect();
    assert_eq!(keys, cases.iter().map(|(_, key)| *key).collect::<Vec<_>>());
    let clash = write_npz(&path, &[("a/..".into(), Tensor::scalar(Dtype::F32, 0.0)), ("a/__".into(), Tensor::scalar(Dtype::F32, 0.0))]);
    assert_eq!(clash.unwrap_err().to_string(), format!("cannot write {}: array name 'a/__' and 'a/..' are both written as 'a/__'", path.display()));
}

#[test]
fn write_errors_name_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dup.npz");
    let t = Tensor::scalar(Dtype::F32, 1.0);
    let err = write_npz(&path, &[("a".to_string(), t.clone()), ("a".to_string(), t.clone())])
        .expect_err("duplicate names");
    assert_eq!(err.to_string(), format!("cannot write {}: array name 'a' is used twice", path.display()));

    let bad = Tensor { dtype: Dtype::F32, shape: vec![2, 2], data: vec![1.0; 3] };
    let path = dir.path().join("bad.npy");
    let err = write_npy(&path, &bad).expect_err("inconsistent tensor");
    assert_eq!(err.kind, crate::ErrorKind::Internal);
    assert_eq!(
        err.to_string(),
        format!("writing {}: array 'bad' of shape [2, 2] holds 3 elements", path.display())
    );
    assert!(!path.exists(), "nothing is written for an inconsistent tensor");

    let path = dir.path().join("no_such_dir").join("x.npy");
    let err = write_npy(&path, &t).expect_err("missing directory");
    assert_eq!(err.to_string(), format!("cannot write {}: No such file or directory", path.display()));
}
#[test]
fn damaged_files_never_panic() {
    // Every single-byte corruption and every truncation of a small npz, npy and
    // safetensors file must read as an array file or as an error, never a panic.
    let dir = tempfile::tempdir().expect("tempdir");
    let arrays = vec![
        ("input/x".to_string(), sample(Dtype::F32, vec![2, 3])),
        ("param/w".to_string(), sample(Dtype::I64, vec![3])),
    ];
    let npz = dir.path().join("a.npz");
    write_npz(&npz, &arrays).expect("write_npz");
    let npy = dir.path().join("a.npy");
    write_npy(&npy, &arrays[0].1).expect("write_npy");
    let st = dir.path().join("a.safetensors");
    let f32s: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    let views = vec![(
        "w",
        ::safetensors::tensor::TensorView::new(::safetensors::Dtype::F32, vec![2], &f32s).expect("view"),
    )];
    std::fs::write(&st, ::safetensors::serialize(views, None).expect("serialize")).expect("write");

    for path in [npz, npy, st] {
        let good = std::fs::read(&path).expect("read");
        let damaged = path
            .with_file_name(format!("damaged.{}", path.extension().and_then(|e| e.to_str()).unwrap_or("")));
        for i in 0..good.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bytes = good.clone();
                bytes[i] ^= flip;
                std::fs::write(&damaged, &bytes).expect("write");
                let _ = read_arrays(&damaged);
            }
            std::fs::write(&damaged, &good[..i]).expect("write");
            assert!(read_arrays(&damaged).is_err(), "{} cut to {i} bytes", path.display());
        }
    }
}

#[test]
fn safetensors_written_are_read_back_in_every_dtype_and_deterministic() {
    let arrays: Vec<(String, Tensor)> = vec![
        ("w".into(), Tensor::new(Dtype::F32, vec![2, 3], vec![0.5, -1.25, 3.0, 1e-8, -0.0, 7.0])),
        ("b/x".into(), Tensor::new(Dtype::F64, vec![], vec![0.1])),
        ("h".into(), Tensor::new(Dtype::F16, vec![2], vec![1.5, -2.0])),
        ("g".into(), Tensor::new(Dtype::Bf16, vec![1], vec![3.0])),
        ("i".into(), Tensor::new(Dtype::I32, vec![3], vec![-3.0, 0.0, 9.0])),
        ("l".into(), Tensor::new(Dtype::I64, vec![1], vec![-1e12])),
        ("p".into(), Tensor::new(Dtype::Bool, vec![3], vec![1.0, 0.0, 1.0])),
        ("empty".into(), Tensor::new(Dtype::F32, vec![0, 2], vec![])),
    ];
    let bytes = super::safetensors_bytes(&arrays).expect("encode");
    let mut reversed = arrays.clone();
    reversed.reverse();
    assert_eq!(super::safetensors_bytes(&reversed).expect("encode"), bytes, "order of the arguments changes the bytes");
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert_eq!(header_len % 8, 0);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.safetensors");
    std::fs::write(&path, &bytes).expect("write");
    let file = read_arrays(&path).expect("read");
    for (name, t) in &arrays {
        assert_eq!(&file.arrays[name], t, "{name}");
    }
    let twice = vec![("a".to_string(), Tensor::scalar(Dtype::F32, 1.0)), ("a".to_string(), Tensor::scalar(Dtype::F32, 2.0))];
    assert_eq!(super::safetensors_bytes(&twice).unwrap_err().to_string(), "cannot write safetensors: tensor name 'a' is used twice");
}

/// `write_arrays` picks the writer by extension, and what each writes reads back
/// unchanged; the safetensors file's layout is as the format specifies it: an 8-byte
/// little-endian header length, a JSON header, then the data, each tensor's
/// `data_offsets` a `[begin, end)` range of its bytes, in order, with no gaps, the last
/// ending where the file does.
#[test]
fn write_arrays_by_extension_round_trips() {
    let arrays: Vec<(String, Tensor)> = vec![
        ("z".into(), Tensor::new(Dtype::F32, vec![2, 3], vec![0.5, -1.25, 3.0, 1e-8, -0.0, 7.0])),
        ("grad/w".into(), Tensor::new(Dtype::F64, vec![3], vec![0.1, 0.2, 0.3])),
        ("h".into(), Tensor::new(Dtype::F16, vec![1], vec![1.5])),
        ("i".into(), Tensor::new(Dtype::I64, vec![2], vec![-7.0, 9.0])),
        ("p".into(), Tensor::new(Dtype::Bool, vec![3], vec![1.0, 0.0, 1.0])),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    for file in ["all.npz", "all.SAFETENSORS"] {
        let path = dir.path().join(file);
        super::write_arrays(&path, &arrays).expect("write");
        let back = read_arrays(&path).expect("read back");
        assert_eq!(back.arrays.len(), arrays.len(), "{file}");
        for (name, t) in &arrays {
            assert_eq!(&back.arrays[name], t, "{file}: {name}");
        }
    }
    let one = dir.path().join("one.npy");
    super::write_arrays(&one, &arrays[..1]).expect("write one.npy");
    assert_eq!(read_arrays(&one).expect("read one.npy").arrays["one"], arrays[0].1);

    let bytes = std::fs::read(dir.path().join("all.SAFETENSORS")).expect("read the bytes");
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..8 + header_len]).expect("the header is a JSON object");
    let mut ranges: Vec<(u64, u64, &str)> = header
        .iter()
        .map(|(name, info)| {
            let offsets = info["data_offsets"].as_array().expect("data_offsets");
            (offsets[0].as_u64().expect("begin"), offsets[1].as_u64().expect("end"), name.as_str())
        })
        .collect();
    ranges.sort();
    let names: Vec<&str> = ranges.iter().map(|r| r.2).collect();
    assert_eq!(names, ["grad/w", "h", "i", "p", "z"], "the data is laid out in name order");
    let mut at = 0;
    for (begin, end, name) in ranges {
        assert_eq!(begin, at, "a gap or overlap before {name}");
        at = end;
    }
    assert_eq!(8 + header_len as u64 + at, bytes.len() as u64, "the data ends where the file does");

    let err = super::write_arrays(&dir.path().join("two.npy"), &arrays[..2]).unwrap_err();
    assert_eq!((err.kind, err.message.ends_with("there are 2 (z, grad/w)")), (crate::ErrorKind::Usage, true), "{err}");
    let err = super::write_arrays(&dir.path().join("all.txt"), &arrays).unwrap_err();
    assert_eq!(err.message, format!("cannot write {}: unknown data file extension (accepted: .npz, .npy, .safetensors)", dir.path().join("all.txt").display()));
    assert!(!dir.path().join("two.npy").exists() && !dir.path().join("all.txt").exists());
}

/// `__metadata__` is the safetensors header's own key: an array of that name is refused
/// before anything is written (a usage error, as for a .npy of two arrays) and by the
/// encoder itself; a .npz holds it.
#[test]
fn safetensors_refuses_the_metadata_name() {
    let names = vec!["__metadata__".to_string(), "y".to_string()];
    let err = super::check_output(Path::new("out.safetensors"), &names).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot write out.safetensors: an array named `__metadata__`: the format reserves that key for the file's metadata\n  \
         note: write a .npz, which holds an array of any name"
    );
    assert_eq!(err.kind, crate::error::ErrorKind::Usage);
    assert!(super::check_output(Path::new("out.npz"), &names).is_ok());
    let arrays = vec![("__metadata__".to_string(), sample(Dtype::F32, vec![2]))];
    let err = super::safetensors_bytes(&arrays).unwrap_err();
    assert_eq!(err.kind, crate::error::ErrorKind::User);
    assert!(err.message.starts_with("cannot write safetensors: an array named `__metadata__`"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    assert!(super::write_arrays(&dir.path().join("o.safetensors"), &arrays).is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing is left behind");
}

/// The float8 types are safetensors' F8_E4M3, F8_E4M3FNUZ, F8_E5M2 and F8_E5M2FNUZ (one
/// code a byte, read back as themselves); float4 and the 4- and 2-bit integers have no
/// safetensors type of a byte each and are refused by name; a .npy stand-in whose values
/// the type cannot hold is not taken for it.
#[test]
fn narrow_types_in_safetensors_and_stand_ins() {
    let arrays: Vec<(String, Tensor)> = [Dtype::F8E4M3Fn, Dtype::F8E4M3Fnuz, Dtype::F8E5M2, Dtype::F8E5M2Fnuz]
        .iter()
        .map(|&d| (d.name().to_string(), Tensor::new(d, vec![3], vec![0.5, -224.0, f64::NAN])))
        .collect();
    let bytes = super::safetensors_bytes(&arrays).expect("encode");
    let header = String::from_utf8_lossy(&bytes[8..]).into_owned();
    for name in ["\"F8_E4M3\"", "\"F8_E4M3FNUZ\"", "\"F8_E5M2\"", "\"F8_E5M2FNUZ\""] {
        assert!(header.contains(name), "{name} in {header}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f8.safetensors");
    std::fs::write(&path, &bytes).expect("write");
    let file = read_arrays(&path).expect("read");
    for (name, t) in &arrays {
        let got = &file.arrays[name];
        assert_eq!((got.dtype, &got.data[..2]), (t.dtype, &t.data[..2]), "{name}");
        assert!(got.data[2].is_nan(), "{name}");
    }
    let i4 = vec![("q".to_string(), Tensor::new(Dtype::I4, vec![2], vec![-8.0, 7.0]))];
    assert_eq!(
        super::safetensors_bytes(&i4).unwrap_err().to_string(),
        "cannot write safetensors: tensor 'q' is i4, which safetensors has no type for (of the narrow types it has f8e4m3fn, f8e4m3fnuz, f8e5m2 and f8e5m2fnuz)"
    );
    assert_eq!(super::from_stand_in(&Tensor::new(Dtype::I8, vec![2], vec![7.0, 8.0]), Dtype::I4), None);
    assert_eq!(super::from_stand_in(&Tensor::new(Dtype::U8, vec![1], vec![0x7e as f64]), Dtype::F8E4M3Fn).map(|t| t.data), Some(vec![448.0]));
}
