"""The driver JVM's options: a local driver gets the throughput collector, unless the
options given choose one (the JVM refuses to start with two)."""

from __future__ import annotations

import pytest

from spark_pipeline.session import LOCAL_GC, driver_java_options


def test_a_local_driver_gets_the_throughput_collector_first() -> None:
    got = driver_java_options(" -Dlog4j.configurationFile=file:/x -XX:SharedArchiveFile=/a ", True)
    assert got == f"{LOCAL_GC} -Dlog4j.configurationFile=file:/x -XX:SharedArchiveFile=/a"
    assert driver_java_options("", True) == LOCAL_GC


@pytest.mark.parametrize("chosen", ["-XX:+UseG1GC", "-XX:+UseSerialGC", "-XX:+UseZGC"])
def test_a_collector_the_options_choose_is_kept_alone(chosen: str) -> None:
    assert driver_java_options(f"-Dx=1 {chosen}", True) == f"-Dx=1 {chosen}"


def test_other_masters_keep_their_options_as_given() -> None:
    assert driver_java_options(" -Dx=1 ", False) == "-Dx=1"
    assert driver_java_options("", False) == ""
