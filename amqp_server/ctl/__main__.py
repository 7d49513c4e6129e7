"""``python -m amqp_server.ctl`` runs ``amqpqctl``."""

from amqp_server.ctl.cli import main

main()
