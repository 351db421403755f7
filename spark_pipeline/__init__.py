"""ternmq's log ETL: JSON-lines event logs in, Parquet tables for Spark SQL out.

Layers, from the bottom: ``schemas`` (Spark types built from the event catalogue in
``services.common.events``), ``extract`` (files -> one typed frame of events),
``transforms`` (pure ``DataFrame -> DataFrame`` functions, one table each), ``jobs``
(extract, transform, load), ``cli`` (the ``etl`` click group). ``reference`` is a plain
Python twin of the audit used to cross-check Spark and as the benchmark baseline;
``synthetic`` writes realistic logs with known injected faults.
"""

from __future__ import annotations

from typing import Final

# Here, not in ``session``, so that the CLI can show it without importing pyspark.
DEFAULT_MASTER: Final = "local[*]"
