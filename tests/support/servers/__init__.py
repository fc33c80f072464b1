"""Servers tests stand up as the other end of a connection: the webhook receiver program,
a scripted socket server, a listener that never accepts."""
