"""The shared message store (queue_store.msg_store): records, reference counts, segment
rotation, deletion and compaction of dead segments, recovery of intact records, and what a
torn or corrupt record does at recovery."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from pamqp import commands
from pamqp.header import ContentHeader

from queue_store.message import Message
from queue_store.msg_store import HEAD_SIZE, MessageStore

PERSISTENT = ContentHeader(0, 0, commands.Basic.Properties(delivery_mode=2)).marshal()[12:]


def msg(body: bytes | str, routing_key: str = "rk", exchange: str = "ex",
        properties_raw: bytes = PERSISTENT) -> Message:
    if isinstance(body, str):
        body = body.encode()
    return Message.create(exchange, routing_key, properties_raw, body)


def segments(directory: Path) -> list[int]:
    """The numbers of the segment files present, sorted."""
    return sorted(int(p.stem) for p in directory.glob("*.seg"))


def reopen(directory: Path, **kw) -> tuple[MessageStore, int]:
    """A fresh store on ``directory`` (a restart) with :meth:`recover` run."""
    store = MessageStore(directory, **kw)
    return store, store.recover()


def record_offsets(path: Path) -> list[tuple[int, int, int]]:
    """(offset, total size, msg_id) of each record in a segment file, by walking headers."""
    data = path.read_bytes()
    out = []
    pos = 0
    while pos + HEAD_SIZE <= len(data):
        length, _crc, msg_id = struct.unpack_from(">IIQ", data, pos)
        out.append((pos, HEAD_SIZE + length, msg_id))
        pos += HEAD_SIZE + length
    return out


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0xFF]))


@pytest.fixture
def store(tmp_path: Path):
    s = MessageStore(tmp_path / "ms")
    yield s
    s.close()


# ---- write / read ----------------------------------------------------------------------------


def test_round_trip_from_buffer_and_from_file(store: MessageStore) -> None:
    m = msg(b"hello", routing_key="a.b", exchange="amq.topic")
    mid = store.write(m)
    assert mid >= 1 and m.store_id == mid
    got = store.read(mid)  # still in the write buffer
    assert (got.exchange, got.routing_key, got.body) == ("amq.topic", "a.b", b"hello")
    assert got.properties_raw == PERSISTENT
    assert got.persistent
    store.flush()
    got = store.read(mid)  # from the file now
    assert (got.exchange, got.routing_key, got.body) == ("amq.topic", "a.b", b"hello")
    assert got.store_id == mid


def test_unicode_names_and_empty_body(store: MessageStore) -> None:
    rk = "ключ.🐇.日本"
    ex = "éxchange-ü"
    mids = [store.write(msg(b"", routing_key=rk, exchange=ex)),
            store.write(msg("x" * 10, routing_key="", exchange="")),
            store.write(msg(b"\x00\xff" * 5, routing_key="r" * 255))]
    store.sync()
    a, b, c = (store.read(i) for i in mids)
    assert (a.exchange, a.routing_key, a.body) == (ex, rk, b"")
    assert a.ex_rk_raw == msg(b"", routing_key=rk, exchange=ex).ex_rk_raw
    assert (b.exchange, b.routing_key, b.body) == ("", "", b"x" * 10)
    assert (c.routing_key, c.body) == ("r" * 255, b"\x00\xff" * 5)
    # and the same after a restart
    store.close()
    again, skipped = reopen(store.directory)
    try:
        assert skipped == 0
        for i in mids:
            assert again.retain(i)
        r = again.read(mids[0])
        assert (r.exchange, r.routing_key, r.body) == (ex, rk, b"")
        assert again.read(mids[2]).routing_key == "r" * 255
    finally:
        again.close()


def test_empty_properties_round_trip(store: MessageStore) -> None:
    mid = store.write(msg(b"body", properties_raw=b"\x00\x00"))
    store.flush()
    got = store.read(mid)
    assert got.properties_raw == b"\x00\x00"
    assert not got.persistent


def test_read_unknown_id_raises_key_error(store: MessageStore) -> None:
    with pytest.raises(KeyError):
        store.read(12345)


def test_distinct_messages_get_distinct_increasing_ids(store: MessageStore) -> None:
    ids = [store.write(msg(f"m{i}")) for i in range(20)]
    assert ids == sorted(ids) and len(set(ids)) == 20
    store.flush()
    assert [store.read(i).body for i in ids] == [f"m{i}".encode() for i in range(20)]


# ---- reference counts --------------------------------------------------------------------


def test_same_message_written_by_two_queues_is_stored_once(store: MessageStore) -> None:
    m = msg(b"shared body")
    first = store.write(m)
    second = store.write(m)  # a second queue holding the same Message object
    assert first == second
    assert store.index[first].refs == 2
    store.flush()
    files = segments(store.directory)
    assert len(files) == 1
    size = (store.directory / f"{files[0]:08d}.seg").stat().st_size
    assert size == store.index[first].size  # one record on disk, not two
    store.release(first)
    assert store.read(first).body == b"shared body"  # survives one release
    store.release(first)
    assert first not in store.index
    with pytest.raises(KeyError):
        store.read(first)


def test_equal_but_distinct_messages_are_stored_twice(store: MessageStore) -> None:
    a = store.write(msg(b"same"))
    b = store.write(msg(b"same"))
    assert a != b
    store.release(a)
    assert store.read(b).body == b"same"


def test_release_unknown_and_double_release_are_harmless(store: MessageStore) -> None:
    mid = store.write(msg(b"x"))
    other = store.write(msg(b"y"))
    store.release(mid)
    store.release(mid)
    store.release(999)
    assert store.read(other).body == b"y"


def test_write_after_last_release_stores_again(store: MessageStore) -> None:
    m = msg(b"again")
    first = store.write(m)
    store.release(first)
    second = store.write(m)  # same Message object, but its record is gone: a new one
    assert second != first
    store.flush()
    assert store.read(second).body == b"again"


# ---- segments: rotation, deletion, compaction --------------------------------------------


def test_segment_rotation(tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "ms", segment_size=1000)
    try:
        ids = [store.write(msg(b"x" * 200)) for i in range(20)]
        store.sync()
        segs = segments(store.directory)
        assert len(segs) >= 4
        assert segs == list(range(1, len(segs) + 1))
        for n in segs[:-1]:
            size = (store.directory / f"{n:08d}.seg").stat().st_size
            # a segment is closed once past segment_size: at most one record beyond it
            assert 1000 <= size < 1000 + 200 + HEAD_SIZE + 100
        assert len({store.index[i].segment for i in ids}) == len(segs)
        assert all(store.read(i).body == b"x" * 200 for i in ids)
    finally:
        store.close()


def test_fully_dead_closed_segment_is_deleted(tmp_path: Path) -> None:
    # two equal records per segment: releasing one leaves it half live (not compacted),
    # releasing the other leaves it dead
    one = len(msg(b"a" * 100).body) + 100
    store = MessageStore(tmp_path / "ms", segment_size=one)
    try:
        ids = [store.write(msg(b"a" * 100)) for _ in range(6)]
        seg = [store.index[i].segment for i in ids]
        assert seg[0] == seg[1] != seg[2] == seg[3] != seg[4] == seg[5]
        store.sync()
        path = store.directory / f"{seg[0]:08d}.seg"
        store.release(ids[0])
        assert path.exists()
        assert store.index[ids[1]].segment == seg[0]  # half live: not compacted
        store.release(ids[1])
        assert not path.exists()  # dead: deleted at once
        store.release(ids[3])
        store.release(ids[2])
        assert not (store.directory / f"{seg[2]:08d}.seg").exists()
        assert store.read(ids[4]).body == b"a" * 100
        assert segments(store.directory) == [seg[4]]
    finally:
        store.close()


def test_segment_released_record_by_record_is_gone_after_sync(tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "ms", segment_size=1000)
    try:
        ids = [store.write(msg("00" * 50))]
        seg1 = store.index[ids[0]].segment
        while store.index[ids[-1]].segment == seg1:
            ids.append(store.write(msg(f"{len(ids):02d}" * 50)))
        first = ids[:-1]
        assert len(first) >= 4
        store.sync()
        path = store.directory / f"{seg1:08d}.seg"
        for n, mid in enumerate(first):
            store.release(mid)
            for rest in first[n + 1:]:  # everything still referenced stays readable
                assert store.read(rest).body == f"{ids.index(rest):02d}".encode() * 50
        store.sync()
        assert not path.exists()
        assert store.read(ids[-1]).body == f"{len(first):02d}".encode() * 50
    finally:
        store.close()


def test_current_segment_is_not_deleted_when_dead(store: MessageStore) -> None:
    mid = store.write(msg(b"x"))
    store.sync()
    seg = store.index[mid].segment
    store.release(mid)
    assert (store.directory / f"{seg:08d}.seg").exists()
    later = store.write(msg(b"y"))  # still appendable
    store.flush()
    assert store.read(later).body == b"y"


def test_compaction_moves_live_records_and_deletes_old_file_after_sync(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    store = MessageStore(directory, segment_size=1200)
    try:
        def body(n: int) -> bytes:
            return f"{n:03d}".encode() * 30

        ids = [store.write(msg(body(0)))]
        old = store.index[ids[0]].segment
        while store.index[ids[-1]].segment == old:  # fill the first segment, then rotate
            ids.append(store.write(msg(body(len(ids)))))
        in_old = ids[:-1]
        assert len(in_old) >= 8
        keep = [in_old[1], in_old[4], in_old[-1]]
        shared = in_old[4]
        store.add_ref(shared)  # held by two queues
        store.sync()
        old_path = directory / f"{old:08d}.seg"
        for i in in_old:
            if i not in keep:
                store.release(i)
        # mostly dead: the live records were copied to a newer segment ...
        for i in keep:
            assert store.index[i].segment != old
        # ... and the old file stays until the copies are synced
        assert old_path.exists()
        for i in keep:
            assert store.read(i).body == body(ids.index(i))
        store.sync()
        assert not old_path.exists()
        for i in keep:
            got = store.read(i)
            assert got.store_id == i
            assert got.body == body(ids.index(i))
        assert store.index[shared].refs == 2  # reference count carried over
        store.release(shared)
        assert store.read(shared).body == body(ids.index(shared))
        assert store.read(ids[-1]).body == body(len(ids) - 1)
        store.sync()
    finally:
        store.close()
    # the moved records are found again after a restart, under the same ids
    again, skipped = reopen(directory, segment_size=1200)
    try:
        assert skipped == 0
        for i in keep:
            assert again.retain(i)
            assert again.read(i).body == body(ids.index(i))
    finally:
        again.close()


def test_crash_before_compaction_sync_keeps_old_copy(tmp_path: Path) -> None:
    """Killed after compaction copied records but before the sync that deletes the old file:
    both copies exist, recovery finds the message once, and cleans up the old segment."""
    directory = tmp_path / "ms"
    store = MessageStore(directory, segment_size=1000)
    ids = [store.write(msg(f"{i}" * 100)) for i in range(8)]
    old = store.index[ids[0]].segment
    while store.index[ids[-1]].segment == old:
        ids.append(store.write(msg(b"f" * 100)))
    store.sync()
    for i in ids[:6]:
        store.release(i)
    assert store.index[ids[6]].segment != old
    store.flush()  # copies reach the file, no sync: "kill -9" now (no close)
    assert (directory / f"{old:08d}.seg").exists()
    again, skipped = reopen(directory, segment_size=1000)
    try:
        assert skipped == 0
        for i in (ids[6], ids[7]):
            assert again.retain(i)
            assert again.index[i].segment != old
            assert again.read(i).body == f"{ids.index(i)}".encode() * 100
        again.drop_unreferenced()
        assert not (directory / f"{old:08d}.seg").exists()
        assert again.read(ids[7]).body == b"7" * 100
    finally:
        again.close()
        store.close()


# ---- recovery ----------------------------------------------------------------------------


def test_recover_then_retain_brings_records_back(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    store = MessageStore(directory, segment_size=600)
    bodies = {store.write(msg(f"body-{i}".encode() * 10, routing_key=f"k{i}")): i
              for i in range(15)}
    store.sync()
    store.close()
    again, skipped = reopen(directory, segment_size=600)
    try:
        assert skipped == 0
        for mid, i in bodies.items():
            assert again.retain(mid)
            got = again.read(mid)
            assert got.body == f"body-{i}".encode() * 10
            assert got.routing_key == f"k{i}"
            assert got.store_id == mid
        assert not again.retain(max(bodies) + 100)  # never written
        new = again.write(msg(b"new"))
        assert new > max(bodies)  # ids are not reused
        again.flush()
        assert again.read(new).body == b"new"
        assert max(segments(directory)) > max(again.index[m].segment for m in bodies)
    finally:
        again.close()


def test_unflushed_writes_are_not_on_disk(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    store = MessageStore(directory)
    kept = store.write(msg(b"flushed"))
    store.flush()
    lost = store.write(msg(b"buffer only"))
    # no flush, no close: the process dies
    again, skipped = reopen(directory)
    try:
        assert skipped == 0
        assert again.retain(kept)
        assert not again.retain(lost)
    finally:
        again.close()
        store.close()


def test_refs_after_recovery_count_retains(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    store = MessageStore(directory)
    mid = store.write(msg(b"two queues"))
    store.write(msg(b"two queues"))
    store.sync()
    store.close()
    again, _ = reopen(directory)
    try:
        assert again.retain(mid) and again.retain(mid)
        again.drop_unreferenced()
        again.release(mid)
        assert again.read(mid).body == b"two queues"
        again.release(mid)
        with pytest.raises(KeyError):
            again.read(mid)
    finally:
        again.close()


@pytest.mark.parametrize("cut", [1, HEAD_SIZE - 1, HEAD_SIZE, HEAD_SIZE + 5, -1])
def test_torn_tail_is_truncated_and_earlier_records_survive(tmp_path: Path, cut: int) -> None:
    directory = tmp_path / "ms"
    store = MessageStore(directory)
    ids = [store.write(msg(f"m{i}" * 20)) for i in range(5)]
    store.sync()
    store.close()
    path = directory / f"{segments(directory)[-1]:08d}.seg"
    offsets = record_offsets(path)
    last_off, last_size, _ = offsets[-1]
    keep_len = last_off + (cut if cut > 0 else last_size + cut)
    os.truncate(path, keep_len)
    again, skipped = reopen(directory)
    try:
        assert skipped >= 1
        assert path.stat().st_size == last_off  # the torn bytes are gone
        for i, mid in enumerate(ids[:-1]):
            assert again.retain(mid)
            assert again.read(mid).body == f"m{i}".encode() * 20
        assert not again.retain(ids[-1])
        with pytest.raises(KeyError):
            again.read(ids[-1])
        # appending after the truncation makes well-formed records
        new = again.write(msg(b"after"))
        again.sync()
    finally:
        again.close()
    third, skipped = reopen(directory)
    try:
        assert skipped == 0
        assert third.retain(new) and third.read(new).body == b"after"
        assert third.retain(ids[0]) and third.read(ids[0]).body == b"m0" * 20
    finally:
        third.close()


def test_corrupt_payload_byte_skips_only_that_record(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    store = MessageStore(directory)
    ids = [store.write(msg(f"record-{i}" * 8)) for i in range(5)]
    store.sync()
    store.close()
    path = directory / f"{segments(directory)[0]:08d}.seg"
    off, size, mid = record_offsets(path)[2]
    assert mid == ids[2]
    flip_byte(path, off + size - 3)  # inside the body
    again, skipped = reopen(directory)
    try:
        assert skipped >= 1
        assert not again.retain(ids[2])
        with pytest.raises((KeyError, ValueError)):
            again.read(ids[2])
        for i in (0, 1, 3, 4):
            assert again.retain(ids[i])
            assert again.read(ids[i]).body == f"record-{i}".encode() * 8
    finally:
        again.close()


def test_read_detects_corruption_after_write(tmp_path: Path) -> None:
    """A record damaged on disk while the broker runs: read raises, never returns wrong data."""
    store = MessageStore(tmp_path / "ms")
    try:
        mid = store.write(msg(b"pristine body"))
        other = store.write(msg(b"other body"))
        store.sync()
        path = store.directory / f"{store.index[mid].segment:08d}.seg"
        loc = store.index[mid]
        flip_byte(path, loc.offset + loc.size - 2)
        with pytest.raises(ValueError):
            store.read(mid)
        assert store.read(other).body == b"other body"
    finally:
        store.close()


def test_corrupt_msg_id_field_never_yields_wrong_message(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    store = MessageStore(directory)
    ids = [store.write(msg(f"record-{i}")) for i in range(3)]
    assert ids == [1, 2, 3]
    store.sync()
    store.close()
    path = directory / f"{segments(directory)[0]:08d}.seg"
    off, _size, mid = record_offsets(path)[2]
    assert mid == 3
    with open(path, "r+b") as fh:  # msg_id field of record 3: 3 -> 1 (two bits flipped)
        fh.seek(off + 8)
        fh.write(struct.pack(">Q", 1))
    again, _ = reopen(directory)
    try:
        assert again.retain(1)
        assert again.read(1).body == b"record-0"
    finally:
        again.close()


def test_corrupt_length_field_does_not_destroy_later_records(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    store = MessageStore(directory)
    ids = [store.write(msg(f"record-{i}" * 4)) for i in range(6)]
    store.sync()
    store.close()
    path = directory / f"{segments(directory)[0]:08d}.seg"
    off, _size, _mid = record_offsets(path)[1]
    flip_byte(path, off)  # high byte of record 2's length: points far past the end
    size_before = path.stat().st_size
    again, skipped = reopen(directory)
    try:
        assert skipped >= 1
        assert again.retain(ids[0])
        assert path.stat().st_size == size_before  # intact records are not cut off disk
        for i in range(2, 6):
            assert again.retain(ids[i]), f"record {i} lost"
    finally:
        again.close()


def test_drop_unreferenced_deletes_segments_nobody_retains(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    store = MessageStore(directory, segment_size=500)
    ids = [store.write(msg(b"z" * 100)) for _ in range(16)]
    store.sync()
    store.close()
    by_segment: dict[int, list[int]] = {}
    for mid in ids:
        by_segment.setdefault(store.index[mid].segment, []).append(mid)
    segs = sorted(by_segment)
    assert len(segs) >= 3
    again, _ = reopen(directory, segment_size=500)
    try:
        wanted = by_segment[segs[1]][:1]  # one record of the second segment
        for mid in wanted:
            assert again.retain(mid)
        again.drop_unreferenced()
        present = segments(directory)
        assert segs[1] in present
        for n in segs:
            if n != segs[1]:
                assert n not in present
        for mid in ids:
            if mid in wanted:
                assert again.read(mid).body == b"z" * 100
            else:
                with pytest.raises(KeyError):
                    again.read(mid)
        new = again.write(msg(b"fresh"))
        again.sync()
        assert again.read(new).body == b"fresh"
    finally:
        again.close()


def test_drop_unreferenced_with_nothing_retained_empties_the_store(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    store = MessageStore(directory, segment_size=300)
    for _ in range(10):
        store.write(msg(b"q" * 100))
    store.sync()
    store.close()
    again, _ = reopen(directory, segment_size=300)
    try:
        again.drop_unreferenced()
        assert again.index == {}
        # only the fresh (empty) current segment may remain
        for n in segments(directory):
            assert (directory / f"{n:08d}.seg").stat().st_size == 0
    finally:
        again.close()


def test_recover_of_empty_dir(tmp_path: Path) -> None:
    store, skipped = reopen(tmp_path / "fresh")
    try:
        assert skipped == 0
        store.drop_unreferenced()
        mid = store.write(msg(b"first"))
        store.sync()
        assert store.read(mid).body == b"first"
    finally:
        store.close()
