"""``python -m amqpqctl`` runs ``amqpqctl``."""

from amqpqctl.cli import main

main()
