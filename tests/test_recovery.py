"""Recovery at broker start (broker.persistence + queue_store): what a restart on the
same data dir brings back -- persistent messages on durable queues, in order, with the
redelivered flag for delivered-unacked ones; durable topology from definitions.json -- and
what it does not (transient messages, non-durable queues, acked messages)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FakeClock
from pamqp import commands
from pamqp.header import ContentHeader

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from broker.persistence import DEFINITIONS_FILE, TopologyStore, recover_messages
from exchanges.binding import Destination
from queue_store.message import Message
from queue_store.msg_store import HEAD_SIZE
from queue_store.queue import ACCEPTED, ACCEPTED_UNSYNCED, Queue, Settlement


def props_raw(**kw) -> bytes:
    return ContentHeader(0, 0, commands.Basic.Properties(**kw)).marshal()[12:]


PERSISTENT = props_raw(delivery_mode=2)
TRANSIENT = props_raw(delivery_mode=1)


def pmsg(body: str | bytes, routing_key: str = "q", exchange: str = "",
         properties_raw: bytes = PERSISTENT) -> Message:
    if isinstance(body, str):
        body = body.encode()
    return Message.create(exchange, routing_key, properties_raw, body)


def tmsg(body: str | bytes, routing_key: str = "q") -> Message:
    return pmsg(body, routing_key, properties_raw=TRANSIENT)


def start(data_dir: Path, config: BrokerConfig | None = None,
          env: BrokerEnvironment | None = None, ram_messages: int | None = None
          ) -> tuple[Broker, TopologyStore, dict[str, int]]:
    """A broker started on ``data_dir`` the way the server starts one (``config`` and
    ``env`` default to plain ones with storage on; their data dir and storage are set;
    ``ram_messages``: the broker-wide alpha budget, messages)."""
    config = replace(config or BrokerConfig(), data_dir=data_dir)
    broker = Broker(config, replace(env or BrokerEnvironment(), storage=True))
    if ram_messages is not None:
        broker.ram_budget.ram_messages = ram_messages
    topology = broker.topology
    assert topology is not None
    topology.load()
    counts = recover_messages(broker)
    topology.save_if_changed()
    return broker, topology, counts


def crash(broker: Broker, topology: TopologyStore) -> None:
    """What survives ``kill -9`` after the current batch of input: records written to the
    files (no fsync needed for a process crash), topology saved."""
    broker.after_batch()
    topology.save_if_changed()


def stop(broker: Broker, topology: TopologyStore) -> None:
    """A clean shutdown (what BrokerServer.stop does after closing connections)."""
    crash(broker, topology)
    for vhost in broker.vhosts.values():
        if vhost.storage is not None:
            vhost.storage.close()


def restart(data_dir: Path, broker: Broker, topology: TopologyStore, clean: bool = False
            ) -> tuple[Broker, TopologyStore, dict[str, int]]:
    (stop if clean else crash)(broker, topology)
    return start(data_dir)


def drain(queue: Queue, ack: bool = True) -> list[tuple[bytes, bool]]:
    """Basic.Get everything: (body, redelivered) in delivery order, acking each."""
    out = []
    while (qm := queue.get()) is not None:
        out.append((qm.message.body, qm.redelivered))
        if ack:
            queue.settle([(qm, queue, None)], Settlement.ACK)
    return out


def bodies(queue: Queue) -> list[bytes]:
    return [b for b, _ in drain(queue)]


@pytest.fixture
def node(tmp_path: Path):
    broker, topology, counts = start(tmp_path)
    assert counts == {"messages": 0, "queues": 0, "skipped": 0}
    return broker, topology


@pytest.fixture
def store_node(tmp_path: Path):
    """A node that embeds nothing in queue indexes: every persistent message goes to the
    shared message store (as bodies of 4,096 bytes and more do by default). Restarts
    embed again, so journals then mix both kinds of publish record."""
    broker, topology, _ = start(tmp_path, BrokerConfig(queue_index_embed_msgs_below=0))
    return broker, topology


# ---- messages ------------------------------------------------------------------------------


def test_persistent_messages_on_durable_queue_survive_restart(tmp_path: Path, node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    for i in range(20):
        assert q.publish(pmsg(f"m{i}")) == ACCEPTED_UNSYNCED
    broker, topology, counts = restart(tmp_path, broker, topology)
    assert counts["messages"] == 20 and counts["queues"] == 1 and counts["skipped"] == 0
    rq = broker.vhosts["/"].queues["q"]
    assert rq.durable
    assert rq.message_count == 20
    assert drain(rq) == [(f"m{i}".encode(), False) for i in range(20)]


def test_clean_shutdown_then_restart(tmp_path: Path, node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    for i in range(5):
        q.publish(pmsg(f"m{i}"))
    broker, topology, counts = restart(tmp_path, broker, topology, clean=True)
    assert bodies(broker.vhosts["/"].queues["q"]) == [f"m{i}".encode() for i in range(5)]


def test_properties_routing_info_and_bodies_are_preserved(tmp_path: Path, node) -> None:
    broker, topology = node
    raw = props_raw(delivery_mode=2, content_type="application/json", headers={"k": "v", "n": 1},
                    correlation_id="c-1", message_id="id-1", priority=3)
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    big = bytes(range(256)) * 4096
    q.publish(pmsg(b"", routing_key="q", properties_raw=raw))
    q.publish(pmsg(big, routing_key="q", exchange="amq.direct"))
    q.publish(pmsg("ключ", routing_key="q"))
    broker, topology, _ = restart(tmp_path, broker, topology)
    rq = broker.vhosts["/"].queues["q"]
    a, b, c = rq.get(), rq.get(), rq.get()
    assert a.message.properties_raw == raw
    assert a.message.properties.headers == {"k": "v", "n": 1}
    assert a.message.body == b""
    assert (b.message.exchange, b.message.routing_key, b.message.body) == ("amq.direct", "q", big)
    assert c.message.body == "ключ".encode()


def test_transient_messages_do_not_survive(tmp_path: Path, node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    assert q.publish(tmsg("t0")) == ACCEPTED
    q.publish(pmsg("p1"))
    q.publish(tmsg("t2"))
    q.publish(pmsg("p3"))
    q.publish(pmsg("p4", properties_raw=b"\x00\x00"))  # no properties: transient
    broker, topology, counts = restart(tmp_path, broker, topology)
    assert counts["messages"] == 2
    assert bodies(broker.vhosts["/"].queues["q"]) == [b"p1", b"p3"]


def test_non_durable_queue_does_not_survive(tmp_path: Path, node) -> None:
    broker, topology = node
    v = broker.vhosts["/"]
    q = v.declare_queue("transient-q", durable=False)
    assert q.publish(pmsg("persistent but in a transient queue")) == ACCEPTED
    v.declare_queue("excl", durable=True, exclusive=True, connection=object()).publish(
        pmsg("in an exclusive queue"))
    broker, topology, counts = restart(tmp_path, broker, topology)
    assert "transient-q" not in broker.vhosts["/"].queues
    assert "excl" not in broker.vhosts["/"].queues
    assert counts["messages"] == 0
    assert broker.vhosts["/"].storage.store.index == {}


def test_acked_message_does_not_come_back(tmp_path: Path, node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    for i in range(6):
        q.publish(pmsg(f"m{i}"))
    for _ in range(3):
        qm = q.get()
        q.settle([(qm, q, None)], Settlement.ACK)
    broker, topology, _ = restart(tmp_path, broker, topology)
    assert drain(broker.vhosts["/"].queues["q"]) == [(b"m3", False), (b"m4", False),
                                                     (b"m5", False)]


def test_delivered_unacked_comes_back_redelivered_in_order(tmp_path: Path, node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    for i in range(8):
        q.publish(pmsg(f"m{i}"))
    taken = [q.get() for _ in range(4)]  # m0..m3 delivered
    q.settle([(taken[1], q, None)], Settlement.ACK)  # m1 acked; m0, m2, m3 delivered and unacked
    broker, topology, counts = restart(tmp_path, broker, topology)
    assert counts["messages"] == 7
    assert drain(broker.vhosts["/"].queues["q"]) == [
        (b"m0", True), (b"m2", True), (b"m3", True),
        (b"m4", False), (b"m5", False), (b"m6", False), (b"m7", False)]


def test_requeued_message_comes_back_redelivered(tmp_path: Path, node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    q.publish(pmsg("a"))
    q.publish(pmsg("b"))
    qm = q.get()
    q.settle([(qm, q, None)], Settlement.REQUEUE)
    broker, topology, _ = restart(tmp_path, broker, topology)
    assert drain(broker.vhosts["/"].queues["q"]) == [(b"a", True), (b"b", False)]


def test_many_restarts_keep_order_and_state(tmp_path: Path, node) -> None:
    """Publish, consume some, restart, publish more ... against a model of the queue."""
    broker, topology = node
    broker.vhosts["/"].declare_queue("q", durable=True)
    model: list[tuple[int, bool]] = []  # (publish number, redelivered) in queue order
    n = 0
    for round_ in range(5):
        q = broker.vhosts["/"].queues["q"]
        for _ in range(30):
            q.publish(pmsg(f"m{n}"))
            model.append((n, False))
            n += 1
        unacked: list[tuple[int, bool]] = []
        for k in range(12):
            qm = q.get()
            want = model.pop(0)
            assert (qm.message.body, qm.redelivered) == (f"m{want[0]}".encode(), want[1])
            if k % 3 == 0:  # delivered, never acked: back after the restart, flagged
                unacked.append((want[0], True))
            else:
                q.settle([(qm, q, None)], Settlement.ACK)
        model = sorted(model + unacked)  # back at their original positions
        broker, topology, counts = restart(tmp_path, broker, topology, clean=round_ % 2 == 0)
        assert counts["messages"] == len(model)
        got = [(qm.message.body, qm.redelivered) for qm in broker.vhosts["/"].queues["q"].ready]
        assert got == [(f"m{i}".encode(), r) for i, r in model]
    assert drain(broker.vhosts["/"].queues["q"]) == [(f"m{i}".encode(), r) for i, r in model]


def test_message_in_two_durable_queues(tmp_path: Path, store_node) -> None:
    broker, topology = store_node
    v = broker.vhosts["/"]
    v.declare_exchange("fan", "fanout", durable=True)
    for name in ("a", "b"):
        v.declare_queue(name, durable=True)
        v.bind(Destination("queue", name), "fan", "")
    m = pmsg("shared", routing_key="", exchange="fan")
    for q in v.route(v.exchange("fan"), "", m):
        q.publish(m)
    assert len(v.storage.store.index) == 1  # stored once
    qa = v.queues["a"]
    qm = qa.get()
    qa.settle([(qm, qa, None)], Settlement.ACK)  # gone from a, still in b
    broker, topology, _ = restart(tmp_path, broker, topology)
    v = broker.vhosts["/"]
    assert v.queues["a"].message_count == 0
    assert bodies(v.queues["b"]) == [b"shared"]
    assert v.storage.store.index == {}  # the last reference went with the ack


def test_message_in_durable_and_transient_queue(tmp_path: Path, node) -> None:
    broker, topology = node
    v = broker.vhosts["/"]
    v.declare_exchange("fan", "fanout", durable=True)
    v.declare_queue("d", durable=True)
    v.declare_queue("t", durable=False)
    for name in ("d", "t"):
        v.bind(Destination("queue", name), "fan", "")
    m = pmsg("both", routing_key="", exchange="fan")
    results = {q.name: q.publish(m) for q in v.route(v.exchange("fan"), "", m)}
    assert results == {"d": ACCEPTED_UNSYNCED, "t": ACCEPTED}
    broker, topology, _ = restart(tmp_path, broker, topology)
    v = broker.vhosts["/"]
    assert bodies(v.queues["d"]) == [b"both"]
    assert "t" not in v.queues


def test_purged_and_deleted_queues_leave_nothing(tmp_path: Path, store_node) -> None:
    broker, topology = store_node
    v = broker.vhosts["/"]
    for name in ("purged", "deleted", "kept"):
        q = v.declare_queue(name, durable=True)
        for i in range(4):
            q.publish(pmsg(f"{name}{i}"))
    assert v.queues["purged"].purge() == 4
    assert v.delete_queue("deleted") == 4
    broker, topology, counts = restart(tmp_path, broker, topology)
    v = broker.vhosts["/"]
    assert counts["messages"] == 4
    assert v.queues["purged"].message_count == 0
    assert "deleted" not in v.queues
    assert len(v.storage.store.index) == 4
    assert bodies(v.queues["kept"]) == [f"kept{i}".encode() for i in range(4)]


def test_redeclared_queue_after_delete_starts_empty(tmp_path: Path, node) -> None:
    broker, topology = node
    v = broker.vhosts["/"]
    v.declare_queue("q", durable=True).publish(pmsg("old"))
    v.delete_queue("q")
    v.declare_queue("q", durable=True).publish(pmsg("new"))
    broker, topology, _ = restart(tmp_path, broker, topology)
    assert bodies(broker.vhosts["/"].queues["q"]) == [b"new"]


@pytest.mark.parametrize("state", ["alpha", "beta", "gamma", "delta"])
def test_persistent_messages_survive_a_crash_in_each_state(tmp_path: Path, state: str) -> None:
    """kill -9 with the queue's messages in each of RabbitMQ's four states: every persistent
    message comes back exactly once, in order, and no transient one does."""
    embed = 0 if state == "gamma" else 4096  # gamma: bodies safe in the message store
    broker, topology, _ = start(tmp_path, BrokerConfig(queue_index_embed_msgs_below=embed))
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    vq = q.ready
    if state in ("beta", "delta"):
        vq.ram_messages = 5
        vq.beta_messages = 1000 if state == "beta" else 0
    for i in range(300):
        q.publish(pmsg(f"m{i}") if i % 2 == 0 else tmsg(f"m{i}"))
    if state == "gamma":
        vq.set_memory_pressure(True)
    counts = vq.state_counts()
    assert counts[state] > 0, counts
    assert sum(counts[s] for s in ("alpha", "beta", "gamma", "delta")) == 300
    head = q.get()  # delivered, unacked at the crash: comes back redelivered
    assert head is not None and head.message.body == b"m0"
    broker, topology, counts = restart(tmp_path, broker, topology)
    rq = broker.vhosts["/"].queues["q"]
    assert counts["messages"] == 150
    first = rq.get(no_ack=True)
    assert first is not None and first.redelivered and first.message.body == b"m0"
    assert bodies(rq) == [f"m{i}".encode() for i in range(2, 300, 2)]
    paging = broker.vhosts["/"].storage.paging_dir
    assert all(p.stat().st_size == 0 for p in paging.iterdir())  # old pages dropped


def test_priority_queue_recovers_priorities(tmp_path: Path, node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("pq", durable=True, arguments={"x-max-priority": 5})
    for i, prio in enumerate([1, 5, 0, 3, 5, 9]):
        q.publish(pmsg(f"m{i}", routing_key="pq", properties_raw=props_raw(
            delivery_mode=2, priority=prio)))
    broker, topology, _ = restart(tmp_path, broker, topology)
    rq = broker.vhosts["/"].queues["pq"]
    assert rq.settings.max_priority == 5
    assert bodies(rq) == [b"m1", b"m4", b"m5", b"m3", b"m0", b"m2"]


def faked(clock: FakeClock) -> BrokerEnvironment:
    """A broker environment on ``clock``, the wall clock included (a restart on the same
    clock sees the time that passed while it was down)."""
    return BrokerEnvironment(clock=clock, wall=clock)


def test_message_expired_while_down_is_dropped(tmp_path: Path) -> None:
    clock = FakeClock(1.7e9)
    broker, topology, _ = start(tmp_path, env=faked(clock))
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    q.publish(pmsg("short", properties_raw=props_raw(delivery_mode=2, expiration="50")))
    q.publish(pmsg("long", properties_raw=props_raw(delivery_mode=2, expiration="600000")))
    q.publish(pmsg("forever"))
    crash(broker, topology)
    clock.advance(0.1)
    broker, topology, _ = start(tmp_path, env=faked(clock))
    rq = broker.vhosts["/"].queues["q"]
    head = rq.get()
    assert head.message.body == b"long"
    remaining = head.expires_at - broker.timers.clock()
    assert remaining == pytest.approx(599.9)  # the deadline kept its wall-clock meaning (s)
    assert [b for b, _ in drain(rq)] == [b"forever"]


def test_queue_ttl_argument_applies_after_restart(tmp_path: Path) -> None:
    clock = FakeClock(1.7e9)
    broker, topology, _ = start(tmp_path, env=faked(clock))
    q = broker.vhosts["/"].declare_queue("q", durable=True, arguments={"x-message-ttl": 50})
    q.publish(pmsg("gone"))
    crash(broker, topology)
    clock.advance(0.1)
    broker, topology, _ = start(tmp_path, env=faked(clock))
    rq = broker.vhosts["/"].queues["q"]
    assert rq.arguments == {"x-message-ttl": 50}
    assert rq.get() is None


def test_second_vhost_and_its_queue_recover(tmp_path: Path, node) -> None:
    broker, topology = node
    v = broker.add_vhost("other/vh ü")
    v.declare_queue("q", durable=True).publish(pmsg("in other vhost"))
    broker.vhosts["/"].declare_queue("q", durable=True).publish(pmsg("in default vhost"))
    broker, topology, counts = restart(tmp_path, broker, topology)
    assert counts["queues"] == 2
    assert bodies(broker.vhosts["other/vh ü"].queues["q"]) == [b"in other vhost"]
    assert bodies(broker.vhosts["/"].queues["q"]) == [b"in default vhost"]


def test_recovery_compacts_the_index_and_drops_dead_records(tmp_path: Path, store_node) -> None:
    broker, topology = store_node
    v = broker.vhosts["/"]
    q = v.declare_queue("q", durable=True)
    for i in range(50):
        q.publish(pmsg(f"m{i}"))
    for _ in range(45):
        qm = q.get()
        q.settle([(qm, q, None)], Settlement.ACK)
    broker, topology, _ = restart(tmp_path, broker, topology)
    v = broker.vhosts["/"]
    idx = v.storage.index_path("q")
    assert idx.stat().st_size == 5 * 30  # five publish records, nothing else
    assert len(v.storage.store.index) == 5
    # publishing and restarting again still works on the compacted journal
    v.queues["q"].publish(pmsg("m50"))
    broker, topology, _ = restart(tmp_path, broker, topology)
    assert bodies(broker.vhosts["/"].queues["q"]) == [f"m{i}".encode() for i in range(45, 51)]


def test_corrupt_store_record_loses_only_that_message(tmp_path: Path, store_node) -> None:
    broker, topology = store_node
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    for i in range(5):
        q.publish(pmsg(f"message-{i}" * 5))
    store = broker.vhosts["/"].storage.store
    loc = store.index[q.ready.q4[2].msg_id]
    crash(broker, topology)
    seg = store.directory / f"{loc.segment:08d}.seg"
    data = bytearray(seg.read_bytes())
    data[loc.offset + HEAD_SIZE + 5] ^= 0xFF
    seg.write_bytes(bytes(data))
    broker, topology, counts = start(tmp_path)
    assert counts["skipped"] >= 1
    assert counts["messages"] == 4
    assert bodies(broker.vhosts["/"].queues["q"]) == [
        f"message-{i}".encode() * 5 for i in (0, 1, 3, 4)]


def test_unconfirmed_buffered_publishes_may_be_lost_confirmed_ones_not(tmp_path: Path,
                                                                       node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    confirmed: list[int] = []
    for i in range(10):
        q.publish(pmsg(f"m{i}"))
        broker.durability.after_sync(lambda i=i: confirmed.append(i))
    for i in range(10, 15):
        q.publish(pmsg(f"m{i}"))  # still in the write buffers: no flush, no sync
    topology.save_if_changed()
    broker, topology, _ = start(tmp_path)  # kill -9 without the end-of-batch flush
    got = bodies(broker.vhosts["/"].queues["q"])
    assert confirmed == list(range(10))
    assert got[:10] == [f"m{i}".encode() for i in range(10)]
    assert set(got) <= {f"m{i}".encode() for i in range(15)}


def test_dead_lettered_persistent_message_survives(tmp_path: Path, node) -> None:
    broker, topology = node
    v = broker.vhosts["/"]
    v.declare_exchange("dlx", "fanout", durable=True)
    v.declare_queue("dlq", durable=True)
    v.bind(Destination("queue", "dlq"), "dlx", "")
    q = v.declare_queue("q", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    q.publish(pmsg("to be rejected"))
    qm = q.get()
    q.settle([(qm, q, None)], Settlement.REJECT)
    broker, topology, _ = restart(tmp_path, broker, topology)
    v = broker.vhosts["/"]
    assert v.queues["q"].message_count == 0
    got = v.queues["dlq"].get()
    assert got is not None and got.message.body == b"to be rejected"
    assert got.message.persistent
    assert got.message.headers["x-death"][0]["reason"] == "rejected"


def test_recreated_vhost_does_not_serve_messages_of_the_deleted_one(tmp_path: Path,
                                                                     node) -> None:
    broker, topology = node
    v = broker.add_vhost("v")
    v.storage.store.segment_size = 100  # several segments (16 MiB in production)
    q = v.declare_queue("q", durable=True)
    for i in range(5):
        q.publish(pmsg(f"old-{i}" * 10))
    broker.after_batch()
    assert broker.delete_vhost("v")
    v = broker.add_vhost("v")
    q = v.declare_queue("q", durable=True)
    for i in range(5):
        q.publish(pmsg(f"new-{i}"))
    broker.durability.after_sync(lambda: None)
    broker, topology, _ = restart(tmp_path, broker, topology)
    assert bodies(broker.vhosts["v"].queues["q"]) == [f"new-{i}".encode() for i in range(5)]


# ---- topology ------------------------------------------------------------------------------


def test_durable_exchanges_bindings_and_policies_survive(tmp_path: Path, node) -> None:
    broker, topology = node
    v = broker.vhosts["/"]
    v.declare_exchange("dx", "topic", durable=True)
    v.declare_exchange("tx", "direct", durable=False)
    v.declare_exchange("dx2", "fanout", durable=True)
    v.declare_queue("dq", durable=True)
    v.bind(Destination("queue", "dq"), "dx", "a.*")
    v.bind(Destination("exchange", "dx2"), "dx", "b.#")
    v.bind(Destination("queue", "dq"), "dx2", "")
    v.set_policy("lim", "^dq$", {"max-length": 3}, priority=1, apply_to="queues")
    assert v.queues["dq"].settings.max_length == 3
    broker, topology, _ = restart(tmp_path, broker, topology)
    v = broker.vhosts["/"]
    assert v.exchanges["dx"].type_name == "topic" and v.exchanges["dx"].durable
    assert v.exchanges["dx2"].type_name == "fanout"
    assert "tx" not in v.exchanges
    assert "lim" in v.policies
    assert v.policies["lim"].definition == {"max-length": 3}
    q = v.queues["dq"]
    assert q.settings.max_length == 3  # the policy applies to the recovered queue
    assert [qq.name for qq in v.route(v.exchange("dx"), "a.x", pmsg("r"))] == ["dq"]
    assert [qq.name for qq in v.route(v.exchange("dx"), "b.x.y", pmsg("r"))] == ["dq"]
    assert v.route(v.exchange("dx"), "c", pmsg("r")) == []
    for i in range(5):
        q.publish(pmsg(f"m{i}", routing_key="a.x", exchange="dx"))
    assert q.message_count == 3  # max-length from the recovered policy (drop-head)
    saved = json.loads((tmp_path / DEFINITIONS_FILE).read_text())
    assert any(x["name"] == "dx" for x in saved["exchanges"])
    assert not any(x["name"] == "tx" for x in saved["exchanges"])


def test_binding_to_transient_queue_is_not_recovered(tmp_path: Path, node) -> None:
    broker, topology = node
    v = broker.vhosts["/"]
    v.declare_exchange("dx", "direct", durable=True)
    v.declare_queue("tq", durable=False)
    v.bind(Destination("queue", "tq"), "dx", "k")
    broker, topology, _ = restart(tmp_path, broker, topology)
    v = broker.vhosts["/"]
    assert "dx" in v.exchanges
    assert v.route(v.exchange("dx"), "k", pmsg("x")) == []


def test_unchanged_topology_is_not_rewritten(tmp_path: Path, node) -> None:
    broker, topology = node
    broker.vhosts["/"].declare_queue("q", durable=True)
    assert topology.save_if_changed()
    assert not topology.save_if_changed()
    assert not (tmp_path / (DEFINITIONS_FILE + ".tmp")).exists()


def test_missing_definitions_file_loads_nothing(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    assert TopologyStore(broker, tmp_path).load() is False


@pytest.mark.parametrize("content", [
    b"{\"queues\": [",  # torn write
    b"",
    b"\xff\xfe garbage \x00",
    b"not json at all",
])
def test_corrupt_definitions_file_raises_value_error_naming_it(tmp_path: Path,
                                                               content: bytes) -> None:
    (tmp_path / DEFINITIONS_FILE).write_bytes(content)
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    with pytest.raises(ValueError) as info:
        TopologyStore(broker, tmp_path).load()
    assert str(tmp_path / DEFINITIONS_FILE) in str(info.value)


def test_definitions_with_invalid_content_raise_value_error(tmp_path: Path) -> None:
    (tmp_path / DEFINITIONS_FILE).write_text(json.dumps(
        {"queues": [{"name": "q", "vhost": "no-such-vhost", "durable": True}]}))
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment(storage=True))
    with pytest.raises(ValueError):
        TopologyStore(broker, tmp_path).load()


def test_quorum_queue_keeps_transient_messages_across_a_crash(tmp_path: Path, node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("qq", durable=True,
                                         arguments={"x-queue-type": "quorum"})
    assert q.publish(tmsg("transient")) == ACCEPTED_UNSYNCED  # confirmed after the fsync
    broker2, _, counts = restart(tmp_path, broker, topology)
    assert bodies(broker2.vhosts["/"].queues["qq"]) == [b"transient"]
    assert counts["messages"] == 1


def test_quorum_delivery_count_survives_a_crash(tmp_path: Path, node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("qq", durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": 2})
    q.publish(pmsg("poison"))
    for _ in range(2):  # two returns
        qm = q.get()
        q.settle([(qm, q, None)], Settlement.REQUEUE)
    broker2, topology2, _ = restart(tmp_path, broker, topology)
    q2 = broker2.vhosts["/"].queues["qq"]
    qm = q2.get()
    assert qm.message.headers["x-delivery-count"] == 2
    q2.settle([(qm, q2, None)], Settlement.REQUEUE)  # the third return is past the limit of 2: dropped
    assert q2.message_count == 0
    broker3, _, counts = restart(tmp_path, broker2, topology2)
    assert broker3.vhosts["/"].queues["qq"].message_count == 0 and counts["messages"] == 0


# ---- messages embedded in the queue index (queue_index_embed_msgs_below) ------------------


def test_small_persistent_messages_are_embedded_in_the_index_not_the_store(
        tmp_path: Path, node) -> None:
    broker, topology = node
    v = broker.vhosts["/"]
    q = v.declare_queue("q", durable=True, arguments={"x-max-priority": 5})
    small, large = b"s" * 4095, b"L" * 4096  # RabbitMQ's default threshold: 4,096 bytes
    props = props_raw(delivery_mode=2, priority=3, message_id="id-1")
    q.publish(pmsg(small, properties_raw=props))
    q.publish(pmsg(large))
    q.publish(pmsg(b"small-2"))
    assert len(v.storage.store.index) == 1  # only the large one is in the shared store
    first = q.get()
    assert first is not None and first.message.body == small  # priority 3 first
    broker, topology, counts = restart(tmp_path, broker, topology)
    assert counts["messages"] == 3
    q = broker.vhosts["/"].queues["q"]
    assert len(broker.vhosts["/"].storage.store.index) == 1
    head = q.get()
    assert head is not None and head.message.body == small
    assert head.redelivered  # delivered before the crash, never acked
    assert head.message.properties_raw == props and head.message.priority == 3
    assert bodies(q) == [large, b"small-2"]


def test_embedded_messages_acked_stay_acked_after_restart(tmp_path: Path, node) -> None:
    broker, topology = node
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    for i in range(20):
        q.publish(pmsg(f"m{i}"))
    for _ in range(7):
        qm = q.get()
        q.settle([(qm, q, None)], Settlement.ACK)
    broker, topology, _ = restart(tmp_path, broker, topology)
    q = broker.vhosts["/"].queues["q"]
    assert [m.message.body for m in q.ready] == [f"m{i}".encode() for i in range(7, 20)]
    # twice: the compacted journal (embedded records rewritten) replays the same
    q.publish(pmsg("m20"))
    broker, topology, _ = restart(tmp_path, broker, topology)
    assert bodies(broker.vhosts["/"].queues["q"]) == [f"m{i}".encode() for i in range(7, 21)]


def test_embed_threshold_is_configurable(tmp_path: Path) -> None:
    broker, _, _ = start(tmp_path, BrokerConfig(queue_index_embed_msgs_below=10))
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    q.publish(pmsg(b"123456789"))  # 9 bytes: embedded
    q.publish(pmsg(b"1234567890"))  # 10 bytes: in the store
    assert len(broker.vhosts["/"].storage.store.index) == 1
