"""The variable queue (queue_store.variable_queue): a FIFO with a RAM head (q4: alpha and
gamma), beta (q3: index entries in RAM, bodies on disk) and an on-disk paging tail (delta).
Order, accounting, requeue, clear, what survives a page out/in round trip, and a model-based
test of all four states under a changing budget."""

from __future__ import annotations

import random
from collections import deque
from pathlib import Path

import pytest
from pamqp import commands
from pamqp.header import ContentHeader

from queue_store.backing import QueuedMessage
from queue_store.message import Message
from queue_store.variable_queue import VariableQueue

PERSISTENT = ContentHeader(0, 0, commands.Basic.Properties(delivery_mode=2)).marshal()[12:]


def qm(seq: int, body: bytes | None = None, **kw) -> QueuedMessage:
    message = Message.create("ex", f"rk.{seq}", PERSISTENT,
                             body if body is not None else f"body-{seq}".encode())
    return QueuedMessage(seq, message, **kw)


def drain(vq: VariableQueue) -> list[QueuedMessage]:
    out = []
    while (m := vq.popleft()) is not None:
        out.append(m)
    return out


@pytest.fixture
def make(tmp_path: Path):
    made: list[VariableQueue] = []

    def factory(name: str = "q.delta", **kw) -> VariableQueue:
        kw.setdefault("beta_messages", 0)  # alpha and delta only, unless a test asks
        vq = VariableQueue(tmp_path / name, **kw)
        made.append(vq)
        return vq

    yield factory
    for vq in made:
        vq.close()


def test_small_queue_stays_in_ram(make) -> None:
    vq = make()
    for seq in range(1, 6):
        vq.append(qm(seq))
    assert len(vq) == 5 and vq.delta_count == 0 and vq.paged_out == 0
    assert not vq.path.exists()
    assert [m.seq for m in vq] == [1, 2, 3, 4, 5]
    assert [m.seq for m in drain(vq)] == [1, 2, 3, 4, 5]
    assert vq.popleft() is None and vq.peek() is None


def test_fifo_across_paging_thousands_of_messages(make) -> None:
    vq = make(ram_messages=10, read_batch=7)
    n = 5000
    for seq in range(1, n + 1):
        vq.append(qm(seq))
    assert len(vq.q4) == 10
    assert vq.delta_count == n - 10
    assert len(vq) == n
    out = drain(vq)
    assert [m.seq for m in out] == list(range(1, n + 1))
    assert all(m.message.body == f"body-{m.seq}".encode() for m in out)
    assert all(m.message.routing_key == f"rk.{m.seq}" for m in out)
    assert len(vq) == 0 and vq.bytes == 0
    assert vq.path.stat().st_size == 0  # truncated once delta drained


def test_interleaved_appends_and_pops_keep_order_and_accounting(make) -> None:
    rnd = random.Random(1234)
    vq = make(ram_messages=10, ram_bytes=2_000, read_batch=5)
    model: deque[tuple[int, bytes]] = deque()
    seq = 0
    popped: list[int] = []
    for _ in range(6000):
        if rnd.random() < 0.55:
            seq += 1
            body = bytes([seq % 251]) * rnd.randrange(0, 400)
            vq.append(qm(seq, body))
            model.append((seq, body))
        else:
            m = vq.popleft()
            if not model:
                assert m is None
                continue
            want_seq, want_body = model.popleft()
            assert m is not None and m.seq == want_seq and m.message.body == want_body
            popped.append(m.seq)
        assert len(vq) == len(model)
        assert vq.bytes == sum(len(b) for _, b in model)
        head = vq.peek()
        assert (head.seq if head else None) == (model[0][0] if model else None)
    assert vq.paged_out > 0  # the test did exercise paging
    rest = drain(vq)
    assert [m.seq for m in rest] == [s for s, _ in model]
    assert popped + [m.seq for m in rest] == list(range(1, seq + 1))


def test_ram_bytes_budget_pages_out(make) -> None:
    vq = make(ram_bytes=1000)
    for seq in range(1, 11):
        vq.append(qm(seq, b"x" * 300))
    assert len(vq.q4) == 3  # 900 bytes; the 4th would pass the budget
    assert vq.q4_bytes == 900
    assert vq.delta_count == 7 and vq.delta_bytes == 2100
    assert vq.bytes == 3000 and len(vq) == 10
    assert [m.seq for m in drain(vq)] == list(range(1, 11))


def test_oversized_message_on_empty_queue_stays_in_ram(make) -> None:
    vq = make(ram_bytes=10)
    vq.append(qm(1, b"y" * 100))
    assert len(vq.q4) == 1 and vq.delta_count == 0


def test_message_larger_than_read_chunk_round_trips(make) -> None:
    vq = make(ram_messages=0)
    big = bytes(range(256)) * (3 * 4096 + 17)  # ~3 MiB, more than one read chunk
    vq.append(qm(1, b"small"))
    vq.append(qm(2, big))
    vq.append(qm(3, b""))
    assert vq.delta_count == 3
    assert vq.bytes == 5 + len(big)
    out = drain(vq)
    assert [m.seq for m in out] == [1, 2, 3]
    assert out[1].message.body == big
    assert out[2].message.body == b""


def test_fields_survive_page_out_and_in(make) -> None:
    vq = make(ram_messages=0)  # everything goes to delta
    a = qm(7, b"a", redelivered=True, expires_at=12345.678901234, priority=9)
    a.msg_id = 2**40 + 3
    a.indexed = True
    a.delivery_logged = True
    b = qm(8, b"b", expires_at=None, priority=0)
    c = qm(9, b"c", expires_at=0.0, priority=255)
    c.msg_id = 5
    c.indexed = True
    uni = QueuedMessage(10, Message.create("éx", "ключ.🐇", b"\x00\x00", b"u"))
    for m in (a, b, c, uni):
        vq.append(m)
    assert len(vq.q4) == 0 and vq.delta_count == 4
    x, y, z, u = drain(vq)
    assert (x.seq, x.redelivered, x.expires_at, x.priority) == (7, True, 12345.678901234, 9)
    assert (x.msg_id, x.indexed, x.delivery_logged) == (2**40 + 3, True, True)
    assert x.message.store_id == 2**40 + 3
    assert (x.message.exchange, x.message.routing_key) == ("ex", "rk.7")
    assert x.message.properties_raw == PERSISTENT and x.message.persistent
    assert (y.seq, y.redelivered, y.expires_at, y.priority) == (8, False, None, 0)
    assert (y.msg_id, y.indexed, y.delivery_logged) == (0, False, False)
    assert (z.expires_at, z.priority, z.msg_id, z.indexed) == (0.0, 255, 5, True)
    assert not z.delivery_logged
    assert (u.message.exchange, u.message.routing_key, u.message.body) == (
        "éx", "ключ.🐇", b"u")
    assert u.message.properties_raw == b"\x00\x00"


def test_peek_on_empty_q4_with_paged_messages(make) -> None:
    vq = make(ram_messages=0, read_batch=2)
    for seq in range(1, 6):
        vq.append(qm(seq))
    assert len(vq.q4) == 0 and len(vq) == 5
    head = vq.peek()
    assert head is not None and head.seq == 1
    assert vq.peek() is head  # peeking does not consume
    assert len(vq) == 5
    assert [m.seq for m in drain(vq)] == [1, 2, 3, 4, 5]


def test_requeue_puts_head_messages_back_in_order(make) -> None:
    vq = make(ram_messages=10)
    for seq in range(1, 101):
        vq.append(qm(seq))
    taken = [vq.popleft() for _ in range(5)]
    assert [m.seq for m in taken] == [1, 2, 3, 4, 5]
    assert vq.delta_count > 0
    before = vq.bytes
    vq.requeue([taken[1], taken[3]])  # 2 and 4 first, e.g. one channel closes
    vq.requeue([taken[0], taken[2], taken[4]])
    assert vq.bytes == before + sum(len(m.message.body) for m in taken)
    assert len(vq) == 100
    assert [m.seq for m in drain(vq)] == list(range(1, 101))


def test_requeue_into_empty_q4_with_delta(make) -> None:
    vq = make(ram_messages=0, read_batch=1)
    for seq in range(1, 5):
        vq.append(qm(seq))
    first = vq.popleft()
    assert first is not None and first.seq == 1
    assert len(vq.q4) == 0 and vq.delta_count == 3
    vq.requeue([first])
    assert vq.peek() is first
    assert [m.seq for m in drain(vq)] == [1, 2, 3, 4]


def test_requeue_merges_between_remaining_head_messages(make) -> None:
    vq = make(ram_messages=50)
    for seq in range(1, 21):
        vq.append(qm(seq))
    taken = [vq.popleft() for _ in range(10)]
    vq.requeue(taken[3:6])  # 4, 5, 6 back; 7..10 still out
    vq.requeue([taken[8]])  # 9
    assert [m.seq for m in drain(vq)] == [4, 5, 6, 9] + list(range(11, 21))


def test_clear_returns_ram_and_paged_messages_and_truncates(make) -> None:
    vq = make(ram_messages=10, read_batch=3)
    for seq in range(1, 501):
        vq.append(qm(seq, b"z" * 50))
    vq.popleft()
    assert vq.path.exists()
    out = list(vq.clear())
    assert [m.seq for m in out] == list(range(2, 501))
    # the RAM head keeps its bodies; paged-out ones are not read back (message None)
    assert [m.message.body for m in out[:9]] == [b"z" * 50] * 9
    assert all(m.message is None for m in out[9:])
    assert len(vq) == 0 and vq.bytes == 0 and vq.delta_count == 0
    assert vq.path.stat().st_size == 0
    assert vq.popleft() is None and vq.peek() is None
    # usable again afterwards, RAM first
    for seq in range(501, 531):
        vq.append(qm(seq))
    assert len(vq.q4) == 10 and vq.delta_count == 20
    assert [m.seq for m in drain(vq)] == list(range(501, 531))


def test_clear_with_unflushed_page_out_buffer(make) -> None:
    vq = make(ram_messages=0)
    for seq in range(1, 4):
        vq.append(qm(seq))
    assert [m.seq for m in vq.clear()] == [1, 2, 3]
    assert vq.path.stat().st_size == 0


def test_refill_reuses_the_file_after_draining(make) -> None:
    vq = make(ram_messages=4, read_batch=100)
    for round_ in range(3):
        base = round_ * 100
        for seq in range(base + 1, base + 51):
            vq.append(qm(seq))
        assert vq.delta_count == 46
        assert [m.seq for m in drain(vq)] == list(range(base + 1, base + 51))
        assert vq.path.stat().st_size == 0


def test_memory_pressure_pages_out_the_tail_keeping_order(make, monkeypatch) -> None:
    import queue_store.variable_queue as vqm

    monkeypatch.setattr(vqm, "PRESSURE_RAM_MESSAGES", 5)
    vq = make(ram_messages=1000)
    for seq in range(1, 51):
        vq.append(qm(seq))
    assert vq.delta_count == 0
    before = vq.bytes
    vq.set_memory_pressure(True)
    assert len(vq.q4) == 5 and vq.delta_count == 45
    assert vq.bytes == before and len(vq) == 50
    vq.append(qm(51))
    vq.set_memory_pressure(False)
    assert vq.ram_messages == 1000
    assert [m.seq for m in drain(vq)] == list(range(1, 52))


def test_close_deletes_the_paging_file(make) -> None:
    vq = make(ram_messages=0)
    vq.append(qm(1))
    vq.popleft()
    vq.append(qm(2))
    assert vq.path.exists()
    vq.close()
    assert not vq.path.exists()


def test_memory_pressure_drops_bodies_of_persisted_messages_to_gamma(tmp_path: Path) -> None:
    from queue_store.msg_store import MessageStore

    store = MessageStore(tmp_path / "store")
    vq = VariableQueue(tmp_path / "p.delta", ram_messages=1000, read_batch=3, store=store)
    for seq in range(1, 11):
        item = qm(seq, f"body-{seq}".encode())
        if seq % 2:  # odd ones are persisted (store + queue index): gamma candidates
            item.msg_id = store.write(item.message)
            item.indexed = True
        vq.append(item)
    total = vq.bytes
    vq.set_memory_pressure(True)
    assert vq.gamma_count == 5
    assert [item.message is None for item in vq.q4] == [bool(s % 2) for s in range(1, 11)]
    assert vq.bytes == total  # x-max-length-bytes still counts gamma bodies
    out = drain(vq)
    assert [item.seq for item in out] == list(range(1, 11))
    assert [item.message.body for item in out] == [f"body-{s}".encode() for s in range(1, 11)]
    assert vq.gamma_count == 0 and vq.bytes == 0
    store.close()


def test_memory_pressure_leaves_transient_messages_in_ram_without_a_store(make) -> None:
    vq = make(ram_messages=1000)
    for seq in range(1, 6):
        vq.append(qm(seq))
    vq.set_memory_pressure(True)
    assert vq.gamma_count == 0
    assert all(item.message is not None for item in vq.q4)


# ---- beta (q3) and the four states --------------------------------------------------------


def test_beta_keeps_index_entries_in_ram_and_bodies_on_disk(make) -> None:
    vq = make(ram_messages=10, read_batch=4, beta_messages=100)
    for seq in range(1, 151):
        vq.append(qm(seq, b"b" * 20, expires_at=float(seq), priority=seq % 7))
    counts = vq.state_counts()
    assert (counts["alpha"], counts["beta"], counts["delta"]) == (10, 100, 40)
    assert counts["beta_bytes"] == 100 * 20 and vq.bytes == 150 * 20
    assert list(vq.q3)[:3] == [11, 12, 13]  # seqs known without reading a body
    vq.q3.flush()  # bodies go to the body file (through a 1 MB write buffer)
    assert vq.q3.path.stat().st_size > 100 * 20
    out = drain(vq)
    assert [m.seq for m in out] == list(range(1, 151))
    assert [(m.expires_at, m.priority, m.message.body) for m in out[10:12]] == [
        (11.0, 4, b"b" * 20), (12.0, 5, b"b" * 20)]
    assert vq.state_counts()["beta"] == 0 and vq.q3.file_size == 0


def test_memory_pressure_moves_alpha_to_beta_ahead_of_delta(make, monkeypatch) -> None:
    import queue_store.variable_queue as vqm

    monkeypatch.setattr(vqm, "PRESSURE_RAM_MESSAGES", 5)
    vq = make(ram_messages=20, beta_messages=0)  # delta right after q4
    for seq in range(1, 41):
        vq.append(qm(seq))
    assert vq.delta_count == 20
    vq.set_memory_pressure(True)  # q4's tail cannot go behind delta: it becomes beta
    counts = vq.state_counts()
    assert (counts["alpha"], counts["beta"], counts["delta"]) == (5, 15, 20)
    assert [m.seq for m in drain(vq)] == list(range(1, 41))


def _model_check(vq: VariableQueue, model: list[tuple[int, int]]) -> None:
    counts = vq.state_counts()
    assert len(vq) == len(model)
    assert sum(counts[s] for s in ("alpha", "beta", "gamma", "delta")) == len(model)
    assert vq.bytes == sum(size for _, size in model)
    assert sum(counts[s + "_bytes"] for s in ("alpha", "beta", "gamma", "delta")) == vq.bytes
    assert [m.seq for m in vq.q4] == [seq for seq, _ in model[:len(vq.q4)]]
    after_q4 = model[len(vq.q4):len(vq.q4) + counts["beta"]]
    assert list(vq.q3) == [seq for seq, _ in after_q4]


@pytest.mark.parametrize("seed", range(8))
def test_model_random_operations_through_all_four_states(tmp_path: Path, seed: int,
                                                         monkeypatch) -> None:
    """Random appends (persistent in the store, or transient), pops, requeues, purges and
    budget changes (q4 and q3 budgets, memory pressure on and off) against a plain list:
    order, counts and bytes agree after every step, and every state is visited."""
    import queue_store.variable_queue as vqm
    from queue_store.msg_store import MessageStore

    monkeypatch.setattr(vqm, "PRESSURE_RAM_MESSAGES", 3)
    rnd = random.Random(seed)
    store = MessageStore(tmp_path / "store")
    vq = VariableQueue(tmp_path / "m.delta", ram_messages=8, read_batch=3, store=store,
                       beta_messages=12)
    model: list[tuple[int, int]] = []  # (seq, body bytes), head first
    out: dict[int, QueuedMessage] = {}  # popped, not settled
    seen: set[str] = set()
    seq = 0
    for _ in range(1500):
        op = rnd.random()
        if op < 0.45:
            seq += 1
            item = qm(seq, bytes(rnd.randrange(0, 40)))
            if rnd.random() < 0.5:  # persistent: body safe in the store, a gamma candidate
                item.msg_id = store.write(item.message)
                item.indexed = True
            vq.append(item)
            model.append((seq, len(item.message.body)))
        elif op < 0.75:
            got = vq.popleft()
            if not model:
                assert got is None
                continue
            assert got is not None and (got.seq, len(got.message.body)) == model.pop(0)
            out[got.seq] = got
        elif op < 0.82 and out:
            back = sorted(rnd.sample(sorted(out), rnd.randrange(1, len(out) + 1)))
            items = [out.pop(s) for s in back]
            vq.requeue(items)  # they all came from the head: older than everything left
            model = sorted(model + [(m.seq, len(m.message.body)) for m in items])
        elif op < 0.88:
            vq.set_memory_pressure(rnd.random() < 0.5)
        elif op < 0.94:
            vq.ram_messages = vq._base_ram_messages = rnd.choice([0, 2, 8, 30])
            vq.beta_messages = rnd.choice([0, 5, 12, 100])
        elif op < 0.95:
            assert [m.seq for m in vq.clear()] == [s for s, _ in model]
            model = []
        else:
            head = vq.peek()
            assert (head.seq if head else None) == (model[0][0] if model else None)
        counts = vq.state_counts()
        seen.update(s for s in ("alpha", "beta", "gamma", "delta") if counts[s])
        _model_check(vq, model)
    assert seen == {"alpha", "beta", "gamma", "delta"}
    assert [m.seq for m in drain(vq)] == [s for s, _ in model]
    vq.close()
    store.close()
