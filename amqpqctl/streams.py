"""Super streams (partitioned streams), as ``rabbitmq-streams add_super_stream`` /
``delete_super_stream`` make them, through the management HTTP API.

A super stream NAME is a ``direct`` exchange with argument ``x-super-stream: true`` and one
stream queue per partition, bound with a routing key and the binding argument
``x-stream-partition-order`` (0-based): ``--partitions N`` makes ``NAME-0`` .. ``NAME-(N-1)``
bound with ``"0"`` .. ``"N-1"``; ``--routing-keys a,b`` makes ``NAME-a``, ``NAME-b`` bound
with ``a``, ``b``. Creation is all or nothing: when a step fails, what was made is deleted.

Source: https://www.rabbitmq.com/docs/man/rabbitmq-streams.8 (add_super_stream,
delete_super_stream); https://www.rabbitmq.com/docs/streams#super-streams.
"""

from __future__ import annotations

from typing import Any

import click

from amqpqctl.base import Context, call, fail, output_options, vhost_option
from amqpqctl.client import CtlError, HttpError, path
from amqpqctl.output import Output

__all__ = ["COMMANDS"]


def _keys(partitions: int | None, routing_keys: str | None) -> list[str]:
    if partitions is not None and routing_keys is not None:
        raise CtlError("Specify --partitions or --routing-keys, not both.")
    if routing_keys is not None:
        keys = [k.strip() for k in routing_keys.split(",")]
        if not all(keys) or len(set(keys)) != len(keys):
            raise CtlError("--routing-keys must be distinct, non-empty, comma-separated keys")
        return keys
    count = 3 if partitions is None else partitions
    if count < 1:
        raise CtlError("--partitions must be a positive number")
    return [str(i) for i in range(count)]


@click.command("add_super_stream")
@click.argument("name")
@click.option("--partitions", type=int, default=None,
              help="number of partitions (default 3): streams NAME-0 .. NAME-(N-1)")
@click.option("--routing-keys", default=None,
              help="comma-separated routing keys, one partition NAME-KEY each")
@click.option("--max-length-bytes", type=int, default=None, help="retention by size, bytes")
@click.option("--max-age", default=None, help="retention by age: 7D, 12h, 30m, 10s ...")
@click.option("--stream-max-segment-size-bytes", type=int, default=None,
              help="segment size, bytes")
@vhost_option
@output_options
def add_super_stream(ctx: Context, name: str, partitions: int | None,
                     routing_keys: str | None, max_length_bytes: int | None,
                     max_age: str | None, stream_max_segment_size_bytes: int | None,
                     vhost: str | None, out: Output) -> None:
    """Create a super stream: an exchange and one stream per partition."""
    vhost = ctx.resolve(vhost)
    keys = _keys(partitions, routing_keys)
    arguments: dict[str, Any] = {"x-queue-type": "stream"}
    for key, value in (("x-max-length-bytes", max_length_bytes), ("x-max-age", max_age),
                       ("x-stream-max-segment-size-bytes", stream_max_segment_size_bytes)):
        if value is not None:
            arguments[key] = value
    out.progress(f'Adding a super stream "{name}" in vhost "{vhost}" ...')
    made: list[str] = []
    exchange_made = False
    try:
        if _exists(ctx, path("exchanges", vhost, name), vhost):
            raise CtlError(f"exchange '{name}' in vhost '{vhost}' already exists")
        call(ctx, "PUT", path("exchanges", vhost, name),
             {"type": "direct", "durable": True, "auto_delete": False, "internal": False,
              "arguments": {"x-super-stream": True}}, vhost=vhost)
        exchange_made = True
        for order, key in enumerate(keys):
            stream = f"{name}-{key}"
            if _exists(ctx, path("queues", vhost, stream), vhost):
                raise CtlError(f"queue '{stream}' in vhost '{vhost}' already exists")
            call(ctx, "PUT", path("queues", vhost, stream),
                 {"durable": True, "auto_delete": False, "arguments": arguments}, vhost=vhost)
            made.append(stream)
            call(ctx, "POST", path("bindings", vhost, "e", name, "q", stream),
                 {"routing_key": key, "arguments": {"x-stream-partition-order": order}},
                 vhost=vhost)
    except CtlError:
        for stream in made:  # all or nothing
            _quietly(ctx, "DELETE", path("queues", vhost, stream))
        if exchange_made:
            _quietly(ctx, "DELETE", path("exchanges", vhost, name))
        raise


@click.command("delete_super_stream")
@click.argument("name")
@vhost_option
@output_options
def delete_super_stream(ctx: Context, name: str, vhost: str | None, out: Output) -> None:
    """Delete a super stream: its exchange and its partition streams."""
    vhost = ctx.resolve(vhost)
    exchange = call(ctx, "GET", path("exchanges", vhost, name), vhost=vhost,
                    what=f"super stream '{name}' in vhost '{vhost}'")
    if not (exchange.get("arguments") or {}).get("x-super-stream"):
        raise CtlError(f"exchange '{name}' in vhost '{vhost}' is not a super stream")
    out.progress(f'Deleting super stream "{name}" in vhost "{vhost}" ...')
    bindings = call(ctx, "GET", path("exchanges", vhost, name, "bindings", "source"),
                    vhost=vhost)
    call(ctx, "DELETE", path("exchanges", vhost, name), vhost=vhost)
    for b in bindings:
        if b.get("destination_type") == "queue":
            _quietly(ctx, "DELETE", path("queues", vhost, b["destination"]))


def _exists(ctx: Context, url: str, vhost: str) -> bool:
    """Whether the API object at ``url`` exists (404: no; other errors are reported)."""
    try:
        ctx.client.request("GET", url)
    except HttpError as exc:
        if exc.status == 404:
            return False
        raise fail(exc, ctx, vhost) from None
    return True


def _quietly(ctx: Context, method: str, url: str) -> None:
    try:
        ctx.client.request(method, url)
    except (HttpError, CtlError):  # best effort: the error being reported matters more
        pass


COMMANDS = [add_super_stream, delete_super_stream]
