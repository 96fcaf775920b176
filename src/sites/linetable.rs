//! Line numbers from a code object's line table (pure, bounded).
//!
//! Two formats, both documented in CPython's own source tree:
//! - 3.11 and later: the location table of `Objects/locations.md`. Entries start with a byte
//!   whose top bit is set: bits 3..6 are the code, bits 0..2 the length in code units minus 1.
//!   Code 15: no location; 14: long form (signed varint line delta, then three varints);
//!   13: no column (signed varint line delta); 10..12: one-line form (line delta code-10, two
//!   bytes of columns); 0..9: short form (same line, one byte of columns). Varints are 6-bit
//!   chunks, bit 6 set when another chunk follows; signed varints keep the sign in bit 0.
//! - 3.10: `Objects/lnotab_notes.txt`: pairs (bytecode delta in bytes, signed line delta),
//!   a line delta of -128 meaning "no line".
//!
//! Both functions take the table bytes and a bytecode offset and return the line of the
//! instruction at that offset, or None (no line, offset outside the table, malformed table).

/// Entries decoded at most; longer tables give up (the caller falls back to the first line).
pub const MAX_ENTRIES: usize = 1 << 16;

fn varint(t: &[u8], i: &mut usize) -> Option<u32> {
    let mut b = *t.get(*i)?;
    *i += 1;
    let mut val = u32::from(b & 63);
    let mut shift = 0;
    while b & 64 != 0 {
        b = *t.get(*i)?;
        *i += 1;
        shift += 6;
        if shift > 30 {
            return None;
        }
        val |= u32::from(b & 63) << shift;
    }
    Some(val)
}

fn svarint(t: &[u8], i: &mut usize) -> Option<i64> {
    let u = varint(t, i)?;
    Some(if u & 1 != 0 { -i64::from(u >> 1) } else { i64::from(u >> 1) })
}

/// 3.11+ location table: the line of the code unit at index `unit` (offset in bytes / 2).
pub fn line_v311(table: &[u8], firstlineno: i64, unit: u64) -> Option<i64> {
    let (mut i, mut addr, mut line) = (0usize, 0u64, firstlineno);
    for _ in 0..MAX_ENTRIES {
        let first = *table.get(i)?;
        if first & 0x80 == 0 {
            return None; // not at an entry start: malformed
        }
        i += 1;
        let code = (first >> 3) & 15;
        let len = u64::from(first & 7) + 1;
        let entry_line = match code {
            15 => None,
            14 => {
                line += svarint(table, &mut i)?;
                varint(table, &mut i)?;
                varint(table, &mut i)?;
                varint(table, &mut i)?;
                Some(line)
            }
            13 => {
                line += svarint(table, &mut i)?;
                Some(line)
            }
            10..=12 => {
                line += i64::from(code) - 10;
                i += 2;
                Some(line)
            }
            _ => {
                i += 1;
                Some(line)
            }
        };
        if unit < addr + len {
            return entry_line;
        }
        addr += len;
    }
    None
}

/// 3.10 line table: the line of the instruction at byte offset `offset`.
pub fn line_v310(table: &[u8], firstlineno: i64, offset: u64) -> Option<i64> {
    let (mut start, mut line) = (0u64, firstlineno);
    for pair in table.chunks_exact(2).take(MAX_ENTRIES) {
        let end = start + u64::from(pair[0]);
        let delta = pair[1] as i8;
        let this = if delta == -128 {
            None
        } else {
            line += i64::from(delta);
            Some(line)
        };
        if start <= offset && offset < end {
            return this;
        }
        start = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v311_forms() {
        // short form (code 0, 2 units), one-line +1 (code 11, 1 unit), no-column +3 (code 13,
        // 1 unit), no location (code 15, 1 unit), long form -2 (code 14, 3 units).
        let t = [
            0x80 | 1,
            0x00,
            0x80 | (11 << 3),
            1,
            2,
            0x80 | (13 << 3),
            6,
            0x80 | (15 << 3),
            0x80 | (14 << 3) | 2,
            5,
            0,
            0,
            0,
        ];
        assert_eq!(line_v311(&t, 10, 0), Some(10));
        assert_eq!(line_v311(&t, 10, 1), Some(10));
        assert_eq!(line_v311(&t, 10, 2), Some(11));
        assert_eq!(line_v311(&t, 10, 3), Some(14));
        assert_eq!(line_v311(&t, 10, 4), None, "no location");
        assert_eq!(line_v311(&t, 10, 5), Some(12));
        assert_eq!(line_v311(&t, 10, 7), Some(12));
        assert_eq!(line_v311(&t, 10, 8), None, "past the end");
        assert_eq!(line_v311(&[0x01], 10, 0), None, "malformed");
        assert_eq!(line_v311(&[], 10, 0), None);
    }

    #[test]
    fn v311_varints() {
        let mut i = 0;
        assert_eq!(varint(&[0x41, 0x01], &mut i), Some(1 | (1 << 6)));
        let mut i = 0;
        assert_eq!(svarint(&[3], &mut i), Some(-1));
        let mut i = 0;
        assert_eq!(varint(&[0x40], &mut i), None, "truncated");
    }

    #[test]
    fn v310_pairs() {
        // 6 bytes on line 5, 4 bytes with no line, 2 bytes two lines up.
        let t = [6u8, 0, 4, 0x80, 2, (-2i8) as u8];
        assert_eq!(line_v310(&t, 5, 0), Some(5));
        assert_eq!(line_v310(&t, 5, 5), Some(5));
        assert_eq!(line_v310(&t, 5, 6), None);
        assert_eq!(line_v310(&t, 5, 10), Some(3));
        assert_eq!(line_v310(&t, 5, 12), None);
    }
}
