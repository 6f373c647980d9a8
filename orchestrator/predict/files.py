"""Where predict and advise save their table: a file named by their options (``options.OPTIONS``' name
parts), so that a call for another cluster keeps the file of this one; and whether it can be written,
found before any work.
"""
from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .options import OPTIONS

PREDICTIONS_DIR = "predictions"


def predictions_path(results: Path, values: Mapping[str, Any]) -> Path:
    """The file of the predictions for these option ``values`` (text as typed, lower case), e.g.
    predictions/100mbit_8w_5us_overlap-true_x1.csv; with several workers per host, hosts x workers and the
    intra link's rate: predictions/25gbit_2x8w_2400gbit-intra_5us_overlap-true_x1.csv."""
    name = "_".join(part for part in (option.name_part(values) for option in OPTIONS) if part)
    return results / PREDICTIONS_DIR / f"{name}.csv"


def check_writable(path: Path) -> None:
    """OSError where ``write_atomic`` could not write ``path``: its folder cannot be made or written in (a
    read-only file system, no permission, a file in the way), the name is too long, or a folder is there.
    Makes the folder."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    for folder in (path.parent, *path.parent.parents):  # mkdir would say only "File exists"
        if folder.exists():
            if not folder.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, f"{folder} is not a folder", str(folder))
            break
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.unlink(temporary)
