"""The cluster's metadata log is compacted (issue #31 item 2): a snapshot of the whole state
at an etcd revision, the records before it deleted and etcd's history compacted, and a node
starting from nothing reads the snapshot and the tail. Real etcd (TLS, auth) and real nodes;
skipped without etcd (``make etcd-deps``).

The records are written straight into etcd's log, batched, with the nodes' own encoder (as
a node writes a declare), so 100,000 of them take seconds: 5,000 by default, 100,000 under
the ``slow`` marker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqp_server.cluster.log_snapshot import removals, state_records
from amqp_server.workers import link_values
from broker import topology_records as tr
from broker.broker import Broker
from broker.config import BrokerConfig, EtcdOptions
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import api, cluster_node, connect, running_cluster, wait_until
from tests.support.etcd import ETCD, Etcd

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

ROOT = b"/amqpq/default/"
LOG = ROOT + b"log/"
KEEP_EVERY = 250  # one object in this many survives its delete


@pytest.fixture(scope="module")
def nodes(etcd: Etcd, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[list[BrokerProcess]]:
    """Three nodes that write a snapshot every 2,000 records or after 1 s."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMQPQ_METADATA_SNAPSHOT_RECORDS", "2000")
        mp.setenv("AMQPQ_METADATA_SNAPSHOT_SECONDS", "1")
        with running_cluster(tmp_path_factory.mktemp("cluster"), etcd) as started:
            yield started


def _options(etcd: Etcd) -> EtcdOptions:
    args = dict(zip(etcd.args[::2], etcd.args[1::2], strict=True))
    return EtcdOptions(etcd.url, args["--cluster-etcd-cacert"], args["--cluster-etcd-cert"],
                       args["--cluster-etcd-key"], args["--cluster-etcd-user"],
                       Path(args["--cluster-etcd-password-file"]), 5)


def _records(total: int, tag: str) -> Iterator[dict[str, Any]]:
    """``total`` records: exchanges and queues declared then deleted, one in
    :data:`KEEP_EVERY` kept (a queue bound to amq.direct, an exchange bound to it)."""
    for i in range(total // 2):
        if i % 2 == 0:
            name = f"{tag}-x{i}"
            yield tr.to_wire(tr.ExchangeDeclare("/", name, "fanout", False, False, False, {}))
            if i % KEEP_EVERY:
                yield tr.to_wire(tr.ExchangeDelete("/", name, False))
            else:
                yield tr.to_wire(tr.Bind("/", "exchange", name, "amq.fanout", "", {}, None))
        else:
            name = f"{tag}-q{i}"
            yield tr.to_wire(tr.QueueDeclare("/", name, False, False, False, {}, None,
                                             False, 0))
            if i % KEEP_EVERY != 1:
                yield tr.to_wire(tr.QueueDelete("/", name, False, False, None))
            else:
                yield tr.to_wire(tr.Bind("/", "queue", name, "amq.direct", name, {}, None))


def _kept(total: int, tag: str) -> tuple[set[str], set[str]]:
    half = total // 2
    return ({f"{tag}-x{i}" for i in range(0, half, 2) if i % KEEP_EVERY == 0},
            {f"{tag}-q{i}" for i in range(1, half, 2) if i % KEEP_EVERY == 1})


async def _write(etcd: Etcd, total: int, tag: str) -> tuple[int, float]:
    """Write the records into the log, 100 per etcd transaction; (last revision, seconds)."""
    from amqp_server.cluster.etcd_client import open_client

    client = open_client(_options(etcd))
    await client.connect()
    started = time.monotonic()
    revision = 0
    try:
        tx = client.transactions
        batch: list[Any] = []
        for n, wire in enumerate(_records(total, tag)):
            value = link_values.encode(("apply", -1, 0, wire, ""))
            batch.append(tx.put(LOG + f"{tag}-{n:07d}".encode(), value))
            if len(batch) == 100:
                await client.transaction(compare=[], success=batch, failure=[])
                batch = []
        if batch:
            await client.transaction(compare=[], success=batch, failure=[])
        revision = (await client.get_prefix(ROOT + b"nothing/")).header.revision
    finally:
        await client.close()
    return revision, time.monotonic() - started


async def _log_state(etcd: Etcd) -> tuple[dict[str, Any], int]:
    """The snapshot pointer and the number of log keys left."""
    from amqp_server.cluster.etcd_client import open_client

    client = open_client(_options(etcd))
    await client.connect()
    try:
        pointer = await client.get(ROOT + b"snapshot")
        left = 0
        async for keys in client.key_revisions(LOG):
            left += len(keys)
    finally:
        await client.close()
    return (json.loads(pointer.value) if pointer is not None else {}), left


def _names(node: BrokerProcess, kind: str, tag: str) -> set[str]:
    return {o["name"] for o in api(node, f"/api/{kind}/%2F?columns=name")
            if o["name"].startswith(tag)}


def _compacted_start(etcd: Etcd, nodes: list[BrokerProcess], tmp: Path, total: int,
                     tag: str) -> None:
    revision, wrote = asyncio.run(_write(etcd, total, tag))
    print(f"\n{total} records written in {wrote:.1f} s (etcd revision {revision})")
    exchanges, queues = _kept(total, tag)
    for node in nodes:  # every running node applied them as they came
        wait_until(lambda node=node: _names(node, "queues", tag) == queues,
                   f"{node} has the kept queues", timeout=max(60, total / 200))
    pointer, left = wait_until(
        lambda: (s := asyncio.run(_log_state(etcd)))[0].get("revision", 0) >= revision
        and s[1] < 50 and s, "a snapshot after the last record, the log deleted",
        timeout=max(60, total / 200))
    print(f"snapshot at revision {pointer['revision']}: {pointer['records']} records, "
          f"{left} log records left")
    fourth = cluster_node(tmp, f"n4-{tag}", etcd)
    started = time.monotonic()
    fourth.start()
    ready = time.monotonic() - started
    try:
        print(f"fourth node ready in {ready:.2f} s after {total} log records")
        assert ready < 30
        assert _names(fourth, "queues", tag) == queues
        assert _names(fourth, "exchanges", tag) == exchanges
        bindings = {(b["source"], b["destination"]) for b in api(fourth, "/api/bindings/%2F")
                    if b["destination"].startswith(tag) and b["source"]}
        assert bindings == {("amq.direct", q) for q in queues} | \
            {("amq.fanout", x) for x in exchanges}
        log = fourth.log_path.read_text()
        assert "snapshot records" in log and "etcd revision" in log
        conn = connect(fourth)  # a queue of the snapshot takes a message routed on n4
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            q = sorted(queues)[0]
            ch.basic_publish("amq.direct", q, b"after the snapshot")
            got = wait_until(lambda: ch.basic_get(q, auto_ack=True)[2], "the message")
            assert got == b"after the snapshot"
        finally:
            conn.close()
    finally:
        fourth.close()


def test_a_fourth_node_starts_from_the_snapshot_after_5000_records(
        etcd: Etcd, nodes: list[BrokerProcess], tmp_path: Path) -> None:
    _compacted_start(etcd, nodes, tmp_path, 5_000, "c5k")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_fourth_node_starts_from_the_snapshot_after_100000_records(
        etcd: Etcd, nodes: list[BrokerProcess], tmp_path: Path) -> None:
    _compacted_start(etcd, nodes, tmp_path, 100_000, "c100k")


def test_snapshot_records_rebuild_a_broker_and_removals_name_what_it_lacks() -> None:
    source = Broker(BrokerConfig())
    vhost = source.vhosts["/"]
    vhost.declare_exchange("ex", "topic", False, True, False, False, {})
    vhost.declare_queue("q1", durable=False)
    vhost.declare_queue("q2", durable=False)
    from exchanges.binding import Destination
    vhost.bind(Destination("queue", "q1"), "ex", "a.#", {}, None)
    wires = state_records(source, 0, lambda q: 0)
    target = Broker(BrokerConfig())
    for wire in wires:
        record = tr.from_wire(link_values.decode(link_values.encode(("r", wire)))[1])
        assert record is not None
        if isinstance(record, tr.AccessChange):
            from broker.access_sync import apply_access
            assert apply_access(target, record.document)
        else:
            tr.apply_op(target, record, lambda ref: None)
    assert state_records(target, 0, lambda q: 0) == wires
    vhost.delete_queue("q2")
    gone = [tr.from_wire(w) for w in removals(wires, state_records(source, 0, lambda q: 0))]
    assert gone == [tr.QueueForget("/", "q2")]


def test_a_node_whose_watch_fell_behind_a_compaction_reads_the_snapshot_again(
        etcd: Etcd, nodes: list[BrokerProcess]) -> None:
    """n3 is stopped (shorter than its lease) while records come, a snapshot is written and
    etcd's history compacted, and etcd restarts (every watch breaks): n3's watch from its old
    revision is refused as compacted; it reads the snapshot and the tail again, removing an
    exchange deleted meanwhile and adding what was declared."""
    n1, n2, n3 = nodes
    conn = connect(n1)
    try:
        conn.channel().exchange_declare("resync-gone", "fanout")
    finally:
        conn.close()
    wait_until(lambda: "resync-gone" in _names(n3, "exchanges", "resync"), "declared on n3")
    os.kill(n3.pid, signal.SIGSTOP)
    try:
        revision, _ = asyncio.run(_write(etcd, 3_000, "resync"))
        asyncio.run(_delete_exchange(etcd, "resync-gone"))
        compactions = _compactions(n1, n2)
        wait_until(lambda: asyncio.run(_log_state(etcd))[0].get("revision", 0) > revision,
                   "a snapshot after the records", timeout=20)
        # the pointer is written before etcd's history is compacted: wait for that too, or
        # n3's watch may go on from its revision (no 'was compacted')
        wait_until(lambda: _compactions(n1, n2) > compactions, "etcd history compacted",
                   timeout=20)
        etcd.restart()
    finally:
        os.kill(n3.pid, signal.SIGCONT)
    exchanges, queues = _kept(3_000, "resync")
    wait_until(lambda: _names(n3, "queues", "resync") == queues
               and _names(n3, "exchanges", "resync") == exchanges, "n3 in step again",
               timeout=60)
    assert "was compacted" in n3.log_path.read_text()


def _compactions(*nodes: BrokerProcess) -> int:
    """Snapshots written with etcd's history compacted after them, by the log lines of
    ``nodes`` (amqp_server.cluster.metadata logs one per snapshot)."""
    return sum(n.log_path.read_text().count("etcd history compacted") for n in nodes)


async def _delete_exchange(etcd: Etcd, name: str) -> None:
    from amqp_server.cluster.etcd_client import open_client

    client = open_client(_options(etcd))
    await client.connect()
    try:
        wire = tr.to_wire(tr.ExchangeDelete("/", name, False))
        await client.put(LOG + b"resync-delete", link_values.encode(("apply", -1, 0, wire, "")))
    finally:
        await client.close()


async def _deaths(etcd: Etcd, member: str) -> tuple[int, dict[str, int], int]:
    """``members/<member>``'s lease, the log's ``down-<member>-*`` records (key -> creation
    revision) and the snapshot's revision."""
    from amqp_server.cluster.etcd_client import open_client

    client = open_client(_options(etcd))
    await client.connect()
    try:
        got = await client.get(ROOT + b"members/" + member.encode())
        lease = int(json.loads(got.value)["lease"]) if got is not None else 0
        downs = {bytes(kv.key[len(LOG):]).decode(): kv.create_revision
                 for kv in await client.get_prefix(LOG + f"down-{member}-".encode())}
        pointer = await client.get(ROOT + b"snapshot")
        revision = int(json.loads(pointer.value)["revision"]) if pointer is not None else 0
    finally:
        await client.close()
    return lease, downs, revision


def test_a_death_record_goes_once_a_snapshot_covers_it_and_its_node_came_back(
        etcd: Etcd, nodes: list[BrokerProcess]) -> None:
    """n3 stops: its death is recorded (``down-n3-<lease>``). A snapshot covering it while
    n3 is away keeps it (n3's next start records that death if nobody had); once n3 runs
    again under a new lease, the next snapshot deletes it, and nothing writes it again."""
    n1, _, n3 = nodes
    first, before, _ = asyncio.run(_deaths(etcd, "n3"))
    assert first
    n3.stop()
    dead = f"down-n3-{first:x}"
    created = wait_until(lambda: asyncio.run(_deaths(etcd, "n3"))[1].get(dead),
                         "n3's death recorded")
    wait_until(lambda: asyncio.run(_deaths(etcd, "n3"))[2] >= created,
               "a snapshot covering n3's death")
    assert dead in asyncio.run(_deaths(etcd, "n3"))[1]  # n3 has not registered since: kept
    n3.start()
    conn = connect(n1)  # a record after n3's return: the next snapshot is due
    try:
        conn.channel().exchange_declare("after-n3-back", "fanout")
    finally:
        conn.close()
    lease, downs, _ = wait_until(
        lambda: (d := asyncio.run(_deaths(etcd, "n3")))[0] != first and dead not in d[1]
        and d, "n3's old death record deleted by a snapshot")
    assert lease and f"down-n3-{lease:x}" not in downs  # n3 runs: no death of its new lease
    assert set(downs) <= set(before)  # earlier deaths of n3 only (if any), none re-written
    wait_until(lambda: "after-n3-back" in _names(n3, "exchanges", "after-n3"), "n3 in step")
    assert dead not in asyncio.run(_deaths(etcd, "n3"))[1]


def test_which_death_records_a_snapshot_may_delete() -> None:
    from amqp_server.cluster.log_snapshot import death_record_obsolete

    leases = {"n1": 0x20, "n-2": 0x30}
    assert death_record_obsolete(b"down-n1-1f", leases)  # n1 registered again since
    assert not death_record_obsolete(b"down-n1-20", leases)  # n1's current registration
    assert death_record_obsolete(b"down-n-2-2a", leases)  # a name with a dash
    assert not death_record_obsolete(b"down-gone-10", leases)  # forgotten: kept
    assert not death_record_obsolete(b"n1-abc-000000000001", leases)  # not a death
    assert not death_record_obsolete(b"down-n1-zz", leases)
