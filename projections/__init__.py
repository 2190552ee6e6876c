"""Projections: replay and snapshots, runs index, analytics, metrics, reports."""
