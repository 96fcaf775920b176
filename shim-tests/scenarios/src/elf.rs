//! Minimal ELF64 little-endian reader for the dynamic linking facts tests check: `DT_NEEDED`,
//! `DT_SONAME`, the defined / undefined symbols of `.dynsym`, the addresses of the `.symtab`
//! symbols (to name an address inside a library, e.g. a culedger wrapper instance), the machine,
//! and the symbol versions the file needs (`.gnu.version_r`, `.gnu.version`).

use std::path::Path;

/// Dynamic-linking view of one ELF file.
#[derive(Debug, Default, Clone)]
pub struct DynInfo {
    /// `DT_NEEDED` entries, in order.
    pub needed: Vec<String>,
    /// `DT_SONAME`, if any.
    pub soname: Option<String>,
    /// Names of `.dynsym` symbols defined in the file (exported or not hidden).
    pub defined: Vec<String>,
    /// Names of `.dynsym` symbols the file needs from elsewhere.
    pub undefined: Vec<String>,
    /// Defined `.symtab` symbols (local ones included) and their addresses, sorted by address;
    /// empty for a stripped file.
    pub symtab: Vec<(u64, String)>,
    /// `e_machine` (62 x86_64, 183 aarch64).
    pub machine: u16,
    /// Every version the file needs (`.gnu.version_r`), e.g. `libc.so.6` `GLIBC_2.17`.
    pub version_needs: Vec<VersionNeed>,
    /// Undefined symbols bound to a needed version: (symbol, version), e.g. (`dlsym`, `GLIBC_2.34`).
    pub undefined_versions: Vec<(String, String)>,
}

/// One `Elf64_Vernaux` entry of `.gnu.version_r`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionNeed {
    /// The library that must define the version (`libc.so.6`).
    pub file: String,
    /// The version name (`GLIBC_2.17`).
    pub version: String,
    /// `VER_FLG_WEAK`: a missing version is not an error.
    pub weak: bool,
}

/// The highest `GLIBC_X.Y` the file needs, as (X, Y); `None` if it needs no glibc version.
pub fn max_glibc(info: &DynInfo) -> Option<(u32, u32)> {
    info.version_needs.iter().filter_map(|n| parse_glibc(&n.version)).max()
}

/// `GLIBC_2.17` -> (2, 17); `GLIBC_2.2.5` -> (2, 2); anything else -> None.
pub fn parse_glibc(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.strip_prefix("GLIBC_")?.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

impl DynInfo {
    /// The `.symtab` symbol at exactly `addr` (an offset from the load base for a shared object).
    pub fn symbol_at(&self, addr: u64) -> Option<&str> {
        let i = self.symtab.partition_point(|(a, _)| *a < addr);
        self.symtab.get(i).filter(|(a, _)| *a == addr).map(|(_, n)| n.as_str())
    }
}

const SHT_SYMTAB: u32 = 2;
const SHT_DYNAMIC: u32 = 6;
const SHT_DYNSYM: u32 = 11;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_SONAME: u64 = 14;
const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;
const SHT_GNU_VERSYM: u32 = 0x6fff_ffff;
const VER_FLG_WEAK: u16 = 2;

/// Reads `path`'s dynamic section and dynamic symbol table.
pub fn dyn_info(path: &Path) -> Result<DynInfo, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&data).map_err(|e| format!("{}: {e}", path.display()))
}

struct Section {
    kind: u32,
    offset: usize,
    size: usize,
    link: usize,
    entsize: usize,
}

fn parse(d: &[u8]) -> Result<DynInfo, String> {
    if d.len() < 64 || &d[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if d[4] != 2 || d[5] != 1 {
        return Err("only ELF64 little-endian is supported".into());
    }
    let shoff = u64_at(d, 0x28)? as usize;
    let shentsize = u16_at(d, 0x3a)? as usize;
    let shnum = u16_at(d, 0x3c)? as usize;
    let mut sections = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let s = shoff + i * shentsize;
        sections.push(Section {
            kind: u32_at(d, s + 4)?,
            offset: u64_at(d, s + 0x18)? as usize,
            size: u64_at(d, s + 0x20)? as usize,
            link: u32_at(d, s + 0x28)? as usize,
            entsize: u64_at(d, s + 0x38)? as usize,
        });
    }
    let strtab = |link: usize| -> Result<&[u8], String> {
        let s = sections.get(link).ok_or("bad section link")?;
        d.get(s.offset..s.offset + s.size).ok_or_else(|| "string table out of range".to_string())
    };
    let mut info = DynInfo { machine: u16_at(d, 0x12)?, ..DynInfo::default() };
    // Version index (vna_other) -> version name, for the undefined symbols' versions.
    let mut by_index = std::collections::HashMap::new();
    let mut versym: Option<&Section> = None;
    let mut undefined_at: Vec<(usize, String)> = Vec::new();
    for sec in &sections {
        match sec.kind {
            SHT_DYNAMIC => {
                let strs = strtab(sec.link)?;
                for off in (sec.offset..sec.offset + sec.size).step_by(16) {
                    let (tag, val) = (u64_at(d, off)?, u64_at(d, off + 8)? as usize);
                    match tag {
                        DT_NULL => break,
                        DT_NEEDED => info.needed.push(c_string(strs, val)?),
                        DT_SONAME => info.soname = Some(c_string(strs, val)?),
                        _ => {}
                    }
                }
            }
            SHT_DYNSYM => {
                let strs = strtab(sec.link)?;
                let entsize = if sec.entsize == 0 { 24 } else { sec.entsize };
                // Entry 0 is the reserved null symbol.
                for off in (sec.offset..sec.offset + sec.size).step_by(entsize).skip(1) {
                    let name = c_string(strs, u32_at(d, off)? as usize)?;
                    if name.is_empty() {
                        continue;
                    }
                    if u16_at(d, off + 6)? == 0 {
                        undefined_at.push(((off - sec.offset) / entsize, name.clone()));
                        info.undefined.push(name);
                    } else {
                        info.defined.push(name);
                    }
                }
            }
            SHT_SYMTAB => {
                let strs = strtab(sec.link)?;
                let entsize = if sec.entsize == 0 { 24 } else { sec.entsize };
                for off in (sec.offset..sec.offset + sec.size).step_by(entsize).skip(1) {
                    let (shndx, value) = (u16_at(d, off + 6)?, u64_at(d, off + 8)?);
                    if shndx != 0 && value != 0 {
                        info.symtab.push((value, c_string(strs, u32_at(d, off)? as usize)?));
                    }
                }
            }
            SHT_GNU_VERNEED => {
                let strs = strtab(sec.link)?;
                let mut need = sec.offset;
                // Bounded by the section size: a corrupt chain cannot loop.
                for _ in 0..sec.size / 16 {
                    let (count, file, aux, next) =
                        (u16_at(d, need + 2)?, u32_at(d, need + 4)?, u32_at(d, need + 8)?, u32_at(d, need + 12)?);
                    let file = c_string(strs, file as usize)?;
                    let mut a = need + aux as usize;
                    for _ in 0..count {
                        let (flags, index, name, anext) =
                            (u16_at(d, a + 4)?, u16_at(d, a + 6)?, u32_at(d, a + 8)?, u32_at(d, a + 12)?);
                        let version = c_string(strs, name as usize)?;
                        by_index.insert(index, version.clone());
                        info.version_needs.push(VersionNeed {
                            file: file.clone(),
                            version,
                            weak: flags & VER_FLG_WEAK != 0,
                        });
                        a += anext as usize;
                    }
                    if next == 0 {
                        break;
                    }
                    need += next as usize;
                }
            }
            SHT_GNU_VERSYM => versym = Some(sec),
            _ => {}
        }
    }
    if let Some(vs) = versym {
        for (i, name) in undefined_at {
            if let Some(v) = by_index.get(&(u16_at(d, vs.offset + 2 * i)? & 0x7fff)) {
                info.undefined_versions.push((name, v.clone()));
            }
        }
    }
    info.symtab.sort();
    Ok(info)
}

fn bytes<const N: usize>(d: &[u8], at: usize) -> Result<[u8; N], String> {
    d.get(at..at + N).and_then(|b| b.try_into().ok()).ok_or_else(|| format!("truncated at {at:#x}"))
}
fn u16_at(d: &[u8], at: usize) -> Result<u16, String> {
    bytes(d, at).map(u16::from_le_bytes)
}
fn u32_at(d: &[u8], at: usize) -> Result<u32, String> {
    bytes(d, at).map(u32::from_le_bytes)
}
fn u64_at(d: &[u8], at: usize) -> Result<u64, String> {
    bytes(d, at).map(u64::from_le_bytes)
}
fn c_string(strs: &[u8], at: usize) -> Result<String, String> {
    let tail = strs.get(at..).ok_or("string offset out of range")?;
    let end = tail.iter().position(|&b| b == 0).ok_or("unterminated string")?;
    Ok(String::from_utf8_lossy(&tail[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_system_binary() {
        // Every dynamically linked program on Linux needs libc.
        let info = dyn_info(Path::new("/bin/sh")).expect("parse /bin/sh");
        assert!(info.needed.iter().any(|n| n.starts_with("libc.so")), "{info:?}");
        assert!(!info.undefined.is_empty());
        assert_eq!(info.machine, if cfg!(target_arch = "x86_64") { 62 } else { 183 });
        // glibc's own versions: every program needs at least the architecture's base version.
        assert!(max_glibc(&info).is_some_and(|v| v >= (2, 2)), "{info:?}");
        assert!(info.undefined_versions.iter().any(|(_, v)| v.starts_with("GLIBC_")), "{info:?}");
        assert_eq!(parse_glibc("GLIBC_2.2.5"), Some((2, 2)));
        assert_eq!(parse_glibc("GLIBC_2.34"), Some((2, 34)));
        assert_eq!(parse_glibc("GLIBC_PRIVATE"), None);
        assert!(parse(b"not an elf at all, just some bytes padding the header out to 64 bytes.....").is_err());
    }
}
