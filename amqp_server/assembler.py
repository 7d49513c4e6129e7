"""Frames of one channel into whole commands: RabbitMQ's ``rabbit_command_assembler``.

Theory of operation
-------------------
A channel receives a sequence of frames; only Basic.Publish carries content (spec 2.3.5):
its method frame, one content header frame, then body frames until the size the header
announced. The assembler keeps that per-channel state and hands the channel *whole commands*
only, through three calls on its :class:`CommandSink`::

    method frame (not Publish, not Ack) --> sink.handle_method(decoded method)
    Basic.Ack method frame              --> sink.ack(delivery_tag, multiple)   (hand-parsed)
    Publish + header + body frames      --> sink.publish(names, bits, properties_raw, body,
                                                         flags)

States (``expecting``)::

    METHOD --Publish--> HEADER --header(size 0)--> METHOD
                        HEADER --header(size n)--> BODY --body frames summing to n--> METHOD

A frame out of turn is 505 UNEXPECTED_FRAME with RabbitMQ's texts; a body larger than its
header said is 501 FRAME_ERROR; a size above ``max_message_size`` is 406 at the header, before
any body is buffered. Property bytes are checked once (:func:`check_content_properties`) and
forwarded unchanged, never decoded. The common publish (method, header and one body frame in
the same read) does not come here: :meth:`amqp_common.framing.FrameReader.read` fuses it and
the connection hands it to the channel with the same checks while ``pending`` is None.

Source: AMQP 0-9-1 spec 2.3.5 and 4.2.6; RabbitMQ ``rabbit_command_assembler.erl``.
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

from pamqp import commands

from amqp_common import framing
from amqp_common.errors import (
    AMQPError,
    CommandInvalid,
    FrameError,
    PreconditionFailed,
    SyntaxError_,
    UnexpectedFrame,
)
from amqp_common.framing import parse_publish
from amqp_common.method_tables import TABLE_METHODS, check_method_tables, with_wire_types
from amqp_common.properties import check_properties

MAX_MESSAGE_SIZE = 128 * 1024 * 1024  # RabbitMQ's max_message_size default (bytes)

#: (exchange, routing_key, exchange+routing key as wire shortstrs), as
#: :func:`amqp_common.framing.publish_names` gives them (one object per distinct pair)
PublishNames = tuple[str, str, bytes]

_content_head = struct.Struct(">HHQ")
_method_index = struct.Struct(">I")
NO_PROPERTIES = b"\x00\x00"  # property flags with no property set


class CommandSink(Protocol):
    """What receives whole commands: :class:`~amqp_server.channel.Channel`."""

    def handle_method(self, method: Any) -> None: ...

    def ack(self, tag: int, multiple: bool) -> None: ...

    def publish(self, names: PublishNames, bits: int, properties_raw: bytes, body: bytes,
                flags: int) -> None: ...


#: Property lists (flags + list, as received) that passed :func:`check_content_properties`:
#: a publisher mostly repeats the same few, and checking them again cost a fifth of a
#: persistent publish. Up to _CHECKED_MAX lists of at most _CHECKED_SIZE bytes; cleared
#: when full.
CHECKED_PROPERTIES: set[bytes] = set()
_CHECKED_MAX = 4096
_CHECKED_SIZE = 1024


def check_content_properties(props: bytes) -> None:
    """Check a content header's property flags and list (``props``, as received), which
    are forwarded unchanged, never decoded; a list checked before (in
    :data:`CHECKED_PROPERTIES`) is not checked again.

    Raises:
        SyntaxError_ (502): malformed property list (class 60, method 40: Basic.Publish).
    """
    if props in CHECKED_PROPERTIES:
        return
    try:
        check_properties(props)
    except ValueError as exc:
        raise SyntaxError_(f"malformed content properties: {exc}", 60, 40) from None
    if len(props) <= _CHECKED_SIZE:
        if len(CHECKED_PROPERTIES) >= _CHECKED_MAX:
            CHECKED_PROPERTIES.clear()
        CHECKED_PROPERTIES.add(props)


def decode_method(payload: bytes) -> Any:
    """A pamqp method object from a method frame payload.

    Raises:
        CommandInvalid (503): unknown class/method id.
        SyntaxError_ (502): fields do not decode.
    """
    if len(payload) < 4:
        raise SyntaxError_("method frame too short")
    index = _method_index.unpack_from(payload)[0]
    cls = commands.INDEX_MAPPING.get(index)
    if cls is None:
        raise CommandInvalid(f"unknown method class {index >> 16} method {index & 0xFFFF}")
    method = cls()
    tables: list[tuple[str, int]] = []
    if cls in TABLE_METHODS:
        try:
            tables = check_method_tables(cls, payload[4:])
        except ValueError as exc:
            raise SyntaxError_(f"cannot decode {cls.name}: {exc}") from None
    try:
        method.unmarshal(payload[4:])
    except Exception as exc:  # pamqp raises struct.error/ValueError/IndexError/...
        raise SyntaxError_(f"cannot decode {cls.name}: {exc}") from None
    for name, offset in tables:
        if name == "arguments" and method.arguments:
            method.arguments = with_wire_types(method.arguments, payload[4 + offset:])
    return method


class CommandAssembler:
    """One channel's frames -> whole commands for ``sink`` (see the module docstring)."""

    __slots__ = ("sink", "pending", "_props", "_size", "_body", "_got")

    def __init__(self, sink: CommandSink) -> None:
        self.sink = sink
        # a publish whose content is due: parse_publish's (exchange, routing key, raw,
        # mandatory, immediate)
        self.pending: tuple[str, str, bytes, bool, bool] | None = None
        self._props = b""  # its properties once the header came; b"": header still due
        self._size = 0  # body size the header announced (bytes)
        self._body: list[bytes] = []
        self._got = 0  # body bytes received (bytes)

    def reset(self) -> None:
        """Forget a partial command (the channel closed)."""
        self.pending = None
        self._props = b""
        self._body = []
        self._got = 0

    def expect_method(self) -> None:
        """Raises UnexpectedFrame (505) when a publish's content frames are still due."""
        if self.pending is not None:
            raise UnexpectedFrame(
                "expected content header for class 60, got non content header frame instead",
                60, 40)

    # ---- frames ---------------------------------------------------------------------------

    def method_frame(self, payload: bytes) -> None:
        """A method frame of this channel (not Channel.Open/CloseOk: the connection's).

        Raises:
            UnexpectedFrame (505): a publish's content is still due.
            SyntaxError_ (502), CommandInvalid (503): undecodable or unknown method.
            AMQPError: whatever the sink raises for the command.
        """
        if self.pending is not None:
            self.expect_method()  # raises
        index = _method_index.unpack_from(payload)[0] if len(payload) >= 4 else 0
        if index == framing.BASIC_PUBLISH:
            try:
                self.pending = parse_publish(payload)
            except (ValueError, IndexError):
                raise SyntaxError_("cannot decode basic.publish") from None
            return
        if index == framing.BASIC_ACK:
            try:
                tag, multiple = framing.parse_ack(payload)
            except struct.error:
                raise SyntaxError_("cannot decode basic.ack") from None
            self.sink.ack(tag, multiple)
            return
        self.sink.handle_method(decode_method(payload))

    def header_frame(self, payload: bytes) -> None:
        """A content header frame.

        Raises:
            UnexpectedFrame (505): no Basic.Publish before it, a second header, another class.
            FrameError (501): too short.
            PreconditionFailed (406): body larger than max_message_size.
            SyntaxError_ (502): malformed property list.
        """
        if self.pending is None:
            raise UnexpectedFrame("expected method frame, got non method frame instead")
        if self._props:
            raise UnexpectedFrame(
                "expected content body, got non content body frame instead", 60, 40)
        if len(payload) < 14:
            raise FrameError("content header frame too short")
        class_id, _weight, size = _content_head.unpack_from(payload)
        if class_id != 60:
            raise UnexpectedFrame(
                f"expected content header for class 60, got one for class {class_id} "
                "instead", 60, 40)
        if size > MAX_MESSAGE_SIZE:
            self.pending = None
            raise PreconditionFailed(
                f"message size {size} is larger than configured max size {MAX_MESSAGE_SIZE}",
                60, 40)
        props = payload[12:]
        if props != NO_PROPERTIES:  # forwarded as is later: a malformed one must stop here
            check_content_properties(props)
        self._props = props
        self._size = size
        if size == 0:
            self._complete(b"")

    def body_frame(self, payload: bytes) -> None:
        """A content body frame.

        Raises:
            UnexpectedFrame (505): no content header before it.
            FrameError (501): more body than the header announced.
        """
        if not self._props:
            if self.pending is None:
                raise UnexpectedFrame("expected method frame, got non method frame instead")
            raise UnexpectedFrame(
                "expected content header for class 60, got non content header frame instead",
                60, 40)
        got = self._got + len(payload)
        if got == self._size and not self._body:
            self._complete(payload)  # the common case: the whole body in one frame
            return
        self._body.append(payload)
        self._got = got
        if got >= self._size:
            if got > self._size:
                raise FrameError(f"content body {got} bytes > announced {self._size} bytes")
            self._complete(b"".join(self._body))

    def _complete(self, body: bytes) -> None:
        fields, props = self.pending, self._props
        self.pending = None
        self._props = b""
        self._body = []
        self._got = 0
        exchange, routing_key, raw, mandatory, immediate = fields  # type: ignore[misc]
        flags = props[0] << 8 | props[1]
        try:
            self.sink.publish((exchange, routing_key, raw), mandatory | immediate << 1, props,
                              body, flags)
        except AMQPError as exc:
            if not exc.class_id:  # raised while handling a content frame: name the command
                exc.class_id, exc.method_id = 60, 40
            raise
