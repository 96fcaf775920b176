"""sglang/launch_server.py (simulated): ``python -m sglang.launch_server --tp N ...``."""
import sys

from sglang.srt.server_args import prepare_server_args


def main(argv=None):
    server_args = prepare_server_args(sys.argv[1:] if argv is None else argv)
    from sglang.srt.entrypoints.engine import _launch_subprocesses
    return _launch_subprocesses(server_args)


if __name__ == "__main__":
    sys.exit(main())
