//! Generated documentation is up to date: `docs/ops.md` is what the code says.
//! `UPDATE_EXPECT=1 cargo test --test suite docs::` rewrites it.

use std::path::Path;

#[test]
fn ops_table_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ops.md");
    let want = mithrilc::docs::ops_markdown();
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == want, "docs/ops.md is stale: run `UPDATE_EXPECT=1 cargo test --test suite docs::` and commit it");
}

/// Every command `mithrilc --help` lists has a row in `docs/cli.md`'s table.
#[test]
fn every_command_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_mithrilc")).arg("--help").output().expect("mithrilc starts");
    let help = String::from_utf8(help.stdout).expect("UTF-8 help");
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 6, "commands in --help: {commands:?}\n{help}");
    let doc = std::fs::read_to_string(root.join("docs/cli.md")).expect("docs/cli.md");
    for c in commands {
        assert!(doc.contains(&format!("| `{c} ")) || doc.contains(&format!("| `{c}` |")), "docs/cli.md has no row for `{c}`");
    }
}
