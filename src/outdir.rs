//! Output and scratch directories: mithrilc never loses a user's files.
//!
//! An output directory is written whole: into a temporary sibling, then renamed into
//! place, so a failure leaves nothing half-written. Because the rename replaces the
//! whole directory, mithrilc only writes where that loses nothing: a path that does not
//! exist, an empty directory, or a directory it wrote before. It knows its own by a
//! marker file ([`MARKER`]) listing every file it wrote with a hash of its contents:
//! a directory holding any file that is not listed is refused, and one whose listed
//! files were changed since is replaced only with `--force`. It is checked before the
//! build and again once the previous output has been moved aside, just before the new
//! one takes its place, so a file the user wrote into it meanwhile is never lost: the
//! directory goes back as it was and the command fails. The current directory, its
//! parents and any directory holding the command's own input files are refused too.
//!
//! Every temporary directory is registered while it lives, and removed on failure (its
//! guard is dropped) and on SIGINT, SIGTERM or SIGHUP ([`remove_scratch_on_signals`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{io_message, Error, Result};
use crate::hash::fnv1a_read;

/// The marker file in every output directory mithrilc writes: one line per file it
/// wrote, `HASH PATH` (FNV-1a 64 of the contents in hex, the path relative to the
/// directory), sorted by path.
pub const MARKER: &str = ".mithrilc-output";

/// The exit code after an interrupting signal (128 + SIGINT, as shells report it).
pub const INTERRUPTED_EXIT: i32 = 130;

/// Temporary directories and files alive now, removed if a signal ends the process.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Installs the handler that removes every live temporary directory when SIGINT,
/// SIGTERM or SIGHUP arrives, then exits with [`INTERRUPTED_EXIT`]. Called once by the
/// binary; a library user keeps its own signal handling.
pub fn remove_scratch_on_signals() {
    let _ = ctrlc::set_handler(|| {
        let dirs = match LIVE.lock() {
            Ok(dirs) => dirs.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        for path in dirs {
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        }
        eprintln!("error: interrupted; temporary files removed");
        std::process::exit(INTERRUPTED_EXIT);
    });
}

/// A temporary directory that is removed when dropped, or by the signal handler.
pub struct Scratch {
    dir: Option<tempfile::TempDir>,
}

impl Scratch {
    /// A new directory named `.mithrilc-*` inside `parent`.
    pub fn new_in(parent: &Path) -> Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix(".mithrilc-")
            .tempdir_in(parent)
            .map_err(|e| Error::user(format!("cannot create a directory in {}: {}", parent.display(), io_message(&e))))?;
        Ok(Scratch::register(dir))
    }

    /// A new directory in the system's temporary directory.
    pub fn new() -> Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix("mithrilc-")
            .tempdir()
            .map_err(|e| Error::user(format!("cannot create a scratch directory: {}", io_message(&e))))?;
        Ok(Scratch::register(dir))
    }

    fn register(dir: tempfile::TempDir) -> Scratch {
        lock_live().push(dir.path().to_path_buf());
        Scratch { dir: Some(dir) }
    }

    pub fn path(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), |d| d.path())
    }

    /// Keeps the directory (it holds the user's files after a failure), unregistered.
    fn keep(mut self) -> PathBuf {
        let dir = self.dir.take().map_or_else(PathBuf::new, |d| d.keep());
        lock_live().retain(|p| *p != dir);
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            lock_live().retain(|p| p != dir.path());
            // TempDir's own drop removes it.
        }
    }
}

fn lock_live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Writes the file `path` whole: `write` fills a temporary file beside it (registered
/// like a scratch directory, so a signal removes it too), which replaces `path` only
/// once complete. A failure leaves `path` as it was.
pub fn write_file_atomically(path: &Path, write: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> Result<()>) -> Result<()> {
    let cannot = |e: &std::io::Error| Error::user(format!("cannot write {}: {}", path.display(), io_message(e)));
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".mithrilc-");
    // A file the user asked for, made as any other: 0666 less the umask, not a
    // temporary file's 0600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let temp = builder.tempfile_in(parent).map_err(|e| cannot(&e))?;
    lock_live().push(temp.path().to_path_buf());
    let unregister = |p: &Path| lock_live().retain(|live| live != p);
    let written = {
        let mut out = std::io::BufWriter::new(temp.as_file());
        write(&mut out).and_then(|()| std::io::Write::flush(&mut out).map_err(|e| cannot(&e)))
    };
    let temp_path = temp.path().to_path_buf();
    let result = written.and_then(|()| temp.persist(path).map(drop).map_err(|e| cannot(&e.error)));
    unregister(&temp_path);
    result
}

/// Refuses an output file that is one of the command's `inputs`: the same file
/// (device and inode, so another spelling, a link or a hard link of it too), which
/// writing the outputs would destroy.
pub fn check_not_input(output: &Path, inputs: &[&Path], flag: &str) -> Result<()> {
    if let Some(input) = inputs.iter().find(|input| same_file(output, input)) {
        return Err(Error::user(format!("{flag} {}: is {}, an input of this command; writing it would destroy it", output.display(), input.display()))
            .note("name another file for the output"));
    }
    Ok(())
}

/// Whether `a` and `b` both exist and are the same file.
#[cfg(unix)]
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
}

/// What may not be replaced by an output directory.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// Files the command reads (the model, parameters, data): a directory holding one
    /// of them is never an output directory.
    pub inputs: Vec<PathBuf>,
    /// Replace a previous output of mithrilc even where its files were changed since.
    pub force: bool,
}

/// Writes `files` into `dir` atomically, then runs `prepare` (e.g. the build) inside
/// the temporary directory before the rename, so a failed build leaves `dir` as it was.
/// Refuses a `dir` whose replacement could lose anything that mithrilc did not write
/// (see the module doc).
pub fn write_atomically(dir: &Path, files: &[(String, Vec<u8>)], guard: &Guard, prepare: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    check_replaceable(dir, guard)?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| Error::user(format!("cannot create {}: {}", parent.display(), io_message(&e))))?;
    let staged = Scratch::new_in(&parent)?;
    for (name, bytes) in files {
        let path = staged.path().join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::user(format!("cannot write {}: {}", path.display(), io_message(&e))))?;
    }
    prepare(staged.path())?;
    let listing = hash_files(staged.path())?;
    let marker = listing.iter().map(|(path, hash)| format!("{hash:016x} {path}\n")).collect::<String>();
    std::fs::write(staged.path().join(MARKER), marker).map_err(|e| Error::user(format!("cannot write {}: {}", dir.display(), io_message(&e))))?;
    let cannot = |e: std::io::Error| Error::user(format!("cannot write {}: {}", dir.display(), io_message(&e)));
    if dir.exists() {
        // The previous output moves aside (a scratch directory of its own, so a signal
        // removes it too) and is dropped. It is checked again once aside, where nothing
        // can be added to it any more: a file written into it while the build ran is the
        // user's, so the directory goes back and nothing is replaced.
        let old = Scratch::new_in(&parent)?;
        let aside = old.path().join("old");
        std::fs::rename(dir, &aside).map_err(|e| Error::user(format!("cannot replace {}: {}", dir.display(), io_message(&e))))?;
        if let Err(e) = check_contents(&aside, dir, guard) {
            if let Err(back) = std::fs::rename(&aside, dir) {
                let kept = old.keep();
                return Err(Error::user(format!(
                    "-o {}: changed while mithrilc built, and could not be put back ({}); it is now {}",
                    dir.display(),
                    io_message(&back),
                    kept.join("old").display()
                )));
            }
            return Err(e.note("it changed while mithrilc built; nothing was replaced"));
        }
        if let Err(e) = std::fs::rename(staged.path(), dir) {
            let _ = std::fs::rename(&aside, dir); // put the previous output back
            return Err(cannot(e));
        }
    } else {
        std::fs::rename(staged.path(), dir).map_err(cannot)?;
    }
    Ok(())
}

/// Whether replacing `dir` as a whole loses nothing mithrilc did not write.
pub fn check_replaceable(dir: &Path, guard: &Guard) -> Result<()> {
    let refuse = |why: String| Error::user(format!("-o {}: {why}", dir.display()));
    let named = dir.file_name().is_some() && !dir.ends_with(".");
    let absolute = absolute(dir).map_err(|e| refuse(format!("cannot resolve the path: {}", io_message(&e))))?;
    let cwd = std::env::current_dir().ok().and_then(|c| c.canonicalize().ok());
    if !named || cwd.as_ref().is_some_and(|cwd| cwd.starts_with(&absolute)) {
        return Err(refuse("the current directory and its parents cannot be an output directory (it is replaced as a whole)".into())
            .note("name a new directory, e.g. -o out"));
    }
    for input in &guard.inputs {
        if let Ok(file) = input.canonicalize() {
            if file == absolute {
                return Err(refuse("is an input of this command".into()).note("name a new directory, e.g. -o out"));
            }
            if file.starts_with(&absolute) {
                return Err(refuse(format!("holds {}, an input of this command; the output directory is replaced as a whole", input.display()))
                    .note("name a new directory, e.g. -o out"));
            }
        }
    }
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(refuse(io_message(&e))),
    };
    if meta.file_type().is_symlink() {
        return Err(refuse("is a symbolic link; name the directory itself".into()));
    }
    if !meta.is_dir() {
        return Err(refuse("is a file, not a directory; mithrilc writes a directory of files there".into()));
    }
    check_contents(dir, dir, guard)
}

/// Whether the directory at `path` (the output directory `dir`, or where it was moved)
/// holds only files mithrilc wrote, unchanged unless `guard.force`.
fn check_contents(path: &Path, dir: &Path, guard: &Guard) -> Result<()> {
    let refuse = |why: String| Error::user(format!("-o {}: {why}", dir.display()));
    let present = hash_files(path).map_err(|e| e.context(format!("-o {}", dir.display())))?;
    if present.is_empty() {
        return Ok(());
    }
    let marker = path.join(MARKER);
    let Ok(text) = std::fs::read_to_string(&marker) else {
        return Err(refuse(format!("is not empty and was not written by mithrilc (it has no {MARKER}); it would be replaced as a whole"))
            .note("give a new or empty directory, or remove this one first"));
    };
    let written: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once(' ')).map(|(hash, path)| (path, hash)).collect();
    let foreign: Vec<&str> = present.keys().map(String::as_str).filter(|p| *p != MARKER && !written.contains_key(p)).collect();
    if !foreign.is_empty() {
        return Err(refuse(format!("holds {} file(s) mithrilc did not write: {}", foreign.len(), sample(&foreign)))
            .note("move them elsewhere, or give another directory"));
    }
    let changed: Vec<&str> = present
        .iter()
        .filter(|(p, hash)| *p != MARKER && written.get(p.as_str()).is_some_and(|w| *w != format!("{hash:016x}")))
        .map(|(p, _)| p.as_str())
        .collect();
    if !changed.is_empty() && !guard.force {
        return Err(refuse(format!("{} file(s) were changed since mithrilc wrote them: {}", changed.len(), sample(&changed)))
            .note("--force replaces them"));
    }
    Ok(())
}

/// The first few names, then how many more.
fn sample(names: &[&str]) -> String {
    let shown: Vec<&str> = names.iter().take(5).copied().collect();
    match names.len() - shown.len() {
        0 => shown.join(", "),
        more => format!("{}, and {more} more", shown.join(", ")),
    }
}

/// The absolute path with every existing component resolved (a path that does not
/// exist yet resolves its nearest existing ancestor).
fn absolute(path: &Path) -> std::io::Result<PathBuf> {
    let joined = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir()?.join(path) };
    let mut rest = Vec::new();
    let mut base = joined.as_path();
    loop {
        if let Ok(found) = base.canonicalize() {
            let mut out = found;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return Ok(out);
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                base = parent;
            }
            _ => return Ok(joined),
        }
    }
}

/// Every file under `dir` (recursively), by its `/`-separated relative path, with the
/// FNV-1a 64 hash of its contents.
fn hash_files(dir: &Path) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let here = dir.join(&rel);
        let entries = std::fs::read_dir(&here).map_err(|e| Error::user(format!("cannot read {}: {}", here.display(), io_message(&e))))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::user(format!("cannot read {}: {}", here.display(), io_message(&e))))?;
            let path = rel.join(entry.file_name());
            let kind = entry.file_type().map_err(|e| Error::user(format!("cannot read {}: {}", path.display(), io_message(&e))))?;
            if kind.is_dir() {
                pending.push(path);
            } else {
                let name = path.to_string_lossy().replace('\\', "/");
                let hash = if kind.is_file() {
                    let file = std::fs::File::open(dir.join(&path)).and_then(fnv1a_read);
                    file.map_err(|e| Error::user(format!("cannot read {}: {}", path.display(), io_message(&e))))?
                } else {
                    0 // a link or device: never listed as written, so always foreign
                };
                out.insert(name, hash);
            }
        }
    }
    Ok(out)
}


#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) -> Result<()> {
        let files: Vec<(String, Vec<u8>)> = files.iter().map(|(n, b)| (n.to_string(), b.as_bytes().to_vec())).collect();
        write_atomically(dir, &files, &Guard::default(), |_| Ok(()))
    }

    fn leftovers(parent: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(parent).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with(".mithrilc")).collect();
        names.sort();
        names
    }

    #[test]
    fn rewrites_its_own_output_and_lists_it() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        write(&out, &[("a.c", "one"), ("b.h", "two")]).unwrap();
        write(&out, &[("a.c", "three")]).unwrap();
        assert_eq!(std::fs::read_to_string(out.join("a.c")).unwrap(), "three");
        assert!(!out.join("b.h").exists());
        assert_eq!(std::fs::read_to_string(out.join(MARKER)).unwrap(), format!("{:016x} a.c\n", crate::hash::fnv1a(b"three")));
        assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    }

    #[test]
    fn refuses_directories_it_did_not_write() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("thesis.tex"), "mine").unwrap();
        let err = write(&out, &[("a.c", "x")]).unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::User);
        assert!(err.message.ends_with("is not empty and was not written by mithrilc (it has no .mithrilc-output); it would be replaced as a whole"), "{err}");
        assert_eq!(std::fs::read_to_string(out.join("thesis.tex")).unwrap(), "mine");
        assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    }

    #[test]
    fn refuses_its_own_output_once_a_user_file_is_added() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        write(&out, &[("a.c", "x")]).unwrap();
        std::fs::create_dir(out.join("notes")).unwrap();
        std::fs::write(out.join("notes/todo.txt"), "mine").unwrap();
        let err = write(&out, &[("a.c", "y")]).unwrap_err();
        assert!(err.message.ends_with("holds 1 file(s) mithrilc did not write: notes/todo.txt"), "{err}");
        assert!(out.join("notes/todo.txt").exists());
    }

    #[test]
    fn changed_files_are_replaced_only_with_force() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        write(&out, &[("a.c", "x")]).unwrap();
        std::fs::write(out.join("a.c"), "edited by hand").unwrap();
        let err = write(&out, &[("a.c", "y")]).unwrap_err();
        assert!(err.message.ends_with("1 file(s) were changed since mithrilc wrote them: a.c"), "{err}");
        assert_eq!(err.notes, vec!["--force replaces them".to_string()]);
        let forced = Guard { force: true, ..Guard::default() };
        write_atomically(&out, &[("a.c".into(), b"y".to_vec())], &forced, |_| Ok(())).unwrap();
        assert_eq!(std::fs::read_to_string(out.join("a.c")).unwrap(), "y");
    }

    #[test]
    fn refuses_files_parents_and_input_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("notes.txt");
        std::fs::write(&file, "mine").unwrap();
        let err = write(&file, &[("a.c", "x")]).unwrap_err();
        assert!(err.message.ends_with("is a file, not a directory; mithrilc writes a directory of files there"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
        for dir in [".", "..", "/", "./"] {
            let err = write(Path::new(dir), &[("a.c", "x")]).unwrap_err();
            assert!(err.message.contains("the current directory and its parents cannot be an output directory"), "{dir}: {err}");
        }
        let guard = Guard { inputs: vec![file.clone()], force: false };
        let err = write_atomically(tmp.path(), &[], &guard, |_| Ok(())).unwrap_err();
        assert!(err.message.contains("holds") && err.message.contains("notes.txt, an input of this command"), "{err}");
        assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    }

    /// A file written whole gets the mode any new file gets (0666 less the umask), not a
    /// temporary file's 0600, and replaces the old one.
    #[cfg(unix)]
    #[test]
    fn files_written_whole_have_the_usual_mode() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("y.npz");
        std::fs::write(&path, "old").unwrap();
        let usual = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        write_file_atomically(&path, |out| std::io::Write::write_all(out, b"new").map_err(|e| Error::user(e.to_string()))).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, usual);
        assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    }

    #[test]
    fn a_file_written_into_the_output_while_building_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        write(&out, &[("a.c", "x")]).unwrap();
        let late = out.join("results.csv");
        let err = write_atomically(&out, &[("a.c".into(), b"y".to_vec())], &Guard::default(), |_| {
            std::fs::write(&late, "the user's").map_err(|e| Error::user(e.to_string()))
        })
        .unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::User);
        assert_eq!(err.message, format!("-o {}: holds 1 file(s) mithrilc did not write: results.csv", out.display()));
        assert_eq!(err.notes, ["move them elsewhere, or give another directory", "it changed while mithrilc built; nothing was replaced"]);
        assert_eq!(std::fs::read_to_string(&late).unwrap(), "the user's");
        assert_eq!(std::fs::read_to_string(out.join("a.c")).unwrap(), "x");
        assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    }

    #[test]
    fn a_failed_build_leaves_the_previous_output_and_no_scratch() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        write(&out, &[("a.c", "x")]).unwrap();
        let err = write_atomically(&out, &[("a.c".into(), b"y".to_vec())], &Guard::default(), |_| Err(Error::user("boom"))).unwrap_err();
        assert_eq!(err.message, "boom");
        assert_eq!(std::fs::read_to_string(out.join("a.c")).unwrap(), "x");
        assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
        assert!(lock_live().iter().all(|p| !p.starts_with(tmp.path())));
    }
}

/// The file name alone: generated files name their source without the directory,
/// so they do not depend on where the compiler ran.
pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

