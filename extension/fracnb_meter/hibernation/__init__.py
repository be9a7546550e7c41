"""Hibernation: an idle kernel's variables saved before its server stops, restored on the user's return.

- in the kernel: :mod:`.saver` (the save), :mod:`.restorer` (the restore), :mod:`.kernelside`
  (the calls the server makes silently, and the ones the magic and the widget make);
- in the server: :mod:`.serverside` (which kernels, what limits, the documents) and
  :mod:`.handlers` (the endpoints); :mod:`.kernelcall` is the silent execution between them;
- :mod:`.layout`: where states live and the file rules; :mod:`.pickler`, :mod:`.arrays`,
  :mod:`.frameworks`: the format.

``%load_ext fracnb_meter.hibernation`` adds ``%fracnb_restore`` (:mod:`.magic`). docs/hibernation.md
says what survives a hibernation and what does not.
"""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    from .magic import register  # noqa: PLC0415 - keeps `import fracnb_meter.hibernation` light

    register(ipython)
