"""The Gradio web UI (DESIGN.md §9): `python launch.py` or `python launch.py ui`."""
