//! Generated documentation is up to date: `docs/ops.md` is what the code says.
//! `UPDATE_EXPECT=1 cargo test --test docs` rewrites it.

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
    assert!(have == want, "docs/ops.md is stale: run `UPDATE_EXPECT=1 cargo test --test docs` and commit it");
}
