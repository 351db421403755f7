"""Forwarding copies of publishes to the listeners of other nodes."""
