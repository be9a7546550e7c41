"""Hibernation seen from the hub: before fracnb stops a GPU server, its notebook's extension saves the
idle kernels' variables (docs/hibernation.md). The settings (``settings``), the call to the server
(``client``), what it came to in words and metrics (``words``), and the two places that ask: the
service's stop of a culled server (``culled``) and FractionalSpawner's stop (``userstop``)."""
