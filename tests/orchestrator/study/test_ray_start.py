"""Starting and joining Ray (orchestrator/study/ray_session.py): an address where no cluster answers fails at
once, in one line; Ctrl-C and SIGTERM while Ray starts wait for ray.init, then shut down what started and
print the resume command; SIGTERM acts as Ctrl-C. No Ray starts but in the one slow test, which starts a local
Ray and stops it with SIGTERM while it starts.
"""
from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.study import ray_session, runner
from orchestrator.study.sweep_file import load_sweep
from tests.helpers import ROOT, TINY_SWEEP, numba_cache_dir, write

# what start_ray sets in the environment, put back after each test
_SET = ("RAY_AIR_NEW_OUTPUT", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_MODE", "RAY_prestart_worker_first_driver",
        "RAY_num_prestart_python_workers")


@pytest.fixture
def environment(monkeypatch):
    for name in _SET:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def _closed_port() -> int:
    """A loopback port nothing listens on (just released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_joining_an_address_where_nothing_listens_exits_1_at_once_naming_it(tmp_path, monkeypatch, environment,
                                                                            capsys):
    ray = pytest.importorskip("ray")

    def init(**kwargs):
        raise AssertionError("ray.init was called: it retries such an address for minutes")

    monkeypatch.setattr(ray, "init", init)
    address = f"127.0.0.1:{_closed_port()}"
    sweep = write(tmp_path, TINY_SWEEP)
    argv = ["run", str(sweep), "--results", str(tmp_path / "results"), "--address", address]
    assert main(argv) == 1
    advice = "start it (`ray start --head`) or correct the address"
    assert capsys.readouterr().err == (f"error: cannot join the Ray cluster at {address} (--address): nothing "
                                       f"listens there (connection refused); {advice}\n")
    # something answers there, but Ray connects elsewhere: to this node's address for a loopback one
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        target = f"127.0.0.1:{_closed_port()}"
        monkeypatch.setattr("ray._private.services.canonicalize_bootstrap_address", lambda *args: target)
        argv[-1] = address
        assert main(argv) == 1
    assert capsys.readouterr().err == (f"error: cannot join the Ray cluster at {address} (--address; Ray connects "
                                       f"to {target}): nothing listens there (connection refused); {advice}\n")
    with pytest.raises(ray_session.RayUnreachable, match=r"at 127\.0\.0\.1:70000 \(RAY_ADDRESS\): the port must be "
                                                         r"in \[1, 65535\];"):
        ray_session._check_answers("127.0.0.1:70000", "RAY_ADDRESS")


def test_sigterm_acts_as_ctrl_c(monkeypatch):
    before = signal.getsignal(signal.SIGTERM)
    restore = ray_session.sigterm_as_ctrl_c()
    try:
        with pytest.raises(KeyboardInterrupt):  # Python's own Ctrl-C handler
            os.kill(os.getpid(), signal.SIGTERM)
        seen = []
        with monkeypatch.context() as patch:
            patch.setattr(signal, "getsignal", lambda signum: lambda *args: seen.append(signum))
            os.kill(os.getpid(), signal.SIGTERM)  # Tune's, while it runs trials: it stops them
        assert seen == [signal.SIGINT]
    finally:
        restore()
    assert signal.getsignal(signal.SIGTERM) is before


def _fake_ray(init):
    calls = []
    fake = types.SimpleNamespace(init=lambda **kwargs: (calls.append("init"), init())[0],
                                 shutdown=lambda: calls.append("shutdown"))
    return fake, calls


def test_an_interrupt_while_ray_starts_waits_for_ray_init_then_shuts_ray_down(monkeypatch, environment):
    def init():  # Ctrl-C, then SIGTERM, and Ray sets its own SIGTERM handler (it exits on the spot)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        signal.signal(signal.SIGTERM, lambda *args: sys.exit(15))

    fake, calls = _fake_ray(init)
    monkeypatch.setitem(sys.modules, "ray", fake)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        ray_session.start_ray(None)
    assert calls == ["init", "shutdown"]  # ray.init ran to its end; then what it started was shut down
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    fake, calls = _fake_ray(lambda: None)
    monkeypatch.setitem(sys.modules, "ray", fake)
    ray_session.start_ray(None)
    assert calls == ["init"]


def test_a_local_ray_starts_quietly_asking_for_token_authentication_by_name(monkeypatch, environment):
    # Ray 2.60 turns token authentication on for a new local cluster, and warns that it did unless asked
    import logging

    started = []
    fake = types.SimpleNamespace(init=lambda **kwargs: started.append((kwargs, os.environ.get("RAY_AUTH_MODE"))),
                                 shutdown=lambda: None)
    monkeypatch.setitem(sys.modules, "ray", fake)
    ray_session.start_ray(None)
    ((kwargs, mode),) = started
    assert mode == "token" and kwargs["logging_level"] == logging.WARNING and kwargs["log_to_driver"] is False
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's own choice is kept
    ray_session.start_ray(None)
    assert started[-1][1] == "disabled"


def test_an_interrupt_before_any_trial_records_nothing_and_says_how_to_resume(tmp_path, monkeypatch, capsys):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(ray_session, "start_ray", interrupted)
    sweep = load_sweep(write(tmp_path, TINY_SWEEP))
    results = (tmp_path / "results").resolve()
    stream = io.StringIO()
    assert runner.run_sweep(sweep, results, stream=stream) == (results, len(sweep.trials))
    assert stream.getvalue().endswith(f"] interrupted: {len(sweep.trials)} trial(s) not finished; to run them: "
                                      f"{runner.resume_command(sweep.path, results)}\n")
    assert not list((results / "trials").glob("*.json"))
    assert main(["run", str(sweep.path), "--results", str(results), "--resume"]) == 1
    assert "Traceback" not in capsys.readouterr().err


def _descendants(pid: int) -> dict[int, str]:
    """``pid`` and every process below it, with their names."""
    parents, names = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text.split(" (", 1)[1].rsplit(")", 1)
        parents[int(stat.parent.name)], names[int(stat.parent.name)] = int(rest.split()[1]), name
    found, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return {p: names.get(p, "?") for p in found}


def _alive(pid: int, name: str) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().split(" (", 1)[1].rsplit(")", 1)
    except OSError:
        return False
    return fields[0] == name and fields[1].split()[0] != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_sigterm_while_a_local_ray_starts_shuts_it_down_and_says_how_to_resume(tmp_path):
    sweep = write(tmp_path, TINY_SWEEP)
    results = tmp_path / "results"
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0",
               NUMBA_CACHE_DIR=numba_cache_dir())
    driver = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(sweep), "--results", str(results)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started: dict[int, str] = {}  # every process below the driver, as long as it runs
    left = []
    try:
        deadline = time.monotonic() + 60
        while "gcs_server" not in started.values() and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.05)
            started.update(_descendants(driver.pid))
        assert "gcs_server" in started.values(), "Ray's GCS never started"
        driver.send_signal(signal.SIGTERM)  # Ray is starting: its GCS is up, ray.init has not returned
        deadline = time.monotonic() + 60
        while driver.poll() is None and time.monotonic() < deadline:
            started.update(_descendants(driver.pid))
            time.sleep(0.05)
        out = driver.communicate(timeout=10)[0]
        deadline = time.monotonic() + 10  # processes Ray asked to end may take a moment
        while (left := [(pid, name) for pid, name in started.items() if _alive(pid, name)]) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.wait()
        for pid, name in started.items():  # only what this test started
            if _alive(pid, name):
                os.kill(pid, signal.SIGKILL)
    assert driver.returncode == 1, out[-3000:]
    assert f"to run them: {runner.resume_command(sweep.resolve(), results.resolve())}" in out, out[-3000:]
    assert "Traceback" not in out and "SIGTERM received" not in out, out[-3000:]
    assert left == [], left
