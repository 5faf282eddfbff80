"""`tritonkit bench`: every op beside its peers, from the catalogue in `tritonkit.registry`."""
