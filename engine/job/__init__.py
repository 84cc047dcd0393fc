"""A job described: its settings and presets (`settings`: Job, Preset, the faces, video and runtime groups) and
the plugin contract every frame processor implements (`processor`). Stands on the core and the machinery
(models, media, faces); never on how a job is run or served."""
