"""Provenance of outputs: signed C2PA Content Credentials (`credentials`, with the key from `keys`), an optional
invisible watermark (`watermark`), an optional content check of the target (`content`), what `launch.py verify`
reads back (`verify`), and the one object the pipeline drives them through (`seal`)."""
