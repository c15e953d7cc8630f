"""Ray for a study: start a private local instance or join a cluster, and stop it leaving
nothing behind.

A local instance gets its own temp dir and ports (so two studies on one machine run side by
side), its own token file in that dir rather than in the user's home (`_private_token`), and
the driver's niceness for the servers its workers start (`DRIVER_NICE_ENV`). `--ray-address`
is checked with a socket connect first, so an unreachable cluster is one line within seconds
instead of Ray's minutes. `stop_ray` shuts Ray down and removes the temp dir and the token;
`ray_temp_dir` finds that dir for the second Ctrl-C's quick exit. `cluster_slots` checks, once
Ray is up and before the study is opened, that the cluster offers the study's slots.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from tuner.errors import ConfigError
from tuner.server.supervisor import DRIVER_NICE_ENV

__all__ = [
    "RAY_CONNECT_TIMEOUT_S",
    "check_ray_address",
    "check_slots",
    "cluster_slots",
    "ray_temp_dir",
    "slots_offered",
    "start_ray",
    "stop_ray",
]

RAY_CONNECT_TIMEOUT_S = 5.0


def check_ray_address(address: str) -> None:
    """One clear line within seconds when nothing answers at `address` (Ray waits minutes)."""
    if address in ("auto", "local"):
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    host, port = parts.hostname, parts.port or (10001 if parts.scheme == "ray" else 6379)
    if not host:
        raise ConfigError(f"--ray-address {address!r} is not HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, port), timeout=RAY_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ConfigError(
            f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one with "
            "`ray start --head` or leave out --ray-address for a local one"
        ) from None


class _NoTokenNotice(logging.Filter):
    """Drops Ray's notice that a new local instance turned token authentication on.

    Ray (2.5x) logs it at every `ray.init()` that starts a cluster while `RAY_AUTH_MODE` is unset
    ("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt
    out."): in tuner's output it reads as a problem to fix, and there is none (the private
    instance keeps token authentication on). Setting the mode instead works only before Ray is
    imported, which a library cannot promise; other warnings of that logger still show.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled")


_RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def _private_token(ray_tmp: Path) -> None:
    """A new local instance's token file, in its own temp dir, not in the user's home.

    With token authentication on (Ray 2.5x's default for a local `ray.init()`) and no token
    anywhere, Ray writes a new one to ~/.ray/auth_token and leaves it there after the study.
    Unless the user chose (RAY_AUTH_MODE=disabled, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH set, or
    a ~/.ray/auth_token of their own, which Ray then uses), the instance gets a 0600 file in its
    private temp dir, named by RAY_AUTH_TOKEN_PATH for the driver and, through the environment,
    for Ray's daemons and workers; `stop_ray` removes both.
    """
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return
    if any(os.environ.get(v) for v in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return
    if (Path.home() / ".ray" / "auth_token").exists():
        return
    path = ray_tmp / "auth_token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)
    _reset_token_cache()


def _reset_token_cache() -> None:
    # Ray's C++ loader caches the token it found first; a second local instance in this
    # process has another file. A best effort: the loader is Ray's internal API.
    with contextlib.suppress(Exception):
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

        AuthenticationTokenLoader.instance().reset_cache()


def stop_ray(ray_tmp: Path | None) -> None:
    """Shut Ray down; a local instance's temp dir and private token go with it."""
    import ray

    ray.shutdown()
    if ray_tmp is None:
        return
    shutil.rmtree(ray_tmp, ignore_errors=True)
    token = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if token and Path(token).parent == ray_tmp:
        del os.environ["RAY_AUTH_TOKEN_PATH"]
        _reset_token_cache()


def start_ray(address: str | None, *, checked: bool = False) -> Path | None:
    """Start or join Ray; the private temp dir of a local instance this call started.

    `checked`: the caller has checked that `address` answers (`check_ray_address`), so it is
    not checked again before joining.
    """
    import ray

    if ray.is_initialized():
        return None
    auth_log = logging.getLogger(_RAY_AUTH_LOGGER)
    if not any(isinstance(f, _NoTokenNotice) for f in auth_log.filters):
        auth_log.addFilter(_NoTokenNotice())
    if address:
        if not checked:
            check_ray_address(address)
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        return None
    # address="local": never join another study's instance found through /tmp/ray; a temp
    # dir of its own keeps two local instances' sessions and sockets apart.
    ray_tmp = Path(tempfile.mkdtemp(prefix="tuner-ray-", dir=_short_tmp()))
    _private_token(ray_tmp)
    # Ray runs its workers at niceness 15 and vLLM would inherit it from the worker that
    # launches it, so any other process on the box would outrank the server being measured.
    # A local instance inherits this environment: the supervisor puts the server back at the
    # driver's niceness (tuner/server/supervisor.py).
    os.environ.setdefault(DRIVER_NICE_ENV, str(os.getpriority(os.PRIO_PROCESS, 0)))
    ray.init(
        address="local",
        num_cpus=os.cpu_count() or 1,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        _temp_dir=str(ray_tmp),
    )
    return ray_tmp


def _short_tmp() -> str | None:
    # Ray's socket paths must stay under 107 bytes; mkdtemp's private 0700 dir keeps it safe.
    return "/tmp" if Path("/tmp").is_dir() else None  # noqa: S108


def ray_temp_dir() -> str | None:
    """The local Ray instance's private temp dir (`start_ray`'s), None when there is none."""
    try:
        import ray._private.worker as ray_worker

        node = ray_worker._global_node
        temp = node.get_temp_dir_path() if node is not None else None
    except Exception:  # a best effort on the way out: Ray's internals may move
        return None
    if temp and Path(temp).parent.name.startswith("tuner-ray-"):
        return str(Path(temp).parent)
    return None


def slots_offered(
    nodes: list[dict[str, float]], *, gpus_per_slot: int, cpu_resource: str
) -> int | None:
    """Slots a cluster's nodes (each node's total resources) hold; None: a CPU preset on a
    cluster that offers no CPU slot resource (nothing to check against).

    A GPU slot is `gpus_per_slot` GPUs of one node (a server does not span nodes); a CPU slot
    is one unit of `cpu_resource`, which a node offers per CPU server it hosts.
    """
    if gpus_per_slot > 0:
        return sum(int(n.get("GPU", 0) // gpus_per_slot) for n in nodes)
    if not any(cpu_resource in n for n in nodes):
        return None
    return sum(int(n.get(cpu_resource, 0)) for n in nodes)


def check_slots(
    slots: int,
    nodes: list[dict[str, float]],
    *,
    gpus_per_slot: int,
    gpu_count: int,
    cpu_resource: str,
    where: str,
    from_option: bool,
) -> None:
    """One line (ConfigError, exit 2) when the study's slots do not fit what Ray offers.

    `slots` comes from `--slots` (`from_option`) or from the preset's `gpu.count`; `nodes`
    are the alive nodes' total resources; `where` names the cluster in the line.
    """
    offered = slots_offered(nodes, gpus_per_slot=gpus_per_slot, cpu_resource=cpu_resource)
    asked = f"--slots {slots}" if from_option else f"the preset's gpu.count {gpu_count}"
    if offered is None:
        if len(nodes) > 1:
            raise ConfigError(
                f"{asked} asks for {slots} CPU server slot(s), but the Ray cluster at {where} "
                f"({len(nodes)} nodes) offers no {cpu_resource!r} resource; start each CPU node "
                f"with `ray start ... --resources '{{\"{cpu_resource}\": 1}}'` (one server per box)"
            )
        return  # one box: the preset's count is the operator's word for it
    if slots <= offered:
        return
    unit = f"{gpus_per_slot} GPU(s) of one node" if gpus_per_slot else f"one {cpu_resource}"
    per_node = ", ".join(
        f"{n.get('GPU', 0) if gpus_per_slot else n.get(cpu_resource, 0):g}" for n in nodes
    )
    raise ConfigError(
        f"{asked} needs {slots} slot(s) of {unit}; the Ray cluster at {where} offers {offered} "
        f"({len(nodes)} node(s) with {per_node}); pass --slots {max(offered, 1)} or add nodes"
        if offered
        else f"{asked} needs {slots} slot(s) of {unit}; the Ray cluster at {where} offers none "
        f"({len(nodes)} node(s)); start nodes with {'GPUs' if gpus_per_slot else cpu_resource}"
    )


def cluster_slots(slots: int | None, gpu: object, where: str) -> int:
    """The study's slot count, checked against the Ray cluster this process has joined.

    `gpu` is the preset's `GpuPart`; `slots` is `--slots` (None: the preset's). Call once Ray
    is initialized and before the study is opened, so a misfit writes nothing.
    """
    import ray

    from tuner.study.trial.workers import CPU_SLOT_RESOURCE

    gpus_per_slot = int(getattr(gpu, "gpus_per_slot", 0))
    wanted = slots if slots is not None else int(getattr(gpu, "slots", 1))
    nodes = [dict(n["Resources"]) for n in ray.nodes() if n["Alive"]]
    check_slots(
        wanted,
        nodes,
        gpus_per_slot=gpus_per_slot,
        gpu_count=int(getattr(gpu, "count", 1)),
        cpu_resource=CPU_SLOT_RESOURCE,
        where=where,
        from_option=slots is not None,
    )
    return wanted
