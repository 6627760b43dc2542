"""Serving plans: plan and workload, search space, search, and validation against measured serving runs."""
