//! The culedger command line and release library as built by `make`, for tests that run a
//! program and then ask the CLI about its reports.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::{repo_root, Sim};

/// `rel` under the repository (`target/release/culedger`, ...); panics with a hint when it is
/// not built.
pub fn built(rel: &str) -> PathBuf {
    let p = repo_root().join(rel);
    assert!(p.exists(), "{} is missing: run `make` first", p.display());
    p
}

/// `culedger ARGS` without colour: its exit code and standard output.
pub fn culedger(args: &[&str]) -> (i32, String) {
    let o = Command::new(built("target/release/culedger")).args(args).env("NO_COLOR", "1").output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned())
}

/// `culedger explain DIR --format json`: its exit code and document.
pub fn explain(dir: &Path) -> (i32, Value) {
    let (code, out) = culedger(&["explain", dir.to_str().unwrap(), "--format", "json"]);
    (code, serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}")))
}

/// The demo's machine (scripts/demo-config.sh): `devices` simulated GPUs of `total_mib`, peer
/// access costing 1 GiB, a graph instantiation 116 MiB.
pub fn demo_machine(sim: &mut Sim, devices: u32, total_mib: u64) -> &mut Sim {
    sim.env("FAKECUDA_DEVICES", devices.to_string())
        .env("FAKECUDA_TOTAL_MIB", total_mib.to_string())
        .env("FAKECUDA_PEER_MIB", "1024")
        .env("FAKECUDA_GRAPH_MIB", "116")
}
