//! The CPython interpreters present on this machine, for the call-site tests: `python3` on the
//! PATH, Debian's `/usr/bin/python3.X`, pyenv's builds (`$PYENV_ROOT` or `~/.pyenv`), and the
//! ones `scripts/fetch-pythons.sh` sets up under `target/pythons/*/python`. Each is listed
//! once (by the real path of its executable), with its version and header directory.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One interpreter.
#[derive(Clone, Debug)]
pub struct Python {
    /// What to run (a launcher for the Debian builds that need their own loader).
    pub command: PathBuf,
    pub major: u32,
    pub minor: u32,
    /// `3.11.7`.
    pub version: String,
    /// `sysconfig.get_paths()["include"]`, when it holds `Python.h`.
    pub include: Option<PathBuf>,
    /// The executable's real path (what tells two commands apart).
    pub executable: PathBuf,
}

impl Python {
    /// `-I` flags to compile against this interpreter's headers (internal ones included); the
    /// parent directory too, where Debian's multiarch `pyconfig.h` is found.
    pub fn include_flags(&self) -> Vec<String> {
        let Some(inc) = &self.include else { return Vec::new() };
        let mut v = vec![format!("-I{}", inc.display())];
        if let Some(parent) = inc.parent() {
            v.push(format!("-I{}", parent.display()));
        }
        v
    }

    pub fn label(&self) -> String {
        format!("Python {} ({})", self.version, self.command.display())
    }
}

fn candidates() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = vec!["python3".into(), "/usr/bin/python3".into()];
    v.extend((8..=15).map(|m| PathBuf::from(format!("/usr/bin/python3.{m}"))));
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")));
    for root in
        [pyenv.map(|p| p.join("versions")), Some(crate::repo_root().join("target/pythons"))].into_iter().flatten()
    {
        let Ok(rd) = std::fs::read_dir(&root) else { continue };
        let mut dirs: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        dirs.sort();
        for d in dirs {
            for exe in [d.join("bin/python3"), d.join("python")] {
                if exe.is_file() {
                    v.push(exe);
                }
            }
        }
    }
    v
}

fn probe(cmd: &Path) -> Option<Python> {
    let out = Command::new(cmd)
        .args([
            "-c",
            "import os, sys, sysconfig; i = sys.version_info; \
             print(i[0], i[1], '%d.%d.%d' % i[:3], sysconfig.get_paths()['include'], os.path.realpath(sys.executable), sep='\\n')",
        ])
        .env_remove("LD_PRELOAD")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let mut l = text.lines();
    let (major, minor) = (l.next()?.parse().ok()?, l.next()?.parse().ok()?);
    let version = l.next()?.to_string();
    let include = PathBuf::from(l.next()?);
    let executable = PathBuf::from(l.next()?);
    let include = include.join("Python.h").is_file().then_some(include);
    Some(Python { command: cmd.to_path_buf(), major, minor, version, include, executable })
}

/// Every interpreter found (any version), each once, sorted by version.
pub fn all() -> Vec<Python> {
    let mut found: Vec<Python> = Vec::new();
    for c in candidates() {
        if let Some(p) = probe(&c) {
            if !found.iter().any(|f| f.executable == p.executable) {
                found.push(p);
            }
        }
    }
    found.sort_by(|a, b| (a.major, a.minor, &a.version).cmp(&(b.major, b.minor, &b.version)));
    found
}

/// The interpreters culedger reads frames of (3.10 to 3.14).
pub fn supported() -> Vec<Python> {
    all().into_iter().filter(|p| p.major == 3 && (10..=14).contains(&p.minor)).collect()
}
