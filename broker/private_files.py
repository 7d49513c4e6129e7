"""Files only the broker's own user can read: message payloads, password hashes
(``definitions.json``), logs, journals and replica logs are private to it.

RabbitMQ's packaged service runs under its own user with umask 027; amqpq goes further and
makes everything it creates owner-only (directories 0700, files 0600), whatever umask it was
started with: :func:`restrict_umask` once at process start (worker processes inherit it),
and :func:`private_dir` for the data directory, which also takes the group's and others'
rights off a data directory made by an older version (everything beneath becomes
unreachable to them, whatever the files' own modes).

Source: https://www.rabbitmq.com/docs/install-debian (the service's umask),
issue #28 ("Data files anyone can read").
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("amqpq.server")

PRIVATE_UMASK = 0o077  # bits always masked: nothing for the group or others


def restrict_umask() -> int:
    """Mask the group's and others' bits of every file and directory this process (and the
    processes it starts) creates from now on; returns the umask in force before."""
    old = os.umask(PRIVATE_UMASK)
    os.umask(old | PRIVATE_UMASK)
    return old


def private_dir(path: Path) -> None:
    """Create ``path`` (and its parents) owner-only (0700), or take the group's and others'
    rights off it when it exists with more (logged once: an older amqpq made it 0755).

    Raises:
        OSError: it cannot be created or its mode changed (not our directory...).
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        path.chmod(mode & 0o700)
        log.warning("data directory %s was open to other users (mode %04o): now %04o",
                    path, mode, mode & 0o700)
