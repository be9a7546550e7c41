"""The fracnb hub service: GPU-aware idle culling with warnings, quota status and metrics.

Run by JupyterHub as a managed service: ``python -m fracnb_spawner.service --config
jupyterhub_config.py``. :mod:`.cullpass` holds the culling pass, :mod:`.loops` what runs in the
background, :mod:`.api` the HTTP API, :mod:`.web` the page, :mod:`.state` what they share, :mod:`.app`
the config shell.
"""
