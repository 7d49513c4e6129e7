"""``exactlyOnce=true``: the driver makes sure the write's target deduplicates.

Theory of operation
-------------------
Spark runs a partition again when a task fails (``spark.task.maxFailures``), when a stage is
recomputed, for speculative copies, and when a streaming query restarts from its checkpoint
(the micro-batch that had not committed runs again with the same batch id and the same
partition contents). Each run publishes the partition's rows again. With ``exactlyOnce`` every
row carries an id that is the same in every run (:mod:`spark_sink.writer`:
``<jobId>-<partition>-<row>``, streaming ``<queryId or jobId>-<batchId>-<partition>-<row>``) in
the ``x-deduplication-header`` header, and the broker drops a row whose id it has seen: the
target must deduplicate. Before any task starts, :func:`prepare_target` (on the driver):

* **exchange target** (``save("events/")``, ``exchange=events``): the exchange must be an
  ``x-message-deduplication`` exchange (it routes like fanout and remembers the last
  ``x-cache-size`` ids, each for ``x-cache-ttl`` ms, whether or not the rows were consumed).
  A missing one is declared durable with ``x-cache-size`` = ``dedupCacheSize`` (default
  1,000,000), ``x-cache-ttl`` = ``dedupCacheTtl`` (default none: ids leave by size only) and
  ``x-cache-persistence: disk`` (the ids survive a broker restart). An existing one is checked
  by declaring it with that type: one of another type fails the job (``inequivalent arg
  'type'``); an existing deduplication exchange keeps its own cache settings.
* **queue target** (``save("orders")``): the queue must have ``x-message-deduplication:
  true`` (it drops a row whose id equals that of a message it still holds, ready or unacked).
  A missing one is declared durable with it (plus ``x-cache-size``/``x-cache-ttl`` when
  ``dedupCacheSize``/``dedupCacheTtl`` are given). AMQP cannot tell an existing queue's
  arguments (RabbitMQ does not compare ``x-message-deduplication`` on redeclare), so the
  driver asks the management API (``managementUri``, default ``http://<uri host>:15672``,
  with the URI's credentials); a queue without it, or no answer, fails the job.

The window: a replayed row is dropped only while its id is still remembered: for an exchange,
within its last ``x-cache-size`` ids and ``x-cache-ttl`` ms; for a queue, while the first copy
is still in the queue (a consumer that acked it lets the replay in) and within its cache
limits. So with a queue target, consumers reading while the job runs can see a replayed row
twice; an exchange target does not have that limit.

Errors: :class:`~spark_sink.options.AmqpqOptionError` naming ``exactlyOnce`` (or
``managementUri``) on one line.

Sources: https://github.com/noxdafox/rabbitmq-message-deduplication (exchange type, queue
argument, ``x-deduplication-header``); RabbitMQ ``rabbit_exchange:assert_equivalence/6`` (the
type is compared first on redeclare); HTTP API ``GET /api/queues/{vhost}/{name}``
(https://www.rabbitmq.com/docs/http-api-reference).
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from spark_sink.options import AmqpqOptionError, SinkConfig
from spark_sink.publisher import ConfirmPublisher, PublishError

log = logging.getLogger("spark_sink")

DEDUP_EXCHANGE_TYPE = "x-message-deduplication"
DEFAULT_EXCHANGE_CACHE_SIZE = 1_000_000  # ids an exchange the driver declares remembers


def prepare_target(config: SinkConfig) -> str:
    """Driver: declare the deduplicating target, or check the existing one deduplicates.

    Returns:
        what was done, for the driver's log, e.g. ``"declared x-message-deduplication
        exchange 'events' (x-cache-size 1000000, x-cache-persistence disk)"``.

    Raises:
        AmqpqOptionError: no broker reachable ('uri'); the target does not deduplicate, or
            cannot be declared or checked ('exactlyOnce'); the management API does not
            answer ('managementUri').
    """
    if config.exchange:
        return _prepare_exchange(config)
    return _prepare_queue(config)


def exchange_arguments(config: SinkConfig) -> dict[str, Any]:
    """The arguments a missing target exchange is declared with."""
    args: dict[str, Any] = {
        "x-cache-size": config.dedup_cache_size or DEFAULT_EXCHANGE_CACHE_SIZE,
        "x-cache-persistence": "disk",
    }
    if config.dedup_cache_ttl:
        args["x-cache-ttl"] = config.dedup_cache_ttl
    return args


def queue_arguments(config: SinkConfig) -> dict[str, Any]:
    """The arguments a missing target queue is declared with."""
    args: dict[str, Any] = {"x-message-deduplication": True}
    if config.dedup_cache_size:
        args["x-cache-size"] = config.dedup_cache_size
    if config.dedup_cache_ttl:
        args["x-cache-ttl"] = config.dedup_cache_ttl
    return args


def _connect(config: SinkConfig) -> ConfirmPublisher:
    publisher = ConfirmPublisher(config.addresses, timeout=min(config.timeout, 10.0),
                                 tls=config.tls)
    try:
        publisher.connect()
    except PublishError as exc:
        raise AmqpqOptionError("uri", f"reaches no broker: {exc}") from None
    return publisher


def _exists(config: SinkConfig, check: str, name: str) -> bool:
    """Passive declare of the exchange (``check="exchange"``) or queue: False on 404."""
    publisher = _connect(config)
    try:
        if check == "exchange":
            publisher.declare_exchange(name, "direct", passive=True)
        else:
            publisher.check_queue(name)
        return True
    except PublishError as exc:
        if "404" in str(exc):
            return False
        raise AmqpqOptionError("exactlyOnce", f"cannot check {check} {name!r}: {exc}") from None
    finally:
        publisher.close()


def _prepare_exchange(config: SinkConfig) -> str:
    name = config.exchange
    existed = _exists(config, "exchange", name)
    args = exchange_arguments(config)
    publisher = _connect(config)
    try:
        publisher.declare_exchange(name, DEDUP_EXCHANGE_TYPE, durable=True, arguments=args)
    except PublishError as exc:
        text = str(exc)
        # the type is compared first: another 406 means the type matched (durable differs...)
        if "406" in text and "inequivalent arg 'type'" not in text:
            return f"checked x-message-deduplication exchange {name!r} ({text})"
        if "inequivalent arg 'type'" in text:
            raise AmqpqOptionError("exactlyOnce", f"needs exchange {name!r} to deduplicate, but "
                                                  f"it is not an x-message-deduplication "
                                                  f"exchange ({text}); write through one (bind "
                                                  "this exchange to it) or use another "
                                                  "name") from None
        raise AmqpqOptionError("exactlyOnce", f"cannot declare or check exchange {name!r} as "
                                              f"x-message-deduplication: {text}") from None
    finally:
        publisher.close()
    if existed:
        return f"checked x-message-deduplication exchange {name!r} (its own cache settings)"
    shown = ", ".join(f"{k} {v}" for k, v in args.items())
    return f"declared x-message-deduplication exchange {name!r} ({shown})"


def _prepare_queue(config: SinkConfig) -> str:
    name = config.routing_key
    if not _exists(config, "queue", name):
        args = queue_arguments(config)
        publisher = _connect(config)
        try:
            publisher.declare_queue(name, durable=True, arguments=args)
        except PublishError as exc:
            raise AmqpqOptionError("exactlyOnce", f"cannot declare queue {name!r} with "
                                                  f"x-message-deduplication: {exc}") from None
        finally:
            publisher.close()
        shown = ", ".join(f"{k} {v}" for k, v in args.items())
        return f"declared queue {name!r} ({shown})"
    arguments = _queue_arguments_from_api(config, name)
    if arguments.get("x-message-deduplication") is not True:
        raise AmqpqOptionError("exactlyOnce", f"needs queue {name!r} to deduplicate, but it "
                                              "was declared without x-message-deduplication: "
                                              "true (declare it with that argument, or let the "
                                              "sink declare a new queue)")
    return f"checked queue {name!r} (x-message-deduplication true)"


def management_base(config: SinkConfig) -> str:
    """The management API base URL (``managementUri`` or ``http://<first host>:15672``)."""
    if config.management_uri:
        return config.management_uri
    host = config.addresses[0].host
    return f"http://[{host}]:15672" if ":" in host else f"http://{host}:15672"


def _queue_arguments_from_api(config: SinkConfig, name: str) -> dict[str, Any]:
    address = config.addresses[0]
    base = management_base(config)
    path = (f"/api/queues/{urllib.parse.quote(address.vhost, safe='')}/"
            f"{urllib.parse.quote(name, safe='')}")
    auth = base64.b64encode(f"{address.username}:{address.password}".encode()).decode()
    req = urllib.request.Request(base + path, headers={"Authorization": "Basic " + auth})
    try:
        with urllib.request.urlopen(req, timeout=min(config.timeout, 10.0)) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as exc:
        raise AmqpqOptionError("managementUri", f"{base}{path}: HTTP {exc.code}; exactlyOnce "
                                                f"needs it to check that queue {name!r} "
                                                "deduplicates") from None
    except (OSError, ValueError) as exc:
        raise AmqpqOptionError("managementUri", f"{base} not reachable ({exc}); exactlyOnce "
                                                f"needs it to check that queue {name!r} "
                                                "deduplicates") from None
    arguments = body.get("arguments") if isinstance(body, dict) else None
    return arguments if isinstance(arguments, dict) else {}
