"""The admin API's reconciliation queue (`router.py`), beside the operations'
(`app/admin/router.py`)."""
