"""Commands around the engine rather than in a job's path: `doctor` (this machine checked) and `benchmark` (how
fast a chain runs against its models' floor)."""
