"""``GET api/advice?profile=<slug>&choice=<choices>``: the caller's advice for their next session.

A notebook's meter asks, with its server's own token, for the advice on its server's choice
(``FRACNB_PROFILE``, ``FRACNB_CHOICE``), and shows it in the panel and the widget beside this
session's peak. The advice is the spawn form's (:func:`fracnb_spawner.history.advice.advise`, over the
same rows :func:`fracnb_spawner.form.rows.describe` gives the form), read from the caller's own
sessions only; the menu is the hub's ``profile_list`` from the config file the service loads.
Without availability, the advice does not say whether the choice is free: that is for the form
to say at the next spawn. A ``profile_list`` computed per user (a callable) cannot be known
here: the answer is then always ``{"state": "none"}``.
"""

from __future__ import annotations

from tornado import web

from fracnb_spawner.history.reading import HISTORY_LIMIT
from fracnb_spawner.history.store import sessions_of
from fracnb_spawner.service.advicemenu import advice_document
from fracnb_spawner.service.api.base import ServiceHandler
from fracnb_spawner.service.sessionstore import in_history


class AdviceHandler(ServiceHandler):
    """``GET api/advice?profile=<slug>&choice=<option=choice,...>``: for the caller, from their own sessions."""

    @web.authenticated
    async def get(self) -> None:
        user = self.caller()
        profile = self.get_query_argument("profile", "")
        if not profile:
            raise web.HTTPError(400, "give the server's profile: api/advice?profile=<slug>&choice=<option=choice,...>")
        choice = self.get_query_argument("choice", "")
        menu = getattr(self.state, "advice_menu", None)
        records = [] if menu is None else await in_history(self.state, "advice", sessions_of, user, limit=HISTORY_LIMIT)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(advice_document(menu, records, profile, choice))
