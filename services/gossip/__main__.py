"""`python -m services.gossip --config FILE`: run the gossip service alone."""

from services.common.cli import service_main

raise SystemExit(service_main("gossip"))
