"""A ternmq node: the four services run together, and what an operator reaches them by.

The one package that knows every service: it gathers their settings into the node's
schema, starts them under ``services.common.supervisor`` in dependency order, serves
the node's HTTP API over their Admin RPCs, and holds the ``ternmq`` command. Services
and ``services.common`` never import it, so each service stays startable alone.
"""
