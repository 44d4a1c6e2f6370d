"""Replication: what a leader tracks of its followers, and the fetchers followers run."""
