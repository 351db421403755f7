"""The ETL over a real dev cluster's logs (issue 19, part 6): a message published on node 1
and delivered to a persistent subscriber on node 2 is one audit row, delivered once, and
``node_load`` has both nodes' share of the same run. (The ``netsplits`` table from a real
cluster's run is checked in ``tests/integration/test_cluster_membership.py``.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_pipeline.jobs import run_etl
from tests.integration.test_cluster_broker import MQTT
from tests.integration.test_cluster_membership import N1, N2
from tests.support.clients import Client, until_routed
from tests.support.cluster import dev_cluster
from tests.support.node import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

TOPIC = "xaudit/t"
COUNT = 20


def _events(base: Path, node: str, name: str) -> list[dict[str, Any]]:
    found = []
    for path in (base / node.split("@")[0] / "log").glob("listener*.jsonl*"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == name:
                found.append(event)
    return found


def test_a_message_published_on_one_node_and_delivered_on_another_is_one_audit_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    with dev_cluster(tmp_path / "cluster") as base:
        sub = Client("xaudit-sub", MQTT[N2], clean=False).connect()
        pub = Client("xaudit-pub", MQTT[N1]).connect()
        try:
            sub.subscribe(TOPIC, 1)
            until_routed(pub, TOPIC, [sub])  # QoS 0 probes: not part of the QoS >= 1 audit
            for i in range(COUNT):
                pub.publish(TOPIC, str(i).encode(), qos=1, tag=i)
            wait_for(lambda: len(pub.acked) >= COUNT, 30, what="PUBACKs")
            got = [int(m.payload) for m in sub.take(COUNT)]
        finally:
            pub.disconnect()
            sub.disconnect()
    # Leaving ``dev_cluster`` stopped every node: their logs are flushed and closed.
    assert got == list(range(COUNT))
    published = {e["msg_id"] for e in _events(base, N1, "message.published")}
    to_sub = [e for e in _events(base, N2, "message.delivered") if e["client_id"] == "xaudit-sub"]
    delivered = {e["msg_id"] for e in to_sub}
    assert len(delivered) == COUNT and delivered <= published, "published on n1, delivered on n2"

    expect = tmp_path / "expect.json"
    expect.write_text(
        json.dumps([{"subscriber": "xaudit-sub", "topic_filter": "xaudit/#", "from": None}])
    )
    out = tmp_path / "tables"
    summary = run_etl(base, out, spark=spark, expect=expect)
    rows = (
        spark.read.parquet(str(out / "delivery_audit")).where("subscriber = 'xaudit-sub'").collect()
    )
    assert sorted(r.msg_id for r in rows) == sorted(delivered), "one row per message"
    for r in rows:
        assert (r.publisher, r.topic, r.qos) == ("xaudit-pub", TOPIC, 1)
        assert r.published and r.expected and r.delivered and r.acked
        assert (r.deliveries, r.lost, r.duplicated, r.out_of_order) == (1, False, False, False)
    assert (summary["lost"], summary["duplicated"], summary["out_of_order"]) == (0, 0, 0)
    assert summary["corrupt_lines"] == 0

    load = {
        r.node: r
        for r in spark.read.parquet(str(out / "node_load"))
        .groupBy("node")
        .sum("published", "delivered")
        .withColumnsRenamed({"sum(published)": "published", "sum(delivered)": "delivered"})
        .collect()
    }
    assert load[N1].published >= COUNT and load[N2].delivered >= COUNT, load
