"""`python -m services.msgstore --config FILE`: run the msgstore service alone."""

# Before the heavy imports: a supervised child takes up its supervision (SIGINT ignored,
# death with its parent) as the first thing it does.
from services.common.child_process import adopt_supervision

adopt_supervision()

from services.node.cli import service_main  # noqa: E402

raise SystemExit(service_main("msgstore"))
