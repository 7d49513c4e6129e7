"""``/api/nodes`` and ``/api/nodes/{name}``: the nodes, their resources and alarms.

Without a cluster amqpq is one node; in a cluster every node is listed, the other running
nodes with the figures they sent over the node link in the last second (memory, disk, file
descriptors, uptime, alarms, connections, queues). The fields are RabbitMQ's (``rabbit_mgmt_wm_nodes``); the ones that
describe the Erlang VM (processes, run queue, GC, mnesia) have their nearest meaning or a
neutral value: ``proc_used`` is this process's threads, ``run_queue`` 0. Memory is the RSS
(``mem_calculation_strategy`` "rss"), the disk figures are the data dir's file system, and
the alarm flags are the broker's (a failed write turns ``disk_free_alarm`` on at once).
``log_files`` is where the logs really go (the ``--log-file``, then ``<stdout>`` for the
console unless it is off) and ``config_files`` the ``--config`` file.

Source: https://www.rabbitmq.com/docs/management#http-api (GET /api/nodes).
"""

from __future__ import annotations

import os
from typing import Any

from aiohttp import web

from broker.log_setup import log_files
from management.auth import require_admin, require_monitor
from management.errors import bad_request, not_found
from management.node_figures import resource_figures
from management.routes.common import no_content, ok
from management.serializers import details
from management.state import ManagementState, state

routes = web.RouteTableDef()


def node_json(st: ManagementState) -> dict[str, Any]:
    """The node as RabbitMQ's management API shows it (sizes in bytes, uptime in ms)."""
    broker = st.broker
    config = broker.config
    alarms = broker.alarms
    figures = resource_figures(broker, st.started_at)
    used = {k: figures.pop(k) for k in ("mem_used", "disk_free", "fd_used", "sockets_used",
                                         "proc_used")}
    return {
        "name": st.node, "type": "disc", "running": True, "being_drained": False,
        "rates_mode": "basic", "partitions": [], "mem_calculation_strategy": "rss",
        **figures,  # os_pid, uptime, processors, mem_limit, disk_free_limit, fd_total...
        "mem_alarm": bool(alarms is not None and alarms.memory),
        "disk_free_alarm": bool(alarms is not None and alarms.disk),
        "proc_total": 1_048_576, "run_queue": 0, "net_ticktime": 60,
        "enabled_plugins": ["rabbitmq_management"],
        "config_files": list(config.config_files),
        "log_files": log_files(config.log), "db_dir": str(config.data_dir),
        "auth_mechanisms": [{"name": m, "description": "", "enabled": True}
                            for m in ("PLAIN", "AMQPLAIN", "EXTERNAL")],
        "applications": [{"name": "amqpq", "description": config.product,
                          "version": config.version}],
        **details(st.rates, ("node",), **used),
    }


@routes.get("/api/nodes")
async def list_nodes(request: web.Request) -> web.Response:
    """This node, and with ``--cluster-etcd`` every node seen in the cluster (``running``
    false for one gone; 401 unless monitoring or administrator)."""
    require_monitor(request)
    st = state(request)
    return ok([_with_workers(st, node_json(st), n) if n["name"] == st.node else n
               for n in _cluster(st)])


#: what each worker of a node shows in its ``workers`` entry, from its summary
_WORKER_KEYS = ("pid", "up", "connections", "channels", "consumers", "queues",
                "messages_ready", "messages_unacknowledged", "mem_alarm", "disk_free_alarm")
#: node figures that are the sum over the node's workers (each is a process of its own)
_SUMMED = ("mem_used", "fd_used", "sockets_used", "proc_used")


def _with_workers(st: ManagementState, item: dict[str, Any], seen: dict[str, Any]
                  ) -> dict[str, Any]:
    """Node entry ``item`` with its ``workers`` (a cluster node of several worker processes:
    the membership's ``[{"index", "worker", "running"}]``, each with its pid, clients,
    queues and alarms from its last summary, as ``/api/workers`` shows them), and its
    memory, descriptors, sockets, connections and queues summed over them; ``item`` as it
    is for a node of one worker."""
    listed = seen.get("workers") or []
    runtime = st.broker.workers
    if len(listed) < 2 or runtime is None:
        return item | ({"workers": listed} if listed else {})
    summaries = {int(w["index"]): w for w in runtime.workers()}
    workers, figures = [], []
    for w in listed:
        summary = summaries.get(w["index"]) if w.get("index") is not None else None
        entry = dict(w)
        if summary is not None and w.get("running"):
            entry.update({k: summary[k] for k in _WORKER_KEYS if k in summary})
            figures.append(summary)
        workers.append(entry)
    out = item | {"workers": workers}
    for key in _SUMMED:
        values = [int((f.get("node") or {}).get(key) or 0) for f in figures]
        if values:
            out[key] = sum(values)
    for key in ("connections", "queues"):
        if figures:
            out[key] = sum(int(f.get(key) or 0) for f in figures)
    for key in ("mem_alarm", "disk_free_alarm"):
        out[key] = bool(out.get(key)) or any(bool(f.get(key)) for f in figures)
    return out


def _cluster(st: ManagementState) -> list[dict[str, Any]]:
    """Every node: this one's name alone with one node, else the membership's view."""
    cluster = st.broker.cluster
    if cluster is None:
        return [{"name": st.node, "running": True}]
    workers = st.broker.workers
    out = []
    for n in cluster.nodes():
        item = {**n, "type": "disc"}
        # what a running node last told this one over the node link (once a second)
        seen = workers.peer_summaries.get(n.get("index")) if workers is not None else None
        if seen is not None and n.get("running"):
            summary = seen[0]
            item.update(summary.get("node") or {})  # memory, disk, fds, uptime...
            item.update(mem_alarm=bool(summary.get("mem_alarm")),
                        disk_free_alarm=bool(summary.get("disk_free_alarm")),
                        connections=int(summary.get("connections", 0)),
                        queues=int(summary.get("queues", 0)))
        out.append(_with_workers(st, item, n))
    return out


@routes.delete("/api/nodes/{name}")
async def forget_node(request: web.Request) -> web.Response:
    """amqpq's own (``rabbitmqctl forget_cluster_node`` over HTTP): remove a stopped
    member from the cluster (204); 404 unknown (or no cluster), 400 while it runs."""
    require_admin(request)
    cluster = state(request).broker.cluster
    name = request.match_info["name"]
    if cluster is None:
        raise not_found()
    outcome = await cluster.forget(name)
    if outcome == "unknown":
        raise not_found()
    if outcome == "running":
        raise bad_request(f"node {name} is running: stop it before forgetting it")
    return no_content()


@routes.get("/api/nodes/{name}")
async def get_node(request: web.Request) -> web.Response:
    """The node by name (404 for any other name)."""
    require_monitor(request)
    st = state(request)
    name = request.match_info["name"]
    for n in _cluster(st):
        if n["name"] == name == st.node:
            return ok(_with_workers(st, node_json(st), n))
        if n["name"] == name:
            return ok(n)
    if name == st.node:
        return ok(node_json(st))
    raise not_found()


@routes.get("/api/workers")
async def list_workers(request: web.Request) -> web.Response:
    """amqpq's own: the broker's worker processes (``--workers N``), each with its pid,
    whether it is up, its clients (connections, channels, consumers), the queues that live
    on it with their ready and unacknowledged messages, and its own alarms. With one worker,
    this process alone."""
    require_monitor(request)
    broker = state(request).broker
    if broker.workers is not None:
        return ok(broker.workers.workers())
    channels = [ch for conn in broker.connections for ch in conn.channels.values()]
    queues = [q for v in broker.vhosts.values() for q in v.queues.values()]
    alarms = broker.alarms
    return ok([{"index": 0, "pid": os.getpid(), "up": True,
                "connections": len(broker.connections), "channels": len(channels),
                "consumers": sum(len(ch.consumers) for ch in channels), "queues": len(queues),
                "messages_ready": sum(q.message_count for q in queues),
                "messages_unacknowledged": sum(q.unacked_count for q in queues),
                "mem_alarm": bool(alarms and alarms.memory),
                "disk_free_alarm": bool(alarms and alarms.disk)}])
