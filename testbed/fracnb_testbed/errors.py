"""The one exception the testbed raises for problems a user can fix."""


class TestbedError(Exception):
    """A clear, user-facing testbed failure: what went wrong and how to fix it."""

    # pytest would otherwise try to collect this class from test modules importing it
    __test__ = False
