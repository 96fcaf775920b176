//! The calling thread's Python frames, read raw: no GIL, no C API beyond
//! `PyGILState_GetThisThreadState` (a thread-specific-storage read, legal without the GIL).
//!
//! A thread inside a hook does not move its own frame chain, and the frames keep their code
//! objects (and those their strings) alive, so the chain can be read while the thread has
//! released the GIL (PyTorch's bindings and ctypes do). Every read goes through
//! [`maps::Reader`](super::maps::Reader); every object's type is checked against the
//! interpreter's own type objects (`PyCode_Type`, `PyUnicode_Type`, `PyBytes_Type`,
//! `PyFrame_Type`) before it is read further; every loop and length is bounded. Any doubt
//! gives up on the site's Python frames ([`Miss`]), which the caller counts in
//! `health.site_misses`.
//!
//! The runtime is looked for once, at the first capture, with `dlsym(RTLD_DEFAULT, ...)`:
//! no Python in the process means no cost afterwards (the look-up is repeated at most once a
//! second while none is found, for programs that load libpython late). The version comes from
//! `Py_Version` (3.11+), else from the file name of the object defining the symbols
//! (`libpython3.10.so`, `python3.10`). 3.13+ is read through `_PyRuntime.debug_offsets`
//! after checking its cookie and version. See `layouts.rs` for the per-version tables.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sync::Mutex;
use once_cell::sync::OnceCell;

use super::layouts::{Layout, Shape};
use super::linetable;
use super::maps::Reader;
use super::PyFrame;

/// The walk gave up: the frames could not be read with confidence.
#[derive(Debug)]
pub struct Miss(pub &'static str);

/// One raw frame: the code object and the instruction position (in code units), when known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawPy {
    pub code: u64,
    pub unit: Option<u32>,
}

/// Upper bound on frames visited per walk (C-stack shims included).
const MAX_VISIT: usize = 4096;
/// Longest string read (file names, qualified names).
const MAX_STR: u64 = 4096;
/// Longest line table read.
const MAX_LINETABLE: u64 = 1 << 20;

type GetTstate = unsafe extern "C" fn() -> u64;

/// A Python runtime found in this process, with the layout to read it.
pub struct Runtime {
    get_tstate: GetTstate,
    pub layout: Layout,
    /// "3.11.7", or "3.10" when only the minor version is known.
    pub version: String,
    code_type: u64,
    str_type: u64,
    bytes_type: u64,
    /// `PyFrame_Type` (3.10 frames are objects).
    frame_type: u64,
    /// Free-threaded builds keep per-thread bytecode: lines fall back to the first line.
    lines: bool,
    /// 3.10 and 3.11: where the interpreters and their thread states are, to find the
    /// calling thread's state in a subinterpreter.
    interps: Option<Interps>,
}

/// `_PyRuntime.interpreters` and the links to follow (3.10, 3.11; x86_64 and aarch64 share
/// them). `PyGILState_GetThisThreadState` answers the main interpreter's thread state even
/// while the thread runs in a subinterpreter (`_xxsubinterpreters.run_string`): its frames
/// would end at the main interpreter's `run_string` line. Offsets from CPython's
/// Include/internal/pycore_runtime.h (`pyruntimestate.interpreters`), pycore_interp.h
/// (`_is.next`, `tstate_head` in 3.10, `threads.head` in 3.11) and cpython/pystate.h
/// (`_ts.next`, `thread_id`).
#[derive(Clone, Copy, Debug)]
struct Interps {
    /// `&_PyRuntime.interpreters.head`; `main` follows it.
    head: u64,
    interp_next: u64,
    interp_threads: u64,
    ts_next: u64,
    ts_thread_id: u64,
}

impl Interps {
    fn of(minor: u32, runtime: u64) -> Option<Interps> {
        if runtime == 0 {
            return None;
        }
        match minor {
            10 => {
                Some(Interps { head: runtime + 32, interp_next: 0, interp_threads: 8, ts_next: 8, ts_thread_id: 176 })
            }
            11 => {
                Some(Interps { head: runtime + 40, interp_next: 0, interp_threads: 16, ts_next: 8, ts_thread_id: 152 })
            }
            _ => None,
        }
    }
}

/// Most interpreters and thread states looked through for the calling thread's own.
const MAX_INTERPS: usize = 64;
const MAX_THREADS: usize = 1024;

/// What the look-up found.
pub enum Found {
    Runtime(Box<Runtime>),
    /// A Python runtime culedger cannot read (the warning says why).
    Unreadable(String),
}

fn sym(name: &CStr) -> u64 {
    // SAFETY: a plain symbol look-up in the global scope.
    unsafe { crate::rt::real::real_dlsym(std::ptr::null_mut(), name.as_ptr()) as u64 }
}

/// (major, minor) from a file name like `libpython3.10.so.1.0` or `/usr/bin/python3.10`.
pub fn version_from_name(name: &str) -> Option<(u32, u32)> {
    let base = name.rsplit('/').next()?;
    let i = base.find("python")? + "python".len();
    let rest = &base[i..];
    let (major, rest) = rest.split_once('.')?;
    let minor: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// Look for a Python runtime in the process. None: there is none.
pub fn find() -> Option<Found> {
    let get = sym(c"PyGILState_GetThisThreadState");
    if get == 0 {
        return None;
    }
    let runtime = sym(c"_PyRuntime");
    let py_version = sym(c"Py_Version");
    let mut r = Reader::default();
    let (hex, major, minor) = if py_version != 0 {
        let v = u64::from(r.u32(py_version)?);
        (Some(v), (v >> 24) as u32, ((v >> 16) & 0xff) as u32)
    } else {
        // 3.10 and older have no Py_Version: the object defining the interpreter tells.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr fills `info` for an address of a loaded object.
        let name = if unsafe { libc::dladdr(get as *const libc::c_void, &mut info) } != 0 && !info.dli_fname.is_null() {
            unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned()
        } else {
            String::new()
        };
        let exe = std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        match version_from_name(&name).or_else(|| version_from_name(&exe)) {
            Some((major, minor)) => (None, major, minor),
            None => return Some(Found::Unreadable(format!("a Python runtime of unknown version ({name})"))),
        }
    };
    let version = match hex {
        Some(v) => format!("{}.{}.{}", major, minor, (v >> 8) & 0xff),
        None => format!("{major}.{minor}"),
    };
    let unreadable = |why: String| Some(Found::Unreadable(format!("Python {version}: {why}")));
    if major != 3 {
        return unreadable("not CPython 3".into());
    }
    let (code_type, str_type, bytes_type) = (sym(c"PyCode_Type"), sym(c"PyUnicode_Type"), sym(c"PyBytes_Type"));
    if code_type == 0 || str_type == 0 || bytes_type == 0 {
        return unreadable("the interpreter's type objects are not exported".into());
    }
    let mut lines = true;
    let layout = if minor >= 13 {
        if runtime == 0 {
            return unreadable("_PyRuntime is not exported".into());
        }
        let Some(t) = super::layouts::table(minor) else {
            return unreadable("this version is not known to culedger".into());
        };
        let mut cookie = [0u8; 8];
        if !r.read(runtime, &mut cookie) || &cookie != b"xdebugpy" {
            return unreadable("_PyRuntime.debug_offsets has no valid cookie".into());
        }
        let dbg_version = r.u64(runtime + super::layouts::get(t, "dbg.version").unwrap_or(8));
        let want = hex.unwrap_or(0) >> 16;
        if dbg_version.map(|v| v >> 16) != Some(want) {
            return unreadable(format!(
                "_PyRuntime.debug_offsets says version {:#x}, Py_Version says {:#x}",
                dbg_version.unwrap_or(0),
                hex.unwrap_or(0)
            ));
        }
        if r.u64(runtime + super::layouts::get(t, "dbg.free_threaded").unwrap_or(16)).unwrap_or(0) != 0 {
            lines = false;
        }
        match Layout::from_debug_offsets(minor, |off| r.u64(runtime + off)) {
            Some(l) => l,
            None => return unreadable("_PyRuntime.debug_offsets holds absurd offsets".into()),
        }
    } else {
        match Layout::from_table(minor) {
            Some(l) => l,
            None => return unreadable("this version is not supported (3.10 and later are)".into()),
        }
    };
    let frame_type = if layout.shape == Shape::FrameObjects { sym(c"PyFrame_Type") } else { 0 };
    if layout.shape == Shape::FrameObjects && frame_type == 0 {
        return unreadable("PyFrame_Type is not exported".into());
    }
    // SAFETY: the symbol is CPython's `PyThreadState *PyGILState_GetThisThreadState(void)`.
    let get_tstate = unsafe { std::mem::transmute::<u64, GetTstate>(get) };
    Some(Found::Runtime(Box::new(Runtime {
        get_tstate,
        layout,
        version,
        code_type,
        str_type,
        bytes_type,
        frame_type,
        lines,
        interps: Interps::of(minor, runtime),
    })))
}

/// The process's runtime once found (or found unreadable: `Some(None)`).
static FOUND: OnceCell<Option<&'static Runtime>> = OnceCell::new();
/// 1 + the number of `dlopen` calls entered before the latest look-up began (0: none yet, or
/// not known).
static LOOKED_AT_DLOPENS: AtomicU64 = AtomicU64::new(0);

/// The last look-up, on the coarse clock (0: none yet).
static LAST_LOOK_MS: AtomicU64 = AtomicU64::new(0);
/// Held by the thread looking.
static LOOKING: Mutex<()> = Mutex::new(());

/// [`runtime`] keyed on `dlopen` rather than on the clock (a runtime comes into a process
/// with the program, or with an object `dlopen` loads): a `dlopen` entered since the last
/// look-up began: look now; none: nothing can have changed, no look-up and no clock read.
/// One case escapes that reasoning: a `dlopen` that had entered but not finished when that
/// look-up ran. So `recheck` (the caller passes it on every Nth call) falls back to
/// [`runtime`]'s rule, at most one look-up a second. Where `dlopen` is not counted (aarch64),
/// always that rule.
#[inline]
pub fn runtime_unless_unchanged(recheck: bool) -> Option<&'static Runtime> {
    if let Some(found) = found() {
        return found;
    }
    crate::sync::atomic(&LOOKED_AT_DLOPENS);
    match crate::rt::dlopen::dlopens() {
        Some(n) if LOOKED_AT_DLOPENS.load(Ordering::Acquire) != n + 1 => look(super::coarse_ms()),
        Some(_) if !recheck => None,
        _ => runtime(),
    }
}

/// What the first successful look found, once it has been set (a `OnceCell` set by one
/// thread and read by all: announced to helgrind as published).
#[inline]
fn found() -> Option<Option<&'static Runtime>> {
    let found = FOUND.get()?;
    crate::sync::published(found);
    Some(*found)
}

/// The process's runtime, looked for at the first capture; None while there is none (looked
/// for again at most once a second).
pub fn runtime() -> Option<&'static Runtime> {
    if let Some(found) = found() {
        return found;
    }
    let now = super::coarse_ms();
    crate::sync::atomic(&LAST_LOOK_MS);
    let last = LAST_LOOK_MS.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < 1000 {
        return None;
    }
    look(now)
}

/// Look for the runtime now (`now`: the coarse clock), unless another thread is looking.
#[cold]
fn look(now: u64) -> Option<&'static Runtime> {
    let _guard = LOOKING.try_lock()?;
    if let Some(found) = found() {
        return found;
    }
    crate::sync::atomic(&LAST_LOOK_MS);
    LAST_LOOK_MS.store(now.max(1), Ordering::Relaxed);
    // Read before looking: a dlopen entered after this is a change the look may have missed.
    let dlopens = crate::rt::dlopen::dlopens();
    let found = find();
    crate::sync::atomic(&LOOKED_AT_DLOPENS);
    LOOKED_AT_DLOPENS.store(dlopens.map_or(0, |n| n + 1), Ordering::Release);
    match found {
        None => None,
        Some(Found::Runtime(rt)) => {
            let rt: &'static Runtime = Box::leak(rt);
            super::set_python_version(&rt.version);
            let _ = FOUND.set(Some(rt));
            Some(rt)
        }
        Some(Found::Unreadable(why)) => {
            super::note_unreadable_python(&why);
            let _ = FOUND.set(None);
            None
        }
    }
}

impl Runtime {
    fn type_of(&self, r: &mut Reader, obj: u64) -> Option<u64> {
        r.u64(obj + self.layout.ob_type)
    }

    fn is(&self, r: &mut Reader, obj: u64, ty: u64) -> bool {
        obj != 0 && obj.is_multiple_of(8) && self.type_of(r, obj) == Some(ty)
    }

    /// The calling thread's frames, innermost first, at most `max`. Empty when the thread
    /// has no Python thread state (a thread created by C) or no frames.
    pub fn walk(&self, r: &mut Reader, max: usize, out: &mut Vec<RawPy>) -> Result<(), Miss> {
        // SAFETY: CPython's function; reads thread-specific storage only.
        let tstate = unsafe { (self.get_tstate)() };
        if tstate == 0 || max == 0 {
            return Ok(());
        }
        let tstate = self.own_thread_state(r, tstate);
        if !tstate.is_multiple_of(8) {
            return Err(Miss("misaligned thread state"));
        }
        let l = &self.layout;
        let mut frame = match l.shape {
            Shape::FrameObjects | Shape::Direct => r.u64(tstate + l.ts_frame).ok_or(Miss("thread state"))?,
            Shape::CFrame => {
                let cframe = r.u64(tstate + l.ts_frame).ok_or(Miss("thread state"))?;
                if cframe == 0 {
                    return Ok(());
                }
                r.u64(cframe + l.cframe_current).ok_or(Miss("cframe"))?
            }
        };
        for _ in 0..MAX_VISIT {
            if frame == 0 || out.len() >= max {
                return Ok(());
            }
            if frame % 8 != 0 {
                return Err(Miss("misaligned frame"));
            }
            if l.shape == Shape::FrameObjects && !self.is(r, frame, self.frame_type) {
                return Err(Miss("not a frame object"));
            }
            let owner = match l.frame_owner {
                Some(off) => u64::from(r.u8(frame + off).ok_or(Miss("frame owner"))?),
                None => 0,
            };
            if owner < l.owner_first_skipped {
                let raw = r.u64(frame + l.frame_code).ok_or(Miss("frame code"))?;
                // 3.14's f_executable is a tagged stack reference.
                let code = if l.shape == Shape::Direct { raw & !7 } else { raw };
                if self.is(r, code, self.code_type) {
                    out.push(RawPy { code, unit: self.unit(r, frame, code) });
                } else if l.shape != Shape::Direct {
                    return Err(Miss("frame without a code object"));
                }
                // 3.13+: a frame of another executable (None in shims) is not a Python frame.
            }
            frame = r.u64(frame + l.frame_previous).ok_or(Miss("previous frame"))?;
        }
        Ok(())
    }

    /// Does thread state `ts` have a current frame?
    fn has_frames(&self, r: &mut Reader, ts: u64) -> bool {
        let l = &self.layout;
        match r.u64(ts + l.ts_frame) {
            Some(0) | None => false,
            Some(f) if l.shape == Shape::CFrame => r.u64(f + l.cframe_current).is_some_and(|c| c != 0),
            Some(_) => true,
        }
    }

    /// The thread state the calling thread runs Python in: `gilstate` (the main
    /// interpreter's), unless there are subinterpreters and one holds a state of this
    /// thread with frames (newest interpreter first: the innermost `run_string`).
    fn own_thread_state(&self, r: &mut Reader, gilstate: u64) -> u64 {
        let Some(i) = self.interps else { return gilstate };
        let (Some(mut interp), Some(main)) = (r.u64(i.head), r.u64(i.head + 8)) else { return gilstate };
        if interp == main {
            return gilstate;
        }
        // SAFETY: no preconditions; CPython's `thread_id` is `PyThread_get_thread_ident()`,
        // which is `pthread_self()`.
        let me = unsafe { libc::pthread_self() } as u64;
        for _ in 0..MAX_INTERPS {
            if interp == 0 || interp == main || !interp.is_multiple_of(8) {
                break;
            }
            let mut ts = r.u64(interp + i.interp_threads).unwrap_or(0);
            for _ in 0..MAX_THREADS {
                if ts == 0 || !ts.is_multiple_of(8) {
                    break;
                }
                if r.u64(ts + i.ts_thread_id) == Some(me) && self.has_frames(r, ts) {
                    return ts;
                }
                ts = r.u64(ts + i.ts_next).unwrap_or(0);
            }
            interp = r.u64(interp + i.interp_next).unwrap_or(0);
        }
        gilstate
    }

    /// The instruction position of `frame`, in code units from the start of the bytecode.
    fn unit(&self, r: &mut Reader, frame: u64, code: u64) -> Option<u32> {
        let l = &self.layout;
        let unit = match l.shape {
            Shape::FrameObjects => i64::from(r.i32(frame + l.frame_instr)?),
            Shape::CFrame | Shape::Direct => {
                let ptr = r.u64(frame + l.frame_instr)?;
                let base = code + l.code_adaptive;
                (ptr as i64 - base as i64) / 2
            }
        };
        u32::try_from(unit).ok().filter(|&u| u < 1 << 24)
    }

    /// A str object in compact form: ASCII, or its cached UTF-8 copy. `Err` when `obj` is
    /// not a str (a layout doubt), `Ok(None)` when it is one culedger does not read.
    pub fn string(&self, r: &mut Reader, obj: u64) -> Result<Option<String>, Miss> {
        if !self.is(r, obj, self.str_type) {
            return Err(Miss("not a str"));
        }
        let l = &self.layout;
        let state = u64::from(r.u32(obj + l.str_state).ok_or(Miss("str state"))?);
        let compact = state >> l.str_compact_bit & 1 == 1;
        let ascii = state >> l.str_ascii_bit & 1 == 1;
        if !compact {
            return Ok(None);
        }
        let (data, len) = if ascii {
            (obj + l.str_ascii_size, r.u64(obj + l.str_length).ok_or(Miss("str length"))?)
        } else {
            let p = r.u64(obj + l.str_utf8).ok_or(Miss("str utf8"))?;
            if p == 0 {
                return Ok(None);
            }
            (p, r.u64(obj + l.str_utf8_length).ok_or(Miss("str utf8 length"))?)
        };
        if len > MAX_STR {
            return Ok(None);
        }
        let mut buf = vec![0u8; len as usize];
        if !r.read(data, &mut buf) {
            return Err(Miss("str data"));
        }
        if ascii && !buf.is_ascii() {
            return Err(Miss("ASCII str with non-ASCII data"));
        }
        Ok(String::from_utf8(buf).ok())
    }

    /// A code object's frame: file, qualified name (3.10: name), and the line.
    pub fn frame(&self, r: &mut Reader, raw: RawPy) -> Result<PyFrame, Miss> {
        let l = &self.layout;
        let field = |r: &mut Reader, off: u64| r.u64(raw.code + off).ok_or(Miss("code field"));
        let file = field(r, l.code_filename)?;
        let file = self.string(r, file)?.unwrap_or_else(|| "?".into());
        let name = field(r, l.code_qualname)?;
        let function = self.string(r, name)?.unwrap_or_else(|| "?".into());
        let first = i64::from(r.i32(raw.code + l.code_firstlineno).ok_or(Miss("first line"))?);
        let current = raw.unit.filter(|_| self.lines).and_then(|unit| self.line(r, raw.code, first, unit));
        let line = current.unwrap_or(first).clamp(0, i64::from(u32::MAX)) as u32;
        Ok(PyFrame { file, function, line, line_is_current: current.is_some() })
    }

    fn line(&self, r: &mut Reader, code: u64, first: i64, unit: u32) -> Option<i64> {
        let l = &self.layout;
        let table = r.u64(code + l.code_linetable)?;
        if !self.is(r, table, self.bytes_type) {
            return None;
        }
        let len = r.u64(table + l.bytes_size)?;
        if len > MAX_LINETABLE {
            return None;
        }
        let mut buf = vec![0u8; len as usize];
        if !r.read(table + l.bytes_sval, &mut buf) {
            return None;
        }
        match l.shape {
            Shape::FrameObjects => linetable::line_v310(&buf, first, u64::from(unit) * 2),
            _ => linetable::line_v311(&buf, first, u64::from(unit)),
        }
        .filter(|&line| line > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_file_names() {
        assert_eq!(version_from_name("/usr/lib/libpython3.10.so.1.0"), Some((3, 10)));
        assert_eq!(version_from_name("/root/.pyenv/versions/3.10.13/bin/python3.10"), Some((3, 10)));
        assert_eq!(version_from_name("python3.12d"), Some((3, 12)));
        assert_eq!(version_from_name("/usr/bin/python3"), None);
        assert_eq!(version_from_name("my_engine"), None);
    }

    /// The test binary has no Python. A look-up keyed on `dlopen` happens at once after a
    /// `dlopen` (the clock's rule alone waited a second after the previous look). Other tests
    /// may look or dlopen meanwhile: retried, never exact counts.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn no_python_is_looked_for_again_at_once_after_a_dlopen() {
        let looked_at = || LOOKED_AT_DLOPENS.load(Ordering::Acquire);
        let settled = |want: &dyn Fn() -> bool| {
            (0..200).any(|_| {
                assert_eq!(runtime_unless_unchanged(false).map(|r| r.version.clone()), None);
                want() || {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    false
                }
            })
        };
        assert!(settled(&|| looked_at() == crate::rt::dlopen::dlopens().unwrap() + 1), "a first look");
        let before = looked_at();
        // SAFETY: an already loaded library, not loaded again.
        let h = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        assert!(!h.is_null());
        assert!(settled(&|| looked_at() > before), "looked again at once, within the second");
        // SAFETY: the handle just opened.
        unsafe { libc::dlclose(h) };
    }
}
