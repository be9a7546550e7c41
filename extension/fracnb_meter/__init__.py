"""fracnb_meter: GPU memory of this Jupyter server's kernels against the fractional-GPU budget.

- Jupyter server extension: ``GET {base_url}fracnb/api/usage`` (``fracnb_meter.routes``, served by
  ``fracnb_meter.server``).
- JupyterLab extension ``@fracnb/meter``: status bar item and side panel.
- IPython extension: ``%load_ext fracnb_meter`` shows a live quota widget in the notebook
  (or call ``fracnb_meter.widget.show()``) and adds ``%fracnb_restore`` (docs/hibernation.md).

Importing this package touches neither NVML nor the Jupyter server.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:  # the installed distribution's, which comes from extension/package.json (pyproject.toml)
    __version__ = version("fracnb")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .server import FracnbMeter  # noqa: PLC0415 - keeps `import fracnb_meter` light

    return [{"module": "fracnb_meter", "app": FracnbMeter}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "@fracnb/meter"}]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext fracnb_meter``: display the live GPU quota widget; add ``%fracnb_restore``."""
    from .hibernation import load_ipython_extension as load_restore  # noqa: PLC0415
    from .widget import load_ipython_extension as load  # noqa: PLC0415

    load_restore(ipython)
    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .widget import unload_ipython_extension as unload  # noqa: PLC0415

    unload(ipython)
