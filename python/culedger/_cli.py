"""Finding the ``culedger`` executable that the wheel installed, and running it."""

import os
import sys
import sysconfig

_EXE = "culedger"


def _script_dirs():
    """Where pip may have put the wheel's executable: first the scripts directory of the
    installation scheme this package lives in (a venv, the system, ``--user``), then the
    others."""
    here = os.path.dirname(os.path.abspath(__file__))
    site = os.path.dirname(here)
    schemes = [None]
    user = getattr(sysconfig, "get_preferred_scheme", lambda _: f"{os.name}_user")("user")
    if user in sysconfig.get_scheme_names():
        schemes.append(user)
    ours, others = [], []
    for scheme in schemes:
        kw = {"scheme": scheme} if scheme else {}
        scripts = sysconfig.get_path("scripts", **kw)
        libs = {os.path.abspath(sysconfig.get_path(k, **kw)) for k in ("purelib", "platlib")}
        (ours if os.path.abspath(site) in libs else others).append(scripts)
    # `pip install --target DIR` puts packages in DIR and executables in DIR/bin.
    return ours + [os.path.join(site, "bin")] + others + [os.path.dirname(sys.executable)]


def executable():
    """Path of the installed ``culedger`` command line (raises FileNotFoundError if none)."""
    seen = []
    for d in _script_dirs():
        path = os.path.join(d, _EXE)
        if path not in seen and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        seen.append(path)
    raise FileNotFoundError("the culedger executable is not installed (looked in: " + ", ".join(seen) + ")")


def main(argv):
    from . import library_path

    if argv[:1] == ["--library-path"]:
        try:
            print(library_path())
        except FileNotFoundError as e:
            print(f"culedger: {e}", file=sys.stderr)
            return 2
        return 0
    try:
        exe = executable()
    except FileNotFoundError as e:
        print(f"culedger: {e}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    # The command line finds the library itself; naming it here also covers layouts it
    # does not know (e.g. a package copied elsewhere).
    if not env.get("CULEDGER_LIB"):
        try:
            env["CULEDGER_LIB"] = library_path()
        except FileNotFoundError:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(exe, [exe] + list(argv), env)
