"""Torch implementations of the loss forms declared in `divclip.theory.forms_verl` (`register_mode`)."""

from __future__ import annotations
