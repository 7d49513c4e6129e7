"""amqpq clusters (``--cluster-etcd``): several nodes whose membership is kept in etcd."""
