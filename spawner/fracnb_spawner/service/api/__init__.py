"""The service's HTTP API: one module per resource, their base (``base.py``) and the route table
(``routes.py``)."""
