"""Runnable examples of the amqpq Spark sink."""
