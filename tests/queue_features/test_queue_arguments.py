"""Queue argument validation and equivalence, message properties checked at publish."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from amqp_common.errors import PreconditionFailed
from tests.queue_features.support import (
    World,
    methods,
)

# ================================================================================================
# Queue argument validation and equivalence
# ================================================================================================

TOO_LARGE = 315_360_000_001


@pytest.mark.parametrize(("arguments", "error"), [
    ({"x-message-ttl": -1}, "{value_negative,-1}"),
    ({"x-message-ttl": "abc"}, '"expected integer, got longstr"'),
    ({"x-message-ttl": TOO_LARGE}, f"{{value_too_large,{TOO_LARGE}}}"),
    ({"x-expires": 0}, "{value_zero,0}"),
    ({"x-expires": -5}, "{value_negative,-5}"),
    ({"x-expires": "x"}, '"expected integer, got longstr"'),
    ({"x-max-length": -1}, "{value_negative,-1}"),
    ({"x-max-length": "a"}, '"expected integer, got longstr"'),
    ({"x-max-length-bytes": -2}, "{value_negative,-2}"),
    ({"x-max-priority": 256}, "{max_value_exceeded,256}"),
    ({"x-max-priority": -1}, "{value_negative,-1}"),
    ({"x-max-priority": "a"}, '"expected integer, got longstr"'),
    ({"x-overflow": "foo"}, "invalid_overflow"),
    ({"x-overflow": 100000}, "{unacceptable_type,signedint}"),
    ({"x-dead-letter-routing-key": "rk"}, "routing_key_but_no_dlx_defined"),
    ({"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": 100000},
     "{unacceptable_type,signedint}"),
    ({"x-single-active-consumer": 100000}, "{unacceptable_type,signedint}"),
    ({"x-single-active-consumer": "true"}, "{unacceptable_type,longstr}"),
])
def test_invalid_queue_argument_text(world: World, arguments: dict[str, Any], error: str) -> None:
    key = list(arguments)[-1]
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **arguments)
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue 'q' in vhost '/': {error}")
    assert "q" not in world.vhost.queues


def test_invalid_dead_letter_exchange_type_text(world: World) -> None:
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **{"x-dead-letter-exchange": 100000})
    assert info.value.reply_text == ("PRECONDITION_FAILED - invalid type 'signedint' for arg "
                                     "'x-dead-letter-exchange' in queue 'q' in vhost '/'")


def test_invalid_queue_argument_closes_the_channel_with_406(wired) -> None:
    _, _, wire = wired
    out = wire.send(1, commands.Queue.Declare(queue="q", arguments={"x-message-ttl": -1}))
    [close] = methods(out, commands.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 50, 10)
    assert close.reply_text == ("PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' "
                                "in vhost '/': {value_negative,-1}")


def test_invalid_argument_text_names_the_wire_type(wired) -> None:
    _, _, wire = wired
    out = wire.send(1, commands.Queue.Declare(queue="q", arguments={"x-overflow": 1}))
    [close] = methods(out, commands.Channel.Close)
    assert close.reply_text == ("PRECONDITION_FAILED - invalid arg 'x-overflow' for queue 'q' "
                                "in vhost '/': {unacceptable_type,byte}")


def test_redeclare_with_an_argument_removed_or_added_is_406(world: World) -> None:
    world.declare("q", **{"x-message-ttl": 1000})
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q")
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': "
        "received none but current is the value '1000' of type 'signedint'")
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **{"x-message-ttl": 1000, "x-max-length": 5})
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '/': "
        "received the value '5' of type 'signedint' but current is none")
    world.declare("q", **{"x-message-ttl": 1000})  # the same arguments: fine


@pytest.mark.parametrize(("key", "first", "second", "shown"), [
    ("x-message-ttl", 1000, 2000, ("2000", "1000")),
    ("x-overflow", "drop-head", "reject-publish", ("reject-publish", "drop-head")),
    ("x-single-active-consumer", False, True, ("true", "false")),
])
def test_redeclare_with_a_different_argument_value_is_406(
        world: World, key: str, first: Any, second: Any, shown: tuple[str, str]) -> None:
    # with both values set RabbitMQ prints the bare values (assert_field_equivalence)
    world.declare("q", **{key: first})
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **{key: second})
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - inequivalent arg '{key}' for queue 'q' in vhost '/': "
        f"received '{shown[0]}' but current is '{shown[1]}'")


def test_redeclare_checks_equivalence_before_validating(world: World) -> None:
    world.declare("q", **{"x-max-length": 3})
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **{"x-max-length": "3"})
    # same text, different type: inequivalent (the text checked against RabbitMQ 3.10.8)
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '/': "
        "received '3' but current is '3'")


@pytest.mark.parametrize("key", ["x-max-length", "x-overflow", "x-max-priority",
                                 "x-single-active-consumer", "x-dead-letter-exchange"])
def test_redeclare_with_a_different_x_argument_is_refused(world: World, key: str) -> None:
    first = {"x-max-length": 1, "x-overflow": "drop-head", "x-max-priority": 2,
             "x-single-active-consumer": False, "x-dead-letter-exchange": "a"}
    second = {"x-max-length": 2, "x-overflow": "reject-publish", "x-max-priority": 3,
              "x-single-active-consumer": True, "x-dead-letter-exchange": "b"}
    world.declare("q", **{key: first[key]})
    with pytest.raises(PreconditionFailed) as info:
        world.declare("q", **{key: second[key]})
    assert info.value.reply_text.startswith(
        f"PRECONDITION_FAILED - inequivalent arg '{key}' for queue 'q' in vhost '/': received ")


# ================================================================================================
# Message properties checked at publish
# ================================================================================================


@pytest.mark.parametrize(("expiration", "error"), [
    ("abc", "no_integer"),
    (" 5", "no_integer"),
    ("-5", "{value_negative,-5}"),
    ("12abc", '{leftover_string,"abc"}'),
    ("1.5", '{leftover_string,".5"}'),
    (str(TOO_LARGE), f"{{value_too_large,{TOO_LARGE}}}"),
])
def test_invalid_expiration_property_is_406(wired, expiration: str, error: str) -> None:
    _, _, wire = wired
    wire.send(1, commands.Queue.Declare(queue="q"))
    out = wire.publish(1, "", "q", b"m", expiration=expiration)
    [close] = methods(out, commands.Channel.Close)
    assert close.reply_code == 406
    assert close.reply_text == f"PRECONDITION_FAILED - invalid expiration '{expiration}': {error}"


def test_expiration_with_a_plus_sign_is_accepted(wired) -> None:
    broker, _, wire = wired
    wire.send(1, commands.Queue.Declare(queue="q"))
    out = wire.publish(1, "", "q", b"m", expiration="+5000")
    assert methods(out, commands.Channel.Close) == []
    assert broker.vhosts["/"].queues["q"].message_count == 1


def test_publish_to_an_internal_exchange_is_403(wired) -> None:
    _, _, wire = wired
    wire.send(1, commands.Exchange.Declare(exchange="int", exchange_type="fanout", internal=True))
    out = wire.publish(1, "int", "", b"m")
    [close] = methods(out, commands.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (403, 60, 40)
    assert close.reply_text == ("ACCESS_REFUSED - cannot publish to internal exchange 'int' in "
                                "vhost '/'")
