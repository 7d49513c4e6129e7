"""Durability.after_write: a stream publish's confirm waits for the write of its chunk (at the
end of the batch of input), not for an fsync; the log is still fsynced by the next round."""

from __future__ import annotations

from pathlib import Path

from queue_store.durability import Durability
from queue_store.stream_log import StreamLog


def test_callback_runs_once_the_chunk_is_in_the_file(tmp_path: Path) -> None:
    durability = Durability()
    synced: list[str] = []
    durability.on_synced = lambda: synced.append("flush confirms")
    log = StreamLog(tmp_path / "s")
    confirmed: list[int] = []
    for i in range(3):  # one batch of input: three publishes
        offset = log.append(b"r%d" % i, 1000)
        durability.index_dirty(log)  # type: ignore[arg-type]
        durability.after_write(lambda o=offset: confirmed.append(o))
    assert confirmed == [] and log.read(0) == []  # nothing written yet: nothing confirmed
    durability.flush_writes()  # the end of the batch
    assert confirmed == [0, 1, 2] and synced == ["flush confirms"]
    assert [r for _, _, r in log.read(0)] == [b"r0", b"r1", b"r2"]  # one chunk, in the file
    assert log.unsynced  # not fsynced for the confirm ...
    durability.maybe_sync()  # ... but by the next round (every tick)
    assert not log.unsynced
    durability.flush_writes()
    assert confirmed == [0, 1, 2]  # each callback runs once
    log.close()
