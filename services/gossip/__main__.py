"""`python -m services.gossip --config FILE`: run the gossip service alone."""

from services.node.cli import service_main

raise SystemExit(service_main("gossip"))
