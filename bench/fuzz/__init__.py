"""A mutation fuzzer over real sockets: valid MQTT sequences, broken, sent to a node.

``wire`` builds bytes, ``generate`` draws valid sequences from bounded pools, ``mutate``
breaks them, ``cases`` makes one reproducible case from ``(seed, index)``, ``conn`` is
one client connection, ``roundtrip`` the valid exchange run between the garbage,
``probe`` reads the node's /status and its services' memory, ``runner`` runs it all in
parallel. ``python -m bench.fuzz --help``; docs/fuzzing.md.
"""
