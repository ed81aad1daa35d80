//! The fault-injection layer's tests: built apart, with the
//! `fault-injection` feature of rdma-core and rdma-safe, which the
//! workspace build leaves off (the feature changes what the data path
//! compiles to, and the other tests measure or count that path).

use crate::artifacts::{self, Artifact};
use crate::workspace::Workspace;
use crate::Result;

/// The test targets of rdma-safe that only have tests with the feature
/// (built without it, they are empty).
pub(super) const TARGETS: [&str; 5] = [
    "faults_posts",
    "faults_completions",
    "faults_control",
    "faults_events",
    "oracle",
];

/// Builds rdma-core's unit tests (the schedule and the oracle) and
/// rdma-safe's [`TARGETS`] with the feature; their labels say so.
pub(super) fn build(ws: &Workspace) -> Result<Vec<Artifact>> {
    let mut args = vec![
        "test",
        "-p",
        "rdma-rs-core",
        "-p",
        "rdma-safe",
        "--features",
        "rdma-rs-core/fault-injection,rdma-safe/fault-injection",
        "--no-run",
        "--lib",
    ];
    for t in TARGETS {
        args.extend(["--test", t]);
    }
    let built = artifacts::cargo_executables(ws, &args)?;
    Ok(built
        .into_iter()
        .filter(|a| a.test && (a.kind == "test" || a.package == "rdma-rs-core"))
        .map(|mut a| {
            a.package = format!("{} +fault-injection", a.package);
            a
        })
        .collect())
}

/// Whether `a` is one of [`TARGETS`] built without the feature.
pub(super) fn is_empty_without_the_feature(a: &Artifact) -> bool {
    a.package == "rdma-safe" && a.kind == "test" && TARGETS.contains(&a.name.as_str())
}
