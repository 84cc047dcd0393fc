"""The vocabulary every floor of the engine shares, standing on nothing of the project's own: frames and faces
(`types`), typed errors, how a setting is shown (`options`), progress, the user's folder (`home`), the consent
record, and the process's metrics registry."""
