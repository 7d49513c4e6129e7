# ruff: noqa: F811  (the fixtures imported from test_management_api are parameters here)
"""Delayed messages over the management HTTP API: ``messages_delayed`` on the exchange object,
the listing (paged, due order) and cancelling one held message.

Source: the plugin shows ``messages_delayed`` per exchange
(https://github.com/rabbitmq/rabbitmq-delayed-message-exchange, README); listing and
cancelling are amqpq's own (``management/routes/delayed.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from test_management_api import Answer, InProcessBroker, api, node, publish, vhost  # noqa: F401

pytestmark = pytest.mark.usefixtures("node")


@pytest.fixture
def delayed(api: Callable[..., Answer], vhost: str) -> Iterator[str]:
    base = f"/api/exchanges/{vhost}/dx"
    assert api("PUT", base, {"type": "x-delayed-message",
                             "arguments": {"x-delayed-type": "direct"}}).status == 201
    assert api("PUT", f"/api/queues/{vhost}/q", {}).status == 201
    assert api("POST", f"/api/bindings/{vhost}/e/dx/q/q", {"routing_key": "k"}).status == 201
    yield base


def test_count_listing_and_cancel(api: Callable[..., Answer], vhost: str,
                                  delayed: str) -> None:
    for i, delay in enumerate((90_000, 30_000, 60_000)):
        assert publish(api, vhost, "dx", "k", f"m{i}", headers={"x-delay": delay})
    x = api("GET", delayed).json
    assert x["messages_delayed"] == 3
    page = api("GET", delayed + "/delayed?page_size=2").json
    assert page["total_count"] == 3 and page["page_count"] == 2 and page["item_count"] == 2
    assert [i["payload"] for i in page["items"]] == ["m1", "m2"]
    first = page["items"][0]
    assert first["delay"] == 30_000 and 0 < first["due_in"] <= 30_000
    assert first["routing_key"] == "k" and first["properties"]["headers"] == {"x-delay": 30_000}
    assert [i["payload"] for i in api("GET", delayed + "/delayed?page=2&page_size=2")
            .json["items"]] == ["m0"]
    assert api("DELETE", delayed + f"/delayed/{first['id']}").status == 204
    assert api("DELETE", delayed + f"/delayed/{first['id']}").status == 404
    assert api("GET", delayed).json["messages_delayed"] == 2
    assert api("GET", f"/api/queues/{vhost}/q").json.get("messages", 0) == 0


def test_not_a_delayed_exchange_and_bad_paging(api: Callable[..., Answer],
                                               vhost: str, delayed: str) -> None:
    assert api("GET", f"/api/exchanges/{vhost}/amq.direct/delayed").status == 400
    assert api("GET", f"/api/exchanges/{vhost}/nope/delayed").status == 404
    assert api("GET", delayed + "/delayed?page=0").status == 400
    assert "messages_delayed" not in api("GET", f"/api/exchanges/{vhost}/amq.direct").json
    types = {t["name"] for t in api("GET", "/api/overview").json["exchange_types"]}
    assert "x-delayed-message" in types
