"""What a :class:`~broker.broker.Broker` gets from the world around it, at construction.

The broker core is sans-IO: it never reads a clock, sleeps, blocks or measures the machine
on its own. :class:`BrokerEnvironment` hands it those capabilities in one object (as h2's
``H2Configuration`` and uvicorn's ``Config`` carry a connection's or server's settings),
instead of hooks set on the broker after it was built. :class:`~broker.config.BrokerConfig`
says *what* the broker should do (ports, limits, data dir); the environment says *with what*.

The defaults make the simplest broker a unit test wants: real monotonic clock, nobody woken
for timers (the test runs them), fsyncs on the calling thread, everything in memory, no
resource alarms. ``Broker(BrokerConfig(data_dir=d), BrokerEnvironment(storage=True))`` keeps
durable state on disk as the server does; the asyncio edge
(:class:`~amqp_server.server.BrokerServer`) passes the loop's clock and timer, a worker-thread
runner, storage and the real resource probes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.alarms import process_rss
from queue_store.durability import SyncRunner, run_inline


@dataclass(frozen=True)
class ResourceProbes:
    """How the memory and disk alarms measure the machine.

    Attributes:
        rss: resident memory of this process (bytes).
        disk_free: free space for the data dir (bytes); None: ``shutil.disk_usage`` of
            ``config.data_dir``.
    """

    rss: Callable[[], int] = process_rss
    disk_free: Callable[[], int] | None = None


@dataclass(frozen=True)
class BrokerEnvironment:
    """The broker's clock, timer wakeup, blocking-work runner, storage and resource probes.

    Attributes:
        clock: monotonic time in seconds; every deadline of the broker's
            :class:`~amqp_common.timers.Timers` (queue TTL, ``x-expires``, consumer timeout)
            is on it.
        wall: wall-clock seconds since the epoch, read once when the broker is built to
            place ``clock`` on the wall (``Timers.wall_ms``: persisted message expiry,
            stream timestamps, delayed-message due times, x-death times follow ``clock``
            from then on); tests pass their fake clock here too.
        wakeup: called with a new earliest timer deadline (seconds on ``clock``) so the edge
            can arm one loop timer for it and call ``broker.timers.run_due()``; None: nobody
            is woken (tests call ``run_due`` themselves).
        run_blocking: runs blocking work (a group-commit round's fsyncs) somewhere, then its
            ``done(error)`` callback on the broker's thread; the default runs it inline.
        storage: keep durable state under ``config.data_dir`` (message stores, queue
            indexes, ``definitions.json``); False: everything in memory.
        resources: probes for the memory and disk alarms; None: no alarms
            (``broker.alarms`` is None and a failed write blocks no publisher).
    """

    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    wakeup: Callable[[float], None] | None = None
    run_blocking: SyncRunner = run_inline
    storage: bool = False
    resources: ResourceProbes | None = None
