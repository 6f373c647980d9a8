"""``python -m module *argv`` run in this interpreter, as a command line would run it: its exit status,
stdout and stderr. Standard library only: ``python -m tests.mains module cases`` runs cases in a new
interpreter and lists the modules imported by the end, which a test of what a command imports needs."""
from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
import traceback
import warnings


def run_main(module: str, argv: list[str]) -> dict:
    """Exit status, stdout and stderr (an uncaught exception's traceback included) of one command line."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = [module, *argv]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            # Here the module may be imported already; running it as __main__ anew is what python -m does.
            warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = saved
    return {"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    module, cases = sys.argv[1], json.loads(sys.argv[2])
    results = {key: run_main(module, argv) for key, argv in cases.items()}
    results["modules"] = sorted(sys.modules)
    print(json.dumps(results))
