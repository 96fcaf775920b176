//! A caching unwinder for x86_64: the return addresses of the calling thread at a few
//! nanoseconds per frame, from the same `.eh_frame` call-frame information libgcc uses.
//!
//! libgcc's `_Unwind_Backtrace` finds and interprets the CFI of every frame on every call
//! (hundreds of nanoseconds a frame). Here the CFI of each address is interpreted once, into
//! a recipe (CFA = RSP or RBP + offset; return address and saved RBP at fixed offsets from
//! the CFA), cached; a step is then two or three reads from the stack. The FDE is found with
//! libgcc's own `_Unwind_Find_FDE`. Only the common CFI operations are understood; anything
//! else (CFA expressions, signal frames, 64-bit DWARF) marks the address as unsupported and
//! the whole backtrace is taken with `_Unwind_Backtrace` instead. Stack reads go through the
//! fault-free [`Reader`](super::maps::Reader). `CULEDGER_UNWIND=gcc` (read once) always uses
//! libgcc; `tests` compare both.

use std::collections::HashMap;
use std::ffi::c_void;

use crate::sync::{RwLock, RwLockReadGuard};

use super::maps::Reader;

/// How to go from a frame to its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recipe {
    Step {
        /// CFA = RBP + off (else RSP + off).
        cfa_rbp: bool,
        cfa_off: i32,
        /// Return address at CFA + ra_off.
        ra_off: i32,
        /// RBP saved at CFA + off (else unchanged).
        rbp_off: Option<i32>,
    },
    /// The outermost frame (return address undefined).
    End,
    /// CFI this unwinder does not interpret.
    Unsupported,
}

/// Addresses whose recipe is cached (cleared when full).
const CACHE_MAX: usize = 1 << 15;

type Recipes = HashMap<u64, Recipe, super::table::Fast>;

static CACHE: super::Leaky<RwLock<Recipes>> = super::Leaky::new(|| RwLock::new(HashMap::default()));

extern "C" {
    fn _Unwind_Find_FDE(pc: *mut c_void, bases: *mut [usize; 3]) -> *const u8;
}

/// A cursor over CFI bytes (in a loaded object's `.eh_frame`: readable while it is loaded).
struct Cur {
    p: *const u8,
    end: *const u8,
}

impl Cur {
    fn u8(&mut self) -> Option<u8> {
        if self.p >= self.end {
            return None;
        }
        // SAFETY: inside the CIE/FDE record, bounded by its length.
        let v = unsafe { *self.p };
        self.p = self.p.wrapping_add(1);
        Some(v)
    }
    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut b = [0u8; N];
        for x in &mut b {
            *x = self.u8()?;
        }
        Some(b)
    }
    fn uleb(&mut self) -> Option<u64> {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let b = self.u8()?;
            if shift < 64 {
                v |= u64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
    }
    fn sleb(&mut self) -> Option<i64> {
        let (mut v, mut shift) = (0i64, 0);
        loop {
            let b = self.u8()?;
            if shift < 64 {
                v |= i64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Some(v);
            }
        }
    }
    /// A pointer in encoding `enc` (DW_EH_PE_*): absolute, or relative to its own address.
    fn encoded(&mut self, enc: u8) -> Option<u64> {
        let at = self.p as u64;
        let v = match enc & 0x0f {
            0x00 => u64::from_ne_bytes(self.bytes::<8>()?),
            0x01 => self.uleb()?,
            0x02 => u64::from(u16::from_ne_bytes(self.bytes::<2>()?)),
            0x03 => u64::from(u32::from_ne_bytes(self.bytes::<4>()?)),
            0x04 => u64::from_ne_bytes(self.bytes::<8>()?),
            0x09 => self.sleb()? as u64,
            0x0a => i64::from(i16::from_ne_bytes(self.bytes::<2>()?)) as u64,
            0x0b => i64::from(i32::from_ne_bytes(self.bytes::<4>()?)) as u64,
            0x0c => u64::from_ne_bytes(self.bytes::<8>()?),
            _ => return None,
        };
        match enc & 0x70 {
            0x00 => Some(v),
            0x10 => Some(at.wrapping_add(v)),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Rule {
    Same,
    At(i64),
    Undefined,
}

#[derive(Clone, Copy)]
struct State {
    cfa_reg: u64,
    cfa_off: i64,
    rbp: Rule,
    ra: Rule,
}

const RBP: u64 = 6;
const RSP: u64 = 7;
const RA: u64 = 16;

/// Execute CFI `ops` from location `loc` until past `pc`. None: unsupported.
fn execute(
    ops: &mut Cur,
    st: &mut State,
    init: &State,
    mut loc: u64,
    pc: u64,
    code_align: u64,
    data_align: i64,
) -> Option<()> {
    let mut stack: [State; 8] = [*st; 8];
    let mut depth = 0usize;
    let set = |st: &mut State, reg: u64, rule: Rule| {
        if reg == RBP {
            st.rbp = rule;
        } else if reg == RA {
            st.ra = rule;
        }
    };
    while let Some(op) = ops.u8() {
        let (hi, lo) = (op >> 6, u64::from(op & 0x3f));
        match hi {
            1 => {
                loc = loc.wrapping_add(lo * code_align);
                if loc > pc {
                    return Some(());
                }
                continue;
            }
            2 => {
                let off = ops.uleb()? as i64 * data_align;
                set(st, lo, Rule::At(off));
                continue;
            }
            3 => {
                let r = if lo == RBP { init.rbp } else { init.ra };
                set(st, lo, r);
                continue;
            }
            _ => {}
        }
        match op {
            0x00 => {}
            0x02..=0x04 => {
                let delta = match op {
                    0x02 => u64::from(ops.u8()?),
                    0x03 => u64::from(u16::from_ne_bytes(ops.bytes::<2>()?)),
                    _ => u64::from(u32::from_ne_bytes(ops.bytes::<4>()?)),
                };
                loc = loc.wrapping_add(delta * code_align);
                if loc > pc {
                    return Some(());
                }
            }
            0x05 => {
                let reg = ops.uleb()?;
                let off = ops.uleb()? as i64 * data_align;
                set(st, reg, Rule::At(off));
            }
            0x06 => {
                let reg = ops.uleb()?;
                let r = if reg == RBP { init.rbp } else { init.ra };
                set(st, reg, r);
            }
            0x07 => set(st, ops.uleb()?, Rule::Undefined),
            0x08 => set(st, ops.uleb()?, Rule::Same),
            0x09 => {
                let (reg, _other) = (ops.uleb()?, ops.uleb()?);
                if reg == RBP || reg == RA || reg == RSP {
                    return None;
                }
            }
            0x0a => {
                if depth == stack.len() {
                    return None;
                }
                stack[depth] = *st;
                depth += 1;
            }
            0x0b => {
                if depth == 0 {
                    return None;
                }
                depth -= 1;
                // The whole row, CFA rule included, as libgcc does.
                *st = stack[depth];
            }
            0x0c => {
                st.cfa_reg = ops.uleb()?;
                st.cfa_off = ops.uleb()? as i64;
            }
            0x0d => st.cfa_reg = ops.uleb()?,
            0x0e => st.cfa_off = ops.uleb()? as i64,
            0x11 => {
                let reg = ops.uleb()?;
                let off = ops.sleb()? * data_align;
                set(st, reg, Rule::At(off));
            }
            0x12 => {
                st.cfa_reg = ops.uleb()?;
                st.cfa_off = ops.sleb()? * data_align;
            }
            0x13 => st.cfa_off = ops.sleb()? * data_align,
            0x10 | 0x16 => {
                // DW_CFA_expression / val_expression for some register.
                let reg = ops.uleb()?;
                if reg == RBP || reg == RA || reg == RSP {
                    return None;
                }
                let len = ops.uleb()?;
                ops.p = ops.p.wrapping_add(len as usize);
            }
            0x2e => {
                ops.uleb()?; // DW_CFA_GNU_args_size
            }
            0x2f => {
                let reg = ops.uleb()?;
                let off = -(ops.uleb()? as i64) * data_align;
                set(st, reg, Rule::At(off));
            }
            _ => return None, // set_loc, def_cfa_expression, val_offset, ...
        }
    }
    Some(())
}

/// The recipe of `pc` (an address inside the function: the return address minus one for
/// callers), from its FDE.
pub fn compute(pc: u64) -> Recipe {
    interpret(pc).unwrap_or(Recipe::Unsupported)
}

fn interpret(pc: u64) -> Option<Recipe> {
    let mut bases = [0usize; 3];
    // SAFETY: libgcc's look-up; returns an FDE inside a loaded object's .eh_frame, or NULL.
    let fde = unsafe { _Unwind_Find_FDE(pc as *mut c_void, &mut bases) };
    if fde.is_null() {
        return None;
    }
    // SAFETY (all reads below): within the FDE and its CIE, whose lengths bound them.
    let word = |p: *const u8| unsafe { (p as *const u32).read_unaligned() };
    let fde_len = word(fde);
    if fde_len == 0 || fde_len == u32::MAX {
        return None;
    }
    let cie_ptr = fde.wrapping_add(4);
    let cie = cie_ptr.wrapping_sub(word(cie_ptr) as usize);
    let cie_len = word(cie);
    if cie_len == 0 || cie_len == u32::MAX || word(cie.wrapping_add(4)) != 0 {
        return None;
    }
    let mut c = Cur { p: cie.wrapping_add(8), end: cie.wrapping_add(4 + cie_len as usize) };
    let version = c.u8()?;
    let mut aug = [0u8; 8];
    let mut n = 0;
    loop {
        let b = c.u8()?;
        if b == 0 {
            break;
        }
        if n == aug.len() {
            return None;
        }
        aug[n] = b;
        n += 1;
    }
    let aug = &aug[..n];
    let code_align = c.uleb()?;
    let data_align = c.sleb()?;
    let ra_reg = if version == 1 { u64::from(c.u8()?) } else { c.uleb()? };
    if ra_reg != RA {
        return None;
    }
    let mut fde_enc = 0u8;
    if aug.first() == Some(&b'z') {
        let len = c.uleb()?;
        let data_end = c.p.wrapping_add(len as usize);
        for &a in &aug[1..] {
            match a {
                b'R' => fde_enc = c.u8()?,
                b'P' => {
                    let enc = c.u8()?;
                    c.encoded(enc & 0x7f)?;
                }
                b'L' => {
                    c.u8()?;
                }
                b'B' => {}
                _ => return None, // 'S' (signal frame) and anything unknown
            }
        }
        c.p = data_end;
    } else if !aug.is_empty() {
        return None;
    }
    let init_ops = Cur { p: c.p, end: c.end };
    let mut f = Cur { p: fde.wrapping_add(8), end: fde.wrapping_add(4 + fde_len as usize) };
    let pc_begin = f.encoded(fde_enc)?;
    let pc_range = f.encoded(fde_enc & 0x0f)?;
    if pc < pc_begin || pc >= pc_begin.wrapping_add(pc_range) {
        return None;
    }
    if aug.first() == Some(&b'z') {
        let len = f.uleb()?;
        f.p = f.p.wrapping_add(len as usize);
    }
    let mut st = State { cfa_reg: RSP, cfa_off: 8, rbp: Rule::Same, ra: Rule::Undefined };
    let blank = st;
    let mut ops = init_ops;
    execute(&mut ops, &mut st, &blank, pc_begin, u64::MAX, code_align, data_align)?;
    let init = st;
    execute(&mut f, &mut st, &init, pc_begin, pc, code_align, data_align)?;
    let cfa_rbp = match st.cfa_reg {
        RSP => false,
        RBP => true,
        _ => return None,
    };
    let small = |v: i64| i32::try_from(v).ok();
    Some(match st.ra {
        Rule::Undefined => Recipe::End,
        Rule::Same => return None,
        Rule::At(ra) => Recipe::Step {
            cfa_rbp,
            cfa_off: small(st.cfa_off)?,
            ra_off: small(ra)?,
            rbp_off: match st.rbp {
                Rule::Same => None,
                Rule::At(o) => Some(small(o)?),
                Rule::Undefined => return None,
            },
        },
    })
}

/// The recipe of `pc`: from the cache, under the read lock `guard` holds (taken once per
/// backtrace), else computed with no lock held and added.
///
/// Lock order: this cache's lock is only ever taken while `reader` holds no lock of the
/// mapping cache (the first call of a walk comes before any read; a miss lets go of the
/// reader's lock first), so a walk takes the two locks in one order only. (Taking this
/// write lock under the mapping cache's read lock, as before, could deadlock with a walk
/// holding this read lock and waiting for the mapping cache behind a refresh: parking_lot's
/// locks make new readers wait for a waiting writer. Found by helgrind once the locks were
/// announced to it.)
fn recipe(guard: &mut Option<RwLockReadGuard<'static, Recipes>>, reader: &mut Reader, pc: u64) -> Recipe {
    if let Some(&r) = guard.get_or_insert_with(|| CACHE.get().read()).get(&pc) {
        return r;
    }
    *guard = None;
    reader.release();
    let r = compute(pc);
    let mut c = CACHE.get().write();
    if c.len() >= CACHE_MAX {
        c.clear();
    }
    c.insert(pc, r);
    drop(c);
    *guard = Some(CACHE.get().read());
    r
}

/// The registers of the frame that called this function: (ip, sp, rbp) at the asm block.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn here() -> (u64, u64, u64) {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags)
        );
    }
    (ip, sp, bp)
}

/// Return addresses of the calling thread, innermost first (this function's own frame
/// first), at most `max`. None when a frame's CFI is not supported or a read fails before
/// the end of the stack (the caller then uses `_Unwind_Backtrace`).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub fn backtrace(out: &mut [u64]) -> Option<usize> {
    backtrace_noting(out, &mut [])
}

/// [`backtrace`], also noting in `slots[i]` (when long enough) the stack address the
/// return address `out[i]` was read from (0 for the first, this function's own address).
#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub fn backtrace_noting(out: &mut [u64], slots: &mut [u64]) -> Option<usize> {
    let mut r = Reader::default();
    let n = walk(&mut r, out, slots);
    // A new thread's stack is not in the mapping cache yet: ask for a refresh.
    super::maps::after_capture(r.slow);
    n
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn walk(r: &mut Reader, out: &mut [u64], slots: &mut [u64]) -> Option<usize> {
    let (mut ip, mut sp, mut bp) = here();
    let mut guard = None;
    let mut n = 0;
    let mut first = true;
    while n < out.len() {
        out[n] = ip;
        n += 1;
        let pc = if first { ip } else { ip.wrapping_sub(1) };
        first = false;
        let step = recipe(&mut guard, r, pc);
        let Recipe::Step { cfa_rbp, cfa_off, ra_off, rbp_off } = step else {
            return (step == Recipe::End).then_some(n);
        };
        let cfa = (if cfa_rbp { bp } else { sp }).wrapping_add(cfa_off as i64 as u64);
        if cfa <= sp || cfa % 8 != 0 {
            return None;
        }
        let slot = cfa.wrapping_add(ra_off as i64 as u64);
        let ra = r.u64(slot)?;
        if let Some(s) = slots.get_mut(n) {
            *s = slot;
        }
        if let Some(o) = rbp_off {
            bp = r.u64(cfa.wrapping_add(o as i64 as u64))?;
        }
        sp = cfa;
        if ra == 0 {
            return Some(n);
        }
        ip = ra;
    }
    Some(n)
}

#[cfg(not(target_arch = "x86_64"))]
pub fn backtrace(_out: &mut [u64]) -> Option<usize> {
    None
}

#[cfg(not(target_arch = "x86_64"))]
pub fn backtrace_noting(_out: &mut [u64], _slots: &mut [u64]) -> Option<usize> {
    None
}

/// Forget the cache (a fork child: its lock may be held by a thread that is gone).
pub fn reset_after_fork() {
    CACHE.reset();
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[inline(never)]
    fn nested(depth: u32, f: &mut dyn FnMut()) {
        if depth == 0 {
            f();
        } else {
            nested(depth - 1, f);
        }
        std::hint::black_box(depth);
    }

    #[test]
    fn same_return_addresses_as_libgcc() {
        nested(20, &mut || {
            let mut fast = [0u64; 64];
            let n = backtrace(&mut fast).expect("supported CFI");
            let mut slow = Vec::new();
            super::super::native::gcc_backtrace(&mut slow, 64);
            // Both start inside their own frames; from the first common address on they agree.
            let start = fast[..n].iter().position(|ip| slow.contains(ip)).expect("common frames");
            let s = slow.iter().position(|ip| *ip == fast[start]).unwrap();
            let k = (n - start).min(slow.len() - s);
            assert!(k >= 20, "{k} common frames");
            assert_eq!(&fast[start..start + k], &slow[s..s + k]);
        });
    }
}
