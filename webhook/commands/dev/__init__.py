"""`placer dev`: Placer on this machine in front of a development cluster, registered by URL. `command` (the
flags and the session), `manifests` (what is rendered from deploy/), `reach` (which address of this machine
the API server can call), `install` (what is created, and what is removed again on exit).

May import every package below `webhook.commands`; only `webhook.commands.cli` imports it.
"""
