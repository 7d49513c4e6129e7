"""``broker.workers`` and ``broker.cluster`` are typed by Protocols of the broker layer
(:mod:`broker.peers`), and a cluster node's quorum queues by one of the workers layer
(:class:`amqp_server.workers.runtime.ReplicatedQueues`); the classes a layer above must keep
providing every member, with the same parameters (nothing type-checks the project, so this
test does)."""

from __future__ import annotations

import inspect

import pytest

from amqp_server.cluster.membership import Membership
from amqp_server.cluster.node import NodeRuntime
from amqp_server.cluster.quorum import QuorumManager
from amqp_server.workers.runtime import ReplicatedQueues, WorkerRuntime
from broker.peers import ClusterMembership, Workers


@pytest.mark.parametrize(("proto", "cls"), [(Workers, WorkerRuntime), (Workers, NodeRuntime),
                                            (ClusterMembership, Membership),
                                            (ReplicatedQueues, QuorumManager)])
def test_the_runtime_provides_what_the_protocol_lists(proto: type, cls: type) -> None:
    source = inspect.getsource(cls) + "".join(inspect.getsource(b) for b in cls.__mro__[1:-1])
    for name in proto.__annotations__:  # attributes: set in a constructor, declared, or a property
        assert f"self.{name} " in source or f"    {name}:" in source or isinstance(
            getattr(cls, name, None), property), (cls, name)
    for name, member in vars(proto).items():
        if name.startswith("_") or not callable(member):
            continue
        impl = getattr(cls, name)
        assert list(inspect.signature(impl).parameters) == \
            list(inspect.signature(member).parameters), (cls, name)
        assert inspect.iscoroutinefunction(impl) == inspect.iscoroutinefunction(member), name
