"""A stand-in for the downstream payment provider, with a durable ledger and fault rules.

`create_app(db_path)` builds the ASGI app; `serve(db_path, host=..., port=...)` runs it. See
docs/fake-provider.md for the magic account ids, the faults and the admin API.
"""
