"""``python -m spark_pipeline ...`` runs the same ``etl`` group as ``ternmq etl``."""

from __future__ import annotations

from spark_pipeline.cli import etl

if __name__ == "__main__":
    etl(prog_name="python -m spark_pipeline")
