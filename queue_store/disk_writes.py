"""Writing buffered records to files when the disk may be full.

A write to a full file system writes part of the buffer (a short write) or fails with
``ENOSPC``/``EDQUOT``/``EIO``. :func:`write_buffer` writes what it can, removes exactly the
written bytes from the buffer and returns the error instead of raising, so the caller's
offsets stay true and the rest is written by a later retry: nothing is lost or written
twice.

:class:`WriteErrors` lists the files (message stores, queue indexes, paging files) whose last
write failed. While it is not empty the broker keeps its disk alarm on (publishers are
blocked) and holds back the publisher confirms of messages not yet on disk; every tick it
retries the writes, and once all succeed the alarm follows the free space again.

Source: RabbitMQ https://www.rabbitmq.com/docs/disk-alarms (publishers are blocked while the
disk is short); write(2) on short writes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("amqpq.disk")


def write_buffer(fd: int, buffer: bytearray, offset: int | None = None) -> OSError | None:
    """Write ``buffer`` to ``fd`` (appending, or from file ``offset`` in bytes) and delete the
    written prefix from it. Returns None when all of it was written, otherwise the error that
    stopped the write (the unwritten rest stays in ``buffer``)."""
    written = 0
    error: OSError | None = None
    try:
        while written < len(buffer):
            # the whole buffer as is (the usual case); a copy of the rest after a short write
            chunk = buffer if written == 0 else buffer[written:]
            if offset is None:
                n = os.write(fd, chunk)
            else:
                n = os.pwrite(fd, chunk, offset + written)
            if n <= 0:  # not expected from a regular file; do not spin
                error = OSError(0, "write returned 0")
                break
            written += n
    except OSError as exc:
        error = exc
    del buffer[:written]
    return error


class Retryable(Protocol):
    """A file owner that can retry its buffered writes."""

    def flush(self) -> OSError | None: ...


class WriteErrors:
    """The sources whose last write failed.

    ``on_change(True)`` when the first source fails, ``on_change(False)`` when the last one
    recovers (the broker's disk alarm follows it).
    """

    def __init__(self) -> None:
        self.failing: dict[int, tuple[Retryable, OSError]] = {}
        self.on_change: Callable[[bool], None] | None = None
        self.failures = 0  # failed writes seen (stats, tests)

    @property
    def active(self) -> bool:
        return bool(self.failing)

    def update(self, source: Retryable, error: OSError | None) -> None:
        """Record the outcome of ``source``'s latest write."""
        if error is None:
            self.clear(source)
            return
        before = self.active
        if id(source) not in self.failing:
            log.error("write failed, will retry (publishers blocked meanwhile): %s", error)
        self.failures += 1
        self.failing[id(source)] = (source, error)
        if not before and self.on_change is not None:
            self.on_change(True)

    def clear(self, source: Retryable) -> None:
        """``source`` wrote everything, or is gone."""
        if self.failing.pop(id(source), None) is None:
            return
        log.warning("writes succeed again")
        if not self.failing and self.on_change is not None:
            self.on_change(False)

    def retry(self) -> None:
        """Retry every failing source's writes (called periodically)."""
        for source, _ in list(self.failing.values()):
            self.update(source, source.flush())
