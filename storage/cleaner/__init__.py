"""Log compaction that understands transactions (Kafka's log cleaner)."""
