"""Typed, versioned topology records (:mod:`broker.topology_records`): the version 1 wire
form round-trips every kind; the version 0 tuples written before versions existed are still
read, byte for byte as amqpq wrote them into etcd's log (``OLD_LOG``: captured from the
encoder before records were typed); unknown kinds and newer versions are skipped with one
error. The last test replays such an old log from a real etcd into a starting cluster node."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from amqp_common.method_tables import wire_number
from amqp_server.workers import link_values
from broker import topology_records as tr
from tests.support.cluster import api, cluster_node, connect, wait_until
from tests.support.etcd import ETCD, running_etcd

INCARNATION = "a1b2c3d4e5f6"

#: etcd log values (``("apply", origin, op_id, record, incarnation)``) as the previous
#: version wrote them (link_values.encode of the positional tuples), with what they decode to
OLD_LOG: list[tuple[bytes, tr.Record]] = [
    (b'{"t":["apply",0,3,{"t":["xdecl","/","ex1","direct",true,false,false,{"d":[]}]},'
     b'"a1b2c3d4e5f6"]}',
     tr.ExchangeDeclare("/", "ex1", "direct", True, False, False, {})),
    (b'{"t":["apply",0,4,{"t":["qdecl","/","q1",true,false,false,{"d":[["x-max-length",'
     b'{"n":"signedint","v":10}],["x-queue-type","classic"]]},{"t":[0,5]},false,0]},'
     b'"a1b2c3d4e5f6"]}',
     tr.QueueDeclare("/", "q1", True, False, False,
                     {"x-max-length": 10, "x-queue-type": "classic"}, (0, 5), False, 0)),
    (b'{"t":["apply",0,5,{"t":["bind","/","queue","q1","ex1","rk1",{"d":[]},{"t":[0,5]}]},'
     b'"a1b2c3d4e5f6"]}',
     tr.Bind("/", "queue", "q1", "ex1", "rk1", {}, (0, 5))),
    (b'{"t":["apply",0,6,{"t":["bind","/","exchange","ex2","ex1","rk2",{"d":[["x-match",'
     b'"all"]]},null]},"a1b2c3d4e5f6"]}',
     tr.Bind("/", "exchange", "ex2", "ex1", "rk2", {"x-match": "all"}, None)),
    (b'{"t":["apply",0,7,{"t":["unbind","/","queue","q1","ex1","gone",{"d":[]},{"t":[0,5]}]},'
     b'"a1b2c3d4e5f6"]}',
     tr.Unbind("/", "queue", "q1", "ex1", "gone", {}, (0, 5))),
    (b'{"t":["apply",0,8,{"t":["xdel","/","ex3",false]},"a1b2c3d4e5f6"]}',
     tr.ExchangeDelete("/", "ex3", False)),
    (b'{"t":["apply",0,9,{"t":["qdel","/","q2",false,true,null]},"a1b2c3d4e5f6"]}',
     tr.QueueDelete("/", "q2", False, True, None)),
    (b'{"t":["apply",0,0,{"t":["qforget","/","q3"]},"a1b2c3d4e5f6"]}',
     tr.QueueForget("/", "q3")),
    (b'{"t":["apply",-1,0,{"t":["worker_down",2]},""]}', tr.WorkerDown(2)),
    (b'{"t":["apply",0,0,{"t":["access",{"d":[["users",[]],["vhosts",["/"]]]}]},'
     b'"a1b2c3d4e5f6"]}',
     tr.AccessChange({"users": [], "vhosts": ["/"]})),
]
#: ex2, ex1's exchange-to-exchange destination above, in the same old form
OLD_EX2 = (b'{"t":["apply",0,2,{"t":["xdecl","/","ex2","fanout",true,false,false,{"d":[]}]},'
           b'"a1b2c3d4e5f6"]}')


@pytest.mark.parametrize(("value", "record"), OLD_LOG, ids=[r.KIND for _, r in OLD_LOG])
def test_version_0_records_as_stored_in_etcd_decode_to_their_typed_record(
        value: bytes, record: tr.Record) -> None:
    envelope = link_values.decode(value)
    assert tr.from_wire(envelope[3]) == record


def test_typed_arguments_keep_their_amqp_type_in_an_old_record() -> None:
    record = tr.from_wire(link_values.decode(OLD_LOG[1][0])[3])
    assert isinstance(record, tr.QueueDeclare)
    assert record.arguments["x-max-length"].amqp_type == "signedint"  # type: ignore[attr-defined]


V1_ONLY = [tr.QueuePlace("/", "q1", 1)]  # kinds newer than the version 0 form


@pytest.mark.parametrize("record", [r for _, r in OLD_LOG] + V1_ONLY,
                         ids=[r.KIND for _, r in OLD_LOG] + [r.KIND for r in V1_ONLY])
def test_every_kind_round_trips_in_the_version_1_form(record: tr.Record) -> None:
    wire = tr.to_wire(record)
    assert wire["kind"] == record.KIND and wire["version"] == tr.VERSION == 1
    data = link_values.encode(("apply", 0, 1, wire, INCARNATION))
    assert tr.from_wire(link_values.decode(data)[3]) == record


def test_a_version_1_record_is_a_named_dict_on_the_wire() -> None:
    args = {"x-max-length": wire_number("signedint", 10)}
    data = link_values.encode((tr.to_wire(tr.ExchangeDelete("/", "x", True)),))
    assert data == (b'{"t":[{"d":[["kind","xdel"],["version",1],["vhost","/"],["name","x"],'
                    b'["if_unused",true]]}]}')
    q = tr.QueueDeclare("v", "q", True, False, False, args, (1, 2), False, 1)
    back = tr.from_wire(link_values.decode(link_values.encode((tr.to_wire(q),)))[0])
    assert back == q and back.arguments["x-max-length"].amqp_type == "signedint"  # type: ignore[union-attr]


@pytest.mark.parametrize("value", [
    {"kind": "xdel", "version": 2, "vhost": "/", "name": "x", "if_unused": False},
    {"kind": "qpurge", "version": 1, "vhost": "/", "name": "q"},
    {"kind": "xdel", "version": 1, "vhost": "/"},       # a field missing
    ("qpurge", "/", "q"),
    ("xdel", "/", "x"),                                  # an item missing
    "xdel",
])
def test_an_unknown_kind_or_newer_version_is_skipped_with_one_error(
        value: object, caplog: pytest.LogCaptureFixture) -> None:
    tr._reported.clear()
    with caplog.at_level(logging.ERROR, logger="amqpq.topology"):
        assert tr.from_wire(value) is None
        assert tr.from_wire(value) is None
    errors = [r for r in caplog.records if "not understood" in r.getMessage()]
    assert len(errors) == 1, caplog.text


def test_the_kinds_are_the_documented_ones() -> None:
    assert sorted(tr.KINDS) == sorted(["xdecl", "xdel", "bind", "unbind", "qdecl", "qdel",
                                       "qforget", "qplace", "worker_down", "access"])


# ---- a real etcd log written by the previous version ------------------------------------


@pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")
def test_a_node_replays_an_etcd_log_written_in_the_old_form(tmp_path: Path) -> None:
    """Old-form records (and one of a newer version, one of an unknown kind) under
    ``/amqpq/default/log/`` as metadata.py wrote them: a node starting on that etcd has the
    exchanges, the queue and the bindings, routes through them, and logs one error for each
    record it could not read."""
    pytest.importorskip("aetcd")
    from aetcd import rpc

    newer = link_values.encode(("apply", 0, 11, {"kind": "xdecl", "version": 7, "vhost": "/",
                                                 "name": "from.the.future"}, INCARNATION))
    unknown = link_values.encode(("apply", 0, 12, ("qpurge", "/", "q1"), INCARNATION))
    after = (b'{"t":["apply",0,13,{"t":["xdecl","/","after.skipped","topic",true,false,false,'
             b'{"d":[]}]},"a1b2c3d4e5f6"]}')
    old = [OLD_EX2] + [v for v, r in OLD_LOG if not isinstance(r, tr.AccessChange)]
    values = [*old, newer, unknown, after]
    with running_etcd(tmp_path / "etcd") as etcd:
        with etcd.channel() as ch:
            token = rpc.AuthStub(ch).Authenticate(rpc.AuthenticateRequest(
                name="root", password=etcd.root_password), timeout=10).token
            kv = rpc.KVStub(ch)
            for seq, value in enumerate(values, 1):
                key = f"/amqpq/default/log/old1-{INCARNATION}-{seq}".encode()
                kv.Put(rpc.PutRequest(key=key, value=value), timeout=10,
                       metadata=[("token", token)])
        node = cluster_node(tmp_path, "n1", etcd).start()  # index 0: q1's home
        try:
            names = {x["name"] for x in api(node, "/api/exchanges/%2F")}
            assert {"ex1", "ex2", "after.skipped"} <= names
            assert "from.the.future" not in names
            queue = api(node, "/api/queues/%2F/q1")
            assert queue["durable"] and queue["arguments"]["x-max-length"] == 10
            bindings = {(b["source"], b["destination_type"], b["destination"], b["routing_key"])
                        for b in api(node, "/api/bindings/%2F") if b["source"]}
            assert bindings == {("ex1", "queue", "q1", "rk1"), ("ex1", "exchange", "ex2", "rk2")}
            conn = connect(node)
            ch = conn.channel()
            ch.basic_publish("ex1", "rk1", b"through the old bindings")
            got = wait_until(lambda: ch.basic_get("q1", auto_ack=True)[2], "the message")
            assert got == b"through the old bindings"
            conn.close()
            log = node.log_text()
            assert log.count("not understood") == 2, log[-3000:]
            assert "'xdecl' version 7" in log and "'qpurge' version 0" in log
        finally:
            node.close()
