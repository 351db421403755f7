"""`python -m services.msgstore --config FILE`: run the msgstore service alone."""

from services.node.cli import service_main

raise SystemExit(service_main("msgstore"))
