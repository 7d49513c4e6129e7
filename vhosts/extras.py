"""Definitions state the broker keeps but does not act on: vhost metadata, runtime parameters.

A RabbitMQ definitions document carries a description and tags per vhost, runtime
``parameters`` (other than operator policies and vhost limits, which the broker enforces)
and ``global_parameters``. amqpq serves them back over the HTTP API and exports them again,
so they live on the broker (:attr:`Broker.extras <broker.broker.Broker.extras>`) and
are saved with the rest of the definitions.

Source: https://www.rabbitmq.com/docs/definitions, /docs/vhosts#metadata,
/docs/parameters.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: the global parameter holding the cluster's permanent id (:mod:`broker.cluster_identity`)
INTERNAL_CLUSTER_ID = "internal_cluster_id"


@dataclass
class VhostMetadata:
    """A vhost's ``description`` (text) and ``tags`` (list of names)."""

    description: str = ""
    tags: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """``{"description": str, "tags": [str]}``, a fresh copy."""
        return {"description": self.description, "tags": list(self.tags)}


@dataclass
class DefinitionExtras:
    """Vhost metadata by vhost name, and runtime parameters kept verbatim.

    Attributes:
        vhost_metadata: vhost name -> its metadata (absent: empty description and tags).
        parameters: ``{"vhost", "component", "name", "value"}`` dicts, one per parameter.
        global_parameters: ``{"name", "value"}`` dicts.
    """

    vhost_metadata: dict[str, VhostMetadata] = field(default_factory=dict)
    parameters: list[dict[str, Any]] = field(default_factory=list)
    global_parameters: list[dict[str, Any]] = field(default_factory=list)

    def metadata(self, vhost: str) -> dict[str, Any]:
        """``{"description": str, "tags": [str]}`` of ``vhost`` (empty ones by default)."""
        return self.vhost_metadata.get(vhost, VhostMetadata()).as_json()

    def set_metadata(self, vhost: str, description: str | None,
                     tags: Iterable[str] | None) -> None:
        """Record a vhost's description and tags (None leaves that field as it is)."""
        meta = self.vhost_metadata.setdefault(vhost, VhostMetadata())
        if description is not None:
            meta.description = description
        if tags is not None:
            meta.tags = list(tags)

    def put_parameter(self, component: str, vhost: str, name: str, value: Any) -> bool:
        """Set runtime parameter ``component``/``vhost``/``name`` to ``value`` (it moves to
        the end of :attr:`parameters`); True when there was none before."""
        was = self.remove_parameter(component, vhost, name)
        self.parameters.append({"value": value, "vhost": vhost, "component": component,
                                "name": name})
        return not was

    def remove_parameter(self, component: str, vhost: str, name: str,
                         value: Any = None) -> bool:
        """Drop runtime parameter ``component``/``vhost``/``name`` (only while its value is
        still ``value``, when one is given); True when one was dropped."""
        params = self.parameters
        kept = [p for p in params
                if (p.get("component"), p.get("vhost"), p.get("name")) != (component, vhost, name)
                or (value is not None and p.get("value") != value)]
        if len(kept) == len(params):
            return False
        params[:] = kept
        return True

    def global_value(self, name: str) -> Any:
        """The value of global parameter ``name`` (None when there is none)."""
        return next((p.get("value") for p in self.global_parameters if p.get("name") == name),
                    None)

    def set_global(self, name: str, value: Any) -> None:
        """Set global parameter ``name`` to ``value`` (in its place, else at the end)."""
        for p in self.global_parameters:
            if p.get("name") == name:
                p["value"] = value
                return
        self.global_parameters.append({"name": name, "value": value})

    def forget_vhost(self, vhost: str) -> None:
        """``vhost`` was deleted: drop its metadata and runtime parameters (a new vhost of
        that name starts empty, as RabbitMQ's ``rabbit_vhost:delete`` clears them)."""
        self.vhost_metadata.pop(vhost, None)
        self.parameters = [p for p in self.parameters if p.get("vhost") != vhost]
