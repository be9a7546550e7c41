"""The fracnb hub service: GPU-aware idle culling with warnings, quota status and metrics.

Run by JupyterHub as a managed service: ``python -m fracnb_spawner.service --config
jupyterhub_config.py``. :mod:`.core` holds the plain async logic, :mod:`.app` the config shell.
"""
