"""The run store's foundations: atomic writes, record schema, code fingerprints, the run cache and its units.

Imports only the root's foundations (`errors`, `config`, `environment`): everything above reads and writes
through it, so it sits on the ground floor.
"""
