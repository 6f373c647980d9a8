"""The sweep's Ray: joined at an address, or started on this machine, and shut down at the end.

A local Ray listens on 127.0.0.1 only and starts no idle workers ahead; every worker imports this
checkout of the project and the user's shipped files (``runtime_env``). Ctrl-C and SIGTERM while Ray
starts or stops wait for it (interrupted, ray.init and ray.shutdown leave processes behind); while the
trials run SIGTERM acts as Ctrl-C, so Tune stops them and the runner prints the resume command.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..cluster.emulation import Cluster
from . import ray_output

_OBJECT_STORE_BYTES = 256 * 1024**2  # trials exchange only metrics; keep local Ray small
_JOIN_TIMEOUT_S = 10.0  # a cluster to join that accepts no connection in this long is not there
# The checkout's root: workers import this project from it (also where it is not pip-installed).
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


class RayUnreachable(RuntimeError):
    """No Ray cluster answers at the address to join."""


def start_ray(address: str | None, emulation: Cluster | None = None, py_modules: Sequence[str] = ()) -> None:
    """Join ``address`` (or RAY_ADDRESS, set by ``ray job submit``), else start a local Ray that
    listens on 127.0.0.1 only. Call before anything imports ray (the local address is read then).
    On an emulated cluster, wait until every host's node is alive. RayUnreachable where no cluster
    answers at the address; KeyboardInterrupt, with no Ray of this run left running, where Ctrl-C or
    SIGTERM came while Ray started."""
    ray_output.quiet_environment()
    source = "--address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        _check_answers(address, source)
    else:
        _local_environment()
    # Imported after the environment above is set (ray reads it then), before Tune's import starts beside.
    import ray  # noqa: F401

    # Tune's import (seconds of CPU) runs while ray.init waits on the processes it starts.
    import_in_background(f"{__package__}.trial")
    runtime_env = _runtime_env(emulation, py_modules)
    if address:
        _join(address, source, runtime_env, emulation)
    else:
        _start_local(runtime_env)


def _local_environment() -> None:
    """What a local Ray reads from the environment when ray is imported."""
    # Ray's node address is the loopback one where Ray clusters are off (as on macOS): then
    # every server of a local Ray, its metrics endpoints too, listens on 127.0.0.1 only.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    # No idle workers started ahead: the trials' processes carry the sweep's runtime_env, which such
    # workers lack, so they would only take the cores while the trials' workers start.
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    os.environ.setdefault("RAY_num_prestart_python_workers", "0")
    # Token authentication, which Ray 2.60 turns on for a new local cluster, asked for by name: ray.init
    # warns where it turns it on itself. A mode the user set is kept.
    os.environ.setdefault("RAY_AUTH_MODE", "token")


def _runtime_env(emulation: Cluster | None, py_modules: Sequence[str]) -> dict[str, Any]:
    """Every worker's: the project on its path, the emulated cluster's environment, the user's files."""
    python_path = os.pathsep.join(p for p in (str(_PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p)
    env_vars = {"PYTHONPATH": python_path}
    if emulation is not None:
        env_vars.update({key: value for key, value in emulation.env().items() if key != "RAY_ADDRESS"})
    runtime_env: dict[str, Any] = {"env_vars": env_vars}
    if py_modules:  # the user's code, uploaded to every node of the cluster
        runtime_env["py_modules"] = list(py_modules)
    return runtime_env


def _join(address: str, source: str, runtime_env: dict[str, Any], emulation: Cluster | None) -> None:
    import ray

    # An interrupt here stops ray.init (it may wait minutes for a cluster that does not answer as one).
    try:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
    except ConnectionError as error:  # ray.init found no cluster ("auto"), or gave up on the address
        raise RayUnreachable(f"cannot join the Ray cluster at {address} ({source}): "
                             f"{str(error).strip().splitlines()[0].rstrip('.')}") from None
    if emulation is not None:
        _wait_for_nodes(emulation.hosts)


def _start_local(runtime_env: dict[str, Any]) -> None:
    import ray

    # An interrupt inside ray.init leaves a half-started Ray (processes no one shuts down, at times a
    # crash at exit): it waits until ray.init returns (Ray bounds its start), then what started is shut down.
    with _HeldSignals() as held:
        try:
            ray.init(
                address="local",  # a new Ray even where `ray start` left a cluster address behind
                object_store_memory=_OBJECT_STORE_BYTES,
                include_dashboard=_dashboard_installed(),
                dashboard_host="127.0.0.1",
                runtime_env=runtime_env,
                log_to_driver=False,  # worker logs stay in the Ray session's log folder
                logging_level=ray_output.LOGGING_LEVEL,
            )
        except Exception:
            if not held.received:  # after an interrupt, what failed is the interrupt's doing
                raise
    if held.received:
        stop_ray()
        raise KeyboardInterrupt


def import_in_background(module: str) -> None:
    """Import ``module`` in a thread of its own, while this one waits on something else (Ray's start). A
    failure is left to the import where the module is needed, which says why."""
    def load() -> None:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - see above
            pass

    threading.Thread(target=load, name=f"import-{module}", daemon=True).start()


def _check_answers(address: str, source: str, timeout_s: float = _JOIN_TIMEOUT_S) -> None:
    """RayUnreachable unless something accepts a connection within ``timeout_s`` at ``address`` (host:port, or
    ray://host:port) and where ray.init connects for it (Ray replaces a loopback host with this node's
    address): ray.init retries an address where nothing listens for many minutes. Other forms ("auto",
    other protocols) are left to ray.init."""
    where = f"{address} ({source})"
    problem = _no_answer(address.removeprefix("ray://"), timeout_s)
    if problem is None and "://" not in address:
        from ray._private.services import canonicalize_bootstrap_address  # Ray 2.60: what ray.init does

        try:
            target = canonicalize_bootstrap_address(address)
        except (ConnectionError, ValueError) as error:
            target, problem = None, str(error).strip().splitlines()[0].rstrip(".")
        if target and target != address:
            where = f"{address} ({source}; Ray connects to {target})"
            problem = _no_answer(target, timeout_s)
    if problem:
        raise RayUnreachable(f"cannot join the Ray cluster at {where}: {problem}; start it (`ray start --head`) "
                             "or correct the address")


def _no_answer(address: str, timeout_s: float) -> str | None:
    """Why nothing at ``address`` (host:port; other forms pass) accepts a TCP connection, or None."""
    host, _, port = address.rpartition(":")
    if "://" in address or not (host and port.isdigit()):
        return None
    if not 0 < int(port) < 65536:
        return "the port must be in [1, 65535]"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except ConnectionRefusedError:
        return "nothing listens there (connection refused)"
    except OSError as error:
        return error.strerror or str(error)
    return None


class _HeldSignals:
    """Within it, Ctrl-C and SIGTERM are held: ``received`` says whether one came. Their handlers stay as
    they were, also where the code inside sets its own (ray.init's SIGTERM handler exits on the spot)."""

    _HELD = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> "_HeldSignals":
        self.received = False
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():  # only the main thread has handlers
            self._previous = {signum: signal.signal(signum, self._hold) for signum in self._HELD}
            self._set_handler, signal.signal = signal.signal, self._keep
        return self

    def _hold(self, signum: int, frame: Any) -> None:
        self.received = True

    def _keep(self, signum: int, handler: Any) -> Any:
        return self._hold if signum in self._HELD else self._set_handler(signum, handler)

    def __exit__(self, *exc: Any) -> None:
        if self._previous:
            signal.signal = self._set_handler
            for signum, handler in self._previous.items():  # None: a handler not set from Python
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def sigterm_as_ctrl_c() -> Callable[[], None]:
    """Make SIGTERM (a scheduler, `kill`) act as Ctrl-C: Tune stops the trials and the resume command is
    printed, where Ray's handler would dump a crash report. Returns what puts the handler back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _as_ctrl_c)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _as_ctrl_c(signum: int, frame: Any) -> None:
    """What Ctrl-C does now: Tune's handler while it runs trials, else KeyboardInterrupt (also where Ctrl-C
    is ignored, as in a background job)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def stop_ray() -> None:
    """Shut down this process's Ray (a local one ends; a joined cluster goes on), with Ctrl-C and SIGTERM held:
    interrupted, ray.shutdown leaves processes behind."""
    ray = sys.modules.get("ray")
    if ray is not None:
        with _HeldSignals():
            ray.shutdown()


def _wait_for_nodes(count: int, timeout_s: float = 60.0) -> None:
    """Nodes started just before may take a moment to register with the head."""
    import ray

    deadline = time.monotonic() + timeout_s
    while (alive := sum(node["Alive"] for node in ray.nodes())) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {alive} of the emulated cluster's {count} Ray nodes are alive after "
                               f"{timeout_s:g} s: see `lowprec cluster status`")
        time.sleep(0.2)


def _dashboard_installed() -> bool:
    """ray[default] brings the dashboard's web server packages."""
    return all(importlib.util.find_spec(m) is not None for m in ("aiohttp", "aiohttp_cors"))
