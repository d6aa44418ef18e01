"""The claims ``st-magnitude replicate`` knows, one module per claim (imported lazily)."""

from __future__ import annotations

import importlib

__all__ = ["CLAIM_MODULES", "get_claim", "list_claims"]

#: claim id → module (under this package) defining ``CLAIM``
CLAIM_MODULES = {
    "000-table5": "c000_table5",
    "000-appf": "c000_appf",
    "000-headline": "c000_headline",
    "001": "c001_mw",
    "002": "c002_l2dir",
    "003": "c003_dimension",
    "004": "c004_revela",
}


def get_claim(claim_id: str):
    if claim_id not in CLAIM_MODULES:
        raise ValueError(f"unknown claim {claim_id!r}; valid claims: {', '.join(CLAIM_MODULES)}")
    return importlib.import_module(f"{__name__}.{CLAIM_MODULES[claim_id]}").CLAIM


def list_claims():
    return [get_claim(c) for c in CLAIM_MODULES]
