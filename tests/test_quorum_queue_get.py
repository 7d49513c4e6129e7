"""A Basic.Get on a quorum queue's leader that waits for a requeue's RET entry to commit
(amqp_server/cluster/quorum_queue.py, ``ReplicatedQueue.request_get``): answered with the
message once the RET commits, and with nothing (Basic.GetEmpty) when the node stops leading
or the queue is deleted first; never left unanswered. The leader's queue sits on the replica
shell over in-memory links (tests/test_quorum_group.py's ``Cluster``): no broker process,
socket or etcd. A delete also leaves no replica log file behind and logs no error.

A client's Basic.Get must get an answer (spec 1.8.3.10: Basic.GetOk or Basic.GetEmpty); a
get left waiting would hang the client's channel."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from pamqp import commands

from amqp_server.cluster.quorum_group import QuorumGroup
from amqp_server.cluster.quorum_queue import ReplicatedQueue
from amqp_server.workers.link_codec import message_from
from broker.broker import Broker
from broker.config import BrokerConfig
from queue_store.outcomes import Settlement
from queue_store.queue import QueuedMessage
from tests.conftest import Client, methods, only
from tests.test_quorum_group import EXRK, Cluster

STATE = {"leader": 0, "run": 100, "epoch": 1, "members": [0, 1], "isr": [0, 1]}


async def _leader_with(c: Cluster, *bodies: bytes) -> tuple[QuorumGroup, ReplicatedQueue]:
    """Node 0 leads quorum queue q holding ``bodies`` (committed, serving)."""
    c.put(STATE)
    group = c.groups[0]
    group.runtime.local_pending = lambda context: None  # no publisher waits for a confirm
    group.runtime.local_result = lambda key, result: None
    queue = ReplicatedQueue("q", "/", group=group, durable=True,
                            arguments={"x-queue-type": "quorum"})
    group.lead(queue)
    group.tick()  # the etcd session: the leader serves
    for body in bodies:
        queue.publish(message_from(EXRK, b"\x00\x00", body))  # no properties
    await c.settle()
    assert queue.message_count == len(bodies) and group.serving()
    return group, queue


def _requeue_then_get(queue: ReplicatedQueue
                      ) -> list[tuple[QueuedMessage | None, int]]:
    """Basic.Get the head, requeue it (its RET entry not committed yet), Basic.Get again:
    the answers the second get receives."""
    qm = queue.get(False)
    assert qm is not None
    queue.settle([(qm, queue, None)], Settlement.REQUEUE)
    answers: list[tuple[QueuedMessage | None, int]] = []
    queue.request_get(None, False, lambda m, left: answers.append((m, left)))
    assert answers == [] and queue.returning  # waits for the RET entry's commit
    return answers


def test_a_get_waiting_for_a_requeue_gets_it_once_committed(tmp_path: Path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, 2)
        _, queue = await _leader_with(c, b"a")
        answers = _requeue_then_get(queue)
        await c.settle()
        [(qm, left)] = answers
        assert qm is not None and qm.message.body == b"a" and qm.redelivered
        assert qm.returns == 1 and left == 0

    asyncio.run(main())


def test_a_get_waiting_for_a_requeue_is_answered_empty_when_the_node_steps_down(
        tmp_path: Path) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, 2)
        group, queue = await _leader_with(c, b"a")
        answers = _requeue_then_get(queue)
        c.put({**STATE, "leader": 1, "run": 101, "epoch": 2, "isr": [1]})  # node 1 elected
        assert not group.leading
        assert answers == [(None, 0)]  # Basic.GetEmpty, at once
        await c.settle()
        assert answers == [(None, 0)]  # and only once
        assert c.groups[1].leading

    asyncio.run(main())


@pytest.mark.parametrize("written", [False, True], ids=["ret-unwritten", "ret-in-flight"])
def test_a_get_waiting_for_a_requeue_is_answered_empty_when_the_queue_is_deleted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, written: bool) -> None:
    async def main() -> None:
        c = Cluster(tmp_path, 2)
        group, queue = await _leader_with(c, b"a", b"b")
        assert queue.get(False) is not None  # a: delivered, unacknowledged
        answers = _requeue_then_get(queue)  # b
        if written:  # the RET entry appended and sent, its commit not back yet
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert queue.returning and answers == []
        _delete(c, group, queue)
        assert answers == [(None, 0)]  # Basic.GetEmpty, at once
        await c.settle()
        assert answers == [(None, 0)]  # and only once
        assert not group.log.path.exists()  # not written again after the delete
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

    asyncio.run(main())


def test_deleting_a_quorum_queue_with_ready_messages_leaves_no_replica_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The ready messages a delete drops are not logged as ACK entries after the replica
    log is gone (that write failed, logged an error and made the file again)."""
    async def main() -> None:
        c = Cluster(tmp_path, 2)
        group, queue = await _leader_with(c, b"a", b"b")
        _delete(c, group, queue)
        await c.settle()
        assert not group.log.path.exists()
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

    asyncio.run(main())


def _delete(c: Cluster, group: QuorumGroup, queue: ReplicatedQueue) -> None:
    """The broker's Queue.Delete on the leader: vhost.remove_queue marks the queue deleted
    (its ready messages dropped), then the quorum manager's queue_removed forgets the
    replica and closes it, removing its log file, in the same event-loop turn."""
    queue.mark_deleted()
    del c.groups[0]
    group.close(remove=True)


def test_a_channel_closed_while_its_get_waits_gets_nothing_after_close_ok(
        tmp_path: Path) -> None:
    """A client pipelines Basic.Get and Channel.Close while the get waits for a requeue:
    the close waits for the get's answer (the connection reads no frame meanwhile, as for
    a queue on another node), so Basic.GetOk comes before Channel.CloseOk, never after it,
    and the message goes back to the queue when the channel closes (it stayed unacked on a
    channel already gone)."""
    async def main() -> None:
        c = Cluster(tmp_path, 2)
        _, queue = await _leader_with(c, b"a")
        broker = Broker(BrokerConfig())
        broker.vhosts["/"].queues["q"] = queue
        client = Client(broker).handshake().open_channel(1)
        only(client.send(1, commands.Basic.Get(queue="q")), commands.Basic.GetOk)
        client.send(1, commands.Basic.Nack(delivery_tag=1, requeue=True))
        client.send(1, commands.Basic.Get(queue="q"), commands.Channel.Close(reply_code=200, class_id=0, method_id=0))
        await c.settle()
        frames = [f for _, f in client.read()]
        assert [type(f) for f in frames][-1] is commands.Channel.CloseOk
        assert [f.redelivered for f in frames if isinstance(f, commands.Basic.GetOk)] == [True]
        await c.settle()  # the second return commits
        assert queue.message_count == 1 and queue.unacked_count == 0
        only(client.send(1, commands.Channel.Open()), commands.Channel.OpenOk)
        [get_ok] = methods(client.send(1, commands.Basic.Get(queue="q", no_ack=True)),
                           commands.Basic.GetOk)
        assert get_ok.redelivered

    asyncio.run(main())
