"""The Tinker engine, as a package along the cookbook's seams: `tinker_engine.py` (TinkerEngine: the service client,
preflight, creating trainers and samplers), `tinker_service.py` (calls to the service: futures, retries, errors in
words), `tinker_trainer.py` (the training client's steps, checkpoints and the sampler), `tinker_objectives.py` (the
losses through `forward_backward_custom`), `tinker_url.py` (which server: hosted, or a local one from machine.toml
or $TINKER_BASE_URL). Heavy imports stay inside the modules; the registry names
`machine_lsp.engines.tinker.tinker_engine`."""
