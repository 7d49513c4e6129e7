"""A queue's paging figures (queue_store.backing_status) as the management API's queue object
shows them: RabbitMQ's messages_ram / messages_paged_out / backing_queue_status fields, and
the per-state counts, with a queue driven through alpha, beta, gamma and delta."""

from __future__ import annotations

from pathlib import Path

from pamqp import commands
from pamqp.header import ContentHeader

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.environment import BrokerEnvironment
from management.serializers import UnackedTotals, queue_json
from management.state import ManagementState
from queue_store.backing_status import memory_fields
from queue_store.message import Message
from queue_store.queue import Queue, Settlement

PERSISTENT = ContentHeader(0, 0, commands.Basic.Properties(delivery_mode=2)).marshal()[12:]
TRANSIENT = ContentHeader(0, 0, commands.Basic.Properties(delivery_mode=1)).marshal()[12:]

#: the keys of RabbitMQ 3.10.8's backing_queue_status for a classic queue
RABBIT_BQS_KEYS = {"mode", "version", "q1", "q2", "q3", "q4", "delta", "len",
                   "target_ram_count", "next_seq_id", "next_deliver_seq_id", "avg_ingress_rate",
                   "avg_egress_rate", "avg_ack_ingress_rate", "avg_ack_egress_rate"}


def node(tmp_path: Path, embed: int = 4096) -> Broker:
    return Broker(BrokerConfig(data_dir=tmp_path, queue_index_embed_msgs_below=embed),
                  BrokerEnvironment(storage=True))


def fill(q: Queue, n: int, persistent_every: int = 2) -> None:
    for i in range(n):
        props = PERSISTENT if i % persistent_every == 0 else TRANSIENT
        q.publish(Message.create("", q.name, props, b"x" * 10))


def test_memory_only_queue_is_all_alpha(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(data_dir=tmp_path), BrokerEnvironment())  # no storage
    q = broker.vhosts["/"].declare_queue("q")
    fill(q, 5)
    f = memory_fields(q, 0, 0)
    assert (f["messages_ram"], f["messages_paged_out"], f["messages_alpha"]) == (5, 0, 5)
    assert f["backing_queue_status"]["target_ram_count"] == "infinity"
    assert f["messages_persistent"] == 0  # not durable: nothing persistent (RabbitMQ too)


def test_queue_through_the_four_states(tmp_path: Path) -> None:
    broker = node(tmp_path, embed=0)  # bodies in the message store: gamma is possible
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    vq = q.ready
    vq.ram_messages, vq.beta_messages = 10, 20
    fill(q, 50)  # 10 alpha, 20 beta, 20 delta
    f = memory_fields(q, 0, 0)
    assert [f[f"messages_{s}"] for s in ("alpha", "beta", "gamma", "delta")] == [10, 20, 0, 20]
    assert (f["messages_ram"], f["messages_ready_ram"], f["messages_paged_out"]) == (10, 10, 40)
    assert (f["message_bytes_ram"], f["message_bytes_paged_out"]) == (100, 400)
    assert f["messages_persistent"] == 25
    bqs = f["backing_queue_status"]
    assert set(bqs) == RABBIT_BQS_KEYS
    assert (bqs["q1"], bqs["q2"], bqs["q3"], bqs["q4"], bqs["len"]) == (0, 0, 20, 10, 50)
    assert bqs["delta"] == ["delta", "undefined", 20, 10, "undefined"]  # 10 transient
    assert (bqs["target_ram_count"], bqs["next_seq_id"], bqs["next_deliver_seq_id"]) == (
        10, 51, 1)
    # one delivered, not acked: in RAM, counted as unacknowledged
    got = q.get()
    assert got is not None
    f = memory_fields(q, 1, 10)
    assert (f["messages_unacknowledged_ram"], f["messages_ram"]) == (1, 10)
    assert f["backing_queue_status"]["next_deliver_seq_id"] == 2
    # memory pressure: stored persistent bodies in q4 drop to gamma
    broker.set_memory_pressure(True)
    f = memory_fields(q, 1, 10)
    assert f["messages_gamma"] > 0
    assert f["messages_ram"] == f["messages_alpha"] + 1
    assert sum(f[f"messages_{s}"] for s in ("alpha", "beta", "gamma", "delta")) == 49
    broker.set_memory_pressure(False)
    # draining reads everything back: all alpha again, then empty
    bodies = 0
    while q.get(no_ack=True) is not None:
        bodies += 1
    assert bodies == 49
    f = memory_fields(q, 1, 10)
    assert [f[f"messages_{s}"] for s in ("alpha", "beta", "gamma", "delta")] == [0, 0, 0, 0]


def test_queue_object_of_the_http_api_carries_the_fields(tmp_path: Path) -> None:
    broker = node(tmp_path)
    q = broker.vhosts["/"].declare_queue("q", durable=True, arguments={"x-max-priority": 3})
    for level in q.ready._levels:  # type: ignore[attr-defined]
        level.ram_messages = 2
    fill(q, 12)
    st = ManagementState(broker)
    out = queue_json(q, st, UnackedTotals.collect(broker))
    assert out["messages"] == 12 and out["messages_paged_out"] == 10
    assert out["messages_ready_ram"] == 2 and out["messages_persistent"] == 6
    assert out["backing_queue_status"]["len"] == 12
    assert out["backing_queue_status"]["avg_ingress_rate"] == 0.0  # first sample


def test_many_queues_share_one_ram_budget(tmp_path: Path) -> None:
    """50 queues x 500 messages: after a tick each keeps its share of the broker-wide alpha
    budget in RAM, the rest as beta; one queue alone gets the whole budget again."""
    from queue_store.ram_budget import RamBudget

    broker = node(tmp_path)
    broker.ram_budget = budget = RamBudget(ram_messages=10_000, beta_messages=25_000)
    broker.vhosts["/"].storage.budget = budget
    queues = [broker.vhosts["/"].declare_queue(f"q{i}", durable=True) for i in range(50)]
    for q in queues:
        fill(q, 500)
    assert sum(q.ready.state_counts()["alpha"] for q in queues) == 25_000  # before a tick
    broker.tick()
    assert budget.share == (200, budget.ram_bytes // 50, 500)
    counts = [q.ready.state_counts() for q in queues]
    assert all(c["alpha"] == 200 and c["beta"] == 300 for c in counts)
    assert [m.seq for m in queues[7].ready.q4][-1] == 200  # the tail moved, in order
    drained = []
    while (got := queues[7].get(no_ack=True)) is not None:
        drained.append(got.seq)
    assert drained == list(range(1, 501))
    for q in queues[1:]:
        q.purge()
    broker.tick()  # one queue left with messages: the per-queue defaults again
    assert budget.share[0] == 10_000 and queues[0].ready.ram_messages == 10_000


def test_prometheus_per_queue_gauges_show_paged_out_messages(tmp_path: Path) -> None:
    from management.prometheus.collectors import QUEUE_METRICS

    broker = node(tmp_path)
    q = broker.vhosts["/"].declare_queue("q", durable=True)
    q.ready.ram_messages = 3
    fill(q, 10)
    gauges = {name: fn((q, 0)) for name, _, _, fn in QUEUE_METRICS}
    assert gauges["queue_messages_paged_out"] == 7
    assert gauges["queue_messages_paged_out_bytes"] == 70
    assert gauges["queue_messages_ready_ram"] == gauges["queue_messages_ram"] == 3
    assert gauges["queue_messages_ram_bytes"] == 30


def test_ack_rates_follow_deliveries_needing_an_ack_and_their_settling(tmp_path: Path) -> None:
    """avg_ack_ingress_rate: deliveries needing an ack; avg_ack_egress_rate: settled ones
    (RabbitMQ's meanings), from the management API's rate sampler."""
    broker = node(tmp_path)
    q = broker.vhosts["/"].declare_queue("q")
    fill(q, 10)
    samples: dict[str, list[int]] = {}

    def rate(name: str, value: int) -> float:
        samples.setdefault(name, []).append(value)
        return float(value)

    first = memory_fields(q, 0, 0, rate)["backing_queue_status"]
    assert (first["avg_ack_ingress_rate"], first["avg_ack_egress_rate"]) == (0.0, 0.0)
    got = [q.get() for _ in range(4)]
    q.settle([(qm, q, None) for qm in got[:3]], Settlement.ACK)
    bqs = memory_fields(q, 1, 10, rate)["backing_queue_status"]
    assert (bqs["avg_ack_ingress_rate"], bqs["avg_ack_egress_rate"]) == (4.0, 3.0)
    assert bqs["next_deliver_seq_id"] == 5
    assert samples["ack_ingress"] == [0, 4] and samples["ack_egress"] == [0, 3]
