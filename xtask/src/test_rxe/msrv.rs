//! The declared minimum Rust version, checked against what this machine
//! can reach (one toolchain, no older compiler to build with): every crate
//! the library crates build with — their normal and build dependencies,
//! all features on, as `Cargo.lock` resolves them — declares a
//! `rust-version` no newer than the workspace's. Clippy's
//! `incompatible_msrv` lint (in `.ci/run`'s clippy step) checks the
//! standard library APIs the workspace calls against the same version.

use super::packages::PACKAGES;
use crate::workspace::{self, Workspace};
use crate::Result;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A version as its numeric parts ("1.85" -> [1, 85, 0]).
fn parts(v: &str) -> [u64; 3] {
    let mut out = [0; 3];
    for (slot, p) in out.iter_mut().zip(v.split('.')) {
        *slot = p.parse().unwrap_or(0);
    }
    out
}

/// What `cargo metadata` says: the workspace's declared version, and for
/// each library crate the dependencies (name version, rust-version) that
/// declare a newer one.
pub(super) fn check(ws: &Workspace) -> Result<(String, BTreeMap<String, Vec<String>>)> {
    let mut cmd = workspace::cargo();
    cmd.args([
        "metadata",
        "--format-version",
        "1",
        "--all-features",
        "--locked",
    ])
    .current_dir(&ws.root);
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let meta: Value = serde_json::from_slice(&out.stdout)?;
    Ok(newer_than_declared(&meta))
}

/// The check on parsed metadata (see [`check`]).
fn newer_than_declared(meta: &Value) -> (String, BTreeMap<String, Vec<String>>) {
    let empty = Vec::new();
    let packages = meta["packages"].as_array().unwrap_or(&empty);
    let by_id: BTreeMap<&str, &Value> = packages
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: BTreeMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let rust_version = |p: &Value| p["rust_version"].as_str().map(str::to_owned);
    let declared = packages
        .iter()
        .find(|p| p["name"] == PACKAGES[2])
        .and_then(rust_version)
        .unwrap_or_default();
    let mut found = BTreeMap::new();
    for name in PACKAGES {
        let Some(root) = packages.iter().find(|p| p["name"] == name) else {
            continue;
        };
        let mut seen = BTreeSet::new();
        let mut stack = vec![root["id"].as_str().unwrap_or_default()];
        let mut newer = Vec::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            if let Some(p) = by_id.get(id) {
                if let Some(v) = rust_version(p).filter(|v| parts(v) > parts(&declared)) {
                    newer.push(format!(
                        "{} {} (rust-version {v})",
                        p["name"].as_str().unwrap_or("?"),
                        p["version"].as_str().unwrap_or("?")
                    ));
                }
            }
            let deps = nodes
                .get(id)
                .and_then(|n| n["deps"].as_array())
                .unwrap_or(&empty);
            for d in deps {
                let kinds = d["dep_kinds"].as_array().unwrap_or(&empty);
                // Normal (null) and build dependencies: what a user's build
                // compiles; dev-dependencies are the workspace's own tests.
                if kinds
                    .iter()
                    .any(|k| k["kind"].is_null() || k["kind"] == "build")
                {
                    if let Some(pkg) = d["pkg"].as_str() {
                        stack.push(pkg);
                    }
                }
            }
        }
        found.insert(name.to_owned(), newer);
    }
    (declared, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(tokio_rust_version: &str) -> Value {
        serde_json::json!({
            "packages": [
                {"id": "safe", "name": "rdma-safe", "version": "0.1.0", "rust_version": "1.85"},
                {"id": "core", "name": "rdma-rs-core", "version": "0.1.0", "rust_version": "1.85"},
                {"id": "sys", "name": "rdma-rs-sys", "version": "0.1.0", "rust_version": "1.85"},
                {"id": "tokio", "name": "tokio", "version": "1.99.0", "rust_version": tokio_rust_version},
                {"id": "trybuild", "name": "trybuild", "version": "1.0.0", "rust_version": "1.99"},
            ],
            "resolve": {"nodes": [
                {"id": "safe", "deps": [
                    {"pkg": "core", "dep_kinds": [{"kind": null}]},
                    {"pkg": "tokio", "dep_kinds": [{"kind": null}]},
                    {"pkg": "trybuild", "dep_kinds": [{"kind": "dev"}]},
                ]},
                {"id": "core", "deps": [{"pkg": "sys", "dep_kinds": [{"kind": null}]}]},
                {"id": "sys", "deps": []},
                {"id": "tokio", "deps": []},
                {"id": "trybuild", "deps": []},
            ]},
        })
    }

    #[test]
    fn a_dependency_newer_than_declared_is_named_and_dev_dependencies_are_not() {
        let (declared, found) = newer_than_declared(&meta("1.90"));
        assert_eq!(declared, "1.85");
        assert_eq!(found["rdma-safe"], ["tokio 1.99.0 (rust-version 1.90)"]);
        assert!(found["rdma-rs-core"].is_empty() && found["rdma-rs-sys"].is_empty());
        let (_, found) = newer_than_declared(&meta("1.85.1"));
        assert_eq!(found["rdma-safe"].len(), 1, "patch versions compare too");
        let (_, found) = newer_than_declared(&meta("1.70"));
        assert!(found.values().all(Vec::is_empty));
    }
}
