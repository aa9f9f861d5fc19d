//! Finding the Python that runs HLO: one with jax and jaxlib at the pinned version
//! ([`JAX_VERSION`]; the runner uses private jaxlib APIs, so no other version is
//! trusted). Looked for in order: `$MITHRILC_PYTHON`; the virtual environment `.ci/run`
//! creates, `${XDG_CACHE_HOME:-~/.cache}/mithrilc/jax-0.10.2/bin/python`; `python3` on
//! `PATH`. None is an error of kind `Toolchain` (exit 3) giving the install commands.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::error::{Error, ErrorKind, Result};

/// The jax and jaxlib version the runner is written for.
pub const JAX_VERSION: &str = "0.10.2";

/// What pip installs (numpy comes with them).
pub const JAX_WHEELS: &str = "jax==0.10.2 jaxlib==0.10.2";

/// The Python with the pinned jax, found once per process.
pub fn python() -> Result<PathBuf> {
    static FOUND: OnceLock<Result<PathBuf>> = OnceLock::new();
    FOUND.get_or_init(|| find_python(|name| std::env::var_os(name), has_pinned_jax)).clone()
}

/// The cached virtual environment's directory under the cache directory.
fn venv(env: &impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let cache = env("XDG_CACHE_HOME").filter(|p| !p.is_empty()).map(PathBuf::from).or_else(|| env("HOME").map(|h| Path::new(&h).join(".cache")))?;
    Some(cache.join(format!("mithrilc/jax-{JAX_VERSION}")))
}

/// [`python`] with the environment and the check of a Python given.
fn find_python(env: impl Fn(&str) -> Option<std::ffi::OsString>, ok: impl Fn(&Path) -> std::result::Result<(), String>) -> Result<PathBuf> {
    let venv_dir = venv(&env);
    let install = match &venv_dir {
        Some(v) => format!("python3 -m venv {0} && {0}/bin/pip install {JAX_WHEELS}", v.display()),
        None => format!("pip install {JAX_WHEELS}"),
    };
    let missing = |what: String| Error::new(ErrorKind::Toolchain, what).note(format!("install it: {install} (or set MITHRILC_PYTHON to a Python that has them)"));
    if let Some(p) = env("MITHRILC_PYTHON").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return match ok(&p) {
            Ok(()) => Ok(p),
            Err(why) => Err(missing(format!("MITHRILC_PYTHON={}: {why}", p.display()))),
        };
    }
    let cached = venv_dir.map(|v| v.join("bin/python")).filter(|p| p.is_file());
    let on_path = env("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).map(|dir| dir.join("python3")).find(|p| p.is_file());
    cached.into_iter().chain(on_path).find(|p| ok(p).is_ok()).ok_or_else(|| {
        missing(format!("no Python with jax {JAX_VERSION} and jaxlib {JAX_VERSION} found (looked at $MITHRILC_PYTHON, the cached virtual environment, python3 on PATH)"))
    })
}

/// Whether `python` has jax and jaxlib at [`JAX_VERSION`] (read from their metadata,
/// without importing them).
fn has_pinned_jax(python: &Path) -> std::result::Result<(), String> {
    let script = "import importlib.metadata as m\nfor p in ('jax', 'jaxlib'):\n    try: print(m.version(p))\n    except m.PackageNotFoundError: print('none')";
    let out = Command::new(python).args(["-c", script]).output().map_err(|e| format!("cannot run it: {}", crate::error::io_message(&e)))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let versions: Vec<&str> = text.lines().collect();
    if out.status.success() && versions == [JAX_VERSION, JAX_VERSION] {
        Ok(())
    } else if !out.status.success() {
        Err(format!("it fails: {}", String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or_default()))
    } else {
        Err(format!("it has jax {} and jaxlib {}, not {JAX_VERSION}", versions.first().unwrap_or(&"none"), versions.get(1).unwrap_or(&"none")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;

    fn env(vars: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: HashMap<String, OsString> = vars.iter().map(|(k, v)| (k.to_string(), v.as_os_str().to_owned())).collect();
        move |name| vars.get(name).cloned()
    }

    #[test]
    fn python_is_looked_for_in_order_and_its_absence_says_how_to_install_it() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, cache) = (dir.path().join("bin"), dir.path().join("cache"));
        let venv_python = cache.join("mithrilc/jax-0.10.2/bin/python");
        std::fs::create_dir_all(venv_python.parent().unwrap()).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("python3"), "").unwrap();
        let good = |p: &Path| if p.to_string_lossy().contains("good") || p.ends_with("python3") { Ok(()) } else { Err("it has jax 0.4.1 and jaxlib 0.4.1, not 0.10.2".to_string()) };
        // The variable wins, and is checked.
        let chosen = Path::new("/opt/good/python");
        assert_eq!(find_python(env(&[("MITHRILC_PYTHON", chosen), ("PATH", &bin)]), good).unwrap(), chosen);
        let bad = find_python(env(&[("MITHRILC_PYTHON", Path::new("/usr/bin/python3.9"))]), good).unwrap_err();
        assert_eq!(bad.kind, ErrorKind::Toolchain);
        assert_eq!(bad.message, "MITHRILC_PYTHON=/usr/bin/python3.9: it has jax 0.4.1 and jaxlib 0.4.1, not 0.10.2");
        // Then the cached environment (when it has jax), then PATH.
        assert_eq!(find_python(env(&[("XDG_CACHE_HOME", &cache), ("PATH", &bin)]), good).unwrap(), bin.join("python3"));
        std::fs::write(&venv_python, "").unwrap();
        let all_good = |_: &Path| Ok(());
        assert_eq!(find_python(env(&[("XDG_CACHE_HOME", &cache), ("PATH", &bin)]), all_good).unwrap(), venv_python);
        let none = |_: &Path| Err("no".to_string());
        let missing = find_python(env(&[("HOME", Path::new("/home/u"))]), none).unwrap_err();
        assert_eq!(missing.kind, ErrorKind::Toolchain);
        assert_eq!(missing.notes, vec!["install it: python3 -m venv /home/u/.cache/mithrilc/jax-0.10.2 && /home/u/.cache/mithrilc/jax-0.10.2/bin/pip install jax==0.10.2 jaxlib==0.10.2 (or set MITHRILC_PYTHON to a Python that has them)".to_string()]);
    }

    /// `.ci/run` installs the pinned wheels into the environment looked at here.
    #[test]
    fn ci_installs_the_pinned_jax() {
        let ci = include_str!("../../../.ci/run");
        assert!(ci.contains(&format!("install -q {JAX_WHEELS}")), "{ci}");
        assert!(ci.contains(&format!("mithrilc/jax-{JAX_VERSION}")), "{ci}");
    }
}
