"""`python -m services.registry --config FILE`: run the registry service alone."""

from services.common.cli import service_main

raise SystemExit(service_main("registry"))
