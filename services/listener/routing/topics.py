"""Topic and filter helpers that need no trie.

Topics and filters are '/'-separated levels; an empty level is a real level (``a//b``
has three, ``/a`` two). ``+`` matches exactly one level, ``#`` (last level only) matches
any number of levels including none, so ``a/#`` matches ``a`` [MQTT-4.7.1-2]. A topic
whose first character is ``$`` is not matched by a filter whose first level is a
wildcard [MQTT-4.7.2-1]: ``#`` and ``+/x`` never see ``$SYS/x``.

Validity (UTF-8, no NUL, wildcards alone in their level, ``#`` last, no wildcards in
topic names, non-empty) is checked by the MQTT codec before anything reaches routing;
these functions assume valid input.
"""

from __future__ import annotations


def topic_matches(topic_filter: str, topic: str) -> bool:
    """Whether a (non-shared) filter matches a topic name, level by level.

    For one-off checks (ACLs, retained delivery on subscribe); routing uses the tries.
    """
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    flevels = topic_filter.split("/")
    tlevels = topic.split("/")
    for i, flevel in enumerate(flevels):
        if flevel == "#":
            return True
        if i >= len(tlevels):
            return False
        if flevel != "+" and flevel != tlevels[i]:
            return False
    return len(flevels) == len(tlevels)
