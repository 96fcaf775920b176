//! `culedger run` writes `summary.json` as the library writes reports: private (mode 0600 unless
//! `CULEDGER_MODE` says otherwise, whatever the umask) and created without following a symlink
//! planted at its temporary name.

mod common;
use common::*;

use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::Command;

fn mode_of(p: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn summary_is_private_and_never_written_through_a_symlink() {
    for (mode, want) in [(None, 0o600), (Some("0640"), 0o640), (Some("bogus"), 0o600)] {
        let d = tempdir();
        let lib = stub_lib(d.path(), "libstub");
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_culedger"));
        cmd.args(["run", "-o", out.to_str().unwrap(), "--lib", lib.to_str().unwrap(), "--", "true"])
            .env_remove("CULEDGER_MODE");
        if let Some(m) = mode {
            cmd.env("CULEDGER_MODE", m);
        }
        let (o, v) = (out.clone(), victim.clone());
        // In the child before exec (its pid is the CLI's): plant the first temporary names, and
        // a umask that would hide the file from the group.
        // SAFETY: symlink(2) and umask(2) only, on paths prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                libc::umask(0o077);
                let pid = std::process::id();
                symlink(&v, o.join(format!("summary.json.tmp.{pid}")))?;
                symlink(&v, o.join(format!("summary.json.tmp.{pid}.0")))?;
                symlink(&v, o.join(format!("summary.json.tmp.{pid}.1")))?;
                Ok(())
            });
        }
        let result = cmd.output().unwrap();
        assert_eq!(result.status.code(), Some(0), "{}", stderr(&result));
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "a planted temporary name was followed");
        let summary = out.join("summary.json");
        assert!(std::fs::symlink_metadata(&summary).unwrap().file_type().is_file());
        assert_eq!(mode_of(&summary), want, "CULEDGER_MODE={mode:?}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
        assert_eq!(v["schema"], "culedger-summary/1");
    }
}
