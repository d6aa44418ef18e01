"""Paper-claim replication: ``st-magnitude replicate CLAIM`` runs a claim's protocol over seeds, compares arms with
paired bootstrap and seed t-intervals (:mod:`st_magnitude.evaluation.stats`), and writes a result JSON that
``docs/replication.md`` is generated from (:mod:`.report`).
"""

from __future__ import annotations

__all__: list[str] = []
