"""Hibernation: an idle kernel's variables saved before its server stops, restored on the user's return.

- in the kernel: :mod:`.saver` (the save), :mod:`.restorer` (the restore, with :mod:`.manifestcheck`,
  :mod:`.namespace` for the versions a state was saved with, and :mod:`.placement` for where device arrays
  go), :mod:`.kernelside` (the calls the server makes silently, and the ones the magic and the widget make);
- in the server: :mod:`.hibernator` (the one path of a save and a restore), :mod:`.serverside` (which kernels,
  what limits, the documents), :mod:`.handlers` (the endpoints), :mod:`.atstop` (the save as the server
  stops), :mod:`.notice` (what open pages hear of a save before a stop) and :mod:`.retention` (old states
  pruned); :mod:`.kernelcall` is the silent execution between server and kernel;
- :mod:`.layout`: where states live and the file rules; :mod:`.pickler`, :mod:`.arrays`, :mod:`.frameworks`:
  the format;
- :mod:`.magic` and :mod:`.offerwidget`: ``%fracnb_restore`` and the restore offer in the notebook.

``%load_ext fracnb_meter.hibernation`` adds ``%fracnb_restore`` (:mod:`.magic`). docs/hibernation.md
says what survives a hibernation and what does not.
"""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    from .magic import register  # noqa: PLC0415 - keeps `import fracnb_meter.hibernation` light

    register(ipython)
