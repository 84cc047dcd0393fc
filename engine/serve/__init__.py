"""The engine as front ends see it: `service.Service` (jobs, chains, runs, single frames, faces), the model
`catalogue`, the model lock that lets brief work between a run's batches, readiness, and Ray scale-out."""
