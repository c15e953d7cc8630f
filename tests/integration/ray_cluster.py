"""A real two-node Ray cluster on this machine, started the way an operator starts one.

`ray start --head` on 127.0.0.1 and a second node with `ray start --address`, each with its
own temp dir, free ports, one CPU, a small object store and one `tuner_cpu_slot` (the custom
resource a CPU box offers tuner: one CPU server per box). Both run inside a PID namespace of
their own (`unshare --pid`), so `ray stop` (which kills every Ray process it can see by name)
stops this cluster only, and never the local Ray instances other tests or users run on the box.
The second node's `ray start` leads its own process group (its daemons keep it), so a test can
kill its raylet and then the whole group, as a machine lost mid-trial would.

Workers inherit the nodes' environment: `env` carries `TUNER_VLLM_COMMAND` (the fake vLLM,
`tuner.testing.fake_vllm`, standing in for real servers, two of which do not fit 2 cores).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import psutil

OBJECT_STORE_BYTES = 100 * 1024 * 1024  # the smallest Ray allows is 75 MiB
SLOT = "tuner_cpu_slot"


def ray_cli() -> str:
    """The `ray` command of the Python running the tests."""
    candidate = Path(sys.executable).parent / "ray"
    return str(candidate) if candidate.exists() else "ray"


# The namespace's pid 1: it reaps every orphan (a `ray start` that exits leaves its daemons to
# it), so a dead process never lingers as a zombie.
_INIT = """
import os, time
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.2)
"""


def free_port() -> int:
    """A port nothing listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def can_unshare() -> bool:
    """Whether this process may make a PID namespace (root, or user namespaces allowed)."""
    if not shutil.which("unshare") or not shutil.which("nsenter"):
        return False
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    return done.returncode == 0


def gone_or_zombie(proc: psutil.Process, timeout_s: float = 10.0) -> None:
    """Wait until `proc` has exited (reaped or a zombie: a process that is not our child)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise RuntimeError(f"process {proc.pid} outlived SIGKILL")


class RayCluster:
    """Head + one worker node in a private PID namespace (see the module docstring)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = {
            **env,
            # The GCS declares a silent node dead after 3 missed 1 s health checks (Ray's
            # default is 5 of 3 s): a lost node is noticed within seconds in these tests.
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_failure_threshold": "3",
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        self.tmp = Path(tempfile.mkdtemp(prefix="trc-", dir="/tmp"))
        # Ray's token authentication, as an operator sets it up: one token, shared by every
        # node and driver (here a file of this cluster's own, not ~/.ray/auth_token).
        token = self.tmp / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        self.auth_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
        self.env.update(self.auth_env)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # The namespace's init: every process of the cluster lives under it.
        self._ns = subprocess.Popen(
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child",
                sys.executable,
                "-c",
                _INIT,
            ],
            start_new_session=True,
        )
        self.ns_pid = self._wait_child(self._ns.pid)
        self.node2: subprocess.Popen[bytes] | None = None

    @staticmethod
    def _wait_child(pid: int) -> int:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            children = psutil.Process(pid).children()
            if children:
                return int(children[0].pid)
            time.sleep(0.05)
        raise RuntimeError("unshare did not start its child")

    def _in_ns(self, *argv: str) -> list[str]:
        return ["nsenter", "-t", str(self.ns_pid), "-p", "-m", "--", *argv]

    def _node_args(self, name: str) -> list[str]:
        return [
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            "--num-gpus=0",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            f"--resources={json.dumps({SLOT: 1})}",
            f"--temp-dir={self.tmp / name}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            "--disable-usage-stats",
        ]

    def start(self) -> None:
        """Start the head, then the second node; return once both are alive in the GCS."""
        subprocess.run(
            self._in_ns(
                ray_cli(),
                "start",
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--ray-client-server-port={free_port()}",
                *self._node_args("head"),
            ),
            env=self.env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        # The second node's `ray start` leads a process group of its own; its daemons keep
        # that group after it returns, so the whole node can be killed as one.
        log = (self.tmp / "node2.log").open("wb")
        self.node2 = subprocess.Popen(
            self._in_ns(ray_cli(), "start", f"--address={self.address}", *self._node_args("n2")),
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.node2_pgid = self.node2.pid
        if self.node2.wait(120) != 0:
            raise RuntimeError(f"the second Ray node did not start; see {self.tmp}")

    def processes(self) -> list[psutil.Process]:
        """Every process in the cluster's PID namespace but its init (host pids)."""
        try:
            ns = os.readlink(f"/proc/{self.ns_pid}/ns/pid")
        except OSError:
            return []
        found = []
        for p in psutil.process_iter():
            if p.pid == self.ns_pid:
                continue
            try:
                if os.readlink(f"/proc/{p.pid}/ns/pid") == ns and p.status() != "zombie":
                    found.append(p)
            except OSError:
                continue
        return found

    def raylets(self) -> list[psutil.Process]:
        """The raylet of each node."""
        found = []
        for p in self.processes():
            try:
                if p.name() == "raylet":
                    found.append(p)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
        return found

    def node2_processes(self) -> list[psutil.Process]:
        """The second node's processes: its process group."""
        found = []
        for p in self.processes():
            try:
                if os.getpgid(p.pid) == self.node2_pgid:
                    found.append(p)
            except ProcessLookupError:
                continue
        return found

    def kill_node2(self) -> None:
        """Lose the second node: SIGKILL its raylet, then its whole process group."""
        raylets = [p for p in self.node2_processes() if p.name() == "raylet"]
        assert len(raylets) == 1, raylets
        raylets[0].kill()
        gone_or_zombie(raylets[0])
        os.killpg(self.node2_pgid, signal.SIGKILL)

    def stop(self) -> subprocess.CompletedProcess[str]:
        """`ray stop` inside the namespace: this cluster's processes only."""
        done = subprocess.run(
            self._in_ns(ray_cli(), "stop", "--grace-period=10"),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return done

    def close(self) -> None:
        """Tear everything down whatever happened (the namespace's init takes its tree)."""
        if self.node2 is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.node2_pgid, signal.SIGKILL)
        self._ns.kill()  # --kill-child: the namespace's init dies, and with it every process
        self._ns.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)
