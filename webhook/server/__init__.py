"""`placer serve`: the application in granian worker processes, and what the main process supervises."""
