"""Messages as the broker holds them: routing info, raw property bytes, body.

A message's content-header properties are kept exactly as the publisher sent them
(``properties_raw``: property flags followed by the property list, spec 4.2.6.1) and forwarded
verbatim on delivery; they are decoded only when a feature needs a property (the headers
exchange, persistence, TTL), once, lazily.
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import commands
from pamqp.header import ContentHeader

import amqp_common.properties  # noqa: F401  (installs the exact timestamp decoder in pamqp)

_EMPTY_CONTENT_PREFIX = struct.pack(">HHQ", 60, 0, 0)

# Property flag bits of Basic (spec 1.8.2): the order of the property list.
FLAG_CONTENT_TYPE = 1 << 15
FLAG_CONTENT_ENCODING = 1 << 14
FLAG_HEADERS = 1 << 13
FLAG_DELIVERY_MODE = 1 << 12
FLAG_PRIORITY = 1 << 11
FLAG_REPLY_TO = 1 << 9
MAX_EXPIRY_MS = 315_360_000_000  # RabbitMQ's rabbit_misc:check_expiry bound (10 years, ms)
FLAG_EXPIRATION = 1 << 8
FLAG_USER_ID = 1 << 4


class Message:
    """One published message, shared by every queue it was routed to.

    Attributes:
        exchange, routing_key: where it was published (str).
        ex_rk_raw: the exchange and routing key as the two shortstrs received in Basic.Publish.
        properties_raw: property flags + property list bytes, as received.
        body: the body (bytes), assembled from the body frames.
    """

    __slots__ = ("exchange", "routing_key", "ex_rk_raw", "properties_raw", "body", "_props",
                 "store_id", "flags")

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        ex_rk_raw: bytes,
        properties_raw: bytes,
        body: bytes,
        flags: int = -1,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.ex_rk_raw = ex_rk_raw
        self.properties_raw = properties_raw
        self.body = body
        self._props: commands.Basic.Properties | None = None
        self.store_id = 0  # msg_id in the vhost's message store, 0 when not stored
        # the first property-flags word: which properties are present (spec 4.2.6.1); given
        # by the channel, which read it with the content header (-1: read it here)
        if flags < 0:
            flags = (properties_raw[0] << 8 | properties_raw[1]) if len(properties_raw) > 1 else 0
        self.flags = flags

    @classmethod
    def create(cls, exchange: str, routing_key: str, properties_raw: bytes, body: bytes
               ) -> Message:
        """A message made by the broker itself (dead lettering, HTTP publish)."""
        ex = exchange.encode("utf-8", "surrogateescape")
        rk = routing_key.encode("utf-8", "surrogateescape")[:255]
        ex_rk_raw = bytes((len(ex),)) + ex + bytes((len(rk),)) + rk
        return cls(exchange, routing_key, ex_rk_raw, properties_raw, body)

    @property
    def body_size(self) -> int:
        return len(self.body)

    @property
    def properties(self) -> commands.Basic.Properties:
        """The decoded Basic properties (decoded once, on first use).

        Raises:
            ValueError: the property bytes do not decode.
        """
        if self._props is None:
            header = ContentHeader()
            try:
                header.unmarshal(_EMPTY_CONTENT_PREFIX + self.properties_raw)
            except UnicodeDecodeError:  # a shortstr that is not UTF-8: read it as Latin-1
                from amqp_common.properties import utf8_safe_properties

                header = ContentHeader()
                header.unmarshal(_EMPTY_CONTENT_PREFIX
                                 + utf8_safe_properties(self.properties_raw))
            self._props = header.properties
        return self._props

    def _has(self, flag: int) -> bool:
        return bool(self.flags & flag)

    @property
    def headers(self) -> dict[str, Any] | None:
        """The ``headers`` property (field table) or None; decodes only when the flag is set."""
        return self.properties.headers if self._has(FLAG_HEADERS) else None

    @property
    def persistent(self) -> bool:
        """True when delivery_mode is 2 (persistent); reads the one byte without decoding the
        other properties (they come first: content_type, content_encoding, headers)."""
        flags = self.flags
        if not flags & FLAG_DELIVERY_MODE:
            return False
        if flags & 1 or self._props is not None:  # a second flags word, or already decoded
            return self.properties.delivery_mode == 2
        raw = self.properties_raw
        pos = 2
        if flags & FLAG_CONTENT_TYPE:
            pos += 1 + raw[pos]
        if flags & FLAG_CONTENT_ENCODING:
            pos += 1 + raw[pos]
        if flags & FLAG_HEADERS:
            pos += 4 + int.from_bytes(raw[pos:pos + 4], "big")
        return raw[pos] == 2

    @property
    def priority(self) -> int:
        """The ``priority`` property (0 when absent)."""
        return (self.properties.priority or 0) if self._has(FLAG_PRIORITY) else 0

    @property
    def reply_to(self) -> str | None:
        """The ``reply_to`` property or None."""
        return self.properties.reply_to if self._has(FLAG_REPLY_TO) else None

    @property
    def user_id(self) -> str | None:
        """The ``user_id`` property or None."""
        return self.properties.user_id if self._has(FLAG_USER_ID) else None

    @property
    def expiration(self) -> str | None:
        """The ``expiration`` property (a string of milliseconds) or None."""
        return self.properties.expiration if self._has(FLAG_EXPIRATION) else None

    def expiration_ms(self) -> int | None:
        """The ``expiration`` property as milliseconds (None when absent).

        Raises:
            ValueError: with RabbitMQ's error term as text (``no_integer``,
                ``{value_negative,-5}``, ``{leftover_string,"abc"}``).
        """
        text = self.expiration
        if text is None:
            return None
        digits = text.lstrip("+-")
        end = len(text) - len(digits)
        while end < len(text) and text[end].isdigit():
            end += 1
        if end == len(text) - len(digits):
            raise ValueError("no_integer")
        if end != len(text):
            raise ValueError(f'{{leftover_string,"{text[end:]}"}}')
        value = int(text)
        if value < 0:
            raise ValueError(f"{{value_negative,{value}}}")
        if value > MAX_EXPIRY_MS:
            raise ValueError(f"{{value_too_large,{value}}}")
        return value
