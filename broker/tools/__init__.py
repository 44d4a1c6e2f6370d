"""Operator tools run from the `gregor` command line (they talk to brokers over the wire)."""
