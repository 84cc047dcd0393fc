"""Model catalogue, download and loading: manifest, fetch, tensor normalisation, runtime cache (DESIGN.md §4)."""
