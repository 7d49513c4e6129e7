"""``/api/federation-links``: the federation links' status, as
``rabbitmq_federation_management`` serves it.

``GET /api/federation-links`` (every vhost the user may read in),
``GET /api/federation-links/{vhost}``, and
``DELETE /api/federation-links/vhost/{vhost}/{id}/{node}/restart`` (204; 404 when this node
runs no link of that id). Rows come from :meth:`federation.manager.FederationManager.status`:
``node``, ``exchange`` + ``upstream_exchange`` or ``queue`` + ``upstream_queue`` +
``consumer_tag``, ``type``, ``vhost``, ``upstream``, ``id``, ``status`` (``starting``,
``running``, ``error`` + ``error``), ``local_connection`` when running (the link's
connection to this broker, as ``/api/connections`` names it), ``uri`` (no credentials),
``timestamp``. RabbitMQ adds ``local_channel`` (its Erlang channel's statistics) to running
links; amqpq does not.

Source: https://www.rabbitmq.com/docs/federation#status, checked with curl against RabbitMQ
3.10.8 with rabbitmq_federation_management.
"""

from __future__ import annotations

from federation import manager_of
from management.routes.link_status import link_status_routes

routes = link_status_routes("/api/federation-links",
                            "/api/federation-links/vhost/{vhost}/{id}/{node}/restart", "id",
                            manager_of, "federation link")
