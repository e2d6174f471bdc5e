"""The cluster side of Placer: talking to the API server, watching policies, writing their status."""
