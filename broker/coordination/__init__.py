"""Binding the coordinators to the cluster: the marker writer and the marker channel."""
