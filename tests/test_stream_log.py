"""The stream log (queue_store.stream_log): offsets, chunks, segments, lookups by offset and
timestamp, recovery cutting a torn tail, truncation, retention by whole segments."""

from __future__ import annotations

from pathlib import Path

from queue_store.stream_log import CHUNK_HEAD, StreamLog


def filled(tmp_path: Path, chunks: int = 10, per: int = 5, segment: int = 200) -> StreamLog:
    """A log of ``chunks`` chunks of ``per`` records ``r<offset>``, timestamps 1000, 1001..."""
    log = StreamLog(tmp_path / "s", max_segment_bytes=segment)
    for t in range(chunks):
        for i in range(per):
            assert log.append(b"r%d" % (t * per + i), 1000 + t) == t * per + i
        log.flush()
    return log


def records(log: StreamLog, offset: int = 0) -> list[bytes]:
    return [r for _, _, r in log.read(offset, 1 << 30)]


def test_offsets_chunks_and_segments(tmp_path: Path) -> None:
    log = filled(tmp_path)
    assert (log.first_offset, log.next_offset, log.last_chunk_offset()) == (0, 50, 45)
    assert len(log.segments) > 1  # 200-byte segments roll
    assert records(log, 13) == [b"r%d" % i for i in range(13, 50)]
    assert [o for o, _, _ in log.read(13, 1)] == [13, 14]  # whole chunks, one here
    assert log.offset_at(1004) == 20 and log.offset_at(0) == 0 and log.offset_at(9999) == 50


def test_pending_records_are_not_readable_until_written(tmp_path: Path) -> None:
    log = filled(tmp_path, chunks=1)
    log.append(b"late", 2000)
    assert log.next_offset == 6 and records(log, 5) == []
    log.flush()
    assert records(log, 5) == [b"late"]


def test_reopen_and_torn_tail(tmp_path: Path) -> None:
    log = filled(tmp_path)
    log.close()
    with open(log.segments[-1].path, "ab") as fh:
        fh.write(b"C\x01half a chunk")
    again = StreamLog(tmp_path / "s", max_segment_bytes=200)
    assert again.next_offset == 50 and records(again) == [b"r%d" % i for i in range(50)]
    again.append(b"next", 3000)
    again.flush()
    assert records(again, 50) == [b"next"]


def test_truncate_inside_a_chunk_and_across_segments(tmp_path: Path) -> None:
    log = filled(tmp_path)
    log.truncate(23)
    assert log.next_offset == 23 and records(log, 20) == [b"r20", b"r21", b"r22"]
    log.append(b"new", 5000)
    log.flush()
    log.close()
    again = StreamLog(tmp_path / "s", max_segment_bytes=200)
    assert records(again) == [b"r%d" % i for i in range(23)] + [b"new"]


def test_retention_drops_whole_oldest_segments(tmp_path: Path) -> None:
    log = filled(tmp_path)
    before = len(log.segments)
    removed = log.apply_retention(300, None, 0)
    assert removed > 0 and log.first_offset == removed and len(log.segments) < before
    assert records(log)[0] == b"r%d" % removed and log.bytes <= 300 + 200
    # by age: every segment but the current one is older than 1 s at t = 1,011 s
    log.apply_retention(None, 1000, 1011 * 1000)
    assert len(log.segments) == 1 and log.next_offset == 50


def test_damaged_chunk_is_skipped_on_read(tmp_path: Path) -> None:
    log = filled(tmp_path, chunks=3, segment=10_000)
    seg = log.segments[0]
    with open(seg.path, "r+b") as fh:  # flip a byte inside the first chunk's records
        fh.seek(seg.positions[0] + 40)
        fh.write(b"\xff")
    assert records(log) == [b"r%d" % i for i in range(5, 15)]


def test_a_chunk_failing_its_crc_is_skipped(tmp_path: Path) -> None:
    log = StreamLog(tmp_path / "s")
    for t in range(3):  # three chunks of two records
        for i in range(2):
            log.append(b"r%d" % (t * 2 + i), 1000 + t)
        log.flush()
    second = log.segments[0].positions[1]
    with open(log.segments[0].path, "r+b") as fh:  # a byte of the second chunk's data
        fh.seek(second + CHUNK_HEAD.size + 5)
        byte = fh.read(1)
        fh.seek(second + CHUNK_HEAD.size + 5)
        fh.write(bytes((byte[0] ^ 0xFF,)))
    assert [(o, r) for o, _, r in log.read(0, 1 << 20)] == [
        (0, b"r0"), (1, b"r1"), (4, b"r4"), (5, b"r5")]
    assert [(o, ts) for o, ts, _ in log.read(5, 1)] == [(5, 1002)]
    log.close()
