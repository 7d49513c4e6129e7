"""Client x scenario interoperability matrix.

Every scenario (``scenarios.py``) is written once against a small synchronous *driver* API
(``driver.py``); one driver per client library (``drivers/``) maps that API onto the library:
pika (BlockingConnection, SelectConnection, AsyncioConnection), aio-pika, aiormq, kombu on
py-amqp, amqpstorm and Node.js amqplib (through ``node/driver.js``, a JSON-lines bridge).
rabbitmq-c's command line tools (Debian ``amqp-tools``) cannot be driven call by call, so they
have their own scenario functions (``amqp_tools.py``) producing the same observations.

A scenario returns an *observation*: a JSON-able dict of what the client saw (deliveries,
order, redelivered flags, reply codes and texts, returned messages, Declare-Ok counts). The
matrix tests check it against the expected observation; the differential test
(``interop_tests/test_matrix_vs_reference.py``) compares it with the one the same client makes
against the reference RabbitMQ.
"""
