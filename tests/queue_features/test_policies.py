"""Policies and operator policies."""

from __future__ import annotations

from typing import Any

import pytest

from queue_store.queue import ACCEPTED, REJECTED
from tests.queue_features.support import (
    World,
    dlx_setup,
)
from vhosts.policies import PolicyError

# ================================================================================================
# Policies
# ================================================================================================


def test_policy_applies_to_existing_queues_at_once(world: World) -> None:
    q = dlx_setup(world)
    for i in range(3):
        world.publish("q", f"m{i}".encode())
    world.vhost.set_policy("limit", "^q$", {"max-length": 1}, apply_to="queues")
    assert q.settings.policy == "limit"
    assert q.message_count == 1
    assert [m.body for m in world.drain("dead")] == [b"m0", b"m1"]
    assert world.bodies("q") == [b"m2"]


def test_policy_applies_to_queues_declared_later(world: World) -> None:
    world.vhost.set_policy("ttl", "^later", {"message-ttl": 50})
    q = world.declare("later-q")
    world.declare("other")
    world.publish("later-q", b"m")
    world.publish("other", b"m")
    world.advance(51)
    assert q.message_count == 0
    assert world.queue("other").message_count == 1


def test_highest_priority_policy_wins_alone(world: World) -> None:
    world.vhost.set_policy("low", "^q$", {"max-length": 5, "message-ttl": 50}, priority=1)
    world.vhost.set_policy("high", "^q$", {"max-length": 2}, priority=10)
    q = world.declare("q")
    assert q.settings.policy == "high"
    for i in range(4):
        world.publish("q", f"m{i}".encode())
    world.advance(100)  # "low"'s message-ttl does not apply: policies are not merged
    assert world.bodies("q") == [b"m2", b"m3"]
    world.vhost.clear_policy("high")
    assert q.settings.policy == "low"
    assert (q.settings.max_length, q.settings.message_ttl) == (5, 50)


def test_policy_apply_to_exchanges_does_not_touch_queues(world: World) -> None:
    world.vhost.set_policy("xs", ".*", {"max-length": 1}, apply_to="exchanges")
    q = world.declare("q")
    world.publish("q", b"a")
    world.publish("q", b"b")
    assert q.message_count == 2


def test_argument_wins_over_policy_for_dead_letter_exchange(world: World) -> None:
    for name in ("from-arg", "from-policy"):
        world.exchange(name, "fanout")
        world.declare(name + "-q")
        world.bind(name + "-q", name)
    world.declare("q", **{"x-dead-letter-exchange": "from-arg", "x-message-ttl": 10})
    world.vhost.set_policy("dlx", "^q$", {"dead-letter-exchange": "from-policy"})
    world.publish("q", b"m")
    world.advance(11)
    assert world.queue("from-arg-q").message_count == 1
    assert world.queue("from-policy-q").message_count == 0


def test_policy_dead_letter_exchange_applies_without_argument(world: World) -> None:
    world.exchange("dlx", "fanout")
    world.declare("dead")
    world.bind("dead", "dlx")
    world.declare("q", **{"x-message-ttl": 10})
    world.vhost.set_policy("dlx", "^q$", {"dead-letter-exchange": "dlx",
                                          "dead-letter-routing-key": "rk"})
    world.publish("q", b"m")
    world.advance(11)
    [dead] = world.drain("dead")
    assert dead.routing_key == "rk"


def test_argument_wins_over_policy_for_overflow(world: World) -> None:
    world.declare("q", **{"x-overflow": "reject-publish"})
    world.vhost.set_policy("p", "^q$", {"max-length": 1, "overflow": "drop-head"})
    assert world.publish("q", b"m1") == [ACCEPTED]
    assert world.publish("q", b"m2") == [REJECTED]
    assert world.bodies("q") == [b"m1"]


@pytest.mark.parametrize(("arg", "policy"), [(1000, 50), (50, 1000)])
def test_lower_of_argument_and_policy_message_ttl_wins(world: World, arg: int,
                                                       policy: int) -> None:
    q = world.declare("q", **{"x-message-ttl": arg})
    world.vhost.set_policy("p", "^q$", {"message-ttl": policy})
    world.publish("q", b"m")
    world.advance(49)
    assert q.message_count == 1
    world.advance(2)
    assert q.message_count == 0


@pytest.mark.parametrize(("arg", "policy"), [(5, 2), (2, 5)])
def test_lower_of_argument_and_policy_max_length_wins(world: World, arg: int,
                                                      policy: int) -> None:
    q = world.declare("q", **{"x-max-length": arg})
    world.vhost.set_policy("p", "^q$", {"max-length": policy})
    for i in range(6):
        world.publish("q", f"m{i}".encode())
    assert q.message_count == 2


def test_lower_of_argument_and_policy_expires_wins(world: World) -> None:
    world.declare("q", **{"x-expires": 10_000})
    world.vhost.set_policy("p", "^q$", {"expires": 100})
    world.advance(101)
    assert "q" not in world.vhost.queues


def test_clear_policy_reverts_to_the_arguments(world: World) -> None:
    q = world.declare("q", **{"x-max-length": 3})
    world.vhost.set_policy("p", "^q$", {"max-length": 1, "message-ttl": 10})
    assert (q.settings.max_length, q.settings.message_ttl) == (1, 10)
    assert world.vhost.clear_policy("p") is True
    assert (q.settings.max_length, q.settings.message_ttl, q.settings.policy) == (3, None, None)
    for i in range(3):
        world.publish("q", f"m{i}".encode())
    world.advance(100)
    assert q.message_count == 3
    assert world.vhost.clear_policy("p") is False


def test_policy_replaced_by_name(world: World) -> None:
    q = world.declare("q")
    world.vhost.set_policy("p", "^q$", {"max-length": 1})
    world.vhost.set_policy("p", "^q$", {"max-length": 4})
    assert q.settings.max_length == 4
    assert list(world.vhost.policies) == ["p"]


@pytest.mark.parametrize(("pattern", "definition", "apply_to"), [
    ("(", {"max-length": 1}, "all"),
    ("^q$", {"max-length": 1}, "everything"),
    ("^q$", {}, "all"),
    ("^q$", {"message-ttl": -1}, "all"),
    ("^q$", {"message-ttl": "100"}, "all"),
    ("^q$", {"max-length": True}, "all"),
    ("^q$", {"expires": 0}, "all"),
    ("^q$", {"overflow": "drop-tail"}, "all"),
    ("^q$", {"dead-letter-exchange": 5}, "all"),
    ("^x$", {"alternate-exchange": 5}, "exchanges"),
])
def test_invalid_policy_raises_and_changes_nothing(world: World, pattern: str,
                                                   definition: dict[str, Any],
                                                   apply_to: str) -> None:
    q = world.declare("q")
    before = q.settings
    with pytest.raises(PolicyError):
        world.vhost.set_policy("bad", pattern, definition, apply_to=apply_to)
    assert "bad" not in world.vhost.policies
    assert q.settings == before


# ================================================================================================
# Operator policies (https://www.rabbitmq.com/docs/policies#operator-policies)
# ================================================================================================


def test_operator_policy_caps_arguments_and_user_policies(world: World) -> None:
    world.vhost.set_operator_policy("cap", "^op\\.", {"max-length": 2, "message-ttl": 60000})
    q = world.vhost.declare_queue("op.q", arguments={"x-max-length": 5})
    assert (q.settings.max_length, q.settings.message_ttl) == (2, 60000)
    assert q.settings.operator_policy == "cap"
    world.vhost.set_policy("user", "^op\\.", {"max-length": 1}, 0, "queues")
    assert q.settings.max_length == 1  # the lowest of argument, policy and operator policy
    for body in (b"a", b"b", b"c"):
        world.publish("op.q", body)
    assert world.get("op.q").body == b"c"
    world.vhost.clear_policy("user")
    world.vhost.clear_operator_policy("cap")
    assert (q.settings.max_length, q.settings.operator_policy) == (5, None)


@pytest.mark.parametrize(("definition", "error"), [
    ({"foo": 1}, '[{<<"foo">>,1}] are not recognised policy settings'),
    ({"dead-letter-exchange": "x"},
     '[{<<"dead-letter-exchange">>,<<"x">>}] are not recognised policy settings'),
    ({"max-length": -1}, "'max-length' must be a non-negative integer, got -1"),
])
def test_operator_policies_set_limits_only(world: World, definition: dict[str, Any],
                                           error: str) -> None:
    with pytest.raises(PolicyError) as info:
        world.vhost.set_operator_policy("bad", ".*", definition)
    assert str(info.value) == error
    assert world.vhost.operator_policies == {}
