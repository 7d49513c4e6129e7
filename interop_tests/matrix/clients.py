"""The clients of the matrix and how one cell is run.

``CLIENTS`` maps a client name to a :class:`Client`; ``run_cell(client, scenario, url)`` runs
one scenario with fresh unique names and an admin connection, deletes what it declared, and
returns the normalised observation. :class:`~interop_tests.matrix.driver.Unsupported` escapes
it for a cell the client cannot do.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from interop_tests.matrix.cell import Admin, Ctx, Names, normalize
from interop_tests.matrix.driver import Driver, Unsupported
from interop_tests.matrix.scenarios import DECLARE_ERRORS, EXPECTED, SCENARIOS

PYTHON_CLIENTS = ("pika_blocking", "pika_select", "pika_asyncio", "aio_pika", "aio_pika_robust",
                  "aiormq", "kombu", "amqpstorm")


@dataclass
class Client:
    name: str
    #: None when the client can run here, else why not (the cells are skipped with it).
    unavailable: Callable[[], str | None]
    driver: Callable[[], Driver] | None = None
    #: For clients that are not drivers (amqp-tools): scenario -> function(ctx) -> observation.
    runner: Callable[[str, Ctx], dict] | None = None
    #: Expected observations that differ from ``scenarios.EXPECTED`` for this client.
    expected_overrides: Callable[[], dict[str, dict]] | None = None
    #: Top-level fields of expected observations replaced for this client: {scenario: {...}}.
    patches: dict[str, dict] = field(default_factory=dict)

    def expected(self, scenario: str) -> dict:
        overrides = self.expected_overrides() if self.expected_overrides else {}
        return {**overrides.get(scenario, EXPECTED[scenario]), **self.patches.get(scenario, {})}

    def run(self, scenario: str, ctx: Ctx) -> dict:
        if self.driver is not None:
            d = self.driver()
            if scenario in d.unsupported:
                raise Unsupported(d.unsupported[scenario])
            try:
                return SCENARIOS[scenario](d, ctx)
            finally:
                d.shutdown()
        assert self.runner is not None
        return self.runner(scenario, ctx)


def _module(name: str, install: str) -> Callable[[], str | None]:
    def check() -> str | None:
        if name in sys.modules:  # kombu replaces its module object (no __spec__ then)
            return None
        if importlib.util.find_spec(name) is None:
            return f"python module {name} is not installed ({install})"
        return None

    return check


def _pika_blocking() -> Driver:
    from interop_tests.matrix.drivers.pika_blocking import PikaBlockingDriver

    return PikaBlockingDriver()


def _pika_select() -> Driver:
    from interop_tests.matrix.drivers.pika_async import PikaSelectDriver

    return PikaSelectDriver()


def _pika_asyncio() -> Driver:
    from interop_tests.matrix.drivers.pika_async import PikaAsyncioDriver

    return PikaAsyncioDriver()


def _aio_pika() -> Driver:
    from interop_tests.matrix.drivers.aio_pika_driver import AioPikaDriver

    return AioPikaDriver()


def _aio_pika_robust() -> Driver:
    from interop_tests.matrix.drivers.aio_pika_driver import AioPikaRobustDriver

    return AioPikaRobustDriver()


def _aiormq() -> Driver:
    from interop_tests.matrix.drivers.aiormq_driver import AiormqDriver

    return AiormqDriver()


def _kombu() -> Driver:
    from interop_tests.matrix.drivers.kombu_driver import KombuDriver

    return KombuDriver()


def _amqpstorm() -> Driver:
    from interop_tests.matrix.drivers.amqpstorm_driver import AmqpstormDriver

    return AmqpstormDriver()


def _amqplib() -> Driver:
    from interop_tests.matrix.drivers.node_driver import NodeAmqplibDriver

    return NodeAmqplibDriver()


def _amqplib_unavailable() -> str | None:
    from interop_tests.matrix.drivers.node_driver import unavailable

    return unavailable()


def _amqp_tools_unavailable() -> str | None:
    missing = [tool for tool in ("amqp-declare-queue", "amqp-publish", "amqp-consume",
                                 "amqp-get") if shutil.which(tool) is None]
    if missing:
        return (f"{', '.join(missing)} not on PATH: install Debian's amqp-tools "
                "(make interop-deps)")
    return None


def _amqp_tools_run(scenario: str, ctx: Ctx) -> dict:
    from interop_tests.matrix import amqp_tools

    return amqp_tools.run(scenario, ctx)


def _amqp_tools_expected() -> dict[str, dict]:
    from interop_tests.matrix import amqp_tools

    return amqp_tools.EXPECTED


PIP = "pip install -e '.[test]'"
CLIENTS: dict[str, Client] = {
    "pika_blocking": Client("pika_blocking", _module("pika", PIP), driver=_pika_blocking),
    "pika_select": Client("pika_select", _module("pika", PIP), driver=_pika_select),
    "pika_asyncio": Client("pika_asyncio", _module("pika", PIP), driver=_pika_asyncio),
    "aio_pika": Client("aio_pika", _module("aio_pika", PIP), driver=_aio_pika),
    "aio_pika_robust": Client(
        "aio_pika_robust", _module("aio_pika", PIP), driver=_aio_pika_robust,
        # A RobustChannel names "server-named" queues itself (amq_<uuid hex>), so that it can
        # declare them again after a reconnect; and it answers a passive declare_queue of a
        # queue it declared before from its cache: the first Declare-Ok (0 messages, 0
        # consumers), whatever the queue holds now.
        patches={"connect_plain": {"server_named_queue": "amq_*"},
                 "declare": {"server_named": "amq_*", "passive_ok": [0, 0]},
                 "publish_confirm": {"in_queue": 0},
                 "consume_prefetch_ack": {"declare_ok_while_consuming": [0, 0]},
                 "consumer_cancel_notify": {"channel_usable": "amq_*"}}),
    "aiormq": Client("aiormq", _module("aiormq", PIP), driver=_aiormq),
    "kombu": Client(
        "kombu", _module("kombu", PIP), driver=_kombu,
        # kombu never declares an exchange named amq.* (Exchange._can_declare): no 403.
        patches={"declare": {"errors": {**DECLARE_ERRORS, "reserved_exchange_name": "ok"}}}),
    "amqpstorm": Client("amqpstorm", _module("amqpstorm", PIP), driver=_amqpstorm),
    "amqplib": Client("amqplib", _amqplib_unavailable, driver=_amqplib),
    "amqp_tools": Client("amqp_tools", _amqp_tools_unavailable, runner=_amqp_tools_run,
                         expected_overrides=_amqp_tools_expected),
}


def run_cell(client: str, scenario: str, url: str) -> dict:
    """Run one cell against the broker at ``url``; the normalised observation."""
    names = Names(f"mx.{client}.{scenario}")
    admin = Admin(url)
    ctx = Ctx(url=url, names=names, admin=admin)
    try:
        observation = CLIENTS[client].run(scenario, ctx)
        return normalize(observation, names)
    finally:
        admin.cleanup(names)
        admin.close()
