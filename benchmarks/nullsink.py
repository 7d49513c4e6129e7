"""A null AMQP server, to measure the load generator's own ceiling.

Run as a subprocess: ``python -m benchmarks.nullsink [--deliver N] [--body-size 200]``; it
prints ``nullsink: listening on <port>`` and serves 127.0.0.1 until killed. Per connection it
answers the handshake and the set-up methods (Channel.Open, Qos, Queue.Declare,
Confirm.Select, Consume) with canned replies, then:

* on the first Basic.Publish it only reads and discards (a null sink); in confirm mode it
  answers each read with one ``Basic.Ack(multiple=True)`` for all messages seen so far;
* on Basic.Consume it streams ``--deliver`` pre-encoded deliveries as fast as the socket
  takes them (a null source) while reading and discarding the client's acks.

A client's Connection.Close (our exact frame) is answered with CloseOk.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading

from pamqp import commands, frame
from pamqp.exceptions import UnmarshalingException

from tests.support import wire


def _send(sock: socket.socket, ch: int, m: object) -> None:
    sock.sendall(frame.marshal(m, ch))


def _discard(sock: socket.socket, leftover: bytes, msg_len: int, confirm: bool) -> None:
    tail = leftover[-64:]
    total = len(leftover)
    acked = 0
    buf = bytearray(1 << 20)
    while True:
        n = sock.recv_into(buf)
        if n == 0:
            return
        total += n
        tail = (tail + bytes(buf[max(0, n - 64):n]))[-64:]
        if tail.endswith(wire.CLOSE_FRAME):
            _send(sock, 0, commands.Connection.CloseOk())
            return
        if confirm and msg_len:
            done = total // msg_len
            if done > acked:
                sock.sendall(wire.ack_frame(done, multiple=True))
                acked = done


def _source(sock: socket.socket, count: int, body_size: int, ctag: str) -> None:
    body = b"x" * body_size
    batch = 1000
    one = wire.deliver_bytes(ctag, 1, "q", body)
    chunk = one * batch
    sent = 0
    try:
        while sent < count:
            n = min(batch, count - sent)
            sock.sendall(chunk if n == batch else one * n)
            sent += n
    except OSError:
        pass


def handle(sock: socket.socket, deliver: int, body_size: int) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        hdr = b""
        while len(hdr) < 8:
            d = sock.recv(8 - len(hdr))
            if not d:
                return
            hdr += d
        _send(sock, 0, commands.Connection.Start(
            version_major=0, version_minor=9, server_properties={"product": "nullsink"},
            mechanisms="PLAIN", locales="en_US"))
        buf = b""
        confirm = False
        while True:
            try:
                used, ch, m = frame.unmarshal(buf)
            except UnmarshalingException:
                d = sock.recv(1 << 16)
                if not d:
                    return
                buf += d
                continue
            start = buf
            buf = buf[used:]
            if isinstance(m, commands.Connection.StartOk):
                _send(sock, 0, commands.Connection.Tune(channel_max=2047, frame_max=131072,
                                                        heartbeat=0))
            elif isinstance(m, commands.Connection.Open):
                _send(sock, 0, commands.Connection.OpenOk())
            elif isinstance(m, commands.Channel.Open):
                _send(sock, ch, commands.Channel.OpenOk())
            elif isinstance(m, commands.Basic.Qos):
                _send(sock, ch, commands.Basic.QosOk())
            elif isinstance(m, commands.Queue.Declare):
                _send(sock, ch, commands.Queue.DeclareOk(queue=m.queue or "q",
                                                         message_count=0, consumer_count=0))
            elif isinstance(m, commands.Confirm.Select):
                confirm = True
                _send(sock, ch, commands.Confirm.SelectOk())
            elif isinstance(m, commands.Basic.Consume):
                ctag = m.consumer_tag or "ctag"
                _send(sock, ch, commands.Basic.ConsumeOk(consumer_tag=ctag))
                threading.Thread(target=_source, args=(sock, deliver, body_size, ctag),
                                 daemon=True).start()
                _discard(sock, buf, 0, False)
                return
            elif isinstance(m, commands.Basic.Publish):
                # message length = method frame + header frame + body frame(s), from the first
                while True:
                    try:
                        msg_len = used
                        u2, _, h = frame.unmarshal(start[msg_len:])
                        msg_len += u2
                        left = h.body_size
                        while left > 0:
                            u3, _, b = frame.unmarshal(start[msg_len:])
                            msg_len += u3
                            left -= len(b.value)
                        break
                    except UnmarshalingException:
                        d = sock.recv(1 << 16)
                        if not d:
                            return
                        start += d
                _discard(sock, start, msg_len, confirm)
                return
            elif isinstance(m, commands.Connection.Close):
                _send(sock, 0, commands.Connection.CloseOk())
                return
            elif isinstance(m, commands.Channel.Close):
                _send(sock, ch, commands.Channel.CloseOk())
    except OSError:
        pass
    finally:
        sock.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--deliver", type=int, default=1_000_000)
    p.add_argument("--body-size", type=int, default=200)
    a = p.parse_args(argv)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((wire.HOST, 0))
    srv.listen(128)
    print(f"nullsink: listening on {srv.getsockname()[1]}", flush=True)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=handle, args=(c, a.deliver, a.body_size), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
