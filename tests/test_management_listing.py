"""List query parameters of the management API (sort, columns, pagination), as RabbitMQ
3.10.8 answers them (checked with curl against the reference broker)."""

from __future__ import annotations

import pytest

from management.errors import ApiError
from management.listing import apply_list_query

ITEMS = [
    {"name": "pg.q2", "messages": 5, "message_stats": {"publish": 7}},
    {"name": "lim.q1", "messages": 0},
    {"name": "pg.q1", "messages": 12, "message_stats": {"publish": 1}},
    {"name": "other", "messages": None},
]


def names(items: list[dict]) -> list[str]:
    return [i["name"] for i in items]


def test_sort_by_field_and_reverse() -> None:
    assert names(apply_list_query({"sort": "name"}, ITEMS)) == [
        "lim.q1", "other", "pg.q1", "pg.q2"]
    assert names(apply_list_query({"sort": "name", "sort_reverse": "true"}, ITEMS)) == [
        "pg.q2", "pg.q1", "other", "lim.q1"]
    # Erlang term order: numbers before atoms (null); nested fields by dotted path
    assert names(apply_list_query({"sort": "messages"}, ITEMS)) == [
        "lim.q1", "pg.q2", "pg.q1", "other"]
    assert names(apply_list_query({"sort": "message_stats.publish"}, ITEMS))[:2] == [
        "pg.q1", "pg.q2"]


def test_columns_keep_only_those_fields_nested_too() -> None:
    out = apply_list_query({"columns": "name,message_stats.publish"}, ITEMS)
    assert out[0] == {"name": "pg.q2", "message_stats": {"publish": 7}}
    assert out[1] == {"name": "lim.q1"}


def test_pages_with_name_filter() -> None:
    page = apply_list_query({"page": "1", "page_size": "2", "name": "PG.Q"}, ITEMS)
    assert {k: v for k, v in page.items() if k != "items"} == {
        "filtered_count": 2, "item_count": 2, "page": 1, "page_count": 1, "page_size": 2,
        "total_count": 4}
    assert names(page["items"]) == ["pg.q2", "pg.q1"]
    page = apply_list_query({"page": "2", "page_size": "3", "sort": "name"}, ITEMS)
    assert names(page["items"]) == ["pg.q2"] and page["page_count"] == 2
    regex = apply_list_query({"page": "1", "name": r"^pg\.q[1]$", "use_regex": "true"}, ITEMS)
    assert names(regex["items"]) == ["pg.q1"]
    assert apply_list_query({"name": "pg"}, ITEMS) == ITEMS  # name needs page


@pytest.mark.parametrize(("query", "error", "reason"), [
    ({"page": "9", "page_size": "2"}, "page_out_of_range",
     "Page out of range, page: 9 page size: 2, len: 4"),
    ({"page": "x"}, "bad_request", "Pagination parameters are invalid"),
    ({"page": "1", "page_size": "600"}, "invalid_pagination_parameters",
     "Invalid pagination parameters: page number 1, page size 600"),
    ({"page": "0"}, "invalid_pagination_parameters",
     "Invalid pagination parameters: page number 0, page size undefined"),
    ({"page": "1", "name": "[bad", "use_regex": "true"}, "bad_request",
     "Pagination parameters are invalid"),
])
def test_bad_pagination_is_400(query: dict[str, str], error: str, reason: str) -> None:
    with pytest.raises(ApiError) as info:
        apply_list_query(query, ITEMS)
    assert (info.value.status, info.value.error, info.value.reason) == (400, error, reason)
