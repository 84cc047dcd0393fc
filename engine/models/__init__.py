"""Model catalogue, download and loading: manifest, fetch, tensor normalisation, runtime cache (ARCHITECTURE.md §4)."""
