"""The JSON Schemas of docs/contract.md, and checking documents against them: the one loader.

The hub side (``fracnb_spawner``) and the notebook side (``fracnb_meter``) never import each
other; both read the shapes that cross between them from here. One file per JSON shape, in
``schemas/`` beside this module (shipped in the wheel):

- ``usage.schema.json``: ``GET {base_url}fracnb/api/usage``, which the meter produces and
  the JupyterLab extension reads (its TypeScript types are generated from the file);
- ``service-me.schema.json``: ``GET api/me`` of the hub's fracnb service, which
  ``fracnb_spawner.service`` produces and ``fracnb_meter.hubservice`` checks on receipt;
- ``pod-environment.schema.json``: the ``FRACNB_*`` variables the spawner sets, with the
  lists of backends and isolation levels both sides must agree on;
- ``memory-history.schema.json``: the usage document's ``history`` (GPU memory over the session,
  for the charts), which ``fracnb_meter.memoryhistory`` produces;
- ``session-report.schema.json``: ``POST api/sessions`` of the hub's fracnb service, a server
  session's GPU statistics, which ``fracnb_meter.sessionreport`` produces and the service checks on receipt;
- ``session-stats.schema.json``: ``GET {base_url}fracnb/api/session``, that report and each
  kernel's peak, for the notebook's own front ends;
- ``session-records.schema.json`` and ``history-report.schema.json``: the service's stored
  sessions (``GET api/sessions``) and the admins' report (``GET api/report``, ``fracnb-report``);
- ``service-advice.schema.json``: ``GET api/advice`` of the service, the user's advice for their
  next session, which ``fracnb_meter.nextadvice`` checks on receipt and passes on in the usage document;
- ``hibernation-*.schema.json`` and ``restore-*.schema.json``: hibernation (docs/hibernation.md):
  the hub service's request to save a server's kernels and the report it gets back, a saved
  state's manifest, the list of saved states, and the front ends' restore request and report.
- ``gpu-unused.schema.json``: how long a kernel or the server has done no GPU work (``fracnb_meter.gpuunused``),
  in the usage document and in the session report.
- ``use-report.schema.json``: ``POST api/activity`` of the service, when the server was last used
  (``fracnb_meter.use``), for its idle timeouts.
- ``display-zone.schema.json``: ``PUT {base_url}fracnb/api/display-zone``, the browser's time zone,
  in which the kernel writes its times (``fracnb_meter.displayzone``).
- ``stop-save.schema.json``: ``POST api/stop-saves`` of the service, what a server Kueue preempted
  saved as it stopped (``fracnb_meter.server``), for its stop notice; ``stop-save-answer.schema.json``: the
  service's answer, that notice, which the meter passes on to the server's open tabs.

The schemas refer to one another by file name. jsonschema is in both extras (jupyter_server needs
it too). It is imported only when a document is checked: its import takes seconds (its format
checkers compile grammars), and kernels that only read an enum (``fracnb_meter.contract``) or
restore a saved state must not pay for it.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from referencing import Registry

USAGE = "usage.schema.json"
SERVICE_REPORT = "service-me.schema.json"
POD_ENVIRONMENT = "pod-environment.schema.json"
SESSION_REPORT = "session-report.schema.json"
SESSION_STATS = "session-stats.schema.json"
SESSION_RECORDS = "session-records.schema.json"
HISTORY_REPORT = "history-report.schema.json"
MEMORY_HISTORY = "memory-history.schema.json"
SERVICE_ADVICE = "service-advice.schema.json"
HIBERNATION_REQUEST = "hibernation-request.schema.json"
HIBERNATION_REPORT = "hibernation-report.schema.json"
HIBERNATION_MANIFEST = "hibernation-manifest.schema.json"
HIBERNATION_STATES = "hibernation-states.schema.json"
RESTORE_REQUEST = "restore-request.schema.json"
RESTORE_REPORT = "restore-report.schema.json"
GPU_UNUSED = "gpu-unused.schema.json"
USE_REPORT = "use-report.schema.json"
DISPLAY_ZONE = "display-zone.schema.json"
STOP_SAVE = "stop-save.schema.json"
STOP_SAVE_ANSWER = "stop-save-answer.schema.json"
NAMES = (
    USAGE,
    SERVICE_REPORT,
    POD_ENVIRONMENT,
    MEMORY_HISTORY,
    SESSION_REPORT,
    SESSION_STATS,
    SESSION_RECORDS,
    HISTORY_REPORT,
    SERVICE_ADVICE,
    HIBERNATION_REQUEST,
    HIBERNATION_REPORT,
    HIBERNATION_MANIFEST,
    HIBERNATION_STATES,
    RESTORE_REQUEST,
    RESTORE_REPORT,
    GPU_UNUSED,
    USE_REPORT,
    DISPLAY_ZONE,
    STOP_SAVE,
    STOP_SAVE_ANSWER,
)


class SchemaMismatchError(ValueError):
    """A document that does not have the shape its schema describes."""


def load(name: str) -> dict[str, Any]:
    """One schema, parsed, by file name (one of :data:`NAMES`)."""
    text = (resources.files(__name__) / "schemas" / name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def registry() -> Registry:
    """Every schema, by file name, so that references between them resolve."""
    from referencing import Registry, Resource  # noqa: PLC0415 - see the module's docs

    return Registry().with_resources((name, Resource.from_contents(load(name))) for name in NAMES)


@cache
def validator(name: str, at: str = "", *, check_formats: bool = False) -> Draft202012Validator:
    """A validator for schema ``name``, or for the part of it at JSON pointer ``at``
    (``/$defs/cullStatus``); ``check_formats`` also checks ``date-time`` strings (the meter
    does not: format checkers are optional extras of jsonschema)."""
    from jsonschema import Draft202012Validator  # noqa: PLC0415 - see the module's docs

    schema = load(name) if not at else {"$ref": f"{name}#{at}"}
    format_checker = Draft202012Validator.FORMAT_CHECKER if check_formats else None
    return Draft202012Validator(schema, registry=registry(), format_checker=format_checker)


def problems(name: str, document: object, at: str = "", *, check_formats: bool = False) -> list[str]:
    """Every way ``document`` departs from schema ``name`` (or its part ``at``), as ``path: message``."""
    from jsonschema.exceptions import best_match  # noqa: PLC0415 - see the module's docs

    found = []
    for error in validator(name, at, check_formats=check_formats).iter_errors(document):
        # Inside a oneOf, the alternative that came closest says more than "not valid under any".
        closest = best_match([error]) or error
        found.append(f"{closest.json_path}: {closest.message}")
    return sorted(found)


def check(name: str, document: object, *, check_formats: bool = False) -> None:
    """Raise :class:`SchemaMismatchError` naming the first problems when ``document`` does not fit ``name``."""
    found = problems(name, document, check_formats=check_formats)
    if found:
        more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
        raise SchemaMismatchError(f"not a {name} document: {'; '.join(found[:3])}{more}")


def enum(name: str, definition: str) -> tuple[str, ...]:
    """The values of an enum under ``$defs`` of schema ``name``, e.g. the backends."""
    return tuple(load(name)["$defs"][definition]["enum"])
