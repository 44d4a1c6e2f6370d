"""The metadata image (brokers, topics, partition state) and the stores that keep it: a local
file for one broker, etcd for a cluster."""
