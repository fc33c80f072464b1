"""Servers tests stand up as the other end of a connection: the webhook receiver program,
a scripted socket server, a listener that never accepts; and a program that describes how
it was started (the fork server's tests)."""
