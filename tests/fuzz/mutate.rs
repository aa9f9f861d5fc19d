//! Mutators for the fuzz targets: generic byte havoc, JSON-aware edits of a model file
//! (numbers, shapes, names, class names, dropped and duplicated keys, subtrees spliced
//! from other files), `--shape` edits, and format-aware edits of `.npy` headers,
//! `.safetensors` headers and `.npz` archives. Every choice comes from the caller's
//! [`Rng`], so a run is a function of its seed.

use serde_json::{Number, Value};

use crate::common::random_model::Rng;

/// Numbers that sit on boundaries: sizes 0 and 1, negative axes, values past i32, i64
/// and u64, non-integers where integers are expected.
const NUMBERS: &[f64] = &[
    0.0, 1.0, -1.0, 2.0, 3.0, -2.0, 4.0, 5.0, 7.0, 8.0, 16.0, 255.0, 256.0, 65535.0, 65536.0,
    2147483647.0, 2147483648.0, -2147483648.0, 4294967295.0, 4294967296.0, 9007199254740993.0,
    9.223372036854776e18, -9.223372036854776e18, 1.8446744073709552e19, 1e300, -1e300, 0.5, -0.5, 1e-300,
];

/// Strings that mean something somewhere in the format.
const STRINGS: &[&str] = &[
    "", "input", "output", "weight", "bias", "left", "right", "axis", "shape", "m_0", "m_1", "m_7", "m_99", "m_-1",
    "$1", "$2", "self", "TBD", "(Ellipsis,)", "Constant.EPSILON", "Constant.MIN_POSITIVE_NORMAL", "float", "int",
    "bool", "Model", "Tensor", "connect", "key", "name", "value", "tensor", "batch", "Var,...", "N", "...", "SAME",
    "VALID", "PaddingType.SAME", "output_grad/output", "grad/weight", "\u{0}", "é", "m_0.m_1",
];

/// Byte-level havoc: a few flips, overwrites, inserts, deletes, truncations and
/// duplicated chunks. Mostly breaks the syntax, which is worth testing too.
pub fn bytes(rng: &mut Rng, data: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        let len = data.len() as u64;
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len) as usize;
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len) as usize;
                data[i] = *rng.pick(&[0u8, 0xff, 0x7f, 0x80, b'"', b'{', b'}', b'[', b']', b',', b':', b'9', b'-', b'e', b'.']);
            }
            2 => {
                let i = rng.below(len + 1) as usize;
                data.insert(i, rng.next() as u8);
            }
            3 if len > 0 => {
                let i = rng.below(len) as usize;
                let n = (1 + rng.below(16) as usize).min(data.len() - i);
                data.drain(i..i + n);
            }
            4 if len > 0 => data.truncate(rng.below(len) as usize),
            5 if len > 1 => {
                // A chunk copied elsewhere.
                let a = rng.below(len) as usize;
                let n = (1 + rng.below(64) as usize).min(data.len() - a);
                let chunk = data[a..a + n].to_vec();
                let at = rng.below(data.len() as u64 + 1) as usize;
                data.splice(at..at, chunk);
            }
            6 if len >= 4 => {
                // A little-endian integer field set to a boundary value.
                let i = rng.below(len - 3) as usize;
                let v: u32 = *rng.pick(&[0, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0xffff, 0x1_0000]);
                data[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            _ => {
                let i = rng.below(len + 1) as usize;
                let n = 1 + rng.below(8) as usize;
                let b = rng.next() as u8;
                data.splice(i..i, std::iter::repeat_n(b, n));
            }
        }
    }
}

/// Every value of a JSON document, as paths of object keys and array indices.
fn paths(v: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                at.push(Step::Key(k.clone()));
                paths(child, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                at.push(Step::Index(i));
                paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn value_at<'a>(v: &'a Value, path: &[Step]) -> Option<&'a Value> {
    let mut cur = v;
    for s in path {
        cur = match (s, cur) {
            (Step::Key(k), Value::Object(m)) => m.get(k)?,
            (Step::Index(i), Value::Array(a)) => a.get(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn at_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match (s, cur) {
            (Step::Key(k), Value::Object(m)) => m.get_mut(k)?,
            (Step::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// A random value of a random kind, sometimes one taken from `donor`.
fn some_value(rng: &mut Rng, donor: Option<&Value>) -> Value {
    if let Some(d) = donor {
        if rng.coin() {
            let mut all = Vec::new();
            paths(d, &mut Vec::new(), &mut all);
            let p = rng.pick(&all).clone();
            let mut d = d.clone();
            if let Some(v) = at_mut(&mut d, &p) {
                return v.clone();
            }
        }
    }
    match rng.below(9) {
        0 => Value::Null,
        1 => Value::Bool(rng.coin()),
        2 | 3 => number(*rng.pick(NUMBERS)),
        4 => Value::String(rng.pick(STRINGS).to_string()),
        5 => Value::String(rng.pick(super::classes()).to_string()),
        6 => Value::Array((0..rng.below(5)).map(|_| number(*rng.pick(NUMBERS))).collect()),
        7 => serde_json::json!({"key": {"name": rng.pick(STRINGS).to_string()}}),
        _ => serde_json::json!({"key": {"connect": [[format!("m_{}", rng.below(4)), *rng.pick(&["output", "input", "$1", "left"])]]}}),
    }
}

fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.3e18 {
        if x >= 0.0 && x <= u64::MAX as f64 {
            return Value::Number(Number::from(x as u64));
        }
        return Value::Number(Number::from(x as i64));
    }
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// One structure-aware edit of a JSON document, `donor` a second document to take
/// values from.
pub fn json(rng: &mut Rng, doc: &mut Value, donor: Option<&Value>) {
    let mut all = Vec::new();
    paths(doc, &mut Vec::new(), &mut all);
    // Most edits change a number (a size, an axis, a kernel, a stride): the structure
    // then stays valid and the edit reaches shape inference and lowering.
    let numbers: Vec<&Vec<Step>> = all.iter().filter(|p| matches!(value_at(doc, p), Some(Value::Number(_)))).collect();
    let (path, choice) = if !numbers.is_empty() && rng.below(3) != 0 { ((*rng.pick(&numbers)).clone(), rng.below(4)) } else { (rng.pick(&all).clone(), rng.below(12)) };
    let Some(v) = at_mut(doc, &path) else { return };
    match (choice, &*v) {
        // Numbers: a boundary value, or a small step away.
        (0..=3, Value::Number(n)) => {
            let x = n.as_f64().unwrap_or(0.0);
            *v = if rng.coin() { number(*rng.pick(NUMBERS)) } else { number(x + [-1.0, 1.0, -2.0, 2.0][rng.below(4) as usize]) };
        }
        // Strings: another meaningful one, a class name, or a near miss.
        (0..=3, Value::String(s)) => {
            let s = s.clone();
            *v = match rng.below(4) {
                0 => Value::String(rng.pick(super::classes()).to_string()),
                1 => Value::String(format!("{s}{}", rng.pick(&["Op", "_0", "x", "$1", "."]))),
                2 if !s.is_empty() => Value::String(s.chars().take(s.chars().count() - 1).collect()),
                _ => Value::String(rng.pick(STRINGS).to_string()),
            };
        }
        (4, Value::Object(m)) if !m.is_empty() => {
            let k = m.keys().nth(rng.below(m.len() as u64) as usize).cloned().unwrap_or_default();
            if let Value::Object(m) = v {
                m.shift_remove(&k);
            }
        }
        (5, Value::Object(_)) => {
            let key = if rng.coin() { rng.pick(STRINGS).to_string() } else { format!("m_{}", rng.below(6)) };
            let x = some_value(rng, donor);
            if let Value::Object(m) = v {
                m.insert(key, x);
            }
        }
        (6, Value::Array(a)) if !a.is_empty() => {
            let i = rng.below(a.len() as u64) as usize;
            let how = rng.below(3);
            let x = some_value(rng, donor);
            if let Value::Array(a) = v {
                match how {
                    0 => {
                        a.remove(i);
                    }
                    1 => {
                        let y = a[i].clone();
                        a.insert(i, y);
                    }
                    _ => a.push(x),
                }
            }
        }
        (7, Value::Array(_)) => {
            let x = number(*rng.pick(NUMBERS));
            if let Value::Array(a) = v {
                a.push(x);
            }
        }
        // Wrapped one level deeper.
        (10, _) => {
            let inner = v.take();
            *v = if rng.coin() { Value::Array(vec![inner]) } else { serde_json::json!({"key": {"name": "x", "value": inner}}) };
        }
        // Keys renamed (a child's id, a connection's key).
        (11, Value::Object(m)) if !m.is_empty() => {
            let k = m.keys().nth(rng.below(m.len() as u64) as usize).cloned().unwrap_or_default();
            let renamed = if rng.coin() { format!("m_{}", rng.below(8)) } else { rng.pick(STRINGS).to_string() };
            if let Value::Object(m) = v {
                if let Some(x) = m.shift_remove(&k) {
                    m.insert(renamed, x);
                }
            }
        }
        // A value of another kind, or one from the donor.
        _ => *v = some_value(rng, donor),
    }
}

/// Edits one of a model's command-line arguments (`--shape NAME=D0,...` or
/// `--set PATH.KEY=VALUE` lines): a size to a boundary, a dimension more or less, a
/// symbol, a new or a dropped name, another value.
pub fn args(rng: &mut Rng, args: &mut Vec<String>) {
    if args.is_empty() || rng.below(8) == 0 {
        let name = rng.pick(&["input", "weight", "bias", "left", "right", "x", "p0", "weight_0", "target"]);
        args.push(format!("--shape {name}={}", rng.below(5)));
        return;
    }
    let i = rng.below(args.len() as u64) as usize;
    if let Some(set) = args[i].strip_prefix("--set ") {
        let (path, _) = set.split_once('=').unwrap_or((set, ""));
        let value = rng.pick(&["0", "-1", "3", "null", "[0,2,1,3]", "[1]", "1e9", "\"x\"", "true"]);
        args[i] = format!("--set {path}={value}");
        return;
    }
    let spec = args[i].trim_start_matches("--shape ").to_string();
    let (name, dims) = spec.split_once('=').map(|(n, d)| (n.to_string(), d.to_string())).unwrap_or_default();
    let mut dims: Vec<String> = dims.split(',').filter(|d| !d.is_empty()).map(str::to_string).collect();
    match rng.below(7) {
        0 if !dims.is_empty() => {
            let j = rng.below(dims.len() as u64) as usize;
            dims[j] = rng.pick(&["0", "1", "2", "3", "5", "7", "1000", "65537", "4294967296", "18446744073709551615", "B", "N"]).to_string();
        }
        1 => {
            let j = rng.below(dims.len() as u64 + 1) as usize;
            dims.insert(j, rng.pick(&["1", "2", "3"]).to_string());
        }
        2 if !dims.is_empty() => {
            dims.remove(rng.below(dims.len() as u64) as usize);
        }
        3 => {
            args.remove(i);
            return;
        }
        4 if !dims.is_empty() => {
            let j = rng.below(dims.len() as u64) as usize;
            if let Ok(d) = dims[j].parse::<u64>() {
                dims[j] = d.saturating_add(1 + rng.below(2)).to_string();
            }
        }
        _ => dims.reverse(),
    }
    args[i] = format!("--shape {name}={}", dims.join(","));
}

/// NumPy dtype descriptors, supported and not.
const DESCRS: &[&str] = &[
    "<f4", "<f8", "<f2", ">f4", ">f8", "|b1", "<i1", "<i2", "<i4", "<i8", ">i8", "|u1", "<u2", "<u4", "<u8", "<c8", "|O", "<U3",
    "|S2", "|V4", "<M8[s]", "<f16", "f4", "<g", "<f3", "<i0",
];

/// A `.npy` file with the given header dictionary text and data.
pub fn npy_bytes(version: u8, header: &str, data: &[u8]) -> Vec<u8> {
    let len_size = if version == 1 { 2 } else { 4 };
    let unpadded = 6 + 2 + len_size + header.len() + 1;
    let pad = (64 - unpadded % 64) % 64;
    let mut text = header.to_string();
    text.extend(std::iter::repeat_n(' ', pad));
    text.push('\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    if version == 1 {
        out.extend((text.len() as u16).to_le_bytes());
    } else {
        out.extend((text.len() as u32).to_le_bytes());
    }
    out.extend(text.as_bytes());
    out.extend(data);
    out
}

/// Splits a `.npy` file into version, header text and data, when it has that form.
fn npy_parts(bytes: &[u8]) -> Option<(u8, String, Vec<u8>)> {
    if bytes.get(..6)? != b"\x93NUMPY" {
        return None;
    }
    let version = *bytes.get(6)?;
    let (len, start): (usize, usize) = if version == 1 {
        (u16::from_le_bytes([*bytes.get(8)?, *bytes.get(9)?]) as usize, 10)
    } else {
        (u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?) as usize, 12)
    };
    let header = std::str::from_utf8(bytes.get(start..start.checked_add(len)?)?).ok()?.trim_end().to_string();
    Some((version, header, bytes[start + len..].to_vec()))
}

/// One format-aware edit of a `.npy` file: half the time a well-formed file of another
/// dtype, order and small shape (random bytes of the right length, so values such as
/// NaNs, subnormals and out-of-range bools reach the decoder), otherwise a header with
/// hostile fields (huge, negative or non-integer dimensions, unsupported dtypes, extra
/// keys), another version, or data of the wrong length.
pub fn npy(rng: &mut Rng, bytes: &mut Vec<u8>) {
    let Some((mut version, _, mut data)) = npy_parts(bytes) else {
        self::bytes(rng, bytes);
        return;
    };
    if rng.coin() {
        // (descriptor, element size)
        let (descr, size) = *rng.pick(&[
            ("<f4", 4), (">f4", 4), ("<f8", 8), (">f8", 8), ("<f2", 2), ("|b1", 1), ("|i1", 1), ("|u1", 1), ("<i2", 2), (">u2", 2),
            ("<i4", 4), ("<u4", 4), ("<i8", 8), (">i8", 8), ("<u8", 8), ("<c8", 8),
        ]);
        let dims: Vec<u64> = (0..rng.below(4)).map(|_| rng.below(5)).collect();
        let n: u64 = dims.iter().product::<u64>() * size;
        let data: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
        };
        let fortran = if rng.coin() { "True" } else { "False" };
        *bytes = npy_bytes(*rng.pick(&[1, 1, 2, 3]), &format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}"), &data);
        return;
    }
    let descr = rng.pick(DESCRS);
    let fortran = *rng.pick(&["False", "True", "0", "None", "'yes'"]);
    let rank = rng.below(5);
    let dims: Vec<String> = (0..rank)
        .map(|_| rng.pick(&["0", "1", "2", "3", "4", "5", "7", "-1", "4294967296", "18446744073709551615", "2**70", "1.5", "'a'", "(2,)", "3000000000"]).to_string())
        .collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let header = match rng.below(6) {
        0 => format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"),
        1 => format!("{{'descr': '<f4', 'fortran_order': {fortran}, 'shape': {shape}, }}"),
        2 => format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, 'extra': 1}}"),
        3 => format!("{{'descr': [('a', '<f4'), ('b', '{descr}')], 'fortran_order': False, 'shape': {shape}, }}"),
        4 => format!("{{'fortran_order': False, 'shape': {shape}, }}"),
        _ => format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}}}"),
    };
    match rng.below(4) {
        0 => version = *rng.pick(&[1, 2, 3, 0, 4, 255]),
        1 => data.truncate(rng.below(data.len() as u64 + 1) as usize),
        2 => data.extend(std::iter::repeat_n(0x3f, 1 + rng.below(16) as usize)),
        _ => {}
    }
    *bytes = npy_bytes(version, &header, &data);
}

/// One format-aware edit of a `.safetensors` file: its JSON header (dtypes, shapes,
/// offsets, metadata) or its length field.
pub fn safetensors(rng: &mut Rng, bytes: &mut Vec<u8>) {
    let Some(len) = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize) else {
        self::bytes(rng, bytes);
        return;
    };
    let header: Option<Value> = bytes.get(8..8usize.saturating_add(len)).and_then(|h| serde_json::from_slice(h).ok());
    let Some(mut header) = header else {
        self::bytes(rng, bytes);
        return;
    };
    let data = bytes[8 + len..].to_vec();
    let names: Vec<String> = header.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
    let name = if names.is_empty() { "t".to_string() } else { rng.pick(&names).clone() };
    // Indexing a JSON value that is not an object panics: set fields only on objects.
    let set = |header: &mut Value, key: &str, value: Value| {
        if let Some(Value::Object(t)) = header.get_mut(&name) {
            t.insert(key.to_string(), value);
        }
    };
    match rng.below(6) {
        0 => set(&mut header, "dtype", Value::String(rng.pick(&["F32", "F16", "BF16", "F64", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "BOOL", "C64", "F8_E4M3", "X"]).to_string())),
        1 => {
            let shape = (0..rng.below(4)).map(|_| number(*rng.pick(&[0.0, 1.0, 2.0, 3.0, 4294967296.0, 1.8446744073709552e19, -1.0]))).collect();
            set(&mut header, "shape", Value::Array(shape));
        }
        2 => set(&mut header, "data_offsets", serde_json::json!([rng.below(64), rng.below(64)])),
        3 => {
            if let Value::Object(h) = &mut header {
                h.insert("__metadata__".into(), serde_json::json!({"format": "pt", "x": rng.below(3)}));
            }
        }
        4 => json(rng, &mut header, None),
        _ => {
            let mut h = serde_json::to_vec(&header).expect("a JSON value prints");
            h.extend(std::iter::repeat_n(b' ', rng.below(8) as usize));
            let mut out = ((h.len() as u64).wrapping_add(*rng.pick(&[0u64, 1, u64::MAX, 1 << 40]))).to_le_bytes().to_vec();
            out.extend(h);
            out.extend(data);
            *bytes = out;
            return;
        }
    }
    let h = serde_json::to_vec(&header).expect("a JSON value prints");
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    *bytes = out;
}

/// The entries of a zip archive, by name, when it reads.
fn zip_entries(bytes: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    use std::io::Read;
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).ok()?;
    let mut out = Vec::new();
    for i in 0..archive.len() {
        let mut e = archive.by_index(i).ok()?;
        let mut data = Vec::new();
        e.read_to_end(&mut data).ok()?;
        out.push((e.name().to_string(), data));
    }
    Some(out)
}

/// A zip archive of `entries`, stored or deflated.
pub fn zip_bytes(entries: &[(String, Vec<u8>)], deflate: bool) -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let method = if deflate { zip::CompressionMethod::Deflated } else { zip::CompressionMethod::Stored };
    let opts = zip::write::SimpleFileOptions::default().compression_method(method);
    for (name, data) in entries {
        if w.start_file(name.as_str(), opts).is_err() {
            continue;
        }
        let _ = w.write_all(data);
    }
    w.finish().map(|c| c.into_inner()).unwrap_or_default()
}

/// One format-aware edit of a `.npz` archive: an entry's `.npy` edited, entries
/// renamed, duplicated or dropped, or the archive's bytes themselves.
pub fn npz(rng: &mut Rng, bytes: &mut Vec<u8>) {
    let Some(mut entries) = zip_entries(bytes) else {
        self::bytes(rng, bytes);
        return;
    };
    if entries.is_empty() || rng.below(6) == 0 {
        self::bytes(rng, bytes);
        return;
    }
    let i = rng.below(entries.len() as u64) as usize;
    match rng.below(6) {
        0..=2 => npy(rng, &mut entries[i].1),
        3 => self::bytes(rng, &mut entries[i].1),
        4 => {
            entries[i].0 = rng.pick(&["a.npy", "input.npy", "x", "dir/", "param/w.npy", "a.npy", ".npy", "../up.npy"]).to_string();
        }
        _ => {
            let e = entries[i].clone();
            entries.push(e);
        }
    }
    *bytes = zip_bytes(&entries, rng.coin());
}
