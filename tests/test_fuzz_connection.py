"""Fuzzing the connection state machine: any input is processed or closes the connection
with the right reply code, never 541 or an escaped exception; a closed connection leaves
nothing behind in the broker; other connections keep working.

The oracle is :func:`tests.fuzz.harness.run_input` (see its docstring). The fast properties
here run in the default test run; ``make fuzz`` runs the coverage-guided fuzzer
(fuzz/fuzz_connection.py) with the same oracle for minutes. Inputs that once failed are kept
in tests/fuzz/corpus/ and replayed below; those of bugs not fixed yet are listed in
tests/fuzz/corpus/known_bugs.json and replayed as strict xfails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands

from tests.fuzz import frames as F
from tests.fuzz import harness as H
from tests.fuzz import seeds
from tests.fuzz import strategies as S

# pamqp warns when it decodes a deprecated method (Basic.RecoverAsync) a test sends
pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated:DeprecationWarning")

CORPUS = Path(__file__).parent / "fuzz" / "corpus"
KNOWN = json.loads((CORPUS / "known_bugs.json").read_text())

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


def check(outcome: H.Outcome, data: bytes) -> None:
    assert not outcome.problems, (
        f"{outcome.problems}\nsession input (save to tests/fuzz/corpus/NAME.bin): {data.hex()}")


@FUZZ
@given(S.session_inputs())
def test_any_session_is_processed_or_closed_with_a_protocol_error(data: bytes) -> None:
    check(H.run_input(data), data)


@FUZZ
@given(S.session_inputs(scenarios=(5, 6), valid_properties=True, max_size=20))
def test_well_formed_frames_on_busy_channels_never_break_the_broker(data: bytes) -> None:
    """Mostly valid methods with drawn arguments on channels with consumers, unacked
    deliveries, confirms, tx, a half-received publish, reply-to, exclusive queues."""
    check(H.run_input(data), data)


@pytest.mark.parametrize(("name", "data"), seeds.seed_inputs(), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_seed_sessions_pass_the_oracle(name: str, data: bytes) -> None:
    outcome = H.run_input(data, allow_known=False)
    check(outcome, data)
    if name.startswith("busy-") and name != "busy-close":
        assert 406 in outcome.codes  # the consumer timeout fired


def corpus_cases() -> list[Any]:
    cases = []
    for path in sorted(CORPUS.glob("*.bin")):
        bug = KNOWN.get(path.name)
        marks = []
        if bug is not None:
            reason = H.KNOWN_BY_ID[bug].reason if bug in H.KNOWN_BY_ID else f"bug: {bug}"
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        cases.append(pytest.param(path, marks=marks, id=path.stem))
    return cases


@pytest.mark.parametrize("path", corpus_cases())
def test_corpus_replay(path: Path) -> None:
    """Inputs the fuzzers found: each must now pass the oracle with no allowance."""
    data = path.read_bytes()
    check(H.run_input(data, allow_known=False), data)


def test_known_bugs_json_names_existing_files_and_bugs() -> None:
    for name, bug in KNOWN.items():
        assert (CORPUS / name).exists(), name
        assert bug in H.KNOWN_BY_ID, bug


# ---- closing releases everything -------------------------------------------------------------


CLOSERS = ("connection_lost", "client_close", "hard_error", "heartbeat_timeout",
           "channel_close_then_lost", "consumer_timeout_then_lost")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data(), st.sampled_from(CLOSERS))
def test_closing_requeues_unacked_and_releases_everything(data: st.DataObject,
                                                          closer: str) -> None:
    """Valid work on three channels (consumers, gets, acks, publishes, exclusive queues,
    tx, confirms, reply-to, half-sent content), then the connection goes one of several ways:
    every message of fz.shared not acked is back in it, nothing else is left, and another
    connection works."""
    clock = H.FakeClock()
    broker = H.make_broker(clock, consumer_timeout=5_000)
    checker = H.Peer(broker, clock, "checker").handshake(heartbeat=0).open(1)
    H.prepare_topology(checker)
    shared = broker.vhosts["/"].queues["fz.shared"]
    peer = H.Peer(broker, clock, "fuzzed").handshake(heartbeat=10).open(1).open(2).open(3)
    published = acked = dropped = 0
    delivered: dict[int, list[int]] = {1: [], 2: [], 3: []}
    for _ in range(data.draw(st.integers(1, 12), label="ops")):
        ch = data.draw(st.sampled_from((1, 2, 3)), label="channel")
        op = data.draw(st.sampled_from(("consume", "get", "get_noack", "ack", "ack_multiple",
                                        "nack_requeue", "publish", "exclusive", "qos", "tx",
                                        "confirm", "reply_to", "half_publish", "recover",
                                        "cancel")), label="op")
        if op == "consume":
            frame = F.method(ch, commands.Basic.Consume, queue="fz.shared",
                             consumer_tag=f"c{ch}")
        elif op in ("get", "get_noack"):
            frame = F.method(ch, commands.Basic.Get, queue="fz.shared",
                             no_ack=op == "get_noack")
        elif op in ("ack", "ack_multiple", "nack_requeue"):
            channel = peer.conn.channels.get(ch)
            if not delivered[ch] or (channel is not None and channel.tx is not None):
                continue  # settling inside a tx and closing: tests/test_fuzz_regressions.py
            tag = data.draw(st.sampled_from(delivered[ch]), label="tag")
            cls = commands.Basic.Nack if op == "nack_requeue" else commands.Basic.Ack
            kw = {"requeue": True} if op == "nack_requeue" else {}
            frame = F.method(ch, cls, delivery_tag=tag, multiple=op == "ack_multiple", **kw)
        elif op == "publish":
            frame = F.publish(ch, "", "fz.shared", b"p")
        elif op == "exclusive":
            frame = F.method(ch, commands.Queue.Declare, queue="", exclusive=True) + F.method(
                ch, commands.Basic.Consume, queue="")
        elif op == "qos":
            frame = F.method(ch, commands.Basic.Qos, prefetch_count=data.draw(
                st.integers(0, 3)), global_=data.draw(st.booleans()))
        elif op == "tx":
            frame = F.method(ch, commands.Tx.Select)
        elif op == "confirm":
            frame = F.method(ch, commands.Confirm.Select)
        elif op == "reply_to":
            frame = F.method(ch, commands.Basic.Consume, queue="amq.rabbitmq.reply-to",
                             no_ack=True, consumer_tag=f"rr{ch}")
        elif op == "half_publish":
            frame = F.method(ch, commands.Basic.Publish, routing_key="fz.shared") \
                + F.content_header(ch, 10) + F.body(ch, b"12345")
        elif op == "recover":
            frame = F.method(ch, commands.Basic.Recover, requeue=True)
        else:
            frame = F.method(ch, commands.Basic.Cancel, consumer_tag=f"c{ch}")
        before = shared.message_count + shared.unacked_count
        frames = peer.send(frame)
        closes = [v for _, _, v in frames if isinstance(v, commands.Channel.Close
                                                        | commands.Connection.Close)]
        if closes or peer.conn.closed:
            break  # e.g. a publish into a half-sent publish: the test is about closing
        tx = peer.conn.channels.get(ch) is not None and peer.conn.channels[ch].tx is not None
        if op == "publish" and not tx:
            published += 1
        for _, fch, value in frames:
            if isinstance(value, commands.Basic.Deliver | commands.Basic.GetOk) and \
                    value.exchange == "" and value.routing_key == "fz.shared":
                delivered[fch].append(value.delivery_tag)
        if op == "get_noack":
            dropped += before - (shared.message_count + shared.unacked_count)
        if op in ("ack", "ack_multiple") and not tx:
            acked += before - (shared.message_count + shared.unacked_count)
    conn = peer.conn
    with H.capture_errors() as errors:
        if closer == "client_close":
            peer.send(F.method(0, commands.Connection.Close, reply_code=200))
        elif closer == "hard_error":
            peer.send(b"\x01\x00\x01garbage-frame\xce")
        elif closer == "heartbeat_timeout":
            clock.now += 21
            conn.tick()
            assert conn.closed
        elif closer == "channel_close_then_lost":
            for ch in sorted(conn.channels):
                peer.send(F.method(ch, commands.Channel.Close, reply_code=200))
        elif closer == "consumer_timeout_then_lost":
            clock.now += 6
            conn.tick()
            peer.send(b"".join(F.method(ch, commands.Channel.CloseOk)
                               for ch in sorted(conn.channels)))
        conn.connection_lost()
    assert not errors.errors, errors.errors
    assert H.leaks(broker, conn) == []
    # the unacked deliveries went back; only acks (and no-ack gets) removed messages
    assert shared.unacked_count == 0
    assert shared.message_count == 5 + published - acked - dropped
    outcome = H.Outcome()
    H._check_peer(checker, outcome, clock)
    assert outcome.problems == [] and outcome.internals == []
