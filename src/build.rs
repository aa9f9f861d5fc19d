//! Running external toolchains.
//!
//! A missing toolchain is an error of kind [`ErrorKind::Toolchain`] (exit 3) that says
//! how to install it; a failing one reports its output. Where their output goes is
//! `outdir`'s business.

use std::path::Path;
use std::process::Command;

use crate::cache::{Cache, Key, Miss};
use crate::error::{io_message, Error, ErrorKind, Result};

/// The C compiler: `$CC`, else `cc`.
pub fn c_compiler() -> String {
    std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".to_string())
}

/// `make -s` in `dir`, running as many recipes at once as the machine has cores
/// ([`jobs`]).
fn make_in(dir: &Path) -> Command {
    let mut cmd = Command::new("make");
    cmd.current_dir(dir).arg("-s").args(jobs());
    cmd
}

/// make's `-jN` for N cores, unless `MAKEFLAGS` says how many jobs already (the user's
/// choice, or a make that runs mithrilc passing its job server down).
fn jobs() -> Option<String> {
    let flags = std::env::var("MAKEFLAGS").unwrap_or_default();
    let given = flags.split_whitespace().any(|w| w.starts_with("-j") || w.starts_with("--jobserver") || (!w.starts_with('-') && !w.contains('=') && w.contains('j')));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (!given).then(|| format!("-j{cores}"))
}

/// `NAME=VALUE` for make's command line where VALUE is one word, `path` (a toolchain's
/// directory or program), quoted as [`make_var`] quotes each of its words.
pub fn make_word(name: &str, path: &Path) -> Result<String> {
    let text = path.to_str().ok_or_else(|| Error::user(format!("{}: a path make is given must be UTF-8", path.display())))?;
    if text.chars().any(char::is_control) {
        return Err(Error::user(format!("{text:?}: a path make is given cannot hold a control character")));
    }
    let quoted = shlex::try_quote(text).map_err(|_| Error::user(format!("{text:?}: a path holds a NUL")))?;
    Ok(format!("{name}={}", quoted.replace('$', "$$")))
}

/// `NAME=VALUE` for make's command line, where VALUE is `value` (what the user gave as
/// `what`: `--cflags`, `$CC`) split into words as a POSIX shell splits them (quotes
/// group, nothing is expanded), each quoted for the shell that runs make's recipes,
/// with make's `$` doubled: the words reach the compiler as written, and nothing in
/// them (`$(shell ...)`, backquotes, `;`) is evaluated by make or the shell.
pub fn make_var(name: &str, value: &str, what: &str) -> Result<String> {
    let refuse = |why: &str| Error::usage(format!("{what} {value:?}: {why}"));
    let words = shlex::split(value).ok_or_else(|| refuse("a quote is not closed"))?;
    if words.iter().any(|w| w.chars().any(char::is_control)) {
        return Err(refuse("a control character (such as a line break) cannot be part of a flag"));
    }
    let quoted = shlex::try_join(words.iter().map(String::as_str)).map_err(|_| refuse("a NUL cannot be part of a flag"))?;
    Ok(format!("{name}={}", quoted.replace('$', "$$")))
}

/// How a build had the files it takes from the build cache, for `--report`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheUse {
    /// Copied from the entry with this key.
    Reused(String),
    /// Built, and stored as the entry with this key (after removing a corrupt one: why).
    Stored(String, Option<String>),
    /// Built and not cached, because of this.
    Uncached(String),
}

impl CacheUse {
    /// The `--report` line: `build cache: ...`.
    pub fn line(&self) -> String {
        match self {
            CacheUse::Reused(key) => format!("build cache: reused entry {}", &key[..16]),
            CacheUse::Stored(key, None) => format!("build cache: built and stored entry {}", &key[..16]),
            CacheUse::Stored(key, Some(why)) => format!("build cache: built again and stored entry {} (the one there was corrupt: {why})", &key[..16]),
            CacheUse::Uncached(why) => format!("build cache: not used ({why})"),
        }
    }

    /// The word `--report=json` gives.
    pub fn word(&self) -> &'static str {
        match self {
            CacheUse::Reused(_) => "reused",
            CacheUse::Stored(..) => "stored",
            CacheUse::Uncached(_) => "uncached",
        }
    }
}

/// What a target's build shares with every other model's: the files `products` (objects
/// of a runtime, a demo's file readers), which make builds from the files `sources`
/// alone, the same way for every model.
pub struct Shared<'a> {
    pub sources: Vec<&'a str>,
    pub products: Vec<String>,
}

/// `make goals` in `dir` (everything when `goals` is empty) with `vars` on its command
/// line, where `shared`'s products come from the build cache when it holds them and go
/// into it when it does not; make then finds them up to date. The entry's key is
/// everything that decides their bytes ([`cache_key`]). An unwritable cache directory
/// means building without it, with a note on stderr (once per process). A failure says
/// `install` (how to install the toolchain).
pub fn make_cached(dir: &Path, vars: &[String], goals: &[&str], shared: &Shared, cache: &Cache, install: &str) -> Result<CacheUse> {
    let make = |goals: &[&str]| -> Result<()> {
        let mut cmd = make_in(dir);
        cmd.args(vars).args(goals);
        run_tool(cmd, "make", install)
    };
    let root = match cache {
        Cache::At(root) => root,
        Cache::Off(why) => {
            make(goals)?;
            return Ok(CacheUse::Uncached(why.clone()));
        }
    };
    let key = match cache_key(dir, vars, shared) {
        Ok(key) => key,
        Err(why) => {
            make(goals)?;
            return Ok(CacheUse::Uncached(why));
        }
    };
    let products = &shared.products;
    let lock = crate::cache::lock(root, &key);
    let corrupt = match crate::cache::fetch(root, &key, products, dir) {
        Ok(()) => {
            drop(lock);
            make(goals)?;
            return Ok(CacheUse::Reused(key));
        }
        Err(Miss::Absent) => None,
        Err(Miss::Corrupt(why)) => Some(why),
    };
    make(&products.iter().map(String::as_str).collect::<Vec<_>>())?;
    let used = match crate::cache::store(root, &key, products, dir) {
        Ok(()) => CacheUse::Stored(key, corrupt),
        Err(why) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            let why = format!("cannot write the build cache {}: {why}", root.display());
            SAID.call_once(|| eprintln!("note: {why}; building without it (--no-cache or MITHRILC_NO_CACHE=1 says not to try)"));
            CacheUse::Uncached(why)
        }
    };
    drop(lock);
    make(goals)?;
    Ok(used)
}

/// How to install make and a C compiler, said when either is missing.
pub const MAKE_INSTALL: &str = "apt-get install make gcc (Debian/Ubuntu), or set CC to your C compiler";

/// `CC` and `CFLAGS` for make's command line ([`make_var`]).
pub fn c_vars(cc: &str, cflags: &str) -> Result<Vec<String>> {
    Ok(vec![make_var("CC", cc, "$CC")?, make_var("CFLAGS", cflags, "--cflags")?])
}

/// The build cache's key of `shared`'s products built in `dir` by make with `vars`: the
/// commands make would run for them (`make -n`: each compiler as invoked and every flag,
/// define, `--cpu` and target option), the contents of the sources, each compiler itself
/// (where `PATH` finds it, its size and time, its `--version`; what `native` in a flag
/// means on this machine), and the environment variables compilers read their search
/// paths from. The error says why the products cannot be cached.
pub fn cache_key(dir: &Path, vars: &[String], shared: &Shared) -> std::result::Result<String, String> {
    let out = make_in(dir).args(vars).args(["-n", "-B"]).args(&shared.products).output().map_err(|e| format!("cannot run make: {}", io_message(&e)))?;
    if !out.status.success() {
        return Err(format!("make -n failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    // The build directory's path is in the commands (debug information is told to
    // name it `.`), not in the objects: the key leaves it out.
    let mut commands = String::from_utf8_lossy(&out.stdout).into_owned();
    if let Some(path) = std::fs::canonicalize(dir).ok().and_then(|d| d.to_str().map(str::to_string)) {
        commands = commands.replace(&path, "<build directory>");
    }
    let mut key = Key::new("make products");
    key.add("commands", commands.as_bytes());
    for file in &shared.sources {
        let bytes = std::fs::read(dir.join(file)).map_err(|e| format!("{file}: {}", io_message(&e)))?;
        key.add(file, &bytes);
    }
    let lines: Vec<Vec<String>> = commands.lines().filter_map(shlex::split).filter(|words| !words.is_empty()).collect();
    let compilers: std::collections::BTreeSet<&str> = lines.iter().map(|words| words[0].as_str()).collect();
    for compiler in compilers {
        let found = which(compiler).ok_or_else(|| format!("{compiler} is not found on PATH"))?;
        key.add("compiler", found.as_os_str().as_encoded_bytes());
        if let Ok(meta) = std::fs::metadata(&found) {
            let time = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).unwrap_or_default();
            key.add("compiler file", format!("{} {}", meta.len(), time.as_nanos()).as_bytes());
        }
        let ask = |args: &[&str]| -> std::result::Result<Vec<u8>, String> {
            let out = Command::new(compiler).args(args).output().map_err(|e| format!("cannot run {compiler}: {}", io_message(&e)))?;
            Ok([out.stdout, out.stderr].concat())
        };
        key.add("--version", &ask(&["--version"])?);
        // -march=native and its kin mean this machine's CPU: the driver's expansion of
        // them (-###) says which.
        let native: std::collections::BTreeSet<&str> =
            lines.iter().filter(|words| words[0] == compiler).flatten().map(String::as_str).filter(|w| w.contains("native")).collect();
        if !native.is_empty() {
            let native: Vec<&str> = native.into_iter().collect();
            key.add("native", &ask(&[native.as_slice(), &["-###", "-E", "-x", "c", "/dev/null"]].concat())?);
        }
    }
    for name in ["CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "COMPILER_PATH", "GCC_EXEC_PREFIX"] {
        if let Some(value) = std::env::var_os(name) {
            key.add(name, value.as_encoded_bytes());
        }
    }
    Ok(key.finish())
}

/// Where `PATH` finds `program` (a name without `/`), or `program` itself made absolute.
fn which(program: &str) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        return std::fs::canonicalize(program).ok();
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file()).and_then(|p| std::fs::canonicalize(p).ok())
}

/// Runs a toolchain command; its failure is an error of kind `Toolchain`.
pub fn run_tool(cmd: Command, tool: &str, install: &str) -> Result<()> {
    run_checked(cmd, tool, install, &[])
}

/// Runs a program built from the user's model: exit status `rejects` is the program
/// saying the user's data is wrong (an error of kind `User` with its message); each of
/// `statuses` is an error of that kind with the program's message and the note given;
/// any other failure is the toolchain's.
pub fn run_program(cmd: Command, tool: &str, install: &str, rejects: i32, statuses: &[(i32, ErrorKind, &str)]) -> Result<()> {
    let mut all = vec![(rejects, ErrorKind::User, "")];
    all.extend_from_slice(statuses);
    run_checked(cmd, tool, install, &all)
}

/// Runs `cmd`; an exit status among `statuses` is an error of its kind with the last
/// line the program printed (and the note, if any).
fn run_checked(mut cmd: Command, tool: &str, install: &str, statuses: &[(i32, ErrorKind, &str)]) -> Result<()> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| {
        Error::new(ErrorKind::Toolchain, format!("cannot run {tool}: {}", io_message(&e))).note(format!("install it: {install}"))
    })?;
    if let Some((_, kind, note)) = statuses.iter().find(|(status, _, _)| out.status.code() == Some(*status)) {
        let text = String::from_utf8_lossy(&out.stderr);
        let message = text.lines().last().unwrap_or_default();
        let message = message.split_once(": ").map_or(message, |(_, m)| m);
        let e = Error::new(*kind, format!("{tool}: {message}"));
        return Err(if note.is_empty() { e } else { e.note(*note) });
    }
    if !out.status.success() {
        let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        let tail: Vec<&str> = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
        return Err(Error::new(ErrorKind::Toolchain, format!("{tool} failed ({}): {shown}\n{}", out.status, tail.join("\n"))));
    }
    Ok(())
}

/// The pinned wheels of NVIDIA's that give a complete nvcc (CUDA 13.5; see
/// `../shared/TOOLCHAINS.md`), as `.ci/run` installs them.
pub const CUDA_WHEELS: &str = "nvidia-cuda-nvcc==13.5.37 nvidia-cuda-runtime==13.5.37 nvidia-cuda-cccl==13.3.5.0.6";

/// The pinned wheel of cuBLAS whose headers `--gemm cublaslt` compiles against (the
/// library itself is loaded at run time, `runtime-cuda/mr_cublaslt.h`); `.ci/run`
/// installs it beside [`CUDA_WHEELS`].
pub const CUBLAS_WHEEL: &str = "nvidia-cublas==13.5.1.27";

/// The compute capability of this machine's first NVIDIA GPU as nvcc names its
/// architecture (9.0: 90), from `nvidia-smi`; `None` without a GPU, a driver or
/// nvidia-smi.
pub fn local_gpu_arch() -> Option<u32> {
    let out = Command::new("nvidia-smi").args(["--query-gpu=compute_cap", "--format=csv,noheader"]).output().ok()?;
    out.status.success().then(|| parse_compute_cap(&String::from_utf8_lossy(&out.stdout))).flatten()
}

/// Whether this machine has the device nodes an NVIDIA driver makes: `/dev/nvidiactl`
/// (Linux), or `/dev/dxg` (WSL 2, whose GPUs the Windows driver serves). A GPU that
/// `nvidia-smi` cannot name (no nvidia-smi on `PATH`) still has them.
pub fn nvidia_device_nodes() -> bool {
    ["/dev/nvidiactl", "/dev/dxg"].iter().any(|p| std::path::Path::new(p).exists())
}

/// `nvidia-smi --query-gpu=compute_cap`'s first line ("9.0") as an architecture (90).
fn parse_compute_cap(text: &str) -> Option<u32> {
    let (major, minor) = text.lines().next()?.trim().split_once('.')?;
    let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    (minor < 10 && major < 100).then_some(major * 10 + minor)
}

/// nvcc, looked for in order: `$MITHRILC_NVCC`; `nvcc` on `PATH`; the pip wheels'
/// (`nvidia/cu13/bin/nvcc`) under the site-packages of the `python3` on `PATH`. None of
/// them is an error of kind `Toolchain` (exit 3) that gives the install command.
pub fn nvcc() -> Result<std::path::PathBuf> {
    find_nvcc(|name| std::env::var_os(name), python_site_packages)
}

/// [`nvcc`] with the environment and Python's site-packages given.
fn find_nvcc(env: impl Fn(&str) -> Option<std::ffi::OsString>, site_packages: impl FnOnce() -> Vec<std::path::PathBuf>) -> Result<std::path::PathBuf> {
    if let Some(p) = env("MITHRILC_NVCC").filter(|p| !p.is_empty()) {
        return Ok(p.into());
    }
    let on_path = env("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).map(|dir| dir.join("nvcc"));
    let in_wheels = || site_packages().into_iter().map(|dir| dir.join("nvidia/cu13/bin/nvcc"));
    on_path.chain(std::iter::once_with(in_wheels).flatten()).find(|p| p.is_file()).ok_or_else(|| {
        Error::new(ErrorKind::Toolchain, "nvcc not found (looked at $MITHRILC_NVCC, PATH, and python3's site-packages)")
            .note(format!("install it: pip install {CUDA_WHEELS} (or set MITHRILC_NVCC to an nvcc)"))
    })
}

/// The site-packages directories of the `python3` on `PATH` (none without one).
fn python_site_packages() -> Vec<std::path::PathBuf> {
    let script = "import site; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))";
    match Command::new("python3").args(["-c", script]).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).lines().map(std::path::PathBuf::from).collect(),
        _ => Vec::new(),
    }
}

/// The pinned prebuilt ggml (`libggml-python` on PyPI: ggml 0.20.2's shared libraries and
/// headers), as `.ci/run` installs it into a virtual environment named after it.
pub const GGML_WHEEL: &str = "libggml-python==0.20.2.post1";

/// Where a ggml to build against lives: its headers and its shared libraries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ggml {
    pub include: std::path::PathBuf,
    pub lib: std::path::PathBuf,
}

/// ggml, looked for in order: `$MITHRILC_GGML` (a prefix holding `include/ggml.h` and
/// `lib/` or `lib64/`); the wheel's `libggml/` in the cached virtual environment
/// `${XDG_CACHE_HOME:-~/.cache}/mithrilc/ggml-0.20.2.post1`. None of them is an error of
/// kind `Toolchain` (exit 3) that gives the install command.
pub fn ggml() -> Result<Ggml> {
    find_ggml(|name| std::env::var_os(name))
}

/// The virtual environment `.ci/run` installs [`GGML_WHEEL`] into.
fn ggml_venv(env: &impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<std::path::PathBuf> {
    let version = GGML_WHEEL.split_once("==").map_or(GGML_WHEEL, |(_, v)| v);
    Some(crate::cache::user_cache_dir(env)?.join(format!("ggml-{version}")))
}

/// [`ggml`] with the environment given.
fn find_ggml(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<Ggml> {
    let prefix = |dir: &Path| -> Option<Ggml> {
        let include = dir.join("include");
        let lib = ["lib", "lib64"].iter().map(|l| dir.join(l)).find(|l| l.join("libggml.so").exists())?;
        include.join("ggml.h").is_file().then_some(Ggml { include, lib })
    };
    if let Some(p) = env("MITHRILC_GGML").filter(|p| !p.is_empty()) {
        let dir = std::path::PathBuf::from(&p);
        return prefix(&dir).ok_or_else(|| {
            Error::new(ErrorKind::Toolchain, format!("MITHRILC_GGML={} holds no ggml (want include/ggml.h and lib/libggml.so or lib64/libggml.so)", dir.display()))
        });
    }
    let venv = ggml_venv(&env);
    // The wheel puts the prefix at site-packages/libggml, under lib/pythonX.Y/.
    let in_venv = venv.as_ref().and_then(|v| std::fs::read_dir(v.join("lib")).ok()).into_iter().flatten().flatten().map(|e| e.path().join("site-packages/libggml"));
    let mut found: Vec<std::path::PathBuf> = in_venv.collect();
    found.sort();
    found.iter().find_map(|d| prefix(d)).ok_or_else(|| {
        let v = venv.map_or_else(|| "~/.cache/mithrilc/ggml".to_string(), |v| v.display().to_string());
        Error::new(ErrorKind::Toolchain, format!("ggml not found (looked at $MITHRILC_GGML and {v})"))
            .note(format!("install it: python3 -m venv {v} && {v}/bin/pip install {GGML_WHEEL} (or set MITHRILC_GGML to a prefix with include/ and lib/)"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smis_compute_capability_is_an_architecture() {
        assert_eq!(parse_compute_cap("9.0\n"), Some(90));
        assert_eq!(parse_compute_cap("8.9\n8.0\n"), Some(89)); // the first GPU's
        assert_eq!(parse_compute_cap("12.0"), Some(120));
        assert_eq!(parse_compute_cap(""), None);
        assert_eq!(parse_compute_cap("[N/A]"), None);
        assert_eq!(parse_compute_cap("No devices were found"), None);
    }
    use std::collections::HashMap;
    use std::ffi::OsString;

    fn env(vars: &[(&str, &std::path::Path)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: HashMap<String, OsString> = vars.iter().map(|(k, v)| (k.to_string(), v.as_os_str().to_owned())).collect();
        move |name| vars.get(name).cloned()
    }

    /// `--cflags` and `$CC` reach the recipes as the words a shell would split them
    /// into, and nothing in them runs: not backquotes or `$(...)` in the shell, not
    /// make's `$(shell ...)`.
    #[test]
    fn flags_reach_make_as_words_and_nothing_in_them_runs() {
        if Command::new("make").arg("--version").output().is_err() {
            return println!("skipped: make is not installed");
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Makefile"), "all:\n\t@printf '%s\\n' $(CC) $(CFLAGS) > words.txt\n").unwrap();
        let cflags = r#"-O2 -DNAME="a b" `touch tick` $(touch dollar) $(shell touch made) '$$x' ;touch semi"#;
        let cc = "ccache 'my cc'";
        let mut make = make_in(dir.path());
        make.args(c_vars(cc, cflags).unwrap());
        run_tool(make, "make", "").unwrap();
        let words = std::fs::read_to_string(dir.path().join("words.txt")).unwrap();
        let want = ["ccache", "my cc", "-O2", "-DNAME=a b", "`touch", "tick`", "$(touch", "dollar)", "$(shell", "touch", "made)", "$$x", ";touch", "semi"];
        assert_eq!(words.lines().collect::<Vec<_>>(), want);
        for file in ["tick", "dollar", "made", "semi"] {
            assert!(!dir.path().join(file).exists(), "{file} was run");
        }
        let err = c_vars("cc", "-O2 'open").unwrap_err();
        assert_eq!((err.kind, err.to_string()), (ErrorKind::Usage, "--cflags \"-O2 'open\": a quote is not closed".to_string()));
        let err = c_vars("cc", "-O2 '-DX=a\nb'").unwrap_err();
        assert_eq!(err.to_string(), "--cflags \"-O2 '-DX=a\\nb'\": a control character (such as a line break) cannot be part of a flag");
    }

    #[test]
    fn nvcc_is_looked_for_in_order_and_its_absence_says_how_to_install_it() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, site) = (dir.path().join("bin"), dir.path().join("site"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(site.join("nvidia/cu13/bin")).unwrap();
        std::fs::write(site.join("nvidia/cu13/bin/nvcc"), "").unwrap();
        let wheels = || vec![site.clone()];
        // The variable wins, then PATH, then the wheels.
        let chosen = Path::new("/opt/cuda/bin/nvcc");
        assert_eq!(find_nvcc(env(&[("MITHRILC_NVCC", chosen), ("PATH", &bin)]), wheels).unwrap(), chosen);
        assert_eq!(find_nvcc(env(&[("PATH", &bin)]), wheels).unwrap(), site.join("nvidia/cu13/bin/nvcc"));
        std::fs::write(bin.join("nvcc"), "").unwrap();
        assert_eq!(find_nvcc(env(&[("PATH", &bin)]), wheels).unwrap(), bin.join("nvcc"));
        let missing = find_nvcc(env(&[]), Vec::new).unwrap_err();
        assert_eq!(missing.kind, ErrorKind::Toolchain);
        assert!(missing.to_string().contains(&format!("pip install {CUDA_WHEELS}")), "{missing}");
    }

    #[test]
    fn ggml_is_looked_for_in_order_and_its_absence_says_how_to_install_it() {
        let dir = tempfile::tempdir().unwrap();
        let make = |p: &Path, lib: &str| {
            std::fs::create_dir_all(p.join("include")).unwrap();
            std::fs::create_dir_all(p.join(lib)).unwrap();
            std::fs::write(p.join("include/ggml.h"), "").unwrap();
            std::fs::write(p.join(lib).join("libggml.so"), "").unwrap();
        };
        let (own, cache) = (dir.path().join("own"), dir.path().join("cache"));
        make(&own, "lib");
        let wheel = cache.join("mithrilc/ggml-0.20.2.post1/lib/python3.11/site-packages/libggml");
        make(&wheel, "lib64");
        let both = [("MITHRILC_GGML", own.as_path()), ("XDG_CACHE_HOME", cache.as_path())];
        assert_eq!(find_ggml(env(&both)).unwrap(), Ggml { include: own.join("include"), lib: own.join("lib") });
        assert_eq!(find_ggml(env(&both[1..])).unwrap(), Ggml { include: wheel.join("include"), lib: wheel.join("lib64") });
        let bad = find_ggml(env(&[("MITHRILC_GGML", dir.path())])).unwrap_err();
        assert_eq!(bad.kind, ErrorKind::Toolchain);
        assert!(bad.to_string().contains("holds no ggml"), "{bad}");
        let missing = find_ggml(env(&[("HOME", dir.path())])).unwrap_err();
        assert_eq!(missing.kind, ErrorKind::Toolchain);
        assert!(missing.to_string().contains(&format!("/bin/pip install {GGML_WHEEL}")), "{missing}");
    }

    /// `.ci/run` installs the ggml wheel this module names, where [`ggml_venv`] looks.
    #[test]
    fn ci_installs_the_pinned_ggml_wheel() {
        let ci = include_str!("../.ci/run");
        assert!(ci.contains(&format!("pip\" install -q {GGML_WHEEL}")), "{GGML_WHEEL}");
        assert!(ci.contains("mithrilc/ggml-0.20.2.post1\""));
    }

    /// `.ci/run` installs the wheels this module names.
    #[test]
    fn ci_installs_the_pinned_cuda_wheels() {
        assert!(include_str!("../.ci/run").contains(&format!("pip\" install -q {CUDA_WHEELS}")));
        assert!(include_str!("../.ci/run").contains(&format!("pip\" install -q {CUBLAS_WHEEL}")));
    }
}

/// A cross build's target (`compile --triple`): one word such as `aarch64-linux-gnu`
/// or `arm-none-eabi`, the prefix of its toolchain's programs (`TRIPLE-gcc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Triple(String);

impl Triple {
    /// A triple as given: ASCII letters, digits, `_`, `.` and `-`, with at least one
    /// `-` (it names programs and becomes words of the Makefile, never shell syntax).
    pub fn parse(text: &str) -> Result<Triple> {
        let word = text.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) && text.starts_with(|c: char| c.is_ascii_alphanumeric());
        if !word || !text.contains('-') {
            return Err(Error::usage(format!(
                "--triple wants a target triple such as aarch64-linux-gnu or arm-none-eabi (letters, digits and . _ -), not {text:?}"
            )));
        }
        Ok(Triple(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the target has an operating system (a shared library and the demo make
    /// sense): not `arm-none-eabi`, `riscv64-unknown-elf` and other bare-metal triples.
    pub fn hosted(&self) -> bool {
        !self.0.split('-').any(|part| part == "none" || part == "elf")
    }

    /// Whether programs built for it run on this machine: the same architecture and
    /// operating system.
    pub fn runs_here(&self) -> bool {
        let mut parts = self.0.split('-');
        let os = match std::env::consts::OS {
            "macos" => "darwin",
            os => os,
        };
        // (Apple spells AArch64 arm64.)
        let arch = parts.next().map(|a| if a == "arm64" { "aarch64" } else { a });
        arch == Some(std::env::consts::ARCH) && self.hosted() && self.0.contains(os)
    }

    /// Its C compiler: `$CC` when set (and not empty), else `TRIPLE-gcc`.
    pub fn c_compiler(&self) -> String {
        std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| format!("{}-gcc", self.0))
    }
}
