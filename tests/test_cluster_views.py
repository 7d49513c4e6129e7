"""Cluster-wide views of the management API (issue #31 item 6), against a three-node cluster
of real processes and a real etcd: any node lists every node's connections, channels and
queues with the ``node`` they are on and their rates, a quorum queue with RabbitMQ's
``leader``/``members``/``online`` (``node`` = leader), and the overview's ``message_stats``
summed over the nodes. Skipped without etcd (``make etcd-deps``)."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pika
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.cluster import api, cluster_node, connect, wait_until
from tests.support.etcd import ETCD, Etcd

pytest.importorskip("aetcd")
pytestmark = pytest.mark.skipif(ETCD is None, reason="etcd not installed (make etcd-deps)")

NAMES = ("n1", "n2", "n3")
PROMETHEUS: dict[str, int] = {}  # node name -> its Prometheus port


@pytest.fixture(scope="module")
def nodes(etcd: Etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """The three nodes, each with its own Prometheus endpoint (as rabbitmq_prometheus), and
    quorum queue membership reconciliation on (``--quorum-target-group-size 1``: no queue
    grows but those whose argument or policy asks for more; checked once a second)."""
    base = tmp_path_factory.mktemp("views")
    started: list[BrokerProcess] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMQPQ_QUORUM_RECONCILE_SECONDS", "1")
        try:
            for name in NAMES:
                PROMETHEUS[name] = free_port()
                started.append(cluster_node(base, name, etcd, "--prometheus-port",
                                            str(PROMETHEUS[name]),
                                            "--quorum-target-group-size", "1").start())
            yield started
        finally:
            for node in started:
                node.close()


def _metrics(name: str, path: str = "/metrics") -> dict[str, list]:
    """Node ``name``'s Prometheus samples: metric name -> [(labels, value)]."""
    with urllib.request.urlopen(f"http://127.0.0.1:{PROMETHEUS[name]}{path}",
                                timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def _quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def test_connections_and_channels_of_another_node_with_its_name_port_and_rates(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, _ = nodes
    conn = connect(n2)
    try:
        ch = conn.channel()
        ch.queue_declare("views.rates")
        ch.basic_publish("", "views.rates", b"x")

        def n2_channel() -> dict | None:
            return next((c for c in api(n1, "/api/channels") if c["node"] == "n2"
                         and c.get("message_stats", {}).get("publish")), None)

        first = wait_until(n2_channel, "n2's channel on n1's /api/channels")
        assert first["name"].endswith(f":{n2.port} (1)")  # n2's real AMQP port, not 0
        assert first["connection_details"]["name"] in {
            c["name"] for c in api(n1, "/api/connections") if c["node"] == "n2"}
        for _ in range(200):
            ch.basic_publish("", "views.rates", b"x")
        conn.process_data_events(0)

        def rated() -> dict | None:
            got = n2_channel()
            return got if got and got["message_stats"]["publish_details"]["rate"] > 0 else None

        again = wait_until(rated, "a publish rate on n2's channel seen from n1")
        assert again["message_stats"]["publish"] >= 201
        # the same channel and its connection by name, from either node
        conn_name = again["connection_details"]["name"]
        for node in (n1, n2):
            assert api(node, f"/api/channels/{_quoted(again['name'])}")["node"] == "n2"
            assert api(node, f"/api/connections/{_quoted(conn_name)}")["node"] == "n2"
            assert [c["name"] for c in api(
                node, f"/api/connections/{_quoted(conn_name)}/channels")] == [again["name"]]
        with pytest.raises(urllib.error.HTTPError) as missing:
            api(n1, "/api/connections/" + _quoted("127.0.0.1:1 -> 127.0.0.1:2"))
        assert missing.value.code == 404
    finally:
        conn.close()


def test_another_nodes_connection_with_its_byte_counts_and_rates(
        nodes: list[BrokerProcess]) -> None:
    """recv_oct/send_oct (bytes), recv_cnt/send_cnt and their byte rates, as RabbitMQ
    3.10.8 shows a connection, for a connection on n2 read from n1 and n3."""
    n1, n2, n3 = nodes
    vhost_before = api(n1, "/api/vhosts/%2F")["recv_oct"]
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", n2.port, heartbeat=0,
        client_properties={"connection_name": "views-bytes"}))
    try:
        conn.channel().queue_declare("views.bytes")

        def seen(node: BrokerProcess) -> dict | None:
            return next((c for c in api(node, "/api/connections")
                         if c.get("user_provided_name") == "views-bytes"), None)

        first = wait_until(lambda: (c := seen(n1)) and c["recv_oct"] > 0 and c,
                           "n2's connection with its bytes on n1")
        name = first["name"]
        assert api(n1, f"/api/connections/{_quoted(name)}")["recv_oct"] >= first["recv_oct"]
        assert first["node"] == "n2" and first["send_oct"] > 0
        assert first["recv_cnt"] >= 1 and first["send_cnt"] >= 1 and first["send_pend"] == 0
        assert {"recv_oct_details", "send_oct_details"} <= set(first)
        ch = conn.channel()
        for _ in range(50):
            ch.basic_publish("", "views.bytes", b"x" * 1000)
        conn.process_data_events(0)

        def rated() -> dict | None:
            got = seen(n3)
            return got if got and got["recv_oct_details"]["rate"] > 0 else None

        again = wait_until(rated, "a byte rate on n2's connection seen from n3")
        assert again["recv_oct"] >= first["recv_oct"] + 50_000
        assert again["node"] == "n2"
    finally:
        conn.close()
    # the vhost's recv_oct/send_oct sum every node's connections, closed ones too
    vhost = wait_until(lambda: (v := api(n1, "/api/vhosts/%2F"))["recv_oct"]
                       >= vhost_before + 50_000 and v, "n2's bytes in n1's vhost")
    assert vhost["send_oct"] > 0 and "recv_oct_details" in vhost


def test_an_exchanges_message_stats_are_summed_over_the_nodes(
        nodes: list[BrokerProcess]) -> None:
    """publish_in/publish_out of an exchange published to through n2 and n3, read on n1
    (which routed none of them), with their rates, as RabbitMQ sums the cluster's."""
    n1, n2, n3 = nodes
    conn = connect(n2)
    try:
        ch = conn.channel()
        ch.exchange_declare("views.x", "direct")
        ch.exchange_declare("views.idle", "fanout")
        ch.queue_declare("views.x.q")
        ch.queue_bind("views.x.q", "views.x", "k")
    finally:
        conn.close()
    for node, routed, dropped in ((n2, 30, 5), (n3, 20, 0)):
        conn = connect(node)
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            for _ in range(routed):
                ch.basic_publish("views.x", "k", b"x")
            for _ in range(dropped):
                ch.basic_publish("views.x", "nowhere", b"x")
        finally:
            conn.close()

    def stats(path: str) -> dict | None:
        got = api(n1, path)
        if isinstance(got, list):
            got = next(x for x in got if x["name"] == "views.x")
        found = got.get("message_stats")
        return found if found and found["publish_in"] == 55 else None

    one = wait_until(lambda: stats("/api/exchanges/%2F/views.x"), "views.x's publishes on n1")
    assert one["publish_out"] == 50
    listed = stats("/api/exchanges/%2F")
    assert listed is not None and listed["publish_out"] == 50
    assert stats("/api/exchanges") is not None
    # as in RabbitMQ 3.10.8: no message_stats for an exchange nothing was published to
    idle = api(n1, "/api/exchanges/%2F/views.idle")
    assert "message_stats" not in idle
    conn = connect(n3)
    try:
        ch = conn.channel()
        for _ in range(200):
            ch.basic_publish("views.x", "k", b"x")
        conn.process_data_events(0)
        wait_until(lambda: api(n1, "/api/exchanges/%2F/views.x")["message_stats"]
                   ["publish_in_details"]["rate"] > 0, "a publish rate on views.x seen from n1")
    finally:
        conn.close()


def test_queues_show_the_node_they_live_on_and_the_home_counts(
        nodes: list[BrokerProcess]) -> None:
    n1, _, n3 = nodes
    conn = connect(n3)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("views.classic")
        for _ in range(30):
            ch.basic_publish("", "views.classic", b"x")

        def seen(node: BrokerProcess) -> dict | None:
            q = api(node, "/api/queues/%2F/views.classic")
            return q if q["messages"] == 30 and q["message_stats"]["publish"] == 30 else None

        for node in nodes:  # the home's counts and node wherever it is read
            q = wait_until(lambda node=node: seen(node), "views.classic's counts")
            assert q["node"] == "n3"
        listed = {q["name"]: q for q in api(n1, "/api/queues")}
        assert listed["views.classic"]["node"] == "n3"
        ch.basic_consume("views.classic", lambda *a: None, consumer_tag="views-tag")

        def consumer() -> dict | None:
            return next((c for c in api(n1, "/api/consumers")
                         if c["consumer_tag"] == "views-tag"), None)

        found = wait_until(consumer, "n3's consumer on n1's /api/consumers")
        assert found["channel_details"]["node"] == "n3"
        assert found["queue"] == {"name": "views.classic", "vhost": "/"}
        assert wait_until(lambda: api(n1, "/api/queues/%2F/views.classic")["consumers"] == 1,
                          "the consumer counted on n1")
    finally:
        conn.close()


def test_quorum_queue_node_is_its_leader_with_members_and_online(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, _ = nodes
    conn = connect(n2)
    try:
        conn.channel().queue_declare("views.qq", durable=True,
                                     arguments={"x-queue-type": "quorum"})
    finally:
        conn.close()

    def full() -> list[dict] | None:
        found = [q for node in nodes for q in api(node, "/api/queues/%2F")
                 if q["name"] == "views.qq"]
        return found if all(sorted(q.get("online", [])) == list(NAMES) for q in found) \
            else None

    for q in wait_until(full, "views.qq online on every node"):
        assert q["type"] == "quorum"
        assert sorted(q["members"]) == list(NAMES)
        assert q["leader"] in NAMES
        assert q["node"] == q["leader"]  # as RabbitMQ: a quorum queue's node is its leader


def test_queues_grow_to_their_argument_or_policy_target_group_size(
        nodes: list[BrokerProcess]) -> None:
    """RabbitMQ 3.13's x-quorum-target-group-size argument and target-group-size policy key:
    queues declared with one member grow to their own target (the cluster's configured 1
    being the floor), one without either stays as declared."""
    n1, n2, _ = nodes
    api(n1, "/api/policies/%2F/views-tgs", "PUT",
        {"pattern": "^views[.]tgs[.]policy$", "definition": {"target-group-size": 2},
         "apply-to": "quorum_queues"})
    conn = connect(n2)
    try:
        ch = conn.channel()
        one = {"x-queue-type": "quorum", "x-quorum-initial-group-size": 1}
        ch.queue_declare("views.tgs.arg", durable=True,
                         arguments={**one, "x-quorum-target-group-size": 3})
        ch.queue_declare("views.tgs.policy", durable=True, arguments=one)
        ch.queue_declare("views.tgs.none", durable=True, arguments=one)
    finally:
        conn.close()

    def members(name: str) -> list[str]:
        return sorted(api(n1, f"/api/queues/%2F/{name}").get("members") or [])

    wait_until(lambda: members("views.tgs.arg") == list(NAMES), "views.tgs.arg on 3 nodes")
    wait_until(lambda: len(members("views.tgs.policy")) == 2, "views.tgs.policy on 2 nodes")
    assert members("views.tgs.none") == ["n2"]  # the same passes left it as declared
    api(n1, "/api/policies/%2F/views-tgs", "DELETE")


def test_overview_message_stats_are_summed_over_the_nodes(
        nodes: list[BrokerProcess]) -> None:
    n1, n2, n3 = nodes
    before = api(n1, "/api/overview")["message_stats"]["publish"]
    vhost_before = api(n1, "/api/vhosts/%2F")["message_stats"]["publish"]
    for node, count in ((n2, 40), (n3, 60)):
        conn = connect(node)
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare("views.sum")
            for _ in range(count):
                ch.basic_publish("", "views.sum", b"x")
        finally:
            conn.close()
    wait_until(lambda: api(n1, "/api/overview")["message_stats"]["publish"] >= before + 100,
               "n2's and n3's publishes in n1's overview")
    wait_until(lambda: api(n1, "/api/vhosts/%2F")["message_stats"]["publish"]
               >= vhost_before + 100, "n2's and n3's publishes in n1's vhost")
    # and their rate: the overview's rates are those of the cluster's sums
    conn = connect(n2)
    try:
        ch = conn.channel()
        for _ in range(300):
            ch.basic_publish("", "views.sum", b"x")
        conn.process_data_events(0)
        wait_until(lambda: api(n1, "/api/overview")["message_stats"]["publish_details"]
                   ["rate"] > 0, "n2's publish rate in n1's overview")
    finally:
        conn.close()
    # n1 itself published nothing: its own counters alone would not have moved
    assert api(n1, "/api/overview")["node"] == "n1"


def test_each_node_has_its_own_prometheus_endpoint_labelled_with_its_node(
        nodes: list[BrokerProcess]) -> None:
    idents = {}
    for name in NAMES:
        [(labels, value)] = _metrics(name)["rabbitmq_identity_info"]
        assert value == 1
        idents[name] = labels
    assert [idents[n]["rabbitmq_node"] for n in NAMES] == list(NAMES)
    # one cluster name on every node, so a dashboard groups the three nodes
    assert {idents[n]["rabbitmq_cluster"] for n in NAMES} == {"n1"}
    assert api(nodes[1], "/api/overview")["cluster_name"] == "n1"


def _cluster_ids(nodes: list[BrokerProcess]) -> set[str] | None:
    """Every running node's internal_cluster_id global parameter and Prometheus
    rabbitmq_cluster_permanent_id label (None while a node has none yet)."""
    found = set()
    for node, name in zip(nodes, NAMES, strict=True):
        if not node.alive():
            continue
        params = {p["name"]: p["value"] for p in api(node, "/api/global-parameters")}
        [(labels, _)] = _metrics(name)["rabbitmq_identity_info"]
        if "internal_cluster_id" not in params:
            return None
        found |= {params["internal_cluster_id"], labels["rabbitmq_cluster_permanent_id"]}
    return found


def test_one_permanent_cluster_id_on_every_node(nodes: list[BrokerProcess]) -> None:
    """RabbitMQ's internal_cluster_id: made once per cluster, the same on every node (each
    node proposed its own data dir's; the first ordered through etcd won)."""
    ids = wait_until(lambda: (got := _cluster_ids(nodes)) and len(got) == 1 and got,
                     "one internal_cluster_id on every node")
    [the_id] = ids
    assert the_id.startswith("rabbitmq-cluster-id-")
    exported = api(nodes[2], "/api/definitions")["global_parameters"]
    assert {"name": "internal_cluster_id", "value": the_id} in exported


def test_a_queue_is_reported_by_the_node_it_lives_on_only(
        nodes: list[BrokerProcess]) -> None:
    conn = connect(nodes[2])
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("views.prom")
        for _ in range(7):
            ch.basic_publish("", "views.prom", b"x")
    finally:
        conn.close()

    def ready(name: str) -> list[float]:
        return [v for labels, v in
                _metrics(name, "/metrics/per-object").get("rabbitmq_queue_messages_ready", [])
                if labels.get("queue") == "views.prom"]

    assert wait_until(lambda: ready("n3") == [7.0], "views.prom's 7 messages on n3's endpoint")
    assert ready("n1") == [] and ready("n2") == []  # not duplicated on the other nodes



def test_client_totals_cluster_wide_in_the_overview_per_node_in_prometheus(
        nodes: list[BrokerProcess]) -> None:
    conn = connect(nodes[2])
    try:
        conn.channel()

        def gauge(name: str) -> float:
            [(_, value)] = _metrics(name)["rabbitmq_connections"]
            return value

        # every node's overview counts n3's client (as RabbitMQ's object_totals)...
        for node in nodes:
            wait_until(lambda node=node: api(node, "/api/overview")["object_totals"]
                       ["connections"] >= 1, "n3's connection in every overview")
        # ... and only n3's endpoint does
        assert wait_until(lambda: gauge("n3") >= 1, "rabbitmq_connections on n3")
        assert gauge("n1") == 0 and gauge("n2") == 0
        # /api/workers on the first node lists every node (those that joined after it too)
        assert wait_until(lambda: [w["index"] for w in api(nodes[0], "/api/workers")
                                   if w["up"]] == [0, 1, 2], "every node in n1's /api/workers")
    finally:
        conn.close()


def test_a_stopped_nodes_queue_still_names_its_node(nodes: list[BrokerProcess]) -> None:
    """Last in the module: it stops n3 (and starts it again)."""
    n1, _, n3 = nodes
    conn = connect(n3)
    try:
        conn.channel().queue_declare("views.gone", durable=True)
    finally:
        conn.close()
    wait_until(lambda: api(n1, "/api/queues/%2F/views.gone")["node"] == "n3",
               "views.gone on n3 seen from n1")
    n3.stop()
    wait_until(lambda: not next(n for n in api(n1, "/api/nodes") if n["name"] == "n3")
               ["running"], "n3 stopped, as n1 sees it")
    assert api(n1, "/api/queues/%2F/views.gone")["node"] == "n3"
    assert {q["name"]: q["node"] for q in api(n1, "/api/queues")}["views.gone"] == "n3"
    # started again, n3 reads the cluster's id back (its saved one does not count)
    [before] = _cluster_ids(nodes) or [None]
    n3.start()
    assert wait_until(lambda: (got := _cluster_ids(nodes)) and got, "n3's id") == {before}
