"""PySpark Kafka source and exactly-once sink (Python Data Source API) and the shop pipeline.

Uses Kafka clients only (confluent-kafka); never imports the broker.
"""
