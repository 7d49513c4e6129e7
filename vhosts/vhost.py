"""A virtual host: its exchanges, queues and bindings, and routing between them.

Every topology operation a channel performs lands here and raises the same errors, with the
same texts, as RabbitMQ's ``rabbit_channel``/``rabbit_exchange``/``rabbit_amqqueue``:

* 404 NOT_FOUND ``no queue 'q' in vhost '/'`` / ``no exchange 'x' in vhost '/'``;
* 406 PRECONDITION_FAILED ``inequivalent arg 'durable' for queue 'q' in vhost '/': received
  'true' but current is 'false'`` on a redeclare with other properties;
* 403 ACCESS_REFUSED for the reserved ``amq.*`` prefix and the default exchange;
* 405 RESOURCE_LOCKED for another connection's exclusive queue.

Routing (:meth:`VirtualHost.route`) follows exchange-to-exchange bindings with a visited set
(so cycles end) and an exchange's ``alternate-exchange`` when it routes to nothing; a queue
reached several ways receives the message once (the walk beyond the first exchange is
:mod:`vhosts.routing`'s).

Source: AMQP 0-9-1 spec 1.6-1.7; https://www.rabbitmq.com/docs/vhosts, /docs/e2e, /docs/ae.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from amqp_common.errors import AccessRefused, NotFound, PreconditionFailed, rs
from amqp_common.timers import Timers
from exchanges import EXCHANGE_TYPES, make_exchange_type
from exchanges.binding import Binding, Destination
from exchanges.deduplication import DuplicateMessage
from exchanges.exchange import Exchange
from queue_store.dead_letter import dead_letter_message, is_cycle
from queue_store.message import FLAG_HEADERS, Message
from queue_store.outcomes import DUPLICATE, ROUTED, UNROUTABLE, PublishContext
from queue_store.queue import Queue
from queue_store.queue_args import (
    QueueSettings,
    queue_type_of,
    resolve_settings,
    validate_queue_arguments,
)
from queue_store.sender_selected import extra_routing_keys, without_bcc
from queue_store.storage import VhostStorage
from vhosts import dedup_persistence
from vhosts.delayed import attach as attach_delayed
from vhosts.delayed import message_delay
from vhosts.equivalence import QUEUE_EQUIVALENCE_ARGS, assert_args_equivalent, inequivalent
from vhosts.limits import Limits
from vhosts.names import (
    DEFAULT_EXCHANGES,
    check_name,
    check_not_default_exchange,
    check_server_named_allowed,
    server_generated_name,
)
from vhosts.policies import (
    Policy,
    matching_policy,
    validate_operator_policy,
    validate_policy,
)
from vhosts.queue_factory import LOCAL_QUEUES, QueueFactory
from vhosts.routing import route_keys, walk

log = logging.getLogger("amqpq.vhost")

class VirtualHost:
    """One vhost's topology (exchanges, queues, bindings) and router.

    Args:
        name: vhost name, e.g. ``"/"``.
        timers: the broker's timers (queue TTL, x-expires).
        storage: the vhost's message store and queue indexes (None: nothing on disk).
        limits: the broker's vhost and user limits (default: none).
        queue_factory: builds its new queues and hears of removed ones (default: every
            queue built here, as with one process; the broker's forwards to its worker or
            cluster runtime).
    """

    def __init__(self, name: str, timers: Timers | None = None,
                 storage: VhostStorage | None = None, limits: Limits | None = None,
                 queue_factory: QueueFactory = LOCAL_QUEUES) -> None:
        self.name = name
        self.timers = timers or Timers()
        self.storage = storage
        self.limits = limits or Limits()  # the broker's vhost/user limits
        self.changed: Callable[[], None] = lambda: None  # topology changed (persist it)
        self.queue_factory = queue_factory
        self.policies: dict[str, Policy] = {}
        self.operator_policies: dict[str, Policy] = {}
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        self.queues_declared = self.queues_created = self.queues_deleted = 0  # stats
        # bindings by destination, so deleting a queue/exchange finds its inbound bindings
        self._inbound: dict[Destination, dict[Any, Binding]] = {}
        for xname, xtype in DEFAULT_EXCHANGES.items():
            self.exchanges[xname] = Exchange(xname, xtype, durable=True)

    # ---- lookups -------------------------------------------------------------------------

    def exchange(self, name: str) -> Exchange:
        """The exchange ``name``. Raises NotFound (404)."""
        x = self.exchanges.get(name)
        if x is None:
            raise NotFound(f"no {rs('exchange', name, self.name)}")
        return x

    def queue(self, name: str, connection: object | None = None) -> Queue:
        """The queue ``name``, checked for exclusive access by ``connection`` when given.

        Raises:
            NotFound (404), ResourceLocked (405).
        """
        q = self.queues.get(name)
        if q is None:
            raise NotFound(f"no {rs('queue', name, self.name)}")
        if connection is not None:
            q.check_exclusive_access(connection)
        return q

    # ---- exchanges -----------------------------------------------------------------------

    def declare_exchange(
        self,
        name: str,
        type_name: str,
        passive: bool = False,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> Exchange:
        """Exchange.Declare (spec 1.6.2.1), RabbitMQ's checks in RabbitMQ's order.

        Raises:
            AccessRefused (403): default exchange, or a new ``amq.*`` name.
            NotFound (404): passive and missing.
            PreconditionFailed (406): exists with other type/durable/auto_delete/internal or
                alternate-exchange.
            CommandInvalid (503): unknown exchange type.
        """
        check_not_default_exchange(name)
        if passive:
            return self.exchange(name)
        if type_name not in EXCHANGE_TYPES:  # RabbitMQ checks the type before the name
            make_exchange_type(type_name)
        arguments = arguments or {}
        x = self.exchanges.get(name)
        if x is None:
            check_name("exchange", name)
            x = Exchange(name, type_name, durable, auto_delete, internal, arguments,
                         self.timers.clock)
            self.exchanges[name] = x
            attach_delayed(self, x)  # x-delayed-message: its held messages
            dedup_persistence.attach(self, x)  # x-cache-persistence: disk
            self._apply_exchange_policy(x)
            self.changed()
            return x
        what = rs("exchange", name, self.name)
        if x.type_name != type_name:
            raise inequivalent("type", what, type_name, x.type_name)
        for field, want, have in (
            ("durable", durable, x.durable),
            ("auto_delete", auto_delete, x.auto_delete),
            ("internal", internal, x.internal),
        ):
            if want != have:
                raise inequivalent(field, what, str(want).lower(), str(have).lower())
        assert_args_equivalent(arguments, x.arguments, what, ("alternate-exchange",))
        return x

    def delete_exchange(self, name: str, if_unused: bool = False) -> None:
        """Exchange.Delete (spec 1.6.2.3); deleting a missing exchange succeeds (3.x).

        Raises:
            AccessRefused (403): the default exchange or an ``amq.*`` system exchange.
            PreconditionFailed (406): if_unused and it has bindings.
        """
        check_not_default_exchange(name)
        if name.startswith("amq."):
            raise AccessRefused(f"deletion of system {rs('exchange', name, self.name)} not allowed")
        x = self.exchanges.get(name)
        if x is None:
            return
        if if_unused and x.bindings:
            raise PreconditionFailed(f"{rs('exchange', name, self.name)} in use")
        self._remove_exchange(x)

    def _remove_exchange(self, x: Exchange) -> None:
        self.exchanges.pop(x.name, None)
        self.changed()
        if x.delayed is not None:  # its held messages go with it (as the plugin's)
            x.delayed.destroy()
        dedup_persistence.forget(self, x)
        for binding in list(x.bindings.values()):
            self._drop_binding(x, binding, cascade=False)
        for binding in list(self._inbound.get(Destination("exchange", x.name), {}).values()):
            source = self.exchanges.get(binding.source)
            if source is not None:
                self._drop_binding(source, binding)
        self._inbound.pop(Destination("exchange", x.name), None)

    # ---- queues --------------------------------------------------------------------------

    def declare_queue(
        self,
        name: str,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        connection: object | None = None,
        server_named: bool = False,
        home: int | None = None,
    ) -> Queue:
        """Queue.Declare (spec 1.7.2.1). An empty name gets a server-generated ``amq.gen-``
        name (``server_named``: the caller generated ``name`` itself). The caller reads ``message_count``/``consumer_count`` for DeclareOk.
        ``home``: where a new queue lives (the ordered record's worker or node; None: the
        queue factory decides).

        Raises:
            NotFound (404): passive and missing.
            AccessRefused (403): a name with the ``amq.`` prefix.
            ResourceLocked (405): exclusive to another connection, or exclusivity differs.
            PreconditionFailed (406): exists with other durable/auto_delete/x-arguments, or
                the vhost's ``max-queues`` limit is reached by a new queue.
        """
        if passive:
            q = self.queue(name)
            if q.exclusive and q.exclusive_owner is not connection:
                q.check_exclusive_access(connection)
            q.touch()
            return q
        self.queues_declared += 1
        arguments = arguments or {}
        if name == "":
            check_server_named_allowed(arguments)
            name = server_generated_name("amq.gen-")
        elif not server_named:
            check_name("queue", name)
        what = rs("queue", name, self.name)
        q = self.queues.get(name)
        if q is None:
            limit = self.limits.vhost(self.name, "max-queues")
            if limit is not None and len(self.queues) >= limit:
                raise PreconditionFailed(f"cannot declare queue '{name}': queue limit in vhost "
                                         f"'{self.name}' ({limit}) is reached")
            validate_queue_arguments(arguments, what)  # RabbitMQ validates new queues only
            if queue_type_of(arguments) in ("quorum", "stream"):
                for refused, prop in ((not durable, "non-durable"),
                                      (exclusive, "exclusive-owner"),
                                      (auto_delete, "auto-delete")):
                    if refused:
                        raise PreconditionFailed(f"invalid property '{prop}' for {what}")
            q = self.queue_factory.make_queue(
                name,
                self.name,
                home,
                durable=durable,
                exclusive=exclusive,
                auto_delete=auto_delete,
                exclusive_owner=connection if exclusive else None,
                arguments=arguments,
                settings=self._queue_settings(name, arguments),
                vhost=self,
            )
            self.queues[name] = q
            self.queues_created += 1
            self.changed()
            return q
        # strict exclusive check: the requested owner must be the current one
        if q.exclusive_owner is not (connection if exclusive else None):
            raise q.locked_error()
        for field, want, have in (
            ("durable", durable, q.durable),
            ("auto_delete", auto_delete, q.auto_delete),
        ):
            if want != have:
                raise inequivalent(field, what, str(want).lower(), str(have).lower())
        assert_args_equivalent(arguments, q.arguments, what, QUEUE_EQUIVALENCE_ARGS)
        q.touch()
        return q

    def delete_queue(
        self,
        name: str,
        if_unused: bool = False,
        if_empty: bool = False,
        connection: object | None = None,
        everywhere: bool = False,
    ) -> int:
        """Queue.Delete (spec 1.7.2.9); returns the ready messages dropped. A missing queue
        returns 0 (RabbitMQ 3.x). ``everywhere``: see :meth:`remove_queue`.

        Raises:
            ResourceLocked (405), PreconditionFailed (406): in use / not empty.
        """
        q = self.queues.get(name)
        if q is None:
            return 0
        if connection is not None:
            q.check_exclusive_access(connection)
        if if_unused and q.consumer_count:
            raise PreconditionFailed(f"{rs('queue', name, self.name)} in use")
        if if_empty and q.message_count:
            raise PreconditionFailed(f"{rs('queue', name, self.name)} not empty")
        return self.remove_queue(q, everywhere)

    def remove_queue(self, q: Queue, everywhere: bool = False) -> int:
        """Delete ``q`` without checks: bindings removed, consumers told (Basic.Cancel).
        ``everywhere``: every worker (node) removes it by the same ordered record or change;
        False: this process removed it by itself (the queue factory tells the others)."""
        if self.queues.get(q.name) is not q:
            return 0
        del self.queues[q.name]
        self.queues_deleted += 1
        self.changed()
        count = q.message_count
        for consumer in q.mark_deleted():
            consumer.channel.consumer_cancelled_by_broker(consumer)
        dest = Destination("queue", q.name)
        for binding in list(self._inbound.pop(dest, {}).values()):
            source = self.exchanges.get(binding.source)
            if source is not None:
                self._drop_binding(source, binding)
        self.queue_factory.queue_removed(q, everywhere)
        return count

    # ---- callbacks from queues (QueueHost) -----------------------------------------------

    def queue_unused(self, queue: Queue) -> None:
        """An auto-delete queue lost its last consumer: delete it."""
        self.remove_queue(queue)

    def queue_expired(self, queue: Queue) -> None:
        """``x-expires`` passed with the queue unused: delete it."""
        if not queue.consumer_count:
            log.info("%s expired (x-expires)", rs("queue", queue.name, self.name))
            self.remove_queue(queue)

    def dead_letter(self, queue: Queue, message: Message, reason: str) -> None:
        """Republish ``message`` (dead in ``queue`` for ``reason``) to the queue's
        dead-letter exchange, if it has one that exists; otherwise it is dropped."""
        s = queue.settings
        dlx = s.dead_letter_exchange
        if dlx is None:
            return
        x = self.exchanges.get(dlx) if dlx else None
        if dlx and x is None:
            log.warning("dead-letter exchange %s not found; message dropped",
                        rs("exchange", dlx, self.name))
            return
        out, keys = dead_letter_message(message, reason, queue.name, dlx,
                                        s.dead_letter_routing_key, self.timers.wall_ms())
        self.publish(x, out, keys, accept=lambda q: not is_cycle(out, q.name))

    # ---- policies ------------------------------------------------------------------------

    def _queue_settings(self, name: str, arguments: dict[str, Any]) -> QueueSettings:
        kind = queue_type_of(arguments)
        policy = matching_policy(self.policies, "queue", name, kind)
        operator = matching_policy(self.operator_policies, "queue", name, kind)
        return resolve_settings(
            arguments, policy.name if policy else None, policy.definition if policy else None,
            operator.name if operator else None, operator.definition if operator else None)

    def _apply_exchange_policy(self, x: Exchange) -> None:
        policy = matching_policy(self.policies, "exchange", x.name)
        value = policy.definition.get("alternate-exchange") if policy else None
        x.policy_alternate_exchange = value if isinstance(value, str) else None

    def set_policy(self, name: str, pattern: str, definition: dict[str, Any],
                   priority: int = 0, apply_to: str = "all") -> Policy:
        """Add or replace a policy and apply it to matching queues and exchanges now.

        Raises:
            PolicyError: bad pattern, apply-to or definition value (nothing changes).
        """
        policy = Policy(name, pattern, dict(definition), priority, apply_to)
        validate_policy(policy)
        self.policies[name] = policy
        self._reapply_policies()
        return policy

    def set_operator_policy(self, name: str, pattern: str, definition: dict[str, Any],
                            priority: int = 0, apply_to: str = "queues") -> Policy:
        """Add or replace an operator policy (limits that users' policies and arguments
        cannot exceed) and apply it now.

        Raises:
            PolicyError: bad pattern, apply-to, a key that is not a limit, or a bad value.
        """
        policy = Policy(name, pattern, dict(definition), priority, apply_to)
        validate_operator_policy(policy)
        self.operator_policies[name] = policy
        self._reapply_policies()
        return policy

    def clear_operator_policy(self, name: str) -> bool:
        """Remove an operator policy (False if there was none)."""
        if self.operator_policies.pop(name, None) is None:
            return False
        self._reapply_policies()
        return True

    def clear_policy(self, name: str) -> bool:
        """Remove a policy (False if there was none) and re-resolve everything it touched."""
        if self.policies.pop(name, None) is None:
            return False
        self._reapply_policies()
        return True

    def _reapply_policies(self) -> None:
        self.changed()
        for q in list(self.queues.values()):
            q.apply_settings(self._queue_settings(q.name, q.arguments))
        for x in self.exchanges.values():
            self._apply_exchange_policy(x)

    # ---- bindings ------------------------------------------------------------------------

    def bind(
        self,
        destination: Destination,
        source: str,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
        connection: object | None = None,
    ) -> None:
        """Queue.Bind / Exchange.Bind (spec 1.7.2.3, RabbitMQ e2e extension).

        Raises:
            AccessRefused (403): binding to or from the default exchange.
            NotFound (404): source or destination missing.
            ResourceLocked (405): exclusive queue of another connection.
            PreconditionFailed (406): the exchange type refuses the binding arguments.
        """
        check_not_default_exchange(source)
        self._check_destination(destination, connection)
        x = self.exchange(source)
        binding = Binding(source, destination, routing_key, dict(arguments or {}))
        if x.add_binding(binding):
            self._inbound.setdefault(destination, {})[binding.key] = binding
            self.changed()

    def unbind(
        self,
        destination: Destination,
        source: str,
        routing_key: str,
        arguments: dict[str, Any] | None = None,
        connection: object | None = None,
    ) -> None:
        """Queue.Unbind / Exchange.Unbind: idempotent, as in RabbitMQ 3.x.

        Unbinding from or to a missing exchange or queue, or a binding that does not exist,
        succeeds and changes nothing (``rabbit_binding:remove/3`` treats a missing binding as
        done; aio-pika unbinds in teardown after deleting the queue). The destination's
        exclusivity is only checked when the binding exists, as RabbitMQ 3.10.8 does.

        Raises:
            AccessRefused (403): the default exchange as source or destination.
            ResourceLocked (405): the binding exists and its queue is another connection's
                exclusive queue.
        """
        check_not_default_exchange(source)
        if destination.kind == "exchange":
            check_not_default_exchange(destination.name)
        x = self.exchanges.get(source)
        binding = Binding(source, destination, routing_key, dict(arguments or {}))
        if x is None or binding.key not in x.bindings:
            return
        self._check_destination(destination, connection)
        self._drop_binding(x, x.bindings[binding.key])

    def _check_destination(self, destination: Destination, connection: object | None) -> None:
        if destination.kind == "queue":
            self.queue(destination.name, connection)
        else:
            check_not_default_exchange(destination.name)
            self.exchange(destination.name)

    def _drop_binding(self, source: Exchange, binding: Binding, cascade: bool = True) -> None:
        source.remove_binding(binding)
        self.changed()
        inbound = self._inbound.get(binding.destination)
        if inbound is not None:
            inbound.pop(binding.key, None)
            if not inbound:
                del self._inbound[binding.destination]
        # an auto-delete exchange goes with its last binding (RabbitMQ auto_delete semantics)
        if cascade and source.auto_delete and not source.bindings:
            self._remove_exchange(source)

    def bindings(self) -> list[Binding]:
        """Every explicit binding in this vhost (not the default exchange's implicit ones)."""
        return [b for x in self.exchanges.values() for b in x.bindings.values()]

    # ---- routing -------------------------------------------------------------------------

    def publish(self, exchange: Exchange | None, message: Message,
                routing_keys: list[str] | None = None,
                accept: Callable[[Queue], bool] | None = None, mandatory: bool = False,
                context: PublishContext | None = None, released: bool = False) -> int:
        """Route ``message`` and enqueue it: the one entry point of every producer (AMQP
        Basic.Publish, the HTTP API's publish, dead lettering).

        Args:
            exchange: None for the default exchange (the caller checked permissions and
                the exchange's ``internal`` flag).
            routing_keys: the keys to route with; None: the message's routing key plus its
                ``CC``/``BCC`` headers (sender-selected distribution; ``BCC`` is removed
                before the message is stored).
            accept: a filter on the queues reached (dead lettering's cycle check).
            mandatory: Basic.Publish's flag; read only by an ``x-delayed-message`` exchange,
                which then returns a message it cannot route now instead of holding it.
            context: this publish's publisher and the answers it waits for (filled in:
                ``context.waits``), given only with worker processes or a cluster; a dead
                letter made meanwhile is a publish of its own, outside it.
            released: an ``x-delayed-message`` exchange releases a message it held: routed
                now, whatever its ``x-delay``.

        Returns:
            :class:`~queue_store.outcomes.PublishResult` bits as a plain int: ``ROUTED``
            when a queue was reached, ``REJECTED`` when one refused it (reject-publish),
            ``NEEDS_SYNC`` when one wrote it to disk, ``REMOTE`` when an answer is awaited
            (its key in ``context.waits``); ``DUPLICATE`` alone when a deduplication
            exchange dropped it; 0 when unroutable.
        """
        try:  # zero cost unless an x-message-deduplication exchange drops a duplicate
            if routing_keys is None:
                rk = message.routing_key
                if exchange is None:
                    q = self.queues.get(rk)
                    if (q is not None and accept is None
                            and not message.flags & FLAG_HEADERS):  # no CC/BCC: one queue
                        if context is None:
                            return ROUTED | q.publish(message)
                        return ROUTED | q.publish_for(message, context)
                    queues = [q] if q is not None else []
                else:
                    exchange.published += 1
                    delayed = exchange.delayed
                    if delayed is not None and not released:  # x-delayed-message
                        delay = message_delay(message)  # (vhosts/delayed.py)
                        if delay > 0:
                            return int(delayed.hold(message, delay, mandatory))
                    queues = self.route(exchange, rk, message)
                extra = extra_routing_keys(message)
                if extra:
                    queues = route_keys(self, exchange, extra, message, queues, True)
                    message = without_bcc(message)
            else:
                if exchange is not None:
                    exchange.published += 1
                queues = route_keys(self, exchange, routing_keys, message, [])
        except DuplicateMessage:
            return DUPLICATE
        if accept is not None:
            queues = [q for q in queues if accept(q)]
        if not queues:
            if exchange is not None:
                exchange.unroutable += 1
            return UNROUTABLE
        result = ROUTED
        if context is None:
            for q in queues:
                result |= q.publish(message)
        else:
            for q in queues:
                result |= q.publish_for(message, context)
        return result

    def route(self, exchange: Exchange, routing_key: str, message: Message) -> list[Queue]:
        """The queues a message published to ``exchange`` reaches, each once.

        Follows exchange-to-exchange bindings (each exchange visited once) and alternate
        exchanges of exchanges that route to nothing (:func:`vhosts.routing.walk`). Raises DuplicateMessage when an
        ``x-message-deduplication`` exchange on the way dropped it and no queue was reached.
        """
        router = exchange.router
        if router.needs_message:  # x-consistent-hash: may hash a property
            dests = router.route_message(routing_key, message)
        else:
            dests = router.route(routing_key, message.headers if router.needs_headers else None)
        queues = self.queues
        if all(d.kind == "queue" for d in dests) and (dests or exchange.alternate_exchange is None):
            out = []
            for d in dests:
                q = queues.get(d.name)
                if q is not None:
                    out.append(q)
            return out
        return walk(self.exchanges, queues, exchange, dests, routing_key, message)

    def route_default(self, routing_key: str) -> list[Queue]:
        """The default exchange: the queue named by the routing key, if any."""
        q = self.queues.get(routing_key)
        return [q] if q is not None else []
