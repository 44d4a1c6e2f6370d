"""Cluster metadata: the image of brokers, topics and partition state, and the stores that keep it."""
