"""The queue on Kueue (``c.FracnbQueue.engine = "kueue"``): ``model`` (pure: names, labels, the words of Kueue's
conditions), ``quota`` (a team's quota, pure), ``place`` (one spawn's place, I/O) and ``stop`` (stops past Kueue's
finalizer, Kueue's own stops). It depends on the shared queue modules, never the other way round."""
