"""The broker's shared state: configuration, vhosts, users, live connections.

Everything here runs on the event-loop thread; it holds no sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from amqp_server.config import BrokerConfig
from amqp_server.direct_reply_to import ReplyToRegistry
from amqp_server.timers import Timers
from queue_store.durability import Durability
from queue_store.storage import VhostStorage, name_id
from vhosts.extras import DefinitionExtras
from vhosts.limits import Limits
from vhosts.permissions import PermissionStore
from vhosts.users import UserStore
from vhosts.vhost import VirtualHost

if TYPE_CHECKING:
    from amqp_server.alarms import Alarms
    from amqp_server.connection import Connection


class Broker:
    """State shared by all connections of one broker.

    Args:
        config: settings; the default user and vhost are created from it.
        timers: timers on the broker clock (tests pass one with a fake clock).
        storage: keep durable state under ``config.data_dir`` (False: all in memory).
    """

    def __init__(self, config: BrokerConfig | None = None, timers: Timers | None = None,
                 storage: bool = False) -> None:
        self.config = config or BrokerConfig()
        self.timers = timers or Timers()
        self.durability = Durability()
        self.durability.on_synced = self.flush_confirms
        self.storage_enabled = storage
        self.topology_dirty = False
        self.alarms_active = False
        self.alarms: Alarms | None = None  # the resource monitor, when a server runs one
        self.alarm_reason = "low on memory"
        self.on_topology_changed: Callable[[], None] | None = None
        self.extras = DefinitionExtras()  # vhost metadata, runtime parameters
        self.vhosts: dict[str, VirtualHost] = {}
        self.users = UserStore(self.config.loopback_users)
        self.permissions = PermissionStore()
        self.limits = Limits()
        self.connections: set[Connection] = set()
        self.reply_to = ReplyToRegistry()
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
                storage = VhostStorage(directory, self.durability)
            vhost = self.vhosts[name] = VirtualHost(name, self.timers, storage, self.limits)
            vhost.changed = self.mark_changed
            self.mark_changed()
        return vhost

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
        """Topology changed: persist definitions at the end of this batch of input."""
        self.topology_dirty = True

    def after_batch(self) -> None:
        """End of a batch of input: write records, persist changed topology."""
        self.durability.flush_writes()
        if self.topology_dirty:
            self.topology_dirty = False
            if self.on_topology_changed is not None:
                self.on_topology_changed()

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
        for queue in list(vhost.queues.values()):
            vhost.remove_queue(queue)
        if vhost.storage is not None:
            vhost.storage.destroy()
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
