"""The node: its configuration and environment, the broker state (vhosts, users,
permissions, limits, connections), direct reply-to, resource alarms and topology
persistence. Above the vhosts, below the AMQP server and the management API.
"""
