"""A managed, self-hosted Tinker-API server (SkyRL tx) for `--engine tinker` (`machine tinker serve|status|stop`).

* `venv.py`: SkyRL tx's own virtualenv, built once from `requirements/skyrl-tx.txt` under the user cache.
* `process.py`: start (127.0.0.1 only), readiness, status, stop, stale-record detection.
* `compat.py`: the compatibility layer between tinker SDK 0.38 and SkyRL tx 0.3.0 (runs in the server venv).
* `project.py`: records the server URL in machine.toml `[tinker] base_url`.

Importing this package loads no torch, transformers, tinker or jax.
"""
