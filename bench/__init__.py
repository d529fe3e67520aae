"""Benchmarks (DESIGN §7).

Each ``bench/NAME.py`` runs on its own (``python bench/NAME.py [--quick]``),
measures the project against a raw baseline in the same run and ends with
``RESULT bench=... metric=... value=...`` lines. ``python -m bench`` (or
``python bench/all.py``) runs every one of them and prints one table.
"""
