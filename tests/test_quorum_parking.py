"""Publishes to a quorum queue whose leader is out of reach wait for the next one
(:class:`amqp_server.workers.remote_client.RemoteClient`'s parking), without processes: the
links are fakes that record what would be sent, answers are fed in as a home's RESULTS would
be. The real-cluster runs are ``tests/test_cluster_failover.py`` and
``tests/test_quorum_publish_failover.py``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from amqp_server.workers import remote_client
from amqp_server.workers.link_codec import message_from
from amqp_server.workers.remote_client import RemoteClient
from amqp_server.workers.remote_queue import RemoteQueue
from queue_store.outcomes import NOT_LEADER, REJECTED, REMOTE, ROUTED, PublishContext


@dataclass
class Outbox:
    sent: list[tuple[int, bool, bytes]] = field(default_factory=list)  # (pub_id, want, body)

    def publish(self, pub_id: int, want: bool, _qkey: bytes, _exrk: bytes, _props: bytes,
                body: bytes) -> None:
        self.sent.append((pub_id, want, body))


@dataclass
class Out:
    outbox: Outbox = field(default_factory=Outbox)
    paused: bool = False

    def schedule(self) -> None:
        pass


@dataclass
class Links:
    out: dict[int, Any] = field(default_factory=dict)


class Publisher:
    """One publish's confirm: ``outcome`` becomes "ack" or "nack"."""

    def __init__(self, client: RemoteClient, q: RemoteQueue, body: bytes) -> None:
        self.outcome: str | None = None
        context = PublishContext(None, want_results=True)
        result = q.publish_for(message_from(b"\x00\x01q", b"", body), context)
        assert result == ROUTED | REMOTE
        client.after_results(context.waits, lambda: self._set("ack"), lambda: self._set("nack"))

    def _set(self, outcome: str) -> None:
        assert self.outcome is None, "answered twice"
        self.outcome = outcome


def setup() -> tuple[RemoteClient, Links, RemoteQueue]:
    links = Links({1: Out(), 2: Out()})
    client = RemoteClient(None, 0, links)  # type: ignore[arg-type]
    q = RemoteQueue(client, 1, "q", "/", durable=True, arguments={"x-queue-type": "quorum"})
    return client, links, q


def answer(client: RemoteClient, home: int, outbox: Outbox, result: int) -> None:
    """The home answers every publish sent it so far."""
    for pub_id, want, _ in outbox.sent:
        if want:
            client.local_result((home, pub_id), result)
    outbox.sent.clear()


def run(coro_fn: Any) -> None:
    async def main() -> None:
        coro_fn()
    asyncio.run(main())


def test_unanswered_publishes_wait_for_the_next_leader_in_order() -> None:
    """The leader's link goes with two publishes unanswered and a third is made while there
    is no leader: none is nacked; all three go to the next leader, in publish order, and
    are confirmed by its answer."""
    def body() -> None:
        client, links, q = setup()
        pubs = [Publisher(client, q, b"m0"), Publisher(client, q, b"m1")]
        assert [b for _, _, b in links.out[1].outbox.sent] == [b"m0", b"m1"]
        del links.out[1]
        client.fail_waits(1)  # the leader's node is gone
        pubs.append(Publisher(client, q, b"m2"))  # no leader: waits
        assert [p.outcome for p in pubs] == [None, None, None]
        client.release_parked(lambda _k: q)  # still no leader: they keep waiting
        assert links.out[2].outbox.sent == []
        q.home = 2  # etcd names node 2
        client.release_parked(lambda _k: q)
        assert [b for _, _, b in links.out[2].outbox.sent] == [b"m0", b"m1", b"m2"]
        answer(client, 2, links.out[2].outbox, ROUTED)
        assert [p.outcome for p in pubs] == ["ack", "ack", "ack"]
    run(body)


def test_a_node_that_does_not_lead_the_queue_yet_sends_it_back_to_wait() -> None:
    """This node learnt the new leader before that node did: its refusal (NOT_LEADER) makes
    the publish wait again, ahead of later ones, instead of a nack; a plain refusal (a full
    queue's reject-publish) is a nack."""
    def body() -> None:
        client, links, q = setup()
        first = Publisher(client, q, b"m0")
        answer(client, 1, links.out[1].outbox, REJECTED | NOT_LEADER)
        later = Publisher(client, q, b"m1")  # parked behind m0
        assert (first.outcome, later.outcome) == (None, None)
        client.release_parked(lambda _k: q)  # node 1 leads now
        assert [b for _, _, b in links.out[1].outbox.sent] == [b"m0", b"m1"]
        answer(client, 1, links.out[1].outbox, ROUTED)
        assert (first.outcome, later.outcome) == ("ack", "ack")
        full = Publisher(client, q, b"m2")
        answer(client, 1, links.out[1].outbox, REJECTED)
        assert full.outcome == "nack"
    run(body)


def test_a_publish_that_waited_past_the_timeout_is_nacked(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """PARK_TIMEOUT without a reachable leader: nacked (the documented bound)."""
    monkeypatch.setattr(remote_client, "PARK_TIMEOUT", 0.0)

    def body() -> None:
        client, links, q = setup()
        del links.out[1]
        waiting = Publisher(client, q, b"m0")
        assert waiting.outcome is None
        client.release_parked(lambda _k: q)
        assert waiting.outcome == "nack"
    run(body)


def test_a_join_tells_a_refusal_by_a_node_that_does_not_lead_from_a_nack() -> None:
    """The home node of a forwarded publish answers REJECTED|NOT_LEADER (so the publisher's
    node waits for the next leader) only when every refusal was that; any other refusal
    is a plain nack, and without a not_leader callback NOT_LEADER is a nack too."""
    calls: list[str] = []

    def join(results: list[int], with_not_leader: bool = True) -> str:
        calls.clear()
        j = remote_client.Join(len(results), lambda: calls.append("ok"),
                               lambda: calls.append("err"),
                               (lambda: calls.append("not_leader")) if with_not_leader else None)
        for r in results:
            j.done(r)
        assert len(calls) == 1, calls
        return calls[0]

    assert join([ROUTED, ROUTED]) == "ok"
    assert join([ROUTED, REJECTED | NOT_LEADER]) == "not_leader"
    assert join([REJECTED | NOT_LEADER, REJECTED]) == "err"
    assert join([REJECTED]) == "err"
    assert join([REJECTED | NOT_LEADER], with_not_leader=False) == "err"
