"""workloads.references: the user's modules imported under a guard that turns their exits into a one-line
problem (``lowprec validate`` exited 0 when an ``imports:`` module called ``os._exit(0)``), and only theirs."""
from __future__ import annotations

import os

import pytest

from workloads import references


class Exited(BaseException):
    """What the test's os._exit raises: had the guard let a call through, pytest would have ended."""


@pytest.fixture
def exits(monkeypatch):
    calls: list[int] = []

    def exit_for_test(status):
        calls.append(status)
        raise Exited(status)

    monkeypatch.setattr(os, "_exit", exit_for_test)
    yield calls
    assert os._exit is exit_for_test  # put back


def test_os_exit_while_imported_is_a_reference_problem(tmp_path, exits):
    (tmp_path / "quits.py").write_text("import os\ntry:\n    os._exit(4)\nexcept BaseException:\n    raise\n")
    with pytest.raises(references.ReferenceProblem, match=r"cannot import .*quits\.py: it called os\._exit\(4\) "
                                                          r"while being imported$"):
        references.import_module(str(tmp_path / "quits.py"))
    assert exits == []  # never reached the process's own exit


def test_other_threads_exit_as_they_ask_while_a_module_imports(tmp_path, exits):
    # a thread of Ray's, or one the module starts, is not the import's own
    (tmp_path / "threads.py").write_text(
        "import os, threading\n"
        "seen = []\n"
        "def work():\n"
        "    try:\n"
        "        os._exit(7)\n"
        "    except BaseException as error:\n"
        "        seen.append(type(error).__name__)\n"
        "thread = threading.Thread(target=work)\n"
        "thread.start()\n"
        "thread.join()\n")
    module = references.import_module(str(tmp_path / "threads.py"))
    assert exits == [7] and module.seen == ["Exited"]
    assert references._GUARDED == {}


def test_sys_exit_while_imported_names_the_call(tmp_path):
    (tmp_path / "quits.py").write_text("import sys\nsys.exit()\n")
    with pytest.raises(references.ReferenceProblem, match=r"it called sys\.exit\(\) while being imported$"):
        references.import_module(str(tmp_path / "quits.py"))
