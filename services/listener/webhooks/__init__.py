"""Webhooks compatible with VerneMQ's ``vmq_webhooks``: the auth hooks ask a user's HTTP
service whether a client may connect, publish or subscribe."""
