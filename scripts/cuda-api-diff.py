#!/usr/bin/env python3
"""What changed between two CUDA releases, for the hook table.

    scripts/cuda-api-diff.py OLD_INCLUDE_DIR NEW_INCLUDE_DIR [OLD_LIBCUDART NEW_LIBCUDART]

Compares, systematically:
  1. the driver ABIs: every `PFN_<base>_v<version>[_ptsz|_ptds]` typedef of cudaTypedefs.h (added,
     removed, changed signature), and the `#define PFN_<base> ...` aliases;
  2. the names cuda.h maps its API to (`#define cuMemAlloc cuMemAlloc_v2`, per-thread forms);
  3. the runtime API of cuda_runtime_api.h (declarations added, removed, changed);
  4. with two libcudart files: their exported (defined) dynamic symbols and symbol versions.
Reads the files only (pure Python, an ELF reader of its own); prints one line per difference.
Used for docs/cuda13.md (`make headers` fetches 12.9 into target/cuda-headers and 13.x into
target/cuda13/<version>).
"""
import re
import struct
import sys


def typedefs(include):
    text = open(f"{include}/cudaTypedefs.h").read()
    pfn = {}
    for m in re.finditer(r"typedef\s+CUresult\s+\(CUDAAPI\s+\*PFN_(\w+)\)\s*\(([^;]*)\);", text):
        pfn[m.group(1)] = " ".join(m.group(2).split())
    aliases = dict(re.findall(r"#define\s+PFN_(\w+)\s+PFN_(\w+)", text))
    return pfn, aliases


def header_defines(include):
    text = open(f"{include}/cuda.h").read()
    out = {}
    for m in re.finditer(r"^\s*#\s*define\s+(cu[A-Za-z0-9_]*)\s+(\S[^\n]*)$", text, flags=re.M):
        out.setdefault(m.group(1), set()).add(" ".join(m.group(2).split()))
    return {k: " | ".join(sorted(v)) for k, v in out.items()}


def runtime_api(include):
    text = re.sub(r"/\*.*?\*/", "", open(f"{include}/cuda_runtime_api.h").read(), flags=re.S)
    out = {}
    pat = r"extern\s+(?:__CUDA_DEPRECATED\s+)?__host__[^;{]*?CUDARTAPI\s+(\w+)\s*\(([^;{]*?)\)\s*;"
    for m in re.finditer(pat, text, flags=re.S):
        args = re.sub(r"\s*__dv\([^)]*\)", "", " ".join(m.group(2).split()))
        out.setdefault(m.group(1), args)
    return out


def elf_dynamic_symbols(path):
    """Defined dynamic symbols of an ELF64 little-endian shared object: {name: version or ''}."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit(f"{path}: not an ELF64 little-endian file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    by_type = {s[1]: s for s in sections}
    dynsym = by_type[11]  # SHT_DYNSYM
    strtab = sections[dynsym[6]]

    def cstr(tab, off):
        start = tab[4] + off
        return data[start:data.index(b"\0", start)].decode()

    count = dynsym[5] // dynsym[9]
    versym = by_type.get(0x6FFFFFFF)  # SHT_GNU_versym
    verdef = by_type.get(0x6FFFFFFD)  # SHT_GNU_verdef
    names = {}
    if verdef:
        off = verdef[4]
        for _ in range(verdef[7]):  # sh_info: number of entries
            _, _, ndx, cnt, _, aux, nxt = struct.unpack_from("<HHHHIII", data, off)
            if cnt:
                name_off, = struct.unpack_from("<I", data, off + aux)
                names[ndx] = cstr(sections[verdef[6]], name_off)
            off += nxt
    out = {}
    for i in range(1, count):
        name_off, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, dynsym[4] + i * dynsym[9])
        if shndx == 0 or info >> 4 == 0:  # undefined or local
            continue
        ver = ""
        if versym:
            v, = struct.unpack_from("<H", data, versym[4] + 2 * i)
            ver = names.get(v & 0x7FFF, "")
        out[cstr(strtab, name_off)] = ver
    return out


def diff(title, old, new, show=lambda v: v):
    print(f"## {title}: {len(old)} -> {len(new)}")
    for k in sorted(set(old) - set(new)):
        print(f"REMOVED {k} {show(old[k])}".rstrip())
    for k in sorted(set(new) - set(old)):
        print(f"ADDED   {k} {show(new[k])}".rstrip())
    for k in sorted(set(old) & set(new)):
        if old[k] != new[k]:
            print(f"CHANGED {k}\n    was {show(old[k])}\n    now {show(new[k])}")
    print()


def main(argv):
    if len(argv) not in (3, 5):
        sys.exit(__doc__)
    old_inc, new_inc = argv[1], argv[2]
    (old_pfn, old_alias), (new_pfn, new_alias) = typedefs(old_inc), typedefs(new_inc)
    diff("cudaTypedefs.h PFN typedefs", old_pfn, new_pfn, lambda a: f"({a})")
    diff("cudaTypedefs.h #define PFN_ aliases", old_alias, new_alias)
    diff("cuda.h #define cu*", header_defines(old_inc), header_defines(new_inc))
    diff("cuda_runtime_api.h declarations", runtime_api(old_inc), runtime_api(new_inc), lambda a: f"({a})")
    if len(argv) == 5:
        old, new = elf_dynamic_symbols(argv[3]), elf_dynamic_symbols(argv[4])
        print(f"## symbol versions: {sorted(set(old.values()))} -> {sorted(set(new.values()))}")
        diff("libcudart exported symbols", {k: "" for k in old}, {k: "" for k in new})


if __name__ == "__main__":
    main(sys.argv)
