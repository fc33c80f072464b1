"""The admin API's discrepancy queue (`router.py`), beside the operations'
(`app/admin/router.py`)."""
