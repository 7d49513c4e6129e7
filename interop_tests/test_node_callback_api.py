"""Node.js amqplib's callback API, its own test "find high watermark" (issue #34).

The test sends on an exclusive queue until amqplib's writer is full, then closes the
connection with those thousands of publishes still queued: the writer interleaves channel
0's Connection.Close with channel 1's frames. RabbitMQ answers Close-Ok and reads until the
client hangs up; a broker that closes its socket with unread bytes resets it (ECONNRESET in
the client, whose close callback then never completes cleanly). Then "set high watermark":
a channel with ``highWaterMark`` twice that baseline takes that many sends without refusing
one, and closes the same way.

Runs through the matrix's Node driver (``interop_tests/matrix/node/driver.js``); skipped when
``node`` or amqplib is missing (``make interop-deps``).
"""

from __future__ import annotations

import pytest

from interop_tests.matrix.drivers.node_driver import NodeAmqplibDriver, unavailable

pytestmark = pytest.mark.timeout(120)


def test_close_with_thousands_of_publishes_queued(broker_url: str) -> None:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    driver = NodeAmqplibDriver()
    try:
        result = driver.callback_high_watermark(broker_url)
    finally:
        driver.shutdown()
    find, set_ = result["find"], result["set"]
    assert find["baseline"] > 100, result  # the writer really was full of publishes
    assert (find["close_error"], find["error_events"]) == (None, []), result
    assert set_["refused"] == 0, result
    assert (set_["close_error"], set_["error_events"]) == (None, []), result
