"""AMQP 0-9-1 client links between brokers, shared by dynamic shovels (:mod:`shovel`) and
federation (:mod:`federation`): :mod:`links.link` moves messages from a queue on one broker
to another with RabbitMQ's ack modes, :mod:`links.transport` is its batched write path over
aiormq, :mod:`links.local` reaches a broker for a URI (``amqp://`` without a host: this
one), :mod:`links.uri` checks and masks URIs, :mod:`links.manager` is what the shovel and
federation managers share (reconcile loop, stop, which node runs a link).

Layer: below ``shovel`` and ``federation``; imports nothing of the broker (a link is an
AMQP client of both ends).
"""
