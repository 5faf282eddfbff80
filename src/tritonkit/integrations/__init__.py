"""Adapters that put tritonkit's ops under other libraries' trainers (TRL: `trl.py`). Each
imports its library only when called."""
