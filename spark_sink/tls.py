"""TLS settings of ``amqps://`` connections, through the standard :mod:`ssl` module.

The option names follow the broker's ``--ssl-*`` flags: ``sslCacert`` (CA file that signed the
broker's certificate; default: the system's trusted CAs), ``sslCert`` + ``sslKey`` (a client
certificate and its key, PEM, for brokers that ask for one), ``sslVerify`` (default ``true``:
check the broker's certificate chain and that it names the host; ``false`` turns both checks
off), ``sslServerName`` (the name to check and to send as SNI; default the URI's host).

Source: Python ``ssl`` module, https://docs.python.org/3/library/ssl.html
(create_default_context, SSLContext.load_cert_chain, check_hostname);
RabbitMQ TLS clients, https://www.rabbitmq.com/docs/ssl.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass


class TlsSettingsError(ValueError):
    """A certificate or key file that cannot be used (message names the file)."""


@dataclass(frozen=True)
class TlsSettings:
    """Client TLS settings (picklable: the context itself is built in each task).

    Attributes:
        cacert: PEM file of the CA(s) to trust, or None for the system's default CAs.
        cert: PEM client certificate (chain), or None.
        key: PEM private key of ``cert`` (None: the key is inside ``cert``).
        verify: check the broker's certificate and host name.
        server_name: host name to check and send as SNI (None: the URI's host).
    """

    cacert: str | None = None
    cert: str | None = None
    key: str | None = None
    verify: bool = True
    server_name: str | None = None

    def context(self) -> ssl.SSLContext:
        """A client :class:`ssl.SSLContext` (TLS 1.2+) for these settings.

        Raises:
            TlsSettingsError: a CA, certificate or key file that cannot be read or parsed.
        """
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.cacert)
        except (OSError, ssl.SSLError) as exc:
            raise TlsSettingsError(f"CA file {self.cacert!r} is not usable: {exc}") from None
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert:
            try:
                ctx.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as exc:
                raise TlsSettingsError(
                    f"client certificate {self.cert!r} / key {self.key or self.cert!r} is not "
                    f"usable: {exc}"
                ) from None
        return ctx
