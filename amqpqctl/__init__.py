"""``amqpqctl``: a rabbitmqctl-like command line that manages a broker through its management
HTTP API only (``amqpqctl list_queues name messages``, ``amqpqctl add_vhost v``...).

Source: https://www.rabbitmq.com/docs/man/rabbitmqctl.8 (command names, columns, output).
"""
