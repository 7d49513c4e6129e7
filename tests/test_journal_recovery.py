"""Recovery that reads only what it needs (queue_store.journal_recovery): after a crash a
durable queue reads its head into RAM and leaves the rest of its backlog in the queue index
journal, read when the queue gets there. What a user sees is unchanged: every persistent
message back once, in order, redelivered flags, counts and bytes; nothing acked returns,
through further publishes, acks, journal rotations and crashes."""

from __future__ import annotations

from pathlib import Path

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.persistence import TopologyStore
from queue_store.index_scan import RECORD_SIZE
from queue_store.queue import Queue, Settlement
from tests import test_recovery as recovery
from tests.test_recovery import crash, pmsg

HEAD = 100  # q4's budget at recovery in these tests (messages)


def start(data_dir: Path, embed_below: int = 4096
          ) -> tuple[Broker, TopologyStore, dict[str, int]]:
    """A broker started on ``data_dir`` whose queues keep only ``HEAD`` messages in RAM."""
    return recovery.start(data_dir, BrokerConfig(queue_index_embed_msgs_below=embed_below),
                          ram_messages=HEAD)


def get_ack(q: Queue, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        qm = q.get()
        assert qm is not None
        out.append(qm.message.body)
        q.settle([(qm, q, None)], Settlement.ACK)
    return out


def publish(q: Queue, first: int, last: int) -> None:
    for i in range(first, last):
        q.publish(pmsg(f"m{i}"))


def names(first: int, last: int) -> list[bytes]:
    return [f"m{i}".encode() for i in range(first, last)]


def restarted_with(tmp_path: Path, n: int) -> tuple[Broker, TopologyStore, dict[str, int], Queue]:
    """A durable queue "q" with messages m0..m(n-1), the broker crashed and started again:
    (broker, topology, recovery counts, the recovered queue)."""
    broker, topology, _ = start(tmp_path)
    publish(broker.vhosts["/"].declare_queue("q", durable=True), 0, n)
    crash(broker, topology)
    broker, topology, counts = start(tmp_path)
    return broker, topology, counts, broker.vhosts["/"].queues["q"]


def test_backlog_stays_in_the_journal_until_needed(tmp_path: Path) -> None:
    broker, topology, counts, rq = restarted_with(tmp_path, 1000)
    assert counts["messages"] == 1000
    states = rq.ready.state_counts()
    assert states["alpha"] == HEAD and states["delta"] == 900 and states["beta"] == 0
    assert rq.ready.bytes == sum(len(b) for b in names(0, 1000))  # no acks: exact
    paging = broker.vhosts["/"].storage.paging_dir
    assert all(p.stat().st_size == 0 for p in paging.iterdir())  # nothing copied out
    assert get_ack(rq, 1000) == names(0, 1000)
    assert rq.get() is None and rq.ready.bytes == 0


def test_publishes_after_recovery_come_after_the_recovered_backlog(tmp_path: Path) -> None:
    broker, topology, _, rq = restarted_with(tmp_path, 500)
    publish(rq, 500, 800)  # appended to the journal the run is reading
    assert get_ack(rq, 250) == names(0, 250)
    crash(broker, topology)  # a crash in the middle of the run
    broker, topology, counts = start(tmp_path)
    rq = broker.vhosts["/"].queues["q"]
    assert counts["messages"] == 550
    assert get_ack(rq, 550) == names(250, 800)


def test_delivered_unacked_messages_come_back_redelivered(tmp_path: Path) -> None:
    broker, topology, _ = start(tmp_path)
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    publish(q, 0, 400)
    taken = [q.get() for _ in range(3)]
    assert all(t is not None for t in taken)
    crash(broker, topology)
    broker, topology, _ = start(tmp_path)
    rq = broker.vhosts["/"].queues["q"]
    got = []
    while (qm := rq.get(no_ack=True)) is not None:
        got.append((qm.message.body, qm.redelivered))
    assert got == [(b, i < 3) for i, b in enumerate(names(0, 400))]


def test_rotated_segments_and_out_of_order_acks_survive_crashes(tmp_path: Path) -> None:
    """Acks of an old segment's messages written into a newer segment: the newer one must
    not be deleted while the old one lives, or a restart brings acked messages back."""
    broker, topology, _ = start(tmp_path)
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    publish(q, 0, 30_000)
    held = [q.get() for _ in range(30_000)]
    assert all(h is not None for h in held)
    for qm in held[100:]:  # the first 100 stay unacked; the journal rotates on the way
        q.settle([(qm, q, None)], Settlement.ACK)
    publish(q, 30_000, 50_000)
    assert get_ack(q, 20_000) == names(30_000, 50_000)  # another segment fully acked
    index_files = list(broker.vhosts["/"].storage.index_dir.iterdir())
    assert len(index_files) >= 2  # rotated at least once
    crash(broker, topology)
    broker, topology, counts = start(tmp_path)
    rq = broker.vhosts["/"].queues["q"]
    assert counts["messages"] == 100
    got = []
    while (qm := rq.get(no_ack=True)) is not None:
        got.append((qm.message.body, qm.redelivered))
    assert got == [(b, True) for b in names(0, 100)]


def test_store_held_messages_in_the_run(tmp_path: Path) -> None:
    """Messages kept in the shared store (not embedded) stay referenced while they wait in
    the journal: the store does not drop them as unreferenced at start."""
    broker, topology, _ = start(tmp_path, embed_below=0)
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    publish(q, 0, 600)
    get_ack(q, 10)
    crash(broker, topology)
    broker, topology, counts = start(tmp_path, embed_below=0)
    rq = broker.vhosts["/"].queues["q"]
    assert counts["messages"] == 590
    assert rq.ready.state_counts()["delta"] == 490
    assert len(broker.vhosts["/"].storage.store.index) == 590
    assert get_ack(rq, 590) == names(10, 600)


def test_purge_of_a_recovered_backlog_and_restart(tmp_path: Path) -> None:
    broker, topology, _, rq = restarted_with(tmp_path, 700)
    assert rq.purge() == 700
    assert rq.message_count == 0
    publish(rq, 700, 710)
    crash(broker, topology)
    broker, topology, counts = start(tmp_path)
    assert counts["messages"] == 10
    assert get_ack(broker.vhosts["/"].queues["q"], 10) == names(700, 710)


def test_mostly_acked_journal_is_compacted_at_recovery(tmp_path: Path) -> None:
    broker, topology, _ = start(tmp_path)
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    publish(q, 0, 300)
    get_ack(q, 250)
    crash(broker, topology)
    broker, topology, _ = start(tmp_path)
    storage = broker.vhosts["/"].storage
    index_path = storage.index_path("q")
    assert [p.name for p in storage.index_dir.iterdir()] == [index_path.name]
    size = index_path.stat().st_size
    expected = sum(RECORD_SIZE + len(pmsg(b).ex_rk_raw) + 6 + len(pmsg(b).properties_raw)
                   + len(b) for b in names(250, 300))
    assert size == expected  # 50 embedded publishes, no acks
    assert get_ack(broker.vhosts["/"].queues["q"], 50) == names(250, 300)


def test_torn_tail_is_cut_and_the_rest_recovers(tmp_path: Path) -> None:
    broker, topology, _ = start(tmp_path)
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    publish(q, 0, 300)
    crash(broker, topology)
    index_path = broker.vhosts["/"].storage.index_path("q")
    with open(index_path, "ab") as fh:
        fh.write(b"\x05" + b"\x00" * 20)  # half a record, as a power cut may leave
    broker, topology, counts = start(tmp_path)
    assert counts["messages"] == 300
    assert get_ack(broker.vhosts["/"].queues["q"], 300) == names(0, 300)
