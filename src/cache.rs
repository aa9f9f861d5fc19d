//! The build cache: files a build makes the same way for every model (runtime-c's
//! objects, compiled with the runtime's own names before each library gives them its
//! own), kept across processes so that a later `compile` or `run` copies them instead
//! of compiling them again.
//!
//! An entry is a directory named by its key (the SHA-256 of everything that decides its
//! files' bytes: [`Key`]) holding the files and a [`MANIFEST`] with each one's size and
//! SHA-256. It is written into a temporary directory and renamed into place, so it is
//! whole or absent; a file that does not match the manifest (a truncated copy, a disk
//! error, a hand edit) makes the entry a miss, removed and built again, never used.
//! Builders of one key take a lock on it (`<key>.lock`), so concurrent processes build
//! it once; without the lock (a file system that refuses it) they build it twice and the
//! first rename wins. The cache keeps at most [`LIMIT`] bytes, dropping the entries used
//! longest ago first.
//!
//! Where: `$MITHRILC_CACHE_DIR`, else `$XDG_CACHE_HOME/mithrilc/builds`, else
//! `~/.cache/mithrilc/builds`; `MITHRILC_NO_CACHE=1` (or `--no-cache`) turns it off.
//! Only what mithrilc made there is ever removed: entries, their locks, its temporary
//! directories.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::error::io_message;

/// The most bytes the cache keeps (its entries' files): past it, the entries used
/// longest ago are removed. A runtime's entry is about 2 MiB.
pub const LIMIT: u64 = 512 << 20;

/// The file in every entry that lists its files: a header line, then `SHA256 SIZE NAME`
/// per file.
pub const MANIFEST: &str = "MANIFEST";

/// The manifest's first line; raised when the entries' layout changes, so that older
/// entries are misses.
const FORMAT: &str = "mithrilc build cache 1";

/// Temporary directories older than this are left over from a process that died while
/// filling an entry, and are removed when the cache is trimmed.
const STALE: Duration = Duration::from_secs(3600);

/// Whether and where builds are cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cache {
    /// Entries live in this directory.
    At(PathBuf),
    /// No caching, and why (`--no-cache`, `MITHRILC_NO_CACHE`, no home directory).
    Off(String),
}

impl Cache {
    /// The cache the environment asks for (module docs).
    pub fn from_env() -> Cache {
        Cache::from(|name| std::env::var_os(name))
    }

    /// [`Cache::from_env`] with the environment given.
    fn from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Cache {
        let set = |name: &str| env(name).filter(|v| !v.is_empty());
        if let Some(v) = set("MITHRILC_NO_CACHE").filter(|v| v != "0") {
            return Cache::Off(format!("MITHRILC_NO_CACHE={}", v.to_string_lossy()));
        }
        if let Some(dir) = set("MITHRILC_CACHE_DIR") {
            return Cache::At(PathBuf::from(dir));
        }
        match user_cache_dir(&env) {
            Some(dir) => Cache::At(dir.join("builds")),
            None => Cache::Off("neither XDG_CACHE_HOME nor HOME is set".to_string()),
        }
    }
}

/// mithrilc's folder of the user's cache directory: `$XDG_CACHE_HOME/mithrilc`, else
/// `$HOME/.cache/mithrilc` (the build cache's parent, and where `.ci/run` installs the
/// toolchains mithrilc looks for).
pub fn user_cache_dir(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let base = env("XDG_CACHE_HOME").filter(|p| !p.is_empty()).map(PathBuf::from).or_else(|| env("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(&h).join(".cache")))?;
    Some(base.join("mithrilc"))
}

/// An entry's key being made: every part is added with its label and length, so no two
/// different lists of parts give the same bytes to hash.
pub struct Key(Sha256);

impl Key {
    pub fn new(what: &str) -> Key {
        let mut key = Key(Sha256::new());
        key.add(FORMAT, what.as_bytes());
        key
    }

    pub fn add(&mut self, label: &str, bytes: &[u8]) {
        for part in [label.as_bytes(), bytes] {
            self.0.update((part.len() as u64).to_le_bytes());
            self.0.update(part);
        }
    }

    /// The key as the entry's name: 64 hex digits.
    pub fn finish(self) -> String {
        hex(&self.0.finalize())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `name` is an entry's (a key: 64 lowercase hex digits).
fn is_key(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Why an entry was not used.
#[derive(Debug, PartialEq, Eq)]
pub enum Miss {
    Absent,
    /// It was there but not whole (what was wrong); it has been removed.
    Corrupt(String),
}

/// The cache directory `dir`'s entry `key`: its `names`, checked against the manifest,
/// copied into `into`. A corrupt entry is removed.
pub fn fetch(dir: &Path, key: &str, names: &[String], into: &Path) -> Result<(), Miss> {
    let entry = dir.join(key);
    let manifest = match fs::read_to_string(entry.join(MANIFEST)) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !entry.exists() => return Err(Miss::Absent),
        Err(e) => return Err(corrupt(dir, key, format!("{MANIFEST}: {}", io_message(&e)))),
    };
    let listed = match parse_manifest(&manifest, key) {
        Ok(listed) => listed,
        Err(why) => return Err(corrupt(dir, key, format!("{MANIFEST}: {why}"))),
    };
    let mut wanted: Vec<&String> = names.iter().collect();
    wanted.sort();
    if listed.iter().map(|(name, _, _)| name).collect::<Vec<_>>() != wanted {
        return Err(corrupt(dir, key, format!("{MANIFEST} lists other files than {}", names.join(" "))));
    }
    for (name, size, sum) in &listed {
        let bytes = match fs::read(entry.join(name)) {
            Ok(bytes) => bytes,
            Err(e) => return Err(corrupt(dir, key, format!("{name}: {}", io_message(&e)))),
        };
        if bytes.len() as u64 != *size || hex(&Sha256::digest(&bytes)) != *sum {
            return Err(corrupt(dir, key, format!("{name}: its size or checksum is not the manifest's")));
        }
        let target = into.join(name);
        if let Err(e) = fs::write(&target, &bytes) {
            return Err(Miss::Corrupt(format!("cannot write {}: {}", target.display(), io_message(&e))));
        }
    }
    // Used now: trimming removes the entries used longest ago first.
    if let Ok(f) = fs::File::options().append(true).open(entry.join(MANIFEST)) {
        let _ = f.set_modified(SystemTime::now());
    }
    Ok(())
}

/// Removes a corrupt entry and says why it was.
fn corrupt(dir: &Path, key: &str, why: String) -> Miss {
    remove_entry(dir, key);
    Miss::Corrupt(why)
}

/// A manifest's files, sorted by name: (name, size, SHA-256 in hex).
fn parse_manifest(text: &str, key: &str) -> Result<Vec<(String, u64, String)>, String> {
    let mut lines = text.lines();
    if lines.next() != Some(FORMAT) || lines.next() != Some(&format!("key {key}")) {
        return Err("not this version's manifest of this key".to_string());
    }
    let mut files = Vec::new();
    for line in lines {
        let mut words = line.splitn(3, ' ');
        let (Some(sum), Some(size), Some(name)) = (words.next(), words.next(), words.next()) else { return Err(format!("bad line {line:?}")) };
        let size: u64 = size.parse().map_err(|_| format!("bad size in {line:?}"))?;
        if !is_key(sum) || !is_file_name(name) {
            return Err(format!("bad line {line:?}"));
        }
        files.push((name.to_string(), size, sum.to_string()));
    }
    files.sort();
    Ok(files)
}

/// A plain file name (what an entry may hold: never a path).
fn is_file_name(name: &str) -> bool {
    !name.is_empty() && name != MANIFEST && !name.starts_with('.') && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// Stores the files `names` of `from` as entry `key` of the cache directory `dir`
/// (made if missing), then trims the cache. An entry another process stored meanwhile
/// is kept. The error says why the directory cannot be written.
pub fn store(dir: &Path, key: &str, names: &[String], from: &Path) -> Result<(), String> {
    let failed = |e: io::Error| io_message(&e);
    fs::create_dir_all(dir).map_err(failed)?;
    let temp = crate::outdir::Scratch::new_in(dir).map_err(|e| e.message)?;
    let mut manifest = format!("{FORMAT}\nkey {key}\n");
    for name in names {
        if !is_file_name(name) {
            return Err(format!("{name:?} is not a plain file name"));
        }
        let bytes = fs::read(from.join(name)).map_err(|e| format!("{}: {}", from.join(name).display(), io_message(&e)))?;
        fs::write(temp.path().join(name), &bytes).map_err(failed)?;
        manifest.push_str(&format!("{} {} {name}\n", hex(&Sha256::digest(&bytes)), bytes.len()));
    }
    fs::write(temp.path().join(MANIFEST), manifest).map_err(failed)?;
    let entry = dir.join(key);
    if let Err(e) = fs::rename(temp.path(), &entry) {
        // Another process stored the same key first: its files are these.
        if !entry.join(MANIFEST).exists() {
            return Err(io_message(&e));
        }
    }
    trim(dir, LIMIT);
    Ok(())
}

/// Holds the lock of entry `key` (blocking while another process holds it), or `None`
/// where the lock cannot be had (an unwritable directory, a file system without locks).
pub fn lock(dir: &Path, key: &str) -> Option<fs::File> {
    fs::create_dir_all(dir).ok()?;
    let file = fs::File::options().create(true).truncate(false).write(true).open(dir.join(format!("{key}.lock"))).ok()?;
    file.lock().ok()?;
    Some(file)
}

/// What the cache holds: its entries and their bytes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub entries: u64,
    pub bytes: u64,
}

/// The entries of `dir`: (key, bytes, last used), oldest first.
fn entries(dir: &Path) -> Vec<(String, u64, SystemTime)> {
    let Ok(read) = fs::read_dir(dir) else { return Vec::new() };
    let mut found = Vec::new();
    for item in read.flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        if !is_key(&name) || !item.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let files: Vec<fs::Metadata> = fs::read_dir(item.path()).into_iter().flatten().flatten().filter_map(|f| f.metadata().ok()).collect();
        let bytes = files.iter().map(fs::Metadata::len).sum();
        let used = fs::metadata(item.path().join(MANIFEST)).and_then(|m| m.modified()).or_else(|_| item.metadata().and_then(|m| m.modified()));
        found.push((name, bytes, used.unwrap_or(SystemTime::UNIX_EPOCH)));
    }
    found.sort_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
    found
}

/// What `dir` holds.
pub fn usage(dir: &Path) -> Usage {
    let all = entries(dir);
    Usage { entries: all.len() as u64, bytes: all.iter().map(|e| e.1).sum() }
}

/// Removes the entries used longest ago until the rest hold at most `limit` bytes, and
/// temporary directories left over by processes that died.
pub fn trim(dir: &Path, limit: u64) {
    let all = entries(dir);
    let mut total: u64 = all.iter().map(|e| e.1).sum();
    for (key, bytes, _) in all {
        if total <= limit {
            break;
        }
        remove_entry(dir, &key);
        // (A process holding this lock still builds safely: the first rename wins.)
        let _ = fs::remove_file(dir.join(format!("{key}.lock")));
        total -= bytes;
    }
    let stale = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE));
    for item in fs::read_dir(dir).into_iter().flatten().flatten() {
        if is_temporary(&item.file_name().to_string_lossy()) && stale(&item.path()) {
            let _ = fs::remove_dir_all(item.path());
        }
    }
}

/// Whether `name` is one of this module's temporary directories (a store's, a removal's).
fn is_temporary(name: &str) -> bool {
    name.starts_with(".mithrilc-") || name.starts_with(".removed-")
}

/// Removes every entry, lock and temporary directory of `dir`; what it held before.
pub fn clean(dir: &Path) -> Usage {
    let before = usage(dir);
    for item in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        if is_key(&name) {
            remove_entry(dir, &name);
        } else if is_temporary(&name) {
            let _ = fs::remove_dir_all(item.path());
        } else if name.strip_suffix(".lock").is_some_and(is_key) {
            let _ = fs::remove_file(item.path());
        }
    }
    before
}

/// Removes entry `key`: first renamed aside (one step, so a reader sees it whole or
/// not at all; a reader holding its files open keeps reading them), then deleted.
fn remove_entry(dir: &Path, key: &str) {
    let aside = dir.join(format!(".removed-{key}-{}", std::process::id()));
    if fs::rename(dir.join(key), &aside).is_ok() {
        let _ = fs::remove_dir_all(&aside);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.into())
    }

    #[test]
    fn the_cache_is_where_the_environment_says() {
        assert_eq!(Cache::from(env(&[("HOME", "/h")])), Cache::At("/h/.cache/mithrilc/builds".into()));
        assert_eq!(Cache::from(env(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x")])), Cache::At("/x/mithrilc/builds".into()));
        assert_eq!(Cache::from(env(&[("HOME", "/h"), ("MITHRILC_CACHE_DIR", "/c")])), Cache::At("/c".into()));
        assert_eq!(Cache::from(env(&[("HOME", "/h"), ("MITHRILC_NO_CACHE", "1")])), Cache::Off("MITHRILC_NO_CACHE=1".into()));
        assert_eq!(Cache::from(env(&[("HOME", "/h"), ("MITHRILC_NO_CACHE", "0")])), Cache::At("/h/.cache/mithrilc/builds".into()));
        assert!(matches!(Cache::from(env(&[])), Cache::Off(_)));
    }

    #[test]
    fn keys_separate_their_parts() {
        let key = |parts: &[(&str, &str)]| {
            let mut k = Key::new("test");
            for (label, bytes) in parts {
                k.add(label, bytes.as_bytes());
            }
            k.finish()
        };
        assert_eq!(key(&[("a", "b")]), key(&[("a", "b")]));
        assert_ne!(key(&[("a", "bc")]), key(&[("ab", "c")]));
        assert_ne!(key(&[("a", "b"), ("", "")]), key(&[("a", "b")]));
        assert!(is_key(&key(&[])));
    }

    /// A directory holding files `a.o` and `b.o`.
    fn built(bytes: &[u8]) -> (tempfile::TempDir, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.o"), bytes).unwrap();
        fs::write(dir.path().join("b.o"), b"bee").unwrap();
        (dir, vec!["a.o".to_string(), "b.o".to_string()])
    }

    const K1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const K2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn a_stored_entry_is_fetched_whole() {
        let cache = tempfile::tempdir().unwrap();
        let (from, names) = built(b"ay");
        let into = tempfile::tempdir().unwrap();
        assert_eq!(fetch(cache.path(), K1, &names, into.path()), Err(Miss::Absent));
        store(cache.path(), K1, &names, from.path()).unwrap();
        fetch(cache.path(), K1, &names, into.path()).unwrap();
        assert_eq!(fs::read(into.path().join("a.o")).unwrap(), b"ay");
        assert_eq!(usage(cache.path()), Usage { entries: 1, bytes: 5 + fs::metadata(cache.path().join(K1).join(MANIFEST)).unwrap().len() });
        // Storing it again (another process's) keeps the first.
        store(cache.path(), K1, &names, from.path()).unwrap();
        assert_eq!(usage(cache.path()).entries, 1);
    }

    #[test]
    fn a_corrupt_entry_is_a_miss_and_is_removed() {
        let (from, names) = built(b"ay");
        let into = tempfile::tempdir().unwrap();
        type Damage = fn(&Path);
        let damages: [(&str, Damage); 5] = [
            ("truncated", |e| fs::write(e.join("a.o"), b"a").unwrap()),
            ("same size, other bytes", |e| fs::write(e.join("a.o"), b"az").unwrap()),
            ("a file missing", |e| fs::remove_file(e.join("b.o")).unwrap()),
            ("no manifest", |e| fs::remove_file(e.join(MANIFEST)).unwrap()),
            ("a manifest naming a path", |e| {
                let text = fs::read_to_string(e.join(MANIFEST)).unwrap().replace(" b.o", " ../b.o");
                fs::write(e.join(MANIFEST), text).unwrap()
            }),
        ];
        for (what, damage) in damages {
            let cache = tempfile::tempdir().unwrap();
            store(cache.path(), K1, &names, from.path()).unwrap();
            damage(&cache.path().join(K1));
            assert!(matches!(fetch(cache.path(), K1, &names, into.path()), Err(Miss::Corrupt(_))), "{what}");
            assert!(!cache.path().join(K1).exists(), "{what}: the entry is removed");
            assert_eq!(fetch(cache.path(), K1, &names, into.path()), Err(Miss::Absent), "{what}");
        }
    }

    #[test]
    fn trimming_drops_the_entries_used_longest_ago() {
        let cache = tempfile::tempdir().unwrap();
        let (from, names) = built(&[7; 1000]);
        let into = tempfile::tempdir().unwrap();
        store(cache.path(), K1, &names, from.path()).unwrap();
        store(cache.path(), K2, &names, from.path()).unwrap();
        let old = SystemTime::now() - Duration::from_secs(100);
        fs::File::options().append(true).open(cache.path().join(K1).join(MANIFEST)).unwrap().set_modified(old).unwrap();
        fs::File::options().append(true).open(cache.path().join(K2).join(MANIFEST)).unwrap().set_modified(old - Duration::from_secs(100)).unwrap();
        // Using K2 makes K1 the oldest.
        fetch(cache.path(), K2, &names, into.path()).unwrap();
        let one = usage(cache.path()).bytes / 2;
        trim(cache.path(), one + 10);
        assert!(cache.path().join(K2).exists() && !cache.path().join(K1).exists());
        trim(cache.path(), 0);
        assert_eq!(usage(cache.path()), Usage::default());
    }

    #[test]
    fn cleaning_removes_only_what_the_cache_made() {
        let cache = tempfile::tempdir().unwrap();
        let (from, names) = built(b"ay");
        store(cache.path(), K1, &names, from.path()).unwrap();
        drop(lock(cache.path(), K1));
        fs::write(cache.path().join("notes.txt"), b"the user's").unwrap();
        fs::create_dir(cache.path().join("projects")).unwrap();
        let removed = clean(cache.path());
        assert_eq!(removed.entries, 1);
        let mut left: Vec<String> = fs::read_dir(cache.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, ["notes.txt", "projects"]);
    }
}
