/* Prints the layout facts culedger's raw frame walker relies on, computed by the compiler from
 * one CPython version's own headers (public and internal). Built and run by
 * tests/python_layouts.rs against every interpreter's headers it finds; the test compares each
 * line with culedger's table for that version (src/sites/python/layouts.rs).
 * Output: `name=value` lines, values in decimal. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_debug_offsets.h"
#include "internal/pycore_interpframe_structs.h"
#include "internal/pycore_tstate.h"
#elif PY_VERSION_HEX >= 0x030D0000
#include "internal/pycore_runtime.h"
#include "internal/pycore_frame.h"
#elif PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#else
#include "frameobject.h"
#endif

#define P(name, value) printf("%s=%llu\n", name, (unsigned long long)(value))

/* Bit position of the lowest set bit of the 32-bit word at `p`. */
static unsigned lowest_bit(const void *p) {
    unsigned int w;
    memcpy(&w, p, sizeof w);
    for (unsigned i = 0; i < 32; i++)
        if (w & (1u << i)) return i;
    return 99;
}

int main(void) {
    P("version_major", PY_MAJOR_VERSION);
    P("version_minor", PY_MINOR_VERSION);
    P("obj.ob_type", offsetof(PyObject, ob_type));
    P("var.ob_size", offsetof(PyVarObject, ob_size));
    /* str: compact ASCII data follows PyASCIIObject; the cached UTF-8 form of other compact
     * strings is in PyCompactUnicodeObject. */
    P("str.length", offsetof(PyASCIIObject, length));
    P("str.state", offsetof(PyASCIIObject, state));
    P("str.ascii_size", sizeof(PyASCIIObject));
    P("str.utf8_length", offsetof(PyCompactUnicodeObject, utf8_length));
    P("str.utf8", offsetof(PyCompactUnicodeObject, utf8));
    {
        PyASCIIObject o;
        memset(&o, 0, sizeof o);
        o.state.kind = 1;
        P("str.kind_shift", lowest_bit(&o.state));
        memset(&o, 0, sizeof o);
        o.state.compact = 1;
        P("str.compact_bit", lowest_bit(&o.state));
        memset(&o, 0, sizeof o);
        o.state.ascii = 1;
        P("str.ascii_bit", lowest_bit(&o.state));
    }
    P("bytes.sval", offsetof(PyBytesObject, ob_sval));
    P("code.filename", offsetof(PyCodeObject, co_filename));
    P("code.name", offsetof(PyCodeObject, co_name));
    P("code.firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("code.linetable", offsetof(PyCodeObject, co_linetable));
#if PY_VERSION_HEX >= 0x030B0000
    P("code.qualname", offsetof(PyCodeObject, co_qualname));
    P("code.adaptive", offsetof(PyCodeObject, co_code_adaptive));
    P("codeunit.size", sizeof(_Py_CODEUNIT));
#endif
#if PY_VERSION_HEX < 0x030B0000
    P("ts.frame", offsetof(PyThreadState, frame));
    P("frame.back", offsetof(PyFrameObject, f_back));
    P("frame.code", offsetof(PyFrameObject, f_code));
    P("frame.lasti", offsetof(PyFrameObject, f_lasti));
#elif PY_VERSION_HEX < 0x030D0000
    P("ts.cframe", offsetof(PyThreadState, cframe));
    P("cframe.current", offsetof(_PyCFrame, current_frame));
    P("frame.previous", offsetof(_PyInterpreterFrame, previous));
    P("frame.code", offsetof(_PyInterpreterFrame, f_code));
    P("frame.instr", offsetof(_PyInterpreterFrame, prev_instr));
    P("frame.owner", offsetof(_PyInterpreterFrame, owner));
#else
    P("ts.current_frame", offsetof(PyThreadState, current_frame));
    P("frame.previous", offsetof(_PyInterpreterFrame, previous));
    P("frame.code", offsetof(_PyInterpreterFrame, f_executable));
    P("frame.instr", offsetof(_PyInterpreterFrame, instr_ptr));
    P("frame.owner", offsetof(_PyInterpreterFrame, owner));
    /* Where culedger finds each offset inside _PyRuntime.debug_offsets. */
    P("dbg.size", sizeof(_Py_DebugOffsets));
    P("dbg.version", offsetof(_Py_DebugOffsets, version));
    P("dbg.free_threaded", offsetof(_Py_DebugOffsets, free_threaded));
    P("dbg.ts.current_frame", offsetof(_Py_DebugOffsets, thread_state.current_frame));
    P("dbg.frame.previous", offsetof(_Py_DebugOffsets, interpreter_frame.previous));
    P("dbg.frame.executable", offsetof(_Py_DebugOffsets, interpreter_frame.executable));
    P("dbg.frame.instr_ptr", offsetof(_Py_DebugOffsets, interpreter_frame.instr_ptr));
    P("dbg.frame.owner", offsetof(_Py_DebugOffsets, interpreter_frame.owner));
    P("dbg.code.filename", offsetof(_Py_DebugOffsets, code_object.filename));
    P("dbg.code.qualname", offsetof(_Py_DebugOffsets, code_object.qualname));
    P("dbg.code.linetable", offsetof(_Py_DebugOffsets, code_object.linetable));
    P("dbg.code.firstlineno", offsetof(_Py_DebugOffsets, code_object.firstlineno));
    P("dbg.code.adaptive", offsetof(_Py_DebugOffsets, code_object.co_code_adaptive));
    P("dbg.obj.ob_type", offsetof(_Py_DebugOffsets, pyobject.ob_type));
    P("dbg.str.state", offsetof(_Py_DebugOffsets, unicode_object.state));
    P("dbg.str.length", offsetof(_Py_DebugOffsets, unicode_object.length));
    P("dbg.str.ascii_size", offsetof(_Py_DebugOffsets, unicode_object.asciiobject_size));
    P("dbg.bytes.size", offsetof(_Py_DebugOffsets, bytes_object.ob_size));
    P("dbg.bytes.sval", offsetof(_Py_DebugOffsets, bytes_object.ob_sval));
#endif
    /* The first frame owner value that is not a Python function's frame (C-stack shims). */
#if PY_VERSION_HEX >= 0x030E0000
    P("owner.first_skipped", FRAME_OWNED_BY_INTERPRETER < FRAME_OWNED_BY_CSTACK ? FRAME_OWNED_BY_INTERPRETER : FRAME_OWNED_BY_CSTACK);
#elif PY_VERSION_HEX >= 0x030C0000
    P("owner.first_skipped", FRAME_OWNED_BY_CSTACK);
#elif PY_VERSION_HEX >= 0x030B0000
    P("owner.first_skipped", 256);
#endif
    return 0;
}
