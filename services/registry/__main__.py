"""`python -m services.registry --config FILE`: run the registry service alone."""

from services.node.cli import service_main

raise SystemExit(service_main("registry"))
