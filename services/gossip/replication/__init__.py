"""Metadata replication between the gossip services of a cluster: the pure parts."""
