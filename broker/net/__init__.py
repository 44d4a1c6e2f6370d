"""Networking between brokers: the inter-broker client."""
