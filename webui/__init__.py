"""The Gradio web UI (ARCHITECTURE.md §9): `python launch.py` or `python launch.py ui`."""
