"""Runtime parameters kept by :class:`vhosts.extras.DefinitionExtras` (put, remove)."""

from vhosts.extras import DefinitionExtras


def test_put_replaces_and_says_whether_it_was_new() -> None:
    extras = DefinitionExtras()
    assert extras.put_parameter("shovel", "/", "s", {"a": 1}) is True
    assert extras.put_parameter("other", "/", "o", 1) is True
    assert extras.put_parameter("shovel", "/", "s", {"a": 2}) is False
    assert extras.parameters == [
        {"value": 1, "vhost": "/", "component": "other", "name": "o"},
        {"value": {"a": 2}, "vhost": "/", "component": "shovel", "name": "s"}]


def test_remove_only_the_named_one_and_only_at_the_given_value() -> None:
    extras = DefinitionExtras()
    extras.put_parameter("shovel", "/", "s", {"a": 1})
    extras.put_parameter("shovel", "v", "s", {"a": 1})
    kept = extras.parameters
    assert extras.remove_parameter("shovel", "/", "s", {"a": 2}) is False  # changed since
    assert extras.remove_parameter("shovel", "/", "missing") is False
    assert extras.remove_parameter("shovel", "/", "s", {"a": 1}) is True
    assert extras.parameters is kept  # in place: holders of the list see it
    assert extras.parameters == [{"value": {"a": 1}, "vhost": "v", "component": "shovel",
                                  "name": "s"}]
    assert extras.remove_parameter("shovel", "v", "s") is True and extras.parameters == []
