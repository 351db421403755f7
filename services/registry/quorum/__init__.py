"""The session directory as a quorum register per client id (CASPaxos), as pure cores.

``register`` holds the values and the changes, ``messages`` the ballots and what travels
between nodes, ``acceptor`` and ``proposer`` the two state machines. The theory of
operation, with a worked example, opens :mod:`services.registry.quorum.proposer`. No
module here does I/O: the shell persists, sends, times out and retries.
"""
