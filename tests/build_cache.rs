//! The build cache (`src/cache.rs`, `build::make_cached`): a second build of the same
//! runtime copies its objects instead of compiling them, and says so (`--report`); the
//! artifact is byte-identical with and without the cache; concurrent builds of one key
//! both succeed with the same files; a corrupt entry is built again, never linked; an
//! unwritable cache directory still builds; a new flag, compiler or source makes a new
//! key; `mithrilc cache clean` removes only what the cache made.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mithrilc::build::{c_vars, make_cached, CacheUse, Shared, MAKE_INSTALL};
use mithrilc::cache::{Cache, MANIFEST};

use crate::common;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Whether make and gcc are here (saying why the test skips if not).
fn tools() -> bool {
    let ok = common::have("make") && common::have("gcc") && common::have("objcopy");
    if !ok {
        common::skip("make, gcc and objcopy are needed (apt-get install make gcc binutils)");
    }
    ok
}

/// The flags of these tests' builds: unoptimised, which compiles in a fraction of the
/// time and caches as any other.
const CFLAGS: [&str; 2] = ["--cflags", "-O0"];

/// `mithrilc compile` of the example MLP for the C target into `out` with `--report`,
/// the cache at `cache` (`MITHRILC_CACHE_DIR`) and `args` more (with [`CFLAGS`] unless
/// they give `--cflags`); the process's output.
fn compile(cache: &Path, out: &Path, args: &[&str]) -> Output {
    let mlp = root().join("examples/mlp");
    Command::new(env!("CARGO_BIN_EXE_mithrilc"))
        .args(["compile", "--target", "c", "--report"])
        .args(if args.contains(&"--cflags") { &[][..] } else { &CFLAGS[..] })
        .arg(mlp.join("mlp.json"))
        .arg("--params")
        .arg(mlp.join("data.npz"))
        .arg("-o")
        .arg(out)
        .args(args)
        .env("MITHRILC_CACHE_DIR", cache)
        .env_remove("MITHRILC_NO_CACHE")
        .output()
        .unwrap()
}

/// The `build cache:` line of a successful compile's report.
fn cache_line(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "compile failed: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().find(|l| l.starts_with("build cache: ")).unwrap_or_else(|| panic!("no build cache line in the report: {stdout}")).to_string()
}

/// Every file under `dir`, by its path relative to it.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut all = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            all.insert(PathBuf::from(entry.file_name()), std::fs::read(entry.path()).unwrap());
        }
    }
    all
}

/// Says which files of two outputs differ.
fn assert_same_files(a: &Path, b: &Path) {
    let (x, y) = (files(a), files(b));
    assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>(), "{} and {} hold other files", a.display(), b.display());
    let differ: Vec<&PathBuf> = x.iter().filter(|(name, bytes)| y[*name] != **bytes).map(|(name, _)| name).collect();
    assert!(differ.is_empty(), "{} and {} differ in {differ:?}", a.display(), b.display());
}

/// The cache's entry directories.
fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache).unwrap().flatten().map(|e| e.path()).filter(|p| p.join(MANIFEST).exists()).collect();
    found.sort();
    found
}

#[test]
fn a_second_compile_reuses_the_entry_and_writes_the_same_files() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let first = cache_line(&compile(&cache, &tmp.path().join("a"), &[]));
    assert!(first.starts_with("build cache: built and stored entry "), "{first}");
    let entry = first.rsplit("entry ").next().unwrap().to_string();
    let again = cache_line(&compile(&cache, &tmp.path().join("b"), &[]));
    assert_eq!(again, format!("build cache: reused entry {entry}"));
    let off = cache_line(&compile(&cache, &tmp.path().join("c"), &["--no-cache"]));
    assert_eq!(off, "build cache: not used (--no-cache)");
    assert_same_files(&tmp.path().join("a"), &tmp.path().join("b"));
    assert_same_files(&tmp.path().join("a"), &tmp.path().join("c"));
    assert_eq!(entries(&cache).len(), 1);

    // With debug information too: it names the build directory `.`, so objects built
    // in another directory are the same.
    let debug = ["--cflags", "-O0 -g"];
    assert!(cache_line(&compile(&cache, &tmp.path().join("g1"), &debug)).starts_with("build cache: built and stored"));
    assert!(cache_line(&compile(&cache, &tmp.path().join("g2"), &debug)).starts_with("build cache: reused"));
    let off = cache_line(&compile(&cache, &tmp.path().join("g3"), &[&debug[..], &["--no-cache"]].concat()));
    assert!(off.starts_with("build cache: not used"));
    assert_same_files(&tmp.path().join("g1"), &tmp.path().join("g2"));
    assert_same_files(&tmp.path().join("g1"), &tmp.path().join("g3"));
    assert_eq!(entries(&cache).len(), 2);

    // `mithrilc cache` shows it; `cache clean` removes it, and nothing the cache did not make.
    std::fs::write(cache.join("notes.txt"), "the user's").unwrap();
    let cache_cmd = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mithrilc")).arg("cache").args(args).env("MITHRILC_CACHE_DIR", &cache).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let shown = cache_cmd(&[]);
    assert!(shown.contains(&format!("build cache: {}", cache.display())) && shown.contains("entries: 2 ("), "{shown}");
    let cleaned = cache_cmd(&["clean"]);
    assert!(cleaned.contains("removed 2 entries") && cleaned.contains("entries: 0 ("), "{cleaned}");
    assert!(entries(&cache).is_empty() && cache.join("notes.txt").exists());
}

/// `run --target c` takes the entry `compile` made (with the same flags: the default
/// -O3): no new entry, and the one there is marked used.
#[test]
fn run_takes_the_entry_compile_made() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let mlp = root().join("examples/mlp");
    let mut compile = Command::new(env!("CARGO_BIN_EXE_mithrilc"));
    compile.args(["compile", "--target", "c"]).arg(mlp.join("mlp.json")).arg("--params").arg(mlp.join("data.npz")).arg("-o").arg(tmp.path().join("out"));
    let out = compile.env("MITHRILC_CACHE_DIR", &cache).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let [entry] = entries(&cache).try_into().unwrap();
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options().append(true).open(entry.join(MANIFEST)).unwrap().set_modified(hour_ago).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_mithrilc"))
        .args(["run", "--target", "c", "--check"])
        .arg(mlp.join("mlp.json"))
        .arg("--params")
        .arg(mlp.join("data.npz"))
        .arg("--data")
        .arg(mlp.join("data.npz"))
        .env("MITHRILC_CACHE_DIR", &cache)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(entries(&cache), [entry.clone()], "run made an entry of its own");
    let used = std::fs::metadata(entry.join(MANIFEST)).unwrap().modified().unwrap();
    assert!(used > hour_ago + std::time::Duration::from_secs(1800), "run did not use the entry");
}

#[test]
fn concurrent_compiles_of_one_key_both_succeed_with_the_same_files() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let mlp = root().join("examples/mlp");
    let spawn = |out: &str| {
        Command::new(env!("CARGO_BIN_EXE_mithrilc"))
            .args(["compile", "--target", "c", "--report"])
            .args(CFLAGS)
            .arg(mlp.join("mlp.json"))
            .arg("--params")
            .arg(mlp.join("data.npz"))
            .arg("-o")
            .arg(tmp.path().join(out))
            .env("MITHRILC_CACHE_DIR", &cache)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    let lines = [cache_line(&a.wait_with_output().unwrap()), cache_line(&b.wait_with_output().unwrap())];
    // One built the entry while the other waited for it (or, without locks, both built it).
    assert!(lines.iter().any(|l| l.starts_with("build cache: built and stored")), "{lines:?}");
    assert_same_files(&tmp.path().join("a"), &tmp.path().join("b"));
    assert_eq!(entries(&cache).len(), 1);
}

#[test]
fn a_corrupt_entry_is_built_again() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    cache_line(&compile(&cache, &tmp.path().join("first"), &[]));
    let [entry] = entries(&cache).try_into().unwrap();
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 2] = [
        ("a truncated object", |e| {
            let object = e.join("mr_gemm.any.o");
            let bytes = std::fs::read(&object).unwrap();
            std::fs::write(&object, &bytes[..bytes.len() / 2]).unwrap();
        }),
        ("a wrong checksum", |e| {
            let text = std::fs::read_to_string(e.join(MANIFEST)).unwrap();
            let line = text.lines().find(|l| l.ends_with(" mr_files.o")).unwrap();
            let wrong = format!("{}{}", if line.starts_with('0') { "1" } else { "0" }, &line[1..]);
            std::fs::write(e.join(MANIFEST), text.replace(line, &wrong)).unwrap();
        }),
    ];
    for (i, (what, damage)) in damages.iter().enumerate() {
        damage(&entry);
        let out = tmp.path().join(format!("after{i}"));
        let line = cache_line(&compile(&cache, &out, &[]));
        assert!(line.starts_with("build cache: built again and stored entry"), "{what}: {line}");
        assert_same_files(&tmp.path().join("first"), &out);
        let reused = cache_line(&compile(&cache, &tmp.path().join(format!("reused{i}")), &[]));
        assert!(reused.starts_with("build cache: reused"), "{what}: the rebuilt entry is not used: {reused}");
    }
}

#[test]
fn an_unwritable_cache_directory_still_builds() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // A directory below a file can never be made, even by root.
    std::fs::write(tmp.path().join("file"), "").unwrap();
    let out = compile(&tmp.path().join("file/cache"), &tmp.path().join("out"), &[]);
    let line = cache_line(&out);
    assert!(line.starts_with("build cache: not used (cannot write the build cache"), "{line}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().filter(|l| l.starts_with("note: cannot write the build cache")).count(), 1, "{stderr}");
    assert!(tmp.path().join("out/mlp_demo").exists());

    // A read-only directory (which root may write all the same).
    let cache = tmp.path().join("readonly");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    if std::fs::write(cache.join("probe"), "").is_ok() {
        return println!("the read-only case skipped: this user writes read-only directories (root)");
    }
    let line = cache_line(&compile(&cache, &tmp.path().join("out2"), &[]));
    assert!(line.starts_with("build cache: not used (cannot write the build cache"), "{line}");
}

/// `make_cached` on a one-object Makefile: a build whose commands, sources and compiler
/// are an earlier one's compiles nothing and gets the same object; other flags, another
/// compiler (here the same path answering another `--version`) or a changed source make a
/// new key and compile again.
#[test]
fn a_new_flag_compiler_or_source_makes_a_new_key() {
    if !tools() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::At(root.path().join("cache"));
    let compiler = root.path().join("mycc");
    let write_compiler = |version: &str| {
        let script = format!("#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'mycc {version}'; exit 0; }}\nexec gcc \"$@\"\n");
        std::fs::write(&compiler, script).unwrap();
        std::fs::set_permissions(&compiler, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    };
    write_compiler("1");
    let cc = compiler.display().to_string();
    // Each compilation adds a line to the log.
    let makefile = "all: x.o\nx.o: x.c\n\techo x.o >> ../log\n\t$(CC) $(CFLAGS) -c x.c -o x.o\n";
    let build = |name: &str, cflags: &str, source: &str| {
        let dir = root.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("Makefile"), makefile).unwrap();
        std::fs::write(dir.join("x.c"), source).unwrap();
        let shared = Shared { sources: vec!["x.c"], products: vec!["x.o".to_string()] };
        let used = make_cached(&dir, &c_vars(&cc, cflags).unwrap(), &[], &shared, &cache, MAKE_INSTALL).unwrap();
        let compiled = std::fs::read_to_string(root.path().join("log")).unwrap().lines().count();
        (used, compiled, std::fs::read(dir.join("x.o")).unwrap())
    };
    let key = |used: &CacheUse| match used {
        CacheUse::Reused(k) | CacheUse::Stored(k, None) => k.clone(),
        other => panic!("{other:?}"),
    };
    let one = "int f(void) { return 1; }\n";
    let (used, compiled, first) = build("a", "-O1", one);
    assert!(matches!(used, CacheUse::Stored(..)) && compiled == 1);
    let (again, compiled, object) = build("b", "-O1", one);
    assert_eq!((key(&again), compiled), (key(&used), 1), "the same sources and commands compiled again");
    assert!(matches!(again, CacheUse::Reused(_)));
    assert_eq!(object, first);
    let (flags, compiled, _) = build("c", "-O2", one);
    assert!(key(&flags) != key(&used) && compiled == 2, "other flags reused the object");
    let (source, compiled, _) = build("d", "-O1", "int f(void) { return 2; }\n");
    assert!(key(&source) != key(&used) && compiled == 3, "a changed source reused the object");
    write_compiler("2");
    let (other, compiled, _) = build("e", "-O1", one);
    assert!(key(&other) != key(&used) && compiled == 4, "another compiler reused the object");
}
