"""The broker's shared state: configuration, vhosts, users, live connections.

Everything here runs on the event-loop thread; it holds no sockets. What it needs from the
world (clock, timer wakeups, a runner for blocking fsyncs, storage, resource probes) comes in
a :class:`~broker.environment.BrokerEnvironment` at construction.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from amqp_common.timers import Timers
from broker.alarms import Alarms
from broker.config import BrokerConfig
from broker.direct_reply_to import ReplyToRegistry
from broker.environment import BrokerEnvironment
from broker.message_stats import MessageTotals
from broker.peers import ClusterMembership, Workers
from broker.persistence import TopologyStore
from queue_store.durability import Durability
from queue_store.ram_budget import RamBudget
from queue_store.storage import VhostStorage, name_id
from vhosts.extras import DefinitionExtras
from vhosts.limits import Limits
from vhosts.permissions import PermissionStore
from vhosts.queue_factory import BrokerQueues
from vhosts.users import UserStore
from vhosts.vhost import VirtualHost

if TYPE_CHECKING:
    from amqp_server.connection import Connection


class Broker:
    """State shared by all connections of one broker.

    Args:
        config: settings; the default user and vhost are created from it.
        env: clock, timer wakeup, blocking-work runner, storage, resource probes (default:
            :class:`BrokerEnvironment`'s, all in memory, no alarms).

    Attributes:
        timers: deadlines on ``env.clock``; ``env.wakeup`` hears of each new earliest one.
        durability: group commit over the message stores, fsyncs run by
            ``env.run_blocking``.
        topology: keeps ``definitions.json`` in ``config.data_dir`` (None without storage).
        alarms: memory and disk alarms measured with ``env.resources`` (None without).
        extras: vhost metadata and runtime parameters (definitions the core does not use).
        topology_version: bumped by every change of the definitions (:meth:`mark_changed`);
            ``topology`` saves only when it moved past the version it last wrote.
    """

    def __init__(self, config: BrokerConfig | None = None,
                 env: BrokerEnvironment | None = None) -> None:
        self.config = config or BrokerConfig()
        self.env = env or BrokerEnvironment()
        self.timers = Timers(self.env.clock, self.env.wakeup, self.env.wall)
        self.durability = Durability(self.env.run_blocking)
        self.durability.on_synced = self.flush_confirms
        self.storage_enabled = self.env.storage
        self.ram_budget = RamBudget()  # the paging queues' shared RAM budget
        self.topology: TopologyStore | None = None
        if self.env.storage:
            self.topology = TopologyStore(self, Path(self.config.data_dir))
        self.topology_dirty = False  # changed during the current batch of input
        self.topology_version = 0
        self.alarms_active = False
        self.alarm_reason = "low on memory"
        self.alarms: Alarms | None = None
        if self.env.resources is not None:
            self.alarms = Alarms(Path(self.config.data_dir), self.config.memory_high_watermark,
                                 self.config.disk_free_limit, on_change=self._alarm_changed,
                                 on_paging=self.set_memory_pressure,
                                 rss=self.env.resources.rss,
                                 disk_free=self.env.resources.disk_free)
            self.durability.write_errors.on_change = self.alarms.write_failed
        self.extras = DefinitionExtras()
        self.vhosts: dict[str, VirtualHost] = {}
        self.users = UserStore(self.config.loopback_users)
        self.permissions = PermissionStore()
        self.limits = Limits()
        self.connections: set[Connection] = set()
        self.message_totals = MessageTotals()  # closed channels' counts, churn (stats)
        self.reply_to = ReplyToRegistry()
        # the runtime when this broker is one of several worker processes or cluster nodes
        # (amqp_server.workers.runtime, a layer above; what is called on it: broker.peers);
        # None with one worker
        self.workers: Workers | None = None
        # the node's membership with --cluster-etcd (amqp_server.cluster.membership); None
        # for a single node
        self.cluster: ClusterMembership | None = None
        # a broker of one process without a cluster: its maintenance mode (drain/revive,
        # amqp_server.node_maintenance, set by the server); None otherwise
        self.maintenance: Any = None
        # builds every vhost's queues: locally until a worker or cluster runtime is plugged
        # in (once, before any queue exists: WorkerRuntime's constructor)
        self.queue_factory = BrokerQueues()
        self.add_vhost(self.config.default_vhost)
        self.users.add(self.config.default_user, self.config.default_pass, ["administrator"])
        self.permissions.set(self.config.default_user, self.config.default_vhost, ".*", ".*",
                             ".*")

    def add_vhost(self, name: str) -> VirtualHost:
        """Create vhost ``name`` (idempotent) with its predeclared ``amq.*`` exchanges.

        Raises:
            ValueError: an empty name.
        """
        if not name:
            raise ValueError("vhost name must not be empty")
        vhost = self.vhosts.get(name)
        if vhost is None:
            storage = None
            if self.storage_enabled:
                directory = self.config.data_dir / "vhosts" / name_id(name)
                storage = VhostStorage(directory, self.durability,
                                       self.config.queue_index_embed_msgs_below,
                                       self.ram_budget)
            vhost = self.vhosts[name] = VirtualHost(name, self.timers, storage, self.limits,
                                                    self.queue_factory)
            vhost.changed = self.mark_changed
            self.mark_changed()
        return vhost

    def _alarm_changed(self, active: bool) -> None:
        alarms = self.alarms
        disk_only = alarms is not None and alarms.disk and not alarms.memory
        reason = "low on disk" if disk_only else "low on memory"
        if self.workers is not None:  # one view over every worker: the runtime decides
            self.workers.local_alarm(active, reason)
        else:
            self.set_alarm(active, reason)

    def set_alarm(self, active: bool, reason: str = "low on memory") -> None:
        """A memory/disk alarm went on or off: block or unblock publishing connections."""
        self.alarms_active = active
        self.alarm_reason = reason
        for conn in list(self.connections):
            conn.set_blocked(active, reason)

    def set_memory_pressure(self, on: bool) -> None:
        """Past the paging threshold: queues keep fewer messages in RAM."""
        for vhost in self.vhosts.values():
            for queue in vhost.queues.values():
                queue.ready.set_memory_pressure(on)

    def mark_changed(self) -> None:
        """Definitions changed: persist them at the end of this batch of input."""
        self.topology_dirty = True
        self.topology_version += 1

    def after_batch(self) -> None:
        """End of a batch of input: write records, persist definitions changed by it."""
        self.durability.flush_writes()
        if self.topology_dirty:
            self.topology_dirty = False
            self.save_topology()

    def save_topology(self) -> bool:
        """Save the definitions if they changed since the last successful save (a failed
        save is logged once per run of failures and retried at the next call); False when
        there was nothing to save, no storage, or the write failed."""
        return self.topology is not None and self.topology.save()

    def tick(self) -> None:
        """Once a second: retry a failed definitions save, re-read memory and disk for the
        alarms, share the paging queues' RAM budget among them, apply stream retention, start an fsync round if anything waits for one (and retry failed writes).

        Raises:
            whatever an alarm callback or the durability round raises (the caller logs it).
        """
        self.save_topology()
        if self.alarms is not None:
            self.alarms.check()
        self.ram_budget.rebalance()
        for vhost in self.vhosts.values():
            for q in vhost.queues.values():
                if q.kind == "stream":
                    q.tick()  # type: ignore[attr-defined]
        self.durability.maybe_sync()

    def flush_confirms(self) -> None:
        """Send the publisher confirms that became due (after an fsync round)."""
        for conn in list(self.connections):
            conn.flush_confirms()

    def delete_vhost(self, name: str) -> bool:
        """Delete a vhost with everything in it; its connections are closed with 320
        CONNECTION_FORCED. False when it did not exist."""
        vhost = self.vhosts.pop(name, None)
        if vhost is None:
            return False
        self.mark_changed()
        for conn in list(self.connections):
            if conn.vhost_name == name:
                conn.close(320, f"CONNECTION_FORCED - vhost '{name}' is deleted")
        for queue in list(vhost.queues.values()):  # every worker (node) deletes the vhost
            vhost.remove_queue(queue, everywhere=True)
        for x in vhost.exchanges.values():
            if x.delayed is not None:  # x-delayed-message: stop its timer, drop its messages
                x.delayed.destroy()
        if vhost.storage is not None:
            vhost.storage.destroy()
        self.message_totals.vhost_deleted(name, vhost.queues_declared, vhost.queues_created,
                                          vhost.queues_deleted)
        self.limits.clear("vhost", name)
        self.permissions.forget_vhost(name)
        self.extras.forget_vhost(name)
        return True

    def delete_user(self, name: str) -> bool:
        """Delete a user and its permissions; its connections are closed (320)."""
        if not self.users.delete(name):
            return False
        self.limits.clear("user", name)
        self.permissions.forget_user(name)
        for conn in list(self.connections):
            if conn.user == name:
                conn.close(320, f"CONNECTION_FORCED - user '{name}' is deleted")
        return True
