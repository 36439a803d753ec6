"""Scheduling policies: the contract (api), the registry and the built-ins."""
