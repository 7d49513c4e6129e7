"""The node link's hello as a state machine (amqp_server/cluster/link_hello.py) and the
record reader's limits before a hello (amqp_server/workers/link_codec.py), sans-IO."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from amqp_server.cluster.link_hello import Acceptor, Dialler, HelloError, link_mac
from amqp_server.server import parse_args
from amqp_server.workers.link_codec import MAX_RECORD, LinkError, Outbox, RecordReader
from amqp_server.workers.links import HELLO_MAX, WorkerHello

SECRET = b"cluster-secret"


def nonce() -> str:
    return os.urandom(16).hex()


def test_a_hello_proves_the_secret_both_ways() -> None:
    dialler, acceptor = Dialler(SECRET, 3, 1, nonce()), Acceptor(SECRET, 1, nonce())
    challenge = acceptor.receive(dialler.opening())
    assert challenge is not None and challenge[0] == "challenge"
    assert acceptor.peer is None  # not trusted before the proof
    assert acceptor.receive(dialler.answer(challenge)) is None
    assert acceptor.peer == 3


def test_a_proof_replayed_on_another_link_is_refused() -> None:
    opening = Dialler(SECRET, 3, 1, nonce()).opening()
    first = Acceptor(SECRET, 1, nonce())
    proof = Dialler(SECRET, 3, 1, opening[3]).answer(first.receive(opening))  # type: ignore[arg-type]
    second = Acceptor(SECRET, 1, nonce())  # another link: a new challenge
    second.receive(opening)
    with pytest.raises(HelloError, match="did not prove"):
        second.receive(proof)
    assert second.peer is None


def test_a_wrong_secret_is_refused_by_either_side() -> None:
    dialler = Dialler(b"guess", 3, 1, nonce())
    acceptor = Acceptor(SECRET, 1, nonce())
    challenge = acceptor.receive(dialler.opening())
    with pytest.raises(HelloError, match="node 1 did not prove"):  # the dialler checks first
        dialler.answer(challenge)  # type: ignore[arg-type]
    honest = Dialler(SECRET, 3, 1, nonce())
    impostor = Acceptor(b"guess", 1, nonce())
    with pytest.raises(HelloError, match="node 1 did not prove"):
        honest.answer(impostor.receive(honest.opening()))  # type: ignore[arg-type]
    forged = ("proof", link_mac(b"guess", "dial", 3, 1, "0" * 32, "0" * 32))
    acceptor = Acceptor(SECRET, 1, nonce())
    acceptor.receive(("hello", 3, 1, "0" * 32))
    with pytest.raises(HelloError, match="node 3 did not prove"):
        acceptor.receive(forged)


def test_the_acceptors_mac_cannot_serve_as_the_diallers() -> None:
    acceptor = Acceptor(SECRET, 1, nonce())
    challenge = acceptor.receive(("hello", 3, 1, nonce()))
    assert challenge is not None
    with pytest.raises(HelloError):
        acceptor.receive(("proof", challenge[2]))  # reflected


@pytest.mark.parametrize("record, reason", [
    (("hello", 3, 2, "0" * 32), "meant for node 2"),
    (("hello", 1, 1, "0" * 32), "own index"),
    (("hello", "3", 1, "0" * 32), "not a node index"),
    (("hello", True, 1, "0" * 32), "not a node index"),
    (("hello", -1, 1, "0" * 32), "not a node index"),
    (("hello", 3, 1, "short"), "nonce is malformed"),
    (("hello", 3, 1, "0" * 32, "extra"), "has 5 items"),
    (("proof", "0" * 64), "expected 'hello'"),
    (("x" * 1000,), "expected 'hello', got 'xxxxxxxxxxxxxxxxxxxx'"),
    ((None, 1), "expected 'hello', got '?'"),
])
def test_a_malformed_hello_is_refused_with_a_reason(record: tuple[Any, ...],
                                                    reason: str) -> None:
    with pytest.raises(HelloError, match=reason) as refused:
        Acceptor(SECRET, 1, nonce()).receive(record)
    assert "0" * 32 not in str(refused.value)  # no nonce in what gets logged


def test_records_out_of_turn_are_refused() -> None:
    acceptor = Acceptor(SECRET, 1, nonce())
    acceptor.receive(("hello", 3, 1, nonce()))
    with pytest.raises(HelloError, match="expected 'proof'"):
        acceptor.receive(("hello", 3, 1, nonce()))
    dialler = Dialler(SECRET, 3, 1, nonce())
    with pytest.raises(HelloError, match="expected 'challenge'"):
        dialler.answer(("proof", "0" * 64))
    with pytest.raises(HelloError, match="MAC is malformed"):
        dialler.answer(("challenge", nonce(), "zz"))


def test_a_worker_hello_names_a_worker() -> None:
    hello = WorkerHello()
    hello.receive(("hello", 2))
    assert hello.peer == 2
    for bad in (("hello",), ("hello", "2"), ("hi", 2), ("hello", -1)):
        with pytest.raises(LinkError):
            WorkerHello().receive(bad)


def test_a_long_first_record_breaks_the_link_after_its_header() -> None:
    reader = RecordReader(guarded=2, guard_limit=HELLO_MAX)
    with pytest.raises(LinkError, match="at most 4096"):
        reader.feed((64 << 20).to_bytes(4, "big") + b"\x09")  # 5 bytes: header only


def test_only_the_guarded_records_are_held_short() -> None:
    box = Outbox()
    box.control(("hello", 1))
    box.control(("big", "x" * 100_000))
    data = box.take()
    reader = RecordReader(guarded=1, guard_limit=HELLO_MAX)
    got = []
    for i in range(0, len(data), 1000):
        got += reader.feed(data[i:i + 1000])
    assert len(got) == 2 and len(got[1][1]) > 100_000
    with pytest.raises(LinkError):
        RecordReader(guarded=2, guard_limit=HELLO_MAX).feed(data)


def test_a_big_record_in_small_reads_comes_back_whole() -> None:
    body = os.urandom(3 << 20)
    box = Outbox()
    box.repl(body)
    box.credit(1, 2)
    data = box.take()
    reader = RecordReader()
    got = []
    for i in range(0, len(data), 65536):
        got += reader.feed(data[i:i + 65536])
    assert [len(b) for _, b in got] == [len(data) - 18, 8] and got[0][1].endswith(body)
    assert all(type(b) is bytes for _, b in got)
    assert MAX_RECORD == 1 << 30


def test_the_node_link_tls_keys_of_a_config_file(tmp_path: Path) -> None:
    for name in ("node.pem", "node.key", "ca.pem"):
        (tmp_path / name).write_text("-")
    conf = tmp_path / "amqpq.conf"
    conf.write_text(f"cluster_tls.certfile = {tmp_path}/node.pem\n"
                    f"cluster_tls.keyfile = {tmp_path}/node.key\n"
                    f"cluster_tls.cacertfile = {tmp_path}/ca.pem\n")
    tls = parse_args(["--config", str(conf)]).cluster_tls
    assert (tls.certfile, tls.keyfile, tls.cacertfile) == (
        f"{tmp_path}/node.pem", f"{tmp_path}/node.key", f"{tmp_path}/ca.pem")
    conf.write_text(f"cluster_tls.certfile = {tmp_path}/node.pem\n")
    with pytest.raises(SystemExit):  # the options' own check: the key and CA go with it
        parse_args(["--config", str(conf)])
