"""Importers: a machine file from what a real machine reports (``numasim machine import``)."""
