"""The registry across nodes: the quorum register's I/O shell and the session handover.

The pure cores are in :mod:`services.registry.quorum`; here they meet the disk (the
acceptor's slots), the network (Prepare/Accept/Handover between registries) and the
registrar (a CONNECT claims its client id before it registers).
"""
