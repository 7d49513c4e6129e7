"""Fixtures shared by consecutive test modules (a pytest plugin, ``tests/conftest.py``'s
``pytest_plugins``): one broker or cluster serves every module in a row that asks for it,
instead of one start per module, and is closed as soon as the next test is in a module that
does not ask for it (so nothing idles through the rest of the session)::

    @contextmanager
    def started(tmp_path_factory): ...   # yields the value, cleans up after
    ctl_node = shared_while_consecutive("ctl_node", started)   # a fixture named ctl_node

A module uses it by asking for the fixture (or by a fixture of its own that asks for it).
Modules that share one must leave it as they found it (names of their own, nothing
stopped or killed); a module that needs a fresh one keeps a module-scoped fixture.

How: the fixture is module-scoped (a module's own module-scoped fixtures may use it) and
takes its value from a registry (started on first use); ``pytest_collection_modifyitems``
notes which modules use each shared fixture, and after each test ``pytest_runtest_teardown``
(after the module's own fixtures are torn down) closes those the next test's module does not
use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess

Opener = Callable[[pytest.TempPathFactory], contextlib.AbstractContextManager[Any]]

_openers: dict[str, Opener] = {}  # fixture name -> what starts its value
_open: dict[str, tuple[contextlib.ExitStack, Any]] = {}  # fixture name -> (cleanup, value)
_users: dict[str, set[Path]] = {}  # fixture name -> the test files that use it


def shared_while_consecutive(name: str, opener: Opener) -> Callable[..., Any]:
    """A fixture named ``name`` whose value ``opener(tmp_path_factory)``
    (a context manager) gives is kept while consecutive tests' modules use it (see the
    module docstring)."""
    _openers[name] = opener

    @pytest.fixture(scope="module", name=name)
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Any:
        if name not in _open:
            stack = contextlib.ExitStack()
            try:
                value = stack.enter_context(opener(tmp_path_factory))
            except BaseException:
                stack.close()
                raise
            _open[name] = (stack, value)
        return _open[name][1]

    return fixture


def shared_broker(name: str, **options: Any) -> Callable[..., Any]:
    """A fixture named ``name``: a started :class:`~tests.support.broker_process.
    BrokerProcess` (``options`` as its keyword arguments, data and log under the session's
    temporary directory) shared by the modules in a row that use it."""

    @contextlib.contextmanager
    def opener(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
        base = tmp_path_factory.mktemp(name)
        with BrokerProcess(base / "data", base / "broker.log", **options) as broker:
            yield broker

    return shared_while_consecutive(name, opener)


def _close(name: str) -> None:
    stack, _ = _open.pop(name)
    stack.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for name in _openers:
        _users[name] = {item.path for item in items if name in getattr(item, "fixturenames", ())}


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    for name in list(_open):
        if nextitem is None or nextitem.path not in _users.get(name, set()):
            _close(name)


def pytest_sessionfinish() -> None:
    for name in list(_open):
        _close(name)
