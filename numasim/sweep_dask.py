"""A sweep's points on dask.distributed: the scheduler's address checked, the local cluster's settings,
and the points run as tasks (:mod:`numasim.sweep` makes the points and keeps their rows).

A sweep runs on a ``LocalCluster`` of one process per CPU by default (forked on Linux,
no dask profiler: :func:`local_workers`), or on an existing cluster with ``scheduler``,
whose address is checked before anything runs (:func:`check_scheduler`) and probed
before dask's client reads from it (:func:`probe_scheduler`).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import Any, Callable

from .errors import NumasimError

__all__ = ["check_scheduler", "probe_scheduler", "local_workers", "execute", "PROBE_S", "MAX_GREETING_BYTES"]

PROBE_S = 10.0  # how long a --scheduler may take to send its greeting
MAX_GREETING_BYTES = 2**20  # a scheduler's handshake is a few hundred bytes


def check_scheduler(address: str) -> None:
    """Refuse a --scheduler that is not a dask.distributed address, before anything runs."""
    from distributed.comm.addressing import get_address_host_port, parse_address

    try:
        if parse_address(address)[0] != "inproc":  # in-process: no host and port
            port = get_address_host_port(address)[1]
            if not 0 < port < 65536:
                raise ValueError(f"port {port} is not 1-65535")
    except ValueError as exc:
        raise NumasimError(f"--scheduler {address[:200]}: not a scheduler address ({str(exc)[:200]}); "
                           "expected HOST:PORT or SCHEME://HOST:PORT, e.g. tcp://10.0.0.5:8786") from None


def probe_scheduler(address: str) -> None:
    """Refuse a TCP address where no dask scheduler listens, before dask's client reads from it.

    A scheduler greets first: on a new connection it writes its handshake, a message whose first
    8 bytes give its size (distributed/comm/tcp.py), a few hundred bytes. Another service sends
    nothing (an HTTP server waits for a request: dask's client would wait out its timeout) or
    bytes that read as an absurd size (dask's client would try to allocate it)."""
    import socket
    import struct

    from distributed.comm.addressing import get_address_host_port, parse_address

    if parse_address(address)[0] != "tcp":  # tls, ucx, inproc: dask's own checks
        return
    host, port = get_address_host_port(address)
    where, wait_s = f"--scheduler {address[:200]}", PROBE_S
    try:
        sock = socket.create_connection((host, port), timeout=wait_s)
    except socket.timeout:
        raise NumasimError(f"{where}: cannot connect (no answer within {wait_s:g} s)") from None
    except OSError as exc:
        raise NumasimError(f"{where}: cannot connect ({str(exc)[:200]})") from None
    try:
        with sock:
            head = b""
            while len(head) < 8:
                got = sock.recv(8 - len(head))
                if not got:
                    break
                head += got
    except socket.timeout:
        raise NumasimError(f"{where}: connected, but nothing came within {wait_s:g} s; a dask scheduler greets "
                           "first (is it another service?)") from None
    except OSError as exc:
        raise NumasimError(f"{where}: the connection failed as it was read ({str(exc)[:200]})") from None
    size = struct.unpack("Q", head)[0] if len(head) == 8 else None
    if size is None or not 0 < size <= MAX_GREETING_BYTES:
        raise NumasimError(f"{where}: not a dask scheduler: its first bytes {head[:8]!r} are not the size of a "
                           "dask message (is it another service?)")


def execute(calls: dict[str, tuple[Callable[..., Any], tuple]], scheduler: str | None, workers: int,
            connected: Callable[[], None], finished: Callable[[str, "Exception | None", Any], None]) -> None:
    """Run ``calls`` (a task's key: its function and arguments) on ``scheduler``'s cluster, or on a local
    one of ``workers`` processes (0: one per CPU) made for them; ``connected()`` once the client is,
    and ``finished(key, error, value)`` as each task ends (a task is retried twice on a lost worker)."""
    from distributed import Client, LocalCluster, as_completed

    from .jobs import worker_count

    cluster = None
    if scheduler:
        probe_scheduler(scheduler)
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, ValueError, TypeError) as exc:
            raise NumasimError(f"--scheduler {scheduler[:200]}: cannot connect ({str(exc)[:200]})") from None
    else:
        n = max(1, min(worker_count(workers), len(calls)))
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=50)
        client = Client(cluster)
    try:
        connected()
        futures = {client.submit(fn, *args, key=f"numasim-point-{key}", pure=False, retries=2): key
                   for key, (fn, args) in calls.items()}
        for fut in as_completed(futures):
            try:
                value = fut.result()
            except Exception as exc:  # a task that fails is reported; the others go on
                finished(futures[fut], exc, None)
            else:
                finished(futures[fut], None, value)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


@contextlib.contextmanager
def local_workers():
    """The dask settings of a sweep's own LocalCluster, for the workers started (or restarted) in this block.

    - No statistical profiler: it samples a worker's stack every 10 ms, 5-10 % of a
      point's time, for a dashboard that a sweep does not start.
    - On Linux, workers forked, not spawned. A spawned worker is a new interpreter that
      imports distributed and numasim (about 1 s on 2 cores, then 0.3 s more for pandas
      at its first point); a forked one runs within 0.1 s with all that this process
      has imported. The nanny forks from the cluster's event-loop thread while this
      thread waits for it; Python 3.12+ warns about a fork in a process with threads,
      and that warning is silenced here. On macOS and Windows (fork unsafe or missing)
      workers are spawned.
    """
    import dask
    import distributed  # noqa: F401  (its config defaults first: leaving the block restores what was there before)

    settings: dict[str, Any] = {"distributed.worker.profile.enabled": False}
    if sys.platform.startswith("linux"):
        settings["distributed.worker.multiprocessing-method"] = "fork"
    with dask.config.set(settings), warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"This process .* is multi-threaded, use of fork", DeprecationWarning)
        yield
