"""``c.FracnbQuotas``: the admin's GPU quotas, validated when the hub and the service start."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from traitlets import Any as AnyTrait
from traitlets import Dict, TraitError, validate
from traitlets.config import Configurable

from fracnb_spawner.common.units import QuantityError
from fracnb_spawner.quota.policy import NegativeAmountError, QuotaPolicy, parse_gpus

_EXAMPLES = 'use e.g. 6, 0.5 or "3/4"'


def _checked_amount(where: str, value: object, *, unlimited_ok: bool) -> Fraction:
    try:
        return parse_gpus(value)
    except QuantityError as error:
        reason = "is negative" if isinstance(error, NegativeAmountError) else "is not a number of GPUs"
        hint = f"{_EXAMPLES}{' or None for unlimited' if unlimited_ok else ''}"
        raise TraitError(f"FracnbQuotas.{where}: {value!r} {reason}; {hint}") from error


def _checked_limit(where: str, value: object) -> Fraction | None:
    return None if value is None else _checked_amount(where, value, unlimited_ok=True)


class FracnbQuotas(Configurable):
    """GPU quotas enforced when a server starts (in the hub) and reported by the fracnb service."""

    default_user_quota = AnyTrait(
        None,
        allow_none=True,
        help="""
        GPUs each user may hold at once across all their servers, unless `user_quotas`
        names them. A number of GPUs (0.5, 2) or an exact ratio string ("3/4"); None
        means unlimited. Default: None.

        Example: c.FracnbQuotas.default_user_quota = 1
        """,
    ).tag(config=True)

    user_quotas = Dict(
        help="""
        Per-user GPU quotas overriding `default_user_quota`: username -> GPUs, where
        None means unlimited for that user. Default: {}.

        Example: c.FracnbQuotas.user_quotas = {"alice": 2, "bob": "1/2", "admin": None}
        """,
    ).tag(config=True)

    group_quotas = Dict(
        help="""
        GPUs all members of a JupyterHub group may hold together: group name -> GPUs.
        A user in several such groups must fit in every one of them. Default: {}.

        Example: c.FracnbQuotas.group_quotas = {"team-a": 6}
        """,
    ).tag(config=True)

    @validate("default_user_quota")
    def _valid_default(self, proposal: dict[str, Any]) -> Any:
        _checked_limit("default_user_quota", proposal["value"])
        return proposal["value"]

    @validate("user_quotas")
    def _valid_users(self, proposal: dict[str, Any]) -> Any:
        for name, value in proposal["value"].items():
            _checked_limit(f"user_quotas[{name!r}]", value)
        return proposal["value"]

    @validate("group_quotas")
    def _valid_groups(self, proposal: dict[str, Any]) -> Any:
        for name, value in proposal["value"].items():
            _checked_amount(f"group_quotas[{name!r}]", value, unlimited_ok=False)
        return proposal["value"]

    def policy(self) -> QuotaPolicy:
        """The configured quotas as exact fractions."""
        return QuotaPolicy(
            default_user=_checked_limit("default_user_quota", self.default_user_quota),
            users={name: _checked_limit(f"user_quotas[{name!r}]", value) for name, value in self.user_quotas.items()},
            groups={
                name: _checked_amount(f"group_quotas[{name!r}]", value, unlimited_ok=False)
                for name, value in self.group_quotas.items()
            },
        )
