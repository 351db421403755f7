"""What every service shares about other nodes: identity, the inter-node handshake."""
