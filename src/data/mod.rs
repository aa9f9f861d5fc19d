//! Data files: named arrays read from and written to `.npz`, `.npy` and `.safetensors`
//! files, the format chosen by the file's extension.
//!
//! The formats are handled by their crates (`npyz`, `zip`, `safetensors`); this module
//! dispatches on the file extension, turns every failure into a user error that names
//! the file, and keeps arrays in a deterministic order: file order for `.npz`, sorted by
//! name for `.safetensors`. Element types mithrilc lacks are widened on read (i8, i16,
//! u8, u16 to i32; u32 to i64); bf16 has no NumPy dtype and is written as f32.
//! Nothing a file contains can cause a panic: sizes from headers are checked against the
//! bytes present.

mod npy;
mod safetensors;

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// An ordered collection of named arrays as read from a file (order = file order for
/// npz; sorted by name for safetensors).
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayFile {
    pub path: PathBuf,
    pub arrays: IndexMap<String, Tensor>,
}

/// The file formats, chosen by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Npz,
    Npy,
    Safetensors,
}

impl Format {
    /// The format of `path`'s extension (any case), if it names one.
    fn by_extension(path: &Path) -> Option<Format> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
        [("npz", Format::Npz), ("npy", Format::Npy), ("safetensors", Format::Safetensors)]
            .into_iter()
            .find(|(name, _)| ext.eq_ignore_ascii_case(name))
            .map(|(_, format)| format)
    }

    fn of(path: &Path) -> Result<Format> {
        Format::by_extension(path).ok_or_else(|| {
            crate::user_error!(
                "cannot read {}: unknown data file extension (expected .npz, .npy or .safetensors)",
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
/// `.safetensors` file.
pub fn read_arrays(path: &Path) -> Result<ArrayFile> {
    let arrays = match Format::of(path)? {
        Format::Npz => read_npz(path)?,
        Format::Npy => {
            let bytes = std::fs::read(path).map_err(|e| read_error(path, &e))?;
            let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let t = npy::decode(&bytes, path, &name)?;
            IndexMap::from([(name, t)])
        }
        Format::Safetensors => {
            let bytes = std::fs::read(path).map_err(|e| read_error(path, &e))?;
            safetensors::decode(&bytes, path)?
        }
    };
    Ok(ArrayFile { path: path.to_path_buf(), arrays })
}

/// Most bytes reserved up front for one zip entry; larger entries grow as data arrives,
/// so a hostile size field cannot force a huge allocation.
const MAX_PREALLOC: u64 = 64 << 20;

fn read_npz(path: &Path) -> Result<IndexMap<String, Tensor>> {
    let file = File::open(path).map_err(|e| read_error(path, &e))?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file)).map_err(|e| {
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
        let mut bytes = Vec::with_capacity(size.min(MAX_PREALLOC) as usize);
        // Reading to the end lets the zip crate verify the entry's checksum.
        entry.by_ref().take(size.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| {
            crate::user_error!("cannot read {}: entry '{entry_name}': {}", path.display(), io_message(&e))
        })?;
        if bytes.len() as u64 != size {
            return Err(crate::user_error!(
                "cannot read {}: entry '{entry_name}' holds {} bytes but its header says {size}",
                path.display(),
                bytes.len()
            ));
        }
        let t = npy::decode(&bytes, path, name)?;
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
/// i32 `<i4`, i64 `<i8`, bool `|b1`), except bf16: NumPy has no bf16 dtype, so bf16
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
    let file = File::create(path).map_err(|e| write_error(path, &e))?;
    let mut zip = zip::ZipWriter::new(BufWriter::new(file));
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
    let mut out = zip.finish().map_err(zip_error)?;
    out.flush().map_err(|e| write_error(path, &e))
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

/// Writes one tensor as a `.npy` file (bf16 as f32, as in [`write_npz`]).
pub fn write_npy(path: &Path, t: &Tensor) -> Result<()> {
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    check_tensor(path, &name, t)?;
    let file = File::create(path).map_err(|e| write_error(path, &e))?;
    let mut out = BufWriter::new(file);
    npy::encode(&mut out, t).map_err(|e| write_error(path, &e))?;
    out.flush().map_err(|e| write_error(path, &e))
}

/// The bytes of a `.safetensors` file holding `arrays`, each in its own dtype, laid out
/// in name order with a sorted header: the same arrays always give the same bytes.
pub fn safetensors_bytes(arrays: &[(String, Tensor)]) -> Result<Vec<u8>> {
    safetensors::encode(arrays)
}

/// Writes `arrays` to a `.safetensors` file ([`safetensors_bytes`]), each under its
/// name as it is (`grad/w` stays `grad/w`: safetensors keys are plain strings).
pub fn write_safetensors(path: &Path, arrays: &[(String, Tensor)]) -> Result<()> {
    for (name, t) in arrays {
        check_tensor(path, name, t)?;
    }
    let bytes = safetensors_bytes(arrays).map_err(|e| crate::user_error!("cannot write {}: {}", path.display(), e.message))?;
    std::fs::write(path, bytes).map_err(|e| write_error(path, &e))
}

/// Refuses, before anything is computed, an output file that [`write_arrays`] would
/// refuse for arrays named `names`: an extension other than `.npz`, `.npy` and
/// `.safetensors`, or a `.npy` (which holds one array) for any number of arrays but one.
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
    }
}

#[cfg(test)]
mod tests;
