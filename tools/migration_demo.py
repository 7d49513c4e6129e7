"""A small "shop" application to practise docs/migrating-from-rabbitmq.md with: it sets up
its topology on RabbitMQ, publishes numbered orders, consumes them, and counts what arrived.

    python tools/migration_demo.py setup   --api http://127.0.0.1:15672 --vhost shop
    python tools/migration_demo.py publish --url amqp://shop:shop-secret@127.0.0.1:5672/shop --state pub.json
    python tools/migration_demo.py consume --url amqp://shop:shop-secret@127.0.0.1:5672/shop \
        --queue orders.created --log got-created.txt
    python tools/migration_demo.py check   --state pub.json --log got-created.txt --log got-audit.txt

``setup`` (RabbitMQ's HTTP API, as an administrator): vhost, user ``shop`` (password
``shop-secret``; ``--user``, ``--password``) with permissions in it, a durable topic exchange ``orders``, a classic queue
``orders.created`` (key ``order.created``) and a quorum queue ``orders.audit`` (key
``order.#``), and a policy ``orders-limit`` (``max-length`` 1,000,000 on ``^orders\\.``).

``publish`` sends persistent messages to ``orders`` with key ``order.created`` and publisher
confirms, body and ``message_id`` = a sequence number, ``--rate`` a second, until stopped
(Ctrl-C / SIGTERM: it waits for the confirms of what it sent, then exits) or ``--count``.
The state file keeps the next number, so a publisher started again (on another broker)
goes on where the last one stopped.

``consume`` takes one queue (prefetch 50), appends each message's number to the log file
(flushed) before acking it, until stopped (then it cancels its consumer and acks what it
received before closing, so a stop causes no redelivery). ``check`` compares: for each log, published,
received, duplicates, missing; exit status 1 when any message is missing.

Only the broker's own dependencies are used (aiormq), so ``make run``'s venv runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import signal
import sys
import urllib.request
from pathlib import Path
from urllib.parse import quote

import aiormq
from aiormq.abc import DeliveredMessage

USER, PASSWORD = "shop", "shop-secret"
EXCHANGE, KEY = "orders", "order.created"
QUEUES = {"orders.created": ("order.created", {}),
          "orders.audit": ("order.#", {"x-queue-type": "quorum"})}


def _api(base: str, auth: str, method: str, path: str, body: object = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base.rstrip("/") + path, data=data, method=method)
    request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30):
        pass


def setup(api: str, auth: str, vhost: str, user: str = USER, password: str = PASSWORD) -> None:
    """The shop's topology on the broker behind ``api`` (an administrator's ``auth``)."""
    v, u = quote(vhost, safe=""), quote(user, safe="")
    _api(api, auth, "PUT", f"/api/vhosts/{v}")
    _api(api, auth, "PUT", f"/api/users/{u}", {"password": password, "tags": ""})
    _api(api, auth, "PUT", f"/api/permissions/{v}/{u}",
         {"configure": ".*", "write": ".*", "read": ".*"})
    _api(api, auth, "PUT", f"/api/exchanges/{v}/{EXCHANGE}", {"type": "topic", "durable": True})
    for queue, (key, args) in QUEUES.items():
        _api(api, auth, "PUT", f"/api/queues/{v}/{queue}", {"durable": True, "arguments": args})
        _api(api, auth, "POST", f"/api/bindings/{v}/e/{EXCHANGE}/q/{queue}", {"routing_key": key})
    _api(api, auth, "PUT", f"/api/policies/{v}/orders-limit",
         {"pattern": r"^orders\.", "definition": {"max-length": 1000000}, "apply-to": "queues"})
    print(f"shop topology set up in vhost {vhost!r}")


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def publish(url: str, state: Path, rate: float, count: int | None) -> None:
    """Publish numbered orders with confirms until stopped; ``state`` holds the next number."""
    seq = json.loads(state.read_text())["next"] if state.exists() else 0
    first = seq
    stop = _stop_event()
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    batch = max(1, int(rate / 10))  # ten batches a second
    print(f"publishing from number {seq}", flush=True)
    try:
        while not stop.is_set() and (count is None or seq - first < count):
            n = batch if count is None else min(batch, count - (seq - first))
            confirms = [ch.basic_publish(str(i).encode(), exchange=EXCHANGE, routing_key=KEY,
                                         properties=aiormq.spec.Basic.Properties(
                                             delivery_mode=2, content_type="text/plain",
                                             message_id=str(i)))
                        for i in range(seq, seq + n)]
            for result in await asyncio.gather(*confirms):
                if not isinstance(result, aiormq.spec.Basic.Ack):
                    raise SystemExit(f"publish not confirmed: {result!r}")
            seq += n
            state.write_text(json.dumps({"next": seq}))
            try:
                await asyncio.wait_for(stop.wait(), timeout=n / rate)
            except TimeoutError:
                pass
    finally:
        await conn.close()
    print(f"published {seq - first} (numbers {first}..{seq - 1}), all confirmed", flush=True)


async def consume(url: str, queue: str, log_path: Path) -> None:
    """Consume ``queue``, logging each number before the ack, until stopped."""
    stop = _stop_event()
    conn = await aiormq.connect(url)
    ch = await conn.channel()
    await ch.basic_qos(prefetch_count=50)
    got = 0
    last = asyncio.get_running_loop().time()
    with log_path.open("a") as log:

        async def on_message(message: DeliveredMessage) -> None:
            nonlocal got, last
            log.write(message.body.decode() + "\n")
            log.flush()
            got += 1
            await message.channel.basic_ack(message.delivery.delivery_tag)
            last = asyncio.get_running_loop().time()

        ok = await ch.basic_consume(queue, on_message)
        print(f"consuming {queue}", flush=True)
        await stop.wait()
        # a clean stop: no new deliveries, then the ones received are handled and acked
        await ch.basic_cancel(ok.consumer_tag)
        while asyncio.get_running_loop().time() - last < 0.5:
            await asyncio.sleep(0.1)
        await conn.close()
    print(f"consumed {got} from {queue}", flush=True)


def check(state: Path, logs: list[Path]) -> int:
    """Print published / received / duplicates / missing per log; 1 when any is missing."""
    published = json.loads(state.read_text())["next"]
    missing_any = False
    for path in logs:
        numbers = [int(line) for line in path.read_text().split()]
        unique = set(numbers)
        missing = [i for i in range(published) if i not in unique]
        missing_any = missing_any or bool(missing)
        print(f"{path.name}: published {published}, received {len(unique)}, "
              f"duplicates {len(numbers) - len(unique)}, missing {len(missing)}"
              + (f" (first: {missing[:10]})" if missing else ""))
    return 1 if missing_any else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("setup", help="create the shop's topology over RabbitMQ's HTTP API")
    p.add_argument("--api", default="http://127.0.0.1:15672")
    p.add_argument("--auth", default="guest:guest", help="an administrator's user:password")
    p.add_argument("--vhost", default="shop")
    p.add_argument("--user", default=USER, help="the application's user (created)")
    p.add_argument("--password", default=PASSWORD)
    p = sub.add_parser("publish", help="publish numbered orders until stopped")
    p.add_argument("--url", required=True)
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--rate", type=float, default=200.0, help="messages a second")
    p.add_argument("--count", type=int, help="stop after this many")
    p = sub.add_parser("consume", help="consume one queue until stopped")
    p.add_argument("--url", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--log", type=Path, required=True)
    p = sub.add_parser("check", help="count what every consumer log received")
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--log", type=Path, action="append", required=True)
    args = parser.parse_args(argv)
    if args.command == "setup":
        setup(args.api, args.auth, args.vhost, args.user, args.password)
    elif args.command == "publish":
        asyncio.run(publish(args.url, args.state, args.rate, args.count))
    elif args.command == "consume":
        asyncio.run(consume(args.url, args.queue, args.log))
    else:
        return check(args.state, args.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
