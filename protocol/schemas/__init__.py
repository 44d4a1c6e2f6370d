"""Kafka message schemas kafka-python does not ship, as JSON data in Kafka's message format.

One file per message; the versions are the ``validVersions`` of Apache Kafka 4.3. They are
loaded into kafka-python's schema-driven message classes by ``protocol.extra_messages``.
"""
