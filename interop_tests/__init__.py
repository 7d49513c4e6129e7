"""Interoperability suite: real AMQP client libraries (pika, aio-pika, kombu) against a broker."""
