"""Making one file of a sweep's results, its failures reported one way (no Ray, no pandas).

A file can fail for a reason that is not the filesystem's: a value its format cannot hold, a figure that
cannot be drawn, an error in the code that builds it. ``making(path)`` turns such an error into a
``FileError``, an OSError that names the file and says why in one line (errno None), so that every caller
reports it as it reports a full disk (orchestrator.cli's ``export``: one line, exit status 1;
export.export_or_warn after a run) and never with a traceback. OSErrors pass unchanged: they name their
file already (orchestrator.study.records.atomic_path).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

__all__ = ["FileError", "making", "one_line"]


class FileError(OSError):
    """A file of the results that could not be made: ``filename`` names it, ``strerror`` says why (one line)."""


def one_line(error: BaseException) -> str:
    """``Type: message`` with the message's whitespace (newlines included) collapsed to single spaces."""
    message = " ".join(str(error).split())
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


@contextlib.contextmanager
def making(path: Path) -> Iterator[None]:
    """Inside the block ``path`` is made: an Exception other than OSError becomes a ``FileError`` naming it."""
    try:
        yield
    except OSError:
        raise
    except Exception as error:
        raise FileError(None, one_line(error), str(path)) from error
