"""Sentence-transformers modules carried by st-magnitude models."""

from __future__ import annotations

from st_magnitude.modules.role_normalize import ROLES, RoleNormalize

__all__ = ["ROLES", "RoleNormalize"]
