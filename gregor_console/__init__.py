"""`gregor console`: a transaction console in the browser for any Kafka-protocol cluster.

A Kafka client only: it reads the cluster through the admin APIs (kafka-python's
`KafkaAdminClient`, as the `gregor` admin tools do) and never imports the broker's
own modules, only `broker.tools` (the client side). `model.py` is pure (the snapshot's
values, filters, pages, lags); `collect.py` reads one snapshot from the cluster;
`collector.py` refreshes it in the background; `web.py` serves the pages and their JSON
(`render.py`: the templates' environment); `metrics.py` Gregor's metrics endpoints;
`login.py` the console's own login; `app.py` the process.
"""
