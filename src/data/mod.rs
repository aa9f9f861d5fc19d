//! Data files: named arrays read from and written to `.npz`, `.npy` and `.safetensors`
//! files, the format chosen by the file's extension.
//!
//! The formats are handled by their crates (`npyz`, `zip`, `safetensors`); this module
//! dispatches on the file extension, turns every failure into a user error that names
//! the file, and keeps arrays in a deterministic order: file order for `.npz`, sorted by
//! name for `.safetensors`. Every integer type of up to 64 bits, signed or unsigned,
//! is read and written as itself; bf16 has no NumPy dtype and is written as f32.
//! Nothing a file contains can cause a panic: sizes from headers are checked against the
//! bytes present.
//!
//! Files are read as [`RawTensor`]s, each in the file's own dtype: `.safetensors`, `.npy`
//! and the stored (uncompressed) members of `.npz` are mapped into memory and their
//! arrays are views of the mapping, so a checkpoint on its way into a weights blob is
//! never copied whole, let alone widened. Compressed members, big-endian or Fortran-order
//! arrays, and bools (checked to be 0 or 1) are read into memory in their own dtype. [`read_arrays`] gives the values as [`Tensor`]s, for the interpreter.

mod npy;
mod safetensors;

pub use npy::npy_descr;
pub use safetensors::dtype_name as safetensors_dtype_name;

use std::fs::File;
use std::io::{self, Cursor, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;

use crate::error::{Error, Result};
use crate::ir::Dtype;
use crate::tensor::{Backing, RawTensor, Tensor};

/// An ordered collection of named arrays as read from a file (order = file order for
/// npz; sorted by name for safetensors): [`Tensor`]s, or [`RawTensor`]s as the file
/// holds them.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayFile<A = Tensor> {
    pub path: PathBuf,
    pub arrays: IndexMap<String, A>,
}

/// What a command needs to know of an array before it reads its values.
pub trait Array {
    fn dtype(&self) -> Dtype;
    fn shape(&self) -> &[u64];
}

impl Array for Tensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[u64] {
        &self.shape
    }
}

impl Array for RawTensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[u64] {
        &self.shape
    }
}

/// The file formats, chosen by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Npz,
    Npy,
    Safetensors,
    /// ONNX's serialized `TensorProto` (`input_0.pb` of its test data sets): one array,
    /// named by the tensor; read only.
    OnnxTensor,
}

impl Format {
    /// The format of `path`'s extension (any case), if it names one.
    fn by_extension(path: &Path) -> Option<Format> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
        [("npz", Format::Npz), ("npy", Format::Npy), ("safetensors", Format::Safetensors), ("pb", Format::OnnxTensor)]
            .into_iter()
            .find(|(name, _)| ext.eq_ignore_ascii_case(name))
            .map(|(_, format)| format)
    }

    fn of(path: &Path) -> Result<Format> {
        Format::by_extension(path).ok_or_else(|| {
            crate::user_error!(
                "cannot read {}: unknown data file extension (expected .npz, .npy, .safetensors or .pb)",
                path.display()
            )
        })
    }
}

use crate::error::io_message;

fn read_error(path: &Path, e: &io::Error) -> Error {
    crate::user_error!("cannot read {}: {}", path.display(), io_message(e))
}

fn write_error(path: &Path, e: &io::Error) -> Error {
    crate::user_error!("cannot write {}: {}", path.display(), io_message(e))
}

/// Reads every array of a `.npz`, `.npy` (one array, named by the file stem) or
/// `.safetensors` file, widened to f64 for the interpreter.
pub fn read_arrays(path: &Path) -> Result<ArrayFile> {
    let raw = read_raw_arrays(path)?;
    Ok(ArrayFile { path: raw.path, arrays: raw.arrays.into_iter().map(|(name, t)| (name, t.to_tensor())).collect() })
}

/// Reads every array of a file as [`read_arrays`] does, each in the file's dtype and,
/// where the format allows, left in the file (mapped).
pub fn read_raw_arrays(path: &Path) -> Result<ArrayFile<RawTensor>> {
    let format = Format::of(path)?;
    let file = map_file(path)?;
    let arrays = match format {
        Format::Npz => read_npz(&file, path)?,
        Format::Npy => {
            let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let t = npy::decode(&file, 0..file.bytes().len(), path, &name)?;
            IndexMap::from([(name, t)])
        }
        Format::Safetensors => safetensors::decode(&file, path)?,
        Format::OnnxTensor => IndexMap::from([crate::frontend::onnx::read_tensor_file(path)?]),
    };
    Ok(ArrayFile { path: path.to_path_buf(), arrays })
}

/// A file mapped read-only into memory: its pages are read when they are touched and
/// can be let go again ([`Backing::release`]).
struct Mapped(memmap2::Mmap);

impl Backing for Mapped {
    fn bytes(&self) -> &[u8] {
        &self.0
    }

    fn release(&self, range: std::ops::Range<usize>) {
        // SAFETY: the mapping is read-only and backed by the file, so dropping its pages
        // loses nothing: a later read maps them in from the file again.
        #[cfg(unix)]
        let _ = unsafe { self.0.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, range.start, range.len()) };
        #[cfg(not(unix))]
        let _ = range;
    }
}

/// The bytes of the file at `path`, mapped (an empty file is read: it cannot be mapped).
pub(crate) fn map_file(path: &Path) -> Result<Arc<dyn Backing>> {
    let file = File::open(path).map_err(|e| read_error(path, &e))?;
    let len = file.metadata().map_err(|e| read_error(path, &e))?.len();
    if len == 0 {
        return Ok(Arc::new(Vec::new()));
    }
    // SAFETY: a mapped file that another process truncates while mithrilc reads it
    // faults; mithrilc's input files are not changed while it runs (as for any reader).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| read_error(path, &e))?;
    Ok(Arc::new(Mapped(map)))
}

/// Most bytes reserved up front for one zip entry; larger entries grow as data arrives,
/// so a hostile size field cannot force a huge allocation.
const MAX_PREALLOC: u64 = 64 << 20;

/// The arrays of the `.npz` archive `file` read from `path`. A stored member is a view
/// of the file once its checksum is checked; a compressed one is inflated into memory.
fn read_npz(file: &Arc<dyn Backing>, path: &Path) -> Result<IndexMap<String, RawTensor>> {
    let mut archive = zip::ZipArchive::new(Cursor::new(file.bytes())).map_err(|e| {
        crate::user_error!("cannot read {}: not a valid .npz (zip) archive: {e}", path.display())
    })?;
    let mut arrays = IndexMap::with_capacity(archive.len());
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| crate::user_error!("cannot read {}: zip entry {i}: {e}", path.display()))?;
        if entry.is_dir() {
            continue;
        }
        let entry_name = entry.name().to_string();
        let Some(name) = entry_name.strip_suffix(".npy") else {
            return Err(crate::user_error!(
                "cannot read {}: entry '{entry_name}' is not a .npy array",
                path.display()
            ));
        };
        let size = entry.size();
        let entry_error = |e: io::Error| crate::user_error!("cannot read {}: entry '{entry_name}': {}", path.display(), io_message(&e));
        let size_error = |got: u64| {
            crate::user_error!("cannot read {}: entry '{entry_name}' holds {got} bytes but its header says {size}", path.display())
        };
        let t = if entry.compression() == zip::CompressionMethod::Stored {
            let start = entry.data_start() as usize;
            let range = start..start.saturating_add(size as usize);
            // Reading to the end lets the zip crate verify the entry's checksum.
            let read = io::copy(&mut entry.by_ref().take(size.saturating_add(1)), &mut io::sink()).map_err(entry_error)?;
            file.release(range.clone());
            if read != size || range.end > file.bytes().len() {
                return Err(size_error(read));
            }
            npy::decode(file, range, path, name)?
        } else {
            let mut bytes = Vec::with_capacity(size.min(MAX_PREALLOC) as usize);
            entry.by_ref().take(size.saturating_add(1)).read_to_end(&mut bytes).map_err(entry_error)?;
            if bytes.len() as u64 != size {
                return Err(size_error(bytes.len() as u64));
            }
            let len = bytes.len();
            npy::decode(&(Arc::new(bytes) as Arc<dyn Backing>), 0..len, path, name)?
        };
        if arrays.insert(name.to_string(), t).is_some() {
            return Err(crate::user_error!("cannot read {}: array '{name}' appears twice", path.display()));
        }
    }
    Ok(arrays)
}

/// A tensor whose element count does not match its shape is a bug in mithrilc, found
/// before anything is written.
fn check_tensor(path: &Path, name: &str, t: &Tensor) -> Result<()> {
    let numel = t.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    if numel == Some(t.data.len() as u64) {
        return Ok(());
    }
    Err(crate::internal_error!(
        "writing {}: array '{name}' of shape {:?} holds {} elements",
        path.display(),
        t.shape,
        t.data.len()
    ))
}

/// Writes `arrays` to a `.npz` archive, each as a deflated `NAME.npy` entry (names may
/// contain `/`, as NumPy allows). Dtypes are preserved (f32 `<f4`, f64 `<f8`, f16 `<f2`,
/// i32 `<i4`, u8 `|u1`, ..., bool `|b1`: [`npy_descr`]), except bf16: NumPy has no bf16 dtype, so bf16
/// arrays are written as f32 (`<f4`), which holds every bf16 value exactly.
/// Each array is the member `npz_key(name).npy`: `numpy.load` gives it back under
/// [`npz_key`]`(name)`, which is `name` itself for every name that is safe to unzip.
pub fn write_npz(path: &Path, arrays: &[(String, Tensor)]) -> Result<()> {
    let mut seen = std::collections::HashMap::with_capacity(arrays.len());
    for (name, _) in arrays {
        if let Some(first) = seen.insert(npz_key(name), name.as_str()) {
            let how = if first == name { "is used twice".to_string() } else { format!("and '{first}' are both written as '{}'", npz_key(name)) };
            return Err(crate::user_error!("cannot write {}: array name '{name}' {how}", path.display()));
        }
    }
    for (name, t) in arrays {
        check_tensor(path, name, t)?;
    }
    crate::outdir::write_file_atomically(path, |out| write_npz_to(out, path, arrays))
}

fn write_npz_to(out: &mut (impl Write + io::Seek), path: &Path, arrays: &[(String, Tensor)]) -> Result<()> {
    let mut zip = zip::ZipWriter::new(out);
    let zip_error = |e: zip::result::ZipError| match e {
        zip::result::ZipError::Io(e) => write_error(path, &e),
        other => crate::user_error!("cannot write {}: {other}", path.display()),
    };
    for (name, t) in arrays {
        // Zip64 is needed for entries of 4 GiB or more; the header adds under 64 KiB.
        let large = (t.data.len() as u64).saturating_mul(8) >= u64::from(u32::MAX) - (1 << 16);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(zip::DateTime::default())
            .unix_permissions(0o644)
            .large_file(large);
        zip.start_file(format!("{}.npy", npz_key(name)), options).map_err(zip_error)?;
        npy::encode(&mut zip, t).map_err(|e| write_error(path, &e))?;
    }
    zip.finish().map_err(zip_error)?;
    Ok(())
}

/// The key an array named `name` is written under in an npz: `name` with every part
/// that a tool unzipping the file could take for a path outside its directory made
/// plain. Parts between `/` are kept (`grad/w` stays `grad/w`, a folder in the zip as
/// NumPy writes it), but an empty part, `.` or `..` has its dots made `_`, and `\`,
/// `:` and control characters become `_`, so no member is absolute, climbs out, or
/// names a drive.
pub fn npz_key(name: &str) -> String {
    let parts: Vec<String> = name
        .split('/')
        .map(|part| {
            let part: String = part.chars().map(|c| if c == '\\' || c == ':' || c.is_control() { '_' } else { c }).collect();
            match part.as_str() {
                "" => "_".to_string(),
                "." | ".." => part.replace('.', "_"),
                _ => part,
            }
        })
        .collect();
    parts.join("/")
}

/// An array read from a file, taken as the values of type `dtype` that NumPy has no
/// type for, written as [`npy_descr`] writes them: bf16 from f32 (rounded), a narrow
/// float from its codes (u8), a 4- or 2-bit integer from int8 or uint8 values that it
/// holds; `None` when `t` is not such a file's array for `dtype`.
pub fn from_stand_in(t: &Tensor, dtype: Dtype) -> Option<Tensor> {
    let values = match (t.dtype, dtype) {
        (Dtype::F32, Dtype::Bf16) => t.data.clone(),
        (Dtype::U8, d) if d.is_narrow_float() => t.data.iter().map(|&b| crate::narrow::decode(d, b as u8)).collect(),
        (Dtype::I8 | Dtype::U8, d) if d.is_int() && d.bits() < 8 => {
            let (lo, hi) = d.int_range()?;
            if t.data.iter().any(|x| !(lo..=hi).contains(x)) {
                return None;
            }
            t.data.clone()
        }
        _ => return None,
    };
    Some(Tensor::new(dtype, t.shape.clone(), values))
}

/// Writes one tensor as a `.npy` file (bf16 as f32, as in [`write_npz`]).
pub fn write_npy(path: &Path, t: &Tensor) -> Result<()> {
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    check_tensor(path, &name, t)?;
    crate::outdir::write_file_atomically(path, |out| npy::encode(out, t).map_err(|e| write_error(path, &e)))
}

/// The bytes of a `.safetensors` file holding `arrays`, each in its own dtype, laid out
/// in name order with a sorted header: the same arrays always give the same bytes.
pub fn safetensors_bytes(arrays: &[(String, Tensor)]) -> Result<Vec<u8>> {
    let raw: Vec<(String, RawTensor)> = arrays.iter().map(|(name, t)| (name.clone(), RawTensor::from_tensor(t))).collect();
    safetensors::encode(&raw)
}

/// [`safetensors_bytes`] of arrays in their own dtype, copied as they are.
pub fn raw_safetensors_bytes(arrays: &[(String, RawTensor)]) -> Result<Vec<u8>> {
    safetensors::encode(arrays)
}

/// Writes `arrays` to a `.safetensors` file ([`safetensors_bytes`]), each under its
/// name as it is (`grad/w` stays `grad/w`: safetensors keys are plain strings).
pub fn write_safetensors(path: &Path, arrays: &[(String, Tensor)]) -> Result<()> {
    for (name, t) in arrays {
        check_tensor(path, name, t)?;
    }
    let bytes = safetensors_bytes(arrays).map_err(|e| crate::user_error!("cannot write {}: {}", path.display(), e.message))?;
    crate::outdir::write_file_atomically(path, |out| out.write_all(&bytes).map_err(|e| write_error(path, &e)))
}

/// Refuses, before anything is computed, an output file that [`write_arrays`] would
/// refuse for arrays named `names`: an extension other than `.npz`, `.npy` and
/// `.safetensors`, a `.npy` (which holds one array) for any number of arrays but one, or
/// a `.safetensors` for an array named `__metadata__` (the format's own key).
/// Both are usage errors: the command line asks for what cannot be written.
pub fn check_output(path: &Path, names: &[String]) -> Result<()> {
    match Format::by_extension(path) {
        None => Err(Error::usage(format!(
            "cannot write {}: unknown data file extension (accepted: .npz, .npy, .safetensors)",
            path.display()
        ))),
        Some(Format::Npy) if names.len() != 1 => Err(Error::usage(format!(
            "cannot write {}: a .npy file holds one array, and there are {} ({})",
            path.display(),
            names.len(),
            names.join(", ")
        ))
        .note("write them to a .npz or .safetensors file, which hold each array under its name")),
        Some(Format::OnnxTensor) => Err(Error::usage(format!("cannot write {}: mithrilc reads .pb tensors but writes .npz, .npy and .safetensors", path.display()))),
        Some(Format::Safetensors) if names.iter().any(|n| n == safetensors::RESERVED) => {
            Err(Error { kind: crate::error::ErrorKind::Usage, ..safetensors::reserved_error(&path.display().to_string()) })
        }
        Some(_) => Ok(()),
    }
}

/// Writes `arrays` in the format of `path`'s extension: [`write_npz`], [`write_npy`]
/// (exactly one array) or [`write_safetensors`]; anything else is refused as
/// [`check_output`] says.
pub fn write_arrays(path: &Path, arrays: &[(String, Tensor)]) -> Result<()> {
    let names: Vec<String> = arrays.iter().map(|(name, _)| name.clone()).collect();
    check_output(path, &names)?;
    match (Format::of(path)?, arrays) {
        (Format::Npz, _) => write_npz(path, arrays),
        (Format::Npy, [(_, t)]) => write_npy(path, t),
        (Format::Safetensors, _) => write_safetensors(path, arrays),
        (Format::Npy, _) => Err(crate::internal_error!("check_output let {} arrays into a .npy", arrays.len())),
        (Format::OnnxTensor, _) => check_output(path, &[]),
    }
}

#[cfg(test)]
mod tests;
