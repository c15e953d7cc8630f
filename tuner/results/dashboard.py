"""`tuner dashboard`: optuna-dashboard on the study storage, bound to 127.0.0.1 by default.

optuna-dashboard shows every trial's user attributes (KV cache tokens, tasks/h and interval,
cache hit %, failure kind...), which is why the study writes its measurements there too.
"""

from __future__ import annotations

from optuna_dashboard import run_server

from tuner.errors import ConfigError
from tuner.results.loading import open_optuna_storage

__all__ = ["serve_dashboard"]


def serve_dashboard(url: str, *, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve optuna-dashboard for the studies at `url` until interrupted.

    Raises:
        StorageError: the URL cannot be opened.
        ConfigError: the address cannot be bound (port in use, no such interface).
    """
    storage = open_optuna_storage(url)
    try:
        run_server(storage, host=host, port=port)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}; "
            "choose another --port or --host"
        ) from None
