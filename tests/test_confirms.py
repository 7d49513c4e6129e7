"""Publisher confirms (Confirm.Select) and transactions (Tx.*), as a client sees them, plus
unit tests of the :class:`~amqp_server.confirms.Confirms` bookkeeping.

Reference: https://www.rabbitmq.com/docs/confirms; RabbitMQ 3.10-3.13 ``rabbit_channel``
(``coalesce_and_send``, tx texts).
"""

from __future__ import annotations

from conftest import Client, bodies, channel_close, deliveries, methods, only
from pamqp import commands

from amqp_server.confirms import Confirms


def acks(frames: list) -> list[tuple[str, int, bool]]:
    return [(type(f).__name__, f.delivery_tag, f.multiple) for _, f in frames
            if isinstance(f, commands.Basic.Ack | commands.Basic.Nack)]


def confirm_select(c: Client, ch: int = 1) -> None:
    c.call(ch, commands.Confirm.Select(), commands.Confirm.SelectOk)


# ---- Confirms bookkeeping ------------------------------------------------------------------


def test_sequence_numbers_start_at_one() -> None:
    c = Confirms()
    assert [c.next_seq() for _ in range(3)] == [1, 2, 3]
    assert c.dirty
    assert c.drain() == [(3, True, True)]
    assert not c.dirty
    assert c.drain() == []


def test_single_confirm_is_not_multiple() -> None:
    c = Confirms()
    c.next_seq()
    assert c.drain() == [(1, False, True)]


def test_pending_seqs_wait_for_confirm() -> None:
    c = Confirms()
    s1 = c.next_seq(pending=True)
    assert not c.dirty
    assert c.drain() == []
    c.confirm(s1)
    assert c.drain() == [(1, False, True)]
    c.confirm(s1)  # twice: nothing more
    assert c.drain() == []


def test_multiple_only_below_the_oldest_unconfirmed() -> None:
    c = Confirms()
    c.next_seq()  # 1
    c.next_seq()  # 2
    pending = c.next_seq(pending=True)  # 3
    c.next_seq()  # 4
    c.next_seq()  # 5
    assert c.drain() == [(2, True, True), (4, False, True), (5, False, True)]
    c.confirm(pending)
    c.next_seq()  # 6
    c.next_seq()  # 7
    assert c.drain() == [(7, True, True)]


def test_confirm_out_of_order() -> None:
    c = Confirms()
    s = [c.next_seq(pending=True) for _ in range(3)]
    c.confirm(s[2])
    assert c.drain() == [(3, False, True)]
    c.confirm(s[0])
    c.confirm(s[1])
    assert c.drain() == [(2, True, True)]


def settle(out: list[tuple[int, bool, bool]], outstanding: set[int]) -> dict[int, bool]:
    """What a client makes of ``out``: each outstanding tag settled once, acked or nacked."""
    settled: dict[int, bool] = {}
    for tag, multiple, ack in out:
        assert tag in outstanding, f"tag {tag} settled twice or never published"
        for t in sorted(outstanding):
            if t == tag or (multiple and t < tag):
                settled[t] = ack
                outstanding.discard(t)
    return settled


def test_nack_is_never_covered_by_a_multiple_ack() -> None:
    c = Confirms()
    c.next_seq()  # 1
    bad = c.next_seq(pending=True)  # 2
    c.next_seq()  # 3
    c.reject(bad)
    out = c.drain()
    assert (2, False, False) in out
    assert settle(out, {1, 2, 3}) == {1: True, 2: False, 3: True}
    c.reject(bad)  # already settled: ignored
    c.confirm(bad)
    assert c.drain() == []


def test_many_nacks_and_acks_settle_each_tag_once() -> None:
    c = Confirms()
    pending = [c.next_seq(pending=i % 3 == 0) for i in range(12)]
    for seq in pending[::3]:
        (c.reject if seq % 2 else c.confirm)(seq)
    result = settle(c.drain(), set(range(1, 13)))
    assert result == {s: not (s in pending[::3] and s % 2) for s in range(1, 13)}



def test_a_group_settles_as_each_of_its_tags_would() -> None:
    """confirm_many / reject_many (one fsync or write round's group) leave the same drain as
    confirm / reject of each tag, a tag settled already or not pending included."""
    one, many = Confirms(), Confirms()
    for c in (one, many):
        for i in range(10):
            c.next_seq(pending=i != 4)  # tag 5 was never pending
        c.confirm(2)  # settled before its group
    for seq in (1, 2, 3, 5):
        one.confirm(seq)
    for seq in (6, 7, 8):
        one.reject(seq)
    many.confirm_many([1, 2, 3, 5])
    many.reject_many([6, 7, 8])
    assert many.drain() == one.drain()
    assert many.unconfirmed_count == one.unconfirmed_count == 3

# ---- Confirm.Select on a channel -----------------------------------------------------------


def test_confirm_select_ok_and_nowait(client: Client) -> None:
    confirm_select(client)
    client.open_channel(2)
    assert client.send(2, commands.Confirm.Select(nowait=True)) == []
    assert acks(client.publish(2, "", "nowhere", b"x")) == [("Ack", 1, False)]


def test_batched_publishes_get_one_coalesced_ack(client: Client) -> None:
    client.declare_queue(1, "q")
    confirm_select(client)
    data = b"".join(client.publish_bytes(1, "", "q", f"m{i}".encode()) for i in range(5))
    out = client.send_bytes(data)
    assert acks(out) == [("Ack", 5, True)]
    assert client.broker.vhosts["/"].queues["q"].message_count == 5
    assert acks(client.publish(1, "", "q", b"m5")) == [("Ack", 6, False)]
    data = b"".join(client.publish_bytes(1, "", "q", b"x") for _ in range(2))
    assert acks(client.send_bytes(data)) == [("Ack", 8, True)]


def test_unroutable_publish_is_acked(client: Client) -> None:
    confirm_select(client)
    assert acks(client.publish(1, "amq.direct", "nowhere", b"x")) == [("Ack", 1, False)]


def test_mandatory_return_precedes_the_ack(client: Client) -> None:
    confirm_select(client)
    out = client.publish(1, "amq.direct", "nowhere", b"x", mandatory=True)
    assert [type(m) for m in methods(out)] == [commands.Basic.Return, commands.Basic.Ack]
    (ret,) = deliveries(out, commands.Basic.Return)
    assert (ret.method.reply_code, ret.method.reply_text, ret.body) == (312, "NO_ROUTE", b"x")
    assert acks(out) == [("Ack", 1, False)]


def test_reject_publish_overflow_is_nacked(client: Client) -> None:
    client.declare_queue(1, "q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    confirm_select(client)
    assert acks(client.publish(1, "", "q", b"1")) == [("Ack", 1, False)]
    assert acks(client.publish(1, "", "q", b"2")) == [("Nack", 2, False)]
    nack = only(client.publish(1, "", "q", b"3"), commands.Basic.Nack)
    assert nack.requeue is True  # the field's default, as RabbitMQ sends it


def test_tx_select_in_confirm_mode_is_refused(client: Client) -> None:
    confirm_select(client)
    close = channel_close(client.send(1, commands.Tx.Select()))
    assert (close.reply_code, close.reply_text) == (
        406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode")


# ---- transactions --------------------------------------------------------------------------


def tx_setup(c: Client) -> None:
    c.declare_queue(1, "q")
    c.open_channel(2)
    c.call(2, commands.Tx.Select(), commands.Tx.SelectOk)


def test_publish_then_rollback_delivers_nothing(client: Client) -> None:
    tx_setup(client)
    client.consume(1, "q", no_ack=True)
    assert client.publish(2, "", "q", b"a") == []
    assert client.publish(2, "", "q", b"b") == []
    client.call(2, commands.Tx.Rollback(), commands.Tx.RollbackOk)
    assert client.read() == []
    client.call(2, commands.Tx.Commit(), commands.Tx.CommitOk)  # nothing left to commit
    assert client.broker.vhosts["/"].queues["q"].message_count == 0


def test_publish_then_commit_delivers(client: Client) -> None:
    tx_setup(client)
    client.consume(1, "q", no_ack=True)
    client.publish(2, "", "q", b"a")
    client.publish(2, "", "q", b"b")
    assert client.read() == []
    out = client.send(2, commands.Tx.Commit())
    assert bodies(out) == [b"a", b"b"]
    assert [f for ch, f in out if ch == 2 and isinstance(f, commands.Tx.CommitOk)]


def test_rolled_back_ack_leaves_the_message_unacked(client: Client) -> None:
    tx_setup(client)
    client.publish(1, "", "q", b"a")
    client.publish(1, "", "q", b"b")
    client.consume(2, "q")
    q = client.broker.vhosts["/"].queues["q"]
    assert client.ack(2, 2, multiple=True) == []
    client.call(2, commands.Tx.Rollback(), commands.Tx.RollbackOk)
    assert sorted(client.conn.channels[2].unacked) == [1, 2]
    assert q.unacked_count == 2
    assert client.ack(2, 1) == []  # still known after the rollback
    client.call(2, commands.Tx.Commit(), commands.Tx.CommitOk)
    assert q.unacked_count == 1
    assert channel_close(client.ack(2, 1)).reply_text == (
        "PRECONDITION_FAILED - unknown delivery tag 1")


def test_reject_and_nack_take_effect_on_commit(client: Client) -> None:
    tx_setup(client)
    for body in (b"a", b"b"):
        client.publish(1, "", "q", body)
    client.consume(2, "q", tag="c")
    assert client.send(2, commands.Basic.Reject(delivery_tag=1, requeue=False)) == []
    assert client.send(2, commands.Basic.Nack(delivery_tag=2, requeue=True)) == []
    out = client.send(2, commands.Tx.Commit())
    ds = deliveries(out)
    assert [(d.body, d.method.redelivered, d.method.delivery_tag) for d in ds] == [
        (b"b", True, 3)]
    assert len(methods(out, commands.Tx.CommitOk)) == 1


def test_commit_and_rollback_without_select(client: Client) -> None:
    close = channel_close(client.send(1, commands.Tx.Commit()))
    assert (close.reply_code, close.reply_text) == (
        406, "PRECONDITION_FAILED - channel is not transactional")
    assert (close.class_id, close.method_id) == (90, 20)
    client.open_channel(2)
    close = channel_close(client.send(2, commands.Tx.Rollback()))
    assert (close.reply_code, close.reply_text) == (
        406, "PRECONDITION_FAILED - channel is not transactional")
    assert (close.class_id, close.method_id) == (90, 30)


def test_confirm_select_after_tx_select_is_refused(client: Client) -> None:
    client.call(1, commands.Tx.Select(), commands.Tx.SelectOk)
    close = channel_close(client.send(1, commands.Confirm.Select()))
    assert (close.reply_code, close.reply_text) == (
        406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode")
    assert (close.class_id, close.method_id) == (85, 10)


def test_closing_a_tx_channel_discards_uncommitted_publishes(client: Client) -> None:
    tx_setup(client)
    client.publish(2, "", "q", b"a")
    client.send(2, commands.Channel.Close(reply_code=200, reply_text="", class_id=0,
                                          method_id=0))
    assert client.broker.vhosts["/"].queues["q"].message_count == 0
