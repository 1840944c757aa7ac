"""What the processes watch, the stores they read, and which backends a change wakes."""
