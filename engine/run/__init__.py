"""Running one job: validate, claim the output, the face stage, the chain, a video's segments rendered and
joined, the output sealed and delivered (`pipeline.run` orchestrates). Stands on the job's description and the
machinery below it; knows nothing of front ends or serving."""
