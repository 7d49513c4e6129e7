"""A node's etcd client: ``aetcd`` over TLS (CA, client certificate) and with etcd's
user/password authentication, authenticating again when etcd has forgotten the token.

aetcd 1.0 opens only plaintext gRPC channels and authenticates once, in ``connect``. etcd 3.4
forgets a *simple* token (its default) after ``--auth-token-ttl`` seconds without use (300 by
default; every use starts the count again) and when it restarts; a JWT token after its fixed
ttl. From then on every call fails with ``UNAUTHENTICATED: etcdserver: invalid auth token``,
and a watch created with such a token is cancelled in etcd's "created" answer, which aetcd
does not look at: it would wait for events forever. So here:

* :class:`EtcdClient` (an ``aetcd.Client``) opens its channel itself: TLS with
  ``grpc.ssl_channel_credentials`` for ``https://``, with :class:`_UnaryToken` and
  :class:`_StreamToken` on it.
* The interceptors put the current token in every call. A unary call refused for its token
  (``invalid auth token``; ``revision of auth store is old``: users or roles changed since it
  was issued) authenticates again and is sent once more (etcd refused it before applying
  it); a Watch stream starts with a token just issued.

The password is kept in this object only: never in a log line, an error or a ``repr``.

Source: https://etcd.io/docs/v3.4/op-guide/security/ (TLS, ``--client-cert-auth``),
https://etcd.io/docs/v3.4/op-guide/authentication/ (users, roles, tokens),
https://etcd.io/docs/v3.4/op-guide/configuration/ (``--auth-token``, ``--auth-token-ttl``),
https://grpc.github.io/grpc/python/grpc_asyncio.html (client interceptors).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aetcd
import grpc
from aetcd import rpc, watcher

from amqp_server.cluster.membership import ClusterError, parse_etcd_url, read_secret_file
from broker.config import EtcdOptions

log = logging.getLogger("amqpq.cluster")

AUTHENTICATE = "/etcdserverpb.Auth/Authenticate"
WATCH = "/etcdserverpb.Watch/Watch"
#: gRPC's 4 MiB default would refuse the answer to a node's start-up read of a big log
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 512 * 1024 * 1024)]


class AuthenticationFailed(aetcd.exceptions.ClientError):
    """etcd refused the user name and password (``--cluster-etcd-password-file``), or has
    no auth enabled."""


class WatchRefused(aetcd.exceptions.ClientError):
    """etcd refused to create a watch (its reason: permission denied, invalid token)."""


def _tls_files(options: EtcdOptions) -> tuple[bytes | None, bytes | None, bytes | None]:
    """(CA certificates, client key, client certificate) as PEM bytes, each checked with
    ``ssl`` first (a bad file is one clear line at start, not a failed handshake later).

    Raises:
        ClusterError: a file unreadable or not PEM, or the key not the certificate's.
    """
    context = ssl.create_default_context()
    checks: list[tuple[str, Any]] = []
    if options.cacert:
        checks.append((f"--cluster-etcd-cacert {options.cacert}",
                       lambda: context.load_verify_locations(cafile=options.cacert)))
    if options.cert:
        checks.append((f"--cluster-etcd-cert {options.cert} and --cluster-etcd-key "
                       f"{options.key}",
                       lambda: context.load_cert_chain(options.cert or "", options.key)))
    for what, check in checks:
        try:
            check()
        except OSError as exc:  # ssl.SSLError too
            if isinstance(exc, ssl.SSLError):
                reason = exc.reason or "not a PEM certificate or key"
            else:
                reason = exc.strerror or str(exc)
            raise ClusterError(f"cannot use {what} for etcd: {reason}") from None
    return (_read(options.cacert), _read(options.key), _read(options.cert))


def _read(path: str | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()


class _Auth:
    """The etcd user, its password and the token etcd last issued."""

    def __init__(self, user: str, password: str, timeout: float | None) -> None:
        self.user = user
        self._password = password
        self._timeout = timeout
        self.token: str | None = None
        self.stub: Any = None  # rpc.AuthStub on the client's channel
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"_Auth(user={self.user!r})"

    async def renew(self, stale: str | None, why: str = "") -> str:
        """A token in place of ``stale`` (one Authenticate however many callers found it
        stale at once).

        Raises:
            AuthenticationFailed: wrong user or password, or etcd's auth not enabled;
                grpc.aio.AioRpcError: etcd unreachable.
        """
        async with self._lock:
            if self.token is not None and self.token != stale:
                return self.token  # another call has just renewed it
            try:
                answer = await self.stub.Authenticate(
                    rpc.AuthenticateRequest(name=self.user, password=self._password),
                    timeout=self._timeout)
            except grpc.aio.AioRpcError as exc:
                # a wrong user or password; auth not enabled in etcd (a node given a user
                # expects it: it does not go on with an etcd anyone may write)
                if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT,
                                  grpc.StatusCode.FAILED_PRECONDITION):
                    raise AuthenticationFailed(exc.details()) from None
                raise
            if why:
                log.info("etcd: authenticated again as %s (%s)", self.user, why)
            self.token = answer.token
            return self.token


def _stale(exc: grpc.aio.AioRpcError) -> bool:
    """etcd refused a call for its token (and applied nothing)."""
    details = exc.details() or ""
    return (exc.code() == grpc.StatusCode.UNAUTHENTICATED and "auth token" in details) or \
        "revision of auth store is old" in details


def _with_token(details: Any, token: str) -> Any:
    metadata = grpc.aio.Metadata(*[(k, v) for k, v in (details.metadata or ()) if k != "token"],
                                 ("token", token))
    return details._replace(metadata=metadata)


def _method(details: Any) -> str:
    method = details.method
    return method.decode() if isinstance(method, bytes) else str(method)


class _UnaryToken(grpc.aio.UnaryUnaryClientInterceptor):
    """Puts the token in every unary call; one refused for its token is sent again with a
    new one (see the module docstring)."""

    def __init__(self, auth: _Auth) -> None:
        self.auth = auth

    async def intercept_unary_unary(self, continuation: Any, details: Any,
                                    request: Any) -> Any:
        if _method(details) == AUTHENTICATE:
            return await continuation(details, request)
        token = self.auth.token or await self.auth.renew(None)
        call = await continuation(_with_token(details, token), request)
        try:
            await call
            return call
        except grpc.aio.AioRpcError as exc:
            if not _stale(exc):
                raise
            why = exc.details()
        token = await self.auth.renew(token, why)
        return await continuation(_with_token(details, token), request)


class _StreamToken(grpc.aio.StreamStreamClientInterceptor):
    """Puts the token in every stream (Watch, LeaseKeepAlive); a Watch gets a new one."""

    def __init__(self, auth: _Auth) -> None:
        self.auth = auth

    async def intercept_stream_stream(self, continuation: Any, details: Any,
                                      request_iterator: Any) -> Any:
        # etcd checks a watch's token only when it is created, and aetcd would miss the
        # refusal: a fresh token for every Watch stream (a node opens one, again after a break)
        if _method(details) != WATCH:
            token = self.auth.token or await self.auth.renew(None)
            return await continuation(_with_token(details, token), request_iterator)
        token = await self.auth.renew(self.auth.token)
        return _refusals_raised(await continuation(_with_token(details, token),
                                                   request_iterator))


async def _refusals_raised(call: Any) -> AsyncIterator[Any]:
    """A Watch stream's answers, but a watch refused at creation (etcd answers "created"
    and "canceled" at once: permission denied, invalid token) raises :class:`WatchRefused`
    (aetcd would report the watch created and wait for its events forever)."""
    async for response in call:
        if response.created and response.canceled and not response.compact_revision:
            raise WatchRefused(response.cancel_reason or "watch refused by etcd")
        yield response


class EtcdClient(aetcd.Client):
    """``aetcd.Client`` over ``http://`` or ``https://`` (TLS, optionally a client
    certificate), with etcd's user/password auth when ``options.user`` is set.

    Args:
        options: the ``--cluster-etcd*`` options (URL checked by :func:`parse_etcd_url`).
        password: the user's password (:func:`read_secret_file`); None without a user.
        timeout: seconds for each call.

    Raises:
        ClusterError: a TLS file unreadable or not PEM.
    """

    def __init__(self, options: EtcdOptions, password: str | None,
                 timeout: float = 5) -> None:
        host, port, secure = parse_etcd_url(options.url or "")
        super().__init__(host=host, port=port, timeout=timeout, connect_wait_timeout=3)
        self._tls = _tls_files(options) if secure else None
        self._auth = _Auth(options.user, password or "", timeout) if options.user else None

    async def connect(self) -> None:
        """Open the channel (and authenticate: a wrong password fails here).

        Raises:
            AuthenticationFailed: etcd refused the user or password;
            aetcd.exceptions.ClientError: etcd unreachable (or refused the TLS handshake).
        """
        if self._connected.is_set():
            return
        if self._is_connecting:  # another task is connecting: wait for it
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        self._is_connecting = True
        try:
            target = f"{self._host}:{self._port}"
            # (grpc.aio files an interceptor under one kind of call only: one object each)
            interceptors: list[Any] = [] if self._auth is None else \
                [_UnaryToken(self._auth), _StreamToken(self._auth)]
            if self._tls is None:
                self.channel = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS,
                                                         interceptors=interceptors)
            else:
                self.channel = grpc.aio.secure_channel(
                    target, grpc.ssl_channel_credentials(*self._tls), options=CHANNEL_OPTIONS,
                    interceptors=interceptors)
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout)
            if self._auth is not None:
                self._auth.stub = rpc.AuthStub(self.channel)
                try:
                    await self._auth.renew(None)
                except grpc.aio.AioRpcError as exc:
                    raise aetcd.exceptions.ClientError(exc.details()) from None
            self._connected.set()
        except BaseException:
            if self.channel is not None:
                await self.channel.close()
            self._init_channel_attrs()
            raise
        finally:
            self._is_connecting = False

    async def key_revisions(self, prefix: bytes, page: int = 5000
                            ) -> AsyncIterator[list[tuple[bytes, int]]]:
        """``(key, create revision)`` of the keys under ``prefix`` in key order, ``page`` at a
        time (keys only: a log of 100,000 records is read in pages, never in one answer).
        Raises aetcd.exceptions.ClientError (etcd unreachable)."""
        end = aetcd.utils.prefix_range_end(prefix)
        start = prefix
        while True:
            request = rpc.RangeRequest(key=start, range_end=end, limit=page, keys_only=True)
            response = await self.kvstub.Range(request, timeout=self._timeout)
            keys = [(bytes(kv.key), int(kv.create_revision)) for kv in response.kvs]
            if keys:
                yield keys
            if not response.more or not keys:
                return
            start = keys[-1][0] + b"\0"


def open_client(options: EtcdOptions) -> EtcdClient:
    """The node's etcd client (not connected yet), the password read from its file.

    Raises:
        ClusterError: the password file or a TLS file cannot be used.
    """
    password = read_secret_file(Path(options.password_file)) if options.password_file else None
    return EtcdClient(options, password)
