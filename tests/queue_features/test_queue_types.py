"""Queue types: x-queue-type classic / quorum (RabbitMQ 3.10.8's texts, checked with pika)."""

from __future__ import annotations

from typing import Any

import pytest

from amqp_common.errors import PreconditionFailed
from queue_store.outcomes import Settlement
from queue_store.queue_args import validate_consumer_arguments
from tests.queue_features.support import (
    World,
)
from vhosts.policies import PolicyError

# ================================================================================================
# Queue types: x-queue-type classic / quorum / stream (RabbitMQ 3.10.8's texts, checked with pika)
# ================================================================================================


@pytest.mark.parametrize(("arguments", "text_"), [
    ({"x-queue-type": "bogus"},
     "invalid arg 'x-queue-type' for queue 'q' in vhost '/': \"unsupported queue type 'bogus'\""),
    ({"x-queue-type": "stream", "x-max-length": 3},
     "invalid arg 'x-max-length' for queue 'q' in vhost '/' of queue type "
     "rabbit_stream_queue"),
    ({"x-queue-type": 1},
     "invalid arg 'x-queue-type' for queue 'q' in vhost '/': {unacceptable_type,signedint}"),
    ({"x-delivery-limit": 3},
     "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/' of queue type "
     "rabbit_classic_queue"),
    ({"x-max-in-memory-length": 3},
     "invalid arg 'x-max-in-memory-length' for queue 'q' in vhost '/' of queue type "
     "rabbit_classic_queue"),
    ({"x-queue-type": "quorum", "x-queue-mode": "lazy"},
     "invalid arg 'x-queue-mode' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue"),
])
def test_queue_type_arguments_are_checked(world: World, arguments: dict[str, Any],
                                          text_: str) -> None:
    with pytest.raises(PreconditionFailed) as info:
        world.vhost.declare_queue("q", durable=True, arguments=arguments)
    assert info.value.reply_text == f"PRECONDITION_FAILED - {text_}"


def test_quorum_queue_returns_count_on_channel_close_too(world: World) -> None:
    q = world.vhost.declare_queue("qq", durable=True,
                                  arguments={"x-queue-type": "quorum", "x-delivery-limit": 1})
    assert q.kind == "quorum"
    world.publish("qq", b"m")
    for expected in (0, 1):
        qm = q.get()
        assert qm is not None
        assert qm.message.headers["x-delivery-count"] == expected
        q.settle([(qm, q, None)], Settlement.REQUEUE)  # a channel closing unacked does this
    assert q.message_count == 0  # two returns > delivery-limit 1: dropped (no DLX)


def test_delivery_limit_from_a_policy(world: World) -> None:
    world.vhost.set_policy("dl", "^qq$", {"delivery-limit": 0}, 0, "queues")
    q = world.vhost.declare_queue("qq", durable=True, arguments={"x-queue-type": "quorum"})
    assert q.settings.delivery_limit == 0
    world.publish("qq", b"m")
    qm = q.get()
    q.settle([(qm, q, None)], Settlement.REQUEUE)
    assert q.message_count == 0


def test_classic_queues_carry_no_delivery_count(world: World) -> None:
    q = world.vhost.declare_queue("cq", arguments={"x-queue-type": "classic"})
    world.publish("cq", b"m")
    qm = q.get()
    assert "x-delivery-count" not in (qm.message.headers or {})


def test_quorum_queue_takes_reject_publish_dlx_as_drop_head(world: World) -> None:
    q = world.vhost.declare_queue("qq", durable=True, arguments={
        "x-queue-type": "quorum", "x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    assert q.settings.overflow == "drop-head"
    world.publish("qq", b"old")
    world.publish("qq", b"new")
    assert world.get("qq").body == b"new"


@pytest.mark.parametrize(("arguments", "error"), [
    ({"x-queue-mode": "weird"}, "\"unsupported queue mode 'weird'\""),
    ({"x-queue-mode": 5}, "{unacceptable_type,signedint}"),
    ({"x-queue-version": 3}, "\"unsupported queue version '3'\""),
    ({"x-queue-version": "x"}, '"expected integer, got longstr"'),
    ({"x-queue-type": "quorum", "x-dead-letter-strategy": "nope"}, "invalid_dlx_strategy"),
    ({"x-queue-type": "quorum", "x-queue-leader-locator": "far"}, "invalid_queue_locator_arg"),
    ({"x-queue-type": "quorum", "x-quorum-initial-group-size": 0}, "{value_zero,0}"),
], ids=lambda v: str(v))
def test_more_argument_values_as_rabbitmq_checks_them(world: World, arguments: dict[str, Any],
                                                       error: str) -> None:
    """Texts as RabbitMQ 3.10.8 gave them to pika (the same script against both brokers)."""
    key = next(k for k in arguments if k != "x-queue-type" or len(arguments) == 1)
    with pytest.raises(PreconditionFailed) as info:
        world.vhost.declare_queue("q", durable=True, arguments=arguments)
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue 'q' in vhost '/': {error}")


@pytest.mark.parametrize(("kind", "arguments", "error"), [
    ("classic", {"x-stream-offset": "first"},
     "invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type "
     "rabbit_classic_queue"),
    ("quorum", {"x-cancel-on-ha-failover": True},
     "invalid arg 'x-cancel-on-ha-failover' for queue 'q' in vhost '/' of queue type "
     "rabbit_quorum_queue"),
    ("quorum", {"x-priority": "x"},
     "invalid arg 'x-priority' for queue 'q' in vhost '/': \"expected integer, got longstr\""),
])
def test_consumer_arguments_per_queue_type(kind: str, arguments: dict[str, Any],
                                           error: str) -> None:
    """RabbitMQ 3.10.8's texts (the same pika script against both brokers: identical)."""
    with pytest.raises(PreconditionFailed) as info:
        validate_consumer_arguments(arguments, kind, "queue 'q' in vhost '/'")
    assert info.value.reply_text == f"PRECONDITION_FAILED - {error}"
    assert validate_consumer_arguments({"x-priority": 3, "x-credit": {}}, kind, "q") == 3


def test_policies_for_one_queue_type_apply_to_that_type_only(world: World) -> None:
    world.vhost.set_policy("cq", ".*", {"max-length": 1}, 0, "classic_queues")
    world.vhost.set_policy("qq", ".*", {"delivery-limit": 2}, 0, "quorum_queues")
    classic = world.vhost.declare_queue("c", durable=True)
    quorum = world.vhost.declare_queue("q", durable=True, arguments={"x-queue-type": "quorum"})
    assert (classic.settings.policy, classic.settings.max_length) == ("cq", 1)
    assert (quorum.settings.policy, quorum.settings.delivery_limit) == ("qq", 2)
    assert quorum.settings.max_length is None


def test_delivery_limit_policy_must_be_a_non_negative_integer(world: World) -> None:
    with pytest.raises(PolicyError):
        world.vhost.set_policy("bad", ".*", {"delivery-limit": "x"}, 0, "queues")
