"""The study lock several drivers share (`tuner.storage.locks`), on SQLite files and real Postgres.

What the confirmation stage relies on: while one holder has it, another waits; a holder that
is killed (SIGKILL, nothing cleaned up) releases it with its connection or file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tuner.storage.locks import lock_key, study_lock

pytestmark = pytest.mark.postgres


def test_a_second_holder_waits_for_the_first(storage_url: str) -> None:
    events: list[str] = []

    def second() -> None:
        with study_lock(storage_url, "s", "confirm"):
            events.append("second")

    with study_lock(storage_url, "s", "confirm"):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(1.0)
        events.append("first done")
    thread.join(30)
    assert events == ["first done", "second"]
    # Another study's (or purpose's) lock is another lock.
    with study_lock(storage_url, "s", "confirm"):
        done = threading.Event()

        def other() -> None:
            with study_lock(storage_url, "t", "confirm"), study_lock(storage_url, "s", "x"):
                done.set()

        threading.Thread(target=other).start()
        assert done.wait(20)


def test_a_killed_holder_releases_it(storage_url: str) -> None:
    code = (
        "import sys, time\n"
        "from tuner.storage.locks import study_lock\n"
        "with study_lock(sys.argv[1], 's', 'confirm'):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    holder = subprocess.Popen(
        [sys.executable, "-c", code, storage_url], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        got = threading.Event()

        def waiter() -> None:
            with study_lock(storage_url, "s", "confirm"):
                got.set()

        threading.Thread(target=waiter, daemon=True).start()
        assert not got.wait(1.5)  # held by the live process
        os.kill(holder.pid, signal.SIGKILL)
        assert got.wait(20)
    finally:
        holder.kill()
        holder.wait()


def test_the_key_is_the_same_in_every_process() -> None:
    # Python's hash() of a str differs between processes; the lock key must not.
    out = subprocess.run(
        [sys.executable, "-c", "from tuner.storage.locks import lock_key; "
         "print(lock_key('s', 'confirm'))"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "7"},
    ).stdout  # fmt: skip
    assert int(out) == lock_key("s", "confirm")
    assert lock_key("s", "confirm") != lock_key("t", "confirm")
    assert -(2**63) <= lock_key("s", "confirm") < 2**63
