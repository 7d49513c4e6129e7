"""``/api/health/checks/*``: RabbitMQ's health checks, for load balancers and probes.

Every check answers 200 ``{"status":"ok", ...}`` or 503 ``{"status":"failed","reason":...}``
(bad path parameters: 400 ``bad_request``). Any management user may call them (RabbitMQ
3.10.8 asks for the ``management`` tag only: a user without tags gets 401 "Not management
user" from the authentication, monitoring is not needed).

======================================  ==============================================
path                                    503 body (RabbitMQ 3.10.8's)
======================================  ==============================================
``alarms``, ``local-alarms``            ``{"alarms":[{"node":"amqpq@host","resource":
                                        "disk space"}],"reason":"There are alarms in
                                        effect in the cluster"`` (local: "on the node"),
                                        ``"status":"failed"}``; resources ``memory`` and
                                        ``disk space``
``port-listener/{port}``                ``{"status":"failed","reason":"No active
                                        listener","missing":5673,"ports":[15672,5672]}``;
                                        400 "Invalid port" when not an integer
``protocol-listener/{protocol}``        ``{"status":"failed","reason":"No active
                                        listener","missing":"amqp/ssl","protocols":
                                        ["http","amqp"]}``; the name is normalised first
                                        (amqp091 → amqp, amqps → amqp/ssl, management → http)
``virtual-hosts``                       never: amqpq's vhosts are always running
``certificate-expiration/{n}/{unit}``   ``{"status":"failed","reason":"Certificates
                                        expiring","expired":[listener...]}``; 400 "Invalid
                                        expiration value." or "Time unit not recognised.
                                        Supported units: days, weeks, months, years."
======================================  ==============================================

``/api/healthchecks/alarms`` answers as ``alarms`` (an alias amqpq had before; RabbitMQ
3.10.8 answers 404 there). amqpq is a single node: there is no ``clustering`` listener (RabbitMQ's 25672), and the
cluster-wide and local alarm checks see the same alarms. The certificate check's 503 body
(field names of each listener) follows RabbitMQ's ``rabbit_networking`` source and was not
seen on the reference, which runs without TLS.

Source: https://www.rabbitmq.com/docs/monitoring#health-checks, RabbitMQ 3.10.8's
``rabbit_mgmt_wm_health_check_*`` (texts and statuses checked with curl against 3.10.8).
"""

from __future__ import annotations

import datetime
import ssl
from typing import Any

from aiohttp import web

from management.errors import bad_request
from management.state import ManagementState, state

routes = web.RouteTableDef()

#: Alarm resource names as RabbitMQ reports them (``rabbit_alarm:format_as_maps``).
_RESOURCES = {"memory": "memory", "disk": "disk space"}

#: RabbitMQ's protocol aliases (``rabbit_mgmt_wm_health_check_protocol_listener``); any
#: other name is looked up as given, lower-cased.
_PROTOCOL_ALIASES = {
    **dict.fromkeys(("amqp091", "amqp0.9.1", "amqp0-9-1", "amqp0_9_1", "amqp10", "amqp1.0",
                     "amqp1-0", "amqp1_0"), "amqp"),
    "amqps": "amqp/ssl",
    **dict.fromkeys(("mqtt3.1", "mqtt3.1.1", "mqtt31", "mqtt311", "mqtt3_1", "mqtt3_1_1"),
                    "mqtt"),
    **dict.fromkeys(("mqtts", "mqtt+tls", "mqtt+ssl"), "mqtt/ssl"),
    **dict.fromkeys(("stomp1.0", "stomp1.1", "stomp1.2", "stomp10", "stomp11", "stomp12",
                     "stomp1_0", "stomp1_1", "stomp1_2"), "stomp"),
    **dict.fromkeys(("stomps", "stomp+tls", "stomp+ssl"), "stomp/ssl"),
    **dict.fromkeys(("http1", "http1.1", "http_api", "management", "management_ui", "ui"),
                    "http"),
    **dict.fromkeys(("cli", "distribution"), "clustering"),
    **dict.fromkeys(("webmqtt", "web-mqtt", "ws-mqtt"), "http/web-mqtt"),
    **dict.fromkeys(("webstomp", "web-stomp", "ws-stomp"), "http/web-stomp"),
}

#: Seconds per certificate-expiration unit (RabbitMQ: a month is 365/12 days).
_UNIT_SECONDS = {"days": 86400, "weeks": 7 * 86400, "months": 86400 * 365 / 12,
                 "years": 365 * 86400}


def _ok(**extra: Any) -> web.Response:
    return web.json_response({"status": "ok", **extra})


def _failed(body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=503)


def _listeners(st: ManagementState) -> list[tuple[str, int]]:
    """(protocol, port) of every listener of this node: http, amqp, then amqp/ssl."""
    found = [(st.http_protocol, st.http_port), ("amqp", st.amqp_port)]
    tls = st.broker.config.tls
    if tls.enabled:
        found.append(("amqp/ssl", tls.port))
    return found


def _listener_check(st: ManagementState, key: str, wanted: int | str) -> web.Response:
    """``{"status":"ok", key: wanted}`` when a listener has it (``key`` "port" or
    "protocol"), else 503 with what is listened on under ``ports``/``protocols``."""
    listening = [port if key == "port" else protocol for protocol, port in _listeners(st)]
    if wanted in listening:
        return _ok(**{key: wanted})
    return _failed({"status": "failed", "reason": "No active listener", "missing": wanted,
                    f"{key}s": listening})


def _alarms(request: web.Request, reason: str) -> web.Response:
    st = state(request)
    alarms = st.broker.alarms
    if alarms is not None:
        active = alarms.active
    elif st.broker.alarms_active:  # a broker without resource probes (tests)
        active = ["disk" if "disk" in st.broker.alarm_reason else "memory"]
    else:
        active = []
    if not active:
        return _ok()
    return _failed({"alarms": [{"node": st.node, "resource": _RESOURCES.get(a, a)}
                               for a in sorted(active, key=_RESOURCES.get)],
                    "reason": reason, "status": "failed"})


@routes.get("/api/health/checks/alarms")
@routes.get("/api/healthchecks/alarms")  # amqpq's older path, kept (RabbitMQ 3.10.8: 404)
async def alarms_check(request: web.Request) -> web.Response:
    """200 without resource alarms; 503 listing them ("in effect in the cluster")."""
    return _alarms(request, "There are alarms in effect in the cluster")


@routes.get("/api/health/checks/local-alarms")
async def local_alarms_check(request: web.Request) -> web.Response:
    """The same for this node ("in effect on the node")."""
    return _alarms(request, "There are alarms in effect on the node")


@routes.get("/api/health/checks/port-listener/{port}")
async def port_listener_check(request: web.Request) -> web.Response:
    """200 ``{"status":"ok","port":5672}`` when a listener has the port (decimal, leading
    zeros allowed); 503 with the ports listened on; 400 "Invalid port"."""
    try:
        port = int(request.match_info["port"], 10)
    except ValueError:
        raise bad_request("Invalid port") from None
    return _listener_check(state(request), "port", port)


@routes.get("/api/health/checks/protocol-listener/{protocol}")
async def protocol_listener_check(request: web.Request) -> web.Response:
    """200 ``{"status":"ok","protocol":"amqp"}`` (the normalised name) when a listener
    speaks it; 503 with the protocols listened for."""
    name = request.match_info["protocol"].lower()
    protocol = _PROTOCOL_ALIASES.get(name, name)
    return _listener_check(state(request), "protocol", protocol)


@routes.get("/api/health/checks/virtual-hosts")
async def virtual_hosts_check(request: web.Request) -> web.Response:
    """Always 200: a vhost of amqpq cannot be down while the broker runs."""
    return _ok()


def certificate_not_after(path: str) -> datetime.datetime:
    """The expiry (UTC) of the first certificate in the PEM file ``path``.

    Raises:
        OSError, ssl.SSLError: unreadable file or not a certificate.
    """
    decoded = ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]
    seconds = ssl.cert_time_to_seconds(decoded["notAfter"])
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)


@routes.get("/api/health/checks/certificate-expiration/{within}/{unit}")
async def certificate_expiration_check(request: web.Request) -> web.Response:
    """200 unless a TLS listener's certificate expires within ``within`` ``unit`` (days,
    weeks, months, years; any case) from now: then 503 listing those listeners. 400 for a
    value that is not an integer or an unknown unit (the value is checked first)."""
    try:
        within = int(request.match_info["within"], 10)
    except ValueError:
        raise bad_request("Invalid expiration value.") from None
    per_unit = _UNIT_SECONDS.get(request.match_info["unit"].lower())
    if per_unit is None:
        raise bad_request("Time unit not recognised. Supported units: days, weeks, months, "
                          "years.")
    st = state(request)
    tls = st.broker.config.tls
    if not tls.enabled or tls.certfile is None:
        return _ok()
    deadline = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
        seconds=within * per_unit)
    try:
        expires = certificate_not_after(tls.certfile)
    except (OSError, ssl.SSLError):
        return _ok()  # RabbitMQ skips certificates it cannot read
    if expires > deadline:
        return _ok()
    listener = {"node": st.node, "protocol": "amqp/ssl",
                "interface": st.broker.config.host, "port": tls.port,
                "certfile": tls.certfile, "cacertfile": tls.cacertfile or "",
                "expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}
    return _failed({"status": "failed", "reason": "Certificates expiring",
                    "expired": [listener]})
