//! Where CPython keeps what the frame walker reads, per minor version (x86_64/aarch64, LP64).
//!
//! Every number here was computed by the compiler from that version's own headers (public and
//! `internal/`) with `shim-tests/pylayout/pylayout.c`, and `tests/python_layouts.rs` checks
//! each one again, at test time, against the headers of every interpreter it finds (pyenv
//! builds, Debian's `libpython3.X-dev` of the interpreters `scripts/fetch-pythons.sh` sets up).
//! The names are the ones that program prints. Nothing is copied from other tools.
//!
//! - 3.10: `PyThreadState.frame` is a `PyFrameObject` chain (`f_back`, `f_code`, `f_lasti`
//!   counted in code units).
//! - 3.11, 3.12: `PyThreadState.cframe->current_frame` is a `_PyInterpreterFrame` chain
//!   (`previous`, `f_code`, `prev_instr` pointing at the last instruction started; 3.12 adds
//!   C-stack-owned shim frames, `owner >= owner.first_skipped`).
//! - 3.13, 3.14: the interpreter publishes the offsets in `_PyRuntime.debug_offsets`
//!   (`_Py_DebugOffsets`, cookie `xdebugpy`, `version` = `PY_VERSION_HEX`). Its own layout is
//!   stable only within a minor version, so the `dbg.*` entries say where each offset sits in
//!   it; the values are then read from the running interpreter. `f_executable` (a tagged
//!   `_PyStackRef` in 3.14) is masked to 8-byte alignment; `instr_ptr` points at the current
//!   instruction.
//!
//! Strings: only compact objects are read: ASCII data right after `PyASCIIObject`
//! (`str.ascii_size`), else the cached UTF-8 copy of `PyCompactUnicodeObject` (`str.utf8`,
//! `str.utf8_length`) when there is one. The `state` bit positions come from the bitfield.

/// A name and its value, as `pylayout.c` prints them.
pub type Entry = (&'static str, u64);

/// Entries common to 3.10 .. 3.12 objects (unchanged since 3.10 except where noted).
const V310: &[Entry] = &[
    ("obj.ob_type", 8),
    ("var.ob_size", 16),
    ("str.length", 16),
    ("str.state", 32),
    ("str.ascii_size", 48),
    ("str.utf8_length", 48),
    ("str.utf8", 56),
    ("str.kind_shift", 2),
    ("str.compact_bit", 5),
    ("str.ascii_bit", 6),
    ("bytes.sval", 32),
    ("code.filename", 104),
    ("code.name", 112),
    ("code.firstlineno", 40),
    ("code.linetable", 120),
    ("ts.frame", 24),
    ("frame.back", 24),
    ("frame.code", 32),
    ("frame.lasti", 96),
];

const V311: &[Entry] = &[
    ("obj.ob_type", 8),
    ("var.ob_size", 16),
    ("str.length", 16),
    ("str.state", 32),
    ("str.ascii_size", 48),
    ("str.utf8_length", 48),
    ("str.utf8", 56),
    ("str.kind_shift", 2),
    ("str.compact_bit", 5),
    ("str.ascii_bit", 6),
    ("bytes.sval", 32),
    ("code.filename", 112),
    ("code.name", 120),
    ("code.firstlineno", 72),
    ("code.linetable", 136),
    ("code.qualname", 128),
    ("code.adaptive", 184),
    ("codeunit.size", 2),
    ("ts.cframe", 56),
    ("cframe.current", 8),
    ("frame.previous", 48),
    ("frame.code", 32),
    ("frame.instr", 56),
    ("frame.owner", 69),
    ("owner.first_skipped", 256),
];

const V312: &[Entry] = &[
    ("obj.ob_type", 8),
    ("var.ob_size", 16),
    ("str.length", 16),
    ("str.state", 32),
    ("str.ascii_size", 40),
    ("str.utf8_length", 40),
    ("str.utf8", 48),
    ("str.kind_shift", 2),
    ("str.compact_bit", 5),
    ("str.ascii_bit", 6),
    ("bytes.sval", 32),
    ("code.filename", 112),
    ("code.name", 120),
    ("code.firstlineno", 68),
    ("code.linetable", 136),
    ("code.qualname", 128),
    ("code.adaptive", 192),
    ("codeunit.size", 2),
    ("ts.cframe", 56),
    ("cframe.current", 0),
    ("frame.previous", 8),
    ("frame.code", 0),
    ("frame.instr", 56),
    ("frame.owner", 70),
    ("owner.first_skipped", 3),
];

/// 3.13 and 3.14: only what `_Py_DebugOffsets` does not carry, and where it carries the rest.
const V313: &[Entry] = &[
    ("str.utf8_length", 40),
    ("str.utf8", 48),
    ("str.kind_shift", 2),
    ("str.compact_bit", 5),
    ("str.ascii_bit", 6),
    ("codeunit.size", 2),
    ("owner.first_skipped", 3),
    ("dbg.size", 584),
    ("dbg.version", 8),
    ("dbg.free_threaded", 16),
    ("dbg.ts.current_frame", 184),
    ("dbg.frame.previous", 232),
    ("dbg.frame.executable", 240),
    ("dbg.frame.instr_ptr", 248),
    ("dbg.frame.owner", 264),
    ("dbg.code.filename", 280),
    ("dbg.code.qualname", 296),
    ("dbg.code.linetable", 304),
    ("dbg.code.firstlineno", 312),
    ("dbg.code.adaptive", 344),
    ("dbg.obj.ob_type", 360),
    ("dbg.str.state", 544),
    ("dbg.str.length", 552),
    ("dbg.str.ascii_size", 560),
    ("dbg.bytes.size", 520),
    ("dbg.bytes.sval", 528),
];

const V314: &[Entry] = &[
    ("str.utf8_length", 40),
    ("str.utf8", 48),
    ("str.kind_shift", 2),
    ("str.compact_bit", 5),
    ("str.ascii_bit", 6),
    ("codeunit.size", 2),
    ("owner.first_skipped", 3),
    ("dbg.size", 760),
    ("dbg.version", 8),
    ("dbg.free_threaded", 16),
    ("dbg.ts.current_frame", 208),
    ("dbg.frame.previous", 256),
    ("dbg.frame.executable", 264),
    ("dbg.frame.instr_ptr", 272),
    ("dbg.frame.owner", 288),
    ("dbg.code.filename", 320),
    ("dbg.code.qualname", 336),
    ("dbg.code.linetable", 344),
    ("dbg.code.firstlineno", 352),
    ("dbg.code.adaptive", 384),
    ("dbg.obj.ob_type", 408),
    ("dbg.str.state", 624),
    ("dbg.str.length", 632),
    ("dbg.str.ascii_size", 640),
    ("dbg.bytes.size", 600),
    ("dbg.bytes.sval", 608),
];

/// The table for CPython 3.`minor`, or None for a version culedger does not know.
pub fn table(minor: u32) -> Option<&'static [Entry]> {
    match minor {
        10 => Some(V310),
        11 => Some(V311),
        12 => Some(V312),
        13 => Some(V313),
        14 => Some(V314),
        _ => None,
    }
}

/// Look up `name` in a table.
pub fn get(t: &[Entry], name: &str) -> Option<u64> {
    t.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
}

/// How the walker reaches the innermost frame and reads the instruction position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// 3.10: `PyFrameObject` chain, `f_lasti` in code units (int).
    FrameObjects,
    /// 3.11/3.12: `cframe->current_frame`, `prev_instr` = last instruction started.
    CFrame,
    /// 3.13+: `current_frame`, `instr_ptr` = current instruction.
    Direct,
}

/// Everything the walker needs, resolved for the running interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub minor: u32,
    pub shape: Shape,
    pub ts_frame: u64,
    pub cframe_current: u64,
    pub frame_previous: u64,
    pub frame_code: u64,
    pub frame_instr: u64,
    pub frame_owner: Option<u64>,
    pub owner_first_skipped: u64,
    pub ob_type: u64,
    pub code_filename: u64,
    /// `co_qualname` (3.11+) or `co_name` (3.10).
    pub code_qualname: u64,
    pub code_firstlineno: u64,
    pub code_linetable: u64,
    /// `co_code_adaptive` (3.11+).
    pub code_adaptive: u64,
    pub str_length: u64,
    pub str_state: u64,
    pub str_ascii_size: u64,
    pub str_utf8_length: u64,
    pub str_utf8: u64,
    pub str_kind_shift: u64,
    pub str_compact_bit: u64,
    pub str_ascii_bit: u64,
    pub bytes_size: u64,
    pub bytes_sval: u64,
}

impl Layout {
    /// The layout of a table-described version (3.10 .. 3.12).
    pub fn from_table(minor: u32) -> Option<Layout> {
        let t = table(minor)?;
        let g = |n: &str| get(t, n);
        let shape = match minor {
            10 => Shape::FrameObjects,
            11 | 12 => Shape::CFrame,
            _ => return None,
        };
        let (ts_frame, cframe_current, previous, instr, qualname, adaptive) = if shape == Shape::FrameObjects {
            (g("ts.frame")?, 0, g("frame.back")?, g("frame.lasti")?, g("code.name")?, 0)
        } else {
            (
                g("ts.cframe")?,
                g("cframe.current")?,
                g("frame.previous")?,
                g("frame.instr")?,
                g("code.qualname")?,
                g("code.adaptive")?,
            )
        };
        Some(Layout {
            minor,
            shape,
            ts_frame,
            cframe_current,
            frame_previous: previous,
            frame_code: g("frame.code")?,
            frame_instr: instr,
            frame_owner: g("frame.owner"),
            owner_first_skipped: g("owner.first_skipped").unwrap_or(256),
            ob_type: g("obj.ob_type")?,
            code_filename: g("code.filename")?,
            code_qualname: qualname,
            code_firstlineno: g("code.firstlineno")?,
            code_linetable: g("code.linetable")?,
            code_adaptive: adaptive,
            str_length: g("str.length")?,
            str_state: g("str.state")?,
            str_ascii_size: g("str.ascii_size")?,
            str_utf8_length: g("str.utf8_length")?,
            str_utf8: g("str.utf8")?,
            str_kind_shift: g("str.kind_shift")?,
            str_compact_bit: g("str.compact_bit")?,
            str_ascii_bit: g("str.ascii_bit")?,
            bytes_size: g("var.ob_size")?,
            bytes_sval: g("bytes.sval")?,
        })
    }

    /// The layout of 3.13+ from the interpreter's own `_Py_DebugOffsets`: `dbg(offset)` reads
    /// the u64 at that offset of `_PyRuntime`. None when a value is absurd.
    pub fn from_debug_offsets(minor: u32, mut dbg: impl FnMut(u64) -> Option<u64>) -> Option<Layout> {
        let t = table(minor).filter(|_| minor >= 13)?;
        let g = |n: &str| get(t, n);
        let mut at = |n: &str| -> Option<u64> { dbg(g(n)?).filter(|&v| v < 1 << 16) };
        Some(Layout {
            minor,
            shape: Shape::Direct,
            ts_frame: at("dbg.ts.current_frame")?,
            cframe_current: 0,
            frame_previous: at("dbg.frame.previous")?,
            frame_code: at("dbg.frame.executable")?,
            frame_instr: at("dbg.frame.instr_ptr")?,
            frame_owner: Some(at("dbg.frame.owner")?),
            owner_first_skipped: g("owner.first_skipped")?,
            ob_type: at("dbg.obj.ob_type")?,
            code_filename: at("dbg.code.filename")?,
            code_qualname: at("dbg.code.qualname")?,
            code_firstlineno: at("dbg.code.firstlineno")?,
            code_linetable: at("dbg.code.linetable")?,
            code_adaptive: at("dbg.code.adaptive")?,
            str_length: at("dbg.str.length")?,
            str_state: at("dbg.str.state")?,
            str_ascii_size: at("dbg.str.ascii_size")?,
            str_utf8_length: g("str.utf8_length")?,
            str_utf8: g("str.utf8")?,
            str_kind_shift: g("str.kind_shift")?,
            str_compact_bit: g("str.compact_bit")?,
            str_ascii_bit: g("str.ascii_bit")?,
            bytes_size: at("dbg.bytes.size")?,
            bytes_sval: at("dbg.bytes.sval")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_resolve() {
        for minor in [10, 11, 12] {
            let l = Layout::from_table(minor).unwrap_or_else(|| panic!("3.{minor}"));
            assert_eq!(l.minor, minor);
        }
        assert!(Layout::from_table(13).is_none(), "3.13 comes from debug offsets");
        assert!(table(9).is_none() && table(15).is_none());
        // A fake runtime whose debug offsets hold their own position: every value resolves.
        let l = Layout::from_debug_offsets(13, Some).unwrap();
        assert_eq!((l.ts_frame, l.frame_previous), (184, 232));
        assert!(Layout::from_debug_offsets(13, |_| Some(1 << 20)).is_none(), "absurd offsets");
        assert!(Layout::from_debug_offsets(12, Some).is_none());
    }
}
