"""The reference agent platform: model server, agent service, gateway, state store and supervisor.

Each service is a small module runnable on its own (``python -m drillbook.sandbox.<name>``);
`launcher` brings the whole platform up and down, `client` talks to it.
"""
