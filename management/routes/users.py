"""``/api/users``: list, create/update (``PUT`` with ``password`` or ``password_hash``, and
``tags``), delete, and a user's permissions. Administrator only.

As RabbitMQ 3.10.8 does: ``tags`` is required (400 ``tags_not_present``), may be a list or a
comma-separated string; a PUT without ``password``/``password_hash`` leaves the user without a
password (it cannot log in); ``password_hash`` must be base64 (400 ``["not_base64", ...]``).
Source: https://www.rabbitmq.com/docs/management#http-api, https://www.rabbitmq.com/docs/passwords.
"""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from management.access_changes import ordered_change
from management.auth import require_admin
from management.errors import bad_request, not_found
from management.routes.common import created, no_content, ok, read_json, table
from management.routes.permissions import topic_permission_rows
from management.serializers import permission_json, user_json
from management.state import state
from vhosts.definitions import parse_tags
from vhosts.users import HASHING_ALGORITHM, hash_password

routes = web.RouteTableDef()


@routes.get("/api/users")
async def list_users(request: web.Request) -> web.Response:
    require_admin(request)
    broker = state(request).broker
    return ok([user_json(broker, u) for _, u in sorted(broker.users.users.items())])


@routes.get("/api/users/without-permissions")
async def users_without_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    broker = state(request).broker
    with_perms = {u for u, _ in broker.permissions.permissions}
    return ok([user_json(broker, u) for n, u in sorted(broker.users.users.items())
               if n not in with_perms])


@routes.post("/api/users/bulk-delete")
async def bulk_delete(request: web.Request) -> web.Response:
    require_admin(request)
    body = await read_json(request)
    names = body.get("users")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad_request("users must be a list of names")
    broker = state(request).broker
    for name in names:
        if name not in broker.users.users:
            raise bad_request(["no_such_user", name])
    await ordered_change(request, {"op": "delete_users", "names": names})
    return no_content()


@routes.get("/api/users/{user}")
async def get_user(request: web.Request) -> web.Response:
    require_admin(request)
    broker = state(request).broker
    user = broker.users.users.get(request.match_info["user"])
    if user is None:
        raise not_found()
    return ok(user_json(broker, user))


@routes.put("/api/users/{user}")
async def put_user(request: web.Request) -> web.Response:
    require_admin(request)
    name = request.match_info["user"]
    body = await read_json(request)
    if "tags" not in body:
        raise bad_request("tags_not_present")
    try:
        tags = parse_tags(body["tags"])
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    password = body.get("password")
    password_hash = body.get("password_hash")
    if password is not None and not isinstance(password, str):
        raise bad_request("password must be a string")
    if password is None and password_hash is not None:
        if not isinstance(password_hash, str):
            raise bad_request(["not_base64", password_hash])
        try:
            raw = base64.b64decode(password_hash, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request(["not_base64", password_hash]) from None
        algorithm = body.get("hashing_algorithm", HASHING_ALGORITHM)
        if algorithm != HASHING_ALGORITHM or (raw and len(raw) != 36):
            raise bad_request(f"unsupported hashing_algorithm '{algorithm}' (only "
                              f"{HASHING_ALGORITHM} hashes are accepted)")
    limits = table(body, "limits")
    # the password is hashed here: the change (ordered through etcd in a cluster) carries
    # the hash only
    was_new = await ordered_change(request, {
        "op": "put_user", "name": name, "tags": tags, "limits": limits,
        "password_hash": hash_password(password) if password is not None else password_hash})
    return created(was_new)


@routes.delete("/api/users/{user}")
async def delete_user(request: web.Request) -> web.Response:
    require_admin(request)
    name = request.match_info["user"]
    if name not in state(request).broker.users.users:
        raise not_found()
    await ordered_change(request, {"op": "delete_user", "name": name})
    return no_content()


@routes.get("/api/users/{user}/permissions")
async def user_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    broker = state(request).broker
    name = request.match_info["user"]
    if name not in broker.users.users:
        raise not_found()
    return ok([permission_json(u, v, p)
               for (u, v), p in sorted(broker.permissions.permissions.items()) if u == name])


@routes.get("/api/users/{user}/topic-permissions")
async def user_topic_permissions(request: web.Request) -> web.Response:
    require_admin(request)
    broker = state(request).broker
    name = request.match_info["user"]
    if name not in broker.users.users:
        raise not_found()
    return ok([r for r in topic_permission_rows(broker) if r["user"] == name])
