"""The Ray nodes of an emulated cluster: a head in host 0, then one node in each other host.

Nodes start one at a time (parallel starts race for the socket names of Ray's session folder). Every node
offers ``workers_per_host`` units of ``HOST_RESOURCE`` and a logical CPU for each: a trial's workers ask for
one unit each, so a host holds at most that many of them (without the cap Ray's packing would put every
worker on one host and bypass the links). Every host shares this machine's cores: the runner sets the
threads. The head offers one more CPU than the others, for the Tune trial functions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from .netns import Network, NetworkError

RAY_PORT = 6379
HOST_RESOURCE = "emu_host"
_NODE_CPUS = 1  # per worker slot
_OBJECT_STORE_BYTES = 200 * 1000**2


def _ray_binary() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if found is None:
        raise NetworkError("the `ray` command was not found beside this Python; install ray")
    return found


def start(network: Network, hosts: int, workers_per_host: int, temp_dir: Path, address: str,
          env: dict[str, str]) -> None:
    """Start the Ray nodes of ``hosts`` hosts of ``network``, the head's at ``address`` with its session in
    ``temp_dir``, each node with the environment ``env``; NetworkError naming the host where `ray start`
    failed."""
    ray = _ray_binary()
    common = ["--object-store-memory", str(_OBJECT_STORE_BYTES), "--disable-usage-stats"]
    resources = json.dumps({HOST_RESOURCE: workers_per_host})
    cpus = _NODE_CPUS * workers_per_host
    for i in range(hosts):
        if i == 0:
            argv = [ray, "start", "--head", "--node-ip-address", network.address(0), "--port", str(RAY_PORT),
                    "--temp-dir", str(temp_dir), "--include-dashboard", "false", "--num-cpus", str(cpus + 1)]
        else:
            argv = [ray, "start", "--address", address, "--node-ip-address", network.address(i),
                    "--num-cpus", str(cpus)]
        done = subprocess.run(network.command(i, [*argv, *common, "--resources", resources], env),
                              capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
            raise NetworkError(f"`ray start` in {network.host(i)} failed: {' '.join(tail)}")
