"""The names of Kafka's internal topics, defined once for every layer (the pure coordinators
place records by them; the broker creates, protects and dumps them)."""

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
