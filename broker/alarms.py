"""Memory and disk alarms: block publishers while the broker is short of either.

Every second :meth:`Alarms.check` compares the process's resident memory with the high
watermark (a fraction of the machine's RAM, 0.4 by default, RabbitMQ's
``vm_memory_high_watermark``) and the free space of the data dir's file system with the disk
free limit (50 MB, ``disk_free_limit``). While either alarm is on, every connection that has
published is sent Connection.Blocked (when the client announced the ``connection.blocked``
capability) and is no longer read from; when all alarms clear, Connection.Unblocked and
reading resumes. Consumers keep being served, which is how memory comes back down.

The disk alarm also goes on at once when a write to the data dir fails (disk full before the
free-space check saw it: :meth:`Alarms.write_failed`), and stays on until the failed writes
have been retried successfully.

Past the paging threshold (half the watermark, ``vm_memory_high_watermark_paging_ratio``)
queues get a smaller RAM budget, so new messages go to disk sooner.

Source: https://www.rabbitmq.com/docs/memory, /docs/disk-alarms, /docs/connection-blocked.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("amqpq.alarms")

DEFAULT_WATERMARK = 0.4  # fraction of RAM
PAGING_RATIO = 0.5  # of the watermark
DEFAULT_DISK_FREE_LIMIT = 50 * 1000 * 1000  # bytes


def total_memory() -> int:
    """Physical memory of the machine (bytes)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_malloc_trim = _load_malloc_trim()


def release_free_memory() -> None:
    """Give freed heap memory back to the OS (glibc ``malloc_trim``), so that RSS falls
    once messages are consumed; a no-op elsewhere."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def process_rss() -> int:
    """Resident memory of this process (bytes), from /proc/self/statm."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Alarms:
    """Alarm state and the callbacks that act on it.

    Args:
        data_dir: whose file system the disk alarm watches.
        watermark: memory limit as a fraction of RAM (<= 1.0) or absolute bytes (> 1).
        disk_free_limit: bytes that must stay free.
        on_change: called with True when an alarm goes on, False when all clear.
        on_paging: called with True/False when the paging threshold is crossed.
    """

    def __init__(self, data_dir: Path, watermark: float = DEFAULT_WATERMARK,
                 disk_free_limit: int = DEFAULT_DISK_FREE_LIMIT,
                 on_change: Callable[[bool], None] | None = None,
                 on_paging: Callable[[bool], None] | None = None,
                 rss: Callable[[], int] = process_rss,
                 disk_free: Callable[[], int] | None = None) -> None:
        self.limit = int(watermark * total_memory()) if watermark <= 1.0 else int(watermark)
        self.disk_free_limit = disk_free_limit
        self.on_change = on_change
        self.on_paging = on_paging
        self._rss = rss
        self._disk_free = disk_free or (lambda: shutil.disk_usage(data_dir).free)
        self.memory = False
        self.disk = False
        self.paging = False
        self.write_error = False  # a write to the data dir is failing

    @property
    def active(self) -> list[str]:
        """Resources in alarm: ``["memory"]``, ``["disk"]``, both or none."""
        return [name for name, on in (("memory", self.memory), ("disk", self.disk)) if on]

    def check(self) -> None:
        """Re-read memory and disk; fire callbacks on changes."""
        before = bool(self.active)
        if self.memory or self.paging:
            release_free_memory()  # otherwise freed memory keeps RSS (and the alarm) up
        rss = self._rss()
        self.memory = rss >= self.limit
        self.disk = self._disk_low()
        paging = rss >= self.limit * PAGING_RATIO
        if paging != self.paging:
            self.paging = paging
            log.info("memory %s the paging threshold (%d bytes)",
                     "above" if paging else "below", int(self.limit * PAGING_RATIO))
            if self.on_paging is not None:
                self.on_paging(paging)
        self._notify(before, rss)

    def write_failed(self, failing: bool) -> None:
        """Writes to the data dir started failing (True) or succeed again (False): the disk
        alarm goes on at once, and off when the free space allows it too."""
        before = bool(self.active)
        self.write_error = failing
        self.disk = self._disk_low()
        self._notify(before, self._rss())

    def _disk_low(self) -> bool:
        if self.write_error:
            return True
        try:
            return self._disk_free() < self.disk_free_limit
        except OSError:
            return False

    def _notify(self, before: bool, rss: int) -> None:
        now = bool(self.active)
        if now != before:
            if now:
                log.warning("resource alarm set: %s (rss %d bytes, limit %d%s)",
                            ", ".join(self.active), rss, self.limit,
                            ", a write failed" if self.write_error else "")
            else:
                log.warning("resource alarms cleared")
            if self.on_change is not None:
                self.on_change(now)
