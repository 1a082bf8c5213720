"""Analyses beside integration: failure diagnosis and equilibria."""
