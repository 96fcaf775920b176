"""Finding the ``culedger`` executable that the wheel installed, and running it."""

import os
import sys
import sysconfig

_EXE = "culedger"


def _script_dirs():
    """Where pip may have put the wheel's executable, most likely first."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [sysconfig.get_path("scripts")]
    user_scheme = getattr(sysconfig, "get_preferred_scheme", lambda _: f"{os.name}_user")("user")
    try:
        dirs.append(sysconfig.get_path("scripts", scheme=user_scheme))
    except KeyError:
        pass
    # `pip install --target DIR` puts packages in DIR and executables in DIR/bin.
    dirs.append(os.path.join(os.path.dirname(here), "bin"))
    dirs.append(os.path.dirname(sys.executable))
    return dirs


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
