//! Finding the Python that runs HLO: one with jax and jaxlib at the pinned version
//! ([`JAX_VERSION`]; the runner uses private jaxlib APIs, so no other version is
//! trusted) and the safetensors package whose reader the runner reads weights with
//! ([`SAFETENSORS_VERSION`], the version its refusals are tested with). Looked for in order: `$MITHRILC_PYTHON`; the virtual environment `.ci/run`
//! creates, `${XDG_CACHE_HOME:-~/.cache}/mithrilc/jax-0.10.2/bin/python`; `python3` on
//! `PATH`. None is an error of kind `Toolchain` (exit 3) giving the install commands.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::error::{Error, ErrorKind, Result};

/// The jax and jaxlib version the runner is written for.
pub const JAX_VERSION: &str = "0.10.2";

/// The safetensors version the runner reads weights with.
pub const SAFETENSORS_VERSION: &str = "0.8.0";

/// What pip installs for the runner: the checked packages ([`PINNED`]), and the NumPy
/// they were tested with (any that jax accepts reads .npy files alike, so it is pinned
/// here but not checked).
pub const RUNNER_WHEELS: &str = "jax==0.10.2 jaxlib==0.10.2 safetensors==0.8.0 numpy==2.4.6";

/// The packages a Python must have, at these versions, to run the runner.
pub const PINNED: [(&str, &str); 3] = [("jax", JAX_VERSION), ("jaxlib", JAX_VERSION), ("safetensors", SAFETENSORS_VERSION)];

/// The Python with the pinned jax, found once per process.
pub fn python() -> Result<PathBuf> {
    static FOUND: OnceLock<Result<PathBuf>> = OnceLock::new();
    FOUND.get_or_init(|| find_python(|name| std::env::var_os(name), has_pinned_packages)).clone()
}

/// The cached virtual environment's directory under the cache directory.
fn venv(env: &impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    Some(crate::cache::user_cache_dir(env)?.join(format!("jax-{JAX_VERSION}")))
}

/// [`python`] with the environment and the check of a Python given.
fn find_python(env: impl Fn(&str) -> Option<std::ffi::OsString>, ok: impl Fn(&Path) -> std::result::Result<(), String>) -> Result<PathBuf> {
    let venv_dir = venv(&env);
    let install = match &venv_dir {
        Some(v) => format!("python3 -m venv {0} && {0}/bin/pip install {RUNNER_WHEELS}", v.display()),
        None => format!("pip install {RUNNER_WHEELS}"),
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
        let wanted: Vec<String> = PINNED.iter().map(|(p, v)| format!("{p} {v}")).collect();
        missing(format!("no Python with {} found (looked at $MITHRILC_PYTHON, the cached virtual environment, python3 on PATH)", wanted.join(", ")))
    })
}

/// Whether `python` has every package of [`PINNED`] at its version (read from their
/// metadata, without importing them).
fn has_pinned_packages(python: &Path) -> std::result::Result<(), String> {
    let names: Vec<String> = PINNED.iter().map(|(p, _)| format!("'{p}'")).collect();
    let script = format!(
        "import importlib.metadata as m\nfor p in ({},):\n    try: print(m.version(p))\n    except m.PackageNotFoundError: print('none')",
        names.join(", ")
    );
    let out = Command::new(python).args(["-c", &script]).output().map_err(|e| format!("cannot run it: {}", crate::error::io_message(&e)))?;
    if !out.status.success() {
        return Err(format!("it fails: {}", String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or_default()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let found: Vec<&str> = text.lines().collect();
    wrong_versions(&found)
}

/// The versions `found` (per package of [`PINNED`], `none` for a missing one) when they
/// are the pinned ones, or what differs.
fn wrong_versions(found: &[&str]) -> std::result::Result<(), String> {
    let wrong: Vec<String> = PINNED
        .iter()
        .enumerate()
        .filter_map(|(i, (p, want))| match found.get(i).copied().unwrap_or("none") {
            v if v == *want => None,
            "none" => Some(format!("no {p}")),
            v => Some(format!("{p} {v}, not {want}")),
        })
        .collect();
    if wrong.is_empty() { Ok(()) } else { Err(format!("it has {}", wrong.join("; "))) }
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
        let good = |p: &Path| if p.to_string_lossy().contains("good") || p.ends_with("python3") { Ok(()) } else { Err("it has jax 0.4.1, not 0.10.2".to_string()) };
        // The variable wins, and is checked.
        let chosen = Path::new("/opt/good/python");
        assert_eq!(find_python(env(&[("MITHRILC_PYTHON", chosen), ("PATH", &bin)]), good).unwrap(), chosen);
        let bad = find_python(env(&[("MITHRILC_PYTHON", Path::new("/usr/bin/python3.9"))]), good).unwrap_err();
        assert_eq!(bad.kind, ErrorKind::Toolchain);
        assert_eq!(bad.message, "MITHRILC_PYTHON=/usr/bin/python3.9: it has jax 0.4.1, not 0.10.2");
        // Then the cached environment (when it has jax), then PATH.
        assert_eq!(find_python(env(&[("XDG_CACHE_HOME", &cache), ("PATH", &bin)]), good).unwrap(), bin.join("python3"));
        std::fs::write(&venv_python, "").unwrap();
        let all_good = |_: &Path| Ok(());
        assert_eq!(find_python(env(&[("XDG_CACHE_HOME", &cache), ("PATH", &bin)]), all_good).unwrap(), venv_python);
        let none = |_: &Path| Err("no".to_string());
        let missing = find_python(env(&[("HOME", Path::new("/home/u"))]), none).unwrap_err();
        assert_eq!(missing.kind, ErrorKind::Toolchain);
        assert_eq!(missing.message, "no Python with jax 0.10.2, jaxlib 0.10.2, safetensors 0.8.0 found (looked at $MITHRILC_PYTHON, the cached virtual environment, python3 on PATH)");
        assert_eq!(missing.notes, vec!["install it: python3 -m venv /home/u/.cache/mithrilc/jax-0.10.2 && /home/u/.cache/mithrilc/jax-0.10.2/bin/pip install jax==0.10.2 jaxlib==0.10.2 safetensors==0.8.0 numpy==2.4.6 (or set MITHRILC_PYTHON to a Python that has them)".to_string()]);
    }

    /// A Python lacking safetensors, or with another version of any pinned package, is
    /// refused, saying what differs.
    #[test]
    fn every_pinned_package_is_checked() {
        assert_eq!(wrong_versions(&["0.10.2", "0.10.2", "0.8.0"]), Ok(()));
        assert_eq!(wrong_versions(&["0.10.2", "0.10.2", "none"]), Err("it has no safetensors".to_string()));
        assert_eq!(wrong_versions(&["0.4.1", "0.10.2", "0.7.0"]), Err("it has jax 0.4.1, not 0.10.2; safetensors 0.7.0, not 0.8.0".to_string()));
        assert_eq!(wrong_versions(&[]), Err("it has no jax; no jaxlib; no safetensors".to_string()));
    }

    /// The runner pins, names in its install command and exits with what mithrilc
    /// expects of it.
    #[test]
    fn the_runner_agrees_on_versions_and_exit_statuses() {
        let runner = crate::codegen::xla::RUNNER;
        assert!(runner.contains(&format!("JAX_VERSION = \"{JAX_VERSION}\"\n")));
        assert!(runner.contains(&format!("SAFETENSORS_VERSION = \"{SAFETENSORS_VERSION}\"\n")));
        assert!(runner.contains(&format!("INSTALL = \"pip install {RUNNER_WHEELS}\"\n")));
        assert!(runner.contains(&format!("pip install {RUNNER_WHEELS}\n")), "the docstring's install command");
        use crate::codegen::xla::*;
        for (name, status) in [("DATA", RUNNER_DATA_EXIT), ("USAGE", RUNNER_USAGE_EXIT), ("TOOLCHAIN", RUNNER_TOOLCHAIN_EXIT), ("REJECTED", RUNNER_REJECTED_EXIT), ("XLA", RUNNER_XLA_EXIT)] {
            assert!(runner.contains(&format!("\nEXIT_{name} = {status}\n")), "EXIT_{name}");
            assert!(runner.contains(&format!("\n  {status}  ")), "the docstring's status {status}");
        }
    }

    /// `.ci/run` installs the pinned wheels into the environment looked at here.
    #[test]
    fn ci_installs_the_pinned_jax() {
        let ci = include_str!("../../../.ci/run");
        assert!(ci.contains(&format!("install -q {RUNNER_WHEELS}")), "{ci}");
        assert!(ci.contains(&format!("mithrilc/jax-{JAX_VERSION}")), "{ci}");
    }
}
