"""The msgstore as a real process: durability across SIGKILL, fencing, a full store.

Each test starts ``python -m services.msgstore`` with its own data_dir and conf file and
talks to it over the real gRPC unix socket (``service_address``), as a listener would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from services.common.config import load
from services.common.grpcutil import CHANNEL_OPTIONS, service_address
from services.node.schema import schema
from services.pb import common_pb2, common_pb2_grpc, msgstore_pb2, msgstore_pb2_grpc

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KEY = common_pb2.SessionKey(mountpoint="", client_id="durable-1")
START_TIMEOUT = 60.0


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class MsgStore:
    """One msgstore process over a data_dir that outlives restarts."""

    def __init__(self, base: Path, **settings: str) -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        lines = {
            "data_dir": str(base / "data"),
            "log_dir": str(base / "log"),
            "log.console": "off",
            "msgstore.fsync": "always",
            **settings,
        }
        self.conf = base / "ternmq.conf"
        self.conf.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
        self.address = service_address(load(schema(), self.conf), "msgstore")
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: grpc.Channel | None = None

    @property
    def stub(self) -> msgstore_pb2_grpc.MsgStoreStub:
        assert self.channel is not None
        return msgstore_pb2_grpc.MsgStoreStub(self.channel)

    def output(self) -> str:
        path = self.base / "msgstore.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> None:
        with open(self.base / "msgstore.out", "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.msgstore", "--config", str(self.conf)],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        socket_path = Path(self.address.removeprefix("unix:"))
        wait_for(lambda: self._alive() and socket_path.exists(), START_TIMEOUT, "the socket")
        self.channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        wait_for(self._answers, START_TIMEOUT, "a Stats reply")

    def _alive(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"msgstore exited with {self.proc.returncode}:\n{self.output()}")
        return True

    def _answers(self) -> bool:
        self._alive()
        try:
            self.stub.Stats(msgstore_pb2.StatsRequest(), timeout=2)
        except grpc.RpcError:
            return False
        return True

    def _close_channel(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._close_channel()

    def stop(self) -> int:
        """SIGTERM; the exit status (must come within a few seconds)."""
        assert self.proc is not None
        self._close_channel()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("msgstore did not stop within 15 s of SIGTERM") from None
        return int(self.proc.returncode)

    def read_all(self, key: common_pb2.SessionKey, epoch: int = 0) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        after = 0
        for _ in range(10_000):
            reply = self.stub.Read(
                msgstore_pb2.ReadRequest(key=key, epoch=epoch, after_seq=after, max_entries=500),
                timeout=10,
            )
            if not reply.entries:
                return out
            out += [(e.seq, e.delivery.msg.msg_id) for e in reply.entries]
            after = reply.entries[-1].seq
        raise AssertionError("Read did not reach the end of the queue")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Callable[..., MsgStore]]:
    made: list[MsgStore] = []

    def make(**settings: str) -> MsgStore:
        made.append(MsgStore(tmp_path / f"ms{len(made)}", **settings))
        return made[-1]

    yield make
    for ms in made:
        if ms.proc is not None and ms.proc.poll() is None:
            ms.kill()


def append(msg_id: str, epoch: int = 1, key: common_pb2.SessionKey = KEY,
           size: int = 10) -> msgstore_pb2.Append:  # fmt: skip
    msg = common_pb2.MqttMessage(msg_id=msg_id, topic="t/1", payload=b"p" * size, qos=1)
    return msgstore_pb2.Append(key=key, epoch=epoch, delivery=common_pb2.Delivery(msg=msg, qos=1))


def pairs(result: msgstore_pb2.StoreBatchResult) -> list[tuple[int, int]]:
    """``(status, seq)`` of each append of the batch."""
    assert len(result.statuses) == len(result.seqs)
    return list(zip(result.statuses, result.seqs, strict=True))


def one_batch(ms: MsgStore, batch: msgstore_pb2.StoreBatch) -> msgstore_pb2.StoreBatchResult:
    (result,) = list(ms.stub.Stream(iter([batch]), timeout=30))
    assert isinstance(result, msgstore_pb2.StoreBatchResult)
    assert result.batch_id == batch.batch_id
    return result


class Pipeline:
    """Streams batches with up to ``window`` in flight until told to stop."""

    def __init__(self, batches: int, per_batch: int, window: int = 16) -> None:
        self.batches = batches
        self.per_batch = per_batch
        self.window = threading.Semaphore(window)
        self.stop = threading.Event()
        self.sent: list[list[str]] = []

    def requests(self) -> Iterator[msgstore_pb2.StoreBatch]:
        for b in range(self.batches):
            while not self.window.acquire(timeout=0.1):
                if self.stop.is_set():
                    return
            if self.stop.is_set():
                return
            ids = [f"m{b:05d}-{i:02d}" for i in range(self.per_batch)]
            self.sent.append(ids)
            yield msgstore_pb2.StoreBatch(batch_id=b, appends=[append(m) for m in ids])


def test_acknowledged_appends_survive_sigkill_in_order(store: Callable[..., MsgStore]) -> None:
    ms = store()
    ms.start()
    assert ms.stub.Open(msgstore_pb2.OpenRequest(key=KEY, epoch=1, create=True)).exists
    pipe = Pipeline(batches=5000, per_batch=20)
    acked: list[tuple[int, str]] = []
    next_batch = 0
    with pytest.raises(grpc.RpcError) as failure:
        for result in ms.stub.Stream(pipe.requests()):
            assert result.batch_id == next_batch and not result.error
            ids = pipe.sent[result.batch_id]
            assert list(result.statuses) == [msgstore_pb2.APPEND_OK] * len(ids)
            acked += list(zip(result.seqs, ids, strict=True))
            next_batch += 1
            pipe.window.release()
            if next_batch == 150:
                ms.kill()  # with up to 16 batches still in flight
    pipe.stop.set()
    assert failure.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert len(acked) == 150 * 20
    assert [s for s, _ in acked] == list(range(1, len(acked) + 1))

    ms.start()
    stored = ms.read_all(KEY)

    # Every acknowledged append is there with its seq, in order; appends that were
    # committed but not yet acknowledged may follow them, in the order they were sent.
    assert stored[: len(acked)] == acked
    sent_order = [m for ids in pipe.sent for m in ids]
    assert [m for _, m in stored] == sent_order[: len(stored)]
    assert [s for s, _ in stored] == list(range(1, len(stored) + 1))
    state = ms.stub.Open(msgstore_pb2.OpenRequest(key=KEY, epoch=1, create=True))
    assert state.last_seq == len(stored) and state.count == len(stored)

    result = one_batch(ms, msgstore_pb2.StoreBatch(batch_id=1, appends=[append("after")]))
    assert pairs(result) == [(msgstore_pb2.APPEND_OK, len(stored) + 1)]
    assert ms.stop() == 0


def test_stale_epochs_are_refused_and_fencing_survives_restart(
    store: Callable[..., MsgStore],
) -> None:
    ms = store()
    ms.start()
    assert ms.stub.Open(msgstore_pb2.OpenRequest(key=KEY, epoch=5, create=True)).epoch == 5
    refused = ms.stub.Open(msgstore_pb2.OpenRequest(key=KEY, epoch=3, create=True, clean=True))
    assert "stale epoch" in refused.error and refused.epoch == 5

    batch = msgstore_pb2.StoreBatch(
        batch_id=9, appends=[append("old", epoch=3), append("new", epoch=5), append("pub", 0)]
    )
    result = one_batch(ms, batch)
    assert pairs(result) == [
        (msgstore_pb2.APPEND_STALE_EPOCH, 0), (msgstore_pb2.APPEND_OK, 1),
        (msgstore_pb2.APPEND_OK, 2),
    ]  # fmt: skip
    stale_ack = msgstore_pb2.Ack(key=KEY, epoch=4, seqs=[1])
    assert one_batch(ms, msgstore_pb2.StoreBatch(batch_id=10, acks=[stale_ack])).stale_acks == 1
    stale_read = ms.stub.Read(msgstore_pb2.ReadRequest(key=KEY, epoch=4))
    assert not stale_read.entries and "stale epoch" in stale_read.state.error
    assert ms.read_all(KEY, epoch=5) == [(1, "new"), (2, "pub")]

    assert ms.stop() == 0
    ms.start()
    assert "stale epoch" in ms.stub.Open(msgstore_pb2.OpenRequest(key=KEY, epoch=4)).error
    assert ms.stub.Open(msgstore_pb2.OpenRequest(key=KEY, epoch=6)).epoch == 6
    result = one_batch(ms, msgstore_pb2.StoreBatch(batch_id=1, appends=[append("x", epoch=5)]))
    assert pairs(result) == [(msgstore_pb2.APPEND_STALE_EPOCH, 0)]
    assert ms.stop() == 0
    log = (ms.base / "log" / "msgstore.jsonl").read_text()
    assert '"event":"queue.created"' in log and '"event":"message.queued"' in log


def test_reads_on_either_side_of_the_inline_limits_return_whole_pages(
    store: Callable[..., MsgStore],
) -> None:
    """A Read within the servicer's inline limits (64 entries, 256 KB) is answered on the
    event loop, one past them in a thread: either way a page holds what was asked for, in
    order, and ``more`` says whether live entries follow it."""
    ms = store()
    ms.start()
    assert ms.stub.Open(msgstore_pb2.OpenRequest(key=KEY, epoch=1, create=True)).exists
    ids = [f"m{i:03d}" for i in range(100)]
    result = one_batch(ms, msgstore_pb2.StoreBatch(batch_id=1, appends=[append(m) for m in ids]))
    assert all(status == msgstore_pb2.APPEND_OK for status, _ in pairs(result))

    def page(after: int, max_entries: int) -> tuple[list[str], bool]:
        reply = ms.stub.Read(
            msgstore_pb2.ReadRequest(key=KEY, epoch=1, after_seq=after, max_entries=max_entries)
        )
        return [e.delivery.msg.msg_id for e in reply.entries], reply.more

    assert page(0, 64) == (ids[:64], True)  # within: inline
    assert page(0, 65) == (ids[:65], True)  # past the entries: in a thread
    assert page(0, 0) == (ids, False)  # as many as sensible: all of them
    assert page(60, 10) == (ids[60:70], True)
    assert page(90, 64) == (ids[90:], False)
    # Entries of 100 KB: the inline read stops at 256 KB and the page is read again whole.
    big = [f"b{i}" for i in range(5)]
    batch = msgstore_pb2.StoreBatch(batch_id=2, appends=[append(m, size=100_000) for m in big])
    assert all(status == msgstore_pb2.APPEND_OK for status, _ in pairs(one_batch(ms, batch)))
    assert page(100, 0) == (big, False)
    assert page(100, 4) == (big[:4], True)
    assert ms.stop() == 0


def test_appends_marked_offline_meet_the_offline_limit(store: Callable[..., MsgStore]) -> None:
    """``Open`` sets both limits; an ``Append`` the listener marks offline (it holds no
    connection of the session) meets the offline one, the others the online one, and a
    restarted store keeps both."""
    ms = store()
    ms.start()
    ms.stub.Open(
        msgstore_pb2.OpenRequest(key=KEY, epoch=3, create=True, max_len=4, max_offline_len=2)
    )

    def offline(msg_id: str) -> msgstore_pb2.Append:
        a = append(msg_id, epoch=0)
        a.offline = True
        return a

    batch = msgstore_pb2.StoreBatch(
        batch_id=1, appends=[offline(f"f{i}") for i in range(3)] + [append("n", epoch=0)]
    )
    statuses = [status for status, _ in pairs(one_batch(ms, batch))]
    ok, full = msgstore_pb2.APPEND_OK, msgstore_pb2.APPEND_QUEUE_FULL
    assert statuses == [ok, ok, full, ok]
    assert ms.stop() == 0
    ms.start()
    batch = msgstore_pb2.StoreBatch(batch_id=2, appends=[offline("g"), append("m", epoch=0)])
    assert [status for status, _ in pairs(one_batch(ms, batch))] == [full, ok]
    assert ms.stop() == 0


def test_a_full_store_refuses_appends_clearly_and_keeps_serving(
    store: Callable[..., MsgStore],
) -> None:
    ms = store(**{"msgstore.map_size": "1MB"})
    ms.start()
    ms.stub.Open(msgstore_pb2.OpenRequest(key=KEY, epoch=1, create=True))
    ok: list[int] = []
    error = ""
    for b in range(200):
        batch = msgstore_pb2.StoreBatch(
            batch_id=b, appends=[append(f"big{b}-{i}", size=4000) for i in range(10)]
        )
        result = one_batch(ms, batch)
        ok += [seq for status, seq in pairs(result) if status == msgstore_pb2.APPEND_OK]
        if result.error:
            error = result.error
            statuses = set(result.statuses)
            assert msgstore_pb2.APPEND_STORE_ERROR in statuses
            break
    assert "store full" in error, "the store never filled"
    assert ok and ms.proc is not None and ms.proc.poll() is None

    stats = ms.stub.Stats(msgstore_pb2.StatsRequest(max_queues=1))
    assert stats.entries == len(ok) and stats.top[0].count == len(ok)
    assert [s for s, _ in ms.read_all(KEY)] == ok

    again = one_batch(ms, msgstore_pb2.StoreBatch(batch_id=1, appends=[append("more", size=4000)]))
    assert list(again.statuses) == [msgstore_pb2.APPEND_STORE_ERROR] and again.error
    # Acknowledging drains the store; appends are accepted again.
    drained = one_batch(ms, msgstore_pb2.StoreBatch(batch_id=2, acks=[
        msgstore_pb2.Ack(key=KEY, epoch=1, seqs=ok)]))  # fmt: skip
    assert not drained.error
    after = one_batch(ms, msgstore_pb2.StoreBatch(batch_id=3, appends=[append("fits", size=4000)]))
    assert list(after.statuses) == [msgstore_pb2.APPEND_OK]
    assert ms.stop() == 0
    assert '"event":"store.error"' in (ms.base / "log" / "msgstore.jsonl").read_text()


def test_unreadable_and_invalid_batches_are_refused_and_the_stream_goes_on(
    store: Callable[..., MsgStore],
) -> None:
    """Batches reach the store as bytes (``wire`` reads their appends): protobuf still
    validates each one, and what it or the store refuses is answered, not stored."""
    ms = store()
    ms.start()
    ms.stub.Open(msgstore_pb2.OpenRequest(key=KEY, epoch=1, create=True))
    assert ms.channel is not None
    raw = ms.channel.stream_stream(
        "/ternmq.msgstore.MsgStore/Stream",
        request_serializer=None,
        response_deserializer=msgstore_pb2.StoreBatchResult.FromString,
    )
    bad_utf8 = msgstore_pb2.StoreBatch(batch_id=2, appends=[append("tmp")]).SerializeToString()
    bad_utf8 = bad_utf8.replace(b"tmp", b"t\xffp")  # msg_id no longer UTF-8
    bad_mark = msgstore_pb2.StoreBatch(
        batch_id=3, appends=[append("m1")], marks=[msgstore_pb2.Mark(key=KEY, epoch=1, kind=7)]
    ).SerializeToString()
    good = msgstore_pb2.StoreBatch(batch_id=4, appends=[append("ok")]).SerializeToString()
    results = list(raw(iter([b"\x12\x05\x0a", bad_utf8, bad_mark, good]), timeout=30))

    assert [r.batch_id for r in results] == [0, 0, 3, 4]  # 0: unreadable, id unknown
    truncated, not_utf8, unknown_kind, fine = results
    assert "not a StoreBatch" in truncated.error and not truncated.statuses
    assert "not a StoreBatch" in not_utf8.error and not not_utf8.statuses
    assert "invalid batch" in unknown_kind.error
    assert pairs(unknown_kind) == [(msgstore_pb2.APPEND_STORE_ERROR, 0)]
    assert pairs(fine) == [(msgstore_pb2.APPEND_OK, 1)] and not fine.error
    assert ms.read_all(KEY) == [(1, "ok")]
    assert ms.stop() == 0


def test_the_data_dir_and_lock_are_reused_after_sigkill(store: Callable[..., MsgStore]) -> None:
    """A killed process leaves a stale socket file and LMDB lock; a restart copes."""
    ms = store()
    ms.start()
    ms.kill()
    assert Path(ms.address.removeprefix("unix:")).exists()
    ms.start()
    assert ms.stub.Stats(msgstore_pb2.StatsRequest()).queues == 0
    assert ms.stop() == 0
    assert os.path.isdir(ms.base / "data" / "msgstore")


def status(ms: MsgStore) -> dict[str, Any]:
    assert ms.channel is not None
    reply = common_pb2_grpc.AdminStub(ms.channel).Status(common_pb2.StatusRequest(), timeout=5)
    details: dict[str, Any] = json.loads(reply.json)
    return details


def test_tombstones_of_deleted_queues_go_after_their_ttl_even_across_a_kill(
    store: Callable[..., MsgStore],
) -> None:
    """A deleted queue's tombstone fences older epochs for ``msgstore.tombstone_ttl``, then
    goes (services/msgstore/tombstones.py): tombstones no longer grow the store with every
    client id that ever had a queue. Those on disk at a restart get a full ttl again."""
    ms = store(**{"msgstore.tombstone_ttl": "1h"})
    ms.start()
    keys = [common_pb2.SessionKey(mountpoint="", client_id=f"gone-{i}") for i in range(30)]
    for k in keys:
        assert ms.stub.Open(msgstore_pb2.OpenRequest(key=k, epoch=3, create=True)).exists
        one_batch(ms, msgstore_pb2.StoreBatch(batch_id=1, appends=[append("m", 3, k)]))
        gone = ms.stub.Delete(msgstore_pb2.DeleteRequest(key=k, epoch=3))
        assert not gone.exists and not gone.error
    refused = ms.stub.Open(msgstore_pb2.OpenRequest(key=keys[0], epoch=2, create=True))
    assert "stale epoch" in refused.error
    ms.kill()
    ms.conf.write_text(ms.conf.read_text().replace("= 1h", "= 1s"))
    ms.start()
    wait_for(lambda: status(ms)["tombstones_collected"] == 30, 20, "tombstones collected")
    assert status(ms)["tombstones"] == 0
    again = ms.stub.Open(msgstore_pb2.OpenRequest(key=keys[0], epoch=4, create=True))
    assert again.exists and again.last_seq == 0
    result = one_batch(ms, msgstore_pb2.StoreBatch(batch_id=2, appends=[append("n", 4, keys[0])]))
    assert pairs(result) == [(msgstore_pb2.APPEND_OK, 1)]
    stale = one_batch(ms, msgstore_pb2.StoreBatch(batch_id=3, appends=[append("o", 3, keys[0])]))
    assert pairs(stale) == [(msgstore_pb2.APPEND_STALE_EPOCH, 0)]
    assert ms.stop() == 0
