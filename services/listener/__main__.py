"""`python -m services.listener --config FILE`: run the listener service alone."""

from services.node.cli import service_main

raise SystemExit(service_main("listener"))
