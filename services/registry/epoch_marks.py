"""The highest epoch seen per client id, for a bounded number of ids.

Two fences use it: the epochs at which other nodes took ids over (``Registrar.fence``: a
registration here that claimed an older one must not install its session) and the epochs
this node's own claims won (``Giver.claimed``: a TAKE below one comes from a claim that
lost, and must not carry the session off). Both only need the recent ids: a mark matters
while a registration or a handover of that id is under way, so the oldest are forgotten
first once ``limit`` ids are held.
"""

from __future__ import annotations

from collections import OrderedDict

from services.common.session_key import SessionKey


class EpochMarks:
    __slots__ = ("_marks", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._marks: OrderedDict[SessionKey, int] = OrderedDict()

    def get(self, key: SessionKey) -> int:
        """The highest epoch marked for ``key``; 0 when none is (or it was forgotten)."""
        return self._marks.get(key, 0)

    def raise_to(self, key: SessionKey, epoch: int) -> None:
        """Mark ``epoch`` for ``key`` unless a higher one is marked; the newest last."""
        if self._marks.get(key, 0) < epoch:
            self._marks[key] = epoch
            self._marks.move_to_end(key)
            while len(self._marks) > self.limit:
                self._marks.popitem(last=False)

    def discard(self, key: SessionKey) -> None:
        self._marks.pop(key, None)

    def __len__(self) -> int:
        return len(self._marks)
