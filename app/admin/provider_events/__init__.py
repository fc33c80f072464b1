"""The admin API's view of the providers' notifications inbox (`router.py`), beside the
operations' (`app/admin/router.py`)."""
