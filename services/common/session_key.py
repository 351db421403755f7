"""The one name for a session's key across every service.

A session is identified by ``(mountpoint, client_id)``, as VerneMQ's
``{MountPoint, ClientId}``: the registry registers it, the msgstore keys its queue by it,
the listener routes to it. On the wire it is ``common_pb2.SessionKey``; inside a service
it is this plain tuple (hashable, cheap, no import of protobuf in the pure cores).
"""

from __future__ import annotations

from typing import TypeAlias

SessionKey: TypeAlias = tuple[str, str]
"""``(mountpoint, client_id)``."""
