"""The user's own code by import reference: ``package.module:factory`` or ``path/file.py:factory``.

A model or dataset that is not built in is named by where its factory lives,
as Ray's and PyTorch's examples take the user's own ``nn.Module``:

- ``package.module:factory``: imported by module name (installed, or on the path);
- ``path/to/file.py:factory``: the file itself (callers resolve a relative path
  against the sweep file's folder before it gets here).

The same loader imports the modules of a sweep's ``imports:`` list (a module
name or a ``.py`` file), which register what they define (a compressor
subclass registers itself). A file is imported under a name of its own,
``lowprec_user_<hash of its path>`` (``module_name``), never its file's name:
a file named like a package of this project, a module of the standard
library or another file of the same name shadows nothing. The runner ships
each file to every Ray node through ``runtime_env`` (``py_modules``) as a
copy under that name (``shipped``); on a node where the file's path does not
exist, it is imported by that name. No bytecode is written beside the user's file.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import shutil
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
# A module the user's code may be in. Imports of a ``.py`` file are keyed by its resolved path.
_FILES: dict[Path, ModuleType] = {}


class ReferenceProblem(ValueError):
    """A reference that cannot be used: malformed, not importable, no such factory."""


def is_reference(text: str) -> bool:
    """Whether ``text`` names code by ``MODULE:FACTORY`` or ``FILE.py:FACTORY`` (not a built-in name)."""
    return ":" in text


def split(text: str) -> tuple[str, str]:
    """``(module or file, factory)`` of a reference; ReferenceProblem where either part is malformed."""
    where, _, attr = text.rpartition(":")
    if not where or not attr.isidentifier():
        raise ReferenceProblem(f"{text!r} is not MODULE:FACTORY or FILE.py:FACTORY (the factory a Python name)")
    if not where.endswith(".py") and not _MODULE.fullmatch(where):
        raise ReferenceProblem(f"{text!r}: {where!r} is neither a module name (a.b.c) nor a .py file")
    return where, attr


class _ExitedWhileImported(BaseException):
    """``os._exit`` called by a module while it was imported (``_no_exit``): a BaseException, so that the
    module's own ``except Exception`` does not swallow it."""

    def __init__(self, status: int) -> None:
        super().__init__(f"it called os._exit({status}) while being imported")


# The (process, thread)s importing the user's code now, each with its depth, and the os._exit they replaced.
_GUARDED: dict[tuple[int, int], int] = {}
_GUARD_LOCK = threading.Lock()
_real_exit: Callable[[int], Any] | None = None


def _guarded_exit(status: int) -> None:
    if (os.getpid(), threading.get_ident()) in _GUARDED:
        raise _ExitedWhileImported(status)
    assert _real_exit is not None
    _real_exit(status)


@contextlib.contextmanager
def _no_exit() -> Iterator[None]:
    """Within it, ``os._exit`` called by this thread raises ``_ExitedWhileImported`` instead of ending the process
    at once, where nothing could report it (``lowprec validate`` would exit with the status the user's module
    chose, 0 included, having checked nothing). ``sys.exit`` needs no guard: its SystemExit is caught as any
    exception. Other threads, and a child the module forks, exit as they ask; the real ``os._exit`` is back once
    no thread imports."""
    global _real_exit
    me = (os.getpid(), threading.get_ident())
    with _GUARD_LOCK:
        if not _GUARDED:
            _real_exit, os._exit = os._exit, _guarded_exit
        _GUARDED[me] = _GUARDED.get(me, 0) + 1
    try:
        yield
    finally:
        with _GUARD_LOCK:
            _GUARDED[me] -= 1
            if not _GUARDED[me]:
                del _GUARDED[me]
            if not _GUARDED:
                os._exit = _real_exit


def import_module(where: str) -> ModuleType:
    """The module at ``where``: a dotted module name, or a ``.py`` file (imported once per process).

    Whatever the user's code raises while importing becomes a one-line ReferenceProblem; so does a call
    of ``os._exit`` or ``sys.exit`` there.
    """
    with _no_exit():
        return _import_module(where)


def _import_module(where: str) -> ModuleType:
    try:
        if not where.endswith(".py"):
            return importlib.import_module(where)
        path = Path(where)
        if not path.is_file():
            # Not on this node: the runner shipped it through Ray's py_modules, on the path by its own name.
            if path.is_absolute() and importlib.util.find_spec(module_name(where)):
                return importlib.import_module(module_name(where))
            raise ReferenceProblem(f"no file {where}")
        resolved = path.resolve()
        if resolved not in _FILES:
            _FILES[resolved] = _load_file(resolved, module_name(where))
        return _FILES[resolved]
    except ReferenceProblem:
        raise
    except ModuleNotFoundError as error:
        # The reference's own package missing: say where it was looked for.
        hint = (" (a module is looked up among the installed packages and in the sweep file's folder)"
                if not where.endswith(".py") and error.name == where.split(".")[0] else "")
        raise ReferenceProblem(f"cannot import {where}: no module named {error.name!r}{hint}") from None
    except _ExitedWhileImported as error:
        raise ReferenceProblem(f"cannot import {where}: {error}") from None
    except BaseException as error:  # the user's module body may raise anything, SystemExit included
        if isinstance(error, KeyboardInterrupt):
            raise
        if isinstance(error, SystemExit):
            code = "" if error.code is None else repr(error.code)
            raise ReferenceProblem(f"cannot import {where}: it called sys.exit({code}) while being imported") \
                from None
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ReferenceProblem(f"cannot import {where}: {type(error).__name__}" + (f": {first}" if first else "")) \
            from None


def module_name(where: str) -> str:
    """The name a ``.py`` file is imported under, on every node: from its absolute path, so that two files of
    one name in different folders differ, and no file shadows another module."""
    return f"lowprec_user_{hashlib.sha256(os.path.abspath(where).encode()).hexdigest()[:12]}"


def _load_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ReferenceProblem(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its classes pickle by this name (Ray, DataLoader workers)
    writes = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # no __pycache__ beside the user's file
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.dont_write_bytecode = writes
    return module


def factory(text: str) -> Callable[..., Any]:
    """The callable a reference names; ReferenceProblem for a missing or uncallable one."""
    where, attr = split(text)
    module = import_module(where)
    fn = getattr(module, attr, None)
    if fn is None:
        public = sorted(name for name, value in vars(module).items() if callable(value) and not name.startswith("_")
                        and getattr(value, "__module__", None) == module.__name__)
        raise ReferenceProblem(f"{where} has no {attr!r}" + (f"; it defines {', '.join(public)}" if public else ""))
    if not callable(fn):
        raise ReferenceProblem(f"{text}: {attr!r} is a {type(fn).__name__}, not a callable")
    return fn


def options_problem(text: str, fn: Callable[..., Any], positional: int, options: Mapping[str, Any]) -> str | None:
    """What the factory's signature says of ``positional`` arguments plus keyword ``options`` (None: it
    takes them)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin without a signature: its call says it
    try:
        signature.bind(*range(positional), **options)
    except TypeError as error:
        takes = [p.name for p in list(signature.parameters.values())[positional:]
                 if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return (f"{text}: {error}; it takes " + (", ".join(takes) if takes else "no options")
                + " beyond its " + str(positional) + " positional arguments")
    return None


def source(text: str) -> dict[str, str | None]:
    """Where the code of a reference or an import comes from: ``{reference, file, sha256}`` of the
    module's file (file and sha256 None for a module without one)."""
    where = split(text)[0] if is_reference(text) else text
    module = import_module(where)
    file = getattr(module, "__file__", None)
    digest = hashlib.sha256(Path(file).read_bytes()).hexdigest() if file and Path(file).is_file() else None
    return {"reference": text, "file": file, "sha256": digest}


def shipped(texts: list[str], stage: Path) -> list[str]:
    """What Ray's ``py_modules`` must carry so that every node can import these references and imports:
    each ``.py`` file as a copy in ``stage`` named as it is imported (``module_name``), and the top-level
    package of each module that is not installed (not under the interpreter's library folders) nor part of
    this project."""
    installed = {Path(p).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")
                 if (p := sysconfig.get_paths().get(key))}
    ours = Path(__file__).resolve().parent.parent
    out: list[str] = []
    for text in texts:
        where = split(text)[0] if is_reference(text) else text
        if where.endswith(".py"):
            stage.mkdir(parents=True, exist_ok=True)
            path = str(stage / f"{module_name(where)}.py")
            temporary = stage / f".{module_name(where)}.tmp"
            shutil.copyfile(where, temporary)
            os.replace(temporary, path)
        else:
            top = import_module(where.split(".")[0])
            origin = getattr(top, "__file__", None)
            if origin is None:
                continue  # a namespace package or a builtin: nothing to ship
            origin_path = Path(origin).resolve()
            package = origin_path.parent if origin_path.name == "__init__.py" else origin_path
            if package.parent == ours or any(package.is_relative_to(root) for root in installed):
                continue
            path = str(package)
        if path not in out:
            out.append(path)
    return out
