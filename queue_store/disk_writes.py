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


class SegmentSync:
    """The group-commit side of an append-only log written in rotating segment files (the
    queue index, the delayed-message log): which file descriptors an fsync round must cover.

    A subclass sets ``_fd`` (the current segment's fd), appends the fds of segments it
    rotates out to ``_retired_fds`` (they are closed once an fsync covered them), sets
    ``unsynced`` when it wrote to ``_fd``, and implements :meth:`flush`.
    """

    _fd: int

    def _init_sync(self) -> None:
        self._retired_fds: list[int] = []  # rotated-out segments' fds, closed after an fsync
        self._syncing_fds: list[int] = []
        self.unsynced = False  # records written to _fd but not fsynced

    def flush(self) -> OSError | None:
        raise NotImplementedError

    def sync_fds(self) -> list[int]:
        """Flush; the fds to fsync for everything written so far (group commit)."""
        self.flush()
        self._syncing_fds, self._retired_fds = self._retired_fds, []
        fds = list(self._syncing_fds)
        if self.unsynced:
            self.unsynced = False
            fds.append(self._fd)
        return fds

    def after_sync(self) -> None:
        """Close the rotated-out segment files that the finished round fsynced."""
        for fd in self._syncing_fds:
            os.close(fd)
        self._syncing_fds = []

    def sync_failed(self) -> None:
        """The fsync round failed: what it covered is due again in the next round."""
        self._retired_fds[:0] = self._syncing_fds
        self._syncing_fds = []
        self.unsynced = True
