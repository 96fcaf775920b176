//! Minimal ELF64 little-endian reader for the dynamic linking facts tests check: `DT_NEEDED`,
//! `DT_SONAME`, the defined / undefined symbols of `.dynsym`, and the addresses of the
//! `.symtab` symbols (to name an address inside a library, e.g. a culedger wrapper instance).

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
    let mut info = DynInfo::default();
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
            _ => {}
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
        assert!(parse(b"not an elf at all, just some bytes padding the header out to 64 bytes.....").is_err());
    }
}
